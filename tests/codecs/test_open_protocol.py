"""TiCDC Open Protocol: reference vectors, simulator bytes, round trips under every option, bad input."""

from __future__ import annotations

import base64
import datetime as dt
import random
from decimal import Decimal

import orjson
import pytest

from spark_jobs.codecs import make_decoder
from spark_jobs.codecs.large_message import compress
from spark_jobs.codecs.open_protocol import go_unquote
from spark_jobs.errors import ConfigError, DecodeError
from tests.codecs.helpers import EVERY_BYTE, INTEGER_COLUMNS, decode, decode_partitions, integer_limits
from tests.reference_vectors import load_vector, vector_names
from ticdc_devkit.simulator.model import Bootstrap, Column, Ddl, RowChange, Table, Watermark
from ticdc_devkit.simulator.open_protocol import OpenEncoder, expected, go_float, go_quote
from ticdc_devkit.simulator.stream import encode_stream, partition_events

VERSION = (1).to_bytes(8, "big")


def frame(*items: bytes) -> bytes:
    return b"".join(len(item).to_bytes(8, "big") + item for item in items)


def message(key_items: list[bytes], value_items: list[bytes]) -> tuple[bytes, bytes]:
    return VERSION + frame(*key_items), frame(*value_items)


PNG_HEAD = bytes.fromhex("89504e470d0a1a0a")

# ---- (a) reference vectors ----------------------------------------------------------------------


def test_every_open_vector_is_covered():
    assert vector_names("open_") == [
        "open_01_row_single.json",
        "open_02_row_batch4_with_ptn.json",
        "open_03_ddl_single.json",
        "open_04_ddl_batch3.json",
        "open_05_resolved_single.json",
        "open_07_empty_batch.json",
        "open_08_column_value_table.json",
    ]


def test_vector_01_single_row():
    v = load_vector("open_01_row_single.json")
    events = decode("open", v["key_bytes"], v["value_bytes"])
    assert [e.to_dict() for e in events] == [
        {
            "kind": "row",
            "op": "insert",
            "database": "a",
            "table": "b",
            "commit_ts": 1,
            "key_columns": [],
            "before": None,
            "after": {"col1": "aa"},
            "column_types": {"col1": "tinyint"},
            "schema_version": None,
            "ddl_type": None,
            "ddl_sql": None,
            "table_schema": None,
            "flags": [],
        }
    ]
    want = v["expected"][0]
    assert (events[0].commit_ts, events[0].database, events[0].table) == (want["ts"], want["schema"], want["table"])
    assert events[0].after == {name: col["v"] for name, col in want["u"].items()}


def test_vector_02_batch_of_four_rows_pairs_items_in_order():
    v = load_vector("open_02_row_batch4_with_ptn.json")
    events = decode("open", v["key_bytes"], v["value_bytes"])
    assert [(e.kind, e.op, e.database, e.table, e.commit_ts, e.after) for e in events] == [
        ("row", "insert", "a", "b", 1, {"col1": "aa"}),
        ("row", "insert", "a", "b", 2, {"col1": "bb"}),
        ("row", "insert", "a", "b", 3, {"col1": "bb"}),
        ("row", "insert", "a", "c", 4, {"col1": "cc"}),
    ]
    assert [e.commit_ts for e in events] == [x["ts"] for x in v["expected"]]
    assert events[3].table == v["expected"][3]["table"]  # `ptn` (physical partition id) has no canonical field


def test_vector_03_ddl():
    v = load_vector("open_03_ddl_single.json")
    events = decode("open", v["key_bytes"], v["value_bytes"])
    want = v["expected"][0]
    assert [e.to_dict() for e in events] == [
        {
            "kind": "ddl",
            "op": None,
            "database": "a",
            "table": "b",
            "commit_ts": want["ts"],
            "key_columns": [],
            "before": None,
            "after": None,
            "column_types": {},
            "schema_version": None,
            # the statement decides, not the action type (1, CREATE SCHEMA): the hand-made `create table a`
            # defines no column, so the interpreter does not understand it
            "ddl_type": "other",
            "ddl_sql": want["q"],
            "table_schema": None,
            "flags": [],
        }
    ]
    assert want["ddl_type"] == 1


def test_vector_04_three_ddls_in_one_message():
    v = load_vector("open_04_ddl_batch3.json")
    events = decode("open", v["key_bytes"], v["value_bytes"])
    assert [(e.kind, e.commit_ts, e.ddl_sql, e.ddl_type) for e in events] == [
        ("ddl", 1, "create table a", "other"),  # action types 1, 2, 3 are not read: the statements decide
        ("ddl", 2, "create table b", "other"),
        ("ddl", 3, "create table c", "other"),
    ]
    assert [(e.commit_ts, e.ddl_sql) for e in events] == [(x["ts"], x["q"]) for x in v["expected"]]


def test_vector_05_resolved():
    v = load_vector("open_05_resolved_single.json")
    events = decode("open", v["key_bytes"], v["value_bytes"])
    assert [e.to_dict() for e in events] == [
        {
            "kind": "watermark",
            "op": None,
            "database": None,
            "table": None,
            "commit_ts": 1,
            "key_columns": [],
            "before": None,
            "after": None,
            "column_types": {},
            "schema_version": None,
            "ddl_type": None,
            "ddl_sql": None,
            "table_schema": None,
            "flags": [],
        }
    ]
    assert events[0].commit_ts == v["expected"][0]["resolved_ts"]


def test_vector_07_header_only_key_is_no_events():
    v = load_vector("open_07_empty_batch.json")
    assert v["key_bytes"] == VERSION and v["value_bytes"] == b""
    assert decode("open", v["key_bytes"], v["value_bytes"]) == [] == v["expected"]
    assert decode("open", v["key_bytes"], None) == []


