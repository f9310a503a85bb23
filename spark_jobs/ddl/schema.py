"""Building and reading the stored table schema: table uids, columns, definitions."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from spark_jobs.canonical.values import (
    canonical_type,
    enum_elements,
    parse_type,
)
from spark_jobs.ddl.model import Schema


def _table_uid(database: str | None, table: str, commit_ts: int) -> str:
    """Deterministic, so that rebuilding silver gives the same uids."""
    return hashlib.sha1(f"{database}\x1f{table}\x1f{commit_ts}".encode()).hexdigest()[:16]


def _schema(
    database: str | None,
    table: str,
    uid: str,
    columns: list[dict[str, Any]],
    key_columns: list[str],
    next_column_id: int | None = None,
) -> Schema:
    """`next_column_id` defaults to a new table's: one past its columns."""
    return {
        "database": database,
        "table": table,
        "table_uid": uid,
        "key_columns": key_columns,
        "next_column_id": next_column_id or max((c["id"] for c in columns), default=0) + 1,
        "columns": columns,
    }


# the types whose fractional digits a column's `fsp` keeps
FSP_TYPES = ("time", "datetime", "timestamp")


def _column(
    column_id: int, name: str, definition: str, nullable: bool, default: str | None, origin: str | None
) -> dict[str, Any]:
    entry: dict[str, Any] = {"id": column_id, "name": name, "type": canonical_type(definition), "nullable": nullable}
    if entry["type"] in ("enum", "set"):
        entry["elements"] = enum_elements(definition)
    if entry["type"] == "tinyint" and (parse_type(definition)[1] == "1" or definition.lower() in ("bool", "boolean")):
        entry["boolean"] = True  # MySQL's BOOL: gold may map it to boolean (config.TypeMappings.tinyint1)
    if entry["type"] in FSP_TYPES:  # a TIME's text in gold has them; Debezium's DATETIME numbers are read by them
        args = parse_type(definition)[1]
        entry["fsp"] = int(args) if args is not None and args.strip().isdigit() else 0
    entry["default"] = default
    entry["origin_default"] = origin
    return entry


def _quoted(label: str) -> str:
    """A label as a SQL string that `values.enum_elements` reads back unchanged."""
    return "'" + label.replace("\\", "\\\\").replace("'", "''") + "'"


def _definition_of(column: Mapping[str, Any]) -> str:
    """A MySQL type text for a schema column (canonical types keep no lengths or fractional digits)."""
    if column["type"] in ("enum", "set") and column.get("elements") is not None:
        return f"{column['type']}({','.join(_quoted(e) for e in column['elements'])})"
    canonical: str = column["type"]
    if canonical == "time" and column.get("fsp") is not None:
        return f"time({column['fsp']})"
    return "tinyint(1)" if column.get("boolean") else canonical


def _same_name(a: str, b: str) -> bool:
    """Column names are case-insensitive in MySQL."""
    return a.casefold() == b.casefold()
