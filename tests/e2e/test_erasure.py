"""Erasure on the real broker, Spark, Iceberg, dbt and Airflow (README, "Erasing a key"): an Open Protocol source
batches ten rows of one commit into one Kafka message, and the table is renamed after the key's changes; after the `ticdc_erase` DAG erases one of them, no file
under the warehouse holds the key's values (every Parquet cell, every Avro record, every other file's bytes),
silver, gold, history and the daily table hold every other row as before, the batch that carried the key was
rewritten without it, the erasure is recorded without a value, and neither a rebuild of silver from bronze nor
TiCDC sending the same messages again brings it back (erasing again, from the command line, removes the messages
sent again from bronze), while a change of the key committed after the erasure does come in.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import time
from pathlib import Path

import fastavro
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from spark_jobs import cli, steps
from spark_jobs.backfill.daily import write_day
from spark_jobs.config import GoldSettings
from spark_jobs.erasure import erase
from spark_jobs.gold import names
from spark_jobs.gold.build import build_gold
from spark_jobs.runtime.sql import quote_ident
from spark_jobs.runtime.tables import (
    BRONZE_MESSAGES,
    GOLD_RECONCILIATIONS,
    SILVER_ERASED_MESSAGES,
    SILVER_ERASURES,
    SILVER_ROW_CHANGES,
    ensure_tables,
)
from spark_jobs.silver.build import rebuild_silver
from spark_jobs.silver.erased import erasures, key_hash
from tests.e2e.streams import land_and_decode, send
from tests.e2e.test_rebuild import trigger
from tests.e2e.test_silver import tso
from ticdc_devkit.dumpling_export import write_export
from ticdc_devkit.simulator.model import Column, Ddl, RowChange, Table, Watermark
from ticdc_devkit.simulator.oracle import upstream_state
from ticdc_devkit.simulator.workload import create_table_sql

pytestmark = pytest.mark.e2e

SOURCE, PROTOCOL = "erased", "open"
PEOPLE = Table(
    "er",
    "people",
    (Column("id", "int", nullable=False), Column("email", "varchar(64)"), Column("note", "varchar(16)")),
    ("id",),
    900,
)
PERSONS = dataclasses.replace(PEOPLE, name="persons")  # its name after a RENAME TABLE
SECRETS = ("erase-me-7f3a@example.test", "erase-me-too-9c1d@example.test")  # key 7's emails, in no other row
DAY = dt.date(2025, 11, 23)  # the day of tso(0)
CONSISTENT = tso(50_000_000)  # the stream's last watermark, on the next day


def _people(ms: int, changes: list[tuple], table: Table = PERSONS) -> list[RowChange]:
    """One commit of (op, id, email before, email after) changes."""
    return [
        RowChange(
            tso(ms),
            op,
            table,
            before={"id": key, "email": old, "note": "n"} if old is not None else None,
            after={"id": key, "email": new, "note": "n"} if new is not None else None,
        )
        for op, key, old, new in changes
    ]


def _stream() -> list:
    emails = {k: (SECRETS[0] if k == 7 else f"person{k}@example.test") for k in range(1, 11)}
    return [
        Ddl(tso(10), "er", "people", create_table_sql(PEOPLE), "create_table", table_after=PEOPLE),
        *_people(20, [("insert", k, None, email) for k, email in emails.items()], PEOPLE),  # one batch of ten rows
        Watermark(tso(25)),  # a resolved event ends a batch
        *_people(30, [("update", 7, SECRETS[0], SECRETS[1])], PEOPLE),  # a message of the key alone
        Watermark(tso(35)),
        Ddl(tso(36), "er", "persons", "RENAME TABLE er.people TO er.persons", "rename_table", PERSONS, PEOPLE),
        *_people(40, [("update", 3, emails[3], "three@example.test")]),
        Watermark(CONSISTENT),  # the next day: DAY is complete
    ]


def _relation(namespace: str, table: str) -> str:
    return f"{quote_ident(namespace)}.{quote_ident(table)}"


def _rows(spark, relation: str) -> dict[str, set]:
    """_row_key -> the set of (email, note) of a gold, history or daily table."""
    out: dict[str, set] = {}
    for r in spark.table(relation).collect():
        out.setdefault(r["_row_key"], set()).add((r["email"], r["note"]))
    return out


def _layers(spark) -> dict[str, dict[str, set]]:
    gold = names.gold_namespace(SOURCE)
    table = names.gold_table("er", "persons")
    silver = spark.sql(
        f"SELECT row_key, after['email'] AS email, op FROM {SILVER_ROW_CHANGES} WHERE source = :source",
        args={"source": SOURCE},
    ).collect()
    return {
        "gold": _rows(spark, _relation(gold, table)),
        "history": _rows(spark, _relation(gold, table + names.HISTORY_SUFFIX)),
        "daily": _rows(spark, _relation(*names.daily_table(SOURCE, "er", "persons"))),
        "silver": {
            k: {(r["email"], r["op"]) for r in silver if r["row_key"] == k} for k in {r["row_key"] for r in silver}
        },
    }


def _diff_keys(spark) -> list[str]:
    rows = spark.sql(
        f"SELECT diff_keys FROM {GOLD_RECONCILIATIONS} WHERE source = :source", args={"source": SOURCE}
    ).collect()
    return [key for r in rows for key in r["diff_keys"] or []]


def _warehouse(spark) -> Path:
    location = spark.conf.get("spark.sql.catalog.spark_catalog.warehouse", None) or spark.conf.get(
        "spark.sql.warehouse.dir"
    )
    return Path(location.removeprefix("file:"))


def files_holding(root: Path, needles: tuple[str, ...]) -> list[str]:
    """Every file under `root` that holds one of `needles`: in a Parquet file's cells (decompressed, any column,
    nested ones too), in an Avro file's records (Iceberg's manifests, with their column bounds), or in any other
    file's bytes."""
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if path.suffix == ".parquet":
            held = _parquet_holds(path, needles)
        elif path.suffix == ".avro":
            with path.open("rb") as f:
                held = any(
                    n.encode() in repr(record).encode() or n in repr(record)
                    for record in fastavro.reader(f)
                    for n in needles
                )
        else:
            data = path.read_bytes()
            held = any(n.encode() in data for n in needles)
        if held:
            found.append(str(path.relative_to(root)))
    return found


