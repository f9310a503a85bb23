"""TiCDC Simple protocol encoder (JSON and Avro), byte for byte as tiflow's pkg/sink/codec/simple.

Follows message.go / avro.go: JSON field order of the Go `message` struct, map keys (row images,
TIMESTAMP objects) sorted as Go's encoding/json sorts them, Go's HTML-safe escaping; the Avro record
com.pingcap.simple.avro.Message of simple_message.avsc. `buildTs` is TiCDC's wall clock; here it is
the physical part of the commit timestamp so that the same stream always encodes to the same bytes.
"""

from __future__ import annotations

import datetime as dt
import io
import uuid
from dataclasses import replace
from decimal import Decimal
from typing import Any

import fastavro
import orjson

from spark_jobs.canonical import values as V
from spark_jobs.canonical.events import ChangeEvent
from spark_jobs.canonical.values import time_zone
from spark_jobs.codecs.large_message import compress, write_claim_check
from spark_jobs.codecs.simple import message_schema
from ticdc_devkit.simulator import integrity, model
from ticdc_devkit.simulator.canal_json import CANAL_DDL_TYPES
from ticdc_devkit.simulator.model import Bootstrap, Column, Ddl, Event, RowChange, Table, Watermark, expected_event

LARGE_MESSAGE_OPTIONS = ("none", "handle-key-only", "claim-check")
DEFAULT_THRESHOLD = 10 * 1024 * 1024  # TiCDC's default max-message-bytes

# TiDB's default display length (flen) per type; integers: model.INTEGER_DISPLAY_WIDTHS
_FLEN = {
    "float": 12,
    "double": 22,
    "date": 10,
    "year": 4,
    "tinyblob": 255,
    "tinytext": 255,
    "blob": 65535,
    "text": 65535,
    "mediumblob": 16777215,
    "mediumtext": 16777215,
    "longblob": 4294967295,
    "longtext": 4294967295,
    "json": 4294967295,
}
_STRING_TYPES = frozenset(("char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set"))
_AVRO_NUMERIC = frozenset((*V.INTEGER_TYPES, "float", "double", "bit", "year"))
_AVRO_TYPES = "com.pingcap.simple.avro."


def _physical_ms(ts: int) -> int:
    return ts >> 18


def _default_fsp(base: str, args: str | None) -> int:
    return int(args) if args and args.strip().isdigit() and base in ("datetime", "timestamp", "time") else 0


def column_data_type(column: Column) -> dict[str, Any]:
    """The Simple dataType TiDB's column info produces: mysqlType, charset, collate, length, decimal, ..."""
    base, args, unsigned = V.parse_type(column.type)
    string = base in _STRING_TYPES
    length, decimal = 0, 0
    if base in model.INTEGER_DISPLAY_WIDTHS:
        length = (
            int(args) if args and args.strip().isdigit() else model.INTEGER_DISPLAY_WIDTHS[base][1 if unsigned else 0]
        )
    elif base == "decimal":
        parts = [p.strip() for p in (args or "10,0").split(",")]
        length, decimal = int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    elif base in ("datetime", "timestamp", "time"):
        decimal = _default_fsp(base, args)
        length = (10 if base == "time" else 19) + (decimal + 1 if decimal else 0)
    elif base in ("char", "binary", "bit"):
        length = int(args) if args and args.strip().isdigit() else 1
    elif base in ("varchar", "varbinary"):
        length = int(args) if args and args.strip().isdigit() else 0
    elif base in ("enum", "set"):
        elements = V.enum_elements(column.type)
        length = (
            max((len(e) for e in elements), default=0)
            if base == "enum"
            else sum(len(e) for e in elements) + max(len(elements) - 1, 0)
        )
    else:
        length = _FLEN.get(base, 0)
    result: dict[str, Any] = {
        "mysqlType": base,
        "charset": "utf8mb4" if string else "binary",
        "collate": "utf8mb4_bin" if string else "binary",
        "length": length,
        "decimal": decimal,
        "elements": V.enum_elements(column.type) if base in ("enum", "set") else None,
        "unsigned": unsigned,
        "zerofill": False,
    }
    return result


# ---- value rendering as TiCDC does it -----------------------------------------------------------


def _go_float_text(text: str) -> str:
    """Go's strconv.FormatFloat(x, 'f', -1, bits): shortest digits, fixed-point, no trailing `.0`."""
    d = Decimal(text).normalize()
    out = format(d, "f")
    return "0" if out in ("-0", "0") else out


