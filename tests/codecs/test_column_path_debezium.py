"""Debezium's column path against its row-wise reference: the same events, the same silver rows.

Random tables over every type and random streams (inserts, updates that may change the key, deletes, NULLs) are
encoded with every Debezium option that shapes a row message (the TiDB extension, old values off, no schema,
unsplit key changes), with hand-made messages among them (malformed ones, values a converter rejects, integers
beyond 64 bits, unusual forms `decode` takes), and decoded column-wise and one by one. The codec's blocks must
give exactly the reference's events; `decode_batches` must give exactly the rows it gives row-wise, with bad
messages quarantined alike and costing nothing to the rest.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_jobs.codecs import DecodeError, column_decoder, make_decoder
from tests.codecs.helpers import EVERY_TYPE, EVERY_TYPE_ROW, ODD_KEYS, agree_by_columns, keyed_table, silver_rows
from tests.codecs.test_cross_protocol import streams
from ticdc_devkit.simulator.model import Column, Ddl, RowChange, Table, Watermark
from ticdc_devkit.simulator.stream import encode_stream
from ticdc_devkit.simulator.workload import create_table_sql

DEBEZIUM_OPTIONS = [
    {},
    {"enable-tidb-extension": True},
    {"enable-tidb-extension": True, "debezium-output-old-value": False},
    {"debezium-output-old-value": False, "output-raw-change-event": True},
    {"enable-tidb-extension": True, "output-raw-change-event": True},
    {"debezium-disable-schema": True},  # no schema: the column path leaves these messages to `decode`
    {"debezium-disable-schema": True, "enable-tidb-extension": True, "output-raw-change-event": True},
]
ENCODER_ONLY = {"output-raw-change-event"}
TS = 1_763_900_000_000 << 18

HAND = Table(
    "shop",
    "hand",
    (
        Column("id", "int", nullable=False),
        Column("v", "varchar(20)"),
        Column("u", "bigint unsigned"),
        Column("d", "double"),
        Column("f", "float"),
        Column("dec", "decimal(10,2)"),
        Column("dt", "date"),
        Column("dtm", "datetime(6)"),
        Column("ts", "timestamp(3)"),
        Column("tm", "time(3)"),
        Column("yr", "year"),
        Column("b1", "bit(1)"),
        Column("b8", "bit(8)"),
        Column("vb", "varbinary(8)"),
    ),
    key=("id",),
)
HAND_ROW: dict[str, Any] = {
    "id": 7,
    "v": "x",
    "u": 5,
    "d": 2.5,
    "f": 1.5,
    "dec": "12.50",
    "dt": EVERY_TYPE_ROW["dt"],
    "dtm": EVERY_TYPE_ROW["dtm"],
    "ts": EVERY_TYPE_ROW["ts"],
    "tm": EVERY_TYPE_ROW["tm"],
    "yr": 1999,
    "b1": 1,
    "b8": 5,
    "vb": b"\x00\xff",
}


def _hand_messages(options: dict) -> list[tuple[bytes, bytes]]:
    events = [
        RowChange(TS, "insert", HAND, None, HAND_ROW),
        RowChange(TS + 1, "update", HAND, HAND_ROW, {**HAND_ROW, "v": "y"}),
        RowChange(TS + 2, "delete", HAND, HAND_ROW, None),
        Watermark(TS + 3),
    ]
    return [(m.key, m.value) for m in encode_stream("debezium", events, options=options)]


(KEY, INSERT), (_, UPDATE), (_, DELETE), (_, WATERMARK) = _hand_messages({"enable-tidb-extension": True})
(PLAIN_KEY, PLAIN_INSERT), *_ = _hand_messages({})


def edited(value: bytes, path: list, new: Any = None, drop: bool = False) -> bytes:
    """The document with the field at `path` set to `new` (or dropped), written as TiCDC writes (compact, the
    schema last)."""
    doc = json.loads(value)
    target = doc
    for step in path[:-1]:
        target = target[step]
    if drop:
        del target[path[-1]]
    else:
        target[path[-1]] = new
    return written(doc)


def written(doc: Any) -> bytes:
    """JSON as TiCDC writes it: compact, UTF-8; any integer (orjson writes none beyond 64 bits)."""
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()


def after(column: str, new: Any) -> tuple[bytes, bytes]:
    return KEY, edited(INSERT, ["payload", "after", column], new)


def tidb_type(value: bytes, column: str, definition: str) -> bytes:
    """The message with the schema's tidb_type of `column` (in both images) set to `definition`."""
    doc = json.loads(value)
    for image in doc["schema"]["fields"][:2]:
        for field in image["fields"]:
            if field["field"] == column:
                field["tidb_type"] = definition
    return written(doc)


