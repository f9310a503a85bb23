"""Continuous mode in the test session's own Spark: a driver in a thread runs batches while the stream grows, and
after each slice of the stream gold reaches that slice's last commit; a scheduled run of the source's ingest DAG
meanwhile is skipped; when the driver stops, gold and history equal the upstream database, and its counts,
heartbeat, status snapshot and docs site say what it did."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import random
import threading
import time
from collections import Counter

import pytest

from spark_jobs.config import MaintenanceSettings
from spark_jobs.gold import build as gold_build
from spark_jobs.maintenance import compact_table, gold_tables
from spark_jobs.runtime import heartbeat
from spark_jobs.runtime.tables import BRONZE_MESSAGES, SILVER_ROW_CHANGES
from spark_jobs.status.snapshot import read_snapshot
from spark_jobs.steps import continuous
from spark_jobs.steps.continuous import due_for_compaction, pause_seconds, run_continuously
from spark_jobs.steps.ingest import run_once
from spark_jobs.steps.maintaining import compact_gold
from tests.e2e.kill import REPO, slices
from tests.e2e.test_gold_oracle import assert_gold_is_upstream, assert_history_is_upstream
from ticdc_devkit.broker import produce
from ticdc_devkit.simulator.workload import random_workload

pytestmark = pytest.mark.e2e

SOURCE, SEED, SLICES = "continuous", 20261127, 3
CATCH_UP_SECONDS = 300.0


def wait_for_batch_with(local_dir, records: int, driver: threading.Thread, source: str = SOURCE) -> dict:
    """The heartbeat once the driver has landed `records` records in all (its batches keep running meanwhile):
    the batch that landed the last of them has decoded and published them too."""
    deadline, beat = time.monotonic() + CATCH_UP_SECONDS, None
    while time.monotonic() < deadline:
        beat = heartbeat.read_heartbeat(local_dir, source)
        if beat and beat["records"] >= records:
            return beat
        assert driver.is_alive(), f"the driver stopped before landing {records} records: {beat}"
        time.sleep(0.5)
    raise AssertionError(f"the driver did not land {records} records in {CATCH_UP_SECONDS}s: {beat}")


def test_batches_follow_the_stream_and_gold_equals_upstream(
    spark, broker, source_config, config_file, airflow_db, tmp_path, monkeypatch
):
    monkeypatch.setattr(continuous, "COMPACT_AFTER", 2)  # a table two batches built is compacted
    # the heartbeat keeps every batch, however many empty ones the driver runs while the scheduled run goes on
    monkeypatch.setattr(heartbeat, "RECENT_BATCHES", 10_000)
    workload = random_workload(SEED, tables=2, changes=40, protocol="canal-json")
    config = source_config(SOURCE, "canal-json")
    broker.create_topics([SOURCE], partitions=1)
    parts = slices(workload, SLICES, random.Random(SEED), SOURCE)
    stop, outcome = threading.Event(), {}

    def drive() -> None:
        outcome["result"] = run_continuously(SOURCE, config, interval=1.0, stop=stop)

    driver = threading.Thread(target=drive, name="continuous driver")
    driver.start()
    try:
        produced, published = 0, [0]
        for part in parts:
            produce(broker.bootstrap, part)
            produced += len(part)
            beat = wait_for_batch_with(config.local_dir, produced, driver)
            assert beat["records"] == produced, "no record landed twice"
            assert beat["consistent_ts"] > published[-1], "each slice's watermark moves gold on"
            assert heartbeat.is_alive(beat)
            published.append(beat["consistent_ts"])
        tasks = scheduled_run(config_file(config, tmp_path / "pipeline.yaml"))
        assert tasks["check_config"] == tasks["land"] == tasks["publish_gold"] == "skipped", tasks
    finally:
        stop.set()
        driver.join(timeout=CATCH_UP_SECONDS)
    assert not driver.is_alive()

    result = outcome["result"]
    assert result.stopped_by == "stop"
    assert result.batches >= SLICES and result.paused == 0
    assert result.records == produced
    landed = spark.table(BRONZE_MESSAGES).where(f"source = '{SOURCE}'").count()
    assert landed == produced, "every message landed exactly once"
    rows = spark.table(SILVER_ROW_CHANGES).where(f"source = '{SOURCE}'").count()
    assert result.row_changes == rows
    assert result.consistent_ts == workload.consistent_ts
    assert result.compacted >= 1  # (this workload's DDL rebuilds its tables: test_compaction below rewrites files)
    assert_gold_is_upstream(spark, SOURCE, workload, workload.consistent_ts)  # compacted: deletes applied, no row lost
    stamps = sorted({e.commit_ts for e in workload.events if hasattr(e, "commit_ts")})
    assert_history_is_upstream(spark, SOURCE, workload, workload.consistent_ts, stamps)

    beat = heartbeat.read_heartbeat(config.local_dir, SOURCE)
    assert beat["state"] == heartbeat.STOPPED and not heartbeat.is_alive(beat)
    assert beat["batches"] == result.batches and beat["consistent_ts"] == workload.consistent_ts
    assert len(beat["recent"]) == result.batches
    assert sum(b["records"] for b in beat["recent"]) == produced
    status = read_snapshot(config.local_dir, SOURCE)  # kept by the driver after its first batch
    assert status is not None and status["history"][0]["run_id"].startswith("continuous__")
    catalog = json.loads((config.local_dir / "dbt" / "target" / "catalog.json").read_text())
    described = [node for node in catalog["nodes"] if node.startswith(f"model.ticdc_lakehouse.gold_{SOURCE}__")]
    assert len(described) > 2, "the docs site describes the tables the driver built"


def test_compaction_leaves_a_merged_table_one_data_file_and_its_rows(spark, source_config):
    """What the driver does to a gold table COMPACT_AFTER batches merged into: small files and delete files become
    one data file (and at most one delete file), with the same rows."""
    config = source_config("compaction")
    relation = "gold_compaction.orders"
    spark.sql("CREATE NAMESPACE IF NOT EXISTS gold_compaction")
    spark.sql(
        f"CREATE OR REPLACE TABLE {relation} (id int, n int) USING iceberg TBLPROPERTIES ('format-version' = '2', "
        "'write.delete.mode' = 'merge-on-read', 'write.update.mode' = 'merge-on-read', "
        "'write.merge.mode' = 'merge-on-read')"
    )
    spark.sql(f"INSERT INTO {relation} VALUES (1, 1), (2, 2), (3, 3)")
    for batch in range(3):  # as batches do: a merge-on-read MERGE each, a data file and a delete file each
        spark.sql(
            f"MERGE INTO {relation} t USING (SELECT {batch + 1} AS id, {10 * batch} AS n UNION ALL "
            f"SELECT {batch + 10} AS id, {batch} AS n) s ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET t.n = s.n WHEN NOT MATCHED THEN INSERT *"
        )
    rows = sorted(map(tuple, spark.table(relation).collect()))

    def files() -> dict[int, int]:
        return {
            r[0]: r[1] for r in spark.sql(f"SELECT content, count(*) FROM {relation}.files GROUP BY content").collect()
        }

    assert files()[0] >= 4 and files()[1] >= 2
    compacted = compact_gold("compaction", [relation, "gold_compaction.dropped_since"], config)
    assert [(c.table, c.files_added) for c in compacted.tables] == [(relation, 1)]  # a table gone is left alone
    assert files()[0] == 1 and files().get(1, 0) <= 1  # one data file; at most one delete file
    assert sorted(map(tuple, spark.table(relation).collect())) == rows
    assert rows == [(1, 0), (2, 10), (3, 20), (10, 0), (11, 1), (12, 2)]


def test_a_batch_a_compaction_overtook_is_paused_and_run_again(spark, broker, source_config, monkeypatch, caplog):
    """In cluster mode the maintenance DAG may compact a gold table while a batch merges into it. A compaction that
    commits first replaces the data files the batch's merge-on-read deletes name, and Iceberg refuses the batch's
    commit: the driver pauses that batch as after an outage and runs it again, and gold and history equal upstream.
    The compaction runs in a session of its own, whose catalog is not the batch's (another process, in cluster
    mode), while the batch's dbt starts; the batch's session has its tables loaded already."""
    source = "overtaken"
    workload = random_workload(SEED, tables=1, changes=60, ddl=False, preexisting=0, protocol="canal-json")
    config = source_config(source, "canal-json")
    broker.create_topics([source], partitions=1)
    parts = slices(workload, 3, random.Random(SEED), source)
    for part in parts[:2]:  # a first build, then a merge: each gold and history table has two data files or more
        produce(broker.bootstrap, part)
        assert run_once(source, config).published.built
    relations = [r for r in gold_tables(spark, source) if r.startswith(f"gold_{source}.")]
    maintenance_session, compacted = spark.newSession(), []
    run_dbt = gold_build.run_dbt

    def overtaken(args, *more, **options):
        if not compacted and any(a.startswith(f"gold_{source}__") for a in args):
            for relation in relations:
                spark.table(relation).count()
                compacted.append(compact_table(maintenance_session, relation, min_input_files=2))
        return run_dbt(args, *more, **options)

    monkeypatch.setattr(gold_build, "run_dbt", overtaken)
    produce(broker.bootstrap, parts[2])
    with caplog.at_level(logging.WARNING, logger="spark_jobs.steps.continuous"):
        result = run_continuously(source, config, interval=0.5, max_batches=1, status_every=3600)

    assert len(relations) == 2 and all(c.files_rewritten >= 2 for c in compacted), compacted
    assert (result.batches, result.paused) == (1, 1)
    assert "Iceberg refused a commit: another writer committed to the table first (Cannot commit" in caplog.text
    assert result.consistent_ts == workload.consistent_ts
    assert_gold_is_upstream(spark, source, workload, workload.consistent_ts)
    stamps = sorted({e.commit_ts for e in workload.events if hasattr(e, "commit_ts")})
    assert_history_is_upstream(spark, source, workload, workload.consistent_ts, stamps)


def scheduled_run(config_path) -> dict[str, str]:
    """The source's ingest DAG run once (while the driver runs): each task's state."""
    from airflow.dag_processing.dagbag import DagBag

    previous = os.environ["TICDC_LAKE_CONFIG"]
    os.environ["TICDC_LAKE_CONFIG"] = str(config_path)
    try:
        bag = DagBag(dag_folder=str(REPO / "dags"))
        assert not bag.import_errors, bag.import_errors
        run = bag.get_dag(f"ticdc_ingest__{SOURCE}").test()
    finally:
        os.environ["TICDC_LAKE_CONFIG"] = previous
    return {ti.task_id: str(ti.state) for ti in run.get_task_instances()}


def test_compactions_are_spread_over_the_batches():
    """40 tables that every batch merges into all reach COMPACT_AFTER in the same batch: the driver compacts at most
    a tenth of them after each batch from then on, and each table again within twice COMPACT_AFTER batches."""
    assert due_for_compaction(Counter({"a": 12, "c": 10, "b": 10, "d": 9})) == ["a"]
    merged: Counter[str] = Counter()
    tables = [f"gold_s.t{i:02}" for i in range(40)]
    last = dict.fromkeys(tables, 0)
    for batch in range(1, 61):
        merged.update(tables)
        due = due_for_compaction(merged)
        assert len(due) == (0 if batch < continuous.COMPACT_AFTER else 4), (batch, due)
        for relation in due:
            assert batch - last[relation] < 2 * continuous.COMPACT_AFTER
            last[relation] = batch
            del merged[relation]
    assert all(batch > 40 for batch in last.values())


def test_pauses_grow_to_a_limit():
    assert [pause_seconds(10, attempt) for attempt in (1, 2, 3, 6)] == [10, 20, 40, 300]
    assert pause_seconds(0.5, 1) == 1.0


def test_a_restarted_driver_counts_maintenance_from_the_last_one(tmp_path):
    """Embedded mode's lakehouse maintenance by the driver is due `maintenance.continuous_every` after the last
    one, which the heartbeat keeps: a driver restarted more often than that still maintains the lakehouse."""
    first = continuous._Driver("shop", tmp_path, 1.0)
    assert abs(first.maintained_at_ms - heartbeat.now_ms()) < 5_000  # a first driver starts the clock
    first.maintained_at_ms = heartbeat.now_ms() - 3_600_000
    first.beat(maintained_at_ms=first.maintained_at_ms)
    again = continuous._Driver("shop", tmp_path, 1.0)
    assert again.maintained_at_ms == first.maintained_at_ms
    assert again.document["maintained_at_ms"] == first.maintained_at_ms


def test_a_failed_maintenance_does_not_stop_the_batches(source_config, tmp_path, monkeypatch, caplog):
    """Embedded mode: the driver's maintenance of the lakehouse failing on something other than a transient fault
    is logged with its cause and tried again an interval later; the batches go on. (The failure is injected into
    the step: a metastore that fails on maintenance alone cannot be made here.)"""
    config = dataclasses.replace(
        source_config(SOURCE, "canal-json"), maintenance=MaintenanceSettings(continuous_every="1h")
    )
    assert config.runtime.mode == "embedded"
    calls = []

    def failing(**kwargs):
        calls.append(kwargs)
        raise RuntimeError("the metastore said no\n\tat a Java stack")

    monkeypatch.setattr(continuous, "maintain", failing)
    driver = continuous._Driver(SOURCE, tmp_path, 1.0)
    driver.maintained_at_ms = heartbeat.now_ms() - 2 * 3_600_000
    with caplog.at_level(logging.WARNING, logger=continuous.__name__):
        driver.keep_lakehouse(config)
        driver.keep_lakehouse(config)  # not due again until an hour after the failure
    assert len(calls) == 1 and driver.maintained == 0
    expected = f"source {SOURCE}: lakehouse maintenance failed after batch 0: RuntimeError: the metastore said no; "
    assert expected + "trying again in 1h" in caplog.text
    assert heartbeat.read_heartbeat(tmp_path, SOURCE)["maintained_at_ms"] == driver.maintained_at_ms
