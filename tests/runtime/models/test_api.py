"""The public surface: `__all__` is complete, and only the models adapter imports the model layer."""

from __future__ import annotations

import ast
from pathlib import Path

import agentwatch
import agentwatch.runtime.models as models

SRC = Path(agentwatch.__file__).parent
ADAPTER = SRC / "runtime" / "models"
MAY_IMPORT_MODEL_LAYER = {"_adapter.py", "_mcp.py", "_scripted_play.py", "_visible.py", "refs.py", "scripted.py"}


def test_all_lists_every_public_name() -> None:
    public = {name for name in vars(models) if not name.startswith("_")}
    modules = {"refs", "scripted"}
    assert set(models.__all__) == public - modules


def test_only_the_models_adapter_imports_pydantic_ai() -> None:
    importers = []
    for path in SRC.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(name == "pydantic_ai" or name.startswith("pydantic_ai.") for name in names):
                importers.append(path.relative_to(SRC).as_posix())
    allowed = {f"runtime/models/{name}" for name in MAY_IMPORT_MODEL_LAYER}
    assert set(importers) <= allowed, sorted(set(importers) - allowed)
