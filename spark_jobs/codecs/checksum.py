"""TiCDC's row-level checksum, verified where a message carries one (Avro and Simple, with
`integrity.integrity-check-level = "correctness"` on the changefeed).

The checksum is TiDB's column-level CRC-32 (IEEE) of a row image (TiDB `util/rowcodec` RowData.Checksum;
tiflow `pkg/sink/codec/common/verify_checksum.go`; the docs' "Algorithm for checksum calculation"): the
columns in column-ID order, each value encoded as below and fed to one running CRC; a NULL (and a GEOMETRY)
adds nothing, so the bytes of a row are simply concatenated.

- every integer type, YEAR, BIT, the ENUM index and the SET bitmask: the value as uint64 (a negative signed
  value as its two's complement), 8 bytes little-endian;
- FLOAT and DOUBLE: the value as a double (FLOAT widened from its float32), its IEEE-754 bits as 8 bytes
  little-endian; NaN and the infinities count as 0;
- DECIMAL, DATE, DATETIME, TIMESTAMP (rendered in UTC), TIME and JSON as their text, CHAR/VARCHAR/TEXT as
  their UTF-8 bytes, BINARY/VARBINARY/BLOB as their bytes: each as a 4-byte little-endian length, then the
  bytes.

`_tidb_checksum_version` / `checksum.version` names TiDB's checksum (0: v1, 1 and up: v2, which also hashes
the row key); TiCDC checks that one itself and always sends this column-level checksum, so consumers verify
every version the same way. Before tiflow#10564 (February 2024) TiCDC hashed TIMESTAMP as rendered in the
changefeed's time zone instead of UTC: a row with a TIMESTAMP in another zone also passes under that encoding.
TiCDC sends 0 for an image it has no checksum for; that image is not checked.

Column order: Avro writes its fields in column-ID order. Simple's table schema lists columns in the
table's order without their IDs, which is column-ID order unless columns were added with FIRST/AFTER or
retyped by a lossy MODIFY COLUMN; TiCDC's own consumer has the same limit.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import struct
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from spark_jobs.canonical.values import text_timestamp_from_zone
from spark_jobs.errors import DecodeError

MISMATCH = "row checksum mismatch"
CORRUPTED = "row marked corrupted by TiCDC"
# a quarantine reason (`<protocol>: <reason>`) that counts as a checksum failure; Python and Java regex alike
FAILURE_PATTERN = r"^[a-z-]+: (row checksum mismatch|row marked corrupted by TiCDC)"

_U64 = (1 << 64) - 1
_LENGTH = struct.Struct("<I")
_DOUBLE = struct.Struct("<d")
_FLOAT = struct.Struct("<f")
_BAD_VALUE = (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError, binascii.Error)

# one non-null value, as the codec read it -> the bytes it adds to the row's CRC
Encode = Callable[[Any], bytes]


def uint64(value: int | str) -> bytes:
    if type(value) is bool:
        raise TypeError("boolean is not an integer")
    return (int(value) & _U64).to_bytes(8, "little")


def double(value: float | str) -> bytes:
    x = float(value)
    return _DOUBLE.pack(x if x - x == 0 else 0.0)


def float32(value: float | str) -> bytes:
    x = float(value)
    return _DOUBLE.pack(_FLOAT.unpack(_FLOAT.pack(x))[0] if x - x == 0 else 0.0)


def text(value: str) -> bytes:
    if type(value) is not str:
        raise TypeError(f"expected text, got {type(value).__name__}")
    data = value.encode()
    return _LENGTH.pack(len(data)) + data


def decimal_text(value: Any) -> bytes:
    """DECIMAL as sent: TiCDC sends TiDB's own text (string mode); a number is taken as its digits."""
    if type(value) is str:
        return text(value)
    if type(value) is int:
        return text(str(value))
    return text(format(value, "f"))  # Avro precise mode: a Decimal at the column's scale


def binary(value: bytes) -> bytes:
    if type(value) is not bytes:
        raise TypeError(f"expected bytes, got {type(value).__name__}")
    return _LENGTH.pack(len(value)) + value


