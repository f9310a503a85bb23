"""Land a source's Kafka topics into `bronze.kafka_messages`, exactly once.

The rows are written to a branch forked from the snapshot the run planned from; one Iceberg metadata
commit then fast-forwards main to it AND sets the table property `ticdc.offsets.<source>` to where the
run ended. So a run is wholly there or not at all, the next run starts where the last committed one
ended, and the fast-forward succeeds only if nothing else committed meanwhile: two runs of one source
can never both land the same range (the later one fails cleanly). Reading happens on the executors;
the driver only plans.

Why a table property and not the snapshot summary alone: a property lives in every metadata version, so
expiring snapshots (even down to one), compaction commits (which carry no summary of ours) and orphan
file removal cannot lose it, whoever runs them. Each commit still carries the run's summary properties
(source, batch, offsets, ranges) for the record; `committed_offsets` reads them only for a source landed
before the property existed.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from dataclasses import astuple, dataclass

from spark_jobs.bronze.plan import Gap, LandingPlan, OffsetRange, TopicPartition, plan_landing
from spark_jobs.config import PipelineConfig, SourceSettings, kafka_client_settings
from spark_jobs.errors import (
    ConcurrentLandingError,
    LandingGapError,
    LandingInvariantError,
    named_transient_faults,
)
from spark_jobs.runtime.sql import quote_ident, temp_view
from spark_jobs.runtime.tables import (
    BRONZE_COMMITS,
    BRONZE_LANDING_GAPS,
    BRONZE_LANDING_RUNS,
    BRONZE_MESSAGES,
    ensure_tables,
)

log = logging.getLogger(__name__)

SUMMARY_SOURCE = "ticdc.source"
SUMMARY_BATCH = "ticdc.batch-id"
SUMMARY_OFFSETS = "ticdc.next-offsets"  # JSON {"topic": {"partition": next offset}}: cumulative
SUMMARY_RANGES = "ticdc.ranges"  # JSON [[topic, partition, start, end], ...]: this batch
OFFSETS_PROPERTY_PREFIX = "ticdc.offsets."  # + source: the table property holding its committed next offsets
LANDING_BRANCH_PREFIX = "land_"
FAST_FORWARD_ATTEMPTS = 5


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


@dataclass(frozen=True)
class PartitionStats:
    """What a run read of one partition's range."""

    records: int
    bytes: int  # keys and values
    last_offset: int | None
    cut_short: bool  # by the byte budget: the partition continues after last_offset


NOTHING_READ = PartitionStats(0, 0, None, False)


@dataclass(frozen=True)
class LandingRunRow:
    """One partition's row in bronze.landing_runs (landed_at is added when it is written)."""

    source: str
    batch_id: str
    topic: str
    partition: int
    start_offset: int
    next_offset: int
    records: int
    bytes: int
    lag: int
    seconds: float


LANDING_RUN_SCHEMA = (
    "source string, batch_id string, topic string, partition int, start_offset bigint, "
    "next_offset bigint, records bigint, bytes bigint, lag bigint, seconds double"
)


def main_snapshot(spark, table: str = BRONZE_MESSAGES) -> int | None:
    rows = spark.sql(f"SELECT snapshot_id FROM {table}.refs WHERE name = 'main'").collect()
    return rows[0][0] if rows else None


def offsets_property(source: str) -> str:
    return OFFSETS_PROPERTY_PREFIX + source


def committed_offsets(spark, source: str) -> dict[TopicPartition, int]:
    """Next offset per partition: the source's offsets table property, committed with its last landing."""
    doc = iceberg_table(spark, BRONZE_MESSAGES).properties().get(offsets_property(source))
    if doc is None:
        doc = summary_offsets(spark).get(source)
    return _decode_offsets(doc) if doc else {}


def summary_offsets(spark) -> dict[str, str]:
    """Per source, the offsets summary of its newest landing snapshot on main's history: where offsets
    were kept before the table property, and what `adopt_summary_offsets` carries over."""
    rows = spark.sql(
        f"""SELECT source, offsets FROM (
            SELECT s.summary[:source_key] AS source, s.summary[:offsets_key] AS offsets,
                   row_number() OVER (PARTITION BY s.summary[:source_key]
                                      ORDER BY h.made_current_at DESC, s.committed_at DESC) AS newest
            FROM {BRONZE_MESSAGES}.snapshots s JOIN {BRONZE_MESSAGES}.history h ON s.snapshot_id = h.snapshot_id
            WHERE h.is_current_ancestor AND s.summary[:source_key] IS NOT NULL) WHERE newest = 1""",
        args={"offsets_key": SUMMARY_OFFSETS, "source_key": SUMMARY_SOURCE},
    ).collect()
    return {r["source"]: r["offsets"] for r in rows}


