"""The ingest DAG end to end: real broker, Spark, Iceberg, dbt and Airflow, checked against an oracle.

The oracle applies the same statements to a dict (ticdc_devkit.simulator.oracle); gold must equal it
row by row as of the consistent timestamp, which is the last watermark.
"""

from __future__ import annotations

import pytest

from spark_jobs.canonical.values import canonical_type
from spark_jobs.runtime.tables import BRONZE_MESSAGES, GOLD_TABLES, SILVER_QUARANTINE, SILVER_ROW_CHANGES
from ticdc_devkit.broker import produce
from ticdc_devkit.gold_check import gold_state, oracle_state
from ticdc_devkit.simulator.model import RowChange, Watermark
from ticdc_devkit.simulator.oracle import upstream_state
from ticdc_devkit.simulator.shop_stream import (
    CUSTOMERS,
    CUSTOMERS_V2,
    ORDERS,
    PRODUCTS,
    shop_stream,
    shop_stream_more,
    tso,
)
from ticdc_devkit.simulator.stream import encode_stream

pytestmark = pytest.mark.e2e

PARTITIONS = 3
GOLD_V1 = {
    "gold_shop.shop__customers": CUSTOMERS,
    "gold_shop.shop__orders": ORDERS,
    "gold_shop.shop__products": PRODUCTS,
}
GOLD = {**GOLD_V1, "gold_shop.shop__customers": CUSTOMERS_V2}


def publish(broker, shop, events) -> int:
    """The events as the changefeed behind the test config's `shop` source sends them."""
    (topic,) = shop.topics
    return produce(
        broker.bootstrap,
        encode_stream(shop.protocol, events, topic=topic, partitions=PARTITIONS, options=shop.options),
    )


def run_dag(airflow_db):
    from airflow.dag_processing.dagbag import DagBag
    from airflow.utils.state import DagRunState

    bag = DagBag(dag_folder=str(_dags_folder()))
    assert not bag.import_errors, bag.import_errors
    run = bag.get_dag("ticdc_ingest__shop").test()
    assert run.state == DagRunState.SUCCESS, f"DAG run ended {run.state}"
    return run


def _dags_folder():
    from pathlib import Path

    return Path(__file__).resolve().parents[2] / "dags"


def of_shop(spark, table: str) -> int:
    """Rows of the shop source in a bronze or silver table (other tests' sources share the tables)."""
    return spark.table(table).where("source = 'shop'").count()


def last_watermark(events) -> int:
    return max(e.ts for e in events if isinstance(e, Watermark))


def gold_snapshots(spark) -> dict[str, int]:
    return {
        t: spark.sql(f"SELECT snapshot_id FROM {t}.snapshots ORDER BY committed_at DESC LIMIT 1").collect()[0][0]
        for t in GOLD
    }


def assert_gold_equals_oracle(spark, events, as_of: int, gold: dict) -> None:
    upstream = upstream_state(events, as_of=as_of)
    for table, schema in gold.items():
        columns = [(c.name, canonical_type(c.type)) for c in schema.columns]
        expected = oracle_state(upstream[(schema.database, schema.name)], columns)
        actual = gold_state(spark, table, columns)
        assert actual == expected, f"{table} differs from the upstream database as of {as_of}"
        recorded = spark.sql(
            f"SELECT consistent_ts FROM {GOLD_TABLES} WHERE gold_relation = :relation", args={"relation": table}
        ).collect()
        assert [r[0] for r in recorded] == [as_of], f"{table}: gold.tables says {recorded}"


def test_ingest_dag_builds_gold_equal_to_upstream(broker, pipeline_config, spark, airflow_db):
    shop = pipeline_config.source("shop")
    broker.create_topics(shop.topics, partitions=PARTITIONS)
    first = shop_stream()
    landed = publish(broker, shop, first)

    run_dag(airflow_db)
    assert of_shop(spark, BRONZE_MESSAGES) == landed
    assert of_shop(spark, SILVER_QUARANTINE) == 0
    assert_gold_equals_oracle(spark, first, last_watermark(first), GOLD_V1)
    assert [c.name for c in spark.table("gold_shop.shop__customers").schema][3:] == [
        "id",
        "name",
        "email",
        "created_at",
    ]
    # the key-changing update: customer 7 became 700 (delete + insert at one commit ts)
    customer_ids = {r["id"] for r in spark.table("gold_shop.shop__customers").collect()}
    assert 7 not in customer_ids and 700 in customer_ids and 2 not in customer_ids

    # a second run with nothing new changes nothing: same rows, no new gold snapshot
    before_rows = {t: sorted(map(tuple, spark.table(t).collect())) for t in GOLD}
    before_snapshots = gold_snapshots(spark)
    silver_before = of_shop(spark, SILVER_ROW_CHANGES)
    run_dag(airflow_db)
    assert gold_snapshots(spark) == before_snapshots
    assert {t: sorted(map(tuple, spark.table(t).collect())) for t in GOLD} == before_rows
    assert of_shop(spark, SILVER_ROW_CHANGES) == silver_before

    # more messages (ADD COLUMN, new rows, deletes, one change after the last watermark): exactly those apply
    more = shop_stream_more()
    landed += publish(broker, shop, more)
    run_dag(airflow_db)
    everything = first + more
    assert of_shop(spark, BRONZE_MESSAGES) == landed
    new_row_changes = sum(
        1 + (e.op == "update" and e.before[e.table.key[0]] != e.after[e.table.key[0]])
        for e in more
        if isinstance(e, RowChange)
    )
    assert of_shop(spark, SILVER_ROW_CHANGES) == silver_before + new_row_changes
    consistent = last_watermark(everything)
    assert consistent == tso(10_008)
    assert_gold_equals_oracle(spark, everything, consistent, GOLD)
    # customer 3's delete committed after the last watermark: landed in silver, not yet in gold
    assert 3 in {r["id"] for r in spark.table("gold_shop.shop__customers").collect()}
    assert (
        spark.sql(
            f"SELECT count(*) FROM {SILVER_ROW_CHANGES} WHERE source = 'shop' AND `table` = :table AND op = 'delete'"
            " AND row_key = :key",
            args={"table": "customers", "key": '["3"]'},
        ).collect()[0][0]
        == 1
    )
    tiers = {r["id"]: r["tier"] for r in spark.table("gold_shop.shop__customers").collect()}
    assert tiers[1] == "silver" and tiers[21] == "gold" and tiers[4] is None
