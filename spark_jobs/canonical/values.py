"""Canonical value text and canonical MySQL types, shared by every codec, the DDL interpreter, the Dumpling reader and the simulator.

The same upstream value must give the same text from every protocol; these functions are the
single definition of that text (ARCHITECTURE.md, "Canonical value text").
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import re
import struct
from decimal import Decimal
from typing import Any

INTEGER_TYPES = ("tinyint", "smallint", "mediumint", "int", "bigint")
CHAR_TYPES = ("char", "varchar", "tinytext", "text", "mediumtext", "longtext")
BINARY_TYPES = ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob")
TEMPORAL_TYPES = ("date", "datetime", "timestamp", "time", "year")

_TYPE_RE = re.compile(r"^\s*([a-z]+)\s*(?:\((.*)\))?\s*(.*)$", re.S)
_ALIASES = {
    "integer": "int",
    "bool": "tinyint",
    "boolean": "tinyint",
    "numeric": "decimal",
    "dec": "decimal",
    "fixed": "decimal",
    "real": "double",
    "int24": "mediumint",
}


def parse_type(definition: str) -> tuple[str, str | None, bool]:
    """Split a MySQL column type into (base name, argument text, unsigned)."""
    m = _TYPE_RE.match(definition.strip().lower())
    if not m:
        raise ValueError(f"not a MySQL column type: {definition!r}")
    base, args, rest = m.group(1), m.group(2), m.group(3)
    base = _ALIASES.get(base, base)
    if base == "double" and rest.startswith("precision"):
        rest = rest[len("precision") :]
    return base, args, "unsigned" in rest.split()


def canonical_type(definition: str) -> str:
    """`int(11) unsigned` -> `int unsigned`; `decimal(10,4)` stays; `varchar(20)` -> `varchar`."""
    base, args, unsigned = parse_type(definition)
    if base in INTEGER_TYPES:
        return base + (" unsigned" if unsigned else "")
    if base == "decimal":
        if args is None:
            return "decimal"
        parts = [p.strip() for p in args.split(",")]
        return f"decimal({parts[0]},{parts[1] if len(parts) > 1 else 0})"
    return base


def type_args(definition: str) -> str | None:
    return parse_type(definition)[1]


def enum_elements(definition: str) -> list[str]:
    """Labels of `enum('a','b')` / `set('x','y')` in order (SQL quoting undone)."""
    args = parse_type(definition)[1] or ""
    return [m.group(1).replace("''", "'").replace("\\\\", "\\") for m in re.finditer(r"'((?:[^']|'')*)'", args)]


def fsp_of(definition: str) -> int:
    """Fractional-second digits of datetime/timestamp/time (0 when absent)."""
    args = parse_type(definition)[1]
    return int(args) if args and args.strip().isdigit() else 0


def decimal_scale(definition: str) -> int | None:
    base, args, _ = parse_type(definition)
    if base != "decimal" or args is None:
        return None
    parts = args.split(",")
    return int(parts[1]) if len(parts) > 1 else 0


# ---- value text -------------------------------------------------------------------------------


def text_int(value: int | str) -> str:
    return str(int(value))


def text_unsigned(value: int | str, bits: int = 64) -> str:
    """Unwrap an unsigned value a protocol sent as a negative signed integer."""
    n = int(value)
    if n < 0:
        n += 1 << bits
    return str(n)


_INT_BITS = {"tinyint": 8, "smallint": 16, "mediumint": 24, "int": 32, "bigint": 64}


def int_bits(base: str) -> int:
    return _INT_BITS[base]


# DECIMAL(65,30) needs 65 digits, more than the default context's 28; anything beyond MySQL's 65
# digits is not a DECIMAL value and fails the quantize (InvalidOperation).
_DECIMAL_CONTEXT = decimal.Context(prec=65, traps=[decimal.InvalidOperation])


def text_decimal(value: Decimal | str | int, scale: int | None) -> str:
    """Exact digits with the column's scale; `scale=None` keeps the digits as given."""
    d = value if isinstance(value, Decimal) else Decimal(str(value).strip())
    if scale is not None:
        d = d.quantize(Decimal(1).scaleb(-scale), context=_DECIMAL_CONTEXT)
    text = format(d, "f")
    if text.startswith("-") and d == 0:
        text = text[1:]
    return text


def text_double(value: float | str) -> str:
    """Shortest text that round-trips as a 64-bit float."""
    x = float(value)
    if x == 0:
        x = 0.0
    return repr(x)


_F32 = struct.Struct("<f")


def to_float32(x: float) -> float:
    narrowed: float = _F32.unpack(_F32.pack(x))[0]
    return narrowed


def text_float(value: float | str) -> str:
    """Shortest text that round-trips as a 32-bit float (`1.1` not `1.100000023841858`)."""
    x = to_float32(float(value))
    if x == 0:
        return "0.0"
    if x != x or x in (float("inf"), float("-inf")):
        return repr(x)
    for digits in range(1, 10):
        s = f"{x:.{digits}g}"
        try:
            if to_float32(float(s)) == x:
                return repr(float(s))
        except OverflowError:  # rounding FLOAT's maximum up leaves the 32-bit range: try more digits
            continue
    return repr(x)


def text_date(value: dt.date | str) -> str:
    if isinstance(value, str):
        return value[:10]
    return f"{value.year:04d}-{value.month:02d}-{value.day:02d}"


