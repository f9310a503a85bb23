"""Cluster mode on a loopback cluster of the real programs (`ticdc-kit cluster up`): a Hive Metastore service,
a Spark standalone master and worker, the Spark Thrift Server, the broker and Airflow's scheduler, dag processor
and API server, each its own process.

One ingest DAG run, by the scheduler, lands, decodes and builds gold with executors in the worker's JVMs (Python from the
shipped environment) and dbt through the Thrift Server, and in the middle of its decode task the worker is killed
(SIGKILL, with its executors) and started again, as a supervisor would: Spark or Airflow retries, and the run
ends with gold equal to the upstream database and silver equal to a clean decode of bronze. Meanwhile the Thrift
Server, a second Spark application, reads bronze and silver as the run writes them (embedded Derby would refuse
the second process).

Then the continuous DAG, through the scheduler and the triggerer, starts and watches a continuous driver on the
cluster, which publishes gold as of the same timestamp; the watch alerts on gold's lag (the stream is old), and
the driver stops on SIGTERM.

Marked `cluster`: `make test` runs it once, among its first files (tests/conftest.py). One run holds both scenarios: a
DAG run on the cluster takes minutes of fixed cost.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from spark_jobs.config import DEFAULT_CONFIG
from spark_jobs.runtime.tables import BRONZE_MESSAGES, SILVER_ROW_CHANGES
from tests.conftest import TEST_HOME
from tests.jvm_archive import JIT_OPTIONS
from ticdc_devkit.broker import create_topics, produce
from ticdc_devkit.cluster import LoopbackCluster
from ticdc_devkit.simulator.model import RowChange, Watermark
from ticdc_devkit.simulator.shop_stream import shop_stream
from ticdc_devkit.simulator.stream import encode_stream

pytestmark = [pytest.mark.e2e, pytest.mark.cluster]

DAG, TOPIC, PARTITIONS = "ticdc_ingest__shop", "shop_cdc", 3
BIN = os.path.dirname(sys.executable)
RUN_TIMEOUT = 1800  # a DAG run takes about 6 minutes here alone, twice that beside the rest of the suite
OPTIONS = {"enable-tidb-extension": True}


@pytest.fixture(scope="module")
def cluster():
    cluster = LoopbackCluster(TEST_HOME / "cluster").up(DEFAULT_CONFIG, jvm_options=JIT_OPTIONS)
    yield cluster
    cluster.down()


def messages(events) -> list:
    return encode_stream("canal-json", events, topic=TOPIC, partitions=PARTITIONS, options=OPTIONS)


def row_changes(events) -> int:
    """Silver rows of the events: a key-changing update is a delete and an insert."""
    return sum(
        1 + (e.op == "update" and e.before[e.table.key[0]] != e.after[e.table.key[0]])
        for e in events
        if isinstance(e, RowChange)
    )


def publish(cluster: LoopbackCluster, events) -> int:
    bootstrap = cluster.airflow_env()["TICDC_DEMO_BOOTSTRAP"]
    create_topics(bootstrap, [TOPIC], PARTITIONS)
    return produce(bootstrap, messages(events))


def in_cluster_mode(cluster: LoopbackCluster, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """A process of its own with the cluster's configuration: `ticdc-lake ...` or `python -m ...`."""
    command = [f"{BIN}/python", *args] if args[0] == "-m" else [f"{BIN}/ticdc-lake", *args]
    done = subprocess.run(
        command, env={**os.environ, **cluster.airflow_env()}, capture_output=True, text=True, timeout=RUN_TIMEOUT
    )
    if check:
        assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stderr[-4000:]}"
    return done


