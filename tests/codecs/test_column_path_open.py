"""The Open Protocol's column path against its row-wise reference: the same events, the same silver rows.

Random tables over every type and random streams (inserts, updates that may change the key, deletes, NULLs) are
encoded with every Open option that shapes a row message (several rows per message, old values off or only the
updated columns, time zones, unsplit key changes, handle-key-only large messages, compression), with hand-made
messages among them (malformed ones, values a converter rejects, integers beyond 64 bits, unusual forms
`decode` takes), and decoded column-wise and one by one. The codec's blocks must give exactly the reference's
events; `decode_batches` must give exactly the rows it gives row-wise, with bad messages quarantined alike and
costing nothing to the rest.
"""

from __future__ import annotations

import json
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_jobs.codecs import column_decoder, make_decoder
from spark_jobs.codecs.open_protocol import OpenDecoder, split_items
from tests.codecs.helpers import EVERY_TYPE, EVERY_TYPE_ROW, ODD_KEYS, agree_by_columns, keyed_table, silver_rows
from tests.codecs.test_cross_protocol import streams
from ticdc_devkit.simulator.model import Column, Ddl, RowChange, Watermark
from ticdc_devkit.simulator.stream import encode_stream
from ticdc_devkit.simulator.workload import create_table_sql

OPEN_OPTIONS = [
    {},
    {"enable-old-value": False},
    {"only-output-updated-columns": True},
    {"delete-only-output-handle-key-columns": True},
    {"time-zone": "Asia/Shanghai"},
    {"time-zone": "America/New_York", "output-raw-change-event": True},
    {"output-raw-change-event": True, "only-output-updated-columns": True, "max-batch-size": 3},
    {"max-batch-size": 1, "time-zone": "Europe/London"},
    {"max-message-bytes": 700, "large-message-handle-option": "handle-key-only"},
    {"large-message-handle-compression": "lz4"},  # the column path leaves compressed messages to `decode`
]
VERSION = (1).to_bytes(8, "big")


def framed(*items: bytes) -> bytes:
    return b"".join(len(item).to_bytes(8, "big") + item for item in items)


def row_message(*values: bytes, table: bytes = b"hand") -> tuple[bytes, bytes]:
    key = b'{"ts":434000000000000000,"scm":"shop","tbl":"' + table + b'","t":1}'
    return VERSION + framed(*[key] * len(values)), framed(*values)


ID = b'"id":{"t":3,"h":true,"f":11,"v":7}'
# not Kafka's: hand-made messages, malformed ones (each quarantined by `decode` with its reason) among them
HAND_MADE = [
    (None, None),
    (VERSION + framed(b'{"ts":1,"scm":"shop","tbl":"hand","t":1}'), b""),
    (VERSION[:7], framed(b"{}")),
    ((2).to_bytes(8, "big") + framed(b'{"ts":1,"t":3}'), framed(b"")),
    row_message(b"not json"),
    row_message(b'{"u":{' + ID + b',"x":{"t":99,"f":0,"v":1}}}'),  # an unknown type code
    row_message(b'{"u":{' + ID + b',"x":{"t":7,"f":1,"v":"2024-02-30 10:00:00"}}}'),  # no such day
    row_message(b'{"u":{' + ID + b',"x":{"t":15,"f":1,"v":"\\\\q"}}}'),  # no such Go escape
    row_message(b'{"u":{' + ID + b',"x":{"t":252,"f":0,"v":"!!"}}}'),  # not base64
    row_message(b'{"u":{' + ID + b',"x":{"t":8,"f":129,"v":18446744073709551616}}}'),  # beyond 64 bits
    row_message(b'{"u":{' + ID + b',"x":{"t":8,"f":129,"v":18446744073709551615}}}'),
    row_message(b'{"u":{' + ID + b',"x":{"t":3,"f":128,"v":-1}}}'),  # unsigned sent negative
    row_message(b'{"u":{' + ID + b',"x":{"t":3,"f":0,"v":"12"}}}'),  # a number as a string, kept as sent
    row_message(b'{"u":{' + ID + b',"x":{"t":3,"v":5}}}'),  # no flag, as the published examples
    row_message(b'{"u":{' + ID + b"}}", b'{"d":{' + ID + b"}}", b'{"u":{' + ID + b'},"p":{' + ID + b"}}"),
    row_message(b'{"u":{' + ID + b"}}", b'{"u":{' + ID + b"}}", table=b"other"),
    row_message(b'{"u":{' + ID + b'},"p":{' + ID + b',"y":{"t":3,"f":0,"v":1}}}'),  # `p` has a column `u` lacks
    row_message(b'{"u":{' + ID + b'},"p":{}}'),
    row_message(b'{"p":{' + ID + b"}}"),  # neither `u` nor `d`
    row_message(b'{"u":{"a":{"t":3,"h":true,"f":11,"v":1},"b":{"t":3,"h":true,"f":11,"v":2}}}'),
    row_message(b'{"u":{"b":{"t":3,"h":true,"f":11,"v":2},"a":{"t":3,"h":true,"f":11,"v":1}}}'),  # key order
    (
        VERSION + framed(b'{"ts":1,"scm":"shop","tbl":"hand","t":1}', b'{"ts":2,"t":3}'),
        framed(b'{"u":{' + ID + b"}}", b""),
    ),
    row_message(b'{"u":{' + ID + b',"a\\"b":{"t":3,"f":0,"v":1}}}'),  # a name msgspec takes for no field
    row_message(b'{"u":{' + ID + b',"x":{"t":245,"f":0,"v":' + b"[" * 2000 + b"]" * 2000 + b"}}}"),  # too deep
    (VERSION + framed(b'{"ts":1,"t":1,"x":' + b"[" * 2000 + b"]" * 2000 + b"}"), framed(b'{"u":{' + ID + b"}}")),
    (VERSION + framed(b'{"ts":1,"scm":"shop","tbl":"hand","ptn":7,"rid":1,"t":1}'), framed(b'{"u":{' + ID + b"}}")),
    (VERSION + framed(b'{"ts":1,"scm":"shop","tbl":"hand","t":1,"new":0}'), framed(b'{"u":{' + ID + b"}}")),
]


