"""Land a source's Kafka topics into `bronze.kafka_messages`, exactly once.

The offsets a run covers are written in the same Iceberg commit as its rows (snapshot summary
properties), so a run is wholly there or not at all, and the next run starts where the last
committed one ended. The rows are written to a branch forked from the snapshot the run planned
from, and main is fast-forwarded to it: that succeeds only if nothing else committed meanwhile,
so two runs of one source can never both land the same range (the later one fails cleanly).
Reading happens on the executors; the driver only plans.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from dataclasses import dataclass

from spark_jobs.bronze.plan import Gap, LandingPlan, OffsetRange, TopicPartition, plan_landing
from spark_jobs.config import PipelineConfig, SourceSettings, kafka_client_settings

log = logging.getLogger(__name__)

BRONZE_TABLE = "bronze.kafka_messages"
RUNS_TABLE = "bronze.landing_runs"
GAPS_TABLE = "bronze.landing_gaps"
SUMMARY_SOURCE = "ticdc.source"
SUMMARY_BATCH = "ticdc.batch-id"
SUMMARY_OFFSETS = "ticdc.next-offsets"  # JSON {"topic": {"partition": next offset}}: cumulative
SUMMARY_RANGES = "ticdc.ranges"  # JSON [[topic, partition, start, end], ...]: this batch
FAST_FORWARD_ATTEMPTS = 5

BRONZE_DDL = {
    BRONZE_TABLE: """
        source STRING NOT NULL, topic STRING NOT NULL, `partition` INT NOT NULL, `offset` BIGINT NOT NULL,
        `timestamp` TIMESTAMP, key BINARY, value BINARY, headers ARRAY<STRUCT<key: STRING, value: BINARY>>,
        batch_id STRING NOT NULL, landed_at TIMESTAMP NOT NULL""",
    RUNS_TABLE: """
        source STRING NOT NULL, batch_id STRING NOT NULL, topic STRING NOT NULL, `partition` INT NOT NULL,
        start_offset BIGINT NOT NULL, next_offset BIGINT NOT NULL, records BIGINT NOT NULL, bytes BIGINT NOT NULL,
        lag BIGINT NOT NULL, seconds DOUBLE NOT NULL, landed_at TIMESTAMP NOT NULL""",
    GAPS_TABLE: """
        source STRING NOT NULL, topic STRING NOT NULL, `partition` INT NOT NULL, kind STRING NOT NULL,
        first_offset BIGINT NOT NULL, end_offset BIGINT NOT NULL, detected_at TIMESTAMP NOT NULL""",
}


class ConcurrentLandingError(RuntimeError):
    """Another landing run of the same source committed first; this run published nothing."""


@dataclass(frozen=True)
class LandingResult:
    source: str
    batch_id: str | None
    records: int
    bytes: int
    per_partition: dict[TopicPartition, int]
    lag: dict[TopicPartition, int]
    gaps: list[Gap]
    seconds: float


def ensure_bronze(spark) -> None:
    for table, columns in BRONZE_DDL.items():
        spark.sql(
            f"CREATE TABLE IF NOT EXISTS {table} ({columns}) USING iceberg PARTITIONED BY (source) "
            "TBLPROPERTIES ('format-version' = '2', 'write.parquet.compression-codec' = 'zstd', "
            # one file per writing task: a batch is one source, and one file would be read by one task
            "'write.distribution-mode' = 'none')"
        )


def main_snapshot(spark, table: str = BRONZE_TABLE) -> int | None:
    rows = spark.sql(f"SELECT snapshot_id FROM {table}.refs WHERE name = 'main'").collect()
    return rows[0][0] if rows else None


def committed_offsets(spark, source: str) -> dict[TopicPartition, int]:
    """Next offset per partition from the newest snapshot of this source on main's history."""
    rows = spark.sql(f"""
        SELECT s.summary['{SUMMARY_OFFSETS}'] AS offsets
        FROM {BRONZE_TABLE}.snapshots s JOIN {BRONZE_TABLE}.history h ON s.snapshot_id = h.snapshot_id
        WHERE h.is_current_ancestor AND s.summary['{SUMMARY_SOURCE}'] = '{source}'
        ORDER BY h.made_current_at DESC, s.committed_at DESC LIMIT 1""").collect()
    if not rows:
        return {}
    doc = json.loads(rows[0]["offsets"])
    return {(topic, int(p)): int(o) for topic, parts in doc.items() for p, o in parts.items()}


