"""Canal-JSON (TiCDC `protocol=canal-json`): one JSON object per Kafka value, key empty.

What the messages carry and what they lose is documented once, in the docstring of
`ticdc_devkit.simulator.canal_json.expected`. This module turns a message into canonical change
events; per-column converters are built once per distinct `mysqlType` map and cached, so the
per-value work is one dict lookup and, for non-text columns, one small function call.
"""

from __future__ import annotations

import datetime as dt
import itertools
import operator
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Annotated, Any, Literal, Protocol, cast
from zoneinfo import ZoneInfoNotFoundError

import msgspec
import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs import ddl
from spark_jobs.canonical.blocks import RowBlock, struct_of
from spark_jobs.canonical.events import ChangeEvent
from spark_jobs.canonical.values import (
    CHAR_TYPES,
    INTEGER_TYPES,
    canonical_type,
    decimal_scale,
    enum_elements,
    int_bits,
    parse_type,
    text_bytes,
    text_decimal,
    text_double,
    text_enum,
    text_float,
    text_set,
    text_timestamp_from_zone,
    text_unsigned,
    text_year,
    time_zone,
)
from spark_jobs.codecs import ColumnDecode, Headers, columns, fast_paths
from spark_jobs.codecs.large_message import COMPRESSIONS, compress, decompress, read_claim_check
from spark_jobs.errors import ConfigError, DecodeError

PROTOCOL = "canal-json"
WATERMARK_TYPE = "TIDB_WATERMARK"
_ROW_OPS = {"INSERT": "insert", "UPDATE": "update", "DELETE": "delete"}
# Exceptions a converter or a malformed document may raise; all become a DecodeError.
_BAD_INPUT = (ValueError, TypeError, KeyError, IndexError, AttributeError, ArithmeticError)
_TYPE_CACHE_LIMIT = 4096

# a column's converter: its text -> canonical text (ValueError and the like for a bad value)
Converter = Callable[[str], str]
# the generated row converters: `one(row)` and `pair(data, old)`, True when they converted everything
_One = Callable[[Any], bool]
_Pair = Callable[[Any, Any], bool]


class _Tagged(Protocol):
    """A converter made per column type, tagged with the `kind` of inline code `_column_code` writes for it."""

    kind: str

    def __call__(self, v: str, /) -> str: ...


class _Timestamp(_Tagged, Protocol):
    """`_timestamp_in`'s converter in a zone: the column path moves text to UTC once per distinct `minute`."""

    minute: Callable[[str], str | None]


class _DecimalConverter(_Tagged, Protocol):
    """`_decimal_of`'s converter: the generated code tests a text against the shape of its `scale`."""

    scale: int | None


# ---- per-value converters (str -> canonical str); each raises ValueError on a bad value ----------


def _signed(v: str) -> str:
    if v.isdigit() and v.isascii():
        return v if v[0] != "0" or len(v) == 1 else str(int(v))
    if v[:1] == "-" and v[1:].isdigit() and v.isascii():
        return str(int(v))
    raise ValueError(f"not an integer: {v!r}")


def _unsigned_of(bits: int) -> _Tagged:
    def convert(v: str) -> str:
        if v.isdigit() and v.isascii():
            return v if v[0] != "0" or len(v) == 1 else str(int(v))
        return text_unsigned(_signed(v), bits)

    tagged = cast(_Tagged, convert)
    tagged.kind = "integer"
    return tagged


_unsigned_64 = _unsigned_of(64)


def _bit(v: str) -> str:
    if v.isdigit() and v.isascii():
        return str(int(v))
    raise ValueError(f"not a BIT value: {v!r}")


def _year(v: str) -> str:
    return text_year(_signed(v))


def _decimal_of(scale: int | None) -> _DecimalConverter:
    def convert(v: str) -> str:
        digits = v[1:] if v[:1] == "-" else v
        whole, dot, fraction = digits.partition(".")
        if (
            whole.isdigit()
            and digits.isascii()
            and (whole[0] != "0" or len(whole) == 1)
            and (fraction.isdigit() if dot else scale in (None, 0))
            and (scale is None or len(fraction) == scale)
            and not (digits is not v and digits.strip("0.") == "")
        ):
            return v
        d = Decimal(v)
        if not d.is_finite():
            raise ValueError(f"not a decimal: {v!r}")
        return text_decimal(d, scale)

    tagged = cast(_DecimalConverter, convert)
    tagged.kind, tagged.scale = "decimal", scale
    return tagged


def _date(v: str) -> str:
    if len(v) == 10 and v[4] == "-" and v[7] == "-":
        return v
    raise ValueError(f"not a DATE: {v!r}")


def _datetime(v: str) -> str:
    if len(v) >= 19 and v[10] == " " and v[13] == ":" and v[4] == "-":
        return v
    raise ValueError(f"not a DATETIME: {v!r}")


def _time(v: str) -> str:
    if v.count(":") == 2:
        return v
    raise ValueError(f"not a TIME: {v!r}")


def _timestamp_in(zone: dt.tzinfo | None) -> Converter:
    """TIMESTAMP text in the changefeed's zone -> UTC text.

    The zone offset is looked up once per local minute (offsets and DST transitions fall on whole
    minutes); the seconds and fraction are carried over as sent. A minute whose offset has seconds
    (historic local mean time) is converted value by value.
    """
    if zone is None:
        return _datetime
    utc_minutes: dict[str, str | None] = {}

    def utc_minute(minute: str) -> str | None:
        """The UTC `YYYY-MM-DD HH:MM` of a local one, None where the offset has seconds."""
        start = text_timestamp_from_zone(minute + ":00", zone)
        return start[:16] if start.endswith(":00") else None

    def convert(v: str) -> str:
        _datetime(v)
        minute = v[:16]
        utc = utc_minutes.get(minute, "")
        if utc == "":
            if len(utc_minutes) >= 65536:
                utc_minutes.clear()
            utc = utc_minutes[minute] = utc_minute(minute) if not v.startswith("0000") else None
        if utc is None:
            return text_timestamp_from_zone(v, zone)
        return utc + v[16:]

    tagged = cast(_Timestamp, convert)
    tagged.kind, tagged.minute = "timestamp", utc_minute
    return tagged


