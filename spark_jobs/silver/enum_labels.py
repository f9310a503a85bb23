"""ENUM and SET values sent as index/bitmask, turned into labels once the column definition is known.

Canal-JSON (without content-compatible) and the Open protocol send indexes; the labels come from
the table's schema in force at the row's commit timestamp (silver.ddl_events).
"""

from __future__ import annotations

import bisect
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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


def label_batch(batch: pa.RecordBatch, history: SchemaHistory) -> pa.RecordBatch:
    """Labels for the ENUM and SET values of rows flagged enum_index, in their before and after maps, from the
    definitions in force at each row's commit ts; a row whose definitions are known loses the flag. Column-wise:
    only the map entries named like an ENUM or SET column are read into Python."""
    flags = batch.column("flags").to_pylist()
    definitions = [
        definitions_at(history, d, t, c) if row_flags and "enum_index" in row_flags else None
        for row_flags, d, t, c in zip(
            flags,
            batch.column("database").to_pylist(),
            batch.column("table").to_pylist(),
            batch.column("commit_ts").to_pylist(),
            strict=True,
        )
    ]
    if not any(definitions):
        return batch
    columns = dict(zip(batch.schema.names, batch.columns, strict=True))
    for image in ("before", "after"):
        columns[image] = _labelled(columns[image], definitions)
    columns["flags"] = pa.array(
        [[f for f in row if f != "enum_index"] if defs else row for row, defs in zip(flags, definitions, strict=True)],
        columns["flags"].type,
    )
    return pa.RecordBatch.from_arrays([columns[name] for name in batch.schema.names], schema=batch.schema)


def _labelled(maps: pa.MapArray, definitions: list[dict | None]) -> pa.MapArray:
    names = sorted({name for defs in definitions if defs for name in defs})
    if not names:
        return maps
    offsets = maps.offsets.to_numpy()
    first = offsets[0]  # a slice's offsets point into its parent's keys and items
    keys, items = maps.keys.slice(first, offsets[-1] - first), maps.items.slice(first, offsets[-1] - first)
    offsets = offsets - first
    candidates = np.flatnonzero(pc.is_in(keys, value_set=pa.array(names, pa.string())).to_numpy(False))
    rows = np.searchsorted(offsets, candidates, side="right") - 1
    positions, labels = [], []
    names_at, values_at = keys.take(candidates).to_pylist(), items.take(candidates).to_pylist()
    for position, row, name, value in zip(candidates.tolist(), rows.tolist(), names_at, values_at, strict=True):
        defs = definitions[row]
        if not defs or name not in defs or value is None or not value.isdigit():
            continue
        kind, elements = defs[name]
        positions.append(position)
        labels.append((text_enum if kind == "enum" else text_set)(int(value), elements)[0])
    if not positions:
        return maps
    mask = np.zeros(len(items), dtype=bool)
    mask[positions] = True
    items = pc.replace_with_mask(items, pa.array(mask), pa.array(labels, pa.string()))
    nulls = maps.is_null() if maps.null_count else None
    return pa.MapArray.from_arrays(pa.array(offsets, pa.int32()), keys, items, maps.type, mask=nulls)
