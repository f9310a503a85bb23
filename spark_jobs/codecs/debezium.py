"""TiCDC's Debezium JSON: key and value `{"payload": …, "schema": …}` -> canonical change events.

The messages describe themselves (`schema` present or not, `tidb_type` present or not, `before`
present or not), so the options only record how the changefeed was made. What the format loses,
and which flag marks each loss, is listed once in `ticdc_devkit.simulator.debezium.expected`.

Speed: TiCDC writes `{"payload":{…},"schema":{…}}` with the schema last and the same schema bytes
for every row of a table version. The decoder parses only the payload and keys its compiled
converters by the schema bytes, so the (large) schema is parsed once per table version.
"""

from __future__ import annotations

import binascii
import datetime as dt
from base64 import b64decode
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import orjson

from spark_jobs import ddl
from spark_jobs.canonical.events import ChangeEvent, table_schema
from spark_jobs.canonical.values import (
    BINARY_TYPES,
    CHAR_TYPES,
    INTEGER_TYPES,
    canonical_type,
    int_bits,
    parse_type,
    text_bytes,
    text_date,
    text_datetime,
    text_decimal,
    text_double,
    text_float,
    text_int,
    text_time,
    text_timestamp_from_zone,
    text_unsigned,
    text_year,
)
from spark_jobs.codecs import Headers
from spark_jobs.errors import DecodeError

PROTOCOL = "debezium"

_loads = orjson.loads
_JSONError = orjson.JSONDecodeError
# what a converter or a malformed document can raise; each becomes a DecodeError naming the field
_BAD = (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError, binascii.Error)

_EPOCH = dt.datetime(1970, 1, 1)
_fromisoformat = dt.datetime.fromisoformat
_EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()
_ONE_US = dt.timedelta(microseconds=1)
_SCHEMA_CACHE_LIMIT = 4096

# a column's converter: its JSON value (never None) -> canonical text; TypeError/ValueError for a bad one
Converter = Callable[[Any], str]
# (converter, canonical type, flags) of one column
Compiled = tuple[Converter, str, tuple[str, ...]]


# ---- value converters: Debezium JSON value -> canonical text (never called with None) ----------


def _int(v: Any) -> str:
    if v.__class__ is not int:
        raise TypeError(f"expected an integer, got {v!r}")
    return text_int(v)


def _unsigned_of(bits: int) -> Converter:
    def convert(v: Any) -> str:
        if v.__class__ is not int:
            raise TypeError(f"expected an integer, got {v!r}")
        return text_unsigned(v, bits)

    return convert


def _number(v: float) -> float:
    if v.__class__ is not float and v.__class__ is not int:
        raise TypeError(f"expected a number, got {v!r}")
    return v


def _double(v: Any) -> str:
    return text_double(_number(v))


def _float(v: Any) -> str:
    return text_float(_number(v))


def _decimal_of(scale: int | None) -> Converter:
    """DECIMAL sent as a double: the double's shortest digits, at the column scale when known."""

    def convert(v: Any) -> str:
        digits = Decimal(repr(float(_number(v))))
        return text_decimal(digits if scale is not None else digits.normalize(), scale)

    return convert


def _date(v: Any) -> str:
    if v.__class__ is not int:
        raise TypeError(f"expected days since 1970-01-01, got {v!r}")
    return text_date(dt.date.fromordinal(_EPOCH_ORDINAL + v))


def _datetime_of(unit_us: int, fsp: int) -> Converter:
    """io.debezium.time.Timestamp (ms) / MicroTimestamp (µs) since the epoch, naive UTC."""

    def convert(v: Any) -> str:
        if v.__class__ is not int:
            raise TypeError(f"expected an epoch integer, got {v!r}")
        return text_datetime(_EPOCH + _ONE_US * (v * unit_us), fsp)

    return convert


def _time_of(fsp: int) -> Converter:
    def convert(v: Any) -> str:
        if v.__class__ is not int:
            raise TypeError(f"expected microseconds, got {v!r}")
        return text_time(v, fsp)

    return convert


