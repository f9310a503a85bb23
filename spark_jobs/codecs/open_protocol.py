"""TiCDC Open Protocol: batched key/value items in, canonical change events out.

Framing (protocols/open.md): the key is an 8-byte big-endian version (1) followed by repeated
[8-byte BE length][key JSON]; the value is repeated [8-byte BE length][value JSON]; the n-th key item
pairs with the n-th value item. Key `t`: 1 row, 2 DDL, 3 resolved.

What the protocol does not carry, and so what the events cannot say (flags name it per event):
- DECIMAL precision and scale (`decimal`, `types_partial`; the digits keep the scale as sent);
- ENUM/SET labels (index / bitmask, `enum_index`);
- TIME fractional seconds: TiCDC writes TIME with no fraction (`fsp_unknown`);
- an update's before image when old value is off: TiCDC then sends `u` only, which is an insert on
  the wire, so every `u`-only row is an insert flagged `old_value_missing` under `enable-old-value=false`;
- with only-output-updated-columns `p` holds only changed columns; the rest are refilled from `u`
  (`old_value_partial`);
- the table schema on DDL (only the statement and TiDB's action type are sent).
Numeric columns holding a JSON string (hand-made messages, e.g. TiCDC's Java example) keep the
string as sent, as TiCDC's own consumer does.
"""

from __future__ import annotations

import base64
import datetime as dt
import itertools
import struct
import zoneinfo
from collections.abc import Callable, Sequence
from operator import attrgetter, itemgetter
from typing import Annotated, Any, Literal, NoReturn, Protocol, cast

