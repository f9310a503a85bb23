"""Every bronze, silver and gold bookkeeping table: name, columns, partitioning and properties, created by `ensure_tables`.

Table names are constants of ours (`namespace.table`), so SQL text may name them as they are.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from dataclasses import dataclass, field

BRONZE_MESSAGES = "bronze.kafka_messages"
BRONZE_LANDING_RUNS = "bronze.landing_runs"
BRONZE_LANDING_GAPS = "bronze.landing_gaps"

SILVER_ROW_CHANGES = "silver.row_changes"
SILVER_DDL_EVENTS = "silver.ddl_events"
SILVER_WATERMARKS = "silver.watermarks"
SILVER_QUARANTINE = "silver.quarantine"
SILVER_PENDING = "silver.pending"
SILVER_RUNS = "silver.runs"
SILVER_SNAPSHOT_LOADS = "silver.snapshot_loads"
SILVER_ERASURES = "silver.erasures"
SILVER_ERASED_MESSAGES = "silver.erased_messages"

GOLD_PUBLICATIONS = "gold.publications"
GOLD_TABLES = "gold.tables"
GOLD_RECONCILIATIONS = "gold.reconciliations"
# its `outcome` per table: the same rows (count and hash), or how they differ; a keyless table is not compared
RECONCILED_MATCH, RECONCILED_DIFFERS, NOT_IN_LAKE, NOT_UPSTREAM, NOT_COMPARED = (
    "match",
    "differs",
    "not in the lakehouse",
    "not upstream",
    "not compared",
)
RECONCILE_MISMATCHES = (RECONCILED_DIFFERS, NOT_IN_LAKE, NOT_UPSTREAM)


@dataclass(frozen=True)
class TableDefinition:
    name: str
    columns: str  # Spark SQL column list
    partitioned_by: tuple[str, ...] = ()
    properties: dict[str, str] = field(default_factory=dict)

    def create_statement(self) -> str:
        partitioning = f" PARTITIONED BY ({', '.join(self.partitioned_by)})" if self.partitioned_by else ""
        properties = ", ".join(f"'{key}' = '{value}'" for key, value in self.properties.items())
        return (
            f"CREATE TABLE IF NOT EXISTS {self.name} ({self.columns}) USING iceberg{partitioning}"
            f" TBLPROPERTIES ({properties})"
        )


# Commits to bronze's tables made by this process go one at a time. The embedded catalog commits without a
# metastore lock, so two commits of one process to one table (a landing run and maintenance in threads) are not
# atomic against each other: one could be based on metadata the other replaced, and expiry could delete files the
# survivor references. Landing commits to bronze.messages, bronze.landing_runs and bronze.landing_gaps,
# maintenance to each of them and erasure to bronze.messages, under this lock.
BRONZE_COMMITS = threading.RLock()


def bronze_commits(table: str) -> contextlib.AbstractContextManager:
    """`BRONZE_COMMITS` for one of bronze's tables; nothing to take for any other table."""
    return BRONZE_COMMITS if table in {t.name for t in TABLES["bronze"]} else contextlib.nullcontext()


BRONZE_PROPERTIES = {
    "format-version": "2",
    "write.parquet.compression-codec": "zstd",
    # one file per writing task: a batch is one source, and one file would be read by one task
    "write.distribution-mode": "none",
    # a file splits at its row groups: silver's decoding reads a run's messages in splits of this size
    # (spark_jobs.silver.build.DECODE_SPLIT_BYTES); messages compress about 15:1
    "write.parquet.row-group-size-bytes": str(8 * 1024 * 1024),
}
SILVER_PROPERTIES = {
    "format-version": "2",
    # a silver write holds one source: hash distribution by the partition column would give it one task
    "write.distribution-mode": "none",
}
COORDINATES = "source STRING NOT NULL, topic STRING NOT NULL, `partition` INT NOT NULL, `offset` BIGINT NOT NULL"

