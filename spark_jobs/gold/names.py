"""Gold table names: injective, reversible, and safe anywhere (SQL, Jinja, YAML, file names).

A source's gold tables live in the namespace `gold_<source>` (source names are `[a-z][a-z0-9_]*`, unique
by config validation), each named `<database>__<table>`, its history beside it as
`<database>__<table>__history`. A name part that is plain (lowercase letters, digits and single
underscores between them, starting with a letter, not starting with `x0`) stays as it is:
`shop.order_items` -> `shop__order_items`. Anything else (upper case, spaces, quotes, backticks, dots,
`__`, braces, unicode, a leading digit) becomes `x0` + the lowercase base32 of its UTF-8 bytes without
padding: `Shop` -> `x0knug64a`. No part contains `__`, so `__` separates them unambiguously, and two
different upstream tables can never share a gold table.
"""

from __future__ import annotations

import base64
import re

_PLAIN = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*")
_ENCODED_PREFIX = "x0"
HISTORY_SUFFIX = "__history"


def encode_part(name: str) -> str:
    """One upstream name (database or table) as a gold name part."""
    if _PLAIN.fullmatch(name) and not name.startswith(_ENCODED_PREFIX):
        return name
    return _ENCODED_PREFIX + base64.b32encode(name.encode("utf-8")).decode("ascii").rstrip("=").lower()


def decode_part(part: str) -> str:
    """The upstream name a gold name part stands for."""
    if not part.startswith(_ENCODED_PREFIX):
        return part
    text = part[len(_ENCODED_PREFIX) :].upper()
    return base64.b32decode(text + "=" * (-len(text) % 8)).decode("utf-8")


def gold_namespace(source: str) -> str:
    return f"gold_{source}"


def gold_table(database: str, table: str) -> str:
    """The gold table's name inside its source's namespace."""
    return f"{encode_part(database)}__{encode_part(table)}"


def history_table(database: str, table: str) -> str:
    return gold_table(database, table) + HISTORY_SUFFIX


def daily_namespace(source: str) -> str:
    """The daily as-of tables' own namespace, not `gold_<source>`: a gold build drops every table of its namespace
    that no live upstream table wants, and a day's rows outlive the table's drop or rename upstream. No source's
    gold namespace starts with `daily_`, so the two never meet."""
    return f"daily_{source}"


def daily_table(source: str, database: str, table: str) -> tuple[str, str]:
    """(namespace, table) of the daily as-of table of an upstream table: `daily_<source>.<database>__<table>`."""
    return daily_namespace(source), gold_table(database, table)


def upstream_of(gold_name: str) -> tuple[str, str]:
    """(database, table) of a gold table name (the inverse of gold_table)."""
    name = gold_name.removesuffix(HISTORY_SUFFIX)
    database, sep, table = name.partition("__")
    if not sep or "__" in table:
        raise ValueError(f"not a gold table name: {gold_name!r}")
    return decode_part(database), decode_part(table)


def model_name(source: str, database: str, table: str) -> str:
    """The dbt model of a gold table: unique across sources (dbt model names are global)."""
    return f"{gold_namespace(source)}__{gold_table(database, table)}"