# vector "type" -> canonical column type the decoder must report
VALUE_TABLE_TYPES = {
    "TINYINT/BOOLEAN": "tinyint",
    "SMALLINT": "smallint",
    "INT": "int",
    "FLOAT": "float",
    "DOUBLE": "double",
    "NULL": "null",
    "TIMESTAMP": "timestamp",
    "BIGINT": "bigint",
    "MEDIUMINT": "mediumint",
    "DATE": "date",
    "TIME": "time",
    "DATETIME": "datetime",
    "YEAR": "year",
    "VARCHAR": "varchar",
    "VARBINARY (flag has BinaryFlag=1; Go strconv.Quote-escaped, no surrounding quotes)": "varbinary",
    "BIT": "bit",
    "JSON": "json",
    "DECIMAL": "decimal",
    "ENUM (1-based index)": "enum",
    "SET (bitmask)": "set",
    "TINYTEXT/TINYBLOB (base64, for BOTH text and blob)": "tinytext",
    "MEDIUMTEXT/MEDIUMBLOB": "mediumtext",
    "LONGTEXT/LONGBLOB": "longtext",
    "TEXT/BLOB": "text",
    "CHAR": "char",
    "BINARY (BinaryFlag)": "binary",
}
# vector "type" -> canonical value text, written out so that a wrong conversion cannot agree with itself
VALUE_TABLE_TEXT = {
    "TINYINT/BOOLEAN": "1",
    "SMALLINT": "1",
    "INT": "123",
    "FLOAT": "153.123",
    "DOUBLE": "153.123",
    "NULL": None,
    "TIMESTAMP": "1973-12-30 15:30:00",
    "BIGINT": "123",
    "MEDIUMINT": "123",
    "DATE": "2000-01-01",
    "TIME": "23:59:59",
    "DATETIME": "2015-12-20 23:58:58",
    "YEAR": "1970",
    "VARCHAR": "test",
    "VARBINARY (flag has BinaryFlag=1; Go strconv.Quote-escaped, no surrounding quotes)": "iVBORw0KGgo=",
    "BIT": "81",
    "JSON": '{"key1": "value1"}',
    "DECIMAL": "129012.1230000",
    "ENUM (1-based index)": "1",
    "SET (bitmask)": "3",
    "TINYTEXT/TINYBLOB (base64, for BOTH text and blob)": "测试text",
    "MEDIUMTEXT/MEDIUMBLOB": "测试text",
    "LONGTEXT/LONGBLOB": "测试text",
    "TEXT/BLOB": "测试text",
    "CHAR": "test",
    "BINARY (BinaryFlag)": "iVBORw0KGgo=",
}


def _vector_value_text(expected_value):
    """The vector's expected value as canonical text."""
    if expected_value is None:
        return None
    if isinstance(expected_value, dict) and "hex" in expected_value:
        return base64.b64encode(bytes.fromhex(expected_value["hex"])).decode()
    if isinstance(expected_value, dict):
        return expected_value["utf8"]
    return str(expected_value)


def _single_column_message(wire_column_json: str, ts: int = 7) -> tuple[bytes, bytes]:
    return message([b'{"ts":%d,"scm":"s","tbl":"t","t":1}' % ts], [b'{"u":{"c":' + wire_column_json.encode() + b"}}"])


def test_vector_08_every_column_type_decodes_to_canonical_text():
    v = load_vector("open_08_column_value_table.json")
    assert [entry["type"] for entry in v["content"]] == list(VALUE_TABLE_TEXT)
    for entry in v["content"]:
        (event,) = decode("open", *_single_column_message(entry["wire_column_json"]))
        name = entry["type"]
        assert event.after == {"c": VALUE_TABLE_TEXT[name]}, name
        assert event.after["c"] == _vector_value_text(entry["expected_value"]), name
        assert event.column_types == {"c": VALUE_TABLE_TYPES[name]}, name
        want_flags = {
            "ENUM (1-based index)": ["enum_index"],
            "SET (bitmask)": ["enum_index"],
            "DECIMAL": ["types_partial"],
            "TIME": ["fsp_unknown"],
        }.get(name, [])
        assert event.flags == want_flags, name


def test_vector_08_blob_with_binary_flag_is_base64_of_the_bytes():
    (event,) = decode("open", *_single_column_message('{"t":252,"f":1,"v":"5rWL6K+VdGV4dA=="}'))
    assert event.after == {"c": "5rWL6K+VdGV4dA=="}
    assert event.column_types == {"c": "blob"}


def test_vector_08_timestamp_is_converted_from_the_changefeed_time_zone():
    wire = next(
        e["wire_column_json"] for e in load_vector("open_08_column_value_table.json")["content"] if e["code"] == 7
    )
    (event,) = decode("open", *_single_column_message(wire), {"time-zone": "Asia/Shanghai"})
    assert event.after == {"c": "1973-12-30 07:30:00"}
    (event,) = decode("open", *_single_column_message(wire), {"time-zone": "-05:30"})
    assert event.after == {"c": "1973-12-30 21:00:00"}


# ---- (b) the simulator writes the reference bytes -----------------------------------------------

REF_TABLE_B = Table("a", "b", (Column("col1", "varchar(10)"),), ())


def test_simulator_reproduces_the_single_row_key():
    v = load_vector("open_01_row_single.json")
    ((key, _, _),) = OpenEncoder({}).encode([RowChange(1, "insert", REF_TABLE_B, after={"col1": "aa"})])
    assert key == v["key_bytes"]


def test_simulator_batches_rows_into_the_reference_key_framing():
    v = load_vector("open_02_row_batch4_with_ptn.json")
    rows = [RowChange(ts, "insert", REF_TABLE_B, after={"col1": "x"}) for ts in (1, 2, 3)]
    ((key, _value, _),) = OpenEncoder({}).encode(rows)
    three_items = 8 + 3 * (8 + 34)
    assert key == v["key_bytes"][:three_items]


