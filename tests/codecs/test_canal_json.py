"""Canal-JSON: the TiCDC reference vectors, byte-exact simulator output, round trips, bad input."""

from __future__ import annotations

import base64
import datetime as dt
import json
from decimal import Decimal

import orjson
import pytest

from spark_jobs.codecs import make_decoder
from spark_jobs.codecs.large_message import compress
from spark_jobs.errors import ConfigError, DecodeError
from tests.codecs.helpers import EVERY_BYTE, EVERY_TYPE, EVERY_TYPE_ROW, changefeed_decoder, decode, decode_partitions
from tests.reference_vectors import load_vector, vector_names
from ticdc_devkit.simulator.canal_json import CanalJsonEncoder, expected, go_string
from ticdc_devkit.simulator.model import (
    Bootstrap,
    Column,
    Ddl,
    RowChange,
    Table,
    Watermark,
    split_key_changing_updates,
)
from ticdc_devkit.simulator.stream import encode_stream

TSO = 1 << 18  # one physical millisecond in a TSO


def compact(text: str) -> bytes:
    """Go's json.Marshal bytes of a json.MarshalIndent document (same field order, no spaces)."""
    return json.dumps(json.loads(text), separators=(",", ":"), ensure_ascii=False).encode("utf-8")


# ---- (a) every reference vector ------------------------------------------------------------------

EMPLOYEE_TYPES = {
    "FirstName": "varchar",
    "HireDate": "date",
    "LastName": "varchar",
    "OfficeLocation": "varchar",
    "id": "int",
}


def test_all_canal_vectors_are_covered():
    assert vector_names("canal_json") == [
        "canal_json_01_employee_insert.json",
        "canal_json_02_employee_update.json",
        "canal_json_03_employee_delete.json",
        "canal_json_04_watermark_tidb_ext.json",
        "canal_json_05_ddl_create_tidb_ext.json",
        "canal_json_06_value_table_all_types.json",
        "canal_json_07_ddl_drop_database_doc.json",
        "canal_json_08_insert_int_types_doc.json",
        "canal_json_09_binary_iso8859_1_value.json",
    ]


def test_vector_01_insert_without_extension():
    v = load_vector("canal_json_01_employee_insert.json")
    [event] = [e.to_dict() for e in decode("canal-json", None, v["value_bytes"], v["decoder_config"])]
    assert event == {
        "kind": "row",
        "op": "insert",
        "database": "test",
        "table": "employee",
        "commit_ts": 1668067205238 << 18,
        "key_columns": ["id"],
        "before": None,
        "after": {
            "FirstName": "Bob",
            "HireDate": "2014-06-04",
            "LastName": "Smith",
            "OfficeLocation": "New York",
            "id": "101",
        },
        "column_types": EMPLOYEE_TYPES,
        "schema_version": None,
        "ddl_type": None,
        "ddl_sql": None,
        "table_schema": None,
        "flags": ["commit_ts_inferred"],
    }
    # the vector's partial expectation, mapped to canonical text (int 101 -> "101")
    assert {k: event["after"][k] for k in v["expected"]["data"]} == {
        k: str(x) for k, x in v["expected"]["data"].items()
    }


def test_vector_02_update_keeps_full_old_image():
    v = load_vector("canal_json_02_employee_update.json")
    [event] = decode("canal-json", None, v["value_bytes"], v["decoder_config"])
    assert (event.op, event.commit_ts, event.flags) == ("update", 1668067229137 << 18, ["commit_ts_inferred"])
    assert {k: event.after[k] for k in v["expected"]["data"]} == v["expected"]["data"]
    assert {k: event.before[k] for k in v["expected"]["old"]} == v["expected"]["old"]
    assert event.before == {
        "FirstName": "Bob",
        "HireDate": "2014-06-04",
        "LastName": "Smith",
        "OfficeLocation": "New York",
        "id": "101",
    }
    assert event.after["id"] == "101" and event.column_types == EMPLOYEE_TYPES


