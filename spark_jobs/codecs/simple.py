"""TiCDC Simple protocol, JSON ("simple-json") and Avro ("simple-avro") encodings.

A row message carries only `schemaVersion`; its columns are known from the BOOTSTRAP or DDL
`tableSchema` with the same (database, table, version). The decoder therefore keeps a schema cache
across the messages of one partition and raises SchemaNotYetKnown for a row that arrives first (the
silver job parks it until the schema comes). Per cached schema it builds, once, the list of value
converters its rows need, so a row costs one dict lookup and one call per non-text column.

What TiCDC sends (tiflow pkg/sink/codec/simple/message.go, avro.go):
- JSON values are strings: integers, BIT and YEAR in base 10, FLOAT/DOUBLE as Go's shortest
  fixed-point text, DECIMAL with the column's scale, ENUM/SET as the 1-based index / bitmask, binary
  strings and blobs as base64, TIMESTAMP as {"location", "value"} rendered in the changefeed's zone.
  Numbers are accepted too (newer TiCDC writes integers and floats unquoted).
- Avro values are the union null/long/float/double/string/bytes/Timestamp/UnsignedBigint; BIGINT
  UNSIGNED (UnsignedBigint) and BIT(64) arrive wrapped into a signed long.
- The Avro table schema carries `decimal` (scale) only for DECIMAL, so temporal values keep the
  fractional digits they are sent with (TiDB renders exactly the column's digits).
"""

from __future__ import annotations

import base64
import binascii
import copy
import datetime as dt
import io
import itertools
import json
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol, cast

import fastavro
import msgspec
import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
from fastavro.types import NamedSchemas
from fastavro.types import Schema as AvroSchema

from spark_jobs import ddl
from spark_jobs.canonical import values as V
from spark_jobs.canonical.blocks import RowBlock, struct_of
from spark_jobs.canonical.events import ChangeEvent
from spark_jobs.canonical.events import table_schema as make_table_schema
from spark_jobs.codecs import ColumnDecode, Headers, avro, columns, fast_paths
from spark_jobs.codecs import checksum as crc
from spark_jobs.codecs.large_message import COMPRESSIONS, decompress, read_claim_check
from spark_jobs.errors import ConfigError, DecodeError, SchemaNotYetKnown

MESSAGE_SCHEMA_PATH = Path(__file__).with_name("simple_message.avsc")
MESSAGE_RECORD = "com.pingcap.simple.avro.Message"

DML_OPS = {"INSERT": "insert", "UPDATE": "update", "DELETE": "delete"}
DDL_KINDS = ("CREATE", "RENAME", "CINDEX", "DINDEX", "ERASE", "TRUNCATE", "ALTER", "QUERY")

# Exceptions a value converter or a malformed document can raise; all become a DecodeError.
_BAD_INPUT = (ValueError, TypeError, KeyError, IndexError, AttributeError, ArithmeticError, binascii.Error)

# a column's converter: the value as sent (JSON text or number, an Avro value) -> canonical text
Converter = Callable[[Any], str]
# the row converters generated per schema (`_row_source`): one image -> its texts, and an update's two
_One = Callable[[Any, str], dict[str, str | None]]
_Pair = Callable[[Any, Any], tuple[dict[str, str | None], dict[str, str | None]]]
# what handles one message kind: (message, its type, read from a claim-check file) -> events
_Handler = Callable[[dict[str, Any], str, bool], list[ChangeEvent]]


class _EnumConverter(Protocol):
    """`_enum_converter`'s converter: the generated row code looks a value up in its `lookup` first."""

    lookup: dict[Any, str]

    def __call__(self, v: Any, /) -> str: ...


class _SetConverter(Protocol):
    """`_set_converter`'s converter: the generated row code looks a value up in its `memo` first."""

    memo: dict[Any, str]

    def __call__(self, v: Any, /) -> str: ...


@lru_cache(maxsize=1)
def message_schema() -> AvroSchema:
    """The parsed Avro schema of com.pingcap.simple.avro.Message (simple_message.avsc, from TiCDC)."""
    schemas = json.loads(MESSAGE_SCHEMA_PATH.read_text())
    named: NamedSchemas = {}
    parsed: AvroSchema = {}  # the last one parsed: the Message record, which names the others
    for schema in schemas:
        parsed = fastavro.parse_schema(schema, named_schemas=named)
    return parsed


# ---- time zones -------------------------------------------------------------------------------


# ---- names a DDL statement gives ---------------------------------------------------------------

_IDENT = r"(?:`(?:[^`]|``)+`|[\w$]+)"
_DATABASE_RE = re.compile(
    rf"^\s*(CREATE|DROP|ALTER)\s+(?:DATABASE|SCHEMA)\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?({_IDENT})", re.I
)
_TABLE_NAME_RE = re.compile(
    rf"^\s*(?:CREATE\s+(?:TEMPORARY\s+)?TABLE|DROP\s+TABLE|TRUNCATE(?:\s+TABLE)?|ALTER\s+TABLE|RENAME\s+TABLE"
    rf"|CREATE\s+(?:UNIQUE\s+|FULLTEXT\s+|SPATIAL\s+)?INDEX\s+{_IDENT}\s+ON|DROP\s+INDEX\s+{_IDENT}\s+ON)"
    rf"\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?({_IDENT})(?:\s*\.\s*({_IDENT}))?",
    re.I,
)


def _unquote(ident: str) -> str:
    return ident[1:-1].replace("``", "`") if ident.startswith("`") else ident


def names_from_sql(sql: str) -> tuple[str | None, str | None]:
    """(database, table) named by a DDL statement that came without a table schema."""
    m = _DATABASE_RE.match(sql)
    if m:
        return _unquote(m.group(2)), None
    m = _TABLE_NAME_RE.match(sql)
    if m:
        if m.group(2):
            return _unquote(m.group(1)), _unquote(m.group(2))
        return None, _unquote(m.group(1))
    return None, None


# ---- value converters (text or typed value -> canonical text) ---------------------------------


def _int_text(v: Any) -> str:
    if type(v) is bool:
        raise TypeError("boolean is not an integer")
    return str(int(v))


def _unsigned_converter(bits: int) -> Converter:
    def convert(v: Any) -> str:
        if type(v) is bool:
            raise TypeError("boolean is not an integer")
        n = int(v)
        if n < 0:
            if n < -(1 << (bits - 1)):
                raise ValueError("out of range")
            n += 1 << bits
        return str(n)

    return convert


def _year_text(v: Any) -> str:
    if type(v) is bool:
        raise TypeError("boolean is not a year")
    return V.text_year(v)


def _decimal_converter(scale: int | None) -> Converter:
    """TiCDC sends the exact digits with the column's scale; other texts go through values.text_decimal."""

    def convert(v: Any) -> str:
        if type(v) is str and v and v[0] != "-":
            dot = v.find(".")
            if scale == 0:
                if dot == -1 and v.isdigit() and (v[0] != "0" or len(v) == 1):
                    return v
            elif (
                scale is not None
                and dot > 0
                and len(v) - dot - 1 == scale
                and v[:dot].isdigit()
                and v[dot + 1 :].isdigit()
                and (v[0] != "0" or dot == 1)
            ):
                return v
        if type(v) is not str and type(v) is not int:
            raise TypeError(f"DECIMAL must be text, got {type(v).__name__}")
        return V.text_decimal(v, scale)

    return convert


def _float_text(v: Any) -> str:
    """values.text_float, shortcut: a double repr of at most 6 significant digits is already the
    shortest text of its 32-bit float (6-digit decimals are further apart than a float32 ulp)."""
    if type(v) is bool:
        raise TypeError("boolean is not a float")
    x = float(v)
    r = repr(x)
    if len(r) <= 7 and x != 0 and "e" not in r and "n" not in r:
        return r
    return V.text_float(x)


def _double_text(v: Any) -> str:
    if type(v) is bool:
        raise TypeError("boolean is not a double")
    return V.text_double(v)


def _date_text(v: Any) -> str:
    if type(v) is str and len(v) == 10 and v[4] == "-" and v[7] == "-":
        return v
    if type(v) is not str:
        raise TypeError(f"DATE must be text, got {type(v).__name__}")
    return V.text_date(V.parse_datetime_text(v)[0])


def _datetime_converter(fsp: int | None) -> Converter:
    """TiDB renders exactly the column's fractional digits; other shapes are parsed and re-rendered."""
    size = None if fsp is None else (19 if fsp == 0 else 20 + fsp)

    def convert(v: Any) -> str:
        if type(v) is not str:
            raise TypeError(f"DATETIME must be text, got {type(v).__name__}")
        if (
            (len(v) == size if size else len(v) == 19 or (len(v) > 20 and v[19] == "."))
            and v[4] == "-"
            and v[7] == "-"
            and v[10] == " "
            and v[13] == ":"
            and v[16] == ":"
        ):
            return v
        if v.startswith("0000-00-00"):
            return v
        value, given = V.parse_datetime_text(v)
        return V.text_datetime(value, given if fsp is None else fsp)

    return convert


def _parse_time_micros(text: str) -> tuple[int, int]:
    """`[-][D ]HH:MM:SS[.f]` -> (signed microseconds, fraction digits given)."""
    body = text.strip()
    sign = -1 if body.startswith("-") else 1
    body = body.lstrip("+-")
    days = 0
    if " " in body:
        day_text, _, body = body.partition(" ")
        days = int(day_text)
    hms, _, frac = body.partition(".")
    parts = hms.split(":")
    if len(parts) != 3 or not all(p.isdigit() for p in parts) or (frac and not frac.isdigit()):
        raise ValueError(f"not a TIME value: {text!r}")
    h, m, s = (int(p) for p in parts)
    if m > 59 or s > 59:
        raise ValueError(f"not a TIME value: {text!r}")
    micros = (((days * 24 + h) * 60 + m) * 60 + s) * 1_000_000 + (int((frac + "000000")[:6]) if frac else 0)
    return sign * micros, len(frac)


