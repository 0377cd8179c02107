"""`python -m bench` runs end to end in its tiny size and writes well-formed results.

Timing is never asserted here: the figures of a tiny run mean nothing, and timing belongs in `bench/`. The
benchmarks run in a subprocess from the repository root, the way `make bench` runs them (and so that the
`bench` package is the repository's, whatever pytest puts on `sys.path`).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]
SQLITE_AND_MEMORY = (
    "store.append.sqlite",
    "store.tail.sqlite",
    "store.list.sqlite",
    "reads.list",
    "reads.tail",
    "reads.summary",
    "live.memory",
    "engine.turn",
    "engine.history",
    "engine.long_chat",
    "engine.memory",
    "engine.concurrent",
    "start",
)
# The headline figures, each named so that it can be found in latest.json.
HEADLINE_FIGURES = (
    "engine.turn.full.p50",
    "engine.turn.full.cpu_p50",
    "engine.turn.normal.p50",
    "engine.turn.floor.p50",
    "engine.turn.full_over_floor.p50",
    "engine.turn.commits",
    "engine.turn.sqlite_commits",
    "engine.turn.db_growth",
    "engine.concurrent.sqlite.max_stall",
    "start.import_engine",
    "start.cli_help",
    "reads.list.first_page.p50",
    "reads.tail.p50",
)
RESULT_KEYS = {"name", "unit", "value", "baseline", "ratio", "target"}


def run_bench(*args: str, module: str = "bench") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def tiny_run(tmp_path: Path, benchmarks: tuple[str, ...], *options: str) -> tuple[Any, str]:
    """Run `benchmarks` in the tiny size; their results, after checking that the run failed and skipped none
    and that each benchmark produced a figure; and what the run printed."""
    output = tmp_path / "results" / "latest.json"
    completed = run_bench(
        "--size",
        "tiny",
        "--only",
        *benchmarks,
        *options,
        "--output",
        str(output),
        "--cache-dir",
        str(tmp_path / "cache"),
    )

    assert completed.returncode == 0, completed.stdout + completed.stderr
    results = json.loads(output.read_text())
    run = json.loads((output.parent / "latest.run.json").read_text())
    assert run["size"] == "tiny"
    assert run["failed"] == []
    assert run["skipped"] == []
    assert isinstance(results, list)
    names = [entry["name"] for entry in results]
    for benchmark in benchmarks:
        assert any(name.startswith(f"{benchmark}.") for name in names), f"{benchmark} produced no figure"
    return results, completed.stdout


def test_tiny_run_writes_well_formed_results(tmp_path: Path) -> None:
    results, printed = tiny_run(tmp_path, SQLITE_AND_MEMORY)
    names = [entry["name"] for entry in results]
    assert len(names) == len(set(names))
    for figure in HEADLINE_FIGURES:
        assert figure in names
    assert any(name.startswith("engine.history.turn") for name in names)
    assert any(name.startswith("engine.long_chat.turn") for name in names)
    # The concurrent append has its floor beside it (named by the size's number of sessions), on new sessions
    # and on sessions with a history.
    concurrent = [n for n in names if n.startswith("store.append.sqlite.") and n.endswith(("_sessions", ".history"))]
    assert len(concurrent) == 2 and all(f"{n}.floor" in names for n in concurrent)
    # The fsync setting a turn figure ran with is named in its note.
    notes = {entry["name"]: entry["note"] for entry in results}
    assert "synchronous=FULL" in notes["engine.turn.full.p50"]
    assert "synchronous=NORMAL" in notes["engine.turn.normal.p50"]
    assert "synchronous=FULL" in notes["engine.turn.floor.p50"]
    for entry in results:
        assert entry.keys() >= RESULT_KEYS, entry
        assert isinstance(entry["name"], str) and isinstance(entry["unit"], str) and entry["unit"]
        assert all(is_number(entry[key]) for key in ("value", "baseline", "ratio")), entry
        assert entry["target"] is None or isinstance(entry["target"], str)
        assert entry["better"] in ("higher", "lower")
        assert entry["met"] in (None, True, False)
    # Every figure is printed in the table too.
    for name in names:
        assert name in printed


@pytest.mark.postgres
def test_tiny_run_on_postgresql_writes_its_figures(tmp_path: Path, postgres_url: str) -> None:
    # The PostgreSQL figures build on the SQLite ones (`reads.postgres` copies their cached databases' rows), so
    # a change of SQLite's schema can break them: a run of both catches it.
    tiny_run(tmp_path, ("store.append.postgres", "reads.postgres"), "--postgres", postgres_url)


def test_unknown_benchmark_is_refused_with_the_known_names(tmp_path: Path) -> None:
    completed = run_bench("--only", "store.nonsense", "--output", str(tmp_path / "latest.json"))

    assert completed.returncode == 2
    assert "no benchmark named 'store.nonsense'" in completed.stderr
    assert "store.append.sqlite" in completed.stderr
    assert not (tmp_path / "latest.json").exists()


def test_a_figure_no_benchmark_measures_any_more_is_dropped_from_the_results(tmp_path: Path) -> None:
    output = tmp_path / "latest.json"
    kept = {"name": "store.tail.sqlite.p50", "unit": "ms", "value": 1.0, "baseline": 1.0, "ratio": 1.0}
    retired = {"name": "engine.turn.sqlite.p50", "unit": "ms", "value": 1.0, "baseline": 1.0, "ratio": 1.0}
    output.write_text(json.dumps([kept, retired]))

    completed = run_bench("--size", "tiny", "--only", "live.memory", "--output", str(output))

    assert completed.returncode == 0, completed.stdout + completed.stderr
    names = [entry["name"] for entry in json.loads(output.read_text())]
    assert "store.tail.sqlite.p50" in names
    assert "engine.turn.sqlite.p50" not in names
    assert "live.memory.p50" in names


def test_profile_reports_where_a_turn_goes(tmp_path: Path) -> None:
    output = tmp_path / "profile.md"

    completed = run_bench("--turns", "1", "--output", str(output), module="bench.profile")

    assert completed.returncode == 0, completed.stdout + completed.stderr
    text = output.read_text()
    assert "synchronous=FULL" in text
    assert "`store.write` calls" in text
    assert "top 25 by cumulative" in text
    assert "bare pydantic-ai turn: own time by module" in text
