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

`decode_columns` decodes a batch's inserts and updates with the extension column-wise (decision 22): the
payloads of each writer schema are read together by a numpy reader of Avro binary (shared with Simple-Avro), and
each column is made canonical with Arrow compute; `decode` stays the reference for everything else.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from fastavro import parse_schema, schemaless_reader
from fastavro.types import Schema as AvroSchema

from spark_jobs.canonical.blocks import RowBlock, struct_of
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
from spark_jobs.codecs import ColumnDecode, Headers, columns, fast_paths
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


def fastavro_error(exc: Exception) -> str:
    """What fastavro said of a record it could not read, without the memory addresses its messages name (`<_io.BytesIO
    object at 0x7f...>`), so a quarantine reason is the same for the same message every time."""
    return re.sub(r" at 0x[0-9a-f]+", "", f"{type(exc).__name__}: {str(exc)[:200]}")


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
        self._compiled: dict[int, tuple[WriterSchema, Any] | None] = {}
        self._value_plans: dict[int, _ValuePlan | None] = {}
        self._key_plans: dict[int, tuple[WriterSchema, Node] | None] = {}

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
                f"{part} is not valid Avro for schema id {schema_id}: {fastavro_error(exc)}",
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

    # ---- the column path ---------------------------------------------------------------------------

    def decode_columns(self, keys: Sequence[bytes | None], values: Sequence[bytes | None]) -> ColumnDecode:
        """Inserts and updates with the TiDB extension as RowBlocks; every other message left to `decode`: a
        delete, and a row without the extension, carry no commit ts, which a block holds for every row. The values
        of each writer schema are read at once (`read_records`), their keys only checked, and each column is made
        canonical for the whole batch.

        Silver places a row without a commit ts after the last commit before it on its partition, or before the
        next where that one is older (the partition sent again), and learns the commits from what `decode`
        decodes: so the last message taken before each message that may lack a commit ts, the first taken after
        it, and the batch's last taken, are left to `decode` too.
        """
        count = len(values)
        value_payloads, key_payloads = Payloads.of(values), Payloads.of(keys)
        if value_payloads is None or key_payloads is None or len(keys) != count:
            return ColumnDecode([], list(range(count)))
        framed, value_ids = value_payloads.confluent()
        keyed = key_payloads.present & (key_payloads.ends > key_payloads.starts)
        key_framed, key_ids = key_payloads.confluent()
        stamped = np.zeros(count, np.bool_)  # values that `decode` gives a commit ts, or rejects
        taken = np.zeros(count, np.bool_)
        groups: list[_Group] = []
        for schema_id in np.unique(value_ids[framed]).tolist():
            at = np.flatnonzero(framed & (value_ids == schema_id))
            compiled = self._column_schema(schema_id)
            if compiled is not None and compiled[0].extension:
                stamped[at] = True
            plan = self._value_plan(schema_id)
            rows = at[~keyed[at] | key_framed[at]]
            if plan is not None and len(rows):
                group = self._read_group(plan, value_payloads, key_payloads, rows, np.where(keyed, key_ids, -1)[rows])
                taken[rows[~group.bad]] = True
                groups.append(group)
        last = np.maximum.accumulate(np.where(taken, np.arange(count), -1))
        following = np.minimum.accumulate(np.where(taken, np.arange(count), count)[::-1])[::-1]
        readers = np.flatnonzero(~stamped[1:]) + 1
        after = np.flatnonzero(~stamped[:-1]) + 1
        moved = np.concatenate((last[readers - 1], last[-1:], following[after]))
        taken[moved[(moved >= 0) & (moved < count)]] = False
        blocks = []
        for group in sorted(groups, key=lambda g: int(g.rows[taken[g.rows]].max(initial=-1))):
            blocks.extend(group.blocks(taken[group.rows], self._last_columns))
        return ColumnDecode(blocks, np.flatnonzero(~taken).tolist())

    def _read_group(self, plan: _ValuePlan, values: Payloads, keys: Payloads, rows: Ints, key_ids: Ints) -> _Group:
        """The rows of one value schema read and made canonical; `bad` marks those left to `decode`."""
        held, bad = read_records(values, plan.reader, rows, 5)
        schema = plan.schema
        key_columns: dict[int, list[str]] = {-1: []}
        for key_id in np.unique(key_ids[key_ids >= 0]).tolist():
            at = key_ids == key_id
            key_plan = self._key_plan(key_id)
            if key_plan is None or key_plan[0].full_name != schema.full_name:
                bad |= at
                continue
            key_held, key_bad = read_records(keys, key_plan[1], rows[at], 5)
            key_bad |= wrong_texts(keys, key_plan[1], key_held, ~key_bad)
            bad[at] |= key_bad
            key_columns[key_id] = [name for name, _ in key_plan[0].fields]
        for name, node in plan.others:
            bad |= wrong_texts(values, node, held[name], ~bad)
        ops, wrong = texts_of(values, held["_tidb_op"])
        is_update = pc.equal(ops, "u").to_numpy(zero_copy_only=False)
        bad |= ~(is_update | pc.equal(ops, "c").to_numpy(zero_copy_only=False))
        commit_ts = held["_tidb_commit_ts"]
        bad |= commit_ts <= 0
        if wrong is not None:
            bad |= wrong
        texts = []
        for column in plan.columns:
            text, rejected = column.read(values, held[column.name], len(rows))
            bad |= rejected
            texts.append(text)
        return _Group(plan, rows, key_ids, key_columns, bad, is_update, commit_ts, texts)

    def _column_schema(self, schema_id: int) -> tuple[WriterSchema, Any] | None:
        """A writer schema compiled for the column path, with its JSON; None where it does not compile. Kept apart
        from `decode`'s cache, whose order of meeting schemas (which decides the extension check) stays its own."""
        if schema_id in self._compiled:
            return self._compiled[schema_id]
        compiled: tuple[WriterSchema, Any] | None
        try:
            doc = json.loads(self.registry.schema(schema_id))
            compiled = _compile(schema_id, doc, self.zone, f"schema id {schema_id}"), doc
        except (DecodeError, ValueError):
            compiled = None
        except Exception:  # a registry that does not answer: `decode` reports it for each message
            return None
        self._compiled[schema_id] = compiled
        return compiled

    def _value_plan(self, schema_id: int) -> _ValuePlan | None:
        """How the column path reads a value schema: None for one without the extension, with a checksum to
        verify, or with a type it does not read."""
        if schema_id not in self._value_plans:
            compiled = self._column_schema(schema_id)
            if compiled is None:
                return None
            schema, doc = compiled
            verify = schema.checksum is not None and self.verify_checksums
            self._value_plans[schema_id] = None if verify else _value_plan(schema, doc, self.zone)
        return self._value_plans[schema_id]

    def _key_plan(self, schema_id: int) -> tuple[WriterSchema, Node] | None:
        if schema_id not in self._key_plans:
            compiled = self._column_schema(schema_id)
            if compiled is None:
                return None
            try:
                self._key_plans[schema_id] = compiled[0], reader_of(compiled[1])
            except ValueError:
                self._key_plans[schema_id] = None
        return self._key_plans[schema_id]


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


