"""Fast paths: code the codecs generate per schema, compiled in one place.

Canal-JSON, Open and Simple each generate, once per distinct schema, straight-line Python that
converts a row image with its columns' converters inlined (the fast path); anything it does not
recognise goes to the codec's interpreted converter loop (the precise path), which gives the exact
result or the exact DecodeError. `generate` compiles such source under a unique file name,
`<fast-path canal-json 3>`, and registers the source in `linecache`, so a traceback or
`inspect.getsource` shows the generated line, not a blank. The value-shape tests below are the
generated code's test for "this text is already canonical": one definition for every codec.

Set TICDC_CODECS_PRECISE_ONLY=1 (read once, at import) to switch every fast path off: `generate`
then returns None and the codecs take their precise path for every row. The codec tests run both
ways (`TICDC_CODECS_PRECISE_ONLY=1 pytest tests/codecs`), so the two paths must agree.
"""

from __future__ import annotations

import itertools
import linecache
import os
import re
from collections.abc import Callable
from functools import cache
from typing import Any

PRECISE_ONLY = os.environ.get("TICDC_CODECS_PRECISE_ONLY", "") not in ("", "0")
FILENAME_PREFIX = "<fast-path "
_CACHE_LIMIT = 768  # distinct generated sources kept; the oldest goes first
_generated: dict[tuple[str, str], Callable[..., Any]] = {}
_numbers = itertools.count(1)


def generate(codec: str, source: str, namespace: dict[str, Any], name: str = "make") -> Callable[..., Any] | None:
    """The function `name` that `source` defines, run in `namespace` (the globals it reads).

    Compiled once per distinct (codec, source); None when TICDC_CODECS_PRECISE_ONLY is set, and the
    caller then takes its precise path.
    """
    if PRECISE_ONLY:
        return None
    key = (codec, source)
    function = _generated.get(key)
    if function is None:
        filename = f"{FILENAME_PREFIX}{codec} {next(_numbers)}>"
        code = compile(source, filename, "exec")
        # mtime None: linecache.checkcache keeps the entry although no such file exists
        linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
        exec(code, namespace)
        function = namespace[name]
        if len(_generated) >= _CACHE_LIMIT:
            oldest = _generated.pop(next(iter(_generated)))
            linecache.cache.pop(oldest.__code__.co_filename, None)
        _generated[key] = function
    return function


# ---- value shapes: tests over a variable `v` for text a converter returns unchanged ----------------

# DOUBLE text that is already `values.text_double` of itself: fixed notation as repr() writes it (no
# trailing fraction zeros, 1e-4 <= |x|, not -0.0), at most 15 significant digits (checked as at most
# 16 characters), so its digits are the shortest that round-trip.
DOUBLE_SHAPE = re.compile(r"-?[1-9][0-9]*\.[0-9]*[1-9]|-?[1-9][0-9]*\.0|-?0\.(?!0000)[0-9]*[1-9]|0\.0").fullmatch


def digit_run(count: int, at_least: int | None = None) -> str:
    """A pattern of exactly `count` digits (from `at_least` to `count`, if given), in pieces of at most 1,000:
    RE2 refuses a larger repetition, and a scale or fsp read from a damaged message can be any number."""
    low = count if at_least is None else at_least
    pieces: list[str] = []
    high = count
    while high > 0 or not pieces:
        step = min(high, 1000)
        take = min(low, step)
        pieces.append(f"[0-9]{{{step}}}" if take == step else f"[0-9]{{{take},{step}}}")
        high, low = high - step, low - take
    return "".join(pieces)


def decimal_pattern(scale: int | None) -> str:
    """Non-negative DECIMAL text with exactly `scale` fraction digits (any, for None), no leading zeros: a
    pattern both Python's re and RE2 read (the column paths' `columns.decimal`)."""
    if scale is None:
        return r"(?:0|[1-9][0-9]*)(?:\.[0-9]+)?"
    if scale == 0:
        return r"(?:0|[1-9][0-9]*)"
    return rf"(?:0|[1-9][0-9]*)\.{digit_run(scale)}"


@cache
def decimal_shape(scale: int | None) -> Callable[[str], object]:
    """`decimal_pattern` as a full-match test."""
    return re.compile(decimal_pattern(scale)).fullmatch


def digits_test(v: str) -> str:
    """Non-negative integer text without leading zeros (a value that is not text fails with AttributeError)."""
    return f"{v}.isdigit() and {v}.isascii() and ({v}[0] != '0' or len({v}) == 1)"


def year_test(v: str) -> str:
    """Four-digit YEAR text (a value that is not text fails with TypeError)."""
    return f"len({v}) == 4 and {v}.isdigit() and {v}.isascii()"


def double_test(v: str) -> str:
    """DOUBLE text in its shortest form; the generated code passes DOUBLE_SHAPE in as `double_shape`."""
    return f"type({v}) is str and len({v}) <= 16 and double_shape({v})"


def date_test(v: str) -> str:
    """`YYYY-MM-DD` text."""
    return f"type({v}) is str and len({v}) == 10 and {v}[4:8:3] == '--'"


_CANONICAL_TESTS = {"integer": digits_test, "year": year_test, "double": double_test, "date": date_test}


def canonical_test(kind: str, v: str) -> str | None:
    """The test above for a value of this kind (integer, year, double, date); None for any other kind."""
    test = _CANONICAL_TESTS.get(kind)
    return test(v) if test is not None else None
