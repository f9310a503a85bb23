"""Silver and maintenance survive a kill: `build_silver`, `rebuild_silver` and `maintain` killed with SIGKILL at
random moments, KILLS times each, then one run to completion: silver equals, row for row, what one clean decode
of bronze gives, bronze holds every produced record once, gold and history equal the upstream database, and no
landing branch is left behind.

The first silver kills come inside `ticdc-lake run`, a seeded delay after its landing said what it landed (so each
dies decoding a new slice of the stream, or early in gold); the later ones inside `ticdc-lake rebuild silver`,
which clears the source's silver and decodes all of bronze again. After each comes `ticdc-lake maintain`, killed
while it compacts, expires to one snapshot and removes orphans of every table. The clean decode to compare with is
`rebuild_silver` in the checking process, after the killed lakehouse's silver was read.
"""

from __future__ import annotations

import dataclasses
import random
import sys

import pytest

from spark_jobs.config import MaintenanceSettings, load_config
from spark_jobs.maintenance import stale_landing_branches
from spark_jobs.runtime.spark_session import get_spark
from spark_jobs.runtime.tables import BRONZE_MESSAGES
from spark_jobs.silver.build import rebuild_silver
from tests.e2e.kill import KILLS, Moments, check_in_own_process, own_runtime, run, slices, stderr_shows
from tests.e2e.test_gold_oracle import assert_gold_is_upstream, assert_history_is_upstream
from tests.e2e.test_rebuild import silver_of_source
from ticdc_devkit.broker import produce
from ticdc_devkit.simulator.workload import Workload, random_workload

pytestmark = [pytest.mark.e2e, pytest.mark.long]

SOURCE, SEED = "killed_silver", 20261125
SLICES = 3  # runs that bring new changes; the other silver kills interrupt rebuilds
SILVER_WINDOW_SECONDS = 20.0  # about how long a silver run (or a rebuild, after its session is ready) takes here
MAINTENANCE_WINDOW_SECONDS = 30.0  # about how long maintenance of every table takes here
EVERY_SNAPSHOT_EXPIRED = MaintenanceSettings(snapshot_retention_days=0, retain_last=1, orphan_age_hours=0)


def kill_workload() -> Workload:
    return random_workload(SEED, tables=3, changes=50, protocol="canal-json")


def test_silver_and_maintenance_killed_at_random_moments_then_rerun_equal_a_clean_run(
    broker, source_config, config_file, tmp_path
):
    rng = random.Random(SEED)
    runtime = own_runtime(tmp_path / "lake")
    config = dataclasses.replace(
        source_config(SOURCE, "canal-json", runtime=runtime), maintenance=EVERY_SNAPSHOT_EXPIRED
    )
    config_path = config_file(config, tmp_path / "pipeline.yaml")
    broker.create_topics([SOURCE], partitions=1)
    batches = slices(kill_workload(), SLICES, rng, SOURCE)
    on_source = ["--source", SOURCE, "--config", str(config_path)]
    silver_outcomes, maintenance_outcomes = [], []
    silver_moments = Moments(rng, KILLS, SILVER_WINDOW_SECONDS)
    maintenance_moments = Moments(rng, KILLS, MAINTENANCE_WINDOW_SECONDS)
    for i in range(KILLS):
        log = tmp_path / f"silver-{i}.log"
        if i < SLICES:
            produce(broker.bootstrap, batches[i])
            command, began = ["run"], stderr_shows(log, f"source {SOURCE}: landed")
        else:
            command, began = ["rebuild", "silver"], stderr_shows(log, "spark session ready")
        silver_outcomes.append(run([*command, *on_source], log, began, silver_moments))
        log = tmp_path / f"maintain-{i}.log"
        began = stderr_shows(log, "spark session ready")
        maintenance_outcomes.append(run(["maintain", *on_source], log, began, maintenance_moments))
    for outcomes in (silver_outcomes, maintenance_outcomes):
        assert outcomes.count("killed") >= KILLS // 2, f"too few runs were killed to mean anything: {outcomes}"
    assert run(["run", *on_source], tmp_path / "rerun.log") == "finished"
    produced = sum(len(batch) for batch in batches)
    check_in_own_process("tests.e2e.test_silver_and_maintenance_kill", str(config_path), str(produced))


def check(config_path: str, produced: str) -> None:
    """Bronze holds each produced record once, gold and history equal the oracle, silver equals a clean decode."""
    config = load_config(config_path)
    spark = get_spark(config)
    landed = spark.sql(
        f"SELECT count(*), count(DISTINCT `partition`, `offset`) FROM {BRONZE_MESSAGES} WHERE source = :source",
        args={"source": SOURCE},
    ).collect()[0]
    assert tuple(landed) == (int(produced), int(produced)), f"bronze holds {tuple(landed)}, produced {produced}"
    assert stale_landing_branches(spark) == [], "a landing branch was left behind"
    workload = kill_workload()
    assert_gold_is_upstream(spark, SOURCE, workload, workload.consistent_ts)
    stamps = sorted({e.commit_ts for e in workload.events if hasattr(e, "commit_ts")})
    assert_history_is_upstream(spark, SOURCE, workload, workload.consistent_ts, stamps)
    after_kills = silver_of_source(spark, SOURCE)
    assert after_kills["silver.row_changes"], "silver is empty"
    rebuild_silver(spark, config, SOURCE)
    clean = silver_of_source(spark, SOURCE)
    for table, rows in clean.items():
        assert after_kills[table] == rows, f"{table} after the kills differs from a clean decode of bronze"
    spark.stop()


if __name__ == "__main__":
    check(sys.argv[1], sys.argv[2])
