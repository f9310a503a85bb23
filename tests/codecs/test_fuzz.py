"""Fuzz every decoder from valid simulator messages: a bad message is a DecodeError, never a crash.

A message the pipeline cannot decode goes to quarantine with str(error) as its reason (invariant 5),
so whatever bytes arrive, `decode` must return events or raise DecodeError naming the protocol with
a reason; any other exception would stop the decode job. Inputs are derived from a valid stream with
a seeded random.Random, so a failure reproduces: truncations at every length, bit flips, random
bytes, JSON-shaped garbage (fresh and grafted into valid documents), and key/value swaps.
"""

from __future__ import annotations

import datetime as dt
import gc
import json
import random
import signal
import time
import traceback
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import orjson
import pytest

from spark_jobs.canonical.events import FLAGS, KINDS, OPS
from spark_jobs.codecs import PROTOCOLS, ChangeEvent, DecodeError
from tests.codecs.helpers import EVERY_BYTE, changefeed_decoder, changefeed_options
from ticdc_devkit.simulator.model import Bootstrap, Column, Ddl, RowChange, Table, Watermark
from ticdc_devkit.simulator.stream import encode_stream

JSON_PROTOCOLS = ("canal-json", "open", "debezium", "simple-json")
INPUTS_PER_PROTOCOL = 20_000
SLOW_SECONDS = 1.0
SEED = 20240611

TABLE = Table(
    "fuzz",
    "all_types",
    (
        Column("id", "bigint unsigned", nullable=False),
        Column("code", "varchar(16)", nullable=False),
        Column("ti", "tinyint"),
        Column("iu", "int unsigned"),
        Column("dec", "decimal(20,6)"),
        Column("f", "float"),
        Column("d", "double"),
        Column("b", "bit(12)"),
        Column("dt", "date"),
        Column("dtm", "datetime(3)"),
        Column("ts", "timestamp(6)"),
        Column("tm", "time(2)"),
        Column("y", "year"),
        Column("c", "char(4)"),
        Column("t", "text"),
        Column("bin", "binary(3)"),
        Column("vb", "varbinary(300)"),
        Column("bl", "blob"),
        Column("e", "enum('a','b,c','it''s')"),
        Column("s", "set('x','y')"),
        Column("j", "json"),
    ),
    key=("code", "id"),
    schema_version=(1_700_000_000_000 << 18),
)
ROW = {
    "id": 18446744073709551615,
    "code": "k1",
    "ti": -128,
    "iu": 4294967295,
    "dec": Decimal("-12345678901234.123456"),
    "f": 3.4028234663852886e38,
    "d": -0.0,
    "b": 4095,
    "dt": dt.date(1000, 1, 1),
    "dtm": dt.datetime(9999, 12, 31, 23, 59, 59, 999000),
    "ts": dt.datetime(2038, 1, 19, 3, 14, 7, 999999),
    "tm": -dt.timedelta(hours=838, minutes=59, seconds=59),
    "y": 2155,
    "c": "ü字",
    "t": 'line\n"q" <&>',
    "bin": b"\x00\xff\x80",
    "vb": EVERY_BYTE,
    "bl": b"",
    "e": "b,c",
    "s": ("x", "y"),
    "j": '{"k": [1, 2.5, null]}',
}
NULLS = {**{c.name: None for c in TABLE.columns}, "id": 2, "code": "k2"}


def _stream() -> list:
    ts = 1_700_000_000_000 << 18
    return [
        Ddl(
            TABLE.schema_version,
            "fuzz",
            "all_types",
            "CREATE TABLE `fuzz`.`all_types` (`id` BIGINT UNSIGNED)",
            "create_table",
            table_after=TABLE,
        ),
        Bootstrap(TABLE),
        RowChange(ts + (1 << 18), "insert", TABLE, None, ROW),
        RowChange(ts + (1 << 18) + 1, "insert", TABLE, None, NULLS),
        RowChange(ts + (2 << 18), "update", TABLE, ROW, {**ROW, "t": "", "f": 1.5, "e": "a"}),
        RowChange(ts + (3 << 18), "update", TABLE, NULLS, {**NULLS, "id": 3}),  # key change: delete + insert
        RowChange(ts + (4 << 18), "delete", TABLE, {**ROW, "t": "", "f": 1.5, "e": "a"}, None),
        Watermark(ts + (5 << 18)),
        Ddl(
            ts + (6 << 18),
            "fuzz",
            "all_types",
            "TRUNCATE TABLE `fuzz`.`all_types`",
            "truncate_table",
            table_after=TABLE,
            table_before=TABLE,
        ),
    ]


# ---- inputs ----------------------------------------------------------------------------------------

