"""The layer order (docs/architecture.md), enforced on every import of every module under src/agentwatch.

Every `import` and `from ... import` counts: module-level ones, the ones under `if TYPE_CHECKING:` and the
ones inside functions, and `importlib.import_module("...")` with a literal name. The order, lowest first:

    events → store, live → tools → reads → runtime → watchers → surfaces

- A module may import its own layer and the ones below it.
- `agentwatch.tools*`, `agentwatch.errors` and `agentwatch.config` (the tool contract), and `agentwatch.pacing`
  (outcomes handed back to an event loop), are base utilities that every layer may import; they themselves
  import only the layers below them.
- Nothing below the surfaces imports `agentwatch.runtime.engine` (`Engine`); `agentwatch/__init__.py`, the
  public lazy surface, is the one exception.
- Only the models adapter (`agentwatch.runtime.models`) imports `pydantic_ai` or a vendor SDK.
- Within the watchers the line is digest → pairing → report → rules → delivery → observers; the package's
  `__init__` sits on top of it, so a watcher module never imports `agentwatch.watchers` itself.

A module this file does not place fails the test: put it in `LAYERS` (or `WATCHERS`) where it belongs.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "agentwatch"

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("events", ("agentwatch.events",)),
    ("store, live", ("agentwatch.store", "agentwatch.live")),
    ("tools", ("agentwatch.tools", "agentwatch.errors", "agentwatch.config", "agentwatch.pacing")),
    ("reads", ("agentwatch.reads",)),
    ("runtime", ("agentwatch.runtime", "agentwatch.retention")),
    ("watchers", ("agentwatch.watchers", "agentwatch.tracing", "agentwatch.notify")),
    ("surfaces", ("agentwatch.cli", "agentwatch.service", "agentwatch.mcp", "agentwatch.__main__", "agentwatch")),
]
"""Lowest first. A module belongs to the layer with the longest prefix that names it (`agentwatch` alone is
the public surface, the package's `__init__`)."""

BASE = ("agentwatch.tools", "agentwatch.errors", "agentwatch.config", "agentwatch.pacing")
"""The tool contract, and the loops' pacing of outcomes: importable from every layer."""

WATCHERS = ["digest", "pairing", "report", "rules", "delivery", "observers"]
"""The line inside the watchers, lowest first; `agentwatch.watchers` (the package) is above all of them."""

ENGINE = "agentwatch.runtime.engine"
ENGINE_ALLOWED = {"agentwatch"}
"""Modules below the surfaces that may import the engine: the public lazy surface only."""

MODEL_SDKS = ("pydantic_ai", "openai", "anthropic")
MODELS_ADAPTER = "agentwatch.runtime.models"

ALLOWED: set[tuple[str, str]] = set()
"""Known violations being fixed, as (importing module, imported module), each with a comment naming the file
and the import; empty since the runtime services replaced `Engine` below the surfaces. A violation not listed
fails the test, and so does a listed one that no longer occurs."""


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


@dataclass(frozen=True)
class Import:
    importer: str
    target: str
    """The agentwatch module (or the third-party top-level package) that the statement loads."""
    line: int
    how: str
    """`module`, `TYPE_CHECKING` or `function`: where the statement stands."""

    def __str__(self) -> str:
        where = "" if self.how == "module" else f" ({self.how})"
        return f"{MODULES[self.importer].relative_to(SRC.parent)}:{self.line}: imports {self.target}{where}"


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST, how: str) -> Iterator[tuple[ast.AST, str]]:
    """Every node under `node`, with where it stands (a function body wins over `TYPE_CHECKING`)."""
    for child in ast.iter_child_nodes(node):
        inner = how
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            inner = "function"
        elif isinstance(child, ast.If) and _is_type_checking(child.test) and how == "module":
            yield child.test, how
            for stmt in child.body:
                yield stmt, "TYPE_CHECKING"
                yield from _walk(stmt, "TYPE_CHECKING")
            for stmt in child.orelse:
                yield stmt, how
                yield from _walk(stmt, how)
            continue
        yield child, inner
        yield from _walk(child, inner)


def _resolve(importer: str, level: int, module: str | None) -> str:
    if level == 0:
        return module or ""
    base = importer.split(".")
    if not is_package(importer):
        base.pop()
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, *([module] if module else [])])


