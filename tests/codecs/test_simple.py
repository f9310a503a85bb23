"""TiCDC Simple protocol (simple-json, simple-avro): reference vectors, simulator round trips, errors."""

from __future__ import annotations

import datetime as dt
import io
import json
import random
import struct
from dataclasses import replace
from decimal import Decimal

import fastavro
import orjson
import pytest

from spark_jobs.canonical import values as V
from spark_jobs.codecs import make_decoder
from spark_jobs.codecs import simple as codec
from spark_jobs.codecs.large_message import compress
from spark_jobs.errors import DecodeError, SchemaNotYetKnown
from tests.codecs.helpers import EVERY_BYTE, decode_partitions, integer_limits
from tests.reference_vectors import load_vector, vector_names
from ticdc_devkit.simulator import simple as sim
from ticdc_devkit.simulator.model import Bootstrap, Column, Ddl, RowChange, Table, Watermark
from ticdc_devkit.simulator.stream import encode_stream, partition_events

# ---- the documentation's `simple.user` table, as the reference vectors use it -------------------------

V_OLD = 447984074911121426
V_NEW = 447987408682614791
USER_COLUMNS = (
    Column("id", "int", nullable=False),
    Column("name", "varchar(255)"),
    Column("age", "int"),
    Column("score", "float"),
)
USER = Table("simple", "user", USER_COLUMNS, ("id",), table_id=148, schema_version=V_OLD)
USER_V2 = replace(USER, columns=USER_COLUMNS + (Column("createTime", "timestamp"),), schema_version=V_NEW)
ROW = {"id": 1, "name": "John Doe", "age": 25, "score": 90.5}
ROW_95 = {**ROW, "score": 95.0}

# vector name -> the logical event it documents
VECTOR_EVENTS = {
    "simple_01_ddl.json": Ddl(
        447987408682614795,
        "simple",
        "user",
        "ALTER TABLE `user` ADD COLUMN `createTime` TIMESTAMP",
        "add_column",
        USER_V2,
        USER,
    ),
    "simple_02_bootstrap.json": Bootstrap(replace(USER, name="new_user")),
    "simple_03_insert.json": RowChange(447984084414103554, "insert", USER, None, ROW),
    "simple_04_update.json": RowChange(447984099186180098, "update", USER, ROW, ROW_95),
    "simple_05_delete.json": RowChange(447984114259722243, "delete", USER, ROW_95, None),
    "simple_06_watermark.json": Watermark(447984124732375041),
}
# The documented order: schemas (bootstrap, DDL) first, so that rows find theirs in the cache.
VECTOR_ORDER = [
    "simple_02_bootstrap.json",
    "simple_01_ddl.json",
    "simple_03_insert.json",
    "simple_04_update.json",
    "simple_05_delete.json",
    "simple_06_watermark.json",
]


def _dicts(events):
    return [e.to_dict() for e in events]


def test_every_simple_vector_is_covered():
    assert vector_names("simple_") == sorted([*VECTOR_ORDER, "simple_07_avro_schema_message_json.json"])


def test_reference_vectors_decode_to_expected():
    decoder = make_decoder("simple-json")
    for name in VECTOR_ORDER:
        vector = load_vector(name)
        events = decoder.decode(vector["key_bytes"], vector["value_bytes"])
        want = sim.expected(VECTOR_EVENTS[name], {}, "json")
        assert _dicts(events) == [want.to_dict()], name


