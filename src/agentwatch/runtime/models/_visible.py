"""Visible failures: model requests retried by our policy, and fallback chains, each step told to the turn.

A turn's model is its chain of refs (one ref is a chain of one). Each model of the chain is wrapped in a
`_VisibleModel` that retries a request which failed in a way worth retrying (a rate limit, a server error, an
overload, a timeout, a connection that failed) as its `RetryPolicy` says, telling the turn before each wait
(`runtime.retry`). A chain of several runs under pydantic-ai's `FallbackModel`: when a model gives up, the next
one is tried and tells the turn that it takes over (`model.reroute`); a model that gave up is not tried again in
the same run. The vendor SDK's own retries are off (see `refs`), so the retries told are all there are.

Only errors raised before a response's first event are retried (while the request opens, or as the stream's
first event): once a response has begun streaming, its parts are the conversation's and a failure ends the
request.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Generator, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from pydantic import JsonValue
from pydantic_ai import RunContext
from pydantic_ai.exceptions import (
    ModelAPIError,
    ModelConnectionError,
    ModelHTTPError,
    ModelQuotaExceededError,
    ModelRateLimitError,
    ModelRequestTimeout,
    ModelServerError,
    ModelUnavailableError,
)
from pydantic_ai.messages import ModelMessage, ModelResponse, ModelResponseStreamEvent
from pydantic_ai.models import Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.models.fallback import FallbackModel
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings

from agentwatch.events import ModelReroute, Payload, RuntimeNotice, RuntimeRetry
from agentwatch.runtime.models._types import RetryPolicy

__all__ = ["ModelTrail", "error_text", "stream_through"]

T = TypeVar("T")

_RETRIED_STATUS = frozenset({408, 409, 429})


def error_text(exc: BaseException) -> str:
    """`Type: message` of an exception (the type alone when it says nothing)."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def worth_retrying(exc: BaseException) -> bool:
    """A failure that may pass if the same request is sent again: rate limit, server error, overload, timeout,
    connection. A quota used up, a refused or malformed request, a bad key or an unknown model never passes."""
    if isinstance(exc, ModelQuotaExceededError):
        return False
    if isinstance(
        exc, ModelRateLimitError | ModelServerError | ModelUnavailableError | ModelConnectionError | ModelRequestTimeout
    ):
        return True
    return isinstance(exc, ModelHTTPError) and (exc.status_code in _RETRIED_STATUS or exc.status_code >= 500)


_RequestStream = Callable[..., AbstractAsyncContextManager[StreamedResponse]]


def stream_through(cls: type[Model], request_stream: _RequestStream) -> None:
    """Give `cls` a `request_stream` that opens another model's stream and hands it on, without the two wrappers
    pydantic-ai adds to one defined in a class body.

    pydantic-ai wraps the `request_stream` of every `Model` class that defines one when the class is made (in
    `Model.__init_subclass__`): one async context manager has the model's own output restore special tokens, the
    other gives the files a request downloads one budget. Around a stream opened from another model's (a chain's
    model in `_VisibleModel`, `FunctionModel`'s in the scripted player) both are the same work again: the inner
    model's own wrappers restore its tokens (a wrapper has none of its own) and open the budget its downloads
    count against. Each such layer cost four more context-manager steps per request on the loop, for nothing.
    """
    if "request_stream" in cls.__dict__:
        raise TypeError(f"{cls.__name__} defines request_stream in its body, where it is wrapped already")
    attribute: Any = request_stream
    setattr(cls, "request_stream", attribute)  # noqa: B010 - assigning to a method directly is a type error


@dataclass(frozen=True)
class _Failure:
    """How one model of the chain gave up."""

    ref: str
    provider: str
    url: str | None
    error: str
    attempts: int

    def where(self) -> str:
        place = f"{self.provider} at {self.url}" if self.url else self.provider
        tries = "1 attempt" if self.attempts == 1 else f"{self.attempts} attempts"
        return f"{self.ref} via {place}, {tries}"

    def as_json(self) -> dict[str, JsonValue]:
        return {
            "model": self.ref,
            "provider": self.provider,
            "url": self.url,
            "error": self.error,
            "attempts": self.attempts,
        }


