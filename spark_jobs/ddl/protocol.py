"""Schemas a protocol carries beside its DDL (Simple, Debezium's tableChanges): they win on types,
nullability and labels."""

from __future__ import annotations

from typing import Any

from spark_jobs.ddl.model import Schema
from spark_jobs.ddl.schema import FSP_TYPES, _schema, _table_uid

_COLUMN_KEYS = ("id", "name", "type", "nullable", "elements", "boolean", "fsp", "default", "origin_default")


def _stored_column(entry: dict[str, Any]) -> dict[str, Any]:
    """A schema column as stored: `elements` only for an enum or set that has them, `boolean` (MySQL's BOOL, a
    `tinyint(1)`) only while the column is a tinyint, `fsp` (its fractional digits) only while it is a TIME,
    DATETIME or TIMESTAMP."""
    kept = {
        "elements": entry.get("type") in ("enum", "set") and entry.get("elements") is not None,
        "boolean": entry.get("type") == "tinyint" and bool(entry.get("boolean")),
        "fsp": entry.get("type") in FSP_TYPES and entry.get("fsp") is not None,
    }
    return {k: entry[k] for k in _COLUMN_KEYS if kept.get(k, True)}


def _schema_from_protocol(
    protocol: Schema, previous: Schema | None, database: str | None, table: str, commit_ts: int
) -> Schema:
    """The protocol's schema, keeping the ids and defaults of same-named previous columns (new names: new ids)."""
    old_columns = {c["name"].casefold(): c for c in previous["columns"]} if previous else {}
    next_id = previous["next_column_id"] if previous else 1
    columns = []
    for c in protocol["columns"]:
        old = old_columns.get(c["name"].casefold())
        if old is None:
            old, next_id = {"id": next_id, "default": None, "origin_default": None}, next_id + 1
        entry = {**old, "name": c["name"], "type": c["type"], "nullable": c["nullable"], "elements": c.get("elements")}
        columns.append(_stored_column(entry))
    uid = previous["table_uid"] if previous else _table_uid(database, table, commit_ts)
    key_columns = list(protocol.get("key_columns") or [])
    return _schema(
        protocol.get("database") or database, protocol.get("table") or table, uid, columns, key_columns, next_id
    )