TABLES: dict[str, tuple[TableDefinition, ...]] = {
    "bronze": (
        TableDefinition(
            BRONZE_MESSAGES,
            """source STRING NOT NULL, topic STRING NOT NULL, `partition` INT NOT NULL, `offset` BIGINT NOT NULL,
            `timestamp` TIMESTAMP, key BINARY, value BINARY, headers ARRAY<STRUCT<key: STRING, value: BINARY>>,
            batch_id STRING NOT NULL, landed_at TIMESTAMP NOT NULL""",
            ("source",),
            BRONZE_PROPERTIES,
        ),
        TableDefinition(
            BRONZE_LANDING_RUNS,
            """source STRING NOT NULL, batch_id STRING NOT NULL, topic STRING NOT NULL, `partition` INT NOT NULL,
            start_offset BIGINT NOT NULL, next_offset BIGINT NOT NULL, records BIGINT NOT NULL, bytes BIGINT NOT NULL,
            lag BIGINT NOT NULL, seconds DOUBLE NOT NULL, landed_at TIMESTAMP NOT NULL""",
            ("source",),
            BRONZE_PROPERTIES,
        ),
        TableDefinition(
            BRONZE_LANDING_GAPS,
            """source STRING NOT NULL, topic STRING NOT NULL, `partition` INT NOT NULL, kind STRING NOT NULL,
            first_offset BIGINT NOT NULL, end_offset BIGINT NOT NULL, detected_at TIMESTAMP NOT NULL""",
            ("source",),
            BRONZE_PROPERTIES,
        ),
    ),
    "silver": (
        TableDefinition(
            SILVER_ROW_CHANGES,
            """source STRING NOT NULL, database STRING NOT NULL, `table` STRING NOT NULL, op STRING NOT NULL,
            commit_ts BIGINT, row_key STRING, key_columns ARRAY<STRING>,
            before MAP<STRING, STRING>, after MAP<STRING, STRING>, column_types MAP<STRING, STRING>,
            schema_version BIGINT, flags ARRAY<STRING>,
            topic STRING NOT NULL, `partition` INT NOT NULL, `offset` BIGINT NOT NULL, event_index INT NOT NULL,
            silver_seq BIGINT""",
            ("source",),
            SILVER_PROPERTIES,
        ),
        TableDefinition(
            SILVER_DDL_EVENTS,
            """source STRING NOT NULL, database STRING, `table` STRING, commit_ts BIGINT NOT NULL,
            ddl_type STRING NOT NULL, ddl_sql STRING, table_schema STRING, schema_origin STRING,
            topic STRING NOT NULL, `partition` INT NOT NULL, `offset` BIGINT NOT NULL,
            old_database STRING, old_table STRING, table_uid STRING, needs_snapshot BOOLEAN, understood BOOLEAN""",
            ("source",),
            SILVER_PROPERTIES,
        ),
        TableDefinition(
            SILVER_WATERMARKS,
            "source STRING NOT NULL, topic STRING NOT NULL, `partition` INT NOT NULL, resolved_ts BIGINT NOT NULL",
            ("source",),
            SILVER_PROPERTIES,
        ),
        TableDefinition(
            SILVER_QUARANTINE,
            f"""{COORDINATES}, protocol STRING NOT NULL, reason STRING NOT NULL, key BINARY, value BINARY,
            quarantined_at TIMESTAMP""",
            ("source",),
            SILVER_PROPERTIES,
        ),
        TableDefinition(
            SILVER_PENDING,
            f"{COORDINATES}, reason STRING NOT NULL, first_seen_at TIMESTAMP NOT NULL",
            ("source",),
            SILVER_PROPERTIES,
        ),
        TableDefinition(
            SILVER_RUNS,
            """run_id STRING NOT NULL, source STRING NOT NULL, kind STRING NOT NULL, bronze_snapshot_id BIGINT,
            messages BIGINT, decoded BIGINT, row_changes BIGINT, ddl_events BIGINT, watermarks BIGINT,
            quarantined BIGINT, waiting BIGINT, consistent_ts BIGINT, consistency STRING, finished_at TIMESTAMP,
            silver_seq BIGINT""",
            properties=SILVER_PROPERTIES,
        ),
        TableDefinition(
            SILVER_SNAPSHOT_LOADS,
            """source STRING NOT NULL, location STRING NOT NULL, snapshot_ts BIGINT NOT NULL, tables ARRAY<STRING>,
            files BIGINT, `rows` BIGINT, silver_seq BIGINT, forced BOOLEAN, started_at TIMESTAMP NOT NULL,
            finished_at TIMESTAMP""",
            ("source",),
            SILVER_PROPERTIES,
        ),
        # One row per erasure (`ticdc-lake erase`): who asked, what (the table, its key columns and a SHA-256 of the
        # key under each name the table had: silver keeps the key's changes committed up to `through_ts`, the request's TiDB time, out for good), when, and
        # what it removed. Never a value.
        TableDefinition(
            SILVER_ERASURES,
            """source STRING NOT NULL, erasure_id STRING NOT NULL, database STRING NOT NULL, `table` STRING NOT NULL,
            key_columns ARRAY<STRING> NOT NULL, key_hashes ARRAY<STRING> NOT NULL, through_ts BIGINT NOT NULL,
            requested_by STRING NOT NULL, requested_at TIMESTAMP NOT NULL, finished_at TIMESTAMP, bronze_dropped BIGINT, bronze_rewritten BIGINT,
            silver_rows BIGINT, gold_rows BIGINT, history_rows BIGINT, daily_rows BIGINT, files_deleted BIGINT,
            key_changes ARRAY<STRUCT<database: STRING, `table`: STRING, commit_ts: BIGINT>>""",
            ("source",),
            SILVER_PROPERTIES,
        ),
        # Where a change of an erased key came again after its erasure (TiCDC sent it again): silver kept it out,
        # bronze holds its message until the key is erased again, which finds the message here.
        TableDefinition(
            SILVER_ERASED_MESSAGES,
            f"{COORDINATES}, key_hash STRING NOT NULL, seen_at TIMESTAMP NOT NULL",
            ("source",),
            SILVER_PROPERTIES,
        ),
    ),
    "gold": (
        TableDefinition(
            GOLD_PUBLICATIONS,
            """source STRING NOT NULL, consistent_ts BIGINT NOT NULL, consistent_time TIMESTAMP NOT NULL,
            tag STRING NOT NULL,
            tables ARRAY<STRUCT<relation: STRING, upstream: STRING, snapshot_id: BIGINT, `rows`: BIGINT>> NOT NULL,
            run_id STRING NOT NULL, started_at TIMESTAMP NOT NULL, finished_at TIMESTAMP NOT NULL""",
            ("source",),
            SILVER_PROPERTIES,
        ),
        # What each gold table of a source is now: its relations and schema, the snapshots the newest publication
        # pins, and the consistent ts and silver_seq it is known right as of (what the next run reads from).
        TableDefinition(
            GOLD_TABLES,
            """source STRING NOT NULL, table_uid STRING NOT NULL, upstream_database STRING, upstream_table STRING,
            gold_relation STRING NOT NULL, history_relation STRING NOT NULL, columns STRING,
            key_columns ARRAY<STRING>, schema_fingerprint STRING, consistent_ts BIGINT NOT NULL,
            silver_seq BIGINT NOT NULL, gold_snapshot_id BIGINT, history_snapshot_id BIGINT, `rows` BIGINT,
            versions BIGINT, changed_ts BIGINT, ddl_events BIGINT, needs_snapshot BOOLEAN,
            updated_at TIMESTAMP NOT NULL, delete_mode STRING, layout STRING, types STRING""",
            ("source",),
            SILVER_PROPERTIES,
        ),
        # One row per table per reconciliation (`ticdc-lake reconcile`): the lakehouse's rows of the table as of a
        # TSO against the upstream's then, by count and an order-independent hash of every row. Never a value.
        TableDefinition(
            GOLD_RECONCILIATIONS,
            """source STRING NOT NULL, reconciliation_id STRING NOT NULL, checked_at TIMESTAMP NOT NULL,
            against STRING NOT NULL, against_kind STRING NOT NULL, as_of_ts BIGINT NOT NULL,
            upstream_database STRING NOT NULL, upstream_table STRING NOT NULL, outcome STRING NOT NULL,
            upstream_rows BIGINT, lake_rows BIGINT, upstream_hash DECIMAL(38,0), lake_hash DECIMAL(38,0),
            missing_keys BIGINT, extra_keys BIGINT, changed_keys BIGINT, diff_keys ARRAY<STRING>,
            columns_not_compared ARRAY<STRING>, note STRING""",
            ("source",),
            SILVER_PROPERTIES,
        ),
    ),
}