QUOTED = Table("shop", "quoted", (Column("id", "int", nullable=False), Column('dq"col\\', "varchar(8)")), key=("id",))
[(QUOTED_KEY, QUOTED_INSERT)] = [
    (m.key, m.value)
    for m in encode_stream("debezium", [RowChange(TS, "insert", QUOTED, None, {"id": 1, 'dq"col\\': "v"})])
]
[(DDL_KEY, DDL)] = [
    (m.key, m.value)
    for m in encode_stream(
        "debezium", [Ddl(TS, "shop", "hand", create_table_sql(HAND), "create_table", table_after=HAND)]
    )
]
DEEP = b"[" * 2000 + b"]" * 2000
SCALED = tidb_type(INSERT, "dec", "decimal(10,2)")  # a scale TiCDC does not send: hand-made
# not Kafka's: hand-made messages, malformed ones (each quarantined by `decode` with its reason) among them
HAND_MADE: list[tuple[Any, Any]] = [
    (None, None),
    (KEY, b""),
    (KEY, b"not json"),
    (KEY, WATERMARK),
    (KEY, edited(INSERT, ["payload", "op"], "m")),
    (KEY, edited(INSERT, ["payload", "op"], "x")),
    (KEY, edited(INSERT, ["payload", "op"], drop=True)),
    (KEY, edited(INSERT, ["payload", "source", "commit_ts"], -1)),
    (KEY, edited(INSERT, ["payload", "source", "commit_ts"], 1 << 63)),  # silver quarantines it, row-wise
    (KEY, edited(INSERT, ["payload", "source", "db"], drop=True)),
    (KEY, edited(INSERT, ["payload", "source", "table"], "")),
    (KEY, edited(INSERT, ["payload", "source", "table"], None)),
    (KEY, edited(INSERT, ["payload", "source", "extra"], 1)),  # a field TiCDC does not write
    (KEY, INSERT.replace(b'"source":{', b'"source":{"extra":"\xff",')),
    (KEY, INSERT.replace(b'"version":"2.4.0.Final"', b'"version":"\xff"')),  # not UTF-8
    (KEY, INSERT.replace(b'"pos":0', b'"pos":1e400')),  # beyond a double
    (KEY, INSERT.replace(b'"pos":0', b'"pos":' + b"9" * 400)),
    (KEY, INSERT.replace(b'"transaction":null', b'"transaction":' + DEEP)),
    (KEY, INSERT[:-1] + b',"x":1}'),  # a member after the schema
    (KEY, INSERT.replace(b',"schema":', b', "schema": ')),  # not TiCDC's layout, read whole
    (
        KEY,
        b'{"schema":'
        + INSERT[INSERT.rfind(b',"schema":') + 10 : -1]
        + b',"payload":'
        + INSERT[11 : INSERT.rfind(b',"schema":')]
        + b"}",
    ),
    (KEY, edited(INSERT, ["schema"], [1])),
    (KEY, edited(INSERT, ["schema"], None)),
    (KEY, edited(INSERT, ["schema", "fields", 1, "fields", 0, "type"], "struct")),
    (KEY, INSERT.replace(b'"payload":{', b'"payload":{"op":"d",', 1)),  # a duplicate: the last op counts
    after("id", "12"),
    after("id", 1.5),
    after("id", True),
    after("id", 1 << 64),
    after("id", (1 << 64) - 1),  # an int column sent beyond int64, which `decode` takes
    (KEY, INSERT.replace(b'"id":7', b'"id":' + b"9" * 400)),
    after("u", -1),
    after("u", (1 << 63) + 5),
    after("d", 1e16),
    after("d", -0.0),
    after("d", 5e-324),
    after("f", 3.4028234663852886e38),
    after("dec", 1e16),
    after("dt", 3_000_000),
    after("dt", 2_932_896),  # 9999-12-31
    after("dt", 2_932_897),
    after("dt", -719_162),  # 0001-01-01
    after("dt", -719_163),
    after("dtm", 1 << 62),
    after("dtm", -62_135_596_800_000_001),
    after("ts", "2024-02-30T00:00:00.000Z"),
    after("ts", "2024-01-01T24:00:00.000Z"),
    after("ts", "2024-01-01T10:00:00.1234567Z"),
    after("ts", "2024-01-01T10:00:00Z"),
    after("ts", "2024-01-01 10:00:00.000"),
    after("tm", -1),
    after("tm", -(1 << 63)),
    after("tm", (1 << 63) - 1),
    after("yr", -1),
    after("yr", 12345),
    after("b1", False),
    after("b1", 1),
    after("b8", "!!"),
    after("b8", "QR=="),
    after("vb", "QR=="),
    after("vb", "not base64"),
    after("v", 5),
    after("v", [1]),
    after("no_such_column", 1),
    (KEY, edited(INSERT, ["payload", "after", "v"], drop=True)),  # fewer columns: `decode` takes it
    (KEY, edited(INSERT, ["payload", "before"], {"id": 1})),  # an insert's before: ignored by `decode`
    (KEY, INSERT.replace(b'"before":null', b'"before":{"v":"\xff"}')),  # ignored, but not JSON
    (KEY, INSERT.replace(b'"before":null', b'"before":' + DEEP)),
    (KEY, edited(DELETE, ["payload", "after"], {"id": 1})),
    (KEY, edited(UPDATE, ["payload", "before"], drop=True)),
    (KEY, edited(UPDATE, ["payload", "before"], {"id": "x"})),
    (KEY, edited(INSERT, ["payload", "after"], None)),
    (KEY, INSERT.replace(b'"after":{"id":7', b'"after":{"id":7,"id":8')),  # a duplicate: the last counts
    (KEY, SCALED),
    (KEY, edited(SCALED, ["payload", "after", "dec"], 12.345)),
    (KEY, edited(SCALED, ["payload", "after", "dec"], 1e70)),
    (KEY, tidb_type(INSERT, "dtm", "datetime(2)")),
    (KEY, tidb_type(INSERT, "ts", "timestamp(5)")),
    (KEY, tidb_type(INSERT, "tm", "time(0)")),
    (None, INSERT),  # no key: a table without one
    (b"", INSERT),
    (b"not json", INSERT),
    (b'{"payload":{"id":7},"schema":1}', INSERT),  # any JSON schema, as `decode` reads the key
    (b'{"payload": {"id": 7}, "schema": 1}', INSERT),  # but an object where the key is read whole
    (b'{"payload":{"id":7},"schema":[' + b"[" * 2000 + b"]" * 2000 + b"]}", INSERT),
    (b'{"payload":{"id":"\xff"}}', INSERT),
    (b'{"payload":{"id":' + b"9" * 400 + b"}}", INSERT),
    (b'{"payload":{"b":1,"a\\"q":2,"b":3}}', INSERT),
    (KEY.decode(), INSERT),  # not bytes
    (PLAIN_KEY, PLAIN_INSERT),
    (KEY, edited(INSERT, ["payload", "after", 'a"b'], 1)),
    (QUOTED_KEY, QUOTED_INSERT),  # a column name msgspec takes for no field: row-wise
    (DDL_KEY, DDL),
]


