"""TiCDC's Debezium JSON: key and value `{"payload": …, "schema": …}` -> canonical change events.

The messages describe themselves (`schema` present or not, `tidb_type` present or not, `before`
present or not), so the options only record how the changefeed was made. What the format loses,
and which flag marks each loss, is listed once in `ticdc_devkit.simulator.debezium.expected`.

Speed: TiCDC writes `{"payload":{…},"schema":{…}}` with the schema last and the same schema bytes
for every row of a table version. The decoder parses only the payload and keys its compiled
converters by the schema bytes, so the (large) schema is parsed once per table version. The column
path (`decode_columns`) reads a batch of row messages of that form into Arrow columns; `decode`
stays the reference for every other message.
"""

from __future__ import annotations

import binascii
import datetime as dt
import itertools
from base64 import b64decode
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Annotated, Any, Literal

import msgspec
import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs import ddl
from spark_jobs.canonical.blocks import RowBlock, struct_of
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
from spark_jobs.codecs import ColumnDecode, Headers, columns
from spark_jobs.errors import DecodeError

PROTOCOL = "debezium"

_loads = orjson.loads
_JSONError = orjson.JSONDecodeError
# what a converter or a malformed document can raise; each becomes a DecodeError naming the field (ArithmeticError:
# OverflowError, and decimal's InvalidOperation for a double beyond DECIMAL's 65 digits at its scale)
_BAD = (KeyError, TypeError, ValueError, IndexError, AttributeError, ArithmeticError, binascii.Error)

_EPOCH = dt.datetime(1970, 1, 1)
_fromisoformat = dt.datetime.fromisoformat
_EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()
_ONE_US = dt.timedelta(microseconds=1)
_SCHEMA_CACHE_LIMIT = 4096

# a column's converter: its JSON value (never None) -> canonical text; TypeError/ValueError for a bad one
Converter = Callable[[Any], str]
# how the column path reads a column: (kind, its argument: bits, scale or fsp), see `_READS` and `_canonical`
Plan = tuple[str, int | None]
# (converter, canonical type, flags, plan) of one column
Compiled = tuple[Converter, str, tuple[str, ...], Plan]


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
_DATETIME_KINDS = {1000: "datetime_ms", 1: "datetime_us"}


# ---- per-schema compilation ----------------------------------------------------------------------


class _RowSchema:
    """Converters, canonical types and flags of one table version, built once from its schema."""

    __slots__ = ("column_types", "converters", "fast", "flags", "plans")

    def __init__(self, fields: list[Any], where: str):
        self.converters: dict[str, Converter] = {}
        self.plans: dict[str, Plan] = {}
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
                convert, column_type, field_flags, plan = _compile_field(field)
            except _BAD as exc:
                raise DecodeError(PROTOCOL, f"bad column schema: {exc}", f"{where}.fields[{i}]") from None
            self.converters[name] = convert
            self.plans[name] = plan
            self.fast[name] = None if convert is _text else convert
            self.column_types[name] = column_type
            flags.update(field_flags)
        self.flags = sorted(flags)


def _compile_field(field: dict[str, Any]) -> Compiled:
    """(converter, canonical type, flags, plan) of one column from its Debezium field schema."""
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
        if unsigned:
            bits = int_bits(base)
            return _unsigned_of(bits), canonical, (), ("unsigned", bits)
        return _int, canonical, (), ("int", None)
    if base == "decimal":
        scale = _decimal_scale(args)
        return (
            _decimal_of(scale),
            canonical,
            ("lossy_decimal",) if scale is not None else ("lossy_decimal", "types_partial"),
            ("decimal", scale),
        )
    if base == "float":
        return _float, canonical, (), ("float", None)
    if base == "double":
        return _double, canonical, (), ("double", None)
    if base == "date":
        return _date, canonical, (), ("date", None)
    if base == "datetime":
        unit = _TIME_NAMES.get(field.get("name"))
        if unit is None:
            raise ValueError(f"datetime column with schema name {field.get('name')!r}")
        kind = _DATETIME_KINDS[unit]
        return _fsp_converter(args, lambda fsp: _datetime_of(unit, fsp), 3 if unit == 1000 else 6, canonical, kind)
    if base == "time":
        return _fsp_converter(args, _time_of, 6, canonical, "time")
    if base == "timestamp":
        fsp = _fsp(args)
        return _timestamp_of(fsp), canonical, (), ("timestamp", fsp)
    if base == "year":
        return _year, canonical, (), ("year", None)
    if base == "bit":
        if field.get("type") == "boolean":
            return _bit1, canonical, (), ("bit1", None)
        return _bits, canonical, (), ("bits", None)
    if base in CHAR_TYPES or base in ("enum", "set", "json"):
        return _text, canonical, (), ("text", None)
    if base in BINARY_TYPES:
        return _binary, canonical, (), ("binary", None)
    return None


