"""ENUM and SET values sent as index/bitmask, turned into labels once the column definition is known.

Canal-JSON (without content-compatible) and the Open protocol send indexes; the labels come from
the table's schema in force at the row's commit timestamp (silver.ddl_events).
"""

from __future__ import annotations

import bisect
from typing import Any

from spark_jobs.codecs.values import text_enum, text_set

# (database, table) -> sorted [(commit_ts, {column: ("enum"|"set", [labels])})]
SchemaHistory = dict[tuple[str, str], list[tuple[int, dict[str, tuple[str, list[str]]]]]]


def enum_columns(table_schema: dict[str, Any] | None) -> dict[str, tuple[str, list[str]]]:
    if not table_schema:
        return {}
    return {
        c["name"]: (c["type"], c["elements"])
        for c in table_schema["columns"]
        if c["type"] in ("enum", "set") and c.get("elements") is not None
    }


def definitions_at(history: SchemaHistory, database: str, table: str, commit_ts: int | None) -> dict | None:
    versions = history.get((database, table))
    if not versions:
        return None
    if commit_ts is None:
        return versions[-1][1]
    i = bisect.bisect_right([ts for ts, _ in versions], commit_ts) - 1
    return versions[i][1] if i >= 0 else None


def label_image(image: dict[str, str | None] | None, definitions: dict[str, tuple[str, list[str]]]) -> dict | None:
    if image is None:
        return None
    out = dict(image)
    for name, (kind, elements) in definitions.items():
        value = out.get(name)
        if value is None or not value.isdigit():
            continue
        out[name] = (text_enum if kind == "enum" else text_set)(int(value), elements)[0]
    return out