def _zoned(v: str) -> str:
    """io.debezium.time.ZonedTimestamp `YYYY-MM-DDTHH:MM:SS[.f]Z` (UTC) -> `YYYY-MM-DDTHH:MM:SS[.f]`, checked."""
    if (
        v.__class__ is not str
        or v[-1:] != "Z"
        or v[10:11] != "T"
        or not (len(v) == 20 or (v[19] == "." and 21 <= len(v) <= 27))
        or _fromisoformat(v[:-1]).tzinfo is not None
    ):
        raise ValueError(f"expected YYYY-MM-DDTHH:MM:SS[.f]Z, got {v!r}")
    return v[:-1]


def _timestamp_of(fsp: int | None) -> Converter:
    """TiCDC writes exactly fsp fractional digits, so the text needs no fsp to be canonical."""
    if fsp is None:

        def convert(v: Any) -> str:
            text = _zoned(v)
            return text[:10] + " " + text[11:]
    else:

        def convert(v: Any) -> str:
            return text_timestamp_from_zone(_zoned(v), None, fsp)

    return convert


def _year(v: Any) -> str:
    if v.__class__ is not int:
        raise TypeError(f"expected a year, got {v!r}")
    return text_year(v)


def _bit1(v: Any) -> str:
    if v is True:
        return "1"
    if v is False:
        return "0"
    raise TypeError(f"expected a boolean, got {v!r}")


def _bits(v: Any) -> str:
    """io.debezium.data.Bits: base64 of the value's little-endian bytes."""
    return text_int(int.from_bytes(b64decode(v, validate=True), "little"))


def _binary(v: Any) -> str:
    return text_bytes(b64decode(v, validate=True))


def _text(v: str) -> str:
    if v.__class__ is not str:
        raise TypeError(f"expected a string, got {v!r}")
    return v


def _untyped(v: Any) -> str:
    """A value without a schema: its JSON type is all there is."""
    kind = v.__class__
    if kind is str:
        text: str = v
        return text
    if kind is int:
        return text_int(v)
    if kind is float:
        return text_double(v)
    if kind is bool:
        return "1" if v else "0"
    raise TypeError(f"expected a scalar, got {v!r}")


# canonical text and type of a JSON value when no schema is sent
_UNTYPED_TEXT: dict[type, Converter] = {int: text_int, float: text_double, bool: _bit1}
_UNTYPED_TYPES = {str: "longtext", int: "bigint", float: "double", bool: "bit"}

_TIME_NAMES: dict[object, int] = {"io.debezium.time.Timestamp": 1000, "io.debezium.time.MicroTimestamp": 1}


# ---- per-schema compilation ----------------------------------------------------------------------


class _RowSchema:
    """Converters, canonical types and flags of one table version, built once from its schema."""

    __slots__ = ("column_types", "converters", "fast", "flags")

    def __init__(self, fields: list[Any], where: str):
        self.converters: dict[str, Converter] = {}
        # Converter or None (a text column): the fast path calls a None on purpose, its TypeError
        # sending a value that is not text to the precise path, so no type test is spent per value
        self.fast: dict[str, Any] = {}
        self.column_types: dict[str, str] = {}
        flags: set[str] = set()
        if fields.__class__ is not list:
            raise TypeError("fields is not a list")
        for i, field in enumerate(fields):
            try:
                name = field["field"]
                if name.__class__ is not str:
                    raise TypeError("field name is not a string")
                convert, column_type, field_flags = _compile_field(field)
            except _BAD as exc:
                raise DecodeError(PROTOCOL, f"bad column schema: {exc}", f"{where}.fields[{i}]") from None
            self.converters[name] = convert
            self.fast[name] = None if convert is _text else convert
            self.column_types[name] = column_type
            flags.update(field_flags)
        self.flags = sorted(flags)


def _compile_field(field: dict[str, Any]) -> Compiled:
    """(converter, canonical type, flags) of one column from its Debezium field schema."""
    tidb_type = field.get("tidb_type")
    if tidb_type is not None:
        compiled = _compile_tidb_type(tidb_type, field)
        if compiled is not None:
            return compiled
    return _compile_debezium_type(field)