def _time_converter(fsp: int | None) -> Converter:
    def convert(v: Any) -> str:
        if type(v) is not str:
            raise TypeError(f"TIME must be text, got {type(v).__name__}")
        body = v[1:] if v[:1] == "-" else v
        n = len(body)
        if fsp == 0:
            shaped = n == 8
        elif fsp:
            shaped = n == 9 + fsp and body[8:9] == "."
        else:
            shaped = n == 8 or (n > 9 and body[8] == ".")
        if shaped and body[2] == ":" and body[5] == ":" and (body is v or body.strip("0:.")):
            return v
        micros, given = _parse_time_micros(v)
        return V.text_time(micros, given if fsp is None else fsp)

    return convert


def _bytes_text_from_base64(v: Any) -> str:
    if type(v) is not str:
        raise TypeError(f"binary value must be base64 text, got {type(v).__name__}")
    return V.text_bytes(base64.b64decode(v, validate=True))


def _bytes_text(v: Any) -> str:
    if type(v) is not bytes:
        raise TypeError(f"binary value must be Avro bytes, got {type(v).__name__}")
    return V.text_bytes(v)


def _enum_converter(elements: list[str]) -> _EnumConverter:
    """1-based index (text or number) -> label; a label as such is accepted too."""
    lookup: dict[Any, str] = {label: label for label in elements}
    for index, label in enumerate(["", *elements]):
        lookup[index] = label
        lookup[str(index)] = label
    get = lookup.get

    def convert(v: Any) -> str:
        label = get(v) if type(v) is not bool else None
        if label is None:
            raise ValueError(f"ENUM index out of range 0..{len(elements)}")
        return label

    enum_convert = cast(_EnumConverter, convert)
    enum_convert.lookup = lookup  # read by the generated row converters (text keys only)
    return enum_convert


def _set_converter(elements: list[str]) -> _SetConverter:
    """Bitmask (text or number) -> comma-joined labels in definition order; label text accepted too."""
    memo: dict[Any, str] = {}
    limit = 1 << len(elements)
    positions = {label: i for i, label in enumerate(elements)}

    def convert(v: Any) -> str:
        text = memo.get(v)
        if text is not None:
            return text
        if type(v) is bool:
            raise TypeError("boolean is not a SET bitmask")
        try:
            mask = int(v)
        except ValueError:
            if type(v) is not str:
                raise
            chosen = set(v.split(",")) - {""}
            if not chosen <= positions.keys():
                raise ValueError(f"SET labels {sorted(chosen - positions.keys())} not in the definition") from None
            mask = sum(1 << positions[label] for label in chosen)
        if not 0 <= mask < limit:
            raise ValueError(f"SET bitmask out of range 0..{limit - 1}")
        text = V.text_set(mask, elements)[0]
        if len(memo) < 4096:
            memo[v] = text
        return text

    set_convert = cast(_SetConverter, convert)
    set_convert.memo = memo  # read by the generated row converters (text keys only)
    return set_convert


# ---- the cached table schema ------------------------------------------------------------------


class _Column:
    __slots__ = ("base", "canonical", "definition", "elements", "fsp", "name", "nullable", "scale", "unsigned")

    base: str
    canonical: str
    definition: str
    elements: list[str] | None
    fsp: int | None
    name: str
    nullable: bool
    scale: int | None
    unsigned: bool


class _Schema:
    """One (database, table, version): canonical schema plus the row converters built once for it."""

    __slots__ = (
        "checksum",
        "column_types",
        "columns",
        "convert_one",
        "convert_pair",
        "converters",
        "database",
        "key_columns",
        "names",
        "table",
        "table_schema",
        "text_columns",
        "version",
    )

    checksum: crc.RowChecksum | None  # built on the first row that carries a checksum
    column_types: dict[str, str]
    columns: list[_Column]
    convert_one: _One | None
    convert_pair: _Pair | None
    converters: list[tuple[str, Converter]]
    database: str
    key_columns: list[str]
    names: frozenset[str]
    table: str
    table_schema: dict[str, Any]
    text_columns: list[str]
    version: int


def _need(doc: Any, key: str, kind: type | tuple[type, ...], protocol: str, where: str) -> Any:
    if not isinstance(doc, dict):
        raise DecodeError(protocol, f"expected an object, got {type(doc).__name__}", where)
    if key not in doc:
        raise DecodeError(protocol, f"missing field {key!r}", f"{where}.{key}" if where else key)
    value = doc[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind in (int, str)):
        raise DecodeError(
            protocol, f"field {key!r} has the wrong type {type(value).__name__}", f"{where}.{key}" if where else key
        )
    return value


def _definition(base: str, length: int, decimal: int | None, elements: list[str] | None, unsigned: bool) -> str:
    """The MySQL column definition rebuilt from a Simple dataType."""
    if base in V.INTEGER_TYPES:
        return base + (" unsigned" if unsigned else "")
    if base == "decimal":
        if decimal is None or decimal < 0 or length <= 0:
            return "decimal"
        return f"decimal({length},{decimal})" + (" unsigned" if unsigned else "")
    if base in ("datetime", "timestamp", "time"):
        return f"{base}({decimal})" if decimal else base
    if base in ("enum", "set"):
        return base + "(" + ",".join("'" + e.replace("'", "''") + "'" for e in elements or ()) + ")"
    if base in ("bit", "char", "varchar", "binary", "varbinary") and length > 0:
        return f"{base}({length})"
    return base + (" unsigned" if unsigned and base in ("float", "double") else "")


# ---- row converters generated per cached schema ---------------------------------------------------
# Each cached schema gets, on its first row, two functions compiled for its exact column list: `one`
# converts one row image, `pair` an update's data and old images. They do what `_convert` does
# (which stays as the precise path for anything unusual), with the per-column converter calls
# inlined as straight-line code and fast paths for values TiCDC already sends in canonical form:
# digit-only integers, decimals at the column's scale, doubles in Python's shortest form, dates and
# datetimes of the column's shape, UTC timestamps, ENUM and SET by the converters' own tables. A fast
# path only ever keeps a value the converter would return unchanged, or computes what the converter
# computes; whatever it does not recognise, and any exception it meets, goes to the column's
# converter, whose exception becomes the DecodeError `_convert` raises. For an update, an old value
# equal to the data value of the same column takes the data value's text.


def _datetime_shape(t: str, fsp: int | None) -> str:
    """`_datetime_converter(fsp)`'s test for a text it returns as is, over the variable `t`."""
    if fsp is None:
        size = f"(len({t}) == 19 or len({t}) > 20 and {t}[19] == '.')"
    else:
        size = f"len({t}) == {19 if fsp == 0 else 20 + fsp}"
    return f"{size} and {t}[4:17:3] == '-- ::'"


def _column_code(c: _Column, i: int, v: str, avro: bool) -> tuple[str, str]:
    """(kind, code) converting the non-null value in variable `v` of converter column i (converter c{i}).

    kind "keep": code is a condition under which the converter returns the value unchanged;
    kind "value": code is an expression giving the canonical text.
    """
    call = f"c{i}({v})"
    base = c.base
    # JSON values are str/int/float/bool/list/dict: only str has the str methods a test calls, so
    # another type fails the test with AttributeError and goes to the converter. Avro adds bytes.
    text = f"type({v}) is str and " if avro else ""
    if base in V.INTEGER_TYPES or base == "bit":
        digits = text + fast_paths.digits_test(v)
        if not avro:
            return "keep", digits
        whole = f"type({v}) is int and {v} >= 0" if base == "bit" or c.unsigned else f"type({v}) is int"
        return "value", f"{v} if {digits} else str({v}) if {whole} else {call}"
    if base == "year":
        return "keep", text + fast_paths.year_test(v)
    if base == "decimal" and c.scale is not None:
        if c.scale == 0:
            return "keep", text + fast_paths.digits_test(v)
        return "keep", f"type({v}) is str and decimal_shape{i}({v})"
    if base == "double" or base == "date":
        return "keep", fast_paths.canonical_test(base, v) or "False"
    if base == "datetime":
        return "keep", f"type({v}) is str and {_datetime_shape(v, c.fsp)}"
    if base == "timestamp":
        return "value", (
            f"t if type({v}) is dict and {v}.get('location') in utc_locations "
            f"and type(t := {v}.get('value')) is str and {_datetime_shape('t', c.fsp)} else {call}"
        )
    if base == "enum":
        return "value", f"(lookup{i}({v}) if type({v}) is str or type({v}) is int else None) or {call}"
    if base == "set":
        return "value", f"(memo{i}({v}) if type({v}) is str or type({v}) is int else None) or {call}"
    return "value", call