def _labels_of(base: str, elements: list[str] | None) -> Converter:
    """ENUM index / SET bitmask text -> its labels; without the elements (no content-compatible), the number."""
    if elements is None:
        return _bit
    text_of: Callable[[int, list[str]], tuple[str, bool]]
    if base == "enum":
        what, greatest, text_of = "ENUM index", len(elements), text_enum
    else:
        what, greatest, text_of = "SET bitmask", (1 << len(elements)) - 1, text_set

    def convert(v: str) -> str:
        number = int(_bit(v))
        if number > greatest:
            raise ValueError(f"{what} {number} beyond {len(elements)} elements")
        return text_of(number, elements)[0]

    tagged = cast(_Tagged, convert)
    tagged.kind = "memo"
    return tagged


def _binary(v: str) -> str:
    return text_bytes(v.encode("latin-1"))


class _ColumnTypes:
    """Converters, canonical types and flags for one `mysqlType` map (cached per distinct map)."""

    __slots__ = (
        "column_types",
        "converters",
        "converting",
        "envelope_decoder",
        "flags",
        "integers",
        "mysql_types",
        "one",
        "pair",
        "partial_rows",
        "row_type",
        "rows",
        "rules",
    )

    def __init__(self, mysql_types: dict[str, str], zone: dt.tzinfo | None):
        self.converters: dict[str, Converter | None] = {}  # None: the text passes as sent
        self.column_types: dict[str, str] = {}
        flags: set[str] = set()
        for name, definition in mysql_types.items():
            if type(definition) is not str:
                raise DecodeError(PROTOCOL, f"mysqlType of {name!r} is not a string", f"mysqlType.{name}")
            try:
                self.converters[name], partial, enum_index = _converter(definition, zone)
                self.column_types[name] = canonical_type(definition)
            except _BAD_INPUT:
                raise DecodeError(PROTOCOL, f"unknown mysqlType {definition!r}", f"mysqlType.{name}") from None
            if partial:
                flags.add("types_partial")
            if enum_index:
                flags.add("enum_index")
        self.flags = tuple(sorted(flags))
        # integer columns whose plain digits are already canonical: checked inline, converted only if not
        self.integers = [
            (n, c)
            for n, c in self.converters.items()
            if c is not None and (c is _signed or c is _unsigned_64 or getattr(c, "kind", None) == "integer")
        ]
        self.converting = [(n, c) for n, c in self.converters.items() if c is not None and (n, c) not in self.integers]
        self.mysql_types = dict(mysql_types)
        self.one: _One | None = None  # generated on the first row (compile_rows), with pair
        self.pair: _Pair | None = None
        self.rules = [_column_rule(c) for c in self.converters.values()]
        # the column path's decoders of a message's `data` or `old`: rows of exactly these columns, each text or
        # null; an `old` of only some of them (only-output-updated-columns) as `partial_rows`, the rest UNSET
        # None for a column name msgspec takes for no field (a quote, a backslash or a control character in it):
        # those rows go row-wise
        names = {f"c{i}": name for i, name in enumerate(self.converters)}
        self.rows: msgspec.json.Decoder[Any] | None = None
        self.envelope_decoder: msgspec.json.Decoder[Any] | None = None
        try:
            self.row_type = msgspec.defstruct(
                "Row", [(f, str | None) for f in names], rename=names, forbid_unknown_fields=True, gc=False
            )
            partial_row = msgspec.defstruct(
                "PartialRow",
                [(f, str | None | msgspec.UnsetType, msgspec.UNSET) for f in names],
                rename=names,
                forbid_unknown_fields=True,
                gc=False,
            )
        except ValueError:
            return
        self.rows = msgspec.json.Decoder(list[tuple[self.row_type, ...]])  # type: ignore[name-defined]
        self.partial_rows = msgspec.json.Decoder(tuple[partial_row, ...])  # type: ignore[valid-type]

    def envelope(self) -> msgspec.json.Decoder[Any]:
        """A decoder of a whole row message of this shape in one pass: the envelope with `data` and `old` as rows of
        exactly these columns (made on first use; only for a map with `rows`)."""
        if self.envelope_decoder is None:
            rows = tuple[self.row_type, ...]  # type: ignore[name-defined]
            typed = msgspec.defstruct(
                "TypedEnvelope",
                [("data", rows, ()), ("old", rows | None, None)],
                bases=(_Envelope,),
                gc=False,
            )
            self.envelope_decoder = msgspec.json.Decoder(typed)
        return self.envelope_decoder

    def compile_rows(self) -> _One:
        """Give this map its generated `one` / `pair` (see `_row_source`); returns `one`."""
        columns = self.integers + self.converting
        names = [n for n, _ in columns]
        kinds = [_KINDS.get(c) or getattr(c, "kind", "call") for _, c in columns]
        text_names = [n for n, c in self.converters.items() if c is None]
        make = fast_paths.generate(PROTOCOL, _row_source(names, kinds, text_names), {"_BAD_INPUT": _BAD_INPUT})
        if make is None:
            self.one = self.pair = _no_fast_path
            return self.one
        args: list[object] = [fast_paths.DOUBLE_SHAPE] + [c for _, c in columns]
        args += [
            fast_paths.decimal_shape(cast(_DecimalConverter, c).scale)
            for (_, c), k in zip(columns, kinds)
            if k == "decimal"
        ]
        args += [{} for k in kinds if k == "memo"]
        rows: tuple[_One, _Pair] = make(*args)
        self.one, self.pair = rows
        return rows[0]


# ---- row converters generated per mysqlType map ----------------------------------------------------
# Per distinct mysqlType map, on its first row, two functions are generated (`fast_paths.generate`)
# for its exact columns: `one(row)` converts one row image in place, `pair(data, old)` an update's
# images. They are the fast path of `_convert_row`, all or nothing: they convert into locals and
# write the row only when every column succeeded, returning True; on anything unusual (a column
# missing or extra, a value not text, any exception) they return False with the rows untouched, and
# `_convert_row` then converts them or raises its precise DecodeError. Per column the code is the
# converter inlined, with fast paths for text already canonical (digit-only integers, decimals at the
# column's scale, doubles in Python's shortest form, dates and datetimes as sent); ENUM and SET texts
# are memoised per map. In `pair`, an old value equal to the data value of its column takes the
# data's text.

_MEMO_LIMIT = 4096


def _no_fast_path(*images: Any) -> bool:
    """`one` and `pair` under TICDC_CODECS_PRECISE_ONLY: they convert nothing, so `_convert_row` does."""
    return False


def _column_code(kind: str, i: int, v: str) -> tuple[str, str]:
    """("keep", condition under which converter c{i} returns the text `v` as is) or ("memo", "")."""
    if kind == "memo":
        return "memo", ""
    if kind == "decimal":
        return "keep", f"shape{i}({v})"
    if kind == "datetime":
        return "keep", f"type({v}) is str and len({v}) >= 19 and {v}[10] == ' ' and {v}[13] == ':' and {v}[4] == '-'"
    if kind == "time":
        return "keep", f"type({v}) is str and {v}.count(':') == 2"
    return "keep", fast_paths.canonical_test("integer" if kind == "bit" else kind, v) or "False"


