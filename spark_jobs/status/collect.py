"""A source's status from the tables, with Spark: what the ingest DAG's last task records for the status page.

Per source: the physical time of the newest landed message (its Kafka timestamp: bronze holds no TiDB time
yet), of the newest decoded change (its commit ts), of the consistent ts silver computed, and of the ts gold
was last published as of (its newest publication); the landed offset of every partition;
quarantine by reason with sample coordinates, and how many of those failed TiCDC's row checksum; landing gaps;
tables needing a fresh snapshot; the gold tables with row counts; and one history entry for the DAG run that
records it (counts of the rows each layer wrote since the run started, the durations Airflow measured of its
tasks, and the lags then).
"""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from spark_jobs.bronze.land import committed_offsets
from spark_jobs.codecs.checksum import FAILURE_PATTERN
from spark_jobs.config import PipelineConfig
from spark_jobs.gold import names
from spark_jobs.gold.layout import recorded_layout
from spark_jobs.gold.publish import latest_publication
from spark_jobs.runtime.tables import (
    BRONZE_LANDING_GAPS,
    BRONZE_LANDING_RUNS,
    BRONZE_MESSAGES,
    GOLD_RECONCILIATIONS,
    GOLD_TABLES,
    RECONCILE_MISMATCHES,
    SILVER_DDL_EVENTS,
    SILVER_QUARANTINE,
    SILVER_ROW_CHANGES,
    SILVER_RUNS,
    ensure_tables_once,
)
from spark_jobs.status.snapshot import FORMAT_VERSION, LAYERS, physical_ms, write_snapshot

GOLD_INTERMEDIATE = "lake_staging.int_gold_tables"
REASONS_SHOWN = 20
SAMPLES_PER_REASON = 5
GAPS_SHOWN = 50


@dataclass(frozen=True)
class TaskOutcome:
    state: str | None
    seconds: float | None


@dataclass(frozen=True)
class RunInfo:
    """The DAG run a snapshot is recorded for, as Airflow knows it."""

    run_id: str
    started_at_ms: int
    tasks: dict[str, TaskOutcome] = field(default_factory=dict)  # task id -> its state and duration


@dataclass(frozen=True)
class LayerTime:
    ts: int | None  # TiDB TSO; None for the landed layer, timed by Kafka
    physical_ms: int | None


@dataclass(frozen=True)
class PartitionOffset:
    topic: str
    partition: int
    landed_offset: int  # the next offset to land


@dataclass(frozen=True)
class Coordinates:
    topic: str
    partition: int
    offset: int


@dataclass(frozen=True)
class QuarantineReason:
    reason: str
    messages: int
    samples: list[Coordinates]


@dataclass(frozen=True)
class Gap:
    topic: str
    partition: int
    kind: str
    first_offset: int
    end_offset: int
    detected_at_ms: int


@dataclass(frozen=True)
class GoldTable:
    relation: str
    database: str
    table: str
    rows: int | None  # None: published by dbt's models but not built yet
    consistent_ts: int | None
    needs_snapshot: bool
    versions: int | None = None  # row versions in its history table
    keyless: bool = False  # no handle key upstream: its gold table is its change table
    deletes: str | None = None  # its delete mode (README, "How deletes land"); None for a change table
    layout: str | None = None  # its Iceberg layout, described (README, "How gold is laid out")


@dataclass(frozen=True)
class RunRecord:
    """One DAG run: what each layer wrote during it, how long each task took, and the lags at its end."""

    run_id: str
    started_at_ms: int
    recorded_at_ms: int
    tasks: dict[str, TaskOutcome]
    landed_records: int
    landed_bytes: int
    decoded_messages: int
    row_changes: int
    ddl_events: int
    quarantined: int
    gold_rows: int
    gold_consistent_ts: int | None
    lag_seconds: dict[str, float | None]


@dataclass(frozen=True)
class Publication:
    tag: str
    consistent_ts: int
    tables: int
    finished_at_ms: int


