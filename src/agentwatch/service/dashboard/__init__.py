"""The dashboard: one page, served at `/`, that shows every agent and watches one live.

The page is static (this package's `index.html`, `app.js` and `style.css`): it holds no data and no secret, so
it is served without the token, and everything it shows it asks the service's own API for, as any client would
(the tools over HTTP, the live attach over SSE), with the token the person gives it. A token in the address's
fragment (`/#token=...`, which browsers never send to the server) is taken and kept in the tab's session storage;
without one, a call the service refuses for want of it asks for it.

The page allows itself nothing beyond its own origin (`Content-Security-Policy`), and may not be framed.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

__all__ = ["PAGE_PREFIX", "dashboard_routes", "is_page"]

PAGE_PREFIX = "/dashboard/"
"""Where the page's own files are served."""

_FILES = {"app.js": "text/javascript", "style.css": "text/css", "index.html": "text/html"}
_HEADERS = {
    "cache-control": "no-cache",
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
        "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}


def is_page(path: str) -> bool:
    """Whether `path` is the page or one of its files (served to anyone who may reach the service)."""
    return path == "/" or path.startswith(PAGE_PREFIX)


@cache
def _content(name: str) -> bytes:
    return files(__package__).joinpath(name).read_bytes()


def _file(name: str) -> Response:
    media_type = _FILES.get(name)
    if media_type is None:
        raise HTTPException(404, f"the dashboard has no file {name!r}")
    return Response(_content(name), media_type=media_type, headers=_HEADERS)


async def _index(request: Request) -> Response:
    return _file("index.html")


async def _asset(request: Request) -> Response:
    return _file(request.path_params["name"])


def dashboard_routes() -> list[Route]:
    """The page at `/` and its files under `/dashboard/`."""
    return [
        Route("/", _index, methods=["GET"]),
        Route(PAGE_PREFIX + "{name}", _asset, methods=["GET"]),
    ]
