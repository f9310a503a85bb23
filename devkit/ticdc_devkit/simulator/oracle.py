"""The upstream database as TiDB shows it: a logical stream applied up to a timestamp (the test oracle).

Rows are {column: canonical text}, keyed by the canonical text of their handle-key values (what gold's
`_row_key` holds). DDL applies as TiDB applies it:
- CREATE TABLE starts empty, also after a DROP of the same name; DROP TABLE and DROP DATABASE remove;
  TRUNCATE TABLE empties; RENAME TABLE moves the rows; CREATE INDEX and CREATE DATABASE change no row.
- ADD COLUMN fills the existing rows with `fill_value`: the column's DEFAULT; without one NULL if the
  column is nullable, else TiDB's zero value of the type (`zero_value`).
- DROP COLUMN removes the values; adding the name again fills like any ADD (the old values stay gone).
- RENAME COLUMN and CHANGE COLUMN keep the values under the new name; MODIFY and CHANGE COLUMN convert
  them to the new type's canonical text (`converted_text`).
- A multi-clause ALTER (ADD, DROP, MODIFY together) applies column by column, by name.
The schema after each DDL is its `table_after`. A rename is read from the two schemas: the columns of the
table before that are missing after, paired in column order with the columns that are new after.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from spark_jobs.canonical.values import (
    BINARY_TYPES,
    CHAR_TYPES,
    INTEGER_TYPES,
    canonical_type,
    canonical_value,
    decimal_scale,
    enum_elements,
    int_bits,
    parse_type,
    text_decimal,
)
from ticdc_devkit.simulator.model import Column, Ddl, Event, RowChange, Table

Name = tuple[str, str]
Rows = dict[tuple, dict[str, str | None]]

_INTEGER = re.compile(r"-?[0-9]+")


def zero_value(column: Column) -> Any:
    """TiDB's zero value of a type (table.GetZeroValue; an ENUM takes its first label), as a typed model value.

    TiDB's zero DATE/DATETIME/TIMESTAMP is 0000-00-00, which no typed value of the model can hold: such a
    column raises ValueError, so a workload never adds one NOT NULL without a DEFAULT.
    """
    base = column.base
    if base in INTEGER_TYPES or base in ("bit", "year"):
        return 0
    if base == "decimal":
        return Decimal(0)
    if base in ("float", "double"):
        return 0.0
    if base in CHAR_TYPES:
        return ""
    if base == "binary":
        return bytes(int(parse_type(column.type)[1] or 1))
    if base in BINARY_TYPES:
        return b""
    if base == "time":
        return dt.timedelta(0)
    if base == "enum":
        return enum_elements(column.type)[0]
    if base == "set":
        return ()
    if base == "json":
        return "null"
    raise ValueError(f"TiDB's zero value of {column.type} (0000-00-00) has no typed value in the model")


def fill_value(column: Column) -> Any:
    """What TiDB shows in the existing rows for a column just added."""
    if column.default is not None:
        return column.default
    return None if column.nullable else zero_value(column)


def converted_text(text: str | None, old: Column, new: Column) -> str | None:
    """A value's canonical text after MODIFY/CHANGE COLUMN from `old`'s type to `new`'s, as TiDB casts it.

    Knows the conversions a workload draws: integer widening (same digits), DECIMAL precision or scale
    widening (zeros padded), character-length widening, integer -> character (the digits) and character
    holding an integer -> integer. Anything else, and a value TiDB's strict mode would refuse, raises.
    """
    if text is None or old.type == new.type:
        return text
    old_base, new_base = old.base, new.base
    if new_base in INTEGER_TYPES:
        if old_base not in INTEGER_TYPES and not (old_base in CHAR_TYPES and _INTEGER.fullmatch(text)):
            raise ValueError(f"TiDB refuses {text!r} as {new.type}")
        number, bits = int(text), int_bits(new_base)
        low, high = (0, (1 << bits) - 1) if new.unsigned else (-(1 << bits - 1), (1 << bits - 1) - 1)
        if not low <= number <= high:
            raise ValueError(f"{text} is out of range for {new.type}")
        return str(number)
    if new_base == "decimal" and old_base in (*INTEGER_TYPES, "decimal"):
        return text_decimal(Decimal(text), decimal_scale(new.type))
    if new_base in CHAR_TYPES and old_base in (*INTEGER_TYPES, *CHAR_TYPES, "decimal"):
        return text
    if canonical_type(old.type) == canonical_type(new.type):
        return text
    raise ValueError(f"the oracle does not know how TiDB converts {old.type} to {new.type}")


def key_text(table: Table, row: dict[str, Any]) -> tuple[str | None, ...]:
    """The canonical text of a typed row's handle-key values, in key order."""
    return tuple(canonical_value(table.column(k).type, row[k]) for k in table.key)