def _row_source(names: list[str], kinds: list[str], text_names: list[str]) -> str:
    """Source of `make(...) -> (one, pair)`: names/kinds are the converting columns in conversion order."""
    count = len(names) + len(text_names)
    params = ["double_shape"] + [f"c{i}" for i in range(len(names))]
    params += [f"shape{i}" for i, k in enumerate(kinds) if k == "decimal"]
    params += [f"memo{i}" for i, k in enumerate(kinds) if k == "memo"]
    every = names + text_names

    def fetch(row: str, var: str) -> list[str]:
        return [
            f"    if type({row}) is not dict or len({row}) != {count}:",
            "        return False",
            "    try:",
            "        pass",
            *[f"        {var}{i} = {row}[{name!r}]" for i, name in enumerate(every)],
            "    except KeyError:",
            "        return False",
        ]

    def convert(var: str, out: str, same_as: str | None) -> list[str]:
        lines = ["    try:", "        pass"]
        for i in range(len(names), count):
            lines += [f"        if {var}{i} is not None and type({var}{i}) is not str:", "            return False"]
        for i, kind in enumerate(kinds):
            v, x = f"{var}{i}", f"{out}{i}"
            how, condition = _column_code(kind, i, v)
            if how == "keep":
                body = [
                    f"if not ({condition}):",
                    f"    if type({v}) is not str:",
                    "        return False",
                    f"    {x} = c{i}({v})",
                ]
            else:
                body = [
                    f"{x} = memo{i}.get({v})",
                    f"if {x} is None:",
                    f"    if type({v}) is not str:",
                    "        return False",
                    f"    {x} = c{i}({v})",
                    f"    if len(memo{i}) < {_MEMO_LIMIT}:",
                    f"        memo{i}[{v}] = {x}",
                ]
            lines.append(f"        {x} = {v}")
            if same_as is not None:
                lines += [
                    f"        if type({v}) is str and {v} == {same_as}{i}:",
                    f"            {x} = x{i}",
                    f"        elif {v} is not None:",
                ]
                lines += ["            " + line for line in body]
            else:
                lines.append(f"        if {v} is not None:")
                lines += ["            " + line for line in body]
        lines += ["    except BAD:", "        return False"]
        return lines

    def write(row: str, var: str, out: str) -> list[str]:
        return [
            line
            for i, name in enumerate(names)
            for line in (f"    if {out}{i} is not {var}{i}:", f"        {row}[{name!r}] = {out}{i}")
        ]

    lines = [
        f"def make({', '.join(params)}):",
        "  BAD = _BAD_INPUT",
        "  def one(row):",
        *fetch("row", "v"),
        *convert("v", "x", None),
        *write("row", "v", "x"),
        "    return True",
        "  def pair(data, old):",
        *fetch("data", "v"),
        *convert("v", "x", None),
        *fetch("old", "w"),
        *convert("w", "y", "v"),
        *write("data", "v", "x"),
        *write("old", "w", "y"),
        "    return True",
        "  return one, pair",
    ]
    return "\n".join(lines) + "\n"


def _converter(definition: str, zone: dt.tzinfo | None) -> tuple[Converter | None, bool, bool]:
    """(converter, scale unknown, enum index only) for one column's mysqlType text."""
    base, args, unsigned = parse_type(definition)
    lowered = definition.lower()
    if "binary" in lowered or "blob" in lowered:
        return _binary, False, False
    if base in INTEGER_TYPES:
        if not unsigned:
            return _signed, False, False
        return (_unsigned_64 if base == "bigint" else _unsigned_of(int_bits(base))), False, False
    if base in CHAR_TYPES or base in ("json", "var_string", "vector"):
        return None, False, False
    if base == "decimal":
        scale = decimal_scale(definition)
        return _decimal_of(scale), scale is None, False
    if base in ("enum", "set"):
        elements = enum_elements(definition) if args is not None else None
        return _labels_of(base, elements), False, elements is None
    simple: dict[str, Converter] = {
        "float": text_float,
        "double": text_double,
        "bit": _bit,
        "year": _year,
        "date": _date,
        "datetime": _datetime,
        "time": _time,
    }
    if base in simple:
        return simple[base], False, False
    if base == "timestamp":
        return _timestamp_in(zone), False, False
    raise ValueError(f"unknown MySQL type {definition!r}")


_KINDS: dict[Converter, str] = {
    _signed: "integer",
    _bit: "bit",
    _year: "year",
    _date: "date",
    _datetime: "datetime",
    _time: "time",
    text_double: "double",
}


def _column_rule(convert: Converter | None) -> columns.ColumnRule:
    """The column path's rule for a converter of `_converter`: the text it keeps as sent, as an RE2 pattern."""
    if convert is None:
        return columns.AS_SENT
    kind = _KINDS.get(convert) or getattr(convert, "kind", None)
    keep: dict[str | None, columns.Keep] = {
        "integer": columns.signed if convert is _signed else columns.digits,
        "bit": columns.digits,
        "year": columns.year,
        "date": columns.DATE,
        "datetime": columns.DATETIME,
        "time": columns.TIME,
        "double": columns.double,
    }
    if kind in keep:
        return columns.ColumnRule(convert, keep=keep[kind])
    if kind == "decimal":
        return columns.ColumnRule(convert, keep=columns.decimal(cast(_DecimalConverter, convert).scale))
    if kind == "timestamp":
        minute = cast(_Timestamp, convert).minute
        return columns.ColumnRule(convert, keep=columns.DATETIME, minute=minute)
    # ENUM and SET labels, FLOAT: few distinct values; BINARY: each value
    return columns.ColumnRule(convert, distinct=convert is not _binary)


# ---- the decoder ---------------------------------------------------------------------------------


def _zone(name: str) -> dt.tzinfo | None:
    try:
        return time_zone(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"option 'time-zone' for protocol {PROTOCOL}: unknown time zone {name!r}") from None


