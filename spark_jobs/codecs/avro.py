"""TiCDC's Avro protocol (Confluent wire format, schemas in a Schema Registry) -> canonical events.

A message is one row change. Key and value are each 0x00, a 4-byte big-endian schema id, then Avro
binary; the key holds the handle-key columns, the value the whole row. A null or empty value is a
delete (key only). The value carries `_tidb_op` ("c"/"u") and `_tidb_commit_ts` only with
`enable-tidb-extension`; without it an insert and an update cannot be told apart, so every
non-delete decodes as op `insert` meaning "upsert this row", with no commit timestamp
(`commit_ts_inferred`). Deletes never carry a commit timestamp. Avro sends no DDL and no
watermarks; `last_columns` exposes each table's latest writer schema so that schema changes can be
inferred downstream.

Types come from each field's `connect.parameters.tidb_type` and its Avro type, so the writer
schema decides how a value is read: the `avro-decimal-handling-mode` and
`avro-bigint-unsigned-handling-mode` options are checked but a changefeed that changed them
mid-stream still decodes. Parsed schemas and per-field converters are built once per schema id.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, cast

from fastavro import parse_schema, schemaless_reader
from fastavro.types import Schema as AvroSchema

from spark_jobs.canonical.events import ChangeEvent
from spark_jobs.canonical.values import (
    canonical_type,
    text_bytes,
    text_decimal,
    text_double,
    text_float,
    text_timestamp_from_zone,
    text_unsigned,
    text_year,
)
from spark_jobs.canonical.values import (
    time_zone as values_time_zone,
)
from spark_jobs.codecs import Headers
from spark_jobs.codecs import checksum as crc
from spark_jobs.codecs.schema_registry import SchemaRegistryClient
from spark_jobs.errors import ConfigError, DecodeError

PROTOCOL = "avro"
DECIMAL_MODES = ("precise", "string")
BIGINT_UNSIGNED_MODES = ("long", "string")
EXTENSION_FIELDS = frozenset(
    {
        "_tidb_op",
        "_tidb_commit_ts",
        "_tidb_commit_physical_time",
        "_tidb_row_level_checksum",
        "_tidb_corrupted",
        "_tidb_checksum_version",
    }
)
_OPS: dict[object, str] = {"c": "insert", "u": "update"}  # looked up with whatever _tidb_op holds
_U64 = 1 << 64
_DATE_RE = re.compile(r"\d{4}-\d{2}-\d{2}\Z")
_DATETIME_RE = re.compile(r"\d{4}-(0\d|1[0-2])-([0-2]\d|3[01]) ([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,6})?\Z")
_TIME_RE = re.compile(r"-?\d{2,3}:\d{2}:\d{2}(\.\d{1,6})?\Z")
_UNESCAPED_COMMA = re.compile(r"(?<!\\),")

# tidb_type -> Avro types TiCDC writes for it (FLOAT is `float` in practice, `double` in the docs)
_AVRO_TYPES = {
    "INT": ("int",),
    "INT UNSIGNED": ("int", "long"),
    "BIGINT": ("long",),
    "BIGINT UNSIGNED": ("long", "string"),
    "FLOAT": ("float", "double"),
    "DOUBLE": ("double",),
    "BIT": ("bytes",),
    "DECIMAL": ("bytes", "string"),
    "TEXT": ("string",),
    "BLOB": ("bytes",),
    "ENUM": ("string",),
    "SET": ("string",),
    "JSON": ("string",),
    "DATE": ("string",),
    "DATETIME": ("string",),
    "TIMESTAMP": ("string",),
    "TIME": ("string",),
    "YEAR": ("int",),
}


# a field's raw Avro value (int, str, bytes, Decimal, ... as its Avro type reads) -> canonical text
Converter = Callable[[Any], str]


def time_zone(name: str | None) -> dt.tzinfo:
    """The changefeed's time zone (values.time_zone), as a tzinfo: UTC is `dt.UTC`, which the converters test for."""
    return values_time_zone(name) or dt.UTC


