"""Maintenance against the real broker, Spark and Iceberg: offsets survive expiry down to one snapshot, compaction
and orphan removal; silver and gold read the same after it; landing concurrent with it loses nothing; branches of
killed landing runs are dropped; tagged snapshots are kept; gold's compaction gives way to a continuous driver and
to a run's commit."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from pathlib import Path

import pytest

from spark_jobs import maintenance
from spark_jobs.bronze import land as landing
from spark_jobs.bronze.land import committed_offsets, land_bronze
from spark_jobs.config import MaintenanceSettings
from spark_jobs.errors import ConcurrentLandingError, DbtError
from spark_jobs.gold.build import build_gold, run_dbt
from spark_jobs.maintenance import (
    TableMaintenance,
    gold_tables,
    keep_published,
    maintain,
    maintain_gold,
    stale_landing_branches,
)
from spark_jobs.runtime.iceberg import iceberg_table, main_snapshot
from spark_jobs.runtime.lock import CONTINUOUS_HOLDER, source_lock
from spark_jobs.runtime.tables import BRONZE_MESSAGES, TABLES
from spark_jobs.silver.build import build_silver
from tests.e2e.test_landing import bronze_records, expected_records
from ticdc_devkit.broker import produce
from ticdc_devkit.simulator.model import Message
from ticdc_devkit.simulator.shop_stream import shop_stream, shop_stream_more
from ticdc_devkit.simulator.stream import encode_stream

pytestmark = pytest.mark.e2e

TO_ONE_SNAPSHOT = MaintenanceSettings(snapshot_retention_days=0, retain_last=1, orphan_age_hours=0)


def sources_config(source_config, *sources, maintenance=TO_ONE_SNAPSHOT):
    """One config with every given source (each made by `source_config`), maintained with `maintenance`."""
    configs = [source_config(name, **options) for name, options in sources]
    return dataclasses.replace(configs[0], sources=[c.sources[0] for c in configs], maintenance=maintenance)


def messages(topic: str, partitions: int, count: int, tag: str) -> list[Message]:
    return [Message(topic, i % partitions, b"k%d" % i, f"{tag}-{i}".encode()) for i in range(count)]


def landed_by(spark, source: str) -> list[int]:
    """Snapshots of bronze whose summary says `source` landed them."""
    return [
        r[0]
        for r in spark.sql(
            f"SELECT snapshot_id FROM {BRONZE_MESSAGES}.snapshots WHERE summary['ticdc.source'] = :source",
            args={"source": source},
        ).collect()
    ]


def data_dir(spark, table: str) -> Path:
    return Path(iceberg_table(spark, table).location().removeprefix("file:")) / "data"


def contents(spark, table: str, source: str | None = None) -> list[str]:
    df = spark.table(table)
    if source is not None:
        df = df.where(df.source == source)
    return sorted(repr(tuple(r)) for r in df.collect())


def test_offsets_survive_expiry_to_one_snapshot_compaction_and_orphan_removal(spark, broker, source_config):
    broker.create_topics(["mo_a"], partitions=2)
    broker.create_topics(["mo_b"], partitions=1)
    config = sources_config(source_config, ("mo_a", {}), ("mo_b", {}))
    produced_a = messages("mo_a", 2, 6, "a1")
    produce(broker.bootstrap, produced_a)
    assert land_bronze(spark, config, "mo_a").records == 6
    a_landing = landed_by(spark, "mo_a")
    produced_b = []
    for i in range(5):
        batch = messages("mo_b", 1, 3, f"b{i}")
        produce(broker.bootstrap, batch)
        produced_b += batch
        assert land_bronze(spark, config, "mo_b").records == 3
        if i == 1:  # a kept publication: Iceberg keeps what a tag references, whatever the retention
            tagged, tagged_rows = main_snapshot(spark), spark.table(BRONZE_MESSAGES).count()
            iceberg_table(spark, BRONZE_MESSAGES).manageSnapshots().createTag("kept_publication", tagged).commit()
    orphan = data_dir(spark, BRONZE_MESSAGES) / "source=mo_a" / "left-by-a-killed-writer.parquet"
    orphan.parent.mkdir(parents=True, exist_ok=True)
    orphan.write_bytes(b"not referenced by any snapshot")
    os.utime(orphan, (1_700_000_000, 1_700_000_000))

    results = {r.table: r for r in maintain(spark, config)}

    bronze = results[BRONZE_MESSAGES]
    assert bronze.files_rewritten >= 5 and bronze.files_added >= 1  # mo_b's five files (mo_a's two: too few)
    assert bronze.snapshots_expired >= 6 and bronze.orphans_removed >= 1
    assert not orphan.exists()
    assert set(results) == {t.name for tables in TABLES.values() for t in tables}
    # what held the offsets before is gone: every snapshot but main's head and the tagged one
    assert not set(a_landing) & {
        r[0] for r in spark.sql(f"SELECT snapshot_id FROM {BRONZE_MESSAGES}.snapshots").collect()
    }
    refs = {
        r["name"]: r["snapshot_id"]
        for r in spark.sql(f"SELECT name, snapshot_id FROM {BRONZE_MESSAGES}.refs").collect()
    }
    assert refs["kept_publication"] == tagged
    assert spark.read.option("snapshot-id", tagged).table(BRONZE_MESSAGES).count() == tagged_rows
    assert spark.sql(f"SELECT count(*) FROM {BRONZE_MESSAGES}.snapshots").collect()[0][0] == 2

    assert committed_offsets(spark, "mo_a") == {("mo_a", 0): 3, ("mo_a", 1): 3}
    assert committed_offsets(spark, "mo_b") == {("mo_b", 0): 15}
    more_a = messages("mo_a", 2, 4, "a2")
    produce(broker.bootstrap, more_a)
    assert land_bronze(spark, config, "mo_a").records == 4
    assert land_bronze(spark, config, "mo_b").records == 0
    assert bronze_records(spark, "mo_a") == expected_records(produced_a + more_a)
    assert bronze_records(spark, "mo_b") == expected_records(produced_b)
    assert committed_offsets(spark, "mo_a") == {("mo_a", 0): 5, ("mo_a", 1): 5}
    iceberg_table(spark, BRONZE_MESSAGES).manageSnapshots().removeTag("kept_publication").commit()


def publish_shop(broker, config, source: str, events) -> int:
    settings = config.source(source)
    return produce(
        broker.bootstrap,
        encode_stream(settings.protocol, events, topic=settings.topics[0], partitions=2, options=settings.options),
    )


def test_silver_and_gold_read_the_same_after_maintenance_and_keep_building(spark, broker, source_config):
    broker.create_topics(["mg"], partitions=2)
    config = sources_config(source_config, ("mg", {"landing": {"max_records_per_run": 8}}))
    landed = publish_shop(broker, config, "mg", shop_stream(customers=6, products=3, orders=8))
    runs = 0
    while land_bronze(spark, config, "mg").records:  # small runs: many small files and snapshots to maintain
        build_silver(spark, config, "mg")
        runs += 1
    assert runs >= 4 and spark.table(BRONZE_MESSAGES).where("source = 'mg'").count() == landed
    published = build_gold(spark, config, "mg", test=False)
    gold = gold_tables(spark, "mg")
    assert set(published.tables) <= set(gold) and published.tables
    run_dbt(["source", "freshness", "--select", "source:silver.watermarks"], config, "mg", {})  # warns only
    with pytest.raises(DbtError, match="dbt source for source mg failed"):  # the stream's watermarks are from 2025
        run_dbt(
            ["source", "freshness", "--select", "source:silver.watermarks"],
            config,
            "mg",
            {"freshness_warn_minutes": 1, "freshness_error_minutes": 2},
        )
    silver_tables = [t.name for t in TABLES["silver"] if t.name != "silver.runs"]
    silver_before = {t: contents(spark, t, "mg") for t in silver_tables}
    gold_before = {t: contents(spark, t) for t in gold}
    first_gold = gold[0]
    publication = main_snapshot(spark, first_gold)
    iceberg_table(spark, first_gold).manageSnapshots().createTag("publication", publication).commit()

    results = {r.table: r for r in maintain(spark, config, "mg")}

    assert set(gold) <= set(results)
    assert results["silver.row_changes"].snapshots_expired >= 3  # (too few files to compact: test 1 compacts)
    assert {t: contents(spark, t, "mg") for t in silver_tables} == silver_before
    assert {t: contents(spark, t) for t in gold} == gold_before
    tagged = spark.read.option("snapshot-id", publication).table(first_gold)
    assert sorted(repr(tuple(r)) for r in tagged.collect()) == gold_before[first_gold]

    # silver's next incremental run reads on from its position (bronze kept what it needs) and gold follows
    more = publish_shop(broker, config, "mg", shop_stream_more(customers=6))
    assert sum(iter(lambda: land_bronze(spark, config, "mg").records, 0)) == more
    assert build_silver(spark, config, "mg").messages == more
    again = build_gold(spark, config, "mg", test=False)
    assert again.consistent_ts > published.consistent_ts


def test_landing_concurrent_with_maintenance_loses_nothing(spark, broker, source_config):
    broker.create_topics(["mc"], partitions=3)
    config = sources_config(
        source_config,
        ("mc", {"landing": {"max_records_per_run": 25}}),
        maintenance=MaintenanceSettings(snapshot_retention_days=0, retain_last=1, orphan_age_hours=72),
    )
    produced = messages("mc", 3, 60, "first")
    produce(broker.bootstrap, produced)
    while land_bronze(spark, config, "mc").records:
        pass
    more = messages("mc", 3, 150, "during")
    produce(broker.bootstrap, more)
    maintenance_done = threading.Event()
    outcome: dict = {"runs": 0, "retried": 0}

    def keep_landing():
        """Landing runs one after another until maintenance is over and nothing is left."""
        try:
            while True:
                try:
                    records = land_bronze(spark, config, "mc").records
                except ConcurrentLandingError:  # what the DAG's task retries cover
                    outcome["retried"] += 1
                    continue
                outcome["runs"] += bool(records)
                if not records and maintenance_done.is_set():
                    return
        except Exception as exc:  # reported by the test's thread
            outcome["error"] = exc

    lander = threading.Thread(target=keep_landing)
    lander.start()
    try:
        results = maintain(spark, config)
    finally:
        maintenance_done.set()
        lander.join(600)
    assert "error" not in outcome, str(outcome.get("error"))
    assert outcome["runs"] >= 2, outcome
    assert bronze_records(spark, "mc") == expected_records(produced + more)
    assert committed_offsets(spark, "mc") == {("mc", p): 70 for p in range(3)}
    assert results[0].table == BRONZE_MESSAGES


def test_a_stale_landing_branch_of_a_killed_run_is_dropped(spark, broker, source_config):
    broker.create_topics(["mk"], partitions=1)
    broker.create_topics(["mk_other"], partitions=1)
    config = sources_config(source_config, ("mk", {}), ("mk_other", {}))
    produced = messages("mk", 1, 5, "killed")
    produce(broker.bootstrap, produced)
    source = config.source("mk")
    # a run killed after writing its rows to its branch, and one killed right after forking its branch
    base = landing.ensure_landing_base(spark)
    plan, _ = landing.plan_run(spark, source)
    wrote, forked = f"land_{'a' * 32}", f"land_{'b' * 32}"
    for branch in (wrote, forked):
        iceberg_table(spark, BRONZE_MESSAGES).manageSnapshots().createBranch(branch, base).commit()
    rows = landing.read_records(spark, source, plan.ranges, "a" * 32).drop("record_bytes", "stopped_early")
    rows.writeTo(f"{BRONZE_MESSAGES}.`branch_{wrote}`").append()
    assert stale_landing_branches(spark) == []  # main could still move to them: they may belong to live runs

    produce(broker.bootstrap, messages("mk_other", 1, 2, "other"))
    assert land_bronze(spark, config, "mk_other").records == 2  # main moves on: no run can publish them now
    assert stale_landing_branches(spark) == [wrote, forked]
    bronze = maintain(spark, config)[0]
    assert bronze.branches_dropped == [wrote, forked]
    refs = [r[0] for r in spark.sql(f"SELECT name FROM {BRONZE_MESSAGES}.refs").collect()]
    assert not [name for name in refs if name.startswith("land_")]

    assert land_bronze(spark, config, "mk").records == 5
    assert bronze_records(spark, "mk") == expected_records(produced)


def test_a_gold_table_keeps_the_snapshot_a_publication_within_the_retention_can_name(spark):
    """A publication pins a table no run changed to the snapshot it already had, however old: maintenance tags the
    snapshot each gold table had at the retention's start, so expiry keeps it (and everything newer is kept by the
    retention), and every publication within the retention stays readable."""
    snapshots: dict[str, tuple[int, int]] = {}
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake_staging")  # a run of this test alone has built no gold yet
    for table in ("lake_staging.kept_probe", "lake_staging.unkept_probe"):
        spark.sql(f"CREATE OR REPLACE TABLE {table} (n INT) USING iceberg")
        before_any = int(time.time() * 1000) - 1
        spark.sql(f"INSERT INTO {table} VALUES (1)")
        snapshots[table] = (main_snapshot(spark, table), int(time.time() * 1000))
        time.sleep(0.05)
        spark.sql(f"INSERT INTO {table} VALUES (2)")
        spark.sql(f"INSERT INTO {table} VALUES (3)")
    kept, kept_at = snapshots["lake_staging.kept_probe"]
    assert keep_published(spark, "lake_staging.kept_probe", before_any - 60_000) is None  # younger than that
    assert keep_published(spark, "lake_staging.kept_probe", kept_at) == kept
    for table in snapshots:
        iceberg_table(spark, table).expireSnapshots().expireOlderThan(int(time.time() * 1000) + 1).retainLast(
            1
        ).commit()
    assert [r[0] for r in spark.read.option("snapshot-id", kept).table("lake_staging.kept_probe").collect()] == [1]
    unkept = snapshots["lake_staging.unkept_probe"][0]
    remaining = {r[0] for r in spark.sql("SELECT snapshot_id FROM lake_staging.unkept_probe.snapshots").collect()}
    assert unkept not in remaining  # without the tag, expiry removes it


def test_gold_compaction_gives_way_to_a_continuous_driver_and_to_a_commit_that_came_first(
    spark, source_config, monkeypatch
):
    """A source's gold is compacted under the source's lock, as its runs write. A continuous driver holds that lock
    as long as it runs and compacts the tables it merges into itself: maintenance leaves them uncompacted and still
    expires their snapshots. A run that commits to a table while maintenance compacts it (in cluster mode, another
    process; here a session of its own) makes Iceberg refuse the compaction: the table keeps the run's rows, and the
    next maintenance compacts it."""
    source = "mgc"
    config = sources_config(source_config, (source, {}))
    relation = f"gold_{source}.orders"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS gold_{source}")
    spark.sql(
        f"CREATE OR REPLACE TABLE {relation} (id int, n int) USING iceberg TBLPROPERTIES ('format-version' = '2', "
        "'write.delete.mode' = 'merge-on-read', 'write.update.mode' = 'merge-on-read', "
        "'write.merge.mode' = 'merge-on-read')"
    )

    def small_files(first: int) -> None:
        for i in range(first, first + 3):
            spark.sql(f"INSERT INTO {relation} VALUES ({i}, {i})")

    def maintained() -> TableMaintenance:
        return {r.table: r for r in maintain_gold(spark, config, source)}[relation]

    small_files(1)
    release, held = threading.Event(), threading.Event()

    def driver() -> None:
        with source_lock(config.local_dir, source, f"{CONTINUOUS_HOLDER} {source}"):
            held.set()
            release.wait(60)

    thread = threading.Thread(target=driver)
    thread.start()
    try:
        assert held.wait(10)
        left = maintained()
    finally:
        release.set()
        thread.join()
    assert (left.not_compacted, left.files_rewritten) == ("the continuous driver running for the source compacts it", 0)
    assert left.snapshots_expired == 2  # of its three, to the newest

    small_files(4)
    overtook: list[str] = []

    def loaded_then_overtaken(session, table: str):
        loaded = iceberg_table(session, table)
        if table == relation and not overtook:  # a run's commit right after the compaction loaded the table
            overtook.append(table)
            spark.newSession().sql(f"UPDATE {relation} SET n = 10 WHERE id = 1")
        return loaded

    monkeypatch.setattr(maintenance, "iceberg_table", loaded_then_overtaken)
    overtaken = maintained()
    monkeypatch.undo()
    assert overtook == [relation]
    assert overtaken.not_compacted.startswith("another writer committed to it meanwhile") and overtaken.files_added == 0
    rows = [(1, 10), *((i, i) for i in range(2, 7))]
    assert sorted(map(tuple, spark.table(relation).collect())) == rows

    compacted = maintained()
    assert compacted.not_compacted == "" and compacted.files_rewritten >= 4 and compacted.files_added == 1
    assert sorted(map(tuple, spark.table(relation).collect())) == rows