def _provider(model: Model) -> tuple[str, str | None]:
    try:
        system = model.system
    except Exception:  # a model that cannot say: never let the report of a failure fail
        system = type(model).__name__
    try:
        url = model.base_url
    except Exception:
        url = None
    return system, url


class _Skipped(ModelAPIError):
    """A model of the chain that already gave up in this run: the chain moves on without trying it."""


class ModelTrail:
    """The chain of one run: its models, which one serves, and how the ones that failed gave up.

    `tell` commits a payload durably (the turn's sink); it is awaited before each retry's wait and before a
    rerouted request is sent.
    """

    def __init__(
        self,
        chain: Sequence[tuple[str, Model]],
        policy: RetryPolicy,
        tell: Callable[[Payload], Awaitable[None]],
    ) -> None:
        self.refs = tuple(ref for ref, _ in chain)
        self.policy = policy
        self.current = self.refs[0]
        """The ref the run is on: the one requests start on, and the one that answered the last."""
        self.failures: list[_Failure] = []
        self._tell = tell
        self._gave_up: set[str] = set()
        self._leaving: _Failure | None = None  # the model that just gave up, when another may take over
        wrapped = [_VisibleModel(ref, model, self) for ref, model in chain]
        self.model: Model = wrapped[0] if len(wrapped) == 1 else FallbackModel(*wrapped)
        """The model the run is given."""

    # -- the chain's models report here ------------------------------------------------------------------------

    async def _entering(self, ref: str) -> None:
        if ref in self._gave_up:
            raise _Skipped(ref, f"{ref} already failed in this run")
        leaving, self._leaving = self._leaving, None
        if leaving is not None:
            reason = f"{leaving.error} ({leaving.where()})"
            await self._tell(ModelReroute(from_model=leaving.ref, to_model=ref, reason=reason))
        self.current = ref

    async def _retrying(self, ref: str, model: Model, exc: Exception, attempt: int, wait: float) -> None:
        provider, url = _provider(model)
        place = f"{provider} at {url}" if url else provider
        message = (
            f"model request to {ref} ({place}) failed: {error_text(exc)}; "
            f"attempt {attempt} of {self.policy.attempts} in {wait:g} s"
        )
        await self._tell(RuntimeRetry(message=message, attempt=attempt, delay_seconds=wait))

    def _gave_up_on(self, ref: str, model: Model, exc: Exception, attempts: int) -> None:
        provider, url = _provider(model)
        failure = _Failure(ref, provider, url, error_text(exc), attempts)
        self.failures.append(failure)
        if len(self.refs) > 1 and isinstance(exc, ModelAPIError):
            self._gave_up.add(ref)
            self._leaving = failure

    # -- the adapter reads these -------------------------------------------------------------------------------

    def model_failure(self, exc: BaseException) -> tuple[str, RuntimeNotice] | None:
        """For a run that failed because its model(s) did: the turn's error text naming every model tried, with
        its provider and URL, and the `runtime.error` that says so. None for any other failure."""
        failures = self.failures
        if not failures or not isinstance(exc, ModelAPIError | ExceptionGroup):
            return None
        if len(self.refs) == 1:
            only = failures[-1]
            text = f"{only.error} ({only.where()})"
        else:
            tried = "; ".join(f"{f.ref}: {f.error} ({f.where()})" for f in failures)
            text = f"every model of the chain failed: {tried}"
        detail: JsonValue = {"models": [f.as_json() for f in failures]}
        return text, RuntimeNotice(type="runtime.error", message=text, source="model", detail=detail)


