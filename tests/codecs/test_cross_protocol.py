"""Invariant 1 at the codec level: one logical stream, six encodings, the same canonical rows.

A hypothesis strategy draws a table over every MySQL type and a DML stream over it (inserts, updates
that may change the key, deletes, NULLs, real TSO timestamps); the stream is encoded by the
simulator in each protocol variant and decoded partition by partition. Two things must hold:
(a) each protocol decodes to exactly what its simulator's `expected()` says, and (b) the rows agree
across protocols once the documented losses in `LOSSES` below (and nothing else) are projected out.
(b) does not trust `expected()`: it compares against the lossless `model.expected_event`.
And one statement, one DDL type: every protocol that sends DDL reads its statement through `ddl.classify`.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_jobs.canonical.values import INTEGER_TYPES, enum_elements, fsp_of, text_double, text_enum, text_set
from spark_jobs.codecs import PROTOCOLS, ChangeEvent
from spark_jobs.ddl import classify
from tests.codecs.helpers import changefeed_options, decode_partitions, integer_range
from ticdc_devkit.simulator import avro as avro_sim
from ticdc_devkit.simulator import canal_json as canal_sim
from ticdc_devkit.simulator import debezium as debezium_sim
from ticdc_devkit.simulator import open_protocol as open_sim
from ticdc_devkit.simulator import simple as simple_sim
from ticdc_devkit.simulator.model import (
    Bootstrap,
    Column,
    Ddl,
    RowChange,
    Table,
    Watermark,
    expected_event,
    split_key_changing_updates,
)
from ticdc_devkit.simulator.stream import EXTENSION_OPTIONS, encode_stream, make_encoder, partition_events

# The option set each variant runs with: the TiDB extension on wherever the protocol has one.

EXPECTED: dict[str, Callable[[Any, dict], ChangeEvent | None]] = {
    "canal-json": canal_sim.expected,
    "open": open_sim.expected,
    "debezium": debezium_sim.expected,
    "avro": avro_sim.expected,
    "simple-json": lambda e, o: simple_sim.expected(e, o, "json"),
    "simple-avro": lambda e, o: simple_sim.expected(e, o, "avro"),
}

ROW_FIELDS = ("database", "table", "op", "commit_ts", "key_columns", "before", "after")


# ---- strategies ---------------------------------------------------------------------------------

_TIME_MAX_US = (838 * 3600 + 59 * 60 + 59) * 1_000_000
_TS_MIN = dt.datetime(1970, 1, 1, 0, 0, 1)
_TS_MAX = dt.datetime(2038, 1, 19, 3, 14, 7, 999999)
_LABEL = st.text(alphabet="abcxyzé字'\\ _-", min_size=1, max_size=5)
_TEXT = st.text(max_size=12)


def _truncate(micros: int, fsp: int) -> int:
    unit = 10 ** (6 - fsp)
    return micros - micros % unit


def _quote(label: str) -> str:
    return "'" + label.replace("\\", "\\\\").replace("'", "''") + "'"


@st.composite
def column_types(draw, key: bool = False) -> str:
    """A full MySQL column definition; key columns only draw types a handle key can have."""
    kinds = ["int", "decimal", "char", "varchar", "date", "datetime", "binary", "varbinary", "year", "time", "enum"]
    if not key:
        kinds += ["float", "double", "bit", "timestamp", "text", "blob", "set", "json"]
    kind = draw(st.sampled_from(kinds))
    if kind == "int":
        base = draw(st.sampled_from(INTEGER_TYPES))
        return base + (" unsigned" if draw(st.booleans()) else "")
    if kind == "decimal":
        precision = draw(st.integers(1, 65))
        return f"decimal({precision},{draw(st.integers(0, min(precision, 30)))})"
    if kind in ("datetime", "timestamp", "time"):
        return f"{kind}({draw(st.integers(0, 6))})"
    if kind in ("char", "binary"):
        return f"{kind}({draw(st.integers(1, 8))})"
    if kind in ("varchar", "varbinary"):
        return f"{kind}({draw(st.sampled_from([16, 255, 1024]))})"
    if kind == "bit":
        return f"bit({draw(st.integers(1, 64))})"
    if kind == "text":
        return draw(st.sampled_from(["tinytext", "text", "mediumtext", "longtext"]))
    if kind == "blob":
        return draw(st.sampled_from(["tinyblob", "blob", "mediumblob", "longblob"]))
    if kind in ("enum", "set"):
        labels = draw(
            st.lists(_LABEL.filter(lambda s: "," not in s and s == s.rstrip()), min_size=1, max_size=5, unique=True)
        )
        return f"{kind}(" + ",".join(_quote(label) for label in labels) + ")"
    return kind


def _json_values():
    scalars = (
        st.none()
        | st.booleans()
        | st.integers(-(2**53), 2**53)
        | _TEXT
        | st.floats(allow_nan=False, allow_infinity=False).filter(lambda x: x == x and abs(x) < 1e300 and x != 0)
    )
    return st.recursive(
        scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3), max_leaves=6
    )


def values_of(column: Column) -> st.SearchStrategy:
    """Typed model values (see model.py) a column of this type can hold."""
    base, definition = column.base, column.type
    if base in INTEGER_TYPES:
        return st.integers(*integer_range(definition))
    if base == "decimal":
        precision, scale = (int(p) for p in definition[8:-1].split(","))
        limit = 10**precision - 1
        return st.integers(-limit, limit).map(lambda n: Decimal(f"{n}E-{scale}"))  # exact: no 28-digit context
    if base == "float":
        return st.floats(width=32, allow_nan=False, allow_infinity=False)
    if base == "double":
        return st.floats(allow_nan=False, allow_infinity=False)
    if base == "bit":
        return st.integers(0, (1 << int(definition[4:-1])) - 1)
    if base == "date":
        return st.dates(dt.date(1000, 1, 1), dt.date(9999, 12, 31))
    fsp = fsp_of(definition)
    if base == "datetime":
        return st.datetimes(dt.datetime(1000, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999)).map(
            lambda v: v.replace(microsecond=_truncate(v.microsecond, fsp))
        )
    if base == "timestamp":
        return st.datetimes(_TS_MIN, _TS_MAX).map(lambda v: v.replace(microsecond=_truncate(v.microsecond, fsp)))
    if base == "time":
        unit = 10 ** (6 - fsp)
        return st.integers(-_TIME_MAX_US // unit, _TIME_MAX_US // unit).map(
            lambda n: dt.timedelta(microseconds=n * unit)
        )
    if base == "year":
        return st.just(0) | st.integers(1901, 2155)
    if base in ("char", "varchar", "tinytext", "text", "mediumtext", "longtext"):
        size = int(definition[definition.index("(") + 1 : -1]) if "(" in definition else 40
        text = st.text(max_size=min(size, 40))
        return text.map(str.rstrip) if base == "char" else text
    if base == "binary":
        size = int(definition[7:-1])
        return st.binary(min_size=size, max_size=size)
    if base in ("varbinary", "tinyblob", "blob", "mediumblob", "longblob"):
        return st.binary(max_size=64)
    if base == "enum":  # '' is the error value (index 0) that non-strict SQL mode stores
        return st.sampled_from(enum_elements(definition)) | st.just("")
    if base == "set":
        labels = enum_elements(definition)
        return st.lists(st.sampled_from(labels), unique=True, max_size=len(labels)).map(tuple)
    if base == "json":
        return _json_values().map(lambda v: json.dumps(v, ensure_ascii=False, sort_keys=True))
    raise AssertionError(f"no values for {definition}")


_NAME = st.from_regex(r"[a-z][a-z0-9_]{0,11}", fullmatch=True)


@st.composite
def tables(draw) -> Table:
    """1-8 columns, a handle key of 1-2 of them (not null), the rest nullable at random."""
    count = draw(st.integers(1, 8))
    key_count = draw(st.integers(1, min(2, count)))
    key_positions = draw(st.lists(st.integers(0, count - 1), min_size=key_count, max_size=key_count, unique=True))
    columns = []
    for i in range(count):
        is_key = i in key_positions
        definition = draw(column_types(key=is_key))
        columns.append(
            Column(
                f"c{i}_{definition.split('(')[0].split()[0]}", definition, nullable=not is_key and draw(st.booleans())
            )
        )
    key = tuple(columns[i].name for i in key_positions)  # index order may differ from column order
    return Table(draw(_NAME), draw(_NAME), tuple(columns), key, table_id=draw(st.integers(1, 10_000)))


def create_sql(table: Table) -> str:
    parts = [f"`{c.name}` {c.type.upper()}{'' if c.nullable else ' NOT NULL'}" for c in table.columns]
    parts.append("PRIMARY KEY (" + ", ".join(f"`{k}`" for k in table.key) + ")")
    return f"CREATE TABLE `{table.database}`.`{table.name}` (" + ", ".join(parts) + ")"


@st.composite
def rows_of(draw, table: Table) -> dict[str, Any]:
    row = {}
    for c in table.columns:
        nullable = c.nullable and c.name not in table.key
        row[c.name] = None if nullable and draw(st.integers(0, 4)) == 0 else draw(values_of(c))
    return row


def key_of(table: Table, row: dict[str, Any]) -> tuple:
    return tuple(row[k] for k in table.key)


@st.composite
def streams(draw) -> list:
    """CREATE TABLE, a Bootstrap (Simple), then DML with increasing TSO commit ts, a watermark last."""
    table = draw(tables())
    physical = draw(st.integers(1_500_000_000_000, 2_000_000_000_000))
    logical = draw(st.integers(0, 1000))

    def tso() -> int:
        return physical << 18 | logical

    table = Table(table.database, table.name, table.columns, table.key, table.table_id, schema_version=tso())
    events: list = [
        Ddl(tso(), table.database, table.name, create_sql(table), "create_table", table_after=table),
        Bootstrap(table),
    ]
    live: dict[tuple, dict] = {}
    for _ in range(draw(st.integers(1, 20))):
        step = draw(st.integers(0, 3))
        if step:  # 0: another change in the same transaction
            physical += draw(st.integers(0, 5000))
            logical = draw(st.integers(logical + 1, logical + 2000)) % (1 << 18) if step == 1 else logical + 1
            if logical == 0:
                physical += 1
        op = draw(st.sampled_from(["insert", "update", "delete"])) if live else "insert"
        if op == "insert":
            row = draw(rows_of(table))
            if key_of(table, row) in live:
                continue
            live[key_of(table, row)] = row
            events.append(RowChange(tso(), "insert", table, None, row))
            continue
        old_key = draw(st.sampled_from(sorted(live, key=repr)))
        old = live[old_key]
        if op == "delete":
            del live[old_key]
            events.append(RowChange(tso(), "delete", table, old, None))
            continue
        new = draw(rows_of(table))
        if draw(st.booleans()):
            new.update({k: old[k] for k in table.key})
        if key_of(table, new) != old_key and key_of(table, new) in live:
            continue
        del live[old_key]
        live[key_of(table, new)] = new
        events.append(RowChange(tso(), "update", table, old, new))
    events.append(Watermark((physical + 1) << 18))
    return events


# ---- encode, decode ------------------------------------------------------------------------------


def run(protocol: str, events: list, options: dict, partitions: int, dispatch: str):
    """(decoded, expected) as to_dict() lists per partition: one decoder per partition, in order."""
    messages = encode_stream(protocol, events, partitions=partitions, options=options, dispatch=dispatch)
    decoded = decode_partitions(protocol, messages, options)
    got = [decoded.get(p, []) for p in range(partitions)]
    ddl_to_all = make_encoder(protocol, options).DDL_TO_ALL_PARTITIONS
    want = [
        [x.to_dict() for x in (EXPECTED[protocol](e, options) for e in part) if x is not None]
        for part in partition_events(events, partitions, ddl_to_all=ddl_to_all, dispatch=dispatch)
    ]
    return got, want


# ---- the documented losses, one projection each --------------------------------------------------
# A projection takes an event dict (row events only) and the logical table and returns it with the
# loss removed. Each is applied to that protocol's decoded rows AND to the lossless reference, so it
# must be idempotent and leave lossless values alone where the loss does not apply.


def _columns(table: Table, *bases: str):
    return [c for c in table.columns if c.base in bases]


def _map_images(event: dict, fn: Callable[[str, str], str], columns) -> dict:
    names = {c.name: c for c in columns}
    for side in ("before", "after"):
        image = event[side]
        if image is not None:
            event[side] = {n: (fn(names[n].type, v) if n in names and v is not None else v) for n, v in image.items()}
    return event


def key_in_column_order(event: dict, table: Table) -> dict:
    event["key_columns"] = [c.name for c in table.columns if c.name in event["key_columns"]]
    return event


def enum_labels(event: dict, table: Table) -> dict:
    if "enum_index" not in event["flags"]:
        return event

    def label(definition: str, text: str) -> str:
        elements = enum_elements(definition)
        if definition.startswith("enum"):
            return text_enum(int(text), elements)[0]
        return text_set(int(text), elements)[0]

    event["flags"] = [f for f in event["flags"] if f != "enum_index"]  # labels now: idempotent
    return _map_images(event, label, _columns(table, "enum", "set"))


def time_without_fraction(event: dict, table: Table) -> dict:
    return _map_images(event, lambda _, text: text.split(".")[0], _columns(table, "time"))


def decimal_as_double(event: dict, table: Table) -> dict:
    return _map_images(event, lambda _, text: text_double(float(Decimal(text))), _columns(table, "decimal"))


def fraction_to_fsp(event: dict, table: Table) -> dict:
    def fit(definition: str, text: str) -> str:
        whole, _, fraction = text.partition(".")
        fsp = fsp_of(definition)
        return whole + ("." + (fraction + "000000")[:fsp] if fsp else "")

    return _map_images(event, fit, _columns(table, "datetime", "time"))


def update_without_before(event: dict, table: Table) -> dict:
    if event["op"] == "update":
        event["before"] = None
    return event


def delete_key_only_without_ts(event: dict, table: Table) -> dict:
    if event["op"] == "delete":
        event["commit_ts"] = None
        event["before"] = {k: v for k, v in event["before"].items() if k in table.key}
    return event


# protocol -> [(projection, why the protocol cannot do better)]; every rule here is listed in that
# protocol's `expected()` docstring. Anything not projected out must be identical.
LOSSES: dict[str, list[tuple[Callable[[dict, Table], dict], str]]] = {
    "canal-json": [
        (key_in_column_order, "pkNames lists the handle key in table column order, not index order"),
        (enum_labels, "without content-compatible mysqlType has no labels: ENUM/SET arrive as index/bitmask"),
    ],
    "open": [
        (key_in_column_order, "the handle key is a flag per column, so its index order is lost"),
        (enum_labels, "ENUM/SET travel as index/bitmask and the wire never carries the labels"),
        (time_without_fraction, "TiCDC reads TIME with fsp 0 for the Open Protocol: the fraction is cut off"),
    ],
    "debezium": [
        (key_in_column_order, "TiCDC writes the key struct in table column order"),
        (decimal_as_double, "DECIMAL travels as a binary double"),
        (fraction_to_fsp, "DATETIME/TIME travel as epoch ms/µs without their fsp: 3 or 6 digits come back"),
    ],
    "avro": [
        (key_in_column_order, "the key record holds the handle key in table column order"),
        (update_without_before, "an update carries the new row only"),
        (delete_key_only_without_ts, "a delete is the key alone with a null value: no other column, no commit ts"),
    ],
    "simple-json": [],
    "simple-avro": [],
}


def _row_tuple(event: dict) -> dict:
    return {f: event[f] for f in ROW_FIELDS}


def project(event: dict, table: Table, rules) -> dict:
    event = {**event, "flags": list(event.get("flags") or [])}
    for rule, _ in rules:
        event = rule(event, table)
    return _row_tuple(event)


def check_stream(events: list, registry_url: str, partitions: int = 1, dispatch: str = "table") -> None:
    table = next(e.table_after for e in events if isinstance(e, Ddl))
    logical_rows = [e for e in split_key_changing_updates(events) if isinstance(e, RowChange)]
    per_partition = partition_events(events, partitions, ddl_to_all=True, dispatch=dispatch)
    reference = [[expected_event(e).to_dict() for e in part if isinstance(e, RowChange)] for part in per_partition]
    everything = [rule for rules in LOSSES.values() for rule in rules]
    common = None
    for protocol in PROTOCOLS:
        options = changefeed_options(protocol, registry_url)
        got, want = run(protocol, events, options, partitions, dispatch)
        # (a) exactly what the protocol's expected() says
        assert got == want, protocol
        rows = [[e for e in part if e["kind"] == "row"] for part in got]
        assert sum(map(len, rows)) == len(logical_rows), protocol
        # (b) the lossless reference, minus this protocol's documented losses, and nothing else
        for part_rows, part_reference in zip(rows, reference):
            assert [project(e, table, LOSSES[protocol]) for e in part_rows] == [
                project(e, table, LOSSES[protocol]) for e in part_reference
            ], protocol
        # ... and all six identical once every documented loss is projected out
        projected = [[project(e, table, everything) for e in part] for part in rows]
        if common is None:
            common = projected
        assert projected == common, protocol


# ---- the property ---------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(events=streams(), partitions=st.integers(1, 3), dispatch=st.sampled_from(["table", "index-value"]))
def test_every_protocol_decodes_the_same_stream(registry_url, events, partitions, dispatch):
    check_stream(events, registry_url, partitions, dispatch)


# ---- edge values, fixed ---------------------------------------------------------------------------

EDGE = Table(
    "edge",
    "values",
    (
        Column("id", "bigint unsigned", nullable=False),
        Column("f", "float"),
        Column("d", "double"),
        Column("vc", "varchar(255)"),
        Column("bl", "blob"),
        Column("vb", "varbinary(256)"),
        Column("tm", "time"),
        Column("tm6", "time(6)"),
        Column("dtm6", "datetime(6)"),
        Column("ts6", "timestamp(6)"),
        Column("dec", "decimal(12,4)"),
        Column("e", "enum('a','b')"),
        Column("s", "set('x','y')"),
    ),
    key=("id",),
    schema_version=(1_700_000_000_000 << 18) + 1,
)
EDGE_COLUMNS = {c.name: None for c in EDGE.columns}


def _edge_stream(*rows: dict, updates: tuple = ()) -> list:
    base = 1_700_000_000_000 << 18
    events: list = [
        Ddl(EDGE.schema_version, "edge", "values", create_sql(EDGE), "create_table", table_after=EDGE),
        Bootstrap(EDGE),
    ]
    for i, row in enumerate(rows):
        events.append(RowChange(base + (i + 1 << 18), "insert", EDGE, None, {**EDGE_COLUMNS, **row}))
    for i, (old, new) in enumerate(updates):
        events.append(
            RowChange(base + (100 + i << 18) + 7, "update", EDGE, {**EDGE_COLUMNS, **old}, {**EDGE_COLUMNS, **new})
        )
    events.append(Watermark(base + (1000 << 18)))
    return events


BIGINT_UNSIGNED_MAX = 18446744073709551615
FLOAT_MAX = 3.4028234663852886e38


def test_bigint_unsigned_max_and_float_max(registry_url):
    check_stream(
        _edge_stream(
            {"id": BIGINT_UNSIGNED_MAX, "f": FLOAT_MAX, "d": 1.7976931348623157e308},
            {"id": 1 << 63, "f": -FLOAT_MAX, "d": 5e-324},
            updates=(({"id": 1 << 63}, {"id": 1 << 63, "f": 1.1, "d": 0.1}),),
        ),
        registry_url,
    )


def test_negative_zero(registry_url):
    check_stream(_edge_stream({"id": 1, "f": -0.0, "d": -0.0, "dec": Decimal("-0.0000")}), registry_url)


def test_empty_string_is_not_null(registry_url):
    check_stream(
        _edge_stream(
            {"id": 1, "vc": "", "bl": b"", "vb": b"", "e": "a", "s": ()},
            {"id": 2},
            updates=(
                ({"id": 2}, {"id": 2, "vc": "", "bl": b""}),
                ({"id": 1, "vc": "", "bl": b"", "vb": b"", "e": "a", "s": ()}, {"id": 1}),
            ),
        ),
        registry_url,
    )


def test_every_byte_value(registry_url):
    every = bytes(range(256))
    check_stream(
        _edge_stream({"id": 1, "vb": every, "bl": every[::-1], "vc": "".join(map(chr, range(1, 256)))}), registry_url
    )


def test_time_extremes(registry_url):
    limit = dt.timedelta(hours=838, minutes=59, seconds=59)
    check_stream(
        _edge_stream(
            {"id": 1, "tm": -limit, "tm6": -limit},
            {"id": 2, "tm": limit, "tm6": limit},
            {"id": 3, "tm": dt.timedelta(0), "tm6": dt.timedelta(microseconds=-1)},
        ),
        registry_url,
    )


def test_zero_fractional_digits(registry_url):
    check_stream(
        _edge_stream(
            {
                "id": 1,
                "tm6": dt.timedelta(hours=1),
                "dtm6": dt.datetime(2024, 1, 2, 3, 4, 5),
                "ts6": dt.datetime(2024, 1, 2, 3, 4, 5),
                "dec": Decimal("7"),
            },
            {"id": 2, "dtm6": dt.datetime(1000, 1, 1), "ts6": dt.datetime(1970, 1, 1, 0, 0, 1), "dec": Decimal("0")},
        ),
        registry_url,
    )


# ---- one statement, one DDL type ----------------------------------------------------------------------

DDL_PROTOCOLS = [p for p in PROTOCOLS if p != "avro"]  # Avro sends no DDL
DDL_STATEMENTS = [
    # tables and databases
    "CREATE TABLE `a`.`b` (id int)",
    "CREATE TABLE t (a int)",
    "CREATE TABLE t2 LIKE t",
    "DROP TABLE IF EXISTS b",
    "drop table if exists t",
    "DROP TABLE a, b",
    "TRUNCATE TABLE b",
    "TRUNCATE t",
    "/* hint */ TRUNCATE TABLE t",
    "CREATE DATABASE IF NOT EXISTS d",
    "create database if not exists d",
    "/* hint */ create database d",
    "CREATE SCHEMA IF NOT EXISTS `s`",
    "/* comment */ drop schema d",
    "DROP SCHEMA d",
    "DROP DATABASE d",
    "ALTER DATABASE d CHARACTER SET utf8mb4",
    "RECOVER TABLE t",
    "FLASHBACK TABLE t TO t2",
    # renames, also RENAME TABLE lists
    "RENAME TABLE a TO b",
    "RENAME TABLE a TO b, c TO d",
    "RENAME TABLE `d1`.`a` TO `d2`.`a`",
    "ALTER TABLE a RENAME TO b",
    "ALTER TABLE t RENAME TO u",
    # one clause
    "ALTER TABLE `db`.`t` ADD COLUMN c int",
    "ALTER TABLE db.t ADD c INT",
    "alter table t add c int",
    "ALTER TABLE t ADD COLUMN c int",
    "ALTER TABLE t DROP COLUMN c",
    "alter table `t` drop `c`",
    "ALTER TABLE t MODIFY COLUMN c bigint",
    "ALTER TABLE t MODIFY c BIGINT",
    "ALTER TABLE t ALTER COLUMN c SET DEFAULT 1",
    "ALTER TABLE t RENAME COLUMN c TO d",
    "ALTER TABLE d.t RENAME COLUMN a TO b",
    # CHANGE: a rename unless the name stays
    "ALTER TABLE t CHANGE c c bigint",
    "ALTER TABLE t CHANGE COLUMN c c BIGINT",
    "ALTER TABLE t CHANGE c d INT",
    "ALTER TABLE t CHANGE COLUMN c d bigint",
    "ALTER TABLE `t` CHANGE `a` `b` int",
    # indexes
    "ALTER TABLE t ADD INDEX i (c)",
    "ALTER TABLE t ADD PRIMARY KEY (a)",
    "CREATE UNIQUE INDEX i ON t (c)",
    "DROP INDEX i ON t",
    "ALTER TABLE t DROP INDEX i",
    "ALTER TABLE t DROP KEY k",
    # several clauses: one kind keeps it, mixed kinds are a multi-schema change
    "ALTER TABLE t ADD COLUMN a INT, DROP COLUMN b",
    "ALTER TABLE t ADD COLUMN c INT, DROP COLUMN d",
    "ALTER TABLE t ADD c INT, DROP d",
    "ALTER TABLE t ADD COLUMN c DECIMAL(10,4), ADD COLUMN d INT",
    "ALTER TABLE `t` ADD `c` INT, ADD d INT",
    "ALTER TABLE t ADD COLUMN (a INT, b INT)",
    "ALTER TABLE t DROP a, DROP b",
    "ALTER TABLE t ADD c INT, ADD INDEX i (c)",
    "ALTER TABLE t MODIFY a BIGINT, CHANGE b c INT",
    "ALTER TABLE t ALGORITHM=INPLACE, ADD COLUMN c INT",
    # partitions
    "ALTER TABLE t ADD PARTITION (PARTITION p3 VALUES LESS THAN (300))",
    "ALTER TABLE t DROP PARTITION p1, p2",
    "ALTER TABLE t TRUNCATE PARTITION p1",
    "ALTER TABLE t EXCHANGE PARTITION p1 WITH TABLE t2",
    "ALTER TABLE t REORGANIZE PARTITION p1 INTO (PARTITION p1a VALUES LESS THAN (5))",
    "ALTER TABLE t COALESCE PARTITION 2",
    "ALTER TABLE t PARTITION BY HASH(a) PARTITIONS 4",
    "ALTER TABLE t REMOVE PARTITIONING",
    # executable comments are run; other comments and strings are not
    "/*!40101 ALTER TABLE t DROP COLUMN c */",
    "ALTER TABLE t ADD COLUMN c bigint /*T![auto_rand] AUTO_RANDOM(5) */ NOT NULL",
    "CREATE TABLE t (id bigint, PRIMARY KEY (id) /*T![clustered_index] NONCLUSTERED */) /*!50100 ENGINE=x */",
    "ALTER TABLE t COMMENT '/*T! DROP COLUMN id */'",
    # table options and statements without a type of their own
    "ALTER TABLE t COMMENT = 'x'",
    "ALTER TABLE t COMMENT 'x'",
    "CREATE VIEW v AS SELECT 1",
    "GRANT ALL",
]


def decoded_ddl_type(protocol: str, sql: str) -> str:
    """The ddl_type a decoder reads from the DDL message the simulator's encoder makes of this statement."""
    event = Ddl(1_700_000_000_000 << 18, "d", "t", sql, classify(sql))
    options = EXTENSION_OPTIONS[protocol]
    [decoded] = decode_partitions(protocol, encode_stream(protocol, [event], options=options), options)[0]
    return decoded["ddl_type"]


@pytest.mark.parametrize("sql", DDL_STATEMENTS)
def test_every_protocol_reads_the_same_ddl_type(sql):
    """ddl.classify of the statement, whatever the protocol's own DDL type (canal type, action type, tableChanges)."""
    assert {p: decoded_ddl_type(p, sql) for p in DDL_PROTOCOLS} == dict.fromkeys(DDL_PROTOCOLS, classify(sql))


def test_a_ddl_without_its_statement_is_other():
    """Where a DDL message can carry an empty statement (Canal-JSON and Simple JSON refuse one: DecodeError)."""
    empty = ("open", "debezium", "simple-avro")
    assert {p: decoded_ddl_type(p, "") for p in empty} == dict.fromkeys(empty, "other")