import msgspec
import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs import ddl
from spark_jobs.canonical.blocks import RowBlock, struct_of
from spark_jobs.canonical.events import ChangeEvent
from spark_jobs.canonical.values import (
    int_bits,
    text_bytes,
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
from spark_jobs.codecs.large_message import COMPRESSIONS, decompress, read_claim_check
from spark_jobs.errors import ConfigError, DecodeError

PROTOCOL = "open"
BATCH_VERSION = 1

MESSAGE_ROW, MESSAGE_DDL, MESSAGE_RESOLVED = 1, 2, 3

BINARY_FLAG = 0x01
HANDLE_KEY_FLAG = 0x02
UNSIGNED_FLAG = 0x80

# MySQL type code -> canonical type (string types: (character, binary) by the Binary flag)
_INTEGER_TYPES = {1: "tinyint", 2: "smallint", 3: "int", 8: "bigint", 9: "mediumint"}
_PLAIN_TYPES = {
    4: "float",
    5: "double",
    6: "null",
    7: "timestamp",
    10: "date",
    11: "time",
    12: "datetime",
    13: "year",
    14: "date",
    16: "bit",
    225: "vector",
    245: "json",
    246: "decimal",
    247: "enum",
    248: "set",
}
_STRING_TYPES = {
    15: ("varchar", "varbinary"),
    253: ("varchar", "varbinary"),
    254: ("char", "binary"),
    249: ("tinytext", "tinyblob"),
    250: ("mediumtext", "mediumblob"),
    251: ("longtext", "longblob"),
    252: ("text", "blob"),
}


def _canonical_type_table() -> dict[int, str]:
    """(code << 8 | flag & 0x81) -> canonical type, so one dict lookup types a column."""
    table: dict[int, str] = {}
    for low in (0, BINARY_FLAG, UNSIGNED_FLAG, BINARY_FLAG | UNSIGNED_FLAG):
        for code, name in _INTEGER_TYPES.items():
            table[code << 8 | low] = name + (" unsigned" if low & UNSIGNED_FLAG else "")
        for code, name in _PLAIN_TYPES.items():
            table[code << 8 | low] = name
        for code, (text_name, binary_name) in _STRING_TYPES.items():
            table[code << 8 | low] = binary_name if low & BINARY_FLAG else text_name
    return table


CANONICAL_TYPES = _canonical_type_table()

# a column's converter: (JSON value, column flag) -> canonical text; raises on a value of the wrong kind
Converter = Callable[[Any, int], str]
# one row image decoded: values, canonical types, handle-key names, type flags
Image = tuple[dict[str, str | None], dict[str, str], list[str], tuple[str, ...]]
# a generated image function: the image, or None when the columns are not of its signature
ImageFunction = Callable[[Any], Image | None]
# an image's column signature: (name, type code, flag, handle mark) per column, in message order
Signature = tuple[tuple[str, int, int, bool], ...]


class _TimestampConverter(Protocol):
    """`_timestamp_converter`'s converter: the generated image code reads its per-second memo first."""

    seconds_utc: dict[str, str]

    def __call__(self, value: Any, flag: int, /) -> str: ...


# ---- Go strconv.Quote bodies -------------------------------------------------------------------

_GO_SIMPLE_ESCAPES = {"a": 7, "b": 8, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11, "\\": 92, '"': 34}
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_OCTAL_DIGITS = frozenset("01234567")


def go_unquote(text: str) -> bytes:
    """The bytes of a Go strconv.Quote result with its quotes stripped (TiCDC's binary strings)."""
    pos = text.find("\\")
    if pos < 0:
        return text.encode("utf-8")
    out = bytearray(text[:pos].encode("utf-8"))
    end = len(text)
    while True:
        if pos + 1 >= end:
            raise ValueError("backslash at the end of a quoted string")
        kind = text[pos + 1]
        simple = _GO_SIMPLE_ESCAPES.get(kind)
        if simple is not None:
            out.append(simple)
            pos += 2
        elif kind == "x" or kind == "u" or kind == "U":
            width = 2 if kind == "x" else 4 if kind == "u" else 8
            digits = text[pos + 2 : pos + 2 + width]
            if len(digits) != width or not _HEX_DIGITS.issuperset(digits):
                raise ValueError(f"bad \\{kind} escape {text[pos : pos + 2 + width]!r}")
            number = int(digits, 16)
            if kind == "x":
                out.append(number)
            else:
                if 0xD800 <= number <= 0xDFFF or number > 0x10FFFF:
                    raise ValueError(f"\\{kind}{digits} is not a valid code point")
                out += chr(number).encode("utf-8")
            pos += 2 + width
        elif kind in _OCTAL_DIGITS:
            digits = text[pos + 1 : pos + 4]
            if len(digits) != 3 or not _OCTAL_DIGITS.issuperset(digits) or int(digits, 8) > 255:
                raise ValueError(f"bad octal escape {text[pos : pos + 4]!r}")
            out.append(int(digits, 8))
            pos += 4
        else:
            raise ValueError(f"unknown escape \\{kind}")
        following = text.find("\\", pos)
        if following < 0:
            out += text[pos:].encode("utf-8")
            return bytes(out)
        out += text[pos:following].encode("utf-8")
        pos = following


# ---- the decoder -------------------------------------------------------------------------------


def parse_time_zone(name: str | None) -> dt.tzinfo | None:
    """The changefeed's `time-zone` option (values.time_zone); None (no conversion) for UTC."""
    try:
        return values_time_zone(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
        raise ConfigError(f"time-zone {name!r} is not a known time zone: {exc}") from None


def _error(reason: str, where: str) -> DecodeError:
    return DecodeError(PROTOCOL, reason, where)


def split_items(data: bytes | memoryview, start: int, part: str) -> list[memoryview]:
    """The [8-byte BE length][bytes] items of one side of a message, from byte `start` on."""
    view = memoryview(data)
    end = len(view)
    items: list[memoryview] = []
    pos = start
    while pos < end:
        if pos + 8 > end:
            raise _error(f"truncated length prefix: {end - pos} of 8 bytes", f"{part} byte {pos}")
        length = int.from_bytes(view[pos : pos + 8], "big")
        item_end = pos + 8 + length
        if item_end > end:
            raise _error(f"item length {length} runs past the end ({end - pos - 8} bytes left)", f"{part} byte {pos}")
        items.append(view[pos + 8 : item_end])
        pos = item_end
    return items


def _loads(data: bytes | memoryview, where: str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise _error(f"not JSON: {exc}", where) from None


def _check_ts(key: dict[str, Any], where: str) -> int:
    ts = key.get("ts")
    if type(ts) is not int or ts < 0:
        raise _error(f"`ts` must be a non-negative integer, got {ts!r}", f"{where}.ts")
    return ts


def _optional_name(key: dict[str, Any], field: str, where: str) -> str | None:
    name = key.get(field)
    if name is None or name == "":
        return None
    if type(name) is not str:
        raise _error(f"`{field}` must be a string, got {name!r}", f"{where}.{field}")
    return name


class OpenDecoder:
    """Decodes one partition's Open Protocol messages; keeps no state across messages."""

    protocol = PROTOCOL
    OPTIONS: dict[str, tuple[type, Any]] = {
        "enable-old-value": (bool, True),
        "only-output-updated-columns": (bool, False),
        "large-message-handle-compression": (str, "none"),
        "time-zone": (str, "UTC"),
        # where claim-check files are read from; unset: the location in the key is read as is
        "claim-check-storage-uri": (str, None),
    }

    def __init__(self, options: dict[str, Any]):
        self.old_value = options.get("enable-old-value", True)
        self.only_updated = options.get("only-output-updated-columns", False)
        self.compression = options.get("large-message-handle-compression") or "none"
        if self.compression not in COMPRESSIONS:
            raise ConfigError(
                f"large-message-handle-compression {self.compression!r}; allowed: {', '.join(COMPRESSIONS)}"
            )
        self.zone = parse_time_zone(options.get("time-zone", "UTC"))
        self.claim_check_uri = options.get("claim-check-storage-uri")
        self._plan = self._column_plan()
        self._converter_table = self._converters()
        self._images: dict[tuple[str, ...], list[ImageFunction]] = {}  # column names -> generated image functions
        # the last column names looked up, their functions
        self._last_images: tuple[tuple[str, ...], Sequence[ImageFunction]] = ((), ())
        self._seen: dict[Signature, int] = {}  # signature -> images decoded exactly so far
        # the column path's shapes: by table and signature, and the one last seen per table
        self._shapes: dict[tuple[_Table, Signature], _Shape | None] = {}
        self._last_shapes: dict[_Table, _Shape] = {}

    # -- framing

    def decode(self, key: bytes | None, value: bytes | None, headers: Headers = None) -> list[ChangeEvent]:
        return self._decode(key, value, claim_checked=False)

    def _decode(self, key: bytes | None, value: bytes | None, claim_checked: bool) -> list[ChangeEvent]:
        if key is None:
            raise _error("message has no key; the Open Protocol key holds the event headers", "key")
        if len(key) < 8:
            raise _error(f"key is {len(key)} bytes, shorter than the 8-byte version header", "key byte 0")
        version = int.from_bytes(key[:8], "big")
        if version != BATCH_VERSION:
            raise _error(f"unsupported batch version {version}; expected {BATCH_VERSION}", "key byte 0")
        keys = split_items(key, 8, "key")
        values = split_items(value, 0, "value") if value else []
        if len(keys) != len(values):
            raise _error(f"{len(keys)} key items but {len(values)} value items", "value")
        events: list[ChangeEvent] = []
        row = self._row
        for index, (key_item, value_item) in enumerate(zip(keys, values)):
            try:
                head = orjson.loads(key_item)
            except orjson.JSONDecodeError:
                head = _loads(key_item, f"key item {index}")
            if type(head) is not dict:
                raise _error(f"key item is {type(head).__name__}, not an object", f"key item {index}")
            kind = head.get("t")
            if kind == MESSAGE_ROW and type(kind) is int:
                events.append(row(head, value_item, index, claim_checked))
            elif kind == MESSAGE_DDL and type(kind) is int:
                events.append(self._ddl(head, value_item, index))
            elif kind == MESSAGE_RESOLVED and type(kind) is int:
                events.append(ChangeEvent(kind="watermark", commit_ts=_check_ts(head, f"key item {index}")))
            else:
                raise _error(f"unknown message type `t`={kind!r}", f"key item {index}.t")
        return events

    def _value_json(self, item: memoryview, index: int) -> dict[str, Any]:
        data: bytes | memoryview = item
        if self.compression != "none":
            try:
                data = decompress(PROTOCOL, bytes(item), self.compression)
            except DecodeError as exc:
                raise _error(exc.reason, f"value item {index}") from None
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError:
            doc = _loads(data, f"value item {index}")
        if type(doc) is not dict:
            raise _error(f"value item is {type(doc).__name__}, not an object", f"value item {index}")
        return doc

    # -- DDL

    def _ddl(self, head: dict[str, Any], value_item: memoryview, index: int) -> ChangeEvent:
        where = f"key item {index}"
        ts = _check_ts(head, where)
        doc = self._value_json(value_item, index)
        query, action = doc.get("q"), doc.get("t")
        if type(query) is not str:
            raise _error(f"DDL `q` must be a string, got {query!r}", f"value item {index}.q")
        if type(action) is not int:
            raise _error(f"DDL `t` must be an integer action type, got {action!r}", f"value item {index}.t")
        return ChangeEvent(
            kind="ddl",
            database=_optional_name(head, "scm", where),
            table=_optional_name(head, "tbl", where),
            commit_ts=ts,
            ddl_type=ddl.classify(query),
            ddl_sql=query,
        )

    # -- rows

    def _compiled_image(self, columns: Any) -> Image | None:
        """The image from a function compiled for this column signature, or None when none fits."""
        if type(columns) is dict:
            names = tuple(columns)
            last_names, variants = self._last_images
            # the JSON parser reuses its key strings: the last list compares by identity, with no hash to build
            if names != last_names:
                variants = self._images.get(names, ())
                self._last_images = (names, variants)
            for fast in variants:
                image = fast(columns)
                if image is not None:
                    return image
        return None

    def _row_image(self, columns: Any, index: int, part: str) -> Image:
        """(values, types, keys, type flags) of a `u` or `d` image: compiled when seen before, else precise."""
        image = self._compiled_image(columns)
        if image is None:
            image = self._image(columns, f"value item {index}.{part}")
            self._learn(columns)
        return image

    def _row(self, head: dict[str, Any], value_item: memoryview, index: int, claim_checked: bool) -> ChangeEvent:
        location = head.get("ccl")
        if location:
            return self._claim_checked_row(location, f"key item {index}", claim_checked)
        ts = head.get("ts")
        if type(ts) is not int or ts < 0:
            ts = _check_ts(head, f"key item {index}")
        database = head.get("scm")
        table = head.get("tbl")
        if type(database) is not str or type(table) is not str or not database or not table:
            where = f"key item {index}"
            database, table = _optional_name(head, "scm", where), _optional_name(head, "tbl", where)
        doc = None
        if self.compression == "none":
            try:
                doc = orjson.loads(value_item)
            except orjson.JSONDecodeError:
                pass
        if type(doc) is not dict:
            doc = self._value_json(value_item, index)  # parses again: the exact error, or the decompressed value
        flags: list[str] = []
        before: dict[str, str | None] | None
        after: dict[str, str | None] | None
        deleted = doc.get("d")
        if deleted is not None:
            before, types, keys, type_flags = self._row_image(deleted, index, "d")
            after = None
            op = "delete"
        else:
            updated = doc.get("u")
            if updated is None:
                raise _error("row value has none of `u`, `p`, `d`", f"value item {index}")
            after, types, keys, type_flags = self._row_image(updated, index, "u")
            previous = doc.get("p")
            if previous is None:
                op = "insert"
                before = None
                if not self.old_value:
                    flags.append("old_value_missing")
            else:
                op = "update"
                image = self._compiled_image(previous)
                before = self._values(previous, f"value item {index}.p") if image is None else image[0]
                if self.only_updated or len(before) < len(after):
                    before = {**after, **before}
                    flags.append("old_value_partial")
        if head.get("ohk") is True:
            flags.append("handle_key_only")
        if type_flags:
            flags += type_flags
        return ChangeEvent("row", database, table, ts, op, keys, before, after, types, None, None, None, None, flags)

    def _claim_checked_row(self, location: Any, where: str, claim_checked: bool) -> ChangeEvent:
        if type(location) is not str:
            raise _error(f"`ccl` must be a string, got {location!r}", f"{where}.ccl")
        if claim_checked:
            raise _error("a claim-check file points at another claim-check file", f"{where}.ccl")
        if self.claim_check_uri:
            location = self.claim_check_uri.rstrip("/") + "/" + location.rsplit("/", 1)[-1]
        inner_key, inner_value = read_claim_check(PROTOCOL, location)
        if inner_key is None:
            raise _error(f"claim-check file {location} holds no key", f"{where}.ccl")
        try:
            events = self._decode(inner_key, inner_value, claim_checked=True)
        except DecodeError as exc:
            raise _error(f"claim-check file {location}: {exc.reason}", f"{where}.ccl -> {exc.where}") from None
        if len(events) != 1 or events[0].kind != "row":
            raise _error(f"claim-check file {location} holds {len(events)} events, not one row", f"{where}.ccl")
        event = events[0]
        event.flags.append("claim_check")
        return event

    def _image(self, columns: Any, where: str) -> Image:
        """Values, canonical types, handle-key names and type flags of one row image, in the message's column order."""
        if type(columns) is not dict:
            raise _error(f"row image is {type(columns).__name__}, not an object", where)
        values: dict[str, str | None] = {}
        types: dict[str, str] = {}
        keys: list[str] = []
        plan = self._plan
        name = None
        try:
            for name, column in columns.items():
                value = column["v"]
                try:
                    flag = column["f"]
                except KeyError:  # TiCDC always writes `f`; the published examples omit it
                    flag = 0
                types[name], convert = plan[column["t"] << 8 | flag & 0x81]
                if value is None or (convert is None and type(value) is str):
                    values[name] = value
                else:
                    values[name] = (convert or _require_string)(value, flag)
                if flag & HANDLE_KEY_FLAG or ("h" in column and column["h"] is True):
                    keys.append(name)
        except Exception as exc:
            raise self._column_error(exc, columns, name, where) from None
        return values, types, keys, _type_flags(types)

    def _values(self, columns: Any, where: str) -> dict[str, str | None]:
        if type(columns) is not dict:
            raise _error(f"row image is {type(columns).__name__}, not an object", where)
        values: dict[str, str | None] = {}
        plan = self._plan
        name = None
        try:
            for name, column in columns.items():
                value = column["v"]
                flag = column.get("f", 0)
                convert = plan[column["t"] << 8 | flag & 0x81][1]
                if value is None or (convert is None and type(value) is str):
                    values[name] = value
                else:
                    values[name] = (convert or _require_string)(value, flag)
        except Exception as exc:
            raise self._column_error(exc, columns, name, where) from None
        return values

    def _learn(self, columns: dict[str, Any]) -> None:
        """After `_image` decoded these columns: count their signature, compile its function when due."""
        parts: list[tuple[str, int, int, bool]] = []
        for name, column in columns.items():
            code, flag = column["t"], column.get("f", 0)
            if (
                type(code) is not int
                or type(flag) is not int
                or _SMALL_INTS.get(code) is not code
                or _SMALL_INTS.get(flag) is not flag
            ):
                return  # only exact small ints are recognised by identity
            parts.append((name, code, flag, column.get("h") is True))
        signature = tuple(parts)
        seen = self._seen.get(signature, 0) + 1
        if seen < _LEARN_AFTER:
            if len(self._seen) >= 4096:
                self._seen.clear()
            self._seen[signature] = seen
            return
        self._seen.pop(signature, None)
        make = fast_paths.generate(PROTOCOL, _image_source(signature), {})
        if make is None:
            return
        plan = self._plan
        types = {name: plan[code << 8 | flag & 0x81][0] for name, code, flag, _ in signature}
        converters = [self._converter_table[code] for _, code, _, _ in signature]
        image = make(_fail, types, _type_flags(types), _SMALL_INTS, converters)
        names = tuple(columns)
        self._last_images = ((), ())
        variants = self._images.setdefault(names, [])
        if len(variants) >= _VARIANTS:
            del variants[0]
        variants.append(image)
        if len(self._images) > 1024:
            self._images.clear()
            self._images[names] = variants

    @staticmethod
    def _column_error(exc: Exception, columns: dict[str, Any], name: str | None, where: str) -> DecodeError:
        column_where = f"{where}.{name}"
        column = columns.get(name) if name is not None else None
        if type(column) is not dict:
            return _error(f"column is {type(column).__name__}, not an object", column_where)
        if isinstance(exc, KeyError) and exc.args and exc.args[0] in ("t", "v"):
            return _error(f"column has no `{exc.args[0]}`", column_where)
        code, flag = column.get("t"), column.get("f", 0)
        if type(code) is not int or (
            code not in _INTEGER_TYPES and code not in _PLAIN_TYPES and code not in _STRING_TYPES
        ):
            return _error(f"unknown column type code {code!r}", f"{column_where}.t")
        if type(flag) is not int:
            return _error(f"column flag must be an integer, got {flag!r}", f"{column_where}.f")
        return _error(f"bad value {column.get('v')!r} for type code {code}: {exc}", f"{column_where}.v")

    # -- values

    def _column_plan(self) -> dict[int, tuple[str, Converter | None]]:
        """(code << 8 | flag & 0x81) -> (canonical type, converter); converter None: the JSON string as is."""
        converters = self._converters()
        return {key: (name, converters[key >> 8]) for key, name in CANONICAL_TYPES.items()}

    def _converters(self) -> dict[int, Converter | None]:
        """Type code -> (JSON value, column flag) -> canonical text; raises on a value of the wrong kind."""
        timestamp = _timestamp_converter(self.zone)

        def integer(bits: int) -> Converter:
            def convert(value: Any, flag: int) -> str:
                if type(value) is int:
                    return text_unsigned(value, bits) if value < 0 and flag & UNSIGNED_FLAG else str(value)
                if type(value) is str:
                    return value
                raise TypeError(f"expected an integer, got {type(value).__name__}")

            return convert

        def floating(text: Callable[[float], str]) -> Converter:
            def convert(value: Any, flag: int) -> str:
                if type(value) is float or type(value) is int:
                    return text(value)
                if type(value) is str:
                    return value
                raise TypeError(f"expected a number, got {type(value).__name__}")

            return convert

        def year(value: Any, flag: int) -> str:
            if type(value) is int:
                return text_year(value)
            if type(value) is str:
                return value
            raise TypeError(f"expected an integer, got {type(value).__name__}")

        def index(value: Any, flag: int) -> str:
            if type(value) is int:
                return text_unsigned(value) if value < 0 else str(value)
            if type(value) is str:
                return value
            raise TypeError(f"expected an integer, got {type(value).__name__}")

        def decimal(value: Any, flag: int) -> str:
            if type(value) is str:
                return value
            if type(value) is int:
                return str(value)
            raise TypeError(f"expected a decimal string, got {type(value).__name__}")

        def quoted(value: Any, flag: int) -> str:
            if type(value) is not str:
                raise TypeError(f"expected a string, got {type(value).__name__}")
            return text_bytes(go_unquote(value)) if flag & BINARY_FLAG else value

        def base64_bytes(value: Any, flag: int) -> str:
            if type(value) is not str:
                raise TypeError(f"expected a base64 string, got {type(value).__name__}")
            raw = base64.b64decode(value, validate=True)
            return text_bytes(raw) if flag & BINARY_FLAG else raw.decode("utf-8")

        def null(value: Any, flag: int) -> NoReturn:
            raise TypeError("type code 6 (NULL) carries a non-null value")

        table: dict[int, Converter | None] = {code: integer(int_bits(name)) for code, name in _INTEGER_TYPES.items()}
        table.update(
            {
                4: floating(text_float),
                5: floating(text_double),
                6: null,
                7: timestamp,
                10: None,
                11: None,
                12: None,
                13: year,
                14: None,
                16: index,
                225: None,
                245: None,
                246: decimal,
                247: index,
                248: index,
            }
        )
        for code in (15, 253, 254):
            table[code] = quoted
        for code in (249, 250, 251, 252):
            table[code] = base64_bytes
        return table

    # -- the column path

    def decode_columns(self, keys: Sequence[bytes | None], values: Sequence[bytes | None]) -> ColumnDecode:
        """Messages whose items are all rows of the usual form and of one shape, as RowBlocks; every other message
        (DDL, resolved, claim check, handle key only, compression, items of several shapes, anything malformed or a
        value its converter rejects) left to `decode`.

        Messages are framed and parsed in chunks of `columns.CHUNK` messages or about `_CHUNK_ITEMS` items (a message may
        carry many rows), small enough that a chunk's Python objects stay in the CPU's caches: keys with one msgspec
        type, values with the Structs of their table's shape, whose values go into Arrow arrays column by column;
        each shape's columns are then checked and converted for the whole batch.
        """
        if self.compression != "none":
            return ColumnDecode([], list(range(len(values))))
        gathered: dict[_Shape, _Gathered] = {}
        row_wise: list[int] = []
        start = 0
        while start < len(values):
            start = self._read_chunk(keys, values, start, gathered, row_wise)
        blocks = [
            block
            for rows in gathered.values()
            if (block := rows.block(self.old_value, self.only_updated, row_wise)) is not None
        ]
        row_wise.sort()
        return ColumnDecode(blocks, row_wise)

    def _read_chunk(
        self,
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        start: int,
        gathered: dict[_Shape, _Gathered],
        row_wise: list[int],
    ) -> int:
        """Read the chunk of messages from `start` on; returns where the next begins."""
        spans: list[tuple[int, int, int]] = []  # (message index, its first item, its item count)
        key_items: list[bytes] = []
        framed: list[bytes] = []  # the values of the messages in `spans`
        prefixes: list[int] = []  # where each of their items' length prefix is, in those values joined
        size = 0
        end = min(start + columns.CHUNK, len(values))
        stop = start
        while stop < end and len(key_items) < _CHUNK_ITEMS:
            items = _key_items(keys[stop])
            value = values[stop]
            if items is None or not value or not _value_prefixes(value, size, prefixes, len(items)):
                row_wise.append(stop)
            else:
                spans.append((stop, len(key_items), len(items)))
                key_items += items
                framed.append(value)
                size += len(value)
            stop += 1
        heads = _keys_decoded(key_items)
        read = self._read_joined(heads, framed, prefixes)
        value_items: list[bytes] = []
        if read is None:
            value_items = _value_items(framed)
            read = self._read_values(heads, value_items)
        shapes, docs = read
        ops = _ops(docs)
        accepted: dict[_Shape, list[tuple[int, int, int]]] = {}
        shape = shapes[0] if shapes else None
        if shape is not None and not shape.ordered and shapes.count(shape) == len(shapes) and None not in ops:
            accepted[shape] = [(i, first, first + count) for i, first, count in spans]  # the usual chunk
            spans = []
        if spans and not value_items and any(s is not None and s.ordered for s in set(shapes)):
            value_items = _value_items(framed)  # once per chunk: a key of several columns is checked in order
        for i, first, count in spans:
            end = first + count
            shape = shapes[first]
            if (
                shape is None
                or shapes[first:end].count(shape) != count
                or None in ops[first:end]
                or (shape.ordered and not _in_order(shape, value_items[first:end]))
            ):
                row_wise.append(i)
            else:
                accepted.setdefault(shape, []).append((i, first, end))
        for shape, chosen in accepted.items():
            rows = gathered.get(shape)
            if rows is None:
                rows = gathered[shape] = _Gathered(shape)
            rows.add(chosen, heads, docs, ops)
        return stop

    def _read_joined(
        self, heads: list[Any], framed: list[bytes], prefixes: list[int]
    ) -> tuple[list[_Shape | None], list[Any]] | None:
        """The usual chunk, rows of one table and of its last shape, read in one msgspec call: the values joined into
        one JSON array, each item's length prefix overwritten by a separator. None for any other chunk."""
        if not heads or list(map(type, heads)).count(_RowKey) != len(heads):
            return None
        tables = list(map(_TABLE, heads))
        if tables.count(tables[0]) != len(tables):
            return None
        scm, tbl = tables[0]
        table = (scm or None, tbl or None)
        shape = self._last_shapes.get(table) or self._shape_of(table, _value_items(framed[:1])[0])
        if shape is None:
            return None
        docs = _joined(shape.batch, framed, prefixes)
        return None if docs is None else ([shape] * len(docs), docs)

    def _read_values(self, heads: list[Any], value_items: list[bytes]) -> tuple[list[_Shape | None], list[Any]]:
        """(shape, value Struct) of each row item (None where none fits): a table's items all decoded with its last
        shape in one go, those it does not fit each by the shape its image has."""
        shapes: list[_Shape | None] = [None] * len(heads)
        docs: list[Any] = [None] * len(heads)
        tables = list(map(_TABLE, heads)) if list(map(type, heads)).count(_RowKey) == len(heads) else None
        if tables and tables.count(tables[0]) == len(tables):  # the usual chunk: rows of one table
            scm, tbl = tables[0]
            by_table = {(scm or None, tbl or None): list(range(len(heads)))}
        else:
            by_table = {}
            for k, head in enumerate(heads):
                if type(head) is _RowKey:
                    by_table.setdefault((head.scm or None, head.tbl or None), []).append(k)
        for table, items in by_table.items():
            shape = self._last_shapes.get(table) or self._shape_of(table, value_items[items[0]])
            some = value_items if len(items) == len(value_items) else [value_items[k] for k in items]
            found = _each_decoded(shape.values.decode, some) if shape is not None else [None] * len(items)
            if some is value_items and None not in found:  # the usual chunk: one shape
                return [shape] * len(found), found
            for k, doc in zip(items, found):
                if doc is not None:
                    shapes[k], docs[k] = shape, doc
                    continue
                other = self._shape_of(table, value_items[k])
                if other is not None and other is not shape:
                    try:
                        docs[k] = other.values.decode(value_items[k])
                    except columns.UNREADABLE:
                        continue
                    shapes[k] = other
        return shapes, docs

    def _shape_of(self, table: _Table, item: bytes) -> _Shape | None:
        """The shape of a value item's image (its `d`, else its `u`), now the table's last; None where it has none
        the column path decodes (not an object of columns, a type code or flag `decode` does not know)."""
        try:
            doc = _ANY_VALUE.decode(item)
        except columns.UNREADABLE:
            return None
        image = doc.d if doc.d is not None else doc.u
        if not image:
            return None
        signature = tuple((name, column.t, column.f, column.h is True) for name, column in image.items())
        key = (table, signature)
        if key not in self._shapes:
            if len(self._shapes) >= _SHAPES_KEPT:
                self._shapes.clear()
                self._last_shapes.clear()
            self._shapes[key] = self._new_shape(table, signature)
        shape = self._shapes[key]
        if shape is not None:
            self._last_shapes[table] = shape
        return shape

    def _new_shape(self, table: _Table, signature: Signature) -> _Shape | None:
        """The shape of a signature; None for one of a type code or flag `decode` does not know, or of a column name
        msgspec takes for no field (a quote, a backslash or a control character in it)."""
        if not all(code << 8 | flag & 0x81 in self._plan for _, code, flag, _ in signature):
            return None
        try:
            return _Shape(table, signature, self)
        except ValueError:
            return None

    def _column_rule(self, code: int, flag: int) -> tuple[str, columns.ColumnRule]:
        """(how a column's JSON values become an Arrow array: int, float, double, text or null; the rule that makes
        its text canonical, with the converter `decode` uses for what the rule does not keep)."""
        convert = self._converter_table[code]
        if code == 6 or convert is None:
            return ("null" if code == 6 else "text"), columns.AS_SENT
        if code in _INTEGER_CODES and not flag & UNSIGNED_FLAG:
            return "int", columns.AS_SENT  # str(value), Arrow's text of it
        if code in _INTEGER_CODES or code in _INDEX_CODES:  # a negative one is unsigned's wrapped value
            return "int", columns.ColumnRule(_of_int(convert, flag), keep=columns.digits)
        if code == 13:
            return "int", columns.ColumnRule(_of_int(convert, flag), keep=columns.year, distinct=True)
        if code == 4:
            return "float", columns.ColumnRule(_of_float(convert, flag), distinct=True)
        if code == 5:
            return "double", columns.ColumnRule(_of_float(convert, flag), keep=columns.shortest_double, distinct=True)
        if code == 246 or (code in _QUOTED_CODES and not flag & BINARY_FLAG):
            return "text", columns.AS_SENT
        text = _of_text(convert, flag)
        if code == 7 and self.zone is None:
            return "text", columns.ColumnRule(text, keep=_utc_timestamps)
        if code == 7:
            return "text", columns.ColumnRule(text, keep=_plain_timestamps, minute=_utc_minute_in(self.zone))
        if code in _BASE64_CODES and flag & BINARY_FLAG:
            return "text", columns.ColumnRule(text, keep=columns.BASE64)
        return "text", columns.ColumnRule(text)  # quoted binary, base64 text: each value


def _require_string(value: Any, flag: int) -> NoReturn:
    raise TypeError(f"expected a string, got {type(value).__name__}")


_UTC = dt.UTC
_ONE_HOUR = dt.timedelta(hours=1)


def _is_plain_timestamp(text: str) -> bool:
    """`YYYY-MM-DD HH:MM:SS[.f{1,6}]`, the only shape TiCDC writes."""
    size = len(text)
    if size == 19:
        return text[10] == " "
    return 21 <= size <= 26 and text[10] == " " and text[19] == "." and text[20:].isdigit() and text.isascii()


def _hour_offset(zone: dt.tzinfo, start: dt.datetime) -> dt.timedelta | None:
    """The zone's UTC offset through the local hour from `start`; None where it changes within the hour (a DST
    fold or gap: those texts go to text_timestamp_from_zone itself)."""
    end = start + (_ONE_HOUR - dt.timedelta(microseconds=1))
    candidates = {
        zone.utcoffset(start),
        zone.utcoffset(start.replace(fold=1)),
        zone.utcoffset(end),
        zone.utcoffset(end.replace(fold=1)),
    }
    return candidates.pop() if len(candidates) == 1 else None


def _timestamp_converter(zone: dt.tzinfo | None) -> _TimestampConverter:
    """TIMESTAMP text in the changefeed zone -> canonical UTC text.

    Same result as values.text_timestamp_from_zone, faster: the zone's UTC offset is looked up once
    per local hour, and only for hours with no offset change inside (DST folds and gaps go to
    text_timestamp_from_zone itself).
    """
    offsets: dict[str, dt.timedelta | None] = {}

    def hour_offset(zone: dt.tzinfo, hour_text: str, start: dt.datetime) -> dt.timedelta | None:
        offset = _hour_offset(zone, start)
        if len(offsets) > 100_000:
            offsets.clear()
        offsets[hour_text] = offset
        return offset

    # plain texts by their first 19 characters (to the second) -> the UTC text of that second;
    # a pure function of those characters, so the rest of the text is carried over as below
    seconds_utc: dict[str, str] = {}

    def convert(value: Any, flag: int) -> str:
        if type(value) is not str:
            raise TypeError(f"expected a string, got {type(value).__name__}")
        if not _is_plain_timestamp(value) or value.startswith("0000-00-00"):
            return text_timestamp_from_zone(value, zone)
        second = value[:19]
        utc = seconds_utc.get(second)
        if utc is not None:
            return utc + value[19:]
        seconds = dt.datetime.fromisoformat(second)
        if zone is None:
            utc = second
        else:
            hour = value[:13]
            offset = offsets[hour] if hour in offsets else hour_offset(zone, hour, seconds.replace(minute=0, second=0))
            if offset is None:
                return text_timestamp_from_zone(value, zone)
            utc = (seconds - offset).isoformat(" ")
        if len(seconds_utc) >= 65536:
            seconds_utc.clear()
        seconds_utc[second] = utc
        return utc + value[19:]

    timestamp = cast(_TimestampConverter, convert)
    timestamp.seconds_utc = seconds_utc  # read by the generated image code
    return timestamp


# ---- row images by generated code ------------------------------------------------------------------
# An image's columns (name -> {"t", "f", "v", "h"}) are typed by each column's own code and flag, so
# a message carries its schema in every column. Once the same column list with the same codes, flags
# and handle marks has been decoded a few times, a function is generated (`fast_paths.generate`) for
# exactly that signature: straight-line code that checks each column still has it (`is` against the
# small-int objects the JSON parser returns; anything else means "not this signature") and converts
# each value with its column's converter inlined, fast paths for values already canonical. It returns
# (values, types, keys, type flags), types shared by every image of the signature, or None when
# anything differs or fails, and `_image` / `_values` then decode the image exactly (or raise their
# precise errors).

_LEARN_AFTER = 3  # images of one signature decoded exactly before its function is compiled
_VARIANTS = 4  # signatures kept per column-name list
_INTEGER_CODES = frozenset(_INTEGER_TYPES)
_INDEX_CODES = frozenset((16, 247, 248))
_AS_IS_CODES = frozenset((10, 11, 12, 14, 225, 245))  # converter None: the JSON string as is
_QUOTED_CODES = frozenset((15, 253, 254))


def _type_flags(types: dict[str, str]) -> tuple[str, ...]:
    type_names = types.values()
    flags = []
    if "enum" in type_names or "set" in type_names:
        flags.append("enum_index")
    if "decimal" in type_names:
        flags.append("types_partial")
    if "time" in type_names:
        flags.append("fsp_unknown")
    return tuple(flags)


def _value_code(code: int, flag: int, i: int) -> str:
    """An expression over `v` (the JSON value) giving the canonical text; `c{i}(v, f{i})` is the converter."""
    call = f"c{i}(v, f{i})"
    if code in _AS_IS_CODES:
        return "v if v is None or type(v) is str else fail()"
    if code in _INTEGER_CODES:
        whole = "type(v) is int and v >= 0" if flag & UNSIGNED_FLAG else "type(v) is int"
        return f"v if v is None or type(v) is str else str(v) if {whole} else {call}"
    if code in _INDEX_CODES:
        return f"v if v is None or type(v) is str else str(v) if type(v) is int and v >= 0 else {call}"
    if code == 246:
        return f"v if v is None or type(v) is str else str(v) if type(v) is int else {call}"
    if code == 5:
        return f"v if v is None or type(v) is str else (repr(v) if v != 0 else '0.0') if type(v) is float else {call}"
    if code in _QUOTED_CODES and not flag & BINARY_FLAG:
        return f"v if v is None or type(v) is str else {call}"
    if code == 7:  # the converter's own per-second memo, for the texts it puts there (plain ones)
        return (
            f"None if v is None else u + v[19:] if type(v) is str and (len(v) == 19 or 21 <= len(v) <= 26 "
            f"and v[19] == '.' and v[20:].isdigit() and v.isascii()) "
            f"and (u := c{i}_seconds(v[:19])) is not None else {call}"
        )
    return f"None if v is None else {call}"


def _image_source(signature: Signature) -> str:
    """Source of `make(...) -> image` for one signature: ((name, code, flag, h), ...) in message order."""
    lines = [
        "def make(fail, types, type_flags, small, converters):",
        *[f"  c{i} = converters[{i}]" for i in range(len(signature))],
        *[f"  c{i}_seconds = c{i}.seconds_utc.get" for i, (_, code, _, _) in enumerate(signature) if code == 7],
        *[f"  t{i} = small[{code}]" for i, (_, code, _, _) in enumerate(signature)],
        *[f"  f{i} = small[{flag}]" for i, (_, _, flag, _) in enumerate(signature)],
        "  def image(columns):",
        "    try:",
        # the caller looked this up by the column names: same names, same order
        "        " + "".join(f"k{i}, " for i in range(len(signature))) + "= columns.values()"
        if signature
        else "        pass",
    ]
    keys = []
    for i, (name, code, flag, h) in enumerate(signature):
        # a column without `f` (flag 0 for `_image`) is left to `_image`
        lines += [
            f"        c = k{i}",
            "        v = c['v']",
            f"        if c['t'] is not t{i} or c['f'] is not f{i}:",
            "            return None",
        ]
        if not flag & HANDLE_KEY_FLAG:
            lines += [
                "        if 'h' not in c or c['h'] is not True:" if h else "        if 'h' in c and c['h'] is True:",
                "            return None",
            ]
        if flag & HANDLE_KEY_FLAG or h:
            keys.append(name)
        lines.append(f"        x{i} = {_value_code(code, flag, i)}")
    lines += [
        "    except Exception:",
        "        return None",
        "    return {" + ", ".join(f"{name!r}: x{i}" for i, (name, _, _, _) in enumerate(signature)) + "}, "
        "types, [" + ", ".join(repr(k) for k in keys) + "], type_flags",
        "  return image",
    ]
    return "\n".join(lines) + "\n"


class _Fail(Exception):
    pass


def _fail() -> NoReturn:
    raise _Fail


_SMALL_INTS = {n: n for n in range(-5, 257)}


# ---- the column path -----------------------------------------------------------------------------
# `decode_columns` reads a batch's messages whose items are all rows of the usual form. Each value item is
# decoded with the msgspec Struct of its table's shape (column names, type codes, flags and handle marks; a type
# per value that admits only what TiCDC writes there), so that an item of another shape, or anything unusual,
# fails to decode and its message goes row-wise. JSON numbers arrive as Python ints and floats, texts as str: a
# column's values become one Arrow array per chunk, and Arrow compute makes them canonical per shape for the
# whole batch. Per-value Python is left to what has no vectorized form: FLOAT's 32-bit shortest digits and the
# rare text another rule does not keep (once per distinct value), Go-quoted binary strings and base64 text
# (each value), and the TIMESTAMP zone offset (once per distinct minute).

_CHUNK_ITEMS = 1024  # items per chunk, about: the cache holds their Structs (measured best from 512 to 2048)
_SHAPES_KEPT = 1024
_VERSION = BATCH_VERSION.to_bytes(8, "big")
_LENGTH = struct.Struct(">Q").unpack_from
_KEY_LAYOUTS: dict[tuple[int, int], Callable[[bytes], tuple[Any, ...]]] = {}  # (items, length) -> a key's unpack
_FIRST_BYTE = itemgetter(0)
_PREFIX = np.arange(8)
_SEPARATOR = np.frombuffer(b",\n      ", np.uint8)
_OPEN_BRACE, _OPEN_BRACKET = ord("{"), ord("[")
_BASE64_CODES = frozenset((249, 250, 251, 252))
_INSERT, _UPDATE, _DELETE = 0, 1, 2
_ABSENT = -1  # the code of a column an old row lacks
_ABSENT_VALUE = object()  # and its value
_COLUMNS = msgspec.structs.astuple  # a row Struct's column Structs
_VALUE = attrgetter("v")
_CODE = attrgetter("t")
_TS = attrgetter("ts")
_TABLE = attrgetter("scm", "tbl")
_OP_NAMES = pa.array(["insert", "update", "delete"], pa.string())
# the JSON integers orjson reads as int: from int64's least to uint64's greatest (it reads one beyond as a float,
# which `decode` rejects); msgspec bounds an int within int64 only, so the greatest is checked by `_integers`
_Integer = Annotated[int, msgspec.Meta(ge=-(1 << 63))]
_Table = tuple[str | None, str | None]  # (database, table)
# TIMESTAMP text the converter reads as it is (`_is_plain_timestamp`) and the datetime parser takes; its minute
# is still checked, by `_utc_minute_in`
_PLAIN_TIMESTAMP = columns.matching(r"^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-5][0-9](?:\.[0-9]{1,6})?$")


class _RowKey(msgspec.Struct, tag_field="t", tag=MESSAGE_ROW, forbid_unknown_fields=True, gc=False):
    """A row item's key of the usual form: the fields TiCDC writes (`decode` ignores `rid` and `ptn`, and any
    other, which goes row-wise here)."""

    ts: Annotated[int, msgspec.Meta(ge=0, le=(1 << 63) - 1)]
    scm: str | None = None
    tbl: str | None = None
    rid: int | None = None
    ptn: int | None = None
    ohk: Literal[False] = False  # handle key only: row-wise
    ccl: Literal[""] | None = None  # claim check: row-wise


class _DdlKey(msgspec.Struct, tag_field="t", tag=MESSAGE_DDL, gc=False):
    """A DDL item's key, for `decode`."""


class _ResolvedKey(msgspec.Struct, tag_field="t", tag=MESSAGE_RESOLVED, gc=False):
    """A resolved item's key, for `decode`."""


_KEY = msgspec.json.Decoder(_RowKey | _DdlKey | _ResolvedKey)
_ROW_KEYS = msgspec.json.Decoder(list[_RowKey])


class _AnyColumn(msgspec.Struct, gc=False):
    """A column read for its signature: type code and flag within what `decode`'s plan may know, any value."""

    t: Annotated[int, msgspec.Meta(ge=0, le=255)]
    v: Any
    f: Annotated[int, msgspec.Meta(ge=0, le=0xFFFF)] = 0
    h: bool | None = None


class _AnyValue(msgspec.Struct, gc=False):
    """A row value item read for its image's signature, to find its shape."""

    u: dict[str, _AnyColumn] | None = None
    d: dict[str, _AnyColumn] | None = None


_ANY_VALUE = msgspec.json.Decoder(_AnyValue)


class _Skipped(msgspec.Struct, gc=False):
    """Any object, read past."""


class _ImageNames(msgspec.Struct, gc=False):
    """A row value item read for the order of its image's columns (a Struct reads them in any order)."""

    u: dict[str, _Skipped] | None = None
    d: dict[str, _Skipped] | None = None


_IMAGE_NAMES = msgspec.json.Decoder(_ImageNames)


def _column_struct(code: int, flag: int, handle: bool, value: Any) -> Any:
    """The Struct of one column of a shape: its code, its flag (absent for 0, as `_image` reads it), `h` true for a
    handle mark, else absent, false or null, and a value of the type `value`. Its fields are in the order TiCDC
    writes them (`t`, `h` for a handle column, `f`, `v`), which msgspec matches fastest (keyword-only: any order)."""
    literal: Any = Literal
    t: tuple[Any, ...] = ("t", literal[code])
    f: tuple[Any, ...] = ("f", literal[flag]) if flag else ("f", literal[0], 0)
    v: tuple[Any, ...] = ("v", value)
    fields = [t, ("h", literal[True]), f, v] if handle else [t, f, v, ("h", literal[False] | None, None)]
    return msgspec.defstruct("Column", fields, forbid_unknown_fields=True, frozen=True, gc=False, kw_only=True)


# per kind of column: the msgspec type of its JSON value
_VALUE_TYPES: dict[str, Any] = {
    "int": _Integer | None,
    "float": float | None,
    "double": float | None,
    "text": str | None,
    "null": None,
}


# per kind of column: how a chunk's values become an Arrow array, and which of them `decode` rejects (or None)
_BUILDERS: dict[str, Callable[[list[Any]], tuple[Any, list[bool] | None]]] = {
    "int": columns.json_integers,
    "float": lambda values: (pa.array(values, pa.float64()), None),
    "double": lambda values: (pa.array(values, pa.float64()), None),
    "text": lambda values: (pa.array(values, pa.string()), None),
    "null": lambda values: (_nulls(values), None),
}


def _nulls(values: list[None]) -> Any:
    if values.count(None) != len(values):
        raise TypeError("a column of type NULL holds a value")
    return pa.nulls(len(values), pa.string())


def _non_negative(pieces: list[Any]) -> bool:
    """Whether a column's chunk arrays are all integers, none negative (uint64 ones never are)."""
    if not all(piece.type == pa.int64() or piece.type == pa.uint64() for piece in pieces):
        return False
    signed = [piece for piece in pieces if piece.type == pa.int64()]
    least = pc.min(pa.chunked_array(signed, pa.int64())).as_py() if signed else None
    return least is None or least >= 0


def _texts(kind: str, pieces: list[Any]) -> Any:
    """One column's chunk arrays as one text array: numbers as Arrow writes them (`double_texts` for DOUBLE)."""
    if kind == "int" and len({piece.type for piece in pieces}) > 1:
        pieces = [piece.cast(pa.string()) for piece in pieces]
    values = pa.concat_arrays(pieces)
    if kind == "double":
        return columns.double_texts(values)
    return values.cast(pa.string())


def _of_int(convert: Converter, flag: int) -> columns.Converter:
    return lambda text: convert(int(text), flag)


def _of_float(convert: Converter, flag: int) -> columns.Converter:
    return lambda text: convert(float(text), flag)  # Arrow's text of a double parses back to it exactly


def _of_text(convert: Converter, flag: int) -> columns.Converter:
    return lambda text: convert(text, flag)


def _utc_minute_in(zone: dt.tzinfo | None) -> Callable[[str], str | None]:
    """A local `YYYY-MM-DD HH:MM` -> its UTC minute, as `_timestamp_converter` moves the seconds in it (one offset
    for the whole hour); None where the converter must decide (an offset change within the hour or an offset
    with seconds, a date or time the parser rejects)."""

    def utc_minute(minute: str) -> str | None:
        try:
            local = dt.datetime.fromisoformat(minute + ":00")
            if zone is None:
                return minute
            offset = _hour_offset(zone, local.replace(minute=0))
            if offset is None or offset % _ONE_MINUTE:
                return None
            return (local - offset).isoformat(" ")[:16]
        except (ValueError, OverflowError):
            return None

    return utc_minute


_ONE_MINUTE = dt.timedelta(minutes=1)
_NO_ZONE = _utc_minute_in(None)


def _plain_timestamps(values: Any) -> Any:
    """`_PLAIN_TIMESTAMP`; for the usual column, texts of one length (a column's fractional digits are fixed), by
    each byte's range at its position (`columns.byte_ranges`), several times faster than the pattern."""
    lengths = pc.min_max(pc.binary_length(values))
    size = lengths["min"].as_py()
    low_high = _TIMESTAMP_BYTES.get(size)
    found = None
    if low_high is not None and lengths["max"].as_py() == size:
        found = columns.byte_ranges(values, *low_high, exact=True)
    return _PLAIN_TIMESTAMP(values) if found is None else found


def _timestamp_bytes(size: int) -> tuple[bytes, bytes]:
    """A `_PLAIN_TIMESTAMP` text of `size` bytes: its least and greatest byte at each position."""
    shape = "dddd-dd-dd dd:dd:5d" + ("." + "d" * (size - 20) if size > 19 else "")
    return shape.replace("d", "0").replace("5", "0").encode(), shape.replace("d", "9").encode()


_TIMESTAMP_BYTES = {size: _timestamp_bytes(size) for size in (19, 21, 22, 23, 24, 25, 26)}


def _utc_timestamps(values: Any) -> Any:
    """TIMESTAMP text in UTC that the converter returns as it is: plain, of a minute that exists (checked once per
    distinct minute)."""
    plain = pc.fill_null(_plain_timestamps(values), False)
    if not pc.any(plain).as_py():
        return plain
    minutes = pc.binary_slice(values.cast(pa.binary()), 0, 16)
    distinct = pc.unique(minutes.filter(plain)).to_pylist()
    real = pa.array([m for m in distinct if _NO_ZONE(m.decode()) is not None], pa.binary())
    return pc.and_(plain, pc.is_in(minutes, real))


def _items(data: bytes, start: int) -> list[bytes] | None:
    """`split_items` without its errors: None where the framing is broken. Copies, not views: a bytes object is
    cheap to make and, unlike a memoryview, not one the garbage collector tracks."""
    end = len(data)
    items: list[bytes] = []
    pos = start
    try:
        while pos < end:
            stop = pos + 8 + _LENGTH(data, pos)[0]
            items.append(data[pos + 8 : stop])
            pos = stop
    except struct.error:  # a length prefix cut short
        return None
    return items if pos == end else None  # past the end: an item ran past it


def _key_items(key: bytes | None) -> Sequence[bytes] | None:
    """A message's key items (`_items`); None unless it frames at least one. The usual key, items of one length
    (a table's row keys), is split by one `struct` call that also reads every length prefix, checked equal."""
    if not key or len(key) < 16 or key[:8] != _VERSION:
        return None
    length = _LENGTH(key, 8)[0]
    count, rest = divmod(len(key) - 8, 8 + length)
    if not rest and count <= _CHUNK_ITEMS:
        layout = _KEY_LAYOUTS.get((count, length))
        if layout is None:
            if len(_KEY_LAYOUTS) >= 256:
                _KEY_LAYOUTS.clear()
            layout = _KEY_LAYOUTS[count, length] = struct.Struct(">8x" + f"Q{length}s" * count).unpack_from
        parts = layout(key)
        if parts[0::2].count(length) == count:
            return parts[1::2]
    return _items(key, 8) or None


def _value_prefixes(value: bytes, base: int, prefixes: list[int], count: int) -> bool:
    """Append where each of a value's items has its length prefix (plus `base`); whether it frames exactly `count`
    items (else nothing is appended)."""
    mark = len(prefixes)
    end = len(value)
    pos = 0
    add = prefixes.append
    try:
        while pos < end:
            add(base + pos)
            pos += 8 + _LENGTH(value, pos)[0]
    except struct.error:  # a length prefix cut short
        pos = -1
    if pos == end and len(prefixes) - mark == count:
        return True
    del prefixes[mark:]
    return False


def _value_items(framed: list[bytes]) -> list[bytes]:
    """The items of values `_value_prefixes` framed, one after another."""
    return [item for value in framed for item in _items(value, 0) or ()]


def _keys_decoded(items: list[bytes]) -> list[Any]:
    """Each key item decoded, None where it does not decode: row keys in one msgspec call (`_joined`'s reasoning:
    each item begins an object, the separators hold a newline, a row key holds no nested value), else item by
    item."""
    try:
        whole = bytes(map(_FIRST_BYTE, items)) == b"{" * len(items)
    except IndexError:  # an empty item
        whole = False
    if whole:
        try:
            heads: list[Any] = _ROW_KEYS.decode(b"[" + b",\n".join(items) + b"]")
        except columns.UNREADABLE:
            pass
        else:
            if len(heads) == len(items):
                return heads
    return _each_decoded(_KEY.decode, items)


def _joined(decoder: msgspec.json.Decoder[Any], framed: list[bytes], prefixes: list[int]) -> list[Any] | None:
    """The value items of `framed` decoded in one msgspec call, as one JSON array: each 8-byte length prefix (at
    `prefixes`) overwritten by `,`, a newline and spaces, the first by `[`; None unless it decodes to one value per
    item (the chunk is then read item by item).

    Each value is then exactly its item's: every item must begin with `{`, and a value running across a separator
    would hold a string with a raw newline (which JSON forbids) or an object in which a `,` is followed by `{`, not
    a key; the Structs take no array, in which it could go on. An item holding two values makes one too many."""
    buffer = bytearray().join([*framed, b"]"])
    view = np.frombuffer(buffer, np.uint8)
    at = np.array(prefixes)
    if not (view[at + 8] == _OPEN_BRACE).all():
        return None
    view[at[:, None] + _PREFIX] = _SEPARATOR
    view[0] = _OPEN_BRACKET
    try:
        docs: list[Any] = decoder.decode(buffer)
    except columns.UNREADABLE:
        return None
    return docs if len(docs) == len(prefixes) else None


def _each_decoded(decode: Callable[[bytes], Any], items: list[bytes]) -> list[Any]:
    """Each item decoded, None where it does not decode: all in one go, item by item only when one fails."""
    try:
        return list(map(decode, items))
    except columns.UNREADABLE:
        pass
    found: list[Any] = []
    for item in items:
        try:
            found.append(decode(item))
        except columns.UNREADABLE:
            found.append(None)
    return found


def _ops(docs: list[Any]) -> list[int | None]:
    """Each value Struct's op as `_row` reads it: `d` a delete, else `u` an insert, with `p` an update; None where
    there is no Struct or it has neither (`decode`'s error)."""
    return [
        (_DELETE if doc.d is not None else _INSERT if doc.p is None else _UPDATE)
        if doc is not None and (doc.d is not None or doc.u is not None)
        else None
        for doc in docs
    ]


def _in_order(shape: _Shape, items: list[bytes]) -> bool:
    """Whether each item's image has its columns in the shape's order (the order of its key columns)."""
    for item in items:
        try:
            doc = _IMAGE_NAMES.decode(item)
        except columns.UNREADABLE:
            return False
        image = doc.d if doc.d is not None else doc.u
        if image is None or tuple(image) != shape.names:
            return False
    return True


class _Shape:
    """One table's row shape: its columns' names, type codes, flags and handle marks (the signature), the msgspec
    Struct of a value item of exactly that shape, and how each column becomes canonical text."""

    def __init__(self, table: _Table, signature: Signature, decoder: OpenDecoder):
        self.database, self.table = table
        self.names = tuple(name for name, _, _, _ in signature)
        plan = decoder._plan
        self.column_types = {name: plan[code << 8 | flag & 0x81][0] for name, code, flag, _ in signature}
        self.key_columns = [name for name, _, flag, h in signature if flag & HANDLE_KEY_FLAG or h]
        self.flags = _type_flags(self.column_types)
        # the key's order is its columns' order in the image, which a Struct does not see: checked item by item
        self.ordered = len(self.key_columns) > 1
        self.rules = [decoder._column_rule(code, flag) for _, code, flag, _ in signature]
        self.builders = [_BUILDERS[kind] for kind, _ in self.rules]
        fields = [f"c{i}" for i in range(len(signature))]
        structs = [
            _column_struct(code, flag, h, _VALUE_TYPES[kind])
            for (_, code, flag, h), (kind, _) in zip(signature, self.rules)
        ]
        # an update's `p` may hold only some columns (only-output-updated-columns): the others are a column of
        # code `_ABSENT` and value `_ABSENT_VALUE`, which `old_arrays` finds
        absent = [
            column(t=_ABSENT, v=_ABSENT_VALUE, f=flag, h=True if h else None)
            for column, (_, _, flag, h) in zip(structs, signature)
        ]
        rename = dict(zip(fields, self.names))
        row = msgspec.defstruct("Row", list(zip(fields, structs)), rename=rename, forbid_unknown_fields=True, gc=False)
        old_row = msgspec.defstruct(
            "OldRow", list(zip(fields, structs, absent)), rename=rename, forbid_unknown_fields=True, gc=False
        )
        value = msgspec.defstruct(
            "Value",
            [("u", row | None, None), ("p", old_row | None, None), ("d", row | None, None)],
            forbid_unknown_fields=True,
            gc=False,
        )
        self.values = msgspec.json.Decoder(value)
        # a chunk's value items as one JSON array (`_joined`)
        self.batch = msgspec.json.Decoder(list[value])  # type: ignore[valid-type]

    def arrays(self, rows: list[Any]) -> tuple[list[Any], Any]:
        """Each column's values in these row Structs as an Arrow array, and which rows hold an integer `decode`
        rejects (None when none does)."""
        values = list(map(_VALUE, itertools.chain.from_iterable(map(_COLUMNS, rows))))
        return self._built(values)

    def old_arrays(self, rows: list[Any]) -> tuple[list[Any], Any, list[Any] | None]:
        """`arrays` of old row Structs, and per column which of them hold it (None when each holds every column).

        A column an old row lacks holds `_ABSENT_VALUE`, which no builder takes: only a chunk with one is built
        again, knowing which."""
        values = list(map(_VALUE, itertools.chain.from_iterable(map(_COLUMNS, rows))))
        try:
            return (*self._built(values), None)
        except (TypeError, ValueError):
            pass
        width = len(self.names)
        lacking = np.array(list(map(_CODE, itertools.chain.from_iterable(map(_COLUMNS, rows))))) == _ABSENT
        known = np.array(values, dtype=object)
        known[lacking] = None
        return (*self._built(known.tolist()), [pa.array(~lacking[j::width]) for j in range(width)])

    def _built(self, values: list[Any]) -> tuple[list[Any], Any]:
        """`arrays` of the values of rows, row after row."""
        width = len(self.names)
        built = [build(values[j::width]) for j, build in enumerate(self.builders)]
        rejected = None
        for _, beyond in built:
            if beyond is not None:
                rejected = np.array(beyond) if rejected is None else rejected | np.array(beyond)
        return [array for array, _ in built], rejected


class _Gathered:
    """One shape's rows in a batch, gathered chunk by chunk: message, commit ts and op per row, and each column's
    values as an Arrow array per chunk, of the image each row has (`u`, or a delete's `d`) and, apart, of the
    updates' `p` with which columns it holds."""

    def __init__(self, shape: _Shape):
        self.shape = shape
        self.messages: list[int] = []
        self.stamps: list[int] = []
        self.ops: list[int] = []
        self.rejected: set[int] = set()  # messages holding an integer `decode` rejects
        width = len(shape.names)
        self.columns: list[list[Any]] = [[] for _ in range(width)]
        self.old_columns: list[list[Any]] = [[] for _ in range(width)]
        # per chunk with updates: how many, and which columns their `p` holds (None: every column)
        self.held: list[tuple[int, list[Any] | None]] = []

    def add(self, chosen: list[tuple[int, int, int]], heads: list[Any], docs: list[Any], ops: list[Any]) -> None:
        """A chunk's messages of this shape, each (message index, first item, item end) into the chunk's key
        items, value Structs and ops; their values into Arrow arrays."""
        if sum(end - first for _, first, end in chosen) != len(docs):
            picked = [k for _, first, end in chosen for k in range(first, end)]
            heads, docs, ops = [heads[k] for k in picked], [docs[k] for k in picked], [ops[k] for k in picked]
        messages = list(itertools.chain.from_iterable(itertools.repeat(i, end - first) for i, first, end in chosen))
        self.messages += messages
        self.stamps += map(_TS, heads)
        self.ops += ops
        images = [doc.d if op == _DELETE else doc.u for doc, op in zip(docs, ops)]
        olds = [doc.p for doc, op in zip(docs, ops) if op == _UPDATE]
        shape = self.shape
        arrays, rejected = shape.arrays(images)
        for j, array in enumerate(arrays):
            self.columns[j].append(array)
        if rejected is not None:
            self.rejected.update(itertools.compress(messages, rejected))
        if olds:
            arrays, rejected, held = shape.old_arrays(olds)
            for j, array in enumerate(arrays):
                self.old_columns[j].append(array)
            if rejected is not None:
                updates = [m for m, op in zip(messages, ops) if op == _UPDATE]
                self.rejected.update(itertools.compress(updates, rejected))
            self.held.append((len(olds), held))

    def block(self, old_value: bool, only_updated: bool, row_wise: list[int]) -> RowBlock | None:
        """The shape's RowBlock; a message holding a value its converter rejects goes to `row_wise`."""
        shape = self.shape
        count = len(self.messages)
        if not count:
            return None
        ops = np.array(self.ops, np.int8)
        updating = ops == _UPDATE
        is_update = pa.array(updating)
        message = pa.array(np.array(self.messages, np.int32))
        rejected = np.zeros(count, bool)
        if self.rejected:
            rejected |= pc.is_in(message, pa.array(list(self.rejected), pa.int32())).to_numpy(zero_copy_only=False)
        updates = int(updating.sum())
        # where each row's before image is among a column's texts (its rows', then the updates' `p`): its own row,
        # an update's `p`
        before_at = np.arange(count)
        before_at[updating] = count + np.arange(updates)
        taken = pa.array(before_at)
        partly = any(held is not None for _, held in self.held)
        after_columns, before_columns = [], []
        missing = None  # updates whose `p` lacks a column
        for j, (kind, rule) in enumerate(shape.rules):
            pieces = self.columns[j] + self.old_columns[j]
            if rule.keep is columns.digits and _non_negative(pieces):
                rule = columns.AS_SENT  # the text of a non-negative integer is its converter's
            texts, bad = columns.converted(_texts(kind, pieces), rule)
            if bad is not None:
                bad_rows = bad.to_numpy(zero_copy_only=False)
                rejected |= bad_rows[:count]
                rejected[updating] |= bad_rows[count:]
            column = texts.slice(0, count)
            after_columns.append(column)
            if not updates:
                before_columns.append(column)
                continue
            if partly:  # a column `p` lacks is the `u` one
                held = pa.concat_arrays(
                    [pa.array(np.ones(size, bool)) if chunk is None else chunk[j] for size, chunk in self.held]
                )
                texts = pa.concat_arrays([column, pc.if_else(held, texts.slice(count), column.filter(is_update))])
                missing = pc.invert(held) if missing is None else pc.or_(missing, pc.invert(held))
            before_columns.append(texts.take(taken))
        commit_ts = pa.array(np.array(self.stamps, np.int64))
        op = _OP_NAMES.take(pa.array(ops))
        names = list(shape.names)
        before = struct_of(names, before_columns, pa.array(ops != _INSERT))
        after = struct_of(names, after_columns, pa.array(ops != _DELETE))
        row_flags = {}
        if not old_value and (ops == _INSERT).any():
            row_flags["old_value_missing"] = pa.array(ops == _INSERT)
        if only_updated and updating.any():
            row_flags["old_value_partial"] = is_update
        elif missing is not None and pc.any(missing).as_py():
            row_flags["old_value_partial"] = pc.replace_with_mask(pa.array(np.zeros(count, bool)), is_update, missing)
        block = RowBlock(
            shape.database,
            shape.table,
            list(shape.key_columns),
            dict(shape.column_types),
            names,
            message,
            commit_ts,
            op,
            before,
            after,
            shape.flags,
            row_flags,
        )
        return columns.without_rejected(block, pa.array(rejected), row_wise)


__all__ = [
    "CANONICAL_TYPES",
    "PROTOCOL",
    "OpenDecoder",
    "go_unquote",
    "parse_time_zone",
    "split_items",
]


def without_events(
    decoder: OpenDecoder, key: bytes | None, value: bytes | None, drop: Callable[[ChangeEvent], bool]
) -> tuple[bytes, bytes] | None:
    """The batch without the items whose event `drop` picks (erasure); the kept items' bytes stay as they were.
    The message itself when none is picked, None when none is left."""
    if key is None or len(key) < 8:
        raise _error("message has no batch key", "key")
    keys = split_items(key, 8, "key")
    values = split_items(value, 0, "value") if value else []
    if len(keys) != len(values):
        raise _error(f"{len(keys)} key items but {len(values)} value items", "value")
    kept = []
    for key_item, value_item in zip(keys, values):
        one_key, one_value = key[:8] + _framed(key_item), _framed(value_item)
        if not any(drop(event) for event in decoder.decode(one_key, one_value)):
            kept.append((key_item, value_item))
    if len(kept) == len(keys):
        return key, value or b""
    if not kept:
        return None
    return key[:8] + b"".join(_framed(k) for k, _ in kept), b"".join(_framed(v) for _, v in kept)


def _framed(item: bytes | memoryview) -> bytes:
    return len(item).to_bytes(8, "big") + bytes(item)
