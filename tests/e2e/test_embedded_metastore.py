"""Embedded mode opens its Derby metastore from one JVM at a time. A Spark step of another process waits for the
process that holds it, saying for whom, and then runs: here a continuous driver of one source holds the lakehouse
while a gold step of another source starts (without the wait, Derby refuses the second JVM: `XSDB6`).

Both are real `ticdc-lake` processes on a lakehouse of the test's own (never the test session's metastore).
"""

from __future__ import annotations

import dataclasses
import subprocess
import time

import pytest

from tests.e2e.kill import BIN, own_runtime, stderr_shows

pytestmark = pytest.mark.e2e

HOLDER, WAITER = "held", "waiting"
BATCHES, INTERVAL_SECONDS = 3, 4


def test_a_second_process_waits_for_the_embedded_metastore_then_runs(broker, source_config, config_file, tmp_path):
    runtime = own_runtime(tmp_path / "lake")
    held, waiting = source_config(HOLDER, runtime=runtime), source_config(WAITER, runtime=runtime)
    config = config_file(dataclasses.replace(held, sources=[*held.sources, *waiting.sources]), tmp_path / "lake.yaml")
    broker.create_topics([HOLDER, WAITER], partitions=1)
    driver_log, gold_log = tmp_path / "driver.log", tmp_path / "gold.log"
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
        ready = stderr_shows(driver_log, "running continuously")
        while not ready() and driver.poll() is None and time.monotonic() - began < 300:
            time.sleep(0.2)
        assert ready(), f"the continuous driver did not start: {driver_log.read_text()[-3000:]}"
        gold = subprocess.run(
            [str(BIN / "ticdc-lake"), "gold", "--source", WAITER, "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        driver_exit = driver.wait(timeout=300)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    gold_log.write_text(gold.stderr)
    assert driver_exit == 0, f"the continuous driver failed: {driver_log.read_text()[-3000:]}"
    assert gold.returncode == 0, f"the second process failed instead of waiting: {gold.stderr[-3000:]}"
    assert "XSDB6" not in gold.stderr
    assert f"embedded metastore: publish gold {WAITER} waits for continuous {HOLDER} (pid {driver.pid}" in gold.stderr
    assert f"embedded metastore: publish gold {WAITER} waited" in gold.stderr
    assert f"source {WAITER}: no gold tables to publish yet" in gold.stderr
    assert f"batch {BATCHES}:" in driver_log.read_text(), "the driver was stopped before its last batch"