class CanalJsonDecoder:
    """TiCDC Canal-JSON messages -> canonical change events."""

    protocol = PROTOCOL
    OPTIONS: dict[str, tuple[type, Any]] = {
        "enable-tidb-extension": (bool, False),
        "content-compatible": (bool, False),
        "only-output-updated-columns": (bool, False),
        "large-message-handle-compression": (str, "none"),
        "claim-check-raw-value": (bool, False),
        "time-zone": (str, "UTC"),
    }

    def __init__(self, options: dict[str, Any]):
        self._compression = options.get("large-message-handle-compression") or "none"
        if self._compression not in COMPRESSIONS:
            raise ConfigError(
                f"option 'large-message-handle-compression' for protocol {PROTOCOL} must be one of "
                f"{', '.join(COMPRESSIONS)}, got {self._compression!r}"
            )
        self._old_is_partial = bool(options.get("only-output-updated-columns") or options.get("content-compatible"))
        self._claim_check_raw = bool(options.get("claim-check-raw-value"))
        self._zone = _zone(options.get("time-zone") or "UTC")
        self._types: dict[tuple[tuple[str, str], ...], _ColumnTypes] = {}  # by the mysqlType map's items
        self._last_types: dict[tuple[str | None, str | None], _ColumnTypes] = {}  # by (database, table)
        # the column path's shape of the last chunk that held one: the next chunk is read as that shape first
        self._last_shape: tuple[_ShapeKey, _ColumnTypes] | None = None

    def decode(self, key: bytes | None, value: bytes | None, headers: Headers = None) -> list[ChangeEvent]:
        if not value:
            raise DecodeError(PROTOCOL, "message has no value", "value")
        events: list[ChangeEvent] = []
        if self._compression == "none":
            try:  # the usual message: one JSON document; anything else goes through _documents
                doc = orjson.loads(value)
            except orjson.JSONDecodeError:
                pass
            else:
                self._decode_document(doc, events, False)
                return events
        for doc in self._documents(value):
            self._decode_document(doc, events, claim_checked=False)
        return events

    def _documents(self, value: bytes) -> list[Any]:
        if self._compression != "none":
            value = decompress(PROTOCOL, value, self._compression)
        try:
            return [orjson.loads(value)]
        except orjson.JSONDecodeError as exc:
            error = exc
        if b"\n" in value:  # several messages joined by "\n" (TiCDC's batch/terminator framing)
            try:
                return [orjson.loads(line) for line in value.split(b"\n") if line.strip()]
            except orjson.JSONDecodeError:
                pass
        raise DecodeError(PROTOCOL, f"value is not JSON: {error}", "value")

    def _decode_document(self, doc: Any, out: list[ChangeEvent], claim_checked: bool) -> None:
        if type(doc) is not dict:
            raise DecodeError(PROTOCOL, f"message is a JSON {type(doc).__name__}, not an object", "value")
        tidb = doc.get("_tidb")
        if tidb is not None:
            if type(tidb) is not dict:
                raise DecodeError(PROTOCOL, "_tidb is not an object", "_tidb")
            location = tidb.get("claimCheckLocation")
            if location is not None:
                if claim_checked or type(location) is not str or not location:
                    raise DecodeError(PROTOCOL, "claimCheckLocation is not a file location", "_tidb.claimCheckLocation")
                self._decode_claim_check(location, out)
                return
        is_ddl = doc.get("isDdl")
        kind = doc.get("type")
        if type(is_ddl) is not bool:
            raise DecodeError(PROTOCOL, f"isDdl must be a boolean, got {_shown(is_ddl)}", "isDdl")
        if type(kind) is not str:
            raise DecodeError(PROTOCOL, f"type must be a string, got {_shown(kind)}", "type")
        if is_ddl:
            out.append(self._ddl(doc, tidb))
        elif kind == WATERMARK_TYPE:
            ts = tidb.get("watermarkTs", 0) if tidb is not None else None
            if type(ts) is not int or ts < 0:
                raise DecodeError(
                    PROTOCOL, f"watermarkTs must be a non-negative integer, got {_shown(ts)}", "_tidb.watermarkTs"
                )
            out.append(ChangeEvent(kind="watermark", commit_ts=ts))
        else:
            op = _ROW_OPS.get(kind)
            if op is None:
                raise DecodeError(PROTOCOL, f"unknown event type {kind!r}", "type")
            self._rows(doc, op, tidb, out, claim_checked)

    def _decode_claim_check(self, location: str, out: list[ChangeEvent]) -> None:
        _, value = read_claim_check(PROTOCOL, location, self._claim_check_raw)
        if self._compression != "none":
            value = decompress(PROTOCOL, value, self._compression)
        try:
            doc = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise DecodeError(
                PROTOCOL, f"claim-check file {location} holds no JSON message: {exc}", "_tidb.claimCheckLocation"
            ) from None
        self._decode_document(doc, out, claim_checked=True)

    def _commit_ts(self, doc: dict[str, Any], tidb: dict[str, Any] | None) -> tuple[int, bool]:
        """(commit_ts, inferred): `_tidb.commitTs`, else the millisecond `es` shifted into a TSO."""
        if tidb is not None and "commitTs" in tidb:
            ts = tidb["commitTs"]
            if type(ts) is not int or ts < 0:
                raise DecodeError(
                    PROTOCOL, f"commitTs must be a non-negative integer, got {_shown(ts)}", "_tidb.commitTs"
                )
            return ts, False
        es = doc.get("es")
        if type(es) is not int or es < 0:
            raise DecodeError(PROTOCOL, f"es must be a non-negative integer, got {_shown(es)}", "es")
        return es << 18, True

    def _names(self, doc: dict[str, Any]) -> tuple[str | None, str | None]:
        database, table = doc.get("database"), doc.get("table")
        if type(database) is not str:
            raise DecodeError(PROTOCOL, f"database must be a string, got {_shown(database)}", "database")
        if type(table) is not str:
            raise DecodeError(PROTOCOL, f"table must be a string, got {_shown(table)}", "table")
        return database or None, table or None

    def _ddl(self, doc: dict[str, Any], tidb: dict[str, Any] | None) -> ChangeEvent:
        database, table = self._names(doc)
        sql = doc.get("sql")
        if type(sql) is not str or not sql.strip():
            raise DecodeError(PROTOCOL, f"a DDL needs its statement in sql, got {_shown(sql)}", "sql")
        commit_ts, inferred = self._commit_ts(doc, tidb)
        return ChangeEvent(
            kind="ddl",
            database=database,
            table=table,
            commit_ts=commit_ts,
            ddl_type=ddl.classify(sql),
            ddl_sql=sql,
            flags=["commit_ts_inferred"] if inferred else [],
        )

    def _column_types(self, database: str | None, table: str | None, mysql_types: Any) -> _ColumnTypes:
        """Converters for this mysqlType map: the table's last map if equal, else by the map's items."""
        if type(mysql_types) is not dict:
            raise DecodeError(PROTOCOL, f"mysqlType must be an object, got {_shown(mysql_types)}", "mysqlType")
        last = self._last_types.get((database, table))
        if last is not None and last.mysql_types == mysql_types:
            return last
        found = self._types_by_items(mysql_types)
        if len(self._last_types) >= _TYPE_CACHE_LIMIT:
            self._last_types.clear()
        self._last_types[(database, table)] = found
        return found

    def _types_by_items(self, mysql_types: dict[str, Any]) -> _ColumnTypes:
        if not set(map(type, mysql_types.values())) <= _TEXT:  # the cache key must be hashable
            name = next(n for n, v in mysql_types.items() if type(v) is not str)
            raise DecodeError(PROTOCOL, f"mysqlType of {name!r} is not a string", f"mysqlType.{name}")
        cache_key = tuple(mysql_types.items())
        found = self._types.get(cache_key)
        if found is None:
            if len(self._types) >= _TYPE_CACHE_LIMIT:
                self._types.clear()
            found = self._types[cache_key] = _ColumnTypes(mysql_types, self._zone)
        return found

    def _rows(
        self, doc: dict[str, Any], op: str, tidb: dict[str, Any] | None, out: list[ChangeEvent], claim_checked: bool
    ) -> None:
        # the checks of _names, _commit_ts and _column_types inlined, in their order, for the usual case
        database, table = doc.get("database"), doc.get("table")
        if type(database) is str and type(table) is str:
            database, table = database or None, table or None
        else:
            database, table = self._names(doc)
        ts = tidb.get("commitTs", _MISSING) if tidb is not None else _MISSING
        if type(ts) is int and ts >= 0:
            commit_ts, inferred = ts, False
        else:
            commit_ts, inferred = self._commit_ts(doc, tidb)
        mysql_types = doc.get("mysqlType")
        types = self._last_types.get((database, table)) if type(mysql_types) is dict else None
        if types is None or types.mysql_types != mysql_types:
            types = self._column_types(database, table, mysql_types)
        key_columns = doc.get("pkNames")
        if key_columns is None:
            key_columns = []
        elif type(key_columns) is not list or not (
            (len(key_columns) == 1 and type(key_columns[0]) is str) or set(map(type, key_columns)) <= _TEXT
        ):
            raise DecodeError(PROTOCOL, f"pkNames must be a list of names, got {_shown(key_columns)}", "pkNames")
        data = doc.get("data")
        if type(data) is not list or not data:
            raise DecodeError(PROTOCOL, f"data must be a non-empty list of rows, got {_shown(data)}", "data")
        flags = types.flags
        if inferred or claim_checked or (tidb is not None and tidb.get("onlyHandleKey") is True):
            extra = ["commit_ts_inferred"] if inferred else []
            if tidb is not None and tidb.get("onlyHandleKey") is True:
                extra.append("handle_key_only")
            if claim_checked:
                extra.append("claim_check")
            flags = flags + tuple(extra)
        # column_types is the map's own, shared by its events: nothing mutates it
        column_types = types.column_types
        one = types.one or types.compile_rows()
        old = None
        if op == "update":
            old = doc.get("old")
            if type(old) is not list or len(old) != len(data):
                raise DecodeError(PROTOCOL, f"an UPDATE needs one old row per data row, got {_shown(old)}", "old")
            pair = cast(_Pair, types.pair)  # compile_rows made it with `one`
        insert = op == "insert"
        for index, row in enumerate(data):
            row_flags = flags
            if old is None:
                if not one(row):
                    _convert_row(row, types, "data", index)
                before, after = (None, row) if insert else (row, None)
            else:
                before, after = old[index], row
                if pair(row, before):  # both complete: same columns
                    partial = self._old_is_partial
                else:  # the precise path: converts, or raises the exact error
                    if not one(row):
                        _convert_row(row, types, "data", index)
                    _convert_row(before, types, "old", index)
                    partial = self._old_is_partial or before.keys() != row.keys()
                if partial:
                    row_flags = flags + ("old_value_partial",)
                    before = {**row, **before}
            out.append(
                ChangeEvent(
                    "row",
                    database,
                    table,
                    commit_ts,
                    op,
                    key_columns if index == 0 else list(key_columns),
                    before,
                    after,
                    column_types,
                    None,
                    None,
                    None,
                    None,
                    list(row_flags),
                )
            )

    # ---- the column path ---------------------------------------------------------------------------

    def decode_columns(self, keys: Sequence[bytes | None], values: Sequence[bytes | None]) -> ColumnDecode:
        """Row messages of the usual form as RowBlocks; every other message (DDL, watermark, claim check,
        compression, several documents, anything malformed or a value its converter rejects) left to `decode`.

        Messages are parsed in chunks of `columns.CHUNK`, small enough that a chunk's Python objects stay in the CPU's
        caches, into one flat text array per shape and chunk; a chunk is read first in one pass as the shape of the
        chunk before it (`_typed_chunk`), else shape by shape. Each shape's values are then checked and converted
        column by column for the whole batch.
        """
        if self._compression != "none":
            return ColumnDecode([], list(range(len(values))))
        shapes: dict[_ShapeKey, _Shape] = {}
        row_wise: list[int] = []
        for start in range(0, len(values), columns.CHUNK):
            self._read_chunk(values, start, min(start + columns.CHUNK, len(values)), shapes, row_wise)
        blocks = [block for shape in shapes.values() if (block := shape.block(self._old_is_partial, row_wise))]
        row_wise.sort()
        return ColumnDecode(blocks, row_wise)

    def _read_chunk(
        self,
        values: Sequence[bytes | None],
        start: int,
        stop: int,
        shapes: dict[_ShapeKey, _Shape],
        row_wise: list[int],
    ) -> None:
        last = self._last_shape
        if last is not None and (typed := _typed_chunk(last, values, start, stop)) is not None:
            shape = shapes.get(last[0])
            if shape is None:
                shape = shapes[last[0]] = _Shape(last[0], last[1])
            shape.keep(*typed)
            return
        members = _one_shape(values, start, stop)
        if members is None:
            members = _by_shape(values, start, stop, row_wise)
        for key, found in members.items():
            shape = shapes.get(key)
            if shape is None:
                shape = shapes[key] = _Shape(key, self._shape_types(key[2]))
            shape.add(found, row_wise)
        only = next(iter(members)) if len(members) == 1 else None
        types = None if only is None else shapes[only].types
        self._last_shape = None if only is None or types is None or types.rows is None else (only, types)

    def _shape_types(self, mysql_types: bytes) -> _ColumnTypes | None:
        """The converters of a raw mysqlType map; None where `decode` must report what is wrong with it."""
        try:
            types_map = orjson.loads(mysql_types)
            return self._types_by_items(types_map) if type(types_map) is dict and types_map else None
        except (orjson.JSONDecodeError, DecodeError):
            return None


