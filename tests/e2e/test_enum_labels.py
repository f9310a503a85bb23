"""ENUM and SET indexes become labels in the JVM (merges.labelled_rows) exactly as reading each row against
the definitions in force at its commit ts would give them."""

from __future__ import annotations

import bisect
import random

import pytest

from spark_jobs.canonical.values import text_enum, text_set
from spark_jobs.silver.merges import labelled_rows

pytestmark = pytest.mark.e2e

SCHEMA = (
    "id INT, database STRING, `table` STRING, commit_ts BIGINT, before MAP<STRING, STRING>, "
    "after MAP<STRING, STRING>, flags ARRAY<STRING>"
)
HISTORY = {
    ("d", "t"): [
        (10, {"e": ("enum", ["a", "b", "c"]), "s": ("set", ["x", "y", "z"])}),
        (20, {"e": ("enum", ["p", "q"])}),
        (30, {}),  # the ENUM became a VARCHAR
        (40, {"e": ("enum", ["m"])}),
    ],
    ("d", "u"): [(5, {})],
}


def row_by_row(row: dict) -> dict:
    """The reference: the definitions of the newest version at or before the row's commit ts (the newest of
    all without one) label a flagged row's images; unknown definitions leave it as it is."""
    if "enum_index" not in (row["flags"] or []):
        return row
    versions = HISTORY.get((row["database"], row["table"]), [])
    if row["commit_ts"] is None:
        at = len(versions) - 1
    else:
        at = bisect.bisect_right([ts for ts, _ in versions], row["commit_ts"]) - 1
    defs = versions[at][1] if versions and at >= 0 else None
    if not defs:
        return row

    def labelled(image):
        if image is None:
            return None
        out = dict(image)
        for name, (kind, elements) in defs.items():
            value = out.get(name)
            # an ENUM index past the labels (a definition silver does not know yet) stays as sent
            if value is not None and value.isdigit() and (kind == "set" or int(value) <= len(elements)):
                out[name] = (text_enum if kind == "enum" else text_set)(int(value), elements)[0]
        return out

    flags = [f for f in row["flags"] if f != "enum_index"]
    return {**row, "before": labelled(row["before"]), "after": labelled(row["after"]), "flags": flags}


def random_rows(count: int) -> list[dict]:
    rng = random.Random(1)

    def image(i: int):
        if rng.random() < 0.2:
            return None
        # "z" holds digits too but is no ENUM: it stays as it is
        values = {"id": str(i), "e": rng.choice(["1", "2", "0", None, "x"]), "s": rng.choice(["5", "1", "0", None])}
        return {**values, "z": "2"}

    return [
        {
            "id": i,
            "database": "d",
            "table": rng.choice(["t", "u", "v"]),
            "commit_ts": rng.choice([1, 10, 12, 20, 25, 30, 35, 40, 45, None]),
            "before": image(i),
            "after": image(i),
            "flags": rng.choice([["enum_index"], [], ["a", "enum_index"], None]),
        }
        for i in range(count)
    ]


def test_labels_equal_reading_each_row_against_the_definitions_at_its_commit_ts(spark):
    rows = random_rows(2_000)
    frame = spark.createDataFrame([tuple(r.values()) for r in rows], SCHEMA)
    got = {r["id"]: r.asDict() for r in labelled_rows(spark, frame, HISTORY).collect()}
    expected = {r["id"]: row_by_row(r) for r in rows}
    assert got == expected
    changed = sum(expected[r["id"]] != r for r in rows)
    assert changed > 150  # the reference did label: the comparison is not between two unchanged sets of rows