def decoder_options(options: dict) -> dict:
    return {k: v for k, v in options.items() if k not in ENCODER_ONLY}


def reference_of(messages: list[tuple[Any, Any]], options: dict) -> dict[int, list[dict] | None]:
    decoder = make_decoder("debezium", options)
    reference: dict[int, list[dict] | None] = {}
    for i, (key, value) in enumerate(messages):
        try:
            reference[i] = [e.to_dict() for e in decoder.decode(key, value)]
        except Exception:
            reference[i] = None
    return reference


def test_hand_made_messages_decode_column_wise_only_to_the_reference_answers():
    messages = [*HAND_MADE, *reversed(HAND_MADE)]
    reference = reference_of(messages, {})
    assert sum(events is None for events in reference.values()) > 40  # most are malformed
    decoded = agree_by_columns("debezium", {}, messages, reference)
    assert decoded >= 40
    assert silver_rows("debezium", messages, {}, True) == silver_rows("debezium", messages, {}, False)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    events=streams(),
    option=st.sampled_from(DEBEZIUM_OPTIONS),
    hand_made=st.lists(st.sampled_from(HAND_MADE), max_size=4),
    at=st.integers(0, 1000),
)
def test_the_column_path_gives_the_reference_answers(events, option, hand_made, at):
    messages: list[tuple[Any, Any]] = [(m.key, m.value) for m in encode_stream("debezium", events, options=option)]
    where = at % (len(messages) + 1)
    messages[where:where] = hand_made  # anywhere in the stream: they cost nothing to those around them
    options = decoder_options(option)
    reference = reference_of(messages, options)
    decoded = agree_by_columns("debezium", options, messages, reference)
    plain = [
        i
        for i, got in reference.items()
        if (i < where or i >= where + len(hand_made)) and got and all(e["kind"] == "row" for e in got)
    ]
    schemaless = options.get("debezium-disable-schema", False)
    assert decoded >= (0 if schemaless else len(plain)), "every row message of the usual form decodes column-wise"
    assert silver_rows("debezium", messages, options, True) == silver_rows("debezium", messages, options, False)