def _fraction(micros: int, fsp: int) -> str:
    if fsp <= 0:
        return ""
    return "." + f"{micros:06d}"[:fsp]


def text_datetime(value: dt.datetime, fsp: int) -> str:
    """`YYYY-MM-DD HH:MM:SS[.f]` with exactly `fsp` fractional digits (TIMESTAMP: pass a UTC value)."""
    return (
        f"{value.year:04d}-{value.month:02d}-{value.day:02d} "
        f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}{_fraction(value.microsecond, fsp)}"
    )


def text_time(value: dt.timedelta | int, fsp: int) -> str:
    """`[-]HH:MM:SS[.f]` from a duration (or microseconds); hours may exceed 24 (MySQL TIME)."""
    micros = (
        value
        if isinstance(value, int)
        else (value.days * 86_400_000_000 + value.seconds * 1_000_000 + value.microseconds)
    )
    sign = "-" if micros < 0 else ""
    micros = abs(micros)
    secs, frac = divmod(micros, 1_000_000)
    hours, rem = divmod(secs, 3600)
    return f"{sign}{hours:02d}:{rem // 60:02d}:{rem % 60:02d}{_fraction(frac, fsp)}"


def text_year(value: int | str) -> str:
    return f"{int(value):04d}"


def text_bytes(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def text_enum(index: int, elements: list[str] | None) -> tuple[str, bool]:
    """ENUM by 1-based index: (label, False) when elements are known, else (index text, True = enum_index)."""
    if elements is None:
        return str(index), True
    if index == 0:
        return "", False
    return elements[index - 1], False


def text_set(bitmask: int, elements: list[str] | None) -> tuple[str, bool]:
    if elements is None:
        return str(bitmask), True
    return ",".join(e for i, e in enumerate(elements) if bitmask >> i & 1), False


def parse_datetime_text(text: str) -> tuple[dt.datetime, int]:
    """`2006-01-02 15:04:05[.ffffff]` -> (naive datetime, digits of fraction given)."""
    text = text.strip().replace("T", " ")
    date_part, _, time_part = text.partition(" ")
    y, mo, d = (int(p) for p in date_part.split("-"))
    hms, _, frac = (time_part or "00:00:00").partition(".")
    h, mi, s = (int(p) for p in hms.split(":"))
    micros = int((frac + "000000")[:6]) if frac else 0
    return dt.datetime(y, mo, d, h, mi, s, micros), len(frac)


UTC_ZONE_NAMES = frozenset({"", "UTC", "Etc/UTC", "GMT", "Etc/GMT", "Z", "UCT", "Universal", "Zulu"})
_OFFSET_RE = re.compile(r"^(?:UTC|GMT)?([+-])(\d{1,2})(?::?(\d{2}))?$")


def time_zone(name: str | None) -> dt.tzinfo | None:
    """A time zone as TiCDC, Go and MySQL write it: a UTC name, a fixed offset (`+08:00`, `UTC+8`, `-0530`) or an
    IANA name; None stands for UTC (no conversion). An unknown name raises ValueError (ZoneInfoNotFoundError)."""
    if name is None or name in UTC_ZONE_NAMES or name.upper() in ("UTC", "Z", "ETC/UTC"):
        return None
    offset = _OFFSET_RE.match(name)
    if offset:
        minutes = int(offset.group(2)) * 60 + int(offset.group(3) or 0)
        return dt.timezone(dt.timedelta(minutes=minutes if offset.group(1) == "+" else -minutes)) if minutes else None
    from zoneinfo import ZoneInfo

    return ZoneInfo(name)


def text_timestamp_from_zone(text: str, zone: dt.tzinfo | None, fsp: int | None = None) -> str:
    """A TIMESTAMP rendered in the changefeed's time zone -> canonical UTC text.

    Zero timestamps (`0000-00-00 00:00:00`) are kept as sent.
    """
    if text.startswith("0000-00-00"):
        return text
    value, given = parse_datetime_text(text)
    if zone is not None:
        value = value.replace(tzinfo=zone).astimezone(dt.UTC).replace(tzinfo=None)
    return text_datetime(value, given if fsp is None else fsp)


# ---- expected text for the simulator (Python value -> canonical text) -----------------------------


def canonical_value(definition: str, value: Any) -> str | None:
    """Canonical text of a typed Python value in a column of this MySQL type (the simulator's oracle)."""
    return None if value is None else canonical_text(definition, value)


def canonical_text(definition: str, value: Any) -> str:
    """`canonical_value` of a value that is not None, so text for certain (the DDL interpreter's defaults)."""
    base, _args, _unsigned = parse_type(definition)
    if base in INTEGER_TYPES:
        return text_int(value)
    if base == "decimal":
        return text_decimal(Decimal(value), decimal_scale(definition))
    if base == "float":
        return text_float(value)
    if base == "double":
        return text_double(value)
    if base == "date":
        return text_date(value)
    if base in ("datetime", "timestamp"):
        return text_datetime(value, fsp_of(definition))
    if base == "time":
        return text_time(value, fsp_of(definition))
    if base == "year":
        return text_year(value)
    if base == "bit":
        return text_int(value)
    if base == "enum":
        label: str = value
        return label
    if base == "set":
        chosen = set(value) if not isinstance(value, str) else set(value.split(",")) - {""}
        return ",".join(e for e in enum_elements(definition) if e in chosen)
    if base in BINARY_TYPES:
        return text_bytes(value)
    if base == "json":
        document: str = value
        return document
    return str(value)