# ---- Avro binary, column-wise -------------------------------------------------------------------------------
# The column paths of Avro and Simple-Avro read a batch's payloads together: one numpy step per schema node for
# every record at once (varints, lengths, union branches, map entries), where fastavro interprets the schema for
# each record and makes a Python object of each value. Strings and bytes stay slices of the joined payloads until
# a column is made of them. The reader is stricter than fastavro, never looser: what it refuses (a truncated or
# overlong record, a varint past 64 bits, an enum or union index out of range, a type no TiCDC schema has) marks
# the record bad, and its message goes to `decode`; what it reads, it reads as fastavro does.

Ints = npt.NDArray[Any]  # numpy int64 (positions, lengths, longs)
Mask = npt.NDArray[np.bool_]
_PAD = 16  # zero bytes after the payloads: a varint or a double read from past a record's end stays in the buffer
_MAX_ENTRIES = 1 << 13  # map entries read per record at most (a map of more goes to `decode`)
# logical types fastavro turns into other objects than the value as written; `bytes-decimal` is read as its bytes
_LOGICAL = frozenset(
    {
        "long-timestamp-millis",
        "long-local-timestamp-millis",
        "long-timestamp-micros",
        "long-local-timestamp-micros",
        "int-date",
        "fixed-decimal",
        "string-uuid",
        "int-time-millis",
        "long-time-micros",
    }
)


@dataclass(frozen=True)
class Payloads:
    """A batch's message values (or keys) joined in one buffer with zero padding after them."""

    buf: npt.NDArray[np.uint8]
    data: Any  # pa.Buffer over `buf`
    starts: Ints
    ends: Ints
    present: Mask  # not None

    @staticmethod
    def of(values: Sequence[bytes | None]) -> Payloads | None:
        """The values joined; None unless each is bytes or None."""
        if not set(map(type, values)) <= {bytes, type(None)}:
            return None
        array = pa.array(values, pa.large_binary())
        count = len(array)
        offsets = np.frombuffer(array.buffers()[1], np.int64, count + 1)
        size = int(offsets[-1])
        buf = np.zeros(size + _PAD, np.uint8)
        if size:
            buf[:size] = np.frombuffer(array.buffers()[2], np.uint8, size)
        present = array.is_valid().to_numpy(zero_copy_only=False)
        return Payloads(buf, pa.py_buffer(buf), offsets[:-1].copy(), offsets[1:].copy(), present)

    def confluent(self) -> tuple[Mask, Ints]:
        """(whether each value starts with the 5-byte Confluent header, its schema id)."""
        starts = np.minimum(self.starts, len(self.buf) - _PAD)
        fits = self.present & (self.ends - self.starts >= 5) & (self.buf[starts] == 0)
        ids: Ints = self.buf[starts[:, None] + np.arange(1, 5)].view(">u4").reshape(-1).astype(np.int64)
        return fits, ids


@dataclass(frozen=True)
class Slices:
    """Strings or bytes read, as (start, length) in the joined payloads."""

    start: Ints
    length: Ints


