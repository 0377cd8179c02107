"""A project's own Python for the commands that run agents: `setup = "module:name"` in agentwatch.toml.

`agentwatch serve`, `agentwatch run` and `agentwatch mcp` open their engine with what the setup names (`--setup`
or `AGENTWATCH_SETUP` over the file): a mapping of `Engine.open` options, or a function of no arguments that
returns one.

```python
# myproject/agents.py  (agentwatch.toml: setup = "myproject.agents:setup")
def setup():
    return {"tools": [read_file, write_file], "policies": [no_pushes], "heartbeats": [...]}
```

The options it may hold are `SETUP_OPTIONS`. The module is imported with the project root (where
agentwatch.toml is) first on `sys.path`, so a package of the project loads without being installed. What
fails (a module that does not import, a name it lacks, an option no engine takes) is an error that says which
and what to do; the command then runs nothing.
"""

from __future__ import annotations

import importlib
import sys
import traceback
from collections.abc import Mapping
from typing import Any, Final

from agentwatch.config import Config
from agentwatch.errors import InvalidArgument

__all__ = ["SETUP_OPTIONS", "load_setup"]

SETUP_OPTIONS: Final = ("tools", "definitions", "policies", "models", "heartbeats", "hooks")
"""The `Engine.open` options a setup may give."""


def load_setup(config: Config) -> dict[str, Any]:
    """The engine options `config.setup` names (none without one)."""
    if config.setup is None:
        return {}
    module_name, _, path = config.setup.partition(":")
    where = f"setup {config.setup!r}"
    root = str(config.root.resolve())
    if root not in sys.path:
        sys.path.insert(0, root)
    try:
        target: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (module_name == exc.name or module_name.startswith(f"{exc.name}.")):
            # The module is there, but something it imports is not.
            raise InvalidArgument(f"{where}: importing {module_name!r} failed: {exc}; install what it needs") from None
        raise InvalidArgument(
            f"{where}: no module {exc.name!r} (looked under {root} and the installed packages); "
            "name a module of the project, relative to where agentwatch.toml is"
        ) from None
    except Exception as exc:
        raise InvalidArgument(
            f"{where}: importing {module_name!r} failed{_at(exc)}: {type(exc).__name__}: {exc}"
        ) from None
    for part in path.split("."):
        if not hasattr(target, part):
            raise InvalidArgument(f"{where}: {getattr(target, '__name__', module_name)!r} has no {part!r}")
        target = getattr(target, part)
    if callable(target):
        try:
            target = target()
        except Exception as exc:
            raise InvalidArgument(f"{where} failed{_at(exc)}: {type(exc).__name__}: {exc}") from None
    if not isinstance(target, Mapping):
        raise InvalidArgument(
            f"{where} gave a {type(target).__name__}; it must be a mapping of engine options (or a function of "
            f"no arguments that returns one) with any of: {', '.join(SETUP_OPTIONS)}"
        )
    unknown = sorted(str(key) for key in target if key not in SETUP_OPTIONS)
    if unknown:
        raise InvalidArgument(
            f"{where}: {', '.join(unknown)} is not an option it may give; it may give any of: "
            f"{', '.join(SETUP_OPTIONS)}"
        )
    return dict(target)


def _at(exc: BaseException) -> str:
    """Where in the project's code `exc` was raised (` at path:line`), or nothing when not known."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f" at {exc.filename}:{exc.lineno}"
    frames = traceback.extract_tb(exc.__traceback__)
    return f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
