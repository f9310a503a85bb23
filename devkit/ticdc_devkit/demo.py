"""The embedded demo: a real broker on loopback, a TiCDC change stream, the ingest DAG, gold tables.

The broker keeps its topics in memory, so each demo starts from a clean lakehouse under the local
directory (the previous demo's tables described a broker that no longer exists).

The console gets one line per step and a short report; the DAG's own output (Airflow, the tasks, Spark,
dbt) goes to a log file under the local directory, and to the console too with `ticdc-kit -v demo`.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
import shutil
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from spark_jobs.config import PROJECT_ROOT
from spark_jobs.runtime.logs import verbose_requested

log = logging.getLogger("ticdc-lake.demo")

SOURCE, TOPIC, PARTITIONS = "shop", "shop_cdc", 3
DEMO_STATE = ("warehouse", "metastore_db", "derby", "airflow", "broker", "spark-tmp")
TASK_STARTED = re.compile(r"\[DAG TEST\] starting task_id=(\S+)")
AIRFLOW_BOOKKEEPING = re.compile(r"^\S+ \[(?:info|debug)\s*\] ")  # structlog's INFO lines, ours included
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception)\w*: ")
FAILURE_LINES, FAILURE_LINE_CHARS = 15, 240


@dataclass
class DagTestRun:
    """What `airflow dags test` did: its exit code, the last task it started and that task's last output."""

    returncode: int = 0
    task: str | None = None
    task_output: deque[str] = field(default_factory=lambda: deque(maxlen=2000))


