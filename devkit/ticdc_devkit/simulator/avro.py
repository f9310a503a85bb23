"""TiCDC's Avro protocol with a Confluent Schema Registry, for the simulator.

Mirrors TiCDC's encoder (tiflow pkg/sink/codec/avro): one message per row change; the key holds the
handle-key columns, the value all columns (plus `_tidb_op`, `_tidb_commit_ts`,
`_tidb_commit_physical_time` with `enable-tidb-extension`); a delete is the key with a null value;
DDL and watermarks produce nothing. Schemas are registered under `<topic>-key` / `<topic>-value`
(TopicNameStrategy, dots in the topic replaced by `_`) and every payload is framed as
0x00, the 4-byte big-endian schema id, then the Avro binary.
"""

from __future__ import annotations

import datetime as dt
import io
import json
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import fastavro

from spark_jobs.canonical.events import ChangeEvent
from spark_jobs.canonical.values import (
    BINARY_TYPES,
    CHAR_TYPES,
    canonical_type,
    canonical_value,
    enum_elements,
    fsp_of,
    parse_type,
    text_date,
    text_datetime,
    text_decimal,
    text_time,
)
from spark_jobs.codecs.avro import time_zone
from spark_jobs.codecs.schema_registry import SchemaRegistryClient
from ticdc_devkit.simulator import integrity
from ticdc_devkit.simulator.model import Column, Event, RowChange, Table, expected_event

_SMALL_INTS = ("tinyint", "smallint", "mediumint")
_STRING_TIDB_TYPES = {"json": "JSON", "date": "DATE", "datetime": "DATETIME", "timestamp": "TIMESTAMP", "time": "TIME"}


def sanitize_name(name: str) -> str:
    """TiCDC's Avro name rule: a leading digit gets a `_` prefix, any other character than [A-Za-z0-9_] becomes `_`."""
    out = []
    for i, ch in enumerate(name):
        if i == 0 and "0" <= ch <= "9":
            out.append("_" + ch)
        elif ch == "_" or "a" <= ch <= "z" or "A" <= ch <= "Z" or "0" <= ch <= "9":
            out.append(ch)
        else:
            out.append("_")
    return "".join(out)


def sanitize_topic(topic: str) -> str:
    return topic.replace(".", "_")


def tidb_type(column: Column) -> str:
    """The `connect.parameters.tidb_type` TiCDC writes for a column."""
    base, _, unsigned = parse_type(column.type)
    if base in _SMALL_INTS or base == "int":
        return "INT UNSIGNED" if unsigned else "INT"
    if base == "bigint":
        return "BIGINT UNSIGNED" if unsigned else "BIGINT"
    if base in CHAR_TYPES:
        return "TEXT"
    if base in BINARY_TYPES:
        return "BLOB"
    if base in ("float", "double", "bit", "decimal", "enum", "set", "year"):
        return base.upper()
    if base in _STRING_TIDB_TYPES:
        return _STRING_TIDB_TYPES[base]
    raise ValueError(f"TiCDC Avro cannot encode a column of type {column.type!r}")


def decimal_precision_scale(definition: str) -> tuple[int, int]:
    """MySQL's defaults apply when the definition leaves them out: DECIMAL is DECIMAL(10,0)."""
    args = parse_type(definition)[1]
    if args is None:
        return 10, 0
    parts = [int(p) for p in args.split(",")]
    return parts[0], parts[1] if len(parts) > 1 else 0


