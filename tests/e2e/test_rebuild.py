"""Rebuild any layer from the one below, through the `ticdc_rebuild` DAG: each layer rebuilt equals what the
incremental runs built (silver row for row; gold and history table by table), only what was asked for is
replaced, and a run of the ingest DAG triggered while a rebuild holds the source waits for it, then carries the
new changes through to gold that equals the upstream database.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import threading

import pytest

from spark_jobs import steps
from spark_jobs.bronze.land import land_bronze
from spark_jobs.gold import names
from spark_jobs.gold.build import build_gold, planned_models
from spark_jobs.runtime.iceberg import main_snapshot
from spark_jobs.runtime.lock import source_lock
from spark_jobs.runtime.tables import BRONZE_LANDING_RUNS, SILVER_RUNS, TABLES
from spark_jobs.silver.build import build_silver
from tests.e2e.kill import slices
from tests.e2e.test_gold_oracle import assert_gold_is_upstream, gold_snapshot
from tests.e2e.test_ingest_dag import _dags_folder
from ticdc_devkit.broker import produce
from ticdc_devkit.simulator.workload import random_workload

pytestmark = pytest.mark.e2e

SOURCE, SEED = "rebuilt", 20261126
RUN_SPECIFIC = {"silver_seq", "quarantined_at", "first_seen_at"}  # differ between two decodes of the same bronze


def silver_of_source(spark, source: str) -> dict[str, list[str]]:
    """Every silver table's rows of a source, without what differs between two decodes, as sorted JSON."""
    from pyspark.sql import functions as F

    tables = {}
    for table in TABLES["silver"]:
        if table.name == SILVER_RUNS:
            continue
        rows = spark.table(table.name).where(F.col("source") == source).toJSON().collect()
        tables[table.name] = sorted(
            json.dumps({k: v for k, v in json.loads(row).items() if k not in RUN_SPECIFIC}, sort_keys=True)
            for row in rows
        )
    return tables


def snapshots(spark, source: str) -> dict[str, int]:
    """The current snapshot id of every gold and history table of a source."""
    namespace = names.gold_namespace(source)
    return {t: main_snapshot(spark, f"{namespace}.{t}") for t in gold_snapshot(spark, source)}


def trigger(dag_id: str, conf: dict | None = None, skip: str | None = None):
    """One run of a DAG of the repository's dags/ folder, in this process (tasks matching the regex `skip` are
    marked done without running); fails the test unless it succeeds."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.utils.state import DagRunState

    bag = DagBag(dag_folder=str(_dags_folder()))
    assert not bag.import_errors, bag.import_errors
    run = bag.get_dag(dag_id).test(run_conf=conf, mark_success_pattern=skip)
    assert run.state == DagRunState.SUCCESS, f"{dag_id} ended {run.state}"
    return run


def test_each_layer_rebuilt_equals_incremental_and_ingest_waits_for_a_rebuild(
    spark, broker, airflow_db, source_config, config_file, tmp_path, monkeypatch
):
    workload = random_workload(SEED, tables=3, changes=40, preexisting=1, protocol="canal-json")
    config = source_config(SOURCE, "canal-json")
    monkeypatch.setenv("TICDC_LAKE_CONFIG", str(config_file(config, tmp_path / "pipeline.yaml")))
    first, second, third = slices(workload, 3, random.Random(SEED), SOURCE)
    broker.create_topics([SOURCE], partitions=1)
    for part in (first, second):
        produce(broker.bootstrap, part)
        land_bronze(spark, config, SOURCE)
        build_silver(spark, config, SOURCE)
        build_gold(spark, config, SOURCE, test=False)
    silver, gold, before = silver_of_source(spark, SOURCE), gold_snapshot(spark, SOURCE), snapshots(spark, SOURCE)
    histories = {t for t in before if t.endswith(names.HISTORY_SUFFIX)}
    assert histories and len(before) == 2 * len(histories), f"gold tables: {sorted(before)}"

    trigger("ticdc_rebuild", {"source": SOURCE, "layer": "silver", "tables": ""})
    assert silver_of_source(spark, SOURCE) == silver, "silver rebuilt from bronze differs from the incremental silver"
    assert snapshots(spark, SOURCE) == before, "rebuilding silver touched gold"
    build_gold(spark, config, SOURCE, test=False)  # every silver row is new to gold now: it recomputes every key
    assert gold_snapshot(spark, SOURCE) == gold, "gold built after the silver rebuild differs"
    before = snapshots(spark, SOURCE)

    model = planned_models(spark, SOURCE)[0]
    named = ".".join("`" + name.replace("`", "``") + "`" for name in (model.database, model.table))
    trigger("ticdc_rebuild", {"source": SOURCE, "layer": "gold", "tables": named})
    after = snapshots(spark, SOURCE)
    assert gold_snapshot(spark, SOURCE) == gold, "gold rebuilt from silver differs from the incremental gold"
    assert {t for t in before if after[t] != before[t]} == {model.alias}, "other tables than the one asked for rebuilt"

    trigger("ticdc_rebuild", {"source": SOURCE, "layer": "history", "tables": ""})
    again = snapshots(spark, SOURCE)
    assert gold_snapshot(spark, SOURCE) == gold, "history rebuilt from silver differs from the incremental history"
    assert {t for t in after if again[t] != after[t]} == histories, "a history rebuild replaced other tables"

    produce(broker.bootstrap, third)
    held, finished = threading.Event(), {}

    def rebuild_holding_the_source():
        with source_lock(config.local_dir, SOURCE, "rebuild gold"):
            held.set()
            steps.rebuild({"source": SOURCE, "layer": "gold"}, config)
            finished["at"] = dt.datetime.now()

    rebuilding = threading.Thread(target=rebuild_holding_the_source)
    rebuilding.start()
    held.wait(60)
    triggered_at = dt.datetime.now()
    trigger(f"ticdc_ingest__{SOURCE}", skip="check_freshness|record_status|generate_docs")  # tested elsewhere
    rebuilding.join()
    assert triggered_at < finished["at"], "the rebuild was over before the ingest run was triggered: nothing tested"
    landed = spark.sql(
        f"SELECT max(landed_at), count_if(landed_at >= :after) FROM {BRONZE_LANDING_RUNS} WHERE source = :source",
        args={"source": SOURCE, "after": finished["at"]},
    ).collect()[0]
    assert landed[1] > 0, f"the ingest run landed at {landed[0]}, before the rebuild it had to wait for ended"
    assert_gold_is_upstream(spark, SOURCE, workload, workload.consistent_ts)