_MAX_TS = (1 << 63) - 1  # silver keeps a commit ts as a signed 64-bit integer


class _Tidb(msgspec.Struct, gc=False):
    commitTs: Annotated[int, msgspec.Meta(ge=0, le=_MAX_TS)] | msgspec.UnsetType = msgspec.UNSET
    onlyHandleKey: Literal[False] = False
    claimCheckLocation: None = None


class _Envelope(msgspec.Struct, gc=False):
    """What the column path reads of a row message of the usual form (anything else fails to decode here): the
    type map and the rows stay raw JSON until their shape is known."""

    database: str
    table: str
    isDdl: Literal[False]
    type: Literal["INSERT", "UPDATE", "DELETE"]
    pkNames: tuple[str, ...] | None = None
    es: Annotated[int, msgspec.Meta(ge=0, le=_MAX_TS >> 18)] | None = None
    mysqlType: msgspec.Raw = msgspec.Raw(b"null")
    data: msgspec.Raw = msgspec.Raw(b"null")
    old: msgspec.Raw = msgspec.Raw(b"null")
    tidb: _Tidb | None = msgspec.field(default=None, name="_tidb")


_ENVELOPE = msgspec.json.Decoder(_Envelope)
_TYPE_OF, _DATA_OF = operator.attrgetter("type"), operator.attrgetter("data")
_TIDB_OF, _COMMIT_TS_OF = operator.attrgetter("tidb"), operator.attrgetter("commitTs")
_NAMES_OF, _MYSQL_TYPE_OF = operator.attrgetter("database", "table", "pkNames"), operator.attrgetter("mysqlType")
# (database, table, raw mysqlType, pkNames, commit ts inferred), and a shape's messages in a chunk: their
# indices, commit ts and envelopes
_ShapeKey = tuple[str, str, bytes, tuple[str, ...] | None, bool]
_Members = tuple[list[int], list[int], list[_Envelope]]


