"""The column path against the row-wise reference: the same events from the codec, the same silver rows.

Random tables over every type and random streams (inserts, updates that may change the key, deletes, NULLs) are
encoded in each protocol with a column path, with every option that shapes a row message, and decoded
column-wise and one by one. The codec's
blocks must give exactly the reference's events; `decode_batches` must give exactly the rows it gives row-wise,
with bad messages in the batch quarantined alike and costing nothing to the rest.
"""

from __future__ import annotations

from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_jobs.codecs import PROTOCOLS, column_decoder, columns, make_decoder
from tests.codecs.helpers import ODD_KEYS, agree_by_columns, changefeed_decoder, keyed_table, silver_rows
from tests.codecs.test_cross_protocol import streams
from ticdc_devkit.simulator.model import Bootstrap, Column, Ddl, RowChange, Table, Watermark
from ticdc_devkit.simulator.stream import encode_stream
from ticdc_devkit.simulator.workload import create_table_sql

# per protocol with a column path: the changefeed options that shape a row message, and malformed messages
# (not Kafka's), each quarantined by the row-wise decoder with its reason
OPTIONS = {
    "canal-json": [
        {},
        {"enable-tidb-extension": True},
        {"enable-tidb-extension": True, "only-output-updated-columns": True},
        {"content-compatible": True},
        {"enable-tidb-extension": True, "time-zone": "Asia/Shanghai"},
        {"enable-tidb-extension": True, "time-zone": "America/New_York", "output-raw-change-event": True},
        {"output-raw-change-event": True, "only-output-updated-columns": True},
        {"enable-tidb-extension": True, "delete-only-output-handle-key-columns": True},
    ],
    "simple-json": [
        {},
        {"time-zone": "Asia/Shanghai"},
        {"output-raw-change-event": True, "time-zone": "America/New_York"},
        {"integrity-check-level": "correctness"},
        {"integrity-check-level": "correctness", "verify-checksums": False},
    ],
}
BAD_VALUES = {
    "canal-json": [
        b"",
        b"not json",
        b'{"database":"shop","table":"t","isDdl":false,"type":"INSERT","es":1,"mysqlType":{"id":"int"},'
        b'"data":[{"id":"x"}]}',
        b'{"database":"shop","table":"t","isDdl":false,"type":"INSERT","es":1,"mysqlType":{"id":"int"},"data":[]}',
        b'{"database":"shop","table":"t","isDdl":false,"type":"UPDATE","es":1,"mysqlType":{"id":"int"},'
        b'"data":[{"id":"1"}],"old":[{"id":"1"},{"id":"2"}]}',
        b'{"database":"shop","table":"t","isDdl":false,"type":"UPDATE","es":1,"mysqlType":{"id":"int"},'
        b'"data":[{"id":"1"}],"old":[{"id":"x"}]}',
    ],
    "simple-json": [
        b"",
        b"[1]",
        b'{"version":1,"type":"INSERT","database":"a","table":"a","schemaVersion":1,"commitTs":1,"data":{}}',
        b'{"version":2,"type":"INSERT","database":"a","table":"a","schemaVersion":1,"commitTs":1,"data":{}}',
    ],
}
ENCODER_ONLY = {"output-raw-change-event", "integrity-check-level", "delete-only-output-handle-key-columns"}


def decoder_options(options: dict) -> dict:
    return {k: v for k, v in options.items() if k not in ENCODER_ONLY}


@st.composite
def cases(draw):
    protocol = draw(st.sampled_from(sorted(OPTIONS)))
    option = draw(st.sampled_from(OPTIONS[protocol]))
    bad = draw(st.lists(st.sampled_from(BAD_VALUES[protocol]), max_size=3))
    return protocol, option, bad


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(events=streams(), case=cases(), bad_at=st.integers(0, 1000), chunk=st.sampled_from([columns.CHUNK, 1, 2, 5]))
def test_the_column_path_gives_the_reference_answers(events, case, bad_at, chunk):
    """Small chunks make a stream of a few messages span many: each chunk is read first as the shape of the one
    before it, and falls back when it is not (a DDL, another table, a bad message)."""
    with mock.patch.object(columns, "CHUNK", chunk):
        the_column_path_gives_the_reference_answers(events, case, bad_at)


