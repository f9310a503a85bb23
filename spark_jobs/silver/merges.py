"""The silver writers: one idempotent MERGE per table, from a batch of decoded rows.

Row changes are deduplicated on source, database, table, key, commit_ts, op; DDL on source,
commit_ts, statement; watermarks keep the highest; quarantine and pending rows on Kafka
coordinates. Writing the same batch twice changes nothing.
"""

from __future__ import annotations

import json
import logging
from dataclasses import astuple, dataclass
from datetime import UTC, datetime, timedelta

from spark_jobs.config import SourceSettings
from spark_jobs.ddl_schema import schema_after
from spark_jobs.runtime.sql import temp_view
from spark_jobs.runtime.tables import (
    BRONZE_MESSAGES,
    SILVER_DDL_EVENTS,
    SILVER_PENDING,
    SILVER_QUARANTINE,
    SILVER_ROW_CHANGES,
    SILVER_WATERMARKS,
)

log = logging.getLogger(__name__)

ROW_CHANGE_COLUMNS = (
    "source",
    "database",
    "table",
    "op",
    "commit_ts",
    "row_key",
    "key_columns",
    "before",
    "after",
    "column_types",
    "schema_version",
    "flags",
    "topic",
    "partition",
    "offset",
    "event_index",
)


@dataclass(frozen=True)
class DdlEventRow:
    """One row of silver.ddl_events, in the table's column order."""

    source: str
    database: str | None
    table: str | None
    commit_ts: int
    ddl_type: str
    ddl_sql: str | None
    table_schema: str | None  # JSON
    schema_origin: str  # protocol | parsed | inferred | none
    topic: str
    partition: int
    offset: int