_ENSURED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # session -> the layers ensured in it


def ensure_tables_once(spark, layer: str) -> None:
    """`ensure_tables`, once per session rather than on every run (it costs a metastore round trip and a schema
    check per table): for a layer whose tables nothing drops while the session lives."""
    ensured = _ENSURED.setdefault(spark, set())
    if layer not in ensured:
        ensure_tables(spark, layer)
        ensured.add(layer)


def ensure_tables(spark, layer: str) -> None:
    """Create the layer's tables that do not exist yet; add the columns and set the properties a newer version
    defines on those that do (Iceberg adds a column without rewriting data; existing rows read it as null)."""
    from spark_jobs.runtime.sql import quote_ident

    for table in TABLES[layer]:
        spark.sql(table.create_statement())
        present = {f.name for f in spark.table(table.name).schema.fields}
        wanted = spark.createDataFrame([], table.columns).schema.fields
        missing = [f for f in wanted if f.name not in present]
        if missing:
            columns = ", ".join(f"{quote_ident(f.name)} {f.dataType.simpleString()}" for f in missing)
            spark.sql(f"ALTER TABLE {table.name} ADD COLUMNS ({columns})")
        current = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {table.name}").collect()}
        changed = {k: v for k, v in table.properties.items() if current.get(k) != v and k != "format-version"}
        if changed:
            properties = ", ".join(f"'{key}' = '{value}'" for key, value in changed.items())
            spark.sql(f"ALTER TABLE {table.name} SET TBLPROPERTIES ({properties})")