def the_column_path_gives_the_reference_answers(events, case, bad_at):
    protocol, option, bad = case
    messages = encode_stream(protocol, events, options=dict(option))
    values = [m.value for m in messages]
    for value in bad:  # anywhere in the stream: a bad message costs nothing to those around it
        values.insert(bad_at % (len(values) + 1), value)
    options = decoder_options(option)
    decoder = changefeed_decoder(protocol, options)  # one, in order: Simple learns its schemas as it goes
    reference = {}
    for i, value in enumerate(values):
        try:
            reference[i] = [e.to_dict() for e in decoder.decode(None, value)]
        except Exception:
            reference[i] = None
    pairs = [(None, v) for v in values]
    decoded = agree_by_columns(protocol, options, pairs, reference)
    row_wise_only = {"handle_key_only", "claim_check"}
    plain = [
        i
        for i, got in reference.items()
        if got and all(e["kind"] == "row" and not row_wise_only & set(e["flags"]) for e in got)
    ]
    checked = option.get("integrity-check-level") and options.get("verify-checksums", True)
    assert decoded >= (0 if checked else len(plain)), "every row message of the usual form decodes column-wise"
    assert silver_rows(protocol, pairs, options, True) == silver_rows(protocol, pairs, options, False)


KEYED = keyed_table()


def test_row_keys_escape_as_json_does_and_bad_values_cost_only_their_message():
    keys = ODD_KEYS
    ts = 1_763_900_000_000 << 18
    events: list = [Ddl(ts, "shop", "odd keys", create_table_sql(KEYED), "create_table", table_after=KEYED)]
    rows = [
        {"k": k, "n": i - 3, "v": None if i % 2 else k, "b": bytes([i, 255]), "f": 1.1 * i, "e": "b"}
        for i, k in enumerate(keys)
    ]
    for i, row in enumerate(rows):
        events.append(RowChange(ts + (i + 1 << 18), "insert", KEYED, None, row))
    moved = {**rows[1], "k": 'moved "key"'}
    events.append(RowChange(ts + (20 << 18), "update", KEYED, rows[1], moved))
    events.append(RowChange(ts + (21 << 18), "delete", KEYED, rows[2], None))
    events.append(Watermark(ts + (30 << 18)))
    options = {"enable-tidb-extension": True, "output-raw-change-event": True}
    values = [m.value for m in encode_stream("canal-json", events, options=dict(options))]
    bad = values[3].replace(b'"n":"-1"', b'"n":"zero"')
    assert bad != values[3]
    values.insert(4, bad)
    options = decoder_options(options)
    pairs = [(None, v) for v in values]
    column_wise = silver_rows("canal-json", pairs, options, True)
    assert column_wise == silver_rows("canal-json", pairs, options, False)
    quarantined = [r for r in column_wise if r["kind"] == "quarantine"]
    assert [(r["offset"], r["reason"]) for r in quarantined] == [
        (4, "canal-json: bad value for column 'n': not an integer: 'zero' (at data[0].n)")
    ]
    by_key = {r["row_key"]: r for r in column_wise if r["kind"] == "row"}
    assert '["quote \\" inside","-2"]' in by_key
    assert '["back\\\\slash","-1"]' in by_key
    assert '["tab\\there","0"]' in by_key
    assert '["nul\\u0000","1"]' in by_key
    assert '["日本語 😀","2"]' in by_key
    split = [r for r in column_wise if "key_change_split" in r["flags"]]
    assert [(r["op"], r["row_key"], r["event_index"]) for r in split] == [
        ("delete", '["quote \\" inside","-2"]', 0),
        ("insert", '["moved \\"key\\"","-2"]', 1),
    ]
    decoder = column_decoder(make_decoder("canal-json", options))
    assert decoder is not None
    result = decoder.decode_columns([None] * len(values), values)
    assert result.row_wise == [0, 4, len(values) - 1]  # the CREATE TABLE, the bad value, the watermark


@pytest.mark.parametrize("protocol", sorted(OPTIONS))
def test_a_chunk_of_another_shape_than_the_one_before_it_keeps_its_own(protocol):
    """A chunk is read first as the shape of the chunk before it. A chunk of another table whose rows have the same
    column names, or of the same table after a column's type changed, must still be decoded as its own shape."""

    def table(name: str, kind: str, version: int) -> Table:
        columns = (Column("id", "int", nullable=False), Column("v", kind))
        return Table("shop", name, columns, key=("id",), table_id=7 if name == "a" else 8, schema_version=version)

    ts = 1_763_900_000_000 << 18
    first, other, widened = table("a", "int", ts), table("b", "varchar(8)", ts), table("a", "bigint", ts + (9 << 18))
    events: list = []
    for n, shape in enumerate((first, other, first, widened)):
        if n == 0 or shape is other:
            events.append(Ddl(ts, "shop", shape.name, create_table_sql(shape), "create_table", table_after=shape))
        if shape is widened:
            events.append(
                Ddl(ts + (9 << 18), "shop", "a", "ALTER TABLE a MODIFY v bigint", "modify_column", table_after=widened)
            )
        for i in range(3):
            ts += 1 << 18
            events.append(RowChange(ts + (10 << 18), "insert", shape, None, {"id": 10 * n + i, "v": 3 * n + i}))
    option = OPTIONS[protocol][1] if protocol == "canal-json" else OPTIONS[protocol][0]
    messages = encode_stream(protocol, events, options=dict(option))
    options = decoder_options(option)
    decoder = changefeed_decoder(protocol, options)
    reference = {i: [e.to_dict() for e in decoder.decode(None, m.value)] for i, m in enumerate(messages)}
    pairs = [(None, m.value) for m in messages]
    with mock.patch.object(columns, "CHUNK", 3):
        decoded = agree_by_columns(protocol, options, pairs, reference)
    rows = [i for i, got in reference.items() if got and got[0]["kind"] == "row"]
    assert decoded == len(rows) == 12
    tables = [reference[i][0]["table"] for i in rows]
    assert tables == ["a"] * 3 + ["b"] * 3 + ["a"] * 6