def split_allowed(text: str) -> list[str]:
    """ENUM/SET labels from `connect.parameters.allowed` (commas inside a label are escaped `\\,`)."""
    return [part.replace("\\,", ",") for part in _UNESCAPED_COMMA.split(text)]


@dataclass(slots=True)
class WriterSchema:
    """One registered schema, compiled: where it comes from and how to turn each field into text."""

    schema_id: int
    parsed: AvroSchema
    full_name: str
    database: str
    table: str
    fields: tuple[tuple[str, Converter | None], ...]
    column_types: dict[str, str]
    columns: list[dict[str, Any]]
    extension: bool
    checksum: crc.RowChecksum | None  # None unless the value schema has `_tidb_row_level_checksum`


class AvroDecoder:
    protocol = PROTOCOL
    OPTIONS: dict[str, tuple[type, Any]] = {
        "schema-registry-url": (str, None),
        "schema-registry-username": (str, None),
        "schema-registry-password": (str, None),
        "schema-registry-ca-file": (str, None),
        "enable-tidb-extension": (bool, False),
        "avro-decimal-handling-mode": (str, "precise"),
        "avro-bigint-unsigned-handling-mode": (str, "long"),
        "time-zone": (str, "UTC"),
        "verify-checksums": (bool, True),
    }

    def __init__(self, options: dict[str, Any]):
        if not options.get("schema-registry-url"):
            raise ConfigError("protocol avro needs schema-registry-url")
        if options.get("avro-decimal-handling-mode") not in DECIMAL_MODES:
            raise ConfigError(f"avro-decimal-handling-mode must be one of {', '.join(DECIMAL_MODES)}")
        if options.get("avro-bigint-unsigned-handling-mode") not in BIGINT_UNSIGNED_MODES:
            raise ConfigError(f"avro-bigint-unsigned-handling-mode must be one of {', '.join(BIGINT_UNSIGNED_MODES)}")
        try:
            self.zone = time_zone(options.get("time-zone"))
        except Exception:
            raise ConfigError(f"time-zone {options.get('time-zone')!r} is not a known zone or offset") from None
        self.require_extension = bool(options.get("enable-tidb-extension"))
        self.verify_checksums = options.get("verify-checksums", True) is not False
        try:
            self.registry = SchemaRegistryClient(
                options["schema-registry-url"],
                options.get("schema-registry-username"),
                options.get("schema-registry-password"),
                options.get("schema-registry-ca-file"),
                protocol=PROTOCOL,
            )
        except DecodeError as exc:
            raise ConfigError(str(exc)) from None
        self._schemas: dict[int, WriterSchema] = {}
        self._last_columns: dict[tuple[str, str], list[dict[str, Any]]] = {}

    def last_columns(self, database: str, table: str) -> list[dict[str, Any]] | None:
        """Columns of the writer schema of this table's latest insert/update ({name, type, nullable[, elements]})."""
        columns = self._last_columns.get((database, table))
        return None if columns is None else [dict(c) for c in columns]

    def decode(self, key: bytes | None, value: bytes | None, headers: Headers = None) -> list[ChangeEvent]:
        if not value:
            if not key:
                raise DecodeError(PROTOCOL, "message has neither key nor value", "key")
            return [self._delete(*self._read(key, "key"))]
        key_schema = self._read(key, "key")[0] if key else None
        schema, record = self._read(value, "value")
        if key_schema is not None and key_schema.full_name != schema.full_name:
            raise DecodeError(PROTOCOL, f"key is a {key_schema.full_name} record but value a {schema.full_name}", "key")
        after = _convert(schema, record, "value")
        if schema.checksum is not None and self.verify_checksums:
            _verify_checksum(schema, schema.checksum, record)
        self._last_columns[(schema.database, schema.table)] = schema.columns
        key_columns = [name for name, _ in key_schema.fields] if key_schema is not None else []
        if schema.extension:
            op = _OPS.get(record.get("_tidb_op"))
            if op is None:
                raise DecodeError(
                    PROTOCOL, f"_tidb_op is {record.get('_tidb_op')!r}, expected 'c' or 'u'", "value._tidb_op"
                )
            commit_ts = record.get("_tidb_commit_ts")
            if not isinstance(commit_ts, int) or commit_ts <= 0:
                raise DecodeError(
                    PROTOCOL, f"_tidb_commit_ts is {commit_ts!r}, not a TiDB timestamp", "value._tidb_commit_ts"
                )
            flags = ["old_value_missing", "types_partial"] if op == "update" else ["types_partial"]
        else:
            op, commit_ts, flags = "insert", None, ["commit_ts_inferred", "types_partial"]
        return [
            ChangeEvent(
                kind="row",
                op=op,
                database=schema.database,
                table=schema.table,
                commit_ts=commit_ts,
                key_columns=key_columns,
                before=None,
                after=after,
                column_types=dict(schema.column_types),
                flags=flags,
            )
        ]

    def _delete(self, key_schema: WriterSchema, key_record: dict[str, Any]) -> ChangeEvent:
        before = _convert(key_schema, key_record, "key")
        return ChangeEvent(
            kind="row",
            op="delete",
            database=key_schema.database,
            table=key_schema.table,
            commit_ts=None,
            key_columns=[name for name, _ in key_schema.fields],
            before=before,
            after=None,
            column_types=dict(key_schema.column_types),
            flags=["commit_ts_inferred", "handle_key_only", "types_partial"],
        )

    def _read(self, data: bytes, part: str) -> tuple[WriterSchema, dict[str, Any]]:
        if len(data) < 5:
            raise DecodeError(PROTOCOL, f"{part} is {len(data)} bytes, shorter than the 5-byte Confluent header", part)
        if data[0] != 0:
            raise DecodeError(
                PROTOCOL, f"{part} starts with magic byte 0x{data[0]:02x}, expected 0x00", f"{part} byte 0"
            )
        schema_id = int.from_bytes(data[1:5], "big")
        schema = self._schemas.get(schema_id)
        if schema is None:
            schema = self._schemas[schema_id] = self._load(schema_id, part)
        stream = io.BytesIO(data)
        stream.seek(5)
        try:
            # a record schema reads as a dict (fastavro's type is the union of every Avro value)
            record = cast(dict[str, Any], schemaless_reader(stream, schema.parsed, None))
        except Exception as exc:
            raise DecodeError(
                PROTOCOL,
                f"{part} is not valid Avro for schema id {schema_id}: {type(exc).__name__}: {str(exc)[:200]}",
                part,
            ) from None
        if stream.tell() != len(data):
            raise DecodeError(
                PROTOCOL,
                f"{part} has {len(data) - stream.tell()} bytes after the Avro record of schema id {schema_id}",
                part,
            )
        return schema, record

    def _load(self, schema_id: int, part: str) -> WriterSchema:
        text = self.registry.schema(schema_id)
        where = f"{part} schema id {schema_id}"
        try:
            doc = json.loads(text)
        except ValueError:
            raise DecodeError(PROTOCOL, f"schema id {schema_id} is not JSON", where) from None
        schema = _compile(schema_id, doc, self.zone, where)
        if part == "value" and self.require_extension and not schema.extension:
            raise DecodeError(
                PROTOCOL,
                f"enable-tidb-extension is set but value schema id {schema_id} has no _tidb_op/_tidb_commit_ts",
                where,
            )
        return schema


