"""`agentwatch serve` and `agentwatch mcp`: the engine as a service, and its tools as an MCP server."""

from __future__ import annotations

import click

from agentwatch.cli._common import MINUTES, existing_store, resolve_config, run_async, setup_option, store_option
from agentwatch.errors import MissingDependency

__all__ = ["mcp", "serve"]

_EXTRA = "the service needs its extra: pip install 'agentwatch[service]'"


@click.command(short_help="Run the engine as a service: HTTP tools, live attach and MCP.")
@click.option("--host", default=None, help="Address to bind (default: [server] bind, then 127.0.0.1).")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Port to listen on (default: [server] bind, then 8765; 0 = any).",
)
@store_option
@click.option(
    "--deploy-hold-minutes",
    type=MINUTES,
    default=None,
    help=(
        "On SIGTERM, how long running turns may go on before they are cut off (default: [server] "
        "deploy_hold_minutes or $AGENTWATCH_DEPLOY_HOLD_MINUTES, then 60; 0 = do not wait)."
    ),
)
@setup_option
def serve(
    host: str | None, port: int | None, store_url: str | None, deploy_hold_minutes: float | None, setup: str | None
) -> None:
    """Run the engine as a service: turns, observers and held requests keep running, and the tools are served
    over HTTP, WebSocket/SSE attach and MCP. While it runs, the other commands on this machine find it (through
    a file beside the store that it removes when it stops) and go through it: `run` hands sessions to it and
    `tail -f` attaches to its live stream. It ticks the heartbeats `[heartbeats]` in agentwatch.toml declares,
    and serves a dashboard at its address and Prometheus metrics at /metrics. With AGENTWATCH_TRACING=1 it sends
    OpenTelemetry spans of every turn (OTLP, as the OTEL_* variables say); with AGENTWATCH_NOTIFY_WEBHOOK it tells
    that webhook each time an agent waits on a person (and, as AGENTWATCH_NOTIFY_ON says, each observer report and
    failed turn).

    \b
    A host that is not loopback (localhost, 127.0.0.0/8, ::1) needs a token: AGENTWATCH_TOKEN (or one is
    generated and printed); AGENTWATCH_READ_TOKEN may call only the read tools. SIGTERM drains: no new turn starts and
    running turns go on for up to --deploy-hold-minutes; a second SIGTERM stops at once (send it once the first
    was received: the system merges two SIGTERMs sent in the same instant; a SIGINT after it is never merged).

    \b
    Examples:
      agentwatch serve                                  http://127.0.0.1:8765
      agentwatch serve --setup myproject.agents:setup   with your own tools and policies
      AGENTWATCH_TOKEN=s3cret agentwatch serve --host 0.0.0.0 --port 9000
      curl -X POST localhost:8765/api/tools/agent_list -H 'content-type: application/json' -d '{}'
    """
    try:
        from agentwatch.service.server import serve as run_service
    except ImportError as exc:
        raise MissingDependency(f"{_EXTRA} ({exc.name} is missing)") from None
    from agentwatch.runtime.setup import load_setup

    config = resolve_config(store_url, setup=setup)
    run_async(
        run_service(
            host=host or config.server.host,
            port=port if port is not None else config.server.port,
            config=config,
            hold_minutes=deploy_hold_minutes,
            engine_args=load_setup(config),
        )
    )


@click.command(short_help="Serve the tools as an MCP server on stdin/stdout.")
@store_option
@click.option(
    "--read-only", is_flag=True, help="Offer only the read tools (and agent_await); run no turn, create no store."
)
@setup_option
def mcp(store_url: str | None, read_only: bool, setup: str | None) -> None:
    """Serve the tools as an MCP server on stdin/stdout (for an MCP client that starts it).

    \b
    Every read tool and the drive tools, with the same names and JSON schemas as `engine.call_tool`. The
    engine runs inside this process while the client is connected; `agentwatch serve` offers the same
    server over HTTP at /mcp.

    \b
    Examples:
      agentwatch mcp --read-only
      {"command": "agentwatch", "args": ["mcp", "--store", "sqlite:///.agentwatch/agentwatch.db"]}
    (the second in an MCP client's configuration)
    """
    try:
        from agentwatch.service.stdio import run_mcp_stdio
    except ImportError as exc:
        raise MissingDependency(f"{_EXTRA} ({exc.name} is missing)") from None
    from agentwatch.runtime.setup import load_setup

    config = resolve_config(store_url, setup=setup)
    if read_only:
        existing_store(config.store)  # a reader's server creates no store
    run_async(run_mcp_stdio(config, read_only=read_only, **load_setup(config)))
