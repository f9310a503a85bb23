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
before the property existed, or none once bronze says every such offset was adopted into properties.

A run costs the same whatever bronze holds: one Spark job reads the ranges and writes the rows, its tasks
telling the driver what they read through an accumulator (no cache, no second pass, no shuffle), and everything
else is Iceberg metadata through the Java API, of the current metadata only (no metadata table is scanned, no
snapshot history walked).
"""

from __future__ import annotations

import functools
import json
import logging
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import astuple, dataclass, field
from typing import Any, cast

from spark_jobs.bronze.kafka_reader import RangeRead
from spark_jobs.bronze.plan import (
    Gap,
    LandingPlan,
    OffsetRange,
    TopicPartition,
    plan_landing,
    start_offsets,
    task_groups,
)
from spark_jobs.config import PipelineConfig, SourceSettings, kafka_client_settings
from spark_jobs.errors import (
    ConcurrentLandingError,
    LandingGapError,
    LandingInvariantError,
    named_transient_faults,
)
from spark_jobs.runtime.iceberg import iceberg_table, main_head, main_snapshot, snapshot_util
from spark_jobs.runtime.jvm import java_items
from spark_jobs.runtime.results import Phases, Result
from spark_jobs.runtime.sql import quote_ident, temp_view
from spark_jobs.runtime.tables import (
    BRONZE_COMMITS,
    BRONZE_LANDING_GAPS,
    BRONZE_LANDING_RUNS,
    BRONZE_MESSAGES,
    ensure_tables_once,
)

log = logging.getLogger(__name__)

SUMMARY_SOURCE = "ticdc.source"
SUMMARY_BATCH = "ticdc.batch-id"
SUMMARY_OFFSETS = "ticdc.next-offsets"  # JSON {"topic": {"partition": next offset}}: cumulative
SUMMARY_RANGES = "ticdc.ranges"  # JSON [[topic, partition, start, end], ...]: this batch
OFFSETS_PROPERTY_PREFIX = "ticdc.offsets."  # + source: the table property holding its committed next offsets
# table property: no source's offsets live only in a snapshot summary, so none needs reading
SUMMARY_OFFSETS_ADOPTED = "ticdc.summary-offsets-adopted"
PICKED_FROM = "source-snapshot-id"  # Iceberg's summary key for a snapshot whose files another one committed first
LANDING_BRANCH_PREFIX = "land_"
FAST_FORWARD_ATTEMPTS = 5
LOGGED_PARTITIONS = 10  # a run's log names at most this many partitions (and gaps); the tables keep them all


@dataclass(frozen=True)
class LandingResult(Result):
    source: str
    batch_id: str | None
    records: int
    bytes: int
    per_partition: dict[TopicPartition, int]
    lag: dict[TopicPartition, int]
    gaps: list[Gap]
    seconds: float
    phases: dict[str, float] = field(default_factory=dict)  # seconds per phase (`Phases`)

    def xcom(self) -> dict[str, Any]:
        """The totals; per partition, `bronze.landing_runs` and the status page keep the detail."""
        return {
            "records": self.records,
            "bytes": self.bytes,
            "batch_id": self.batch_id,
            "partitions": len(self.per_partition),
            "gaps": len(self.gaps),
            "seconds": round(self.seconds, 3),
        }


class RangeReads:
    """Accumulator parameter: each range's RangeRead, keyed by its partition, from the task that read it."""

    def zero(self, value):
        return {}

    def addInPlace(self, value1, value2):
        value1.update(value2)
        return value1


NOTHING_READ = RangeRead(0, 0, None, False)


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


def offsets_property(source: str) -> str:
    return OFFSETS_PROPERTY_PREFIX + source


def committed_offsets(spark, source: str) -> dict[TopicPartition, int]:
    """Next offset per partition: the source's offsets table property, committed with its last landing."""
    return _committed_offsets(spark, iceberg_table(spark, BRONZE_MESSAGES), source)