_VOCABULARY = [
    "type",
    "data",
    "old",
    "database",
    "table",
    "isDdl",
    "pkNames",
    "mysqlType",
    "sqlType",
    "_tidb",
    "commitTs",
    "es",
    "ts",
    "sql",
    "payload",
    "schema",
    "before",
    "after",
    "op",
    "source",
    "fields",
    "u",
    "d",
    "p",
    "t",
    "v",
    "f",
    "h",
    "q",
    "scm",
    "tbl",
    "version",
    "tableSchema",
    "columns",
    "dataType",
    "schemaVersion",
    "watermarkTs",
    "tableChanges",
    "name",
    "elements",
    "commit_ts",
]


def _json_value(rng: random.Random, depth: int = 0) -> Any:
    """A random JSON value biased toward the shapes and names the protocols use."""
    pick = rng.randrange(12 if depth < 3 else 8)
    if pick == 0:
        return None
    if pick == 1:
        return rng.choice([True, False])
    if pick == 2:
        return rng.choice([0, -1, 1, 2**63, -(2**63) - 1, 2**64, 10**30, rng.randrange(-(10**6), 10**6)])
    if pick == 3:
        return rng.choice([0.0, -0.0, 1.5, 1e308, -1e-308, 3.4e38, rng.random()])
    if pick in (4, 5):
        return rng.choice(
            [
                "",
                "INSERT",
                "UPDATE",
                "DELETE",
                "DDL",
                "WATERMARK",
                "BOOTSTRAP",
                "DML",
                "c",
                "u",
                "d",
                "m",
                "r",
                "int",
                "decimal(10,2)",
                "enum('a')",
                "set",
                "bit",
                "2024-01-01",
                "-838:59:59",
                "9999-12-31 23:59:59.999999",
                "NaN",
                "1e999",
                "\x00",
                "é字🙂",
                "\\",
                "AA==",
                "%%%",
            ]
        )
    if pick == 6:
        return "".join(chr(rng.randrange(0x20, 0x3000)) for _ in range(rng.randrange(0, 12)))
    if pick == 7:
        return str(rng.randrange(-(10**20), 10**20))
    if pick in (8, 9):
        return [_json_value(rng, depth + 1) for _ in range(rng.randrange(0, 4))]
    return {rng.choice(_VOCABULARY): _json_value(rng, depth + 1) for _ in range(rng.randrange(0, 6))}


def _dumps(doc: Any) -> bytes:
    """JSON text of any value (orjson refuses integers beyond 64 bits, which the garbage wants)."""
    return json.dumps(doc, ensure_ascii=False).encode("utf-8", "surrogatepass")


def _graft(doc: Any, rng: random.Random) -> Any:
    """The document with one nested value (or a key) replaced by random JSON."""
    if isinstance(doc, dict) and doc:
        key = rng.choice(list(doc))
        out = dict(doc)
        roll = rng.randrange(6)
        if roll == 0:
            del out[key]
        elif roll == 1:
            out[rng.choice(_VOCABULARY)] = _json_value(rng)
        elif roll == 2 or not isinstance(doc[key], (dict, list)):
            out[key] = _json_value(rng)
        else:
            out[key] = _graft(doc[key], rng)
        return out
    if isinstance(doc, list) and doc:
        out = list(doc)
        index = rng.randrange(len(out))
        out[index] = (
            _graft(out[index], rng) if isinstance(out[index], (dict, list)) and rng.random() < 0.7 else _json_value(rng)
        )
        return out
    return _json_value(rng)


def _open_items(framed: bytes, skip: int) -> list[bytes] | None:
    """The JSON items of an Open Protocol key (skip=8: the version) or value."""
    items, pos = [], skip
    while pos + 8 <= len(framed):
        size = int.from_bytes(framed[pos : pos + 8], "big")
        items.append(framed[pos + 8 : pos + 8 + size])
        pos += 8 + size
    return items if pos == len(framed) else None


def _open_frame(items: list[bytes], version: bool) -> bytes:
    head = (1).to_bytes(8, "big") if version else b""
    return head + b"".join(len(item).to_bytes(8, "big") + item for item in items)


def _mutate_json(protocol: str, key: bytes | None, value: bytes | None, rng: random.Random):
    """A valid message with random JSON grafted into one of its documents (framing kept valid)."""
    if protocol == "open":
        key_items = _open_items(key or b"", 8) or []
        value_items = _open_items(value or b"", 0) or []
        items = [("key", i) for i in range(len(key_items))] + [("value", i) for i in range(len(value_items))]
        if not items:
            return key, value
        side, index = rng.choice(items)
        target = key_items if side == "key" else value_items
        try:
            target[index] = _dumps(_graft(orjson.loads(target[index]), rng))
        except orjson.JSONDecodeError:
            target[index] = _dumps(_json_value(rng))
        return _open_frame(key_items, True), _open_frame(value_items, False)
    if protocol == "debezium" and key and rng.random() < 0.3:
        return _dumps(_graft(orjson.loads(key), rng)), value
    return key, _dumps(_graft(orjson.loads(value), rng))