def _compile_tidb_type(tidb_type: str, field: dict[str, Any]) -> Compiled | None:
    """With the TiDB extension: the MySQL type is known, but not its length, scale or fsp."""
    base, args, unsigned = parse_type(tidb_type)
    canonical = canonical_type(tidb_type)
    if base in INTEGER_TYPES:
        return (_unsigned_of(int_bits(base)) if unsigned else _int), canonical, ()
    if base == "decimal":
        scale = _decimal_scale(args)
        return (
            _decimal_of(scale),
            canonical,
            ("lossy_decimal",) if scale is not None else ("lossy_decimal", "types_partial"),
        )
    if base == "float":
        return _float, canonical, ()
    if base == "double":
        return _double, canonical, ()
    if base == "date":
        return _date, canonical, ()
    if base == "datetime":
        unit = _TIME_NAMES.get(field.get("name"))
        if unit is None:
            raise ValueError(f"datetime column with schema name {field.get('name')!r}")
        return _fsp_converter(args, lambda fsp: _datetime_of(unit, fsp), 3 if unit == 1000 else 6, canonical)
    if base == "time":
        return _fsp_converter(args, _time_of, 6, canonical)
    if base == "timestamp":
        return _timestamp_of(_fsp(args)), canonical, ()
    if base == "year":
        return _year, canonical, ()
    if base == "bit":
        return (_bit1 if field.get("type") == "boolean" else _bits), canonical, ()
    if base in CHAR_TYPES or base in ("enum", "set", "json"):
        return _text, canonical, ()
    if base in BINARY_TYPES:
        return _binary, canonical, ()
    return None


def _fsp_converter(args: str | None, make: Callable[[int], Converter], implied: int, canonical: str) -> Compiled:
    fsp = _fsp(args)
    if fsp is not None:
        return make(fsp), canonical, ()
    return make(implied), canonical, ("fsp_unknown",)


def _fsp(args: str | None) -> int | None:
    return int(args) if args is not None and args.strip().isdigit() else None


def _decimal_scale(args: str | None) -> int | None:
    if args is None:
        return None
    parts = args.split(",")
    return int(parts[1]) if len(parts) > 1 else 0


def _compile_debezium_type(field: dict[str, Any]) -> Compiled:
    """Without tidb_type: the Debezium type and semantic name are all there is."""
    kind, name = field["type"], field.get("name")
    if name is not None:
        if name == "io.debezium.time.Date":
            return _date, "date", ()
        if name in _TIME_NAMES:
            unit = _TIME_NAMES[name]
            return _datetime_of(unit, 3 if unit == 1000 else 6), "datetime", ("fsp_unknown",)
        if name == "io.debezium.time.MicroTime":
            return _time_of(6), "time", ("fsp_unknown",)
        if name == "io.debezium.time.ZonedTimestamp":
            return _timestamp_of(None), "timestamp", ()
        if name == "io.debezium.time.Year":
            return _year, "year", ()
        if name == "io.debezium.data.Bits":
            return _bits, "bit", ()
        if name == "io.debezium.data.Enum":
            return _text, "enum", ()
        if name == "io.debezium.data.EnumSet":
            return _text, "set", ()
        if name == "io.debezium.data.Json":
            return _text, "json", ()
    if kind == "boolean":
        return _bit1, "bit", ()
    if kind == "int16":
        return _int, "smallint", ("types_partial",)
    if kind == "int32":
        return _int, "int", ("types_partial",)
    if kind == "int64":
        return _int, "bigint", ("types_partial",)
    if kind == "float":
        return _float, "float", ()
    if kind == "double":
        return _double, "double", ("types_partial",)
    if kind == "string":
        return _text, "longtext", ("types_partial",)
    if kind == "bytes":
        return _binary, "longblob", ("types_partial",)
    raise ValueError(f"unsupported Debezium type {kind!r} (name {name!r})")


# ---- document framing ----------------------------------------------------------------------------


