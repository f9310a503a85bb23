"""The Avro and Simple-Avro column paths against their row-wise reference: the same events, the same silver rows.

Random tables over every type and random streams (inserts, updates that may change the key, deletes, NULLs) are
encoded with every option of each protocol that shapes a row message (the TiDB extension, decimal and unsigned
modes, time zones, row checksums verified or not, unsplit key changes, handle-key-only large messages,
compression), with malformed messages among them (a real message with bytes changed, cut or added, or its key
from another message), and decoded column-wise and one by one. The codec's blocks must give exactly the
reference's events, and take every row message of the usual form; `decode_batches` must give exactly the rows
it gives row-wise, with bad messages quarantined alike and costing nothing to the rest. Values written by hand
that `decode` rejects (or takes in an unusual form) cost only their own message.
"""

from __future__ import annotations

import io
import json
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_jobs.codecs import column_decoder, decoder_class, make_decoder
from spark_jobs.codecs.schema_registry import SchemaRegistryClient
from spark_jobs.codecs.simple import message_schema
from tests.codecs.helpers import ODD_KEYS, agree_by_columns, keyed_table, silver_rows
from tests.codecs.test_cross_protocol import streams
from ticdc_devkit.registry import StandInRegistry
from ticdc_devkit.simulator.model import Bootstrap, Column, Ddl, RowChange, Table, Watermark
from ticdc_devkit.simulator.simple import avro_value
from ticdc_devkit.simulator.stream import encode_stream
from ticdc_devkit.simulator.workload import create_table_sql

CHECKSUMS = {
    "enable-tidb-extension": True,
    "integrity-check-level": "correctness",
    "avro-decimal-handling-mode": "string",
    "avro-bigint-unsigned-handling-mode": "string",
}
OPTIONS: dict[str, list[dict[str, Any]]] = {
    "avro": [
        {"enable-tidb-extension": True},
        {"enable-tidb-extension": True, "avro-decimal-handling-mode": "string"},
        {"enable-tidb-extension": True, "avro-bigint-unsigned-handling-mode": "string", "time-zone": "Asia/Shanghai"},
        {"enable-tidb-extension": True, "time-zone": "America/New_York"},
        CHECKSUMS,  # verified row by row: every row message goes to `decode`
        {**CHECKSUMS, "verify-checksums": False},
        {},  # no TiDB extension: no commit ts, every row message goes to `decode`
    ],
    "simple-avro": [
        {},
        {"time-zone": "Asia/Shanghai"},
        {"output-raw-change-event": True, "time-zone": "America/New_York"},
        {"integrity-check-level": "correctness"},  # verified row by row: every row message goes to `decode`
        {"integrity-check-level": "correctness", "verify-checksums": False},
        {"large-message-handle-option": "handle-key-only", "large-message-threshold": 400},
        {"large-message-handle-compression": "lz4"},  # the column path leaves compressed messages to `decode`
    ],
}


@pytest.fixture(scope="module")
def registry():
    with StandInRegistry() as reg:
        yield reg


def decoder_options(protocol: str, option: dict[str, Any], registry_url: str) -> dict[str, Any]:
    allowed = decoder_class(protocol).OPTIONS
    options = {k: v for k, v in option.items() if k in allowed}
    if protocol == "avro":
        options["schema-registry-url"] = registry_url
    return options


def encoded(protocol: str, events: list, option: dict[str, Any], registry_url: str) -> list[tuple[Any, Any]]:
    extra = {"schema-registry-url": registry_url} if protocol == "avro" else {}
    return [(m.key, m.value) for m in encode_stream(protocol, events, options={**option, **extra})]


def reference_of(protocol: str, messages: list[tuple[Any, Any]], options: dict) -> dict[int, list[dict] | None]:
    """Each message decoded by one decoder, in order (Simple learns its schemas as it goes)."""
    decoder = make_decoder(protocol, options)
    reference: dict[int, list[dict] | None] = {}
    for i, (key, value) in enumerate(messages):
        try:
            reference[i] = [e.to_dict() for e in decoder.decode(key, value)]
        except Exception:
            reference[i] = None
    return reference