def _parquet_holds(path: Path, needles: tuple[str, ...]) -> bool:
    table = pq.ParquetFile(path).read()
    for column in table.columns:
        for chunk in column.chunks:
            for leaf in _leaves(chunk):
                if pa.types.is_binary(leaf.type) or pa.types.is_large_binary(leaf.type):
                    leaf = leaf.cast(pa.large_binary())
                elif not (pa.types.is_string(leaf.type) or pa.types.is_large_string(leaf.type)):
                    continue
                for needle in needles:
                    pattern = needle.encode() if pa.types.is_large_binary(leaf.type) else needle
                    if pc.any(pc.match_substring(leaf, pattern)).as_py():
                        return True
    return False


def _leaves(array: pa.Array) -> list[pa.Array]:
    """The string and binary arrays inside a column, through lists, maps and structs."""
    if pa.types.is_struct(array.type):
        return [leaf for i in range(array.type.num_fields) for leaf in _leaves(array.field(i))]
    if pa.types.is_map(array.type):
        return [*_leaves(array.keys), *_leaves(array.items)]
    if pa.types.is_list(array.type) or pa.types.is_large_list(array.type):
        return _leaves(array.flatten())
    return [array]


def test_an_erased_key_is_gone_from_every_layer_and_every_file_and_stays_gone(
    spark, broker, airflow_db, source_config, config_file, tmp_path, monkeypatch
):
    config = source_config(SOURCE, PROTOCOL)
    monkeypatch.setenv("TICDC_LAKE_CONFIG", str(config_file(config, tmp_path / "pipeline.yaml")))
    broker.create_topics([SOURCE], partitions=1)
    send(broker, SOURCE, _stream(), PROTOCOL)
    land_and_decode(spark, config, SOURCE)
    build_gold(spark, config, SOURCE)
    assert write_day(spark, SOURCE, DAY).rows, "the daily table was not written"
    # a reconciliation against an export where the key's row differs lists the key among the differing ones
    rows = upstream_state(_stream(), as_of=CONSISTENT)
    for values in rows[("er", "persons")].values():
        if values["id"] == "7":
            values["email"] = "changed@example.test"
    export = write_export(tmp_path / "export", CONSISTENT, {("er", "persons"): PERSONS}, rows)
    steps.reconcile(SOURCE, str(export), config, diff=True, fail_on_mismatch=False)
    assert _diff_keys(spark) == ['changed {"id":7}']
    before = _layers(spark)
    erased_key = json.dumps(["7"])
    assert before["gold"][erased_key] == {(SECRETS[1], "n")} and len(before["gold"]) == 10
    assert before["history"][erased_key] == {(SECRETS[0], "n"), (SECRETS[1], "n")}
    assert before["daily"][erased_key] == {(SECRETS[1], "n")}
    warehouse = _warehouse(spark)
    assert files_holding(warehouse, SECRETS), "the search finds nothing even before the erasure"
    batches = spark.table(BRONZE_MESSAGES).where(f"source = '{SOURCE}'").count()

    trigger(
        "ticdc_erase",
        {"source": SOURCE, "table": "er.persons", "key": '{"id": 7}', "requested_by": "dpo@example.test"},
    )

    after = _layers(spark)
    assert _diff_keys(spark) == [], "the reconciliation still lists the erased key"
    for layer, rows in after.items():
        assert rows == {k: v for k, v in before[layer].items() if k != erased_key}, f"{layer} after the erasure"
    assert files_holding(warehouse, SECRETS) == [], "files under the warehouse still hold the erased values"
    assert spark.table(BRONZE_MESSAGES).where(f"source = '{SOURCE}'").count() == batches - 1, (
        "the key's own message goes; the batch of ten rows is rewritten, not dropped"
    )
    record = spark.table(SILVER_ERASURES).where(f"source = '{SOURCE}'").collect()
    assert len(record) == 1
    r = record[0].asDict()
    assert (r["database"], r["table"], r["key_columns"], r["requested_by"]) == (
        "er",
        "persons",
        ["id"],
        "dpo@example.test",
    )
    assert sorted(r["key_hashes"]) == sorted(key_hash("er", name, erased_key) for name in ("people", "persons"))
    assert r["finished_at"] is not None
    assert (
        r["bronze_dropped"],
        r["bronze_rewritten"],
        r["silver_rows"],
        r["gold_rows"],
        r["history_rows"],
        r["daily_rows"],
    ) == (1, 1, 2, 1, 2, 1)
    assert not any(secret in json.dumps(r, default=str) for secret in SECRETS) and '"7"' not in json.dumps(
        r, default=str
    )

    # a replay of bronze: silver decoded again from the rewritten messages, gold rebuilt from it
    steps.rebuild({"source": SOURCE, "layer": "silver"})
    steps.rebuild({"source": SOURCE, "layer": "gold"})
    steps.rebuild({"source": SOURCE, "layer": "history"})
    assert _layers(spark) == after, "rebuilt from bronze, the layers differ from what the erasure left"

    # TiCDC sends the same messages again (a changefeed restarted from an older checkpoint)
    send(broker, SOURCE, _stream(), PROTOCOL)
    land_and_decode(spark, config, SOURCE)
    build_gold(spark, config, SOURCE)
    assert _layers(spark) == after, "the key's changes sent again came back"
    held = files_holding(warehouse, SECRETS)
    assert held and all(path.startswith("bronze.db/kafka_messages/") for path in held), held
    # erased again (from the command line): silver noted where the key came again, so its messages go too
    assert cli.main(["erase", "--source", SOURCE, "--table", "er.persons", "--key", '{"id": 7}', "--by", "dpo"]) == 0
    assert files_holding(warehouse, SECRETS) == [], "the messages sent again after the erasure are still stored"
    assert _layers(spark) == after
    assert spark.table(SILVER_ERASURES).where(f"source = '{SOURCE}'").count() == 2
    assert not spark.table(SILVER_ERASED_MESSAGES).where(f"source = '{SOURCE}'").count()

    # a change of the key committed after the erasure is new data
    now = int(time.time() * 1000) - 1_763_900_000_000 + 60_000
    send(broker, SOURCE, [*_people(now, [("insert", 7, None, "new@example.test")]), Watermark(tso(now + 1))], PROTOCOL)
    land_and_decode(spark, config, SOURCE)
    build_gold(spark, config, SOURCE)
    assert _layers(spark)["gold"][erased_key] == {("new@example.test", "n")}


