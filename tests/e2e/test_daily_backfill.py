"""Daily as-of tables filled by Airflow's own backfill, run by a real scheduler.

A seeded random workload spread over five days (transactions 30 minutes to 4 hours apart; tables created on
different days, columns retyped, added and renamed after some of them) goes to the test broker and through
`ticdc-lake run` (a process of its own) into a lakehouse of this test's own. Airflow's own processes then run on
loopback with a metadata database of this test's own: `airflow api-server` (the tasks' execution API),
`airflow scheduler` (LocalExecutor) and `airflow dag-processor`, the DAGs folder being the repository's `dags/`.

1. `airflow backfill create` over two whole days of the stream: two runs succeed, and each day's partition
   of every daily table holds exactly the rows upstream had at the end of that day (the oracle, in the tables'
   shape now, which is what history answers), with that day's end as `_as_of_ts`;
2. the second day again (`--reprocess-behavior completed`): no table changes, not even by a snapshot;
3. the day the consistent timestamp falls in (not complete): its sensor pokes and waits (`up_for_reschedule`),
   and no partition of that day exists.

The lakehouse is read only by a process of its own (`python -m tests.e2e.test_daily_backfill ...`) holding the
source's lock, so no Airflow task opens the embedded metastore at the same time. The Airflow processes' logs are
in the test's tmp dir (`airflow-*.log`, task logs under `airflow/logs/`), named in every failure message.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest

from spark_jobs.gold.publish import tidb_time
from tests.e2e.kill import BIN, REPO, check_in_own_process, own_runtime, run
from tests.e2e.test_gold_oracle import expected_spark_type
from ticdc_devkit.broker import produce
from ticdc_devkit.simulator.model import Ddl, RowChange
from ticdc_devkit.simulator.stream import EXTENSION_OPTIONS, encode_stream
from ticdc_devkit.simulator.workload import Workload, random_workload

pytestmark = pytest.mark.e2e

SOURCE = "daily"
DAG_ID = f"ticdc_daily__{SOURCE}"
SEED = 20261138  # 2025-11-29 .. 2025-12-03: a table created on the third day, column DDL before and after
WAIT_SECONDS = 900.0
CHECK = "tests.e2e.test_daily_backfill"  # the module the checks run as, in a process of their own


def daily_workload() -> Workload:
    return random_workload(SEED, tables=3, changes=80, protocol="canal-json", tick_ms=(1_800_000, 14_400_000))


def days_of(workload: Workload) -> tuple[list[dt.date], dt.date]:
    """Two whole days inside the stream (the second one creates a table), and the day its consistent timestamp
    falls in (not complete). Two are enough to show each day as it ended: every day's run is the same tasks, and
    each costs a Spark JVM per task."""
    first = min(tidb_time(e.commit_ts) for e in workload.events if isinstance(e, RowChange | Ddl)).date()
    days = [first + dt.timedelta(days=i) for i in (1, 2)]
    incomplete = tidb_time(workload.consistent_ts).date()
    assert incomplete > days[-1], f"the stream ends on {incomplete}, before the end of {days[-1]}"
    return days, incomplete


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Airflow:
    """Airflow's own processes on loopback, on a metadata database of the test's own."""

    def __init__(self, root: Path, config: Path):
        self.home = root / "airflow"
        self.home.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.db = self.home / "airflow.db"
        self.port = _free_port()
        self.env = {
            **os.environ,
            "AIRFLOW_HOME": str(self.home),
            # SQLite's 5 s default wait for a lock is too short for Airflow's processes on two busy cores
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{self.db}?timeout=60",
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "2",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "600",  # the DAG files do not change: parsed once
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{self.port}/execution/",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{self.port}",
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
            "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "1200",
            "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",  # backfills only: no run for today's date
            "TICDC_LAKE_CONFIG": str(config),
            "DBT_SEND_ANONYMOUS_USAGE_STATS": "False",
        }
        self.processes: dict[str, subprocess.Popen] = {}

    def logs(self) -> str:
        return f"Airflow logs: {self.root}/airflow-*.log, task logs under {self.home}/logs/"

    def start(self) -> None:
        migrate = self.cli("db", "migrate")
        assert migrate.returncode == 0, f"airflow db migrate failed: {migrate.stdout[-3000:]}"
        commands = {
            "api-server": ["api-server", "-H", "127.0.0.1", "-p", str(self.port), "-w", "1"],
            "scheduler": ["scheduler"],
            "dag-processor": ["dag-processor"],
        }
        for name, command in commands.items():
            with (self.root / f"airflow-{name}.log").open("wb") as log:
                self.processes[name] = subprocess.Popen(
                    [str(BIN / "airflow"), *command],
                    env=self.env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    cwd=self.root,
                )

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(BIN / "airflow"), *args],
            env=self.env,
            capture_output=True,
            text=True,
            cwd=self.root,
            timeout=300,
        )

    def cli_ok(self, *args: str) -> str:
        """Run a command that writes the metadata database, again when SQLite refused it a lock and it wrote nothing.

        A lock wait does not cover every case: a transaction that read first and then writes while the scheduler
        holds the write lock gets "database is locked" at once (SQLite's way out of a deadlock), whatever the
        timeout. A backfill create refused after it committed its backfill (its clear of a completed run met the
        lock) leaves that backfill behind, half made: Airflow's own removal of it (`_cleanup_partial_backfill`) is
        best effort and meets the same lock, so it is removed here, the same rows, and the backfill created again."""
        attempts = 6
        for attempt in range(1, attempts + 1):
            backfills = self.query("SELECT count(*) FROM backfill")
            done = self.cli(*args)
            refused = done.returncode != 0 and "database is locked" in done.stdout + done.stderr
            after = self.query("SELECT count(*) FROM backfill")
            if not refused or attempt == attempts or not after:
                break
            if after != backfills:
                self.remove_newest_backfill()
            time.sleep(2 * attempt)
        assert done.returncode == 0, (
            f"airflow {' '.join(args)} failed (attempt {attempt} of {attempts}; backfills {backfills} before it, "
            f"{after} after):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        )
        return done.stdout

    def remove_newest_backfill(self) -> None:
        """Remove the newest backfill and its rows of runs (none of its own runs may exist: a half-made one has
        none, its transaction rolled back)."""
        with closing(sqlite3.connect(self.db, timeout=60)) as connection, connection:  # closed, after a commit
            (newest,) = connection.execute("SELECT max(id) FROM backfill").fetchone()
            runs = connection.execute("SELECT run_id FROM dag_run WHERE backfill_id = ?", (newest,)).fetchall()
            assert not runs, f"the half-made backfill {newest} has runs {runs}: not removed"
            connection.execute("DELETE FROM backfill_dag_run WHERE backfill_id = ?", (newest,))
            connection.execute("DELETE FROM backfill WHERE id = ?", (newest,))

    def query(self, sql: str, *params) -> list[tuple]:
        if not self.db.exists():
            return []
        with closing(sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=30)) as connection:
            try:
                return connection.execute(sql, params).fetchall()
            except sqlite3.OperationalError:  # a table not migrated yet, or the database busy
                return []

    def runs(self) -> dict[str, tuple[str, str]]:
        """logical date (YYYY-MM-DD) -> (run id, state) of the DAG's runs."""
        rows = self.query("SELECT substr(logical_date, 1, 10), run_id, state FROM dag_run WHERE dag_id = ?", DAG_ID)
        return {day: (run_id, state) for day, run_id, state in rows}

    def task_states(self, run_id: str) -> dict[str, str | None]:
        rows = self.query("SELECT task_id, state FROM task_instance WHERE dag_id = ? AND run_id = ?", DAG_ID, run_id)
        return dict(rows)

    def backfills_done(self) -> bool:
        rows = self.query("SELECT completed_at FROM backfill WHERE dag_id = ?", DAG_ID)
        return bool(rows) and all(r[0] is not None for r in rows)

    def task_logs(self) -> str:
        """The tail of every task log of the DAG, for a failure message."""
        out = []
        for path in sorted((self.home / "logs").glob(f"dag_id={DAG_ID}/**/*.log")):
            out.append(f"--- {path}\n{path.read_text(errors='replace')[-2500:]}")
        return "\n".join(out[-8:])

    def wait(self, what: str, done, timeout: float = WAIT_SECONDS) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            for name, process in self.processes.items():
                assert process.poll() is None, f"airflow {name} exited while waiting for {what}; {self.logs()}"
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{what}: not within {timeout:.0f}s; runs {self.runs()}; {self.logs()}\n{self.task_logs()}"
                )
            time.sleep(2)

    def wait_for_runs(self, days: list[dt.date], what: str) -> None:
        def finished() -> bool:
            runs = self.runs()
            states = [runs.get(day.isoformat(), (None, None))[1] for day in days]
            failed = [d for d, s in zip(days, states, strict=True) if s == "failed"]
            assert not failed, f"{what}: the runs of {failed} failed; {self.logs()}\n{self.task_logs()}"
            return all(s == "success" for s in states)

        self.wait(what, finished)