def test_reference_vectors_partial_expectations():
    """The vectors' own `expected`, mapped explicitly to canonical text."""
    decoder = make_decoder("simple-json")
    got = {}
    for name in VECTOR_ORDER:
        vector = load_vector(name)
        [got[name]] = decoder.decode(vector["key_bytes"], vector["value_bytes"])
    ddl = got["simple_01_ddl.json"]
    exp = load_vector("simple_01_ddl.json")["expected"]
    assert (ddl.kind, ddl.commit_ts, ddl.schema_version) == ("ddl", exp["commit_ts"], exp["new_schema_version"])
    assert ddl.ddl_type == "add_column" and ddl.database == "simple" and ddl.table == "user"
    assert [c["name"] for c in ddl.table_schema["columns"]][-1] == "createTime"
    assert ddl.table_schema["columns"][-1]["type"] == "timestamp"
    assert decoder._schemas.keys() >= {
        ("simple", "user", exp["old_schema_version"]),
        ("simple", "user", exp["new_schema_version"]),
    }
    boot = got["simple_02_bootstrap.json"]
    assert (boot.kind, boot.schema_version, boot.table) == (
        "bootstrap",
        load_vector("simple_02_bootstrap.json")["expected"]["schema_version"],
        "new_user",
    )
    insert = got["simple_03_insert.json"]
    exp = load_vector("simple_03_insert.json")["expected"]
    assert insert.commit_ts == exp["commit_ts"]
    assert insert.after == {"id": "1", "name": "John Doe", "age": "25", "score": "90.5"}
    assert insert.after == {k: V.canonical_value(USER.column(k).type, v) for k, v in exp["data"].items()}
    assert insert.column_types == {"id": "int", "name": "varchar", "age": "int", "score": "float"}
    assert insert.key_columns == ["id"] and insert.schema_version == V_OLD
    update = got["simple_04_update.json"]
    assert update.commit_ts == load_vector("simple_04_update.json")["expected"]["commit_ts"]
    assert (update.before["score"], update.after["score"]) == ("90.5", "95.0")
    delete = got["simple_05_delete.json"]
    assert delete.commit_ts == load_vector("simple_05_delete.json")["expected"]["commit_ts"]
    assert delete.after is None and delete.before["score"] == "95.0"
    mark = got["simple_06_watermark.json"]
    assert (mark.kind, mark.commit_ts) == (
        "watermark",
        load_vector("simple_06_watermark.json")["expected"]["resolved_ts"],
    )


def test_avro_schema_is_the_reference_one():
    reference = json.loads(load_vector("simple_07_avro_schema_message_json.json")["content"])
    assert json.loads(codec.MESSAGE_SCHEMA_PATH.read_text()) == reference
    assert reference[-1]["name"] == "Message" and codec.message_schema()["name"] == codec.MESSAGE_RECORD


@pytest.mark.parametrize("name", sorted(VECTOR_EVENTS))
def test_simulator_reproduces_reference_json(name):
    want = json.loads(load_vector(name)["kafka_value"])
    got = orjson.loads(sim.SimpleJsonEncoder({}).encode_event(VECTOR_EVENTS[name]))
    want.pop("buildTs")
    got.pop("buildTs")
    assert got == want
    assert list(got) == list(want)  # field order as TiCDC writes it


@pytest.mark.parametrize("name", sorted(VECTOR_EVENTS))
def test_vector_events_round_trip_in_avro(name):
    decoder = make_decoder("simple-avro")
    encoder = sim.SimpleAvroEncoder({})
    for schema_event in (VECTOR_EVENTS["simple_01_ddl.json"],):
        decoder.decode(None, encoder.encode_event(schema_event))
    event = VECTOR_EVENTS[name]
    assert _dicts(decoder.decode(None, encoder.encode_event(event))) == [sim.expected(event, {}, "avro").to_dict()]


# ---- every MySQL type, through encode_stream, both encodings ------------------------------------------

