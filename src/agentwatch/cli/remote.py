"""The CLI's way to a running service: find it, call its tools over HTTP, follow a session over SSE.

A command talks to a service when there is one and to the store directly otherwise, with the same output,
`--json` and exit codes either way (the tool's answer is rendered by one code path). Which service:

1. `--server URL` (or `AGENTWATCH_SERVER`); `--server none` means the store, never a service;
2. else the discovery file that `agentwatch serve` writes when it starts and removes when it stops
   (`discovery_file`: beside a SQLite store's file, else `.agentwatch/service.json` under the project root).
   A file left by a service that is gone (its process is dead, or it refuses connections) is ignored.

The service's token is `AGENTWATCH_TOKEN`. Only the standard library is used (`http.client`), imported when
a service is in play, so a command that reads the store starts as light as before.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode, urlsplit

import click

from agentwatch.errors import AgentwatchError, InvalidArgument, ServiceUnreachable

if TYPE_CHECKING:
    from http.client import HTTPConnection, HTTPResponse

    from agentwatch.config import Config
    from agentwatch.events import Event

__all__ = [
    "SERVER_ENV",
    "TOKEN_ENV",
    "Service",
    "await_settled",
    "discovery_file",
    "find_service",
    "raise_error",
    "read",
    "remove_discovery",
    "server_option",
    "stream_events",
    "write_discovery",
]

SERVER_ENV = "AGENTWATCH_SERVER"
TOKEN_ENV = "AGENTWATCH_TOKEN"
_META = "agentwatch.server"
_NONE = ("none", "off")


def server_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`--server URL`: the service to talk to (kept in the click context; commands do not take it)."""

    def remember(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
        if value is not None:
            ctx.meta[_META] = value

    return click.option(
        "--server",
        metavar="URL",
        default=None,
        expose_value=False,
        callback=remember,
        help=f"The service to talk to (default: ${SERVER_ENV}, else a local `agentwatch serve` on this store; "
        "'none': the store directly).",
    )(fn)


# -- discovery ---------------------------------------------------------------------------------------------


def _sqlite_file(store: str) -> Path | None:
    """A SQLite store's database file, absolute (a relative path is relative to the working directory); None
    for another store, or one in memory."""
    scheme, _, rest = store.partition("://")
    target = rest.partition("?")[0]
    if scheme == "sqlite" and target.startswith("/") and target not in ("/", "/:memory:"):
        return Path(target[1:]).absolute()
    return None


def discovery_file(config: Config) -> Path:
    """Where a service on `config`'s store announces itself: beside a SQLite store's file
    (`agentwatch.db-service.json`), else `.agentwatch/service.json` under the project root."""
    database = _sqlite_file(config.store)
    if database is not None:
        return database.with_name(f"{database.name}-service.json")
    return (config.root / ".agentwatch" / "service.json").absolute()


def _announced_store(config: Config) -> str:
    """The store as a service announces it and a command looks for it: a SQLite store by its file's absolute
    path (the project's default is relative in the project's root and absolute in a subdirectory of it, and
    is one store either way), any other without its password."""
    from agentwatch.store import hide_password

    database = _sqlite_file(config.store)
    return f"sqlite:///{database}" if database is not None else hide_password(config.store)


def write_discovery(config: Config, url: str, *, token_needed: bool) -> Path:
    """Announce the service at `url`; returns the file.

    Each service also keeps its own record beside the file (`.<file>.<pid>`), so that when the one the file
    names stops, the file names another that still runs (`remove_discovery`) instead of none."""
    path = discovery_file(config)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"url": url, "pid": os.getpid(), "token": token_needed, "store": _announced_store(config)}
    _own_record(path).write_text(json.dumps(record) + "\n")
    _announce(path, record)
    return path


