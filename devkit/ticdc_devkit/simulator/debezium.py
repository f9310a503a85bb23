"""TiCDC's Debezium JSON encoder (pkg/sink/codec/debezium in pingcap/ticdc), for the simulator.

Field order, schema names and value encodings follow the Go encoder; `payload.ts_ms` (the encoder's
wall clock) is the commit's physical time here so that output is deterministic.
"""

from __future__ import annotations

import base64
import datetime as dt
import re
from decimal import Decimal
from typing import Any

import orjson

from spark_jobs.canonical.events import ChangeEvent
from spark_jobs.canonical.values import (
    BINARY_TYPES,
    CHAR_TYPES,
    INTEGER_TYPES,
    canonical_type,
    canonical_value,
    decimal_scale,
    enum_elements,
    fsp_of,
    parse_type,
    text_datetime,
    text_double,
    text_float,
    text_int,
    text_time,
)
from ticdc_devkit.simulator import model
from ticdc_devkit.simulator.model import Bootstrap, Column, Ddl, RowChange, Table, Watermark, expected_event

_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()
_FALSE = ("false", "0", "no")


def _flag(options: dict, name: str, default: bool) -> bool:
    raw = options.get(name, default)
    if isinstance(raw, str):
        return raw.strip().lower() not in _FALSE
    return bool(raw)


class _Options:
    def __init__(self, options: dict | None):
        options = dict(options or {})
        self.extension = _flag(options, "enable-tidb-extension", False)
        self.schema = not _flag(options, "debezium-disable-schema", False)
        self.old_value = _flag(options, "debezium-output-old-value", True)
        self.cluster = str(options.get("cluster-id") or "default")


# ---- Go encoder helpers ------------------------------------------------------------------------


