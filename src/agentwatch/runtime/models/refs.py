"""Model refs: the `<prefix>:<model>` strings roles name their model with, and the models they resolve to.

| ref | model |
|---|---|
| `openai:<model>`, `openai-responses:<model>` | OpenAI's Responses API |
| `openai-chat:<model>` | OpenAI's Chat Completions API; with `OPENAI_BASE_URL`, any OpenAI-compatible server |
| `anthropic:<model>` | Anthropic's Messages API |
| `<provider>:<model>` | `[providers.<provider>]` of `agentwatch.toml`: OpenAI-compatible chat at its `base_url` |
| `scripted:<name>`, or `<name>` alone | the `ScriptedModel` given to the resolver as `models={name: ...}` (or, for
`scripted:<name>`, one registered with `register_scripted_model`) |

A ref may be an ordered fallback chain, refs separated by commas (`openai:gpt-4o, anthropic:claude-sonnet-4-5`;
a definition writes it `model: [openai:gpt-4o, anthropic:claude-sonnet-4-5]`): a turn starts on the first, and
when a model still fails after its retries (`RetryPolicy`) the next one takes over.

A model given as `models={ref: ...}` under a full ref (`"openai:gpt-4o"`) stands in for that ref: tests run a
role written for a real provider on a script, as pydantic-ai's `FunctionModel` stands in for a provider.

The prefixes are pydantic-ai's own names. `OPENAI_API_KEY` / `OPENAI_BASE_URL` and `ANTHROPIC_API_KEY` /
`ANTHROPIC_BASE_URL` are read from the environment mapping the resolver was given (the process environment
by default); a named provider's key comes from the variable its `api_key_env` names. A ref that cannot be
resolved raises `InvalidArgument` naming what to set or add.

Nothing of the model layer is imported until a ref is first resolved, and a vendor's SDK (openai, anthropic)
only when a ref of that vendor is: importing the engine stays light.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Self

from agentwatch.errors import InvalidArgument
from agentwatch.runtime.models._types import RetryPolicy
from agentwatch.runtime.models.scripted import ScriptedModel, registered_scripted_model

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage
    from pydantic_ai.models import Model
    from pydantic_ai.settings import ModelSettings

    from agentwatch.config import ProviderConfig

__all__ = [
    "BUILTIN_PREFIXES",
    "KNOWN_CONTEXT_WINDOWS",
    "ModelResolver",
    "known_context_window",
    "retry_policy_from_env",
    "split_chain",
    "split_ref",
]

BUILTIN_PREFIXES = ("openai", "openai-chat", "openai-responses", "anthropic", "scripted")
"""Prefixes that need no configuration; a `[providers.x]` section cannot take these names."""

KNOWN_CONTEXT_WINDOWS: Mapping[str, int] = {
    "gpt-3.5-turbo": 16_385,
    "gpt-4-turbo": 128_000,
    "gpt-4o": 128_000,
    "gpt-4o-mini": 128_000,
    "gpt-4.1": 1_047_576,
    "gpt-5": 400_000,
    "o1": 200_000,
    "o1-mini": 128_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    "claude-3-5-haiku": 200_000,
    "claude-3-5-sonnet": 200_000,
    "claude-3-7-sonnet": 200_000,
    "claude-haiku-4-5": 200_000,
    "claude-sonnet-4": 200_000,
    "claude-opus-4": 200_000,
}
"""Context window sizes (tokens) of common models, by model name prefix (dated versions match their family)."""


# The SDK's own retries would be invisible (a closed port took 7 s to say `Connection error.`): the models
# adapter retries instead, recording each retry (`RetryPolicy`).
def _no_sdk_retries() -> ModelSettings:
    from pydantic_ai.settings import ModelSettings

    return ModelSettings(max_retries=0)


# OpenAI's client insists on a key; servers that need none (Ollama, llama.cpp, vLLM) ignore whatever is sent.
_NO_KEY = "api-key-not-set"


def split_ref(ref: str) -> tuple[str, str]:
    """`"openai:gpt-4o"` → `("openai", "gpt-4o")`; InvalidArgument when there is no prefix or no model."""
    prefix, sep, name = ref.partition(":")
    if not sep or not prefix or not name:
        raise InvalidArgument(
            f"model ref {ref!r} is not <provider>:<model>; write it like openai:gpt-4o, anthropic:claude-sonnet-4-5, "
            "openai-chat:llama3.1 or scripted:demo"
        )
    return prefix, name


def split_chain(ref: str) -> tuple[str, ...]:
    """The refs of a fallback chain, in order: `"openai:a, openai:b"` → `("openai:a", "openai:b")`; a single ref
    is a chain of one."""
    return tuple(part.strip() for part in ref.split(",") if part.strip()) or (ref,)


def retry_policy_from_env(env: Mapping[str, str]) -> RetryPolicy:
    """The retry policy `AGENTWATCH_MODEL_ATTEMPTS`, `AGENTWATCH_MODEL_RETRY_WAIT` and
    `AGENTWATCH_MODEL_RETRY_MAX_WAIT` (seconds) set, the defaults for those unset; InvalidArgument for a value
    that is not a number in range."""
    default = RetryPolicy()
    fields = {
        "attempts": ("AGENTWATCH_MODEL_ATTEMPTS", int, default.attempts),
        "first_wait_seconds": ("AGENTWATCH_MODEL_RETRY_WAIT", float, default.first_wait_seconds),
        "max_wait_seconds": ("AGENTWATCH_MODEL_RETRY_MAX_WAIT", float, default.max_wait_seconds),
    }
    values: dict[str, float] = {}
    for field, (name, kind, fallback) in fields.items():
        raw = env.get(name, "").strip()
        try:
            values[field] = kind(raw) if raw else fallback
        except ValueError:
            raise InvalidArgument(f"{name}={raw!r} is not a {'whole ' if kind is int else ''}number") from None
    try:
        return RetryPolicy(
            attempts=int(values["attempts"]),
            first_wait_seconds=values["first_wait_seconds"],
            max_wait_seconds=values["max_wait_seconds"],
        )
    except ValueError as exc:
        raise InvalidArgument(f"model retry settings: {exc}") from None


def known_context_window(ref: str) -> int | None:
    """The context window of the ref's model from `KNOWN_CONTEXT_WINDOWS` (longest matching name), or None."""
    name = ref.partition(":")[2] or ref
    name = name.rsplit("/", 1)[-1]  # `vendor/model` names of gateways
    matches = [prefix for prefix in KNOWN_CONTEXT_WINDOWS if name.startswith(prefix)]
    return KNOWN_CONTEXT_WINDOWS[max(matches, key=len)] if matches else None


