"""A table as it was at any TiDB timestamp or time, read from its history table (what `ticdc-lake as-of` runs).

The same predicate as the dbt macro `as_of` (dbt_project/macros/gold_history.sql): the versions open at the
moment, `_valid_from_ts <= ts and (_valid_to_ts is null or _valid_to_ts > ts)`, with the timestamp passed as a
parameter. A moment later than the source's consistent timestamp is refused: history does not know it yet.
"""

from __future__ import annotations

import datetime as dt

from spark_jobs.gold import names
from spark_jobs.runtime.sql import quote_ident
from spark_jobs.runtime.tables import GOLD_TABLES

HISTORY_COLUMNS = ("_row_key", "_valid_from_ts", "_valid_to_ts", "_valid_from", "_valid_to", "_op", "_is_current")


def ts_at(moment: dt.datetime) -> int:
    """The largest TiDB timestamp of a physical time: every commit at or before that millisecond."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return (int(moment.timestamp() * 1000) << 18) | ((1 << 18) - 1)


def split_table(qualified: str) -> tuple[str, str]:
    """`db.t` -> (db, t), at the first dot; a name with dots is written with backticks: `a.b`.`c`."""
    if qualified.startswith("`"):
        database, _, rest = qualified[1:].partition("`.")
        return database.replace("``", "`"), rest.strip("`").replace("``", "`")
    database, dot, table = qualified.partition(".")
    if not dot or not database or not table:
        raise ValueError(f"--table must be database.table, got {qualified!r}")
    return database, table


def as_of(spark, source: str, database: str, table: str, ts: int, keep_row_key: bool = False):
    """The rows of upstream table `database.table` at TiDB timestamp `ts` (a DataFrame of the table's columns,
    and `_row_key` first if asked)."""
    relation = f"{quote_ident(names.gold_namespace(source))}.{quote_ident(names.history_table(database, table))}"
    if not _exists(spark, source, database, table):
        raise ValueError(f"source {source} has no history table for {database}.{table}")
    consistent = consistent_ts(spark, source)
    if consistent is not None and int(ts) > consistent:
        raise ValueError(
            f"TiDB ts {ts} is later than source {source}'s consistent ts {consistent}: history does not know it yet"
        )
    versions = spark.sql(
        f"SELECT * FROM {relation} WHERE _valid_from_ts <= :ts AND (_valid_to_ts IS NULL OR _valid_to_ts > :ts)",
        args={"ts": int(ts)},
    )
    dropped = set(HISTORY_COLUMNS) - ({"_row_key"} if keep_row_key else set())
    return versions.select(*[quote_ident(c) for c in versions.columns if c not in dropped])


def consistent_ts(spark, source: str) -> int | None:
    """The TiDB timestamp the source's gold and history tables are consistent as of (gold.tables), or None."""
    if not spark.catalog.tableExists(GOLD_TABLES):
        return None
    value = spark.sql(
        f"SELECT min(consistent_ts) FROM {GOLD_TABLES} WHERE source = :source", args={"source": source}
    ).collect()[0][0]
    return int(value) if value is not None else None


def _exists(spark, source: str, database: str, table: str) -> bool:
    namespace = names.gold_namespace(source)
    if namespace not in {r[0] for r in spark.sql("SHOW NAMESPACES").collect()}:
        return False
    present = {r["tableName"] for r in spark.sql(f"SHOW TABLES IN {quote_ident(namespace)}").collect()}
    return names.history_table(database, table) in present