def _one_shape(values: Sequence[bytes | None], start: int, stop: int) -> dict[_ShapeKey, _Members] | None:
    """A chunk of row messages of one table and type map, each with its commit ts (the usual chunk), found
    without a loop in Python; None for any other chunk."""
    try:
        docs = list(map(_ENVELOPE.decode, values[start:stop]))  # type: ignore[arg-type]  # None: TypeError
    except (*columns.UNREADABLE, TypeError):
        return None
    found = _single_shape(docs)
    if found is None:
        return None
    key, stamps = found
    return {key: (list(range(start, stop)), stamps, docs)}


def _single_shape(docs: list[Any]) -> tuple[_ShapeKey, list[int]] | None:
    """The shape key of envelopes that share one table, key and type map and each carry a commit ts, and their
    commit ts; None where they do not."""
    tidbs = list(map(_TIDB_OF, docs))
    if None in tidbs:
        return None
    stamps = list(map(_COMMIT_TS_OF, tidbs))
    names, types = list(map(_NAMES_OF, docs)), list(map(_MYSQL_TYPE_OF, docs))
    count = len(docs)
    if msgspec.UNSET in stamps or names.count(names[0]) != count or types.count(types[0]) != count:
        return None
    database, table, key_columns = names[0]
    return (database, table, bytes(types[0]), key_columns, False), stamps


def _typed_chunk(
    last: tuple[_ShapeKey, _ColumnTypes], values: Sequence[bytes | None], start: int, stop: int
) -> tuple[list[int], list[int], list[str], list[tuple[Any, ...]], list[tuple[Any, ...]]] | None:
    """A chunk read in one pass as the shape of the chunk before it (envelope and rows in one decode, the usual
    stream): (indices, commit ts, ops, data rows, old rows of the updates); None when any of its messages is not
    of that shape, or its rows do not fit as sent, and the chunk is read again shape by shape."""
    key, types = last
    try:
        docs = list(map(types.envelope().decode, values[start:stop]))  # type: ignore[arg-type]  # None: TypeError
    except (*columns.UNREADABLE, TypeError):
        return None
    found = _single_shape(docs)
    if found is None or found[0] != key:
        return None
    ops: list[str] = list(map(_TYPE_OF, docs))
    data: list[tuple[Any, ...]] = list(map(_DATA_OF, docs))
    updated = _updates(ops)
    olds = [docs[k].old for k in updated]
    if not _all_fit(data, updated, olds):
        return None
    return list(range(start, stop)), found[1], ops, data, olds


def _by_shape(values: Sequence[bytes | None], start: int, stop: int, row_wise: list[int]) -> dict[_ShapeKey, _Members]:
    """A chunk's row messages by shape, message by message; the rest go to `row_wise`."""
    decode, unset = _ENVELOPE.decode, msgspec.UNSET
    members: dict[_ShapeKey, _Members] = {}
    # (database, table) -> the raw type map, key and ts kind last seen for it, and their members: most
    # messages find their shape here by comparing bytes, without hashing the type map
    last: dict[tuple[str, str], tuple[msgspec.Raw, tuple[str, ...] | None, bool, _Members]] = {}
    for i in range(start, stop):
        try:  # the envelope's types admit only a row message of the usual form: the rest go row-wise
            doc = decode(values[i])  # type: ignore[arg-type]  # None: TypeError
        except (*columns.UNREADABLE, TypeError):
            row_wise.append(i)
            continue
        tidb = doc.tidb
        if tidb is not None and tidb.commitTs is not unset:
            ts, inferred = tidb.commitTs, False
        elif doc.es is not None:
            ts, inferred = doc.es << 18, True
        else:
            row_wise.append(i)
            continue
        name = (doc.database, doc.table)
        seen = last.get(name)
        if seen is None or seen[0] != doc.mysqlType or seen[1] != doc.pkNames or seen[2] is not inferred:
            key = (doc.database, doc.table, bytes(doc.mysqlType), doc.pkNames, inferred)
            seen = last[name] = (doc.mysqlType, doc.pkNames, inferred, members.setdefault(key, ([], [], [])))
        found = seen[3]
        found[0].append(i)
        found[1].append(ts)
        found[2].append(doc)
    return members


_TYPES = pa.array(list(_ROW_OPS), pa.string())
_OPS = pa.array(list(_ROW_OPS.values()), pa.string())
_UPDATE = list(_ROW_OPS).index("UPDATE")


