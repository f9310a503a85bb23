"""Gold survives a kill: `build_gold` killed with SIGKILL at random moments, KILLS times, then run to completion:
gold (current state and history) equals the upstream database, and no stale lock, branch or half-written table
blocks the next run.

Each run is a real `ticdc-lake` process (its own Spark JVM) on a lakehouse directory of its own, so a killed JVM
never shares the embedded metastore with this test's. The first runs each land and decode a new slice of the
stream (`ticdc-lake run`), so their gold build has new changes to apply; the later ones rebuild every current-state
or history table from silver (`ticdc-lake rebuild gold|history`), so they die inside `create or replace`, merges and
the publication. The moment comes from the run itself: dbt's log starting to grow starts the gold phase, and
the kill comes a seeded random delay into it. The comparison runs in a process of its own (`python -m
tests.e2e.test_gold_kill CONFIG`), the only one that may open that metastore then.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from spark_jobs.config import load_config
from spark_jobs.runtime.spark_session import get_spark
from tests.e2e.kill import KILLS, Moments, check_in_own_process, own_runtime, run, slices
from tests.e2e.test_gold_oracle import assert_gold_is_upstream, assert_history_is_upstream
from ticdc_devkit.broker import produce
from ticdc_devkit.simulator.workload import Workload, random_workload

pytestmark = [pytest.mark.e2e, pytest.mark.long]

SOURCE, SEED = "killed", 20261124
SLICES = 3  # runs that bring new changes; the other kills interrupt rebuilds
WINDOW_SECONDS = 30.0  # a first guess at how long a gold build of this workload takes (Moments learns it)


def kill_workload() -> Workload:
    return random_workload(SEED, tables=3, changes=50, protocol="canal-json")


def gold_began(config: Path) -> Callable[[], bool]:
    """The start signal of a gold build: dbt's log has grown since the process started."""
    dbt_log = load_config(config).local_dir / "dbt" / "logs" / "dbt.log"
    size = dbt_log.stat().st_size if dbt_log.exists() else 0
    return lambda: dbt_log.exists() and dbt_log.stat().st_size > size


def test_gold_killed_at_random_moments_then_rerun_equals_upstream(broker, source_config, config_file, tmp_path):
    rng = random.Random(SEED)
    workload = kill_workload()
    runtime = own_runtime(tmp_path / "lake")
    config = config_file(source_config(SOURCE, "canal-json", runtime=runtime), tmp_path / "pipeline.yaml")
    broker.create_topics([SOURCE], partitions=1)
    batches = slices(workload, SLICES, rng, SOURCE)
    on_source = ["--source", SOURCE, "--config", str(config)]
    outcomes = []
    gold_moments = Moments(rng, KILLS, WINDOW_SECONDS)
    for i in range(KILLS):
        if i < SLICES:
            produce(broker.bootstrap, batches[i])
        command = ["run"] if i < SLICES else ["rebuild", ("gold", "history")[i % 2]]
        outcomes.append(run([*command, *on_source], tmp_path / f"run-{i}.log", gold_began(config), gold_moments))
    assert outcomes.count("killed") >= KILLS // 2, f"too few gold builds were killed to mean anything: {outcomes}"
    # a killed JVM leaves its Spark scratch (a copy of the jars, 43 MB); each run emptied what the runs before it
    # left, and a run that ends removes its own (`run` returns once the JVM has ended too)
    scratch = tmp_path / "lake" / "spark-tmp"
    left = list(scratch.glob("spark-*/userFiles-*"))  # one a JVM, with its copy of the jars
    assert len(left) == (outcomes[-1] == "killed"), sorted(p.name for p in scratch.iterdir())
    assert run(["run", *on_source], tmp_path / "rerun.log") == "finished"  # its JVM ended, its scratch removed
    assert not list(scratch.glob("spark-*")), sorted(p.name for p in scratch.iterdir())
    check_in_own_process("tests.e2e.test_gold_kill", str(config))


def check_gold(config_path: str) -> None:
    """Gold and history equal the oracle as of the workload's end."""
    spark = get_spark(load_config(config_path))
    workload = kill_workload()
    assert_gold_is_upstream(spark, SOURCE, workload, workload.consistent_ts)
    stamps = sorted({e.commit_ts for e in workload.events if hasattr(e, "commit_ts")})
    assert_history_is_upstream(spark, SOURCE, workload, workload.consistent_ts, stamps)
    spark.stop()


if __name__ == "__main__":
    check_gold(sys.argv[1])
