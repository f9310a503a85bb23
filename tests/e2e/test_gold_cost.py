"""Gold at the cost of what changed: a run builds, checks and commits only the tables it must change; every other
table is pinned, as it is, in the run's publication at the new consistent timestamp, and every table equals the
upstream database after every run. A run with only a watermark runs no dbt and commits to no gold table; a run with
nothing new writes nothing; a full check reads every table whole (README, "What a gold run costs")."""

from __future__ import annotations

import pytest

from spark_jobs.bronze.land import land_bronze
from spark_jobs.errors import DbtError
from spark_jobs.gold import names
from spark_jobs.gold.build import build_gold
from spark_jobs.gold.publish import latest_publication
from spark_jobs.runtime.iceberg import main_snapshot
from spark_jobs.runtime.tables import GOLD_PUBLICATIONS
from spark_jobs.silver.build import build_silver
from tests.e2e.test_gold_oracle import assert_gold_is_upstream
from tests.e2e.test_silver import tso
from ticdc_devkit.broker import produce
from ticdc_devkit.simulator.model import Column, Ddl, RowChange, Table, Watermark
from ticdc_devkit.simulator.stream import EXTENSION_OPTIONS, encode_stream
from ticdc_devkit.simulator.workload import Workload, create_table_sql

pytestmark = pytest.mark.e2e

SOURCE = "gold_cost"
TABLES = [
    Table("many", f"t{i}", (Column("id", "int", nullable=False), Column("n", "int")), ("id",), table_id=900 + i)
    for i in range(8)
]
TOUCHED = TABLES[2:4]


def insert(ms: int, table: Table, key: int, n: int) -> RowChange:
    return RowChange(tso(ms), "insert", table, after={"id": key, "n": n})


def first_run() -> list:
    events: list = [Ddl(tso(1), t.database, t.name, create_table_sql(t), "create_table", table_after=t) for t in TABLES]
    events += [insert(10 + i, t, key, key) for i, t in enumerate(TABLES) for key in range(3)]
    return [*events, Watermark(tso(100))]


def second_run() -> list:
    table = TOUCHED[0]
    return [
        RowChange(tso(200), "update", table, before={"id": 1, "n": 1}, after={"id": 1, "n": 10}),
        RowChange(tso(210), "delete", table, before={"id": 2, "n": 2}),
        insert(220, TOUCHED[1], 7, 7),
        Watermark(tso(300)),
    ]


def snapshots(spark) -> dict[str, int]:
    namespace = names.gold_namespace(SOURCE)
    return {
        relation: main_snapshot(spark, relation)
        for t in TABLES
        for relation in (
            f"{namespace}.{names.gold_table(t.database, t.name)}",
            f"{namespace}.{names.history_table(t.database, t.name)}",
        )
    }


def publications(spark) -> int:
    return spark.sql(f"SELECT count(*) FROM {GOLD_PUBLICATIONS} WHERE source = :s", args={"s": SOURCE}).collect()[0][0]


def carry(spark, broker, config, events: list):
    produce(
        broker.bootstrap,
        encode_stream("canal-json", events, topic=SOURCE, partitions=1, options=EXTENSION_OPTIONS["canal-json"]),
    )
    land_bronze(spark, config, SOURCE)
    build_silver(spark, config, SOURCE)
    return build_gold(spark, config, SOURCE)


def test_a_run_builds_only_the_tables_that_changed(spark, broker, source_config):
    broker.create_topics([SOURCE], partitions=1)
    config = source_config(SOURCE)
    events = first_run()
    first = carry(spark, broker, config, events)
    assert len(first.built) == 2 * len(TABLES)
    assert_gold_is_upstream(spark, SOURCE, Workload(0, "canal-json", events, []), tso(100))
    before = snapshots(spark)

    events += second_run()
    second = carry(spark, broker, config, second_run())
    assert second.consistent_ts == tso(300)
    assert_gold_is_upstream(spark, SOURCE, Workload(0, "canal-json", events, []), tso(300))
    after = snapshots(spark)
    changed = {relation for relation in after if after[relation] != before[relation]}
    namespace = names.gold_namespace(SOURCE)
    touched = {
        f"{namespace}.{name}"
        for t in TOUCHED
        for name in (names.gold_table(t.database, t.name), names.history_table(t.database, t.name))
    }
    assert changed == touched == set(second.built)
    publication = latest_publication(spark, SOURCE)
    assert publication["consistent_ts"] == tso(300)
    assert {t["relation"]: t["snapshot_id"] for t in publication["tables"]} == after  # untouched: pinned as they were
    assert {t["relation"]: t["rows"] for t in publication["tables"] if "__history" not in t["relation"]} == {
        f"{namespace}.{names.gold_table(t.database, t.name)}": 2 if t is TOUCHED[0] else 4 if t is TOUCHED[1] else 3
        for t in TABLES
    }

    events.append(Watermark(tso(400)))
    published = publications(spark)
    third = carry(spark, broker, config, [Watermark(tso(400))])  # only the consistent ts moves: no table changes
    assert third.consistent_ts == tso(400) and third.built == []
    assert snapshots(spark) == after and publications(spark) == published + 1
    assert latest_publication(spark, SOURCE)["consistent_ts"] == tso(400)
    assert_gold_is_upstream(spark, SOURCE, Workload(0, "canal-json", events, []), tso(400))

    again = build_gold(spark, config, SOURCE)  # nothing new at all: nothing is written
    assert again.built == [] and again.consistent_ts == tso(400) and publications(spark) == published + 1
    assert again.needing_snapshot == []

    # a DDL that changed rows TiCDC does not send: every later run names the table, whether it plans or not
    partitioned = TABLES[5]
    sql = f"ALTER TABLE `{partitioned.database}`.`{partitioned.name}` TRUNCATE PARTITION p0"
    truncated = Ddl(
        tso(500), "many", "t5", sql, "truncate_partition", table_after=partitioned, table_before=partitioned
    )
    fourth = carry(spark, broker, config, [truncated, Watermark(tso(600))])
    assert fourth.needing_snapshot == ["many.t5"]
    fifth = carry(spark, broker, config, [Watermark(tso(700))])
    assert fifth.built == [] and fifth.needing_snapshot == ["many.t5"]
    assert build_gold(spark, config, SOURCE).needing_snapshot == ["many.t5"]

    untouched = f"{namespace}.{names.gold_table(TABLES[0].database, TABLES[0].name)}"
    spark.sql(f"INSERT INTO {untouched} SELECT * FROM {untouched} WHERE id = 0")  # a duplicate no run wrote
    with pytest.raises(DbtError, match="gold_run_checks"):
        build_gold(spark, config, SOURCE, full_check=True)  # a full check reads every table whole