def test_simulator_reproduces_the_ddl_message():
    v = load_vector("open_03_ddl_single.json")
    ((key, value, _),) = OpenEncoder({}).encode([Ddl(1, "a", "b", "create table a", "create_database")])
    assert (key, value) == (v["key_bytes"], v["value_bytes"])


def test_simulator_reproduces_the_resolved_message():
    v = load_vector("open_05_resolved_single.json")
    assert OpenEncoder({}).encode([Watermark(1)]) == [(v["key_bytes"], v["value_bytes"], [])]


def _wire_value_text(wire_column_json: str) -> str:
    return wire_column_json[wire_column_json.index('"v":') + 4 : -1]


def test_simulator_writes_the_reference_value_texts():
    """Each value of the docs' column type table, written by the simulator, is the text the docs show."""
    models = {
        1: ("tinyint", 1),
        2: ("smallint", 1),
        3: ("int", 123),
        4: ("float", 153.123),
        5: ("double", 153.123),
        7: ("timestamp", dt.datetime(1973, 12, 30, 15, 30)),
        8: ("bigint", 123),
        9: ("mediumint", 123),
        10: ("date", dt.date(2000, 1, 1)),
        11: ("time", dt.timedelta(hours=23, minutes=59, seconds=59)),
        12: ("datetime", dt.datetime(2015, 12, 20, 23, 58, 58)),
        13: ("year", 1970),
        16: ("bit(8)", 81),
        245: ("json", '{"key1": "value1"}'),
        246: ("decimal(20,7)", Decimal("129012.123")),
        247: ("enum('a','b')", "a"),
        248: ("set('a','b')", ("a", "b")),
        249: ("tinytext", "测试text"),
        250: ("mediumblob", "测试text".encode()),
        251: ("longtext", "测试text"),
        252: ("blob", "测试text".encode()),
    }
    entries = load_vector("open_08_column_value_table.json")["content"]
    checked = 0
    for entry in entries:
        wire = orjson.loads(entry["wire_column_json"])
        if entry["code"] in (15, 254):
            definition = {(15, 0): "varchar(10)", (15, 1): "varbinary(10)", (254, 0): "char(4)", (254, 1): "binary(8)"}[
                entry["code"], wire.get("f", 0)
            ]
            value = PNG_HEAD if wire.get("f", 0) else "test"
        elif entry["code"] in models:
            definition, value = models[entry["code"]]
        else:
            continue
        table = Table("s", "t", (Column("c", definition),), ())
        (spec,) = OpenEncoder({}).specs(table)
        assert spec.write(value) == _wire_value_text(entry["wire_column_json"]), entry["type"]
        checked += 1
    assert checked == len(entries) - 1  # all but the NULL type code


# ---- (c) round trips ----------------------------------------------------------------------------

EVERY_TYPE = Table(
    "shop",
    "every_type",
    (
        Column("id", "bigint", nullable=False),
        *INTEGER_COLUMNS,
        Column("dec", "decimal(20,6)"),
        Column("f", "float"),
        Column("d", "double"),
        Column("b", "bit(64)"),
        Column("dt", "date"),
        Column("dtm", "datetime(6)"),
        Column("ts", "timestamp(3)"),
        Column("tm", "time(3)"),
        Column("y", "year"),
        Column("c", "char(10)"),
        Column("vc", "varchar(100)"),
        Column("bin", "binary(4)"),
        Column("vb", "varbinary(300)"),
        Column("bl", "blob"),
        Column("tbl", "tinyblob"),
        Column("txt", "text"),
        Column("lt", "longtext"),
        Column("e", "enum('small','medium','large')"),
        Column("s", "set('x','y','z')"),
        Column("j", "json"),
    ),
    ("id",),
)

ORDERS = Table(
    "shop",
    "orders",
    (
        Column("region", "varchar(8)", nullable=False),
        Column("no", "int unsigned", nullable=False),
        Column("amount", "decimal(10,2)"),
        Column("note", "text"),
    ),
    ("no", "region"),
)  # key order differs from column order on purpose

MAX_ROW = {
    "id": 1,
    **integer_limits(INTEGER_COLUMNS, signed="max", unsigned="max"),
    "dec": Decimal("99999999999999.999999"),
    "f": 3.4028234663852886e38,
    "d": 1.7976931348623157e308,
    "b": 2**64 - 1,
    "dt": dt.date(9999, 12, 31),
    "dtm": dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
    "ts": dt.datetime(2038, 1, 19, 3, 14, 7, 999000),
    "tm": dt.timedelta(hours=838, minutes=59, seconds=59),
    "y": 2155,
    "c": "ünï©ødé",
    "vc": '日本語 "quoted" \\ back\nslash\t\x01',
    "bin": b"\x00\xff\x80\n",
    "vb": EVERY_BYTE,
    "bl": EVERY_BYTE,
    "tbl": b"",
    "txt": "plain text ✓ 🎉",
    "lt": "x" * 50,
    "e": "large",
    "s": ("x", "z"),
    "j": '{"a": [1, 2.5, "ü"], "b": null}',
}
MIN_ROW = {
    "id": 2,
    **integer_limits(INTEGER_COLUMNS, signed="min", unsigned="min"),
    "dec": Decimal("-0.000001"),
    "f": -1.1e-7,
    "d": 5e-324,
    "b": 0,
    "dt": dt.date(1000, 1, 1),
    "dtm": dt.datetime(1000, 1, 1, 0, 0, 0),
    "ts": dt.datetime(1970, 1, 1, 0, 0, 1),
    "tm": -dt.timedelta(hours=838, minutes=59, seconds=59, microseconds=500000),
    "y": 1901,
    "c": "",
    "vc": "",
    "bin": b"\x00\x00\x00\x00",
    "vb": b"",
    "bl": b"\x00",
    "tbl": PNG_HEAD,
    "txt": "",
    "lt": "",
    "e": "",
    "s": (),
    "j": "0",
}
NULL_ROW = {"id": 3}
ORDER_ROW = {"region": "eu", "no": 7, "amount": Decimal("12.50"), "note": "first"}