def merge_row_changes(spark, source: str, decoded) -> None:
    """Row changes once each; the first copy (in Kafka order) of a redelivered change is kept."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    rows = _label_enums(spark, source, decoded.where("kind = 'row'"))
    first = Window.partitionBy("database", "table", "row_key", "commit_ts", "op").orderBy(
        "topic", "partition", "offset", "event_index"
    )
    rows = rows.withColumn("_n", F.row_number().over(first)).where("_n = 1").select(*ROW_CHANGE_COLUMNS)
    with temp_view(rows, "silver_batch_rows") as batch:
        spark.sql(f"""
            MERGE INTO {SILVER_ROW_CHANGES} t USING {batch} s
            ON t.source = s.source AND t.database = s.database AND t.`table` = s.`table` AND t.row_key <=> s.row_key
               AND t.commit_ts <=> s.commit_ts AND t.op = s.op
            WHEN NOT MATCHED THEN INSERT *""")


def merge_watermarks(spark, decoded) -> None:
    """The highest resolved ts per partition; a lower one arriving later changes nothing."""
    from pyspark.sql import functions as F

    highest = (
        decoded.where("kind = 'watermark'")
        .groupBy("source", "topic", "partition")
        .agg(F.max("commit_ts").alias("resolved_ts"))
    )
    with temp_view(highest, "silver_batch_watermarks") as batch:
        spark.sql(f"""
            MERGE INTO {SILVER_WATERMARKS} t USING {batch} s
            ON t.source = s.source AND t.topic = s.topic AND t.`partition` = s.`partition`
            WHEN MATCHED AND s.resolved_ts > t.resolved_ts THEN UPDATE SET t.resolved_ts = s.resolved_ts
            WHEN NOT MATCHED THEN INSERT *""")


def merge_quarantine(spark, source: SourceSettings, bronze, decoded, replaying: bool) -> None:
    """Quarantined messages with their reason and bytes. When replaying quarantine, the messages
    that neither failed nor wait any more decoded now, and leave it."""
    from pyspark.sql import functions as F

    problems = (
        decoded.where("kind IN ('quarantine', 'waiting')")
        .alias("d")
        .join(bronze.alias("b"), ["topic", "partition", "offset"])
        .select(
            F.lit(source.name).alias("source"),
            "topic",
            "partition",
            "offset",
            F.col("d.kind").alias("kind"),
            F.lit(source.protocol).alias("protocol"),
            F.col("d.reason").alias("reason"),
            F.col("b.key").alias("key"),
            F.col("b.value").alias("value"),
        )
    )
    with temp_view(problems, "silver_batch_problems") as batch:
        spark.sql(f"""
            MERGE INTO {SILVER_QUARANTINE} t USING (SELECT * FROM {batch} WHERE kind = 'quarantine') s
            ON t.source = s.source AND t.topic = s.topic AND t.`partition` = s.`partition` AND t.`offset` = s.`offset`
            WHEN MATCHED THEN UPDATE SET t.reason = s.reason
            WHEN NOT MATCHED THEN INSERT (source, topic, `partition`, `offset`, protocol, reason, key, value, quarantined_at)
                 VALUES (s.source, s.topic, s.`partition`, s.`offset`, s.protocol, s.reason, s.key, s.value, current_timestamp())""")
        if replaying:
            spark.sql(
                f"""DELETE FROM {SILVER_QUARANTINE} q WHERE q.source = :source AND NOT EXISTS (
                    SELECT 1 FROM {batch} o WHERE o.topic = q.topic AND o.`partition` = q.`partition` AND o.`offset` = q.`offset`)""",
                args={"source": source.name},
            )


def update_pending(spark, source: str, decoded) -> None:
    """Pending = the rows still waiting: new ones added, those decoded or quarantined now removed."""
    from pyspark.sql import functions as F

    seen = decoded.groupBy("topic", "partition", "offset").agg(
        F.max(F.when(F.col("kind") == "waiting", F.col("reason"))).alias("reason")
    )
    with temp_view(seen, "silver_batch_seen") as batch:
        spark.sql(
            f"""
            MERGE INTO {SILVER_PENDING} t USING {batch} s
            ON t.source = :source AND t.topic = s.topic AND t.`partition` = s.`partition` AND t.`offset` = s.`offset`
            WHEN MATCHED AND s.reason IS NULL THEN DELETE
            WHEN MATCHED THEN UPDATE SET t.reason = s.reason
            WHEN NOT MATCHED AND s.reason IS NOT NULL THEN INSERT (source, topic, `partition`, `offset`, reason, first_seen_at)
                 VALUES (:source, s.topic, s.`partition`, s.`offset`, s.reason, current_timestamp())""",
            args={"source": source},
        )


def expire_pending(spark, source: SourceSettings) -> int:
    """Rows that waited longer than the source allows go to quarantine with that reason.

    One cutoff for the count, the move and the delete, so a row expiring meanwhile is not deleted unmoved.
    """
    minutes = source.decoding.max_wait_minutes
    args = {
        "source": source.name,
        "protocol": source.protocol,
        "minutes": minutes,
        "cutoff": datetime.now(UTC) - timedelta(minutes=minutes),
    }
    count = spark.sql(
        f"SELECT count(*) FROM {SILVER_PENDING} WHERE source = :source AND first_seen_at < :cutoff", args=args
    ).collect()[0][0]
    if count:
        spark.sql(
            f"""
            MERGE INTO {SILVER_QUARANTINE} t USING (
                SELECT p.source, p.topic, p.`partition`, p.`offset`, p.reason, b.key, b.value FROM {SILVER_PENDING} p
                JOIN {BRONZE_MESSAGES} b ON b.source = p.source AND b.topic = p.topic AND b.`partition` = p.`partition`
                  AND b.`offset` = p.`offset` WHERE p.source = :source AND p.first_seen_at < :cutoff) s
            ON t.source = s.source AND t.topic = s.topic AND t.`partition` = s.`partition` AND t.`offset` = s.`offset`
            WHEN NOT MATCHED THEN INSERT (source, topic, `partition`, `offset`, protocol, reason, key, value, quarantined_at)
                 VALUES (s.source, s.topic, s.`partition`, s.`offset`, :protocol,
                         concat(s.reason, ' (still unknown after ', :minutes, ' minutes)'), s.key, s.value, current_timestamp())""",
            args=args,
        )
        spark.sql(f"DELETE FROM {SILVER_PENDING} WHERE source = :source AND first_seen_at < :cutoff", args=args)
        log.warning(
            "source %s: %d rows waited more than %d minutes for their schema: quarantined", source.name, count, minutes
        )
    return count


def merge_ddl_events(spark, source: str, decoded) -> None:
    """DDL once each, in commit order, with the table's schema after it (from the protocol or the SQL)."""
    new = (
        decoded.where("kind IN ('ddl', 'bootstrap')")
        .select(
            "kind",
            "database",
            "table",
            "commit_ts",
            "ddl_type",
            "ddl_sql",
            "table_schema",
            "schema_version",
            "topic",
            "partition",
            "offset",
        )
        .orderBy("commit_ts", "topic", "partition", "offset")
        .collect()
    )
    if not new:
        return
    known = _latest_schemas(spark, source)
    seen: set[tuple] = set()
    out = []
    for r in new:
        commit_ts = r["commit_ts"] if r["commit_ts"] else r["schema_version"] or 0
        ident = (commit_ts, r["ddl_sql"] or "", r["database"], r["table"], r["kind"])
        if ident in seen:
            continue
        seen.add(ident)
        name = (r["database"], r["table"])
        if r["table_schema"]:
            schema, origin = json.loads(r["table_schema"]), "protocol"
        elif r["table"]:
            schema, origin = schema_after(r["ddl_sql"] or "", r["database"], r["table"], known.get(name)), "parsed"
        else:
            schema, origin = None, "none"
        if r["table"]:
            known[name] = schema
        out.append(
            DdlEventRow(
                source=source,
                database=r["database"],
                table=r["table"],
                commit_ts=commit_ts,
                ddl_type=r["ddl_type"] if r["kind"] == "ddl" else "bootstrap",
                ddl_sql=r["ddl_sql"],
                table_schema=json.dumps(schema) if schema is not None else None,
                schema_origin=origin,
                topic=r["topic"],
                partition=r["partition"],
                offset=r["offset"],
            )
        )
    _write_ddl_events(spark, out)