ALL_COLUMNS = (
    Column("id", "int", nullable=False),
    Column("c_tinyint", "tinyint"),
    Column("c_tinyint_u", "tinyint unsigned"),
    Column("c_smallint", "smallint"),
    Column("c_smallint_u", "smallint unsigned"),
    Column("c_mediumint", "mediumint"),
    Column("c_mediumint_u", "mediumint unsigned"),
    Column("c_int", "int(11)"),
    Column("c_int_u", "int unsigned"),
    Column("c_bigint", "bigint"),
    Column("c_bigint_u", "bigint unsigned"),
    Column("c_decimal", "decimal(10,4)"),
    Column("c_float", "float"),
    Column("c_double", "double"),
    Column("c_bit", "bit(10)"),
    Column("c_bit64", "bit(64)"),
    Column("c_date", "date"),
    Column("c_datetime", "datetime(6)"),
    Column("c_timestamp", "timestamp(3)"),
    Column("c_time", "time"),
    Column("c_time3", "time(3)"),
    Column("c_year", "year"),
    Column("c_char", "char(10)"),
    Column("c_varchar", "varchar(64)"),
    Column("c_text", "text"),
    Column("c_binary", "binary(4)"),
    Column("c_varbinary", "varbinary(300)"),
    Column("c_blob", "blob"),
    Column("c_enum", "enum('a','b','it''s')"),
    Column("c_set", "set('x','y','z')"),
    Column("c_json", "json"),
)
ALL_V1 = Table("test", "all_types", ALL_COLUMNS, ("id",), table_id=201, schema_version=400000000000000001)
ALL_V2 = replace(ALL_V1, columns=ALL_COLUMNS + (Column("c_added", "varchar(20)"),), schema_version=400000000000001000)

FULL_ROW = {
    "id": 1,
    **integer_limits(ALL_COLUMNS[1:11], signed="min", unsigned="max"),  # the ten integer columns
    "c_decimal": Decimal("-123456.7890"),
    "c_float": 1.1,
    "c_double": 3.141592653589793,
    "c_bit": 1023,
    "c_bit64": (1 << 64) - 1,
    "c_date": dt.date(2024, 2, 29),
    "c_datetime": dt.datetime(2024, 2, 29, 23, 59, 58, 123456),
    "c_timestamp": dt.datetime(2023, 11, 5, 6, 30, 15, 250000),  # 01:30 EST, the second 01:30 in New York
    "c_time": -dt.timedelta(hours=838, minutes=59, seconds=59),
    "c_time3": dt.timedelta(seconds=-0.5),
    "c_year": 2155,
    "c_char": "héllo 世界",
    "c_varchar": 'a<b>&c \u2028 "quoted" 🙂',
    "c_text": "line\nbreak",
    "c_binary": b"\x00\xff\x10\x80",
    "c_varbinary": EVERY_BYTE,
    "c_blob": EVERY_BYTE[::-1],
    "c_enum": "it's",
    "c_set": ("x", "z"),
    "c_json": '{"k": [1, 2.5, "v"], "n": null}',
}
NULL_ROW = {"id": 2, **{c.name: None for c in ALL_COLUMNS[1:]}}
SMALL_ROW = {
    **NULL_ROW,
    "id": 3,
    "c_int": 7,
    "c_enum": "",
    "c_set": (),
    "c_float": 0.0,
    "c_double": -0.0,
    "c_decimal": Decimal("0"),
    "c_bit": 0,
    "c_time": dt.timedelta(0),
    "c_year": 1901,
    "c_timestamp": dt.datetime(1970, 1, 1, 0, 0, 1),
    "c_datetime": dt.datetime(1000, 1, 1),
}


def _all_types_stream() -> list:
    updated = {
        **FULL_ROW,
        "c_float": -3.4e38,
        "c_double": 5e-324,
        "c_enum": "a",
        "c_set": ("x", "y", "z"),
        "c_bigint_u": 9223372036854775808,
        "c_time3": dt.timedelta(hours=-1, milliseconds=-5),
    }
    ts = 400000000000000100
    events = [
        Bootstrap(ALL_V1),
        RowChange(ts + 1, "insert", ALL_V1, None, FULL_ROW),
        RowChange(ts + 2, "insert", ALL_V1, None, NULL_ROW),
        Watermark(ts + 3),
        RowChange(ts + 4, "update", ALL_V1, FULL_ROW, updated),
        RowChange(ts + 5, "update", ALL_V1, NULL_ROW, {**NULL_ROW, "id": 4}),  # key change: delete + insert
        Ddl(
            ALL_V2.schema_version,
            "test",
            "all_types",
            "ALTER TABLE `all_types` ADD COLUMN `c_added` VARCHAR(20)",
            "add_column",
            ALL_V2,
            ALL_V1,
        ),
        RowChange(ALL_V2.schema_version + 1, "insert", ALL_V2, None, {**SMALL_ROW, "c_added": "new"}),
        RowChange(ALL_V2.schema_version + 2, "delete", ALL_V2, {**updated, "c_added": None}, None),
        Watermark(ALL_V2.schema_version + 3),
    ]
    return events


