"""Column-wise value conversion, for codecs that decode a batch of messages at once (`ColumnDecoder`).

A column of text as a protocol sent it becomes canonical text in a few Arrow compute calls: a `ColumnRule`
names the test of text that is canonical as sent (its converter would return it unchanged), so only the rest
is converted, by the same per-value converter the row-wise path uses. Converting each distinct value
once covers the columns whose values repeat (ENUM, SET, FLOAT); a TIMESTAMP in a changefeed's time zone is
moved to UTC once per distinct minute. A value its converter rejects is reported by row, so its message can be
decoded row-wise (the reference), which gives the exact DecodeError; the rest of the batch is unaffected.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.canonical.blocks import RowBlock
from spark_jobs.codecs import fast_paths

# what msgspec raises for a message a column path does not read, which then goes to the row-wise `decode`
# (RecursionError: nested deeper than the interpreter's recursion limit, which is below orjson's depth limit;
# UnicodeDecodeError: a string of a field it reads that is not UTF-8)
UNREADABLE = (msgspec.DecodeError, RecursionError, UnicodeDecodeError)

Converter = Callable[[str], str]
# Messages a column path parses at a time: small enough that a chunk's Python objects stay in the CPU's caches
# (measured: 512 parses about 1.5 times as fast as 10,000); conversion then runs per shape for the whole batch.
CHUNK = 512
# Errors a converter raises for a bad value; they are the value's fault, never the batch's.
BAD_VALUE = (ValueError, TypeError, KeyError, IndexError, AttributeError, ArithmeticError, OverflowError)

# Keep tests: a string array -> which of its texts are canonical as sent (null for null), each a subset of what
# its converter returns unchanged; anything else is converted. Integers by ASCII-digit kernels (several times
# faster than RE2), the rest by RE2 patterns, shared by every codec.
Keep = Callable[[Any], Any]


def digits(values: Any) -> Any:
    """Non-negative integer text without leading zeros."""
    return pc.and_not(pc.ascii_is_decimal(values), _leading_zero(values))


def signed(values: Any) -> Any:
    """Integer text without leading zeros, `-` before any but zero."""
    negative = pc.starts_with(values, "-")
    if not pc.any(negative).as_py():
        return digits(values)
    body = pc.if_else(negative, pc.utf8_slice_codeunits(values, 1, _END), values)
    return pc.and_not(digits(body), pc.and_(negative, pc.equal(body, "0")))


def year(values: Any) -> Any:
    """Four-digit YEAR text."""
    return pc.and_(pc.ascii_is_decimal(values), pc.equal(pc.binary_length(values), 4))


def matching(pattern: str) -> Keep:
    """Text matching an RE2 pattern."""
    return lambda values: pc.match_substring_regex(values, pattern)


def decimal(scale: int | None) -> Keep:
    """DECIMAL text with exactly `scale` fraction digits (any, for None), no leading zeros, not a negative zero."""
    pattern = rf"^-?{fast_paths.decimal_pattern(scale)}$"

    def keep(values: Any) -> Any:
        shaped = pc.match_substring_regex(values, pattern)
        if not pc.any(pc.starts_with(values, "-")).as_py():
            return shaped
        return pc.and_not(shaped, pc.match_substring_regex(values, NEGATIVE_ZERO))

    return keep


def double(values: Any) -> Any:
    """DOUBLE text in Python's shortest form (`fast_paths.DOUBLE_SHAPE` without its look-ahead), at most 16
    characters so that its digits are the shortest that round-trip."""
    return pc.and_(pc.match_substring_regex(values, DOUBLE), pc.less_equal(pc.binary_length(values), 16))


DOUBLE = r"^(?:-?[1-9][0-9]*\.[0-9]*[1-9]|-?[1-9][0-9]*\.0|-?0\.0{0,3}[1-9](?:[0-9]*[1-9])?|0\.0)$"
NEGATIVE_ZERO = r"^-[0.]*$"


def byte_ranges(values: Any, low: bytes, high: bytes, exact: bool) -> Any | None:
    """Texts whose first `len(low)` bytes each lie between `low`'s and `high`'s at their position, and that have no
    more when `exact`: a fixed-width pattern such as a date's, checked with numpy several times faster than RE2, for
    the usual column of texts of one length and no null (a column's fractional digits are fixed). None for any
    other array."""
    count, width = len(values), len(low)
    if values.type != pa.string() or values.null_count or not count:
        return None
    offsets = np.frombuffer(values.buffers()[1], np.int32, count + 1, values.offset * 4)
    size, rest = divmod(int(offsets[-1] - offsets[0]), count)
    if rest or size < width or (exact and size != width) or not (np.diff(offsets) == size).all():
        return None
    data = np.frombuffer(values.buffers()[2], np.uint8, count * size, int(offsets[0])).reshape(count, size)[:, :width]
    return pa.array(((data >= np.frombuffer(low, np.uint8)) & (data <= np.frombuffer(high, np.uint8))).all(axis=1))


def fixed_width(pattern: str, low: bytes, high: bytes, exact: bool) -> Keep:
    """Text matching an RE2 pattern of fixed width, checked by `byte_ranges` (`low` and `high` spell the pattern's
    least and greatest bytes), by the pattern where it does not read the array."""
    by_pattern = matching(pattern)

    def keep(values: Any) -> Any:
        found = byte_ranges(values, low, high, exact)
        return by_pattern(values) if found is None else found

    return keep


# stricter than the converters' checks (digits where they take any character): what does not match is converted
DATE = fixed_width(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$", b"0000-00-00", b"9999-99-99", exact=True)
DATETIME = fixed_width(
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}",
    b"0000-00-00 00:00:00",
    b"9999-99-99 99:99:99",
    exact=False,
)
TIME = matching(r"^[^:]*:[^:]*:[^:]*$")
_END = 1 << 30  # past the end of any text


def double_texts(values: Any) -> Any:
    """Doubles (a float64 array) as text: Arrow writes a double's shortest digits that round-trip, the digits repr
    writes, so its fixed-notation text that `shortest_double` passes is repr's; an integral one gets repr's `.0`.
    The rest (exponents, more than 16 whole digits, zero) is for the converter: its digits parse back exactly."""
    texts = pc.cast(values, pa.string())
    integral = pc.match_substring_regex(texts, r"^-?[1-9][0-9]{0,15}$")
    return pc.if_else(integral, pc.binary_join_element_wise(texts, ".0", ""), texts)


def shortest_double(values: Any) -> Any:
    """`double_texts` text that is repr's: fixed notation, 1e-4 <= |x| < 1e16 (repr's own bounds for it)."""
    return pc.match_substring_regex(values, SHORTEST_DOUBLE)


SHORTEST_DOUBLE = r"^(?:-?[1-9][0-9]{0,15}\.[0-9]*[1-9]|-?[1-9][0-9]{0,15}\.0|-?0\.0{0,3}[1-9](?:[0-9]*[1-9])?)$"
# base64 as `base64.b64encode` writes it (the text of bytes): padded, no bits set past the last byte
BASE64 = matching(r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?$")


def real_dates(values: Any) -> Any:
    """Text that begins with a `YYYY-MM-DD` date that exists (year 1 to 9999, the day within its month), as
    `datetime` reads it: checked once per distinct date."""
    days = pc.utf8_slice_codeunits(values, 0, 10)
    shaped = pc.fill_null(DATE(days), False)
    if not pc.any(shaped).as_py():
        return shaped
    real = [day for day in pc.unique(days.filter(shaped)).to_pylist() if _is_date(day)]
    return pc.and_(shaped, pc.is_in(days, pa.array(real, pa.string())))


def _is_date(text: str) -> bool:
    try:
        dt.date.fromisoformat(text)
    except ValueError:
        return False
    return True


def without_rejected(block: RowBlock, bad: Any, row_wise: list[int]) -> RowBlock | None:
    """The block without the messages that hold a value a converter rejected (`bad` marks their rows; None: no
    row): those messages go to `row_wise`, where `decode` gives their exact error. None when no row is left."""
    if bad is None or not pc.any(bad).as_py():
        return block
    rejected = pc.unique(block.message.filter(bad))
    row_wise.extend(rejected.to_pylist())
    fine = pc.invert(pc.is_in(block.message, rejected))
    if not pc.any(fine).as_py():
        return None
    kept = {name: getattr(block, name).filter(fine) for name in ("message", "commit_ts", "op", "before", "after")}
    return dataclasses.replace(block, **kept, row_flags={f: mask.filter(fine) for f, mask in block.row_flags.items()})


def _utc_minute(minute: Callable[[str], str | None], text: str) -> str | None:
    """A local minute's UTC minute; None (converted whole, or rejected there) where it is no real minute."""
    try:
        return minute(text)
    except BAD_VALUE:
        return None


