"""The errors agentwatch raises, each with a stable `code` that tools and the API report.

```
AgentwatchError                  code
├── InvalidArgument              invalid_argument   a bad argument: fix the call
│   └── InvalidCursor            invalid_argument   a cursor that is garbage, tampered with or for another stream
├── NotFound                     not_found          no such session, run, request, ...
├── Ambiguous                    ambiguous          a name that matches several sessions: pass the id
├── Conflict                     conflict           the change clashes with stored state (a name taken, ...)
├── Invalid                      invalid            the stored state cannot answer (a role that no longer resolves)
├── StoreError                   store_error        the store cannot be used
│   ├── StoreUnavailable         store_unavailable  the server cannot be reached
│   ├── NotADatabase             not_a_database     the file is not a database of ours
│   ├── SchemaTooNew             schema_too_new     the database was written by a newer agentwatch
│   └── DamagedRecord            damaged_record     a stored row cannot be read back (edited by hand, ...)
├── MissingDependency            missing_dependency an optional extra is not installed
├── ToolError                    tool_failed        a tool called from outside a turn raised (its own fault)
├── ServiceUnreachable           service_unreachable the service the CLI was pointed at cannot be reached
└── UserError                    user_error         the developer misused the Python API
```

Every error renders as `{"error": {"code": ..., "message": ...}}` through `to_dict()`; the message says
what went wrong, with identifiers in repr form, and what to do about it. `AgentwatchError.from_dict` turns
that form back into the error (a client of the service raises what the engine raised).

What to do is often a call: `Suggestion`, a tool and its arguments, named once where the error is raised. The
message words it as the tool call (`run_list {entity: 'workflow:report'}`), which is what the caller of a tool can
make (an agent over MCP, a program over HTTP, `engine.call_tool`), and `details["suggestions"]` carries it as data,
so that a surface whose caller cannot call tools words it for them: the CLI as the command that makes the call
(`agentwatch runs ls --entity workflow:report`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

__all__ = [
    "AgentwatchError",
    "Ambiguous",
    "Conflict",
    "DamagedRecord",
    "Invalid",
    "InvalidArgument",
    "InvalidCursor",
    "MissingDependency",
    "NotADatabase",
    "NotFound",
    "SchemaTooNew",
    "ServiceUnreachable",
    "StoreError",
    "StoreUnavailable",
    "Suggestion",
    "ToolError",
    "UserError",
    "did_you_mean",
]


@dataclass(frozen=True)
class Suggestion:
    """A call that helps with an error: a tool and its arguments. `str()` words it as the tool call; the error
    lists it in `suggestions`, and in `details["suggestions"]` of its `to_dict()` form (see the module docs)."""

    tool: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    """The tool's arguments, by their names in the tool's schema (JSON values)."""

    def __str__(self) -> str:
        if not self.arguments:
            return self.tool
        shown = ", ".join(f"{name}: {_literal(value)}" for name, value in self.arguments.items())
        return f"{self.tool} {{{shown}}}"

    def to_dict(self) -> dict[str, Any]:
        return {"tool": self.tool, "arguments": dict(self.arguments)}

    @classmethod
    def from_dict(cls, value: object) -> Suggestion | None:
        """The suggestion `to_dict()` gave, or None for anything else (an answer from another version)."""
        if not isinstance(value, Mapping) or not isinstance(value.get("tool"), str):
            return None
        arguments = value.get("arguments")
        return cls(value["tool"], dict(arguments) if isinstance(arguments, Mapping) else {})


def _literal(value: object) -> str:
    """An argument's value as messages show one: text in repr form (as every identifier), the rest as JSON."""
    return repr(value) if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


