"""Decode what bronze gained since the last silver run into the silver tables.

Every write is an idempotent MERGE (spark_jobs.silver.merges), and the run is recorded last in
`silver.runs` with the bronze snapshot it covered: a run killed half-way is simply done again by
the next run, which changes nothing that was already written.

Rows whose schema has not arrived yet (Simple protocol, consumer started mid-stream) wait in
`silver.pending` and are decoded again by every run until their schema arrives, or go to
quarantine after `decoding.max_wait_minutes`. Quarantined messages can be decoded again after a
fix (`replay_quarantine`).
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass

from spark_jobs.bronze.land import committed_offsets
from spark_jobs.codecs import needs_partition_order, sends_watermarks
from spark_jobs.config import PipelineConfig, SourceSettings, TableRules, decoder_options, glob_regexes
from spark_jobs.errors import named_transient_faults
from spark_jobs.runtime.iceberg import main_snapshot
from spark_jobs.runtime.results import Result
from spark_jobs.runtime.spark_session import expressions_for
from spark_jobs.runtime.tables import (
    BRONZE_MESSAGES,
    SILVER_DDL_EVENTS,
    SILVER_ERASURES,
    SILVER_PENDING,
    SILVER_QUARANTINE,
    SILVER_ROW_CHANGES,
    SILVER_RUNS,
    SILVER_SNAPSHOT_LOADS,
    SILVER_WATERMARKS,
    TABLES,
    ensure_tables_once,
)
from spark_jobs.silver import merges
from spark_jobs.silver.decode import Primer
from spark_jobs.silver.erased import ERASED, mark_erased, record_erased_messages

# What a Dumpling snapshot load wrote into a silver table (spark_jobs.backfill.snapshot): kept by a rebuild.
_FROM_SNAPSHOTS = {
    SILVER_ROW_CHANGES: "coalesce(array_contains(flags, 'snapshot'), false)",
    SILVER_DDL_EVENTS: "ddl_type = 'snapshot'",
    SILVER_RUNS: "kind = 'snapshot'",
}

log = logging.getLogger(__name__)

STATEFUL_PROTOCOLS = ("simple-json", "simple-avro")
# Bronze bytes (compressed, about 15:1) decoded per task: some 100k messages, a few seconds of one core; the
# default 128 MB would give a whole run to one task
DECODE_SPLIT_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class SilverResult(Result):
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
    left_out: int = 0  # row changes of tables the source's table rules leave out


def _runs_so_far(spark, source: str) -> tuple[int | None, int | None]:
    """(the bronze snapshot the last incremental run read up to, the highest silver_seq of any run): one read of
    the run log for both."""
    row = spark.sql(
        f"""SELECT max_by(bronze_snapshot_id, finished_at) FILTER (WHERE kind = 'incremental'), max(silver_seq)
            FROM {SILVER_RUNS} WHERE source = :source""",
        args={"source": source},
    ).collect()[0]
    return row[0], row[1]


def _bronze_since(spark, source: str, start: int | None, end: int):
    from pyspark.sql import functions as F

    reader = spark.read.format("iceberg").option("split-size", DECODE_SPLIT_BYTES)
    reader = (
        reader.option("start-snapshot-id", start).option("end-snapshot-id", end)
        if start
        else reader.option("snapshot-id", end)
    )
    return reader.load(BRONZE_MESSAGES).where(F.col("source") == source)


def _bronze_at(spark, source: str, coordinates_table: str):
    """Bronze rows of a source at the Kafka coordinates listed in a silver table."""
    from pyspark.sql import functions as F

    coordinates = ["topic", "partition", "offset"]
    listed = spark.table(coordinates_table).where(F.col("source") == source).select(*coordinates)
    return spark.table(BRONZE_MESSAGES).where(F.col("source") == source).join(listed, coordinates, "left_semi")


def next_silver_seq(spark, source: str, last: int | None = None) -> int:
    """The sequence number of a new run: epoch microseconds, and above every run recorded (`last`, the highest,
    read from the run log when not given), so it grows with every run even if the clock steps back. A killed
    run's rows keep the number it had; the run that redoes it gets a higher one, so gold (which reads rows with a
    higher number than it last saw) misses none."""
    from pyspark.sql import functions as F

    if last is None:
        last = spark.table(SILVER_RUNS).where(F.col("source") == source).agg(F.max("silver_seq")).collect()[0][0]
    return max(time.time_ns() // 1000, (last or 0) + 1)


def _has_pending(spark, source: str) -> bool:
    from pyspark.sql import functions as F

    return not spark.table(SILVER_PENDING).where(F.col("source") == source).isEmpty()


def build_silver(spark, config: PipelineConfig, source_name: str) -> SilverResult:
    """One incremental run: new bronze rows and the pending ones, decoded and written."""
    source = config.source(source_name)
    started = time.monotonic()
    ensure_tables_once(spark, "bronze")
    ensure_tables_once(spark, "silver")
    (previous, last_seq), current = _runs_so_far(spark, source.name), main_snapshot(spark)
    pending = _has_pending(spark, source.name)
    if (current is None or current == previous) and not pending:
        log.info("source %s: bronze has nothing new since the last silver run", source.name)
        return record_run(spark, config, source.name, "incremental", None, {}, started, record=False)
    bronze = _bronze_at(spark, source.name, SILVER_PENDING) if pending else None
    if current is not None and current != previous:
        new = _bronze_since(spark, source.name, previous, current)
        bronze = new if bronze is None else new.unionByName(bronze)
    seq = next_silver_seq(spark, source.name, last_seq)
    _left_behind(spark, source)
    assert bronze is not None  # messages pending or new: the run returned above otherwise
    with expressions_for(spark, config, bronze.count()):
        counts = decode_and_write(spark, source, bronze, seq, pending=pending)
    # rows wait only if some waited before or this run left some waiting
    waited = pending or bool(counts.get("waiting"))
    counts["quarantined"] = counts.get("quarantine", 0) + (merges.expire_pending(spark, source) if waited else 0)
    return record_run(
        spark,
        config,
        source.name,
        "incremental",
        current if current is not None else previous,
        counts,
        started,
        silver_seq=seq,
    )


def rebuild_silver(spark, config: PipelineConfig, source_name: str) -> SilverResult:
    """Forget everything silver holds for a source (its run log too) and decode all of bronze again. What
    Dumpling snapshot loads put there is kept: it does not come from bronze; so is the record of erasures, which
    keeps erased keys out of the new decode."""
    source = config.source(source_name)
    ensure_tables_once(spark, "silver")
    # The run log goes first: a rebuild killed after that is finished by the next run of either kind, which
    # finds no run recorded and decodes all of bronze again (the merges keep what is still there once).
    left_out, rule_args = left_out_sql(source.tables)
    for table in sorted(TABLES["silver"], key=lambda t: t.name != SILVER_RUNS):
        if table.name not in (SILVER_SNAPSHOT_LOADS, SILVER_ERASURES):
            from_snapshots = _FROM_SNAPSHOTS.get(table.name, "false")
            if table.name in (SILVER_ROW_CHANGES, SILVER_DDL_EVENTS):  # a snapshot's rows of a left-out table go
                from_snapshots = f"{from_snapshots} AND NOT {left_out}"
            spark.sql(
                f"DELETE FROM {table.name} WHERE source = :source AND NOT ({from_snapshots})",
                args={"source": source.name, **rule_args},
            )
    log.info("source %s: silver cleared; decoding all of bronze again", source.name)
    return build_silver(spark, config, source.name)


def replay_quarantine(spark, config: PipelineConfig, source_name: str) -> SilverResult:
    """Decode quarantined messages again (after a fix); those that decode now move into silver once."""
    source = config.source(source_name)
    started = time.monotonic()
    ensure_tables_once(spark, "silver")
    bronze = _bronze_at(spark, source.name, SILVER_QUARANTINE)
    seq = next_silver_seq(spark, source.name)
    counts = decode_and_write(spark, source, bronze, seq, replaying=True)
    counts["quarantined"] = counts.get("quarantine", 0)
    return record_run(spark, config, source.name, "replay", None, counts, started, silver_seq=seq)


def _last_commit_per_partition(spark, source: str) -> dict[tuple[str, int], int]:
    """The commit ts of the newest change (by offset) silver holds per (topic, partition): an Avro delete, which
    carries no commit ts, that comes first on its partition in a run is placed just after it (not at the Kafka
    record's time, which is later than every TiDB change and would put it after changes that follow it)."""
    rows = spark.sql(
        f"""SELECT topic, `partition`, max_by(commit_ts, `offset`) AS commit_ts FROM {SILVER_ROW_CHANGES}
            WHERE source = :source GROUP BY topic, `partition`""",
        args={"source": source},
    ).collect()
    return {(r["topic"], r["partition"]): r["commit_ts"] for r in rows if r["commit_ts"] is not None}


def decode_and_write(
    spark, source: SourceSettings, bronze, silver_seq: int, replaying: bool = False, pending: bool = False
) -> dict[str, int]:
    """Decode bronze rows with the source's codec inside Spark tasks and merge the results into silver
    (new row changes marked with the run's `silver_seq`). `pending`: whether rows of the source waited for
    their schema before the run (build_silver has read it)."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    from spark_jobs.silver.decode import DECODED_SCHEMA, decode_batches

    protocol, options = source.protocol, decoder_options(source)
    primers = _primers(spark, source) if protocol in STATEFUL_PROTOCOLS else []
    partition_ts = _last_commit_per_partition(spark, source.name) if protocol == "avro" else {}
    messages = bronze.select("topic", "partition", "offset", "timestamp", "key", "value", "headers")
    if needs_partition_order(protocol):
        messages = messages.repartition("topic", "partition").sortWithinPartitions("topic", "partition", "offset")
    decoded = messages.mapInArrow(
        lambda batches: decode_batches(batches, protocol, options, primers, partition_ts),
        from_arrow_schema(DECODED_SCHEMA),
    ).withColumn("source", F.lit(source.name))
    decoded = apply_table_rules(spark, decoded, source.tables).cache()
    with named_transient_faults(source.name):  # decoding runs here, before anything is written
        # one pass: counts per kind, and each table's row shapes (merge_ddl_events infers schemas from them)
        tally = (
            decoded.groupBy(
                "kind", "database", "table", F.when(F.col("kind") == "row", merges.row_shape()).alias("shape")
            )
            .agg(
                F.count("*").alias("events"),
                F.count_if(F.col("event_index") == 0).alias("messages"),  # every message has one event 0
                F.count_if(merges.read_by_schema_flagged()).alias("read_by_schema"),
                *merges.row_shapes(),
            )
            .collect()
        )
    counts: dict[str, int] = {}
    for r in tally:
        counts[r["kind"]] = counts.get(r["kind"], 0) + r["events"]
    counts["messages"] = sum(r["messages"] for r in tally)
    counts["decoded"] = counts["messages"] - counts.get("quarantine", 0) - counts.get("waiting", 0)
    rows = [r for r in tally if r["kind"] == "row"]
    lowest = min((r["commit_ts"] for r in rows if r["commit_ts"] is not None), default=None)

    counts["ddl"] = counts.get("ddl", 0) + merges.merge_ddl_events(
        spark, source.name, protocol, decoded, rows, source.tables
    )
    # keys are compared (an erasure's, a copy's) only once read: a values_raw row's key holds its raw numbers
    read = decoded if not any(r["read_by_schema"] for r in rows) else merges.read_by_schema(spark, source.name, decoded)
    marked = mark_erased(spark, read, source.name)
    if marked is not read:  # the source has erasures
        counts[ERASED] = marked.where(F.col("kind") == ERASED).count()
        counts["row"] = counts.get("row", 0) - counts[ERASED]
    if counts.get("row"):
        tables = len({(r["database"], r["table"]) for r in rows})
        merges.merge_row_changes(spark, source.name, marked, silver_seq, lowest, tables, counts["row"])
    if counts.get("watermark"):
        merges.merge_watermarks(spark, decoded)
    if counts.get(ERASED):
        record_erased_messages(spark, marked, source.name, counts[ERASED])
    if counts.get("quarantine") or counts.get("waiting") or replaying:
        merges.merge_quarantine(spark, source, bronze, decoded, replaying)
    if not replaying and (counts.get("waiting") or pending):
        merges.update_pending(spark, source.name, decoded)
    decoded.unpersist()
    return counts


def _matches_sql(pattern: str, name: str, args: dict[str, str]) -> str:
    """SQL that holds when a row's `database` and `table` match the `db.table` glob `pattern`; its two regular
    expressions go into `args` as parameters `<name>_db` and `<name>_tb` (values, never SQL text)."""
    db, tb = glob_regexes(pattern)
    args[f"{name}_db"], args[f"{name}_tb"] = f"(?isu)^(?:{db})$", f"(?isu)^(?:{tb})$"
    return f"(database RLIKE :{name}_db AND `table` RLIKE :{name}_tb)"


def left_out_sql(rules: TableRules) -> tuple[str, dict[str, str]]:
    """SQL that holds for a row of a table the rules leave out, over `database` and `table`, with its
    parameters; `false` without rules."""
    if not rules.filters:
        return "false", {}
    args: dict[str, str] = {}

    def matches(kind: str, patterns: list[str]) -> str:
        tests = [_matches_sql(pattern, f"{kind}_{i}", args) for i, pattern in enumerate(patterns)]
        return f"coalesce({' OR '.join(tests)}, false)" if tests else "false"

    excluded = matches("exclude", rules.exclude)
    included = matches("include", rules.include) if rules.include else "true"
    return f"(`table` IS NOT NULL AND ({excluded} OR NOT {included}))", args


def _left_behind(spark, source: SourceSettings) -> None:
    """Say which tables the source's rules leave out that silver still holds (and gold, where upstream still
    has them): a rule applies from the run that first reads it on, and `rebuild silver` removes what came
    before."""
    if not source.tables.filters:
        return
    left_out, rule_args = left_out_sql(source.tables)
    behind = spark.sql(
        f"""SELECT DISTINCT database, `table` FROM {SILVER_DDL_EVENTS}
            WHERE source = :source AND ddl_type NOT IN ('drop_table', 'drop_database') AND {left_out}""",
        args={"source": source.name, **rule_args},
    ).collect()
    if behind:
        names = ", ".join(sorted(f"{r['database']}.{r['table']}" for r in behind)[:10])
        log.warning(
            "source %s: %d tables the table rules leave out are still in silver, and in gold where they exist (%s); "
            "`ticdc-lake rebuild silver --source %s` removes them",
            source.name,
            len(behind),
            names,
            source.name,
        )


def apply_table_rules(spark, decoded, rules: TableRules):
    """The decoded events as the source's table rules let them into silver: kind `left_out` for the rows (and
    Simple's schema announcements) of a left-out table, and a row's left-out columns taken out of its images
    (a key column stays). A row keeps every column's type: a table first seen in rows gets its left-out columns
    in the inferred schema, marked, so that a later DROP of one is understood. DDL statements go on to the
    interpreter, which needs every table's schema to follow a rename (`merges.within_rules`)."""
    from pyspark.sql import functions as F

    if rules.filters:
        left_out, rule_args = left_out_sql(rules)
        marked = spark.sql(f"SELECT *, {left_out} AS left_out FROM {{decoded}}", args=rule_args, decoded=decoded)
        kind = F.when(F.col("kind").isin("row", "waiting", "bootstrap") & F.col("left_out"), F.lit("left_out"))
        decoded = marked.withColumn("kind", kind.otherwise(F.col("kind"))).drop("left_out")
    if rules.exclude_columns:
        columns, rule_args = left_out_columns_sql(rules)
        marked = spark.sql(f"SELECT *, {columns} AS left_out_columns FROM {{decoded}}", args=rule_args, decoded=decoded)

        def kept(name, _value):
            return ~F.array_contains("left_out_columns", F.lower(name)) | F.array_contains("key_columns", name)

        def without(image: str):
            return F.when(F.col("kind") == "row", F.map_filter(image, kept)).otherwise(F.col(image))

        decoded = marked.select(
            *[without(c).alias(c) if c in ("before", "after") else F.col(c) for c in decoded.columns]
        )
    return decoded