def _split(data: bytes, where: str) -> tuple[dict[str, Any], bytes | None, dict[str, Any] | None]:
    """(payload dict, schema bytes or None, schema object or None) of a key or value.

    Fast path for TiCDC's compact layout: the payload is parsed alone and the schema kept as bytes.
    The payload slice parses only if it ends exactly where the payload object ends, so a column
    named `schema` cannot mislead it; anything else takes the full parse.
    """
    if data.__class__ is not bytes:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise DecodeError(PROTOCOL, f"{where} is {type(data).__name__}, not bytes", where)
        data = bytes(data)
    if data[:11] == b'{"payload":' and data[-1:] == b"}":
        pos = data.rfind(b',"schema":')
        if pos > 11:
            try:
                payload = _loads(data[11:pos])
            except _JSONError:
                payload = None
            if payload.__class__ is dict:
                return payload, data[pos + 10 : -1], None
    try:
        doc = _loads(data)
    except _JSONError as exc:
        raise DecodeError(PROTOCOL, f"{where} is not JSON: {exc}", where) from None
    if doc.__class__ is not dict:
        raise DecodeError(PROTOCOL, f"{where} is not a JSON object", where)
    payload = doc.get("payload")
    if payload.__class__ is not dict:
        raise DecodeError(PROTOCOL, f"{where} has no payload object", f"{where}.payload")
    schema = doc.get("schema")
    if schema is not None and schema.__class__ is not dict:
        raise DecodeError(PROTOCOL, f"{where} schema is not an object", f"{where}.schema")
    return payload, None, schema


def _source_fields(payload: dict[str, Any]) -> tuple[int, str, str | None]:
    source: Any = payload.get("source")  # JSON: a dict, else the DecodeError below
    if source.__class__ is not dict:
        raise DecodeError(PROTOCOL, "payload.source is missing or not an object", "payload.source")
    commit_ts = source.get("commit_ts")
    if commit_ts.__class__ is not int or commit_ts < 0:
        raise DecodeError(
            PROTOCOL, f"commit_ts must be a non-negative integer, got {commit_ts!r}", "payload.source.commit_ts"
        )
    db, table = source.get("db"), source.get("table")
    if db.__class__ is not str:
        raise DecodeError(PROTOCOL, f"source.db must be a string, got {db!r}", "payload.source.db")
    if table is not None and table.__class__ is not str:
        raise DecodeError(PROTOCOL, f"source.table must be a string, got {table!r}", "payload.source.table")
    return commit_ts, db, table


_OPS: dict[object, str] = {"c": "insert", "u": "update", "d": "delete"}