def broken(messages: list[tuple[Any, Any]], pick: int, kind: int, where: int, byte: int) -> tuple[Any, Any]:
    """A message of the stream with something changed: a byte of its value (or key) set, its value cut or grown,
    the value's varint continued, its key or value from another message, or neither."""
    key, value = messages[pick % len(messages)]
    other_key, other_value = messages[(pick + where + 1) % len(messages)]
    part = bytearray(value or b"")
    at = where % (len(part) + 1)
    if kind == 0 and part:
        part[at % len(part)] = byte
    elif kind == 1:
        del part[at:]
    elif kind == 2:
        part[at:at] = bytes([byte, byte | 0x80])
    elif kind == 3 and part:
        part[at % len(part)] |= 0x80
    elif kind == 4:
        return other_key, value
    elif kind == 5:
        return key, other_value
    elif kind == 6 and key:
        changed = bytearray(key)
        changed[where % len(changed)] = byte
        return bytes(changed), value
    elif kind == 7:
        return None, None
    return key, bytes(part)


@st.composite
def cases(draw):
    protocol = draw(st.sampled_from(sorted(OPTIONS)))
    option = draw(st.sampled_from(OPTIONS[protocol]))
    hand_made = st.tuples(st.integers(0, 1000), st.integers(0, 8), st.integers(0, 1000), st.integers(0, 255))
    return protocol, option, draw(st.lists(hand_made, max_size=4)), draw(st.integers(0, 1000))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(events=streams(), case=cases())
def test_the_column_paths_give_the_reference_answers(registry, events, case):
    protocol, option, hand_made, at = case
    stream = encoded(protocol, events, option, registry.url)
    messages = list(stream)
    where = at % (len(messages) + 1)
    messages[where:where] = [broken(stream, *args) for args in hand_made]  # anywhere: they cost nothing to the rest
    options = decoder_options(protocol, option, registry.url)
    reference = reference_of(protocol, messages, options)
    decoded = agree_by_columns(protocol, options, messages, reference)
    made = range(where, where + len(hand_made))
    plain = [
        i
        for i, got in reference.items()
        if i not in made
        and got
        and all(e["kind"] == "row" and e["commit_ts"] is not None and "handle_key_only" not in e["flags"] for e in got)
    ]
    if (option.get("integrity-check-level") and options.get("verify-checksums", True)) or options.get(
        "large-message-handle-compression", "none"
    ) != "none":
        plain = []
    # Avro: silver places a row without a commit ts after the commit before it, or before the one after it (the
    # partition sent again), which `decode` must give it
    readers = sum(not got or got[0]["commit_ts"] is None for got in reference.values())
    left = 1 + 2 * readers if protocol == "avro" else 0
    assert decoded >= len(plain) - left, "every row message of the usual form decodes column-wise"
    # the same rows, quarantine reasons included (they name no memory address: `avro.fastavro_error`)
    assert silver_rows(protocol, messages, options, True) == silver_rows(protocol, messages, options, False)


# ---- a fixed batch: keys JSON escapes, an unsplit key change, one bad value --------------------------------

KEYED = keyed_table(Column("u", "bigint unsigned"), Column("d", "decimal(20,10)"), name="odd_keys")


def keyed_events() -> list:
    ts = 1_763_900_000_000 << 18
    events: list = [Ddl(ts, "shop", "odd_keys", create_table_sql(KEYED), "create_table", table_after=KEYED)]
    events.append(Bootstrap(KEYED))
    rows = [
        {
            "k": k,
            "n": i - 3,
            "v": None if i % 2 else k,
            "b": bytes([i, 255]),
            "f": 1.1 * i,
            "e": "b",
            "u": 2**64 - 1 - i,
            "d": Decimal(f"0.000000{i}"),  # Arrow writes 1E-7 for it: the converter's text instead
        }
        for i, k in enumerate(ODD_KEYS)
    ]
    for i, row in enumerate(rows):
        events.append(RowChange(ts + (i + 1 << 18), "insert", KEYED, None, row))
    events.append(RowChange(ts + (20 << 18), "update", KEYED, rows[1], {**rows[1], "k": 'moved "key"'}))
    events.append(RowChange(ts + (21 << 18), "delete", KEYED, rows[2], None))
    events.append(Watermark(ts + (30 << 18)))
    return events


