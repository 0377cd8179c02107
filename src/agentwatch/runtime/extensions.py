"""Extensions: subsystems that plug into every engine, such as observer agents.

An extension gets the engine once, while it opens, as the narrow `Runtime` the layers below the surfaces
see, and adds what it needs through it: tools (`engine.add_tool`), policies (`engine.policy.add`), agent
definitions (`engine.roster.add`), ThreadObservers (`engine.start_with_observer`) and tool-set hooks
(`engine.tool_set_hooks`). It is closed first when the engine closes, before the drivers and the store.

`Engine.open(extensions=None)` installs the default extensions. Higher layers register them by a
`"module:attribute"` spec naming a factory, so that the runtime never imports the layers above it:

```python
register_default_extension("agentwatch.watchers:ObserverAgents")
```

`Engine.open(extensions=[])` opens an engine with none.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Protocol

from agentwatch.errors import UserError

if TYPE_CHECKING:
    from agentwatch.runtime.services import Runtime

__all__ = ["Extension", "default_extensions", "register_default_extension"]


class Extension(Protocol):
    """A subsystem an engine carries for its whole life."""

    def install(self, engine: Runtime) -> None:
        """Plug into `engine` while it opens (before any session runs). Must not await."""

    async def close(self) -> None:
        """Stop background work; called first when the engine closes. Must not raise."""


_DEFAULTS: list[str] = []


def register_default_extension(spec: str) -> None:
    """Install the extension made by the factory `spec` (`"package.module:factory"`) in every engine opened
    without an explicit `extensions` argument. Registering the same spec twice has no effect."""
    if ":" not in spec:
        raise UserError(f"extension spec {spec!r} must read 'package.module:factory'")
    if spec not in _DEFAULTS:
        _DEFAULTS.append(spec)


def default_extensions() -> list[Extension]:
    """A fresh instance of every registered default extension, in registration order."""
    extensions = []
    for spec in _DEFAULTS:
        module_name, _, attribute = spec.partition(":")
        factory = getattr(importlib.import_module(module_name), attribute)
        extensions.append(factory())
    return extensions
