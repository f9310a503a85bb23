"""Our Iceberg tables through Iceberg's Java API: snapshot and property operations that Iceberg's SQL extensions
offer only as statements without parameters (CREATE BRANCH, CALL ...) take names and ids as values here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from spark_jobs.runtime.jvm import java_class
from spark_jobs.runtime.tables import BRONZE_MESSAGES

T = TypeVar("T")


def iceberg_table(spark, table: str):
    """One of our tables through Iceberg's Java API, refreshed."""
    # the session's SQL conf (its catalogs) is the JVM thread's active session's: a Python thread other than the
    # one that made the session (maintenance beside landing) has none until it runs SQL
    java_class(spark, "org.apache.spark.sql.SparkSession").setActiveSession(spark._jsparkSession)
    loaded = java_class(spark, "org.apache.iceberg.spark.Spark3Util").loadIcebergTable(spark._jsparkSession, table)
    loaded.refresh()
    return loaded


def spark_actions(spark):
    """Iceberg's table actions (compaction, expiry, orphan removal) on the session."""
    return java_class(spark, "org.apache.iceberg.spark.actions.SparkActions").get(spark._jsparkSession)


def snapshot_util(spark):
    """Iceberg's `SnapshotUtil`: a table's snapshots by ancestry and time."""
    return java_class(spark, "org.apache.iceberg.util.SnapshotUtil")


def main_snapshot(spark, table: str = BRONZE_MESSAGES) -> int | None:
    """Main's head, from the table's current metadata: no Spark job, whatever the table's history."""
    return main_head(iceberg_table(spark, table))


def main_head(table) -> int | None:
    """Main's head of a table loaded with `iceberg_table`."""
    ref = table.refs().get("main")
    return ref.snapshotId() if ref is not None else None


def kept_while_head(
    kept: dict[str, tuple[tuple, Any]], spark, table: str, key: str, read: Callable[[int | None], T], *also: object
) -> T:
    """`read(head)` of `table` for `key`, kept in `kept` and given again while the table has the same head (an
    Iceberg snapshot never changes) and `also` is the same: a long-lived process reads again only after a commit
    to the table. The table's location is part of the key, so two lakehouses in one process never share a read."""
    loaded = iceberg_table(spark, table)
    head = main_head(loaded)
    at = (str(loaded.location()), head, *also)
    found = kept.get(key)
    if found is not None and found[0] == at:
        return found[1]
    value = read(head)
    kept[key] = (at, value)
    return value