class ModelResolver:
    """Turns model refs into models, using the configured providers and an environment mapping.

    ```python
    resolver = ModelResolver(config.providers)            # reads os.environ
    resolver.check("openai:gpt-4o")                       # InvalidArgument when OPENAI_API_KEY is unset
    ModelResolver(models={"coder": ScriptedModel([...])}).check("scripted:coder")   # a test double, handed in
    ```
    """

    def __init__(
        self,
        providers: Mapping[str, ProviderConfig] | None = None,
        env: Mapping[str, str] | None = None,
        *,
        models: Mapping[str, ScriptedModel] | None = None,
        scripted: Mapping[str, ScriptedModel] | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        """`providers` are the `[providers.x]` sections; `env` defaults to `os.environ`; `models` are model
        objects by name or ref (see the module docs), looked up before anything else; `scripted` is the older
        name of `models`; `retry` is how failed requests are tried again (by default from the `AGENTWATCH_MODEL_*`
        variables of `env`, see `retry_policy_from_env`)."""
        self.providers: Mapping[str, ProviderConfig] = dict(providers or {})
        """The named providers, `<name>:<model>` refs go to."""
        clash = sorted(set(self.providers) & set(BUILTIN_PREFIXES))
        if clash:
            raise InvalidArgument(
                f"provider name {clash[0]!r} is a built-in model prefix; rename the [providers.{clash[0]}] section"
            )
        self.env: Mapping[str, str] = os.environ if env is None else env
        """Where keys and base URLs are read from."""
        self.models: Mapping[str, ScriptedModel] = {**(scripted or {}), **(models or {})}
        """The model objects given to this resolver, by name or by ref."""
        self.retry: RetryPolicy = retry if retry is not None else retry_policy_from_env(self.env)
        """How a failed model request is tried again."""
        self._cache: dict[str, Model] = {}
        # The conversations the models adapter parsed, kept between turns (see `TurnInput.conversation_id`).
        self._histories = _Histories()

    def check(self, ref: str) -> None:
        """Raise InvalidArgument, saying what to do, when `ref` (or a ref of its chain) cannot be resolved."""
        for one in split_chain(ref):
            if self._given(one) is None:
                self._model(one)

    def context_window(self, ref: str) -> int | None:
        """The context window of the ref's model when the built-in registry knows it (of a chain: the smallest
        known, as any of its models may answer)."""
        windows = [w for w in map(known_context_window, split_chain(ref)) if w is not None]
        return min(windows) if windows else None

    def _given(self, ref: str) -> ScriptedModel | None:
        """The model object this resolver was given for `ref`: by the whole ref, or by the name of a
        `scripted:<name>` ref, or by a bare name (a ref with no prefix)."""
        given = self.models.get(ref)
        if given is None and ref.startswith("scripted:"):
            given = self.models.get(ref.removeprefix("scripted:"))
        return given

    def _model(self, ref: str) -> Model:
        """The model-layer object for `ref` (for the models adapter only: its type belongs to the model layer)."""
        given = self._given(ref)
        if given is not None:
            return given.model()
        prefix, name = split_ref(ref)
        if prefix == "scripted":
            scripted = registered_scripted_model(name)
            if scripted is None:
                raise InvalidArgument(
                    f"no scripted model {name!r} (model ref {ref!r}) was given or registered; pass it as "
                    f"Engine.open(models={{{name!r}: ScriptedModel(...)}}) (or call "
                    f"register_scripted_model({name!r}, ScriptedModel(...)) first)"
                )
            return scripted.model()
        cached = self._cache.get(ref)
        if cached is None:
            cached = self._cache[ref] = self._build(ref, prefix, name)
        return cached

    def _build(self, ref: str, prefix: str, name: str) -> Model:
        # The vendor's SDK is imported here, the first time a ref of that vendor is resolved (it takes seconds).
        if prefix in ("openai", "openai-responses", "openai-chat"):
            base_url = self.env.get("OPENAI_BASE_URL") or None
            key = self.env.get("OPENAI_API_KEY") or None
            if key is None and base_url is None:
                raise InvalidArgument(
                    f"model ref {ref!r} needs OPENAI_API_KEY; set it, or set OPENAI_BASE_URL to an OpenAI-compatible "
                    "server, or add a [providers.<name>] section with base_url to agentwatch.toml"
                )
            from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
            from pydantic_ai.providers.openai import OpenAIProvider

            provider = OpenAIProvider(base_url=base_url, api_key=key or _NO_KEY)
            if prefix == "openai-chat":
                return OpenAIChatModel(name, provider=provider, settings=_no_sdk_retries())
            return OpenAIResponsesModel(name, provider=provider, settings=_no_sdk_retries())
        if prefix == "anthropic":
            key = self.env.get("ANTHROPIC_API_KEY") or None
            if key is None:
                raise InvalidArgument(f"model ref {ref!r} needs ANTHROPIC_API_KEY; set it in the environment")
            from pydantic_ai.models.anthropic import AnthropicModel
            from pydantic_ai.providers.anthropic import AnthropicProvider

            return AnthropicModel(
                name,
                provider=AnthropicProvider(api_key=key, base_url=self.env.get("ANTHROPIC_BASE_URL") or None),
                settings=_no_sdk_retries(),
            )
        config = self.providers.get(prefix)
        if config is None:
            known = ", ".join(BUILTIN_PREFIXES + tuple(sorted(self.providers)))
            raise InvalidArgument(
                f"model ref {ref!r}: no provider {prefix!r} (known: {known}); add a [providers.{prefix}] section "
                "with base_url (and api_key_env) to agentwatch.toml"
            )
        key = None
        if config.api_key_env is not None:
            key = self.env.get(config.api_key_env) or None
            if key is None:
                raise InvalidArgument(
                    f"model ref {ref!r} needs {config.api_key_env} (the api_key_env of [providers.{prefix}]); "
                    "set it in the environment"
                )
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai_compatible import OpenAICompatibleProvider

        return OpenAIChatModel(
            name,
            provider=OpenAICompatibleProvider(prefix, base_url=config.base_url, api_key=key),
            settings=_no_sdk_retries(),
        )

    async def aclose(self) -> None:
        """Close the HTTP connections of the models resolved so far (they open new ones if used again)."""
        self._histories.clear()
        models, self._cache = list(self._cache.values()), {}
        for model in models:
            # Entering and leaving a model is pydantic-ai's way to close the HTTP client its provider owns.
            await model.__aenter__()
            await model.__aexit__(None, None, None)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"ModelResolver(providers={sorted(self.providers)!r})"


class _Histories:
    """The parsed messages of recent conversations, so a turn parses only the messages added since the last.

    A conversation's stored messages never change once written (clearing or compacting starts a new
    conversation), so the first `n` messages parsed for it stay right for as long as the store holds at least
    `n`. The least recently used conversations are forgotten beyond `limit`.
    """

    def __init__(self, limit: int = 64) -> None:
        self.limit = limit
        self._parsed: OrderedDict[str, list[ModelMessage]] = OrderedDict()

    def get(self, conversation_id: str) -> list[ModelMessage] | None:
        parsed = self._parsed.get(conversation_id)
        if parsed is not None:
            self._parsed.move_to_end(conversation_id)
        return parsed

    def put(self, conversation_id: str, messages: list[ModelMessage]) -> None:
        self._parsed[conversation_id] = messages
        self._parsed.move_to_end(conversation_id)
        while len(self._parsed) > self.limit:
            self._parsed.popitem(last=False)

    def clear(self) -> None:
        self._parsed.clear()

    def __len__(self) -> int:
        return len(self._parsed)

    def __repr__(self) -> str:
        return f"_Histories({len(self._parsed)} conversations)"