def avro_column_type(column: Column, options: Mapping[str, Any]) -> dict[str, Any]:
    """The Avro type object of a column, with `connect.parameters` as TiCDC writes it."""
    base, args, unsigned = parse_type(column.type)
    tt = tidb_type(column)
    params: dict[str, str] = {"tidb_type": tt}
    if base in _SMALL_INTS or base == "year":
        avro = "int"
    elif base == "int":
        avro = "long" if unsigned else "int"
    elif base == "bigint":
        avro = "string" if unsigned and options.get("avro-bigint-unsigned-handling-mode") == "string" else "long"
    elif base in ("float", "double"):
        avro = base
    elif base == "bit":
        avro = "bytes"
        params = {"length": str(int(args) if args else 1), "tidb_type": tt}
    elif base == "decimal":
        if options.get("avro-decimal-handling-mode", "precise") == "precise":
            precision, scale = decimal_precision_scale(column.type)
            return {
                "type": "bytes",
                "connect.parameters": params,
                "logicalType": "decimal",
                "precision": precision,
                "scale": scale,
            }
        avro = "string"
    elif base in BINARY_TYPES:
        avro = "bytes"
    elif base in ("enum", "set"):
        avro = "string"
        allowed = ",".join(_escape_element(e) for e in enum_elements(column.type))
        params = {"allowed": allowed, "tidb_type": tt}
    else:
        avro = "string"
    return {"type": avro, "connect.parameters": params}


def _escape_element(label: str) -> str:
    return label.replace(",", "\\,").replace("\\'", "'").replace("''", "'")


def avro_datum(column: Column, value: Any, options: Mapping[str, Any], zone: dt.tzinfo) -> Any:
    """A typed model value as TiCDC hands it to the Avro writer."""
    if value is None:
        return None
    base, _, unsigned = parse_type(column.type)
    if base in _SMALL_INTS or base in ("int", "year"):
        return int(value)
    if base == "bigint":
        if not unsigned:
            return int(value)
        if options.get("avro-bigint-unsigned-handling-mode") == "string":
            return str(int(value))
        return int(value) - (1 << 64) if int(value) >= 1 << 63 else int(value)
    if base in ("float", "double"):
        return float(value)
    if base == "bit":
        raw = int(value).to_bytes(8, "big").lstrip(b"\x00")
        return raw or b"\x00"
    if base == "decimal":
        _, scale = decimal_precision_scale(column.type)
        if options.get("avro-decimal-handling-mode", "precise") == "precise":
            return Decimal(text_decimal(Decimal(value), scale))  # exact for all 65 digits
        return text_decimal(Decimal(value), scale)
    if base in BINARY_TYPES:
        return bytes(value)
    if base == "date":
        return text_date(value)
    if base == "datetime":
        return text_datetime(value, fsp_of(column.type))
    if base == "timestamp":
        local = value.replace(tzinfo=dt.UTC).astimezone(zone).replace(tzinfo=None)
        return text_datetime(local, fsp_of(column.type))
    if base == "time":
        return text_time(value, fsp_of(column.type))
    if base in ("enum", "set"):
        return canonical_value(column.type, value)
    return str(value)


def _json_default(datum: Any) -> Any:
    """Avro's JSON form of a default: bytes are a string of code points 0-255."""
    if isinstance(datum, bytes):
        return datum.decode("latin-1")
    return datum


def record_schema(
    table: Table, columns: list[Column], options: Mapping[str, Any], *, extension: bool, checksum: bool = False
) -> str:
    """The schema text TiCDC registers (Go's json.Marshal key order: map keys sorted); `checksum` adds the row
    checksum fields after the extension's."""
    zone = time_zone(options.get("time-zone"))
    fields = []
    for column in columns:
        avro_type = avro_column_type(column, options)
        nullable = column.nullable and column.name not in table.key
        field: dict[str, Any] = {}
        if isinstance(column.default, str) and column.base in _STRING_TIDB_TYPES:
            default = column.default
        else:
            default = avro_datum(column, column.default, options, zone)
        if "logicalType" in avro_type:
            if nullable:
                field["default"] = None
                field["type"] = ["null", avro_type]
            else:
                field["type"] = avro_type
        elif nullable:
            field["default"] = _json_default(default)
            field["type"] = ["null", avro_type] if default is None else [avro_type, "null"]
        else:
            if default is not None:
                field["default"] = _json_default(default)
            field["type"] = avro_type
        field["name"] = sanitize_name(column.name)
        fields.append({k: field[k] for k in sorted(field)})
    if extension:
        fields += [
            {"default": "", "name": "_tidb_op", "type": "string"},
            {"default": 0, "name": "_tidb_commit_ts", "type": "long"},
            {"default": 0, "name": "_tidb_commit_physical_time", "type": "long"},
        ]
    if extension and checksum:
        fields += [
            {"default": "", "name": "_tidb_row_level_checksum", "type": "string"},
            {"default": False, "name": "_tidb_corrupted", "type": "boolean"},
            {"default": 0, "name": "_tidb_checksum_version", "type": "int"},
        ]
    top = {
        "type": "record",
        "name": sanitize_name(table.name),
        "namespace": f"{sanitize_name(options.get('namespace') or 'default')}.{sanitize_name(table.database)}",
        "fields": fields,
    }
    return json.dumps(top, separators=(",", ":"), ensure_ascii=False)