# what a mutated column may hold instead of what TiCDC wrote: values of every JSON kind, at and past the limits
# of what `decode` reads as what (orjson reads an integer past 64 bits as a float), texts some converters reject
MUTANTS = [
    None,
    True,
    False,
    0,
    -1,
    1,
    255,
    2**63 - 1,
    2**63,
    2**64 - 1,
    2**64,
    -(2**63),
    -(2**63) - 1,
    1.5,
    -0.0,
    0.0,
    1e300,
    5e-324,
    0.1,
    1e16,
    123456789012345.6,
    9007199254740993,
    -719_162,
    2_932_896,
    2_932_897,
    253_402_300_799_999_999,
    253_402_300_800_000_000,
    "",
    "x",
    "12",
    "2024-01-01T10:00:00Z",
    "2024-01-01T10:00:00.5Z",
    "2024-02-29T23:59:59.999999Z",
    "2023-02-29T00:00:00Z",
    "0000-00-00T00:00:00Z",
    "2024-01-01T10:00:60Z",
    "2024-01-01T10:00:00+01:00",
    "2024-01-01T10:00:00.Z",
    "AAAA",
    "QR==",
    "QQ==",
    "/w==",
    "!!",
    "é",
    "\u2028",
    [1],
    {"a": 1},
]
MUTATED_OPTIONS = [{}, {"enable-tidb-extension": True}, {"debezium-output-old-value": False}]


def mutated(rng: random.Random, value: bytes) -> bytes:
    """A value with one thing changed: a column's value, a column dropped or added, a field of the source, or a
    field of a column's schema."""
    doc = json.loads(value)
    payload = doc["payload"]
    image = payload["before" if payload["op"] == "d" else "after"]
    name = rng.choice(list(image))
    action = rng.randrange(8)
    if action < 4:
        image[name] = rng.choice(MUTANTS)
    elif action == 4:
        del image[name]
    elif action == 5:
        payload["source"][rng.choice(["commit_ts", "db", "table", "ts_ms", "pos", "x"])] = rng.choice(MUTANTS)
    elif action == 6 and payload.get("before") and payload["op"] == "u":
        payload["before"][name] = rng.choice(MUTANTS)
    else:
        field = rng.choice(doc["schema"]["fields"][1]["fields"])
        field[rng.choice(["tidb_type", "type", "name"])] = rng.choice(
            ["int", "bigint unsigned", "decimal(5,1)", "timestamp(2)", "datetime(1)", "int64", "string", None, 5]
        )
    return written(doc)


def test_mutated_messages_decode_column_wise_only_to_the_reference_answers():
    rng = random.Random(20261127)
    nulls = {c.name: None for c in EVERY_TYPE.columns if c.nullable}
    second = {**EVERY_TYPE_ROW, "id": 1, **nulls}
    events: list = [
        RowChange(1 << 18, "insert", EVERY_TYPE, None, EVERY_TYPE_ROW),
        RowChange(2 << 18, "insert", EVERY_TYPE, None, second),
        RowChange(3 << 18, "update", EVERY_TYPE, second, {**second, "c": "now", "yr": 0}),
        RowChange(4 << 18, "delete", EVERY_TYPE, EVERY_TYPE_ROW, None),
    ]
    decoded = 0
    for round_ in range(24):
        options = MUTATED_OPTIONS[round_ % len(MUTATED_OPTIONS)]
        messages = [(m.key, m.value) for m in encode_stream("debezium", events, options=options)]
        batch = list(messages)
        for _ in range(40):
            key, value = rng.choice(messages)
            batch.append((key, mutated(rng, value)))
        decoded += agree_by_columns("debezium", options, batch, reference_of(batch, options))
        assert silver_rows("debezium", batch, options, True) == silver_rows("debezium", batch, options, False)
    assert decoded > 24 * len(messages)  # the untouched messages, and mutants of the usual form