def _row_source(schema: _Schema, avro: bool) -> tuple[str, list[str]]:
    """Source of `make(...) -> (one, pair)` for this schema, and the names `make` takes."""
    columns = {c.name: c for c in schema.columns}
    converted = [name for name, _ in schema.converters]
    order = converted + list(schema.text_columns)
    count = len(order)
    params = ["SLOW", "slow", "text_error", "unknown_error", "utc_locations", "double_shape"]
    for i, name in enumerate(converted):
        params.append(f"c{i}")
        base = columns[name].base
        if base == "enum":
            params.append(f"lookup{i}")
        elif base == "set":
            params.append(f"memo{i}")
        elif base == "decimal" and columns[name].scale:
            params.append(f"decimal_shape{i}")

    def fetch(row: str, var: str) -> list[str]:
        return [f"        {var}{i} = {row}[{name!r}]" for i, name in enumerate(order)] or ["        pass"]

    def convert(row: str, var: str, where: str, keep: bool, same_as: str | None) -> list[str]:
        """Lines converting every column of `row` (values in var0..); keep: x0.. hold the texts."""
        out: list[str] = []
        for i, name in enumerate(converted):
            c = columns[name]
            value = f"{var}{i}"
            kind, code = _column_code(c, i, value, avro)
            body: list[str] = []
            if kind == "keep":
                body += [f"if not ({code}):", f"    {row}[{name!r}] = {value} = c{i}({value})"]
            else:
                body += [f"{row}[{name!r}] = {value} = {code}"]
            guarded = [
                "try:",
                *("    " + line for line in body),
                "except BAD:",
                f"    {row}[{name!r}] = {value} = slow({i}, {value}, {where})",
            ]
            if same_as is not None:
                same = (
                    f"(type({value}) is dict or type({value}) is str)"
                    if c.base == "timestamp"
                    else f"type({value}) is str"
                )
                guarded = [
                    f"if {same} and {value} == {same_as}{i}:",
                    f"    if x{i} is not {same_as}{i}:",  # else the data value was kept: an equal text is there
                    f"        {row}[{name!r}] = {value} = x{i}",
                    "else:",
                    *("    " + line for line in guarded),
                ]
            out.append(f"    if {value} is not None:")
            out += ["        " + line for line in guarded]
            if keep:
                out.append(f"    x{i} = {value}")
        for i in range(len(converted), count):
            out.append(f"    if {var}{i} is not None and type({var}{i}) is not str:")
            out.append(f"        raise text_error({i}, {var}{i}, {where})")
        out.append(f"    if len({row}) != {count}:")
        out.append(f"        raise unknown_error({row}, {where})")
        return out

    lines = [
        f"def make({', '.join(params)}):",
        "  BAD = _BAD_INPUT",
        "  def one(row, where):",
        "    if type(row) is not dict:",
        "        return SLOW(row, where)",
        "    try:",
        *fetch("row", "v"),
        "    except KeyError:",
        "        return SLOW(row, where)",
        *convert("row", "v", "where", False, None),
        "    return row",
        "  def pair(data, old):",
        "    if type(data) is not dict:",
        "        return SLOW(data, 'data'), one(old, 'old')",
        "    try:",
        *fetch("data", "v"),
        "    except KeyError:",
        "        return SLOW(data, 'data'), one(old, 'old')",
        # raw data values: an equal old value has the same text (x0.. below)
        *[f"    r{i} = v{i}" for i in range(len(converted))],
        *convert("data", "v", "'data'", True, None),
        "    if type(old) is not dict:",
        "        return data, SLOW(old, 'old')",
        "    try:",
        *fetch("old", "w"),
        "    except KeyError:",
        "        return data, SLOW(old, 'old')",
        *convert("old", "w", "'old'", False, "r"),
        "    return data, old",
        "  return one, pair",
    ]
    return "\n".join(lines) + "\n", params


def _not_text(v: object) -> str:
    return f"text value must be a string, got {type(v).__name__}"


def _bad_value(protocol: str, schema: _Schema, name: str | None, v: object, reason: object, where: str) -> DecodeError:
    column = next(c for c in schema.columns if c.name == name)
    return DecodeError(
        protocol, f"bad {column.definition} value {v!r} for column {name!r}: {reason}", f"{where}.{name}"
    )


def _unknown_columns(protocol: str, schema: _Schema, row: dict[str, Any], where: str) -> DecodeError:
    unknown = sorted(set(row) - schema.names)
    return DecodeError(
        protocol,
        f"columns {unknown} are not in schema version {schema.version} of {schema.database}.{schema.table}",
        f"{where}.{unknown[0]}",
    )


# ---- the decoder ------------------------------------------------------------------------------