def _decode_offsets(doc: str) -> dict[TopicPartition, int]:
    return {(topic, int(p)): int(o) for topic, parts in json.loads(doc).items() for p, o in parts.items()}


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
    from confluent_kafka import TopicPartition as KafkaTP

    from spark_jobs.bronze.kafka_reader import BROKER_TIMEOUT_SECONDS, metadata_consumer

    with metadata_consumer(kafka_client_settings(source), source.name) as consumer:
        metadata = consumer.list_topics(timeout=BROKER_TIMEOUT_SECONDS)
        watermarks: dict[TopicPartition, tuple[int, int]] = {}
        for topic in source_topics(source, list(metadata.topics)):
            if topic not in metadata.topics or metadata.topics[topic].error is not None:
                log.warning("source %s: topic %s does not exist (yet)", source.name, topic)
                continue
            for p in sorted(metadata.topics[topic].partitions):
                watermarks[(topic, p)] = consumer.get_watermark_offsets(
                    KafkaTP(topic, p), timeout=BROKER_TIMEOUT_SECONDS
                )
        starts: dict[TopicPartition, int] = {}
        start = source.landing.start
        for tp, (low, high) in watermarks.items():
            if start == "latest":
                starts[tp] = high
            elif start.isdigit():
                wanted = [KafkaTP(tp[0], tp[1], int(start))]
                found = consumer.offsets_for_times(wanted, timeout=BROKER_TIMEOUT_SECONDS)[0].offset
                starts[tp] = high if found < 0 else found
            else:
                starts[tp] = low
        return watermarks, starts


def plan_run(spark, source: SourceSettings) -> tuple[LandingPlan, dict[TopicPartition, tuple[int, int]]]:
    """The run's plan; gaps stop it here (before any table changes) unless the source accepts them."""
    committed = committed_offsets(spark, source.name)
    watermarks, starts = broker_watermarks(source)
    plan = plan_landing(committed, watermarks, starts, source.landing.max_records_per_run)
    if plan.gaps:
        described = "; ".join(g.describe() for g in plan.gaps)
        if not source.landing.accept_gaps:
            raise LandingGapError(
                f"source {source.name}: {described}. Set landing.accept_gaps: true to land past it (it is then recorded in {BRONZE_LANDING_GAPS})."
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


def iceberg_table(spark, table: str):
    """One of our tables through Iceberg's Java API, refreshed. Its snapshot and property operations are
    Iceberg SQL extensions that take no parameters (CREATE BRANCH, CALL ...); the API takes names and ids
    as values."""
    loaded = spark.sparkContext._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table)
    loaded.refresh()
    return loaded


def ensure_landing_base(spark) -> int:
    """Main's snapshot, after committing an empty one into a table that has none: every landing run then
    forks a branch (nothing to fork from otherwise), so every commit goes through the same compare-and-set."""
    snapshot = main_snapshot(spark)
    if snapshot is None:
        iceberg_table(spark, BRONZE_MESSAGES).newFastAppend().commit()
        snapshot = main_snapshot(spark)
    return snapshot


def commit_batch(spark, rows, base_snapshot: int, properties: dict[str, str], source: str) -> None:
    """Append `rows` with `properties` in one snapshot and record the source's offsets, only if main is
    still at `base_snapshot`."""
    writer_options = {f"snapshot-property.{k}": v for k, v in properties.items()}
    branch = LANDING_BRANCH_PREFIX + properties[SUMMARY_BATCH]
    with BRONZE_COMMITS:
        _commit_through_branch(spark, rows, base_snapshot, properties, source, branch, writer_options)