def _verify_checksum(schema: WriterSchema, checksum: crc.RowChecksum, record: dict[str, Any]) -> None:
    """The row as TiCDC hashed it, or quarantine: a row TiCDC marked corrupted, or one whose CRC differs."""
    table = f"{schema.database}.{schema.table}"
    if record.get("_tidb_corrupted") is True:
        raise crc.corrupted(PROTOCOL, table, "value._tidb_corrupted")
    where = "value._tidb_row_level_checksum"
    expected = crc.expected_crc(PROTOCOL, record.get("_tidb_row_level_checksum"), where)
    if expected is not None:
        version = record.get("_tidb_checksum_version")
        crc.verify(PROTOCOL, checksum, record, expected, table=table, image="new", version=version, where=where)


def _convert(schema: WriterSchema, record: dict[str, Any], part: str) -> dict[str, str | None]:
    row: dict[str, str | None] = {}
    name = None
    try:
        for name, convert in schema.fields:
            value = record[name]
            row[name] = value if value is None or convert is None else convert(value)
    except (ValueError, TypeError, ArithmeticError, KeyError) as exc:
        raise DecodeError(
            PROTOCOL, f"column {name} of {schema.full_name}: {type(exc).__name__}: {str(exc)[:200]}", f"{part}.{name}"
        ) from None
    return row