@pytest.mark.long  # a Spark JVM per task, one after another, and Airflow's own processes: minutes under load
def test_backfill_writes_each_day_as_upstream_was_at_its_end(broker, source_config, config_file, tmp_path):
    workload = daily_workload()
    days, incomplete = days_of(workload)
    runtime = own_runtime(tmp_path / "lake")
    config = config_file(source_config(SOURCE, "canal-json", runtime=runtime), tmp_path / "pipeline.yaml")
    broker.create_topics([SOURCE], partitions=1)
    produce(
        broker.bootstrap,
        encode_stream("canal-json", workload.events, topic=SOURCE, options=EXTENSION_OPTIONS["canal-json"]),
    )
    airflow = Airflow(tmp_path, config)
    airflow.start()  # starts up while the lakehouse is built; nothing runs before the DAG is unpaused
    try:
        run(["run", "--source", SOURCE, "--config", str(config)], tmp_path / "ticdc-lake-run.log")
        airflow.wait("the DAG parsed", lambda: airflow.query("SELECT 1 FROM dag WHERE dag_id = ?", DAG_ID), 300)
        airflow.cli_ok("dags", "unpause", DAG_ID)
        first, last = days[0].isoformat(), days[-1].isoformat()

        airflow.cli_ok("backfill", "create", "--dag-id", DAG_ID, "--from-date", first, "--to-date", last)
        airflow.wait_for_runs(days, f"backfill {first}..{last}")

        airflow.wait("the first backfill completed", airflow.backfills_done, 120)
        again = days[1].isoformat()
        airflow.cli_ok(
            "backfill", "create", "--dag-id", DAG_ID, "--from-date", again, "--to-date", again,
            "--reprocess-behavior", "completed",
        )  # fmt: skip
        airflow.wait("the second backfill completed", airflow.backfills_done)
        airflow.wait_for_runs([days[1]], f"backfill {again} again")
        run_id = airflow.runs()[again][0]
        rerun = airflow.query(
            "SELECT try_number, start_date FROM task_instance WHERE dag_id = ? AND run_id = ? AND task_id = 'write_day'",
            DAG_ID,
            run_id,
        )
        assert rerun and rerun[0][0] >= 2, f"{again} was not written again: write_day {rerun}; {airflow.logs()}"
        rerun_started = rerun[0][1]
        written = airflow.query(
            "SELECT value FROM xcom WHERE dag_id = ? AND run_id = ? AND task_id = 'write_day' AND key = 'return_value'",
            DAG_ID,
            run_id,
        )
        result = json.loads(written[0][0]) if written else {}
        assert result.get("rows") and sorted(result["unchanged"]) == sorted(result["rows"]), (
            f"{again} written again changed tables: {result}; {airflow.logs()}"
        )

        open_day = incomplete.isoformat()
        airflow.cli_ok("backfill", "create", "--dag-id", DAG_ID, "--from-date", open_day, "--to-date", open_day)

        def waiting() -> bool:
            run_id = airflow.runs().get(open_day, (None, None))[0]
            states = airflow.task_states(run_id) if run_id else {}
            assert states.get("write_day") is None, f"{open_day} was written before it was complete: {states}"
            assert states.get("wait_for_day") not in ("success", "failed"), f"{open_day}: sensor ended, {states}"
            return states.get("wait_for_day") == "up_for_reschedule"

        airflow.wait(f"the sensor of {open_day} waiting", waiting, 600)
        reschedules = airflow.query(
            "SELECT count(*) FROM task_reschedule r JOIN task_instance t ON r.ti_id = t.id "
            "WHERE t.dag_id = ? AND t.task_id = 'wait_for_day' AND t.run_id = ?",
            DAG_ID,
            airflow.runs()[open_day][0],
        )
        assert reschedules and reschedules[0][0] >= 1, f"no reschedule recorded for {open_day}; {airflow.logs()}"
    finally:
        airflow.stop()
    check_in_own_process(CHECK, str(config), rerun_started, open_day, *map(str, days))