def _local_timestamp(value: dt.datetime, zone: dt.tzinfo | None) -> dt.datetime:
    if zone is None:
        return value
    return value.replace(tzinfo=dt.UTC).astimezone(zone).replace(tzinfo=None)


def _enum_index(column: Column, label: str) -> int:
    return 0 if label == "" else V.enum_elements(column.type).index(label) + 1


def _set_mask(column: Column, value) -> int:
    chosen = set(value.split(",")) - {""} if isinstance(value, str) else set(value)
    return sum(1 << i for i, label in enumerate(V.enum_elements(column.type)) if label in chosen)


def json_value(column: Column, value: Any, zone: dt.tzinfo | None, location: str) -> Any:
    """A typed model value as TiCDC's JSON encodeValue renders it."""
    if value is None:
        return None
    base, args, _ = V.parse_type(column.type)
    if base in V.INTEGER_TYPES or base in ("bit", "year"):
        return str(int(value))
    if base == "decimal":
        return V.text_decimal(Decimal(value), V.decimal_scale(column.type))
    if base == "float":
        return _go_float_text(V.text_float(value))
    if base == "double":
        return _go_float_text(V.text_double(value))
    if base == "timestamp":
        local = _local_timestamp(value, zone)
        return {"location": location, "value": V.text_datetime(local, _default_fsp(base, args))}
    if base == "enum":
        return str(_enum_index(column, value))
    if base == "set":
        return str(_set_mask(column, value))
    if base in V.BINARY_TYPES:
        return V.text_bytes(value)
    return V.canonical_value(column.type, value)


def avro_value(column: Column, value: Any, zone: dt.tzinfo | None, location: str) -> Any:
    """A typed model value as TiCDC's encodeValue4Avro renders it: (union branch, datum)."""
    if value is None:
        return None
    base, args, unsigned = V.parse_type(column.type)
    if base == "timestamp":
        local = _local_timestamp(value, zone)
        return (
            _AVRO_TYPES + "Timestamp",
            {"location": location, "value": V.text_datetime(local, _default_fsp(base, args))},
        )
    if base == "bigint" and unsigned:
        n = int(value)
        return (_AVRO_TYPES + "UnsignedBigint", {"value": n - (1 << 64) if n >= 1 << 63 else n})
    if base in V.INTEGER_TYPES or base == "year":
        return ("long", int(value))
    if base == "bit":
        n = int(value)
        return ("long", n - (1 << 64) if n >= 1 << 63 else n)
    if base == "enum":
        return ("long", _enum_index(column, value))
    if base == "set":
        return ("long", _set_mask(column, value))
    if base == "float":
        return ("float", float(value))
    if base == "double":
        return ("double", float(value))
    if base in V.BINARY_TYPES:
        return ("bytes", bytes(value))
    return ("string", V.canonical_value(column.type, value))


# ---- the encoder ----------------------------------------------------------------------------------