def _fsp_converter(
    args: str | None, make: Callable[[int], Converter], implied: int, canonical: str, kind: str
) -> Compiled:
    fsp = _fsp(args)
    if fsp is not None:
        return make(fsp), canonical, (), (kind, fsp)
    return make(implied), canonical, ("fsp_unknown",), (kind, implied)


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
            return _date, "date", (), ("date", None)
        if name in _TIME_NAMES:
            unit = _TIME_NAMES[name]
            fsp = 3 if unit == 1000 else 6
            return _datetime_of(unit, fsp), "datetime", ("fsp_unknown",), (_DATETIME_KINDS[unit], fsp)
        if name == "io.debezium.time.MicroTime":
            return _time_of(6), "time", ("fsp_unknown",), ("time", 6)
        if name == "io.debezium.time.ZonedTimestamp":
            return _timestamp_of(None), "timestamp", (), ("timestamp", None)
        if name == "io.debezium.time.Year":
            return _year, "year", (), ("year", None)
        if name == "io.debezium.data.Bits":
            return _bits, "bit", (), ("bits", None)
        if name == "io.debezium.data.Enum":
            return _text, "enum", (), ("text", None)
        if name == "io.debezium.data.EnumSet":
            return _text, "set", (), ("text", None)
        if name == "io.debezium.data.Json":
            return _text, "json", (), ("text", None)
    if kind == "boolean":
        return _bit1, "bit", (), ("bit1", None)
    if kind == "int16":
        return _int, "smallint", ("types_partial",), ("int", None)
    if kind == "int32":
        return _int, "int", ("types_partial",), ("int", None)
    if kind == "int64":
        return _int, "bigint", ("types_partial",), ("int", None)
    if kind == "float":
        return _float, "float", (), ("float", None)
    if kind == "double":
        return _double, "double", ("types_partial",), ("double", None)
    if kind == "string":
        return _text, "longtext", ("types_partial",), ("text", None)
    if kind == "bytes":
        return _binary, "longblob", ("types_partial",), ("binary", None)
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
        # the column path's shapes: by a value's schema bytes, and by the tail `,"schema":…}` of a value of the
        # usual form, with the tail last seen
        self._shapes: dict[bytes, _Shape | None] = {}
        self._tails: dict[bytes, _Shape] = {}
        self._tail: tuple[bytes, _Shape] | None = None
        self._key_schema: msgspec.Raw = _NULL  # the key schema last found valid

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
        flags = list(compiled.flags) if compiled is not None else ["types_partial", "values_raw"]
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

    # ---- the column path ----

    def decode_columns(self, keys: Sequence[bytes | None], values: Sequence[bytes | None]) -> ColumnDecode:
        """Row messages of the usual form (with their schema) as RowBlocks; every other message (DDL, watermark,
        no schema, anything malformed or a value its converter rejects) left to `decode`.

        Messages are parsed in chunks of `columns.CHUNK`, small enough that a chunk's Python objects stay in the
        CPU's caches: the payload by a strict envelope Struct (the schema recognised by its bytes), the images of
        each shape in one call, their values into Arrow arrays column by column; each shape's columns are then
        checked and converted for the whole batch.
        """
        gathered: dict[_GroupKey, _Gathered] = {}
        row_wise: list[int] = []
        for start in range(0, len(values), columns.CHUNK):
            self._read_chunk(keys, values, start, min(start + columns.CHUNK, len(values)), gathered, row_wise)
        blocks = [block for rows in gathered.values() if (block := rows.block(row_wise)) is not None]
        row_wise.sort()
        return ColumnDecode(blocks, row_wise)

    def _read_chunk(
        self,
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        start: int,
        stop: int,
        gathered: dict[_GroupKey, _Gathered],
        row_wise: list[int],
    ) -> None:
        members: dict[_GroupKey, list[_Member]] = {}
        envelope, key_names, decode, null = self._envelope, self._key_names, _PAYLOAD.decode, _NULL
        for i in range(start, stop):
            value, last = values[i], self._tail
            if type(value) is bytes and last is not None and value.endswith(last[0]) and value.startswith(_PREFIX):
                shape = last[1]  # the usual message: `{"payload":` + its payload + the tail of the last shape
                try:
                    payload = decode(value[11 : len(value) - len(last[0])])
                except columns.UNREADABLE:
                    row_wise.append(i)
                    continue
            else:
                shape, payload = envelope(value)
                if payload is None:
                    row_wise.append(i)
                    continue
            op = payload.op
            if op == "u":
                image, old = payload.after, payload.before
            elif op == "c":  # the image `decode` ignores must be null here: a Raw's bytes are not checked
                image, old = (payload.after if payload.before == null else null), null
            else:
                image, old = (payload.before if payload.after == null else null), null
            names = key_names(keys[i])
            if image == null or names is None:
                row_wise.append(i)
                continue
            source = payload.source
            group = (shape, source.db, source.table or None, names)
            found = members.get(group)
            if found is None:
                found = members[group] = []
            found.append((i, source.commit_ts, op, image, old))
        for group, found in members.items():
            rows = gathered.get(group)
            if rows is None:
                rows = gathered[group] = _Gathered(*group)
            rows.add(found, row_wise)

    def _envelope(self, value: bytes | None) -> tuple[Any, Any]:
        """(shape, payload Struct) of a row message of the usual form, else (None, None).

        A value that ends with the tail `,"schema":…}` of a known shape is `{"payload":` + its payload + that
        tail: only the payload is parsed (the schema bytes checked once, when their shape was made); `_read_chunk`
        tries the tail last seen, this the others. Any other value is parsed whole, its schema skipped and
        recognised by its bytes."""
        if type(value) is not bytes:
            return None, None
        at = value.rfind(_SCHEMA_AT)
        known = self._tails.get(value[at:]) if at > 11 and value.startswith(_PREFIX) else None
        if known is None:
            return self._whole(value)
        self._tail = value[at:], known
        try:
            return known, _PAYLOAD.decode(value[11:at])
        except columns.UNREADABLE:
            return None, None

    def _whole(self, value: bytes) -> tuple[Any, Any]:
        """`_envelope` of a value parsed whole; a value of TiCDC's layout makes its schema's tail known."""
        try:
            doc = _ENVELOPE.decode(value)
        except columns.UNREADABLE:
            return None, None
        schema = bytes(doc.schema)
        shape = self._shapes.get(schema, _UNKNOWN)
        if shape is _UNKNOWN:
            if len(self._shapes) >= _SCHEMA_CACHE_LIMIT:
                self._shapes.clear()
                self._tails.clear()
            shape = self._shapes[schema] = self._new_shape(schema)
        if shape is None:
            return None, None
        tail = _SCHEMA_AT + schema + b"}"
        if value.endswith(tail) and value.startswith(_PREFIX):
            self._tails[tail] = shape
            self._tail = tail, shape
        return shape, doc.payload

    def _new_shape(self, schema: bytes) -> _Shape | None:
        """The shape of a value schema; None where the column path does not read its rows (no schema, one
        `decode` rejects, no columns, a column name msgspec takes for no field)."""
        try:
            compiled = self._row_schema(schema, None)
            return _Shape(compiled) if compiled is not None and compiled.converters else None
        except (DecodeError, *_BAD):
            return None

    def _key_names(self, key: bytes | None) -> tuple[str, ...] | None:
        """The key's column names in its order (`decode`'s key columns); None where it is not of the usual form."""
        if key is None:
            return ()
        if key.__class__ is not bytes:
            return None
        try:
            doc = _KEY.decode(key)
        except columns.UNREADABLE:
            return None
        schema = doc.schema
        if schema != _NULL and schema != self._key_schema:
            raw = bytes(schema)
            if raw[:1] != b"{":  # `decode` takes another only where the key is laid out as TiCDC writes it
                return None
            if raw not in self._key_schemas:
                try:
                    _loads(raw)
                except _JSONError:
                    return None
                if len(self._key_schemas) >= _SCHEMA_CACHE_LIMIT:
                    self._key_schemas.clear()
                self._key_schemas.add(raw)
            self._key_schema = schema
        return tuple(doc.payload)

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