class ThriftReader(threading.Thread):
    """Counts a table's rows through the Thrift Server every few seconds until stopped: what it read, and any
    error other than the table not existing yet, with the moments its read started and failed.

    Before a table's first read, a read may also race its creation: Iceberg's session catalog finds no table, Spark
    then asks the metastore again, finds the new table and reads it as a plain Hive table, which fails with
    `InstantiationException` (docs/environment.md, the loopback cluster's pitfalls). Only that, only before the
    table's first read, counts as the table not existing yet."""

    def __init__(self, cluster: LoopbackCluster, tables: list[str]):
        super().__init__(daemon=True)
        self.port, self.tables = cluster.port("thrift-server"), tables
        self.reads: list[tuple[str, int]] = []
        self.errors: list[tuple[float, float, str]] = []
        self.stopped = threading.Event()

    def run(self):
        from pyhive import hive

        cursor = hive.connect(host="127.0.0.1", port=self.port, username="test").cursor()
        while not self.stopped.wait(3):
            for table in self.tables:
                started = time.monotonic()
                try:
                    cursor.execute(f"SELECT count(*) FROM {table} WHERE source = 'shop'")
                    self.reads.append((table, cursor.fetchall()[0][0]))
                except Exception as exc:
                    error = _thrift_error(exc)
                    created = any(t == table for t, _ in self.reads)
                    if not ("TABLE_OR_VIEW_NOT_FOUND" in error or (not created and "InstantiationException" in error)):
                        self.errors.append((started, time.monotonic(), f"{table}: {error}"))


def _thrift_error(exc: Exception) -> str:
    """The server's own error message (the exception's text starts with a Java stack trace)."""
    status = getattr(exc.args[0], "status", None) if exc.args else None
    return (getattr(status, "errorMessage", None) or str(exc))[:1500]


class WorkerKiller(threading.Thread):
    """Kills the Spark worker (SIGKILL, its process group: the worker and every executor on it) once the executors
    of the application named `app` run a task, and starts it again at once, as a supervisor would."""

    def __init__(self, cluster: LoopbackCluster, app: str):
        super().__init__(daemon=True)
        self.cluster, self.app = cluster, app
        self.killed_at: float | None = None
        self.back_at: float | None = None
        self.stopped = threading.Event()

    def app_runs_tasks(self) -> bool:
        apps = [a["id"] for a in self.cluster.master_json().get("activeapps", []) if a["name"] == self.app]
        return any(
            "Running task" in stderr.read_text(errors="replace")
            for app in apps
            for stderr in (self.cluster.work_dir / app).glob("*/stderr")
        )

    def run(self):
        while not self.stopped.wait(0.2):
            if self.app_runs_tasks():
                os.killpg(self.cluster.services["spark-worker"].pid, signal.SIGKILL)
                self.killed_at = time.monotonic()
                self.cluster.start_worker()
                self.back_at = time.monotonic()
                return


def executors_that_ran_tasks(cluster: LoopbackCluster, python_shipped: bool) -> list[str]:
    """The worker's executor directories whose executor ran tasks (and, if asked, unpacked the shipped Python)."""
    found = []
    for executor in sorted(cluster.work_dir.glob("app-*/*")):
        stderr = executor / "stderr"
        ran = stderr.is_file() and "Running task" in stderr.read_text(errors="replace")
        if ran and (not python_shipped or (executor / "ticdc_env" / "bin" / "python").exists()):
            found.append(str(executor.relative_to(cluster.work_dir)))
    return found


def thrift_server_tasks(cluster: LoopbackCluster) -> int:
    """Tasks the Thrift Server's executors ran so far (its statements' work)."""
    apps = cluster.master_json().get("activeapps", [])
    (app,) = [a["id"] for a in apps if a["name"] == "ticdc-thrift-server"]
    return sum(
        stderr.read_text(errors="replace").count("Running task") for stderr in (cluster.work_dir / app).glob("*/stderr")
    )