def test_vector_03_delete_row_is_in_data():
    v = load_vector("canal_json_03_employee_delete.json")
    [event] = decode("canal-json", None, v["value_bytes"], v["decoder_config"])
    assert (event.op, event.after, event.commit_ts) == ("delete", None, 1668067230388 << 18)
    assert {k: event.before[k] for k in v["expected"]["pre_image"]} == {"id": "101", "OfficeLocation": "Los Angeles"}
    assert event.before["HireDate"] == "2015-10-08"


def test_vectors_01_to_03_joined_by_newline_decode_as_one_batch():
    values = [load_vector(n)["value_bytes"] for n in vector_names("canal_json_0")[:3]]
    events = decode("canal-json", None, b"\n".join(values) + b"\n")
    assert [(e.op, e.commit_ts >> 18) for e in events] == [
        ("insert", 1668067205238),
        ("update", 1668067229137),
        ("delete", 1668067230388),
    ]
    assert events[1].after["OfficeLocation"] == "Los Angeles"


def test_vector_04_watermark():
    v = load_vector("canal_json_04_watermark_tidb_ext.json")
    assert [e.to_dict() for e in decode("canal-json", None, v["value_bytes"], v["decoder_config"])] == [
        {
            "kind": "watermark",
            "op": None,
            "database": None,
            "table": None,
            "commit_ts": v["expected"]["resolved_ts"],
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
    assert v["expected"]["resolved_ts"] == 1024


def test_vector_05_create_table_ddl():
    v = load_vector("canal_json_05_ddl_create_tidb_ext.json")
    [event] = decode("canal-json", None, v["value_bytes"], v["decoder_config"])
    exp = v["expected"]
    assert (event.kind, event.commit_ts, event.database, event.table, event.ddl_sql) == (
        "ddl",
        exp["commit_ts"],
        exp["schema"],
        exp["table"],
        exp["query"],
    )
    assert event.ddl_type == "create_table" and event.flags == [] and event.table_schema is None


def test_vector_07_drop_database_ddl():
    v = load_vector("canal_json_07_ddl_drop_database_doc.json")
    [event] = decode("canal-json", None, v["value_bytes"], v["decoder_config"])
    assert (event.kind, event.commit_ts, event.ddl_sql, event.ddl_type) == (
        "ddl",
        v["expected"]["commit_ts"],
        v["expected"]["query"],
        "drop_database",
    )
    assert (event.database, event.table) == ("test", None)


def test_vector_08_integer_maxima_with_extension():
    v = load_vector("canal_json_08_insert_int_types_doc.json")
    [event] = decode("canal-json", None, v["value_bytes"], v["decoder_config"])
    assert event.commit_ts == v["expected"]["commit_ts"] and event.flags == []
    assert event.after == {k: str(x) for k, x in v["expected"]["data"].items()}
    assert event.after["c_bigint"] == "9223372036854775807"
    assert event.column_types == {
        "c_bigint": "bigint",
        "c_int": "int",
        "c_mediumint": "mediumint",
        "c_smallint": "smallint",
        "c_tinyint": "tinyint",
        "id": "int",
    }


def test_vector_09_binary_is_iso_8859_1():
    v = load_vector("canal_json_09_binary_iso8859_1_value.json")
    content = v["content"]
    fragment = content["json_fragment"].replace('": "', '":"', 1)
    value = (
        '{"id":0,"database":"d","table":"t","pkNames":[],"isDdl":false,"type":"INSERT","es":1,"ts":1,'
        '"sql":"","sqlType":{"c_varbinary":2004},"mysqlType":{"c_varbinary":"varbinary"},"old":null,'
        '"data":[{' + fragment + "}]}"
    ).encode("utf-8")
    [event] = decode("canal-json", None, value)
    raw = bytes(content["expected_bytes_dec"])
    assert raw.hex() == content["expected_bytes_hex"]
    assert event.after == {"c_varbinary": base64.b64encode(raw).decode()}
    assert event.column_types == {"c_varbinary": "varbinary"}


# Vector 06 lists TiDB column types and flags; mysqlType is what TiCDC's GetMySQLType writes for them.
_TIDB_TYPE_NAMES = {
    "TypeTiny": "tinyint",
    "TypeShort": "smallint",
    "TypeInt24": "mediumint",
    "TypeLong": "int",
    "TypeLonglong": "bigint",
    "TypeFloat": "float",
    "TypeDouble": "double",
    "TypeNewDecimal": "decimal",
    "TypeVarchar": "varchar",
    "TypeString": "char",
    "TypeTinyBlob": "tinytext",
    "TypeBlob": "text",
    "TypeMediumBlob": "mediumtext",
    "TypeLongBlob": "longtext",
    "TypeDate": "date",
    "TypeDatetime": "datetime",
    "TypeTimestamp": "timestamp",
    "TypeDuration": "time",
    "TypeYear": "year",
    "TypeEnum": "enum",
    "TypeSet": "set",
    "TypeBit": "bit",
    "TypeJSON": "json",
}


def _vector_06_mysql_type(row: dict) -> str:
    name = _TIDB_TYPE_NAMES[row["tidb_type"]]
    binary = "BinaryFlag" in row["flags"] and row["go_value"].startswith("[]uint8")
    if binary:
        name = name.replace("text", "blob").replace("char", "binary")
    if "UnsignedFlag" in row["flags"]:
        name += " unsigned"
    return name


def _vector_06_message(rows: list[dict]) -> tuple[bytes, dict]:
    """A canal-json INSERT of the vector's row, the values written as TiCDC's encoder writes them,
    with the canonical text each column must decode to."""
    data, types, canonical = {}, {}, {}
    for row in rows:
        name, mysql_type = row["column"], _vector_06_mysql_type(row)
        types[name] = mysql_type
        if row["go_value"] == "nil":
            data[name] = canonical[name] = None
        elif "binary" in mysql_type or "blob" in mysql_type:
            # the vector's encoded string is a dummy for BinaryFlag []uint8 (says its source test);
            # TiCDC writes the bytes as ISO-8859-1 code points, the canonical text is their base64.
            raw = json.loads(row["expected_decoded"]).encode("utf-8")
            data[name] = raw.decode("latin-1")
            canonical[name] = base64.b64encode(raw).decode()
        else:
            data[name] = row["expected_encoded_canal_string"]
            canonical[name] = row["expected_encoded_canal_string"]
    message = {
        "id": 0,
        "database": "test",
        "table": "t",
        "pkNames": ["t"],
        "isDdl": False,
        "type": "INSERT",
        "es": 1,
        "ts": 1,
        "sql": "",
        "sqlType": None,
        "mysqlType": types,
        "old": None,
        "data": [data],
        "_tidb": {"commitTs": 7 * TSO},
    }
    return orjson.dumps(message), canonical


def test_vector_06_every_column_value():
    rows = load_vector("canal_json_06_value_table_all_types.json")["content"]
    value, canonical = _vector_06_message(rows)
    [event] = decode("canal-json", None, value, {"enable-tidb-extension": True})
    assert event.after == canonical
    # spot checks of the rendering rules the table states
    after = event.after
    assert (after["biu2"], after["floatT"], after["doubleT"], after["decimalT"]) == (
        "9223372036854775808",
        "3.14",
        "2.71",
        "2333",
    )
    assert (after["enumT"], after["setT"], after["bitT"], after["yearT"]) == ("1", "2", "65", "2020")
    assert after["binaryT"] == base64.b64encode("测试Binary".encode()).decode()
    assert after["varcharT"] == "测试Varchar" and after["jsonT"] == '{"key1": "value1"}'
    assert after["tu4"] is None and after["timestampT"] == "2020-02-20 10:20:20"
    assert sorted(event.flags) == ["enum_index", "types_partial"]
    assert event.column_types["biu1"] == "bigint unsigned" and event.column_types["longblobT"] == "longblob"


def test_vector_06_timestamp_is_converted_from_the_changefeed_zone():
    rows = load_vector("canal_json_06_value_table_all_types.json")["content"]
    value, _ = _vector_06_message(rows)
    [event] = decode("canal-json", None, value, {"enable-tidb-extension": True, "time-zone": "Asia/Shanghai"})
    assert event.after["timestampT"] == "2020-02-20 02:20:20"
    assert event.after["datetimeT"] == "2020-02-20 02:20:20"  # DATETIME has no zone


# ---- (b) the simulator writes the reference bytes ------------------------------------------------


def _encoder(build_ms: int | None = None, **options) -> CanalJsonEncoder:
    encoder = CanalJsonEncoder(options)
    if build_ms is not None:
        encoder.build_time_ms = lambda ts: build_ms
    return encoder


def test_simulator_writes_vector_04_watermark_bytes():
    v = load_vector("canal_json_04_watermark_tidb_ext.json")
    [(key, value, headers)] = _encoder(1469579899, **{"enable-tidb-extension": True}).encode([Watermark(1024)])
    assert key is None and headers is None
    assert value == compact(v["kafka_value"])
    assert _encoder(**{"enable-tidb-extension": False}).encode([Watermark(1024)]) == []


def test_simulator_writes_vector_05_ddl_bytes():
    v = load_vector("canal_json_05_ddl_create_tidb_ext.json")
    ddl = Ddl(
        commit_ts=417318403368288260,
        database="cdc",
        table="person",
        sql=v["expected"]["query"],
        ddl_type="create_table",
    )
    [(_, value, _)] = _encoder(1469579899, **{"enable-tidb-extension": True}).encode([ddl])
    assert value == compact(v["kafka_value"])


def test_simulator_writes_vector_07_ddl_layout():
    v = load_vector("canal_json_07_ddl_drop_database_doc.json")
    ddl = Ddl(
        commit_ts=429918007904436226, database="test", table=None, sql=v["expected"]["query"], ddl_type="drop_database"
    )
    [(_, value, _)] = _encoder(1639633095489, **{"enable-tidb-extension": True}).encode([ddl])
    reference = json.loads(v["kafka_value"])
    reference["es"] = 429918007904436226 >> 18  # the docs reuse one TSO; TiCDC writes commitTs >> 18
    assert value == json.dumps(reference, separators=(",", ":")).encode()


EMPLOYEE = Table(
    "test",
    "employee",
    (
        Column("FirstName", "varchar(64)"),
        Column("HireDate", "date"),
        Column("LastName", "varchar(64)"),
        Column("OfficeLocation", "varchar(64)"),
        Column("id", "int", nullable=False),
    ),
    key=("id",),
)


def _employee(first="Bob", hired=dt.date(2014, 6, 4), office="New York"):
    return {"FirstName": first, "HireDate": hired, "LastName": "Smith", "OfficeLocation": office, "id": 101}


def _tidb_row_layout(text: str, build_ms: int) -> bytes:
    """The reference message in the field layout of TiCDC's row encoder: `old` before `data`."""
    doc = json.loads(text)
    doc["ts"] = build_ms
    data = doc.pop("data")
    old = doc.pop("old")
    tidb = doc.pop("_tidb", None)
    doc["old"], doc["data"] = old, data
    if tidb is not None:
        doc["_tidb"] = tidb
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


@pytest.mark.parametrize(
    "name,change",
    [
        ("canal_json_01_employee_insert.json", RowChange(1668067205238 << 18, "insert", EMPLOYEE, after=_employee())),
        (
            "canal_json_02_employee_update.json",
            RowChange(
                1668067229137 << 18,
                "update",
                EMPLOYEE,
                before=_employee(),
                after=_employee(hired=dt.date(2015, 10, 8), office="Los Angeles"),
            ),
        ),
        (
            "canal_json_03_employee_delete.json",
            RowChange(
                1668067230388 << 18,
                "delete",
                EMPLOYEE,
                before=_employee(hired=dt.date(2015, 10, 8), office="Los Angeles"),
            ),
        ),
    ],
)
def test_simulator_writes_vector_row_bytes(name, change):
    v = load_vector(name)
    build_ms = json.loads(v["kafka_value"])["ts"]
    [(key, value, _)] = _encoder(build_ms).encode([change])
    assert key is None
    assert value == _tidb_row_layout(v["kafka_value"], build_ms)
    assert value.index(b'"old":') < value.index(b'"data":')
    [event] = decode("canal-json", None, value)
    assert event.to_dict() == expected(change, {}).to_dict()


def test_simulator_writes_vector_08_row_with_extension():
    v = load_vector("canal_json_08_insert_int_types_doc.json")
    doc = json.loads(v["kafka_value"])
    table = Table("test", "tp_int", tuple(Column(n, t) for n, t in doc["mysqlType"].items()), key=("id",))
    row = {k: int(x) for k, x in doc["data"][0].items()}
    change = RowChange(429918007904436226, "insert", table, after=row)
    [(_, value, _)] = _encoder(doc["ts"], **{"enable-tidb-extension": True}).encode([change])
    doc["es"] = 429918007904436226 >> 18  # the docs reuse one TSO; TiCDC writes commitTs >> 18
    assert value == _tidb_row_layout(json.dumps(doc), doc["ts"])
    assert b'"sqlType":{"c_bigint":-5,"c_int":4,"c_mediumint":4,"c_smallint":5,"c_tinyint":-6,"id":4}' in value


def test_simulator_writes_vector_09_binary_fragment():
    v = load_vector("canal_json_09_binary_iso8859_1_value.json")
    table = Table("test", "t", (Column("id", "int"), Column("c_varbinary", "varbinary(16)")), key=("id",))
    change = RowChange(
        5 * TSO, "insert", table, after={"id": 1, "c_varbinary": bytes(v["content"]["expected_bytes_dec"])}
    )
    [(_, value, _)] = _encoder().encode([change])
    fragment = v["content"]["json_fragment"].replace('": "', '":"', 1)
    assert fragment.encode("utf-8") in value
    assert b'"sqlType":{"id":4,"c_varbinary":2004}' in value


def test_go_string_escaping():
    assert (
        go_string('a<b>&"\\\n\r\t\x00\x1f\x7f\u2028é')
        == '"a\\u003cb\\u003e\\u0026\\"\\\\\\n\\r\\t\\u0000\\u001f\x7f\\u2028é"'
    )


# ---- (c) round trip through the simulator --------------------------------------------------------

NULL_ROW = {c.name: None for c in EVERY_TYPE.columns} | {"id": 2}
SMALL_ROW = {
    "id": 3,
    "ti": 0,
    "tiu": 0,
    "f": 3.4028234663852886e38,
    "d": 1e-300,
    "dec": Decimal("0.000001"),
    "dec0": Decimal("0"),
    "yr": 0,
    "vc": "",
    "vb": b"",
    "b": 0,
    "en": "a",
    "st": (),
    "tm": dt.timedelta(0),
    "ts": dt.datetime(1970, 1, 1, 0, 0, 1),
    "dtm": dt.datetime(1000, 1, 1),
}


def _stream() -> list:
    full = EVERY_TYPE_ROW
    changed = full | {
        "vc": "changed",
        "f": -2.5,
        "ts": dt.datetime(2038, 1, 19, 3, 14, 7, 999000),
        "en": "c",
        "bl": None,
    }
    return [
        Bootstrap(EVERY_TYPE),
        Ddl(
            100 * TSO + 1,
            "shop",
            "all_types",
            "CREATE TABLE all_types (id bigint unsigned primary key)",
            "create_table",
            table_after=EVERY_TYPE,
        ),
        RowChange(200 * TSO + 5, "insert", EVERY_TYPE, after=full),
        RowChange(200 * TSO + 5, "insert", EVERY_TYPE, after=NULL_ROW),
        RowChange(201 * TSO + 7, "insert", EVERY_TYPE, after=SMALL_ROW),
        Watermark(202 * TSO),
        RowChange(300 * TSO + 3, "update", EVERY_TYPE, before=full, after=changed),
        RowChange(301 * TSO, "update", EVERY_TYPE, before=NULL_ROW, after=NULL_ROW | {"tx": "now set"}),
        RowChange(302 * TSO + 9, "update", EVERY_TYPE, before=SMALL_ROW, after=SMALL_ROW | {"id": 4}),
        Ddl(400 * TSO, "shop", "all_types", "ALTER TABLE all_types ADD COLUMN extra int", "add_column"),
        RowChange(500 * TSO + 2, "delete", EVERY_TYPE, before=changed),
        Ddl(600 * TSO, "shop", None, "DROP DATABASE shop", "drop_database"),
        Watermark(700 * TSO),
    ]


OPTION_SETS = {
    "plain": {"time-zone": "America/New_York"},
    "extension": {"enable-tidb-extension": True, "time-zone": "Asia/Kolkata"},
    "content-compatible": {"enable-tidb-extension": True, "content-compatible": True, "time-zone": "Asia/Shanghai"},
    "only-updated": {"only-output-updated-columns": True, "time-zone": "Europe/Berlin"},
    "delete-keys-only": {"enable-tidb-extension": True, "delete-only-output-handle-key-columns": True},
    "snappy": {"enable-tidb-extension": True, "large-message-handle-compression": "snappy", "time-zone": "Asia/Tokyo"},
    "lz4-content-compatible": {
        "content-compatible": True,
        "large-message-handle-compression": "lz4",
        "time-zone": "America/New_York",
    },
    "handle-key-only": {
        "enable-tidb-extension": True,
        "large-message-handle-option": "handle-key-only",
        "large-message-threshold": 1500,
        "time-zone": "Asia/Kolkata",
    },
    "claim-check": {
        "enable-tidb-extension": True,
        "large-message-handle-option": "claim-check",
        "large-message-threshold": 1500,
        "large-message-handle-compression": "lz4",
        "time-zone": "Asia/Kolkata",
    },
    "claim-check-raw": {
        "enable-tidb-extension": True,
        "large-message-handle-option": "claim-check",
        "large-message-threshold": 1500,
        "claim-check-raw-value": True,
        "only-output-updated-columns": True,
        "time-zone": "UTC",
    },
}


@pytest.mark.parametrize("name", sorted(OPTION_SETS))
def test_round_trip(name, tmp_path):
    options = dict(OPTION_SETS[name])
    if "claim-check" in name:
        options["claim-check-storage-uri"] = ("file://" if name == "claim-check" else "") + str(tmp_path / "cc")
    events = _stream()
    messages = encode_stream("canal-json", events, options=options)
    [got] = decode_partitions("canal-json", messages, options).values()
    want = [x.to_dict() for x in (expected(e, options) for e in split_key_changing_updates(events)) if x is not None]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g == w
    flags = [set(e["flags"]) for e in got]
    if "handle-key-only" in name:
        assert {"handle_key_only"} <= flags[1] and "handle_key_only" not in flags[2]
        assert got[1]["after"] == {"id": "18446744073709551615"}
    if name == "delete-keys-only":  # a delete carries its key alone, unmarked; every other row whole
        deletes = [e for e in got if e["op"] == "delete"]
        assert deletes and all(set(e["before"]) == set(e["key_columns"]) for e in deletes)
        assert all(len(e["after"]) > len(e["key_columns"]) for e in got if e["op"] == "insert")
    if "claim-check" in name:
        assert "claim_check" in flags[1] and "claim_check" not in flags[2]
        assert len(list((tmp_path / "cc").iterdir())) == sum("claim_check" in f for f in flags) >= 2
        assert got[1]["after"]["vb"] == base64.b64encode(EVERY_BYTE).decode()


def test_round_trip_values_are_canonical():
    """Spot checks of what `expected` says, so a shared mistake in encoder and oracle still fails."""
    options = OPTION_SETS["content-compatible"]
    messages = encode_stream("canal-json", _stream(), options=options)
    decoder = changefeed_decoder("canal-json", options)
    events = [e for m in messages for e in decoder.decode(m.key, m.value)]
    full = events[1].after
    assert full["biu"] == "18446744073709551615" and full["bi"] == "-9223372036854775808"
    assert full["dec"] == "-12345678901234.123456" and full["f"] == "1.1" and full["d"] == "3.141592653589793"
    assert full["ts"] == "2024-07-01 03:30:00.123" and full["dtm"] == "2024-02-29 23:59:59.123456"
    assert full["tm"] == "-838:59:59.99" and full["yr"] == "1901" and full["b"] == "18446744073709551615"
    assert full["en"] == "b's" and full["st"] == "x,z" and full["bn"] == "AAH+/w=="
    assert events[1].column_types["dec"] == "decimal(20,6)" and events[1].flags == []
    small = events[3].after
    assert (small["yr"], small["vc"], small["vb"], small["f"], small["d"]) == (
        "0000",
        "",
        "",
        "3.4028235e+38",
        "1e-300",
    )
    assert (small["st"], small["dec0"], small["tm"]) == ("", "0", "00:00:00.00")
    update = events[5]
    assert update.before["vc"] == full["vc"] and update.after["vc"] == "changed" and update.after["bl"] is None
    assert sorted(update.flags) == ["old_value_partial"]


def test_plain_options_lose_what_the_docstring_says():
    options = OPTION_SETS["plain"]
    messages = encode_stream("canal-json", _stream(), options=options)
    decoder = changefeed_decoder("canal-json", options)
    events = [e for m in messages for e in decoder.decode(m.key, m.value)]
    assert [e.kind for e in events] == ["ddl"] + ["row"] * 7 + ["ddl", "row", "ddl"]
    insert = events[1]
    assert insert.commit_ts == 200 * TSO and sorted(insert.flags) == [
        "commit_ts_inferred",
        "enum_index",
        "types_partial",
    ]
    assert insert.after["en"] == "2" and insert.after["st"] == "5" and insert.column_types["dec"] == "decimal"
    assert insert.after["ts"] == "2024-07-01 03:30:00.123"
    assert events[0].table_schema is None and events[-1].table is None


def test_composite_key_is_in_column_order():
    table = Table("d", "t", (Column("a", "int"), Column("b", "varchar(4)"), Column("v", "int")), key=("b", "a"))
    change = RowChange(9 * TSO, "insert", table, after={"a": 1, "b": "x", "v": None})
    [(_, value, _)] = CanalJsonEncoder({}).encode([change])
    [event] = decode("canal-json", None, value)
    assert event.key_columns == ["a", "b"] == expected(change, {}).key_columns


# ---- (d) malformed input -------------------------------------------------------------------------

ROW = {
    "id": 0,
    "database": "d",
    "table": "t",
    "pkNames": ["id"],
    "isDdl": False,
    "type": "INSERT",
    "es": 1,
    "ts": 1,
    "sql": "",
    "sqlType": {"id": 4},
    "mysqlType": {"id": "int", "e": "enum", "b": "varbinary"},
    "old": None,
    "data": [{"id": "1", "e": "1", "b": "x"}],
    "_tidb": {"commitTs": 5},
}


def _row(**changes) -> bytes:
    doc = json.loads(json.dumps(ROW))
    for path, value in changes.items():
        target = doc
        *parents, last = path.split("__")
        for p in parents:
            target = target[int(p)] if isinstance(target, list) else target[p]
        if value is KeyError:
            del target[last]
        else:
            target[last] = value
    return orjson.dumps(doc)


@pytest.mark.parametrize(
    "value,where",
    [
        (b"", "value"),
        (b"not json", "value"),
        (_row()[:-7], "value"),
        (b"[1, 2]", "value"),
        (_row(isDdl=KeyError), "isDdl"),
        (_row(isDdl="false"), "isDdl"),
        (_row(type=3), "type"),
        (_row(type="UPSERT"), "type"),
        (_row(database=None), "database"),
        (_row(data=None), "data"),
        (_row(data=[]), "data"),
        (_row(data=["row"]), "data[0]"),
        (_row(type="UPDATE"), "old"),
        (_row(mysqlType=["int"]), "mysqlType"),
        (_row(mysqlType__id=11), "mysqlType.id"),
        (_row(mysqlType__id="geometry"), "mysqlType.id"),
        (_row(data__0__zz="1"), "data[0].zz"),
        (_row(data__0__id="12a"), "data[0].id"),
        (_row(data__0__id=12), "data[0].id"),
        (_row(data__0__id=""), "data[0].id"),
        (_row(data__0__b="日本"), "data[0].b"),
        (_row(pkNames="id"), "pkNames"),
        (_row(_tidb__commitTs="5"), "_tidb.commitTs"),
        (_row(_tidb=KeyError, es="1"), "es"),
        (_row(_tidb=[1]), "_tidb"),
        (_row(_tidb__claimCheckLocation=7), "_tidb.claimCheckLocation"),
        (_row(_tidb__claimCheckLocation="/nonexistent/canal/x.json"), "claimCheckLocation"),
        (_row(isDdl=True, sql=""), "sql"),
        (_row(type="TIDB_WATERMARK", _tidb={"watermarkTs": -1}), "_tidb.watermarkTs"),
        (_row(type="TIDB_WATERMARK", _tidb=KeyError), "_tidb.watermarkTs"),
    ],
)
def test_malformed_messages_raise_decode_error(value, where):
    with pytest.raises(DecodeError) as info:
        decode("canal-json", None, value)
    assert str(info.value).startswith("canal-json: ")
    assert info.value.protocol == "canal-json"
    assert where in (info.value.where or "")


def test_enum_index_beyond_definition_with_content_compatible():
    with pytest.raises(DecodeError, match=r"canal-json: .*ENUM index 2.*\(at data\[0\]\.e\)"):
        decode("canal-json", None, _row(data__0__e="2", mysqlType__e="enum('a')"), {"content-compatible": True})
    assert decode("canal-json", None, _row(data__0__e="2"))[0].after["e"] == "2"


@pytest.mark.parametrize("method", ["snappy", "lz4"])
def test_bad_compression_raises_decode_error(method):
    with pytest.raises(DecodeError, match=f"canal-json: corrupt {method}"):
        decode("canal-json", None, b"\x00garbage, not compressed\xff", {"large-message-handle-compression": method})
    [event] = decode("canal-json", None, compress(_row(), method), {"large-message-handle-compression": method})
    assert event.after == {"id": "1", "e": "1", "b": "eA=="}


def test_claim_check_file_without_a_message(tmp_path):
    location = tmp_path / "x.json"
    location.write_bytes(b"{}")
    with pytest.raises(DecodeError, match="claimCheckLocation"):
        decode("canal-json", None, _row(_tidb__claimCheckLocation=str(location)))
    location.write_bytes(b'{"key": null, "value": "bm90IGpzb24="}')
    with pytest.raises(DecodeError, match="holds no JSON message"):
        decode("canal-json", None, _row(_tidb__claimCheckLocation=str(location)))


def test_bad_options_are_config_errors():
    with pytest.raises(ConfigError, match="large-message-handle-compression"):
        make_decoder("canal-json", {"large-message-handle-compression": "zstd"})
    with pytest.raises(ConfigError, match="time-zone"):
        make_decoder("canal-json", {"time-zone": "Mars/Olympus"})
    with pytest.raises(ConfigError, match="unknown option"):
        make_decoder("canal-json", {"enable-old-value": True})
