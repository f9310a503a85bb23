"""The embedded demo: a real broker on loopback, a TiCDC change stream, the ingest DAG, gold tables.

The broker keeps its topics in memory, so each demo starts from a clean lakehouse under the local
directory (the previous demo's tables described a broker that no longer exists).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

from spark_jobs.config import PROJECT_ROOT

log = logging.getLogger("ticdc-lake.demo")

SOURCE, TOPIC, PARTITIONS = "shop", "shop_cdc", 3
DEMO_STATE = ("warehouse", "metastore_db", "derby", "airflow", "broker", "spark-tmp")


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
        }
    )
    os.environ.setdefault("AIRFLOW__API_AUTH__JWT_SECRET", os.urandom(48).hex())
    log.info("migrating the Airflow database in %s", airflow_home)
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


def run_demo(config_path: str | None = None) -> int:
    from spark_jobs.config import load_config
    from spark_jobs.devkit.broker import EmbeddedBroker, produce
    from spark_jobs.devkit.simulator.oracle import upstream_state
    from spark_jobs.devkit.simulator.shop_stream import shop_stream, shop_stream_more
    from spark_jobs.devkit.simulator.stream import encode_stream

    local_dir = load_config(config_path).local_dir
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
        log.info(
            "publishing %d Canal-JSON messages (%d logical changes) to %s",
            produce(broker.bootstrap, messages),
            len(events),
            TOPIC,
        )

        dag_id = f"ticdc_ingest__{SOURCE}"
        log.info("running the %s DAG with `airflow dags test`", dag_id)
        result = subprocess.run(
            [str(Path(sys.executable).parent / "airflow"), "dags", "test", dag_id],
            env={**os.environ, "TICDC_LAKE_CONFIG": str(config.path)},
        )
        if result.returncode != 0:
            print(f"the {dag_id} DAG run failed (exit {result.returncode}); see the task logs above", file=sys.stderr)
            return 1
        _report(config, events, upstream_state)
        return 0
    finally:
        broker.stop()


def _report(config, events, upstream_state) -> None:
    """What the demo built: tables, rows, the consistent timestamp, and whether gold matches upstream."""
    import json

    from spark_jobs.devkit.gold_check import gold_matches_upstream
    from spark_jobs.runtime.spark_session import embedded_paths, get_spark

    spark = get_spark(config)
    ts = spark.sql(
        f"SELECT consistent_ts, consistency FROM lake_staging.int_consistent_ts WHERE source_name = '{SOURCE}'"
    ).collect()[0]
    upstream = upstream_state(events, as_of=ts[0])
    print("\nticdc-lakehouse demo: what was built\n")
    print(f"  consistent as of TiDB ts {ts[0]} ({_tso_time(ts[0])}, {ts[1]})\n")
    print(f"  {'table':38} {'rows':>6}   upstream rows")
    for layer in ("bronze", "silver", "gold"):
        for t in sorted(r["tableName"] for r in spark.sql(f"SHOW TABLES IN {layer}").collect() if not r["isTemporary"]):
            name = f"{layer}.{t}"
            rows = spark.table(name).count()
            expect = ""
            if layer == "gold":
                database, _, table = t.partition("__")
                want = upstream.get((database, table), {})
                schema = json.loads(
                    spark.sql(
                        f"SELECT table_schema FROM lake_staging.int_table_schemas WHERE source_name = '{SOURCE}' "
                        f"AND upstream_database = '{database}' AND upstream_table = '{table}'"
                    ).collect()[0][0]
                )
                columns = [(c["name"], c["type"]) for c in schema["columns"]]
                same = gold_matches_upstream(spark, name, columns, want)
                expect = f"{len(want)}  {'same rows and values' if same else 'DIFFERS'}"
            print(f"  {name:38} {rows:>6}   {expect}")
    paths = embedded_paths(config.local_dir)
    print("\n  files:")
    print(f"    warehouse (Iceberg tables)  {paths['warehouse']}")
    print(f"    Hive metastore (Derby)      {paths['metastore']}")
    print(f"    Airflow home                {os.environ['AIRFLOW_HOME']}")
    print(f"    broker log                  {config.local_dir / 'broker'}")
    print("\n  a look at gold.shop__customers:")
    spark.table("gold.shop__customers").orderBy("id").show(5, truncate=False)
