"""A table's structured schema after a DDL statement, by parsing the MySQL statement (sqlglot).

Used where the protocol carries no schema with its DDL (Canal-JSON, Open). The schema format is
`codecs.events.table_schema`.
"""

from __future__ import annotations

import logging
from typing import Any

import sqlglot
from sqlglot import exp

from spark_jobs.codecs.events import table_schema
from spark_jobs.codecs.values import canonical_type, enum_elements

log = logging.getLogger(__name__)


def _column(defn: exp.ColumnDef) -> dict[str, Any]:
    kind = defn.args.get("kind")
    mysql_type = kind.sql(dialect="mysql").lower() if kind is not None else "text"
    constraints = [c.kind for c in defn.args.get("constraints") or []]
    nullable = not any(
        isinstance(k, (exp.NotNullColumnConstraint, exp.PrimaryKeyColumnConstraint))
        and not (isinstance(k, exp.NotNullColumnConstraint) and k.args.get("allow_null"))
        for k in constraints
    )
    col: dict[str, Any] = {"name": defn.name, "type": canonical_type(mysql_type), "nullable": nullable}
    if col["type"] in ("enum", "set"):
        col["elements"] = enum_elements(mysql_type)
    return col


def _primary_key(create: exp.Create) -> list[str]:
    keys: list[str] = []
    schema = create.this
    for e in schema.expressions if isinstance(schema, exp.Schema) else []:
        if isinstance(e, exp.PrimaryKey):
            keys = [c.name for c in e.expressions]
        elif isinstance(e, exp.ColumnDef) and any(
            isinstance(c.kind, exp.PrimaryKeyColumnConstraint) for c in e.args.get("constraints") or []
        ):
            keys = [e.name]
    return keys


def schema_after(sql: str, database: str, table: str, previous: dict[str, Any] | None) -> dict[str, Any] | None:
    """The table's schema after `sql`, or `previous` when the statement does not change columns."""
    try:
        stmt = sqlglot.parse_one(sql, dialect="mysql")
    except Exception as exc:  # sqlglot raises several error types for MySQL it does not know
        log.warning("cannot parse DDL for %s.%s (%s): %s", database, table, exc.__class__.__name__, sql[:200])
        return previous
    if isinstance(stmt, exp.Create) and stmt.kind == "TABLE" and isinstance(stmt.this, exp.Schema):
        cols = [_column(e) for e in stmt.this.expressions if isinstance(e, exp.ColumnDef)]
        keys = _primary_key(stmt)
        for c in cols:
            if c["name"] in keys:
                c["nullable"] = False
        return table_schema(database, table, cols, keys)
    if isinstance(stmt, exp.Drop):
        return None
    if isinstance(stmt, exp.Alter) and previous is not None:
        cols = [dict(c) for c in previous["columns"]]
        keys = list(previous["key_columns"])
        for action in stmt.args.get("actions") or []:
            if isinstance(action, exp.ColumnDef):
                cols.append(_column(action))
            elif isinstance(action, exp.Drop) and action.args.get("kind") == "COLUMN":
                dropped = {t.name for t in action.args.get("tables") or []}
                cols = [c for c in cols if c["name"] not in dropped]
            elif isinstance(action, exp.RenameColumn):
                old, new = action.this.name, action.args["to"].name
                cols = [{**c, "name": new} if c["name"] == old else c for c in cols]
                keys = [new if k == old else k for k in keys]
            elif isinstance(action, exp.ModifyColumn):
                new_col = _column(action.this)
                old = action.args["rename_from"].name if action.args.get("rename_from") else new_col["name"]
                cols = [new_col if c["name"] == old else c for c in cols]
                keys = [new_col["name"] if k == old else k for k in keys]
        return table_schema(database, table, cols, keys)
    return previous