def _renames(before: Table, after: Table) -> dict[str, str]:
    """new name -> old name for a RENAME/CHANGE COLUMN."""
    after_names = [c.name for c in after.columns]
    before_names = [c.name for c in before.columns]
    gone = [n for n in before_names if n not in after_names]
    new = [n for n in after_names if n not in before_names]
    if len(gone) != len(new):
        raise ValueError(f"a column rename of {after.database}.{after.name} that does not rename: {gone} -> {new}")
    return dict(zip(new, gone))


def _reshape(
    rows: Rows, before: Table | None, after: Table, renames: dict[str, str], decimals_as_sent: bool = False
) -> Rows:
    """The rows in `after`'s columns: kept (renamed, converted) where the column was there, else filled. With
    `decimals_as_sent` a value that becomes a DECIMAL keeps its text: what a stream without DECIMAL scales (Avro's
    string decimals) last sent of it."""
    sources = {c.name: c for c in before.columns} if before is not None else {}
    out: Rows = {}
    for row in rows.values():
        new: dict[str, str | None] = {}
        for column in after.columns:
            source = sources.get(renames.get(column.name, column.name))
            if source is not None:
                text = row.get(source.name)
                as_sent = decimals_as_sent and column.base == "decimal"
                new[column.name] = text if as_sent else converted_text(text, source, column)
            elif before is None and column.name in row:
                new[column.name] = row[column.name]
            else:
                new[column.name] = canonical_value(column.type, fill_value(column))
        out[tuple(new[k] for k in after.key)] = new
    return out


class Upstream:
    """The upstream database, one event at a time in commit order: `rows` and `schemas` by (database, table).

    `preexisting` tables existed, empty, before the stream; a table that only rows mention appears with them.
    `removed` keeps, per table, the rows a gold table with soft or ignored deletes still holds (README, "How
    deletes land"), with the commit ts that removed them upstream, shaped by later DDL as the live rows are: with
    `deletes` soft every removed key (a delete, or an update that changed the key); with ignore a delete whose
    commit has no insert into the table (TiCDC sends a key change as a delete and an insert of one commit, which
    `inserts_at` lists: (database, table, commit ts)).
    """

    def __init__(
        self,
        preexisting: Iterable[Table] = (),
        deletes: str = "hard",
        inserts_at: frozenset[tuple] = frozenset(),
        decimals_as_sent: bool = False,
    ):
        self.schemas: dict[Name, Table] = {(t.database, t.name): t for t in preexisting}
        self.rows: dict[Name, Rows] = {name: {} for name in self.schemas}
        self.removed: dict[Name, dict[tuple, tuple[dict[str, str | None], int]]] = {}
        self.deletes, self.inserts_at = deletes, inserts_at
        self.decimals_as_sent = decimals_as_sent

    def apply(self, e: Event) -> None:
        if isinstance(e, Ddl):
            self._ddl(e)
        elif isinstance(e, RowChange):
            self._row(e)

    def _ddl(self, e: Ddl) -> None:
        rows, schemas = self.rows, self.schemas
        removed = self.removed
        if e.ddl_type == "drop_database":
            for name in [n for n in {**rows, **schemas} if n[0] == e.database]:
                rows.pop(name, None)
                schemas.pop(name, None)
                removed.pop(name, None)
            return
        if e.table is None:
            return
        name = (e.database, e.table)
        if e.ddl_type == "drop_table":
            rows.pop(name, None)
            schemas.pop(name, None)
            removed.pop(name, None)
        elif e.ddl_type == "rename_table" and e.table_before is not None:
            old = (e.table_before.database, e.table_before.name)
            rows[name] = rows.pop(old, {})
            removed[name] = removed.pop(old, {})
            schemas.pop(old, None)
            schemas[name] = e.table_after
        elif e.ddl_type in ("create_table", "truncate_table"):
            rows[name] = {}
            removed.pop(name, None)
            schemas[name] = e.table_after or e.table_before
        elif e.table_after is not None:
            before = schemas.get(name) or e.table_before
            renames = _renames(before, e.table_after) if e.ddl_type == "rename_column" and before is not None else {}
            as_sent = self.decimals_as_sent
            rows[name] = _reshape(rows.get(name, {}), before, e.table_after, renames, as_sent)
            kept = removed.get(name, {})
            if kept:
                shaped = _reshape({k: row for k, (row, _) in kept.items()}, before, e.table_after, renames, as_sent)
                removed[name] = {k: (shaped[k], ts) for k, (_, ts) in kept.items()}
            schemas[name] = e.table_after

    def _row(self, e: RowChange) -> None:
        name = (e.table.database, e.table.name)
        table_rows = self.rows.setdefault(name, {})
        removed = self.removed.setdefault(name, {})
        new_key = key_text(e.table, e.after) if e.after is not None else None
        if e.before is not None:
            old_key = key_text(e.table, e.before)
            row = table_rows.pop(old_key, None)
            kept = self.deletes == "soft" or (
                self.deletes == "ignore" and e.after is None and (*name, e.commit_ts) not in self.inserts_at
            )
            if row is not None and old_key != new_key and kept:
                removed[old_key] = (row, e.commit_ts)
        if e.after is not None:
            removed.pop(new_key, None)
            table_rows[new_key] = {c.name: canonical_value(c.type, e.after.get(c.name)) for c in e.table.columns}