def base64_binary(value: str) -> bytes:
    if type(value) is not str:
        raise TypeError(f"expected base64 text, got {type(value).__name__}")
    return binary(base64.b64decode(value, validate=True))


def big_endian_bits(value: bytes) -> bytes:
    """Avro's BIT: big-endian bytes of the value."""
    return uint64(int.from_bytes(value, "big"))


def timestamp(zone: dt.tzinfo | None) -> Encode:
    """TIMESTAMP text rendered in `zone` -> its UTC text, with the fractional digits it was sent with."""
    if zone is None or zone is dt.UTC:
        return text
    return lambda value: text(text_timestamp_from_zone(value, zone))


def enum_by_label(elements: list[str]) -> Encode:
    index = {label: i for i, label in enumerate(elements, 1)}
    index[""] = 0
    return lambda label: uint64(index[label])


def set_by_labels(elements: list[str]) -> Encode:
    positions = {label: 1 << i for i, label in enumerate(elements)}

    def encode(labels: str) -> bytes:
        return uint64(sum(positions[label] for label in set(labels.split(",")) - {""}))

    return encode


def unwrap_value(encode: Encode) -> Encode:
    """Simple Avro's UnsignedBigint record {value: the uint64 wrapped into a signed long}."""
    return lambda value: encode(value["value"] if type(value) is dict else value)


@dataclass(frozen=True, slots=True)
class RowChecksum:
    """How one schema's row images hash: (column, encoder) in column-ID order."""

    columns: tuple[tuple[str, Encode], ...]
    legacy: RowChecksum | None = None  # TIMESTAMP as sent (TiCDC before tiflow#10564); None without such columns

    def compute(self, row: Mapping[str, Any]) -> int:
        """The CRC of the row; a value the encoder cannot take raises ValueError naming its column."""
        parts = []
        name = ""
        try:
            for name, encode in self.columns:
                value = row.get(name)
                if value is not None:
                    parts.append(encode(value))
        except _BAD_VALUE as exc:
            raise ValueError(f"column {name!r}: {type(exc).__name__}: {str(exc)[:100]}") from None
        return zlib.crc32(b"".join(parts))


def verify(
    protocol: str,
    checksum: RowChecksum,
    row: Mapping[str, Any],
    expected: int,
    *,
    table: str,
    image: str,
    version: object,
    where: str,
) -> None:
    """Raise the DecodeError that quarantines the message unless `row` hashes to `expected`."""
    try:
        computed = checksum.compute(row)
        if computed == expected or (checksum.legacy is not None and checksum.legacy.compute(row) == expected):
            return
    except ValueError as exc:
        raise DecodeError(
            protocol, f"cannot compute the row checksum of {table} ({image} image): {exc}", where
        ) from None
    raise DecodeError(
        protocol,
        f"{MISMATCH}: {table} {image} image, expected {expected}, computed {computed} (checksum version {version})",
        where,
    )


def corrupted(protocol: str, table: str, where: str) -> DecodeError:
    return DecodeError(protocol, f"{CORRUPTED}: {table}", where)


def expected_crc(protocol: str, value: object, where: str) -> int | None:
    """A sent checksum as an int; None where TiCDC sent none (0, or Avro's empty string)."""
    number: object = value
    if type(value) is str:
        if not value:
            return None
        number = int(value) if value.isascii() and value.isdigit() else -1
    if type(number) is not int or not 0 <= number <= 0xFFFFFFFF:
        raise DecodeError(protocol, f"row checksum {str(value)[:40]!r} is not a CRC-32", where)
    return number or None


__all__ = [
    "CORRUPTED",
    "FAILURE_PATTERN",
    "MISMATCH",
    "RowChecksum",
    "base64_binary",
    "big_endian_bits",
    "binary",
    "corrupted",
    "decimal_text",
    "double",
    "enum_by_label",
    "expected_crc",
    "float32",
    "set_by_labels",
    "text",
    "timestamp",
    "uint64",
    "unwrap_value",
    "verify",
]
