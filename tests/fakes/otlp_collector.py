"""A small OTLP/HTTP trace receiver on 127.0.0.1, for tests whose spans go over the real protocol: it decodes
each export (protobuf, as OpenTelemetry's exporter sends it) and keeps its spans' service and name.

```python
collector = OtlpCollector()
env = {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.url}
...
collector.close()
```
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["OtlpCollector"]


class OtlpCollector:
    """An OTLP/HTTP trace receiver on 127.0.0.1: keeps the spans of every export it is sent."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
            ExportTraceServiceResponse,
        )

        self.spans: list[tuple[str, str]] = []  # (service name, span name)
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                for resource_spans in request.resource_spans:
                    service = next(
                        a.value.string_value for a in resource_spans.resource.attributes if a.key == "service.name"
                    )
                    for scope_spans in resource_spans.scope_spans:
                        collector.spans += [(service, span.name) for span in scope_spans.spans]
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200 if self.path == "/v1/traces" else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
