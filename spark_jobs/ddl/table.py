"""The working table a statement changes: columns by id, the key, what rows TiCDC does not send."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spark_jobs.canonical.values import (
    canonical_value,
    parse_type,
)
from spark_jobs.ddl.columns import _TO_BINARY, _ColumnSpec
from spark_jobs.ddl.literals import _TIME_OF_DAY, _commit_time, _Literal, _reformatted, _value_text, _zero_text
from spark_jobs.ddl.model import Schema, _NotUnderstood
from spark_jobs.ddl.schema import _column, _definition_of, _same_name, _schema, _table_uid


class _Table:
    """A table's schema while a statement's clauses are applied to it, one by one."""

    def __init__(self, schema: Schema, commit_ts: int):
        self.database = schema["database"]
        self.table = schema["table"]
        self.uid = schema.get("table_uid") or _table_uid(self.database, self.table, 0)  # schemas without uids
        self.columns = [dict(c) for c in schema["columns"]]
        ids = [c["id"] for c in self.columns if "id" in c]
        self.next_column_id = max([schema.get("next_column_id") or 1] + [i + 1 for i in ids])
        for c in self.columns:  # schemas written before columns had ids
            if "id" not in c:
                c["id"] = self.allocate_id()
            c.setdefault("default", None)
            c.setdefault("origin_default", None)
        self.key_columns = list(schema["key_columns"])
        self.commit_ts = commit_ts
        self.declared: dict[int, str] = {}  # column id -> full MySQL type, where this statement declared it
        self.notes: list[str] = []
        self.snapshot_reasons: list[str] = []

    def allocate_id(self) -> int:
        self.next_column_id += 1
        return self.next_column_id - 1

    def find(self, name: str) -> int | None:
        return next((i for i, c in enumerate(self.columns) if _same_name(c["name"], name)), None)

    def column(self, name: str) -> int:
        i = self.find(name)
        if i is None:
            raise _NotUnderstood(f"column {name!r} is not in the schema of {self.database}.{self.table}")
        return i

    def definition(self, i: int) -> str:
        c = self.columns[i]
        return self.declared.get(c["id"], _definition_of(c))

    def place(self, entry: dict[str, Any], position: tuple[str, ...]) -> None:
        if not position:
            self.columns.append(entry)
        elif position[0] == "FIRST":
            self.columns.insert(0, entry)
        else:
            self.columns.insert(self.column(position[1]) + 1, entry)

    def key_ids(self) -> list[int]:
        return [self.columns[self.column(k)]["id"] for k in self.key_columns]

    def set_key(self, names: list[str]) -> None:
        self.key_columns = [self.columns[self.column(n)]["name"] for n in names]
        for n in names:
            self.columns[self.column(n)]["nullable"] = False

    def schema(self) -> Schema:
        for c in self.columns:
            if c["name"] in self.key_columns:
                c["nullable"] = False
        return _schema(self.database, self.table, self.uid, self.columns, list(self.key_columns), self.next_column_id)

    # -- clauses --

    def add_column(self, spec: _ColumnSpec, if_not_exists: bool) -> None:
        if self.find(spec.name) is not None:
            if if_not_exists:
                return
            raise _NotUnderstood(f"column {spec.name!r} already exists")
        if spec.generated == "VIRTUAL":
            self.notes.append(f"virtual generated column {spec.name!r} left out: TiCDC does not send it")
            return
        nullable = spec.nullable is not False and not spec.primary
        entry = _column(
            self.allocate_id(),
            spec.name,
            spec.definition,
            nullable,
            spec.declared_default(),
            self._origin_default(spec, nullable),
        )
        self.declared[entry["id"]] = spec.definition
        self.place(entry, spec.position)
        self._index_column(spec)

    def _origin_default(self, spec: _ColumnSpec, nullable: bool) -> str | None:
        """The value rows that existed before ADD COLUMN show for it (TiDB's OriginDefaultValue)."""
        lit, base = spec.default, parse_type(spec.definition)[0]
        problem = None
        if spec.generated:
            problem = "a stored generated column: existing rows get computed values"
        elif spec.auto_increment:
            problem = "an AUTO_INCREMENT column: existing rows get numbers"
        elif lit is not None and lit.kind == "now" and base in ("datetime", "timestamp"):
            self.notes.append(f"{spec.name!r}: existing rows show the DDL's commit time (UTC)")
            return canonical_value(spec.definition, _commit_time(self.commit_ts))
        elif lit is not None and lit.kind in ("now", "expression"):
            problem = f"DEFAULT {spec.declared_default()} is not evaluated here"
        if problem:
            self.snapshot_reasons.append(f"added column {spec.name!r} is {problem}")
            return None
        if lit is None:
            return None if nullable else _zero_text(spec.definition)
        return _value_text(lit, spec.definition)

    def _index_column(self, spec: _ColumnSpec) -> None:
        if spec.primary:
            self.set_key([spec.name])
        elif spec.unique:
            self.add_unique([spec.name])

    def drop_column(self, name: str, if_exists: bool) -> None:
        i = self.find(name)
        if i is None and if_exists:
            return
        dropped = self.columns.pop(self.column(name))
        self.key_columns = [k for k in self.key_columns if k != dropped["name"]]

    def modify_column(self, old_name: str, spec: _ColumnSpec, if_exists: bool) -> None:
        """MODIFY, and CHANGE: the new definition replaces the old one; the column keeps its id."""
        i = self.find(old_name)
        if i is None and if_exists:
            return
        i = self.column(old_name)
        old = self.columns[i]
        other = self.find(spec.name)
        if other is not None and other != i:
            raise _NotUnderstood(f"column {spec.name!r} already exists")
        if spec.generated == "VIRTUAL":
            raise _NotUnderstood(f"{spec.name!r} becomes a virtual generated column")
        old_definition = self.definition(i)
        origin = old["origin_default"]
        if origin is not None and old_definition != spec.definition:
            try:
                origin = _reformatted(origin, old_definition, spec.definition)
            except _NotUnderstood as exc:
                self.snapshot_reasons.append(f"rows from before {old['name']!r} was added: {exc}")
        nullable = spec.nullable is not False and not spec.primary
        entry = _column(old["id"], spec.name, spec.definition, nullable, spec.declared_default(), origin)
        self.declared[entry["id"]] = spec.definition
        self.key_columns = [spec.name if _same_name(k, old_name) else k for k in self.key_columns]
        if spec.position:
            self.columns.pop(i)
            self.place(entry, spec.position)
        else:
            self.columns[i] = entry
        self._index_column(spec)

    def rename_column(self, old_name: str, new_name: str) -> None:
        i = self.column(old_name)
        other = self.find(new_name)
        if other is not None and other != i:
            raise _NotUnderstood(f"column {new_name!r} already exists")
        self.key_columns = [new_name if k == self.columns[i]["name"] else k for k in self.key_columns]
        self.columns[i]["name"] = new_name

    def set_default(self, name: str, lit: _Literal | None) -> None:
        """ALTER COLUMN SET/DROP DEFAULT: only the declared default changes, not the rows."""
        i = self.column(name)
        definition = self.definition(i)
        if definition in ("datetime", "timestamp", "time") and lit is not None and lit.kind == "string":
            definition = self._temporal_definition(i, lit.value)
        spec = _ColumnSpec(self.columns[i]["name"], definition, default=lit)
        self.columns[i]["default"] = spec.declared_default()

    def _temporal_definition(self, i: int, literal: str) -> str:
        """Schemas keep no fractional digits: take them from the column's other values, else from the literal."""
        c = self.columns[i]
        for sample in (c["default"], c["origin_default"], literal):
            m = _TIME_OF_DAY.search(sample or "")
            if m:
                if sample is literal:
                    self.notes.append(f"fractional digits of {c['name']!r} not known: default kept as written")
                return f"{c['type']}({len(m.group(1) or '')})"
        canonical: str = c["type"]
        return canonical

    def add_primary_key(self, names: list[str | None]) -> None:
        if None in names:
            raise _NotUnderstood("a primary key on an expression")
        self.set_key([n for n in names if n])

    def add_unique(self, names: list[str | None]) -> None:
        """A unique index on NOT NULL columns is TiCDC's handle key when the table has none."""
        if self.key_columns or None in names:
            return
        columns = [self.columns[self.column(n)] for n in names if n]
        if all(not c["nullable"] for c in columns):
            self.key_columns = [c["name"] for c in columns]

    def drop_primary_key(self) -> None:
        self.key_columns = []
        self.notes.append("primary key dropped: a unique NOT NULL index, if any, is now TiCDC's handle key")

    def rename_table(self, database: str | None, table: str) -> None:
        self.database, self.table = database or self.database, table

    def convert_to_binary(self) -> None:
        """CONVERT TO CHARACTER SET binary: text columns become binary ones, their values bytes."""
        for i, c in enumerate(self.columns):
            definition = self.definition(i)
            base = parse_type(definition)[0]
            if base in _TO_BINARY:
                binary = _TO_BINARY[base] + definition[len(base) :]
                default, origin = (
                    None if text is None else _reformatted(text, definition, binary)
                    for text in (c["default"], c["origin_default"])
                )
                self.columns[i] = _column(c["id"], c["name"], binary, c["nullable"], default, origin)


@dataclass(frozen=True)
class _Clause:
    kind: str  # the ddl_type of this clause alone
    apply: Callable[[_Table], None] | None = None  # None: no change to columns or keys
    snapshot: str = ""  # why the clause needs a snapshot ("" when it does not)
    exchanged_with: tuple[str | None, str] | None = None  # EXCHANGE PARTITION's other table
