"""Model refs: the `<prefix>:<model>` strings roles name their model with, and the models they resolve to.

| ref | model |
|---|---|
| `openai:<model>`, `openai-responses:<model>` | OpenAI's Responses API |
| `openai-chat:<model>` | OpenAI's Chat Completions API; with `OPENAI_BASE_URL`, any OpenAI-compatible server |
| `anthropic:<model>` | Anthropic's Messages API |
| `<provider>:<model>` | `[providers.<provider>]` of `agentwatch.toml`: OpenAI-compatible chat at its `base_url` |
| `scripted:<name>`, or `<name>` alone | the `ScriptedModel` given to the resolver as `models={name: ...}` (or, for
`scripted:<name>`, one registered with `register_scripted_model`) |

A bare short name is a **model alias**: `sonnet`, `opus` and `haiku` are built in (`MODEL_ALIASES`, the names
Claude Code's subagent files use), and `[models] aliases` of `agentwatch.toml` adds or overrides others
(`fast = "local:llama3.1"`, `inherit = "openai:gpt-4o"` for Claude Code's `model: inherit`). An alias maps to one
ref; the roster writes the ref in place of the alias when it loads a definition.

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
from collections.abc import Collection, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Self

from agentwatch.errors import InvalidArgument
from agentwatch.runtime.models._types import RetryPolicy
from agentwatch.runtime.models.scripted import ScriptedModel, registered_scripted_model

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage
    from pydantic_ai.models import Model
    from pydantic_ai.settings import ModelSettings

    from agentwatch.config import Config, ProviderConfig

__all__ = [
    "BUILTIN_PREFIXES",
    "KNOWN_CONTEXT_WINDOWS",
    "MODEL_ALIASES",
    "ModelResolver",
    "known_context_window",
    "not_a_model_ref",
    "retry_policy_from_env",
    "split_chain",
    "split_ref",
]

BUILTIN_PREFIXES = ("openai", "openai-chat", "openai-responses", "anthropic", "scripted")
"""Prefixes that need no configuration; a `[providers.x]` section cannot take these names."""

MODEL_ALIASES: Mapping[str, str] = MappingProxyType(
    {
        "sonnet": "anthropic:claude-sonnet-4-5",
        "opus": "anthropic:claude-opus-4-5",
        "haiku": "anthropic:claude-haiku-4-5",
    }
)
"""The built-in model aliases (Claude Code's `model: sonnet | opus | haiku`); `[models] aliases` extends them."""

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


def not_a_model_ref(ref: str, aliases: Collection[str]) -> str:
    """What to do about `ref`, which is neither `<provider>:<model>` nor one of `aliases`."""
    if ref == "inherit":
        return (
            "'inherit' (Claude Code's \"the main conversation's model\") means nothing here until agentwatch.toml "
            'says which model it is: add inherit = "<provider>:<model>" to [models] aliases'
        )
    known = ", ".join(sorted(aliases))
    if not ref.strip():
        return f"the model is blank; write it as <provider>:<model>, e.g. 'openai:gpt-4o', or a model alias ({known})"
    # An alias can be made only of a short name (no ':' or spaces): offer one only for such a name.
    alias = (
        f'; add one as {ref} = "<provider>:<model>" to [models] aliases in agentwatch.toml'
        if ":" not in ref and " " not in ref.strip()
        else ""
    )
    return (
        f"{ref!r} is not a model ref; write it as <provider>:<model>, e.g. 'openai:gpt-4o', or use a model alias "
        f"({known}{alias})"
    )


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
    ModelResolver(aliases={"fast": "local:llama3.1"}).expand("fast")                  # 'local:llama3.1'
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
        aliases: Mapping[str, str] | None = None,
    ) -> None:
        """`providers` are the `[providers.x]` sections; `env` defaults to `os.environ`; `models` are model
        objects by name or ref (see the module docs), looked up before anything else; `scripted` is the older
        name of `models`; `retry` is how failed requests are tried again (by default from the `AGENTWATCH_MODEL_*`
        variables of `env`, see `retry_policy_from_env`); `aliases` are `[models] aliases`, over `MODEL_ALIASES`."""
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
        self.aliases: Mapping[str, str] = {**MODEL_ALIASES, **(aliases or {})}
        """Model aliases by short name: the built-in ones and the project's."""
        self._cache: dict[str, Model] = {}
        # The conversations the models adapter parsed, kept between turns (see `TurnInput.conversation_id`).
        self._histories = _Histories()

    @classmethod
    def from_config(
        cls, config: Config, env: Mapping[str, str] | None = None, *, models: Mapping[str, ScriptedModel] | None = None
    ) -> ModelResolver:
        """The resolver of a project: its `[providers.x]` sections and `[models] aliases`."""
        return cls(config.providers, env, models=models, aliases=config.models.aliases)

    def check(self, ref: str) -> None:
        """Raise InvalidArgument, saying what to do, when `ref` (or a ref of its chain) cannot be resolved."""
        for one in split_chain(ref):
            if self._given(one) is None:
                self._model(one)

    def expand(self, ref: str) -> str:
        """`ref` with each alias of its chain replaced by the ref it stands for (a model given to this resolver
        under the alias's own name stays as it is)."""
        return ", ".join(self._expand_one(one) for one in split_chain(ref))

    def _expand_one(self, ref: str) -> str:
        if ":" in ref or ref in self.models:
            return ref
        return self.aliases.get(ref, ref)

    def unresolved(self, ref: str) -> str | None:
        """Why `ref` (or a ref of its chain) cannot be resolved in any environment, saying what to do: not a ref,
        an unknown alias or provider, a scripted model neither given nor registered. None when it can be (a key
        it needs may still be missing: `missing_variables`). Builds no model and imports no model layer."""
        for one in split_chain(ref):
            reason = self._unresolved_one(one)
            if reason is not None:
                return reason
        return None

    def _unresolved_one(self, ref: str) -> str | None:
        if self._given(ref) is not None:
            return None
        expanded = self._expand_one(ref)
        if ":" not in expanded:
            return not_a_model_ref(ref, self.aliases)
        if self._given(expanded) is not None:
            return None
        try:
            prefix, name = split_ref(expanded)
        except InvalidArgument as exc:
            return exc.message
        if prefix == "scripted":
            return None if registered_scripted_model(name) is not None else _no_scripted(expanded, name)
        if prefix in BUILTIN_PREFIXES or prefix in self.providers:
            return None
        return _no_provider(expanded, prefix, self.providers)

    def missing_variables(self, ref: str) -> tuple[str, ...]:
        """The environment variables a model of `ref`'s chain needs that are not set in this resolver's
        environment (`OPENAI_API_KEY` unless `OPENAI_BASE_URL` is set, `ANTHROPIC_API_KEY`, a provider's
        `api_key_env`); empty for refs that need none or cannot be resolved anyway."""
        missing: list[str] = []
        for one in split_chain(ref):
            if self._given(one) is not None or self._unresolved_one(one) is not None:
                continue
            expanded = self._expand_one(one)
            if self._given(expanded) is not None:
                continue
            variable = self._missing_variable(*split_ref(expanded))
            if variable is not None and variable not in missing:
                missing.append(variable)
        return tuple(missing)

    def _missing_variable(self, prefix: str, name: str) -> str | None:
        if prefix in ("openai", "openai-responses", "openai-chat"):
            unset = not self.env.get("OPENAI_API_KEY") and not self.env.get("OPENAI_BASE_URL")
            return "OPENAI_API_KEY" if unset else None
        if prefix == "anthropic":
            return None if self.env.get("ANTHROPIC_API_KEY") else "ANTHROPIC_API_KEY"
        config = self.providers.get(prefix)
        if config is not None and config.api_key_env is not None and not self.env.get(config.api_key_env):
            return config.api_key_env
        return None

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
        expanded = self._expand_one(ref)
        if expanded != ref:
            return self._model(expanded)
        if ":" not in ref:
            raise InvalidArgument(self._unresolved_one(ref) or f"model ref {ref!r} does not resolve")
        prefix, name = split_ref(ref)
        if prefix == "scripted":
            scripted = registered_scripted_model(name)
            if scripted is None:
                raise InvalidArgument(_no_scripted(ref, name))
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
            raise InvalidArgument(_no_provider(ref, prefix, self.providers))
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


def _no_scripted(ref: str, name: str) -> str:
    return (
        f"no scripted model {name!r} (model ref {ref!r}) was given or registered; pass it as "
        f"Engine.open(models={{{name!r}: ScriptedModel(...)}}) (or call "
        f"register_scripted_model({name!r}, ScriptedModel(...)) first)"
    )


def _no_provider(ref: str, prefix: str, providers: Mapping[str, ProviderConfig]) -> str:
    known = ", ".join(BUILTIN_PREFIXES + tuple(sorted(providers)))
    return (
        f"model ref {ref!r}: no provider {prefix!r} (known: {known}); add a [providers.{prefix}] section "
        "with base_url (and api_key_env) to agentwatch.toml"
    )


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