class AgentwatchError(Exception):
    """Base of every error agentwatch raises on purpose."""

    code: ClassVar[str] = "error"

    def __init__(self, message: str, *, suggest: Iterable[Suggestion] = (), **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details
        """Extra structured facts for the caller (for `ambiguous`: the candidates)."""
        self.suggestions = tuple(suggest)
        """The calls the message suggests, worded in it as `str(suggestion)`; `details.suggestions` in `to_dict()`."""

    def reworded(self, message: str, **details: Any) -> Self:
        """This error (its class and suggestions) with `message` and `details` instead of its own."""
        return type(self)(message, suggest=self.suggestions, **details)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _BY_CODE.setdefault(cls.code, cls)  # the first class of a code is the one it names

    def to_dict(self) -> dict[str, Any]:
        """The structured form tools, the API and `--json` return."""
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        details = self.details
        if self.suggestions:
            details = details | {"suggestions": [suggestion.to_dict() for suggestion in self.suggestions]}
        if details:
            error["details"] = details
        return {"error": error}

    @staticmethod
    def from_dict(answer: Mapping[str, Any]) -> AgentwatchError | None:
        """The error `answer` holds when it is a `to_dict()` form (None for any other answer), as the class of
        its code; a code no class has (a refusal only the service makes: `forbidden`, ...) gets one."""
        error = answer.get("error") if len(answer) == 1 else None
        if not isinstance(error, Mapping):
            return None
        code = str(error.get("code", "error"))
        cls = _BY_CODE.get(code)
        if cls is None:
            cls = type(f"Error_{code}", (AgentwatchError,), {"code": code})
        details = dict(error["details"]) if isinstance(error.get("details"), Mapping) else {}
        listed = details.pop("suggestions", None)
        suggested = (Suggestion.from_dict(item) for item in listed) if isinstance(listed, list) else ()
        return cls(str(error.get("message", code)), suggest=[s for s in suggested if s is not None], **details)


_BY_CODE: dict[str, type[AgentwatchError]] = {"error": AgentwatchError}


class InvalidArgument(AgentwatchError):
    """An argument is missing, of the wrong type or out of range."""

    code = "invalid_argument"


class InvalidCursor(InvalidArgument):
    """A cursor could not be decoded, was altered, or belongs to another stream."""


class NotFound(AgentwatchError):
    """The thing asked for does not exist (or was reaped)."""

    code = "not_found"


class Ambiguous(AgentwatchError):
    """A name resolves to several things; the caller must pass an id."""

    code = "ambiguous"


class Conflict(AgentwatchError):
    """The change clashes with what is stored (a name already taken in its scope, ...)."""

    code = "conflict"


class Invalid(AgentwatchError):
    """The stored state cannot answer the question (for example a role that no longer resolves)."""

    code = "invalid"


class StoreError(AgentwatchError):
    """The store cannot be used."""

    code = "store_error"


class StoreUnavailable(StoreError):
    """The store's server cannot be reached."""

    code = "store_unavailable"


class NotADatabase(StoreError):
    """The store URL points at a file that is not an agentwatch database."""

    code = "not_a_database"


class SchemaTooNew(StoreError):
    """The database was migrated by a newer agentwatch than this one."""

    code = "schema_too_new"


class DamagedRecord(StoreError):
    """A row of the store cannot be read back as the record it holds: text that is not JSON, a payload that no
    longer fits its type, a time that is not one (a row edited by hand, a restore gone wrong). The message names
    the row (its session, an event's seq, the column) and `details` hold the same facts."""

    code = "damaged_record"


class MissingDependency(AgentwatchError):
    """An optional dependency is needed; the message names the extra to install."""

    code = "missing_dependency"


class ToolError(AgentwatchError):
    """A tool called from outside a turn (`engine.call_tool`, HTTP, MCP, the CLI) raised an error of its own."""

    code = "tool_failed"


class UserError(AgentwatchError):
    """The developer misused the Python API."""

    code = "user_error"


class ServiceUnreachable(AgentwatchError):
    """The service named by `--server` (or `AGENTWATCH_SERVER`, or a discovery file) cannot be reached."""

    code = "service_unreachable"


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """` (did you mean 'x'?)` for the candidate nearest to a misspelt `word`, or "" when none is near."""
    import difflib

    close = difflib.get_close_matches(word, list(candidates), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
