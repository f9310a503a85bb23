"""What the codec tests share: one way to decode, the integer columns, a table of every type."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

import pyarrow as pa

from spark_jobs.bronze.kafka_reader import MESSAGE_SCHEMA
from spark_jobs.canonical.values import int_bits, parse_type
from spark_jobs.codecs import ChangeEvent, DecodeError, Decoder, column_decoder, decoder_class, make_decoder
from spark_jobs.silver.decode import decode_batches
from ticdc_devkit.simulator.model import Column, Message, Table
from ticdc_devkit.simulator.stream import EXTENSION_OPTIONS

EVERY_BYTE = bytes(range(256))
INTEGER_TYPES = (
    "tinyint",
    "tinyint unsigned",
    "smallint",
    "smallint unsigned",
    "mediumint",
    "mediumint unsigned",
    "int",
    "int unsigned",
    "bigint",
    "bigint unsigned",
)


def integer_columns(*names: str) -> tuple[Column, ...]:
    """One nullable column of each of INTEGER_TYPES, in that order, named `names`."""
    assert len(names) == len(INTEGER_TYPES)
    return tuple(Column(name, definition) for name, definition in zip(names, INTEGER_TYPES))


INTEGER_COLUMNS = integer_columns("ti", "tiu", "si", "siu", "mi", "miu", "i", "iu", "bi", "biu")


def integer_range(definition: str) -> tuple[int, int]:
    """(least, greatest) value of an integer column type such as `int unsigned`."""
    base, _, unsigned = parse_type(definition)
    bits = int_bits(base)
    return (0, (1 << bits) - 1) if unsigned else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)


def integer_limits(columns: Iterable[Column], signed: str, unsigned: str) -> dict[str, int]:
    """Column name -> the "min" or "max" of its integer type, chosen for signed and unsigned types apart."""
    limits = {}
    for column in columns:
        least, greatest = integer_range(column.type)
        limit = unsigned if parse_type(column.type)[2] else signed
        limits[column.name] = greatest if limit == "max" else least
    return limits


def changefeed_options(protocol: str, registry_url: str) -> dict[str, Any]:
    """The options the tests run each protocol with: the TiDB extension on wherever it has one."""
    options = dict(EXTENSION_OPTIONS[protocol])
    if protocol == "avro":
        options["schema-registry-url"] = registry_url
    return options


def decode(
    protocol: str, key: bytes | None, value: bytes | None, options: Mapping[str, Any] | None = None
) -> list[ChangeEvent]:
    """One message through a new decoder of `protocol` with exactly these options; where the protocol also
    decodes column-wise, the column path must give the same events or leave the message to `decode`."""
    try:
        events = make_decoder(protocol, options).decode(key, value, None)
    except DecodeError:
        agree_by_columns(protocol, options, [(key, value)], {0: None})
        raise
    agree_by_columns(protocol, options, [(key, value)], {0: [e.to_dict() for e in events]})
    return events


def agree_by_columns(
    protocol: str,
    options: Mapping[str, Any] | None,
    messages: list[tuple[bytes | None, bytes | None]],
    reference: dict[int, list[dict] | None],
) -> int:
    """Decode `messages` (key, value) column-wise with a new decoder and check every message the column path decodes against
    `reference` (message index -> to_dict() of the row-wise events, None where `decode` raised): the column path
    decodes a message only to the same events, and never one that `decode` rejects. Returns how many it decoded."""
    decoder = column_decoder(make_decoder(protocol, options))
    if decoder is None:
        return 0
    result = decoder.decode_columns([key for key, _ in messages], [value for _, value in messages])
    got: dict[int, list[dict]] = {}
    for block in result.blocks:
        for index, event in block.events():
            got.setdefault(index, []).append(event.to_dict())
    assert not got.keys() & set(result.row_wise), "a message both decoded by columns and left row-wise"
    assert got.keys() | set(result.row_wise) == set(range(len(messages))), "a message neither decoded nor left"
    for index, events in got.items():
        assert reference[index] is not None, f"message {index}: the column path decoded what decode rejects"
        assert events == reference[index], f"message {index}"
    return len(got)


def changefeed_decoder(protocol: str, options: Mapping[str, Any]) -> Decoder:
    """A decoder for a changefeed with these options, leaving out those only the encoder takes."""
    allowed = decoder_class(protocol).OPTIONS
    return make_decoder(protocol, {k: v for k, v in options.items() if k in allowed})


def bronze_batch(messages: list[tuple[bytes | None, bytes | None]]) -> pa.RecordBatch:
    """(key, value) pairs as the bronze rows of one partition that silver's decode reads."""
    rows = [
        {"topic": "t", "partition": 0, "offset": i, "timestamp": None, "key": k, "value": v, "headers": []}
        for i, (k, v) in enumerate(messages)
    ]
    return pa.RecordBatch.from_pylist(rows, schema=MESSAGE_SCHEMA)


