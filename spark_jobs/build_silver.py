"""Decode what bronze gained since the last silver run into the silver tables.

Every write is an idempotent MERGE (row changes deduplicated on source, database, table, key,
commit_ts, op; DDL on source, commit_ts, statement; watermarks keep the highest; quarantine on
Kafka coordinates), and the run is recorded last in `silver.runs` with the bronze snapshot it
covered: a run killed half-way is simply done again by the next run.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass

from spark_jobs.codecs import sends_watermarks
from spark_jobs.config import PipelineConfig, decoder_options
from spark_jobs.ddl_schema import schema_after
from spark_jobs.land_bronze import BRONZE_TABLE, committed_offsets, ensure_bronze, main_snapshot

log = logging.getLogger(__name__)

SILVER_DDL = {
    "silver.row_changes": """
        source STRING NOT NULL, database STRING NOT NULL, `table` STRING NOT NULL, op STRING NOT NULL,
        commit_ts BIGINT, row_key STRING, key_columns ARRAY<STRING>,
        before MAP<STRING, STRING>, after MAP<STRING, STRING>, column_types MAP<STRING, STRING>,
        schema_version BIGINT, flags ARRAY<STRING>,
        topic STRING NOT NULL, `partition` INT NOT NULL, `offset` BIGINT NOT NULL, event_index INT NOT NULL""",
    "silver.ddl_events": """
        source STRING NOT NULL, database STRING, `table` STRING, commit_ts BIGINT NOT NULL,
        ddl_type STRING NOT NULL, ddl_sql STRING, table_schema STRING, schema_origin STRING,
        topic STRING NOT NULL, `partition` INT NOT NULL, `offset` BIGINT NOT NULL""",
    "silver.watermarks": """
        source STRING NOT NULL, topic STRING NOT NULL, `partition` INT NOT NULL, resolved_ts BIGINT NOT NULL""",
    "silver.quarantine": """
        source STRING NOT NULL, protocol STRING NOT NULL, topic STRING NOT NULL, `partition` INT NOT NULL,
        `offset` BIGINT NOT NULL, reason STRING NOT NULL, key BINARY, value BINARY, quarantined_at TIMESTAMP""",
    "silver.runs": """
        run_id STRING NOT NULL, source STRING NOT NULL, bronze_snapshot_id BIGINT NOT NULL,
        messages BIGINT, row_changes BIGINT, ddl_events BIGINT, watermarks BIGINT, quarantined BIGINT, waiting BIGINT,
        consistent_ts BIGINT, consistency STRING, finished_at TIMESTAMP""",
}


@dataclass(frozen=True)
class SilverResult:
    source: str
    messages: int
    row_changes: int
    ddl_events: int
    watermarks: int
    quarantined: int
    waiting: int
    consistent_ts: int | None
    consistency: str
    seconds: float


def ensure_silver(spark) -> None:
    for table, columns in SILVER_DDL.items():
        partitioned = " PARTITIONED BY (source)" if table != "silver.runs" else ""
        spark.sql(f"CREATE TABLE IF NOT EXISTS {table} ({columns}) USING iceberg{partitioned} TBLPROPERTIES ('format-version'='2')")


def _last_bronze_snapshot(spark, source: str) -> int | None:
    rows = spark.sql(f"SELECT bronze_snapshot_id FROM silver.runs WHERE source = '{source}' "
                     "ORDER BY finished_at DESC, bronze_snapshot_id DESC LIMIT 1").collect()
    return rows[0][0] if rows else None


def _bronze_since(spark, source: str, start: int | None, end: int):
    reader = spark.read.format("iceberg")
    reader = reader.option("start-snapshot-id", start).option("end-snapshot-id", end) if start else reader.option("snapshot-id", end)
    return reader.load(BRONZE_TABLE).where(f"source = '{source}'")


def build_silver(spark, config: PipelineConfig, source_name: str) -> SilverResult:
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.window import Window

    from spark_jobs.decode_batches import DECODED_SCHEMA, decode_batches

    source = config.source(source_name)
    started = time.monotonic()
    ensure_bronze(spark)
    ensure_silver(spark)
    previous, current = _last_bronze_snapshot(spark, source.name), main_snapshot(spark)
    if current is None or current == previous:
        log.info("source %s: bronze has nothing new since the last silver run", source.name)
        return _finish(spark, config, source.name, None, {}, started)

    protocol, options = source.protocol, decoder_options(source)
    bronze = _bronze_since(spark, source.name, previous, current)
    ordered = bronze.repartition("topic", "partition").sortWithinPartitions("topic", "partition", "offset")
    decoded = ordered.select("topic", "partition", "offset", "key", "value", "headers").mapInArrow(
        lambda batches: decode_batches(batches, protocol, options), from_arrow_schema(DECODED_SCHEMA)
    ).withColumn("source", F.lit(source.name)).cache()
    counts = {r["kind"]: r["n"] for r in decoded.groupBy("kind").agg(F.count("*").alias("n")).collect()}
    messages = bronze.count()

    _merge_ddl(spark, source.name, decoded)
    rows = _label_enums(spark, source.name, decoded.where("kind = 'row'"))
    first = Window.partitionBy("database", "table", "row_key", "commit_ts", "op").orderBy("topic", "partition", "offset", "event_index")
    rows = rows.withColumn("_n", F.row_number().over(first)).where("_n = 1").drop("_n")
    rows.select("source", "database", "table", "op", "commit_ts", "row_key", "key_columns", "before", "after",
                "column_types", "schema_version", "flags", "topic", "partition", "offset", "event_index"
                ).createOrReplaceTempView("silver_batch_rows")
    spark.sql("""
        MERGE INTO silver.row_changes t USING silver_batch_rows s
        ON t.source = s.source AND t.database = s.database AND t.`table` = s.`table` AND t.row_key <=> s.row_key
           AND t.commit_ts <=> s.commit_ts AND t.op = s.op
        WHEN NOT MATCHED THEN INSERT *""")

    decoded.where("kind = 'watermark'").groupBy("source", "topic", "partition").agg(
        F.max("commit_ts").alias("resolved_ts")).createOrReplaceTempView("silver_batch_watermarks")
    spark.sql("""
        MERGE INTO silver.watermarks t USING silver_batch_watermarks s
        ON t.source = s.source AND t.topic = s.topic AND t.`partition` = s.`partition`
        WHEN MATCHED AND s.resolved_ts > t.resolved_ts THEN UPDATE SET t.resolved_ts = s.resolved_ts
        WHEN NOT MATCHED THEN INSERT *""")

    problems = decoded.where("kind IN ('quarantine', 'waiting')").alias("d").join(
        bronze.alias("b"), ["topic", "partition", "offset"]).select(
        F.lit(source.name).alias("source"), F.lit(protocol).alias("protocol"), "topic", "partition", "offset",
        F.col("d.reason").alias("reason"), F.col("b.key").alias("key"), F.col("b.value").alias("value"),
        F.current_timestamp().alias("quarantined_at"))
    problems.createOrReplaceTempView("silver_batch_quarantine")
    spark.sql("""
        MERGE INTO silver.quarantine t USING silver_batch_quarantine s
        ON t.source = s.source AND t.topic = s.topic AND t.`partition` = s.`partition` AND t.`offset` = s.`offset`
        WHEN NOT MATCHED THEN INSERT *""")
    decoded.unpersist()
    for view in ("silver_batch_rows", "silver_batch_ddl", "silver_batch_watermarks", "silver_batch_quarantine"):
        spark.catalog.dropTempView(view)
    counts["messages"] = messages
    return _finish(spark, config, source.name, current, counts, started)


def _merge_ddl(spark, source: str, decoded) -> None:
    """DDL once each, in commit order, with the table's schema after it (from the protocol or the SQL)."""
    new = decoded.where("kind IN ('ddl', 'bootstrap')").select(
        "kind", "database", "table", "commit_ts", "ddl_type", "ddl_sql", "table_schema", "schema_version",
        "topic", "partition", "offset").orderBy("commit_ts", "topic", "partition", "offset").collect()
    if not new:
        return
    known = {(r["database"], r["table"]): json.loads(r["table_schema"]) if r["table_schema"] else None for r in spark.sql(
        f"""SELECT database, `table`, table_schema FROM (
              SELECT *, row_number() OVER (PARTITION BY database, `table` ORDER BY commit_ts DESC) AS n
              FROM silver.ddl_events WHERE source = '{source}') WHERE n = 1""").collect()}
    seen: set[tuple] = set()
    out = []
    for r in new:
        commit_ts = r["commit_ts"] if r["commit_ts"] is not None else r["schema_version"] or 0
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
        out.append((source, r["database"], r["table"], commit_ts, r["ddl_type"] if r["kind"] == "ddl" else "bootstrap",
                    r["ddl_sql"], json.dumps(schema) if schema is not None else None, origin,
                    r["topic"], r["partition"], r["offset"]))
    spark.createDataFrame(out, spark.table("silver.ddl_events").schema).createOrReplaceTempView("silver_batch_ddl")
    spark.sql("""
        MERGE INTO silver.ddl_events t USING silver_batch_ddl s
        ON t.source = s.source AND t.commit_ts = s.commit_ts AND t.ddl_sql <=> s.ddl_sql
           AND t.database <=> s.database AND t.`table` <=> s.`table` AND t.ddl_type = s.ddl_type
        WHEN NOT MATCHED THEN INSERT *""")