def key_columns_in_table_order(table: Table) -> list[Column]:
    """TiCDC's key holds the handle-key columns in the table's column order, not the index order."""
    return [c for c in table.columns if c.name in table.key]


class AvroEncoder:
    DDL_TO_ALL_PARTITIONS = True

    def __init__(self, options: dict):
        self.options = dict(options)
        url = self.options.get("schema-registry-url")
        if not url:
            raise ValueError("the Avro encoder needs schema-registry-url")
        self.extension = _truthy(self.options.get("enable-tidb-extension"))
        self.checksum = integrity.enabled(self.options)
        if self.checksum and not (
            self.extension
            and self.options.get("avro-decimal-handling-mode") == "string"
            and self.options.get("avro-bigint-unsigned-handling-mode") == "string"
        ):
            raise ValueError(
                "TiCDC's Avro with row checksums needs enable-tidb-extension=true, avro-decimal-handling-mode=string "
                "and avro-bigint-unsigned-handling-mode=string"
            )
        self.checksum_version = int(self.options.get("checksum-version", 1))
        self.topic = sanitize_topic(self.options.get("topic") or "ticdc")
        self.zone = time_zone(self.options.get("time-zone"))
        self.registry = SchemaRegistryClient(
            url,
            self.options.get("schema-registry-username"),
            self.options.get("schema-registry-password"),
            self.options.get("schema-registry-ca-file"),
        )
        self._schemas: dict[tuple[Table, str], tuple[dict, int]] = {}
        self._ids: dict[tuple[str, str], int] = {}

    def encode(self, events: list[Event]) -> list[tuple[bytes | None, bytes | None, list | None]]:
        out = []
        for event in events:
            if not isinstance(event, RowChange):
                continue
            table = event.table
            if not table.key:
                raise ValueError(f"TiCDC Avro refuses {table.database}.{table.name}: it has no handle key")
            row = event.before if event.op == "delete" else event.after
            key = self._frame(table, "key", key_columns_in_table_order(table), row, None, event.commit_ts)
            value = None
            if event.op != "delete":
                value = self._frame(
                    table, "value", list(table.columns), row, "u" if event.op == "update" else "c", event.commit_ts
                )
            out.append((key, value, None))
        return out

    def _frame(
        self, table: Table, part: str, columns: list[Column], row: dict, op: str | None, commit_ts: int
    ) -> bytes:
        parsed, schema_id = self._schema(table, part, columns)
        record = {sanitize_name(c.name): avro_datum(c, row.get(c.name), self.options, self.zone) for c in columns}
        if part == "value" and self.extension:
            record.update({"_tidb_op": op, "_tidb_commit_ts": commit_ts, "_tidb_commit_physical_time": commit_ts >> 18})
        if part == "value" and self.checksum:
            record.update(
                {
                    "_tidb_row_level_checksum": str(integrity.row_checksum(table, row)),
                    "_tidb_corrupted": False,
                    "_tidb_checksum_version": self.checksum_version,
                }
            )
        buffer = io.BytesIO()
        buffer.write(b"\x00" + schema_id.to_bytes(4, "big"))
        fastavro.schemaless_writer(buffer, parsed, record)
        return buffer.getvalue()

    def _schema(self, table: Table, part: str, columns: list[Column]) -> tuple[dict, int]:
        cached = self._schemas.get((table, part))
        if cached is None:
            extension = self.extension and part == "value"
            text = record_schema(table, columns, self.options, extension=extension, checksum=self.checksum)
            subject = f"{self.topic}-{part}"
            schema_id = self._ids.get((subject, text))
            if schema_id is None:
                schema_id = self._ids[(subject, text)] = self.registry.register(subject, text)
            cached = self._schemas[(table, part)] = (fastavro.parse_schema(json.loads(text)), schema_id)
        return cached