def _target(name: str) -> str:
    """The agentwatch module `name` loads (a package when `name` is an attribute of it), else its top level."""
    if not _within(name, "agentwatch"):
        return name.split(".")[0]
    while name not in MODULES and not SRC.joinpath(*name.split(".")).is_dir() and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def imports_of(importer: str, source: str | None = None) -> Iterator[Import]:
    """Every import in the module `importer` (or in `source`, read as if it were that module)."""
    if source is None:
        source = MODULES[importer].read_text(encoding="utf-8")
    tree = ast.parse(source, filename=str(MODULES[importer]))
    for node, how in _walk(tree, "module"):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(importer, _target(alias.name), line, how)
        elif isinstance(node, ast.ImportFrom):
            module = _resolve(importer, node.level, node.module)
            for alias in node.names:
                # `from agentwatch.runtime import engine` loads the module agentwatch.runtime.engine
                yield Import(importer, _target(f"{module}.{alias.name}"), line, how)
        elif (
            isinstance(node, ast.Call)
            and (
                (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                or (isinstance(node.func, ast.Name) and node.func.id in ("import_module", "__import__"))
            )
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield Import(importer, _target(node.args[0].value), line, how)


def layer_of(name: str) -> int:
    best: tuple[int, int] | None = None  # (prefix length, layer)
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if _within(name, prefix) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), index)
    assert best is not None, f"{name} is in no layer: place it in LAYERS in {__file__}"
    return best[1]


def watcher_rank(name: str) -> int:
    if name == "agentwatch.watchers":
        return len(WATCHERS)
    short = name.split(".")[2]
    assert short in WATCHERS, f"{name} is not in the watchers' line: place it in WATCHERS in {__file__}"
    return WATCHERS.index(short)


def problems(found: Import) -> Iterator[str]:
    importer, target = found.importer, found.target
    if not _within(target, "agentwatch"):
        if target in MODEL_SDKS and not _within(importer, MODELS_ADAPTER):
            yield f"{found}: only {MODELS_ADAPTER} imports {target}"
        return
    mine, theirs = layer_of(importer), layer_of(target)
    surfaces = len(LAYERS) - 1
    if theirs > mine and not target.startswith(BASE):
        yield f"{found}: the {LAYERS[mine][0]} layer imports the {LAYERS[theirs][0]} layer above it"
    if _within(target, ENGINE) and mine < surfaces and importer not in ENGINE_ALLOWED and importer != ENGINE:
        yield f"{found}: only the surfaces import the engine; take the runtime services instead"
    in_watchers = _within(importer, "agentwatch.watchers") and _within(target, "agentwatch.watchers")
    if in_watchers and importer != target and watcher_rank(target) > watcher_rank(importer):
        line = " → ".join(WATCHERS)
        yield f"{found}: the watchers' line is {line}; {importer} may not import {target}"


def violations() -> dict[tuple[str, str], list[str]]:
    found: dict[tuple[str, str], list[str]] = {}
    for importer in MODULES:
        for each in imports_of(importer):
            for problem in problems(each):
                found.setdefault((importer, each.target), []).append(problem)
    return found


def test_every_import_follows_the_layer_order() -> None:
    found = violations()
    new = [problem for key, listed in sorted(found.items()) if key not in ALLOWED for problem in listed]
    assert not new, "imports against the layer order (docs/architecture.md):\n" + "\n".join(new)
    fixed = sorted(ALLOWED - set(found))
    assert not fixed, f"no longer violations, remove them from ALLOWED: {fixed}"


def test_every_module_has_a_place_in_the_order() -> None:
    for name in MODULES:
        layer_of(name)
        if _within(name, "agentwatch.watchers"):
            watcher_rank(name)


# The checker itself: each rule catches what it should, wherever the import stands.


def _check(importer: str, source: str) -> list[str]:
    """The problems of `source` if it were the module `importer` (parsed, never imported)."""
    return [problem for found in imports_of(importer, source) for problem in problems(found)]


def test_the_checker_sees_imports_under_type_checking_and_in_functions() -> None:
    typed = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from agentwatch.runtime.engine import Engine\n"
    assert any("(TYPE_CHECKING)" in p and "engine" in p for p in _check("agentwatch.reads.get", typed))
    local = "def f():\n    from ..runtime import roster\n"
    assert any("(function)" in p and "runtime layer" in p for p in _check("agentwatch.reads.get", local))
    assert _check("agentwatch.reads.get", "from agentwatch.errors import NotFound\nfrom . import _args\n") == []


def test_the_checker_knows_the_engine_the_sdks_and_the_watchers_line() -> None:
    assert _check("agentwatch.runtime.turn", "from agentwatch.runtime import engine\n")
    assert _check("agentwatch.cli.run", "from agentwatch.runtime.engine import Engine\n") == []
    assert _check("agentwatch.runtime.turn", "import pydantic_ai.messages\n")
    assert _check("agentwatch.runtime.models.refs", "import pydantic_ai.messages\nimport openai\n") == []
    assert _check("agentwatch.watchers.report", "from agentwatch.watchers.delivery import Batch\n")
    assert _check("agentwatch.watchers.digest", "from agentwatch.watchers import Digest\n")
    assert _check("agentwatch.watchers.delivery", "from .report import send_report\n") == []
    assert _check("agentwatch.events.ids", "import agentwatch.store\n")
    assert _check("agentwatch.events.ids", "from agentwatch import errors\n") == []