# ---- the checks, in a process of their own -------------------------------------------------------------------


def daily_tables(spark) -> set[str]:
    from spark_jobs.gold import names
    from spark_jobs.runtime.sql import quote_ident

    namespace = names.daily_table(SOURCE, "d", "t")[0]
    if not spark.catalog.databaseExists(namespace):
        return set()
    return {r["tableName"] for r in spark.sql(f"SHOW TABLES IN {quote_ident(namespace)}").collect()}


def assert_days_are_upstream(spark, workload: Workload, days: list[dt.date]) -> None:
    """Each day's partition of every daily table is upstream at the end of the day, in the tables' shape now,
    with the day's end as `_as_of_ts`; a table that did not exist then has no rows that day."""
    from pyspark.sql import functions as F

    from spark_jobs.backfill.daily import DATE_COLUMN, TS_COLUMN, end_of_day_ts
    from spark_jobs.canonical.values import canonical_type
    from spark_jobs.gold import names
    from spark_jobs.runtime.sql import qualified
    from tests.e2e.test_gold_oracle import by_key
    from ticdc_devkit.gold_check import oracle_state, rows_state
    from ticdc_devkit.simulator.oracle import upstream_schemas, upstream_state_in_shape

    now = workload.consistent_ts
    schemas = upstream_schemas(workload.events, as_of=now, preexisting=workload.preexisting)
    wanted = {names.daily_table(SOURCE, db, t): (db, t) for db, t in schemas}
    present = daily_tables(spark)
    assert present <= {name for _, name in wanted}, f"daily tables upstream does not have: {present}"
    partitions = {}
    for day in days:
        ts = end_of_day_ts(day)
        existed = upstream_schemas(workload.events, as_of=ts, preexisting=workload.preexisting)
        state = upstream_state_in_shape(workload.events, ts, now, preexisting=workload.preexisting)
        for (namespace, name), (db, t) in sorted(wanted.items()):
            if name not in present:
                assert not state.get((db, t)) or (db, t) not in existed, f"{db}.{t} has rows on {day}, no table"
                continue
            table = schemas[(db, t)]
            relation = qualified(namespace, name)
            fields = [(f.name, f.dataType.simpleString()) for f in spark.table(relation).schema.fields]
            assert fields == [
                (DATE_COLUMN, "date"),
                (TS_COLUMN, "bigint"),
                ("_row_key", "string"),
                *[(c.name, expected_spark_type(c, "canal-json")) for c in table.columns],
            ], f"{db}.{t}: daily columns differ from upstream's now"
            rows = spark.table(relation).where(F.col(DATE_COLUMN) == F.lit(day)).collect()
            assert {r[TS_COLUMN] for r in rows} <= {ts}, f"{db}.{t} on {day}: _as_of_ts is not the day's end {ts}"
            columns = [(c.name, canonical_type(c.type)) for c in table.columns]
            actual = by_key(rows_state(rows, columns), table.key)
            assert len(actual) == len(rows), f"{db}.{t} on {day}: a key twice"
            expected = by_key(oracle_state(state.get((db, t), {}), columns), table.key) if (db, t) in existed else {}
            assert actual == expected, f"{db}.{t} on {day} (TiDB ts {ts}) differs from upstream then"
            partitions.setdefault(name, set()).update({day} if rows else set())
    for name in present:
        namespace = names.daily_table(SOURCE, "d", "t")[0]
        listed = {
            r[0][0] for r in spark.sql(f"SELECT partition FROM {qualified(namespace, name, 'partitions')}").collect()
        }
        assert listed == partitions.get(name, set()), f"{name}: partitions {listed}, days with rows {partitions}"
    assert any(len(p) == len(days) for p in partitions.values()), f"no table has a partition per day: {partitions}"