def _truthy(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.lower() == "true")


def avro_column_types(table: Table, options: Mapping[str, Any]) -> dict[str, str]:
    """column -> canonical type as far as `tidb_type` (and a decimal's precision/scale) tell it."""
    types = {}
    for column in table.columns:
        tt = tidb_type(column)
        if tt == "DECIMAL" and options.get("avro-decimal-handling-mode", "precise") == "precise":
            tt = "DECIMAL({},{})".format(*decimal_precision_scale(column.type))
        types[sanitize_name(column.name)] = canonical_type(tt)
    return types


def expected(event: Event, options: Mapping[str, Any]) -> ChangeEvent | None:
    """What the Avro decoder must return for a logical event: model.expected_event minus Avro's losses.

    What Avro costs, compared with a lossless protocol:
    - No DDL and no watermarks are sent (-> None). Schema changes show only as a new writer schema
      (the decoder exposes it; silver infers the change), and the source's gold tables are published
      up to what has landed, never up to a consistent timestamp.
    - Deletes are the key alone with a null value: `before` holds only the handle-key columns,
      `column_types` only theirs, and there is no commit timestamp (commit_ts None; flags
      `handle_key_only`, `commit_ts_inferred`).
    - Updates carry the new row only: `before` is None (flag `old_value_missing` with the extension).
    - Without `enable-tidb-extension` an insert and an update look the same and carry no commit
      timestamp: every non-delete decodes as op `insert` meaning "upsert this row" (last one in
      partition order wins), commit_ts None, flag `commit_ts_inferred`.
    - Column types are only `tidb_type`: TINYINT..INT collapse to `int` (`int unsigned`), CHAR,
      VARCHAR and the TEXT types to `text`, BINARY, VARBINARY and the BLOB types to `blob`;
      lengths and fractional-second digits are not sent; DECIMAL keeps precision and scale only in
      `precise` mode (else `decimal`) -> flag `types_partial` on every row.
    - Handle-key columns come in the table's column order, not the index's.
    - Database, table and column names pass through Avro's name rule (a leading digit gets `_`,
      anything outside [A-Za-z0-9_] becomes `_`), so names using other characters are changed.
    - ENUM/SET labels in `connect.parameters.allowed` are escaped irreversibly (a backslash is not
      escaped, `\\'` and `''` both become `'`): values still decode exactly as sent, but the label
      list the decoder keeps for the writer schema (`last_columns`) can be wrong for such labels.
    - BIGINT UNSIGNED in `long` mode and DECIMAL in `string` mode lose nothing: the decoder unwraps
      the first and takes the digits of the second as sent.
    """
    if not isinstance(event, RowChange):
        return None
    base = expected_event(event)
    table = event.table
    names = {c.name: sanitize_name(c.name) for c in table.columns}
    types = avro_column_types(table, options)
    key = [names[c.name] for c in key_columns_in_table_order(table)]
    common = dict(kind="row", database=sanitize_name(table.database), table=sanitize_name(table.name), key_columns=key)
    if event.op == "delete":
        return ChangeEvent(
            op="delete",
            commit_ts=None,
            after=None,
            **common,
            before={names[c.name]: base.before[c.name] for c in key_columns_in_table_order(table)},
            column_types={k: types[k] for k in key},
            flags=["commit_ts_inferred", "handle_key_only", "types_partial"],
        )
    extension = _truthy(options.get("enable-tidb-extension"))
    after = {names[c]: v for c, v in base.after.items()}
    if not extension:
        return ChangeEvent(
            op="insert",
            commit_ts=None,
            before=None,
            after=after,
            column_types=types,
            **common,
            flags=["commit_ts_inferred", "types_partial"],
        )
    flags = ["old_value_missing", "types_partial"] if event.op == "update" else ["types_partial"]
    return ChangeEvent(
        op=event.op, commit_ts=event.commit_ts, before=None, after=after, column_types=types, **common, flags=flags
    )
