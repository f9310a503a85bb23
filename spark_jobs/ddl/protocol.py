"""Schemas a protocol carries beside its DDL (Simple, Debezium's tableChanges): they win on types,
nullability and labels."""

from __future__ import annotations

from spark_jobs.ddl.model import Schema
from spark_jobs.ddl.schema import _schema, _table_uid

_COLUMN_KEYS = ("id", "name", "type", "nullable", "elements", "default", "origin_default")


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
        columns.append({k: entry[k] for k in _COLUMN_KEYS if k != "elements" or entry[k] is not None})
    uid = previous["table_uid"] if previous else _table_uid(database, table, commit_ts)
    key_columns = list(protocol.get("key_columns") or [])
    return _schema(
        protocol.get("database") or database, protocol.get("table") or table, uid, columns, key_columns, next_id
    )
