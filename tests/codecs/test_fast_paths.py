"""The generated fast paths: switched off by TICDC_CODECS_PRECISE_ONLY, readable in a traceback."""

from __future__ import annotations

import datetime as dt
import inspect
import linecache
import os
import re
import subprocess
import sys
import traceback
from decimal import Decimal

import orjson
import pytest

from spark_jobs.codecs import DecodeError, fast_paths, make_decoder
from spark_jobs.codecs import canal_json as canal_codec
from spark_jobs.codecs.open_protocol import OpenDecoder
from spark_jobs.codecs.simple import _SimpleDecoder
from tests.codecs.helpers import (
    EVERY_TYPE,
    EVERY_TYPE_ROW,
    changefeed_decoder,
    changefeed_options,
    decode_partitions,
)
from ticdc_devkit.simulator.model import Bootstrap, Column, Ddl, RowChange, Table
from ticdc_devkit.simulator.stream import encode_stream
from ticdc_devkit.simulator.workload import create_table_sql

# Where each protocol's precise path starts: called for every row image when fast paths are off.
PRECISE_PATHS = {
    "canal-json": (canal_codec, "_convert_row"),
    "open": (OpenDecoder, "_image"),
    "simple-json": (_SimpleDecoder, "_convert"),
    "simple-avro": (_SimpleDecoder, "_convert"),
}


def _stream() -> list:
    ts = 1_700_000_000_000 << 18
    events: list = [
        Ddl(ts, "shop", "all_types", create_table_sql(EVERY_TYPE), "create_table", table_after=EVERY_TYPE),
        Bootstrap(EVERY_TYPE),
    ]
    rows = [{**EVERY_TYPE_ROW, "id": i, "dec": Decimal(i).scaleb(-3), "vc": f"row {i}"} for i in range(8)]
    rows += [{**{c.name: None for c in EVERY_TYPE.columns}, "id": 8}]
    updated = [{**row, "vc": "changed", "d": -0.5} for row in rows]
    events += [RowChange(ts + ((1 + i) << 18), "insert", EVERY_TYPE, None, row) for i, row in enumerate(rows)]
    events += [RowChange(ts + ((20 + i) << 18), "update", EVERY_TYPE, rows[i], row) for i, row in enumerate(updated)]
    events.append(RowChange(ts + (40 << 18), "delete", EVERY_TYPE, updated[0], None))
    return events


def _decode_stream(protocol: str) -> dict[int, list[dict]]:
    options = changefeed_options(protocol, registry_url="")
    return decode_partitions(protocol, encode_stream(protocol, _stream(), options=options), options)


@pytest.fixture
def fast_paths_on(monkeypatch):
    """Fast paths on, whatever TICDC_CODECS_PRECISE_ONLY says for the run."""
    monkeypatch.setattr(fast_paths, "PRECISE_ONLY", False)


@pytest.fixture
def generated(monkeypatch) -> list:
    """What every fast_paths.generate call returned during the test."""
    returned = []
    generate = fast_paths.generate

    def recording(*args, **kwargs):
        returned.append(generate(*args, **kwargs))
        return returned[-1]

    monkeypatch.setattr(fast_paths, "generate", recording)
    return returned


def test_the_switch_is_read_from_the_environment():
    code = "from spark_jobs.codecs import fast_paths; print(fast_paths.PRECISE_ONLY)"
    for value, shown in (("1", "True"), ("0", "False"), ("", "False")):
        env = {**os.environ, "TICDC_CODECS_PRECISE_ONLY": value}
        result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert result.stdout.strip() == shown, value


@pytest.mark.parametrize("protocol", sorted(PRECISE_PATHS))
def test_precise_only_generates_nothing_and_decodes_the_same(protocol, fast_paths_on, generated, monkeypatch):
    fast = _decode_stream(protocol)
    assert generated and all(callable(function) for function in generated)

    owner, name = PRECISE_PATHS[protocol]
    precise_calls = []
    precise = getattr(owner, name)

    def counting(*args, **kwargs):
        precise_calls.append(args)
        return precise(*args, **kwargs)

    monkeypatch.setattr(owner, name, counting)
    monkeypatch.setattr(fast_paths, "PRECISE_ONLY", True)
    generated.clear()
    assert _decode_stream(protocol) == fast
    assert generated and not any(generated)
    rows = sum(e["kind"] == "row" for events in fast.values() for e in events)
    assert len(precise_calls) >= rows


def test_generated_source_shows_in_tracebacks_and_inspect(fast_paths_on):
    source = "def make():\n    return 1 // 0\n"
    make = fast_paths.generate("test", source, {})
    assert make.__code__.co_filename.startswith("<fast-path test ")
    assert inspect.getsource(make) == source
    with pytest.raises(ZeroDivisionError) as caught:
        make()
    assert "    return 1 // 0\n" in "".join(traceback.format_exception(caught.value))
    assert fast_paths.generate("test", source, {}) is make