def _run(protocol: str, options: dict, events: list, partitions: int = 2):
    """Encode the stream, decode each partition with its own decoder; (decoded, expected) per partition."""
    encoding = protocol.split("-")[1]
    messages = encode_stream(protocol, events, partitions=partitions, options=options)
    got = decode_partitions(protocol, messages, options)
    per = partition_events(events, partitions, ddl_to_all=True)
    want = {p: [sim.expected(e, options, encoding).to_dict() for e in per[p]] for p in range(partitions)}
    return got, want, messages


OPTION_CASES = {
    "plain": {},
    "shanghai": {"time-zone": "Asia/Shanghai"},
    "new-york-dst": {"time-zone": "America/New_York"},
    "snappy": {"large-message-handle-compression": "snappy"},
    "lz4": {"large-message-handle-compression": "lz4", "time-zone": "Europe/Berlin"},
    "claim-check": {"large-message-handle-option": "claim-check", "large-message-threshold": 600},
    "claim-check-raw-snappy": {
        "large-message-handle-option": "claim-check",
        "large-message-threshold": 600,
        "claim-check-raw-value": True,
        "large-message-handle-compression": "snappy",
    },
    "handle-key-only": {"large-message-handle-option": "handle-key-only", "large-message-threshold": 600},
    "handle-key-only-lz4": {
        "large-message-handle-option": "handle-key-only",
        "large-message-threshold": 400,
        "large-message-handle-compression": "lz4",
    },
}


@pytest.mark.parametrize("protocol", ["simple-json", "simple-avro"])
@pytest.mark.parametrize("case", sorted(OPTION_CASES))
def test_all_types_round_trip(protocol, case, tmp_path):
    options = dict(OPTION_CASES[case])
    if options.get("large-message-handle-option") == "claim-check":
        options["claim-check-storage-uri"] = (
            (tmp_path / "claims").as_uri() if "raw" in case else str(tmp_path / "claims")
        )
    got, want, _ = _run(protocol, options, _all_types_stream())
    assert got == want
    flags = {f for events in got.values() for e in events for f in e["flags"]}
    large = options.get("large-message-handle-option")
    assert flags == ({"claim_check"} if large == "claim-check" else {"handle_key_only"} if large else set())
    if large == "claim-check":
        assert any((tmp_path / "claims").iterdir())