def _flip(data: bytes, rng: random.Random, bits: int) -> bytes:
    out = bytearray(data)
    for _ in range(bits):
        position = rng.randrange(len(out) * 8)
        out[position // 8] ^= 1 << position % 8
    return bytes(out)


def fuzz_inputs(protocol: str, messages: list, rng: random.Random) -> Iterator[tuple[str, bytes | None, bytes | None]]:
    """(how, key, value) inputs: at least INPUTS_PER_PROTOCOL of them, every kind represented."""
    count = 0
    for m in messages:  # truncation at every length of every value (and key)
        for n in range(len(m.value or b"")):
            count += 1
            yield "truncate value", m.key, m.value[:n]
        for n in range(len(m.key or b"")):
            count += 1
            yield "truncate key", m.key[:n], m.value
    for m in messages:  # key/value swaps and empty parts
        yield "swap", m.value, m.key
        yield "no value", m.key, None
        yield "empty value", m.key, b""
        yield "no key", None, m.value
        count += 4
    rounds = 0
    while count < INPUTS_PER_PROTOCOL or rounds < 2000:
        rounds += 1
        m = rng.choice(messages)
        roll = rng.randrange(10)
        if roll < 3 and m.value:
            yield "bit flip", m.key, _flip(m.value, rng, 1)
        elif roll < 5 and m.value:
            yield "bit flips", m.key, _flip(m.value, rng, rng.randrange(2, 9))
        elif roll == 5 and m.key:
            yield "key bit flips", _flip(m.key, rng, rng.randrange(1, 4)), m.value
        elif roll == 6:
            yield "random bytes", rng.choice([None, m.key]), rng.randbytes(rng.randrange(0, 512))
        elif roll == 7:
            yield "json garbage", m.key, _dumps(_json_value(rng))
        elif protocol in JSON_PROTOCOLS and m.value:
            yield "json graft", *_mutate_json(protocol, m.key, m.value, rng)
        elif m.value:
            start = rng.randrange(len(m.value))
            yield "splice", m.key, m.value[:start] + rng.randbytes(rng.randrange(1, 16)) + m.value[start + 1 :]
        else:
            continue
        count += 1


# ---- the property ----------------------------------------------------------------------------------


class _Hung(Exception):
    pass


def _alarm(signum, frame):
    raise _Hung()


def _problem(protocol: str, decoder, key, value) -> str | None:
    """None when the decoder behaved; else what was wrong. Slow means CPU spent in this thread (a pathological
    input makes the decoder spin), not the wall clock: a registry look-up waits, and on a machine busy with other
    tests a wall-clock second is no sign of a problem. A hang still ends at the wall-clock alarm. The collector is
    off while it runs: in a worker that ran end-to-end tests first, a full collection of that process's heap fell
    into one decode and cost it more than a second of this thread's CPU."""
    gc.disable()
    started = time.thread_time()
    signal.setitimer(signal.ITIMER_REAL, 10 * SLOW_SECONDS)
    try:
        result = decoder.decode(key, value, None)
    except _Hung:
        return f"still running after {10 * SLOW_SECONDS:.0f} s"
    except DecodeError as exc:
        if not str(exc).startswith(f"{protocol}: ") or not (exc.reason or "").strip():
            return f"DecodeError without the protocol name or a reason: {str(exc)[:200]!r}"
        result = None
    except Exception as exc:
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        return f"{type(exc).__name__} at {frame.filename.rsplit('/', 1)[-1]}:{frame.lineno}: {str(exc)[:200]}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        elapsed = time.thread_time() - started
        gc.enable()
    if elapsed > SLOW_SECONDS:
        return f"took {elapsed:.2f} s of CPU"
    if result is None:
        return None
    if type(result) is not list or not all(isinstance(e, ChangeEvent) for e in result):
        return f"returned {type(result).__name__}, not a list of ChangeEvent"
    for e in result:
        if e.kind not in KINDS or (e.kind == "row" and e.op not in OPS) or not set(e.flags) <= set(FLAGS):
            return f"malformed event: kind {e.kind!r}, op {e.op!r}, flags {e.flags}"
    return None


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_decode_never_crashes(protocol, registry_url):
    options = changefeed_options(protocol, registry_url)
    messages = encode_stream(protocol, _stream(), options=options)
    decoder = changefeed_decoder(protocol, options)
    for m in messages:  # prime the decoder's state (Simple's schemas, Avro's registry cache)
        decoder.decode(m.key, m.value, list(m.headers))
    previous = signal.signal(signal.SIGALRM, _alarm)
    problems: dict[str, tuple[str, bytes | None, bytes | None]] = {}
    tried = 0
    try:
        for how, key, value in fuzz_inputs(protocol, messages, random.Random(f"{SEED}:{protocol}")):
            tried += 1
            problem = _problem(protocol, decoder, key, value)
            if problem is not None:
                problems.setdefault(problem[:80], (how, key, value))
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert tried >= INPUTS_PER_PROTOCOL
    assert not problems, "\n".join(
        f"{why} <- {how}: key={key!r:.200} value={value!r:.300}" for why, (how, key, value) in problems.items()
    )