def _compile(schema_id: int, doc: Any, zone: dt.tzinfo, where: str) -> WriterSchema:
    """Check a TiCDC writer schema and build its field converters."""

    def bad(reason: str) -> DecodeError:
        return DecodeError(PROTOCOL, f"schema id {schema_id}: {reason}", where)

    if not isinstance(doc, dict) or doc.get("type") != "record" or not isinstance(doc.get("fields"), list):
        raise bad("not an Avro record schema")
    name, namespace = doc.get("name"), doc.get("namespace")
    if not isinstance(name, str) or not isinstance(namespace, str) or "." not in namespace:
        raise bad("record namespace is not `<changefeed namespace>.<database>`")
    database = namespace.split(".", 1)[1]
    fields: list[tuple[str, Converter | None]] = []
    column_types: dict[str, str] = {}
    columns: list[dict[str, Any]] = []
    encoders: list[tuple[str, crc.Encode]] = []
    legacy: list[tuple[str, crc.Encode]] = []
    has_checksum = extension = False
    for field in doc["fields"]:
        if not isinstance(field, dict) or not isinstance(field.get("name"), str):
            raise bad("a field without a name")
        field_name: str = field["name"]
        field_type: Any = field.get("type")  # the schema's JSON: a type name, a union list or a dict
        nullable = isinstance(field_type, list) and "null" in field_type
        if isinstance(field_type, list):
            branches = [b for b in field_type if b != "null"]
            if len(branches) != 1:
                raise bad(f"field {field_name} is a union of {len(branches)} types, not a nullable column")
            field_type = branches[0]
        params = field_type.get("connect.parameters") if isinstance(field_type, dict) else None
        tidb_type = params.get("tidb_type") if isinstance(params, dict) else None
        if tidb_type is None:
            if field_name in EXTENSION_FIELDS:
                extension = extension or field_name == "_tidb_commit_ts"
                has_checksum = has_checksum or field_name == "_tidb_row_level_checksum"
                continue
            raise bad(f"field {field_name} has no connect.parameters.tidb_type")
        avro_type = field_type.get("type")
        if tidb_type not in _AVRO_TYPES:
            raise bad(f"field {field_name} has unknown tidb_type {tidb_type!r}")
        if avro_type not in _AVRO_TYPES[tidb_type]:
            raise bad(f"field {field_name}: tidb_type {tidb_type} cannot be Avro {avro_type!r}")
        try:
            convert, canonical, elements = _converter(tidb_type, field_type, zone)
        except ValueError as exc:
            raise bad(f"field {field_name}: {exc}") from None
        fields.append((field_name, convert))
        encode = _checksum_encoder(tidb_type, elements, zone)
        encoders.append((field_name, encode))
        legacy.append((field_name, crc.text if tidb_type == "TIMESTAMP" else encode))
        column_types[field_name] = canonical
        column: dict[str, Any] = {"name": field_name, "type": canonical, "nullable": nullable}
        if elements is not None:
            column["elements"] = elements
        columns.append(column)
    try:
        parsed = parse_schema(doc)
    except Exception as exc:
        raise bad(f"fastavro rejects it: {type(exc).__name__}: {str(exc)[:200]}") from None
    checksum = None
    if has_checksum:
        zoned = zone is not dt.UTC and any(c["type"] == "timestamp" for c in columns)
        checksum = crc.RowChecksum(tuple(encoders), crc.RowChecksum(tuple(legacy)) if zoned else None)
    return WriterSchema(
        schema_id,
        parsed,
        f"{namespace}.{name}",
        database,
        name,
        tuple(fields),
        column_types,
        columns,
        extension,
        checksum,
    )