def _encode_offsets(offsets: dict[TopicPartition, int]) -> str:
    doc: dict[str, dict[str, int]] = {}
    for (topic, p), o in sorted(offsets.items()):
        doc.setdefault(topic, {})[str(p)] = o
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


def source_topics(source: SourceSettings, available: list[str]) -> list[str]:
    if source.topics:
        return list(source.topics)
    pattern = re.compile(source.topic_pattern)
    return sorted(t for t in available if pattern.fullmatch(t) and not t.startswith("__"))


def broker_watermarks(
    source: SourceSettings,
) -> tuple[dict[TopicPartition, tuple[int, int]], dict[TopicPartition, int]]:
    """(low, high) watermarks of every partition of the source's topics, and where new ones start."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as KafkaTP

    consumer = Consumer(
        {**kafka_client_settings(source), "group.id": "ticdc-lake-planner", "enable.auto.commit": False}
    )
    try:
        metadata = consumer.list_topics(timeout=30)
        watermarks: dict[TopicPartition, tuple[int, int]] = {}
        for topic in source_topics(source, list(metadata.topics)):
            if topic not in metadata.topics or metadata.topics[topic].error is not None:
                log.warning("source %s: topic %s does not exist (yet)", source.name, topic)
                continue
            for p in sorted(metadata.topics[topic].partitions):
                watermarks[(topic, p)] = consumer.get_watermark_offsets(KafkaTP(topic, p), timeout=30)
        starts: dict[TopicPartition, int] = {}
        start = source.landing.start
        for tp, (low, high) in watermarks.items():
            if start == "latest":
                starts[tp] = high
            elif start.isdigit():
                found = consumer.offsets_for_times([KafkaTP(tp[0], tp[1], int(start))], timeout=30)[0].offset
                starts[tp] = high if found < 0 else found
            else:
                starts[tp] = low
        return watermarks, starts
    finally:
        consumer.close()


def plan_run(spark, source: SourceSettings) -> tuple[LandingPlan, dict[TopicPartition, tuple[int, int]]]:
    """The run's plan; gaps stop it here (before any table changes) unless the source accepts them."""
    committed = committed_offsets(spark, source.name)
    watermarks, starts = broker_watermarks(source)
    plan = plan_landing(committed, watermarks, starts, source.landing.max_records_per_run)
    if plan.gaps:
        described = "; ".join(g.describe() for g in plan.gaps)
        if not source.landing.accept_gaps:
            raise RuntimeError(
                f"source {source.name}: {described}. Set landing.accept_gaps: true to land past it (it is then recorded in {GAPS_TABLE})."
            )
        log.warning("source %s: accepting gaps: %s", source.name, described)
    return plan, watermarks


