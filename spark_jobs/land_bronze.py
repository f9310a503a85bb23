"""Land a source's Kafka topics into `bronze.kafka_messages`, exactly once.

The offsets a run covers are written in the same Iceberg commit as its rows (snapshot summary
properties), so a run is wholly there or not at all, and the next run starts where the last
committed one ended. Reading happens on the executors; the driver only plans.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from dataclasses import dataclass

from spark_jobs.config import PipelineConfig, SourceSettings, kafka_client_settings
from spark_jobs.landing_plan import LandingPlan, OffsetRange, TopicPartition, plan_landing

log = logging.getLogger(__name__)

BRONZE_TABLE = "bronze.kafka_messages"
SUMMARY_SOURCE = "ticdc.source"
SUMMARY_BATCH = "ticdc.batch-id"
SUMMARY_OFFSETS = "ticdc.next-offsets"    # JSON {"topic": {"partition": next offset}}: cumulative
SUMMARY_RANGES = "ticdc.ranges"           # JSON [[topic, partition, start, end], ...]: this batch

BRONZE_DDL = f"""
CREATE TABLE IF NOT EXISTS {BRONZE_TABLE} (
  source STRING NOT NULL,
  topic STRING NOT NULL,
  `partition` INT NOT NULL,
  `offset` BIGINT NOT NULL,
  `timestamp` TIMESTAMP,
  key BINARY,
  value BINARY,
  headers ARRAY<STRUCT<key: STRING, value: BINARY>>,
  batch_id STRING NOT NULL,
  landed_at TIMESTAMP NOT NULL
) USING iceberg
PARTITIONED BY (source)
TBLPROPERTIES ('format-version' = '2', 'write.parquet.compression-codec' = 'zstd')
"""


@dataclass(frozen=True)
class LandingResult:
    source: str
    batch_id: str | None
    records: int
    bytes: int
    per_partition: dict[TopicPartition, int]
    lag: dict[TopicPartition, int]
    seconds: float


def committed_offsets(spark, source: str) -> dict[TopicPartition, int]:
    """Next offset per partition from the newest bronze snapshot of this source."""
    rows = spark.sql(
        f"SELECT summary['{SUMMARY_OFFSETS}'] AS offsets FROM {BRONZE_TABLE}.snapshots "
        f"WHERE summary['{SUMMARY_SOURCE}'] = '{source}' ORDER BY committed_at DESC, snapshot_id DESC LIMIT 1"
    ).collect()
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


def broker_watermarks(source: SourceSettings) -> tuple[dict[TopicPartition, tuple[int, int]], dict[TopicPartition, int]]:
    """(low, high) watermarks of every partition of the source's topics, and where new ones start."""
    from confluent_kafka import Consumer, TopicPartition as KafkaTP
    consumer = Consumer({**kafka_client_settings(source), "group.id": "ticdc-lake-planner", "enable.auto.commit": False})
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


def ensure_bronze(spark) -> None:
    spark.sql(BRONZE_DDL)


def land_bronze(spark, config: PipelineConfig, source_name: str) -> LandingResult:
    """One landing run for a source: plan, read on the executors, commit rows and offsets together."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    source = config.source(source_name)
    started = time.monotonic()
    ensure_bronze(spark)
    committed = committed_offsets(spark, source.name)
    watermarks, starts = broker_watermarks(source)
    plan = plan_landing(committed, watermarks, starts, source.landing.max_records_per_run)
    if plan.gaps:
        described = "; ".join(g.describe() for g in plan.gaps)
        if not source.landing.accept_gaps:
            raise RuntimeError(f"source {source.name}: {described}. Set landing.accept_gaps to land past it.")
        log.warning("source %s: accepting gaps: %s", source.name, described)
    lag = {tp: high - plan.next_offsets.get(tp, high) for tp, (_, high) in watermarks.items()}
    if not plan.ranges:
        log.info("source %s: nothing new to land (%d partitions, lag 0)", source.name, len(watermarks))
        return LandingResult(source.name, None, 0, 0, {}, lag, time.monotonic() - started)

    batch_id = uuid.uuid4().hex
    settings = kafka_client_settings(source)
    ranges = plan.ranges
    range_schema = StructType([StructField("topic", StringType()), StructField("partition", IntegerType()),
                               StructField("start", LongType()), StructField("end", LongType())])
    range_df = spark.createDataFrame([(r.topic, r.partition, r.start, r.end) for r in ranges], range_schema)
    range_df = range_df.repartition(len(ranges))

    def read_ranges(batches):
        from spark_jobs.kafka_reader import read_range
        for batch in batches:
            for row in batch.to_pylist():
                yield from read_range(settings, row["topic"], row["partition"], row["start"], row["end"])

    from spark_jobs.kafka_reader import RECORD_SCHEMA
    from pyspark.sql.pandas.types import from_arrow_schema
    records = range_df.mapInArrow(read_ranges, from_arrow_schema(RECORD_SCHEMA))
    rows = records.select(
        F.lit(source.name).alias("source"), "topic", "partition", "offset", "timestamp", "key", "value", "headers",
        F.lit(batch_id).alias("batch_id"), F.current_timestamp().alias("landed_at"), "value_size",
    ).cache()
    counts = rows.groupBy("topic", "partition").agg(F.count("*").alias("n"), F.sum("value_size").alias("bytes")).collect()
    per_partition = {(r["topic"], r["partition"]): r["n"] for r in counts}
    _check_complete(ranges, per_partition)
    (rows.drop("value_size").writeTo(BRONZE_TABLE)
        .option(f"snapshot-property.{SUMMARY_SOURCE}", source.name)
        .option(f"snapshot-property.{SUMMARY_BATCH}", batch_id)
        .option(f"snapshot-property.{SUMMARY_OFFSETS}", _encode_offsets(plan.next_offsets))
        .option(f"snapshot-property.{SUMMARY_RANGES}", json.dumps([[r.topic, r.partition, r.start, r.end] for r in ranges]))
        .append())
    rows.unpersist()
    total_bytes = sum(r["bytes"] or 0 for r in counts)
    result = LandingResult(source.name, batch_id, plan.records, total_bytes, per_partition, lag, time.monotonic() - started)
    _log_result(result)
    return result


def _check_complete(ranges: list[OffsetRange], per_partition: dict[TopicPartition, int]) -> None:
    """A range with fewer records than offsets is fine only for transaction markers; more is a bug."""
    for r in ranges:
        got = per_partition.get((r.topic, r.partition), 0)
        if got > r.count:
            raise RuntimeError(f"{r.topic}[{r.partition}]: read {got} records for {r.count} offsets {r.start}..{r.end - 1}")


def _log_result(result: LandingResult) -> None:
    rate = result.records / result.seconds if result.seconds else 0.0
    log.info("source %s: landed %d records (%d bytes) in batch %s, %.0f records/s, %.1fs",
             result.source, result.records, result.bytes, result.batch_id, rate, result.seconds)
    for (topic, p), n in sorted(result.per_partition.items()):
        log.info("  %s[%d]: %d records, lag %d", topic, p, n, result.lag.get((topic, p), 0))