class DebeziumDecoder:
    protocol = PROTOCOL
    OPTIONS: dict[str, tuple[type, Any]] = {
        "enable-tidb-extension": (bool, False),
        "debezium-disable-schema": (bool, False),
        "debezium-output-old-value": (bool, True),
    }

    def __init__(self, options: dict[str, Any]):
        self.options = dict(options)
        self._schemas: dict[bytes, _RowSchema] = {}  # by the schema's bytes
        self._key_schemas: set[bytes] = set()

    def decode(self, key: bytes | None, value: bytes | None, headers: Headers = None) -> list[ChangeEvent]:
        if not value:
            raise DecodeError(PROTOCOL, "empty value: TiCDC sends no Debezium tombstones", "value")
        payload, schema_bytes, schema = _split(value, "value")
        op = payload.get("op")
        if op is None:
            if "op" in payload:
                raise DecodeError(PROTOCOL, "op is null", "payload.op")
            return [self._ddl(payload)]
        kind = _OPS.get(op) if op.__class__ is str else None
        if kind is not None:
            return [self._row(kind, key, payload, schema_bytes, schema)]
        if op == "m":
            return [ChangeEvent(kind="watermark", commit_ts=_source_fields(payload)[0])]
        raise DecodeError(PROTOCOL, f"unknown op {op!r}; expected c, u, d or m", "payload.op")

    # ---- rows ----

    def _row(
        self,
        op: str,
        key: bytes | None,
        payload: dict[str, Any],
        schema_bytes: bytes | None,
        schema: dict[str, Any] | None,
    ) -> ChangeEvent:
        commit_ts, db, table = _source_fields(payload)
        compiled = self._row_schema(schema_bytes, schema)
        flags = list(compiled.flags) if compiled is not None else ["types_partial"]
        if op == "insert":
            before, after = None, self._image(payload, "after", compiled)
        elif op == "delete":
            before, after = self._image(payload, "before", compiled), None
        else:
            after = self._image(payload, "after", compiled)
            if payload.get("before") is not None:
                before = self._image(payload, "before", compiled)
            else:
                before = None
                flags.append("old_value_missing")
                flags.sort()
        if compiled is not None:
            column_types = dict(compiled.column_types)
        else:
            image_name = "before" if op == "delete" else "after"
            column_types = {k: _UNTYPED_TYPES[v.__class__] for k, v in payload[image_name].items() if v is not None}
            if op == "update" and before is not None:
                for k, v in payload["before"].items():
                    if v is not None and k not in column_types:
                        column_types[k] = _UNTYPED_TYPES[v.__class__]
        return ChangeEvent(
            kind="row",
            op=op,
            database=db,
            table=table or None,
            commit_ts=commit_ts,
            key_columns=self._key_columns(key),
            before=before,
            after=after,
            column_types=column_types,
            flags=flags,
        )

    def _image(self, payload: dict[str, Any], name: str, compiled: _RowSchema | None) -> dict[str, str | None]:
        row: Any = payload.get(name)
        if row.__class__ is not dict:
            raise DecodeError(PROTOCOL, f"{name} must be an object, got {row!r}", f"payload.{name}")
        try:
            if compiled is None:
                return {
                    k: v if v is None or (kind := v.__class__) is str else _UNTYPED_TEXT[kind](v)
                    for k, v in row.items()
                }
            converters = compiled.fast
            # a text column's converter is None: its string passes through (anything else fails the call)
            return {
                k: v if v is None or ((c := converters[k]) is None and v.__class__ is str) else c(v)
                for k, v in row.items()
            }
        except _BAD:
            pass
        for column, v in row.items():
            try:
                if compiled is None:
                    _untyped(v) if v is not None else None
                elif column not in compiled.converters:
                    raise DecodeError(PROTOCOL, f"column {column!r} is not in the schema", f"payload.{name}.{column}")
                elif v is not None:
                    compiled.converters[column](v)
            except _BAD as exc:
                raise DecodeError(PROTOCOL, f"bad value {v!r}: {exc}", f"payload.{name}.{column}") from None
        raise DecodeError(PROTOCOL, "row cannot be decoded", f"payload.{name}")

    def _row_schema(self, schema_bytes: bytes | None, schema: dict[str, Any] | None) -> _RowSchema | None:
        if schema_bytes is not None:
            compiled = self._schemas.get(schema_bytes)
            if compiled is not None:
                return compiled
            try:
                schema = _loads(schema_bytes)
            except _JSONError as exc:
                raise DecodeError(PROTOCOL, f"schema is not JSON: {exc}", "schema") from None
            if schema is not None and schema.__class__ is not dict:
                raise DecodeError(PROTOCOL, "schema is not an object", "schema")
            cache_key = schema_bytes
        elif schema is not None:
            cache_key = orjson.dumps(schema)
            compiled = self._schemas.get(cache_key)
            if compiled is not None:
                return compiled
        if schema is None:
            return None
        compiled = _RowSchema(_image_fields(schema), "schema.fields[after]")
        if len(self._schemas) >= _SCHEMA_CACHE_LIMIT:
            self._schemas.clear()
        self._schemas[cache_key] = compiled
        return compiled

    def _key_columns(self, key: bytes | None) -> list[str]:
        if key is None:
            return []
        payload, schema_bytes, _ = _split(key, "key")
        if schema_bytes is not None and schema_bytes not in self._key_schemas:
            try:
                _loads(schema_bytes)
            except _JSONError as exc:
                raise DecodeError(PROTOCOL, f"key schema is not JSON: {exc}", "key.schema") from None
            if len(self._key_schemas) >= _SCHEMA_CACHE_LIMIT:
                self._key_schemas.clear()
            self._key_schemas.add(schema_bytes)
        return list(payload)

    # ---- DDL ----

    def _ddl(self, payload: dict[str, Any]) -> ChangeEvent:
        commit_ts, db, table = _source_fields(payload)
        sql: Any = payload.get("ddl")
        if sql.__class__ is not str:
            raise DecodeError(
                PROTOCOL, f"a value without op must be a DDL with a ddl string, got {sql!r}", "payload.ddl"
            )
        database = payload.get("databaseName")
        if database is None or database == "":
            database = db
        elif database.__class__ is not str:
            raise DecodeError(PROTOCOL, f"databaseName must be a string, got {database!r}", "payload.databaseName")
        changes = payload.get("tableChanges")
        if changes is None:
            changes = []
        if changes.__class__ is not list:
            raise DecodeError(PROTOCOL, "tableChanges must be an array", "payload.tableChanges")
        schema = None
        for i, change in enumerate(changes):
            where = f"payload.tableChanges[{i}]"
            if change.__class__ is not dict:
                raise DecodeError(PROTOCOL, "a table change must be an object", where)
            if schema is None and change.get("table") is not None:
                schema = _table_schema(database, table or None, change["table"], where + ".table")
        return ChangeEvent(
            kind="ddl",
            database=database,
            table=table or None,
            commit_ts=commit_ts,
            ddl_type=ddl.classify(sql),
            ddl_sql=sql,
            table_schema=schema,
        )