@dataclass(frozen=True)
class Branches:
    """A union read: each row's branch, and per branch the positions (among the rows) that took it and what was
    read there (None for null, or where no row took it)."""

    index: Ints
    parts: list[tuple[Ints, Any]]


@dataclass(frozen=True)
class Entries:
    """A map read: per entry, the position (among the rows) of its map, its key, and its value (all entries'), in
    the order they were read (each map's first entries, then their second ...); `order` is each entry's place in
    the order of the payloads (map by map)."""

    owner: Ints
    key: Slices
    value: Any
    order: Ints


class _Reading:
    """One read of a batch: the buffer, and which messages failed."""

    def __init__(self, payloads: Payloads) -> None:
        self.buf = payloads.buf
        self.pad = len(payloads.buf) - _PAD
        self.bad = np.zeros(len(payloads.starts), np.bool_)

    def fail(self, rows: Ints, pos: Ints, where: Mask) -> None:
        """Mark the messages of the rows `where` holds bad; their reads go on from the padding (zeros)."""
        if where.any():
            self.bad[rows[where]] = True
            pos[where] = self.pad

    def varint(self, rows: Ints, pos: Ints, end: Ints) -> Ints:
        """The zig-zag longs at `pos`, which moves past them."""
        buf = self.buf
        first = buf[pos]
        raw = (first & 0x7F).astype(np.uint64)
        pos += 1
        more = first >= 0x80
        if more.any():
            live = np.flatnonzero(more)
            at = pos[live]
            acc = raw[live]
            for shift in range(7, 64, 7):
                byte = buf[at]
                at += 1
                acc |= (byte & 0x7F).astype(np.uint64) << np.uint64(shift)
                done = byte < 0x80
                if shift == 63:  # a tenth byte: more than its low bit is past 64 bits, which fastavro wraps
                    raw[live], pos[live] = acc, at
                    wide = np.zeros(len(pos), np.bool_)
                    wide[live[byte > 1]] = True
                    self.fail(rows, pos, wide)
                    break
                if done.all():
                    raw[live], pos[live] = acc, at
                    break
                raw[live[done]], pos[live[done]] = acc[done], at[done]
                live, at, acc = live[~done], at[~done], acc[~done]
        value: Ints = ((raw >> np.uint64(1)) ^ (np.uint64(0) - (raw & np.uint64(1)))).view(np.int64)
        self.fail(rows, pos, pos > end)
        return value

    def slices(self, rows: Ints, pos: Ints, end: Ints) -> Slices:
        length = self.varint(rows, pos, end)
        wrong = (length < 0) | (length > end - pos)
        if wrong.any():
            self.fail(rows, pos, wrong)
            length[wrong] = 0
        start = pos.copy()
        pos += length
        return Slices(start, length)

    def fixed(self, rows: Ints, pos: Ints, end: Ints, size: int) -> npt.NDArray[np.uint8]:
        grid: npt.NDArray[np.uint8] = self.buf[pos[:, None] + np.arange(size)]
        pos += size
        self.fail(rows, pos, pos > end)
        return grid


class Node:
    """How one Avro schema node is read for many rows at once."""

    def read(self, r: _Reading, rows: Ints, pos: Ints, end: Ints) -> Any:
        """What the rows hold here (aligned with them); `pos` moves past it, `rows` are message indices."""
        raise NotImplementedError


class _Null(Node):
    def read(self, r: _Reading, rows: Ints, pos: Ints, end: Ints) -> Any:
        return None


class _Long(Node):  # int and long: fastavro reads both as a long
    def read(self, r: _Reading, rows: Ints, pos: Ints, end: Ints) -> Any:
        return r.varint(rows, pos, end)


class _Float(Node):
    def __init__(self, size: int) -> None:
        self.size, self.kind = size, "<f4" if size == 4 else "<f8"

    def read(self, r: _Reading, rows: Ints, pos: Ints, end: Ints) -> Any:
        return r.fixed(rows, pos, end, self.size).view(self.kind).reshape(-1)


class _Boolean(Node):
    def read(self, r: _Reading, rows: Ints, pos: Ints, end: Ints) -> Any:
        return r.fixed(rows, pos, end, 1).reshape(-1) != 0  # fastavro: any byte but zero is true


class _Bytes(Node):
    def __init__(self, text: bool) -> None:
        self.text = text  # a string: fastavro decodes it as UTF-8, strictly

    def read(self, r: _Reading, rows: Ints, pos: Ints, end: Ints) -> Any:
        return r.slices(rows, pos, end)


class _Enum(Node):
    def __init__(self, symbols: int) -> None:
        self.symbols = symbols

    def read(self, r: _Reading, rows: Ints, pos: Ints, end: Ints) -> Any:
        index = r.varint(rows, pos, end)
        wrong = (index < 0) | (index >= self.symbols)  # fastavro takes a negative index from the end
        r.fail(rows, pos, wrong)
        return index