def test_round_trip_exact_texts():
    """Spot checks of the canonical text, so a wrong `expected` cannot hide a wrong decoder."""
    got, _, _ = _run("simple-json", {"time-zone": "America/New_York"}, _all_types_stream(), partitions=1)
    rows = [e for e in got[0] if e["kind"] == "row"]
    full = rows[0]["after"]
    assert full["c_bigint_u"] == "18446744073709551615" and full["c_bigint"] == "-9223372036854775808"
    assert full["c_decimal"] == "-123456.7890" and full["c_float"] == "1.1" and full["c_double"] == "3.141592653589793"
    assert full["c_bit"] == "1023" and full["c_bit64"] == "18446744073709551615"
    assert full["c_datetime"] == "2024-02-29 23:59:58.123456" and full["c_date"] == "2024-02-29"
    assert full["c_timestamp"] == "2023-11-05 05:30:15.250"  # the repeated local hour decodes to the earlier instant
    assert full["c_time"] == "-838:59:59" and full["c_time3"] == "-00:00:00.500" and full["c_year"] == "2155"
    assert full["c_varbinary"] == V.text_bytes(EVERY_BYTE) and full["c_binary"] == "AP8QgA=="
    assert full["c_enum"] == "it's" and full["c_set"] == "x,z" and full["c_varchar"] == FULL_ROW["c_varchar"]
    assert rows[1]["after"] == {"id": "2", **{c.name: None for c in ALL_COLUMNS[1:]}}
    updated = rows[2]["after"]
    assert updated["c_float"] == "-3.4e+38" and updated["c_double"] == "5e-324" and updated["c_set"] == "x,y,z"
    assert updated["c_bigint_u"] == "9223372036854775808" and updated["c_time3"] == "-01:00:00.005"
    assert [r["op"] for r in rows] == ["insert", "insert", "update", "delete", "insert", "insert", "delete"]
    small = rows[5]["after"]
    assert (small["c_enum"], small["c_set"], small["c_float"], small["c_double"], small["c_decimal"]) == (
        "",
        "",
        "0.0",
        "0.0",
        "0.0000",
    )
    assert small["c_timestamp"] == "1970-01-01 00:00:01.000" and small["c_time"] == "00:00:00"
    assert rows[5]["schema_version"] == ALL_V2.schema_version and small["c_added"] == "new"
    assert (
        rows[0]["column_types"]["c_decimal"] == "decimal(10,4)"
        and rows[0]["column_types"]["c_bigint_u"] == "bigint unsigned"
    )


def test_timestamp_json_carries_the_zone():
    event = RowChange(400000000000000101, "insert", ALL_V1, None, FULL_ROW)
    msg = orjson.loads(sim.SimpleJsonEncoder({"time-zone": "Asia/Shanghai"}).encode_event(event))
    assert msg["data"]["c_timestamp"] == {"location": "Asia/Shanghai", "value": "2023-11-05 14:30:15.250"}
    assert msg["data"]["c_enum"] == "3" and msg["data"]["c_set"] == "5" and msg["data"]["c_bit"] == "1023"
    assert list(msg["data"]) == sorted(msg["data"])


def test_handle_key_only_message_shape():
    options = {"large-message-handle-option": "handle-key-only", "large-message-threshold": 100}
    event = RowChange(400000000000000101, "update", ALL_V1, FULL_ROW, {**FULL_ROW, "c_int": 5})
    msg = orjson.loads(sim.SimpleJsonEncoder(options).encode_event(event))
    assert msg["handleKeyOnly"] is True and msg["data"] == {"id": "1"} and msg["old"] == {"id": "1"}
    decoder = make_decoder("simple-json")
    decoder.decode(None, sim.SimpleJsonEncoder({}).encode_event(Bootstrap(ALL_V1)))
    [row] = decoder.decode(None, sim.SimpleJsonEncoder(options).encode_event(event))
    assert (row.before, row.after, row.flags) == ({"id": "1"}, {"id": "1"}, ["handle_key_only"])


def test_message_too_large_without_handling_fails_like_ticdc():
    event = RowChange(400000000000000101, "insert", ALL_V1, None, FULL_ROW)
    with pytest.raises(ValueError, match="ErrMessageTooLarge"):
        sim.SimpleJsonEncoder({"large-message-threshold": 100}).encode_event(event)


# ---- a consumer that starts mid-stream ------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["simple-json", "simple-avro"])
def test_rows_before_their_schema_wait_for_bootstrap(protocol):
    encoder = sim.SimpleAvroEncoder({}) if protocol == "simple-avro" else sim.SimpleJsonEncoder({})
    row = RowChange(400000000000000101, "insert", ALL_V1, None, FULL_ROW)
    row_bytes = encoder.encode_event(row)
    decoder = make_decoder(protocol)
    with pytest.raises(SchemaNotYetKnown) as caught:
        decoder.decode(None, row_bytes)
    assert (caught.value.database, caught.value.table, caught.value.schema_version) == (
        "test",
        "all_types",
        ALL_V1.schema_version,
    )
    assert caught.value.protocol == protocol and caught.value.where == "schemaVersion"
    # a bootstrap of another version does not help
    decoder.decode(None, encoder.encode_event(Bootstrap(ALL_V2)))
    with pytest.raises(SchemaNotYetKnown):
        decoder.decode(None, row_bytes)
    [boot] = decoder.decode(None, encoder.encode_event(Bootstrap(ALL_V1)))
    assert boot.to_dict() == sim.expected(Bootstrap(ALL_V1), {}, protocol).to_dict()
    assert _dicts(decoder.decode(None, row_bytes)) == [sim.expected(row, {}, protocol).to_dict()]