def test_every_protocol_decodes_column_wise():
    for protocol in PROTOCOLS:
        options = {"schema-registry-url": "http://127.0.0.1:1"} if protocol == "avro" else {}
        assert column_decoder(make_decoder(protocol, options)) is not None, protocol


@pytest.mark.parametrize("protocol", ["canal-json", "debezium", "open", "simple-json"])
def test_a_name_that_is_not_utf8_is_quarantined_and_costs_only_its_message(protocol):
    table = Table("shop", "t", (Column("id", "int", nullable=False), Column("v", "varchar(8)")), key=("id",))
    ts = 1_763_900_000_000 << 18
    events: list = [Ddl(ts, "shop", "t", create_table_sql(table), "create_table", table_after=table)]
    if protocol == "simple-json":
        events.append(Bootstrap(table))
    events += [RowChange(ts + (i << 18), "insert", table, None, {"id": i, "v": f"v{i}"}) for i in (1, 2, 3)]
    pairs = [(m.key, m.value) for m in encode_stream(protocol, events, options={})]
    broken = next(i for i, (_, value) in enumerate(pairs) if b'"v2"' in value)  # Open's may hold all three
    whole = [r for r in silver_rows(protocol, pairs, {}, False) if r["kind"] == "row" and r["offset"] != broken]
    key, value = pairs[broken]
    pairs[broken] = (key and key.replace(b"shop", b"sh\xffp"), value.replace(b"shop", b"sh\xffp"))
    rows = silver_rows(protocol, pairs, {}, True)
    assert rows == silver_rows(protocol, pairs, {}, False)
    assert [r for r in rows if r["kind"] == "row"] == whole
    assert [r["offset"] for r in rows if r["kind"] == "quarantine"] == [broken]


def test_a_commit_ts_past_a_signed_64_bit_tso_is_quarantined_not_a_failed_task():
    row = (
        b'{"database":"shop","table":"t","pkNames":["id"],"isDdl":false,"type":"INSERT","es":1,'
        b'"mysqlType":{"id":"int"},"data":[{"id":"1"}],"_tidb":{"commitTs":%d}}'
    )
    values = [row % ((1 << 63) - 1), row % (1 << 63)]
    options = {"enable-tidb-extension": True}
    pairs = [(None, v) for v in values]
    rows = silver_rows("canal-json", pairs, options, True)
    assert rows == silver_rows("canal-json", pairs, options, False)
    assert [(r["offset"], r["kind"], r["commit_ts"]) for r in rows] == [
        (0, "row", (1 << 63) - 1),
        (1, "quarantine", None),
    ]
    assert "commit ts beyond a TSO's range" in rows[1]["reason"]


@pytest.mark.parametrize("protocol", sorted(OPTIONS))
def test_a_column_name_msgspec_cannot_take_goes_row_wise(protocol):
    table = Table("shop", "t", (Column("id", "int", nullable=False), Column('dq"col\\', "varchar(8)")), key=("id",))
    ts = 1_763_900_000_000 << 18
    events: list = [Ddl(ts, "shop", "t", create_table_sql(table), "create_table", table_after=table)]
    if protocol == "simple-json":
        events.append(Bootstrap(table))
    events += [RowChange(ts + (i << 18), "insert", table, None, {"id": i, 'dq"col\\': f"v{i}"}) for i in (1, 2)]
    pairs = [(m.key, m.value) for m in encode_stream(protocol, events, options={})]
    rows = silver_rows(protocol, pairs, {}, True)
    assert rows == silver_rows(protocol, pairs, {}, False)
    assert [r["after"] for r in rows if r["kind"] == "row"] == [
        {"id": "1", 'dq"col\\': "v1"},
        {"id": "2", 'dq"col\\': "v2"},
    ]