def with_value(value: bytes, column: str, branch: str, datum: Any) -> bytes:
    """A Simple-Avro row message with one value of its `data` replaced, written in `branch` of the value union."""
    record = fastavro.schemaless_reader(io.BytesIO(value), message_schema(), None)
    payload = record["payload"]
    for image in ("data", "old"):
        if payload[image] is not None:
            payload[image] = {name: None if v is None else (_branch(v), v) for name, v in payload[image].items()}
    payload["data"][column] = (branch, datum)
    out = io.BytesIO()
    fastavro.schemaless_writer(out, message_schema(), {**record, "payload": ("com.pingcap.simple.avro.DML", payload)})
    return out.getvalue()


def _branch(value: Any) -> str:
    """The union branch TiCDC writes a value of KEYED in (its only floating column is a FLOAT)."""
    if isinstance(value, dict):
        return "com.pingcap.simple.avro." + ("Timestamp" if "location" in value else "UnsignedBigint")
    return {int: "long", float: "float", str: "string", bytes: "bytes"}[type(value)]


def test_simple_avro_keys_escape_a_key_change_splits_and_a_bad_value_costs_only_its_message():
    messages = encoded("simple-avro", keyed_events(), {"output-raw-change-event": True}, "")
    assert len(messages) == 13  # CREATE TABLE, bootstrap, 8 inserts, the key change unsplit, a delete, a watermark
    messages[4] = (None, with_value(messages[4][1], "e", "long", 3))
    column_wise = silver_rows("simple-avro", messages, {}, True)
    assert column_wise == silver_rows("simple-avro", messages, {}, False)
    assert [(r["offset"], r["reason"]) for r in column_wise if r["kind"] == "quarantine"] == [
        (4, "simple-avro: bad enum('a','b') value 3 for column 'e': ENUM index out of range 0..2 (at data.e)")
    ]
    by_key = {r["row_key"]: r for r in column_wise if r["kind"] == "row"}
    assert {'["quote \\" inside","-2"]', '["back\\\\slash","-1"]', '["nul\\u0000","1"]', '["日本語 😀","2"]'} <= set(
        by_key
    )
    assert by_key['["plain","-3"]']["after"]["u"] == "18446744073709551615"
    assert by_key['["tab\\there","0"]']["after"]["d"] == "0.0000003000"
    split = [(r["op"], r["row_key"]) for r in column_wise if "key_change_split" in r["flags"]]
    assert split == [("delete", '["quote \\" inside","-2"]'), ("insert", '["moved \\"key\\"","-2"]')]
    decoder = column_decoder(make_decoder("simple-avro", {}))
    assert decoder is not None
    result = decoder.decode_columns([None] * len(messages), [value for _, value in messages])
    assert result.row_wise == [0, 1, 4, 12]  # the CREATE TABLE, the bootstrap, the bad value, the watermark
    assert agree_by_columns("simple-avro", {}, messages, reference_of("simple-avro", messages, {})) == 9


