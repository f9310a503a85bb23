"""Debezium codec: TiCDC reference vectors, simulator fidelity, round trips, malformed input."""

from __future__ import annotations

import base64
import datetime as dt
import itertools
import json
from decimal import Decimal

import orjson
import pytest

from spark_jobs.canonical.events import FLAGS, ChangeEvent
from spark_jobs.codecs import make_decoder
from spark_jobs.errors import DecodeError
from tests.codecs.helpers import EVERY_BYTE, decode, decode_partitions, integer_columns, integer_limits
from tests.reference_vectors import load_vector, vector_names
from ticdc_devkit.simulator.debezium import DebeziumEncoder, expected
from ticdc_devkit.simulator.model import Bootstrap, Column, Ddl, RowChange, Table, Watermark, expected_event
from ticdc_devkit.simulator.stream import encode_stream, partition_events
from ticdc_devkit.simulator.workload import create_table_sql

# ---- (a) every reference vector ----------------------------------------------------------------


def _row(op, commit_ts, before, after, types, flags, table="table1", key=("tiny",)):
    return ChangeEvent(
        kind="row",
        op=op,
        database="test",
        table=table,
        commit_ts=commit_ts,
        key_columns=list(key),
        before=before,
        after=after,
        column_types=types,
        flags=flags,
    )


def _ddl(table, ddl_type, sql, table_schema):
    return ChangeEvent(
        kind="ddl",
        database="test",
        table=table,
        commit_ts=1,
        ddl_type=ddl_type,
        ddl_sql=sql,
        table_schema=table_schema,
    )


# The vectors' partial expectations (commit_ts, after/before, resolved_ts, query) as full events.
VECTOR_EVENTS = {
    "debezium_02_insert_no_schema.json": _row(
        "insert", 1, None, {"tiny": "1"}, {"tiny": "bigint"}, ["types_partial", "values_raw"]
    ),
    "debezium_03_insert_with_schema.json": _row(
        "insert", 1, None, {"tiny": "1"}, {"tiny": "smallint"}, ["types_partial"]
    ),
    "debezium_04_update_with_schema.json": _row(
        "update", 1, {"tiny": "2"}, {"tiny": "1"}, {"tiny": "smallint"}, ["types_partial"]
    ),
    "debezium_05_update_no_before.json": _row(
        "update", 1, None, {"tiny": "1"}, {"tiny": "bigint"}, ["old_value_missing", "types_partial", "values_raw"]
    ),
    "debezium_06_delete_no_schema.json": _row(
        "delete", 1, {"tiny": "2"}, None, {"tiny": "bigint"}, ["types_partial", "values_raw"]
    ),
    "debezium_07_watermark.json": ChangeEvent(kind="watermark", commit_ts=3),
    "debezium_08_ddl_rename_with_schema.json": _ddl(
        "table1",
        "rename_table",
        "RENAME TABLE test.table1 to test.table2",
        {
            "database": "test",
            "table": "table1",
            "key_columns": ["id"],
            "columns": [{"name": "id", "type": "int", "nullable": False}],
        },
    ),
    "debezium_10_ddl_drop_table_no_schema.json": _ddl("table2", "drop_table", "DROP TABLE test.table2", None),
}

