"""label_batch: ENUM and SET indexes become labels column-wise, exactly as a row-by-row reading would give."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from spark_jobs.codecs.values import text_enum, text_set
from spark_jobs.silver.enum_labels import definitions_at, label_batch

MAP = pa.map_(pa.string(), pa.string())
SCHEMA = pa.schema(
    [
        ("database", pa.string()),
        ("table", pa.string()),
        ("commit_ts", pa.int64()),
        ("before", MAP),
        ("after", MAP),
        ("flags", pa.list_(pa.string())),
    ]
)
HISTORY = {
    ("d", "t"): [(10, {"e": ("enum", ["a", "b", "c"]), "s": ("set", ["x", "y"])}), (20, {"e": ("enum", ["p", "q"])})],
    ("d", "u"): [(5, {})],
}


def row_by_row(row: dict) -> dict:
    """The reference: each flagged row's images relabelled from the definitions at its commit ts."""
    if "enum_index" not in (row["flags"] or []):
        return row
    defs = definitions_at(HISTORY, row["database"], row["table"], row["commit_ts"])
    if not defs:
        return row

    def labelled(image):
        if image is None:
            return None
        out = dict(image)
        for name, (kind, elements) in defs.items():
            value = out.get(name)
            if value is not None and value.isdigit():
                out[name] = (text_enum if kind == "enum" else text_set)(int(value), elements)[0]
        return out

    flags = [f for f in row["flags"] if f != "enum_index"]
    return {**row, "before": labelled(row["before"]), "after": labelled(row["after"]), "flags": flags}


def as_dicts(row: dict) -> dict:
    return {k: dict(v) if k in ("before", "after") and v is not None else v for k, v in row.items()}


def random_rows(count: int) -> list[dict]:
    rng = random.Random(1)

    def image(i: int):
        if rng.random() < 0.2:
            return None
        # "z" holds digits too but is no ENUM: it must stay as it is
        return [
            ("id", str(i)),
            ("e", rng.choice(["1", "2", "0", None, "x"])),
            ("s", rng.choice(["3", "1", None])),
            ("z", "2"),
        ]

    return [
        {
            "database": "d",
            "table": rng.choice(["t", "u", "v"]),
            "commit_ts": rng.choice([1, 12, 25, None]),
            "before": image(i),
            "after": image(i),
            "flags": rng.choice([["enum_index"], [], ["a", "enum_index"], None]),
        }
        for i in range(count)
    ]


@pytest.mark.parametrize("window", [(0, 3000), (100, 1500)], ids=["whole", "slice"])
def test_label_batch_equals_labelling_row_by_row(window):
    batch = pa.RecordBatch.from_pylist(random_rows(3000), schema=SCHEMA).slice(*window)
    expected = [as_dicts(row_by_row(r)) for r in batch.to_pylist()]
    assert [as_dicts(r) for r in label_batch(batch, HISTORY).to_pylist()] == expected
    relabelled = sum(
        "enum_index" in (r["flags"] or []) and "enum_index" not in e["flags"]
        for r, e in zip(batch.to_pylist(), expected)
    )
    assert relabelled > 100  # the reference did label: the comparison is not between two unchanged batches


def test_a_batch_without_flagged_rows_is_returned_as_it_is():
    rows = [{**r, "flags": []} for r in random_rows(50)]
    batch = pa.RecordBatch.from_pylist(rows, schema=SCHEMA)
    assert label_batch(batch, HISTORY) is batch
