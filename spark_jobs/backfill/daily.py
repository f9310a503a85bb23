"""Daily as-of tables: every gold table of a source as it was at the end of one day, one partition per day.

For a source and a date, the end of that day in the configured time zone (`daily.timezone`, UTC by default) is
turned into the largest TiDB timestamp of its last millisecond (`history.ts_at`), and every gold table of the
source that existed then is read as of that timestamp from its history table (`history.as_of`, the one as-of
mechanism) into `daily_<source>.<database>__<table>` (`names.daily_table`), partitioned by `_as_of_date`, with the
day's timestamp in `_as_of_ts` and the row's `_row_key`. Rows are in the table's latest shape, as history keeps
them.

A day is written only when it is complete: the source's consistent timestamp (what its gold and history tables are
consistent as of, `history.consistent_ts`) has reached the day's end (`day_status`); otherwise `write_day` refuses.
Writing a day replaces exactly that day's partition in one commit per table (an Iceberg overwrite filtered on the
date); a partition that already holds the same rows is left alone, so writing a day again makes no new snapshot.
Columns the table gained since an earlier day are added to the daily table (earlier days read them as null), a
widened type is widened in place (int to bigint, float to double, a larger decimal precision), any other type
change rewrites the daily table once with the column in its new type, earlier days' values cast; columns the
table lost stay, null from then on.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import zoneinfo
from dataclasses import dataclass, field

from spark_jobs.config import TableRules
from spark_jobs.errors import IncompleteDayError
from spark_jobs.gold import history, names
from spark_jobs.runtime.results import Result
from spark_jobs.runtime.sql import quote_ident
from spark_jobs.silver.merges import schemas_in_force

log = logging.getLogger(__name__)

DATE_COLUMN = "_as_of_date"
TS_COLUMN = "_as_of_ts"
KEY_COLUMN = "_row_key"
SCHEMA_VERSIONS = "lake_staging.int_schema_versions"
GOLD_TABLES = "lake_staging.int_gold_tables"


def end_of_day(day: dt.date, timezone: str = "UTC") -> dt.datetime:
    """The last millisecond of `day` in `timezone` (an IANA name), in UTC."""
    zone = zoneinfo.ZoneInfo(timezone)
    midnight = dt.datetime.combine(day + dt.timedelta(days=1), dt.time(), tzinfo=zone)
    return (midnight - dt.timedelta(milliseconds=1)).astimezone(dt.UTC)


def end_of_day_ts(day: dt.date, timezone: str = "UTC") -> int:
    """The largest TiDB timestamp of `day` in `timezone`: every commit before the next midnight there."""
    return history.ts_at(end_of_day(day, timezone))


@dataclass(frozen=True)
class DayStatus(Result):
    day: dt.date
    timezone: str
    as_of_ts: int  # the day's end as a TiDB timestamp
    consistent_ts: int | None  # the source's; None: nothing published yet

    @property
    def complete(self) -> bool:
        return self.consistent_ts is not None and self.consistent_ts >= self.as_of_ts

    def line(self, source: str) -> str:
        end = end_of_day(self.day, self.timezone).strftime("%Y-%m-%dT%H:%M:%S.%fZ").replace("000Z", "Z")
        state = "complete" if self.complete else "not complete yet"
        return (
            f"source {source}: day {self.day} ({self.timezone}) ends at {end} = TiDB ts {self.as_of_ts}; "
            f"consistent ts {self.consistent_ts}: {state}"
        )


@dataclass
class DailyResult(Result):
    source: str
    day: dt.date
    as_of_ts: int
    rows: dict[str, int] = field(default_factory=dict)  # daily relation -> rows of the day
    unchanged: list[str] = field(default_factory=list)  # relations whose partition already held those rows
    seconds: float = 0.0


def day_status(spark, source: str, day: dt.date, timezone: str = "UTC") -> DayStatus:
    """Whether the source's tables are known to the end of `day`: its consistent ts has reached the day's end."""
    return DayStatus(day, timezone, end_of_day_ts(day, timezone), history.consistent_ts(spark, source))


def tables_at(spark, source: str, ts: int) -> list[tuple[str, str]]:
    """(database, table) of every gold table of the source that existed at TiDB timestamp `ts`: it has a history
    table, and its identity (kept through renames, new after a drop) was created at or before `ts`. A table whose
    creation the DDL history does not show (dbt's intermediate tables not built) counts as existing."""
    present = [names.upstream_of(t) for t in _history_tables(spark, source)]
    created = _created_ts(spark, source)
    return sorted(t for t in present if created.get(t, ts) <= ts)


def write_day(spark, source: str, day: dt.date, timezone: str = "UTC") -> DailyResult:
    """Write `day`'s partition of every daily table of the source (see the module); raises IncompleteDayError
    when the day ends after the source's consistent timestamp."""
    started = time.monotonic()
    status = day_status(spark, source, day, timezone)
    if not status.complete:
        raise IncompleteDayError(status.line(source) + "; the day is not written")
    result = DailyResult(source, day, status.as_of_ts)
    namespace = names.daily_namespace(source)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {quote_ident(namespace)}")
    for database, table in tables_at(spark, source, status.as_of_ts):
        rows = _day_rows(spark, source, database, table, day, status.as_of_ts)
        relation, count, written = _write_partition(spark, *names.daily_table(source, database, table), rows, day)
        result.rows[relation] = count
        if not written:
            result.unchanged.append(relation)
    result.seconds = time.monotonic() - started
    return result


def summary(result: DailyResult, timezone: str = "UTC") -> list[str]:
    """The log lines of a written day: one for the day, one per table."""
    total = sum(result.rows.values())
    lines = [
        f"source {result.source}: day {result.day} ({timezone}) as of TiDB ts {result.as_of_ts}: "
        f"{len(result.rows)} tables, {total} rows, {len(result.rows) - len(result.unchanged)} partitions written, "
        f"{len(result.unchanged)} unchanged; {result.seconds:.1f}s"
    ]
    for relation, rows in sorted(result.rows.items()):
        lines.append(f"  {relation}: {rows} rows{' (unchanged)' if relation in result.unchanged else ''}")
    return lines


def remove_left_out(spark, source: str, rules: TableRules) -> list[str]:
    """Drop the daily tables of upstream tables the source's rules leave out, and the left-out columns of the
    rest (a rule added later: `rebuild silver` removes from silver and gold what came before it, this from the
    days written before). Returns what was removed, as `db.table` or `db.table.column`."""
    namespace = names.daily_namespace(source)
    if not rules.active or not spark.catalog.databaseExists(namespace):
        return []
    schemas = schemas_in_force(spark, source)
    removed = []
    for row in spark.sql(f"SHOW TABLES IN {quote_ident(namespace)}").collect():
        if row["isTemporary"]:
            continue
        database, table = names.upstream_of(row["tableName"])
        quoted = f"{quote_ident(namespace)}.{quote_ident(row['tableName'])}"
        if not rules.keeps(database, table):
            spark.sql(f"DROP TABLE IF EXISTS {quoted}")
            removed.append(f"{database}.{table}")
            continue
        keys = (schemas.get((database, table)) or {}).get("key_columns", [])
        left_out = rules.left_out_columns(database, table, keys)
        for column in spark.table(quoted).columns:
            if column.lower() in left_out and column != KEY_COLUMN:
                spark.sql(f"ALTER TABLE {quoted} DROP COLUMN {quote_ident(column)}")
                removed.append(f"{database}.{table}.{column}")
    for what in removed:
        log.info("daily %s: %s removed (left out by the table rules)", namespace, what)
    return removed


def _history_tables(spark, source: str) -> list[str]:
    namespace = names.gold_namespace(source)
    if not spark.catalog.databaseExists(namespace):
        return []
    return sorted(
        r["tableName"]
        for r in spark.sql(f"SHOW TABLES IN {quote_ident(namespace)}").collect()
        if not r["isTemporary"] and r["tableName"].endswith(names.HISTORY_SUFFIX)
    )


def _created_ts(spark, source: str) -> dict[tuple[str, str], int]:
    """(database, table) -> commit ts of the first DDL event of the table's identity, from dbt's tables."""
    if not (spark.catalog.tableExists(GOLD_TABLES) and spark.catalog.tableExists(SCHEMA_VERSIONS)):
        return {}
    rows = spark.sql(
        f"""SELECT g.upstream_database, g.upstream_table, min(v.valid_from_ts) AS created_ts
        FROM {GOLD_TABLES} g JOIN {SCHEMA_VERSIONS} v
          ON v.source_name = g.source_name AND v.table_uid = g.table_uid
        WHERE g.source_name = :source
        GROUP BY g.upstream_database, g.upstream_table""",
        args={"source": source},
    ).collect()
    return {(r[0], r[1]): int(r[2]) for r in rows if r[2] is not None}


def _day_rows(spark, source: str, database: str, table: str, day: dt.date, ts: int):
    from pyspark.sql import functions as F

    rows = history.as_of(spark, source, database, table, ts, keep_row_key=True)
    columns = [quote_ident(c) for c in rows.columns]
    return rows.select(
        F.lit(day).cast("date").alias(DATE_COLUMN), F.lit(int(ts)).cast("bigint").alias(TS_COLUMN), *columns
    )


_WIDENINGS = {("int", "bigint"), ("float", "double")}


def _widens(old, new) -> bool:
    """Whether Iceberg can change a column from `old` to `new` in place (Spark types)."""
    from pyspark.sql.types import DecimalType

    if isinstance(old, DecimalType) and isinstance(new, DecimalType):
        return new.scale == old.scale and new.precision > old.precision
    return (old.simpleString(), new.simpleString()) in _WIDENINGS


def _write_partition(spark, namespace: str, name: str, rows, day: dt.date) -> tuple[str, int, bool]:
    """Make `name`'s partition of `day` hold exactly `rows`; returns (relation, rows, whether it committed)."""
    from pyspark.sql import functions as F

    relation = f"{namespace}.{name}"
    quoted = f"{quote_ident(namespace)}.{quote_ident(name)}"
    if not spark.catalog.tableExists(relation):
        rows.writeTo(quoted).using("iceberg").partitionedBy(F.col(DATE_COLUMN)).tableProperty(
            "format-version", "2"
        ).create()
        return relation, spark.table(quoted).where(F.col(DATE_COLUMN) == F.lit(day)).count(), True
    _evolve(spark, quoted, rows.schema)
    target = spark.table(quoted).schema
    incoming = {f.name: f for f in rows.schema.fields}
    aligned = rows.select(
        *[
            (F.col(quote_ident(f.name)) if f.name in incoming else F.lit(None)).cast(f.dataType).alias(f.name)
            for f in target.fields
        ]
    ).localCheckpoint()
    count = aligned.count()
    existing = spark.table(quoted).where(F.col(DATE_COLUMN) == F.lit(day))
    if existing.count() == count and aligned.exceptAll(existing).isEmpty() and existing.exceptAll(aligned).isEmpty():
        return relation, count, False
    aligned.writeTo(quoted).overwrite(F.col(DATE_COLUMN) == F.lit(day))
    return relation, count, True


def _evolve(spark, quoted: str, incoming) -> None:
    """Give the daily table every column of `incoming` in a type that holds it: add new columns, widen in place,
    and rewrite the table once for a type change Iceberg cannot make in place."""
    from pyspark.sql import functions as F

    current = {f.name: f for f in spark.table(quoted).schema.fields}
    retyped = {}
    for f in incoming.fields:
        old = current.get(f.name)
        if old is None:
            spark.sql(f"ALTER TABLE {quoted} ADD COLUMN {quote_ident(f.name)} {f.dataType.simpleString()}")
            log.info("%s: column %s added (%s)", quoted, f.name, f.dataType.simpleString())
        elif old.dataType == f.dataType or _widens(f.dataType, old.dataType):
            continue
        elif _widens(old.dataType, f.dataType):
            spark.sql(f"ALTER TABLE {quoted} ALTER COLUMN {quote_ident(f.name)} TYPE {f.dataType.simpleString()}")
            log.info("%s: column %s widened to %s", quoted, f.name, f.dataType.simpleString())
        else:
            retyped[f.name] = f.dataType
    if retyped:
        table = spark.table(quoted)
        rewritten = table.select(
            *[
                (F.col(quote_ident(c)).cast(retyped[c]) if c in retyped else F.col(quote_ident(c))).alias(c)
                for c in table.columns
            ]
        ).localCheckpoint()
        rewritten.writeTo(quoted).using("iceberg").partitionedBy(F.col(DATE_COLUMN)).tableProperty(
            "format-version", "2"
        ).replace()
        log.info(
            "%s: rewritten with %s",
            quoted,
            ", ".join(f"{c} as {t.simpleString()}" for c, t in sorted(retyped.items())),
        )