def merge_inferred_ddl_events(spark, source: str, decoded) -> int:
    """Avro sends no DDL: a table's writer schema changing between rows becomes an inferred DDL event
    (columns added, dropped, retyped), dated just before the first row with the new schema."""
    from pyspark.sql import functions as F

    versions = (
        decoded.where("kind = 'row' AND NOT array_contains(flags, 'handle_key_only')")
        .groupBy("database", "table", F.col("column_types").cast("string").alias("shape"))
        .agg(
            F.min("commit_ts").alias("first_ts"),
            F.first("column_types").alias("column_types"),
            F.first("key_columns").alias("key_columns"),
            F.min(F.struct("topic", "partition", "offset")).alias("at"),
        )
        .orderBy("first_ts")
        .collect()
    )
    known = _latest_schemas(spark, source)
    out = []
    for v in versions:
        name = (v["database"], v["table"])
        columns = [{"name": c, "type": t, "nullable": c not in v["key_columns"]} for c, t in v["column_types"].items()]
        previous = known.get(name)
        before = {c["name"]: c["type"] for c in previous["columns"]} if previous else None
        after = {c["name"]: c["type"] for c in columns}
        if before == after:
            continue
        if before is None:
            ddl_type, sql = "create_table", "inferred from the Avro writer schema: table seen"
        else:
            added = [c for c in after if c not in before]
            dropped = [c for c in before if c not in after]
            retyped = [c for c in after if c in before and before[c] != after[c]]
            kinds = [
                k for k, cols in (("add_column", added), ("drop_column", dropped), ("modify_column", retyped)) if cols
            ]
            ddl_type = kinds[0] if len(kinds) == 1 else "other"
            sql = "inferred from the Avro writer schema: " + "; ".join(
                f"{label} {', '.join(cols)}"
                for label, cols in (("added", added), ("dropped", dropped), ("retyped", retyped))
                if cols
            )
        schema = {
            "database": v["database"],
            "table": v["table"],
            "columns": columns,
            "key_columns": list(v["key_columns"]),
        }
        known[name] = schema
        out.append(
            DdlEventRow(
                source=source,
                database=v["database"],
                table=v["table"],
                commit_ts=(v["first_ts"] or 1) - 1,
                ddl_type=ddl_type,
                ddl_sql=sql,
                table_schema=json.dumps(schema),
                schema_origin="inferred",
                topic=v["at"]["topic"],
                partition=v["at"]["partition"],
                offset=v["at"]["offset"],
            )
        )
    if out:
        _write_ddl_events(spark, out)
    return len(out)