def test_erasing_the_key_a_row_moved_to_keeps_the_move_in_ignore_mode(spark, broker, source_config):
    """Gold's `ignore` delete mode applies a delete only as half of an update that changed a key, which TiCDC sent
    as a delete and an insert of one commit. Erasing the new key takes the insert away; the erasure records that
    commit, and the delete of the old key is flagged a key change in silver and in every decode after it, so
    neither a rebuild of gold nor one of silver from bronze brings the old row back. The table is renamed after
    its last change: the erasure finds its key and its rows under the name they came with."""

    source = "erased_moved"
    config = source_config(source, "canal-json", gold=GoldSettings(deletes="ignore"))
    table, renamed = dataclasses.replace(PEOPLE, name="moved"), dataclasses.replace(PEOPLE, name="kept")
    first, moved, other = ({"id": i, "email": f"{i}@example.test", "note": "n"} for i in (1, 2, 3))
    events = [
        Ddl(tso(0), "er", "moved", create_table_sql(table), "create_table", table_after=table),
        RowChange(tso(10), "insert", table, after=first),
        RowChange(tso(20), "insert", table, after=other),
        RowChange(tso(30), "update", table, before=first, after={**moved, "email": first["email"]}),  # sent split
        RowChange(tso(40), "delete", table, before=other),  # ignored: row 3 stays
        Ddl(tso(45), "er", "kept", "RENAME TABLE er.moved TO er.kept", "rename_table", renamed, table),
        Watermark(tso(50)),
    ]
    broker.create_topics([source], partitions=1)
    send(broker, source, events)
    land_and_decode(spark, config, source)
    gold = f"{quote_ident(names.gold_namespace(source))}.{quote_ident(names.gold_table('er', 'kept'))}"

    def ids() -> list[int]:
        return sorted(r["id"] for r in spark.sql(f"SELECT id FROM {gold}").collect())

    build_gold(spark, config, source)
    assert ids() == [2, 3]
    erase(spark, config, source, "er", "kept", {"id": "2"}, "dpo")
    assert ids() == [3]
    build_gold(spark, config, source, rebuild=True)
    assert ids() == [3], "the rebuild brought back the row whose key the update changed"
    rebuild_silver(spark, config, source)
    build_gold(spark, config, source, rebuild=True)
    assert ids() == [3], "a rebuild of silver from bronze brought back the row whose key the update changed"