def schema_history(spark, source: str):
    """Every ENUM/SET definition of the source's tables over time, from silver.ddl_events."""
    from spark_jobs.enum_labels import enum_columns
    history: dict = {}
    for r in spark.sql(f"""SELECT database, `table`, commit_ts, table_schema FROM silver.ddl_events
                           WHERE source = '{source}' AND `table` IS NOT NULL ORDER BY commit_ts""").collect():
        history.setdefault((r["database"], r["table"]), []).append(
            (r["commit_ts"], enum_columns(json.loads(r["table_schema"]) if r["table_schema"] else None)))
    return history


def _label_enums(spark, source: str, rows):
    """Rows flagged enum_index get labels from the schema in force at their commit ts, when known."""
    import pyarrow as pa

    from spark_jobs.enum_labels import definitions_at, label_image

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


def consistent_ts(spark, config: PipelineConfig, source_name: str) -> tuple[int | None, str]:
    """(timestamp, how): the minimum watermark over every landed partition of the source, or, for a
    protocol that sends no watermarks, the highest commit ts landed ("landed")."""
    source = config.source(source_name)
    if not sends_watermarks(source.protocol, source.options):
        row = spark.sql(f"SELECT max(commit_ts) FROM silver.row_changes WHERE source = '{source.name}'").collect()[0]
        return row[0], "landed"
    partitions = set(committed_offsets(spark, source.name))
    marks = {(r["topic"], r["partition"]): r["resolved_ts"] for r in spark.sql(
        f"SELECT topic, `partition`, resolved_ts FROM silver.watermarks WHERE source = '{source.name}'").collect()}
    if not partitions or any(tp not in marks for tp in partitions):
        return None, "watermark"
    return min(marks[tp] for tp in partitions), "watermark"