# debezium_01 is the real Debezium connector's output; TiCDC's differs only in payload.source.
ALL_TYPES_AFTER = {
    "pk": "1",
    "col_d_2023": "2023-11-30",
    "col_d_1000": "1000-01-01",
    "col_d_9999": "9999-12-31",
    "col_d_0000": None,
    # DATETIME: ms for fsp <= 3, µs above; the fsp itself is not sent (fsp_unknown)
    "col_dt": "2023-11-30 12:34:56.000",
    "col_dt_fsp_0": "2023-11-30 12:34:56.000",
    "col_dt_fsp_1": "2023-11-30 12:34:56.100",
    "col_dt_fsp_4": "2023-11-30 12:34:56.123500",
    "col_dt_fsp_6": "2023-11-30 12:34:56.123456",
    "col_dt_0000": None,
    "col_t": "12:34:56.000000",
    "col_t_fsp_0": "12:34:56.000000",
    "col_t_fsp_1": "12:34:56.100000",
    "col_t_fsp_4": "12:34:56.123500",
    "col_t_fsp_6": "12:34:56.123456",
    "col_t_neg": "-12:34:56.123456",
    # TIMESTAMP carries exactly fsp digits: canonical
    "col_ts": "2023-11-30 12:34:56",
    "col_ts_fsp_0": "2023-11-30 12:34:56",
    "col_ts_fsp_1": "2023-11-30 12:34:56.1",
    "col_ts_fsp_5": "2023-11-30 12:34:56.12346",
    "col_ts_fsp_6": "2023-11-30 12:34:56.123456",
    "col_y": "2023",
    "col_bit_1": "1",
    "col_bit_5": "16",
    "col_bit_6": "16",
    "col_bit_60": "16",
    "col_varchar": "foo",
    "col_char": "foo",
    "col_varbinary": base64.b64encode(b"foo").decode(),
    "col_binary": base64.b64encode(b"foo" + bytes(97)).decode(),
    "col_blob": base64.b64encode(b"foo").decode(),
    "col_decimal": "12345.12345",
    "col_numeric": "12345.12345",
    "col_float": "12345.123",
    "col_double": "12345.12345",
    "col_int": "-2147483648",
    "col_int_unsigned": "4294967295",
    "col_tinyint": "-128",
    "col_tinyint_unsigned": "255",
    "col_smallint": "-32768",
    "col_smallint_unsigned": "65535",
    "col_mediumint": "-8388608",
    "col_mediumint_unsigned": "16777215",
    "col_bigint": "-9223372036854775808",
    # without tidb_type nothing says the column is unsigned: the wrapped value stays
    "col_bigint_unsigned": "-1",
    "col_enum": "a",
    "col_enum_invalid": "",
    "col_set": "a,b",
    "col_set_invalid": "",
    "col_json": '["foo"]',
}
ALL_TYPES_TYPES = {
    "pk": "int",
    "col_d_2023": "date",
    "col_dt": "datetime",
    "col_dt_fsp_6": "datetime",
    "col_t_neg": "time",
    "col_ts_fsp_5": "timestamp",
    "col_y": "year",
    "col_bit_1": "bit",
    "col_bit_60": "bit",
    "col_varchar": "longtext",
    "col_varbinary": "longtext",
    "col_decimal": "double",
    "col_float": "float",
    "col_double": "double",
    "col_tinyint": "smallint",
    "col_smallint_unsigned": "int",
    "col_int_unsigned": "bigint",
    "col_bigint_unsigned": "bigint",
    "col_enum": "enum",
    "col_set": "set",
    "col_json": "json",
}


def _ticdc_all_types_value() -> bytes:
    doc = json.loads(load_vector("debezium_01_all_types_insert.json")["value_bytes"])
    source = DebeziumEncoder({"cluster-id": "dbserver1"}).source("test", "foo", 449000000000000000)
    doc["payload"]["source"] = source | {"ts_ms": 0}
    return json.dumps(doc).encode()


def test_every_vector_has_an_expectation():
    assert set(vector_names("debezium")) == set(VECTOR_EVENTS) | {"debezium_01_all_types_insert.json"}


@pytest.mark.parametrize("name", sorted(VECTOR_EVENTS))
def test_vector(name):
    v = load_vector(name)
    events = decode(
        "debezium",
        v["key_bytes"],
        v["value_bytes"],
        {
            k: v
            for k, v in (v.get("decoder_config") or {}).items()
            if k in ("enable-tidb-extension", "debezium-disable-schema")
        },
    )
    assert [e.to_dict() for e in events] == [VECTOR_EVENTS[name].to_dict()]
    partial = v["expected"]
    event = events[0]
    assert event.commit_ts == partial.get("commit_ts", partial.get("resolved_ts"))
    if "query" in partial:
        assert event.ddl_sql == partial["query"]
    for side in ("before", "after"):
        if side in partial:
            assert getattr(event, side) == {k: str(x) for k, x in partial[side].items()}


def test_vector_all_types_every_column():
    v = load_vector("debezium_01_all_types_insert.json")
    [event] = decode("debezium", v["key_bytes"], _ticdc_all_types_value())
    assert (event.kind, event.op, event.database, event.table) == ("row", "insert", "test", "foo")
    assert event.commit_ts == 449000000000000000
    assert event.key_columns == ["pk"]
    assert event.before is None
    assert event.after == ALL_TYPES_AFTER
    assert {k: event.column_types[k] for k in ALL_TYPES_TYPES} == ALL_TYPES_TYPES
    assert set(event.column_types) == set(ALL_TYPES_AFTER)
    assert event.flags == ["fsp_unknown", "types_partial"]