class _SimpleDecoder:
    protocol = "simple"
    OPTIONS: dict[str, tuple[type, Any]] = {
        "large-message-handle-compression": (str, "none"),
        "claim-check-raw-value": (bool, False),
        "time-zone": (str, "UTC"),
        "verify-checksums": (bool, True),
    }
    _AVRO = False

    def __init__(self, options: dict[str, Any] | None = None):
        opts = {name: default for name, (_, default) in self.OPTIONS.items()}
        opts.update(options or {})
        self._compression = opts["large-message-handle-compression"] or "none"
        if self._compression not in COMPRESSIONS:
            raise ConfigError(
                f"large-message-handle-compression must be one of {', '.join(COMPRESSIONS)}, got {self._compression!r}"
            )
        self._raw_value = bool(opts["claim-check-raw-value"])
        self._verify_checksums = opts["verify-checksums"] is not False
        try:
            self._default_zone = V.time_zone(opts["time-zone"] or "UTC")
        except Exception as exc:
            raise ConfigError(f"time-zone {opts['time-zone']!r} is not a known time zone: {exc}") from None
        self._zones: dict[str, dt.tzinfo | None] = {"Local": self._default_zone}
        self._schemas: dict[tuple[str, str, int], _Schema] = {}
        self._last_schema: _Schema | None = None
        self._last_shape: tuple[str, str, int] | None = None  # the schema of the last chunk read, if of one
        self._handlers: dict[str, _Handler] = {
            "WATERMARK": self._watermark,
            "BOOTSTRAP": self._bootstrap,
            "INSERT": self._row,
            "UPDATE": self._row,
            "DELETE": self._row,
        }
        for kind in DDL_KINDS:
            self._handlers[kind] = self._ddl

    # -- entry point --

    def decode(self, key: bytes | None, value: bytes | None, headers: Headers = None) -> list[ChangeEvent]:
        if value and type(value) is bytes and self._compression == "none":
            return self._message(self._parse(value), False)
        return self._decode(value, in_claim_check=False)

    def _decode(self, value: bytes | None, in_claim_check: bool) -> list[ChangeEvent]:
        if not value:
            raise DecodeError(self.protocol, "empty message value (Simple sends no tombstones)", "value")
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise DecodeError(self.protocol, f"value must be bytes, got {type(value).__name__}", "value")
        if self._compression != "none":
            value = decompress(self.protocol, bytes(value), self._compression)
        return self._message(self._parse(value), in_claim_check)

    def _message(self, msg: dict[str, Any], in_claim_check: bool) -> list[ChangeEvent]:
        kind = msg.get("type")
        if type(kind) is not str:
            raise DecodeError(self.protocol, f"unknown message type {kind!r}", "type")
        op = DML_OPS.get(kind)
        if op is not None and msg.get("version") == 1:
            return self._row(msg, kind, in_claim_check, op)
        handler = self._handlers.get(kind)
        if handler is None:
            raise DecodeError(self.protocol, f"unknown message type {kind!r}", "type")
        version = msg.get("version")
        if version != 1:
            raise DecodeError(self.protocol, f"unsupported protocol version {version!r}", "version")
        if in_claim_check and kind not in DML_OPS:
            raise DecodeError(
                self.protocol, f"claim-check file holds a {kind} message, not a row", "claimCheckLocation"
            )
        return handler(msg, kind, in_claim_check)

    def _parse(self, value: bytes) -> dict[str, Any]:
        raise NotImplementedError

    def _learn(self, value: bytes | None) -> None:
        """Decode a message the envelope did not admit, for what it teaches (a schema); its events and any error
        are `decode`'s to give when the caller decodes it again."""
        try:
            self.decode(None, value)
        except Exception:  # the caller decodes it again and reports it, exactly
            pass

    # -- message kinds --

    def _watermark(self, msg: dict[str, Any], kind: str, _: bool) -> list[ChangeEvent]:
        ts = _need(msg, "commitTs", int, self.protocol, "")
        return [ChangeEvent(kind="watermark", commit_ts=ts)]

    def _bootstrap(self, msg: dict[str, Any], kind: str, _: bool) -> list[ChangeEvent]:
        schema = self._cache(_need(msg, "tableSchema", dict, self.protocol, ""), "tableSchema")
        return [
            ChangeEvent(
                kind="bootstrap",
                database=schema.database,
                table=schema.table,
                key_columns=list(schema.key_columns),
                schema_version=schema.version,
                table_schema=copy.deepcopy(schema.table_schema),
            )
        ]

    def _ddl(self, msg: dict[str, Any], kind: str, _: bool) -> list[ChangeEvent]:
        protocol = self.protocol
        sql = _need(msg, "sql", str, protocol, "")
        commit_ts = _need(msg, "commitTs", int, protocol, "")
        after = msg.get("tableSchema")
        before = msg.get("preTableSchema")
        schema = self._cache(after, "tableSchema") if after is not None else None
        pre_schema = self._cache(before, "preTableSchema") if before is not None else None
        ddl_type = ddl.classify(sql)
        named = schema or pre_schema
        database, table = (named.database, named.table) if named else names_from_sql(sql)
        if ddl_type in ("create_database", "drop_database"):
            table = None
        if ddl_type == "drop_table" or schema is None:
            table_schema, version = None, None
        else:
            table_schema, version = copy.deepcopy(schema.table_schema), schema.version
        return [
            ChangeEvent(
                kind="ddl",
                database=database,
                table=table,
                commit_ts=commit_ts,
                schema_version=version,
                ddl_type=ddl_type,
                ddl_sql=sql,
                table_schema=table_schema,
            )
        ]

    def _row(self, msg: dict[str, Any], kind: str, in_claim_check: bool, op: str | None = None) -> list[ChangeEvent]:
        database = msg.get("database")
        table = msg.get("table")
        version = msg.get("schemaVersion")
        commit_ts = msg.get("commitTs")
        if not (type(database) is str and type(table) is str and type(version) is int and type(commit_ts) is int):
            for field, kind_ in (("database", str), ("table", str), ("schemaVersion", int), ("commitTs", int)):
                _need(msg, field, kind_, self.protocol, "")
            # not reached: _need refuses whatever fails the exact test (JSON and Avro give no str or int subclass)
            raise AssertionError("database, table, schemaVersion or commitTs of an unexpected type")
        location = msg.get("claimCheckLocation")
        if location:
            protocol = self.protocol
            if in_claim_check or type(location) is not str:
                raise DecodeError(protocol, "claim-check message points at another claim check", "claimCheckLocation")
            _, value = read_claim_check(protocol, location, self._raw_value)
            events = self._decode(value, in_claim_check=True)
            for event in events:
                event.flags.append("claim_check")
            return events
        schema = self._last_schema  # a partition's rows mostly share one schema: no key tuple to hash
        if schema is None or schema.version != version or schema.table != table or schema.database != database:
            schema = self._schemas.get((database, table, version))
            if schema is None:
                raise SchemaNotYetKnown(self.protocol, database, table, version)
            self._last_schema = schema
        if op is None:
            op = DML_OPS[kind]
        checksum = msg.get("checksum")
        if checksum is not None and self._verify_checksums and not msg.get("handleKeyOnly"):
            self._verify_checksum(schema, msg, checksum)
        convert_one = schema.convert_one
        if convert_one is None:
            convert_one = self._compile_rows(schema)
        if op == "insert":
            data = msg.get("data")
            if data is None:
                raise DecodeError(self.protocol, f"{kind} without data", "data")
            after, before = convert_one(data, "data"), None
        elif op == "delete":
            old = msg.get("old")
            if old is None:
                raise DecodeError(self.protocol, f"{kind} without old", "old")
            after, before = None, convert_one(old, "old")
        else:
            data = msg.get("data")
            old = msg.get("old")
            if data is None:
                raise DecodeError(self.protocol, f"{kind} without data", "data")
            if old is None:
                raise DecodeError(self.protocol, f"{kind} without old", "old")
            after, before = cast(_Pair, schema.convert_pair)(data, old)  # _compile_rows made it with convert_one
        # key_columns and column_types are the schema's own, shared by its events: nothing mutates them
        return [
            ChangeEvent(
                "row",
                database,
                table,
                commit_ts,
                op,
                schema.key_columns,
                before,
                after,
                schema.column_types,
                version,
                None,
                None,
                None,
                ["handle_key_only"] if msg.get("handleKeyOnly") else [],
            )
        ]

    def _verify_checksum(self, schema: _Schema, msg: dict[str, Any], block: Any) -> None:
        """Each image as TiCDC hashed it (`data` by `current`, `old` by `previous`), or quarantine; checked on
        the values as sent, before the row converters rewrite them in place. A handle-key-only image
        lacks the columns its checksum covers, so the caller skips it."""
        protocol = self.protocol
        if type(block) is not dict:
            raise DecodeError(protocol, f"checksum must be an object, got {type(block).__name__}", "checksum")
        table = f"{schema.database}.{schema.table}"
        if block.get("corrupted") is True:
            raise crc.corrupted(protocol, table, "checksum.corrupted")
        row_checksum = schema.checksum or self._row_checksum(schema)
        for image, field, key in (("new", "data", "current"), ("old", "old", "previous")):
            where = f"checksum.{key}"
            expected = crc.expected_crc(protocol, block.get(key), where)
            row = msg.get(field)
            if expected is not None and type(row) is dict:
                version = block.get("version")
                crc.verify(
                    protocol, row_checksum, row, expected, table=table, image=image, version=version, where=where
                )

    def _row_checksum(self, schema: _Schema) -> crc.RowChecksum:
        encoders = [(c.name, self._checksum_encoder(c)) for c in schema.columns]
        legacy = None
        timestamps = {c.name for c in schema.columns if c.base == "timestamp"}
        if timestamps:
            as_sent = crc.unwrap_value(crc.text)
            legacy = crc.RowChecksum(tuple((n, as_sent if n in timestamps else e) for n, e in encoders))
        schema.checksum = crc.RowChecksum(tuple(encoders), legacy)
        return schema.checksum

    def _checksum_encoder(self, c: _Column) -> crc.Encode:
        """How a column's value as sent enters the row checksum (module `checksum`)."""
        base = c.base
        if base in V.INTEGER_TYPES or base in ("bit", "year"):
            return crc.unwrap_value(crc.uint64) if self._AVRO else crc.uint64
        if base in ("enum", "set") and c.elements is not None:
            by_label = (crc.enum_by_label if base == "enum" else crc.set_by_labels)(c.elements)
            return lambda v: crc.uint64(v) if type(v) is int or (type(v) is str and v.isdigit()) else by_label(v)
        if base == "float":
            return crc.float32
        if base == "double":
            return crc.double
        if base == "decimal":
            return crc.decimal_text
        if base == "timestamp":
            return self._timestamp_checksum
        if base in V.BINARY_TYPES:
            return crc.binary if self._AVRO else crc.base64_binary
        if base in V.CHAR_TYPES or base in ("json", "date", "datetime", "time"):
            return crc.text
        return lambda v: b""  # GEOMETRY and types TiDB leaves out of the checksum

    def _timestamp_checksum(self, v: Any) -> bytes:
        """TIMESTAMP {location, value} (or text in the changefeed's zone) -> its UTC text."""
        if type(v) is dict:
            location, text = v["location"], v["value"]
            if location not in self._zones:
                self._zones[location] = V.time_zone(location)
            zone = self._zones[location]
        else:
            zone, text = self._default_zone, v
        return crc.text(text if zone is None else V.text_timestamp_from_zone(text, zone))

    def _convert(self, schema: _Schema, row: Any, where: str) -> dict[str, str | None]:
        """Canonical text of every column the row carries, converted in place in the parsed dict."""
        if type(row) is not dict:
            raise DecodeError(self.protocol, f"{where} must be an object, got {type(row).__name__}", where)
        name: str | None = None
        v: Any = None
        try:
            for name, convert in schema.converters:
                v = row.get(name)
                if v is not None:
                    row[name] = convert(v)
            for name in schema.text_columns:
                v = row.get(name)
                if v is not None and type(v) is not str:
                    raise TypeError(_not_text(v))
        except _BAD_INPUT as exc:
            raise _bad_value(self.protocol, schema, name, v, exc, where) from None
        if not schema.names.issuperset(row):
            raise _unknown_columns(self.protocol, schema, row, where)
        return row

    def _compile_rows(self, schema: _Schema) -> _One:
        """Give the schema its generated `convert_one` / `convert_pair` (see `_row_source`)."""
        protocol = self.protocol

        def precise(row: Any, where: str) -> dict[str, str | None]:
            return self._convert(schema, row, where)

        source, params = _row_source(schema, self._AVRO)
        make = fast_paths.generate(protocol, source, {"_BAD_INPUT": _BAD_INPUT})
        if make is None:
            schema.convert_one = precise
            schema.convert_pair = lambda data, old: (precise(data, "data"), precise(old, "old"))
            return precise
        converters = [convert for _, convert in schema.converters]
        order = [name for name, _ in schema.converters] + list(schema.text_columns)

        def slow(i: int, v: Any, where: str) -> str:
            try:
                return converters[i](v)
            except _BAD_INPUT as exc:
                raise _bad_value(protocol, schema, order[i], v, exc, where) from None

        def text_error(i: int, v: Any, where: str) -> DecodeError:
            return _bad_value(protocol, schema, order[i], v, _not_text(v), where)

        def unknown_error(row: dict[str, Any], where: str) -> DecodeError:
            return _unknown_columns(protocol, schema, row, where)

        # locations whose zone is UTC (None), as the timestamp converter resolves them
        utc_locations = V.UTC_ZONE_NAMES | ({"Local"} if self._default_zone is None else set())
        args: dict[str, object] = {
            "SLOW": precise,
            "slow": slow,
            "text_error": text_error,
            "unknown_error": unknown_error,
            "utc_locations": frozenset(utc_locations),
            "double_shape": fast_paths.DOUBLE_SHAPE,
        }
        columns = {c.name: c for c in schema.columns}
        for i, (name, convert) in enumerate(schema.converters):
            args[f"c{i}"] = convert
            column = columns[name]
            if column.base == "enum":
                args[f"lookup{i}"] = cast(_EnumConverter, convert).lookup.get
            elif column.base == "set":
                args[f"memo{i}"] = cast(_SetConverter, convert).memo.get
            elif column.base == "decimal" and column.scale:
                args[f"decimal_shape{i}"] = fast_paths.decimal_shape(column.scale)
        rows: tuple[_One, _Pair] = make(*(args[p] for p in params))
        schema.convert_one, schema.convert_pair = rows
        return rows[0]

    # -- schema cache --

    def _cache(self, doc: Any, where: str) -> _Schema:
        schema = self._build_schema(doc, where)
        self._schemas[(schema.database, schema.table, schema.version)] = schema
        self._last_schema = None
        return schema

    def _build_schema(self, doc: Any, where: str) -> _Schema:
        p = self.protocol
        if not isinstance(doc, dict):
            raise DecodeError(p, f"table schema must be an object, got {type(doc).__name__}", where)
        database_key = "schema" if "schema" in doc else "database"
        schema = _Schema()
        schema.database = _need(doc, database_key, str, p, where)
        schema.table = _need(doc, "table", str, p, where)
        schema.version = _need(doc, "version", int, p, where)
        raw_columns = _need(doc, "columns", list, p, where)
        raw_indexes = doc.get("indexes") or []
        if not isinstance(raw_indexes, list):
            raise DecodeError(p, "indexes must be a list", f"{where}.indexes")
        columns: list[_Column] = []
        for i, raw in enumerate(raw_columns):
            w = f"{where}.columns[{i}]"
            column = _Column()
            column.name = _need(raw, "name", str, p, w)
            data_type = _need(raw, "dataType", dict, p, w)
            column.nullable = _need(raw, "nullable", bool, p, w)
            mysql_type = _need(data_type, "mysqlType", str, p, f"{w}.dataType")
            length = data_type.get("length") or 0
            decimal = data_type.get("decimal")
            elements = data_type.get("elements")
            unsigned = data_type.get("unsigned")
            if (
                type(length) is not int
                or (decimal is not None and type(decimal) is not int)
                or (elements is not None and not (isinstance(elements, list) and all(type(e) is str for e in elements)))
                or (unsigned is not None and type(unsigned) is not bool)
            ):
                raise DecodeError(p, "dataType length/decimal/elements/unsigned have the wrong type", f"{w}.dataType")
            try:
                base, _, type_unsigned = V.parse_type(mysql_type)
            except ValueError:
                raise DecodeError(p, f"not a MySQL type: {mysql_type!r}", f"{w}.dataType.mysqlType") from None
            if base == "decimal" and decimal is None and not self._AVRO:
                decimal = 0  # Go's omitempty drops a zero scale from the JSON dataType
            column.base = base
            column.unsigned = bool(unsigned) or type_unsigned
            column.elements = list(elements) if base in ("enum", "set") and elements is not None else None
            if column.elements is None and base in ("enum", "set"):
                raise DecodeError(p, f"{base} column without elements", f"{w}.dataType.elements")
            column.definition = _definition(base, length, decimal, column.elements, column.unsigned)
            column.canonical = V.canonical_type(column.definition)
            column.scale = V.decimal_scale(column.definition)
            temporal = base in ("datetime", "timestamp", "time")
            column.fsp = None
            if temporal:  # JSON omits a zero `decimal`; Avro carries none for temporal types
                column.fsp = decimal if decimal is not None and decimal >= 0 else None if self._AVRO else 0
            columns.append(column)
        names = [c.name for c in columns]
        if len(set(names)) != len(names):
            raise DecodeError(p, "duplicate column names", f"{where}.columns")
        key_columns = self._key_columns(raw_indexes, set(names), where)
        schema.columns = columns
        schema.key_columns = key_columns
        schema.names = frozenset(names)
        schema.column_types = {c.name: c.canonical for c in columns}
        entries: list[dict[str, Any]] = []
        for c in columns:
            entry: dict[str, Any] = {"name": c.name, "type": c.canonical, "nullable": c.nullable}
            if c.elements is not None:
                entry["elements"] = list(c.elements)
            entries.append(entry)
        schema.table_schema = make_table_schema(schema.database, schema.table, entries, list(key_columns))
        schema.converters = []
        schema.text_columns = []
        schema.convert_one = schema.convert_pair = None  # generated on the first row (_compile_rows)
        schema.checksum = None
        for c in columns:
            convert = self._converter(c)
            if convert is None:
                schema.text_columns.append(c.name)
            else:
                schema.converters.append((c.name, convert))
        return schema

    def _key_columns(self, raw_indexes: list[Any], names: set[str], where: str) -> list[str]:
        """Primary key columns, else those of the first unique index whose columns are all NOT NULL."""
        p = self.protocol
        indexes: list[tuple[bool, bool, bool, list[str]]] = []
        for i, raw in enumerate(raw_indexes):
            w = f"{where}.indexes[{i}]"
            columns = _need(raw, "columns", list, p, w)
            if not all(type(c) is str and c in names for c in columns):
                raise DecodeError(p, "index names a column not in the table", f"{w}.columns")
            indexes.append((bool(raw.get("primary")), bool(raw.get("unique")), bool(raw.get("nullable")), columns))
        for primary, _, _, columns in indexes:
            if primary:
                return list(columns)
        for _, unique, nullable, columns in indexes:
            if unique and not nullable:
                return list(columns)
        return []

    def _converter(self, c: _Column) -> Converter | None:
        base = c.base
        if base in V.INTEGER_TYPES:
            if not c.unsigned:
                return _int_text
            convert = _unsigned_converter(V.int_bits(base))
            return _unsigned_bigint_avro(convert) if self._AVRO and base == "bigint" else convert
        if base == "bit":
            return _unsigned_converter(64)
        if base == "year":
            return _year_text
        if base == "decimal":
            return _decimal_converter(c.scale)
        if base == "float":
            return _float_text
        if base == "double":
            return _double_text
        if base == "date":
            return _date_text
        if base == "datetime":
            return _datetime_converter(c.fsp)
        if base == "timestamp":
            return self._timestamp_converter(c.fsp)
        if base == "time":
            return _time_converter(c.fsp)
        if base == "enum" and c.elements is not None:  # _build_schema refused one without elements
            return _enum_converter(c.elements)
        if base == "set" and c.elements is not None:
            return _set_converter(c.elements)
        if base in V.BINARY_TYPES:
            return _bytes_text if self._AVRO else _bytes_text_from_base64
        return None

    def _timestamp_converter(self, fsp: int | None) -> Converter:
        as_datetime = _datetime_converter(fsp)
        zones = self._zones
        default_zone = self._default_zone

        def convert(v: Any) -> str:
            if type(v) is dict:
                location, text = v["location"], v["value"]
                if type(location) is not str or type(text) is not str:
                    raise TypeError("TIMESTAMP location and value must be strings")
                try:
                    zone = zones[location]
                except KeyError:
                    zone = zones[location] = V.time_zone(location)
            elif type(v) is str:
                zone, text = default_zone, v
            else:
                raise TypeError(f"TIMESTAMP must be {{location, value}}, got {type(v).__name__}")
            if zone is None:
                return as_datetime(text)
            return V.text_timestamp_from_zone(text, zone, fsp)

        return convert