class _SimpleEncoder:
    DDL_TO_ALL_PARTITIONS = True
    AVRO = False

    def __init__(self, options: dict | None = None):
        opts = dict(options or {})
        self.compression = opts.get("large-message-handle-compression") or "none"
        self.large_option = opts.get("large-message-handle-option") or "none"
        if self.large_option not in LARGE_MESSAGE_OPTIONS:
            raise ValueError(f"large-message-handle-option must be one of {LARGE_MESSAGE_OPTIONS}")
        uri = opts.get("claim-check-storage-uri")
        if self.large_option == "claim-check" and not uri:
            raise ValueError("claim-check needs claim-check-storage-uri")
        self.storage_uri = str(uri).rstrip("/") if uri else None
        raw = opts.get("claim-check-raw-value", False)
        self.raw_value = raw if isinstance(raw, bool) else str(raw).lower() == "true"
        threshold = opts.get("large-message-threshold")
        self.threshold = DEFAULT_THRESHOLD if threshold is None else int(threshold)
        self.location = opts.get("time-zone") or "UTC"
        self.zone = time_zone(self.location)
        self.checksum = integrity.enabled(opts)
        self.checksum_version = int(opts.get("checksum-version", 1))
        self._claim_checks = 0

    def encode(self, events: list[Event]) -> list[tuple[bytes | None, bytes, list]]:
        return [(None, self.encode_event(e), []) for e in events]

    def encode_event(self, event: Event) -> bytes:
        if isinstance(event, RowChange):
            value = self._finish(self.dml_message(event, handle_key_only=False, claim_check=None))
            if len(value) <= self.threshold:
                return value
            if self.large_option == "none":
                raise ValueError(
                    f"message of {len(value)} bytes exceeds large-message-threshold {self.threshold} "
                    "(TiCDC fails the changefeed: ErrMessageTooLarge)"
                )
            location = None
            if self.large_option == "claim-check":
                location = self._claim_check_location(event)
                write_claim_check(location, None, value, self.raw_value)
            # TiCDC fails when even the handle-key-only message is too large; the simulator sends it
            # anyway so that a tiny threshold exercises every row.
            return self._finish(self.dml_message(event, handle_key_only=True, claim_check=location))
        if isinstance(event, Watermark):
            return self._finish(self.watermark_message(event))
        if isinstance(event, Bootstrap):
            return self._finish(self.bootstrap_message(event))
        if isinstance(event, Ddl):
            return self._finish(self.ddl_message(event))
        raise TypeError(f"not a logical event: {event!r}")

    def is_large(self, event: RowChange) -> bool:
        """Whether TiCDC would apply large-message handling to this row (the size of its full message)."""
        return len(self._finish(self.dml_message(event, handle_key_only=False, claim_check=None))) > self.threshold

    def _claim_check_location(self, event: RowChange) -> str:
        self._claim_checks += 1
        name = uuid.uuid5(
            uuid.NAMESPACE_OID,
            f"{event.table.database}.{event.table.name}/{event.commit_ts}/{event.op}/{self._claim_checks}",
        )
        return f"{self.storage_uri}/{name}.json"

    def _finish(self, body: bytes) -> bytes:
        return compress(body, self.compression)

    def _rows(self, event: RowChange, handle_key_only: bool) -> tuple[dict | None, dict | None]:
        t = event.table
        columns = [c for c in t.columns if not handle_key_only or c.name in t.key]
        render = avro_value if self.AVRO else json_value

        def image(row):
            if row is None:
                return None
            return {
                c.name: render(c, row.get(c.name), self.zone, self.location)
                for c in sorted(columns, key=lambda c: c.name)
            }

        data = image(event.after) if event.op != "delete" else None
        old = image(event.before) if event.op != "insert" else None
        return data, old

    def _checksum(self, event: RowChange) -> dict[str, Any] | None:
        """The DML's `checksum` block with `integrity-check-level = "correctness"`; TiCDC sends it on every row
        message, handle-key-only and claim-check ones included."""
        if not self.checksum:
            return None
        after = event.after if event.op != "delete" else None
        before = event.before if event.op != "insert" else None
        return {
            "version": self.checksum_version,
            "corrupted": False,
            "current": integrity.row_checksum(event.table, after),
            "previous": integrity.row_checksum(event.table, before),
        }


class SimpleJsonEncoder(_SimpleEncoder):
    """encoding-format = "json"."""

    def watermark_message(self, event: Watermark) -> bytes:
        return _go_json({"version": 1, "type": "WATERMARK", "commitTs": event.ts, "buildTs": _physical_ms(event.ts)})

    def bootstrap_message(self, event: Bootstrap) -> bytes:
        return _go_json(
            {
                "version": 1,
                "type": "BOOTSTRAP",
                "commitTs": 0,
                "buildTs": _physical_ms(event.table.schema_version),
                "tableSchema": _json_table_schema(event.table),
            }
        )

    def ddl_message(self, event: Ddl) -> bytes:
        after, before = _ddl_tables(event)
        msg: dict[str, Any] = {
            "version": 1,
            "type": _simple_ddl_type(event),
            "sql": event.sql,
            "commitTs": event.commit_ts,
            "buildTs": _physical_ms(event.commit_ts),
        }
        if after is not None:
            msg["tableSchema"] = _json_table_schema(after)
        if before is not None:
            msg["preTableSchema"] = _json_table_schema(before)
        if not msg["sql"]:
            del msg["sql"]
        return _go_json(msg)

    def dml_message(self, event: RowChange, handle_key_only: bool, claim_check: str | None) -> bytes:
        data, old = self._rows(event, handle_key_only)
        msg = _dml_head(event)
        if claim_check:
            msg["claimCheckLocation"] = claim_check
        if handle_key_only:
            msg["handleKeyOnly"] = True
        checksum = self._checksum(event)
        if checksum is not None:
            msg["checksum"] = checksum
        if data:
            msg["data"] = data
        if old:
            msg["old"] = old
        return _go_json(msg)