@dataclass(frozen=True)
class Reconciliation:
    """The newest reconciliation of the source against its upstream (gold.reconciliations)."""

    checked_at_ms: int
    against: str
    kind: str
    as_of_ts: int
    tables: int
    outcomes: dict[str, int]  # outcome -> tables
    mismatched: list[str]  # "db.table: outcome", the tables that differ from the upstream


@dataclass(frozen=True)
class SourceStatus:
    source: str
    protocol: str
    recorded_at_ms: int
    layers: dict[str, LayerTime]
    consistency: str | None  # watermark | landed
    partitions: list[PartitionOffset]
    quarantined: int
    quarantine: list[QuarantineReason]  # the REASONS_SHOWN most frequent
    checksum_failures: int  # quarantined for a row checksum mismatch or a row TiCDC marked corrupted
    gaps_total: int
    gaps: list[Gap]  # the GAPS_SHOWN newest
    needing_snapshot: list[str]
    gold_tables: list[GoldTable]
    history: list[RunRecord]
    version: int = FORMAT_VERSION
    publication: Publication | None = None  # the newest gold publication
    keyless: list[str] = field(default_factory=list)  # upstream tables without a handle key
    keyless_tables: str = "changes"  # what gold holds of them: the source's gold.keyless_tables
    reconciliation: Reconciliation | None = None
    table_rules: dict[str, Any] = field(default_factory=dict)  # the source's `tables` rules, as configured


def _reconciliation(spark, source: str) -> Reconciliation | None:
    """The outcome of the source's newest reconciliation, one row per table it compared."""
    if not spark.catalog.tableExists(GOLD_RECONCILIATIONS):
        return None
    rows = spark.sql(
        f"""SELECT unix_millis(checked_at) AS checked_at_ms, against, against_kind, as_of_ts, upstream_database,
                   upstream_table, outcome
            FROM {GOLD_RECONCILIATIONS}
            WHERE source = :source AND reconciliation_id = (
                SELECT max_by(reconciliation_id, checked_at) FROM {GOLD_RECONCILIATIONS} WHERE source = :source)
            ORDER BY upstream_database, upstream_table""",
        args={"source": source},
    ).collect()
    if not rows:
        return None
    return Reconciliation(
        checked_at_ms=rows[0]["checked_at_ms"],
        against=rows[0]["against"],
        kind=rows[0]["against_kind"],
        as_of_ts=rows[0]["as_of_ts"],
        tables=len(rows),
        outcomes=dict(Counter(r["outcome"] for r in rows)),
        mismatched=[
            f"{r['upstream_database']}.{r['upstream_table']}: {r['outcome']}"
            for r in rows
            if r["outcome"] in RECONCILE_MISMATCHES
        ],
    )


def _one(spark, query: str, **args):
    return spark.sql(query, args=args).collect()[0]


def _layer_times(
    spark, source: str, gold: list[GoldTable], publication: Publication | None
) -> tuple[dict[str, LayerTime], str | None]:
    landed_ms = _one(
        spark, f"SELECT unix_millis(max(`timestamp`)) FROM {BRONZE_MESSAGES} WHERE source = :source", source=source
    )[0]
    decoded_ts = _one(
        spark,
        f"""SELECT max(commit_ts) FROM (
            SELECT commit_ts FROM {SILVER_ROW_CHANGES} WHERE source = :source
            UNION ALL SELECT commit_ts FROM {SILVER_DDL_EVENTS} WHERE source = :source)""",
        source=source,
    )[0]
    newest_run = (
        spark.sql(
            f"SELECT consistent_ts, consistency FROM {SILVER_RUNS} WHERE source = :source ORDER BY finished_at DESC",
            args={"source": source},
        )
        .limit(1)
        .collect()
    )
    consistent_ts, consistency = (newest_run[0][0], newest_run[0][1]) if newest_run else (None, None)
    published = [t.consistent_ts for t in gold if t.consistent_ts is not None]
    gold_ts = publication.consistent_ts if publication else min(published) if published else None
    times = {
        "landed": LayerTime(None, landed_ms),
        "decoded": LayerTime(decoded_ts, physical_ms(decoded_ts)),
        "consistent": LayerTime(consistent_ts, physical_ms(consistent_ts)),
        "gold": LayerTime(gold_ts, physical_ms(gold_ts)),
    }
    return times, consistency


