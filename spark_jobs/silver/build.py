"""Decode what bronze gained since the last silver run into the silver tables.

Every write is an idempotent MERGE (row changes deduplicated on source, database, table, key,
commit_ts, op; DDL on source, commit_ts, statement; watermarks keep the highest; quarantine and
pending rows on Kafka coordinates), and the run is recorded last in `silver.runs` with the bronze
snapshot it covered: a run killed half-way is simply done again by the next run, which changes
nothing that was already written.

Rows whose schema has not arrived yet (Simple protocol, consumer started mid-stream) wait in
`silver.pending` and are decoded again by every run until their schema arrives, or go to
quarantine after `decoding.max_wait_minutes`. Quarantined messages can be decoded again after a
fix (`replay_quarantine`).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass

from spark_jobs.bronze.land import BRONZE_TABLE, committed_offsets, ensure_bronze, main_snapshot
from spark_jobs.codecs import sends_watermarks
from spark_jobs.config import PipelineConfig, SourceSettings, decoder_options
from spark_jobs.ddl_schema import schema_after

log = logging.getLogger(__name__)

COORDINATES = "source STRING NOT NULL, topic STRING NOT NULL, `partition` INT NOT NULL, `offset` BIGINT NOT NULL"
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
    "silver.watermarks": "source STRING NOT NULL, topic STRING NOT NULL, `partition` INT NOT NULL, resolved_ts BIGINT NOT NULL",
    "silver.quarantine": f"""{COORDINATES}, protocol STRING NOT NULL, reason STRING NOT NULL, key BINARY, value BINARY,
        quarantined_at TIMESTAMP""",
    "silver.pending": f"{COORDINATES}, reason STRING NOT NULL, first_seen_at TIMESTAMP NOT NULL",
    "silver.runs": """
        run_id STRING NOT NULL, source STRING NOT NULL, kind STRING NOT NULL, bronze_snapshot_id BIGINT,
        messages BIGINT, decoded BIGINT, row_changes BIGINT, ddl_events BIGINT, watermarks BIGINT, quarantined BIGINT,
        waiting BIGINT, consistent_ts BIGINT, consistency STRING, finished_at TIMESTAMP""",
}
STATEFUL_PROTOCOLS = ("simple-json", "simple-avro")


@dataclass(frozen=True)
class SilverResult:
    source: str
    messages: int  # bronze messages read (new ones and those decoded again)
    decoded: int  # of those, decoded
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
        spark.sql(
            f"CREATE TABLE IF NOT EXISTS {table} ({columns}) USING iceberg{partitioned} TBLPROPERTIES ('format-version'='2')"
        )


def _last_bronze_snapshot(spark, source: str) -> int | None:
    rows = spark.sql(
        f"SELECT bronze_snapshot_id FROM silver.runs WHERE source = '{source}' AND kind = 'incremental' "
        "ORDER BY finished_at DESC LIMIT 1"
    ).collect()
    return rows[0][0] if rows else None


def _bronze_since(spark, source: str, start: int | None, end: int):
    reader = spark.read.format("iceberg")
    reader = (
        reader.option("start-snapshot-id", start).option("end-snapshot-id", end)
        if start
        else reader.option("snapshot-id", end)
    )
    return reader.load(BRONZE_TABLE).where(f"source = '{source}'")


def _bronze_at(spark, source: str, coordinates_table: str):
    """Bronze rows of a source at the Kafka coordinates listed in a silver table."""
    return spark.sql(f"""SELECT b.* FROM {BRONZE_TABLE} b
        LEFT SEMI JOIN (SELECT topic, `partition`, `offset` FROM {coordinates_table} WHERE source = '{source}') c
        ON b.topic = c.topic AND b.`partition` = c.`partition` AND b.`offset` = c.`offset`
        WHERE b.source = '{source}'""")


def build_silver(spark, config: PipelineConfig, source_name: str) -> SilverResult:
    """One incremental run: new bronze rows and the pending ones, decoded and written."""
    source = config.source(source_name)
    started = time.monotonic()
    ensure_bronze(spark)
    ensure_silver(spark)
    previous, current = _last_bronze_snapshot(spark, source.name), main_snapshot(spark)
    pending_count = spark.sql(f"SELECT count(*) FROM silver.pending WHERE source = '{source.name}'").collect()[0][0]
    if (current is None or current == previous) and pending_count == 0:
        log.info("source %s: bronze has nothing new since the last silver run", source.name)
        return _finish(spark, config, source.name, "incremental", None, {}, started, record=False)
    bronze = _bronze_at(spark, source.name, "silver.pending")
    if current is not None and current != previous:
        bronze = _bronze_since(spark, source.name, previous, current).unionByName(bronze)
    counts = decode_and_write(spark, source, bronze)
    counts["quarantined"] = counts.get("quarantine", 0) + _expire_pending(spark, source)
    return _finish(
        spark, config, source.name, "incremental", current if current is not None else previous, counts, started
    )


def rebuild_silver(spark, config: PipelineConfig, source_name: str) -> SilverResult:
    """Forget everything silver holds for a source and decode all of bronze again."""
    source = config.source(source_name)
    ensure_silver(spark)
    for table in SILVER_DDL:
        spark.sql(f"DELETE FROM {table} WHERE source = '{source.name}'")
    log.info("source %s: silver cleared; decoding all of bronze again", source.name)
    return build_silver(spark, config, source.name)


def replay_quarantine(spark, config: PipelineConfig, source_name: str) -> SilverResult:
    """Decode quarantined messages again (after a fix); those that decode now move into silver once."""
    source = config.source(source_name)
    started = time.monotonic()
    ensure_silver(spark)
    bronze = _bronze_at(spark, source.name, "silver.quarantine")
    counts = decode_and_write(spark, source, bronze, replaying=True)
    spark.sql(f"""DELETE FROM silver.quarantine q WHERE q.source = '{source.name}' AND NOT EXISTS (
        SELECT 1 FROM silver_batch_outcome o WHERE o.topic = q.topic AND o.`partition` = q.`partition` AND o.`offset` = q.`offset`)""")
    spark.catalog.dropTempView("silver_batch_outcome")
    counts["quarantined"] = counts.get("quarantine", 0)
    return _finish(spark, config, source.name, "replay", None, counts, started)


def decode_and_write(spark, source: SourceSettings, bronze, replaying: bool = False) -> dict[str, int]:
    """Decode bronze rows with the source's codec inside Spark tasks and merge the results into silver."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    from spark_jobs.silver.decode import DECODED_SCHEMA, decode_batches

    protocol, options = source.protocol, decoder_options(source)
    primers = _primers(spark, source) if protocol in STATEFUL_PROTOCOLS else []
    ordered = bronze.repartition("topic", "partition").sortWithinPartitions("topic", "partition", "offset")
    decoded = (
        ordered.select("topic", "partition", "offset", "key", "value", "headers")
        .mapInArrow(
            lambda batches: decode_batches(batches, protocol, options, primers), from_arrow_schema(DECODED_SCHEMA)
        )
        .withColumn("source", F.lit(source.name))
        .cache()
    )
    counts = {r["kind"]: r["n"] for r in decoded.groupBy("kind").agg(F.count("*").alias("n")).collect()}
    counts["messages"] = decoded.select("topic", "partition", "offset").distinct().count()
    counts["decoded"] = counts["messages"] - counts.get("quarantine", 0) - counts.get("waiting", 0)

    _merge_ddl(spark, source.name, decoded)
    if protocol == "avro":
        counts["ddl"] = counts.get("ddl", 0) + _merge_inferred_ddl(spark, source.name, decoded)
    if counts.get("row"):
        _merge_rows(spark, source.name, decoded)
    if counts.get("watermark"):
        _merge_watermarks(spark, decoded)
    if counts.get("quarantine") or counts.get("waiting") or replaying:
        _merge_problems(spark, source, bronze, decoded)
    if not replaying and (counts.get("waiting") or _has_pending(spark, source.name)):
        _update_pending(spark, source.name, decoded)
    decoded.unpersist()
    return counts


