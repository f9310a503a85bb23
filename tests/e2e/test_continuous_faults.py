"""Continuous mode under faults, one stream through four phases (each phase costs a JVM start, so they share one
lakehouse and one stream rather than pay a first gold build each). Every driver is a real `ticdc-lake run
--continuous` process on a lakehouse of the test's own (a killed JVM never shares the embedded metastore with this
test's):

1. **kills**: the driver SIGKILLed at a random moment of its first batches (landing, decoding, publishing,
   waiting; its session ready), KILLS times, while the stream grows, and started again each time;
2. **supervised**: the continuous DAG starts the driver; the driver is SIGKILLed while the triggerer watches it;
   the task fails with the pipeline's alert line, and its retry starts the driver again;
3. **outage**: the broker frozen under that driver: its batch pauses with one line per attempt, and once the
   broker answers again the batches go on with the rest of the stream;
4. **stop**: SIGTERM stops the driver between batches (exit 0, heartbeat `stopped`).

Then bronze holds every produced record once, silver every change once, and gold and history equal upstream.
The comparison runs in a process of its own (`python -m tests.e2e.test_continuous_faults CONFIG PRODUCED`), the
only one that may open that metastore then.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import random
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from spark_jobs.config import load_config
from spark_jobs.runtime import freshness, heartbeat
from spark_jobs.runtime.spark_session import get_spark
from spark_jobs.runtime.tables import BRONZE_MESSAGES, SILVER_ROW_CHANGES
from tests.e2e.kill import REPO, Moments, check_in_own_process, own_runtime, run, slices, stderr_shows
from tests.e2e.test_gold_oracle import assert_gold_is_upstream, assert_history_is_upstream
from ticdc_devkit.broker import produce
from ticdc_devkit.simulator.workload import Workload, random_workload

pytestmark = [pytest.mark.e2e, pytest.mark.long]

SOURCE, SEED = "continued", 20261127
KILLS = int(os.environ.get("TICDC_CONTINUOUS_KILLS", "10"))
BATCHES_SECONDS = 20.0  # kills fall at random points of a driver's first this many seconds of batches
CATCH_UP_SECONDS = 300.0


def fault_workload() -> Workload:
    return random_workload(SEED, tables=3, changes=60, protocol="canal-json")


class _Lines(logging.Handler):
    """Every message of a logger, as a list."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def wait_for(condition, what: str, seconds: float = CATCH_UP_SECONDS):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"{what} did not happen in {seconds}s")