def check_days(config_path: str, no_commit_since: str, absent: str, days: list[str]) -> None:
    """The days written are upstream's (`assert_days_are_upstream`); no daily table committed anything since
    `no_commit_since` (when the day was written again, UTC); the day not complete has no rows anywhere."""
    from pyspark.sql import functions as F

    from spark_jobs.backfill.daily import DATE_COLUMN
    from spark_jobs.config import load_config
    from spark_jobs.gold import names
    from spark_jobs.runtime.lock import source_lock
    from spark_jobs.runtime.spark_session import get_spark
    from spark_jobs.runtime.sql import qualified

    since = dt.datetime.fromisoformat(no_commit_since).replace(tzinfo=dt.UTC)
    config = load_config(config_path)
    with source_lock(config.local_dir, SOURCE, "test: check the daily tables"):
        spark = get_spark(config)
        assert_days_are_upstream(spark, daily_workload(), [dt.date.fromisoformat(d) for d in days])
        namespace = names.daily_table(SOURCE, "d", "t")[0]
        for name in sorted(daily_tables(spark)):
            commits = spark.sql(
                f"SELECT unix_millis(committed_at), operation FROM {qualified(namespace, name, 'snapshots')}"
            ).collect()
            late = [
                (dt.datetime.fromtimestamp(ms / 1000, dt.UTC), op)
                for ms, op in commits
                if ms >= since.timestamp() * 1000
            ]
            assert not late, f"{name}: committed {late} when a day was written again at {since} (nothing changed)"
            count = spark.table(qualified(namespace, name)).where(F.col(DATE_COLUMN) == F.lit(absent)).count()
            assert count == 0, f"{name} has {count} rows of {absent}, a day not complete"
        spark.stop()


