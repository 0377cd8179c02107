"""The checked-in OpenAPI document matches the tools, and a property-based fuzz of every endpoint: a refused
request is always a structured error with the status of its code, never a 500, and writes nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentwatch
from agentwatch.runtime.models import ScriptedModel
from agentwatch.service import create_app
from agentwatch.service._wire import STATUS_BY_CODE
from agentwatch.service.openapi import _default_document, openapi_document
from tests.service.support import role, served

DOCUMENT = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"
REGENERATE = 'python -c "from agentwatch.service.openapi import main; main()" > docs/openapi.json'


async def test_the_checked_in_openapi_document_has_not_drifted() -> None:
    current = await _default_document()
    checked_in = json.loads(DOCUMENT.read_text())
    assert checked_in == json.loads(json.dumps(current)), f"docs/openapi.json is stale; regenerate: {REGENERATE}"


def test_every_reference_in_the_document_resolves() -> None:
    document = json.loads(DOCUMENT.read_text())
    refs: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("$ref"), str):
                refs.append(node["$ref"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(document)
    assert refs
    for ref in refs:
        target: Any = document
        for part in ref.removeprefix("#/").split("/"):
            target = target[part]
        assert isinstance(target, dict), ref


async def test_served_document_matches_the_tools(open_engine: Any) -> None:
    async with open_engine() as engine:
        assert openapi_document(engine.tools.values())["paths"].keys() >= {
            f"/api/tools/{name}" for name, tool in engine.tools.items() if not tool.asks_user
        }


async def test_the_document_offers_only_the_tools_a_caller_outside_a_turn_reaches(open_engine: Any) -> None:
    document = json.loads(DOCUMENT.read_text())
    assert document["info"]["version"] == agentwatch.__version__
    assert "/api/tools/ObserverReport" not in document["paths"] and "/api/tools/ask_user" not in document["paths"]
    async with open_engine(extensions=None) as engine:  # the default extensions: observer agents, and their tool
        assert "ObserverReport" in engine.tools
        unknown = await engine.call_tool("agent_gte", {})
        outside = await engine.call_tool("ObserverReport", {"report": "x"})
    known = unknown["error"]["message"].split("the tools are: ")[1].split(", ")
    assert "agent_get" in known and "ObserverReport" not in known and "ask_user" not in known
    assert outside["error"]["code"] == "not_delivered" and "outside any agent" in outside["error"]["message"]


async def test_real_answers_match_the_answer_schemas_the_document_gives(open_engine: Any, scripted: Any) -> None:
    """Once every answer was declared only as an object: a client could not generate a typed client from it."""
    document = json.loads(DOCUMENT.read_text())
    model = scripted("openapi-answers", ScriptedModel.replying("hello"))
    async with open_engine(role("greeter", model)) as engine:
        snapshot = await engine.task("greeter", "hi", timeout=10)
        agent = {"id": snapshot["agentId"]}
        async with engine.run("typed") as run:
            pass
        calls = {
            "agent_list": {"counts": True},
            "agent_summary": {"words": True, "by": "role"},
            "agent_get": agent,
            "agent_history": agent,
            "agent_tail": agent,
            "agent_prompt": agent,
            "agent_export": agent,
            "agent_roles": {},
            "run_list": {},
            "run_trace": {"id": run.id},
            "run_history": {"id": run.id},
        }
        answers = {name: await engine.call_tool(name, args) for name, args in calls.items()}
    for name, answer in answers.items():
        assert not isinstance(answer.get("error"), dict), (name, answer)  # (agent_get's `error` is the agent's)
        schema = document["paths"][f"/api/tools/{name}"]["post"]["responses"]["200"]["content"]["application/json"]
        assert schema["schema"] == {"$ref": f"#/components/schemas/{name}.answer"}
        jsonschema.validate(answer, {**schema["schema"], "components": document["components"]})


async def test_every_default_a_schema_shows_is_taken_by_its_tool(open_engine: Any) -> None:
    """Once `agent_summary` showed its window's default as `P7D` (ISO 8601, as pydantic writes a timedelta) and
    refused it, as it refused every ISO duration its schema's `format` promised."""
    async with open_engine() as engine:
        for name, tool in engine.tools.items():
            properties = tool.parameters.get("properties", {})
            defaults = {key: prop["default"] for key, prop in properties.items() if prop.get("default") is not None}
            assert all("format" not in prop or prop["format"] != "duration" for prop in properties.values()), name
            if tool.asks_user or tool.agents_only or tool.parameters.get("required") or not defaults:
                continue  # (a tool that needs more to be called is called with its defaults elsewhere)
            jsonschema.validate(defaults, tool.parameters)
            answer = await engine.call_tool(name, defaults)
            assert not isinstance(answer.get("error"), dict), (name, defaults, answer)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)


@st.composite
def requests(draw: st.DrawFn, tool_names: list[str], properties: dict[str, list[str]]) -> dict[str, Any]:
    name = draw(st.sampled_from(tool_names) | st.text(min_size=1, max_size=20).filter(lambda s: "/" not in s))
    keys = [*properties.get(name, []), "bogus", "afterId", "cursor", "id"]
    args = draw(st.dictionaries(st.sampled_from(keys), json_values, max_size=4))
    body = draw(
        st.sampled_from(["args", "args", "args", "raw", "non_object"]).flatmap(
            lambda kind: (
                st.just(json.dumps(args).encode())
                if kind == "args"
                else st.binary(max_size=50)
                if kind == "raw"
                else json_values.map(lambda v: json.dumps([v]).encode())
            )
        )
    )
    content_type = draw(st.sampled_from(["application/json", "application/json", "text/plain", ""]))
    method = draw(st.sampled_from(["POST", "POST", "POST", "GET", "PUT"]))
    return {"name": name, "body": body, "content_type": content_type, "method": method}


@pytest.mark.slow
@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)
@given(data=st.data())
async def test_fuzzed_requests_get_structured_errors_and_refusals_write_nothing(
    open_engine: Any, scripted: Any, data: st.DataObject
) -> None:
    model = scripted("fuzz-helper", ScriptedModel.replying("ok"))
    async with (
        open_engine(role("helper", model)) as engine,
        served(create_app(engine)) as base,
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        names = sorted(engine.tools)
        properties = {n: sorted(t.parameters.get("properties", {})) for n, t in engine.tools.items()}
        for _ in range(20):  # one engine per example, several requests: an engine takes a second to open
            request = data.draw(requests(names, properties))
            before = await _fingerprint(engine)
            headers = {"content-type": request["content_type"]} if request["content_type"] else {}
            response = await http.request(
                request["method"],
                f"/api/tools/{quote(request['name'], safe='')}",
                content=request["body"],
                headers=headers,
            )
            assert response.status_code != 500, response.text
            assert response.headers["content-type"].startswith("application/json")
            answer = response.json()
            if response.status_code >= 400:
                assert set(answer) == {"error"}, answer
                error = answer["error"]
                assert isinstance(error["code"], str) and isinstance(error["message"], str) and error["message"]
                assert STATUS_BY_CODE.get(error["code"], 400) == response.status_code, answer
                assert await _fingerprint(engine) == before, f"a refused call wrote: {request}"


async def _fingerprint(engine: Any) -> str:
    listed = await engine.call_tool("agent_list", {"limit": 100, "deleted": True})
    assert "agents" in listed, listed
    rows = [(a["id"], a["status"], a["pendingInputs"], a["pendingRequests"], a["deletedAt"]) for a in listed["agents"]]
    return json.dumps(rows)
