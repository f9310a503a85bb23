"""Literals in DDL (defaults) and their canonical value text: what a column added with `DEFAULT x` shows."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import re
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

from spark_jobs.canonical.values import (
    BINARY_TYPES,
    CHAR_TYPES,
    INTEGER_TYPES,
    canonical_text,
    decimal_scale,
    enum_elements,
    fsp_of,
    parse_type,
)
from spark_jobs.ddl.model import _NotUnderstood
from spark_jobs.ddl.schema import _same_name
from spark_jobs.ddl.tokens import _Cursor


@dataclass(frozen=True)
class _Literal:
    kind: str  # null, number, string, bytes, bits, now, expression
    value: Any = None  # number: its text; string: str; bytes: bytes; bits: int; now: fsp or None; expression: SQL


_NOW_WORDS = ("CURRENT_TIMESTAMP", "NOW", "LOCALTIME", "LOCALTIMESTAMP")


def _literal(cur: _Cursor) -> _Literal:
    """A DEFAULT value: a literal, CURRENT_TIMESTAMP, or an expression kept as SQL text."""
    start = cur.i
    if cur.at_punct("("):
        inner = cur.group()
        try:
            literal = _literal(inner)
            if inner.at_end():
                return literal
        except _NotUnderstood:
            pass
        return _Literal("expression", cur.text(start))
    negative = False
    while cur.at_punct("-") or cur.at_punct("+"):
        negative ^= cur.next().text == "-"
    t = cur.next()
    if t.kind == "number" or (t.text == "." and cur.kind() == "number"):
        digits = t.text if t.kind == "number" else "." + cur.next().text
        return _Literal("number", ("-" if negative else "") + digits)
    if negative:
        return _Literal("expression", cur.text(start))
    if t.kind == "introducer":
        value = _literal(cur)
        if t.text.lower() == "_binary" and value.kind == "string":
            return _Literal("bytes", value.value.encode())
        return value
    if t.kind == "string":
        text = t.text
        while cur.kind() == "string":  # 'a' 'b' is 'ab'
            text += cur.next().text
        return _Literal("string", text)
    if t.kind == "bits":
        return _Literal("bits", int(t.text or "0", 2))
    if t.kind == "hex":
        return _Literal("bytes", binascii.unhexlify(t.text.rjust(len(t.text) + len(t.text) % 2, "0")))
    if t.word in ("TRUE", "FALSE"):
        return _Literal("number", "1" if t.word == "TRUE" else "0")
    if t.word == "NULL":
        return _Literal("null")
    if t.word in _NOW_WORDS:
        fsp = None
        if cur.at_punct("("):
            inner = cur.group()
            fsp = int(inner.next().text) if not inner.at_end() else None
        return _Literal("now", fsp)
    if t.word in ("DATE", "TIME", "TIMESTAMP") and cur.kind() == "string":
        return _Literal("string", cur.next().text)
    if t.kind == "word" and cur.at_punct("("):
        cur.group()
    return _Literal("expression", cur.text(start))


def _decimal(lit: _Literal) -> Decimal:
    if lit.kind == "number":
        return Decimal(lit.value)
    if lit.kind == "string":
        return Decimal(lit.value.strip())
    if lit.kind == "bits":
        return Decimal(lit.value)
    if lit.kind == "bytes":
        return Decimal(int.from_bytes(lit.value, "big"))
    raise ValueError(lit.kind)


def _bytes(lit: _Literal) -> bytes:
    if lit.kind == "bytes":
        data: bytes = lit.value
        return data
    if lit.kind == "bits":
        bits: int = lit.value
        return bits.to_bytes(max(1, (bits.bit_length() + 7) // 8), "big")
    return str(lit.value).encode()


def _text(lit: _Literal) -> str:
    return _bytes(lit).decode() if lit.kind in ("bytes", "bits") else str(lit.value)


def _rounded(micros: int, fsp: int) -> int:
    """Microseconds rounded half up to `fsp` digits, as MySQL stores a too-precise temporal value."""
    unit: int = 10 ** (6 - fsp)  # fsp is 0..6: an int (typeshed's int ** int is Any, for negative powers)
    return (micros + unit // 2) // unit * unit


_DATETIME = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})(?:[ T](\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.(\d{1,6}))?)?")

_TIME_OF_DAY = re.compile(r"\d:\d\d(?:\.(\d+))?$")

_TIME = re.compile(r"(-)?(?:(\d+) )?(\d+):(\d{1,2})(?::(\d{1,2})(?:\.(\d{1,6}))?)?")


def _datetime(text: str, fsp: int) -> dt.datetime | None:
    """None for MySQL's zero date."""
    m = _DATETIME.fullmatch(text.strip())
    if not m:
        raise ValueError(f"not a date/time: {text!r}")
    y, mo, d, h, mi, s = (int(g or 0) for g in m.groups()[:6])
    if (y, mo, d) == (0, 0, 0):
        return None
    micros = _rounded(int((m.group(7) or "").ljust(6, "0")), fsp)
    return dt.datetime(y, mo, d, h, mi, s) + dt.timedelta(microseconds=micros)


