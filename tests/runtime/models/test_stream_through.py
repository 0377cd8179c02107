"""Models that open another model's stream take their `request_stream` without pydantic-ai's boundary wrappers:
the stream they open brings its own, once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, UserPromptPart
from pydantic_ai.models import ModelRequestParameters, _request_download_budget
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.wrapper import WrapperModel

from agentwatch.events import Payload
from agentwatch.runtime.models import RetryPolicy, ScriptedModel, _scripted_play, _visible
from agentwatch.runtime.models._visible import ModelTrail, stream_through


def test_the_player_and_the_chain_models_keep_their_own_request_stream() -> None:
    assert _scripted_play.ScriptPlayer.__dict__["request_stream"] is _scripted_play._request_stream
    assert _visible._VisibleModel.__dict__["request_stream"] is _visible._request_stream


def test_a_request_stream_defined_in_the_class_body_is_refused() -> None:
    class Wrapping(WrapperModel):
        def request_stream(self, *args: Any, **kwargs: Any) -> Any:
            return self.wrapped.request_stream(*args, **kwargs)

    with pytest.raises(TypeError, match="defines request_stream in its body"):
        stream_through(Wrapping, _visible._request_stream)


async def _told(payload: Payload) -> None:
    raise AssertionError(f"nothing to tell on a request that works: {payload}")


def _trail(model: Any) -> ModelTrail:
    return ModelTrail([("m", model)], RetryPolicy(), _told)


_ASKED: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart(content="hi")])]


async def test_a_stream_opened_through_the_chain_still_has_its_download_budget() -> None:
    budgets: list[object] = []

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        budgets.append(_request_download_budget.get())  # the first item is read while the stream opens
        yield "hello"

    async with _trail(FunctionModel(stream_function=stream)).model.request_stream(
        list(_ASKED), None, ModelRequestParameters()
    ) as response:
        parts = [event async for event in response]
    assert parts
    assert budgets and budgets[0] is not None
    assert _request_download_budget.get() is None  # and it ended with the opening


async def test_a_scripted_stream_through_the_chain_reports_usage_and_why_it_stopped() -> None:
    model = ScriptedModel.replying("It prints hello.").model()
    async with _trail(model).model.request_stream(list(_ASKED), None, ModelRequestParameters()) as response:
        async for _ in response:
            pass
    answered = response.get()
    assert answered.finish_reason == "stop"
    assert answered.usage.input_tokens > 12
    assert answered.usage.output_tokens > 0