class _Refuse(Node):
    """A node the column path does not read: its rows go to `decode`."""

    def read(self, r: _Reading, rows: Ints, pos: Ints, end: Ints) -> Any:
        r.fail(rows, pos, np.ones(len(rows), np.bool_))
        return None


class _Record(Node):
    def __init__(self, fields: list[tuple[str, Node]]) -> None:
        self.fields = fields

    def read(self, r: _Reading, rows: Ints, pos: Ints, end: Ints) -> Any:
        return {name: node.read(r, rows, pos, end) for name, node in self.fields}


class _Union(Node):
    def __init__(self, branches: list[Node]) -> None:
        self.branches = branches

    def read(self, r: _Reading, rows: Ints, pos: Ints, end: Ints) -> Any:
        index = r.varint(rows, pos, end)
        wrong = (index < 0) | (index >= len(self.branches))  # fastavro takes a negative index from the end
        if wrong.any():
            r.fail(rows, pos, wrong)
            index[wrong] = 0
        counts = np.bincount(index, minlength=len(self.branches))
        parts: list[tuple[Ints, Any]] = []
        for b, node in enumerate(self.branches):
            if counts[b] == len(index) and not isinstance(node, _Null):
                parts.append((np.arange(len(index)), node.read(r, rows, pos, end)))
                continue
            sel = np.flatnonzero(index == b) if counts[b] else np.zeros(0, np.int64)
            if not counts[b] or isinstance(node, _Null):
                parts.append((sel, None))
                continue
            at = pos[sel]
            parts.append((sel, node.read(r, rows[sel], at, end[sel])))
            pos[sel] = at
        return Branches(index, parts)


class _Map(Node):
    def __init__(self, values: Node) -> None:
        self.values = values

    def read(self, r: _Reading, rows: Ints, pos: Ints, end: Ints) -> Any:
        """Entry by entry: the k-th entry of every map at once, a block count where a map's block is used up."""
        left = np.zeros(len(rows), np.int64)
        active = np.arange(len(rows))
        owners: list[Ints] = []
        keys: list[Slices] = []
        values: list[Any] = []
        for _ in range(_MAX_ENTRIES):
            need = active[left[active] == 0]
            if len(need):
                at, need_rows, need_end = pos[need], rows[need], end[need]
                blocks = r.varint(need_rows, at, need_end)
                negative = np.flatnonzero(blocks < 0)
                if len(negative):  # a negative count is followed by the block's size in bytes
                    blocks[negative] = -blocks[negative]
                    sized = at[negative]
                    r.varint(need_rows[negative], sized, need_end[negative])
                    at[negative] = sized
                    r.fail(need_rows, at, blocks < 0)  # -(-2**63)
                blocks[r.bad[need_rows]] = 0
                pos[need] = at
                left[need] = blocks
                active = active[left[active] > 0]
            if not len(active):
                break
            at, active_rows, active_end = pos[active], rows[active], end[active]
            keys.append(r.slices(active_rows, at, active_end))
            values.append(self.values.read(r, active_rows, at, active_end))
            pos[active] = at
            owners.append(active)
            left[active] -= 1
            left[active[r.bad[active_rows]]] = 0
        else:
            r.fail(rows, pos, left > 0)
        if not owners:
            empty = np.zeros(0, np.int64)
            return Entries(empty, Slices(empty, empty), self.values.read(r, empty, empty.copy(), empty), empty)
        owner = np.concatenate(owners)
        sizes = np.bincount(owner, minlength=len(rows))
        # a map's k-th entry was read in round k: its place is its map's first place plus k
        rounds = np.repeat(np.arange(len(owners)), [len(o) for o in owners])
        return Entries(
            owner,
            Slices(np.concatenate([k.start for k in keys]), np.concatenate([k.length for k in keys])),
            _concat(values),
            (np.cumsum(sizes) - sizes)[owner] + rounds,
        )


def _concat(parts: list[Any]) -> Any:
    """Reads of one node for consecutive groups of rows, as one read."""
    first = parts[0]
    if first is None:
        return None
    if isinstance(first, np.ndarray):
        return np.concatenate(parts)
    if isinstance(first, Slices):
        return Slices(np.concatenate([p.start for p in parts]), np.concatenate([p.length for p in parts]))
    if isinstance(first, dict):
        return {name: _concat([p[name] for p in parts]) for name in first}
    if isinstance(first, Branches):
        offsets = np.cumsum([0] + [len(p.index) for p in parts])
        merged: list[tuple[Ints, Any]] = []
        for b in range(len(first.parts)):
            sels = [p.parts[b][0] + offset for p, offset in zip(parts, offsets)]
            reads = [p.parts[b][1] for p in parts if len(p.parts[b][0]) and p.parts[b][1] is not None]
            merged.append((np.concatenate(sels), _concat(reads) if reads else None))
        return Branches(np.concatenate([p.index for p in parts]), merged)
    raise ValueError(f"no column-wise read of {type(first).__name__} in a map")


_PRIMITIVES: dict[str, Node] = {
    "null": _Null(),
    "boolean": _Boolean(),
    "int": _Long(),
    "long": _Long(),
    "float": _Float(4),
    "double": _Float(8),
    "bytes": _Bytes(text=False),
    "string": _Bytes(text=True),
}