def _leading_zero(values: Any) -> Any:
    return pc.and_(pc.starts_with(values, "0"), pc.greater(pc.binary_length(values), 1))


@dataclass(frozen=True)
class ColumnRule:
    """How one column's text becomes canonical.

    `convert` is the row-wise path's converter (None: the text is canonical as sent). Text that `keep` passes is
    canonical as sent; the rest is converted value by value, or once per distinct value when `distinct`.
    `minute` makes a TIMESTAMP's UTC minute from its local `YYYY-MM-DD HH:MM` (None where it must be converted
    whole), for text `keep` passes; the text it does not move is converted.
    """

    convert: Converter | None = None
    keep: Keep | None = None
    distinct: bool = False
    minute: Callable[[str], str | None] | None = None


AS_SENT = ColumnRule()


def converted(values: Any, rule: ColumnRule) -> tuple[Any, Any]:
    """(canonical column, rows whose value the converter rejected or None): `values` a string array."""
    convert = rule.convert
    if convert is None or len(values) == 0:
        return values, None
    todo = values.is_valid()
    if rule.minute is not None:
        values, moved = _by_minute(values, rule)
        todo = pc.and_not(todo, moved)
    elif rule.keep is not None:
        todo = pc.and_not(todo, pc.fill_null(rule.keep(values), False))
    if not pc.any(todo).as_py():
        return values, None
    texts = values.filter(todo)
    if rule.distinct:
        distinct = pc.unique(texts)
        results, failed = _each(convert, distinct.to_pylist())
        new = pa.array(results, pa.string()).take(pc.index_in(texts, distinct))
        bad_among = None if failed is None else pa.array(failed).take(pc.index_in(texts, distinct))
    else:
        results, failed = _each(convert, texts.to_pylist())
        new = pa.array(results, pa.string())
        bad_among = None if failed is None else pa.array(failed)
    out = pc.replace_with_mask(values, todo, new)
    if bad_among is None:
        return out, None
    bad = pc.replace_with_mask(pa.array([False] * len(values)), todo, bad_among)
    return out, bad


