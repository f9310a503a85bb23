"""Continuous mode under faults, each driver a real `ticdc-lake run --continuous` process on a lakehouse of the
test's own (a killed JVM never shares the embedded metastore with this test's):

- the driver killed with SIGKILL at random moments of its life (starting, landing, decoding, publishing, waiting)
  while the stream grows, and started again each time; then one more driver catches up and stops on SIGTERM.
  Bronze holds every produced record once, silver every change once, gold and history equal upstream;
- the driver supervised by the continuous DAG: the DAG starts it, its driver is killed while the triggerer
  watches, the task fails with the pipeline's alert line, and its retry starts the driver again.

The comparisons run in a process of their own (`python -m tests.e2e.test_continuous_faults CONFIG`), the only
one that may open that metastore then.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from spark_jobs.config import load_config
from spark_jobs.runtime import heartbeat
from spark_jobs.runtime.spark_session import get_spark
from spark_jobs.runtime.tables import BRONZE_MESSAGES, SILVER_ROW_CHANGES
from tests.e2e.kill import BIN, REPO, Moments, check_in_own_process, own_runtime, run, slices
from tests.e2e.test_gold_oracle import assert_gold_is_upstream, assert_history_is_upstream
from ticdc_devkit.broker import produce
from ticdc_devkit.simulator.workload import Workload, random_workload

pytestmark = [pytest.mark.e2e, pytest.mark.long]

SOURCE, SEED = "continued", 20261127
KILLS = int(os.environ.get("TICDC_CONTINUOUS_KILLS", "10"))
LIFE_SECONDS = 40.0  # a first guess at a driver's start and first batches (Moments learns it)
CATCH_UP_SECONDS = 300.0


def fault_workload() -> Workload:
    return random_workload(SEED, tables=3, changes=60, protocol="canal-json")


def driver(config: Path, interval: str = "1s") -> list[str]:
    return ["run", "--source", SOURCE, "--config", str(config), "--continuous", "--interval", interval]


def wait_for(condition, what: str, seconds: float = CATCH_UP_SECONDS):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"{what} did not happen in {seconds}s")


def test_driver_killed_at_random_moments_then_restarted_equals_upstream(broker, source_config, config_file, tmp_path):
    rng = random.Random(SEED)
    workload = fault_workload()
    config = config_file(
        source_config(SOURCE, "canal-json", runtime=own_runtime(tmp_path / "lake")), tmp_path / "pipeline.yaml"
    )
    local_dir = load_config(config).local_dir
    broker.create_topics([SOURCE], partitions=1)
    parts = slices(workload, 4, rng, SOURCE)
    produced = sum(len(part) for part in parts)
    moments = Moments(rng, KILLS, LIFE_SECONDS)
    outcomes = []
    for i in range(KILLS):
        if i % (KILLS // len(parts) or 1) == 0 and parts:
            produce(broker.bootstrap, parts.pop(0))
        outcomes.append(run(driver(config), tmp_path / f"driver-{i}.log", lambda: True, moments))
    for part in parts:
        produce(broker.bootstrap, part)
    assert outcomes.count("killed") == KILLS, f"a continuous driver stopped on its own: {outcomes}"

    log_path = tmp_path / "last.log"
    with log_path.open("wb") as log_file:
        last = subprocess.Popen(
            [str(BIN / "ticdc-lake"), *driver(config)], stdout=subprocess.PIPE, stderr=log_file, start_new_session=True
        )
    try:
        wait_for(
            lambda: (heartbeat.read_heartbeat(local_dir, SOURCE) or {}).get("consistent_ts") == workload.consistent_ts,
            "the last driver's catching up",
        )
        last.send_signal(signal.SIGTERM)
        out, _ = last.communicate(timeout=120)
    finally:
        if last.poll() is None:
            os.killpg(last.pid, signal.SIGKILL)
    assert last.returncode == 0, log_path.read_text()[-3000:]
    assert "stopped by signal" in out.decode(), out
    assert heartbeat.read_heartbeat(local_dir, SOURCE)["state"] == heartbeat.STOPPED
    check_in_own_process("tests.e2e.test_continuous_faults", str(config), str(produced))


def test_the_dag_starts_the_driver_and_restarts_it_after_a_kill(
    broker, source_config, config_file, airflow_db, tmp_path, capfd
):
    from airflow.dag_processing.dagbag import DagBag
    from airflow.utils.state import DagRunState

    source = f"{SOURCE}_dag"
    workload = random_workload(SEED + 1, tables=2, changes=20, protocol="canal-json")
    config = config_file(
        source_config(source, "canal-json", runtime=own_runtime(tmp_path / "lake")), tmp_path / "pipeline.yaml"
    )
    local_dir = load_config(config).local_dir
    broker.create_topics([source], partitions=1)
    (part,) = slices(workload, 1, random.Random(SEED), source)
    produce(broker.bootstrap, part)
    previous = os.environ["TICDC_LAKE_CONFIG"]
    os.environ["TICDC_LAKE_CONFIG"] = str(config)
    first_pid: list[int] = []

    def kill_the_driver_once_watched() -> None:
        """SIGKILL the driver the first try started, once the triggerer watches it: the try has written the
        driver's first heartbeat, and Airflow holds the task queued while its trigger runs (`dag.test` runs it
        in line)."""
        from airflow.models.taskinstance import TaskInstance
        from airflow.utils.session import create_session

        def watched():
            beat = heartbeat.read_heartbeat(local_dir, source)
            with create_session() as session:
                ti = session.query(TaskInstance).filter_by(dag_id=f"ticdc_continuous__{source}").one_or_none()
                state = None if ti is None else (ti.state, ti.try_number)
            return beat is not None and state == ("queued", 1) and beat

        beat = wait_for(watched, "the first try's watch")
        first_pid.append(beat["pid"])
        os.killpg(beat["pid"], signal.SIGKILL)

    killer = threading.Thread(target=kill_the_driver_once_watched)
    try:
        bag = DagBag(dag_folder=str(REPO / "dags"))
        assert not bag.import_errors, bag.import_errors
        dag = bag.get_dag(f"ticdc_continuous__{source}")
        killer.start()
        dag_run = dag.test(run_conf={"interval_seconds": 1, "watch_minutes": 1.0, "max_lag_seconds": 0})
        killer.join(timeout=CATCH_UP_SECONDS)
        assert dag_run.state == DagRunState.SUCCESS, f"DAG run ended {dag_run.state}"
        (ti,) = dag_run.get_task_instances()
        assert ti.try_number == 2, "the first try failed when its driver died, the retry started another"
        printed = capfd.readouterr()
        alerts = [line for line in (printed.out + printed.err).splitlines() if "ticdc-lake alert: task" in line]
        assert len(alerts) == 1 and "DriverGone" in alerts[0] and source in alerts[0], alerts
        beat = wait_for(
            lambda: (
                (b := heartbeat.read_heartbeat(local_dir, source))
                and b.get("consistent_ts") == workload.consistent_ts
                and b
            ),
            "the restarted driver's catching up",
        )
        assert beat["pid"] != first_pid[0] and heartbeat.is_alive(beat)
    finally:
        os.environ["TICDC_LAKE_CONFIG"] = previous
        beat = heartbeat.read_heartbeat(local_dir, source) or {}
        if beat.get("pid") and heartbeat.process_alive(beat["pid"]):
            os.kill(beat["pid"], signal.SIGTERM)
            wait_for(lambda: not heartbeat.process_alive(beat["pid"]), "the driver's stop on SIGTERM", 120)
    assert heartbeat.read_heartbeat(local_dir, source)["state"] == heartbeat.STOPPED


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
