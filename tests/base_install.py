"""What a base install (`pip install agentwatch`, no extra) can import, worked out from `pyproject.toml`: a test
hides every package the extras bring beyond it, as if it were not installed."""

from __future__ import annotations

import sys
import tomllib
from importlib.metadata import PackageNotFoundError, packages_distributions, requires
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
TEST_EXTRA = "test"
"""The extra of the test suite's own tools: not one a user installs."""


def _installed_by(requirements: list[str]) -> set[str]:
    """The distributions these requirements install, with everything they require in turn (as installed here)."""
    found: set[tuple[str, str]] = set()
    todo = [Requirement(text) for text in requirements]
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        for extra in ["", *requirement.extras]:
            if (name, extra) in found:
                continue
            found.add((name, extra))
            try:
                needs = requires(name) or []
            except PackageNotFoundError:
                continue  # (a requirement for another platform or Python)
            for text in needs:
                need = Requirement(text)
                if need.marker is None or need.marker.evaluate({"extra": extra}):
                    todo.append(need)
    return {name for name, _ in found}


def extras_only_modules() -> set[str]:
    """The top-level modules installed only by an extra, not by the base install."""
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    extras = [text for name, texts in project["optional-dependencies"].items() if name != TEST_EXTRA for text in texts]
    base = _installed_by(project["dependencies"])
    added = _installed_by([text for text in extras if not text.startswith(project["name"])]) - base
    return {
        module
        for module, distributions in packages_distributions().items()
        if {canonicalize_name(d) for d in distributions} <= added
    }


def base_install(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hide every module installed only by an extra, for the rest of the test: importing one fails as it does
    when the extra is not installed."""
    hidden = extras_only_modules()
    for name in [name for name in sys.modules if name.split(".")[0] in hidden]:
        monkeypatch.setitem(sys.modules, name, None)
    for name in hidden:
        monkeypatch.setitem(sys.modules, name, None)