def _write_ddl_events(spark, rows: list[DdlEventRow]) -> None:
    events = spark.createDataFrame([astuple(r) for r in rows], spark.table(SILVER_DDL_EVENTS).schema)
    with temp_view(events, "silver_batch_ddl") as batch:
        spark.sql(f"""
            MERGE INTO {SILVER_DDL_EVENTS} t USING {batch} s
            ON t.source = s.source AND t.commit_ts = s.commit_ts AND t.ddl_sql <=> s.ddl_sql
               AND t.database <=> s.database AND t.`table` <=> s.`table` AND t.ddl_type = s.ddl_type
            WHEN NOT MATCHED THEN INSERT *""")


def _latest_schemas(spark, source: str) -> dict[tuple, dict | None]:
    rows = spark.sql(
        f"""SELECT database, `table`, table_schema FROM (
          SELECT *, row_number() OVER (PARTITION BY database, `table` ORDER BY commit_ts DESC) AS n
          FROM {SILVER_DDL_EVENTS} WHERE source = :source) WHERE n = 1""",
        args={"source": source},
    ).collect()
    return {(r["database"], r["table"]): json.loads(r["table_schema"]) if r["table_schema"] else None for r in rows}


def schema_history(spark, source: str):
    """Every ENUM/SET definition of the source's tables over time, from silver.ddl_events."""
    from spark_jobs.silver.enum_labels import enum_columns

    rows = spark.sql(
        f"""SELECT database, `table`, commit_ts, table_schema FROM {SILVER_DDL_EVENTS}
            WHERE source = :source AND `table` IS NOT NULL ORDER BY commit_ts""",
        args={"source": source},
    ).collect()
    history: dict = {}
    for r in rows:
        history.setdefault((r["database"], r["table"]), []).append(
            (r["commit_ts"], enum_columns(json.loads(r["table_schema"]) if r["table_schema"] else None))
        )
    return history


def _label_enums(spark, source: str, rows):
    """Rows flagged enum_index get labels from the schema in force at their commit ts, when known."""
    import pyarrow as pa

    from spark_jobs.silver.enum_labels import definitions_at, label_image

    history = schema_history(spark, source)
    if not any(defs for versions in history.values() for _, defs in versions):
        return rows

    def label(batches):
        for batch in batches:
            table = batch.to_pydict()
            for i in range(batch.num_rows):
                flags = table["flags"][i] or []
                if "enum_index" not in flags:
                    continue
                defs = definitions_at(history, table["database"][i], table["table"][i], table["commit_ts"][i])
                if not defs:
                    continue
                for image in ("before", "after"):
                    value = table[image][i]
                    if value is not None:
                        table[image][i] = list(label_image(dict(value), defs).items())
                table["flags"][i] = [f for f in flags if f != "enum_index"]
            yield pa.RecordBatch.from_pydict(table, schema=batch.schema)

    return rows.mapInArrow(label, rows.schema)
