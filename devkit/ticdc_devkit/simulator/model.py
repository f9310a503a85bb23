"""The logical change stream the simulator encodes, and the canonical events it must decode to.

Values are typed Python values per MySQL type:
  integers/bit/year -> int; decimal -> Decimal; float/double -> float; char/text/json -> str;
  binary/blob -> bytes; date -> datetime.date; datetime/timestamp -> naive datetime.datetime
  (timestamp values in UTC); time -> datetime.timedelta; enum -> label str; set -> tuple of labels.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, replace
from typing import Any

from spark_jobs.canonical.events import ChangeEvent, table_schema
from spark_jobs.canonical.values import canonical_type, canonical_value, enum_elements, parse_type
from spark_jobs.ddl import classify

# TiDB's default display width (flen) of an integer type: (signed, unsigned)
INTEGER_DISPLAY_WIDTHS = {
    "tinyint": (4, 3),
    "smallint": (6, 5),
    "mediumint": (9, 8),
    "int": (11, 10),
    "bigint": (20, 20),
}
# java.sql.Types codes on which TiCDC's two mappings agree: Canal-JSON's sqlType (MySQLType2JavaType)
# and Debezium's jdbcType (MySQLType2JdbcType); each encoder adds the types where they differ.
JAVA_TYPES_AGREED = {
    "tinyint": -6,
    "smallint": 5,
    "mediumint": 4,
    "int": 4,
    "bigint": -5,
    "float": 7,
    "double": 8,
    "decimal": 3,
    "date": 91,
    "time": 92,
    "datetime": 93,
    "bit": -7,
    "char": 1,
    "varchar": 12,
    "json": 12,
}


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # full MySQL definition: "int unsigned", "decimal(10,4)", "enum('a','b')"
    nullable: bool = True
    default: Any = None

    @property
    def base(self) -> str:
        return parse_type(self.type)[0]

    @property
    def unsigned(self) -> bool:
        return parse_type(self.type)[2]


@dataclass(frozen=True)
class Table:
    database: str
    name: str
    columns: tuple[Column, ...]
    key: tuple[str, ...]  # handle-key columns (primary key, or a not-null unique key)
    table_id: int = 100
    schema_version: int = 1  # Simple's schemaVersion: the commit ts of the DDL that made this version

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)

    def canonical_schema(self) -> dict[str, Any]:
        cols = []
        for c in self.columns:
            entry: dict[str, Any] = {
                "name": c.name,
                "type": canonical_type(c.type),
                "nullable": c.nullable and c.name not in self.key,
            }
            if c.base in ("enum", "set"):
                entry["elements"] = enum_elements(c.type)
            cols.append(entry)
        return table_schema(self.database, self.name, cols, list(self.key))


@dataclass(frozen=True)
class Ddl:
    commit_ts: int
    database: str
    table: str | None  # None for database-level DDL
    sql: str
    ddl_type: str  # ddl.classify(sql): the encoders pick the protocol's own DDL type (action, canal type) by it
    table_after: Table | None = None  # schema after the DDL (None for drops)
    table_before: Table | None = None  # schema before (alter/rename/drop)


@dataclass(frozen=True)
class RowChange:
    commit_ts: int
    op: str  # insert / update / delete
    table: Table
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None


@dataclass(frozen=True)
class Watermark:
    ts: int


@dataclass(frozen=True)
class Bootstrap:
    """Simple protocol's periodic schema announcement (other protocols send nothing for it)."""

    table: Table


Event = Ddl | RowChange | Watermark | Bootstrap


@dataclass(frozen=True)
class Message:
    """One Kafka record as TiCDC would produce it."""

    topic: str
    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


def key_changed(change: RowChange) -> bool:
    return change.op == "update" and any(change.before.get(k) != change.after.get(k) for k in change.table.key)


def split_key_changing_updates(events: list[Event]) -> list[Event]:
    """TiCDC splits an UPDATE that changes the handle key into DELETE + INSERT at the same commit ts."""
    out: list[Event] = []
    for e in events:
        if isinstance(e, RowChange) and key_changed(e):
            out.append(replace(e, op="delete", after=None))
            out.append(replace(e, op="insert", before=None))
        else:
            out.append(e)
    return out


def dispatch_partition(change: RowChange, partitions: int, rule: str = "table") -> int:
    """The partition TiCDC's dispatcher picks: by table (default), by index value, or by ts."""
    if partitions <= 1:
        return 0
    if rule == "table":
        return zlib.crc32((change.table.database + change.table.name).encode()) % partitions
    if rule == "index-value":
        row = change.after if change.after is not None else change.before
        text = "".join(str(row[k]) for k in change.table.key)
        return zlib.crc32((change.table.database + change.table.name + text).encode()) % partitions
    if rule == "ts":
        return change.commit_ts % partitions
    raise ValueError(f"unknown dispatch rule {rule!r}")


def expected_event(e: Event) -> ChangeEvent:
    """What a lossless decoder must return for a logical event."""
    if isinstance(e, Watermark):
        return ChangeEvent(kind="watermark", commit_ts=e.ts)
    if isinstance(e, Bootstrap):
        return ChangeEvent(
            kind="bootstrap",
            database=e.table.database,
            table=e.table.name,
            schema_version=e.table.schema_version,
            table_schema=e.table.canonical_schema(),
            key_columns=list(e.table.key),
        )
    if isinstance(e, Ddl):
        return ChangeEvent(
            kind="ddl",
            database=e.database,
            table=e.table,
            commit_ts=e.commit_ts,
            ddl_type=classify(e.sql),  # every decoder classifies the statement, not the protocol's DDL type
            ddl_sql=e.sql,
            table_schema=e.table_after.canonical_schema() if e.table_after else None,
        )
    t = e.table
    return ChangeEvent(
        kind="row",
        op=e.op,
        database=t.database,
        table=t.name,
        commit_ts=e.commit_ts,
        key_columns=list(t.key),
        before=_canonical_row(t, e.before),
        after=_canonical_row(t, e.after),
        column_types={c.name: canonical_type(c.type) for c in t.columns},
        schema_version=None,
    )


def _canonical_row(t: Table, row: dict[str, Any] | None) -> dict[str, str | None] | None:
    if row is None:
        return None
    return {c.name: canonical_value(c.type, row.get(c.name)) for c in t.columns}
