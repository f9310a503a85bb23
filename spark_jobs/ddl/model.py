"""What the interpreter returns and what its modules share: a table's schema, one table's part in a statement,
and the exception for what it does not understand."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Schema = dict[str, Any]


@dataclass(frozen=True)
class TableChange:
    """One table's part in a DDL statement (a statement may touch several tables)."""

    ddl_type: str
    database: str | None  # names after the statement
    table: str | None
    old_database: str | None  # names before; differ only for renames
    old_table: str | None
    schema_after: Schema | None  # None when the table is gone (or was never known)
    clauses: tuple[str, ...] = ()  # the kind of each clause, in order
    needs_snapshot: bool = False  # the statement deleted or changed rows TiCDC does not send
    understood: bool = True
    note: str = ""  # why not understood, or what was assumed


class _NotUnderstood(Exception):
    """The statement, or one of its clauses, is outside what this interpreter knows; the message says why."""
