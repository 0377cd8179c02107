"""A small fake of OpenAI's chat-completions API on 127.0.0.1, for tests that go through real HTTP.

It plays a weather conversation: a request whose last message is not a tool result gets reasoning, then a
call of `get_weather(city="Paris")`; a request that ends with a tool result gets the text
`The weather is <result>.` Both JSON and SSE streaming (`stream=true`, with the usage chunk asked for by
`stream_options.include_usage`) are spoken. Every request body is kept in `requests`.

```python
with FakeOpenAI() as server:
    env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-test"}
```
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

__all__ = ["FakeOpenAI"]

USAGE = {
    "prompt_tokens": 33,
    "completion_tokens": 11,
    "total_tokens": 44,
    "prompt_tokens_details": {"cached_tokens": 8},
    "completion_tokens_details": {"reasoning_tokens": 5},
}


class FakeOpenAI:
    """The fake server; use it as a context manager (it binds a free port and serves on a thread)."""

    def __init__(
        self,
        *,
        fail_status: int | None = None,
        fail_times: int | None = None,
        retry_after: float | None = None,
        stream_error: str | None = None,
        call_arguments: str = '{"city": "Paris"}',
    ) -> None:
        """`fail_status` makes requests fail with that HTTP status (an error body as OpenAI sends it): every one,
        or only the first `fail_times`; `retry_after` (seconds) adds a `retry-after-ms` header to those failures.
        `stream_error` (an error type, `server_error`) fails them instead after the stream opened: status 200, then
        an error as the stream's first event. `call_arguments` is the JSON text of the `get_weather` call's
        arguments, as sent (something that is not JSON, to see what a model's malformed call does)."""
        self.call_arguments = call_arguments
        self.stream_error = stream_error
        self.fail_status = fail_status
        self.fail_times = fail_times
        self.retry_after = retry_after
        self.requests: list[dict[str, Any]] = []
        """Each request: `path`, `body` (the JSON sent) and `authorization` (the header)."""
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-openai", daemon=True)

    @property
    def base_url(self) -> str:
        """The URL to give as `OPENAI_BASE_URL` or a provider's `base_url`."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def _reply(body: dict[str, Any]) -> tuple[str, str | None]:
    """What the fake answers: ("tool", None) or ("text", the text)."""
    messages = body.get("messages") or [{}]
    last = messages[-1]
    if last.get("role") == "tool":
        return "text", f"The weather is {last.get('content')}."
    return "tool", None


def _handler(fake: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet: pytest shows stderr on failure only
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", 0))
            body = json.loads(self.rfile.read(length) or b"{}")
            fake.requests.append({"path": self.path, "body": body, "authorization": self.headers.get("authorization")})
            failing = fake.fail_times is None or len(fake.requests) <= fake.fail_times
            if fake.stream_error is not None and failing:
                self._stream_error(fake.stream_error)
                return
            if fake.fail_status is not None and failing:
                error = {"error": {"message": "the fake is failing on purpose", "type": "server_error", "code": None}}
                wait = fake.retry_after
                headers = {} if wait is None else {"retry-after-ms": str(round(wait * 1000))}
                self._send_json(fake.fail_status, error, headers)
                return
            if not self.path.endswith("/chat/completions"):
                self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                return
            kind, text = _reply(body)
            if body.get("stream"):
                self._stream(body, kind, text)
            else:
                self._complete(body, kind, text)

        def _send_json(self, status: int, value: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(value).encode()
            self.send_response(status)
            for name, header in (headers or {}).items():
                self.send_header(name, header)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _stream_error(self, kind: str) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("connection", "close")
            self.end_headers()
            error = {"error": {"message": "the fake failed in its stream", "type": kind, "code": kind}}
            self.wfile.write(b"data: " + json.dumps(error).encode() + b"\n\n")
            self.wfile.flush()
            self.close_connection = True

        def _complete(self, body: dict[str, Any], kind: str, text: str | None) -> None:
            if kind == "tool":
                call = {
                    "id": "call_abc",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": fake.call_arguments},
                }
                message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call]}
                finish = "tool_calls"
            else:
                message, finish = {"role": "assistant", "content": text}, "stop"
            self._send_json(
                200,
                {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body["model"],
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": USAGE,
                },
            )

        def _stream(self, body: dict[str, Any], kind: str, text: str | None) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            self.send_header("connection", "close")
            self.end_headers()
            created = int(time.time())

            def chunk(delta: dict[str, Any], finish: str | None = None, usage: dict[str, Any] | None = None) -> None:
                event: dict[str, Any] = {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": body["model"],
                    "choices": [] if usage is not None else [{"index": 0, "delta": delta, "finish_reason": finish}],
                }
                if usage is not None:
                    event["usage"] = usage
                self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
                self.wfile.flush()

            chunk({"role": "assistant", "content": None})
            if kind == "tool":
                chunk({"reasoning_content": "The user wants the weather; "})
                chunk({"reasoning_content": "call the tool."})
                first = {
                    "index": 0,
                    "id": "call_xyz",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": ""},
                }
                chunk({"tool_calls": [first]})
                arguments, half = fake.call_arguments, len(fake.call_arguments) // 2
                for piece in (arguments[:half], arguments[half:]):
                    chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
                chunk({}, finish="tool_calls")
            else:
                assert text is not None
                for piece in ("The weather ", "is ", text.removeprefix("The weather is ")):
                    chunk({"content": piece})
                chunk({}, finish="stop")
            if (body.get("stream_options") or {}).get("include_usage"):
                chunk({}, usage=USAGE)
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            self.close_connection = True

    return Handler