class _Shape:
    """One shape's rows in a batch, gathered chunk by chunk: message, commit ts, op and row count per message, and
    each image's values as flat text arrays (row after row, column after column)."""

    def __init__(self, key: _ShapeKey, types: _ColumnTypes | None):
        self.database, self.table, _, key_columns, self.inferred = key
        self.key_columns = list(key_columns or ())
        self.types = types
        self.messages: list[int] = []
        self.commit_ts: list[int] = []
        self.ops: list[str] = []
        self.counts: list[int] = []
        self.partial: list[bool] = []
        self.data: list[Any] = []
        self.old: list[Any] = []

    def add(self, members: _Members, row_wise: list[int]) -> None:
        indices, stamps, docs = members
        types = self.types
        if types is None or types.rows is None:
            row_wise.extend(indices)
            return
        ops: list[str] = list(map(_TYPE_OF, docs))
        data = _rows(types, list(map(_DATA_OF, docs)))
        updated = _updates(ops)
        olds = _rows(types, [docs[k].old for k in updated]) if updated else []
        fits, partial = _fits(types, docs, data, updated, olds)
        partly = [False] * len(ops)
        for k in partial:
            partly[k] = True
        if fits is not None and not all(fits):
            row_wise.extend(i for i, fit in zip(indices, fits) if not fit)
            indices = list(itertools.compress(indices, fits))
            stamps = list(itertools.compress(stamps, fits))
            ops = list(itertools.compress(ops, fits))
            data = list(itertools.compress(data, fits))
            partly = list(itertools.compress(partly, fits))
            olds = [old for k, old in zip(updated, olds) if fits[k]]
            if not indices:
                return
        self.keep(indices, stamps, ops, data, olds, partly)  # type: ignore[arg-type]

    def keep(
        self,
        indices: list[int],
        stamps: list[int],
        ops: list[str],
        data: list[tuple[Any, ...]],
        olds: list[tuple[Any, ...]],
        partly: list[bool] | None = None,
    ) -> None:
        """Keep messages whose rows fit the shape: their rows (`olds`: the updates' old rows, in order) and which
        old rows were completed from their data (`partly`, per message; None: none was)."""
        self.partial.extend(partly or [False] * len(indices))
        self.messages.extend(indices)
        self.commit_ts.extend(stamps)
        self.ops.extend(ops)
        self.counts.extend(map(len, data))
        self.data.append(_flat(data))
        if olds:
            self.old.append(_flat(olds))

    def block(self, old_is_partial: bool, row_wise: list[int]) -> RowBlock | None:
        """The shape's RowBlock; a message holding a value its converter rejects goes to `row_wise`."""
        types = self.types
        if types is None or not self.messages:
            return None
        counts = np.array(self.counts)
        message = pa.array(np.repeat(np.array(self.messages, np.int32), counts))
        commit_ts = pa.array(np.repeat(np.array(self.commit_ts, np.int64), counts))
        codes = np.repeat(pc.index_in(pa.array(self.ops, pa.string()), _TYPES).to_numpy(), counts)
        op = _OPS.take(pa.array(codes))
        is_update = pa.array(codes == _UPDATE)
        sent = _split(types, pa.concat_arrays(self.data))
        after_columns, bad = _converted(types, sent)
        before_columns = after_columns
        if self.old:
            before_columns, bad_old = _before(
                types, sent, after_columns, _split(types, pa.concat_arrays(self.old)), np.flatnonzero(codes == _UPDATE)
            )
            bad = bad_old if bad is None else bad if bad_old is None else pc.or_(bad, bad_old)
        names = list(types.converters)
        before = struct_of(names, before_columns, pc.not_equal(op, "insert"))
        after = struct_of(names, after_columns, pc.not_equal(op, "delete"))
        row_flags = {}
        if old_is_partial and self.old:
            row_flags["old_value_partial"] = is_update
        elif any(self.partial):
            row_flags["old_value_partial"] = pa.array(np.repeat(np.array(self.partial, bool), counts))
        flags = (*types.flags, "commit_ts_inferred") if self.inferred else types.flags
        block = RowBlock(
            self.database or None,
            self.table or None,
            self.key_columns,
            types.column_types,
            names,
            message,
            commit_ts,
            op,
            before,
            after,
            flags,
            row_flags,
        )
        return columns.without_rejected(block, bad, row_wise)


def _rows(types: _ColumnTypes, images: list[msgspec.Raw]) -> list[tuple[Any, ...] | None]:
    """Each message's rows (`data` or `old`) in one decode of them all; a message whose rows do not fit the shape
    (a column missing or unknown, a value not text) gets None."""
    assert types.rows is not None  # `_Shape.add` sends a map without a row Struct row-wise
    decode = types.rows.decode
    try:
        every: list[tuple[Any, ...] | None] = [*decode(b"[" + b",".join(images) + b"]")]
        return every
    except columns.UNREADABLE:
        pass
    found: list[tuple[Any, ...] | None] = []
    for image in images:
        try:
            found.append(decode(b"[" + bytes(image) + b"]")[0])
        except columns.UNREADABLE:
            found.append(None)
    return found


def _updates(ops: list[str]) -> list[int]:
    """The positions of the updates among a chunk's ops."""
    return [k for k, op in enumerate(ops) if op == "UPDATE"] if "UPDATE" in ops else []


def _all_fit(data: list[Any], updated: list[int], olds: list[Any]) -> bool:
    """Whether every message has rows, and every update as many old rows as data rows (the usual chunk), found
    without a loop in Python."""
    return all(data) and None not in olds and list(map(len, olds)) == list(map(len, map(data.__getitem__, updated)))


def _fits(
    types: _ColumnTypes,
    docs: list[_Envelope],
    data: list[tuple[Any, ...] | None],
    updated: list[int],
    olds: list[tuple[Any, ...] | None],
) -> tuple[list[bool] | None, list[int]]:
    """Which messages' rows fit the shape (None when all do, the usual chunk, found without a loop in Python), and
    the updates whose partial `old` was completed from their `data` (in `olds`, in place)."""
    if _all_fit(data, updated, olds):
        return None, []
    partial = []
    for n, k in enumerate(updated):
        if olds[n] is None and data[k] is not None:
            olds[n] = _filled(types, docs[k].old, data[k])  # type: ignore[arg-type]
            partial.append(k)
    old_of = dict(zip(updated, olds))
    fits = [
        rows is not None
        and len(rows) > 0
        and (k not in old_of or ((old := old_of[k]) is not None and len(old) == len(rows)))
        for k, rows in enumerate(data)
    ]
    return fits, partial