def left_out_columns_sql(rules: TableRules) -> tuple[str, dict[str, str]]:
    """SQL for the array of the column names (lower case) `exclude_columns` leaves out of a row's table, over
    `database` and `table`, with its parameters (globs and names are values, never SQL text)."""
    args: dict[str, str] = {}
    parts = []
    for i, (pattern, columns) in enumerate(rules.exclude_columns.items()):
        args |= {f"column_{i}_{j}": column.lower() for j, column in enumerate(columns)}
        names = ", ".join(f":column_{i}_{j}" for j in range(len(columns)))
        parts.append(f"CASE WHEN {_matches_sql(pattern, f'columns_{i}', args)} THEN array({names}) ELSE array() END")
    return f"concat({', '.join(parts)})", args


def _primers(spark, source: SourceSettings) -> list[Primer]:
    """The bronze messages of every schema the source has announced, in commit order."""
    rows = spark.sql(
        f"""SELECT b.key, b.value FROM {SILVER_DDL_EVENTS} d JOIN {BRONZE_MESSAGES} b
        ON b.source = d.source AND b.topic = d.topic AND b.`partition` = d.`partition` AND b.`offset` = d.`offset`
        WHERE d.source = :source ORDER BY d.commit_ts, d.topic, d.`partition`, d.`offset`""",
        args={"source": source.name},
    ).collect()
    return [
        Primer(
            key=bytes(r["key"]) if r["key"] is not None else None,
            value=bytes(r["value"]) if r["value"] is not None else None,
        )
        for r in rows
    ]


