"""Pydantic's plugins, switched off for a short command without paying for the search it would not make.

Pydantic asks its plugin loader (`pydantic.plugin._loader.get_plugins`) for plugins each time it builds a
validator. With `PYDANTIC_DISABLE_PLUGINS` set to `__all__` (or `1`, `true`) the loader answers "none" at once,
but importing it still imports `importlib.metadata` (and with it `email`, `zipfile`, `csv`, ...): about a twentieth
of a short command's start, for a search that never happens. `skip_plugin_loader` puts a loader that answers the
same without those imports in its place, for a process whose plugins are off from its start.

Anything of the loader's other than `get_plugins` is read from the real module, loaded then under a name of its
own, so that a pydantic that asks its loader for more still gets it.
"""

from __future__ import annotations

import os
import sys
from types import ModuleType
from typing import Any

__all__ = ["OFF", "skip_plugin_loader"]

LOADER = "pydantic.plugin._loader"

OFF = ("__all__", "1", "true")
"""The values of `PYDANTIC_DISABLE_PLUGINS` with which pydantic loads no plugin at all."""


class _QuietLoader(ModuleType):
    """`pydantic.plugin._loader` for a process whose plugins are all off."""

    _plugins: dict[str, Any] | None = None
    """As the real loader's: None, no plugin was searched for."""

    def get_plugins(self) -> tuple[()]:
        """No plugins: the answer the real loader gives while `PYDANTIC_DISABLE_PLUGINS` turns them all off."""
        return ()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # what the import system asks of any module (`__path__`, ...)
            raise AttributeError(name)
        return getattr(_real_loader(), name)


def _real_loader() -> ModuleType:
    import importlib.util
    from importlib.machinery import PathFinder

    import pydantic.plugin

    name = f"{LOADER}.__real__"
    loaded = sys.modules.get(name)
    if loaded is None:
        found = PathFinder.find_spec(LOADER, list(pydantic.plugin.__path__))
        spec = importlib.util.spec_from_file_location(name, found.origin) if found and found.origin else None
        if spec is None or spec.loader is None:  # pragma: no cover - pydantic has it
            raise ImportError(f"no {LOADER}", name=LOADER)
        loaded = importlib.util.module_from_spec(spec)
        loaded.__package__ = pydantic.plugin.__name__
        sys.modules[name] = loaded
        spec.loader.exec_module(loaded)
    return loaded


def skip_plugin_loader() -> bool:
    """Put the quiet loader in place of pydantic's, when plugins are off and pydantic has not loaded its own yet;
    whether it did."""
    if os.environ.get("PYDANTIC_DISABLE_PLUGINS") not in OFF or LOADER in sys.modules:
        return False
    sys.modules[LOADER] = _QuietLoader(LOADER, __doc__)
    return True