def read_records(spark, source: SourceSettings, ranges: list[OffsetRange], batch_id: str):
    """The records of the planned ranges as a DataFrame, read by Spark tasks (one per range)."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    from spark_jobs.bronze.kafka_reader import RECORD_SCHEMA

    settings = kafka_client_settings(source)
    budget = max(1, source.landing.max_bytes_per_run // max(1, len(ranges)))
    range_schema = StructType(
        [
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField("start", LongType()),
            StructField("end", LongType()),
        ]
    )
    range_df = spark.createDataFrame([(r.topic, r.partition, r.start, r.end) for r in ranges], range_schema)

    def read_ranges(batches):
        from spark_jobs.bronze.kafka_reader import read_range

        for batch in batches:
            for row in batch.to_pylist():
                yield from read_range(settings, row["topic"], row["partition"], row["start"], row["end"], budget)

    records = range_df.repartition(len(ranges)).mapInArrow(read_ranges, from_arrow_schema(RECORD_SCHEMA))
    return records.select(
        F.lit(source.name).alias("source"),
        "topic",
        "partition",
        "offset",
        "timestamp",
        "key",
        "value",
        "headers",
        F.lit(batch_id).alias("batch_id"),
        F.current_timestamp().alias("landed_at"),
        "record_bytes",
        "stopped_early",
    )


def commit_batch(spark, rows, base_snapshot: int | None, properties: dict[str, str], source: str) -> None:
    """Append `rows` with `properties` in one snapshot, only if main is still at `base_snapshot`."""
    writer_options = {f"snapshot-property.{k}": v for k, v in properties.items()}
    if base_snapshot is None:
        rows.writeTo(BRONZE_TABLE).options(**writer_options).append()
        return
    branch = f"land_{properties[SUMMARY_BATCH]}"
    spark.sql(f"ALTER TABLE {BRONZE_TABLE} CREATE BRANCH {branch} AS OF VERSION {base_snapshot}")
    try:
        rows.writeTo(f"{BRONZE_TABLE}.branch_{branch}").options(**writer_options).append()
        spark.sql(f"CALL spark_catalog.system.fast_forward('{BRONZE_TABLE}', 'main', '{branch}')").collect()
    except Exception as exc:
        if "Cannot fast-forward" in str(exc):
            raise ConcurrentLandingError(
                f"bronze moved since snapshot {base_snapshot}; source {source}'s batch not published"
            ) from None
        raise
    finally:
        spark.sql(f"ALTER TABLE {BRONZE_TABLE} DROP BRANCH IF EXISTS {branch}")


def land_bronze(spark, config: PipelineConfig, source_name: str) -> LandingResult:
    """One landing run: plan, read on the executors, commit rows and offsets together.

    If another source's run commits between our plan and our commit, we fork again from the new
    main and retry; if another run of this source committed, we stop with ConcurrentLandingError.
    """
    source = config.source(source_name)
    started = time.monotonic()
    ensure_bronze(spark)
    for attempt in range(1, FAST_FORWARD_ATTEMPTS + 1):
        base = main_snapshot(spark)
        committed_before = committed_offsets(spark, source.name)
        plan, watermarks = plan_run(spark, source)
        if plan.gaps:
            _record_gaps(spark, source.name, plan.gaps)
        if not plan.ranges:
            lag = {tp: high - plan.next_offsets.get(tp, high) for tp, (_, high) in watermarks.items()}
            log.info("source %s: nothing new to land (%d partitions)", source.name, len(watermarks))
            return LandingResult(source.name, None, 0, 0, {}, lag, plan.gaps, time.monotonic() - started)
        batch_id = uuid.uuid4().hex
        rows = read_records(spark, source, plan.ranges, batch_id).cache()
        try:
            stats = _range_stats(rows)
            next_offsets = _next_offsets(plan, stats)
            properties = {
                SUMMARY_SOURCE: source.name,
                SUMMARY_BATCH: batch_id,
                SUMMARY_OFFSETS: _encode_offsets(next_offsets),
                SUMMARY_RANGES: json.dumps(
                    [[r.topic, r.partition, r.start, next_offsets[(r.topic, r.partition)]] for r in plan.ranges]
                ),
            }
            try:
                commit_batch(spark, rows.drop("record_bytes", "stopped_early"), base, properties, source.name)
            except ConcurrentLandingError:
                if committed_offsets(spark, source.name) != committed_before or attempt == FAST_FORWARD_ATTEMPTS:
                    raise
                log.info(
                    "source %s: another source committed to bronze meanwhile; retrying (attempt %d)",
                    source.name,
                    attempt + 1,
                )
                continue
        finally:
            rows.unpersist()
        lag = {tp: high - next_offsets.get(tp, high) for tp, (_, high) in watermarks.items()}
        per_partition = {tp: n for tp, (n, _, _, _) in stats.items()}
        result = LandingResult(
            source.name,
            batch_id,
            sum(per_partition.values()),
            sum(b for _, b, _, _ in stats.values()),
            per_partition,
            lag,
            plan.gaps,
            time.monotonic() - started,
        )
        _record_run(spark, result, plan, next_offsets, stats)
        return result
    raise AssertionError("unreachable")


def _range_stats(rows) -> dict[TopicPartition, tuple[int, int, int, bool]]:
    """(records, bytes, last offset, cut short by the byte budget) per partition."""
    from pyspark.sql import functions as F

    stats = (
        rows.groupBy("topic", "partition")
        .agg(
            F.count("*").alias("n"),
            F.sum("record_bytes").alias("bytes"),
            F.max("offset").alias("last"),
            F.max(F.col("stopped_early").cast("int")).alias("cut"),
        )
        .collect()
    )
    return {(r["topic"], r["partition"]): (r["n"], r["bytes"] or 0, r["last"], bool(r["cut"])) for r in stats}


def _next_offsets(plan: LandingPlan, stats: dict) -> dict[TopicPartition, int]:
    """Where each partition stands after this batch: the planned end, or after the last record read
    when the byte budget cut the range short. A range with more records than offsets is a bug."""
    next_offsets = dict(plan.next_offsets)
    for r in plan.ranges:
        n, _, last, cut = stats.get((r.topic, r.partition), (0, 0, None, False))
        if n > r.count:
            raise RuntimeError(
                f"{r.topic}[{r.partition}]: read {n} records for {r.count} offsets {r.start}..{r.end - 1}"
            )
        if cut:
            next_offsets[(r.topic, r.partition)] = last + 1
    return next_offsets


def _record_gaps(spark, source: str, gaps: list[Gap]) -> None:
    rows = [(source, g.topic, g.partition, g.kind, g.start, g.end) for g in gaps]
    spark.createDataFrame(
        rows, "source string, topic string, partition int, kind string, first_offset bigint, end_offset bigint"
    ).createOrReplaceTempView("landing_gaps_new")
    spark.sql(f"""MERGE INTO {GAPS_TABLE} t USING landing_gaps_new s
        ON t.source = s.source AND t.topic = s.topic AND t.`partition` = s.`partition` AND t.kind = s.kind
           AND t.first_offset = s.first_offset
        WHEN NOT MATCHED THEN INSERT (source, topic, `partition`, kind, first_offset, end_offset, detected_at)
             VALUES (s.source, s.topic, s.`partition`, s.kind, s.first_offset, s.end_offset, current_timestamp())""")
    spark.catalog.dropTempView("landing_gaps_new")


def _record_run(
    spark, result: LandingResult, plan: LandingPlan, next_offsets: dict[TopicPartition, int], stats: dict
) -> None:
    """Per partition counts, bytes and lag of the run, in the logs and in bronze.landing_runs."""
    rate = result.records / result.seconds if result.seconds else 0.0
    log.info(
        "source %s: landed %d records (%d bytes) in batch %s, %.0f records/s, %.1fs",
        result.source,
        result.records,
        result.bytes,
        result.batch_id,
        rate,
        result.seconds,
    )
    rows = []
    for r in plan.ranges:
        tp = (r.topic, r.partition)
        n = result.per_partition.get(tp, 0)
        log.info("  %s[%d]: %d records from offset %d, lag %d", r.topic, r.partition, n, r.start, result.lag.get(tp, 0))
        rows.append(
            (
                result.source,
                result.batch_id,
                r.topic,
                r.partition,
                r.start,
                next_offsets[tp],
                n,
                stats.get(tp, (0, 0))[1],
                result.lag.get(tp, 0),
                result.seconds,
            )
        )
    spark.createDataFrame(
        rows,
        "source string, batch_id string, topic string, partition int, start_offset bigint, "
        "next_offset bigint, records bigint, bytes bigint, lag bigint, seconds double",
    ).createOrReplaceTempView("landing_runs_new")
    spark.sql(f"""INSERT INTO {RUNS_TABLE} SELECT source, batch_id, topic, `partition`, start_offset, next_offset,
        records, bytes, lag, seconds, current_timestamp() FROM landing_runs_new""")
    spark.catalog.dropTempView("landing_runs_new")
