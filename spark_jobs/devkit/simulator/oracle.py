"""The upstream database as a dict: applies a logical stream up to a timestamp (the test oracle)."""

from __future__ import annotations

from spark_jobs.codecs.values import canonical_value
from spark_jobs.devkit.simulator.model import Ddl, Event, RowChange, Table


def upstream_state(
    events: list[Event], as_of: int | None = None
) -> dict[tuple[str, str], dict[tuple, dict[str, str | None]]]:
    """{(database, table): {key values: {column: canonical text}}} after every event with ts <= as_of."""
    tables: dict[tuple[str, str], dict[tuple, dict]] = {}
    schemas: dict[tuple[str, str], Table] = {}
    for e in sorted((e for e in events if isinstance(e, (Ddl, RowChange))), key=lambda e: e.commit_ts):
        if as_of is not None and e.commit_ts > as_of:
            break
        if isinstance(e, Ddl):
            name = (e.database, e.table)
            if e.ddl_type == "drop_table":
                tables.pop(name, None)
                schemas.pop(name, None)
            elif e.table_after is not None:
                before = tables.get(name, {})
                schemas[name] = e.table_after
                cols = [c for c in e.table_after.columns]
                tables[name] = {
                    k: {c.name: row.get(c.name, canonical_value(c.type, c.default)) for c in cols}
                    for k, row in before.items()
                }
            continue
        name = (e.table.database, e.table.name)
        rows = tables.setdefault(name, {})
        if e.before is not None:
            rows.pop(tuple(e.before[k] for k in e.table.key), None)
        if e.after is not None:
            rows[tuple(e.after[k] for k in e.table.key)] = {
                c.name: canonical_value(c.type, e.after.get(c.name)) for c in e.table.columns
            }
    return tables
