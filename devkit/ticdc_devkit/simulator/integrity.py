"""TiDB's row checksum of a model row, for changefeeds with `integrity.integrity-check-level = "correctness"`.

Computed from the typed model values (model.py), not from any protocol's wire form, and written apart from the
decoders' `spark_jobs.codecs.checksum`, so that one mistake does not hide in both: a running CRC-32 (IEEE)
column by column in column-ID order (a model table lists its columns in ID order), each column's bytes as TiDB's
rowcodec builds them:
  integers, YEAR, BIT, ENUM index, SET bitmask -> uint64 little-endian (two's complement);
  FLOAT (rounded to float32) and DOUBLE -> the double's bits, little-endian; NaN and infinities -> 0;
  DECIMAL (at the column's scale), DATE, DATETIME, TIMESTAMP (UTC), TIME, JSON -> text,
  CHAR/TEXT -> UTF-8, BINARY/BLOB -> bytes: uint32 little-endian length, then the bytes;
  NULL -> nothing.
"""

from __future__ import annotations

import datetime as dt
import math
import struct
import zlib
from decimal import Context, Decimal
from typing import Any

from spark_jobs.canonical.values import enum_elements, parse_type
from ticdc_devkit.simulator.model import Column, Table

CHECK_LEVELS = ("none", "correctness")
_DECIMAL65 = Context(prec=70)  # DECIMAL(65, s) has 65 digits; the default context keeps 28


def enabled(options: dict[str, Any]) -> bool:
    """Whether the changefeed's `integrity-check-level` asks for row checksums (TiCDC's default is none)."""
    level = options.get("integrity-check-level") or "none"
    if level not in CHECK_LEVELS:
        raise ValueError(f"integrity-check-level must be one of {CHECK_LEVELS}, got {level!r}")
    return level == "correctness"


def _clock(hours: int, minutes: int, seconds: int, micros: int, fsp: int) -> str:
    text = f"{hours:02}:{minutes:02}:{seconds:02}"
    return text + ("." + str(micros).rjust(6, "0")[:fsp] if fsp else "")


def _column_bytes(column: Column, value: Any) -> bytes:
    base, args, _ = parse_type(column.type)
    word = None
    if base in ("tinyint", "smallint", "mediumint", "int", "bigint", "year", "bit"):
        word = int(value) % (1 << 64)
    elif base == "enum":
        word = 0 if value == "" else enum_elements(column.type).index(value) + 1
    elif base == "set":
        chosen = set(value.split(",")) if isinstance(value, str) else set(value)
        word = sum(2**i for i, label in enumerate(enum_elements(column.type)) if label in chosen)
    if word is not None:
        return struct.pack("<Q", word)
    if base in ("float", "double"):
        number = float(value)
        if base == "float" and math.isfinite(number):
            number = struct.unpack("<f", struct.pack("<f", number))[0]
        return struct.pack("<d", number if math.isfinite(number) else 0.0)
    fsp = int(args) if base in ("datetime", "timestamp", "time") and args and args.strip().isdigit() else 0
    if base == "decimal":
        scale = int(args.split(",")[1]) if args and "," in args else 0
        payload = format(Decimal(value).quantize(Decimal(1).scaleb(-scale), context=_DECIMAL65), "f").encode()
    elif base == "date":
        payload = f"{value.year:04}-{value.month:02}-{value.day:02}".encode()
    elif base in ("datetime", "timestamp"):  # a model TIMESTAMP is already UTC, which TiDB hashes
        day = f"{value.year:04}-{value.month:02}-{value.day:02} "
        payload = (day + _clock(value.hour, value.minute, value.second, value.microsecond, fsp)).encode()
    elif base == "time":
        total = abs(value) // dt.timedelta(microseconds=1)
        seconds, micros = divmod(total, 1_000_000)
        sign = "-" if value < dt.timedelta(0) else ""
        payload = (sign + _clock(seconds // 3600, seconds // 60 % 60, seconds % 60, micros, fsp)).encode()
    elif isinstance(value, bytes):
        payload = value
    else:
        payload = str(value).encode("utf-8")
    return struct.pack("<I", len(payload)) + payload


def row_checksum(table: Table, row: dict[str, Any] | None) -> int:
    """The checksum TiCDC sends for one image of a row; 0 for no image (TiCDC's "none")."""
    if row is None:
        return 0
    crc = 0
    for column in table.columns:
        value = row.get(column.name)
        if value is not None:
            crc = zlib.crc32(_column_bytes(column, value), crc)
    return crc


__all__ = ["CHECK_LEVELS", "enabled", "row_checksum"]