def _prepare_environment(local_dir: Path) -> None:
    for name in DEMO_STATE:
        shutil.rmtree(local_dir / name, ignore_errors=True)
    airflow_home = local_dir / "airflow"
    airflow_home.mkdir(parents=True)
    os.environ.update(
        {
            "AIRFLOW_HOME": str(airflow_home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT_ROOT / "dags"),
            "DBT_SEND_ANONYMOUS_USAGE_STATS": "False",
            "DBT_USE_COLORS": "False",  # dbt's lines land in the DAG log file
        }
    )
    os.environ.setdefault("AIRFLOW__API_AUTH__JWT_SECRET", os.urandom(48).hex())
    subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _tso_time(ts: int | None) -> str:
    if ts is None:
        return "none yet"
    return dt.datetime.fromtimestamp((ts >> 18) / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def _duration(seconds: float) -> str:
    minutes, seconds = divmod(round(seconds), 60)
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


def _event_counts(events) -> str:
    from ticdc_devkit.simulator.model import Ddl, RowChange, Watermark

    kinds = (("row changes", RowChange), ("DDL", Ddl), ("watermarks", Watermark))
    return ", ".join(f"{sum(isinstance(e, cls) for e in events)} {kind}" for kind, cls in kinds)


def run_demo(config_path: str | None = None) -> int:
    from spark_jobs.config import load_config
    from spark_jobs.runtime.spark_session import embedded_paths
    from ticdc_devkit.broker import EmbeddedBroker, produce
    from ticdc_devkit.simulator.shop_stream import shop_stream, shop_stream_more
    from ticdc_devkit.simulator.stream import encode_stream

    started = time.monotonic()
    chosen = load_config(config_path)
    if chosen.runtime.mode == "cluster":
        return run_cluster_demo(chosen, started)
    local_dir = chosen.local_dir
    log.info("preparing a clean lakehouse and Airflow database in %s", local_dir)
    _prepare_environment(local_dir)
    broker = EmbeddedBroker(local_dir / "broker").start()
    try:
        os.environ["TICDC_DEMO_BOOTSTRAP"] = broker.bootstrap
        config = load_config(config_path)
        broker.create_topics([TOPIC], partitions=PARTITIONS)
        events = shop_stream() + shop_stream_more()
        messages = encode_stream(
            "canal-json", events, topic=TOPIC, partitions=PARTITIONS, options=dict(config.source(SOURCE).options)
        )
        published = produce(broker.bootstrap, messages)
        log.info("published %d Canal-JSON messages to %s (upstream: %s)", published, TOPIC, _event_counts(events))
        export = _write_demo_export(local_dir / "demo-export", shop_stream(), events)
        log.info("wrote a Dumpling export of the shop tables as of the first part of the stream: %s", export)

        dag_id = f"ticdc_ingest__{SOURCE}"
        dag_log = local_dir / "logs" / f"demo-{dag_id}.log"
        log.info("running DAG %s with `airflow dags test`; its log: %s", dag_id, dag_log)
        dag_started = time.monotonic()
        run = _run_dag(dag_id, {**os.environ, "TICDC_LAKE_CONFIG": str(config.path)}, dag_log)
        if run.returncode != 0:
            _report_failure(dag_id, run, dag_log)
            return 1
        log.info("DAG run succeeded in %s", _duration(time.monotonic() - dag_started))
        log.info("comparing gold with the upstream database (the simulator's oracle)")
        paths = embedded_paths(config.local_dir)
        places = {
            "warehouse (Iceberg)": paths["warehouse"],
            "metastore (Derby)": paths["metastore"],
            "Airflow home": os.environ["AIRFLOW_HOME"],
            "DAG log": dag_log,
            "broker log": config.local_dir / "broker",
        }
        return 0 if _report(config, events, published, places, started) else 1
    finally:
        broker.stop()


def run_cluster_demo(config, started: float) -> int:
    """The demo on the loopback cluster (`ticdc-kit cluster up`; `config` is its cluster.yaml): the stream into
    the cluster's broker, the ingest DAG run by its scheduler (Spark jobs on its worker, dbt through its Thrift
    Server), the report read by a Spark application of its own."""
    from spark_jobs.config import load_config
    from spark_jobs.errors import ConfigError
    from ticdc_devkit.broker import create_topics, produce
    from ticdc_devkit.cluster import LoopbackCluster
    from ticdc_devkit.simulator.shop_stream import shop_stream, shop_stream_more
    from ticdc_devkit.simulator.stream import encode_stream

    cluster = LoopbackCluster(config.path.parent)
    if not cluster.services or not all(cluster.running().values()):
        raise ConfigError(
            f"{config.path}: no loopback cluster runs from {config.path.parent}; start one with `ticdc-kit cluster up` "
            "and pass its cluster.yaml"
        )
    os.environ.update(cluster.airflow_env())
    config = load_config(config.path)  # the sources' `${TICDC_DEMO_BOOTSTRAP}` is the cluster's broker now
    bootstrap = config.source(SOURCE).kafka.bootstrap_servers
    create_topics(bootstrap, [TOPIC], PARTITIONS)
    events = shop_stream() + shop_stream_more()
    options = dict(config.source(SOURCE).options)
    published = produce(
        bootstrap, encode_stream("canal-json", events, topic=TOPIC, partitions=PARTITIONS, options=options)
    )
    log.info(
        "published %d Canal-JSON messages to %s on %s (upstream: %s)",
        published,
        TOPIC,
        bootstrap,
        _event_counts(events),
    )
    dag_id = f"ticdc_ingest__{SOURCE}"
    run_id = cluster.start_run(dag_id)
    log.info("DAG %s: run %s started by the cluster's scheduler; waiting for it", dag_id, run_id)
    dag_started = time.monotonic()
    state = cluster.wait_for_run(dag_id, run_id)
    dag_logs = cluster.directory / "airflow" / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}"
    if state != "success":
        print(f"\nthe {dag_id} DAG run {run_id} ended {state}; its task logs: {dag_logs}", file=sys.stderr)
        return 1
    log.info("DAG run succeeded in %s", _duration(time.monotonic() - dag_started))
    log.info("comparing gold with the upstream database (the simulator's oracle)")
    places = {
        "warehouse (Iceberg)": config.runtime.catalog.warehouse,
        "metastore (Hive)": config.runtime.catalog.uri,
        "Spark master": config.runtime.spark.master,
        "Thrift Server (dbt)": config.runtime.thrift_server,
        "Airflow API server": f"http://127.0.0.1:{cluster.port('airflow-api-server')}",
        "DAG task logs": dag_logs,
        "service logs": cluster.logs,
    }
    return 0 if _report(config, events, published, places, started) else 1