if __name__ == "__main__":
    check_days(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])


def test_a_daily_table_follows_its_table_through_schema_changes(spark):
    """Days written under different shapes of a table: a new column is added (earlier days read null), a widened
    type widens in place, another type change rewrites the table with earlier days' values cast, a dropped column
    stays (null from then on); writing a day again with the same rows commits nothing, with other rows replaces
    exactly that day."""
    from spark_jobs.backfill.daily import DATE_COLUMN, _write_partition
    from spark_jobs.runtime.sql import qualified

    namespace, name = "daily_evolve", "shop__t"
    spark.sql(f"DROP TABLE IF EXISTS {qualified(namespace, name)}")
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {qualified(namespace)}")
    day1, day2, day3 = dt.date(2025, 1, 1), dt.date(2025, 1, 2), dt.date(2025, 1, 3)

    def rows(day, schema, *values):
        frame = spark.createDataFrame(list(values), schema)
        return frame.selectExpr(f"DATE'{day}' AS {DATE_COLUMN}", "CAST(7 AS BIGINT) AS _as_of_ts", "*")

    def snapshots() -> int:
        return spark.sql(f"SELECT * FROM {qualified(namespace, name, 'snapshots')}").count()

    def table() -> dict:
        frame = spark.table(qualified(namespace, name))
        return {
            "types": [(f.name, f.dataType.simpleString()) for f in frame.schema.fields],
            "rows": sorted(tuple(r) for r in frame.collect()),
        }

    first = rows(day1, "_row_key string, n int, s string, gone int", ('["1"]', 1, "10", 5), ('["2"]', 2, "x", 6))
    assert _write_partition(spark, namespace, name, first, day1) == (f"{namespace}.{name}", 2, True)
    assert _write_partition(spark, namespace, name, first, day1)[2] is False and snapshots() == 1
    second = rows(day2, "_row_key string, n bigint, s string, added string", ('["1"]', 2**40, "11", "a"))
    assert _write_partition(spark, namespace, name, second, day2)[1:] == (1, True)
    after = table()
    assert after["types"][3:] == [("n", "bigint"), ("s", "string"), ("gone", "int"), ("added", "string")]
    assert after["rows"] == [
        (day1, 7, '["1"]', 1, "10", 5, None),
        (day1, 7, '["2"]', 2, "x", 6, None),
        (day2, 7, '["1"]', 2**40, "11", None, "a"),
    ]
    third = rows(day3, "_row_key string, n bigint, s int, added string", ('["1"]', 3, 12, "b"))
    assert _write_partition(spark, namespace, name, third, day3)[1:] == (1, True)
    retyped = table()
    assert ("s", "int") in retyped["types"], retyped["types"]
    assert [r[4] for r in retyped["rows"]] == [10, None, 11, 12]  # "x" is no int
    count = snapshots()
    again = rows(day2, "_row_key string, n bigint, s int, added string", ('["1"]', 2**40, 11, "a"))
    assert _write_partition(spark, namespace, name, again, day2)[2] is False and snapshots() == count
    replaced = rows(day2, "_row_key string, n bigint, s int, added string", ('["3"]', 4, 13, "c"))
    assert _write_partition(spark, namespace, name, replaced, day2)[2] is True
    assert [r[:3] for r in table()["rows"]] == [
        (day1, 7, '["1"]'),
        (day1, 7, '["2"]'),
        (day2, 7, '["3"]'),
        (day3, 7, '["1"]'),
    ]
    empty = rows(day2, "_row_key string, n bigint, s int, added string")
    assert _write_partition(spark, namespace, name, empty, day2)[1:] == (0, True)
    assert {r[0] for r in table()["rows"]} == {day1, day3}
    spark.sql(f"DROP TABLE {qualified(namespace, name)}")