def _image_fields(schema: dict[str, Any]) -> list[Any]:
    """The column schemas of the envelope's `after` (or `before`) struct."""
    fields: Any = schema.get("fields")
    if fields.__class__ is not list:
        raise DecodeError(PROTOCOL, "schema has no fields array", "schema.fields")
    for wanted in ("after", "before"):
        for entry in fields:
            if entry.__class__ is dict and entry.get("field") == wanted:
                columns: list[Any] = entry.get("fields")
                if columns.__class__ is not list:
                    raise DecodeError(PROTOCOL, f"{wanted} schema has no fields array", f"schema.fields[{wanted}]")
                return columns
    raise DecodeError(PROTOCOL, "schema has no before/after struct", "schema.fields")


def _table_schema(database: str, table: str | None, doc: Any, where: str) -> dict[str, Any]:
    """tableChanges[].table -> the canonical table schema."""
    if doc.__class__ is not dict:
        raise DecodeError(PROTOCOL, "table must be an object or null", where)
    columns_doc = doc.get("columns")
    if columns_doc.__class__ is not list:
        raise DecodeError(PROTOCOL, "table.columns must be an array", where + ".columns")
    columns = []
    for i, column in enumerate(columns_doc):
        try:
            columns.append(_schema_column(column))
        except _BAD as exc:
            raise DecodeError(PROTOCOL, f"bad column: {exc}", f"{where}.columns[{i}]") from None
    keys = doc.get("primaryKeyColumnNames") or []
    if keys.__class__ is not list or any(k.__class__ is not str for k in keys):
        raise DecodeError(
            PROTOCOL, "primaryKeyColumnNames must be an array of strings", where + ".primaryKeyColumnNames"
        )
    return table_schema(database, table, columns, list(keys))


def _schema_column(column: dict[str, Any]) -> dict[str, Any]:
    name = column["name"]
    if name.__class__ is not str:
        raise TypeError("name is not a string")
    expression = column.get("typeExpression") or column["typeName"]
    base, args, _ = parse_type(expression)
    definition = expression.lower()
    if base == "decimal" and args is None and column.get("length") is not None:
        scale = column.get("scale")
        definition = f"decimal({int(column['length'])},{int(scale) if scale is not None else 0})"
    entry: dict[str, Any] = {
        "name": name,
        "type": canonical_type(definition),
        "nullable": column.get("optional", True) is not False,
    }
    if base in ("enum", "set"):
        entry["elements"] = [_unquote(e) for e in column.get("enumValues") or []]
    return entry


def _unquote(element: str) -> str:
    """enumValues hold `'label'` (TiCDC quotes without escaping)."""
    if len(element) >= 2 and element[0] == element[-1] == "'":
        return element[1:-1]
    return element