def test_rename_keeps_the_version_and_caches_the_new_name():
    renamed = replace(USER, name="member")
    ddl = Ddl(447990000000000000, "simple", "member", "RENAME TABLE `user` TO `member`", "rename_table", renamed, USER)
    for protocol, encoder in (("simple-json", sim.SimpleJsonEncoder({})), ("simple-avro", sim.SimpleAvroEncoder({}))):
        decoder = make_decoder(protocol)
        assert _dicts(decoder.decode(None, encoder.encode_event(ddl))) == [sim.expected(ddl, {}, protocol).to_dict()]
        row = RowChange(447990000000000001, "insert", renamed, None, ROW)
        assert _dicts(decoder.decode(None, encoder.encode_event(row)))[0]["table"] == "member"


@pytest.mark.parametrize("protocol", ["simple-json", "simple-avro"])
def test_database_and_table_ddl(protocol):
    encoder = sim.SimpleAvroEncoder({}) if protocol == "simple-avro" else sim.SimpleJsonEncoder({})
    decoder = make_decoder(protocol)
    events = [
        Ddl(500, "shop", None, "CREATE DATABASE `shop`", "create_database"),
        Ddl(
            501,
            "simple",
            "user",
            "CREATE TABLE `user` (id INT PRIMARY KEY, name VARCHAR(255), age INT, score FLOAT)",
            "create_table",
            USER,
        ),
        Ddl(502, "simple", "user", "ALTER TABLE `user` DROP COLUMN `createTime`", "drop_column", USER, USER_V2),
        Ddl(503, "simple", "user", "ALTER TABLE `user` MODIFY COLUMN `age` BIGINT", "modify_column", USER, USER),
        Ddl(504, "simple", "user", "ALTER TABLE `user` CHANGE `age` `years` INT", "rename_column", USER, USER),
        Ddl(505, "simple", "user", "ALTER TABLE `user` RENAME COLUMN `age` TO `years`", "rename_column", USER, USER),
        Ddl(506, "simple", "user", "CREATE INDEX `ix` ON `user` (`age`)", "create_index", USER, USER),
        Ddl(507, "simple", "user", "ALTER TABLE `user` DROP INDEX `ix`", "drop_index", USER, USER),
        Ddl(508, "simple", "user", "TRUNCATE TABLE `user`", "truncate_table", USER, USER),
        Ddl(509, "simple", "user", "DROP TABLE `user`", "drop_table", None, USER),
        Ddl(510, "shop", None, "DROP DATABASE `shop`", "drop_database"),
        Ddl(511, "simple", "user", "ALTER TABLE `user` COMMENT = 'x'", "alter_table", USER, USER),
    ]
    for event in events:
        assert _dicts(decoder.decode(None, encoder.encode_event(event))) == [
            sim.expected(event, {}, protocol).to_dict()
        ], event.sql


def test_database_name_from_sql():
    assert codec.names_from_sql("DROP DATABASE IF EXISTS `a``b`") == ("a`b", None)
    assert codec.names_from_sql("DROP TABLE `db`.`t`") == ("db", "t")


# ---- fast paths equal the shared value functions ----------------------------------------------------


def test_float_fast_path_equals_text_float():
    rng = random.Random(7)
    samples = [rng.uniform(-1e6, 1e6) for _ in range(3000)] + [
        rng.uniform(-1, 1) * 10 ** rng.randint(-40, 38) for _ in range(3000)
    ]
    samples += [float(f"{rng.randint(1, 999999)}e{rng.randint(-12, 12)}") for _ in range(3000)]
    for x in samples:
        x32 = struct.unpack("<f", struct.pack("<f", x))[0] if abs(x) < 3.4e38 else x
        go_text = sim._go_float_text(V.text_float(x32))
        assert codec._float_text(go_text) == V.text_float(go_text) == V.text_float(x32), go_text
        assert codec._float_text(x32) == V.text_float(x32)