def _sanitize(name: str) -> str:
    """common.SanitizeName: Avro-safe names in schema names."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return "_" + name if name[:1].isdigit() else name


def _schema_name(cluster: str, db: str, table: str) -> str:
    return f"{_sanitize(cluster)}.{_sanitize(db)}.{_sanitize(table)}"


def _tidb_type(column: Column) -> str:
    """getTiDBType: the bare TiDB type name, `unsigned` appended except where TiDB omits it."""
    base, _, unsigned = parse_type(column.type)
    if unsigned and base not in ("year", "bit", "varchar", "char", "binary", "varbinary", "decimal"):
        return base + " unsigned"
    return base


def _bit_length(column: Column) -> int:
    args = parse_type(column.type)[1]
    return int(args) if args else 1


def _go_number(x: float):
    """jsoniter writes integral floats without a fraction (`1`, not `1.0`)."""
    if x.is_integer() and abs(x) < 2**63:
        return int(x)
    return x


def _truncate_us(micros: int, fsp: int) -> int:
    unit = 10 ** (6 - fsp)
    sign = -1 if micros < 0 else 1
    return sign * (abs(micros) // unit * unit)


def _epoch_us(value: dt.datetime) -> int:
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _time_us(value: dt.timedelta) -> int:
    return value.days * 86_400_000_000 + value.seconds * 1_000_000 + value.microseconds


def _field_schema(column: Column, opts: _Options) -> dict[str, Any]:
    """writeDebeziumFieldSchema (without defaults: the model's rows never rely on them).

    `optional` is the column's own NOT NULL flag, as in TiCDC's tests where a key column may lack it.
    """
    base, _, unsigned = parse_type(column.type)
    out: dict[str, Any] = {}
    if opts.extension:
        out["tidb_type"] = _tidb_type(column)
    optional = column.nullable
    name = version = parameters = None
    if base == "bit":
        n = _bit_length(column)
        if n == 1:
            kind = "boolean"
        else:
            kind, name, version, parameters = "bytes", "io.debezium.data.Bits", 1, {"length": str(n)}
    elif base in CHAR_TYPES or base in BINARY_TYPES:
        kind = "string"
    elif base in ("enum", "set"):
        kind, version = "string", 1
        name = "io.debezium.data.Enum" if base == "enum" else "io.debezium.data.EnumSet"
        parameters = {"allowed": ",".join(enum_elements(column.type))}
    elif base == "date":
        kind, name, version = "int32", "io.debezium.time.Date", 1
    elif base == "datetime":
        kind, version = "int64", 1
        name = "io.debezium.time.Timestamp" if fsp_of(column.type) <= 3 else "io.debezium.time.MicroTimestamp"
    elif base == "timestamp":
        kind, name, version = "string", "io.debezium.time.ZonedTimestamp", 1
    elif base == "time":
        kind, name, version = "int64", "io.debezium.time.MicroTime", 1
    elif base == "json":
        kind, name, version = "string", "io.debezium.data.Json", 1
    elif base == "tinyint":
        kind = "int16"
    elif base == "smallint":
        kind = "int32" if unsigned else "int16"
    elif base == "mediumint":
        kind = "int32"
    elif base == "int":
        kind = "int64" if unsigned else "int32"
    elif base == "bigint":
        kind = "int64"
    elif base == "float":
        kind = "double" if parse_type(column.type)[1] else "float"
    elif base in ("double", "decimal"):
        kind = "double"
    elif base == "year":
        kind, name, version = "int32", "io.debezium.time.Year", 1
    else:
        raise ValueError(f"Debezium encoder: unsupported column type {column.type!r}")
    out["type"] = kind
    out["optional"] = optional
    if name is not None:
        out["name"] = name
        out["version"] = version
    if parameters is not None:
        out["parameters"] = parameters
    out["field"] = column.name
    return out


def _field_value(column: Column, value):
    """writeDebeziumFieldValue: a model value as the Go encoder writes it into JSON."""
    if value is None:
        return None
    base, _, unsigned = parse_type(column.type)
    if base == "bit":
        n = _bit_length(column)
        if n == 1:
            return value != 0
        return base64.b64encode(int(value).to_bytes(8, "little")[: (n + 7) // 8]).decode()
    if base in BINARY_TYPES:
        return base64.b64encode(value).decode()
    if base in CHAR_TYPES or base in ("enum", "json"):
        return value
    if base == "set":
        chosen = set(value.split(",")) - {""} if isinstance(value, str) else set(value)
        return ",".join(e for e in enum_elements(column.type) if e in chosen)
    if base == "decimal":
        return _go_number(float(Decimal(value)))
    if base == "date":
        return value.toordinal() - _EPOCH_ORDINAL
    if base == "datetime":
        fsp = fsp_of(column.type)
        micros = _truncate_us(_epoch_us(value), fsp)
        return micros // 1000 if fsp <= 3 else micros
    if base == "timestamp":
        fsp = fsp_of(column.type)
        text = value.strftime("%Y-%m-%dT%H:%M:%S")
        if fsp > 0:
            text += f".{value.microsecond:06d}"[: 1 + fsp]
        return text + "Z"
    if base == "time":
        return _truncate_us(_time_us(value), fsp_of(column.type))
    if base in INTEGER_TYPES:
        value = int(value)
        if unsigned and base == "bigint" and value >= 2**63:
            return value - 2**64
        return value
    if base == "float":
        return _go_number(float(text_float(value)))
    if base == "double":
        return _go_number(float(value))
    if base == "year":
        return int(value)
    raise ValueError(f"Debezium encoder: unsupported column type {column.type!r}")


# ---- fixed schema parts ------------------------------------------------------------------------


def _plain(kind: str, optional: bool, field: str) -> dict:
    return {"type": kind, "optional": optional, "field": field}


_SOURCE_SCHEMA = {
    "type": "struct",
    "fields": [
        _plain("string", False, "version"),
        _plain("string", False, "connector"),
        _plain("string", False, "name"),
        _plain("int64", False, "ts_ms"),
        {
            "type": "string",
            "optional": True,
            "name": "io.debezium.data.Enum",
            "version": 1,
            "parameters": {"allowed": "true,last,false,incremental"},
            "default": "false",
            "field": "snapshot",
        },
        _plain("string", False, "db"),
        _plain("string", True, "sequence"),
        _plain("string", True, "table"),
        _plain("int64", False, "server_id"),
        _plain("string", True, "gtid"),
        _plain("string", False, "file"),
        _plain("int64", False, "pos"),
        _plain("int32", False, "row"),
        _plain("int64", True, "thread"),
        _plain("string", True, "query"),
    ],
    "optional": False,
    "name": "io.debezium.connector.mysql.Source",
    "field": "source",
}

_ENVELOPE_TAIL = [
    _SOURCE_SCHEMA,
    _plain("string", False, "op"),
    _plain("int64", True, "ts_ms"),
    {
        "type": "struct",
        "fields": [
            _plain("string", False, "id"),
            _plain("int64", False, "total_order"),
            _plain("int64", False, "data_collection_order"),
        ],
        "optional": True,
        "name": "event.block",
        "version": 1,
        "field": "transaction",
    },
]


def _ddl_field(field: str, optional: bool, kind: str, **extra) -> dict:
    return {"field": field, "optional": optional, "type": kind, **extra}


_STRING_ITEMS = {"type": "string", "optional": False}
_COLUMN_SCHEMA_FIELDS = [
    _ddl_field("name", False, "string"),
    _ddl_field("jdbcType", False, "int32"),
    _ddl_field("nativeType", True, "int32"),
    _ddl_field("typeName", False, "string"),
    _ddl_field("typeExpression", True, "string"),
    _ddl_field("charsetName", True, "string"),
    _ddl_field("length", True, "int32"),
    _ddl_field("scale", True, "int32"),
    _ddl_field("position", False, "int32"),
    _ddl_field("optional", True, "boolean"),
    _ddl_field("autoIncremented", True, "boolean"),
    _ddl_field("generated", True, "boolean"),
    _ddl_field("comment", True, "string"),
    _ddl_field("defaultValueExpression", True, "string"),
    _ddl_field("enumValues", True, "array", items=_STRING_ITEMS),
]
_DDL_VALUE_SCHEMA = {
    "optional": False,
    "type": "struct",
    "version": 1,
    "name": "io.debezium.connector.mysql.SchemaChangeValue",
    "fields": [
        _SOURCE_SCHEMA,
        _ddl_field("ts_ms", False, "int64"),
        _ddl_field("databaseName", True, "string"),
        _ddl_field("schemaName", True, "string"),
        _ddl_field("ddl", True, "string"),
        _ddl_field(
            "tableChanges",
            False,
            "array",
            items={
                "name": "io.debezium.connector.schema.Change",
                "optional": False,
                "type": "struct",
                "version": 1,
                "fields": [
                    _ddl_field("type", False, "string"),
                    _ddl_field("id", False, "string"),
                    {
                        "field": "table",
                        "optional": True,
                        "type": "struct",
                        "name": "io.debezium.connector.schema.Table",
                        "version": 1,
                        "fields": [
                            _ddl_field("defaultCharsetName", True, "string"),
                            _ddl_field("primaryKeyColumnNames", True, "array", items=_STRING_ITEMS),
                            _ddl_field(
                                "columns",
                                False,
                                "array",
                                items={
                                    "name": "io.debezium.connector.schema.Column",
                                    "optional": False,
                                    "type": "struct",
                                    "version": 1,
                                    "fields": _COLUMN_SCHEMA_FIELDS,
                                },
                            ),
                            _ddl_field("comment", True, "string"),
                        ],
                    },
                ],
            },
        ),
    ],
}
_DDL_KEY_SCHEMA = {
    "type": "struct",
    "name": "io.debezium.connector.mysql.SchemaChangeKey",
    "optional": False,
    "version": 1,
    "fields": [_ddl_field("databaseName", False, "string")],
}

# java.sql.Types of common.MySQLType2JdbcType
_JDBC_TYPES = {
    **model.JAVA_TYPES_AGREED,
    "timestamp": 2014,
    "year": 4,
    "binary": -2,
    "varbinary": -3,
    "tinytext": 12,
    "text": 12,
    "mediumtext": 12,
    "longtext": 12,
    "tinyblob": 2004,
    "blob": 2004,
    "mediumblob": 2004,
    "longblob": 2004,
    "enum": 1,
    "set": 1,
}
_CHANGE_TYPES = {
    "create_table": "CREATE",
    "create_database": "CREATE",
    "drop_table": "DROP",
    "drop_database": "DROP",
    "drop_index": "DROP",
    "truncate_table": "DROP",
}


def _ddl_column(position: int, column: Column, table: Table) -> dict:
    """tableChanges[].table.columns[] as EncodeDDLEvent writes it."""
    base, args, unsigned = parse_type(column.type)
    upper = base.upper()
    suffix = (
        " UNSIGNED"
        if unsigned and base not in ("year", "bit", "varchar", "char", "binary", "varbinary", "decimal")
        else ""
    )
    elements = enum_elements(column.type) if base in ("enum", "set") else None
    length = scale = None
    if base in ("datetime", "timestamp", "time"):
        length = fsp_of(column.type)
    elif base == "decimal":
        parts = (args or "10,0").split(",")
        length, scale = int(parts[0]), decimal_scale(column.type) if args else 0
    elif (base in ("varchar", "char", "binary", "varbinary") and args) or (base == "bit" and args and int(args) != 1):
        length = int(args)
    elif base == "enum":
        length = 1
    elif base == "set":
        length = 2 * len(elements) - 1
    elif base == "year":
        length = 4
    charset = "utf8mb4" if base in CHAR_TYPES or base in ("enum", "set") else None
    return {
        "name": column.name,
        "jdbcType": _JDBC_TYPES.get(base, 1111),
        "nativeType": None,
        "comment": None,
        "defaultValueExpression": None if column.default is None else str(column.default),
        "enumValues": [f"'{e}'" for e in elements] if elements is not None else None,
        "typeName": upper + suffix,
        "typeExpression": upper + suffix,
        "charsetName": charset,
        "length": length,
        "scale": scale,
        "position": position,
        "optional": column.nullable and column.name not in table.key,
        "autoIncremented": False,
        "generated": False,
    }


class DebeziumEncoder:
    DDL_TO_ALL_PARTITIONS = True

    def __init__(self, options: dict):
        self.opts = _Options(options)

    def encode(self, events) -> list[tuple[bytes, bytes, None]]:
        out = []
        for event in events:
            if isinstance(event, RowChange):
                out.append(self._row(event))
            elif isinstance(event, Watermark):
                if self.opts.extension:
                    out.append(self._watermark(event.ts))
            elif isinstance(event, Ddl):
                out.append(self._ddl(event))
        return out

    def source(self, db: str, table: str, commit_ts: int) -> dict:
        """The `payload.source` block TiCDC writes for a change of this table at this commit."""
        cluster = self.opts.cluster
        return {
            "version": "2.4.0.Final",
            "connector": "TiCDC",
            "name": cluster,
            "ts_ms": commit_ts >> 18,
            "snapshot": "false",
            "db": db,
            "table": table,
            "server_id": 0,
            "gtid": None,
            "file": "",
            "pos": 0,
            "row": 0,
            "thread": 0,
            "query": None,
            "commit_ts": commit_ts,
            "cluster_id": cluster,
        }

    def _document(self, payload: dict, schema: dict) -> bytes:
        return orjson.dumps({"payload": payload, "schema": schema} if self.opts.schema else {"payload": payload})

    def _row(self, change: RowChange) -> tuple[bytes, bytes, None]:
        t, opts = change.table, self.opts
        image = change.before if change.op == "delete" else change.after
        key_columns = [c for c in t.columns if c.name in t.key]
        key_payload = {c.name: _field_value(c, image.get(c.name)) for c in key_columns}
        name = _schema_name(opts.cluster, t.database, t.name)
        key = self._document(
            key_payload,
            {
                "type": "struct",
                "name": f"{name}.Key",
                "optional": False,
                "fields": [_field_schema(c, opts) for c in key_columns],
            },
        )
        payload: dict[str, Any] = {
            "source": self.source(t.database, t.name, change.commit_ts),
            "ts_ms": change.commit_ts >> 18,
            "transaction": None,
        }
        if change.op == "insert":
            payload.update(op="c", before=None, after=self._image(t, change.after))
        elif change.op == "delete":
            payload.update(op="d", after=None, before=self._image(t, change.before))
        else:
            payload["op"] = "u"
            if opts.old_value:
                payload["before"] = self._image(t, change.before)
            payload["after"] = self._image(t, change.after)
        fields = [_field_schema(c, opts) for c in t.columns]
        value_schema = {
            "type": "struct",
            "optional": False,
            "name": f"{name}.Envelope",
            "version": 1,
            "fields": [
                {"type": "struct", "optional": True, "name": f"{name}.Value", "field": "before", "fields": fields},
                {"type": "struct", "optional": True, "name": f"{name}.Value", "field": "after", "fields": fields},
                *_ENVELOPE_TAIL,
            ],
        }
        return key, self._document(payload, value_schema), None

    @staticmethod
    def _image(t: Table, row: dict) -> dict:
        return {c.name: _field_value(c, row.get(c.name)) for c in t.columns}

    def _watermark(self, ts: int) -> tuple[bytes, bytes, None]:
        cluster = _sanitize(self.opts.cluster)
        key = self._document(
            {}, {"type": "struct", "name": f"{cluster}.watermark.Key", "optional": False, "fields": []}
        )
        payload = {"source": self.source("", "", ts), "ts_ms": ts >> 18, "transaction": None, "op": "m"}
        schema = {
            "type": "struct",
            "optional": False,
            "name": f"{cluster}.watermark.Envelope",
            "version": 1,
            "fields": list(_ENVELOPE_TAIL),
        }
        return key, self._document(payload, schema), None

    def _ddl(self, ddl: Ddl) -> tuple[bytes, bytes, None]:
        table = ddl.table or ""
        key = self._document({"databaseName": ddl.database}, _DDL_KEY_SCHEMA)
        payload = {
            "source": self.source(ddl.database, table, ddl.commit_ts),
            "ts_ms": ddl.commit_ts >> 18,
            "databaseName": ddl.database,
            "schemaName": None,
            "ddl": ddl.sql,
            "tableChanges": self._table_changes(ddl),
        }
        return key, self._document(payload, _DDL_VALUE_SCHEMA), None

    @staticmethod
    def _table_changes(ddl: Ddl) -> list:
        if not ddl.table or ddl.ddl_type == "truncate_table":
            return []
        change_type = _CHANGE_TYPES.get(ddl.ddl_type, "ALTER")
        if ddl.ddl_type == "rename_table" and ddl.table_before is not None:
            before = ddl.table_before
            change_id = f'"{before.database}"."{before.name}","{ddl.database}"."{ddl.table}"'
        else:
            change_id = f'"{ddl.database}"."{ddl.table}"'
        if ddl.ddl_type == "drop_table" or ddl.table_after is None:
            return [{"type": change_type, "id": change_id, "table": None}]
        t = ddl.table_after
        return [
            {
                "type": change_type,
                "id": change_id,
                "table": {
                    "defaultCharsetName": "utf8mb4",
                    "primaryKeyColumnNames": list(t.key),
                    "columns": [_ddl_column(i + 1, c, t) for i, c in enumerate(t.columns)],
                    "comment": None,
                },
            }
        ]


# ---- what a Debezium consumer gets back ---------------------------------------------------------

_UNTYPED = "untyped"  # debezium-disable-schema: JSON types only
_DEBEZIUM = "debezium"  # schema without tidb_type: Debezium types and semantic names
_TIDB = "tidb"  # schema with tidb_type (enable-tidb-extension)

# Debezium integer width of each MySQL integer type: (signed, unsigned)
_INT_WIDTH = {
    "tinyint": ("smallint", "smallint"),
    "smallint": ("smallint", "int"),
    "mediumint": ("int", "int"),
    "int": ("int", "bigint"),
    "bigint": ("bigint", "bigint"),
}


def _json_number_text(x: float) -> tuple[str, str]:
    """(type, text) of a number that went through JSON without a schema."""
    number = _go_number(x)
    return ("bigint", text_int(number)) if isinstance(number, int) else ("double", text_double(number))


def _column_result(column: Column, value, mode: str) -> tuple[str | None, str | None, set[str]]:
    """(canonical type, canonical text, flags) a Debezium consumer decodes for one column value."""
    base, _, unsigned = parse_type(column.type)
    fsp = fsp_of(column.type) if base in ("datetime", "time", "timestamp") else 0
    exact = canonical_type(column.type)
    if mode == _UNTYPED:
        if value is None:
            return None, None, {"types_partial"}
        raw = _field_value(column, value)
        if isinstance(raw, bool):
            return "bit", "1" if raw else "0", {"types_partial"}
        if isinstance(raw, int):
            return "bigint", text_int(raw), {"types_partial"}
        if isinstance(raw, float):
            return (*_json_number_text(raw), {"types_partial"})
        return "longtext", raw, {"types_partial"}
    flags: set[str] = set()
    text = None
    if base == "decimal":
        if mode == _TIDB:
            flags = {"lossy_decimal", "types_partial"}
            if value is not None:
                digits = Decimal(repr(float(Decimal(value)))).normalize()
                text = format(digits, "f")
                text = text[1:] if text.startswith("-") and digits == 0 else text
            return "decimal", text, flags
        return "double", None if value is None else text_double(float(Decimal(value))), {"types_partial"}
    if base in ("datetime", "time"):
        flags = {"fsp_unknown"}
        if value is not None:
            if base == "datetime":
                micros = _truncate_us(_epoch_us(value), fsp)
                text = text_datetime(_EPOCH + dt.timedelta(microseconds=micros), 3 if fsp <= 3 else 6)
            else:
                text = text_time(_truncate_us(_time_us(value), fsp), 6)
        return exact, text, flags
    text = canonical_value(column.type, value)
    if mode == _TIDB:
        return exact, text, flags
    if base in INTEGER_TYPES:
        if value is not None and unsigned and base == "bigint":
            text = text_int(_field_value(column, value))
        return _INT_WIDTH[base][1 if unsigned else 0], text, {"types_partial"}
    if base == "double":
        return "double", text, {"types_partial"}
    if base in CHAR_TYPES or base in BINARY_TYPES:
        return "longtext", text, {"types_partial"}
    return exact, text, flags


def expected(event, options: dict | None = None) -> ChangeEvent | None:
    """The canonical event a Debezium consumer gets for a logical event, with every documented loss.

    What Debezium (as TiCDC emits it) costs:
    - Bootstrap: not sent. Watermarks: only with `enable-tidb-extension`.
    - key_columns: the handle-key columns in table column order (TiCDC writes the key that way),
      not in index order.
    - DDL: `table_schema` only when tableChanges carries a table (not for TRUNCATE, DROP TABLE or
      database-level statements); no key_columns on the event itself.
    - Updates with `debezium-output-old-value=false`: no before image, flag `old_value_missing`.
    - With the schema and the TiDB extension (`tidb_type`), tidb_type is the bare type name
      (`decimal`, `datetime`), so:
      * DECIMAL arrives as a double: typed `decimal`, text = the double's shortest digits (trailing
        zeros lost, more than ~15 significant digits rounded), flags `lossy_decimal`, `types_partial`;
      * DATETIME is epoch ms (fsp <= 3) or µs (fsp > 3) and TIME is µs: rendered with 3 or 6
        fractional digits, flag `fsp_unknown`. TIMESTAMP carries exactly fsp digits: lossless.
    - With the schema but without the extension, additionally (flag `types_partial`):
      * integers are typed by Debezium width (int16 -> smallint, int32 -> int, int64 -> bigint) and
        BIGINT UNSIGNED values >= 2^63 stay wrapped negative (the max is -1);
      * DECIMAL and DOUBLE are both `double` (DECIMAL text = shortest double digits, no flag);
      * every character and binary string is `longtext`; binary values are base64 text, which is
        their canonical text anyway.
    - Without the schema (`debezium-disable-schema`): only JSON types are left, flags `types_partial`
      and `values_raw` on every row: numbers are `bigint` (integral) or `double`, booleans (BIT(1)) `bit`, strings
      `longtext`; column_types has no entry for a column that is null in every image; DATE, DATETIME,
      TIME and YEAR arrive as their raw Debezium integers (days, ms/µs, µs), TIMESTAMP as the
      `…T…Z` string, BIT(n>1) as base64 of little-endian bytes, DECIMAL/FLOAT/DOUBLE values that
      are integral as integers.
    - Not simulated: TiCDC writes a column's DEFAULT in place of a NULL value (newer ticdc encoder).
    """
    opts = _Options(options)
    if isinstance(event, Bootstrap):
        return None
    if isinstance(event, Watermark):
        return expected_event(event) if opts.extension else None
    result = expected_event(event)
    if isinstance(event, Ddl):
        if not event.table or event.ddl_type in ("truncate_table", "drop_table"):
            result.table_schema = None
        return result
    table: Table = event.table
    mode = _UNTYPED if not opts.schema else _TIDB if opts.extension else _DEBEZIUM
    result.key_columns = [c.name for c in table.columns if c.name in table.key]
    images = {"before": event.before, "after": event.after}
    if event.op == "update" and not opts.old_value:
        images["before"] = None
        result.flags.append("old_value_missing")
    flags: set[str] = set()
    types: dict[str, str] = {}
    for side in ("after", "before"):
        row = images[side]
        if row is None:
            setattr(result, side, None)
            continue
        texts = {}
        for column in table.columns:
            column_type, text, column_flags = _column_result(column, row.get(column.name), mode)
            texts[column.name] = text
            flags |= column_flags
            if column_type is not None and column.name not in types:
                types[column.name] = column_type
        setattr(result, side, texts)
    if mode == _UNTYPED:
        flags = {"types_partial", "values_raw"}
    result.column_types = {c.name: types[c.name] for c in table.columns if c.name in types}
    result.flags = sorted(set(result.flags) | flags)
    return result
