"""Tables without a key: a table with no primary key and no NOT NULL unique key (TiCDC replicates it with
`force-replicate`) has no row identity, so its gold table is its change table: one row per change, in commit
order, deletes included with the row they deleted (README, "Tables without a key"). Redelivered messages
(TiCDC is at least once) are the same changes and appear once; a keyed table of the same source stays its
current state, and the run's checks pass for both. The status page lists the keyless table. With
`gold.keyless_tables: skip` the next run drops its gold tables and publishes the rest."""

from __future__ import annotations

import dataclasses

import pytest

from spark_jobs.bronze.land import land_bronze
from spark_jobs.config import GoldSettings
from spark_jobs.gold import names
from spark_jobs.gold.build import build_gold
from spark_jobs.gold.publish import latest_publication
from spark_jobs.runtime.sql import quote_ident
from spark_jobs.runtime.tables import SILVER_ROW_CHANGES
from spark_jobs.silver.build import build_silver
from spark_jobs.status.collect import RunInfo, record_status
from spark_jobs.status.view import status_views
from tests.e2e.test_silver import tso
from ticdc_devkit.broker import produce
from ticdc_devkit.simulator.model import Column, Ddl, RowChange, Table, Watermark
from ticdc_devkit.simulator.stream import EXTENSION_OPTIONS, encode_stream
from ticdc_devkit.simulator.workload import create_table_sql

pytestmark = pytest.mark.e2e

SOURCE = "keyless"
LOG = Table("shop", "log_lines", (Column("msg", "varchar(20)", nullable=False), Column("n", "int")), (), table_id=801)
ITEMS = Table("shop", "items", (Column("id", "int", nullable=False), Column("name", "varchar(20)")), ("id",), 802)


def line(ms: int, op: str, before=None, after=None, table: Table = LOG) -> RowChange:
    return RowChange(tso(ms), op, table, before=before, after=after)


def first_run() -> list:
    return [
        *(Ddl(tso(1), t.database, t.name, create_table_sql(t), "create_table", table_after=t) for t in (LOG, ITEMS)),
        line(10, "insert", after={"msg": "a", "n": 1}),
        line(10, "insert", after={"id": 1, "name": "x"}, table=ITEMS),
        line(20, "insert", after={"msg": "a", "n": 1}),  # the same row again: upstream holds two
        line(30, "insert", after={"msg": "b", "n": 2}),
        line(30, "insert", after={"msg": "b", "n": 2}),  # an identical change in the same transaction
        Watermark(tso(40)),
    ]


def second_run() -> list:
    return [
        line(50, "update", before={"msg": "a", "n": 1}, after={"msg": "a", "n": 5}),
        line(60, "delete", before={"msg": "b", "n": 2}),
        line(60, "update", before={"id": 1, "name": "x"}, after={"id": 1, "name": "y"}, table=ITEMS),
        line(60, "insert", after={"id": 2, "name": "z"}, table=ITEMS),
        Watermark(tso(70)),
    ]


def encoded(events: list) -> list:
    return encode_stream("canal-json", events, topic=SOURCE, partitions=1, options=EXTENSION_OPTIONS["canal-json"])


def rows(spark, table: Table, history: bool = False) -> list[tuple]:
    namespace = names.gold_namespace(SOURCE)
    name = (names.history_table if history else names.gold_table)(table.database, table.name)
    columns = ", ".join(quote_ident(c.name) for c in table.columns)
    order = "_valid_from_ts, _op" if history else "_commit_ts, _op"
    stamp = "_valid_from_ts, _valid_to_ts" if history else "_commit_ts"
    relation = f"{quote_ident(namespace)}.{quote_ident(name)}"
    return [
        tuple(r)
        for r in spark.sql(f"SELECT {stamp}, _op, {columns} FROM {relation} ORDER BY {order}, {columns}").collect()
    ]


def test_a_keyless_table_is_a_change_table_in_gold(spark, broker, source_config):
    broker.create_topics([SOURCE], partitions=1)
    config = source_config(SOURCE)
    first = encoded(first_run())
    produce(broker.bootstrap, first)
    land_bronze(spark, config, SOURCE)
    build_silver(spark, config, SOURCE)
    assert build_gold(spark, config, SOURCE).consistent_ts == tso(40)  # the run's checks pass
    assert rows(spark, LOG) == [
        (tso(10), "insert", "a", 1),
        (tso(20), "insert", "a", 1),
        (tso(30), "insert", "b", 2),  # two identical changes of one transaction are one row
    ]

    produce(broker.bootstrap, first + encoded(second_run()))  # TiCDC sends the first run's messages again
    land_bronze(spark, config, SOURCE)
    build_silver(spark, config, SOURCE)
    second = build_gold(spark, config, SOURCE)
    assert second.consistent_ts == tso(70)
    changes = [
        (tso(10), "insert", "a", 1),
        (tso(20), "insert", "a", 1),
        (tso(30), "insert", "b", 2),
        (tso(50), "update", "a", 5),
        (tso(60), "delete", "b", 2),  # the row it deleted
    ]
    assert rows(spark, LOG) == changes
    assert rows(spark, LOG, history=True) == [(ts, None, *rest) for ts, *rest in changes]
    assert rows(spark, ITEMS) == [(tso(60), "insert", 2, "z"), (tso(60), "update", 1, "y")]
    stored = spark.sql(
        f"SELECT count(*) FROM {SILVER_ROW_CHANGES} WHERE source = :s AND `table` = 'log_lines'", args={"s": SOURCE}
    ).collect()[0][0]
    assert stored == len(changes)

    # a rebuild equal to the incremental change table: the oracle (test_gold_oracle.py, Canal-JSON)

    record_status(spark, config, SOURCE, RunInfo("keyless-run", 0))
    (view,) = [v for v in status_views(config) if v["source"] == SOURCE]
    assert (view["keyless"], view["keyless_tables"]) == (["shop.log_lines"], "changes")

    source = dataclasses.replace(config.source(SOURCE), gold=GoldSettings(keyless_tables="skip"))
    skipping = dataclasses.replace(config, sources=[source])
    skipped = build_gold(spark, skipping, SOURCE)  # nothing new upstream: the setting alone makes the run
    namespace = names.gold_namespace(SOURCE)
    assert set(skipped.tables) == {f"{namespace}.{names.gold_table('shop', 'items')}"}
    assert not spark.catalog.tableExists(f"{namespace}.{names.gold_table('shop', 'log_lines')}")
    assert not spark.catalog.tableExists(f"{namespace}.{names.history_table('shop', 'log_lines')}")
    assert {t["relation"] for t in latest_publication(spark, SOURCE)["tables"]} == {
        f"{namespace}.{names.gold_table('shop', 'items')}",
        f"{namespace}.{names.history_table('shop', 'items')}",
    }
    assert rows(spark, ITEMS) == [(tso(60), "insert", 2, "z"), (tso(60), "update", 1, "y")]
    record_status(spark, skipping, SOURCE, RunInfo("keyless-skipped", 0))
    (view,) = [v for v in status_views(skipping) if v["source"] == SOURCE]
    assert (view["keyless"], view["keyless_tables"]) == (["shop.log_lines"], "skip")