def remove_discovery(path: Path) -> None:
    """Withdraw this process's announcement: the file then names another service of the same store still
    running (the newest), or is removed when none is."""
    _own_record(path).unlink(missing_ok=True)
    record = _read_record(path)
    if record is None or record.get("pid") != os.getpid():
        return  # another service announced itself since: the file is its
    others = []
    for kept in path.parent.glob(f".{path.name}.*"):
        other = _read_record(kept) if not kept.name.endswith(".draft") else None
        if other is None:
            continue
        if not _alive(other.get("pid")):
            kept.unlink(missing_ok=True)  # a service that died without withdrawing
        elif other.get("store") == record.get("store"):  # (stores without a file of their own share the path)
            others.append((kept.stat().st_mtime, other))
    if others:
        _announce(path, max(others, key=lambda found: found[0])[1])
    else:
        path.unlink(missing_ok=True)


def _own_record(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}")


def _announce(path: Path, record: dict[str, Any]) -> None:
    """Write `record` as the discovery file `path` (written whole, then moved into place)."""
    draft = path.with_name(f".{path.name}.{os.getpid()}.draft")
    draft.write_text(json.dumps(record) + "\n")
    draft.replace(path)


def _announced(path: Path) -> Iterator[dict[str, Any]]:
    """The services announced at `path`: the one the file names, then the others' own records, newest first
    (the file's may name one that was killed, while another of the same store still runs)."""
    named = _read_record(path)
    if named is not None:
        yield named
    kept = [k for k in path.parent.glob(f".{path.name}.*") if not k.name.endswith(".draft")]
    for record_path in sorted(kept, key=_modified, reverse=True):
        record = _read_record(record_path)
        if record is not None and record != named:
            yield record


