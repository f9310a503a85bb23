"""The one interpreter of TiDB DDL: what a statement is, and every table's schema after it.

Every protocol's DDL is classified here and every schema change is derived here, so that gold can replay
the upstream database exactly. The statement is read with sqlglot's MySQL tokenizer and a small parser of
the MySQL/TiDB DDL grammar over its tokens; sqlglot's own parser gives up on much of what TiDB sends
(RENAME TABLE lists, `ADD (a, b)`, partition maintenance, AUTO_RANDOM, NONCLUSTERED) and a statement half
understood must never become a wrong schema. What this package does not understand keeps the previous
schema, with understood=False and the reason in the note.

The schema (a JSON-able dict) extends `canonical.events.table_schema`:
  {"database", "table", "table_uid", "key_columns", "next_column_id",
   "columns": [{"id", "name", "type", "nullable", "elements" (enum/set only), "boolean" (a TINYINT(1) only: MySQL's
   BOOL, whose width the canonical type drops), "fsp" (a TIME, DATETIME or TIMESTAMP: its fractional digits, which
   the canonical type drops too; gold's TIME text has them, and silver reads Debezium's DATETIME numbers by them),
   "default", "origin_default"}]}
Column ids stay with a column through renames and type changes and are never reused, so a column dropped
and added again is a new column; table_uid stays with a table through renames and truncates.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spark_jobs.ddl.model import Schema, TableChange, _NotUnderstood
from spark_jobs.ddl.schema import _schema, _table_uid
from spark_jobs.ddl.statements import _parse, _Run

__all__ = ["Schema", "TableChange", "classify", "inferred_schema", "interpret"]


def classify(sql: str) -> str:
    """The canonical ddl_type of a statement, without any schema (what the codecs put in ddl_type)."""
    try:
        return _parse(sql, None).ddl_type
    except _NotUnderstood:
        return "other"


def interpret(
    sql: str,
    *,
    database: str | None,
    table: str | None,
    commit_ts: int,
    schemas: Mapping[tuple[str | None, str], Schema],
    protocol_schema: Schema | None = None,
) -> list[TableChange]:
    """One TableChange per table the statement affects, in statement order.

    `schemas` holds the schemas in force before the statement, by (database, table); a table created with no
    database in scope has None for it. `database`/`table` are the names the TiCDC event carries (the default
    database of unqualified names). A schema the protocol carries with the DDL (`protocol_schema`) wins on
    column types, nullability and enum labels; ids, table_uid and origin defaults come from the statement read
    against the previous schema, or, when the statement is not understood, from the previous schema's
    same-named columns.
    """
    run = _Run(schemas, commit_ts, protocol_schema, (database, table))
    try:
        statement = _parse(sql, database)
    except _NotUnderstood as exc:
        run.not_understood("other", (database, table), (), str(exc))
        return run.changes
    statement.apply(run)
    return [run.with_protocol_types(change) for change in run.changes]


def inferred_schema(
    database: str,
    table: str,
    columns: list[tuple[str, str]],
    key_columns: list[str],
    commit_ts: int,
    nullable: Mapping[str, bool] | None = None,
    *,
    elements: Mapping[str, list[str]] | None = None,
    previous: Schema | None = None,
) -> Schema:
    """The schema messages show for a table, where no DDL says it: a table seen in rows (or a Simple
    bootstrap) with no DDL in the stream, or an Avro writer schema that changed.

    Nullability is unknown unless given: key columns are NOT NULL, the others nullable. ENUM/SET labels are
    known only where `elements` gives them. With `previous` (the schema in force), same-named columns keep
    their ids and defaults and the table keeps its uid; a new name gets a new id, so values of a column that
    disappeared never come back under it.
    """
    nullable = nullable or {}
    elements = elements or {}
    kept = {c["name"].casefold(): c for c in (previous or {}).get("columns", [])}
    next_id = previous["next_column_id"] if previous else 1
    entries = []
    for name, column_type in columns:
        old = kept.get(name.casefold())
        if old is None:
            column_id, next_id = next_id, next_id + 1
        else:
            column_id = old["id"]
        entry: dict[str, Any] = {
            "id": column_id,
            "name": name,
            "type": column_type,
            "nullable": nullable.get(name, name not in key_columns),
        }
        if column_type in ("enum", "set") and elements.get(name) is not None:
            entry["elements"] = list(elements[name])
        entry["default"] = old["default"] if old else None
        entry["origin_default"] = old["origin_default"] if old else None
        entries.append(entry)
    uid = previous["table_uid"] if previous else _table_uid(database, table, commit_ts)
    return _schema(database, table, uid, entries, list(key_columns), next_id if previous else None)