def _each(convert: Converter, texts: list[str]) -> tuple[list[str | None], list[bool] | None]:
    """Each text converted; (results with None where it failed, which failed or None when none did)."""
    results: list[str | None] = []
    failed: list[bool] | None = None
    for i, text in enumerate(texts):
        try:
            results.append(convert(text))
        except BAD_VALUE:
            results.append(None)
            if failed is None:
                failed = [False] * len(texts)
            failed[i] = True
    return results, failed


def _by_minute(values: Any, rule: ColumnRule) -> tuple[Any, Any]:
    """(column, rows moved): TIMESTAMP text moved to UTC once per distinct local minute where `rule.minute` knows
    it; the rest as sent, for its converter."""
    assert rule.minute is not None and rule.keep is not None
    usable = pc.and_(
        pc.fill_null(rule.keep(values), False),
        pc.invert(pc.fill_null(pc.starts_with(values, "0000"), True)),
    )
    if not pc.any(usable).as_py():
        return values, usable
    minutes = pc.utf8_slice_codeunits(values, 0, 16)
    distinct = pc.unique(minutes.filter(usable))
    utc = pa.array([_utc_minute(rule.minute, m) for m in distinct.to_pylist()], pa.string())
    moved = pc.binary_join_element_wise(
        utc.take(pc.index_in(minutes, distinct)), pc.utf8_slice_codeunits(values, 16, 1 << 30), ""
    )
    done = pc.and_(usable, moved.is_valid())
    return pc.if_else(done, moved, values), done