def workload() -> list:
    """DDL, inserts, updates (incl. a key change and zero old values), deletes, a batch, watermarks."""
    events: list = [
        Ddl(100, "shop", None, "CREATE DATABASE shop", "create_database"),
        Ddl(
            101,
            "shop",
            "every_type",
            "CREATE TABLE every_type (id bigint primary key)",
            "create_table",
            table_after=EVERY_TYPE,
        ),
        Bootstrap(EVERY_TYPE),
        RowChange(110, "insert", EVERY_TYPE, after=MAX_ROW),
        RowChange(110, "insert", EVERY_TYPE, after=MIN_ROW),
        RowChange(110, "insert", EVERY_TYPE, after=NULL_ROW),
        RowChange(111, "insert", ORDERS, after=ORDER_ROW),
        Watermark(112),
        RowChange(
            120,
            "update",
            EVERY_TYPE,
            before=MIN_ROW,
            after={
                **MIN_ROW,
                "c": "now",
                "vc": "set",
                "dec": Decimal(1),
                "e": "small",
                "s": ("y",),
                "j": "1",
                "tbl": b"",
                "tm": dt.timedelta(seconds=1),
                "bl": b"\x01",
            },
        ),
        RowChange(121, "update", EVERY_TYPE, before=MAX_ROW, after={**MAX_ROW, "i": None, "vb": b"\xfe", "f": 1.5}),
        RowChange(122, "update", EVERY_TYPE, before=NULL_ROW, after={**NULL_ROW, "txt": "filled", "ti": 0}),
        RowChange(123, "update", EVERY_TYPE, before=NULL_ROW, after=NULL_ROW),
        RowChange(124, "update", ORDERS, before=ORDER_ROW, after={**ORDER_ROW, "no": 8, "note": "moved"}),
        Ddl(130, "shop", "orders", "ALTER TABLE orders CHANGE COLUMN note remark text", "rename_column"),
        Ddl(131, "shop", "orders", "ALTER TABLE orders MODIFY amount decimal(12,2)", "modify_column"),
        Ddl(132, "shop", "orders", "ALTER TABLE orders ADD INDEX idx_amount (amount)", "create_index"),
        RowChange(140, "delete", EVERY_TYPE, before=MIN_ROW),
        RowChange(140, "delete", ORDERS, before={**ORDER_ROW, "no": 8, "note": "moved"}),
        Watermark(141),
    ]
    events += [RowChange(150, "insert", ORDERS, after={**ORDER_ROW, "no": 100 + n, "note": "n" * n}) for n in range(37)]
    events += [
        Watermark(151),
        Ddl(160, "shop", "orders", "TRUNCATE TABLE orders", "truncate_table"),
        Ddl(161, "shop", "orders", "DROP TABLE orders", "drop_table"),
        Watermark(162),
    ]
    return events


OPTION_SETS = {
    "defaults": {"time-zone": "America/New_York"},
    "old-value-off": {"enable-old-value": False, "time-zone": "Asia/Kolkata"},
    "only-updated-columns": {"only-output-updated-columns": True, "time-zone": "Asia/Kolkata"},
    "delete-keys-only": {"delete-only-output-handle-key-columns": True, "time-zone": "Asia/Kolkata"},
    "snappy": {"large-message-handle-compression": "snappy", "time-zone": "+09:00"},
    "lz4-only-updated": {
        "large-message-handle-compression": "lz4",
        "only-output-updated-columns": True,
        "time-zone": "Europe/Berlin",
    },
    "claim-check": {
        "large-message-handle-option": "claim-check",
        "large-message-threshold": 900,
        "time-zone": "Asia/Kolkata",
    },
    "claim-check-file-uri-lz4": {
        "large-message-handle-option": "claim-check",
        "large-message-threshold": 900,
        "large-message-handle-compression": "lz4",
        "time-zone": "Asia/Kolkata",
    },
    "handle-key-only": {
        "large-message-handle-option": "handle-key-only",
        "large-message-threshold": 900,
        "time-zone": "America/New_York",
    },
    "handle-key-only-old-value-off-snappy": {
        "large-message-handle-option": "handle-key-only",
        "large-message-threshold": 900,
        "enable-old-value": False,
        "large-message-handle-compression": "snappy",
        "time-zone": "UTC",
    },
    "batch-size-5": {"max-batch-size": 5, "time-zone": "Asia/Kolkata"},
    "batch-bytes-2000": {"max-message-bytes": 2000, "large-message-threshold": 100000, "time-zone": "Asia/Kolkata"},
}


def _options(name: str, tmp_path) -> dict:
    options = dict(OPTION_SETS[name])
    if name == "claim-check":
        options["claim-check-storage-uri"] = str(tmp_path / "claims")
    elif name == "claim-check-file-uri-lz4":
        options["claim-check-storage-uri"] = (tmp_path / "claims").as_uri() + "/"
    return options


