"""Our Iceberg tables through Iceberg's Java API: snapshot and property operations that Iceberg's SQL extensions
offer only as statements without parameters (CREATE BRANCH, CALL ...) take names and ids as values here."""

from __future__ import annotations

from spark_jobs.runtime.tables import BRONZE_MESSAGES


def iceberg_table(spark, table: str):
    """One of our tables through Iceberg's Java API, refreshed."""
    jvm = spark.sparkContext._jvm
    # the session's SQL conf (its catalogs) is the JVM thread's active session's: a Python thread other than the
    # one that made the session (maintenance beside landing) has none until it runs SQL
    jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
    loaded = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table)
    loaded.refresh()
    return loaded


def main_snapshot(spark, table: str = BRONZE_MESSAGES) -> int | None:
    """Main's head, from the table's current metadata: no Spark job, whatever the table's history."""
    return main_head(iceberg_table(spark, table))


def main_head(table) -> int | None:
    """Main's head of a table loaded with `iceberg_table`."""
    ref = table.refs().get("main")
    return ref.snapshotId() if ref is not None else None
