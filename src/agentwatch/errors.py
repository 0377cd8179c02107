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
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

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
    "ToolError",
    "UserError",
    "did_you_mean",
]


class AgentwatchError(Exception):
    """Base of every error agentwatch raises on purpose."""

    code: ClassVar[str] = "error"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details
        """Extra structured facts for the caller (for `ambiguous`: the candidates)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _BY_CODE.setdefault(cls.code, cls)  # the first class of a code is the one it names

    def to_dict(self) -> dict[str, Any]:
        """The structured form tools, the API and `--json` return."""
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            error["details"] = self.details
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
        details = error.get("details")
        return cls(str(error.get("message", code)), **(details if isinstance(details, Mapping) else {}))


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