def _committed_offsets(spark, table, source: str) -> dict[TopicPartition, int]:
    doc = table.properties().get(offsets_property(source))
    if doc is None:
        doc = _summary_offsets(spark, table).get(source)
    return _decode_offsets(doc) if doc else {}


def summary_offsets(spark) -> dict[str, str]:
    """Per source, the offsets summary of its newest landing snapshot on main's history: where offsets
    were kept before the table property, and what `adopt_summary_offsets` carries over."""
    return _summary_offsets(spark, iceberg_table(spark, BRONZE_MESSAGES))


def _summary_offsets(spark, table) -> dict[str, str]:
    """Main's ancestors newest first, through the table's metadata, until bronze says they were adopted: a table
    this code gave its first snapshot never had any, and an adopted one needs no walk through its history."""
    if table.properties().get(SUMMARY_OFFSETS_ADOPTED) is not None:
        return {}
    found: dict[str, str | None] = {}
    for ancestor in java_items(snapshot_util(spark).currentAncestors(table)):
        summary = ancestor.summary()
        source = summary.get(SUMMARY_SOURCE)
        if source is not None and source not in found:
            found[source] = summary.get(SUMMARY_OFFSETS)
    return {source: doc for source, doc in found.items() if doc is not None}


def _decode_offsets(doc: str) -> dict[TopicPartition, int]:
    return {(topic, int(p)): int(o) for topic, parts in json.loads(doc).items() for p, o in parts.items()}


def _encode_offsets(offsets: dict[TopicPartition, int]) -> str:
    doc: dict[str, dict[str, int]] = {}
    for (topic, p), o in sorted(offsets.items()):
        doc.setdefault(topic, {})[str(p)] = o
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


def source_topics(source: SourceSettings, available: list[str]) -> list[str]:
    if source.topics or source.topic_pattern is None:  # the configuration has exactly one of them
        return list(source.topics)
    pattern = re.compile(source.topic_pattern)
    return sorted(t for t in available if pattern.fullmatch(t) and not t.startswith("__"))


def broker_watermarks(
    source: SourceSettings,
) -> tuple[dict[TopicPartition, tuple[int, int]], dict[TopicPartition, int]]:
    """(low, high) watermarks of every partition of the source's topics, and where new ones start."""
    from spark_jobs.bronze.kafka_reader import metadata_admin

    settings = kafka_client_settings(source)
    with metadata_admin(settings, source.name) as admin:
        return partition_watermarks(admin, source, settings)


def partition_watermarks(
    admin, source: SourceSettings, settings: dict
) -> tuple[dict[TopicPartition, tuple[int, int]], dict[TopicPartition, int]]:
    """`broker_watermarks` through an admin client: one metadata request, then the earliest and the latest
    offsets (and, for a source starting at a time, the offsets at that time) of all partitions at once, so
    that a partition with nothing new costs no round trip of its own."""
    from confluent_kafka.admin import OffsetSpec

    from spark_jobs.bronze.kafka_reader import list_offsets

    timeout = source.kafka.timeout_seconds
    metadata = admin.list_topics(timeout=timeout)
    partitions: list[TopicPartition] = []
    for topic in source_topics(source, list(metadata.topics)):
        if topic not in metadata.topics or metadata.topics[topic].error is not None:
            log.warning("source %s: topic %s does not exist (yet)", source.name, topic)
            continue
        partitions += [(topic, p) for p in sorted(metadata.topics[topic].partitions)]
    start = source.landing.start
    specs = {"low": OffsetSpec.earliest(), "high": OffsetSpec.latest()}
    if start.isdigit():
        specs["at_start"] = OffsetSpec.for_timestamp(int(start))
    found = list_offsets(admin, partitions, specs, settings, timeout)
    watermarks = {tp: (found["low"][tp], found["high"][tp]) for tp in partitions}
    return watermarks, start_offsets(watermarks, start, found.get("at_start", {}))


