"""Values only their columns' definitions can read become canonical text in the JVM (merges.read_rows) exactly as
reading each row against the definitions in force at its commit ts would give them: ENUM and SET indexes
(enum_index) and Debezium's numbers for DATE, DATETIME, TIME, TIMESTAMP, BIT and BIGINT UNSIGNED (values_raw)."""

from __future__ import annotations

import base64
import bisect
import datetime as dt
import json
import random

import pytest

from spark_jobs.canonical.values import text_date, text_datetime, text_enum, text_set, text_time
from spark_jobs.silver.merges import READ_BY_SCHEMA, read_rows

pytestmark = pytest.mark.e2e

SCHEMA = (
    "id INT, database STRING, `table` STRING, commit_ts BIGINT, before MAP<STRING, STRING>, "
    "after MAP<STRING, STRING>, flags ARRAY<STRING>, key_columns ARRAY<STRING>, row_key STRING"
)
HISTORY = {
    ("d", "t"): [
        (10, {"e": ("enum", ["a", "b", "c"], 0), "s": ("set", ["x", "y", "z"], 0)}),
        (20, {"e": ("enum", ["p", "q"], 0)}),
        (30, {}),  # the ENUM became a VARCHAR
        (40, {"e": ("enum", ["m"], 0)}),
    ],
    ("d", "u"): [(5, {})],
    ("d", "w"): [
        (10, {"day": ("date", None, 0), "at": ("datetime", None, 2), "took": ("time", None, 0)}),
        (
            20,
            {
                "at": ("datetime", None, 5),
                "took": ("time", None, 3),
                "ts": ("timestamp", None, 3),
                "b": ("bit", None, 0),
                "b1": ("bit", None, 0),
                "big": ("unsigned", None, 64),
            },
        ),
    ],
}
EPOCH = dt.datetime(1970, 1, 1)


def read_value(kind: str, labels, size: int, value: str) -> str:
    """One value as its column's definition reads it (the reference; values the flag's form does not fit stay)."""
    if kind in ("enum", "set"):
        if not value.isdigit() or (kind == "enum" and int(value) > len(labels)):
            return value  # an ENUM index past the labels (a definition silver does not know yet) stays as sent
        return (text_enum if kind == "enum" else text_set)(int(value), labels)[0]
    if kind == "timestamp":
        return value.replace("T", " ").removesuffix("Z") if value.endswith("Z") else value
    if kind == "unsigned":
        return str(int(value) + 2**64) if value.startswith("-") else value
    if kind == "bit":
        return value if value in ("0", "1") else str(int.from_bytes(base64.b64decode(value), "little"))
    if not value.lstrip("-").isdigit():
        return value
    if kind == "date":
        return text_date(EPOCH + dt.timedelta(days=int(value)))
    if kind == "datetime":
        return text_datetime(EPOCH + dt.timedelta(microseconds=int(value) * (1000 if size <= 3 else 1)), size)
    return text_time(int(value), size)


def row_by_row(row: dict) -> dict:
    """The reference: the definitions of the newest version at or before the row's commit ts (the newest of
    all without one) read a flagged row's images, each flag the values of its own kinds; unknown definitions
    leave the row as it is."""
    flags = row["flags"] or []
    if not set(flags) & set(READ_BY_SCHEMA):
        return row
    versions = HISTORY.get((row["database"], row["table"]), [])
    if row["commit_ts"] is None:
        at = len(versions) - 1
    else:
        at = bisect.bisect_right([ts for ts, _ in versions], row["commit_ts"]) - 1
    defs = versions[at][1] if versions and at >= 0 else None
    if not defs:
        return row

    def read(image):
        if image is None:
            return None
        out = dict(image)
        for name, (kind, labels, size) in defs.items():
            value = out.get(name)
            flag = "enum_index" if kind in ("enum", "set") else "values_raw"
            if value is not None and flag in flags:
                out[name] = read_value(kind, labels, size, value)
        return out

    kept = [f for f in flags if f not in READ_BY_SCHEMA]
    out = {**row, "before": read(row["before"]), "after": read(row["after"]), "flags": kept}
    if "values_raw" in flags and row["row_key"] is not None and set(row["key_columns"]) & set(defs):
        out["row_key"] = row_key(row["key_columns"], out["before"], out["after"])  # the key of the values read
    return out


def row_key(key_columns: list[str], before: dict | None, after: dict | None) -> str | None:
    image = after if after is not None else before
    return None if image is None else json.dumps([image.get(k) for k in key_columns], separators=(",", ":"))


def raw_values(rng: random.Random) -> dict:
    """Debezium's numbers for one row, as TiDB's values would give them (fractions within the column's fsp)."""
    return {
        "day": str(rng.randint(-719_162, 2_932_896)),  # 0001-01-01 .. 9999-12-31
        "at": str(rng.randint(-6_000_000_000_000, 25_000_000_000_000) * 10),  # ms at fsp 2, µs at fsp 5: years 1..9999
        "took": str(rng.randint(-3_020_399, 3_020_399) * 1_000_000 + rng.choice([0, rng.randint(0, 999) * 1000])),
        "ts": rng.choice(["2025-11-26T05:25:12.341Z", "1999-01-02T03:04:05Z", "not a time"]),
        "b": base64.b64encode(rng.getrandbits(19).to_bytes(3, "little")).decode(),
        "b1": rng.choice(["0", "1"]),
        "big": str(rng.choice([-1, 5, rng.randint(-(2**63), 2**63 - 1)])),
    }


def random_rows(count: int) -> list[dict]:
    rng = random.Random(1)

    def image(i: int, table: str):
        if rng.random() < 0.2:
            return None
        if table == "w":
            return {"id": str(i), **raw_values(rng), "z": "2"}
        # "z" holds digits too but is no ENUM: it stays as it is
        values = {"id": str(i), "e": rng.choice(["1", "2", "0", None, "x"]), "s": rng.choice(["5", "1", "0", None])}
        return {**values, "z": "2"}

    rows = []
    for i in range(count):
        table = rng.choice(["t", "u", "v", "w"])
        flags = [["enum_index"], [], ["a", "enum_index"], None, ["types_partial", "values_raw"]]
        before, after = image(i, table), image(i, table)
        key_columns = rng.choice([["id"], ["day", "id"], ["big"]] if table == "w" else [["id"]])
        rows.append(
            {
                "id": i,
                "database": "d",
                "table": table,
                "commit_ts": rng.choice([1, 10, 12, 20, 25, 30, 35, 40, 45, None]),
                "before": before,
                "after": after,
                "flags": rng.choice(flags),
                "key_columns": key_columns,
                "row_key": row_key(key_columns, before, after),
            }
        )
    return rows


def test_values_read_equal_reading_each_row_against_the_definitions_at_its_commit_ts(spark):
    rows = random_rows(3_000)
    frame = spark.createDataFrame([tuple(r.values()) for r in rows], SCHEMA)
    got = {r["id"]: r.asDict() for r in read_rows(spark, frame, HISTORY).collect()}
    expected = {r["id"]: row_by_row(r) for r in rows}
    assert got == expected
    changed = [r for r in rows if expected[r["id"]] != r]
    assert sum(r["table"] == "t" for r in changed) > 150  # the reference did label: not two unchanged sets of rows
    assert sum(r["table"] == "w" for r in changed) > 100  # and did read Debezium's numbers
    assert sum(expected[r["id"]]["row_key"] != r["row_key"] for r in rows) > 10  # and their keys
