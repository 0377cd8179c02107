"""With pydantic's plugins off, a short command does not import pydantic's plugin loader (nor what it imports)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

LOADED_AT_EXIT = """
import atexit, sys

def loaded() -> None:
    from pydantic.plugin import _loader
    print("metadata:", "importlib.metadata" in sys.modules, "scanned:", _loader._plugins is not None, file=sys.stderr)

atexit.register(loaded)
sys.argv = ["agentwatch", *sys.argv[1:]]
from agentwatch.cli import main

main()
"""


@pytest.mark.parametrize(
    ("env", "metadata"),
    [({}, False), ({"PYDANTIC_DISABLE_PLUGINS": "1"}, False), ({"PYDANTIC_DISABLE_PLUGINS": ""}, True)],
    ids=["default", "off", "on"],
)
def test_a_short_command_skips_the_plugin_loader_while_plugins_are_off(
    env: dict[str, str], metadata: bool, tmp_path: Path
) -> None:
    from bench.start import prepare_store

    store = f"sqlite:///{tmp_path / 'plugins.db'}"
    asyncio.run(prepare_store(store))
    environment = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"} | env
    command = [sys.executable, "-c", LOADED_AT_EXIT, "ls", "--store", store]
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=environment, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "asker" in done.stdout
    assert f"metadata: {metadata} scanned: {metadata}" in done.stderr


QUIET_LOADER = """
import os, sys

os.environ["PYDANTIC_DISABLE_PLUGINS"] = "__all__"
from agentwatch.cli._plugins import skip_plugin_loader

assert skip_plugin_loader()
assert not skip_plugin_loader()  # once
from pydantic import BaseModel, ValidationError


class Point(BaseModel):
    x: int


assert Point(x="3").x == 3
try:
    Point(x="three")
except ValidationError:
    pass
else:
    raise AssertionError("not validated")
from pydantic.plugin import _loader

assert _loader.get_plugins() == () and _loader._plugins is None
assert "importlib.metadata" not in sys.modules
assert _loader.PYDANTIC_ENTRY_POINT_GROUP == "pydantic"  # anything else comes from the real loader
print("ok")
"""


def test_the_quiet_loader_validates_as_before_and_hands_anything_else_to_the_real_one() -> None:
    environment = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    command = [sys.executable, "-c", QUIET_LOADER]
    done = subprocess.run(command, capture_output=True, text=True, env=environment, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"


def test_the_real_loader_stays_when_plugins_are_on() -> None:
    code = (
        "import os, sys; os.environ['PYDANTIC_DISABLE_PLUGINS'] = 'logfire'\n"
        "from agentwatch.cli._plugins import skip_plugin_loader\n"
        "assert not skip_plugin_loader() and 'pydantic.plugin._loader' not in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