def _unsigned_bigint_avro(convert: Converter) -> Converter:
    """Avro BIGINT UNSIGNED: the UnsignedBigint record holding the value wrapped into a signed long."""

    def unwrap(v: Any) -> str:
        if type(v) is dict:
            return convert(v["value"])
        return convert(v)

    return unwrap


class SimpleJsonDecoder(_SimpleDecoder):
    """encoding-format = "json": one JSON document per message."""

    protocol = "simple-json"

    def _parse(self, value: bytes) -> dict[str, Any]:
        try:
            msg = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise DecodeError(self.protocol, f"value is not JSON: {exc}", "value") from None
        if type(msg) is not dict:
            raise DecodeError(self.protocol, f"value must be a JSON object, got {type(msg).__name__}", "value")
        return msg

    # ---- the column path ---------------------------------------------------------------------------

    def decode_columns(self, keys: Sequence[bytes | None], values: Sequence[bytes | None]) -> ColumnDecode:
        """Row messages whose schema is known, without a checksum to verify, claim check or handle-key-only,
        as RowBlocks; every other message left to `decode`. The messages are read in order, and one that the
        envelope does not admit is decoded on the spot as well, so a bootstrap or DDL teaches its schema to the
        rows after it (`decode` reads it again later, which changes nothing).

        Messages are parsed in chunks of `columns.CHUNK` (a chunk's objects stay in the CPU's caches) into one text
        array per column, schema and chunk; a chunk is read first in one pass as the schema of the chunk before it
        (`_Shape.read_typed`), else message by message. Each schema's columns are then checked and converted for the
        whole batch.
        """
        if self._compression != "none":
            return ColumnDecode([], list(range(len(values))))
        shapes: dict[tuple[str, str, int], _Shape | None] = {}
        row_wise: list[int] = []
        for start in range(0, len(values), columns.CHUNK):
            self._read_chunk(values, start, min(start + columns.CHUNK, len(values)), shapes, row_wise)
        blocks = [block for shape in shapes.values() if shape and (block := shape.block(row_wise))]
        row_wise.sort()
        return ColumnDecode(blocks, row_wise)

    def _read_chunk(
        self,
        values: Sequence[bytes | None],
        start: int,
        stop: int,
        shapes: dict[tuple[str, str, int], _Shape | None],
        row_wise: list[int],
    ) -> None:
        last = self._last_shape
        if last is not None and last in self._schemas:
            if last not in shapes:
                shapes[last] = self._shape(self._schemas[last])
            shape = shapes[last]
            if shape is not None and shape.read_typed(values, start, stop, self._verify_checksums):
                return
        members = self._by_schema(values, start, stop, row_wise)
        for key, found in members.items():
            if key not in shapes:
                shapes[key] = self._shape(self._schemas[key])
            shape = shapes[key]
            if shape is None:
                row_wise.extend(i for i, _ in found)
            else:
                shape.add(found, row_wise)
        self._last_shape = next(iter(members)) if len(members) == 1 else None

    def _by_schema(
        self, values: Sequence[bytes | None], start: int, stop: int, row_wise: list[int]
    ) -> dict[tuple[str, str, int], list[tuple[int, _Envelope]]]:
        """A chunk's row messages by schema, message by message, in order: a message the envelope does not admit is
        decoded for what it teaches (a schema) and goes to `row_wise`, with every row whose schema is not known."""
        decode, verify = _ENVELOPE.decode, self._verify_checksums
        members: dict[tuple[str, str, int], list[tuple[int, _Envelope]]] = {}
        for i in range(start, stop):
            try:  # the envelope's types admit only a row message of the usual form
                doc = decode(values[i])  # type: ignore[arg-type]  # None: TypeError
            except (*columns.UNREADABLE, TypeError):
                row_wise.append(i)
                self._learn(values[i])
                continue
            if (doc.checksum is not None and verify) or doc.claimCheckLocation or doc.handleKeyOnly:
                row_wise.append(i)
                continue
            schema = self._last_schema
            if (
                schema is None
                or schema.version != doc.schemaVersion
                or schema.table != doc.table
                or (schema.database != doc.database)
            ):
                schema = self._schemas.get((doc.database, doc.table, doc.schemaVersion))
                if schema is None:
                    row_wise.append(i)
                    continue
                self._last_schema = schema
            members.setdefault((schema.database, schema.table, schema.version), []).append((i, doc))
        return members

    def _shape(self, schema: _Schema) -> _Shape | None:
        """The column path's reader of a schema's rows; None for a column name msgspec takes for no field (a
        quote, a backslash or a control character in it), whose rows go row-wise."""
        try:
            return _Shape(schema, self._column_plan(schema))
        except ValueError:
            return None

    def _column_plan(self, schema: _Schema) -> _ColumnPlan:
        """Per column of the schema, in order: its rule, and whether it is a TIMESTAMP (sent as {location, value})."""
        converters = dict(schema.converters)
        utc_locations = V.UTC_ZONE_NAMES | ({"Local"} if self._default_zone is None else set())
        plan = _ColumnPlan([], [], utc_locations)
        for c in schema.columns:
            plan.rules.append(_column_rule(c, converters.get(c.name)))
            plan.timestamps.append(c.base == "timestamp")
        return plan