class SimpleAvroEncoder(_SimpleEncoder):
    """encoding-format = "avro": raw Avro binary of com.pingcap.simple.avro.Message."""

    AVRO = True

    def _write(self, kind: str, record: str, payload: dict) -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, message_schema(), {"type": kind, "payload": (_AVRO_TYPES + record, payload)})
        return out.getvalue()

    def watermark_message(self, event: Watermark) -> bytes:
        return self._write(
            "WATERMARK", "Watermark", {"version": 1, "commitTs": event.ts, "buildTs": _physical_ms(event.ts)}
        )

    def bootstrap_message(self, event: Bootstrap) -> bytes:
        return self._write(
            "BOOTSTRAP",
            "Bootstrap",
            {
                "version": 1,
                "buildTs": _physical_ms(event.table.schema_version),
                "tableSchema": _avro_table_schema(event.table),
            },
        )

    def ddl_message(self, event: Ddl) -> bytes:
        after, before = _ddl_tables(event)
        return self._write(
            "DDL",
            "DDL",
            {
                "version": 1,
                "type": _simple_ddl_type(event),
                "sql": event.sql,
                "commitTs": event.commit_ts,
                "buildTs": _physical_ms(event.commit_ts),
                "tableSchema": _avro_table_schema(after) if after is not None else None,
                "preTableSchema": _avro_table_schema(before) if before is not None else None,
            },
        )

    def dml_message(self, event: RowChange, handle_key_only: bool, claim_check: str | None) -> bytes:
        data, old = self._rows(event, handle_key_only)
        return self._write(
            "DML",
            "DML",
            {
                **_dml_head(event),
                "claimCheckLocation": claim_check,
                "handleKeyOnly": True if handle_key_only else None,
                "checksum": self._checksum(event),
                "data": data,
                "old": old,
            },
        )


def _dml_head(event: RowChange) -> dict[str, Any]:
    """The fields a row message starts with, in both encodings."""
    t = event.table
    return {
        "version": 1,
        "database": t.database,
        "table": t.name,
        "tableID": t.table_id,
        "type": event.op.upper(),
        "commitTs": event.commit_ts,
        "buildTs": _physical_ms(event.commit_ts),
        "schemaVersion": t.schema_version,
    }


# ---- table schemas --------------------------------------------------------------------------------


def _ddl_tables(event: Ddl) -> tuple[Table | None, Table | None]:
    """(tableSchema, preTableSchema): TiCDC's DROP TABLE carries the dropped table as its table info."""
    after = event.table_after
    if after is None and event.ddl_type == "drop_table":
        after = event.table_before
    before = event.table_before if event.ddl_type != "create_table" else None
    return after, before


def _simple_ddl_type(event: Ddl) -> str:
    """Canal's word for the DDL type, except that any ALTER TABLE statement is an ALTER (TiCDC's getDDLType also
    gives ALTER to partition reorganizing, which Canal leaves a QUERY)."""
    kind = CANAL_DDL_TYPES[event.ddl_type]
    return "ALTER" if kind == "QUERY" and event.sql.lstrip().upper().startswith("ALTER TABLE") else kind


def _index_list(t: Table) -> list[dict[str, Any]]:
    if not t.key:
        return []
    return [{"name": "primary", "unique": True, "primary": True, "nullable": False, "columns": list(t.key)}]


def _default_text(column: Column) -> str | None:
    return None if column.default is None else V.canonical_value(column.type, column.default)


def _table_schema(t: Table, database_key: str, data_type_of) -> dict[str, Any]:
    """The tableSchema of both encodings: they differ in the database field's name and the dataType."""
    columns = [
        {
            "name": c.name,
            "dataType": data_type_of(column_data_type(c)),
            "nullable": c.nullable and c.name not in t.key,
            "default": _default_text(c),
        }
        for c in t.columns
    ]
    return {
        database_key: t.database,
        "table": t.name,
        "tableID": t.table_id,
        "version": t.schema_version,
        "columns": columns,
        "indexes": _index_list(t),
    }


def _json_data_type(data_type: dict[str, Any]) -> dict[str, Any]:
    json_type = {k: data_type[k] for k in ("mysqlType", "charset", "collate")}
    for k in ("length", "decimal", "elements", "unsigned", "zerofill"):  # Go omitempty
        if data_type[k] and not (k == "decimal" and data_type["mysqlType"] in ("float", "double")):
            json_type[k] = data_type[k]
    return json_type