def _quarantine(spark, source: str) -> tuple[int, int, list[QuarantineReason]]:
    """Quarantined messages, those of them that failed a row checksum (counted apart: a mismatch means data
    changed between TiDB and here, and the reasons shown are only the most frequent), and the reasons shown."""
    total, checksum_failures = _one(
        spark,
        f"SELECT count(*), count_if(reason RLIKE :pattern) FROM {SILVER_QUARANTINE} WHERE source = :source",
        source=source,
        pattern=FAILURE_PATTERN,
    )
    rows = (
        spark.sql(
            f"""SELECT reason, count(*) AS messages,
                slice(array_sort(collect_list(named_struct('topic', topic, 'partition', `partition`,
                                                           'offset', `offset`))), 1, :samples) AS samples
            FROM {SILVER_QUARANTINE} WHERE source = :source GROUP BY reason ORDER BY messages DESC, reason""",
            args={"source": source, "samples": SAMPLES_PER_REASON},
        )
        .limit(REASONS_SHOWN)
        .collect()
    )
    reasons = [
        QuarantineReason(
            r["reason"], r["messages"], [Coordinates(s["topic"], s["partition"], s["offset"]) for s in r["samples"]]
        )
        for r in rows
    ]
    return total, checksum_failures, reasons


def _gaps(spark, source: str) -> tuple[int, list[Gap]]:
    total = _one(spark, f"SELECT count(*) FROM {BRONZE_LANDING_GAPS} WHERE source = :source", source=source)[0]
    rows = (
        spark.sql(
            f"""SELECT topic, `partition`, kind, first_offset, end_offset, unix_millis(detected_at) AS detected_at_ms
            FROM {BRONZE_LANDING_GAPS} WHERE source = :source ORDER BY detected_at DESC, topic, `partition`""",
            args={"source": source},
        )
        .limit(GAPS_SHOWN)
        .collect()
    )
    return total, [Gap(**r.asDict()) for r in rows]


def _gold_tables(spark, source: str) -> list[GoldTable]:
    """Every gold table of the source with its rows and versions as its newest publication holds them
    (gold.tables, one read whatever the number of tables), and whether it needs a fresh snapshot (dbt's
    intermediate int_gold_tables). A table the last plan names but no run has built yet shows no rows."""
    if not spark.catalog.tableExists(GOLD_INTERMEDIATE):
        return []
    rows = spark.sql(
        f"""SELECT planned.upstream_database, planned.upstream_table, planned.needs_snapshot,
                   coalesce(size(planned.key_columns), 0) <= 0 AS keyless, recorded.gold_relation, recorded.`rows`,
                   recorded.versions, recorded.consistent_ts, recorded.delete_mode, recorded.layout
            FROM {GOLD_INTERMEDIATE} AS planned
            LEFT JOIN {GOLD_TABLES} AS recorded
                ON recorded.source = planned.source_name AND recorded.table_uid = planned.table_uid
            WHERE planned.source_name = :source
            ORDER BY planned.upstream_database, planned.upstream_table""",
        args={"source": source},
    ).collect()
    namespace = names.gold_namespace(source)
    return [
        GoldTable(
            relation=r["gold_relation"]
            or f"{namespace}.{names.gold_table(r['upstream_database'], r['upstream_table'])}",
            database=r["upstream_database"],
            table=r["upstream_table"],
            rows=r["rows"],
            consistent_ts=r["consistent_ts"],
            needs_snapshot=bool(r["needs_snapshot"]),
            versions=r["versions"],
            keyless=bool(r["keyless"]),
            deletes=None if r["keyless"] else (r["delete_mode"] or "hard"),
            layout=recorded_layout(r["layout"]).described,
        )
        for r in rows
    ]