def test_vector_all_types_without_commit_ts_is_rejected():
    v = load_vector("debezium_01_all_types_insert.json")
    with pytest.raises(DecodeError) as err:
        decode("debezium", v["key_bytes"], v["value_bytes"])
    assert err.value.where == "payload.source.commit_ts"


# ---- (b) the simulator writes what TiCDC writes ---------------------------------------------------

TINY = Table("test", "table1", (Column("tiny", "tinyint"),), key=("tiny",))
REFERENCE_OPTIONS = {"cluster-id": "test_cluster"}


def _without_clock(doc):
    """payload.ts_ms is the encoder's wall clock (the vectors say it differs)."""
    doc = json.loads(doc) if isinstance(doc, (bytes, str)) else doc
    doc["payload"].pop("ts_ms", None)
    return doc


@pytest.mark.parametrize(
    "name, event, options",
    [
        (
            "debezium_02_insert_no_schema.json",
            RowChange(1, "insert", TINY, after={"tiny": 1}),
            {"debezium-disable-schema": True},
        ),
        ("debezium_03_insert_with_schema.json", RowChange(1, "insert", TINY, after={"tiny": 1}), {}),
        (
            "debezium_04_update_with_schema.json",
            RowChange(1, "update", TINY, before={"tiny": 2}, after={"tiny": 1}),
            {},
        ),
        (
            "debezium_05_update_no_before.json",
            RowChange(1, "update", TINY, before={"tiny": 2}, after={"tiny": 1}),
            {"debezium-disable-schema": True, "debezium-output-old-value": False},
        ),
        (
            "debezium_06_delete_no_schema.json",
            RowChange(1, "delete", TINY, before={"tiny": 2}),
            {"debezium-disable-schema": True},
        ),
        ("debezium_07_watermark.json", Watermark(3), {"enable-tidb-extension": True}),
    ],
)
def test_simulator_reproduces_reference(name, event, options):
    v = load_vector(name)
    [(key, value, _)] = DebeziumEncoder({**REFERENCE_OPTIONS, **options}).encode([event])
    assert orjson.loads(key) == json.loads(v["key_bytes"])
    assert _without_clock(value) == _without_clock(v["value_bytes"])


def test_simulator_ddl_schema_matches_reference():
    v = load_vector("debezium_08_ddl_rename_with_schema.json")
    t1 = Table("test", "table1", (Column("id", "int", nullable=False),), key=("id",))
    t2 = Table("test", "table2", t1.columns, key=("id",))
    # the reference test swapped old and new, so its id reads "table2","table1"
    ddl = Ddl(
        1, "test", "table1", "RENAME TABLE test.table1 to test.table2", "rename_table", table_after=t1, table_before=t2
    )
    [(key, value, _)] = DebeziumEncoder(REFERENCE_OPTIONS).encode([ddl])
    ours, theirs = _without_clock(value), _without_clock(v["value_bytes"])
    assert orjson.loads(key) == json.loads(v["key_bytes"])
    assert ours["schema"] == theirs["schema"]
    assert ours["payload"]["source"] == theirs["payload"]["source"]
    [ours_change], [theirs_change] = ours["payload"].pop("tableChanges"), theirs["payload"].pop("tableChanges")
    assert ours["payload"] == theirs["payload"]
    assert (ours_change["type"], ours_change["id"]) == (theirs_change["type"], theirs_change["id"])
    ours_column, theirs_column = ours_change["table"]["columns"][0], theirs_change["table"]["columns"][0]
    # TiCDC's test table carries flen 0 for INT; a real INT has the default length, written as null
    assert ours_column.pop("length") is None and theirs_column.pop("length") == 0
    assert ours_column == theirs_column


def test_simulator_sends_no_watermark_without_extension():
    assert DebeziumEncoder({}).encode([Watermark(5), Bootstrap(TINY)]) == []
    assert expected(Watermark(5), {}) is None
    assert expected(Bootstrap(TINY), {"enable-tidb-extension": True}) is None