def reader_of(schema: Any, named: dict[str, Node] | None = None, namespace: str = "") -> Node:
    """The column-wise reader of an Avro schema (its JSON); ValueError for what it does not read: arrays, fixed,
    recursive records, logical types that fastavro turns into other objects. A record or enum is named in
    `named` for the schemas after it."""
    named = {} if named is None else named
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _PRIMITIVES[schema]
        name = schema if "." in schema or not namespace else f"{namespace}.{schema}"
        if name in named:
            return named[name]
        raise ValueError(f"unknown type {schema!r}")
    if isinstance(schema, list):
        return _Union([reader_of(branch, named, namespace) for branch in schema])
    if not isinstance(schema, dict):
        raise ValueError(f"not an Avro schema: {schema!r}")
    kind = schema.get("type")
    if "logicalType" in schema and f"{kind}-{schema['logicalType']}" in _LOGICAL:
        raise ValueError(f"logical type {schema['logicalType']!r}")
    if kind in ("record", "enum"):
        given, space = schema.get("name"), schema.get("namespace", namespace)
        if not isinstance(given, str) or not isinstance(space, str):
            raise ValueError("a record or enum without a name")
        full = given if "." in given or not space else f"{space}.{given}"
        if kind == "enum":
            symbols = schema.get("symbols")
            if not isinstance(symbols, list):
                raise ValueError("an enum without symbols")
            node: Node = _Enum(len(symbols))
        else:
            fields = schema.get("fields")
            if not isinstance(fields, list) or not all(isinstance(f, dict) for f in fields):
                raise ValueError("a record without fields")
            inner = full.rsplit(".", 1)[0] if "." in full else ""
            read = [(f.get("name"), reader_of(f.get("type"), named, inner)) for f in fields]
            names = [n for n, _ in read]
            if not all(isinstance(n, str) for n in names) or len(set(names)) != len(names):
                raise ValueError("a record whose fields are not uniquely named")
            node = _Record(cast(list[tuple[str, Node]], read))
        named[full] = node
        return node
    if kind == "map":
        return _Map(reader_of(schema.get("values"), named, namespace))
    if isinstance(kind, str) and kind in _PRIMITIVES:
        return _PRIMITIVES[kind]
    raise ValueError(f"no column-wise read of Avro type {kind!r}")


def named_readers(schemas: list[Any]) -> dict[str, Node]:
    """Column-wise readers of named schemas (an .avsc list, each naming the ones before it), by full name; one that
    `reader_of` does not read refuses every row that holds it."""
    named: dict[str, Node] = {}
    for schema in schemas:
        name, space = schema["name"], schema.get("namespace", "")
        try:
            reader_of(schema, named)
        except ValueError:
            named[name if "." in name or not space else f"{space}.{name}"] = _Refuse()
    return named


def read_records(payloads: Payloads, node: Node, rows: Ints, skip: int = 0) -> tuple[Any, Mask]:
    """Read `rows` (message indices, each once), their payloads from byte `skip` on, all of each payload: (what
    they hold, which rows failed)."""
    r = _Reading(payloads)
    pos = payloads.starts[rows] + skip
    end = payloads.ends[rows]
    held = node.read(r, rows, pos, end)
    r.fail(rows, pos, pos != end)
    return held, r.bad[rows]


def wrong_texts(payloads: Payloads, node: Node, held: Any, fine: Mask) -> Mask:
    """Which of the `fine` rows hold a string under `node` (records and unions of it) that is not UTF-8: for what a
    column path reads but makes no column of, which fastavro decodes all the same."""
    wrong = np.zeros(len(fine), np.bool_)
    if isinstance(node, _Bytes) and node.text:
        at = np.flatnonzero(fine)
        bad = texts_of(payloads, picked(held, at))[1]
        if bad is not None:
            wrong[at[bad]] = True
    elif isinstance(node, _Record):
        for name, field in node.fields:
            wrong |= wrong_texts(payloads, field, held[name], fine)
    elif isinstance(node, _Union):
        for (sel, part), branch in zip(held.parts, node.branches):
            if part is not None and len(sel):
                wrong[sel] |= wrong_texts(payloads, branch, part, fine[sel])
    elif isinstance(node, _Map):
        raise ValueError("no check of the strings of a map")
    return wrong


def picked(held: Any, at: Ints) -> Any:
    """What rows hold (longs, floats, slices, records of them), of the rows at positions `at` only."""
    if isinstance(held, np.ndarray):
        return held[at]
    if isinstance(held, Slices):
        return Slices(held.start[at], held.length[at])
    if isinstance(held, dict):
        return {name: picked(value, at) for name, value in held.items()}
    raise ValueError(f"no rows picked of {type(held).__name__}")