# ---- the column path -----------------------------------------------------------------------------------
# `decode_columns` reads a row message of the usual form: `{"payload":{…},"schema":{…}}` with a payload of the
# fields TiCDC writes, each of the type it writes (an envelope Struct that forbids any other, so that every
# byte msgspec accepts is one orjson accepts too), images of exactly the schema's columns. The schema is kept as
# raw bytes: a table version's shape is made once, from `_RowSchema`, and found again by its bytes. Each shape
# decodes its images with a Struct of a type per column (int, float, str or bool, as `decode`'s converter takes
# them), one call per chunk; each column's values become one Arrow array per chunk, and Arrow compute makes them
# canonical for the whole batch. Per-value Python is left to values no kernel makes canonical: FLOAT's 32-bit
# shortest digits and BIT(n) (once per distinct value), base64 that is not canonical, and what `decode` rejects.

_MAX_TS = (1 << 63) - 1  # silver keeps a commit ts as a signed 64-bit integer
_NULL = msgspec.Raw(b"null")
_PREFIX = b'{"payload":'
_SCHEMA_AT = b',"schema":'
_UNKNOWN: Any = object()
_Int64 = Annotated[int, msgspec.Meta(ge=-(1 << 63), le=_MAX_TS)]
# a column's integer: msgspec bounds it at int64's least, `_integers` at uint64's greatest
_Integer = Annotated[int, msgspec.Meta(ge=-(1 << 63))]