class _Envelope(msgspec.Struct, gc=False):
    """What the column path reads of a Simple-JSON row message (anything else fails to decode here): the images
    stay raw JSON until their schema's row Struct reads them."""

    version: Literal[1]
    type: Literal["INSERT", "UPDATE", "DELETE"]
    database: str
    table: str
    schemaVersion: int
    commitTs: Annotated[int, msgspec.Meta(ge=0, le=(1 << 63) - 1)]  # a TSO, as silver keeps it
    data: msgspec.Raw = msgspec.Raw(b"null")
    old: msgspec.Raw = msgspec.Raw(b"null")
    checksum: Any = None
    claimCheckLocation: Any = None
    handleKeyOnly: Any = None


_ENVELOPE = msgspec.json.Decoder(_Envelope)
_KEY_OF = operator.attrgetter("database", "table", "schemaVersion")
_ROW_WISE_OF = operator.attrgetter("claimCheckLocation", "handleKeyOnly")
_CHECKSUM_OF, _TYPE_OF, _COMMIT_TS_OF = (operator.attrgetter(f) for f in ("checksum", "type", "commitTs"))
_DATA_OF, _OLD_OF = operator.attrgetter("data"), operator.attrgetter("old")


def _typed_envelope(row: type) -> type:
    """`_Envelope` with its images read as `row`, a schema's row Struct (None where an image is absent or null)."""
    fields = [
        (f.name, row | None, None)
        if f.name in ("data", "old")
        else (f.name, f.type)
        if f.default is msgspec.NODEFAULT
        else (f.name, f.type, f.default)
        for f in msgspec.structs.fields(_Envelope)
    ]
    return msgspec.defstruct("TypedEnvelope", fields, gc=False)


@dataclass
class _ColumnPlan:
    rules: list[columns.ColumnRule]
    timestamps: list[bool]
    utc_locations: frozenset[str] | set[str]


def _column_rule(c: _Column, convert: Converter | None) -> columns.ColumnRule:
    """The column path's rule for a column: text its converter returns unchanged, as a test over a whole column."""
    if convert is None:
        return columns.AS_SENT
    base = c.base
    keep: columns.Keep | None = None
    # a DATETIME's, TIMESTAMP's or TIME's fraction: any digits when the fsp is not known
    fraction = r"(?:\.[0-9]+)?" if c.fsp is None else rf"\.{fast_paths.digit_run(c.fsp)}" if c.fsp else ""
    if base in V.INTEGER_TYPES:
        keep = columns.digits if c.unsigned else columns.signed
    elif base == "bit":
        keep = columns.digits
    elif base == "year":
        keep = columns.year
    elif base == "decimal" and c.scale is not None:
        keep = columns.matching(rf"^{fast_paths.decimal_pattern(c.scale)}$")  # its converter keeps no negative
    elif base == "double":
        keep = columns.double
    elif base == "date":
        keep = columns.DATE
    elif base in ("datetime", "timestamp"):
        keep = columns.matching(rf"^[0-9]{{4}}-[0-9]{{2}}-[0-9]{{2}} [0-9]{{2}}:[0-9]{{2}}:[0-9]{{2}}{fraction}$")
    elif base == "time":
        keep = columns.matching(rf"^[0-9]{{2}}:[0-9]{{2}}:[0-9]{{2}}{fraction}$")
    elif base in V.BINARY_TYPES:
        keep = columns.matching(_CANONICAL_BASE64)
    return columns.ColumnRule(convert, keep=keep, distinct=base in ("enum", "set", "float"))


# base64 that decodes and encodes back to itself: padding bits zero
_CANONICAL_BASE64 = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?$"
# a TIMESTAMP as Simple-JSON sends it, read from its raw JSON
_ZONED = r'^\{"location":"(?P<location>[^"\\]*)","value":"(?P<value>[^"\\]*)"\}$'


class _Shape:
    """One schema's rows in a batch, gathered chunk by chunk: message, commit ts and op per row, and per image a
    text array per column and chunk (TIMESTAMP columns: their raw JSON)."""

    def __init__(self, schema: _Schema, plan: _ColumnPlan):
        self.schema, self.plan = schema, plan
        names = {f"c{i}": c.name for i, c in enumerate(schema.columns)}
        kinds = [msgspec.Raw if ts else str | None for ts in plan.timestamps]
        row = msgspec.defstruct("Row", list(zip(names, kinds)), rename=names, forbid_unknown_fields=True, gc=False)
        self.read = msgspec.json.Decoder(list[row])  # type: ignore[valid-type]
        self.read_envelopes: msgspec.json.Decoder[Any] = msgspec.json.Decoder(_typed_envelope(row))
        self.key = (schema.database, schema.table, schema.version)
        self.kinds = [pa.binary() if ts else pa.string() for ts in plan.timestamps]
        self.messages: list[int] = []
        self.commit_ts: list[int] = []
        self.ops: list[str] = []
        self.images: dict[str, list[list[Any]]] = {"data": [], "old": []}
        self.has: dict[str, list[bool]] = {"data": [], "old": []}

    def read_typed(self, values: Sequence[bytes | None], start: int, stop: int, verify: bool) -> bool:
        """Read a chunk in one pass as this schema's (envelope and rows in one decode, the usual stream), found
        without a loop per message in Python; False, keeping nothing, when any message is not a row of this schema
        of the usual form."""
        try:
            docs = list(map(self.read_envelopes.decode, values[start:stop]))  # type: ignore[arg-type]
        except (*columns.UNREADABLE, TypeError):  # None: TypeError
            return False
        count = len(docs)
        keys = list(map(_KEY_OF, docs))
        if keys.count(self.key) != count or list(map(_ROW_WISE_OF, docs)).count((None, None)) != count:
            return False
        if verify and list(map(_CHECKSUM_OF, docs)).count(None) != count:
            return False
        ops: list[str] = list(map(_TYPE_OF, docs))
        has_data = list(map("DELETE".__ne__, ops)) if "DELETE" in ops else [True] * count
        has_old = list(map("INSERT".__ne__, ops)) if "INSERT" in ops else [True] * count
        data = list(itertools.compress(map(_DATA_OF, docs), has_data))
        old = list(itertools.compress(map(_OLD_OF, docs), has_old))
        if None in data or None in old:
            return False
        self.keep(
            range(start, stop), list(map(_COMMIT_TS_OF, docs)), ops, {"data": (has_data, data), "old": (has_old, old)}
        )
        return True

    def add(self, members: list[tuple[int, _Envelope]], row_wise: list[int]) -> None:
        ops: list[str] = [doc.type for _, doc in members]
        data = self._rows([doc.data for _, doc in members], [op != "DELETE" for op in ops])
        old = self._rows([doc.old for _, doc in members], [op != "INSERT" for op in ops])
        fits = [(d is not None) and (o is not None) for d, o in zip(data, old)]
        if not all(fits):
            row_wise.extend(i for (i, _), fit in zip(members, fits) if not fit)
            members = list(itertools.compress(members, fits))
            ops, data, old = (list(itertools.compress(x, fits)) for x in (ops, data, old))
            if not members:
                return
        images = {}
        for image, rows in (("data", data), ("old", old)):
            present = [r is not _ABSENT for r in rows]
            images[image] = (present, list(itertools.compress(rows, present)))
        self.keep([i for i, _ in members], [doc.commitTs for _, doc in members], ops, images)

    def keep(
        self,
        indices: Sequence[int],
        stamps: list[int],
        ops: list[str],
        images: dict[str, tuple[list[bool], list[Any]]],
    ) -> None:
        """Keep messages that fit the schema: per image, which messages have it and their rows, in order."""
        self.messages.extend(indices)
        self.commit_ts.extend(stamps)
        self.ops.extend(ops)
        width = len(self.kinds)
        for image, (present, rows) in images.items():
            self.has[image].extend(present)
            flat = list(itertools.chain.from_iterable(map(msgspec.structs.astuple, rows)))
            self.images[image].append(
                [
                    pa.array(list(map(bytes, flat[j::width])) if timestamp else flat[j::width], kind)
                    for j, (timestamp, kind) in enumerate(zip(self.plan.timestamps, self.kinds))
                ]
            )

    def _rows(self, raws: list[msgspec.Raw], wanted: list[bool]) -> list[Any]:
        """Each message's image: its row Struct, `_ABSENT` where the op has none, None where it does not fit."""
        picked = list(itertools.compress(raws, wanted))
        try:
            rows: list[Any] = self.read.decode(b"[" + b",".join(picked) + b"]")
        except columns.UNREADABLE:
            rows = []
            for raw in picked:
                try:
                    rows.append(self.read.decode(b"[" + bytes(raw) + b"]")[0])
                except columns.UNREADABLE:
                    rows.append(None)
        found = iter(rows)
        return [next(found) if want else _ABSENT for want in wanted]

    def block(self, row_wise: list[int]) -> RowBlock | None:
        """The schema's RowBlock; a message holding a value its converter rejects goes to `row_wise`."""
        if not self.messages:
            return None
        count = len(self.messages)
        message = pa.array(self.messages, pa.int32())
        op = pc.take(_OPS, pc.index_in(pa.array(self.ops, pa.string()), _TYPES))
        bad = pa.array(np.zeros(count, bool))
        images = {}
        for image in ("data", "old"):
            present = pa.array(self.has[image], pa.bool_())
            chunks = self.images[image]
            columns_of = []
            for j, (rule, timestamp) in enumerate(zip(self.plan.rules, self.plan.timestamps)):
                values = pa.concat_arrays([chunk[j] for chunk in chunks] or [pa.array([], self.kinds[j])])
                if timestamp:
                    column, rejected = _timestamps(values, rule, self.plan.utc_locations)
                else:
                    column, rejected = columns.converted(values, rule)
                if rejected is not None:
                    bad = pc.or_(bad, pc.replace_with_mask(pa.array(np.zeros(count, bool)), present, rejected))
                columns_of.append(_spread(column, present))
            images[image] = struct_of([c.name for c in self.schema.columns], columns_of, present)
        commit_ts = pa.array(self.commit_ts, pa.int64())
        before, after = images["old"], images["data"]
        schema = self.schema
        block = RowBlock(
            schema.database,
            schema.table,
            schema.key_columns,
            schema.column_types,
            [c.name for c in schema.columns],
            message,
            commit_ts,
            op,
            before,
            after,
            schema_version=schema.version,
        )
        return columns.without_rejected(block, bad, row_wise)


