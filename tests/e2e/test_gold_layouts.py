"""Gold layouts on the real broker, Spark, Iceberg and dbt (README, "How gold is laid out"): a table's gold and
history tables are created partitioned and sorted as `gold.layouts` says, a merge into them stays right, a
changed layout evolves both in place (the files written before keep their spec: nothing is rewritten), and a
layout that names a column the table does not have stops the run before any table is touched. Random layouts run
in the gold oracle too."""

from __future__ import annotations

import datetime as dt

import pytest
import yaml

from spark_jobs.config import GoldSettings, TableLayout
from spark_jobs.errors import ConfigError
from spark_jobs.gold import models as gold_models
from spark_jobs.gold import names
from spark_jobs.gold.build import build_gold
from spark_jobs.gold.layout import Layout, current_layout
from spark_jobs.gold.publish import read_state
from spark_jobs.runtime.sql import quote_ident
from tests.e2e.streams import publish_stream
from tests.e2e.test_silver import tso
from ticdc_devkit.simulator.model import Column, Ddl, RowChange, Table, Watermark
from ticdc_devkit.simulator.workload import create_table_sql

pytestmark = pytest.mark.e2e

SOURCE = "laid_out"
ORDERS = Table(
    "lay",
    "orders",
    (
        Column("id", "int", nullable=False),
        Column("placed_at", "datetime", nullable=False),
        Column("region", "varchar(8)"),
        Column("amount", "int"),
    ),
    ("id",),
    900,
)
DAY_MS = 86_400_000
FIRST = TableLayout(partition_by=["days(placed_at)", "bucket(4, ID)"], sort_by=["placed_at desc"])
SECOND = TableLayout(partition_by=["truncate(2, region)"])


def _row(key: int, day: int, region: str, amount: int) -> dict:
    return {"id": key, "placed_at": dt.datetime(2026, 11, 1 + day, 8, 30), "region": region, "amount": amount}


def _relations() -> tuple[str, str]:
    namespace = names.gold_namespace(SOURCE)
    return (
        f"{namespace}.{names.gold_table('lay', 'orders')}",
        f"{namespace}.{names.history_table('lay', 'orders')}",
    )


def _quoted(relation: str) -> str:
    namespace, _, name = relation.partition(".")
    return f"{quote_ident(namespace)}.{quote_ident(name)}"


def _gold(spark) -> dict[int, tuple]:
    return {r["id"]: (r["region"], r["amount"]) for r in spark.table(_quoted(_relations()[0])).collect()}


def test_gold_is_laid_out_as_configured_and_a_changed_layout_evolves_in_place(spark, broker, source_config):
    broker.create_topics([SOURCE], partitions=1)
    config = source_config(SOURCE, gold=GoldSettings(layouts={"lay.ord*": FIRST}))
    rows = [_row(k, k % 3, f"r{k % 2}", k * 10) for k in range(1, 9)]
    publish_stream(
        spark,
        broker,
        config,
        SOURCE,
        [
            Ddl(tso(10), "lay", "orders", create_table_sql(ORDERS), "create_table", table_after=ORDERS),
            *(RowChange(tso(20 + i), "insert", ORDERS, after=r) for i, r in enumerate(rows)),
            Watermark(tso(50)),
        ],
    )
    wanted = Layout((("days", None, "placed_at"), ("bucket", 4, "id")), (("placed_at", "desc"),))
    gold, history = _relations()
    assert current_layout(spark, gold) == wanted and current_layout(spark, history) == wanted
    days = spark.sql(f"SELECT DISTINCT partition.placed_at_day FROM {_quoted(gold)}.files").collect()
    assert len(days) == 3, "one partition per day of placed_at"
    models = yaml.safe_load((gold_models.source_dir(config.local_dir, SOURCE) / f"_{SOURCE}__models.yml").read_text())
    assert (
        "partitioned by days(placed_at), bucket(4, id); sorted by placed_at desc" in models["models"][1]["description"]
    )

    # a merge into the partitioned tables: an update that moves a row to another day, a delete
    moved = rows[0] | {"placed_at": rows[0]["placed_at"].replace(day=20), "amount": 11}
    publish_stream(
        spark,
        broker,
        config,
        SOURCE,
        [
            RowChange(tso(60), "update", ORDERS, before=rows[0], after=moved),
            RowChange(tso(61), "delete", ORDERS, before=rows[1]),
            Watermark(tso(70)),
        ],
    )
    expected = {k: (f"r{k % 2}", k * 10) for k in range(3, 9)} | {1: ("r1", 11)}
    assert _gold(spark) == expected

    evolved = source_config(SOURCE, gold=GoldSettings(layouts={"lay.orders": SECOND}))
    before = {t.upstream_table: t for t in read_state(spark, SOURCE)}["orders"]
    build_gold(spark, evolved, SOURCE)  # nothing new upstream: the layout alone changed
    after = {t.upstream_table: t for t in read_state(spark, SOURCE)}["orders"]
    assert current_layout(spark, gold) == current_layout(spark, history) == Layout((("truncate", 2, "region"),))
    assert (after.gold_snapshot_id, after.history_snapshot_id) == (before.gold_snapshot_id, before.history_snapshot_id)
    assert after.layout == Layout((("truncate", 2, "region"),)).text
    publish_stream(
        spark,
        broker,
        evolved,
        SOURCE,
        [RowChange(tso(80), "insert", ORDERS, after=_row(9, 0, "r9", 90)), Watermark(tso(90))],
    )
    specs = {r[0] for r in spark.sql(f"SELECT DISTINCT spec_id FROM {_quoted(gold)}.files").collect()}
    assert len(specs) == 2, "the files written before keep their spec; the new one is written in the new"
    assert _gold(spark) == expected | {9: ("r9", 90)}

    wrong = source_config(SOURCE, gold=GoldSettings(layouts={"lay.*": TableLayout(partition_by=["days(region)"])}))
    with pytest.raises(ConfigError, match=r"gold\.layouts\.lay\.\*\.partition_by: days does not take column 'region'"):
        build_gold(spark, wrong, SOURCE)
    missing = source_config(SOURCE, gold=GoldSettings(layouts={"lay.*": TableLayout(sort_by=["shipped_at"])}))
    with pytest.raises(ConfigError, match=r"gold\.layouts\.lay\.\*\.sort_by: lay\.orders has no column 'shipped_at'"):
        build_gold(spark, missing, SOURCE)
    assert current_layout(spark, gold) == Layout((("truncate", 2, "region"),)), "a bad layout touched the table"