def test_avro_keys_escape_and_a_bad_value_costs_only_its_message(registry):
    option = {"enable-tidb-extension": True}
    messages = encoded("avro", keyed_events(), option, registry.url)
    assert len(messages) == 11  # 8 inserts, the key change as a delete and an insert, a delete
    value = messages[3][1]
    parsed = fastavro.parse_schema(json.loads(SchemaRegistryClient(registry.url).schema(int.from_bytes(value[1:5]))))
    record = fastavro.schemaless_reader(io.BytesIO(value[5:]), parsed, None)
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed, {**record, "e": "c"})
    messages[3] = (messages[3][0], value[:5] + out.getvalue())
    options = decoder_options("avro", option, registry.url)
    column_wise = silver_rows("avro", messages, options, True)
    assert column_wise == silver_rows("avro", messages, options, False)
    assert [(r["offset"], r["reason"]) for r in column_wise if r["kind"] == "quarantine"] == [
        (3, "avro: column e of default.shop.odd_keys: ValueError: 'c' is not one of the ENUM labels (at value.e)")
    ]
    by_key = {r["row_key"]: r for r in column_wise if r["kind"] == "row"}
    assert {'["quote \\" inside","-2"]', '["nul\\u0000","1"]', '["日本語 😀","2"]', '["moved \\"key\\"","-2"]'} <= set(
        by_key
    )
    assert by_key['["plain","-3"]']["after"] == {
        "k": "plain",
        "n": "-3",
        "v": "plain",
        "b": "AP8=",
        "f": "0.0",
        "e": "b",
        "u": "18446744073709551615",
        "d": "0.0000000000",
    }
    deleted = [r for r in column_wise if r["op"] == "delete"]
    assert [(r["offset"], r["commit_ts"]) for r in deleted] == [  # each placed after the change before it
        (8, column_wise[7]["commit_ts"] + 1),
        (10, column_wise[9]["commit_ts"] + 1),
    ]
    decoder = column_decoder(make_decoder("avro", options))
    assert decoder is not None
    result = decoder.decode_columns([key for key, _ in messages], [value for _, value in messages])
    # the bad value, the deletes and the change before each, the last insert (a later batch may begin with a delete)
    assert result.row_wise == [3, 7, 8, 9, 10]


# ---- values written by hand -------------------------------------------------------------------------------


def col(name: str, avro: Any, tidb_type: str, nullable: bool = False, **extra: Any) -> dict[str, Any]:
    t = {"type": avro, "connect.parameters": {"tidb_type": tidb_type, **extra.pop("params", {})}, **extra}
    return {"name": name, "type": ["null", t] if nullable else t}


EXTENSION = [
    {"name": "_tidb_op", "type": "string"},
    {"name": "_tidb_commit_ts", "type": "long"},
    {"name": "_tidb_commit_physical_time", "type": "long"},
]
# (column, a value of the usual form, a value `decode` takes in an unusual form or rejects)
AVRO_VALUES = [
    (col("u", "int", "INT UNSIGNED"), 7, -1),
    (col("u", "long", "BIGINT UNSIGNED"), -1, -(2**63)),
    (col("big", "string", "BIGINT UNSIGNED"), "18446744073709551615", "18446744073709551616"),
    (col("big", "string", "BIGINT UNSIGNED"), "12", "0012"),
    (col("big", "string", "BIGINT UNSIGNED"), "12", "١٢"),
    (col("m", "string", "DECIMAL"), "-0.10", "1.2.3"),
    (col("m", "string", "DECIMAL"), "1.50", "1e3"),
    (col("d", "bytes", "DECIMAL", logicalType="decimal", precision=4, scale=2), Decimal("-99.99"), b"\x27\x10"),
    (col("d", "bytes", "DECIMAL", nullable=True, logicalType="decimal", precision=30, scale=20), None, b"\x05"),
    (col("d", "bytes", "DECIMAL", logicalType="decimal", precision=40, scale=0), Decimal(10**39), b"\x00" * 40),
    (col("e", "string", "ENUM", params={"allowed": "a,b\\,c,it's"}), "b,c", "c"),
    (col("e", "string", "ENUM", params={"allowed": "a,b"}), "", "A"),
    (col("s", "string", "SET", params={"allowed": "a,b"}), "a,b", "b,a"),
    (col("s", "string", "SET", params={"allowed": "a,b"}), "a", "a,c"),
    (col("dt", "string", "DATETIME"), "2020-12-01 00:00:00.5", "2020-13-01 00:00:00"),
    (col("dt", "string", "DATE"), "2020-12-01", "٢٠٢٠-١٢-٠١"),
    (col("t", "string", "TIME"), "-838:59:59", "12:00"),
    (col("ts", "string", "TIMESTAMP"), "2038-01-19 03:14:07", "2038-01-19T03:14:07"),
    (col("y", "int", "YEAR"), 0, 2156),
    (col("b", "bytes", "BIT"), b"", b"\x01" * 9),
    (col("f", "double", "DOUBLE"), 1e16, float("nan")),
    (col("f", "float", "FLOAT"), 3.4e38, float("inf")),
    (col("f", "double", "FLOAT", nullable=True), 0.30000001192092896, -0.0),
    (col("x", "string", "TEXT"), "é", b"\xff"),
    (col("x", "bytes", "BLOB"), b"\x00\x01\x02", b""),
]