def _has_pending(spark, source: str) -> bool:
    return spark.sql(f"SELECT 1 FROM silver.pending WHERE source = '{source}' LIMIT 1").count() > 0


def _merge_rows(spark, source: str, decoded) -> None:
    """Row changes once each; the first copy (in Kafka order) of a redelivered change is kept."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    rows = _label_enums(spark, source, decoded.where("kind = 'row'"))
    first = Window.partitionBy("database", "table", "row_key", "commit_ts", "op").orderBy(
        "topic", "partition", "offset", "event_index"
    )
    rows = rows.withColumn("_n", F.row_number().over(first)).where("_n = 1").drop("_n")
    rows.select(
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
    ).createOrReplaceTempView("silver_batch_rows")
    spark.sql("""
        MERGE INTO silver.row_changes t USING silver_batch_rows s
        ON t.source = s.source AND t.database = s.database AND t.`table` = s.`table` AND t.row_key <=> s.row_key
           AND t.commit_ts <=> s.commit_ts AND t.op = s.op
        WHEN NOT MATCHED THEN INSERT *""")
    spark.catalog.dropTempView("silver_batch_rows")


def _merge_watermarks(spark, decoded) -> None:
    """The highest resolved ts per partition; a lower one arriving later changes nothing."""
    from pyspark.sql import functions as F

    decoded.where("kind = 'watermark'").groupBy("source", "topic", "partition").agg(
        F.max("commit_ts").alias("resolved_ts")
    ).createOrReplaceTempView("silver_batch_watermarks")
    spark.sql("""
        MERGE INTO silver.watermarks t USING silver_batch_watermarks s
        ON t.source = s.source AND t.topic = s.topic AND t.`partition` = s.`partition`
        WHEN MATCHED AND s.resolved_ts > t.resolved_ts THEN UPDATE SET t.resolved_ts = s.resolved_ts
        WHEN NOT MATCHED THEN INSERT *""")
    spark.catalog.dropTempView("silver_batch_watermarks")


def _merge_problems(spark, source: SourceSettings, bronze, decoded) -> None:
    """Quarantined messages with their reason and bytes; the outcome view is kept for the pending update."""
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
    problems.createOrReplaceTempView("silver_batch_outcome")
    spark.sql("""
        MERGE INTO silver.quarantine t USING (SELECT * FROM silver_batch_outcome WHERE kind = 'quarantine') s
        ON t.source = s.source AND t.topic = s.topic AND t.`partition` = s.`partition` AND t.`offset` = s.`offset`
        WHEN MATCHED THEN UPDATE SET t.reason = s.reason
        WHEN NOT MATCHED THEN INSERT (source, topic, `partition`, `offset`, protocol, reason, key, value, quarantined_at)
             VALUES (s.source, s.topic, s.`partition`, s.`offset`, s.protocol, s.reason, s.key, s.value, current_timestamp())""")


def _update_pending(spark, source: str, decoded) -> None:
    """Pending = the rows still waiting: new ones added, those decoded or quarantined now removed."""
    from pyspark.sql import functions as F

    decoded.groupBy("topic", "partition", "offset").agg(
        F.max(F.when(F.col("kind") == "waiting", F.col("reason"))).alias("reason")
    ).createOrReplaceTempView("silver_batch_seen")
    spark.sql(f"""
        MERGE INTO silver.pending t USING silver_batch_seen s
        ON t.source = '{source}' AND t.topic = s.topic AND t.`partition` = s.`partition` AND t.`offset` = s.`offset`
        WHEN MATCHED AND s.reason IS NULL THEN DELETE
        WHEN MATCHED THEN UPDATE SET t.reason = s.reason
        WHEN NOT MATCHED AND s.reason IS NOT NULL THEN INSERT (source, topic, `partition`, `offset`, reason, first_seen_at)
             VALUES ('{source}', s.topic, s.`partition`, s.`offset`, s.reason, current_timestamp())""")
    spark.catalog.dropTempView("silver_batch_seen")


def _expire_pending(spark, source: SourceSettings) -> int:
    """Rows that waited longer than the source allows go to quarantine with that reason."""
    minutes = source.decoding.max_wait_minutes
    expired = f"source = '{source.name}' AND first_seen_at < current_timestamp() - INTERVAL {minutes} MINUTES"
    count = spark.sql(f"SELECT count(*) FROM silver.pending WHERE {expired}").collect()[0][0]
    if count:
        spark.sql(f"""
            MERGE INTO silver.quarantine t USING (
                SELECT p.source, p.topic, p.`partition`, p.`offset`, p.reason, b.key, b.value FROM silver.pending p
                JOIN {BRONZE_TABLE} b ON b.source = p.source AND b.topic = p.topic AND b.`partition` = p.`partition`
                  AND b.`offset` = p.`offset` WHERE p.{expired}) s
            ON t.source = s.source AND t.topic = s.topic AND t.`partition` = s.`partition` AND t.`offset` = s.`offset`
            WHEN NOT MATCHED THEN INSERT (source, topic, `partition`, `offset`, protocol, reason, key, value, quarantined_at)
                 VALUES (s.source, s.topic, s.`partition`, s.`offset`, '{source.protocol}',
                         concat(s.reason, ' (still unknown after {minutes} minutes)'), s.key, s.value, current_timestamp())""")
        spark.sql(f"DELETE FROM silver.pending WHERE {expired}")
        log.warning(
            "source %s: %d rows waited more than %d minutes for their schema: quarantined", source.name, count, minutes
        )
    return count


def _primers(spark, source: SourceSettings) -> list[tuple[bytes | None, bytes | None]]:
    """The bronze messages of every schema the source has announced, in commit order."""
    rows = spark.sql(f"""SELECT b.key, b.value FROM silver.ddl_events d JOIN {BRONZE_TABLE} b
        ON b.source = d.source AND b.topic = d.topic AND b.`partition` = d.`partition` AND b.`offset` = d.`offset`
        WHERE d.source = '{source.name}' ORDER BY d.commit_ts, d.topic, d.`partition`, d.`offset`""").collect()
    return [
        (bytes(r["key"]) if r["key"] is not None else None, bytes(r["value"]) if r["value"] is not None else None)
        for r in rows
    ]


def _latest_schemas(spark, source: str) -> dict[tuple, dict | None]:
    return {
        (r["database"], r["table"]): json.loads(r["table_schema"]) if r["table_schema"] else None
        for r in spark.sql(
            f"""SELECT database, `table`, table_schema FROM (
              SELECT *, row_number() OVER (PARTITION BY database, `table` ORDER BY commit_ts DESC) AS n
              FROM silver.ddl_events WHERE source = '{source}') WHERE n = 1"""
        ).collect()
    }


def _write_ddl(spark, rows: list[tuple]) -> None:
    spark.createDataFrame(rows, spark.table("silver.ddl_events").schema).createOrReplaceTempView("silver_batch_ddl")
    spark.sql("""
        MERGE INTO silver.ddl_events t USING silver_batch_ddl s
        ON t.source = s.source AND t.commit_ts = s.commit_ts AND t.ddl_sql <=> s.ddl_sql
           AND t.database <=> s.database AND t.`table` <=> s.`table` AND t.ddl_type = s.ddl_type
        WHEN NOT MATCHED THEN INSERT *""")


def _merge_ddl(spark, source: str, decoded) -> None:
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
            (
                source,
                r["database"],
                r["table"],
                commit_ts,
                r["ddl_type"] if r["kind"] == "ddl" else "bootstrap",
                r["ddl_sql"],
                json.dumps(schema) if schema is not None else None,
                origin,
                r["topic"],
                r["partition"],
                r["offset"],
            )
        )
    _write_ddl(spark, out)


def _merge_inferred_ddl(spark, source: str, decoded) -> int:
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
        commit_ts = (v["first_ts"] or 1) - 1
        out.append(
            (
                source,
                v["database"],
                v["table"],
                commit_ts,
                ddl_type,
                sql,
                json.dumps(schema),
                "inferred",
                v["at"]["topic"],
                v["at"]["partition"],
                v["at"]["offset"],
            )
        )
    if out:
        _write_ddl(spark, out)
    return len(out)


def schema_history(spark, source: str):
    """Every ENUM/SET definition of the source's tables over time, from silver.ddl_events."""
    from spark_jobs.silver.enum_labels import enum_columns

    history: dict = {}
    for r in spark.sql(f"""SELECT database, `table`, commit_ts, table_schema FROM silver.ddl_events
                           WHERE source = '{source}' AND `table` IS NOT NULL ORDER BY commit_ts""").collect():
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