KEYED = keyed_table(Column("u", "bigint unsigned"))


def test_keys_json_escapes_an_unsplit_key_change_and_a_bad_value_that_costs_only_its_message():
    keys = ODD_KEYS
    events: list = [Ddl(TS, "shop", "odd keys", create_table_sql(KEYED), "create_table", table_after=KEYED)]
    rows = [
        {
            "k": k,
            "n": i - 3,
            "v": None if i % 2 else k,
            "b": bytes([i, 255]),
            "f": 1.1 * i,
            "e": "b",
            "u": 2**64 - 1 - i,
        }
        for i, k in enumerate(keys)
    ]
    for i, row in enumerate(rows):
        events.append(RowChange(TS + (i + 1 << 18), "insert", KEYED, None, row))
    moved = {**rows[1], "k": 'moved "key"'}
    events.append(RowChange(TS + (20 << 18), "update", KEYED, rows[1], moved))
    events.append(RowChange(TS + (21 << 18), "delete", KEYED, rows[2], None))
    events.append(Watermark(TS + (30 << 18)))
    option = {"enable-tidb-extension": True, "output-raw-change-event": True}
    messages: list[tuple[Any, Any]] = [(m.key, m.value) for m in encode_stream("debezium", events, options=option)]
    assert len(messages) == 12
    messages[4] = (messages[4][0], edited(messages[4][1], ["payload", "after", "n"], "zero"))
    options = decoder_options(option)
    column_wise = silver_rows("debezium", messages, options, True)
    assert column_wise == silver_rows("debezium", messages, options, False)
    quarantined = [r for r in column_wise if r["kind"] == "quarantine"]
    assert [(r["offset"], r["reason"]) for r in quarantined] == [
        (4, "debezium: bad value 'zero': expected an integer, got 'zero' (at payload.after.n)")
    ]
    changes = [(r["offset"], r["event_index"], r["op"], r["row_key"]) for r in column_wise if r["kind"] == "row"]
    assert changes == [
        (1, 0, "insert", '["plain","-3"]'),
        (2, 0, "insert", '["quote \\" inside","-2"]'),
        (3, 0, "insert", '["back\\\\slash","-1"]'),
        (5, 0, "insert", '["nul\\u0000","1"]'),
        (6, 0, "insert", '["日本語 😀","2"]'),
        (7, 0, "insert", '["\u2028","3"]'),
        (8, 0, "insert", '["\x7f","4"]'),
        (9, 0, "delete", '["quote \\" inside","-2"]'),  # the key change, split
        (9, 1, "insert", '["moved \\"key\\"","-2"]'),
        (10, 0, "delete", '["back\\\\slash","-1"]'),
    ]
    split = [r for r in column_wise if "key_change_split" in r["flags"]]
    assert [r["after"] for r in split] == [None, {**split[0]["before"], "k": 'moved "key"'}]
    by_key = {r["row_key"]: r for r in column_wise if r["kind"] == "row"}
    assert by_key['["plain","-3"]']["after"]["u"] == "18446744073709551615"
    decoder = column_decoder(make_decoder("debezium", options))
    assert decoder is not None
    result = decoder.decode_columns([key for key, _ in messages], [value for _, value in messages])
    assert result.row_wise == [0, 4, len(messages) - 1]  # the CREATE TABLE, the bad value, the watermark
    assert [len(block) for block in result.blocks] == [9]


def test_a_double_beyond_decimal_digits_at_its_scale_is_a_decode_error_on_both_paths():
    value = edited(SCALED, ["payload", "after", "dec"], 1e70)
    with pytest.raises(DecodeError) as err:
        make_decoder("debezium", {}).decode(KEY, value)
    assert err.value.where == "payload.after.dec"
    messages = [(KEY, value), (KEY, SCALED)]
    assert agree_by_columns("debezium", {}, messages, reference_of(messages, {})) == 1  # the good one