def _checksum_encoder(tidb_type: str, elements: list[str] | None, zone: dt.tzinfo) -> crc.Encode:
    """How a field's raw Avro value enters the row checksum (module `checksum`)."""
    if tidb_type in ("INT", "INT UNSIGNED", "BIGINT", "BIGINT UNSIGNED", "YEAR"):
        return crc.uint64  # BIGINT UNSIGNED: a wrapped long or its digits
    if tidb_type == "FLOAT":
        return crc.float32
    if tidb_type == "DOUBLE":
        return crc.double
    if tidb_type == "BIT":
        return crc.big_endian_bits
    if tidb_type == "DECIMAL":
        return crc.decimal_text
    if tidb_type == "BLOB":
        return crc.binary
    if tidb_type == "TIMESTAMP":
        return crc.timestamp(zone)
    if tidb_type in ("ENUM", "SET"):
        labels = elements or []
        return crc.enum_by_label(labels) if tidb_type == "ENUM" else crc.set_by_labels(labels)
    return crc.text  # TEXT, JSON, DATE, DATETIME, TIME


def _converter(
    tidb_type: str, field_type: dict[str, Any], zone: dt.tzinfo
) -> tuple[Converter | None, str, list[str] | None]:
    """(raw Avro value -> canonical text or None for as-is, canonical type, ENUM/SET labels or None)."""
    avro_type = field_type["type"]
    if tidb_type == "INT" or tidb_type == "BIGINT":
        return str, canonical_type(tidb_type), None
    if tidb_type == "INT UNSIGNED":
        return _non_negative, "int unsigned", None
    if tidb_type == "BIGINT UNSIGNED":
        return (_bigint_unsigned_text if avro_type == "string" else text_unsigned), "bigint unsigned", None
    if tidb_type == "YEAR":
        return _year, "year", None
    if tidb_type == "FLOAT":
        return _finite(text_float), "float", None
    if tidb_type == "DOUBLE":
        return _finite(text_double), "double", None
    if tidb_type == "BIT":
        return _bit, "bit", None
    if tidb_type == "DECIMAL":
        if avro_type == "string":
            return _decimal_text, "decimal", None
        precision, scale = field_type.get("precision"), field_type.get("scale", 0)
        if field_type.get("logicalType") != "decimal" or not isinstance(precision, int) or not isinstance(scale, int):
            raise ValueError("DECIMAL bytes without logicalType decimal, precision and scale")
        return _decimal_bytes(precision, scale), f"decimal({precision},{scale})", None
    if tidb_type == "BLOB":
        return text_bytes, "blob", None
    if tidb_type in ("ENUM", "SET"):
        allowed = field_type["connect.parameters"].get("allowed")
        elements = split_allowed(allowed) if isinstance(allowed, str) else None
        check = (_enum_check if tidb_type == "ENUM" else _set_check)(elements, allowed)
        return check, tidb_type.lower(), elements
    if tidb_type == "DATE":
        return _date, "date", None
    if tidb_type == "DATETIME":
        return _datetime, "datetime", None
    if tidb_type == "TIMESTAMP":
        if zone is dt.UTC:
            return _datetime, "timestamp", None
        return (lambda text: _timestamp(text, zone)), "timestamp", None
    if tidb_type == "TIME":
        return _time, "time", None
    return None, tidb_type.lower(), None  # TEXT and JSON: the string as sent