def _time(lit: _Literal, fsp: int) -> dt.timedelta:
    text = _text(lit).strip()
    m = _TIME.fullmatch(text)
    if m:
        sign, days, h, mi, s, frac = m.groups()
        seconds = int(days or 0) * 86400 + int(h) * 3600 + int(mi) * 60 + int(s or 0)
    else:
        number = Decimal(text)  # HHMMSS[.f]
        sign, whole = ("-" if number < 0 else None), int(abs(number))
        seconds = whole // 10000 * 3600 + whole // 100 % 100 * 60 + whole % 100
        frac = format(abs(number) % 1, "f")[2:]
    micros = seconds * 1_000_000 + _rounded(int((frac or "").ljust(6, "0")[:6]), fsp)
    return dt.timedelta(microseconds=-micros if sign else micros)


def _year(lit: _Literal) -> int:
    n = int(_decimal(lit).to_integral_value(ROUND_HALF_UP))
    if lit.kind == "string" and n == 0:
        return 2000
    if 1 <= n <= 69:
        return 2000 + n
    return 1900 + n if 70 <= n <= 99 else n


def _label(elements: list[str], lit: _Literal) -> str:
    if lit.kind == "number":
        index = int(lit.value)
        if not 1 <= index <= len(elements):
            raise ValueError(f"no label {index}")
        return elements[index - 1]
    text = _text(lit).rstrip(" ")
    for e in elements:
        if _same_name(e, text):
            return e
    raise ValueError(f"{text!r} is not one of {elements}")


def _value(lit: _Literal, definition: str) -> Any:
    """The literal as the typed Python value `values.canonical_value` expects (MySQL's conversions)."""
    base, args, unsigned = parse_type(definition)
    if base in INTEGER_TYPES:
        n = int(_decimal(lit).to_integral_value(ROUND_HALF_UP))
        if unsigned and n < 0:
            raise ValueError("negative value for an unsigned column")
        return n
    if base == "decimal":
        scale = decimal_scale(definition)
        number = _decimal(lit)
        return number.quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_UP) if scale is not None else number
    if base in ("float", "double"):
        return float(_decimal(lit))
    if base == "bit":
        return int.from_bytes(_bytes(lit), "big") if lit.kind == "string" else int(_decimal(lit))
    if base == "year":
        return _year(lit)
    if base in ("date", "datetime", "timestamp"):
        value = _datetime(_text(lit), fsp_of(definition))
        if value is None:
            return None
        return value.date() if base == "date" else value
    if base == "time":
        return _time(lit, fsp_of(definition))
    if base == "enum":
        return _label(enum_elements(definition), lit)
    if base == "set":
        text = _text(lit) if lit.kind != "number" else None
        elements = enum_elements(definition)
        if text is None:
            mask = int(lit.value)
            return tuple(e for i, e in enumerate(elements) if mask >> i & 1)
        return tuple(_label(elements, _Literal("string", part)) for part in text.split(",") if part)
    if base in BINARY_TYPES:
        data = _bytes(lit)
        return data.ljust(int(args), b"\0") if base == "binary" and args else data
    if base == "char":
        return _text(lit).rstrip(" ")
    return _text(lit)


def _zero_date_text(definition: str) -> str:
    base = parse_type(definition)[0]
    fsp = fsp_of(definition)
    return "0000-00-00" if base == "date" else "0000-00-00 00:00:00" + ("." + "0" * fsp if fsp else "")


def _value_text(lit: _Literal, definition: str) -> str | None:
    """Canonical text of a literal stored in a column of this type; None for NULL."""
    if lit.kind == "null":
        return None
    return _stored_text(lit, definition)


def _stored_text(lit: _Literal, definition: str) -> str:
    """`_value_text` of a literal that is not NULL."""
    try:
        value = _value(lit, definition)
    except (ValueError, ArithmeticError, UnicodeDecodeError, InvalidOperation) as exc:
        raise _NotUnderstood(f"{lit.value!r} is not a {definition} value ({exc})") from None
    return _zero_date_text(definition) if value is None else canonical_text(definition, value)


def _zero_text(definition: str) -> str:
    """What TiDB fills existing rows with for a NOT NULL column added without DEFAULT (table.GetZeroValue)."""
    base, args, _ = parse_type(definition)
    if base in ("date", "datetime", "timestamp"):
        return _zero_date_text(definition)
    if base == "enum":
        elements = enum_elements(definition)
        return elements[0] if elements else ""
    if base == "json":
        return "null"
    if base == "binary":
        return canonical_text(definition, bytes(int(args or 1)))
    if base in BINARY_TYPES:
        return canonical_text(definition, b"")
    if base == "time":
        return canonical_text(definition, dt.timedelta(0))
    if base in ("set", *CHAR_TYPES):
        return ""
    if base in ("decimal", "float", "double", "bit", "year", *INTEGER_TYPES):
        return canonical_text(definition, Decimal(0) if base == "decimal" else 0)
    return ""


def _commit_time(commit_ts: int) -> dt.datetime:
    """A TSO's physical part: milliseconds since the epoch, UTC."""
    return dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=commit_ts >> 18)


def _reformatted(text: str, old_definition: str, new_definition: str) -> str:
    """A column's origin default carried to its new type by a MODIFY/CHANGE (TiDB converts old rows)."""
    old_base = parse_type(old_definition)[0]
    if old_base in BINARY_TYPES:
        lit = _Literal("bytes", base64.b64decode(text))
    elif old_base in INTEGER_TYPES + ("decimal", "float", "double", "bit", "year"):
        lit = _Literal("number", text)
    else:
        lit = _Literal("string", text)
    return _stored_text(lit, new_definition)