# ---- (c) round trip through encode_stream -----------------------------------------------------------

INTEGERS = integer_columns(
    "c_tiny", "c_tiny_u", "c_small", "c_small_u", "c_medium", "c_medium_u", "c_int", "c_int_u", "c_big", "c_big_u"
)
ALL = Table(
    "shop",
    "all_types",
    (
        Column("id", "int", nullable=False),
        *INTEGERS,
        Column("c_dec", "decimal(10,4)"),
        Column("c_float", "float"),
        Column("c_double", "double"),
        Column("c_bit1", "bit(1)"),
        Column("c_bit10", "bit(10)"),
        Column("c_date", "date"),
        Column("c_dt0", "datetime"),
        Column("c_dt3", "datetime(3)"),
        Column("c_dt6", "datetime(6)"),
        Column("c_ts3", "timestamp(3)"),
        Column("c_time", "time(6)"),
        Column("c_time0", "time"),
        Column("c_year", "year"),
        Column("c_char", "char(10)"),
        Column("c_varchar", "varchar(40)"),
        Column("c_text", "text"),
        Column("c_binary", "binary(4)"),
        Column("c_varbinary", "varbinary(300)"),
        Column("c_blob", "blob"),
        Column("c_enum", "enum('a','b','c')"),
        Column("c_set", "set('x','y','z')"),
        Column("c_json", "json"),
    ),
    key=("id",),
)

FULL_ROW = {
    "id": 1,
    **integer_limits(INTEGERS, signed="min", unsigned="max"),
    "c_dec": Decimal("123.4500"),
    "c_float": 1.1,
    "c_double": 12345.12345,
    "c_bit1": 1,
    "c_bit10": 0b1010101011,
    "c_date": dt.date(1000, 1, 1),
    "c_dt0": dt.datetime(2023, 11, 30, 12, 34, 56),
    "c_dt3": dt.datetime(2023, 11, 30, 12, 34, 56, 789000),
    "c_dt6": dt.datetime(1969, 12, 31, 23, 59, 59, 123456),
    "c_ts3": dt.datetime(2023, 11, 30, 12, 34, 56, 120000),
    "c_time": -dt.timedelta(hours=838, minutes=59, seconds=58, microseconds=999999),
    "c_time0": dt.timedelta(hours=12, minutes=34, seconds=56),
    "c_year": 2023,
    "c_char": "héllo",
    "c_varchar": '日本語 — ü 🎉 "quoted" \\ back',
    "c_text": "line1\nline2\t\x01",
    "c_binary": b"\x00\xff\x10\x80",
    "c_varbinary": EVERY_BYTE,
    "c_blob": EVERY_BYTE[::-1],
    "c_enum": "b",
    "c_set": ("x", "z"),
    "c_json": '{"a": [1, 2.5, "ü"], "b": null}',
}
SECOND_ROW = {**{name: None for name in FULL_ROW}, "id": 2}
THIRD_ROW = {
    **FULL_ROW,
    "id": 3,
    "c_big_u": 2**63,
    "c_dec": Decimal("-1.0000"),
    "c_double": 2.0,
    "c_float": -0.0,
    "c_bit1": 0,
    "c_bit10": 0,
    "c_date": dt.date(9999, 12, 31),
    "c_set": (),
    "c_enum": "a",
    "c_time": dt.timedelta(0),
    "c_varbinary": b"",
    "c_char": "",
}

PAIR = Table(
    "shop",
    "pairs",
    (Column("k1", "varchar(10)", nullable=False), Column("v", "int"), Column("k2", "bigint", nullable=False)),
    key=("k2", "k1"),
)
PAIR_WIDER = Table("shop", "pairs", PAIR.columns + (Column("extra", "decimal(6,2)"),), key=("k2", "k1"))
PAIRS_RENAMED = Table("shop", "pairs_v2", PAIR_WIDER.columns, key=("k2", "k1"))

TS = 449_000_000_000_000_000


