"""Embedded mode opens its Derby metastore from one JVM at a time. A Spark step of another process waits for the
process that holds it, saying for whom, and then runs: here a continuous driver of one source holds the lakehouse
while a run of another source starts, and that run then publishes its gold (without the wait, Derby refuses the
second JVM: `XSDB6`). Maintenance does not wait for a continuous driver, which maintains the lakehouse itself.

Both are real `ticdc-lake` processes on a lakehouse of the test's own (never the test session's metastore).
"""

from __future__ import annotations

import dataclasses
import random
import re
import subprocess
import time

import pytest

from spark_jobs.config import MaintenanceSettings
from tests.e2e.kill import BIN, own_runtime, slices, stderr_shows
from ticdc_devkit.broker import produce
from ticdc_devkit.simulator.workload import random_workload

pytestmark = pytest.mark.e2e

HOLDER, WAITER = "held", "waiting"
BATCHES, INTERVAL_SECONDS = 3, 4
SEED, TABLES = 20261130, 2


def test_a_second_process_waits_for_the_embedded_metastore_then_runs(broker, source_config, config_file, tmp_path):
    runtime = own_runtime(tmp_path / "lake")
    held, waiting = source_config(HOLDER, runtime=runtime), source_config(WAITER, runtime=runtime)
    # the driver maintains the lakehouse every few seconds, keeping each table's newest snapshot only
    maintained = MaintenanceSettings(snapshot_retention_days=0, retain_last=1, continuous_every=f"{INTERVAL_SECONDS}s")
    both = dataclasses.replace(held, sources=[*held.sources, *waiting.sources], maintenance=maintained)
    config = config_file(both, tmp_path / "lake.yaml")
    broker.create_topics([HOLDER, WAITER], partitions=1)
    workload = random_workload(SEED, tables=TABLES, changes=20, ddl=False, preexisting=0, protocol="canal-json")
    (stream,) = slices(workload, 1, random.Random(SEED), WAITER)
    produce(broker.bootstrap, stream)
    # the driver's own source changes in its first two batches, so its tables have snapshots to expire
    own = random_workload(SEED + 1, tables=TABLES, changes=20, ddl=False, preexisting=0, protocol="canal-json")
    first_slice, second_slice = slices(own, 2, random.Random(SEED + 1), HOLDER)
    produce(broker.bootstrap, first_slice)
    driver_log = tmp_path / "driver.log"
    with driver_log.open("wb") as stderr:
        driver = subprocess.Popen(
            [
                str(BIN / "ticdc-lake"),
                *("run", "--source", HOLDER, "--config", str(config), "--continuous"),
                *("--interval", f"{INTERVAL_SECONDS}s", "--max-batches", str(BATCHES)),
            ],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        began = time.monotonic()
        ready = stderr_shows(driver_log, f"source {HOLDER} batch 1:")
        while not ready() and driver.poll() is None and time.monotonic() - began < 300:
            time.sleep(0.2)
        assert ready(), f"the continuous driver did not run a batch: {driver_log.read_text()[-3000:]}"
        produce(broker.bootstrap, second_slice)
        left = subprocess.run(
            [str(BIN / "ticdc-lake"), "maintain", "--config", str(config)], capture_output=True, text=True, timeout=120
        )
        assert driver.poll() is None, "the maintenance was left to a driver that had already stopped"
        waited = subprocess.run(
            [str(BIN / "ticdc-lake"), "run", "--source", WAITER, "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        driver_exit = driver.wait(timeout=300)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    assert driver_exit == 0, f"the continuous driver failed: {driver_log.read_text()[-3000:]}"
    assert waited.returncode == 0, f"the second process failed instead of waiting: {waited.stderr[-3000:]}"
    assert "XSDB6" not in waited.stderr
    assert f"embedded metastore: run {WAITER} waits for continuous {HOLDER} (pid {driver.pid}" in waited.stderr
    assert f"embedded metastore: run {WAITER} waited" in waited.stderr
    published = f"{WAITER}: {TABLES} gold tables consistent as of TiDB ts {workload.consistent_ts} (watermark)"
    assert published in waited.stdout, waited.stdout + waited.stderr[-3000:]
    assert f"batch {BATCHES}:" in driver_log.read_text(), "the driver was stopped before its last batch"
    # maintenance left the lakehouse to the driver at once, and the driver maintained it, expiring snapshots
    assert left.returncode == 0, left.stderr[-3000:]
    assert "maintenance: nothing done: a continuous driver holds the embedded metastore" in left.stdout
    driven = re.findall(
        r"lakehouse maintained after batch \d+: maintenance: \d+ tables, .*?(\d+) snapshots expired",
        driver_log.read_text(),
    )
    assert driven, driver_log.read_text()[-3000:]
    assert sum(int(expired) for expired in driven) > 0