class _VisibleModel(WrapperModel):
    """One model of a chain: its requests retried by the policy, each retry told before its wait. (Its
    `request_stream`, `_request_stream` below, is set after the class: see `stream_through`.)"""

    def __init__(self, ref: str, wrapped: Model, trail: ModelTrail) -> None:
        super().__init__(wrapped)
        self.ref = ref
        self.trail = trail

    async def _failed(self, exc: Exception, attempt: int) -> bool:
        """True when the request is to be sent again (after the told wait); False when this model gives up."""
        policy = self.trail.policy
        if not worth_retrying(exc) or attempt >= policy.attempts:
            self.trail._gave_up_on(self.ref, self.wrapped, exc, attempt)
            return False
        asked = exc.retry_after if isinstance(exc, ModelAPIError) else None
        wait = policy.wait(attempt, asked)
        await self.trail._retrying(self.ref, self.wrapped, exc, attempt + 1, wait)
        await asyncio.sleep(wait)
        return True

    async def _attempts(self, send: Callable[[], Awaitable[T]]) -> T:
        """`send()`'s outcome, sent again as long as the policy retries its failure (see `_failed`)."""
        await self.trail._entering(self.ref)
        attempt = 1
        while True:
            try:
                return await send()
            except Exception as exc:
                if not await self._failed(exc, attempt):
                    raise
                attempt += 1

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        return await self._attempts(lambda: self.wrapped.request(messages, model_settings, model_request_parameters))


@asynccontextmanager
async def _request_stream(
    self: _VisibleModel,
    messages: list[ModelMessage],
    model_settings: ModelSettings | None,
    model_request_parameters: ModelRequestParameters,
    run_context: RunContext[Any] | None = None,
) -> AsyncGenerator[StreamedResponse]:
    """`_VisibleModel.request_stream`: the wrapped model's stream, its opening retried by the policy."""
    # Until its first event: a provider may accept the request, then report an overload or a rate limit as the
    # stream's first event, still in time to try again. (A FunctionModel, such as the scripted model, reads its
    # first item while it opens already.)
    opened = (
        self.wrapped.request_stream
        if isinstance(self.wrapped, FunctionModel)
        else partial(_until_first_event, self.wrapped)
    )
    async with AsyncExitStack() as stack:  # an opening that failed left nothing in it to close
        yield await self._attempts(
            lambda: stack.enter_async_context(opened(messages, model_settings, model_request_parameters, run_context))
        )


# It opens the wrapped model's stream, which brings pydantic-ai's boundary wrappers along itself.
stream_through(_VisibleModel, _request_stream)


@asynccontextmanager
async def _until_first_event(
    model: Model,
    messages: list[ModelMessage],
    model_settings: ModelSettings | None,
    model_request_parameters: ModelRequestParameters,
    run_context: RunContext[Any] | None,
) -> AsyncGenerator[StreamedResponse]:
    """`model`'s stream, opened and read up to its first event, which is handed out again first.

    pydantic-ai's own `request_stream_until_first_event` keeps the stream behind a `PeekableAsyncStream`, whose
    every item takes an anyio lock (a pass through the event loop) and a cancel scope; the agent's stream reads
    through one of those already, so this one only needs to give the first event back."""
    async with model.request_stream(messages, model_settings, model_request_parameters, run_context) as response:
        events = aiter(response)
        try:
            first = await anext(events)
        except StopAsyncIteration:
            yield response  # a stream without events is handed over as it is
            return
        response._event_iterator = _FirstAgain(first, events)  # `StreamedResponse.__aiter__` hands this out
        yield response


class _FirstAgain:
    """An event stream whose first event was read already: that event, then the rest. Each later event costs
    one call: `__anext__` hands out the stream's own awaitable."""

    __slots__ = ("_first", "_rest")

    def __init__(self, first: ModelResponseStreamEvent, rest: AsyncIterator[ModelResponseStreamEvent]) -> None:
        self._first: ModelResponseStreamEvent | None = first
        self._rest = rest

    def __aiter__(self) -> _FirstAgain:
        return self

    def __anext__(self) -> Awaitable[ModelResponseStreamEvent]:
        first = self._first
        if first is None:
            return self._rest.__anext__()
        self._first = None
        return _Ready(first)

    async def aclose(self) -> None:
        """Close the stream underneath (an async generator, normally)."""
        close = getattr(self._rest, "aclose", None)
        if close is not None:
            await close()


class _Ready:
    """An awaitable that is done already, with `value`."""

    __slots__ = ("value",)

    def __init__(self, value: ModelResponseStreamEvent) -> None:
        self.value = value

    def __await__(self) -> Generator[Any, None, ModelResponseStreamEvent]:
        return self.value
        yield  # a generator: awaiting it returns at once