def consistent_ts(spark, config: PipelineConfig, source_name: str) -> tuple[int | None, str]:
    """(timestamp, how): the minimum watermark over every landed partition of the source, or, for a
    protocol that sends no watermarks, the highest commit ts landed ("landed")."""
    source = config.source(source_name)
    if not sends_watermarks(source.protocol, source.options):
        row = spark.sql(
            f"SELECT max(commit_ts) FROM {SILVER_ROW_CHANGES} WHERE source = :source", args={"source": source.name}
        ).collect()[0]
        return row[0], "landed"
    partitions = set(committed_offsets(spark, source.name))
    rows = spark.sql(
        f"SELECT topic, `partition`, resolved_ts FROM {SILVER_WATERMARKS} WHERE source = :source",
        args={"source": source.name},
    ).collect()
    marks = {(r["topic"], r["partition"]): r["resolved_ts"] for r in rows}
    if not partitions or any(tp not in marks for tp in partitions):
        return None, "watermark"
    return min(marks[tp] for tp in partitions), "watermark"


def record_run(
    spark,
    config: PipelineConfig,
    source_name: str,
    kind: str,
    bronze_snapshot: int | None,
    counts: dict,
    started: float,
    record: bool = True,
    silver_seq: int | None = None,
) -> SilverResult:
    """Record the run (last, so that it marks the run as complete) and log what it did in numbers."""
    ts, how = consistent_ts(spark, config, source_name)
    result = SilverResult(
        source=source_name,
        messages=counts.get("messages", 0),
        decoded=counts.get("decoded", 0),
        row_changes=counts.get("row", 0),
        ddl_events=counts.get("ddl", 0) + counts.get("bootstrap", 0),
        watermarks=counts.get("watermark", 0),
        quarantined=counts.get("quarantined", 0),
        waiting=counts.get("waiting", 0),
        consistent_ts=ts,
        consistency=how,
        seconds=time.monotonic() - started,
        left_out=counts.get("left_out", 0),
    )
    if record:
        spark.sql(
            f"""INSERT INTO {SILVER_RUNS} VALUES (:run_id, :source, :kind, :bronze_snapshot,
                :messages, :decoded, :row_changes, :ddl_events, :watermarks, :quarantined, :waiting,
                :consistent_ts, :consistency, current_timestamp(), :silver_seq)""",
            args={
                "run_id": uuid.uuid4().hex,
                "source": source_name,
                "kind": kind,
                "bronze_snapshot": bronze_snapshot,
                "messages": result.messages,
                "decoded": result.decoded,
                "row_changes": result.row_changes,
                "ddl_events": result.ddl_events,
                "watermarks": result.watermarks,
                "quarantined": result.quarantined,
                "waiting": result.waiting,
                "consistent_ts": ts,
                "consistency": how,
                "silver_seq": silver_seq,
            },
        )
    if result.left_out:
        log.info("source %s: %d row changes left out by the table rules", source_name, result.left_out)
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