_ABSENT = object()  # an image the op does not have (an insert's old, a delete's data)
_TYPES = pa.array(list(DML_OPS), pa.string())
_OPS = pa.array(list(DML_OPS.values()), pa.string())


def _spread(column: Any, present: Any) -> Any:
    """A column of the rows that have the image, spread over every row (null where it has none)."""
    if len(column) == len(present):
        return column
    return pc.replace_with_mask(pa.nulls(len(present), pa.string()), present, column)


def _timestamps(texts: Any, rule: columns.ColumnRule, utc_locations: frozenset[str] | set[str]) -> tuple[Any, Any]:
    """A TIMESTAMP column from each value's raw JSON ({location, value}, or null): the value as sent where its
    location is UTC and its text canonical, else the converter's text of {location, value}; rows whose JSON is of
    another form, or whose value the converter rejects, are reported."""
    null = pc.equal(texts, b"null")
    parts = pc.extract_regex(texts.cast(pa.string()), _ZONED)
    location, value = parts.field("location"), parts.field("value")
    unread = pc.and_not(pc.invert(parts.is_valid()), null)
    utc = pc.is_in(location, pa.array(sorted(utc_locations), pa.string()))
    assert rule.keep is not None and rule.convert is not None
    kept = pc.fill_null(pc.and_(utc, rule.keep(value)), False)
    todo = pc.and_not(pc.and_not(parts.is_valid(), kept), null)
    out = pc.if_else(kept, value, pa.nulls(len(texts), pa.string()))
    failed = unread
    if pc.any(todo).as_py():
        out, rejected = _zoned(rule, location, value, todo, out)
        failed = pc.or_(failed, rejected)
    return out, (failed if pc.any(failed).as_py() else None)


def _zoned(rule: columns.ColumnRule, location: Any, value: Any, todo: Any, out: Any) -> tuple[Any, Any]:
    """(`out` with the rows `todo` marks converted from their {location, value} one by one, the rows whose
    value the converter rejected)."""
    convert = cast(Converter, rule.convert)  # Simple's converters take any JSON value
    results: list[str | None] = []
    rejected: list[bool] = []
    for where, what in zip(location.filter(todo).to_pylist(), value.filter(todo).to_pylist()):
        try:
            results.append(convert({"location": where, "value": what}))
            rejected.append(False)
        except _BAD_INPUT:
            results.append(None)
            rejected.append(True)
    out = pc.replace_with_mask(out, todo, pa.array(results, pa.string()))
    return out, pc.replace_with_mask(pa.array(np.zeros(len(out), bool)), todo, pa.array(rejected))


class SimpleAvroDecoder(_SimpleDecoder):
    """encoding-format = "avro": raw Avro binary of com.pingcap.simple.avro.Message, no header, no registry."""

    protocol = "simple-avro"
    _AVRO = True

    def __init__(self, options: dict[str, Any] | None = None):
        super().__init__(options)
        self._schema = message_schema()

    def _parse(self, value: bytes) -> dict[str, Any]:
        stream = io.BytesIO(value)
        try:
            # a record schema reads as a dict (fastavro's type is the union of every Avro value)
            record = cast(dict[str, Any], fastavro.schemaless_reader(stream, self._schema, None))
        except Exception as exc:  # fastavro raises EOFError, ValueError, IndexError, UnicodeDecodeError, ...
            reason = f"value is not a {MESSAGE_RECORD} Avro record: {avro.fastavro_error(exc)}"
            raise DecodeError(self.protocol, reason, "value") from None
        if stream.tell() != len(value):
            raise DecodeError(
                self.protocol, f"{len(value) - stream.tell()} trailing bytes after the Avro record", "value"
            )
        payload: dict[str, Any] = record["payload"]
        kind = record["type"]
        if kind == "WATERMARK" or kind == "BOOTSTRAP":
            payload["type"] = kind
        elif "type" not in payload or (kind == "DML") != (payload["type"] in DML_OPS):
            raise DecodeError(self.protocol, f"message type {kind} does not match its payload", "payload")
        return payload

    # ---- the column path ---------------------------------------------------------------------------

    def decode_columns(self, keys: Sequence[bytes | None], values: Sequence[bytes | None]) -> ColumnDecode:
        """Row messages whose schema is known, without a checksum to verify, claim check or handle-key-only,
        as RowBlocks; every other message left to `decode`. The batch is read at once by the column-wise Avro
        reader (`avro.read_records`); then in order, as `SimpleJsonDecoder.decode_columns` reads it: a message that
        is not a row of the usual form is decoded on the spot as well, so a bootstrap or DDL teaches its schema
        to the rows after it. Each schema's columns are then made canonical for the whole batch.
        """
        count = len(values)
        payloads = avro.Payloads.of(values) if self._compression == "none" else None
        if payloads is None:
            return ColumnDecode([], list(range(count)))
        rows = np.flatnonzero(payloads.present)
        held, bad = avro.read_records(payloads, _message_reader(), rows)
        at, dml = held["payload"].parts[_DML]
        read = np.zeros(len(at), np.bool_) if dml is None else ~bad[at] & (held["type"][at] == _DML)
        learn = np.ones(count, np.bool_)
        learn[rows[at[read]]] = False
        if dml is None:
            for i in np.flatnonzero(learn).tolist():
                self._learn(values[i])
            return ColumnDecode([], list(range(count)))
        dml["message"] = rows[at]  # each row message's index in the batch
        needs_data, needs_old = dml["type"] != _DELETE, dml["type"] != _INSERT
        usual = (
            read
            & (dml["version"] == 1)
            & (dml["commitTs"] >= 0)  # a TSO, as silver keeps it
            & (dml["claimCheckLocation"].index == 0)
            & (dml["handleKeyOnly"].index == 0)
            & ((dml["data"].index == 1) == needs_data)  # an image the op has no use for: `decode` skips it
            & ((dml["old"].index == 1) == needs_old)
        )
        if self._verify_checksums:
            usual &= dml["checksum"].index == 0
        shapes = self._shapes_of(values, payloads, dml, np.flatnonzero(usual), np.flatnonzero(learn))
        images = {name: _AvroImage.of(payloads, dml, name, usual) for name in ("data", "old")}
        taken = np.zeros(count, np.bool_)
        blocks = []
        for schema, members in shapes:
            block = self._avro_block(payloads, dml, schema, members, images)
            if block is not None:
                taken[block.message.to_numpy()] = True
                blocks.append(block)
        return ColumnDecode(blocks, np.flatnonzero(~taken).tolist())

    def _shapes_of(
        self, values: Sequence[bytes | None], payloads: avro.Payloads, dml: dict[str, Any], usual: Any, learn: Any
    ) -> list[tuple[_Schema, Any]]:
        """(schema, positions among the row messages) of the usual rows, each row read with the schema in the cache
        when it comes: the messages to `learn` from are decoded in order between the rows. The cache changes only
        there, so the rows between two of them are looked up once per distinct (database, table, version)."""
        database, wrong_database = avro.texts_of(payloads, avro.picked(dml["database"], usual))
        table, wrong_table = avro.texts_of(payloads, avro.picked(dml["table"], usual))
        fine = np.ones(len(usual), np.bool_)
        for wrong in (wrong_database, wrong_table):
            if wrong is not None:
                fine &= ~wrong
        databases, tables = pc.dictionary_encode(database), pc.dictionary_encode(table)
        versions, version_codes = np.unique(dml["schemaVersion"][usual], return_inverse=True)
        names = (databases.dictionary.to_pylist(), tables.dictionary.to_pylist())
        sizes = np.array([len(names[0]), len(names[1]), len(versions)], np.int64)
        segment = np.searchsorted(learn, dml["message"][usual])
        combined = ((segment * sizes[0] + databases.indices.to_numpy()) * sizes[1] + tables.indices.to_numpy()) * sizes[
            2
        ] + version_codes
        distinct, which = np.unique(combined, return_inverse=True)
        learned = 0
        found: list[_Schema | None] = []
        for code in distinct.tolist():
            rest, version = divmod(code, int(sizes[2]))
            rest, table_code = divmod(rest, int(sizes[1]))
            upto, database_code = divmod(rest, int(sizes[0]))
            for i in learn[learned:upto].tolist():
                self._learn(values[i])
            learned = max(learned, upto)
            found.append(self._schemas.get((names[0][database_code], names[1][table_code], int(versions[version]))))
        for i in learn[learned:].tolist():
            self._learn(values[i])
        shapes: dict[int, int] = {}  # id of a schema (each alive in `found`) -> its shape
        shape_of = np.array(
            [-1 if schema is None else shapes.setdefault(id(schema), len(shapes)) for schema in found], np.int64
        )[which]
        shape_of[~fine] = -1
        schemas = {shape: schema for schema in found if schema is not None for shape in [shapes[id(schema)]]}
        return [(schemas[k], usual[shape_of == k]) for k in range(len(shapes)) if (shape_of == k).any()]

    def _avro_block(
        self,
        payloads: avro.Payloads,
        dml: dict[str, Any],
        schema: _Schema,
        members: Any,
        images: dict[str, _AvroImage | None],
    ) -> RowBlock | None:
        """The RowBlock of one schema's rows (positions among the row messages), without the rows `decode` would
        give otherwise: an image whose columns are not exactly the schema's, a value of another branch than TiCDC
        writes for its type, or one its converter rejects."""
        kinds = self._avro_columns(schema)
        ops = dml["type"][members]
        count = len(members)
        bad = np.zeros(count, np.bool_)
        made: dict[str, tuple[list[Any], Any]] = {}
        for name, uses in (("data", ops != _DELETE), ("old", ops != _INSERT)):
            image = images[name]
            if image is None or not uses.any():
                made[name] = [pa.nulls(count, pa.string()) for _ in kinds], pa.array(uses)
                continue
            texts, wrong = image.columns(payloads, schema, kinds, members[uses])
            bad[uses] |= wrong
            made[name] = [columns.spread(text, pa.array(uses)) for text in texts], pa.array(uses)
        keep = ~bad
        if not keep.any():
            return None
        mask = pa.array(keep)
        names = [c.name for c in schema.columns]
        before, after = (
            struct_of(names, [text.filter(mask) for text in made[name][0]], made[name][1].filter(mask))
            for name in ("old", "data")
        )
        kept = members[keep]
        return RowBlock(
            schema.database,
            schema.table,
            schema.key_columns,
            schema.column_types,
            names,
            pa.array(dml["message"][kept].astype(np.int32)),
            pa.array(dml["commitTs"][kept]),
            _AVRO_OPS.take(pa.array(dml["type"][kept])),
            before,
            after,
            schema_version=schema.version,
        )

    def _avro_columns(self, schema: _Schema) -> list[tuple[int, avro.Texts]]:
        """Per column of the schema: the union branch TiCDC writes its values in, and how its text is made."""
        converters = dict(schema.converters)
        utc_locations = pa.array(
            sorted(V.UTC_ZONE_NAMES | ({"Local"} if self._default_zone is None else set())), pa.string()
        )
        return [_avro_column(c, converters.get(c.name), utc_locations) for c in schema.columns]


