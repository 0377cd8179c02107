"""The public surface: everything in `agentwatch.__all__` imports, and each package's `__all__` is complete."""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import agentwatch

PACKAGES = [
    "agentwatch.events",
    "agentwatch.store",
    "agentwatch.live",
    "agentwatch.runtime.models",
    "agentwatch.watchers",
    "agentwatch.tools",
    "agentwatch.reads.answers",
]


@pytest.mark.parametrize("name", agentwatch.__all__)
def test_every_public_name_imports(name: str) -> None:
    assert getattr(agentwatch, name) is not None


def test_all_is_exactly_the_lazy_exports() -> None:
    assert set(agentwatch.__all__) == {"__version__", *agentwatch._EXPORTS}


@pytest.mark.parametrize("package", PACKAGES)
def test_all_lists_every_public_name_a_package_defines(package: str) -> None:
    module = importlib.import_module(package)
    public = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and (inspect.isclass(value) or inspect.isfunction(value))
        and getattr(value, "__module__", "").startswith(package)
    }
    assert public <= set(module.__all__), f"missing from {package}.__all__: {sorted(public - set(module.__all__))}"


def test_importing_agentwatch_does_not_load_the_model_layer() -> None:
    code = "import sys, agentwatch; print('pydantic_ai' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = agentwatch.Nope


def test_importing_the_engine_loads_no_model_layer_nor_vendor_sdk() -> None:
    code = (
        "import sys; from agentwatch import Engine; "
        "heavy = ('pydantic_ai', 'openai', 'anthropic', 'jsonschema'); "  # (jsonschema: by the first schema check)
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy "
        "or m in ('agentwatch.runtime.models._adapter', 'agentwatch.reads.runs')))"  # (run reads: when first used)
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_importing_the_engine_builds_no_tool_schema() -> None:
    code = (
        "import sys; from agentwatch.runtime.tools import builtin_tools; "
        "tools = builtin_tools(); print(sum(callable(t.__dict__['_parameters']) for t in tools), len(tools)); "
        "print(len(tools[0].parameters['properties']) > 0, callable(tools[0].__dict__['_parameters']))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == out[1]  # every schema waits until it is read ...
    assert out[2:] == ["True", "False"]  # ... and is made (once) when it is


def test_every_field_default_is_given_by_keyword_so_type_checkers_see_it_without_pydantics_plugin() -> None:
    # mypy and pyright read a model's defaults through `dataclass_transform`, which knows `Field(default=...)`
    # only: a field written `Field(None, ...)` reads as required, and a project checked without pydantic's mypy
    # plugin was told `AgentDefinition(name=..., model=...)` misses the argument "source_path".
    package = Path(agentwatch.__file__).parent
    positional = [
        f"{path.relative_to(package.parent)}:{node.lineno}"
        for path in sorted(package.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Field" and node.args
    ]
    assert positional == []


def test_a_script_function_is_typed_with_names_agentwatch_exports() -> None:
    from agentwatch.runtime import models

    assert (agentwatch.ScriptContext, agentwatch.ScriptStep) == (models.ScriptContext, models.ScriptStep)