def _commit_through_branch(spark, rows, base_snapshot, properties, source, branch, writer_options) -> None:
    """The rows on a branch forked from `base_snapshot`, then main fast-forwarded to it (refused if main moved)."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import IllegalArgumentException

    try:
        iceberg_table(spark, BRONZE_MESSAGES).manageSnapshots().createBranch(branch, base_snapshot).commit()
        rows.writeTo(f"{BRONZE_MESSAGES}.{quote_ident('branch_' + branch)}").options(**writer_options).append()
        offsets = {offsets_property(source): properties[SUMMARY_OFFSETS]}
        publish_branch(spark, branch, base_snapshot, offsets, source, wrote=True)
    except (Py4JJavaError, IllegalArgumentException) as exc:
        # Maintenance may compact and expire the base snapshot between the plan and the commit; Iceberg then
        # refuses the branch or its fast-forward. Main having moved is what says so: the run plans again.
        if main_snapshot(spark) == base_snapshot:
            raise
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
        raise ConcurrentLandingError(
            f"bronze moved since snapshot {base_snapshot} ({reason}); source {source}'s batch not published"
        ) from None
    finally:
        drop_branch(spark, branch)


def drop_branch(spark, branch: str) -> bool:
    """Remove a branch of bronze if it is still there (maintenance may have dropped one that could no
    longer be published); True if this call removed it."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import IllegalArgumentException

    table = iceberg_table(spark, BRONZE_MESSAGES)
    if table.refs().get(branch) is None:
        return False
    try:
        table.manageSnapshots().removeBranch(branch).commit()
    except (Py4JJavaError, IllegalArgumentException):
        if iceberg_table(spark, BRONZE_MESSAGES).refs().get(branch) is not None:
            raise
        return False  # maintenance removed it in the meantime
    return True


def publish_branch(
    spark, branch: str, base_snapshot: int, properties: dict[str, str], source: str, *, wrote: bool
) -> None:
    """In one metadata commit, move main to the branch's head and set `properties`.

    ConcurrentLandingError if main moved on since `base_snapshot` (the fast-forward is then impossible), or
    if the branch is not what this run made of it: its head must be the run's one snapshot on top of
    `base_snapshot` (`wrote`), or `base_snapshot` itself. A branch dropped by maintenance and re-created by
    the run's own write would fork from a newer main, whose offsets this run did not plan from.
    """
    from pyspark.errors import IllegalArgumentException

    table = iceberg_table(spark, BRONZE_MESSAGES)
    ref = table.refs().get(branch)
    head = table.snapshot(ref.snapshotId()) if ref is not None else None
    forked_from = (head.parentId() if wrote else head.snapshotId()) if head is not None else None
    if forked_from != base_snapshot:
        raise ConcurrentLandingError(
            f"branch {branch} no longer forks from snapshot {base_snapshot}; source {source}'s batch not published"
        )
    try:
        transaction = table.newTransaction()
        transaction.manageSnapshots().fastForwardBranch("main", branch).commit()
        updates = transaction.updateProperties()
        for key, value in properties.items():
            updates.set(key, value)
        updates.commit()
        transaction.commitTransaction()
    except IllegalArgumentException:
        # Iceberg refuses with a plain IllegalArgumentException ("Cannot fast-forward: main is not an
        # ancestor of ..."): main no longer being where we forked is what tells a concurrent commit.
        if main_snapshot(spark) == base_snapshot:
            raise
        raise ConcurrentLandingError(
            f"bronze moved since snapshot {base_snapshot}; source {source}'s batch not published"
        ) from None


def adopt_summary_offsets(spark) -> list[str]:
    """Copy the offsets of sources landed before the offsets property existed from their newest snapshot
    summary into the property, so that expiring that snapshot loses nothing. Guarded like a landing
    commit (a branch at main, published only if main did not move); returns the sources adopted."""
    current = iceberg_table(spark, BRONZE_MESSAGES).properties()
    missing = {
        offsets_property(source): doc
        for source, doc in summary_offsets(spark).items()
        if current.get(offsets_property(source)) is None
    }
    if not missing:
        return []
    base = main_snapshot(spark)
    branch = f"{LANDING_BRANCH_PREFIX}adopt_{uuid.uuid4().hex}"
    iceberg_table(spark, BRONZE_MESSAGES).manageSnapshots().createBranch(branch, base).commit()
    try:
        publish_branch(spark, branch, base, missing, "(adopting offsets)", wrote=False)
    except ConcurrentLandingError:
        log.info("bronze moved while adopting snapshot offsets; the next maintenance adopts them")
        return []
    finally:
        drop_branch(spark, branch)
    return sorted(key.removeprefix(OFFSETS_PROPERTY_PREFIX) for key in missing)