@pytest.mark.parametrize("name", list(OPTION_SETS))
def test_round_trip_every_type_decodes_to_expected(name, tmp_path):
    options = _options(name, tmp_path)
    events = workload()
    messages = encode_stream("open", events, partitions=3, options=options)
    per_partition = partition_events(events, 3, ddl_to_all=True)
    decoded = decode_partitions("open", messages, options)
    flags_seen = set()
    for partition in range(3):
        got = decoded.get(partition, [])
        want = [x.to_dict() for x in (expected(e, options) for e in per_partition[partition]) if x is not None]
        assert len(got) == len(want)
        for index, (g, w) in enumerate(zip(got, want)):
            assert g == w, f"partition {partition} event {index}"
        flags_seen.update(f for e in got for f in e["flags"])
        if name == "delete-keys-only":  # a delete carries its key alone, unmarked
            assert all(set(e["before"]) == set(e["key_columns"]) for e in got if e["op"] == "delete")
    if name == "delete-keys-only":
        assert any(e["op"] == "delete" for got in decoded.values() for e in got)

    rows_per_message = [len(_key_items(m.key)) for m in messages]
    if name == "batch-size-5":
        assert max(rows_per_message) == 5
    elif name == "batch-bytes-2000":
        batched = [m for m in messages if len(_key_items(m.key)) > 1]
        assert batched and all(len(m.key) + len(m.value) + 36 <= 2000 for m in batched)
        assert max(rows_per_message) < 16
    else:
        assert max(rows_per_message) == 16
    if "claim-check" in name:
        assert "claim_check" in flags_seen and list((tmp_path / "claims").iterdir())
    if "handle-key-only" in name:
        assert "handle_key_only" in flags_seen
    if OPTION_SETS[name].get("enable-old-value") is False:
        assert "old_value_missing" in flags_seen
    if OPTION_SETS[name].get("only-output-updated-columns"):
        assert "old_value_partial" in flags_seen


def _key_items(key: bytes) -> list:
    from spark_jobs.codecs.open_protocol import split_items

    return split_items(key, 8, "key")


def test_round_trip_values_are_exact_canonical_text():
    """Spot-check the texts themselves, so an error shared by expected() and the decoder shows."""
    options = {"time-zone": "Asia/Kolkata"}
    messages = encode_stream(
        "open",
        [RowChange(5, "insert", EVERY_TYPE, after=MAX_ROW), RowChange(6, "insert", EVERY_TYPE, after=MIN_ROW)],
        options=options,
    )
    decoder = make_decoder("open", options)
    high, low = [e for m in messages for e in decoder.decode(m.key, m.value)]
    assert high.after["biu"] == "18446744073709551615" and low.after["bi"] == "-9223372036854775808"
    assert high.after["iu"] == "4294967295" and low.after["ti"] == "-128"
    assert high.after["dec"] == "99999999999999.999999" and low.after["dec"] == "-0.000001"
    assert high.after["f"] == "3.4028235e+38" and low.after["f"] == "-1.1e-07"
    assert high.after["d"] == "1.7976931348623157e+308" and low.after["d"] == "5e-324"
    assert high.after["b"] == "18446744073709551615"
    assert high.after["dtm"] == "9999-12-31 23:59:59.999999" and high.after["dt"] == "9999-12-31"
    assert high.after["ts"] == "2038-01-19 03:14:07.999" and low.after["ts"] == "1970-01-01 00:00:01.000"
    assert high.after["tm"] == "838:59:59" and low.after["tm"] == "-838:59:59"
    assert high.after["y"] == "2155" and low.after["y"] == "1901"
    assert high.after["c"] == "ünï©ødé" and high.after["vc"] == '日本語 "quoted" \\ back\nslash\t\x01'
    assert base64.b64decode(high.after["vb"]) == EVERY_BYTE == base64.b64decode(high.after["bl"])
    assert high.after["bin"] == "AP+ACg==" and high.after["tbl"] == "" and low.after["tbl"] == "iVBORw0KGgo="
    assert high.after["txt"] == "plain text ✓ 🎉"
    assert (high.after["e"], high.after["s"], low.after["e"], low.after["s"]) == ("3", "5", "0", "0")
    assert high.after["j"] == '{"a": [1, 2.5, "ü"], "b": null}'
    assert high.column_types["dec"] == "decimal" and high.column_types["biu"] == "bigint unsigned"
    assert high.column_types["vb"] == "varbinary" and high.column_types["txt"] == "text"
    assert high.column_types["bl"] == "blob" and high.column_types["bin"] == "binary"
    assert sorted(high.flags) == ["enum_index", "fsp_unknown", "types_partial"]


def test_timestamp_is_sent_in_the_changefeed_time_zone():
    table = Table("s", "t", (Column("id", "int", False), Column("ts", "timestamp(3)")), ("id",))
    row = RowChange(5, "insert", table, after={"id": 1, "ts": dt.datetime(2024, 7, 1, 12, 0, 0, 250000)})
    ((_, value, _),) = OpenEncoder({"time-zone": "Asia/Kolkata"}).encode([row])
    assert b'"ts":{"t":7,"f":65,"v":"2024-07-01 17:30:00.250"}' in value
    (event,) = make_decoder("open", {"time-zone": "Asia/Kolkata"}).decode(
        *OpenEncoder({"time-zone": "Asia/Kolkata"}).encode([row])[0][:2]
    )
    assert event.after["ts"] == "2024-07-01 12:00:00.250"


def test_update_wire_format_and_only_updated_columns_null_quirk():
    table = Table("s", "t", (Column("id", "int", False), Column("name", "varchar(8)"), Column("qty", "int")), ("id",))
    change = RowChange(
        9, "update", table, before={"id": 1, "name": "", "qty": 2}, after={"id": 1, "name": "ab", "qty": 2}
    )
    ((_, value, _),) = OpenEncoder({}).encode([change])
    assert value[8:] == (
        b'{"u":{"id":{"t":3,"h":true,"f":11,"v":1},"name":{"t":15,"f":64,"v":"ab"},'
        b'"qty":{"t":3,"f":65,"v":2}},"p":{"id":{"t":3,"h":true,"f":11,"v":1},'
        b'"name":{"t":15,"f":64,"v":""},"qty":{"t":3,"f":65,"v":2}}}'
    )
    ((_, value, _),) = OpenEncoder({"only-output-updated-columns": True}).encode([change])
    assert value[8:].endswith(b',"p":{"name":{"t":15,"f":64,"v":null}}}')
    (event,) = make_decoder("open", {"only-output-updated-columns": True}).decode(
        *OpenEncoder({"only-output-updated-columns": True}).encode([change])[0][:2]
    )
    assert event.before == {"id": "1", "name": None, "qty": "2"} and event.flags == ["old_value_partial"]
    ((_, value, _),) = OpenEncoder({"enable-old-value": False}).encode([change])
    assert b'"p"' not in value
    (event,) = make_decoder("open", {"enable-old-value": False}).decode(
        *OpenEncoder({"enable-old-value": False}).encode([change])[0][:2]
    )
    assert (event.op, event.before, event.flags) == ("insert", None, ["old_value_missing"])