def test_a_codec_error_raised_in_generated_code_shows_the_generated_line(fast_paths_on):
    table = Table("shop", "t", (Column("id", "int", nullable=False), Column("n", "int")), key=("id",))
    bootstrap, row = encode_stream("simple-json", [Bootstrap(table), RowChange(5, "insert", table, None, {"id": 1})])
    decoder = make_decoder("simple-json")
    decoder.decode(None, bootstrap.value)
    bad = orjson.loads(row.value)
    bad["data"]["n"] = "not a number"
    with pytest.raises(DecodeError) as caught:
        decoder.decode(None, orjson.dumps(bad))
    assert caught.value.where == "data.n"
    frames = [f for f in traceback.extract_tb(caught.value.__traceback__) if f.filename.startswith("<fast-path ")]
    assert [f.filename.split()[1] for f in frames] == ["simple-json"]
    assert "slow(" in frames[0].line


def test_evicted_sources_leave_linecache(fast_paths_on, monkeypatch):
    monkeypatch.setattr(fast_paths, "_CACHE_LIMIT", 2)
    monkeypatch.setattr(fast_paths, "_generated", {})
    first, second, third = (fast_paths.generate("test", f"def make():\n    return {n}\n", {}) for n in range(3))
    assert first.__code__.co_filename not in linecache.cache
    assert {second.__code__.co_filename, third.__code__.co_filename} <= linecache.cache.keys()
    assert [f() for f in (first, second, third)] == [0, 1, 2]


def _two_tables_stream() -> list:
    """Rows of two tables interleaved, and the first table's schema sent again midway."""
    ts = 1_700_000_000_000 << 18
    orders = Table(
        "shop",
        "orders",
        (Column("id", "int", nullable=False), Column("price", "decimal(10,2)"), Column("state", "varchar(8)")),
        key=("id",),
    )
    notes = Table("shop", "notes", (Column("id", "int", nullable=False), Column("at", "datetime(3)")), key=("id",))
    events: list = [Bootstrap(orders), Bootstrap(notes)]
    for i in range(12):
        order = {"id": i, "price": Decimal(i).scaleb(-2), "state": "new"}
        note = {"id": i, "at": dt.datetime(2025, 1, 2, 3, 4, 5, 6000 * i)}
        events += [
            RowChange(ts + (3 * i << 18), "insert", orders, None, order),
            RowChange(ts + ((3 * i + 1) << 18), "insert", notes, None, note),
            RowChange(ts + ((3 * i + 2) << 18), "update", orders, order, {**order, "state": "paid"}),
        ]
        if i == 6:
            events.append(Bootstrap(orders))
    return events


@pytest.mark.parametrize("protocol", sorted(PRECISE_PATHS))
def test_tables_taking_turns_decode_as_the_precise_path_does(protocol, fast_paths_on, monkeypatch):
    """One decoder switching tables every row: its per-table caches (last schema, last column list) never mix them up."""
    options = changefeed_options(protocol, registry_url="")
    messages = encode_stream(protocol, _two_tables_stream(), options=options)

    def decoded() -> list[dict]:
        decoder = changefeed_decoder(protocol, options)
        return [e.to_dict() for m in messages for e in decoder.decode(m.key, m.value, list(m.headers) or None)]

    fast = decoded()
    monkeypatch.setattr(fast_paths, "PRECISE_ONLY", True)
    assert decoded() == fast
    assert {e["table"] for e in fast if e["kind"] == "row"} == {"orders", "notes"}


def test_simple_update_old_equal_to_converted_data_takes_its_text(fast_paths_on, monkeypatch):
    """An old value equal to a data value the converter rewrote gets the rewritten text; one kept as sent stays."""
    table = Table("shop", "t", (Column("id", "int", nullable=False), Column("p", "decimal(10,2)")), key=("id",))
    bootstrap, row = encode_stream("simple-json", [Bootstrap(table), RowChange(5, "insert", table, None, {"id": 1})])
    message = orjson.loads(row.value)
    message |= {"type": "UPDATE", "data": {"id": "1", "p": "1.5"}, "old": {"id": "1", "p": "1.5"}}
    results = []
    for precise_only in (False, True):
        monkeypatch.setattr(fast_paths, "PRECISE_ONLY", precise_only)
        decoder = make_decoder("simple-json")
        decoder.decode(None, bootstrap.value)
        (event,) = decoder.decode(None, orjson.dumps(message))
        results.append(event.to_dict())
    assert results[0] == results[1]
    assert results[0]["before"] == results[0]["after"] == {"id": "1", "p": "1.50"}


def test_a_digit_run_past_re2s_repetition_limit_reads_in_both_engines():
    """A scale or fsp read from a damaged Simple-Avro message was 1,032: RE2 refused `[0-9]{1032}` and the
    column path failed its whole batch (ArrowInvalid) instead of leaving the message to the row-wise decode."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for count, at_least in ((1032, None), (2500, 0), (3, None), (0, None)):
        pattern = f"^{fast_paths.digit_run(count, at_least)}$"
        texts = ["7" * n for n in (0, 1, count - 1, count, count + 1) if n >= 0]
        want = [n == count if at_least is None else n <= count for n in map(len, texts)]
        assert [re.fullmatch(pattern[1:-1], t) is not None for t in texts] == want
        assert pc.match_substring_regex(pa.array(texts), pattern).to_pylist() == want
    decimal = f"^{fast_paths.decimal_pattern(1032)}$"
    assert pc.match_substring_regex(pa.array(["1." + "0" * 1032, "1.0"]), decimal).to_pylist() == [True, False]