def decoder_options(options: dict) -> dict:
    return {k: v for k, v in options.items() if k in OpenDecoder.OPTIONS}


def reference_of(messages: list[tuple[bytes | None, bytes | None]], options: dict) -> dict[int, list[dict] | None]:
    decoder = make_decoder("open", options)
    reference: dict[int, list[dict] | None] = {}
    for i, (key, value) in enumerate(messages):
        try:
            reference[i] = [e.to_dict() for e in decoder.decode(key, value)]
        except Exception:
            reference[i] = None
    return reference


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    events=streams(),
    option=st.sampled_from(OPEN_OPTIONS),
    hand_made=st.lists(st.sampled_from(HAND_MADE), max_size=4),
    at=st.integers(0, 1000),
)
def test_the_column_path_gives_the_reference_answers(events, option, hand_made, at):
    stream = [(m.key, m.value) for m in encode_stream("open", events, options=dict(option))]
    messages = list(stream)
    where = at % (len(messages) + 1)
    messages[where:where] = hand_made  # anywhere in the stream: they cost nothing to those around them
    options = decoder_options(option)
    reference = reference_of(messages, options)
    decoded = agree_by_columns("open", options, messages, reference)
    plain = [
        i
        for i, got in reference.items()
        if (i < where or i >= where + len(hand_made))
        and got
        and all(e["kind"] == "row" and "handle_key_only" not in e["flags"] for e in got)
        and len({tuple(e["column_types"]) for e in got}) == 1  # one shape: not a key-only delete among full rows
    ]
    compressed = options.get("large-message-handle-compression", "none") != "none"
    assert decoded >= (0 if compressed else len(plain)), "every row message of the usual form decodes column-wise"
    assert silver_rows("open", messages, options, True) == silver_rows("open", messages, options, False)