def stream():
    return [
        Ddl(TS + 1, "shop", None, "CREATE DATABASE shop", "create_database"),
        Ddl(
            TS + 2,
            "shop",
            "all_types",
            create_table_sql(ALL),
            "create_table",
            table_after=ALL,
        ),
        Ddl(
            TS + 3,
            "shop",
            "pairs",
            "CREATE TABLE `shop`.`pairs` (k1 VARCHAR(10), v INT, k2 BIGINT, PRIMARY KEY (k2, k1))",
            "create_table",
            table_after=PAIR,
        ),
        RowChange(TS + 10, "insert", ALL, after=FULL_ROW),
        RowChange(TS + 11, "insert", ALL, after=SECOND_ROW),
        RowChange(TS + 12, "insert", ALL, after=THIRD_ROW),
        RowChange(TS + 13, "insert", PAIR, after={"k1": "a", "v": 1, "k2": 7}),
        Watermark(TS + 14),
        RowChange(TS + 20, "update", ALL, before=FULL_ROW, after={**FULL_ROW, "c_varchar": "changed", "c_dec": None}),
        RowChange(TS + 21, "update", ALL, before=SECOND_ROW, after=FULL_ROW | {"id": 2}),
        RowChange(TS + 22, "update", PAIR, before={"k1": "a", "v": 1, "k2": 7}, after={"k1": "b", "v": 1, "k2": 7}),
        Ddl(
            TS + 30,
            "shop",
            "pairs",
            "ALTER TABLE shop.pairs ADD COLUMN extra DECIMAL(6,2)",
            "add_column",
            table_after=PAIR_WIDER,
            table_before=PAIR,
        ),
        RowChange(TS + 31, "insert", PAIR_WIDER, after={"k1": "c", "v": None, "k2": 8, "extra": Decimal("10.50")}),
        RowChange(TS + 32, "delete", ALL, before=THIRD_ROW),
        Ddl(
            TS + 40,
            "shop",
            "pairs_v2",
            "RENAME TABLE shop.pairs TO shop.pairs_v2",
            "rename_table",
            table_after=PAIRS_RENAMED,
            table_before=PAIR_WIDER,
        ),
        Ddl(
            TS + 41,
            "shop",
            "all_types",
            "TRUNCATE TABLE shop.all_types",
            "truncate_table",
            table_after=ALL,
            table_before=ALL,
        ),
        Ddl(TS + 42, "shop", "pairs_v2", "DROP TABLE shop.pairs_v2", "drop_table", table_before=PAIRS_RENAMED),
        Bootstrap(ALL),
        Watermark(TS + 50),
    ]


OPTION_SETS = [
    {"debezium-disable-schema": not schema, "enable-tidb-extension": ext, "debezium-output-old-value": old}
    for schema, ext, old in itertools.product((True, False), repeat=3)
]