def test_key_columns_follow_table_column_order():
    (event,) = [
        e
        for m in encode_stream("open", [RowChange(3, "insert", ORDERS, after=ORDER_ROW)])
        for e in make_decoder("open").decode(m.key, m.value)
    ]
    assert event.key_columns == ["region", "no"]
    assert expected(RowChange(3, "insert", ORDERS, after=ORDER_ROW), {}).key_columns == ["region", "no"]


def test_handle_key_only_and_claim_check_keys(tmp_path):
    big = RowChange(9, "insert", EVERY_TYPE, after=MAX_ROW)
    ((key, value, _),) = OpenEncoder(
        {"large-message-handle-option": "handle-key-only", "large-message-threshold": 500}
    ).encode([big])
    assert key[16:] == b'{"ts":9,"scm":"shop","tbl":"every_type","t":1,"ohk":true}'
    assert value[8:] == b'{"u":{"id":{"t":8,"h":true,"f":11,"v":1}}}'
    (event,) = decode("open", key, value)
    assert (event.after, event.flags) == ({"id": "1"}, ["handle_key_only"])

    options = {
        "large-message-handle-option": "claim-check",
        "large-message-threshold": 500,
        "claim-check-storage-uri": str(tmp_path),
    }
    ((key, value, _),) = OpenEncoder(options).encode([big])
    head = orjson.loads(key[16:])
    assert key[16:].startswith(b'{"ts":9,"scm":"shop","tbl":"every_type","t":1,"ohk":true,"ohk":false,"ccl":"')
    assert head["ccl"].startswith(str(tmp_path) + "/") and head["ccl"].endswith(".json")
    (event,) = decode("open", key, value)
    assert event.after == expected(big, options).after and event.flags[-1] == "claim_check"
    moved = tmp_path / "moved"
    moved.mkdir()
    (tmp_path / head["ccl"].rsplit("/", 1)[1]).rename(moved / head["ccl"].rsplit("/", 1)[1])
    (event,) = decode("open", key, value, {"claim-check-storage-uri": moved.as_uri()})
    assert event.after == expected(big, options).after


def test_too_large_without_large_message_handling_fails_like_ticdc():
    with pytest.raises(ValueError, match="ErrMessageTooLarge"):
        OpenEncoder({"large-message-threshold": 500}).encode([RowChange(9, "insert", EVERY_TYPE, after=MAX_ROW)])


def test_bootstrap_is_not_sent_and_ddl_loses_its_schema():
    assert OpenEncoder({}).encode([Bootstrap(EVERY_TYPE)]) == []
    assert expected(Bootstrap(EVERY_TYPE), {}) is None
    ddl = Ddl(101, "shop", "every_type", "CREATE TABLE every_type (id bigint)", "create_table", table_after=EVERY_TYPE)
    assert expected(ddl, {}).table_schema is None


def test_go_quote_and_unquote():
    assert go_quote(PNG_HEAD) == "\\x89PNG\\r\\n\\x1a\\n"
    assert go_quote('é\u00a0\u200b😀\x7f"\\'.encode()) == 'é\\u00a0\\u200b😀\\x7f\\"\\\\'
    assert go_quote(b"\xed\xa0\x80\xef\xbf\xbd") == "\\xed\\xa0\\x80\ufffd"
    for data in (EVERY_BYTE, bytes(reversed(EVERY_BYTE)), "日本😀".encode() + b"\xff\xfe", b""):
        assert go_unquote(go_quote(data)) == data
    assert go_unquote('\\101\\U0001F600\\u00e9\\a\\v\\f\\b\\"') == b'A\xf0\x9f\x98\x80\xc3\xa9\x07\x0b\x0c\x08"'
    for bad in ("\\", "\\q", "\\x4", "\\xzz", "\\ud800", "\\U00110000", "\\400", "\\12"):
        with pytest.raises(ValueError):
            go_unquote(bad)


def test_go_float_matches_jsoniter():
    assert [go_float(x, 64) for x in (153.123, 3.0, -0.0, 1e20, 1e21, 1e-6, 1e-7, 1.5e-7, 5e-324)] == [
        "153.123",
        "3",
        "-0",
        "100000000000000000000",
        "1e+21",
        "0.000001",
        "1e-7",
        "1.5e-7",
        "5e-324",
    ]
    assert [go_float(x, 32) for x in (1.1, 153.123, 16777217.0, 1e-7)] == ["1.1", "153.123", "16777216", "1e-7"]


def test_ddl_type_is_the_statements_whatever_the_action_type():
    def ddl(action, sql):
        (event,) = decode(
            "open", *message([b'{"ts":5,"scm":"d","tbl":"t","t":2}'], [orjson.dumps({"q": sql, "t": action})])
        )
        return event.ddl_type

    assert ddl(5, "ALTER TABLE t ADD c int") == "add_column"
    assert ddl(12, "ALTER TABLE t RENAME COLUMN a TO b") == "rename_column"
    assert ddl(12, "ALTER TABLE t MODIFY a bigint") == "modify_column"
    assert ddl(32, "ALTER TABLE t ADD PRIMARY KEY (a)") == "create_index"
    assert ddl(61, "ALTER TABLE t ADD c int, ADD d int") == "add_column"
    assert ddl(17, "ALTER TABLE t COMMENT 'x'") == "alter_table"
    assert ddl(1, "ALTER TABLE t ADD c int") == "add_column"
    (event,) = decode("open", *message([b'{"ts":5,"scm":"d","tbl":"","t":2}'], [b'{"q":"DROP DATABASE d","t":2}']))
    assert (event.database, event.table, event.ddl_type) == ("d", None, "drop_database")