__all__ = ["AS_SENT", "BAD_VALUE", "CHUNK", "ColumnRule", "Converter", "Keep", "converted", "without_rejected"]


def by_value(values: Any, texts: Any, todo: Any, convert: Callable[[Any], str]) -> tuple[Any, Any]:
    """(`texts` with the rows `todo` marks replaced by `convert` of their value in `values`, once per distinct
    value; rows whose value `convert` rejected or None): for typed values (a protocol's numbers) whose text Arrow
    does not write as the converter does."""
    if len(values) == 0 or not pc.any(todo).as_py():
        return texts, None
    picked = values.filter(todo)
    distinct = pc.unique(picked)
    results, failed = _each(convert, distinct.to_pylist())
    where = pc.index_in(picked, distinct)
    out = pc.replace_with_mask(texts, todo, pa.array(results, pa.string()).take(where))
    if failed is None:
        return out, None
    return out, pc.replace_with_mask(pa.array(np.zeros(len(values), np.bool_)), todo, pa.array(failed).take(where))


_BASE64 = np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", np.uint8)


def base64_texts(values: Any) -> Any:
    """Each binary value as `base64.b64encode` writes it (the canonical text of bytes), nulls kept: three bytes
    to four characters for the whole array at once."""
    values = values.cast(pa.large_binary())
    count = len(values)
    offsets = np.frombuffer(values.buffers()[1], np.int64, count + 1, values.offset * 8)
    lengths = np.diff(offsets)
    groups = (lengths + 2) // 3
    first_group = np.cumsum(groups) - groups
    total = int(lengths.sum())
    padded = np.zeros(3 * int(groups.sum()), np.uint8)
    if total:
        data = np.frombuffer(values.buffers()[2], np.uint8, total, int(offsets[0]))
        padded[np.arange(total) + np.repeat(3 * first_group - (offsets[:-1] - offsets[0]), lengths)] = data
    triples = padded.reshape(-1, 3).astype(np.uint32)
    word = triples[:, 0] << 16 | triples[:, 1] << 8 | triples[:, 2]
    chars = _BASE64[np.stack([word >> 18, word >> 12 & 63, word >> 6 & 63, word & 63], axis=1)].reshape(-1)
    last = 4 * (first_group + groups) - 1  # each value's last character
    short = lengths % 3
    chars[last[short == 1] - 1] = ord("=")
    chars[last[short > 0]] = ord("=")
    bounds = np.zeros(count + 1, np.int64)
    np.cumsum(4 * groups, out=bounds[1:])
    texts = pa.Array.from_buffers(pa.large_string(), count, [None, pa.py_buffer(bounds), pa.py_buffer(chars)])
    texts = texts.cast(pa.string())
    return texts if values.null_count == 0 else pc.if_else(values.is_valid(), texts, pa.scalar(None, pa.string()))


def spread(column: Any, present: Any) -> Any:
    """A column of the rows `present` marks, spread over every row (null where it is not)."""
    if len(column) == len(present):
        return column
    return pc.replace_with_mask(pa.nulls(len(present), pa.string()), present, column)


# orjson reads a JSON integer beyond this as a float, which the row-wise decoders reject
GREATEST_JSON_INTEGER = (1 << 64) - 1


def json_integers(values: list[int | None]) -> tuple[Any, list[bool] | None]:
    """JSON integers as an Arrow array: int64, else uint64 (BIGINT UNSIGNED, BIT(64)), else their text; and which
    are beyond uint64 (None when none is), where `decode` fails."""
    try:  # the usual column: no nulls, every value an int64 (numpy reads them fastest)
        return pa.array(np.fromiter(values, np.int64, len(values))), None
    except (TypeError, OverflowError):
        pass
    for kind in (pa.int64(), pa.uint64()):
        try:
            return pa.array(values, kind), None
        except OverflowError:
            continue
    beyond = [v is not None and v > GREATEST_JSON_INTEGER for v in values]
    return pa.array([None if v is None else str(v) for v in values], pa.string()), beyond if any(beyond) else None