def binary_of(payloads: Payloads, slices: Slices) -> Any:
    """The slices (none overlapping) as a binary array, in their order: the joined payloads cut at every slice's
    bounds, the slices taken out."""
    count = len(slices.start)
    if not count:
        return pa.array([], pa.large_binary())
    start, length = slices.start, slices.length
    order = None
    if count > 1 and (np.diff(start) < 0).any():
        order = np.argsort(start, kind="stable")
        start, length = start[order], length[order]
    bounds = np.empty(2 * count, np.int64)
    bounds[0::2] = start
    bounds[1::2] = start + length
    if (np.diff(bounds) < 0).any():
        raise ValueError("overlapping slices")
    pieces = pa.Array.from_buffers(pa.large_binary(), 2 * count - 1, [None, pa.py_buffer(bounds), payloads.data])
    at = np.arange(0, 2 * count, 2)
    if order is not None:
        at[order] = at.copy()
    return pieces.take(pa.array(at))


def texts_of(payloads: Payloads, slices: Slices) -> tuple[Any, Mask | None]:
    """The slices as strings: (string array, rows that are not UTF-8 or None), as fastavro decodes them strictly
    (a row that is not UTF-8 is an empty string here)."""
    binary = binary_of(payloads, slices)
    try:
        return binary.cast(pa.string()), None
    except pa.ArrowInvalid:
        pass
    texts: list[str] = []
    bad = np.zeros(len(binary), np.bool_)
    for i, raw in enumerate(binary.to_pylist()):
        try:
            texts.append(raw.decode())
        except UnicodeDecodeError:
            texts.append("")
            bad[i] = True
    return pa.array(texts, pa.string()), bad


# ---- the column path: canonical text per column ---------------------------------------------------------------

# a column's non-null values as read (longs, floats, slices) -> (canonical text, rows `decode` rejects or None)
Texts = Callable[[Payloads, Any], tuple[Any, Mask | None]]
# the converters' checks as RE2 patterns over ASCII (Python's `\d` takes any digit: the rest meets the converter)
_DATETIME_KEEP = (
    r"^[0-9]{4}-(0[0-9]|1[0-2])-([0-2][0-9]|3[01]) ([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?$"
)
_ZONED_KEEP = r"^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-5][0-9](\.[0-9]{1,6})?$"
_TIME_KEEP = r"^-?[0-9]{2,3}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?$"
_U64_MAX = str(_U64 - 1)
_OP_NAMES = pa.array(["insert", "update"], pa.string())


def signed_texts(payloads: Payloads, values: Ints) -> tuple[Any, Mask | None]:
    return pa.array(values).cast(pa.string()), None


def _non_negative_texts(payloads: Payloads, values: Ints) -> tuple[Any, Mask | None]:
    return pa.array(values).cast(pa.string()), values < 0


def unsigned_texts(payloads: Payloads, values: Ints) -> tuple[Any, Mask | None]:
    """A BIGINT UNSIGNED sent as a long: the wrapped value, unwrapped."""
    return pa.array(values.view(np.uint64)).cast(pa.string()), None


def _year_texts(payloads: Payloads, values: Ints) -> tuple[Any, Mask | None]:
    return pc.utf8_lpad(pa.array(values).cast(pa.string()), 4, "0"), (values < 0) | (values > 2155)


def _u64_text(values: Any) -> Any:
    """BIGINT UNSIGNED digits as `_bigint_unsigned_text` returns them: no leading zero, below 2**64."""
    size = pc.binary_length(values)
    fits = pc.or_(pc.less(size, 20), pc.and_(pc.equal(size, 20), pc.less_equal(values, _U64_MAX)))
    return pc.and_(columns.digits(values), fits)


def float_texts(convert: Converter, bits: int) -> Texts:
    """FLOAT (`bits` 32, whatever width it is sent in) and DOUBLE: Arrow's shortest digits of the value at that
    width where they are repr's, the converter once per distinct value as read for the rest (what is not finite,
    or a double that is no 32-bit float, among them)."""
    width = np.float32 if bits == 32 else np.float64

    def texts(payloads: Payloads, values: Ints) -> tuple[Any, Mask | None]:
        out = columns.double_texts(pa.array(values.astype(width)))
        todo = pc.invert(columns.shortest_double(out))
        out, rejected = columns.by_value(pa.array(values.astype(np.float64)), out, todo, convert)
        return out, None if rejected is None else rejected.to_numpy(zero_copy_only=False)

    return texts


def _big_endian(payloads: Payloads, values: Slices) -> Ints:
    """Slices of at most 8 bytes as big-endian unsigned numbers (uint64): the 8 bytes that end each slice, read at
    once, masked to its length."""
    length = np.minimum(values.length, 8)
    grid = payloads.buf[(values.start + length - 8)[:, None] + np.arange(8)]
    number: Ints = grid.view(">u8").reshape(-1).astype(np.uint64)
    bits = (8 * length).astype(np.uint64)
    return np.where(length == 8, number, number & ((np.uint64(1) << bits) - np.uint64(1)))


def _bit_texts(payloads: Payloads, values: Slices) -> tuple[Any, Mask | None]:
    """BIT bytes as their big-endian number; more than 8 bytes is rejected."""
    return pa.array(_big_endian(payloads, values)).cast(pa.string()), values.length > 8


