"""Type mappings on the real broker, Spark, Iceberg and dbt (README, "Column types in gold"): BIGINT UNSIGNED as
bigint, a DECIMAL wider than 38 digits as decimal(38, its scale) and a TINYINT(1) as boolean (0 false, any other
value true) in gold and history; a change of the mappings
rebuilds the tables in the new types; and a value past the narrower type's range stops the run with an error
naming the column and the value, rather than landing as null."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from spark_jobs.config import GoldSettings, TypeMappings
from spark_jobs.errors import DbtError
from spark_jobs.gold import models as gold_models
from spark_jobs.gold import names
from spark_jobs.gold.build import build_gold
from spark_jobs.gold.publish import read_state
from spark_jobs.runtime.sql import quote_ident
from tests.e2e.streams import land_and_decode, publish_stream, send
from tests.e2e.test_silver import tso
from ticdc_devkit.simulator.model import Column, Ddl, RowChange, Table, Watermark
from ticdc_devkit.simulator.workload import create_table_sql

pytestmark = pytest.mark.e2e

SOURCE = "typed"
LEDGER = Table(
    "typ",
    "ledger",
    (
        Column("id", "bigint unsigned", nullable=False),
        Column("amount", "decimal(40,2)"),
        Column("note", "varchar(8)"),
        Column("paid", "tinyint(1)"),
    ),
    ("id",),
    950,
)
NARROW = GoldSettings(types=TypeMappings(bigint_unsigned="bigint", wide_decimal="decimal38", tinyint1="boolean"))


def _table(spark, history: bool = False):
    namespace = names.gold_namespace(SOURCE)
    name = (names.history_table if history else names.gold_table)("typ", "ledger")
    return spark.table(f"{quote_ident(namespace)}.{quote_ident(name)}")


def _types(spark, history: bool = False) -> dict[str, str]:
    return {
        f.name: f.dataType.simpleString()
        for f in _table(spark, history).schema.fields
        if f.name in ("id", "amount", "paid")
    }


def test_type_mappings_narrow_gold_types_and_a_value_past_their_range_stops_the_run(spark, broker, source_config):
    broker.create_topics([SOURCE], partitions=1)
    rows = [
        {
            "id": 9223372036854775807,
            "amount": Decimal("123456789012345678901234567890123456.78"),
            "note": "max",
            "paid": 1,
        },
        {"id": 1, "amount": Decimal("-0.05"), "note": "small", "paid": 0},
        {"id": 2, "amount": Decimal("0.00"), "note": "two", "paid": 2},
    ]
    publish_stream(
        spark,
        broker,
        source_config(SOURCE, gold=NARROW),
        SOURCE,
        [
            Ddl(tso(10), "typ", "ledger", create_table_sql(LEDGER), "create_table", table_after=LEDGER),
            *(RowChange(tso(20 + i), "insert", LEDGER, after=r) for i, r in enumerate(rows)),
            Watermark(tso(30)),
        ],
    )
    assert (
        _types(spark) == _types(spark, history=True) == {"id": "bigint", "amount": "decimal(38,2)", "paid": "boolean"}
    )
    assert {(r["id"], r["amount"], r["paid"]) for r in _table(spark).collect()} == {
        (r["id"], r["amount"], r["paid"] != 0) for r in rows
    }

    build_gold(spark, source_config(SOURCE), SOURCE)  # the default mappings again: both tables rebuilt
    assert _types(spark) == _types(spark, history=True) == {"id": "decimal(20,0)", "amount": "string", "paid": "int"}
    assert {(int(r["id"]), r["amount"], r["paid"]) for r in _table(spark).collect()} == {
        (r["id"], str(r["amount"]), r["paid"]) for r in rows
    }
    assert {t.types for t in read_state(spark, SOURCE)} == {None}

    too_big = {"id": 18446744073709551615, "amount": Decimal("1.00"), "note": "past", "paid": 1}
    send(broker, SOURCE, [RowChange(tso(40), "insert", LEDGER, after=too_big), Watermark(tso(50))])
    narrow = source_config(SOURCE, gold=NARROW)
    land_and_decode(spark, narrow, SOURCE)
    with pytest.raises(DbtError, match=r"typ\.ledger\.id: 18446744073709551615 does not fit bigint"):
        build_gold(spark, narrow, SOURCE)
    assert {t.types for t in read_state(spark, SOURCE)} == {None}, "a failed run recorded nothing"


def test_a_wide_decimal_whose_scale_changes_shows_each_value_at_the_new_scale(spark, broker, source_config):
    """A DECIMAL wider than 38 digits is text in gold. After a MODIFY COLUMN to another scale, TiDB shows every
    value at the new scale (zeros added, or rounded half away from zero), rows not changed since too; so do gold
    and history."""
    source = "typed_scale"
    broker.create_topics([source], partitions=1)
    wider, rounded = (
        Table(LEDGER.database, LEDGER.name, (LEDGER.columns[0], Column("amount", t)), ("id",), LEDGER.table_id)
        for t in ("decimal(42,3)", "decimal(42,1)")
    )
    table = Table(LEDGER.database, LEDGER.name, LEDGER.columns[:2], ("id",), LEDGER.table_id)
    amounts = ["123456789012345678901234567890123456.78", "-0.05", "-0.04", "9.99", "0.00", "-19.95", None]

    def modify(ts: int, before: Table, after: Table) -> Ddl:
        sql = f"ALTER TABLE `typ`.`ledger` MODIFY COLUMN `amount` {after.columns[1].type}"
        return Ddl(ts, "typ", "ledger", sql, "modify_column", table_after=after, table_before=before)

    config = source_config(source)
    events = [
        Ddl(tso(10), "typ", "ledger", create_table_sql(table), "create_table", table_after=table),
        *(
            RowChange(tso(20 + i), "insert", table, after={"id": i, "amount": None if a is None else Decimal(a)})
            for i, a in enumerate(amounts)
        ),
        Watermark(tso(30)),
    ]
    publish_stream(spark, broker, config, source, events)
    publish_stream(spark, broker, config, source, [modify(tso(40), table, wider), Watermark(tso(50))])
    gold = f"{quote_ident(names.gold_namespace(source))}.{quote_ident(names.gold_table('typ', 'ledger'))}"
    assert dict(spark.sql(f"SELECT id, amount FROM {gold}").collect()) == dict(
        enumerate(["123456789012345678901234567890123456.780", "-0.050", "-0.040", "9.990", "0.000", "-19.950", None])
    )
    publish_stream(spark, broker, config, source, [modify(tso(60), wider, rounded), Watermark(tso(70))])
    expected = dict(enumerate(["123456789012345678901234567890123456.8", "-0.1", "0.0", "10.0", "0.0", "-20.0", None]))
    assert dict(spark.sql(f"SELECT id, amount FROM {gold}").collect()) == expected
    history = f"{quote_ident(names.gold_namespace(source))}.{quote_ident(names.history_table('typ', 'ledger'))}"
    latest = spark.sql(f"SELECT id, amount FROM {history} WHERE _valid_to_ts IS NULL").collect()
    assert dict(latest) == expected


def test_a_value_written_before_a_chain_of_type_changes_is_converted_at_each(spark, broker, source_config):
    """TiDB converts every stored value at each MODIFY COLUMN, so a value goes through each type of a chain:
    `'007'` made BIGINT is 7, and VARCHAR again `'7'`; `1.25` made DECIMAL(6,1) is 1.3, and DECIMAL(8,3) again
    1.300, not 1.250. Rows written after a step went through only the steps after it."""
    source = "typed_chain"
    broker.create_topics([source], partitions=1)

    def table(code: str, price: str) -> Table:
        columns = (Column("id", "int", nullable=False), Column("code", code), Column("price", price))
        return Table("typ", "codes", columns, ("id",), 951)

    shapes = [
        table("varchar(8)", "decimal(6,2)"),
        table("bigint", "decimal(6,1)"),
        table("varchar(32)", "decimal(8,3)"),
    ]

    def modify(ts: int, before: Table, after: Table) -> Ddl:
        sql = "ALTER TABLE `typ`.`codes` " + ", ".join(
            f"MODIFY COLUMN `{c.name}` {c.type}" for c in after.columns if c.name != "id"
        )
        return Ddl(ts, "typ", "codes", sql, "multi_schema_change", table_after=after, table_before=before)

    def insert(ts: int, shape: Table, row_id: int, code, price: str) -> RowChange:
        return RowChange(ts, "insert", shape, after={"id": row_id, "code": code, "price": Decimal(price)})

    config = source_config(source)
    created = Ddl(tso(10), "typ", "codes", create_table_sql(shapes[0]), "create_table", table_after=shapes[0])
    first = [
        created,
        insert(tso(11), shapes[0], 1, "007", "1.25"),
        insert(tso(12), shapes[0], 2, "-0012", "-1.25"),
        insert(tso(13), shapes[0], 3, "0", "0.04"),
        Watermark(tso(14)),
    ]
    publish_stream(spark, broker, config, source, first)
    chain = [  # both changes in one run: gold and history rebuilt, not altered from the first shape to the last
        modify(tso(20), shapes[0], shapes[1]),
        insert(tso(21), shapes[1], 4, 5, "9.9"),
        modify(tso(30), shapes[1], shapes[2]),
        insert(tso(31), shapes[2], 5, "0099", "0.125"),
        Watermark(tso(40)),
    ]
    publish_stream(spark, broker, config, source, chain)
    plan = spark.table(f"lake_staging.{quote_ident(gold_models.plan_model(source))}").collect()[0]
    assert (plan["gold_mode"], plan["history_mode"], plan["reason"]) == (
        "rebuild",
        "rebuild",
        "a column changed type more than once since the last run",
    )
    gold = f"{quote_ident(names.gold_namespace(source))}.{quote_ident(names.gold_table('typ', 'codes'))}"
    history = f"{quote_ident(names.gold_namespace(source))}.{quote_ident(names.history_table('typ', 'codes'))}"
    expected = {1: ("7", "1.300"), 2: ("-12", "-1.300"), 3: ("0", "0.000"), 4: ("5", "9.900"), 5: ("0099", "0.125")}
    for relation in (gold, f"{history} WHERE _valid_to_ts IS NULL"):
        rows = {r["id"]: (r["code"], str(r["price"])) for r in spark.sql(f"SELECT * FROM {relation}").collect()}
        assert rows == expected, relation


def test_a_time_is_shown_with_its_columns_fractional_digits_after_every_change_of_them(spark, broker, source_config):
    """Gold keeps a TIME as text with as many fractional digits as the column has. Debezium sends six whatever
    the column has; after a MODIFY COLUMN to fewer, TiDB rounds every stored value, and pads it after one to more."""
    source = "typed_time"
    broker.create_topics([source], partitions=1)
    shapes = [
        Table("typ", "clock", (Column("id", "int", nullable=False), Column("at", f"time({fsp})")), ("id",), 952)
        for fsp in (5, 2, 4)
    ]
    values = [
        dt.timedelta(hours=590, minutes=46, microseconds=266560),
        -dt.timedelta(hours=616, minutes=2, seconds=5, microseconds=654010),
        dt.timedelta(seconds=59, microseconds=995000),
        dt.timedelta(0),
        None,
    ]
    config = source_config(source, "debezium")
    gold = f"{quote_ident(names.gold_namespace(source))}.{quote_ident(names.gold_table('typ', 'clock'))}"

    def publish(events: list) -> dict:
        send(broker, source, events, "debezium")
        land_and_decode(spark, config, source)
        build_gold(spark, config, source)
        return dict(spark.sql(f"SELECT id, at FROM {gold}").collect())

    def modify(ts: int, before: Table, after: Table) -> Ddl:
        sql = f"ALTER TABLE `typ`.`clock` MODIFY COLUMN `at` {after.columns[1].type}"
        return Ddl(ts, "typ", "clock", sql, "modify_column", table_after=after, table_before=before)

    created = Ddl(tso(10), "typ", "clock", create_table_sql(shapes[0]), "create_table", table_after=shapes[0])
    inserts = [RowChange(tso(20 + i), "insert", shapes[0], after={"id": i, "at": v}) for i, v in enumerate(values)]
    assert publish([created, *inserts, Watermark(tso(30))]) == dict(
        enumerate(["590:46:00.26656", "-616:02:05.65401", "00:00:59.99500", "00:00:00.00000", None])
    )
    assert publish([modify(tso(40), shapes[0], shapes[1]), Watermark(tso(50))]) == dict(
        enumerate(["590:46:00.27", "-616:02:05.65", "00:01:00.00", "00:00:00.00", None])
    )
    assert publish([modify(tso(60), shapes[1], shapes[2]), Watermark(tso(70))]) == dict(
        enumerate(["590:46:00.2700", "-616:02:05.6500", "00:01:00.0000", "00:00:00.0000", None])
    )