class _Source(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """`payload.source` as TiCDC writes it; `decode` reads commit_ts, db and table."""

    commit_ts: Annotated[int, msgspec.Meta(ge=0, le=_MAX_TS)]
    db: str
    table: str | None = None
    version: str | None = None
    connector: str | None = None
    name: str | None = None
    ts_ms: _Int64 | None = None
    snapshot: str | bool | None = None
    server_id: _Int64 | None = None
    gtid: str | None = None
    file: str | None = None
    pos: _Int64 | None = None
    row: _Int64 | None = None
    thread: _Int64 | None = None
    query: str | None = None
    cluster_id: str | None = None


class _Payload(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """A row change's payload; the images stay raw JSON until their shape decodes them."""

    source: _Source
    op: Literal["c", "u", "d"]
    ts_ms: _Int64 | None = None
    transaction: None = None
    before: msgspec.Raw = _NULL
    after: msgspec.Raw = _NULL


class _Envelope(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    payload: _Payload
    schema: msgspec.Raw = _NULL


class _Key(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """A message key: its payload's names are the key columns; its schema is checked as `decode` checks it."""

    payload: dict[str, str | _Int64 | float | bool | None]
    schema: msgspec.Raw = _NULL


_PAYLOAD = msgspec.json.Decoder(_Payload)
_ENVELOPE = msgspec.json.Decoder(_Envelope)
_KEY = msgspec.json.Decoder(_Key)

# (shape, database, table, key columns) of a block, and (message index, commit ts, op, image, old image)
_GroupKey = tuple["_Shape", str, str | None, tuple[str, ...]]
_Member = tuple[int, int, str, msgspec.Raw, msgspec.Raw]
_INSERT, _UPDATE, _DELETE = 0, 1, 2
_OP_CODES = {"c": _INSERT, "u": _UPDATE, "d": _DELETE}
_OP_NAMES = pa.array(["insert", "update", "delete"], pa.string())
# per plan kind: the JSON value its converter takes (int, float, str or bool), as the image Struct reads it
_READS = {
    "int": "int",
    "unsigned": "int",
    "date": "int",
    "datetime_ms": "int",
    "datetime_us": "int",
    "time": "int",
    "year": "int",
    "float": "float",
    "double": "float",
    "decimal": "float",
    "timestamp": "text",
    "bits": "text",
    "binary": "text",
    "text": "text",
    "bit1": "bool",
}
_VALUE_TYPES: dict[str, Any] = {"int": _Integer | None, "float": float | None, "text": str | None, "bool": bool | None}


_BUILDERS: dict[str, Callable[[list[Any]], tuple[Any, list[bool] | None]]] = {
    "int": columns.json_integers,
    "float": lambda values: (pa.array(values, pa.float64()), None),
    "text": lambda values: (pa.array(values, pa.string()), None),
    "bool": lambda values: (pa.array(values, pa.bool_()), None),
}


class _Shape:
    """One table version's columns as the column path reads them: the decoder of a list of images of exactly
    these columns (each value of the JSON type its converter takes), and how each becomes canonical text."""

    def __init__(self, compiled: _RowSchema):
        self.names = list(compiled.converters)
        self.column_types = compiled.column_types
        self.flags = tuple(compiled.flags)
        self.plans = [compiled.plans[name] for name in self.names]
        self.converters = [compiled.converters[name] for name in self.names]
        self.builders = [_BUILDERS[_READS[kind]] for kind, _ in self.plans]
        fields = [f"c{i}" for i in range(len(self.names))]
        row = msgspec.defstruct(
            "Row",
            [(f, _VALUE_TYPES[_READS[kind]]) for f, (kind, _) in zip(fields, self.plans)],
            rename=dict(zip(fields, self.names)),
            forbid_unknown_fields=True,
            gc=False,
        )
        self.rows = msgspec.json.Decoder(list[row])  # type: ignore[valid-type]

    def arrays(self, rows: list[Any]) -> tuple[list[Any], list[bool] | None]:
        """Each column's values in these row Structs as an Arrow array, and which rows hold an integer `decode`
        rejects (None when none does)."""
        values = list(itertools.chain.from_iterable(map(msgspec.structs.astuple, rows)))
        width = len(self.names)
        arrays, rejected = [], None
        for j, build in enumerate(self.builders):
            array, beyond = build(values[j::width])
            arrays.append(array)
            if beyond is not None:
                rejected = beyond if rejected is None else [a or b for a, b in zip(rejected, beyond)]
        return arrays, rejected


def _decoded(shape: _Shape, images: list[msgspec.Raw]) -> list[Any]:
    """Each image as a row Struct of the shape, None where it does not fit: all in one call, one by one only when
    one fails."""
    try:
        found: list[Any] = shape.rows.decode(b"[" + b",".join(images) + b"]")
        if len(found) == len(images):
            return found
    except columns.UNREADABLE:
        pass
    found = []
    for image in images:
        try:
            found.append(shape.rows.decode(b"[" + bytes(image) + b"]")[0])
        except columns.UNREADABLE:
            found.append(None)
    return found


class _Gathered:
    """One block's rows in a batch, gathered chunk by chunk: message, commit ts and op per row, and each column's
    values as an Arrow array per chunk, of the image each row has (a delete's `before`, else `after`) and, apart,
    of the updates' `before` with which updates have one."""

    def __init__(self, shape: _Shape, database: str, table: str | None, key_columns: tuple[str, ...]):
        self.shape, self.database, self.table, self.key_columns = shape, database, table, list(key_columns)
        self.messages: list[int] = []
        self.stamps: list[int] = []
        self.ops: list[int] = []
        self.has_old: list[bool] = []
        self.rejected: set[int] = set()  # messages holding an integer `decode` rejects
        width = len(shape.names)
        self.columns: list[list[Any]] = [[] for _ in range(width)]
        self.old_columns: list[list[Any]] = [[] for _ in range(width)]

    def add(self, members: list[_Member], row_wise: list[int]) -> None:
        """A chunk's messages of this block; a message whose images do not fit the shape goes to `row_wise`."""
        shape = self.shape
        images = _decoded(shape, [image for _, _, _, image, _ in members])
        updated = [k for k, (_, _, op, _, old) in enumerate(members) if op == "u" and old != _NULL]
        olds = _decoded(shape, [members[k][4] for k in updated]) if updated else []
        if None in images or None in olds:
            fits = [image is not None for image in images]
            for k, old in zip(updated, olds):
                fits[k] = fits[k] and old is not None
            row_wise.extend(i for (i, *_), fit in zip(members, fits) if not fit)
            olds = [old for k, old in zip(updated, olds) if fits[k]]
            members = list(itertools.compress(members, fits))
            images = list(itertools.compress(images, fits))
            if not members:
                return
        messages = [i for i, _, _, _, _ in members]
        self.messages += messages
        self.stamps += [ts for _, ts, _, _, _ in members]
        ops = [_OP_CODES[op] for _, _, op, _, _ in members]
        self.ops += ops
        has_old = [op == "u" and old != _NULL for _, _, op, _, old in members]
        self.has_old += has_old
        arrays, rejected = shape.arrays(images)
        for j, array in enumerate(arrays):
            self.columns[j].append(array)
        if rejected is not None:
            self.rejected.update(itertools.compress(messages, rejected))
        if olds:
            arrays, rejected = shape.arrays(olds)
            for j, array in enumerate(arrays):
                self.old_columns[j].append(array)
            if rejected is not None:
                self.rejected.update(itertools.compress(itertools.compress(messages, has_old), rejected))

    def block(self, row_wise: list[int]) -> RowBlock | None:
        """The block's RowBlock; a message holding a value its converter rejects goes to `row_wise`."""
        shape = self.shape
        count = len(self.messages)
        if not count:
            return None
        ops = np.array(self.ops, np.int8)
        has_old = np.array(self.has_old, bool)
        message = pa.array(np.array(self.messages, np.int32))
        rejected = np.zeros(count, bool)
        if self.rejected:
            rejected |= pc.is_in(message, pa.array(list(self.rejected), pa.int32())).to_numpy(zero_copy_only=False)
        with_old = pa.array(has_old)
        after_columns, before_columns = [], []
        for j, (plan, convert) in enumerate(zip(shape.plans, shape.converters)):
            texts, bad = _canonical(plan, convert, _concatenated(self.columns[j] + self.old_columns[j]))
            if bad is not None:
                bad_rows = bad.to_numpy(zero_copy_only=False)
                rejected |= bad_rows[:count]
                rejected[has_old] |= bad_rows[count:]
            column = texts.slice(0, count)
            after_columns.append(column)
            # where a row has no before image of its own, its struct is null and holds the after values: an update
            # without one then changes no key (silver splits only what changed it)
            before_columns.append(
                pc.replace_with_mask(column, with_old, texts.slice(count)) if len(texts) > count else column
            )
        commit_ts = pa.array(np.array(self.stamps, np.int64))
        op = _OP_NAMES.take(pa.array(ops))
        before = struct_of(shape.names, before_columns, pa.array((ops == _DELETE) | has_old))
        after = struct_of(shape.names, after_columns, pa.array(ops != _DELETE))
        row_flags = {}
        missing = (ops == _UPDATE) & ~has_old
        if missing.any():
            row_flags["old_value_missing"] = pa.array(missing)
        block = RowBlock(
            self.database,
            self.table,
            list(self.key_columns),
            dict(shape.column_types),
            list(shape.names),
            message,
            commit_ts,
            op,
            before,
            after,
            shape.flags,
            row_flags,
        )
        return columns.without_rejected(block, pa.array(rejected), row_wise)


def _concatenated(pieces: list[Any]) -> Any:
    """A column's chunk arrays as one: integers as text where a chunk held one beyond int64."""
    if len({piece.type for piece in pieces}) > 1:
        pieces = [piece.cast(pa.string()) for piece in pieces]
    return pa.concat_arrays(pieces)


# ---- canonical text by Arrow compute ------------------------------------------------------------------------

_US = dt.timedelta(microseconds=1)
_LEAST_US = (dt.datetime.min - _EPOCH) // _US  # the datetimes Python holds, as µs since the epoch
_GREATEST_US = (dt.datetime.max - _EPOCH) // _US
_LEAST_DAY, _GREATEST_DAY = 1 - _EPOCH_ORDINAL, dt.date.max.toordinal() - _EPOCH_ORDINAL
# TIMESTAMP text `_zoned` takes and returns as it is but for the `T` and `Z` (its date checked apart)
_ZONED = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,6})?Z$"
_LARGEST_SCALE = 30  # MySQL's: a double's shortest digits at this scale fit the 65 digits of text_decimal


def _canonical(plan: Plan, convert: Converter, values: Any) -> tuple[Any, Any]:
    """(canonical text, rows whose value the converter rejects or None) of a column's values as read (int64 or
    text for integers, float64, text or bool): made by kernels where they give the converter's text, the rest
    by the converter itself."""
    kind, arg = plan
    if kind == "text":
        return values, None
    if kind == "bit1":
        return pc.if_else(values, "1", "0"), None
    if kind in ("bits", "binary"):
        keep = columns.BASE64 if kind == "binary" else None
        return columns.converted(values, columns.ColumnRule(convert, keep=keep, distinct=kind == "bits"))
    if kind == "timestamp":
        return _finished(convert, values, *_timestamps(values, arg))
    if kind in ("float", "double", "decimal"):
        texts = columns.double_texts(values)
        of_text = _of_float(convert)
        if kind == "float":
            return columns.converted(texts, columns.ColumnRule(of_text, distinct=True))
        if kind == "double":
            return columns.converted(texts, columns.ColumnRule(of_text, keep=columns.shortest_double, distinct=True))
        return _finished(of_text, texts, *_decimals(texts, arg), distinct=True)
    sent = values.cast(pa.string())
    of_int = _of_int(convert)
    if values.type != pa.int64():  # beyond int64 somewhere: each value by its converter
        return columns.converted(sent, columns.ColumnRule(of_int))
    if kind == "int":
        return sent, None
    if kind == "unsigned":
        assert arg is not None
        if arg == 64:
            return values.cast(pa.uint64(), safe=False).cast(pa.string()), None
        return pc.if_else(pc.less(values, 0), pc.add(values, 1 << arg), values).cast(pa.string()), None
    if kind == "year":
        return _finished(of_int, sent, pc.greater_equal(values, 0), pc.utf8_lpad(sent, 4, "0"))
    if kind == "date":
        real = pc.and_(pc.greater_equal(values, _LEAST_DAY), pc.less_equal(values, _GREATEST_DAY))
        days = pc.if_else(real, values, 0).cast(pa.int32()).cast(pa.date32())
        return _finished(of_int, sent, real, days.cast(pa.string()))
    if kind == "time":
        assert arg is not None
        return _finished(of_int, sent, pc.not_equal(values, -(1 << 63)), _times(values, arg))
    assert arg is not None
    unit = 1000 if kind == "datetime_ms" else 1
    real = pc.and_(pc.greater_equal(values, -(-_LEAST_US // unit)), pc.less_equal(values, _GREATEST_US // unit))
    stamps = pc.multiply(pc.if_else(real, values, 0), unit).cast(pa.timestamp("us")).cast(pa.string())
    return _finished(of_int, sent, real, pc.utf8_slice_codeunits(stamps, 0, 20 + min(arg, 6) if arg else 19))


def _finished(convert: Converter, sent: Any, done: Any, canonical: Any, distinct: bool = False) -> tuple[Any, Any]:
    """`canonical` where `done`, else the text `sent` converted by `convert` (its rejects reported)."""
    texts = pc.if_else(done, canonical, sent)
    return columns.converted(texts, columns.ColumnRule(convert, keep=lambda _: done, distinct=distinct))


def _of_int(convert: Converter) -> columns.Converter:
    return lambda text: convert(int(text))


def _of_float(convert: Converter) -> columns.Converter:
    return lambda text: convert(float(text))  # Arrow's text of a double parses back to it exactly


def _decimals(texts: Any, scale: int | None) -> tuple[Any, Any]:
    """(done, canonical) of DECIMAL from a double's `double_texts`: its shortest digits (repr's), at the column
    scale where that only appends zeros, without a fraction of zero when the scale is unknown (`normalize`)."""
    shortest = columns.shortest_double(texts)
    whole = pc.ends_with(texts, ".0")
    if scale is None or scale == 0:
        cut = pc.if_else(whole, pc.utf8_slice_codeunits(texts, 0, -2), texts)
        return (shortest if scale is None else pc.and_(shortest, whole)), cut
    digits = pc.subtract(pc.subtract(pc.binary_length(texts), pc.find_substring(texts, ".")), 1)
    done = pc.and_(shortest, pc.less_equal(digits, scale if scale <= _LARGEST_SCALE else -1))
    out = texts
    for fraction in pc.unique(digits.filter(pc.fill_null(done, False))).to_pylist():
        if fraction < scale:
            padded = pc.binary_join_element_wise(texts, "0" * (scale - fraction), "")
            out = pc.if_else(pc.equal(digits, fraction), padded, out)
    return done, out


def _timestamps(values: Any, fsp: int | None) -> tuple[Any, Any]:
    """(done, canonical) of io.debezium.time.ZonedTimestamp text: `_zoned`'s form with a date that exists, as
    `YYYY-MM-DD HH:MM:SS` and the fraction as sent (fsp unknown) or at `fsp` digits."""
    done = pc.and_(pc.fill_null(pc.match_substring_regex(values, _ZONED), False), columns.real_dates(values))
    day, clock = pc.utf8_slice_codeunits(values, 0, 10), pc.utf8_slice_codeunits(values, 11, 19)
    if fsp is None:
        return done, pc.binary_join_element_wise(day, pc.utf8_slice_codeunits(values, 11, -1), " ")
    whole = pc.binary_join_element_wise(day, clock, " ")
    if not fsp:
        return done, whole
    fraction = pc.binary_join_element_wise(pc.utf8_slice_codeunits(values, 20, -1), "000000", "")
    return done, pc.binary_join_element_wise(whole, pc.utf8_slice_codeunits(fraction, 0, min(fsp, 6)), ".")


def _times(values: Any, fsp: int) -> Any:
    """TIME text of microseconds (int64's least excepted): `[-]HH:MM:SS[.f]` with `fsp` digits, as text_time."""
    size = pc.abs(pc.if_else(pc.not_equal(values, -(1 << 63)), values, 0))
    seconds = pc.divide(size, 1_000_000)
    minutes = pc.divide(seconds, 60)
    hours = pc.divide(minutes, 60)
    parts = [
        pc.if_else(pc.less(values, 0), "-", ""),
        _two(hours),
        ":",
        _two(pc.subtract(minutes, pc.multiply(hours, 60))),
        ":",
        _two(pc.subtract(seconds, pc.multiply(minutes, 60))),
    ]
    if fsp:
        micros = pc.subtract(size, pc.multiply(seconds, 1_000_000))
        parts += [".", pc.utf8_slice_codeunits(pc.utf8_lpad(micros.cast(pa.string()), 6, "0"), 0, min(fsp, 6))]
    return pc.binary_join_element_wise(*parts, "")


def _two(values: Any) -> Any:
    return pc.utf8_lpad(values.cast(pa.string()), 2, "0")