def _decimal_texts(precision: int, scale: int, convert: Converter) -> Texts:
    """DECIMAL bytes (big-endian two's complement of the unscaled value) as Arrow decimals' text where it is
    `text_decimal`'s and within `precision` digits; the rest (an exponent, which Arrow writes below 1e-6, or too
    many digits) through the converter (`_decimal_bytes`, which rejects too many, as fastavro rounds them to
    `precision` digits first, which keeps them as large); a value wider than Arrow's decimal goes to `decode`.
    Up to 8 bytes (18 digits) by one gather of 8 bytes per value, wider ones by one of `width` bytes."""
    width, kind = (16, pa.decimal128(38, scale)) if precision <= 38 else (32, pa.decimal256(76, scale))
    whole = f"(?:0|[1-9]{fast_paths.digit_run(precision - scale - 1, 0)})" if precision > scale else "0"
    fraction = rf"\.{fast_paths.digit_run(scale)}" if scale else ""
    rule = columns.ColumnRule(lambda text: convert(Decimal(text)), keep=columns.matching(f"^-?{whole}{fraction}$"))

    def texts(payloads: Payloads, values: Slices) -> tuple[Any, Mask | None]:
        buf, start, length = payloads.buf, values.start, values.length
        negative = (length > 0) & (buf[np.minimum(start, len(buf) - 1)] >= 0x80)
        little = np.zeros((len(start), width), np.uint8)
        little[negative] = 0xFF
        short = length <= 8
        number = _big_endian(payloads, values)
        shift = (64 - 8 * np.clip(length, 1, 8)).astype(np.uint64)
        signed = ((number << shift).view(np.int64) >> shift.view(np.int64)).astype(np.int64)
        little[short, :8] = signed[short, None].view(np.uint8).reshape(-1, 8)
        long_rows = np.flatnonzero(~short & (length <= width))
        if len(long_rows):
            places = np.arange(width)
            held = places < length[long_rows, None]
            at = np.where(held, start[long_rows, None] + length[long_rows, None] - 1 - places, 0)
            little[long_rows] = np.where(held, buf[at], little[long_rows])
        text = pa.Array.from_buffers(kind, len(start), [None, pa.py_buffer(little)]).cast(pa.string())
        text, rejected = columns.converted(text, rule)
        wide = length > width
        return text, wide if rejected is None else wide | rejected.to_numpy(zero_copy_only=False)

    return texts


def blob_texts(payloads: Payloads, values: Slices) -> tuple[Any, Mask | None]:
    return columns.base64_texts(binary_of(payloads, values)), None


def rule_texts(rule: columns.ColumnRule) -> Texts:
    """Strings: UTF-8 as fastavro requires, then canonical by the rule."""

    def texts(payloads: Payloads, values: Slices) -> tuple[Any, Mask | None]:
        text, wrong = texts_of(payloads, values)
        text, rejected = columns.converted(text, rule)
        if rejected is not None:
            rejected = rejected.to_numpy(zero_copy_only=False)
            wrong = rejected if wrong is None else wrong | rejected
        return text, wrong

    return texts


def _utc_minute_in(zone: dt.tzinfo) -> Callable[[str], str | None]:
    """A local `YYYY-MM-DD HH:MM`'s UTC minute, as `_timestamp` moves it; None where the offset has seconds."""

    def minute(text: str) -> str | None:
        start = text_timestamp_from_zone(text + ":00", zone)
        return start[:16] if start.endswith(":00") else None

    return minute


def _field_texts(field_type: dict[str, Any], convert: Converter | None, zone: dt.tzinfo) -> Texts:
    """How the column path makes a column's text, for its Avro type and `tidb_type` (`_compile` checked both);
    ValueError for one it does not."""
    tidb_type, avro_type = field_type["connect.parameters"]["tidb_type"], field_type["type"]
    if tidb_type in ("INT", "BIGINT"):
        return signed_texts
    if tidb_type == "INT UNSIGNED":
        return _non_negative_texts
    if tidb_type == "BIGINT UNSIGNED":
        return unsigned_texts if avro_type == "long" else rule_texts(columns.ColumnRule(convert, keep=_u64_text))
    if tidb_type == "YEAR":
        return _year_texts
    if tidb_type in ("FLOAT", "DOUBLE") and convert is not None:
        return float_texts(convert, 32 if tidb_type == "FLOAT" else 64)
    if tidb_type == "BIT":
        return _bit_texts
    if tidb_type == "DECIMAL" and avro_type == "string":
        return rule_texts(columns.ColumnRule(convert, keep=columns.decimal(None)))
    if tidb_type == "DECIMAL":
        precision, scale = field_type["precision"], field_type.get("scale", 0)
        if not 0 <= scale <= precision <= 65 or precision < 1 or type(precision) is bool or type(scale) is bool:
            raise ValueError(f"DECIMAL({precision},{scale})")
        return _decimal_texts(precision, scale, cast(Converter, convert))
    if tidb_type == "BLOB":
        return blob_texts
    if convert is None:  # TEXT, JSON, an ENUM or SET without labels
        return rule_texts(columns.AS_SENT)
    if tidb_type in ("ENUM", "SET"):
        labels = pa.array(["", *split_allowed(field_type["connect.parameters"]["allowed"])], pa.string())
        return rule_texts(columns.ColumnRule(convert, keep=lambda v: pc.is_in(v, labels), distinct=True))
    if tidb_type == "DATE":
        return rule_texts(columns.ColumnRule(convert, keep=columns.DATE, distinct=True))
    if tidb_type == "TIMESTAMP" and zone is not dt.UTC:
        minute = _utc_minute_in(zone)
        return rule_texts(columns.ColumnRule(convert, keep=columns.matching(_ZONED_KEEP), minute=minute))
    if tidb_type in ("DATETIME", "TIMESTAMP"):
        return rule_texts(columns.ColumnRule(convert, keep=columns.matching(_DATETIME_KEEP)))
    if tidb_type == "TIME":
        return rule_texts(columns.ColumnRule(convert, keep=columns.matching(_TIME_KEEP)))
    raise ValueError(f"no column-wise text of {tidb_type}")


