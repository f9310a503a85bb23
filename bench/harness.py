"""What every benchmark shares: a fresh lakehouse per measured case, and each case in a child process of its
own (one JVM and one embedded metastore each) whose result comes back as one JSON line on its stdout; the best of
a few timings of work done in the bench's own process."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

ROOT = Path(__file__).resolve().parents[1]
T = TypeVar("T")


def fresh_lake(lake_dir: Path) -> None:
    """Remove the previous run's warehouse, metastore and broker log; keep the relocated Iceberg jars, which take
    a while to build."""
    lake_dir.mkdir(parents=True, exist_ok=True)
    for entry in lake_dir.iterdir():
        if entry.name != "jars":
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()


def run_child(cmd: list[str], result_prefix: str, case: str) -> dict | None:
    """Run one case; its log (stderr) and other output pass through, the line starting with `result_prefix` is
    its result. An interrupted parent stops the child, which stops its broker and Spark. None if it failed."""
    process = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    found, code = None, None
    try:
        for line in process.stdout:
            if line.startswith(result_prefix):
                found = json.loads(line[len(result_prefix) :])
            else:
                sys.stdout.write(line)
        code = process.wait()
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait()
    if found is None:
        print(f"{case}: the run failed (exit code {code}); see the log above", file=sys.stderr)
    return found


def bench_pipeline(sources: list, lake_dir: Path, name: str, driver_memory: str, shuffle_partitions: int = 4):
    """The configuration a benchmark's child runs: the sources given, embedded Spark `local[2]` with its lakehouse
    under `lake_dir`, no console progress bars."""
    from spark_jobs.config import PipelineConfig, RuntimeSettings, SparkSettings

    spark = SparkSettings(
        master="local[2]",
        driver_memory=driver_memory,
        shuffle_partitions=shuffle_partitions,
        conf={"spark.ui.showConsoleProgress": "false"},
    )
    runtime = RuntimeSettings(mode="embedded", local_dir=str(lake_dir), spark=spark)
    return PipelineConfig(sources=sources, runtime=runtime, path=lake_dir / f"{name}.yaml")


def summary_row(
    benchmark: str, case: str, figure: str, floor: str, ratio: float | None, goal: str | None = None
) -> dict:
    """One line of `make bench`'s table: what was measured, against which floor, the ratio and its goal
    (">= 0.5", "<= 1.3"; None: reported, no goal)."""
    return {"benchmark": benchmark, "case": case, "figure": figure, "floor": floor, "ratio": ratio, "goal": goal}


def write_summary(path: str | None, rows: list[dict]) -> None:
    """The summary rows as JSON for `make bench` (bench/all.py); nothing when no path was given."""
    if path:
        Path(path).write_text(json.dumps(rows, indent=1))


def best_of(fn: Callable[[], T], repeats: int = 3) -> tuple[float, T]:
    """The fastest of `repeats` calls, in seconds (what the work costs, less the machine's other load), and what
    the last call returned."""
    return best_of_alternated([fn], repeats)[0]


def best_of_alternated(fns: list[Callable[[], T]], repeats: int = 3) -> list[tuple[float, T]]:
    """`best_of` for work whose times are compared (a codec and its floor): the calls take turns, round after
    round, so that a change in the machine's other load reaches each alike instead of whichever ran then."""
    best = [float("inf")] * len(fns)
    results: dict[int, T] = {}
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            started = time.perf_counter()
            results[i] = fn()
            best[i] = min(best[i], time.perf_counter() - started)
    return [(best[i], results[i]) for i in range(len(fns))]
