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
    "engine.memory",
    "engine.concurrent",
)
RESULT_KEYS = {"name", "unit", "value", "baseline", "ratio", "target"}


def run_bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench", *args],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def test_tiny_run_writes_well_formed_results(tmp_path: Path) -> None:
    output = tmp_path / "results" / "latest.json"
    completed = run_bench(
        "--size",
        "tiny",
        "--only",
        *SQLITE_AND_MEMORY,
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
    assert len(names) == len(set(names))
    for benchmark in SQLITE_AND_MEMORY:
        assert any(name.startswith(f"{benchmark}.") for name in names), f"{benchmark} produced no figure"
    for entry in results:
        assert entry.keys() >= RESULT_KEYS, entry
        assert isinstance(entry["name"], str) and isinstance(entry["unit"], str) and entry["unit"]
        assert all(is_number(entry[key]) for key in ("value", "baseline", "ratio")), entry
        assert entry["target"] is None or isinstance(entry["target"], str)
        assert entry["better"] in ("higher", "lower")
        assert entry["met"] in (None, True, False)
    # Every figure is printed in the table too.
    for name in names:
        assert name in completed.stdout


def test_unknown_benchmark_is_refused_with_the_known_names(tmp_path: Path) -> None:
    completed = run_bench("--only", "store.nonsense", "--output", str(tmp_path / "latest.json"))

    assert completed.returncode == 2
    assert "no benchmark named 'store.nonsense'" in completed.stderr
    assert "store.append.sqlite" in completed.stderr
    assert not (tmp_path / "latest.json").exists()