@dataclass(frozen=True)
class _Column:
    """How the column path reads one column of a value schema."""

    name: str
    null: int | None  # the null branch of its union; None where it is not nullable
    texts: Texts

    def read(self, payloads: Payloads, held: Any, count: int) -> tuple[Any, Mask]:
        """(the column's canonical text, rows whose value `decode` rejects) from what the rows hold."""
        bad = np.zeros(count, np.bool_)
        if self.null is None:
            texts, rejected = self.texts(payloads, held)
            if rejected is not None:
                bad |= rejected
            return texts, bad
        sel, values = held.parts[1 - self.null]
        if not len(sel):
            return pa.nulls(count, pa.string()), bad
        texts, rejected = self.texts(payloads, values)
        if rejected is not None:
            bad[sel] = rejected
        if len(sel) == count:
            return texts, bad
        present = np.zeros(count, np.bool_)
        present[sel] = True
        return columns.spread(texts, pa.array(present)), bad


@dataclass(frozen=True)
class _ValuePlan:
    schema: WriterSchema
    reader: Node
    columns: list[_Column]
    others: list[tuple[str, Node]]  # the fields read but made no column of: their strings are checked


def _value_plan(schema: WriterSchema, doc: dict[str, Any], zone: dt.tzinfo) -> _ValuePlan | None:
    """A value schema's column-wise reading: its `_tidb_op` a string and `_tidb_commit_ts` a long (else `decode`
    rejects each row), every column of a type the column path makes text of."""
    fields = {f["name"]: f for f in doc["fields"]}
    op, stamp = fields.get("_tidb_op"), fields.get("_tidb_commit_ts")
    if op is None or op.get("type") != "string" or stamp is None or stamp.get("type") not in ("int", "long"):
        return None
    if not schema.fields:
        return None
    try:
        reader = reader_of(doc)
        plan = []
        for name, convert in schema.fields:
            field_type = fields[name]["type"]
            null = None
            if isinstance(field_type, list):
                if len(field_type) != 2:
                    return None
                null = field_type.index("null")
                field_type = field_type[1 - null]
            plan.append(_Column(name, null, _field_texts(field_type, convert, zone)))
    except (ValueError, KeyError, TypeError):
        return None
    made = {"_tidb_op", *(name for name, _ in schema.fields)}
    return _ValuePlan(schema, reader, plan, [(n, node) for n, node in cast(_Record, reader).fields if n not in made])


@dataclass(frozen=True)
class _Group:
    """The rows of one value schema in a batch, read; `bad` marks those left to `decode`."""

    plan: _ValuePlan
    rows: Ints
    key_ids: Ints  # -1: no key
    key_columns: dict[int, list[str]]
    bad: Mask
    is_update: Mask
    commit_ts: Ints
    texts: list[Any]

    def blocks(self, taken: Mask, last_columns: dict[tuple[str, str], list[dict[str, Any]]]) -> list[RowBlock]:
        """A block per key schema of the rows `taken` marks; the table's latest columns are this schema's."""
        schema, names = self.plan.schema, [c.name for c in self.plan.columns]
        out = []
        for key_id, key_columns in self.key_columns.items():
            chosen = taken & (self.key_ids == key_id)
            if not chosen.any():
                continue
            mask = pa.array(chosen)
            after = [text.filter(mask) for text in self.texts]
            is_update = self.is_update[chosen]
            out.append(
                RowBlock(
                    schema.database,
                    schema.table,
                    key_columns,
                    schema.column_types,
                    names,
                    pa.array(self.rows[chosen].astype(np.int32)),
                    pa.array(self.commit_ts[chosen]),
                    _OP_NAMES.take(pa.array(is_update.astype(np.int8))),
                    struct_of(names, after, pa.array(np.zeros(len(is_update), np.bool_))),  # the after image's
                    struct_of(names, after),  # children under a null before: an update keeps its key
                    ("types_partial",),
                    {"old_value_missing": pa.array(is_update)},
                )
            )
        if taken.any():
            last_columns[(schema.database, schema.table)] = schema.columns
        return out