def _run_record(
    spark, source: str, run: RunInfo, now_ms: int, layers: dict[str, LayerTime], gold: list[GoldTable]
) -> RunRecord:
    """What the run wrote: the landing and silver rows recorded since it started."""
    landed = _one(
        spark,
        f"""SELECT coalesce(sum(records), 0), coalesce(sum(bytes), 0) FROM {BRONZE_LANDING_RUNS}
        WHERE source = :source AND unix_millis(landed_at) >= :since""",
        source=source,
        since=run.started_at_ms,
    )
    decoded = _one(
        spark,
        f"""SELECT coalesce(sum(messages), 0), coalesce(sum(row_changes), 0), coalesce(sum(ddl_events), 0),
            coalesce(sum(quarantined), 0)
        FROM {SILVER_RUNS} WHERE source = :source AND unix_millis(finished_at) >= :since""",
        source=source,
        since=run.started_at_ms,
    )
    return RunRecord(
        run_id=run.run_id,
        started_at_ms=run.started_at_ms,
        recorded_at_ms=now_ms,
        tasks=run.tasks,
        landed_records=landed[0],
        landed_bytes=landed[1],
        decoded_messages=decoded[0],
        row_changes=decoded[1],
        ddl_events=decoded[2],
        quarantined=decoded[3],
        gold_rows=sum(t.rows or 0 for t in gold),
        gold_consistent_ts=layers["gold"].ts,
        lag_seconds={
            layer: None if (physical_ms := layers[layer].physical_ms) is None else (now_ms - physical_ms) / 1000
            for layer in LAYERS
        },
    )


def collect_status(
    spark,
    config: PipelineConfig,
    source_name: str,
    run: RunInfo,
    now_ms: int | None = None,
) -> SourceStatus:
    """The source's status as of now, read from the bronze, silver and intermediate tables and the gold state."""
    source = config.source(source_name)
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    ensure_tables_once(spark, "bronze")
    ensure_tables_once(spark, "silver")
    gold = _gold_tables(spark, source.name)
    publication = _publication(spark, source.name)
    layers, consistency = _layer_times(spark, source.name, gold, publication)
    quarantined, checksum_failures, reasons = _quarantine(spark, source.name)
    gaps_total, gaps = _gaps(spark, source.name)
    return SourceStatus(
        source=source.name,
        protocol=source.protocol,
        recorded_at_ms=now_ms,
        layers=layers,
        consistency=consistency,
        partitions=[
            PartitionOffset(topic, partition, offset)
            for (topic, partition), offset in sorted(committed_offsets(spark, source.name).items())
        ],
        quarantined=quarantined,
        quarantine=reasons,
        checksum_failures=checksum_failures,
        gaps_total=gaps_total,
        gaps=gaps,
        needing_snapshot=[f"{t.database}.{t.table}" for t in gold if t.needs_snapshot],
        keyless=[f"{t.database}.{t.table}" for t in gold if t.keyless],
        keyless_tables=source.gold.keyless_tables,
        gold_tables=gold,
        history=[_run_record(spark, source.name, run, now_ms, layers, gold)],
        publication=publication,
        reconciliation=_reconciliation(spark, source.name),
        table_rules=asdict(source.tables),
    )


def _publication(spark, source: str) -> Publication | None:
    """The newest publication: the moment every gold and history table of the source shows together."""
    row = latest_publication(spark, source)
    if row is None:
        return None
    finished = int(row["finished_at"].replace(tzinfo=dt.UTC).timestamp() * 1000)
    return Publication(row["tag"], row["consistent_ts"], len(row["tables"]), finished)


def record_status(spark, config: PipelineConfig, source_name: str, run: RunInfo) -> Path:
    """Collect the source's status and write it where the status page reads it; returns the file."""
    return write_snapshot(config.local_dir, asdict(collect_status(spark, config, source_name, run)))