def test_ingest_dag_on_the_cluster_with_its_worker_killed_mid_decode_builds_gold_equal_to_upstream(cluster):
    published = publish(cluster, shop_stream())
    python_executors_before = executors_that_ran_tasks(cluster, python_shipped=True)
    thrift_tasks_before = thrift_server_tasks(cluster)
    reader = ThriftReader(cluster, [BRONZE_MESSAGES, SILVER_ROW_CHANGES])
    killer = WorkerKiller(cluster, "decode shop")
    reader.start()
    killer.start()
    run_id = cluster.start_run(DAG)
    state = cluster.wait_for_run(DAG, run_id, timeout=RUN_TIMEOUT)
    cluster.airflow("dags", "pause", DAG)  # its next scheduled run would only compete with the checks for the CPU
    reader.stopped.set()
    killer.stopped.set()
    reader.join()
    killer.join()
    assert state == "success", f"{DAG} run {run_id} ended {state}; logs: {cluster.directory / 'airflow' / 'logs'}"
    assert killer.killed_at is not None, "the decode task's executors ran no task while the run was watched"
    # the metastore logs beside the other services, not in /tmp (its scratch goes with it: cluster.py)
    assert "HiveMetaStore" in (cluster.logs / "hive.log").read_text()

    checked = in_cluster_mode(cluster, "-m", "tests.e2e.cluster_check", "all", str(cluster.config_path))
    counts = json.loads(checked.stdout.strip().splitlines()[-1])
    assert "gold_shop.shop__orders" in counts
    # the worker killed mid-decode lost nothing and doubled nothing: silver is a clean decode of every record
    assert counts["bronze"] == published
    assert counts[SILVER_ROW_CHANGES] == row_changes(shop_stream())
    # the Spark jobs ran in the worker's executors, in the Python shipped with spark.archives
    python_executors = set(executors_that_ran_tasks(cluster, python_shipped=True)) - set(python_executors_before)
    assert len(python_executors) >= 2, f"no land and decode executors on the worker: {python_executors}"
    # dbt ran through the Thrift Server: its executors did the work of the gold models and tests
    assert thrift_server_tasks(cluster) > thrift_tasks_before
    # a second application read the tables while the run wrote them, and saw every landed record at the end;
    # only the reads the worker's kill cut short (its executors died with it) may have failed
    assert killer.back_at is not None
    window = (killer.killed_at, killer.back_at + 60)
    outside = [e for started, failed, e in reader.errors if failed < window[0] or started > window[1]]
    assert not outside, f"reads failed outside the kill (at {window[0]:.0f}, back by {window[1]:.0f}): {reader.errors}"
    bronze_reads = [n for table, n in reader.reads if table == BRONZE_MESSAGES]
    assert bronze_reads and bronze_reads[-1] == published, (bronze_reads, published)
    assert any(n for table, n in reader.reads if table == SILVER_ROW_CHANGES)
    continuous_driver_on_the_cluster(cluster)


def continuous_driver_on_the_cluster(cluster: LoopbackCluster) -> None:
    """The continuous DAG through the scheduler and the triggerer: its task starts the driver (a Spark application
    on the cluster) and defers, the triggerer watching the heartbeat; the driver publishes gold as of the stream's
    last watermark, and the triggerer hands the task back to fail with the alert, since the shop stream's
    timestamps are far older than the DAG's `max_lag_seconds`. The DAG is paused before the retry, and the driver
    stops on SIGTERM."""
    from spark_jobs.config import load_config
    from spark_jobs.runtime import heartbeat

    dag, task = "ticdc_continuous__shop", "watch_driver"
    local_dir = load_config(cluster.config_path).local_dir
    last_watermark = max(e.ts for e in shop_stream() if isinstance(e, Watermark))
    run_id = cluster.start_run(dag)  # unpaused: @continuous starts a run at once
    deadline = time.monotonic() + RUN_TIMEOUT

    def wait(condition, what: str):
        while not (value := condition()):
            assert time.monotonic() < deadline, f"{what} did not happen; logs: {cluster.directory / 'airflow' / 'logs'}"
            time.sleep(1)
        return value

    wait(lambda: cluster.task_state(dag, run_id, task) == ("deferred", 1), "the watch's deferral to the triggerer")
    beat = wait(
        lambda: (b := heartbeat.read_heartbeat(local_dir, "shop") or {}).get("batches", 0) >= 1 and b,
        "the driver's first batch",
    )
    assert beat["consistent_ts"] == last_watermark and heartbeat.is_alive(beat), beat
    wait(lambda: cluster.task_state(dag, run_id, task)[0] == "up_for_retry", "the watch's failure on gold's lag")
    cluster.airflow("dags", "pause", dag)  # before the retry (30 s), which would watch the driver again
    task_logs = cluster.directory / "airflow" / "logs" / f"dag_id={dag}"
    lines = [line for log in task_logs.rglob("*.log") for line in log.read_text(errors="replace").splitlines()]
    assert any("ticdc-lake alert: task" in line and "GoldLagging" in line for line in lines), "no alert line"
    os.kill(beat["pid"], signal.SIGTERM)
    wait(lambda: not heartbeat.process_alive(beat["pid"]), "the driver's stop on SIGTERM")
    assert heartbeat.read_heartbeat(local_dir, "shop")["state"] == heartbeat.STOPPED