def test_row_images_decode():
    key = b'{"ts":9,"scm":"s","tbl":"t","t":1}'
    col = b'{"t":3,"h":true,"f":11,"v":1}'
    (event,) = decode(
        "open", *message([key], [b'{"d":{"id":' + col + b',"n":{"t":8,"f":193,"v":18446744073709551615}}}'])
    )
    assert (event.op, event.before, event.after, event.key_columns) == (
        "delete",
        {"id": "1", "n": "18446744073709551615"},
        None,
        ["id"],
    )
    assert event.column_types == {"id": "int", "n": "bigint unsigned"}
    (event,) = decode(
        "open",
        *message([key], [b'{"u":{"id":{"t":3,"h":true,"v":2},"n":{"t":8,"f":128,"v":-1}},"p":{"id":' + col + b"}}"]),
    )
    assert (event.op, event.before, event.after) == (
        "update",
        {"id": "1", "n": "18446744073709551615"},
        {"id": "2", "n": "18446744073709551615"},
    )
    assert event.key_columns == ["id"]  # from `h` alone: the published examples carry no `f`
    assert event.flags == ["old_value_partial"]


# ---- (d) malformed input ------------------------------------------------------------------------

GOOD_KEY = b'{"ts":9,"scm":"s","tbl":"t","t":1}'
GOOD_VALUE = b'{"u":{"id":{"t":3,"h":true,"f":11,"v":1}}}'


def _bad_row(column: bytes) -> tuple[bytes, bytes]:
    return message([GOOD_KEY], [b'{"u":{"c":' + column + b"}}"])