def _avro_data_type(data_type: dict[str, Any]) -> dict[str, Any]:
    base = data_type["mysqlType"]
    avro_type = {k: data_type[k] for k in ("mysqlType", "charset", "collate", "length")}
    avro_type.update(decimal=None, elements=None, unsigned=None, zerofill=None)
    if base in _AVRO_NUMERIC or base == "decimal":
        avro_type["unsigned"] = data_type["unsigned"]
        avro_type["zerofill"] = data_type["zerofill"]
    if base == "decimal":
        avro_type["decimal"] = data_type["decimal"]
    if base in ("enum", "set"):
        avro_type["elements"] = data_type["elements"]
    return avro_type


def _json_table_schema(t: Table) -> dict[str, Any]:
    return _table_schema(t, "schema", _json_data_type)


def _avro_table_schema(t: Table) -> dict[str, Any]:
    return _table_schema(t, "database", _avro_data_type)


def _go_json(doc: dict) -> bytes:
    """orjson output escaped as Go's encoding/json does (HTML-safe, U+2028/U+2029)."""
    out = orjson.dumps(doc)
    if b"<" in out or b">" in out or b"&" in out or b"\xe2\x80\xa8" in out or b"\xe2\x80\xa9" in out:
        out = (
            out.replace(b"<", b"\\u003c")
            .replace(b">", b"\\u003e")
            .replace(b"&", b"\\u0026")
            .replace("\u2028".encode(), b"\\u2028")
            .replace("\u2029".encode(), b"\\u2029")
        )
    return out


# ---- what a decoder must return ---------------------------------------------------------------------


def expected(event: Event, options: dict | None, encoding: str) -> ChangeEvent | None:
    """The canonical event a Simple decoder returns for a logical event, with this protocol's losses.

    Starting from model.expected_event:
    - rows carry `schema_version` (the table's version); DDL carries the version of its `tableSchema`
      (none for DROP TABLE and database DDL); bootstraps carry theirs.
    - TIMESTAMP is rendered in the changefeed's time zone: a local time in the repeated hour of a
      daylight-saving fall-back decodes to the earlier of the two instants.
    - large-message-handle-option=handle-key-only: a row whose message exceeds the threshold keeps
      only its handle-key columns, flag `handle_key_only` (the rest must be read from upstream).
    - large-message-handle-option=claim-check: such a row is read from its claim-check file, complete,
      flag `claim_check`.
    Nothing else is lost: ENUM/SET indexes become labels with the schema's elements, BIGINT UNSIGNED
    and BIT(64) are unwrapped, FLOAT/DOUBLE/DECIMAL/temporal texts are exact.
    """
    if encoding not in ("json", "avro", "simple-json", "simple-avro"):
        raise ValueError(f"unknown Simple encoding {encoding!r}")
    result = expected_event(event)
    if isinstance(event, Ddl):
        after = event.table_after
        result.schema_version = after.schema_version if after is not None and result.ddl_type != "drop_table" else None
        return result
    if not isinstance(event, RowChange):
        return result
    opts = dict(options or {})
    zone = time_zone(opts.get("time-zone") or "UTC")
    t = event.table
    if zone is not None:
        shifted = replace(
            event, before=_fold_timestamps(t, event.before, zone), after=_fold_timestamps(t, event.after, zone)
        )
        result = expected_event(shifted)
    result.schema_version = t.schema_version
    encoder = (SimpleAvroEncoder if encoding.endswith("avro") else SimpleJsonEncoder)(
        {**opts, "large-message-handle-option": "none"}
    )
    large_option = opts.get("large-message-handle-option") or "none"
    if large_option != "none" and encoder.is_large(event):
        if large_option == "handle-key-only":
            keys = set(t.key)
            result.before = {k: v for k, v in result.before.items() if k in keys} if result.before is not None else None
            result.after = {k: v for k, v in result.after.items() if k in keys} if result.after is not None else None
            result.flags.append("handle_key_only")
        else:
            result.flags.append("claim_check")
    return result


def _fold_timestamps(t: Table, row: dict | None, zone: dt.tzinfo) -> dict | None:
    """TIMESTAMP values after a trip through local text in `zone` (ambiguous local times -> earlier)."""
    if row is None:
        return None
    out = dict(row)
    for c in t.columns:
        value = out.get(c.name)
        if value is not None and c.base == "timestamp":
            local = _local_timestamp(value, zone)
            out[c.name] = local.replace(tzinfo=zone, fold=0).astimezone(dt.UTC).replace(tzinfo=None)
    return out


__all__ = ["SimpleAvroEncoder", "SimpleJsonEncoder", "column_data_type", "expected"]
