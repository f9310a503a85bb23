"""Decode throughput per protocol, against the floor of parsing the same bytes and nothing more.

    python bench/decode.py [--messages N]

For each protocol variant the simulator encodes N row changes of an orders-like table (2/3 inserts,
1/3 updates, TiDB extension on). In the same run it measures, best of 5 taken in turns (floor, codec,
row-wise decoder, then again: a change in the machine's load reaches all of them alike), the codec's decode over
all messages and the floor: orjson.loads of the same values (Open: of each JSON item inside the
framing), fastavro.schemaless_reader of the same payloads with pre-parsed schemas (Avro: key and
value, as the codec reads both; Simple-Avro: the value). The ratio is the throughput ratio, decode
msg/s / floor msg/s (= floor time / decode time): 1.0 would mean decoding costs no more than
parsing, 0.5 that it runs at half the parser's speed; it says what canonicalisation costs on top of
parsing on this machine; absolute numbers depend on the machine, which is why the floor is measured
alongside. A cProfile line per protocol names the
three functions with the most cumulative time under `decode`.

Row checksums: the protocols that can carry TiDB's row checksum (Simple-JSON, Avro) are encoded once more with
`integrity-check-level = "correctness"` (Avro with the string decimal and unsigned modes TiCDC then requires), and
decoded with verification on (the default) and off (`verify-checksums: false`): the ratio off/on is what
verifying costs on top of decoding the same messages. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as dt
import gc
import io
import json
import pstats
import random
import sys
import urllib.request
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import fastavro  # noqa: E402
import orjson  # noqa: E402

from bench.harness import best_of_alternated, summary_row, write_summary  # noqa: E402
from spark_jobs.codecs import (  # noqa: E402
    PROTOCOLS,
    column_decoder,
    decoder_class,
    make_decoder,
)
from spark_jobs.codecs.simple import message_schema  # noqa: E402
from ticdc_devkit.registry import running_registry  # noqa: E402
from ticdc_devkit.simulator.model import Bootstrap, Column, Ddl, Message, RowChange, Table, Watermark  # noqa: E402
from ticdc_devkit.simulator.stream import EXTENSION_OPTIONS, encode_stream  # noqa: E402
from ticdc_devkit.simulator.workload import create_table_sql  # noqa: E402

REPEATS = 5
COLUMN_BATCH = 10_000  # bronze rows per Arrow batch that silver's decode gets (Spark's default)
BASE_MS = 1_763_800_000_000

ORDERS = Table(
    "shop",
    "orders",
    (
        Column("order_id", "bigint unsigned", nullable=False),
        Column("customer_id", "int", nullable=False),
        Column("sku", "varchar(16)", nullable=False),
        Column("quantity", "smallint unsigned", nullable=False),
        Column("unit_price", "decimal(10,2)", nullable=False),
        Column("discount", "decimal(5,4)"),
        Column("total", "decimal(12,2)", nullable=False),
        Column("currency", "char(3)", nullable=False),
        Column("status", "enum('new','paid','shipped','delivered','cancelled')", nullable=False),
        Column("tags", "set('gift','express','fragile','b2b')"),
        Column("note", "varchar(255)"),
        Column("weight_kg", "double"),
        Column("ship_date", "date"),
        Column("created_at", "datetime(3)", nullable=False),
        Column("updated_at", "timestamp(6)", nullable=False),
    ),
    key=("order_id",),
    table_id=103,
    schema_version=BASE_MS << 18,
)


def _order(rng: random.Random, order_id: int, now: dt.datetime) -> dict[str, Any]:
    quantity = rng.randint(1, 20)
    price = Decimal(rng.randint(100, 99_999)).scaleb(-2)
    discount = rng.choice([None, Decimal("0.0500"), Decimal("0.1000"), Decimal("0.2500")])
    total = (price * quantity * (1 - (discount or 0))).quantize(Decimal("0.01"))
    return {
        "order_id": order_id,
        "customer_id": rng.randint(1, 500_000),
        "sku": f"SKU-{rng.randint(0, 99_999):05d}",
        "quantity": quantity,
        "unit_price": price,
        "discount": discount,
        "total": total,
        "currency": rng.choice(["EUR", "USD", "JPY"]),
        "status": "new",
        "tags": tuple(t for t in ("gift", "express", "fragile", "b2b") if rng.random() < 0.2),
        "note": rng.choice([None, "", "leave at the door", "Lieferung an Packstation — bitte klingeln"]),
        "weight_kg": round(rng.uniform(0.1, 40), 3),
        "ship_date": rng.choice([None, now.date()]),
        "created_at": now.replace(microsecond=now.microsecond // 1000 * 1000),
        "updated_at": now,
    }


def orders_stream(count: int) -> list:
    """CREATE TABLE, a bootstrap, `count` row changes (2/3 inserts, 1/3 updates), a watermark."""
    rng = random.Random(7)
    ts = BASE_MS << 18
    events: list = [
        Ddl(ts, "shop", "orders", create_table_sql(ORDERS), "create_table", table_after=ORDERS),
        Bootstrap(ORDERS),
    ]
    rows: list[dict[str, Any]] = []
    start = dt.datetime(2025, 11, 22, 8, 0, 0)
    for i in range(count):
        ts += rng.randint(1, 40) << 18 | rng.randint(0, 3)
        now = start + dt.timedelta(milliseconds=(ts >> 18) - BASE_MS, microseconds=rng.randrange(1000))
        if i % 3 == 2 and rows:
            index = rng.randrange(len(rows))
            old = rows[index]
            new = {**old, "status": rng.choice(["paid", "shipped", "delivered", "cancelled"]), "updated_at": now}
            rows[index] = new
            events.append(RowChange(ts, "update", ORDERS, old, new))
        else:
            row = _order(rng, 10_000_000 + i, now)
            rows.append(row)
            events.append(RowChange(ts, "insert", ORDERS, None, row))
    events.append(Watermark(ts + (1 << 18)))
    return events


# ---- the floor: parsing the same bytes --------------------------------------------------------------


def _open_items(framed: bytes, pos: int) -> list[bytes]:
    items = []
    while pos < len(framed):
        size = int.from_bytes(framed[pos : pos + 8], "big")
        items.append(framed[pos + 8 : pos + 8 + size])
        pos += 8 + size
    return items


def floor_of(protocol: str, messages: list[Message], registry_url: str | None) -> Callable[[], int]:
    """A function that parses every message the cheapest way the format allows; returns the count."""
    loads = orjson.loads
    if protocol == "open":
        items = [item for m in messages for item in _open_items(m.key, 8) + _open_items(m.value, 0) if item]

        def parse_items() -> int:
            for item in items:
                loads(item)
            return len(messages)

        return parse_items
    if protocol == "avro":
        schemas: dict[int, Any] = {}
        payloads = []
        for m in messages:
            for part in (m.key, m.value):
                if part:
                    schema_id = int.from_bytes(part[1:5], "big")
                    if schema_id not in schemas:
                        with urllib.request.urlopen(f"{registry_url}/schemas/ids/{schema_id}") as response:
                            schemas[schema_id] = fastavro.parse_schema(json.loads(json.load(response)["schema"]))
                    payloads.append((schemas[schema_id], part[5:]))
    elif protocol == "simple-avro":
        schema = message_schema()
        payloads = [(schema, m.value) for m in messages]
    else:
        values = [m.value for m in messages]

        def parse_values() -> int:
            for value in values:
                loads(value)
            return len(messages)

        return parse_values
    reader, buffer = fastavro.schemaless_reader, io.BytesIO

    def read_payloads() -> int:
        for writer_schema, data in payloads:
            reader(buffer(data), writer_schema)
        return len(messages)

    return read_payloads


def decode_all(protocol: str, messages: list[Message], options: dict, row_wise: bool = False) -> Callable[[], int]:
    """A function that decodes every message with one warm decoder; returns the number of events. Where the
    protocol decodes column-wise (and not `row_wise`), the batch goes through `decode_columns` in batches of
    `COLUMN_BATCH` (silver's Arrow batch), and the messages it leaves through `decode`."""
    allowed = decoder_class(protocol).OPTIONS
    decoder = make_decoder(protocol, {k: v for k, v in options.items() if k in allowed})
    items = [(m.key, m.value, list(m.headers) or None) for m in messages]
    decode = decoder.decode
    by_columns = None if row_wise else column_decoder(decoder)
    if by_columns is not None:
        batches = [items[i : i + COLUMN_BATCH] for i in range(0, len(items), COLUMN_BATCH)]
        # the keys and values as the codec takes them, made before the clock starts, as the floor's are
        inputs = [([key for key, _, _ in batch], [value for _, value, _ in batch]) for batch in batches]
        decode_columns = by_columns.decode_columns

        def run_columns() -> int:
            events = 0
            for batch, (keys, values) in zip(batches, inputs, strict=True):
                result = decode_columns(keys, values)
                events += sum(len(block) for block in result.blocks)
                for index in result.row_wise:
                    events += len(decode(*batch[index]))
            return events

        run_columns()
        return run_columns

    def run() -> int:
        events = 0
        for key, value, headers in items:
            events += len(decode(key, value, headers))
        return events

    run()  # warm: schema caches, registry look-ups, converter caches
    return run


# What TiCDC needs to send row checksums, per protocol that can carry them.
CHECKSUM_OPTIONS = {
    "simple-json": {"integrity-check-level": "correctness"},
    "avro": {
        "integrity-check-level": "correctness",
        "avro-decimal-handling-mode": "string",
        "avro-bigint-unsigned-handling-mode": "string",
    },
}


def checksum_cost(protocol: str, events: list, registry_url: str) -> tuple[str, int, float, float]:
    """The protocol's messages with row checksums, decoded with verification on and off: (protocol, messages,
    msg/s on, msg/s off)."""
    options = {**EXTENSION_OPTIONS[protocol], **CHECKSUM_OPTIONS[protocol]}
    if protocol == "avro":
        options["schema-registry-url"] = registry_url
    messages = encode_stream(protocol, events, options=options)
    (on_time, _), (off_time, _) = best_of_alternated(
        [
            decode_all(protocol, messages, options),
            decode_all(protocol, messages, {**options, "verify-checksums": False}),
        ],
        REPEATS,
    )
    return protocol, len(messages), len(messages) / on_time, len(messages) / off_time


def profile_line(fn: Callable[[], int]) -> str:
    """The three functions with the most cumulative time below the decoder's entry point."""
    profiler = cProfile.Profile()
    profiler.enable()
    fn()
    profiler.disable()
    stats = pstats.Stats(profiler)
    total = (
        max(
            (
                cumulative
                for (path, _, name), (_, _, _, cumulative, _) in stats.stats.items()
                if name in ("run", "run_columns") and path == __file__
            ),
            default=0.0,
        )
        or 1e-9
    )
    rows = []
    for (path, line, name), (_, _, _, cumulative, _) in stats.stats.items():
        if path == __file__ or name == "decode" or (path == "~" and "profiler" in name):
            continue
        where = Path(path).name if path != "~" else "builtin"
        rows.append((cumulative, f"{name} ({where}{':' + str(line) if line else ''}) {100 * cumulative / total:.0f}%"))
    rows.sort(reverse=True)
    return " | ".join(text for _, text in rows[:3])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000, help="row changes per protocol (default 20,000)")
    parser.add_argument("--json", help="write the summary rows for `make bench` here")
    args = parser.parse_args(argv)
    events = orders_stream(args.messages)
    results, profiles = [], []
    with running_registry() as registry_url:
        for protocol in PROTOCOLS:
            options = dict(EXTENSION_OPTIONS[protocol])
            if protocol == "avro":
                options["schema-registry-url"] = registry_url
            messages = encode_stream(protocol, events, options=options)
            gc.collect()
            gc.freeze()  # the benchmark's own objects (streams, messages) are not the decoder's to scan
            run = decode_all(protocol, messages, options)
            timed = [floor_of(protocol, messages, registry_url), run]
            if column_decoder(
                make_decoder(protocol, {k: v for k, v in options.items() if k in decoder_class(protocol).OPTIONS})
            ):
                timed.append(decode_all(protocol, messages, options, row_wise=True))
            (floor_time, _), (decode_time, decoded), *row_wise = best_of_alternated(timed, REPEATS)
            row_wise_time = row_wise[0][0] if row_wise else decode_time
            results.append(
                (
                    protocol,
                    len(messages),
                    decoded,
                    len(messages) / floor_time,
                    len(messages) / decode_time,
                    decoded / decode_time,
                    floor_time / decode_time,
                    floor_time / row_wise_time,
                )
            )
            profiles.append((protocol, profile_line(run)))
        checksums = [checksum_cost(protocol, events, registry_url) for protocol in CHECKSUM_OPTIONS]
    print(
        f"{args.messages:,} row changes per protocol, best of {REPEATS}; "
        f"throughput ratio = decode msg/s / floor msg/s (higher is better)"
    )
    header = (
        f"{'protocol':<12} {'messages':>9} {'events':>8} {'floor msg/s':>12} {'decode msg/s':>13} {'events/s':>10} "
        f"{'throughput ratio':>16} {'row-wise ratio':>15}"
    )
    print(header)
    print("-" * len(header))
    for protocol, messages, decoded, floor_rate, rate, event_rate, ratio, row_wise_ratio in results:
        print(
            f"{protocol:<12} {messages:>9,} {decoded:>8,} {floor_rate:>12,.0f} {rate:>13,.0f} {event_rate:>10,.0f} "
            f"{ratio:>16.2f} {row_wise_ratio:>15.2f}"
        )
    print()
    print("profile (cumulative share of one decode pass):")
    for protocol, line in profiles:
        print(f"  {protocol:<12} {line}")
    print()
    print("row checksums (the same messages decoded with verification on and off; ratio = on msg/s / off msg/s):")
    for protocol, messages, on_rate, off_rate in checksums:
        print(
            f"  {protocol:<12} {messages:>9,} messages  on {on_rate:>9,.0f} msg/s  off {off_rate:>9,.0f} msg/s"
            f"  ratio {on_rate / off_rate:.2f}"
        )
    goals = {protocol: ">= 1.0" for protocol in PROTOCOLS}
    write_summary(
        args.json,
        [
            summary_row(
                "decode",
                protocol,
                f"{rate:,.0f} msg/s",
                f"{'fastavro' if 'avro' in protocol else 'orjson.loads'} {floor_rate:,.0f} msg/s",
                ratio,
                goals.get(protocol),
            )
            for protocol, _, _, floor_rate, rate, _, ratio, _ in results
        ]
        + [
            summary_row(
                "decode",
                f"{protocol} row checksums verified",
                f"{on_rate:,.0f} msg/s",
                f"unverified {off_rate:,.0f} msg/s",
                on_rate / off_rate,
            )
            for protocol, _, on_rate, off_rate in checksums
        ],
    )


if __name__ == "__main__":
    main()