def land_bronze(spark, config: PipelineConfig, source_name: str) -> LandingResult:
    """One landing run: plan, read on the executors, commit rows and offsets together.

    If another source's run commits between our plan and our commit, we fork again from the new
    main and retry; if another run of this source committed, we stop with ConcurrentLandingError.
    """
    source = config.source(source_name)
    started = time.monotonic()
    ensure_tables(spark, "bronze")
    for attempt in range(1, FAST_FORWARD_ATTEMPTS + 1):
        base = ensure_landing_base(spark)
        committed_before = committed_offsets(spark, source.name)
        plan, watermarks = plan_run(spark, source)
        if plan.gaps:
            _record_gaps(spark, source.name, plan.gaps)
        if not plan.ranges:
            lag = {tp: high - plan.next_offsets.get(tp, high) for tp, (_, high) in watermarks.items()}
            log.info("source %s: nothing new to land (%d partitions)", source.name, len(watermarks))
            return LandingResult(
                source=source.name,
                batch_id=None,
                records=0,
                bytes=0,
                per_partition={},
                lag=lag,
                gaps=plan.gaps,
                seconds=time.monotonic() - started,
            )
        batch_id = uuid.uuid4().hex
        rows = read_records(spark, source, plan.ranges, batch_id).cache()
        try:
            with named_transient_faults(source.name):  # a broker that stopped answering while tasks read
                stats = _partition_stats(rows)
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
        per_partition = {tp: s.records for tp, s in stats.items()}
        result = LandingResult(
            source=source.name,
            batch_id=batch_id,
            records=sum(per_partition.values()),
            bytes=sum(s.bytes for s in stats.values()),
            per_partition=per_partition,
            lag=lag,
            gaps=plan.gaps,
            seconds=time.monotonic() - started,
        )
        _record_run(spark, result, plan, next_offsets, stats)
        return result
    raise AssertionError("unreachable")


def _partition_stats(rows) -> dict[TopicPartition, PartitionStats]:
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
    return {
        (r["topic"], r["partition"]): PartitionStats(r["n"], r["bytes"] or 0, r["last"], bool(r["cut"])) for r in stats
    }


def _next_offsets(plan: LandingPlan, stats: dict[TopicPartition, PartitionStats]) -> dict[TopicPartition, int]:
    """Where each partition stands after this batch: the planned end, or after the last record read
    when the byte budget cut the range short. A range with more records than offsets is a bug."""
    next_offsets = dict(plan.next_offsets)
    for r in plan.ranges:
        read = stats.get((r.topic, r.partition), NOTHING_READ)
        if read.records > r.count:
            raise LandingInvariantError(
                f"{r.topic}[{r.partition}]: read {read.records} records for {r.count} offsets {r.start}..{r.end - 1}"
            )
        if read.cut_short:
            next_offsets[(r.topic, r.partition)] = read.last_offset + 1
    return next_offsets


def _record_gaps(spark, source: str, gaps: list[Gap]) -> None:
    rows = [(source, g.topic, g.partition, g.kind, g.start, g.end) for g in gaps]
    found = spark.createDataFrame(
        rows, "source string, topic string, partition int, kind string, first_offset bigint, end_offset bigint"
    )
    with temp_view(found, "landing_gaps_new") as new:
        spark.sql(f"""MERGE INTO {BRONZE_LANDING_GAPS} t USING {new} s
            ON t.source = s.source AND t.topic = s.topic AND t.`partition` = s.`partition` AND t.kind = s.kind
               AND t.first_offset = s.first_offset
            WHEN NOT MATCHED THEN INSERT (source, topic, `partition`, kind, first_offset, end_offset, detected_at)
                 VALUES (s.source, s.topic, s.`partition`, s.kind, s.first_offset, s.end_offset, current_timestamp())""")


def _record_run(
    spark,
    result: LandingResult,
    plan: LandingPlan,
    next_offsets: dict[TopicPartition, int],
    stats: dict[TopicPartition, PartitionStats],
) -> None:
    """Per partition counts, bytes and lag of the run, in the logs and in bronze.landing_runs."""
    from pyspark.sql import functions as F

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
            LandingRunRow(
                source=result.source,
                batch_id=result.batch_id,
                topic=r.topic,
                partition=r.partition,
                start_offset=r.start,
                next_offset=next_offsets[tp],
                records=n,
                bytes=stats.get(tp, NOTHING_READ).bytes,
                lag=result.lag.get(tp, 0),
                seconds=result.seconds,
            )
        )
    spark.createDataFrame([astuple(row) for row in rows], LANDING_RUN_SCHEMA).withColumn(
        "landed_at", F.current_timestamp()
    ).writeTo(BRONZE_LANDING_RUNS).append()