def _finish(spark, config: PipelineConfig, source_name: str, bronze_snapshot: int | None, counts: dict,
            started: float) -> SilverResult:
    """Record the run (last, so that it marks the run as complete) and log what it did in numbers."""
    ts, how = consistent_ts(spark, config, source_name)
    result = SilverResult(source_name, counts.get("messages", 0), counts.get("row", 0), counts.get("ddl", 0) + counts.get("bootstrap", 0),
                          counts.get("watermark", 0), counts.get("quarantine", 0), counts.get("waiting", 0), ts, how,
                          time.monotonic() - started)
    if bronze_snapshot is not None:
        spark.sql(f"""INSERT INTO silver.runs VALUES ('{uuid.uuid4().hex}', '{source_name}', {bronze_snapshot},
            {result.messages}, {result.row_changes}, {result.ddl_events}, {result.watermarks}, {result.quarantined},
            {result.waiting}, {ts if ts is not None else 'NULL'}, '{how}', current_timestamp())""")
    rate = result.messages / result.seconds if result.seconds else 0.0
    log.info("source %s: decoded %d messages into %d row changes, %d DDL, %d watermarks; %d quarantined, %d waiting; "
             "consistent ts %s (%s); %.0f messages/s", source_name, result.messages, result.row_changes, result.ddl_events,
             result.watermarks, result.quarantined, result.waiting, ts, how, rate)
    return result