def test_float_max_decodes():
    assert codec._float_text("340282350000000000000000000000000000000") == "3.4028235e+38"
    assert codec._float_text(-3.4028234663852886e38) == "-3.4028235e+38"


def test_value_converters_fall_back_to_the_shared_functions():
    assert codec._decimal_converter(4)("007.5") == "7.5000"
    assert codec._decimal_converter(4)("-0.0000") == "0.0000"
    assert codec._decimal_converter(2)("-1.50") == "-1.50"
    assert codec._decimal_converter(0)("12") == "12"
    assert codec._datetime_converter(3)("2024-01-02 03:04:05") == "2024-01-02 03:04:05.000"
    assert codec._datetime_converter(None)("2024-01-02 03:04:05.12") == "2024-01-02 03:04:05.12"
    assert codec._time_converter(0)("-00:00:00") == "00:00:00"
    assert codec._time_converter(2)("100:00:00.5") == "100:00:00.50"
    assert codec._enum_converter(["a", "b"])(2) == "b" and codec._enum_converter(["a", "b"])("a") == "a"
    assert codec._set_converter(["a", "b", "c"])("b,a") == "a,b"
    assert codec._unsigned_converter(64)(-1) == "18446744073709551615"


# ---- malformed input -------------------------------------------------------------------------------------


def _json_row(**changes) -> bytes:
    msg = orjson.loads(sim.SimpleJsonEncoder({}).encode_event(VECTOR_EVENTS["simple_04_update.json"]))
    msg.update(changes)
    return orjson.dumps({k: v for k, v in msg.items() if v is not ...})


def _json_decoder():
    decoder = make_decoder("simple-json")
    decoder.decode(None, sim.SimpleJsonEncoder({}).encode_event(Bootstrap(USER)))
    return decoder


@pytest.mark.parametrize(
    ("value", "where"),
    [
        (b"", "value"),
        (b'{"version":1,"type":"INS', "value"),
        (b"not json", "value"),
        (b"[1, 2]", "value"),
        (b'{"version":1,"type":"MERGE","commitTs":1}', "type"),
        (b'{"version":2,"type":"WATERMARK","commitTs":1}', "version"),
        (b'{"version":1,"type":"WATERMARK","commitTs":"1"}', "commitTs"),
        (b'{"version":1,"type":"WATERMARK"}', "commitTs"),
        (
            b'{"version":1,"type":"BOOTSTRAP","tableSchema":{"schema":"s","table":"t","version":1,'
            b'"columns":[{"name":"a","dataType":{"charset":"binary"},"nullable":true}]}}',
            "tableSchema.columns[0].dataType.mysqlType",
        ),
        (b'{"version":1,"type":"ALTER","commitTs":5}', "sql"),
        (_json_row(commitTs="447984099186180098"), "commitTs"),
        (_json_row(schemaVersion=None), "schemaVersion"),
        (_json_row(data={"id": "1", "age": "twenty", "name": "x", "score": "1"}), "data.age"),
        (_json_row(data={"id": "1", "age": "2", "name": 5, "score": "1"}), "data.name"),
        (_json_row(data={"id": "1", "age": "2", "name": "x", "score": "1", "ghost": "1"}), "data.ghost"),
        (_json_row(data=["1"]), "data"),
        (_json_row(old=...), "old"),
        (_json_row(claimCheckLocation="/nonexistent/claim.json"), "claimCheckLocation"),
    ],
)
def test_malformed_json_raises_decode_error(value, where):
    with pytest.raises(DecodeError) as caught:
        _json_decoder().decode(None, value)
    assert not isinstance(caught.value, SchemaNotYetKnown)
    assert caught.value.protocol == "simple-json" and caught.value.where == where, str(caught.value)