@pytest.mark.parametrize("zone", ["UTC", "Asia/Kolkata"])
def test_avro_values_written_by_hand_cost_only_their_message(registry, zone):
    options = {"schema-registry-url": registry.url, "time-zone": zone}
    key_text = json.dumps(
        {"type": "record", "name": "t", "namespace": "default.hand", "fields": [col("id", "long", "BIGINT")]}
    )
    for number, (field, good, odd) in enumerate(AVRO_VALUES):
        schema = {
            "type": "record",
            "name": "t",
            "namespace": "default.hand",
            "fields": [col("id", "long", "BIGINT"), field, *EXTENSION],
        }
        value_id = registry.register(f"hand{number}-value", json.dumps(schema))
        key_id = registry.register(f"hand{number}-key", key_text)
        key_schema = fastavro.parse_schema(json.loads(key_text))
        messages = []
        for i, raw in enumerate([good, odd, good, good]):
            record = {"id": i, field["name"]: raw, "_tidb_op": "u", "_tidb_commit_ts": 1 << 60 | i}
            key, body = io.BytesIO(), io.BytesIO()
            fastavro.schemaless_writer(key, key_schema, {"id": i})
            fastavro.schemaless_writer(body, writer_schema(schema, raw), {**record, "_tidb_commit_physical_time": 0})
            messages.append((frame(key_id, key.getvalue()), frame(value_id, body.getvalue())))
        reference = reference_of("avro", messages, options)
        assert reference[0] and reference[2] and reference[3], field
        decoded = agree_by_columns("avro", options, messages, reference)
        assert decoded >= 2, field  # the good ones, but the last: silver's next batch may begin with a delete
        assert silver_rows("avro", messages, options, True) == silver_rows("avro", messages, options, False)


def frame(schema_id: int, body: bytes) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + body


def writer_schema(schema: dict[str, Any], raw: Any) -> Any:
    """The schema to write a value with: bytes for text that is not UTF-8 (strings and bytes share a wire form),
    no decimal logical type for the bytes of an unscaled value written by hand."""
    fields = []
    for field in schema["fields"]:
        kind = field["type"]
        inner = kind[1] if isinstance(kind, list) else kind
        if isinstance(raw, bytes) and isinstance(inner, dict) and inner["type"] in ("string", "bytes"):
            inner = {"type": "bytes"}
            kind = ["null", inner] if isinstance(kind, list) else inner
        fields.append({**field, "type": kind})
    return fastavro.parse_schema({**schema, "fields": fields})