def plan_run(
    spark, source: SourceSettings, committed: dict[TopicPartition, int] | None = None
) -> tuple[LandingPlan, dict[TopicPartition, tuple[int, int]]]:
    """The run's plan (from `committed`, else the source's committed offsets); gaps stop it here (before any
    table changes) unless the source accepts them."""
    if committed is None:
        committed = committed_offsets(spark, source.name)
    watermarks, starts = broker_watermarks(source)
    plan = plan_landing(committed, watermarks, starts, source.landing.max_records_per_run)
    if plan.gaps:
        described = "; ".join(g.describe() for g in plan.gaps)
        if not source.landing.accept_gaps:
            raise LandingGapError(
                f"source {source.name}: {described}. Set landing.accept_gaps: true to land past it (it is then recorded in {BRONZE_LANDING_GAPS})."
            )
        shown = "; ".join(g.describe() for g in plan.gaps[:LOGGED_PARTITIONS])
        more = len(plan.gaps) - LOGGED_PARTITIONS
        log.warning(
            "source %s: accepting gaps: %s%s",
            source.name,
            shown,
            f" ... and {more} more (each in {BRONZE_LANDING_GAPS})" if more > 0 else "",
        )
    return plan, watermarks


def read_records(spark, source: SourceSettings, ranges: list[OffsetRange], batch_id: str, reads=None):
    """The records of the planned ranges as a DataFrame, read by Spark tasks (`task_groups`: a large range has
    a task of its own, small ones share; a group's index is its task's one row: no shuffle). `reads`, an
    accumulator of `RangeReads`, gets what each range gave when the rows are written, so that the write is the
    only pass over them."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    from spark_jobs.bronze.kafka_reader import MESSAGE_SCHEMA

    settings = kafka_client_settings(source)
    budget = max(1, source.landing.max_bytes_per_run // max(1, len(ranges)))
    groups = task_groups(list(ranges), spark.sparkContext.defaultParallelism)

    def read_ranges(batches):
        from spark_jobs.bronze.kafka_reader import read_range

        for batch in batches:
            for index in batch.column("id").to_pylist():
                for r in groups[index]:
                    read = yield from read_range(settings, r.topic, r.partition, r.start, r.end, budget)
                    if reads is not None:
                        reads.add({(r.topic, r.partition): read})

    tasks = max(1, len(groups))
    records = spark.range(0, len(groups), 1, tasks).mapInArrow(read_ranges, from_arrow_schema(MESSAGE_SCHEMA))
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
    )


def ensure_landing_base(spark) -> int:
    """Main's snapshot, after committing an empty one into a table that has none: every landing run then
    forks a branch (nothing to fork from otherwise), so every commit goes through the same compare-and-set."""
    return _landing_base(iceberg_table(spark, BRONZE_MESSAGES))


def _landing_base(table) -> int:
    """The same, of a loaded table. The first snapshot's commit also says that no offsets live only in a
    snapshot summary (a table without snapshots has none), so that no lookup ever walks its history."""
    snapshot = main_head(table)
    if snapshot is None:
        with BRONZE_COMMITS:
            transaction = table.newTransaction()
            transaction.newFastAppend().commit()
            transaction.updateProperties().set(SUMMARY_OFFSETS_ADOPTED, "true").commit()
            transaction.commitTransaction()
        snapshot = main_head(table)
    return cast(int, snapshot)  # the commit above gave main its first snapshot


def commit_batch(
    spark,
    rows,
    base_snapshot: int,
    properties: dict[str, str],
    source: str,
    settle: Callable[[], dict[str, str]] | None = None,
    phases: Phases | None = None,
) -> None:
    """Append `rows` with `properties` in one snapshot and record the source's offsets, only if main is
    still at `base_snapshot`. Writing the rows reads them: `settle`, called once they are written, gives the
    summary they turned out to have (a range the byte budget cut short ends before its planned end)."""
    writer_options = {f"snapshot-property.{k}": v for k, v in properties.items()}
    branch = LANDING_BRANCH_PREFIX + properties[SUMMARY_BATCH]
    with BRONZE_COMMITS:
        _commit_through_branch(
            spark, rows, base_snapshot, properties, source, branch, writer_options, settle, phases or Phases()
        )


def _commit_through_branch(
    spark, rows, base_snapshot, properties, source, branch, writer_options, settle, phases
) -> None:
    """The rows on a branch forked from `base_snapshot`, then main fast-forwarded to it (refused if main moved)."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import IllegalArgumentException

    published = False
    try:
        with phases.timed("commit"):
            iceberg_table(spark, BRONZE_MESSAGES).manageSnapshots().createBranch(branch, base_snapshot).commit()
        with phases.timed("read_write"), named_transient_faults(source):
            rows.writeTo(f"{BRONZE_MESSAGES}.{quote_ident('branch_' + branch)}").options(**writer_options).append()
        with phases.timed("commit"):
            landed = settle() if settle is not None else properties
            offsets = {offsets_property(source): landed[SUMMARY_OFFSETS]}
            restated = landed if landed != properties else None
            publish_branch(spark, branch, base_snapshot, offsets, source, wrote=True, summary=restated)
            published = True
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
        if not published:
            with phases.timed("commit"):
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
    spark,
    branch: str,
    base_snapshot: int,
    properties: dict[str, str],
    source: str,
    *,
    wrote: bool,
    summary: dict[str, str] | None = None,
) -> None:
    """In one metadata commit, move main to the branch's head, drop the branch and set `properties`.

    ConcurrentLandingError if main moved on since `base_snapshot` (the fast-forward is then impossible), or
    if the branch is not what this run made of it: its head must be the run's one snapshot on top of
    `base_snapshot` (`wrote`), or `base_snapshot` itself. A branch dropped by maintenance and re-created by
    the run's own write would fork from a newer main, whose offsets this run did not plan from.

    `summary`: the run's snapshot is first made again with these summary properties and the same files (its
    summary was written before its rows were read, and they ended elsewhere than planned).
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
        if summary is not None:
            _restate(transaction, table, head, branch, base_snapshot, summary)
        transaction.manageSnapshots().fastForwardBranch("main", branch).removeBranch(branch).commit()
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


def _restate(transaction, table, head, branch: str, base_snapshot: int, summary: dict[str, str]) -> None:
    """Within `transaction`, replace the branch's one snapshot by one with the same data files and `summary`. It
    names the snapshot it replaces as Iceberg's cherry-pick does, so that expiring that one never deletes the
    files this one commits."""
    files = java_items(head.addedDataFiles(table.io()))
    transaction.manageSnapshots().replaceBranch(branch, base_snapshot).commit()
    append = transaction.newFastAppend().toBranch(branch)
    for data_file in files:
        append.appendFile(data_file)
    for key, value in {**summary, PICKED_FROM: str(head.snapshotId())}.items():
        append.set(key, value)
    append.commit()


def adopt_summary_offsets(spark) -> list[str]:
    """Copy the offsets of sources landed before the offsets property existed from their newest snapshot
    summary into the property, so that expiring that snapshot loses nothing, and say so in a property (no
    lookup reads a summary after that). Guarded like a landing commit (a branch at main, published only if
    main did not move); returns the sources adopted."""
    table = iceberg_table(spark, BRONZE_MESSAGES)
    current = table.properties()
    if current.get(SUMMARY_OFFSETS_ADOPTED) is not None:
        return []
    missing = {
        offsets_property(source): doc
        for source, doc in _summary_offsets(spark, table).items()
        if current.get(offsets_property(source)) is None
    }
    base = main_head(table)
    if base is None:
        return []
    branch = f"{LANDING_BRANCH_PREFIX}adopt_{uuid.uuid4().hex}"
    table.manageSnapshots().createBranch(branch, base).commit()
    published = False
    try:
        publish_branch(
            spark, branch, base, {**missing, SUMMARY_OFFSETS_ADOPTED: "true"}, "(adopting offsets)", wrote=False
        )
        published = True
    except ConcurrentLandingError:
        log.info("bronze moved while adopting snapshot offsets; the next maintenance adopts them")
        return []
    finally:
        if not published:
            drop_branch(spark, branch)
    return sorted(key.removeprefix(OFFSETS_PROPERTY_PREFIX) for key in missing)


def land_bronze(spark, config: PipelineConfig, source_name: str) -> LandingResult:
    """One landing run: plan, read on the executors, commit rows and offsets together.

    If another source's run commits between our plan and our commit, we fork again from the new
    main and retry; if another run of this source committed, we stop with ConcurrentLandingError.
    """
    source = config.source(source_name)
    started = time.monotonic()
    phases = Phases()
    with phases.timed("setup"):
        ensure_tables_once(spark, "bronze")
    for attempt in range(1, FAST_FORWARD_ATTEMPTS + 1):
        with phases.timed("plan"):
            table = iceberg_table(spark, BRONZE_MESSAGES)
            base = _landing_base(table)
            committed_before = _committed_offsets(spark, table, source.name)
            plan, watermarks = plan_run(spark, source, committed_before)
        if plan.gaps:
            with phases.timed("bookkeeping"):
                _record_gaps(spark, source.name, plan.gaps)
        if not plan.ranges:
            lag = {tp: high - plan.next_offsets.get(tp, high) for tp, (_, high) in watermarks.items()}
            log.info(
                "source %s: nothing new to land (%d partitions), %.1fs (%s)",
                source.name,
                len(watermarks),
                time.monotonic() - started,
                phases.line(),
            )
            return LandingResult(
                source=source.name,
                batch_id=None,
                records=0,
                bytes=0,
                per_partition={},
                lag=lag,
                gaps=plan.gaps,
                seconds=time.monotonic() - started,
                phases=phases,
            )
        batch_id = uuid.uuid4().hex
        reads = spark.sparkContext.accumulator({}, RangeReads())
        rows = read_records(spark, source, plan.ranges, batch_id, reads)
        planned = _summary(source.name, batch_id, plan, plan.next_offsets)
        try:
            settle = functools.partial(_landed_summary, source.name, batch_id, plan, reads)
            commit_batch(spark, rows, base, planned, source.name, settle, phases)
        except ConcurrentLandingError:
            if committed_offsets(spark, source.name) != committed_before or attempt == FAST_FORWARD_ATTEMPTS:
                raise
            log.info(
                "source %s: another source committed to bronze meanwhile; retrying (attempt %d)",
                source.name,
                attempt + 1,
            )
            continue
        read = reads.value
        next_offsets = _next_offsets(plan, read)
        lag = {tp: high - next_offsets.get(tp, high) for tp, (_, high) in watermarks.items()}
        per_partition = {tp: r.records for tp, r in read.items()}
        result = LandingResult(
            source=source.name,
            batch_id=batch_id,
            records=sum(per_partition.values()),
            bytes=sum(r.bytes for r in read.values()),
            per_partition=per_partition,
            lag=lag,
            gaps=plan.gaps,
            seconds=time.monotonic() - started,
            phases=phases,
        )
        with phases.timed("bookkeeping"):
            _record_run(spark, result, plan, next_offsets, read)
        for line in run_lines(result, plan, time.monotonic() - started):
            log.info("%s", line)
        return result
    raise AssertionError("unreachable")


def _summary(source: str, batch_id: str, plan: LandingPlan, next_offsets: dict[TopicPartition, int]) -> dict[str, str]:
    """The snapshot summary properties of a run that ends at `next_offsets`."""
    return {
        SUMMARY_SOURCE: source,
        SUMMARY_BATCH: batch_id,
        SUMMARY_OFFSETS: _encode_offsets(next_offsets),
        SUMMARY_RANGES: json.dumps(
            [[r.topic, r.partition, r.start, next_offsets[(r.topic, r.partition)]] for r in plan.ranges]
        ),
    }


def _landed_summary(source: str, batch_id: str, plan: LandingPlan, reads) -> dict[str, str]:
    """The summary of a run once its tasks read the ranges (`reads`: the accumulator they added to)."""
    return _summary(source, batch_id, plan, _next_offsets(plan, reads.value))


def _next_offsets(plan: LandingPlan, reads: dict[TopicPartition, RangeRead]) -> dict[TopicPartition, int]:
    """Where each partition stands after this batch: the planned end, or after the last record read
    when the byte budget cut the range short. A range with more records than offsets is a bug."""
    next_offsets = dict(plan.next_offsets)
    for r in plan.ranges:
        read = reads.get((r.topic, r.partition), NOTHING_READ)
        if read.records > r.count:
            raise LandingInvariantError(
                f"{r.topic}[{r.partition}]: read {read.records} records for {r.count} offsets {r.start}..{r.end - 1}"
            )
        if read.cut_short:
            next_offsets[(r.topic, r.partition)] = cast(int, read.last_offset) + 1  # cut short after a record
    return next_offsets


def _record_gaps(spark, source: str, gaps: list[Gap]) -> None:
    rows = [(source, g.topic, g.partition, g.kind, g.start, g.end) for g in gaps]
    found = spark.createDataFrame(
        rows, "source string, topic string, partition int, kind string, first_offset bigint, end_offset bigint"
    )
    with BRONZE_COMMITS, temp_view(found, "landing_gaps_new") as new:
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
    reads: dict[TopicPartition, RangeRead],
) -> None:
    """Per partition that gained records, its counts, bytes and lag in bronze.landing_runs (the log has totals)."""
    from pyspark.sql import functions as F

    rows = [
        LandingRunRow(
            source=result.source,
            batch_id=cast(str, result.batch_id),  # a run that landed records has its batch
            topic=r.topic,
            partition=r.partition,
            start_offset=r.start,
            next_offset=next_offsets[(r.topic, r.partition)],
            records=result.per_partition.get((r.topic, r.partition), 0),
            bytes=reads.get((r.topic, r.partition), NOTHING_READ).bytes,
            lag=result.lag.get((r.topic, r.partition), 0),
            seconds=result.seconds,
        )
        for r in plan.ranges
    ]
    recorded = spark.createDataFrame([astuple(row) for row in rows], LANDING_RUN_SCHEMA)
    with BRONZE_COMMITS:
        recorded.withColumn("landed_at", F.current_timestamp()).writeTo(BRONZE_LANDING_RUNS).append()


def run_lines(result: LandingResult, plan: LandingPlan, seconds: float) -> list[str]:
    """A run's log: one line of totals and one naming the partitions with the most records (at most
    `LOGGED_PARTITIONS`), whatever the partition count; bronze.landing_runs has every partition's row."""
    gained = sum(1 for n in result.per_partition.values() if n)
    lag, lagging = max(((n, tp) for tp, n in result.lag.items()), default=(0, None))
    rate = result.records / seconds if seconds else 0.0
    totals = (
        f"source {result.source}: landed {result.records} records ({result.bytes} bytes) in batch {result.batch_id}"
        f" from {gained} of {len(result.lag)} partitions, largest lag {lag}"
        + (f" ({lagging[0]}[{lagging[1]}])" if lag and lagging else "")
        + f", {rate:.0f} records/s, {seconds:.1f}s ({Phases(result.phases).line()})"
    )
    ranked = sorted(
        plan.ranges, key=lambda r: (-result.per_partition.get((r.topic, r.partition), 0), r.topic, r.partition)
    )
    shown = [
        f"{r.topic}[{r.partition}] {result.per_partition.get((r.topic, r.partition), 0)} from offset {r.start}"
        for r in ranked[:LOGGED_PARTITIONS]
    ]
    more = len(ranked) - len(shown)
    detail = f"source {result.source}: most records: {', '.join(shown)}" + (
        f" ... and {more} more partitions (each in {BRONZE_LANDING_RUNS})" if more else ""
    )
    return [totals, detail]