MALFORMED = {
    "no key": ((None, frame(GOOD_VALUE)), "key"),
    "short key": ((b"\x00\x00\x01", b""), "key byte 0"),
    "bad version": (((2).to_bytes(8, "big") + frame(GOOD_KEY), frame(GOOD_VALUE)), "key byte 0"),
    "truncated key length": ((VERSION + b"\x00\x00\x00\x05", frame(GOOD_VALUE)), "key byte 8"),
    "key length past end": ((VERSION + (100).to_bytes(8, "big") + GOOD_KEY, frame(GOOD_VALUE)), "key byte 8"),
    "huge key length": ((VERSION + b"\xff" * 8 + GOOD_KEY, frame(GOOD_VALUE)), "key byte 8"),
    "value length past end": ((VERSION + frame(GOOD_KEY), (999).to_bytes(8, "big") + GOOD_VALUE), "value byte 0"),
    "truncated value length": ((VERSION + frame(GOOD_KEY), frame(GOOD_VALUE) + b"\x00\x01"), "value byte"),
    "missing value item": ((VERSION + frame(GOOD_KEY, GOOD_KEY), frame(GOOD_VALUE)), "value"),
    "extra value item": ((VERSION + frame(GOOD_KEY), frame(GOOD_VALUE, GOOD_VALUE)), "value"),
    "key not JSON": (message([b'{"ts":9,'], [GOOD_VALUE]), "key item 0"),
    "key not an object": (message([b"[1,2]"], [GOOD_VALUE]), "key item 0"),
    "unknown message type": (message([b'{"ts":9,"t":7}'], [b""]), "key item 0.t"),
    "string message type": (message([b'{"ts":9,"t":"1"}'], [GOOD_VALUE]), "key item 0.t"),
    "ts not a number": (message([b'{"ts":"9","scm":"s","tbl":"t","t":1}'], [GOOD_VALUE]), "key item 0.ts"),
    "negative ts": (message([b'{"ts":-1,"t":3}'], [b""]), "key item 0.ts"),
    "schema not a string": (message([b'{"ts":9,"scm":5,"tbl":"t","t":1}'], [GOOD_VALUE]), "key item 0.scm"),
    "value not JSON": (message([GOOD_KEY], [b"\xff\xfe"]), "value item 0"),
    "value not an object": (message([GOOD_KEY], [b'"u"']), "value item 0"),
    "row without images": (message([GOOD_KEY], [b'{"x":{}}']), "value item 0"),
    "image not an object": (message([GOOD_KEY], [b'{"u":[1]}']), "value item 0.u"),
    "column not an object": (_bad_row(b"5"), "value item 0.u.c"),
    "column without v": (_bad_row(b'{"t":3,"f":0}'), "value item 0.u.c"),
    "column without t": (_bad_row(b'{"f":0,"v":1}'), "value item 0.u.c"),
    "type code a string": (_bad_row(b'{"t":"int","v":1}'), "value item 0.u.c.t"),
    "unknown type code": (_bad_row(b'{"t":200,"v":1}'), "value item 0.u.c.t"),
    "flag a string": (_bad_row(b'{"t":3,"f":"x","v":1}'), "value item 0.u.c.f"),
    "int as a list": (_bad_row(b'{"t":3,"v":[1]}'), "value item 0.u.c.v"),
    "int as a bool": (_bad_row(b'{"t":3,"v":true}'), "value item 0.u.c.v"),
    "int as a float": (_bad_row(b'{"t":3,"v":1.5}'), "value item 0.u.c.v"),
    "bad base64 blob": (_bad_row(b'{"t":252,"f":1,"v":"@@@"}'), "value item 0.u.c.v"),
    "text not UTF-8": (_bad_row(b'{"t":252,"v":"/w=="}'), "value item 0.u.c.v"),
    "bad Go escape": (_bad_row(b'{"t":15,"f":1,"v":"\\\\q"}'), "value item 0.u.c.v"),
    "bad timestamp": (_bad_row(b'{"t":7,"v":"yesterday"}'), "value item 0.u.c.v"),
    "date as a number": (_bad_row(b'{"t":10,"v":20240101}'), "value item 0.u.c.v"),
    "non-null NULL type": (_bad_row(b'{"t":6,"v":1}'), "value item 0.u.c.v"),
    "bad old image column": (
        message([GOOD_KEY], [b'{"u":{"c":{"t":3,"v":1}},"p":{"c":{"t":3,"v":{}}}}']),
        "value item 0.p.c",
    ),
    "ddl query not a string": (message([b'{"ts":9,"scm":"s","tbl":"t","t":2}'], [b'{"q":1,"t":3}']), "value item 0.q"),
    "ddl type not a number": (
        message([b'{"ts":9,"scm":"s","tbl":"t","t":2}'], [b'{"q":"DROP TABLE t","t":"4"}']),
        "value item 0.t",
    ),
    "claim check not a string": (message([GOOD_KEY[:-1] + b',"ccl":5}'], [GOOD_VALUE]), "key item 0.ccl"),
    "claim check file missing": (
        message([GOOD_KEY[:-1] + b',"ccl":"/nonexistent/x.json"}'], [GOOD_VALUE]),
        "claimCheckLocation",
    ),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_input_raises_decode_error_naming_where(case):
    (key, value), where = MALFORMED[case]
    with pytest.raises(DecodeError) as caught:
        decode("open", key, value)
    assert caught.value.protocol == "open"
    assert caught.value.where is not None and caught.value.where.startswith(where), caught.value.where
    assert str(caught.value).startswith("open: ")


def test_bad_compression_raises_decode_error():
    key, value = message([GOOD_KEY], [b"not snappy at all"])
    for method in ("snappy", "lz4"):
        with pytest.raises(DecodeError) as caught:
            decode("open", key, value, {"large-message-handle-compression": method})
        assert caught.value.protocol == "open" and caught.value.where == "value item 0"
    key, value = message([GOOD_KEY], [compress(GOOD_VALUE, "lz4")])
    (event,) = decode("open", key, value, {"large-message-handle-compression": "lz4"})
    assert event.after == {"id": "1"}


def test_claim_check_file_with_bad_content(tmp_path):
    (tmp_path / "bad.json").write_bytes(b"{}")
    key, value = message([GOOD_KEY[:-1] + b',"ccl":"' + str(tmp_path / "bad.json").encode() + b'"}'], [GOOD_VALUE])
    with pytest.raises(DecodeError) as caught:
        decode("open", key, value)
    assert caught.value.protocol == "open"
    inner_key, inner_value = message(
        [GOOD_KEY[:-1] + b',"ccl":"' + str(tmp_path / "loop.json").encode() + b'"}'], [GOOD_VALUE]
    )
    (tmp_path / "loop.json").write_bytes(
        orjson.dumps({"key": base64.b64encode(inner_key).decode(), "value": base64.b64encode(inner_value).decode()})
    )
    with pytest.raises(DecodeError) as caught:
        decode("open", inner_key, inner_value)
    assert "another claim-check" in caught.value.reason


def test_bad_options_are_config_errors():
    with pytest.raises(ConfigError):
        make_decoder("open", {"large-message-handle-compression": "zstd"})
    with pytest.raises(ConfigError):
        make_decoder("open", {"time-zone": "Mars/Olympus"})
    with pytest.raises(ConfigError):
        make_decoder("open", {"max-batch-size": 3})


def test_corrupted_messages_only_ever_raise_decode_error():
    rng = random.Random(20240601)
    messages = encode_stream("open", workload(), partitions=1, options={"time-zone": "Asia/Kolkata"})
    decoder = make_decoder("open", {"time-zone": "Asia/Kolkata"})
    outcomes = {"decoded": 0, "rejected": 0}
    for _ in range(3000):
        m = rng.choice(messages)
        key, value = bytearray(m.key), bytearray(m.value)
        target = key if rng.random() < 0.3 else value
        if not target:
            continue
        action = rng.random()
        if action < 0.4:
            target[rng.randrange(len(target))] = rng.randrange(256)
        elif action < 0.7:
            del target[rng.randrange(len(target)) :]
        else:
            spot = rng.randrange(len(target))
            target[spot:spot] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 9)))
        try:
            decoder.decode(bytes(key), bytes(value))
            outcomes["decoded"] += 1
        except DecodeError as exc:
            assert exc.protocol == "open" and exc.where
            outcomes["rejected"] += 1
    assert outcomes["rejected"] > 1000 and outcomes["decoded"] > 0


@pytest.mark.parametrize(
    "zone", ["UTC", "Asia/Shanghai", "America/New_York", "Europe/London", "Australia/Lord_Howe", "+05:45"]
)
def test_fast_timestamp_conversion_equals_the_values_function(zone):
    from spark_jobs.canonical.values import text_timestamp_from_zone
    from spark_jobs.codecs.open_protocol import parse_time_zone

    rng = random.Random(zone)
    texts = [
        "2024-03-10 02:30:00",
        "2024-11-03 01:30:00.5",
        "2024-03-31 01:59:59.999999",
        "2024-10-27 01:00:00",
        "2024-04-07 01:45:00",
        "2024-10-06 01:59:00",
        "1970-01-01 00:00:00",
        "0000-00-00 00:00:00",
    ]
    for _ in range(3000):
        moment = dt.datetime(1971, 1, 1) + dt.timedelta(seconds=rng.randrange(2_000_000_000))
        fraction = rng.choice(["", ".1", ".123", ".123456"])
        texts.append(moment.strftime("%Y-%m-%d %H:%M:%S") + fraction)
    decoder = make_decoder("open", {"time-zone": zone})
    convert = decoder._plan[7 << 8][1]
    for text in texts:
        assert convert(text, 0) == text_timestamp_from_zone(text, parse_time_zone(zone)), text