def consistent_ts(spark, config: PipelineConfig, source_name: str) -> tuple[int | None, str]:
    """(timestamp, how): the minimum watermark over every landed partition of the source, or, for a
    protocol that sends no watermarks, the highest commit ts landed ("landed")."""
    source = config.source(source_name)
    if not sends_watermarks(source.protocol, source.options):
        row = spark.sql(f"SELECT max(commit_ts) FROM silver.row_changes WHERE source = '{source.name}'").collect()[0]
        return row[0], "landed"
    partitions = set(committed_offsets(spark, source.name))
    marks = {
        (r["topic"], r["partition"]): r["resolved_ts"]
        for r in spark.sql(
            f"SELECT topic, `partition`, resolved_ts FROM silver.watermarks WHERE source = '{source.name}'"
        ).collect()
    }
    if not partitions or any(tp not in marks for tp in partitions):
        return None, "watermark"
    return min(marks[tp] for tp in partitions), "watermark"


def _finish(
    spark,
    config: PipelineConfig,
    source_name: str,
    kind: str,
    bronze_snapshot: int | None,
    counts: dict,
    started: float,
    record: bool = True,
) -> SilverResult:
    """Record the run (last, so that it marks the run as complete) and log what it did in numbers."""
    ts, how = consistent_ts(spark, config, source_name)
    result = SilverResult(
        source_name,
        counts.get("messages", 0),
        counts.get("decoded", 0),
        counts.get("row", 0),
        counts.get("ddl", 0) + counts.get("bootstrap", 0),
        counts.get("watermark", 0),
        counts.get("quarantined", 0),
        counts.get("waiting", 0),
        ts,
        how,
        time.monotonic() - started,
    )
    if record:
        spark.sql(f"""INSERT INTO silver.runs VALUES ('{uuid.uuid4().hex}', '{source_name}', '{kind}',
            {bronze_snapshot if bronze_snapshot is not None else "NULL"}, {result.messages}, {result.decoded},
            {result.row_changes}, {result.ddl_events}, {result.watermarks}, {result.quarantined}, {result.waiting},
            {ts if ts is not None else "NULL"}, '{how}', current_timestamp())""")
    rate = result.messages / result.seconds if result.seconds else 0.0
    log.info(
        "source %s (%s): read %d messages, decoded %d into %d row changes, %d DDL, %d watermarks; "
        "%d quarantined, %d waiting; consistent ts %s (%s); %.0f messages/s",
        source_name,
        kind,
        result.messages,
        result.decoded,
        result.row_changes,
        result.ddl_events,
        result.watermarks,
        result.quarantined,
        result.waiting,
        ts,
        how,
        rate,
    )
    return result