def _modified(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _read_record(path: Path) -> dict[str, Any] | None:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


def find_service(store_url: str | None) -> Service | None:
    """The service this command should talk to, or None to use the store directly (looked up once per
    command: `tail -f` asks twice)."""
    meta = _meta()
    key = f"{_META}.found.{store_url}"
    if key not in meta:
        meta[key] = _find_service(store_url, meta)
    found: Service | None = meta[key]
    return found


def _find_service(store_url: str | None, meta: dict[str, Any]) -> Service | None:
    given = meta.get(_META) or os.environ.get(SERVER_ENV) or None
    token = os.environ.get(TOKEN_ENV) or None
    if given is not None:
        if given.strip().lower() in _NONE:
            return None
        return Service(_base_url(given), token, "--server" if _META in meta else SERVER_ENV)
    from agentwatch.cli._common import resolve_config

    try:
        config = resolve_config(store_url)
    except InvalidArgument:
        if not (store_url or os.environ.get("AGENTWATCH_STORE")):
            raise
        return None  # a broken configuration: the command's own reading of it says what it does about it
    path = discovery_file(config)
    store = _announced_store(config)
    for record in _announced(path):
        if not _alive(record.get("pid")) or not isinstance(record.get("url"), str) or record.get("store") != store:
            continue
        service = Service(record["url"], token, str(path))
        if service.healthy():  # (a record can outlive its service, or the port be someone else's now)
            break
    else:
        return None
    if record.get("token") and token is None:
        # The refusal the service itself would answer (`unauthenticated`), said before asking it.
        raise_error(
            {
                "error": {
                    "code": "unauthenticated",
                    "message": f"the service at {service.url} (found in {str(path)!r}) needs a token: set "
                    f"{TOKEN_ENV} to its token (the {TOKEN_ENV} it was started with, or the one it printed when it "
                    "started), or pass --server none to use the store directly",
                }
            }
        )
    return service


def _meta() -> dict[str, Any]:
    context = click.get_current_context(silent=True)
    return context.meta if context is not None else {}


def _base_url(given: str) -> str:
    url = given.strip().rstrip("/")
    if "://" not in url:
        url = f"http://{url}"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises for a port that is not a number from 0 to 65535
        (parts.hostname or "").encode("idna")  # raises (a UnicodeError) for a name no resolver takes
        fine = url.isascii() and url.isprintable() and " " not in url and not (parts.query or parts.fragment)
    except ValueError:
        fine = False
    if not fine or parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidArgument(
            f"--server {given!r} is not an http(s) URL such as http://127.0.0.1:8765", flags=["--server"]
        )
    return url


# -- errors ------------------------------------------------------------------------------------------------


def raise_error(answer: Mapping[str, Any]) -> None:
    """Raise the error a tool's answer holds (as the same error class the store path raises), if any."""
    error = AgentwatchError.from_dict(answer)
    if error is not None:
        raise error


# -- the service -------------------------------------------------------------------------------------------


RECONNECTS = 20
"""How many times in a row a stream or a wait asks a service again after it went away (a restart)."""


def reconnect_pause(failures: int) -> float:
    """Seconds before asking again after `failures` failures in a row (0.2 s more each time, at most 2 s)."""
    return min(2.0, 0.2 * failures)


@dataclass(frozen=True)
class Service:
    """A running service: its base URL, the token to present, and how it was found."""

    url: str
    token: str | None
    found: str
    """`--server`, `AGENTWATCH_SERVER`, or the discovery file's path."""

    def _connection(self, timeout: float | None) -> HTTPConnection:
        from http.client import HTTPConnection, HTTPSConnection

        parts = urlsplit(self.url)
        cls = HTTPSConnection if parts.scheme == "https" else HTTPConnection
        return cls(parts.hostname or "127.0.0.1", parts.port, timeout=timeout)

    def _headers(self) -> dict[str, str]:
        headers = {"accept": "application/json"}
        if self.token:
            headers["authorization"] = f"Bearer {self.token}"
        return headers

    def _path(self, path: str) -> str:
        return urlsplit(self.url).path.rstrip("/") + path

    def healthy(self) -> bool:
        """Whether it answers at all (a stale discovery file names a port nobody serves)."""
        try:
            connection = self._connection(2.0)
            try:
                connection.request("GET", self._path("/api/health"), headers=self._headers())
                response = connection.getresponse()
                response.read()
                return response.status == 200
            finally:
                connection.close()
        except OSError:
            return False

    def call(self, tool: str, args: Mapping[str, Any], *, timeout: float | None = 60.0) -> dict[str, Any]:
        """`POST /api/tools/{tool}`: the tool's answer or its `{"error": ...}`, as `engine.call_tool` gives it."""
        body = json.dumps(dict(args)).encode()
        headers = self._headers() | {"content-type": "application/json"}
        try:
            connection = self._connection(timeout)
            try:
                connection.request("POST", self._path(f"/api/tools/{quote(tool, safe='')}"), body, headers)
                response = connection.getresponse()
                raw = response.read()
            finally:
                connection.close()
        except OSError as exc:
            raise self._unreachable(exc) from None
        try:
            answer = json.loads(raw)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise ServiceUnreachable(
                f"the service at {self.url} answered {tool} with HTTP {response.status} and no JSON"
            )
        return answer

    def answer(self, tool: str, args: Mapping[str, Any], *, timeout: float | None = 60.0) -> dict[str, Any]:
        """`call`, with an error raised as the error class the store path raises."""
        answer = self.call(tool, args, timeout=timeout)
        raise_error(answer)
        return answer

    def resolve(self, agent: str) -> str:
        """The session id `agent` (a name or an id) names, resolved as `agent_get` does."""
        if agent.startswith("ses_"):
            return agent
        from agentwatch.cli._common import flag_error

        try:
            record = self.answer("agent_get", {"name": agent})
        except InvalidArgument as exc:
            raise flag_error(exc, {"name": "AGENT"}, {}) from None
        return str(record["id"])

    def events(self, session_id: str, after: str | None) -> Iterator[dict[str, Any]]:
        """The session's attach stream over SSE: `{"kind": "snapshot" | "event", ...}` frames, live (no
        polling). A stream the service ends (a restart) is resumed from the last cursor, with no gap and no
        repeat, for a while: from the same URL, or from the one a restarted local service announces. It ends
        once the service says the agent's stream is over (it was deleted)."""
        import time

        cursor = after
        connected = False
        failures = 0
        service = self
        while True:
            failure: OSError | None = None
            try:
                for frame in service._sse(session_id, cursor):
                    connected, failures = True, 0
                    if frame.get("kind") == "open":
                        continue
                    if frame.get("kind") == "ended":
                        return
                    if frame.get("kind") == "error":
                        raise_error({"error": frame.get("error")})
                    cursor = str(frame.get("cursor") or (frame.get("event") or {}).get("cursor") or cursor)
                    yield frame
            except OSError as exc:
                failure = exc
            failures += 1
            if not connected or failures > RECONNECTS:
                raise service._unreachable(failure, resume=cursor)
            time.sleep(reconnect_pause(failures))
            service = service._rediscovered()

    def _rediscovered(self) -> Service:
        """The same service, at the URL its discovery file names now (a restart may change the port)."""
        if self.found in ("--server", SERVER_ENV):
            return self
        record = _read_record(Path(self.found))
        if record is None or not _alive(record.get("pid")) or not isinstance(record.get("url"), str):
            return self
        return Service(record["url"], self.token, self.found)

    def _sse(self, session_id: str, after: str | None) -> Iterator[dict[str, Any]]:
        query = urlencode({"after": after}) if after else ""
        path = self._path(f"/api/agents/{quote(session_id, safe='')}/events") + (f"?{query}" if query else "")
        connection = self._connection(None)
        try:
            connection.request("GET", path, headers=self._headers() | {"accept": "text/event-stream"})
            response: HTTPResponse = connection.getresponse()
            if response.status == 204:  # the agent was deleted and its stream is over: no more events will come
                yield {"kind": "ended"}
                return
            if response.status != 200:
                answer = json.loads(response.read() or b"{}")
                raise_error(answer if isinstance(answer, dict) else {})
                raise ServiceUnreachable(f"the service at {self.url} refused to attach (HTTP {response.status})")
            yield {"kind": "open"}
            data: list[str] = []
            while True:
                line = response.readline()
                if not line:
                    return  # the service ended the stream
                text = line.decode("utf-8").rstrip("\r\n")
                if text.startswith("data:"):
                    data.append(text[5:].lstrip(" "))
                elif not text and data:
                    frame = json.loads("\n".join(data))
                    data = []
                    if isinstance(frame, dict):
                        yield frame
        finally:
            connection.close()

    def _unreachable(self, exc: OSError | None, *, resume: str | None = None) -> ServiceUnreachable:
        why = f" ({exc.strerror or exc})" if exc is not None else ""
        then = f"; resume with --after {resume}" if resume else ""
        return ServiceUnreachable(
            f"the service at {self.url} (from {self.found}) cannot be reached{why}{then}; start it with "
            "`agentwatch serve`, or pass --server none to use the store directly"
        )


# -- read commands -----------------------------------------------------------------------------------------


def read(
    store_url: str | None,
    tool: str,
    args: dict[str, Any],
    flags: Mapping[str, str],
    scope: str | None = None,
    *,
    agent: str | None = None,
) -> dict[str, Any]:
    """Run one read tool through the service when there is one, else on the store (`_common.call_tool`).

    A calling chat (`scope`) cannot be sent over HTTP, so a scoped read goes to the store.
    """
    from agentwatch.cli._common import call_tool, flag_error

    service = find_service(store_url) if scope is None else None
    if service is None:
        return call_tool(store_url, tool, args, flags, scope, agent=agent)
    try:
        if agent is not None:
            args[agent] = service.resolve(args[agent])
        return service.answer(tool, args)
    except InvalidArgument as exc:
        raise flag_error(exc, flags, args) from None


def _note_idle_wait(service: Service, session_id: str) -> None:
    """Say why an idle agent's inputs are not run, as the service tells it (its record's `roleProblem`); on the
    store, `wait_until_settled` says it from the agent's lease and events."""
    from rich.markup import escape

    from agentwatch.cli._table import print_note
    from agentwatch.cli._views import waiting_inbox

    try:
        record = service.answer("agent_get", {"id": session_id})
    except AgentwatchError:
        return  # (the snapshot says it timed out all the same: only the note is at stake)
    if not record.get("pendingInputs") and not record.get("pendingReports"):
        return
    problem = record.get("roleProblem")
    why = (
        f"the service at {service.url} cannot run it: {problem}"
        if problem
        else f"the service at {service.url} has agent type {record.get('role')!r}, so the engine that holds the agent "
        f"runs them once it gets to it (a `run`, or another service on the store: `agentwatch get {session_id}`)"
    )
    queued = waiting_inbox(record.get("pendingInputs") or 0, record.get("pendingReports") or 0)
    waiting = f"{queued} of {record.get('name')} wait for an engine to run them"
    print_note(f"[dim]{escape(waiting)}: {escape(why)}[/]")


def stream_events(service: Service, session_id: str, after: str | None) -> Iterator[Event]:
    """The session's events after `after`, live from the service's attach stream (a snapshot frame, sent
    when `after` is None, gives its history first); they end with the agent's deletion."""
    from agentwatch.events import Event, is_deletion_notice

    def event(body: dict[str, Any]) -> Event:
        return Event(
            id=body["id"],
            session_id=body["agentId"],
            seq=body["seq"],
            sub=body.get("sub", 0),
            at=body["at"],
            turn_id=body.get("turnId"),
            conversation_id=body.get("conversationId"),
            payload=body["payload"],
        )

    for frame in service.events(session_id, after):
        if frame.get("kind") == "snapshot":
            yield from (event(body) for body in frame.get("history") or [])
        elif frame.get("kind") == "event":
            last = event(frame["event"])
            yield last
            if is_deletion_notice(last.payload):
                return  # the agent's last event: its stream ends with it


def await_settled(service: Service, session_id: str, timeout: float, *, spinner: bool) -> dict[str, Any]:
    """`agent_await` through the service, in slices of a second so that a spinner on a terminal can show what
    it waits for and for how long; the snapshot says `timedOut` when `timeout` passed first. A service that
    goes away once it answered (a restart, a crash: the turn goes on in the next engine) is asked again, as the
    attach stream is resumed (`Service.events`)."""
    import contextlib
    import time

    from agentwatch.cli._common import console

    started = time.monotonic()
    status = console.status(f"waiting for {session_id}") if spinner and console.is_terminal else None
    failures = -1  # (-1: the service has not answered yet)
    with status or contextlib.nullcontext():
        while True:
            left = max(0.0, started + timeout - time.monotonic())
            try:
                # The HTTP wait ends before the tool's own limit (an hour): a week is many slices.
                snapshot = service.answer(
                    "agent_await", {"agentId": session_id, "timeoutMs": int(min(left, 1.0) * 1000)}, timeout=30.0
                )
            except ServiceUnreachable:
                if failures < 0 or failures >= RECONNECTS:
                    raise
                failures += 1
                time.sleep(reconnect_pause(failures))
                service = service._rediscovered()
                continue
            failures = 0
            if not snapshot.get("timedOut") or left <= 0:
                if snapshot.get("timedOut") and snapshot.get("status") == "idle":
                    _note_idle_wait(service, session_id)
                return snapshot
            if status is not None:
                from rich.markup import escape

                waited = int(time.monotonic() - started)
                status.update(f"waiting for {escape(str(snapshot.get('name')))} ({snapshot.get('status')}) · {waited}s")