def _replay(
    events: list[Event],
    as_of: int | None,
    preexisting: Iterable[Table],
    deletes: str = "hard",
    decimals_as_sent: bool = False,
    updates_as_inserts: bool = False,
) -> Upstream:
    inserts_at = frozenset(
        (e.table.database, e.table.name, e.commit_ts)
        for e in events
        if isinstance(e, RowChange)
        and e.after is not None
        and (updates_as_inserts or e.before is None or key_text(e.table, e.before) != key_text(e.table, e.after))
    )
    upstream = Upstream(preexisting, deletes, inserts_at, decimals_as_sent)
    for e in sorted((e for e in events if isinstance(e, (Ddl, RowChange))), key=lambda e: e.commit_ts):
        if as_of is not None and e.commit_ts > as_of:
            break
        upstream.apply(e)
    return upstream


def upstream_state(
    events: list[Event], as_of: int | None = None, preexisting: Iterable[Table] = (), decimals_as_sent: bool = False
) -> dict[Name, Rows]:
    """{(database, table): {key texts: {column: canonical text}}} after every event with ts <= as_of
    (`decimals_as_sent`: `_reshape`)."""
    return _replay(events, as_of, preexisting, decimals_as_sent=decimals_as_sent).rows


def removed_rows(
    events: list[Event],
    deletes: str,
    as_of: int | None = None,
    preexisting: Iterable[Table] = (),
    decimals_as_sent: bool = False,
    updates_as_inserts: bool = False,
) -> dict[Name, dict[tuple, tuple[dict[str, str | None], int]]]:
    """{(database, table): {key texts: (last values, commit ts of the removal)}}: the rows removed upstream that a
    gold table whose deletes are `deletes` (soft, ignore) still holds as of `as_of` (`Upstream.removed`).
    `updates_as_inserts`: the stream sends an update as an insert of its new values (Open without old values), so
    with ignore a delete whose commit updates the table is applied too."""
    return _replay(events, as_of, preexisting, deletes, decimals_as_sent, updates_as_inserts).removed


def upstream_schemas(
    events: list[Event], as_of: int | None = None, preexisting: Iterable[Table] = ()
) -> dict[Name, Table]:
    """{(database, table): Table} of every table that exists as of `as_of` and whose schema is known."""
    return _replay(events, as_of, preexisting).schemas


def upstream_state_in_shape(
    events: list[Event],
    as_of: int,
    shaped_as_of: int,
    preexisting: Iterable[Table] = (),
    decimals_as_sent: bool = False,
) -> dict[Name, Rows]:
    """The rows as of `as_of` in the shape the tables have at `shaped_as_of` (>= as_of): what a history table
    answers for `as_of`. The DDL between the two applies to those rows (renames, drops, added and retyped
    columns); no later row change does, nor a later TRUNCATE (it closes versions after `as_of`)."""
    kept = [
        e
        for e in events
        if (isinstance(e, RowChange) and e.commit_ts <= as_of)
        or (isinstance(e, Ddl) and (e.commit_ts <= as_of or e.ddl_type != "truncate_table"))
    ]
    return upstream_state(kept, as_of=shaped_as_of, preexisting=preexisting, decimals_as_sent=decimals_as_sent)
