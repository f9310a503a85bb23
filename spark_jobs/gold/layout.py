"""How a gold table and its history are laid out in Iceberg (README, "How gold is laid out"): partition fields and a
sort order per table, from the source's `gold.layouts`.

A table is created in its layout (the materialization's `create or replace ... partitioned by`, then `write ordered
by`); a layout changed later evolves the existing tables in place (`evolve`: Iceberg's partition evolution, a
metadata change: files written before keep the spec they were written in, and a query prunes each file by its
own spec). The run compares the layout it wants with the one the table has, read from Iceberg, so a run that
stopped half way through an evolution finishes it the next time. The fields name upstream columns: a layout that
names a column the table does not have, or a transform its type does not take, stops the run before any table is
touched, naming the glob.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from spark_jobs.canonical.values import BINARY_TYPES, CHAR_TYPES, INTEGER_TYPES, parse_type
from spark_jobs.config import GoldSettings
from spark_jobs.errors import ConfigError
from spark_jobs.runtime.iceberg import iceberg_table
from spark_jobs.runtime.jvm import java_items
from spark_jobs.runtime.sql import quote_ident

_TIME_TYPES = {"years": ("date", "datetime", "timestamp"), "hours": ("datetime", "timestamp")}
_TIME_TYPES["months"] = _TIME_TYPES["days"] = _TIME_TYPES["years"]
_TRUNCATE_TYPES = (*INTEGER_TYPES, *CHAR_TYPES, *BINARY_TYPES, "decimal")
_ICEBERG_NAMES = {"year": "years", "month": "months", "day": "days", "hour": "hours", "identity": "identity"}


@dataclass(frozen=True)
class Layout:
    """A table's partition fields (transform, width or count, column) and sort fields (column, asc|desc)."""

    partition: tuple[tuple[str, int | None, str], ...] = ()
    sort: tuple[tuple[str, str], ...] = ()

    @staticmethod
    def field_sql(field: tuple[str, int | None, str]) -> str:
        transform, size, column = field
        if transform == "identity":
            return quote_ident(column)
        return (
            f"{transform}({size}, {quote_ident(column)})" if size is not None else f"{transform}({quote_ident(column)})"
        )

    @property
    def partition_sql(self) -> str | None:
        """The `partitioned by` list, names quoted; None: unpartitioned."""
        return ", ".join(self.field_sql(f) for f in self.partition) or None

    @property
    def sort_sql(self) -> str | None:
        """The `write ordered by` list, names quoted; None: unordered."""
        return ", ".join(f"{quote_ident(c)} {d.upper()}" for c, d in self.sort) or None

    @property
    def text(self) -> str | None:
        """What `gold.tables` records (None: the default, unpartitioned and unordered)."""
        if not self.partition and not self.sort:
            return None
        return json.dumps({"partition": [list(f) for f in self.partition], "sort": [list(f) for f in self.sort]})

    @property
    def described(self) -> str:
        """For people (dbt docs, status page): `partitioned by days(ts), bucket(8, id); sorted by ts desc`."""

        def shown(field: tuple[str, int | None, str]) -> str:
            transform, size, column = field
            if transform == "identity":
                return column
            return f"{transform}({size}, {column})" if size is not None else f"{transform}({column})"

        parts = []
        if self.partition:
            parts.append("partitioned by " + ", ".join(shown(f) for f in self.partition))
        if self.sort:
            parts.append("sorted by " + ", ".join(f"{c} {d}" for c, d in self.sort))
        return "; ".join(parts) or "unpartitioned, unordered"


def recorded_layout(text: str | None) -> Layout:
    """A layout as `gold.tables` records it (`Layout.text`)."""
    if not text:
        return Layout()
    document = json.loads(text)
    return Layout(tuple((t, n, c) for t, n, c in document["partition"]), tuple((c, d) for c, d in document["sort"]))


def table_layout(gold: GoldSettings, source: str, database: str, table: str, columns: list[dict]) -> Layout:
    """The layout `gold.layouts` gives `database.table` of the given columns (names as upstream has them; matched
    without case, as TiDB matches them); raises ConfigError naming the glob when it does not fit the table."""
    glob, configured = gold.layout(database, table)
    if not glob:
        return Layout()
    by_name = {c["name"].lower(): c for c in columns}

    def column(name: str, key: str) -> dict:
        found = by_name.get(name.lower())
        if found is None:
            raise ConfigError(
                f"source {source}: gold.layouts.{glob}.{key}: {database}.{table} has no column {name!r} "
                f"(its columns: {', '.join(c['name'] for c in columns)})"
            )
        return found

    partition = []
    for transform, size, name in configured.partition_fields:
        found = column(name, "partition_by")
        base = parse_type(found["type"])[0]
        allowed = _TIME_TYPES.get(transform) or (_TRUNCATE_TYPES if transform == "truncate" else None)
        if allowed is not None and base not in allowed:
            raise ConfigError(
                f"source {source}: gold.layouts.{glob}.partition_by: {transform} does not take column "
                f"{found['name']!r} of {database}.{table}, a {found['type']} (it takes {', '.join(allowed)})"
            )
        partition.append((transform, size, found["name"]))
    sort = tuple((column(name, "sort_by")["name"], direction) for name, direction in configured.sort_fields)
    return Layout(tuple(partition), sort)


def current_layout(spark, relation: str) -> Layout:
    """The layout a table has, read from Iceberg (its current spec and sort order)."""
    table = iceberg_table(spark, relation)
    schema = table.schema()
    partition = []
    for field in java_items(table.spec().fields()):
        name, _, size = str(field.transform().toString()).partition("[")
        if name == "void":  # a field a format-1 table dropped
            continue
        column = schema.findColumnName(field.sourceId())
        partition.append((_ICEBERG_NAMES.get(name, name), int(size.rstrip("]")) if size else None, column))
    sort = tuple(
        (schema.findColumnName(f.sourceId()), str(f.direction().toString()).lower())
        for f in java_items(table.sortOrder().fields())
    )
    return Layout(tuple(partition), sort)


def evolve(spark, relation: str, wanted: Layout) -> list[str]:
    """Bring an existing table to `wanted` in place; returns what changed, for the run's log (nothing: it had it)."""
    namespace, _, name = relation.partition(".")
    target = f"{quote_ident(namespace)}.{quote_ident(name)}"
    have = current_layout(spark, relation)
    changes = []
    for field in [f for f in have.partition if f not in wanted.partition]:
        spark.sql(f"ALTER TABLE {target} DROP PARTITION FIELD {Layout.field_sql(field)}")
        changes.append(f"partition field {Layout.field_sql(field)} dropped")
    for field in [f for f in wanted.partition if f not in have.partition]:
        spark.sql(f"ALTER TABLE {target} ADD PARTITION FIELD {Layout.field_sql(field)}")
        changes.append(f"partition field {Layout.field_sql(field)} added")
    if wanted.partition and changes:  # a merge into a partitioned table writes rows of many partitions at once
        spark.sql(f"ALTER TABLE {target} SET TBLPROPERTIES ('write.spark.fanout.enabled' = 'true')")
    if have.sort != wanted.sort:
        spark.sql(
            f"ALTER TABLE {target} " + (f"WRITE ORDERED BY {wanted.sort_sql}" if wanted.sort else "WRITE UNORDERED")
        )
        changes.append(f"sort order {wanted.sort_sql or 'none'}")
    return changes
