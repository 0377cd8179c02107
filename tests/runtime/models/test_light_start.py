"""Importing the engine loads no model layer: pydantic-ai comes with the first turn, a vendor's SDK with the
first model of that vendor. Each check runs in a fresh interpreter (this one has loaded everything)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

MODEL_LAYER = ("pydantic_ai", "openai", "anthropic")


def loaded_after(code: str) -> list[str]:
    """Which of MODEL_LAYER a fresh interpreter has imported after running `code`."""
    probe = textwrap.dedent(code) + textwrap.dedent(f"""
        import json, sys
        print(json.dumps([name for name in {MODEL_LAYER!r} if name in sys.modules]))
        """)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    loaded: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


def test_importing_the_engine_loads_no_model_layer() -> None:
    assert loaded_after("from agentwatch import Engine, ScriptedModel, Reply, run_task") == []
    assert loaded_after("import agentwatch.runtime.engine, agentwatch.runtime.models, agentwatch.store") == []


def test_defining_scripts_and_resolvers_loads_no_model_layer() -> None:
    code = """
        from agentwatch.runtime.models import ModelResolver, Reply, ScriptedModel
        resolver = ModelResolver(env={}, models={"demo": ScriptedModel([Reply("hi")])})
        """
    assert loaded_after(code) == []


def test_a_scripted_turn_loads_pydantic_ai_but_no_vendor_sdk() -> None:
    code = """
        import asyncio
        from agentwatch.runtime.models import ModelResolver, Reply, ScriptedModel, TurnInput, run_turn

        class Sink:
            async def commit(self, payloads, messages=(), *, wait=True): pass
            def stream(self, payload): pass

        resolver = ModelResolver(env={}, models={"demo": ScriptedModel([Reply("hi")])})
        turn = TurnInput(model="scripted:demo", instructions="", history=[], prompt="hello")
        assert asyncio.run(run_turn(turn, Sink(), models=resolver)).output == "hi"
        """
    assert loaded_after(code) == ["pydantic_ai"]


def test_an_engine_running_scripted_turns_loads_no_vendor_sdk(tmp_path: Path) -> None:
    code = f"""
        import asyncio
        from agentwatch import AgentDefinition, Engine, Reply, ScriptedModel

        async def main():
            role = AgentDefinition(name="greeter", model="scripted:greeter", instructions="Greet.")
            models = {{"greeter": ScriptedModel([Reply("Hello.")])}}
            root = {str(tmp_path)!r}
            async with Engine.open(f"sqlite:///{{root}}/a.db", root=root, definitions=[role], models=models) as engine:
                snapshot = await engine.task("greeter", "Say hello")
            assert snapshot["lastAssistantText"] == "Hello.", snapshot

        asyncio.run(main())
        """
    assert [name for name in loaded_after(code) if name != "pydantic_ai"] == []


def test_a_vendor_sdk_loads_with_the_first_model_of_that_vendor() -> None:
    code = """
        from agentwatch.runtime.models import ModelResolver
        ModelResolver(env={"OPENAI_API_KEY": "sk-test"}).check("openai:gpt-4o")
        """
    assert loaded_after(code) == ["pydantic_ai", "openai"]


def test_the_model_layer_prints_no_banner_of_its_own() -> None:
    import pydantic_ai

    import agentwatch.runtime.models._adapter  # noqa: F401  (the module that runs turns turns it off)

    assert pydantic_ai.BANNER_ENABLED is False