def _write_demo_export(directory: Path, first_part, events) -> Path:
    """The shop tables as of the first part of the stream, as Dumpling exports them (README, "Backfill"): the
    orders in CSV, gzip-compressed, the rest in SQL."""
    from ticdc_devkit.dumpling_export import write_export
    from ticdc_devkit.simulator.oracle import upstream_schemas, upstream_state

    tso = max(e.commit_ts for e in first_part if hasattr(e, "commit_ts"))
    shutil.rmtree(directory, ignore_errors=True)
    tables = upstream_schemas(events, as_of=tso)
    formats = {name: ("csv", "gzip") for name in tables if name[1] == "orders"}
    return write_export(directory, tso, tables, upstream_state(events, as_of=tso), formats, rows_per_file=20)


def _run_dag(dag_id: str, env: dict[str, str], dag_log: Path) -> DagTestRun:
    """`airflow dags test`, its output into `dag_log` (and the console when verbose), a line per task started."""
    dag_log.parent.mkdir(parents=True, exist_ok=True)
    echo = verbose_requested()
    attempts: dict[str, int] = {}
    run = DagTestRun()
    with (
        dag_log.open("w", encoding="utf-8") as out,
        subprocess.Popen(
            [str(Path(sys.executable).parent / "airflow"), "dags", "test", dag_id],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        ) as process,
    ):
        for line in process.stdout:
            out.write(line)
            if echo:
                sys.stdout.write(line)
            run.task_output.append(line.rstrip("\n"))
            started = TASK_STARTED.search(line)
            if started:
                run.task = started.group(1)
                run.task_output.clear()
                attempts[run.task] = attempts.get(run.task, 0) + 1
                again = f" (attempt {attempts[run.task]})" if attempts[run.task] > 1 else ""
                log.info("  task %s%s", run.task, again)
    run.returncode = process.returncode
    return run


def _report_failure(dag_id: str, run: DagTestRun, dag_log: Path) -> None:
    """The failing task's exception (or its last lines when there is none), then where the whole log is."""
    what = f"in task {run.task}" if run.task else "before any task started"
    lines = [line for line in run.task_output if not AIRFLOW_BOOKKEEPING.match(line)]
    raised = [i for i, line in enumerate(lines) if EXCEPTION_LINE.match(line)]
    shown = lines[raised[-1] :][:FAILURE_LINES] if raised else lines[-FAILURE_LINES:]
    print(f"\nthe {dag_id} DAG run failed {what} (exit {run.returncode}):", file=sys.stderr)
    for line in shown:
        cut = line if len(line) <= FAILURE_LINE_CHARS else line[: FAILURE_LINE_CHARS - 1] + "…"
        print(f"  {cut}", file=sys.stderr)
    print(f"the whole log: {dag_log}", file=sys.stderr)


@dataclass(frozen=True)
class GoldCheck:
    relation: str
    rows: int | None  # None: the table is missing
    upstream_rows: int
    same: bool


def _check_gold(spark, events, as_of: int) -> list[GoldCheck]:
    """Every upstream table as of `as_of` (the simulator's oracle) against its gold table, value for value."""
    from spark_jobs.canonical.values import canonical_type
    from spark_jobs.gold import names
    from ticdc_devkit.gold_check import gold_matches_upstream
    from ticdc_devkit.simulator.oracle import upstream_schemas, upstream_state

    upstream = upstream_state(events, as_of=as_of)
    checks = []
    for (database, table), schema in sorted(upstream_schemas(events, as_of=as_of).items()):
        relation = f"{names.gold_namespace(SOURCE)}.{names.gold_table(database, table)}"
        want = upstream.get((database, table), {})
        if not spark.catalog.tableExists(relation):
            checks.append(GoldCheck(relation, None, len(want), False))
            continue
        columns = [(c.name, canonical_type(c.type)) for c in schema.columns]
        same = gold_matches_upstream(spark, relation, columns, want)
        checks.append(GoldCheck(relation, spark.table(relation).count(), len(want), same))
    return checks