def test_a_lakehouse_made_before_erasures_kept_key_changes_gains_them_and_reads_old_records(spark):
    """`silver.erasures` made by an older version has no `key_changes`: the next run adds the column, and an older
    record reads as keeping none (runs after the test above, whose record loses its commits here)."""
    spark.sql(f"ALTER TABLE {SILVER_ERASURES} DROP COLUMN key_changes")
    ensure_tables(spark, "silver")
    added = spark.table(SILVER_ERASURES).schema["key_changes"].dataType
    assert added.simpleString() == "array<struct<database:string,table:string,commit_ts:bigint>>"
    assert erasures(spark, "erased_moved").key_changes == set()


def test_a_key_read_by_its_type_stays_erased_and_once_when_schemaless_debezium_sends_it_again(
    spark, broker, source_config
):
    """Debezium without its schema sends a DATE as days since 1970, and silver reads it by the table's DDL: the
    erasure names the key as a date. When TiCDC sends the same messages again after the erasure, the erased key
    stays out and the other key's change comes in once: both are told by the key as read, not the number sent."""
    source, schemaless = "erased_days", {"debezium-disable-schema": True}
    config = source_config(source, "debezium", options=schemaless)
    table = Table("er", "days", (Column("day", "date", nullable=False), Column("note", "varchar(16)")), ("day",), 901)
    events = [
        Ddl(tso(0), "er", "days", create_table_sql(table), "create_table", table_after=table),
        RowChange(tso(10), "insert", table, after={"day": dt.date(2024, 1, 1), "note": "erase me"}),
        RowChange(tso(20), "insert", table, after={"day": dt.date(2024, 2, 29), "note": "kept"}),
        Watermark(tso(30)),
    ]
    broker.create_topics([source], partitions=1)
    send(broker, source, events, "debezium", schemaless)
    land_and_decode(spark, config, source)
    erase(spark, config, source, "er", "days", {"day": "2024-01-01"}, "dpo")
    send(broker, source, [*events[1:3], Watermark(tso(40))], "debezium", schemaless)  # TiCDC sends them again
    land_and_decode(spark, config, source)

    silver = spark.sql(
        f"SELECT row_key FROM {SILVER_ROW_CHANGES} WHERE source = :source AND `table` = 'days'",
        args={"source": source},
    ).collect()
    assert [r["row_key"] for r in silver] == ['["2024-02-29"]'], silver
    erased_again = spark.sql(
        f"SELECT `offset`, key_hash FROM {SILVER_ERASED_MESSAGES} WHERE source = :source", args={"source": source}
    ).collect()
    assert [(r["offset"], r["key_hash"]) for r in erased_again] == [(4, key_hash("er", "days", '["2024-01-01"]'))]
    build_gold(spark, config, source)
    gold = f"{quote_ident(names.gold_namespace(source))}.{quote_ident(names.gold_table('er', 'days'))}"
    assert [tuple(r) for r in spark.sql(f"SELECT day, note FROM {gold}").collect()] == [(dt.date(2024, 2, 29), "kept")]