def _non_negative(value: int) -> str:
    if value < 0:
        raise ValueError(f"unsigned column holds {value}")
    return str(value)


def _bigint_unsigned_text(text: str) -> str:
    if not (text.isascii() and text.isdigit()) or int(text) >= _U64:
        raise ValueError(f"{text[:40]!r} is not a BIGINT UNSIGNED")
    return str(int(text))


def _year(value: int) -> str:
    if not 0 <= value <= 2155:
        raise ValueError(f"{value} is not a YEAR")
    return text_year(value)


def _finite(text: Callable[[float], str]) -> Callable[[float], str]:
    """MySQL stores no NaN or infinity: such a value is a corrupt message."""

    def convert(value: float) -> str:
        if value - value != 0:
            raise ValueError(f"{value} is not a finite number")
        return text(value)

    return convert


def _bit(raw: bytes) -> str:
    if len(raw) > 8:
        raise ValueError(f"BIT value of {len(raw)} bytes is wider than 64 bits")
    return str(int.from_bytes(raw, "big"))


def _decimal_text(text: str) -> str:
    value = Decimal(text)
    if not value.is_finite():
        raise ValueError(f"{text[:40]!r} is not a DECIMAL")
    return text_decimal(value, None)


def _decimal_bytes(precision: int, scale: int) -> Callable[[Decimal], str]:
    limit = Decimal(10) ** (precision - scale)

    def convert(value: Decimal) -> str:
        if value.copy_abs() >= limit:  # abs() would round to the 28-digit context
            raise ValueError(f"{value} does not fit DECIMAL({precision},{scale})")
        return text_decimal(value, scale)

    return convert


def _escape_label(label: str) -> str:
    """A label as TiCDC writes it into `allowed` (escapeEnumAndSetOptions): not reversible, since a
    backslash is not escaped itself and `\\'` and `''` both become `'`."""
    return label.replace(",", "\\,").replace("\\'", "'").replace("''", "'")


def _in_allowed(label: str, labels: frozenset[str], allowed: str) -> bool:
    """Whether a label is one of the column's: by the parsed labels, else by its escaped text being
    one comma-delimited item of `allowed` (where the escaping made the parsed labels ambiguous)."""
    return label in labels or f",{_escape_label(label)}," in f",{allowed},"


def _enum_check(elements: list[str] | None, allowed: str | None = None) -> Callable[[str], str] | None:
    if elements is None:
        return None
    labels = frozenset(elements) | {""}
    allowed = allowed or ""

    def check(label: str) -> str:
        if not _in_allowed(label, labels, allowed):
            raise ValueError(f"{label[:40]!r} is not one of the ENUM labels")
        return label

    return check


def _set_check(elements: list[str] | None, allowed: str | None = None) -> Callable[[str], str] | None:
    if elements is None:
        return None
    labels = frozenset(elements)
    allowed = allowed or ""

    def check(value: str) -> str:
        if (
            value
            and not labels.issuperset(value.split(","))
            and not all(_in_allowed(label, labels, allowed) for label in value.split(","))
        ):
            raise ValueError(f"{value[:40]!r} is not a subset of the SET labels")
        return value

    return check


def _date(text: str) -> str:
    if not _DATE_RE.match(text):
        raise ValueError(f"{text[:40]!r} is not a DATE")
    return text


def _datetime(text: str) -> str:
    """TiDB already renders DATETIME (and TIMESTAMP in UTC) as canonical text: check it, keep it."""
    if not _DATETIME_RE.match(text):
        raise ValueError(f"{text[:40]!r} is not a DATETIME")
    return text


def _timestamp(text: str, zone: dt.tzinfo) -> str:
    return text_timestamp_from_zone(text, zone)


def _time(text: str) -> str:
    if not _TIME_RE.match(text):
        raise ValueError(f"{text[:40]!r} is not a TIME")
    return text