def _filled(types: _ColumnTypes, image: msgspec.Raw, rows: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """An `old` that holds only some columns, each row completed from its `data` row (as `decode` does); None
    where it does not fit the shape or its rows do not match the data's."""
    try:
        olds = types.partial_rows.decode(image)
    except columns.UNREADABLE:
        return None
    if len(olds) != len(rows):
        return None
    unset, astuple = msgspec.UNSET, msgspec.structs.astuple
    return tuple(
        types.row_type(*(new if was is unset else was for was, new in zip(astuple(old), astuple(row))))
        for old, row in zip(olds, rows)
    )


def _flat(images: list[tuple[Any, ...]]) -> Any:
    """Every value of these rows as one text array, row after row."""
    rows = itertools.chain.from_iterable(images)
    return pa.array(list(itertools.chain.from_iterable(map(msgspec.structs.astuple, rows))), pa.string())


def _split(types: _ColumnTypes, flat: Any) -> list[Any]:
    """A flat array of rows (row after row) as one text array per column."""
    width = len(types.rules)
    return [flat.take(pa.array(np.arange(j, len(flat), width))) for j in range(width)]


def _converted(types: _ColumnTypes, sent: list[Any]) -> tuple[list[Any], Any]:
    """The canonical columns of the columns as sent, and the rows holding a value a converter rejects (or None)."""
    out, bad = [], None
    for values, rule in zip(sent, types.rules):
        column, rejected = columns.converted(values, rule)
        out.append(column)
        if rejected is not None:
            bad = rejected if bad is None else pc.or_(bad, rejected)
    return out, bad


def _before(
    types: _ColumnTypes, sent: list[Any], after: list[Any], old: list[Any], updates: Any
) -> tuple[list[Any], Any]:
    """The before image's columns: the data's (a delete's row) with each update's old value where it differs from
    the data's as sent; only those are converted (an old row repeats most of its data row), and the rows holding
    one its converter rejects (or None)."""
    count = len(after[0])
    where, bad = pa.array(updates), None
    out = []
    for rule, data_sent, data_done, old_sent in zip(types.rules, sent, after, old):
        differ = pc.invert(pc.fill_null(pc.equal(old_sent, data_sent.take(where)), False)).to_numpy(False)
        if not differ.any():
            out.append(data_done)
            continue
        column, rejected = columns.converted(old_sent.filter(differ), rule)
        rows = np.zeros(count, bool)
        rows[updates[differ]] = True
        out.append(pc.replace_with_mask(data_done, pa.array(rows), column))
        if rejected is not None:
            rows[:] = False
            rows[updates[differ][rejected.to_numpy(False)]] = True
            bad = pa.array(rows) if bad is None else pc.or_(bad, pa.array(rows))
    return out, bad


_MISSING = object()
_TEXT = frozenset((str,))
_TEXT_OR_NULL = frozenset((str, type(None)))


def _convert_row(raw: Any, types: _ColumnTypes, image: str, index: int) -> dict[str, str | None]:
    """Convert one row in place: every value must be text or null, every column typed."""
    if type(raw) is not dict:
        raise DecodeError(PROTOCOL, f"a row must be an object, got {_shown(raw)}", f"{image}[{index}]")
    if not raw.keys() <= types.converters.keys():
        name = next(n for n in raw if n not in types.converters)
        raise DecodeError(PROTOCOL, f"column {name!r} has no mysqlType", f"{image}[{index}].{name}")
    if not set(map(type, raw.values())) <= _TEXT_OR_NULL:
        name = next(n for n, v in raw.items() if type(v) not in _TEXT_OR_NULL)
        raise DecodeError(
            PROTOCOL,
            f"value of column {name!r} must be a string or null, got {_shown(raw[name])}",
            f"{image}[{index}].{name}",
        )
    name = None
    try:
        for name, convert in types.integers:
            v = raw.get(name)
            if v is not None and not (v.isdigit() and v.isascii() and (v[0] != "0" or len(v) == 1)):
                raw[name] = convert(v)
        for name, convert in types.converting:
            v = raw.get(name)
            if v is not None:
                raw[name] = convert(v)
    except _BAD_INPUT as exc:
        raise DecodeError(PROTOCOL, f"bad value for column {name!r}: {exc}", f"{image}[{index}].{name}") from None
    return raw


def _shown(value: object) -> str:
    text = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode() if value is not None else "null"
    return text if len(text) <= 60 else text[:57] + "..."


def without_events(
    decoder: CanalJsonDecoder, key: bytes | None, value: bytes | None, drop: Callable[[ChangeEvent], bool]
) -> tuple[bytes | None, bytes] | None:
    """The message without the rows whose event `drop` picks (erasure): a document's `data` (and `old`) lose
    those rows, a document left with none goes. The message itself when none is picked, None when nothing is
    left; a rewritten message is written as the decoder reads it (documents joined by "\\n", compressed as
    configured)."""
    if not value:
        raise DecodeError(PROTOCOL, "message has no value", "value")
    kept: list[Any] = []
    changed = False
    for doc in decoder._documents(value):
        rows = doc.get("data") if type(doc) is dict and not doc.get("isDdl") else None
        parts = [doc] if type(rows) is not list or len(rows) < 2 else _one_row_each(doc)
        survivors = [part for part in parts if not _picked(decoder, part, drop)]
        changed = changed or len(survivors) < len(parts)
        if len(survivors) == len(parts):
            kept.append(doc)
        elif survivors:
            kept.append(_rows_of(doc, survivors))
    if not changed:
        return key, value
    if not kept:
        return None
    joined = b"\n".join(orjson.dumps(doc) for doc in kept)
    return key, compress(joined, decoder._compression)


def _one_row_each(doc: dict[str, Any]) -> list[dict[str, Any]]:
    old = doc.get("old")
    return [
        {**doc, "data": [row], **({"old": [old[i]]} if type(old) is list and i < len(old) else {})}
        for i, row in enumerate(doc["data"])
    ]


def _rows_of(doc: dict[str, Any], parts: list[dict[str, Any]]) -> dict[str, Any]:
    rewritten = {**doc, "data": [part["data"][0] for part in parts]}
    if type(doc.get("old")) is list:
        rewritten["old"] = [part["old"][0] for part in parts]
    return rewritten


def _picked(decoder: CanalJsonDecoder, doc: Any, drop: Callable[[ChangeEvent], bool]) -> bool:
    events: list[ChangeEvent] = []
    decoder._decode_document(orjson.loads(orjson.dumps(doc)), events, claim_checked=False)  # it converts in place
    return any(drop(event) for event in events)