def silver_rows(
    protocol: str, messages: list[tuple[bytes | None, bytes | None]], options: dict, column_wise: bool
) -> list[dict]:
    """The rows silver's decode makes of these messages, column-wise or row by row, in (offset, event) order."""
    batches = decode_batches(iter([bronze_batch(messages)]), protocol, options, column_wise=column_wise)
    rows = [row for batch in batches for row in pa.Table.from_batches([batch]).to_pylist()]
    for row in rows:  # maps as dicts: the order of a map's entries carries nothing
        for name in ("before", "after", "column_types"):
            row[name] = None if row[name] is None else dict(row[name])
    return sorted(rows, key=lambda r: (r["offset"], r["event_index"]))


def decode_partitions(protocol: str, messages: list[Message], options: Mapping[str, Any]) -> dict[int, list[dict]]:
    """Partition -> to_dict() of its events: one decoder per partition, its messages in order (as silver does).
    Where the protocol also decodes column-wise, each partition's messages decoded that way must agree."""
    decoders: dict[int, Decoder] = {}
    decoded: dict[int, list[dict]] = {}
    by_message: dict[int, list[tuple[int, Message, list[dict]]]] = {}
    for i, m in enumerate(messages):
        if m.partition not in decoders:
            decoders[m.partition] = changefeed_decoder(protocol, options)
            decoded[m.partition] = []
        events = [e.to_dict() for e in decoders[m.partition].decode(m.key, m.value, list(m.headers) or None)]
        decoded[m.partition].extend(events)
        by_message.setdefault(m.partition, []).append((i, m, events))
    allowed = decoder_class(protocol).OPTIONS
    for part in by_message.values():
        agree_by_columns(
            protocol,
            {k: v for k, v in options.items() if k in allowed},
            [(m.key, m.value) for _, m, _ in part],
            {n: events for n, (_, _, events) in enumerate(part)},
        )
    return decoded


# One column of every MySQL type, and a row with a value in each that is hard to get right.
EVERY_TYPE = Table(
    "shop",
    "all_types",
    (
        Column("id", "bigint unsigned", nullable=False),
        *INTEGER_COLUMNS,
        Column("dec", "decimal(20,6)"),
        Column("dec0", "decimal(10,0)"),
        Column("f", "float"),
        Column("d", "double"),
        Column("b", "bit(64)"),
        Column("dt", "date"),
        Column("dtm", "datetime(6)"),
        Column("ts", "timestamp(3)"),
        Column("tm", "time(2)"),
        Column("yr", "year"),
        Column("c", "char(10)"),
        Column("vc", "varchar(200)"),
        Column("tx", "text"),
        Column("bn", "binary(4)"),
        Column("vb", "varbinary(300)"),
        Column("bl", "blob"),
        Column("en", "enum('a','b''s','c')"),
        Column("st", "set('x','y','z')"),
        Column("js", "json"),
    ),
    key=("id",),
)

EVERY_TYPE_ROW = {
    "id": 18446744073709551615,
    **integer_limits(INTEGER_COLUMNS, signed="min", unsigned="max"),
    "dec": Decimal("-12345678901234.123456"),
    "dec0": Decimal("9999999999"),
    "f": 1.1,
    "d": 3.141592653589793,
    "b": (1 << 64) - 1,
    "dt": dt.date(2024, 2, 29),
    "dtm": dt.datetime(2024, 2, 29, 23, 59, 59, 123456),
    "ts": dt.datetime(2024, 7, 1, 3, 30, 0, 123000),
    "tm": -dt.timedelta(hours=838, minutes=59, seconds=59, microseconds=990000),
    "yr": 1901,
    "c": "héllo",
    "vc": '日本語 <tag> & "q" \\ \n\t\u2028 😀',
    "tx": "a\x00b\x1fc",
    "bn": b"\x00\x01\xfe\xff",
    "vb": EVERY_BYTE,
    "bl": EVERY_BYTE[::-1],
    "en": "b's",
    "st": ("x", "z"),
    "js": '{"k": [1, 2.5, "<&>"], "n": null}',
}


# Key values JSON must escape (a quote, a backslash, control characters, astral and separator characters): the
# fixed column-path tests key rows with them
ODD_KEYS = ["plain", 'quote " inside', "back\\slash", "tab\there", "nul\x00", "日本語 😀", "\u2028", "\x7f"]


def keyed_table(*extra: Any, name: str = "odd keys") -> Any:
    """The fixed column-path tests' table: a composite key (`k` text, `n` int), then text, binary, float and enum
    columns, then each protocol's `extra` columns."""
    from ticdc_devkit.simulator.model import Column, Table

    base = (
        Column("k", "varchar(40)", nullable=False),
        Column("n", "int", nullable=False),
        Column("v", "varchar(40)"),
        Column("b", "varbinary(8)"),
        Column("f", "float"),
        Column("e", "enum('a','b')"),
    )
    return Table("shop", name, (*base, *extra), key=("k", "n"))
