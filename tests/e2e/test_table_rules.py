"""Table rules on the real broker, Spark, Iceberg and dbt: a rule added later applies from the next run on and
names what it leaves behind; `rebuild silver` removes that, and gold then equals the upstream without the
table (and the daily tables neither the table nor a left-out column); a Dumpling snapshot load leaves the table
out too, and a left-out column (never a key column) with it. The gold oracle runs with random rules
(test_gold_oracle.py); what a rule keeps, and a rename across the rules, are in tests/unit/test_table_rules.py.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import random
import re
from collections import Counter

import pytest
import yaml

from spark_jobs import steps
from spark_jobs.backfill import daily
from spark_jobs.backfill.snapshot import load_snapshot
from spark_jobs.bronze.land import land_bronze
from spark_jobs.config import TableRules
from spark_jobs.gold import models as gold_models
from spark_jobs.gold import names
from spark_jobs.gold.build import build_gold
from spark_jobs.runtime.tables import SILVER_DDL_EVENTS, SILVER_ROW_CHANGES
from spark_jobs.silver.build import build_silver
from tests.e2e.kill import slices
from tests.e2e.test_gold_oracle import assert_gold_is_upstream, assert_history_is_upstream, gold_tables
from ticdc_devkit.broker import produce
from ticdc_devkit.dumpling_export import write_export
from ticdc_devkit.simulator.model import Column, Ddl, RowChange, Table, Watermark
from ticdc_devkit.simulator.oracle import upstream_schemas, upstream_state
from ticdc_devkit.simulator.stream import EXTENSION_OPTIONS, encode_stream
from ticdc_devkit.simulator.workload import random_workload

pytestmark = pytest.mark.e2e

SOURCE, SNAPSHOT_SOURCE, SEED = "ruled", "ruled_snapshot", 20261126


def _tables_in_silver(spark, source: str) -> Counter:
    rows = spark.sql(
        f"SELECT database, `table`, count(*) AS n FROM {SILVER_ROW_CHANGES} WHERE source = :s GROUP BY 1, 2",
        args={"s": source},
    ).collect()
    return Counter({(r["database"], r["table"]): r["n"] for r in rows})


def test_a_rule_added_later_applies_from_then_on_and_a_rebuild_removes_what_came_before(
    spark, broker, source_config, caplog, tmp_path
):
    # transactions hours apart, so that a whole day is written to the daily tables before the rebuild
    workload = random_workload(SEED, tables=3, changes=50, ddl=False, preexisting=0, tick_ms=(3_600_000, 7_200_000))
    first, second = slices(workload, 2, random.Random(SEED), SOURCE)
    end = workload.consistent_ts
    changed = Counter((e.table.database, e.table.name) for e in workload.events if isinstance(e, RowChange))
    tables = upstream_schemas(workload.events, as_of=end)
    left_out = next(name for name, _ in changed.most_common() if name in tables)
    (db, t), table = next((n, s) for n, s in sorted(tables.items()) if n != left_out and len(s.columns) > len(s.key))
    column = next(c.name for c in table.columns if c.name not in table.key)
    rules = TableRules(
        exclude=[f"`{left_out[0]}`.`{left_out[1]}`"], exclude_columns={f"`{db}`.*": [column.upper(), *table.key]}
    )
    broker.create_topics([SOURCE], partitions=1)

    plain = source_config(SOURCE)
    produce(broker.bootstrap, first)
    land_bronze(spark, plain, SOURCE)
    build_silver(spark, plain, SOURCE)
    build_gold(spark, plain, SOURCE)
    assert names.gold_table(*left_out) in gold_tables(spark, SOURCE)
    before = _tables_in_silver(spark, SOURCE)[left_out]

    ruled = source_config(SOURCE, tables=rules)
    produce(broker.bootstrap, second)
    land_bronze(spark, ruled, SOURCE)
    with caplog.at_level(logging.WARNING, logger="spark_jobs.silver.build"):
        result = build_silver(spark, ruled, SOURCE)
    assert result.left_out == changed[left_out] - before > 0
    assert _tables_in_silver(spark, SOURCE)[left_out] == before, "rows of the left-out table reached silver"
    warned = [r.getMessage() for r in caplog.records if "table rules leave out" in r.getMessage()]
    assert warned and f"{left_out[0]}.{left_out[1]}" in warned[0] and "rebuild silver" in warned[0]
    assert build_gold(spark, ruled, SOURCE).consistent_ts == end
    assert names.gold_table(*left_out) in gold_tables(spark, SOURCE), "what came before the rule stays until a rebuild"
    first_day = dt.datetime.fromtimestamp(min(changed_ts(workload)) / 1000, dt.UTC).date()
    assert daily.day_status(spark, SOURCE, first_day).complete, "the workload must span a whole day"
    daily.write_day(spark, SOURCE, first_day)
    daily_namespace, left_out_daily = names.daily_table(SOURCE, *left_out)
    assert spark.catalog.tableExists(f"{daily_namespace}.{left_out_daily}")

    rebuilt = steps.rebuild({"source": SOURCE, "layer": "silver"}, ruled)
    assert f"{changed[left_out]} row changes left out by the table rules" in rebuilt.line
    assert left_out not in _tables_in_silver(spark, SOURCE)
    assert not spark.sql(
        f"SELECT * FROM {SILVER_DDL_EVENTS} WHERE source = :s AND database = :d AND `table` = :t",
        args={"s": SOURCE, "d": left_out[0], "t": left_out[1]},
    ).count()
    assert column not in _columns_in_silver(spark, SOURCE, db, t)
    assert not spark.catalog.tableExists(f"{daily_namespace}.{left_out_daily}"), "a left-out table's days stay"
    for name, kept in tables.items():
        if name != left_out and name[0] == db and spark.catalog.tableExists(".".join(names.daily_table(SOURCE, *name))):
            daily_columns = spark.table(".".join(names.daily_table(SOURCE, *name))).columns
            assert column not in daily_columns and all(k in daily_columns for k in kept.key)
    gold = build_gold(spark, ruled, SOURCE)
    assert gold.consistent_ts == end
    assert names.gold_table(*left_out) not in gold_tables(spark, SOURCE)
    assert names.gold_table(*left_out) + names.HISTORY_SUFFIX not in gold_tables(spark, SOURCE)
    assert_gold_is_upstream(spark, SOURCE, workload, end, rules)
    assert_history_is_upstream(spark, SOURCE, workload, end, [end], rules)
    models = yaml.safe_load((gold_models.source_dir(ruled.local_dir, SOURCE) / f"_{SOURCE}__models.yml").read_text())
    described = " ".join(m["description"] for m in models["models"])
    said = re.findall(r"columns left out by the source's table rules: ([^)]*)\)", described)  # the dbt docs say so
    assert said and all(column.lower() in s.split(", ") for s in said)

    export = write_export(tmp_path / "export", end, tables, upstream_state(workload.events, as_of=end))
    load_snapshot(spark, source_config(SNAPSHOT_SOURCE, tables=rules), SNAPSHOT_SOURCE, str(export))
    loaded = _tables_in_silver(spark, SNAPSHOT_SOURCE)
    expected = {
        n: len(rows) for n, rows in upstream_state(workload.events, as_of=end).items() if rows and n != left_out
    }
    assert dict(loaded) == expected
    assert _columns_in_silver(spark, SNAPSHOT_SOURCE, db, t) == {c.name for c in table.columns} - {column}
    schema = spark.sql(
        f"SELECT table_schema FROM {SILVER_DDL_EVENTS} WHERE source = :s AND database = :d AND `table` = :t",
        args={"s": SNAPSHOT_SOURCE, "d": db, "t": t},
    ).collect()[0]["table_schema"]
    marked = {c["name"] for c in json.loads(schema)["columns"] if c.get("left_out")}
    assert marked == {column}, "the schema marks the left-out column (never a key column)"


def test_a_left_out_column_of_a_table_first_seen_in_rows_can_be_dropped_with_another(spark, broker, source_config):
    """A table that existed before the changefeed has the schema its rows show. Its left-out column is in that
    schema (marked), though no row carries its values, so that `DROP COLUMN price, DROP COLUMN qty` (qty left out)
    is understood: gold loses `price` too, and silver's schema holds neither."""
    source = "ruled_seen_in_rows"
    before = Table(
        "audit",
        "notes",
        (Column("id", "int", nullable=False), Column("qty", "int"), Column("price", "int"), Column("note", "text")),
        key=("id",),
        table_id=41,
    )
    after = Table("audit", "notes", (before.columns[0], before.columns[3]), key=("id",), table_id=41)
    ts = [(1_763_900_000_000 + ms) << 18 for ms in range(6)]
    events = [
        RowChange(ts[0], "insert", before, after={"id": 1, "qty": 5, "price": 7, "note": "a"}),
        Watermark(ts[1]),
        Ddl(
            ts[2],
            "audit",
            "notes",
            "ALTER TABLE `audit`.`notes` DROP COLUMN `price`, DROP COLUMN `qty`",
            "drop_column",
            table_after=after,
            table_before=before,
        ),
        RowChange(ts[3], "insert", after, after={"id": 2, "note": "b"}),
        Watermark(ts[4]),
    ]
    broker.create_topics([source], partitions=1)
    produce(
        broker.bootstrap,
        encode_stream("canal-json", events, topic=source, partitions=1, options=EXTENSION_OPTIONS["canal-json"]),
    )
    config = source_config(source, tables=TableRules(exclude_columns={"`audit`.`notes`": ["qty"]}))
    land_bronze(spark, config, source)
    build_silver(spark, config, source)
    schemas = spark.sql(
        f"""SELECT ddl_type, understood, table_schema FROM {SILVER_DDL_EVENTS}
            WHERE source = :s ORDER BY commit_ts""",
        args={"s": source},
    ).collect()
    assert [(r["ddl_type"], r["understood"]) for r in schemas] == [
        ("create_table", True),
        ("drop_column", True),
    ]
    first = json.loads(schemas[0]["table_schema"])["columns"]
    assert [(c["name"], bool(c.get("left_out"))) for c in first] == [
        ("id", False),
        ("qty", True),
        ("price", False),
        ("note", False),
    ]
    assert [c["name"] for c in json.loads(schemas[1]["table_schema"])["columns"]] == ["id", "note"]
    assert build_gold(spark, config, source).consistent_ts == ts[4]
    gold = spark.table(f"{names.gold_namespace(source)}.{names.gold_table('audit', 'notes')}")
    assert [f for f in gold.columns if not f.startswith("_")] == ["id", "note"]
    assert sorted((r["id"], r["note"]) for r in gold.collect()) == [(1, "a"), (2, "b")]


def changed_ts(workload) -> list[int]:
    """The physical milliseconds of each row change's commit ts."""
    return [e.commit_ts >> 18 for e in workload.events if isinstance(e, RowChange)]


def _columns_in_silver(spark, source: str, database: str, table: str) -> set[str]:
    rows = spark.sql(
        f"""SELECT DISTINCT explode(map_keys(coalesce(after, before))) AS k FROM {SILVER_ROW_CHANGES}
            WHERE source = :s AND database = :d AND `table` = :t""",
        args={"s": source, "d": database, "t": table},
    ).collect()
    return {r["k"] for r in rows}