def test_malformed_values_by_type():
    decoder = make_decoder("simple-json")
    decoder.decode(None, sim.SimpleJsonEncoder({}).encode_event(Bootstrap(ALL_V1)))
    good = orjson.loads(sim.SimpleJsonEncoder({}).encode_event(RowChange(9, "insert", ALL_V1, None, FULL_ROW)))
    for column, bad in [
        ("c_enum", "4"),
        ("c_enum", "-1"),
        ("c_set", "8"),
        ("c_varbinary", "not base64!"),
        ("c_decimal", "1.2.3"),
        ("c_date", "yesterday"),
        ("c_datetime", 20240101),
        ("c_time", "12 o clock"),
        ("c_timestamp", {"location": "Mars/Olympus", "value": "2024-01-01 00:00:00"}),
        ("c_timestamp", {"value": "2024-01-01 00:00:00"}),
        ("c_float", "fast"),
        ("c_year", True),
        ("c_tinyint", [1]),
    ]:
        msg = {**good, "data": {**good["data"], column: bad}}
        with pytest.raises(DecodeError) as caught:
            decoder.decode(None, orjson.dumps(msg))
        assert caught.value.where == f"data.{column}" and column in str(caught.value), (column, bad)


def test_malformed_avro_raises_decode_error():
    decoder = make_decoder("simple-avro")
    good = sim.SimpleAvroEncoder({}).encode_event(VECTOR_EVENTS["simple_03_insert.json"])
    for value, where in [(good[:-3], "value"), (good + b"\x00", "value"), (b"\x09\xff\xff", "value"), (b"", "value")]:
        with pytest.raises(DecodeError) as caught:
            decoder.decode(None, value)
        assert caught.value.protocol == "simple-avro" and caught.value.where == where
    out = io.BytesIO()  # a DML whose float column carries a string
    fastavro.schemaless_writer(
        out,
        codec.message_schema(),
        {
            "type": "DML",
            "payload": (
                "com.pingcap.simple.avro.DML",
                {
                    "version": 1,
                    "database": "simple",
                    "table": "user",
                    "tableID": 148,
                    "type": "INSERT",
                    "commitTs": 1,
                    "buildTs": 1,
                    "schemaVersion": V_OLD,
                    "data": {"id": ("long", 1), "score": ("string", "much")},
                },
            ),
        },
    )
    decoder.decode(None, sim.SimpleAvroEncoder({}).encode_event(Bootstrap(USER)))
    with pytest.raises(DecodeError) as caught:
        decoder.decode(None, out.getvalue())
    assert caught.value.where == "data.score"


@pytest.mark.parametrize("method", ["snappy", "lz4"])
def test_bad_compression_raises_decode_error(method):
    decoder = make_decoder("simple-json", {"large-message-handle-compression": method})
    with pytest.raises(DecodeError) as caught:
        decoder.decode(None, b'{"version":1,"type":"WATERMARK","commitTs":1}')
    assert caught.value.protocol == "simple-json" and caught.value.where == "value"
    assert [
        e.commit_ts for e in decoder.decode(None, compress(b'{"version":1,"type":"WATERMARK","commitTs":1}', method))
    ] == [1]


def test_claim_check_file_that_is_not_a_row(tmp_path):
    target = tmp_path / "c.json"
    target.write_bytes(b'{"version":1,"type":"WATERMARK","commitTs":1}')
    decoder = _json_decoder()
    with pytest.raises(DecodeError) as caught:
        decoder.decode(None, _json_row(claimCheckLocation=str(target)))
    assert caught.value.where == "claimCheckLocation"
    decoder = make_decoder("simple-json", {"claim-check-raw-value": True})
    decoder.decode(None, sim.SimpleJsonEncoder({}).encode_event(Bootstrap(USER)))
    with pytest.raises(DecodeError) as caught:
        decoder.decode(None, _json_row(claimCheckLocation=str(target)))
    assert caught.value.where == "claimCheckLocation"