def test_items_read_in_one_decode_are_each_read_alone():
    """A chunk's row keys and value items are decoded as one JSON array; an item that is not one JSON value by
    itself, however it would read joined with its neighbours, still goes row-wise, and costs the rest nothing."""
    good = row_message(b'{"u":{' + ID + b"}}")
    two_in_one = row_message(b'{"u":{' + ID + b'}},{"u":{' + ID + b"}}", b'{"u":{' + ID + b"}}")
    open_object = row_message(b'{"u":{' + ID + b"}", b'{"p":{' + ID + b"}}")
    open_key = row_message(b'{"u":{' + ID + b"}", b'"p":{' + ID + b"}}")  # joined, one update and two items
    open_string = row_message(b'{"u":{' + ID + b',"x":{"t":15,"f":0,"v":"a}}', b'{"u":{' + ID + b'}}"}}}')
    spaced = row_message(b' {"u":{' + ID + b"}}\n")
    key = b'{"ts":1,"scm":"shop","tbl":"hand","t":1}'
    two_keys_in_one = (VERSION + framed(key + b"," + key), framed(b'{"u":{' + ID + b"}}"))
    messages = [good, two_in_one, open_object, open_key, open_string, spaced, two_keys_in_one, good]
    reference = reference_of(messages, {})
    assert [i for i, events in reference.items() if events is None] == [1, 2, 3, 4, 6]
    assert agree_by_columns("open", {}, messages, reference) == 3
    balanced = [good, two_in_one, open_key, good]  # joined: one value too many, one too few, as many as items
    assert agree_by_columns("open", {}, balanced, reference_of(balanced, {})) == 2


def test_a_key_of_several_columns_is_in_the_order_of_each_image():
    in_order = row_message(b'{"u":{"a":{"t":3,"h":true,"f":11,"v":1},"b":{"t":3,"h":true,"f":11,"v":2}}}')
    swapped = row_message(b'{"u":{"b":{"t":3,"h":true,"f":11,"v":2},"a":{"t":3,"h":true,"f":11,"v":1}}}')
    messages = [in_order, swapped, in_order]
    reference = reference_of(messages, {})
    assert [events[0]["key_columns"] for events in reference.values() if events] == [["a", "b"], ["b", "a"], ["a", "b"]]
    assert agree_by_columns("open", {}, messages, reference) == 2  # the swapped one row-wise


KEYED = keyed_table(Column("u", "bigint unsigned"))


def with_item(message: tuple[bytes, bytes], index: int, value: bytes) -> tuple[bytes, bytes]:
    """The message with its `index`-th value item replaced."""
    key, whole = message
    items = [bytes(item) for item in split_items(whole, 0, "value")]
    items[index] = value
    return key, framed(*items)


def test_several_rows_per_message_a_bad_value_costs_only_its_message_and_key_changes_split():
    keys = ODD_KEYS
    ts = 1_763_900_000_000 << 18
    events: list = [Ddl(ts, "shop", "odd keys", create_table_sql(KEYED), "create_table", table_after=KEYED)]
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
        events.append(RowChange(ts + (i + 1 << 18), "insert", KEYED, None, row))
    moved = {**rows[1], "k": 'moved "key"'}
    events.append(RowChange(ts + (20 << 18), "update", KEYED, rows[1], moved))
    events.append(RowChange(ts + (21 << 18), "delete", KEYED, rows[2], None))
    events.append(Watermark(ts + (30 << 18)))
    option = {"output-raw-change-event": True, "max-batch-size": 4}
    messages = [(m.key, m.value) for m in encode_stream("open", events, options=option)]
    assert [len(split_items(value, 0, "value")) for _, value in messages] == [1, 4, 4, 2, 1]
    bad_item = bytes(split_items(messages[2][1], 0, "value")[1]).replace(b'"v":"\\\\x05\\\\xff"', b'"v":"\\\\q"')
    messages[2] = with_item(messages[2], 1, bad_item)
    options = decoder_options(option)
    column_wise = silver_rows("open", messages, options, True)
    assert column_wise == silver_rows("open", messages, options, False)
    quarantined = [r for r in column_wise if r["kind"] == "quarantine"]
    assert [(r["offset"], r["reason"]) for r in quarantined] == [
        (2, "open: bad value '\\\\q' for type code 15: unknown escape \\q (at value item 1.u.b.v)")
    ]
    changes = [(r["offset"], r["event_index"], r["op"], r["row_key"]) for r in column_wise if r["kind"] == "row"]
    assert changes == [
        (1, 0, "insert", '["plain","-3"]'),
        (1, 1, "insert", '["quote \\" inside","-2"]'),
        (1, 2, "insert", '["back\\\\slash","-1"]'),
        (1, 3, "insert", '["tab\\there","0"]'),
        (3, 0, "delete", '["quote \\" inside","-2"]'),  # the key change, split
        (3, 1, "insert", '["moved \\"key\\"","-2"]'),
        (3, 2, "delete", '["back\\\\slash","-1"]'),
    ]
    split = [r for r in column_wise if "key_change_split" in r["flags"]]
    assert [r["after"] for r in split] == [None, {**split[0]["before"], "k": 'moved "key"'}]
    by_key = {r["row_key"]: r for r in column_wise if r["kind"] == "row"}
    assert by_key['["plain","-3"]']["after"]["u"] == "18446744073709551615"
    decoder = column_decoder(make_decoder("open", options))
    assert decoder is not None
    result = decoder.decode_columns([key for key, _ in messages], [value for _, value in messages])
    assert result.row_wise == [0, 2, len(messages) - 1]  # the CREATE TABLE, the bad value, the watermark
    assert [len(block) for block in result.blocks] == [6]


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
    "",
    "x",
    "12",
    "-5",
    "007",
    "1.50",
    "-0.00",
    "2024-01-01 10:00:00",
    "2024-02-30 10:00:00",
    "2024-01-01 10:00:60",
    "2024-01-01 24:00:00",
    "0000-00-00 00:00:00",
    "1900-01-01 00:00:00",
    "2024-03-10 02:30:00",
    "2024-11-03 01:30:00.5",
    "2024-01-01 10:00:00.1234567",
    "2024-01-01T10:00:00",
    "AAAA",
    "QR==",
    "QQ==",
    "/w==",
    "!!",
    "\\x41",
    "\\q",
    "\\u00e9\\377",
    "é",
    "\u2028",
    [1],
    {"a": 1},
]
ZONES = ["UTC", "Asia/Shanghai", "America/New_York", "Australia/Lord_Howe", "+05:45", "Europe/Amsterdam"]