def _as_of_example(spark, events, consistent_ts: int) -> tuple[str, bool] | None:
    """One as-of query from history, halfway through the stream, compared with the oracle then: what to
    print, and whether it was the same."""
    from spark_jobs.canonical.values import canonical_type
    from spark_jobs.gold.history import as_of
    from ticdc_devkit.gold_check import oracle_state, rows_state
    from ticdc_devkit.simulator.oracle import upstream_schemas, upstream_state_in_shape

    stamps = sorted(e.commit_ts for e in events if getattr(e, "commit_ts", None) and e.commit_ts <= consistent_ts)
    schemas = upstream_schemas(events, as_of=consistent_ts)
    if not stamps or not schemas:
        return None
    moment = stamps[len(stamps) // 2]
    (database, table), schema = sorted(schemas.items())[0]
    columns = [(c.name, canonical_type(c.type)) for c in schema.columns]
    rows = as_of(spark, SOURCE, database, table, moment, keep_row_key=True)
    then = upstream_state_in_shape(events, moment, consistent_ts).get((database, table), {})
    same = rows_state(rows.collect(), columns) == oracle_state(then, columns)
    verdict = "the same as upstream then" if same else "DIFFERENT from upstream then"
    return f"{database}.{table} at TiDB ts {moment} ({_tso_time(moment)}): {rows.count()} rows, {verdict}", same


def _report(config, events, published: int, places: dict[str, str], started: float) -> bool:
    """What the demo built, layer by layer, read back from the lakehouse; gold compared with upstream.
    Returns whether every gold table, and the as-of example from history, equals the upstream table."""
    from spark_jobs.gold import names
    from spark_jobs.runtime.spark_session import get_spark
    from spark_jobs.runtime.tables import BRONZE_LANDING_RUNS, SILVER_RUNS

    spark = get_spark(config)
    source = {"source": SOURCE}
    records, landed_bytes = spark.sql(
        f"SELECT sum(records), sum(bytes) FROM {BRONZE_LANDING_RUNS} WHERE source = :source", args=source
    ).collect()[0]
    silver = spark.sql(
        f"SELECT * FROM {SILVER_RUNS} WHERE source = :source ORDER BY finished_at DESC LIMIT 1", args=source
    ).collect()[0]
    ts, consistency = spark.sql(
        "SELECT consistent_ts, consistency FROM lake_staging.int_consistent_ts WHERE source_name = :source",
        args=source,
    ).collect()[0]
    checks = _check_gold(spark, events, ts)

    width = max((len(c.relation) for c in checks), default=0)
    print(f"\nticdc-lakehouse demo: done in {_duration(time.monotonic() - started)}")
    print(
        f"  published  {published} Canal-JSON messages to {TOPIC} ({PARTITIONS} partitions); upstream: {_event_counts(events)}"
    )
    print(f"  bronze     {records} records landed ({landed_bytes:,} bytes)")
    print(
        f"  silver     {silver['decoded']} of {silver['messages']} messages decoded: {silver['row_changes']} row changes,"
        f" {silver['ddl_events']} DDL; {silver['quarantined']} quarantined, {silver['waiting']} waiting"
    )
    print(f"  gold       consistent as of TiDB ts {ts} ({_tso_time(ts)}, {consistency})")
    for c in checks:
        if c.rows is None:
            verdict = f"missing ({c.upstream_rows} rows upstream)"
        elif c.same:
            verdict = f"{c.rows:>5} rows, same rows and values as upstream"
        else:
            verdict = f"{c.rows:>5} rows, DIFFERS from upstream ({c.upstream_rows} rows)"
        print(f"             {c.relation:{width}}  {verdict}")
    versions = {
        c.relation: spark.table(c.relation + names.HISTORY_SUFFIX).count() for c in checks if c.rows is not None
    }
    print(f"  history    {sum(versions.values())} row versions in {len(versions)} history tables")
    as_of_line, as_of_same = _as_of_example(spark, events, ts) or (None, True)
    if as_of_line:
        print(f"  as of      {as_of_line}")
    print("  where")
    for what, where in places.items():
        print(f"    {what:<20} {where}")
    return all(c.same for c in checks) and as_of_same
