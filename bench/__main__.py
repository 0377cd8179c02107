"""`python -m bench [--quick] [--only NAME ...]`: run the benchmarks, print the table, write latest.json."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from bench._harness import SIZES
from bench._suite import BENCHMARKS, render, run_suite, select, write_json

HERE = Path(__file__).resolve().parent
DEFAULT_POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"
DEFAULT_REDIS = "redis://127.0.0.1:6379/15"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmarks of the agentwatch ground floor, each beside a raw baseline measured in the same run.",
    )
    parser.add_argument("--quick", action="store_true", help="smaller runs (under a minute); same as --size quick")
    parser.add_argument(
        "--size",
        choices=sorted(SIZES),
        default=None,
        help="how much work: full (default), quick, or tiny (seconds, for smoke tests; figures mean nothing)",
    )
    parser.add_argument(
        "--only", nargs="+", default=[], metavar="NAME", help="run only these benchmarks (names or prefixes)"
    )
    parser.add_argument(
        "--long",
        action="store_true",
        help="the long-chat figure over 1,000 turns (engine.long_chat; many minutes) instead of 100",
    )
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    parser.add_argument(
        "--output",
        type=Path,
        default=HERE / "results" / "latest.json",
        help="where to write the results (default: bench/results/latest.json)",
    )
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=HERE / ".cache",
        help="where the large read databases are kept between runs (default: bench/.cache)",
    )
    parser.add_argument(
        "--postgres",
        default=os.environ.get("AGENTWATCH_BENCH_POSTGRES", DEFAULT_POSTGRES),
        metavar="URL",
        help=f"PostgreSQL server (a schema is created and dropped in it); default {DEFAULT_POSTGRES}",
    )
    parser.add_argument("--no-postgres", action="store_true", help="skip the PostgreSQL figures")
    parser.add_argument(
        "--redis",
        default=os.environ.get("AGENTWATCH_BENCH_REDIS", DEFAULT_REDIS),
        metavar="URL",
        help=f"Redis server (keys are created and deleted in it); default {DEFAULT_REDIS}",
    )
    parser.add_argument("--no-redis", action="store_true", help="skip the Redis figures")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the selected benchmarks; 0 when all ran or were skipped, 1 when one failed, 2 on bad arguments."""
    parser = _parser()
    args = parser.parse_args(argv)
    # Wide enough for the table when the output is a file or a pipe (rich would assume 80 columns).
    console = Console(width=None if sys.stdout.isatty() else 150)
    if args.list:
        for benchmark in BENCHMARKS:
            console.print(f"{benchmark.name:24} {benchmark.summary}", highlight=False)
        return 0
    if args.quick and args.size not in (None, "quick"):
        parser.error("--quick and --size disagree; give one of them")
    size = args.size or ("quick" if args.quick else "full")
    try:
        benchmarks = select(args.only)
    except ValueError as error:
        parser.error(str(error))
    report = asyncio.run(
        run_suite(
            benchmarks,
            size=size,
            sizes=SIZES[size],
            cache_dir=args.cache_dir,
            postgres_url=None if args.no_postgres else args.postgres,
            redis_url=None if args.no_redis else args.redis,
            console=console,
            long=args.long,
        )
    )
    render(report, console)
    write_json(report, args.output)
    console.print(f"results written to {args.output}", highlight=False)
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