def mutated(rng: random.Random, value: bytes) -> bytes:
    """A value item with one thing changed in a column of its image: its value, code, flag or handle mark, a
    field dropped or added, the column dropped or moved to the front, or the image's `p` trimmed."""
    doc = json.loads(value)
    image = doc["d" if "d" in doc else "u"]
    name = rng.choice(list(image))
    column = image[name]
    action = rng.randrange(8)
    if action < 3:
        column["v"] = rng.choice(MUTANTS)
    elif action == 3:
        column[rng.choice("tfh")] = rng.choice([0, 1, 3, 7, 8, 15, 99, 128, 129, 256, True, None, "3", -1])
    elif action == 4:
        del column[rng.choice(list(column))]
    elif action == 5:
        column[rng.choice(["x", "v", "t"])] = 1
    elif action == 6:
        del image[name]
    elif doc.get("p"):
        del doc["p"][rng.choice(list(doc["p"]))]
    else:
        image = {name: image.pop(name), **image}
        doc["d" if "d" in doc else "u"] = image
    return json.dumps(doc, ensure_ascii=False).encode()


def mutated_key(rng: random.Random, key: bytes) -> bytes:
    """A key item with one field set to another value, dropped, or added. Not a commit ts past int64: `decode`
    takes one up to uint64's greatest, which silver's int64 `commit_ts` cannot hold."""
    doc = json.loads(key)
    field = rng.choice(["ts", "scm", "tbl", "t", "ohk", "ccl", "ptn", "rid", "x"])
    if field in doc and rng.random() < 0.3:
        del doc[field]
    else:
        doc[field] = rng.choice([v for v in [*MUTANTS, 2, 3, "shop"] if field != "ts" or v not in (2**63, 2**64 - 1)])
    return json.dumps(doc, ensure_ascii=False).encode()


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
    for round_ in range(40):
        zone = ZONES[round_ % len(ZONES)]
        option = {"time-zone": zone, "only-output-updated-columns": round_ % 4 == 1, "max-batch-size": 2}
        messages = [(m.key, m.value) for m in encode_stream("open", events, options=option)]
        batch = list(messages)
        for _ in range(30):
            key, value = rng.choice(messages)
            heads = [bytes(item) for item in split_items(key, 8, "key")]
            items = [bytes(item) for item in split_items(value, 0, "value")]
            k = rng.randrange(len(items))
            if rng.random() < 0.2:
                heads[k] = mutated_key(rng, heads[k])
            else:
                items[k] = mutated(rng, items[k])
            batch.append((VERSION + framed(*heads), framed(*items)))
        options = decoder_options(option)
        decoded += agree_by_columns("open", options, batch, reference_of(batch, options))
        assert silver_rows("open", batch, options, True) == silver_rows("open", batch, options, False)
    assert decoded > 40 * len(messages)  # the untouched messages, and mutants of the usual form
