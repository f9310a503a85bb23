"""The canonical change event every codec returns, whatever the protocol (ARCHITECTURE.md)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

KINDS = ("row", "ddl", "watermark", "bootstrap")
OPS = ("insert", "update", "delete")
DDL_TYPES = (
    "create_table",
    "drop_table",
    "rename_table",
    "truncate_table",
    "add_column",
    "drop_column",
    "modify_column",
    "rename_column",
    "create_index",
    "drop_index",
    "create_database",
    "drop_database",
    "add_partition",
    "drop_partition",
    "truncate_partition",
    "exchange_partition",
    "reorganize_partition",
    "alter_table",
    "multi_schema_change",
    "recover_table",
    "other",
)

# Flags a consumer must know about; codecs only emit names from this list.
FLAGS = (
    "handle_key_only",  # only the handle-key columns are present (large-message handle-key-only)
    "claim_check",  # the row was read from a claim-check file
    "commit_ts_inferred",  # commit_ts rebuilt from a millisecond clock or missing (Canal-JSON without _tidb, Avro delete)
    "lossy_decimal",  # DECIMAL arrived as a binary double (Debezium)
    "enum_index",  # ENUM/SET values are indexes/bitmasks: the labels are not known yet
    "old_value_missing",  # an update without its before image (old value off)
    "old_value_partial",  # before image held only changed columns and was refilled from after
    "fsp_unknown",  # fractional-second digits of a temporal value could not be known
    "types_partial",  # column_types lack length/scale the protocol does not carry
    "inferred_ddl",  # a schema change inferred from a writer-schema change (Avro)
    "key_change_split",  # half of an update that changed the row's key, sent unsplit (output-raw-change-event)
    "values_raw",  # DATE, DATETIME, TIME, TIMESTAMP, BIT, BIGINT UNSIGNED as sent (Debezium without its schema): silver reads them
)


@dataclass(slots=True)
class ChangeEvent:
    kind: str
    database: str | None = None
    table: str | None = None
    commit_ts: int | None = None
    op: str | None = None
    key_columns: list[str] = field(default_factory=list)
    before: dict[str, str | None] | None = None
    after: dict[str, str | None] | None = None
    column_types: dict[str, str] = field(default_factory=dict)
    schema_version: int | None = None
    ddl_type: str | None = None
    ddl_sql: str | None = None
    table_schema: dict[str, Any] | None = None
    flags: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "op": self.op,
            "database": self.database,
            "table": self.table,
            "commit_ts": self.commit_ts,
            "key_columns": self.key_columns,
            "before": self.before,
            "after": self.after,
            "column_types": self.column_types,
            "schema_version": self.schema_version,
            "ddl_type": self.ddl_type,
            "ddl_sql": self.ddl_sql,
            "table_schema": self.table_schema,
            "flags": sorted(self.flags),
        }


def table_schema(
    database: str, table: str | None, columns: list[dict[str, Any]], key_columns: list[str]
) -> dict[str, Any]:
    """The structured schema carried in ddl/bootstrap events.

    columns: [{"name": str, "type": canonical type, "nullable": bool, "elements": [labels] (enum/set only)}]
    """
    return {"database": database, "table": table, "columns": columns, "key_columns": key_columns}


def split_key_change(event: ChangeEvent) -> list[ChangeEvent]:
    """An update that changes the row's handle key, as the delete of the old key and the insert of the new one
    at the same commit (what TiCDC sends unless `output-raw-change-event` is on; silver orders a delete before an
    insert of one key and commit, so keys swapped within a transaction end right). Any other event as it is; an
    update without its before image cannot show its old key and stays one update."""
    before, after, key = event.before, event.after, event.key_columns
    if event.kind != "row" or event.op != "update" or before is None or after is None or not key:
        return [event]
    if all(before.get(k) == after.get(k) for k in key):
        return [event]
    flags = sorted({*event.flags, "key_change_split"})
    return [
        replace(event, op="delete", after=None, flags=flags),
        replace(event, op="insert", before=None, flags=list(flags)),
    ]
