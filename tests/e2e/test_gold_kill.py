"""Gold survives a kill: `build_gold` killed with SIGKILL at random moments, KILLS times, then run to completion:
gold (current state and history) equals the upstream database, and no stale lock, branch or half-written table
blocks the next run.

Each run is a real `ticdc-lake` process (its own Spark JVM) on a lakehouse directory of its own, so a killed JVM
never shares the embedded metastore with this test's. The first runs each land and decode a new slice of the
stream (`ticdc-lake run`), so their gold build has new changes to apply; the later ones rebuild every table from
silver (`ticdc-lake gold --rebuild`), so they die inside `create or replace`, merges and the publication. The
moment comes from the run itself: dbt's log starting to grow starts the gold phase, and the kill comes a seeded
random delay into it. The comparison runs in a process of its own (`python -m tests.e2e.test_gold_kill CONFIG`),
the only one that may open that metastore then.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spark_jobs.config import RuntimeSettings, SparkSettings, load_config
from spark_jobs.devkit.broker import produce
from spark_jobs.devkit.simulator.model import Message, Watermark
from spark_jobs.devkit.simulator.stream import EXTENSION_OPTIONS, encode_stream
from spark_jobs.devkit.simulator.workload import Workload, random_workload
from spark_jobs.runtime.spark_session import get_spark
from tests.e2e.test_gold_oracle import assert_gold_is_upstream, assert_history_is_upstream

pytestmark = [pytest.mark.e2e, pytest.mark.long]

SOURCE, SEED = "killed", 20261124
KILLS = int(os.environ.get("TICDC_KILL_LOOP_ITERATIONS", "10"))
SLICES = 3  # runs that bring new changes; the other kills interrupt rebuilds
WINDOW_SECONDS = 30.0  # about how long a gold build of this workload takes here
RUN_TIMEOUT_SECONDS = 900.0
BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]


def kill_workload() -> Workload:
    return random_workload(SEED, tables=3, changes=50, protocol="canal-json")


def slices(workload: Workload, count: int, rng: random.Random) -> list[list[Message]]:
    """The stream cut between transactions at `count - 1` random points, each slice ending with a watermark
    (TiCDC sends one every second), so that every run has rows to decode and publish. One partition: the slices
    land in commit order, and only the kills could make the tables differ."""
    events = workload.events
    stamps = [getattr(e, "commit_ts", None) for e in events]
    between = [i for i in range(1, len(events)) if None not in stamps[i - 1 : i + 1] and stamps[i - 1] < stamps[i]]
    cuts = [0, *sorted(rng.sample(between, count - 1)), len(events)]
    return [
        encode_stream(
            "canal-json",
            [*events[start:end], *([Watermark(stamps[end - 1])] if end < len(events) else [])],
            topic=SOURCE,
            options=EXTENSION_OPTIONS["canal-json"],
        )
        for start, end in itertools.pairwise(cuts)
    ]


def run(config: Path, output: Path, command: list[str], delay: float | None = None) -> str:
    """One `ticdc-lake` process; with a delay, killed (with its JVM) `delay` seconds after its gold build began."""
    dbt_log = load_config(config).local_dir / "dbt" / "logs" / "dbt.log"
    dbt_log_size = dbt_log.stat().st_size if dbt_log.exists() else 0
    started, kill_at = time.monotonic(), None
    with output.open("wb") as stderr:
        process = subprocess.Popen(
            [str(BIN / "ticdc-lake"), *command, "--source", SOURCE, "--config", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
        )
    while process.poll() is None:
        now = time.monotonic()
        if delay is not None and kill_at is None and dbt_log.exists() and dbt_log.stat().st_size > dbt_log_size:
            kill_at = now + delay
        if (kill_at is not None and now >= kill_at) or now - started > RUN_TIMEOUT_SECONDS:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            assert kill_at is not None, f"ticdc-lake {command[0]} ran over {RUN_TIMEOUT_SECONDS}s: {output.read_text()}"
            return "killed"
        time.sleep(0.1)
    if process.returncode != 0:
        raise AssertionError(
            f"ticdc-lake {command[0]} failed (exit {process.returncode}): {output.read_text()[-3000:]}"
        )
    return "finished"


def in_own_process(config: str) -> None:
    check = subprocess.run(
        [str(BIN / "python"), "-m", "tests.e2e.test_gold_kill", config], capture_output=True, text=True, cwd=REPO
    )
    assert check.returncode == 0, f"gold after the kills differs from upstream:\n{check.stderr[-5000:]}"


def test_gold_killed_at_random_moments_then_rerun_equals_upstream(broker, source_config, config_file, tmp_path):
    rng = random.Random(SEED)
    workload = kill_workload()
    runtime = RuntimeSettings(
        local_dir=str(tmp_path / "lake"),
        spark=SparkSettings(master="local[2]", driver_memory="1g", shuffle_partitions=2),
    )
    config = config_file(source_config(SOURCE, "canal-json", runtime=runtime), tmp_path / "pipeline.yaml")
    broker.create_topics([SOURCE], partitions=1)
    batches = slices(workload, SLICES, rng)
    outcomes = []
    for i in range(KILLS):
        if i < SLICES:
            produce(broker.bootstrap, batches[i])
        command = ["run"] if i < SLICES else ["gold", "--rebuild"]
        outcomes.append(run(config, tmp_path / f"run-{i}.log", command, rng.uniform(0, WINDOW_SECONDS)))
    assert outcomes.count("killed") >= KILLS // 2, f"too few gold builds were killed to mean anything: {outcomes}"
    assert run(config, tmp_path / "rerun.log", ["run"]) == "finished"
    in_own_process(str(config))


def check_gold(config_path: str) -> None:
    """Gold and history equal the oracle as of the workload's end."""
    spark = get_spark(load_config(config_path))
    workload = kill_workload()
    assert_gold_is_upstream(spark, SOURCE, workload, workload.consistent_ts)
    moments = sorted({e.commit_ts for e in workload.events if hasattr(e, "commit_ts")})
    assert_history_is_upstream(spark, SOURCE, workload, workload.consistent_ts, moments)
    spark.stop()


if __name__ == "__main__":
    check_gold(sys.argv[1])