@pytest.mark.parametrize("verify", [True, False])
def test_a_simple_row_in_a_chunk_read_in_one_pass_is_still_checked_and_sent_row_wise_when_it_must_be(verify):
    """Simple-JSON reads a chunk in one pass as the schema of the chunk before it. A row with a checksum to verify
    (here the changefeed turned its integrity check on mid-stream), or one marked handle-key-only, must still go
    row-wise there: a tampered row to quarantine, a handle-key-only row to its lookup (not configured here)."""
    table = Table("shop", "t", (Column("id", "int", nullable=False), Column("v", "varchar(8)")), key=("id",))
    ts = 1_763_900_000_000 << 18
    events: list = [Ddl(ts, "shop", "t", create_table_sql(table), "create_table", table_after=table)]
    events += [RowChange(ts + (i << 18), "insert", table, None, {"id": i, "v": f"v{i}"}) for i in range(1, 9)]
    plain = [m.value for m in encode_stream("simple-json", events, options={})]
    checked = [m.value for m in encode_stream("simple-json", events, options={"integrity-check-level": "correctness"})]
    values = plain[:5] + checked[5:]
    assert b'"checksum"' not in values[4] and b'"checksum"' in values[5]
    values[2] = values[2].replace(b',"data":', b',"handleKeyOnly":true,"data":')
    values[5] = values[5].replace(b'"v":"v5"', b'"v":"v?"')  # its checksum no longer matches
    assert b"handleKeyOnly" in values[2] and b'"v?"' in values[5]
    column_wise, row_wise = in_chunks_of_two("simple-json", values, {"verify-checksums": verify})
    quarantined = {r["offset"]: r["reason"] for r in column_wise if r["kind"] == "quarantine"}
    assert quarantined[2].startswith("handle-key-only: the message holds only the key")
    if verify:
        assert set(quarantined) == {2, 5}
        assert quarantined[5].startswith("simple-json: row checksum mismatch: shop.t new image")
        assert row_wise == [0, 2, 5, 6, 7, 8]  # the DDL, the handle-key-only row, every row with a checksum
    else:
        assert set(quarantined) == {2}
        assert row_wise == [0, 2]


def test_a_canal_value_not_text_in_a_chunk_read_in_one_pass_is_quarantined_alone():
    """Canal-JSON reads a chunk in one pass as the shape of the chunk before it. A number, an object or a boolean
    where a value must be text or null, in `data` or `old`, must still be quarantined with the row-wise decoder's
    reason, and cost nothing to the rows around it."""
    table = Table("shop", "t", (Column("id", "int", nullable=False), Column("v", "varchar(8)")), key=("id",))
    ts = 1_763_900_000_000 << 18
    events: list = [Ddl(ts, "shop", "t", create_table_sql(table), "create_table", table_after=table)]
    events += [RowChange(ts + (i << 18), "insert", table, None, {"id": i, "v": f"v{i}"}) for i in range(1, 10)]
    events.append(RowChange(ts + (10 << 18), "update", table, {"id": 9, "v": "v9"}, {"id": 9, "v": "w9"}))
    options = {"enable-tidb-extension": True}
    values = [m.value for m in encode_stream("canal-json", events, options=dict(options))]
    values[3] = values[3].replace(b'"v":"v3"', b'"v":3')
    values[6] = values[6].replace(b'"v":"v6"', b'"v":{"text":"v6"}')
    values[7] = values[7].replace(b'"id":"7"', b'"id":true')
    values[10] = values[10].replace(b'"old":[{"id":"9","v":"v9"}]', b'"old":[{"id":"9","v":9.5}]')
    assert values[10].count(b"9.5") == 1
    column_wise, row_wise = in_chunks_of_two("canal-json", values, options)
    assert row_wise == [0, 3, 6, 7, 10]  # the DDL and the four messages with a value not text
    quarantined = {r["offset"]: r["reason"] for r in column_wise if r["kind"] == "quarantine"}
    assert quarantined == {
        3: "canal-json: value of column 'v' must be a string or null, got 3 (at data[0].v)",
        6: 'canal-json: value of column \'v\' must be a string or null, got {"text":"v6"} (at data[0].v)',
        7: "canal-json: value of column 'id' must be a string or null, got true (at data[0].id)",
        10: "canal-json: value of column 'v' must be a string or null, got 9.5 (at old[0].v)",
    }
    assert [r["after"]["v"] for r in column_wise if r["kind"] == "row"] == [f"v{i}" for i in (1, 2, 4, 5, 8, 9)]


def in_chunks_of_two(protocol: str, values: list[bytes], options: dict) -> tuple[list, list[int]]:
    """Silver's rows of `values` decoded column-wise two messages a chunk (each chunk read first as the shape of
    the one before it), checked equal to the row-wise decode's; and which messages the column path left to it."""
    pairs = [(None, v) for v in values]
    with mock.patch.object(columns, "CHUNK", 2):
        column_wise = silver_rows(protocol, pairs, options, True)
        decoder = column_decoder(make_decoder(protocol, options))
        assert decoder is not None
        row_wise = decoder.decode_columns([None] * len(values), values).row_wise
    assert column_wise == silver_rows(protocol, pairs, options, False)
    return column_wise, row_wise