def test_killed_supervised_paused_and_stopped_the_driver_loses_and_doubles_nothing(
    broker, source_config, config_file, airflow_db, tmp_path
):
    rng = random.Random(SEED)
    workload = fault_workload()
    # the outage's pause comes after the broker's timeout (30 s by default)
    runtime, kafka = own_runtime(tmp_path / "lake"), {"timeout_seconds": 5}
    config = config_file(source_config(SOURCE, "canal-json", runtime=runtime, kafka=kafka), tmp_path / "pipeline.yaml")
    local_dir = load_config(config).local_dir
    broker.create_topics([SOURCE], partitions=1)
    parts = slices(workload, 4, rng, SOURCE)
    produced = sum(len(part) for part in parts)

    def beat() -> dict:
        return heartbeat.read_heartbeat(local_dir, SOURCE) or {}

    # 1. kills, while three of the four slices arrive
    moments = Moments(rng, KILLS, BATCHES_SECONDS)
    driver = ["run", "--source", SOURCE, "--config", str(config), "--continuous", "--interval", "1s"]
    outcomes = []
    for i in range(KILLS):
        if i % max(KILLS // 3, 1) == 0 and len(parts) > 1:
            produce(broker.bootstrap, parts.pop(0))
        log = tmp_path / f"driver-{i}.log"
        outcomes.append(run(driver, log, stderr_shows(log, "running continuously"), moments))
    assert outcomes.count("killed") == KILLS, f"a continuous driver stopped on its own: {outcomes}"
    while len(parts) > 1:
        produce(broker.bootstrap, parts.pop(0))

    # 2. supervised: the DAG's first try starts a driver, which is killed while watched; the retry starts another
    previous_config = os.environ["TICDC_LAKE_CONFIG"]
    os.environ["TICDC_LAKE_CONFIG"] = str(config)
    killed: list[int] = []
    # the alert lines as logged: Airflow's logging prints to the stream (and through the root handlers) it found
    # when it was set up in this process, which an earlier test of the same worker may have done
    alert_lines = _Lines()
    killer = threading.Thread(target=lambda: killed.append(kill_the_driver_once_watched(local_dir)))
    try:
        from airflow.dag_processing.dagbag import DagBag
        from airflow.utils.state import DagRunState

        bag = DagBag(dag_folder=str(REPO / "dags"))
        assert not bag.import_errors, bag.import_errors
        freshness.log.addHandler(alert_lines)
        killer.start()
        dag = bag.get_dag(f"ticdc_continuous__{SOURCE}")
        dag.get_task("watch_driver").retry_delay = dt.timedelta(seconds=1)  # `dag.test` sleeps through the 30 s
        dag_run = dag.test(run_conf={"interval_seconds": 1, "watch_minutes": 0.25, "max_lag_seconds": 0})
        killer.join(timeout=CATCH_UP_SECONDS)
        assert dag_run.state == DagRunState.SUCCESS, f"DAG run ended {dag_run.state}"
        (ti,) = dag_run.get_task_instances()
        assert ti.try_number == 2, "the first try failed when its driver died, the retry started another"
        alerts = [line for line in alert_lines.lines if "ticdc-lake alert: task" in line]
        assert len(alerts) == 1 and "DriverGone" in alerts[0] and SOURCE in alerts[0], alerts
        supervised = beat()
        assert supervised["pid"] != killed[0] and heartbeat.is_alive(supervised), supervised

        # 3. outage: the broker frozen until a batch has paused; then the last slice
        wait_for(lambda: beat().get("batches", 0) >= 1, "the supervised driver's first batch")
        broker.pause()
        try:
            wait_for(lambda: beat().get("state") == heartbeat.PAUSED, "a pause")
        finally:
            broker.resume()
        produce(broker.bootstrap, parts.pop(0))
        wait_for(lambda: beat().get("consistent_ts") == workload.consistent_ts, "the driver's catching up")
    finally:
        freshness.log.removeHandler(alert_lines)
        os.environ["TICDC_LAKE_CONFIG"] = previous_config
        # 4. stop
        pid = beat().get("pid")
        if pid and heartbeat.process_alive(pid):
            os.kill(pid, signal.SIGTERM)
            wait_for(lambda: not heartbeat.process_alive(pid), "the driver's stop on SIGTERM", 120)
    stopped = beat()
    assert stopped["state"] == heartbeat.STOPPED and stopped["paused"] >= 1, stopped
    driver_log = (local_dir / "continuous" / f"{SOURCE}.log").read_text()
    pauses = [line for line in driver_log.splitlines() if " paused (attempt " in line]
    assert len(pauses) >= stopped["paused"] and all(f"Kafka broker {broker.bootstrap}" in p for p in pauses), pauses
    assert "stopped by signal" in driver_log, driver_log[-2000:]
    check_in_own_process("tests.e2e.test_continuous_faults", str(config), str(produced))


def kill_the_driver_once_watched(local_dir: Path) -> int:
    """SIGKILL the driver the DAG's first try started, once the triggerer watches it: the try has written the
    driver's first heartbeat, and Airflow holds the task queued while `dag.test` runs its trigger in line."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    def watched():
        beat = heartbeat.read_heartbeat(local_dir, SOURCE)
        with create_session() as session:
            ti = session.query(TaskInstance).filter_by(dag_id=f"ticdc_continuous__{SOURCE}").one_or_none()
            state = None if ti is None else (ti.state, ti.try_number)
        alive = beat is not None and heartbeat.process_alive(beat["pid"])  # the kill loop's drivers are all dead
        return alive and state == ("queued", 1) and beat

    beat = wait_for(watched, "the first try's watch")
    os.killpg(beat["pid"], signal.SIGKILL)
    return int(beat["pid"])


def check_continued(config_path: str, produced: int) -> None:
    """Every produced record landed once, every change decoded once, gold and history equal upstream."""
    spark = get_spark(load_config(config_path))
    workload = fault_workload()
    coordinates = "topic, `partition`, `offset`"
    bronze = spark.sql(f"SELECT count(*), count(DISTINCT {coordinates}) FROM {BRONZE_MESSAGES}").first()
    assert bronze[0] == bronze[1] == produced, f"bronze holds {bronze} (all, distinct) of {produced} records"
    silver = spark.sql(f"SELECT count(*), count(DISTINCT {coordinates}, event_index) FROM {SILVER_ROW_CHANGES}").first()
    assert silver[0] == silver[1] > 0, f"silver holds changes twice: {silver}"
    assert_gold_is_upstream(spark, SOURCE, workload, workload.consistent_ts)
    stamps = sorted({e.commit_ts for e in workload.events if hasattr(e, "commit_ts")})
    assert_history_is_upstream(spark, SOURCE, workload, workload.consistent_ts, stamps)
    spark.stop()


if __name__ == "__main__":
    check_continued(sys.argv[1], int(sys.argv[2]))