@pytest.mark.parametrize("options", OPTION_SETS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
def test_round_trip(options):
    events = stream()
    messages = encode_stream("debezium", events, partitions=2, options=options)
    per_partition = partition_events(events, 2, ddl_to_all=True)
    assert {m.partition for m in messages} == {0, 1}
    decoded = decode_partitions("debezium", messages, options)
    for partition, logical in enumerate(per_partition):
        got = decoded[partition]
        want = [x.to_dict() for x in (expected(e, options) for e in logical) if x is not None]
        assert got == want
        for event in got:
            assert set(event["flags"]) <= set(FLAGS)


def test_round_trip_is_lossless_where_debezium_is():
    """With schema and extension, only DECIMAL, DATETIME and TIME differ from the canonical text."""
    options = {"enable-tidb-extension": True}
    [message] = encode_stream("debezium", [RowChange(TS, "insert", ALL, after=FULL_ROW)], options=options)
    [event] = decode("debezium", message.key, message.value, options)
    lossless = {
        name: text
        for name, text in expected_canonical(FULL_ROW).items()
        if name not in ("c_dec", "c_dt0", "c_dt3", "c_dt6", "c_time", "c_time0")
    }
    assert {k: event.after[k] for k in lossless} == lossless
    assert event.after["c_big_u"] == "18446744073709551615"
    assert event.after["c_bit10"] == str(0b1010101011)
    assert event.after["c_varbinary"] == base64.b64encode(EVERY_BYTE).decode()
    assert event.after["c_ts3"] == "2023-11-30 12:34:56.120"
    assert event.after["c_dec"] == "123.45"
    assert event.after["c_dt0"] == "2023-11-30 12:34:56.000"
    assert event.after["c_dt6"] == "1969-12-31 23:59:59.123456"
    assert event.after["c_time"] == "-838:59:58.999999"
    assert event.column_types["c_dec"] == "decimal"
    assert event.column_types["c_big_u"] == "bigint unsigned"
    assert event.flags == ["fsp_unknown", "lossy_decimal", "types_partial"]


def expected_canonical(row):
    return expected_event(RowChange(TS, "insert", ALL, after=row)).after


def test_key_columns_follow_table_column_order():
    [message] = encode_stream("debezium", [RowChange(TS, "insert", PAIR, after={"k1": "a", "v": 1, "k2": 7})])
    [event] = decode("debezium", message.key, message.value)
    assert event.key_columns == ["k1", "k2"]


def test_without_schema_values_are_raw_json():
    options = {"debezium-disable-schema": True}
    [message] = encode_stream("debezium", [RowChange(TS, "insert", ALL, after=THIRD_ROW)], options=options)
    [event] = decode("debezium", message.key, message.value, options)
    assert event.after["c_date"] == str(dt.date(9999, 12, 31).toordinal() - dt.date(1970, 1, 1).toordinal())
    assert event.after["c_big_u"] == str(-(2**63))
    assert event.after["c_dec"] == "-1" and event.column_types["c_dec"] == "bigint"
    assert event.after["c_ts3"] == "2023-11-30T12:34:56.120Z"
    assert event.flags == ["types_partial", "values_raw"]


def test_schema_is_compiled_once_per_table_version():
    options = {"enable-tidb-extension": True}
    rows = [RowChange(TS + i, "insert", ALL, after={**FULL_ROW, "id": i}) for i in range(20)]
    decoder = make_decoder("debezium", options)
    for m in encode_stream("debezium", rows, options=options):
        decoder.decode(m.key, m.value)
    assert len(decoder._schemas) == 1


def test_column_named_schema_does_not_confuse_the_fast_path():
    table = Table("db", "t", (Column("schema", "varchar(10)", nullable=False), Column("n", "int")), key=("schema",))
    for options in ({}, {"debezium-disable-schema": True}):
        [m] = encode_stream(
            "debezium", [RowChange(TS, "insert", table, after={"schema": ',"schema":', "n": 1})], options=options
        )
        [event] = decode("debezium", m.key, m.value, options)
        assert event.after == {"schema": ',"schema":', "n": "1"}


# ---- (d) malformed input ----------------------------------------------------------------------------


def _good_message(options=None):
    [m] = encode_stream("debezium", [RowChange(TS, "insert", ALL, after=FULL_ROW)], options=options or {})
    return m.key, m.value


def _with(value: bytes, path: list, new) -> bytes:
    doc = orjson.loads(value)
    target = doc
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = new
    return orjson.dumps(doc)


def _drop(value: bytes, path: list) -> bytes:
    doc = orjson.loads(value)
    target = doc
    for step in path[:-1]:
        target = target[step]
    del target[path[-1]]
    return orjson.dumps(doc)


KEY, VALUE = _good_message({"enable-tidb-extension": True})
PLAIN_KEY, PLAIN_VALUE = _good_message()
_DDL_KEY, _DDL_VALUE = DebeziumEncoder({}).encode([stream()[1]])[0][:2]


@pytest.mark.parametrize(
    "key, value, where",
    [
        (KEY, None, "value"),
        (KEY, b"", "value"),
        (KEY, b"not json", "value"),
        (KEY, b"[1, 2]", "value"),
        (KEY, b'{"schema": {}}', "value.payload"),
        (KEY, b'{"payload": 5}', "value.payload"),
        (KEY, b'{"payload": {}, "schema": 5}', "value.schema"),
        (KEY, _drop(VALUE, ["payload", "source"]), "payload.source"),
        (KEY, _with(VALUE, ["payload", "source", "commit_ts"], "449"), "payload.source.commit_ts"),
        (KEY, _with(VALUE, ["payload", "source", "commit_ts"], -1), "payload.source.commit_ts"),
        (KEY, _with(VALUE, ["payload", "source", "db"], 5), "payload.source.db"),
        (KEY, _with(VALUE, ["payload", "op"], "x"), "payload.op"),
        (KEY, _with(VALUE, ["payload", "op"], 5), "payload.op"),
        (KEY, _with(VALUE, ["payload", "op"], None), "payload.op"),
        (KEY, _with(VALUE, ["payload", "after"], [1]), "payload.after"),
        (KEY, _with(VALUE, ["payload", "after", "c_int"], "12"), "payload.after.c_int"),
        (KEY, _with(VALUE, ["payload", "after", "c_int"], 1.5), "payload.after.c_int"),
        (KEY, _with(VALUE, ["payload", "after", "c_date"], "2023-11-30"), "payload.after.c_date"),
        (KEY, _with(VALUE, ["payload", "after", "c_date"], 10**9), "payload.after.c_date"),
        (KEY, _with(VALUE, ["payload", "after", "c_dt3"], 9 * 10**18), "payload.after.c_dt3"),
        (KEY, _with(VALUE, ["payload", "after", "c_ts3"], "2023-11-30 12:34:56"), "payload.after.c_ts3"),
        (KEY, _with(VALUE, ["payload", "after", "c_ts3"], "2023-13-30T12:34:56.000Z"), "payload.after.c_ts3"),
        (KEY, _with(VALUE, ["payload", "after", "c_blob"], "not base64!"), "payload.after.c_blob"),
        (KEY, _with(VALUE, ["payload", "after", "c_bit10"], 3), "payload.after.c_bit10"),
        (KEY, _with(VALUE, ["payload", "after", "c_bit1"], 1), "payload.after.c_bit1"),
        (KEY, _with(VALUE, ["payload", "after", "c_dec"], "1.5"), "payload.after.c_dec"),
        (KEY, _with(VALUE, ["payload", "after", "c_json"], {"a": 1}), "payload.after.c_json"),
        (KEY, _with(VALUE, ["payload", "after", "no_such_column"], 1), "payload.after.no_such_column"),
        (KEY, _with(VALUE, ["schema", "fields", 1, "fields"], 5), "schema.fields[after]"),
        (KEY, _with(VALUE, ["schema", "fields", 1, "fields", 3, "tidb_type"], 5), "schema.fields[after].fields[3]"),
        (
            PLAIN_KEY,
            _with(PLAIN_VALUE, ["schema", "fields", 1, "fields", 3, "type"], "struct"),
            "schema.fields[after].fields[3]",
        ),
        (KEY, _with(VALUE, ["schema", "fields"], None), "schema.fields"),
        (KEY, VALUE[:-40] + b"}", "schema"),
        (b"not json", VALUE, "key"),
        (b'{"payload": []}', VALUE, "key.payload"),
        (_DDL_KEY, _with(_DDL_VALUE, ["payload", "ddl"], 5), "payload.ddl"),
        (_DDL_KEY, _with(_DDL_VALUE, ["payload", "tableChanges"], {}), "payload.tableChanges"),
        (
            _DDL_KEY,
            _with(_DDL_VALUE, ["payload", "tableChanges", 0, "table", "columns"], 5),
            "payload.tableChanges[0].table.columns",
        ),
        (
            _DDL_KEY,
            _with(_DDL_VALUE, ["payload", "tableChanges", 0, "table", "columns", 2], {"name": "x"}),
            "payload.tableChanges[0].table.columns[2]",
        ),
        (_DDL_KEY, _with(_DDL_VALUE, ["payload", "databaseName"], 7), "payload.databaseName"),
    ],
)
def test_malformed_input_names_the_field(key, value, where):
    with pytest.raises(DecodeError) as err:
        decode("debezium", key, value)
    assert err.value.protocol == "debezium"
    assert err.value.where == where
    assert str(err.value).startswith("debezium: ")


@pytest.mark.parametrize("options", OPTION_SETS[:4], ids=str)
def test_every_truncation_is_a_decode_error(options):
    key, value = _good_message(options)
    decoder = make_decoder("debezium", options)
    for cut in range(0, len(value), 13):
        with pytest.raises(DecodeError):
            decoder.decode(key, value[:cut])
    for cut in range(1, len(key), 3):
        with pytest.raises(DecodeError):
            decoder.decode(key[:cut], value)


def test_a_good_message_still_decodes_after_bad_ones():
    decoder = make_decoder("debezium", {})
    key, value = _good_message()
    with pytest.raises(DecodeError):
        decoder.decode(key, _with(value, ["payload", "after", "c_int"], "x"))
    [event] = decoder.decode(key, value)
    assert event.after["c_int"] == "-2147483648"