# The Avro column path reads a Message's payload branch and kind (both DML: 3), a row's DMLType (INSERT 0, UPDATE 1,
# DELETE 2) and each row value's union branch (null 0, then long, float, double, string, bytes, Timestamp,
# UnsignedBigint), as simple_message.avsc declares them.
_DML, _INSERT, _DELETE = 3, 0, 2
_AVRO_OPS = pa.array(["insert", "update", "delete"], pa.string())
_LONG, _FLOAT, _DOUBLE, _STRING, _BYTES, _TIMESTAMP, _UNSIGNED_BIGINT = range(1, 8)


@lru_cache(maxsize=1)
def _message_reader() -> avro.Node:
    """The column-wise reader of com.pingcap.simple.avro.Message; it refuses a bootstrap (the only payload with
    arrays), which `decode` reads."""
    return avro.named_readers(json.loads(MESSAGE_SCHEMA_PATH.read_text()))[MESSAGE_RECORD]


@dataclass(frozen=True)
class _AvroImage:
    """One image field (`data` or `old`) of a batch's usual row messages: their map entries in the payloads'
    order, each with its row (position among the row messages), its key (a code of `names`, -1 where it is not
    UTF-8) and its value (its union branch, and its place among what that branch read)."""

    rows: int  # row messages in the batch
    position: Any
    code: Any
    names: list[str]
    branch: Any
    at: Any
    reads: list[Any]

    @staticmethod
    def of(payloads: avro.Payloads, dml: dict[str, Any], name: str, usual: Any) -> _AvroImage | None:
        sel, entries = dml[name].parts[1]
        if entries is None or not len(entries.owner):
            return None
        position = sel[entries.owner]
        order = np.empty(len(position), np.int64)
        order[entries.order] = np.arange(len(position))
        order = order[usual[position[order]]]
        keys, wrong = avro.texts_of(payloads, avro.picked(entries.key, order))
        encoded = pc.dictionary_encode(keys)
        code = encoded.indices.to_numpy().astype(np.int64)
        if wrong is not None:
            code[wrong] = -1
        value = entries.value
        at = np.zeros(len(position), np.int64)
        for taken, _ in value.parts:
            at[taken] = np.arange(len(taken))
        reads = [held for _, held in value.parts]
        return _AvroImage(
            len(usual), position[order], code, encoded.dictionary.to_pylist(), value.index[order], at[order], reads
        )

    def columns(
        self, payloads: avro.Payloads, schema: _Schema, kinds: list[tuple[int, avro.Texts]], use: Any
    ) -> tuple[list[Any], Any]:
        """(each column's text over the rows `use` (positions, ascending), which of them `decode` gives otherwise):
        a row must hold every column of the schema once and no other, each value in its column's branch or null."""
        width = len(kinds)
        index = {c.name: j for j, c in enumerate(schema.columns)}
        column_of = np.array([index.get(name, -1) for name in self.names] + [-1], np.int64)  # code -1: the last
        slot_of = np.full(self.rows, -1, np.int64)
        slot_of[use] = np.arange(len(use))
        mine = np.flatnonzero(slot_of[self.position] >= 0)
        slot, column = slot_of[self.position[mine]], column_of[self.code[mine]]
        wrong = np.zeros(len(use), np.bool_)
        wrong[slot[column < 0]] = True
        known = column >= 0
        cells = slot[known] * width + column[known]
        wrong |= (np.bincount(cells, minlength=len(use) * width).reshape(len(use), width) != 1).any(axis=1)
        entry = np.zeros(len(use) * width, np.int64)
        entry[cells] = mine[known]
        good = np.flatnonzero(~wrong)
        texts = []
        for j, (branch, make) in enumerate(kinds):
            chosen = entry[good * width + j]
            took = self.branch[chosen]
            valued = took == branch
            wrong[good[~valued & (took != 0)]] = True
            if not valued.any():
                texts.append(pa.nulls(len(use), pa.string()))
                continue
            text, rejected = make(payloads, avro.picked(self.reads[branch], self.at[chosen[valued]]))
            if rejected is not None:
                wrong[good[valued][rejected]] = True
            present = np.zeros(len(use), np.bool_)
            present[good[valued]] = True
            texts.append(columns.spread(text, pa.array(present)))
        return texts, wrong


def _avro_column(c: _Column, convert: Converter | None, utc_locations: Any) -> tuple[int, avro.Texts]:
    """(the union branch TiCDC writes a column's values in (`avro_value` in its encoder), how the column path makes
    their text as the column's converter does)."""
    base = c.base
    if base == "bigint" and c.unsigned:
        return _UNSIGNED_BIGINT, lambda payloads, held: avro.unsigned_texts(payloads, held["value"])
    if base in V.INTEGER_TYPES:
        return _LONG, _avro_unsigned(V.int_bits(base)) if c.unsigned else avro.signed_texts
    if base == "bit":
        return _LONG, avro.unsigned_texts
    if base == "year":
        return _LONG, _avro_years
    if base == "enum" and c.elements is not None:
        return _LONG, _avro_enum(c.elements)
    if base in ("set", "float", "double") and convert is not None:
        if base == "set":
            return _LONG, _avro_set(convert)
        return (_FLOAT, avro.float_texts(convert, 32)) if base == "float" else (_DOUBLE, avro.float_texts(convert, 64))
    if base in V.BINARY_TYPES:
        return _BYTES, avro.blob_texts
    rule = _column_rule(c, convert)
    if base == "timestamp":
        return _TIMESTAMP, _avro_timestamps(rule, utc_locations)
    return _STRING, avro.rule_texts(rule)


def _avro_unsigned(bits: int) -> avro.Texts:
    """An unsigned integer below 64 bits: a negative one unwrapped as `_unsigned_converter` does, or rejected."""

    def texts(payloads: avro.Payloads, values: Any) -> tuple[Any, Any]:
        number = np.where(values < 0, values + (1 << bits), values)
        return pa.array(number).cast(pa.string()), values < -(1 << (bits - 1))

    return texts


def _avro_years(payloads: avro.Payloads, values: Any) -> tuple[Any, Any]:
    array = pa.array(values)
    text = pc.utf8_lpad(array.cast(pa.string()), 4, "0")
    return columns.by_value(array, text, pa.array(values < 0), _year_text)[0], None  # a negative one: `-005`


def _avro_enum(elements: list[str]) -> avro.Texts:
    labels = pa.array(["", *elements], pa.string())

    def texts(payloads: avro.Payloads, values: Any) -> tuple[Any, Any]:
        wrong = (values < 0) | (values > len(elements))
        return labels.take(pa.array(np.where(wrong, 0, values))), wrong

    return texts


def _avro_set(convert: Converter) -> avro.Texts:
    """SET bitmasks: the converter once per distinct mask."""

    def texts(payloads: avro.Payloads, values: Any) -> tuple[Any, Any]:
        array = pa.array(values)
        every = pa.array(np.ones(len(values), np.bool_))
        out, rejected = columns.by_value(array, array.cast(pa.string()), every, convert)
        return out, None if rejected is None else rejected.to_numpy(zero_copy_only=False)

    return texts


def _avro_timestamps(rule: columns.ColumnRule, utc_locations: Any) -> avro.Texts:
    """Timestamp records: the value as sent where its location is UTC and its text canonical, else the
    converter's text of {location, value}, value by value."""
    keep = cast(columns.Keep, rule.keep)

    def texts(payloads: avro.Payloads, held: Any) -> tuple[Any, Any]:
        location, wrong = avro.texts_of(payloads, held["location"])
        value, wrong_value = avro.texts_of(payloads, held["value"])
        if wrong_value is not None:
            wrong = wrong_value if wrong is None else wrong | wrong_value
        todo = pc.invert(pc.and_(pc.is_in(location, utc_locations), pc.fill_null(keep(value), False)))
        if not pc.any(todo).as_py():
            return value, wrong
        value, rejected = _zoned(rule, location, value, todo, value)
        rejected = rejected.to_numpy(zero_copy_only=False)
        return value, rejected if wrong is None else wrong | rejected

    return texts


__all__ = ["SimpleAvroDecoder", "SimpleJsonDecoder", "message_schema", "names_from_sql"]