HAND = Table(
    "shop",
    "hand",
    (
        Column("id", "int", nullable=False),
        Column("tu", "tinyint unsigned"),
        Column("i", "int"),
        Column("bu", "bigint unsigned"),
        Column("y", "year"),
        Column("e", "enum('a','b')"),
        Column("s", "set('a','b')"),
        Column("f", "float"),
        Column("d", "double"),
        Column("m", "decimal(10,2)"),
        Column("dt", "date"),
        Column("dtm", "datetime(1)"),
        Column("ts", "timestamp"),
        Column("vb", "varbinary(8)"),
        Column("vc", "varchar(8)"),
    ),
    key=("id",),
    schema_version=1 << 40,
)
ROW = {
    "tu": 200,
    "i": -5,
    "bu": 2**64 - 1,
    "y": 2024,
    "e": "b",
    "s": "a,b",
    "f": 1.5,
    "d": 0.1,
    "m": Decimal("1.50"),
    "dt": date(2024, 2, 29),
    "dtm": datetime(2024, 1, 1, 10, 0, 0, 500000),
    "ts": datetime(2024, 1, 1, 10, 0, 0),
    "vb": b"\x00\xff",
    "vc": "é",
}
# (column, the value written in its place: (branch, datum), None, MISSING, or an unknown column's; what becomes of
# the row: taken column-wise, rejected by `decode`, or decoded by `decode` only, its value in another branch than
# TiCDC writes or its image short of a column)
MISSING = object()
SIMPLE_VALUES = [
    ("tu", ("long", -1), "taken"),  # 255: unsigned sent wrapped
    ("tu", ("long", -200), "rejected"),
    ("i", ("string", "12"), "decode"),
    ("bu", ("long", 5), "decode"),
    ("y", ("long", -5), "taken"),  # -005
    ("y", ("long", 5), "taken"),  # 0005
    ("e", ("long", 0), "taken"),  # the empty label
    ("e", ("long", 3), "rejected"),
    ("s", ("long", 0), "taken"),
    ("s", ("long", 4), "rejected"),
    ("f", ("float", float("nan")), "taken"),  # Simple's FLOAT takes it
    ("f", ("double", 0.1), "decode"),
    ("d", ("double", 1e16), "taken"),
    ("d", ("double", -0.0), "taken"),
    ("m", ("string", "1.5"), "taken"),  # 1.50
    ("m", ("string", "x"), "rejected"),
    ("dt", ("string", "2024-2-29"), "taken"),  # 2024-02-29
    ("dtm", ("string", "2024-01-01 10:00:00"), "taken"),
    (
        "ts",
        ("com.pingcap.simple.avro.Timestamp", {"location": "Asia/Shanghai", "value": "2024-01-01 18:00:00"}),
        "taken",
    ),
    (
        "ts",
        ("com.pingcap.simple.avro.Timestamp", {"location": "Nowhere/City", "value": "2024-01-01 18:00:00"}),
        "rejected",
    ),
    ("vb", ("bytes", b""), "taken"),
    ("vb", ("string", "AA=="), "rejected"),
    ("vc", ("long", 5), "rejected"),
    ("vc", None, "taken"),
    ("vc", MISSING, "decode"),
    ("zz", ("long", 1), "rejected"),  # a column the schema lacks
]


def simple_row(table: Table, commit_ts: int, data: dict[str, Any]) -> bytes:
    """A Simple-Avro INSERT of `data` (column -> (branch, datum) or None), written by hand."""
    payload = {
        "version": 1,
        "database": table.database,
        "table": table.name,
        "tableID": table.table_id,
        "type": "INSERT",
        "commitTs": commit_ts,
        "buildTs": 0,
        "schemaVersion": table.schema_version,
        "claimCheckLocation": None,
        "handleKeyOnly": None,
        "checksum": None,
        "data": data,
        "old": None,
    }
    out = io.BytesIO()
    fastavro.schemaless_writer(
        out, message_schema(), {"type": "DML", "payload": ("com.pingcap.simple.avro.DML", payload)}
    )
    return out.getvalue()


def test_simple_avro_values_written_by_hand_cost_only_their_message():
    columns = {c.name: c for c in HAND.columns}
    usual = {name: avro_value(columns[name], value, None, "UTC") for name, value in ROW.items()}
    messages = [(None, m.value) for m in encode_stream("simple-avro", [Bootstrap(HAND)])]
    for i in range(len(SIMPLE_VALUES) + 3):
        data = {"id": ("long", i), **usual}
        if 0 < i <= len(SIMPLE_VALUES):
            name, value, _ = SIMPLE_VALUES[i - 1]
            if value is MISSING:
                del data[name]
            else:
                data[name] = value
        messages.append((None, simple_row(HAND, 1 << 50 | i, data)))
    reference = reference_of("simple-avro", messages, {})
    odd = {2 + k: outcome for k, (_, _, outcome) in enumerate(SIMPLE_VALUES)}
    assert [i for i, events in reference.items() if events is None] == [i for i, o in odd.items() if o == "rejected"]
    assert agree_by_columns("simple-avro", {}, messages, reference) == len(messages) - 1 - sum(
        o != "taken" for o in odd.values()
    )
    assert silver_rows("simple-avro", messages, {}, True) == silver_rows("simple-avro", messages, {}, False)
