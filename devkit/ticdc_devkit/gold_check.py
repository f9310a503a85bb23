"""Gold tables compared with the upstream database (the simulator's oracle), value for value.

Used by the demo's report and the end-to-end tests.
"""

from __future__ import annotations

import base64
import datetime as dt
from decimal import Context, Decimal

from spark_jobs.canonical.values import text_date, text_datetime, text_double, text_float, text_year


def canonical_text(value, mysql_type: str) -> str | None:
    """Inverse of the gold cast: a typed Spark value back to canonical text (ARCHITECTURE.md)."""
    if value is None:
        return None
    base = mysql_type.split("(")[0].split(" ")[0]
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, Decimal):  # at the column's scale: Spark may hand back 1E-16 of a DECIMAL(18,16) as 1.00E-16
        scale = mysql_type.partition(",")[2].partition(")")[0]
        exact = Context(prec=100)  # DECIMAL(65,30) has more digits than the default context's 28
        return format(value.quantize(Decimal(1).scaleb(-int(scale)), context=exact) if scale.isdigit() else value, "f")
    if isinstance(value, float):
        return text_float(value) if base == "float" else text_double(value)
    if isinstance(value, dt.datetime):
        return text_datetime(value, 6).rstrip("0").rstrip(".") if value.microsecond else text_datetime(value, 0)
    if isinstance(value, dt.date):
        return text_date(value)
    if base == "year":  # gold keeps YEAR as an int: 0 is `0000`
        return text_year(value)
    return str(value)


def gold_state(spark, table: str, columns: list[tuple[str, str]]) -> dict[tuple, dict[str, str | None]]:
    """{key tuple (canonical text): {column: canonical text}} of a gold table (`_row_key`: JSON of the key texts)."""
    return rows_state(spark.table(table).collect(), columns)


def rows_state(rows, columns: list[tuple[str, str]]) -> dict[tuple, dict[str, str | None]]:
    """gold_state of rows read already (one key each: a gold table's, or a history table's as of one moment)."""
    import json

    state = {}
    for row in rows:
        key = tuple(json.loads(row["_row_key"]))
        state[key] = {name: canonical_text(row[name], mysql_type) for name, mysql_type in columns}
    return state


def oracle_state(
    rows: dict[tuple, dict[str, str | None]], columns: list[tuple[str, str]]
) -> dict[tuple, dict[str, str | None]]:
    """The oracle's rows (`oracle.upstream_state`) with datetimes at the precision gold keeps (trailing zeros dropped)."""
    out = {}
    for key, row in rows.items():
        values = {}
        for name, mysql_type in columns:
            v = row.get(name)
            if v is not None and mysql_type.split("(")[0] in ("datetime", "timestamp") and "." in v:
                v = v.rstrip("0").rstrip(".")
            values[name] = v
        out[tuple(str(k) for k in key)] = values
    return out


def gold_matches_upstream(spark, table: str, schema_columns: list[tuple[str, str]], upstream_rows: dict) -> bool:
    return gold_state(spark, table, schema_columns) == oracle_state(upstream_rows, schema_columns)
