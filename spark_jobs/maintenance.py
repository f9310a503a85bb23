"""Table maintenance: compaction, expiry and orphan removal per table, and stale landing branches dropped.

Per table, in this order: `rewrite_data_files` (small files of many runs into few), `rewrite_position_delete_files`
(merges' delete files), for bronze the `land_*` branches no landing run can still publish, `expire_snapshots`
(older than `maintenance.snapshot_retention_days`, keeping main's newest `retain_last`; Iceberg itself keeps every
snapshot a tag or branch references) and `remove_orphan_files` (older than `maintenance.orphan_age_hours`).

Everything goes through Iceberg's Java actions (`SparkActions`), which take tables, ids and times as values: no
name from upstream is ever part of SQL text here. Two guards keep the pipeline's positions safe:
- bronze offsets live in a table property (`spark_jobs.bronze.land`), untouched by any of this; offsets of
  sources landed before that are copied from their snapshot summary first (`adopt_summary_offsets`);
- silver reads bronze incrementally from the snapshot its last run covered, so bronze never expires a snapshot
  newer than the oldest such position of a configured source.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from spark_jobs.bronze.land import LANDING_BRANCH_PREFIX, adopt_summary_offsets, drop_branch
from spark_jobs.config import MaintenanceSettings, PipelineConfig
from spark_jobs.errors import commit_conflict_in
from spark_jobs.gold.models import plan_model
from spark_jobs.gold.names import daily_namespace, gold_namespace
from spark_jobs.runtime.iceberg import iceberg_table, main_snapshot, snapshot_util, spark_actions
from spark_jobs.runtime.jvm import java_items
from spark_jobs.runtime.lock import CONTINUOUS_HOLDER, source_lock
from spark_jobs.runtime.results import Result
from spark_jobs.runtime.tables import BRONZE_MESSAGES, SILVER_RUNS, TABLES, bronze_commits, ensure_tables

log = logging.getLogger(__name__)

PUBLISHED_TAG = "ticdc_published"  # a gold table's snapshot of the retention's start (`keep_published`)
ICEBERG_ORPHAN_SAFETY_HOURS = 24  # below this, a file a running writer has not committed yet may be deleted


@dataclass(frozen=True)
class TableMaintenance(Result):
    """What maintenance did to one table, in numbers."""

    table: str
    files_rewritten: int
    files_added: int
    delete_files_rewritten: int
    snapshots_expired: int
    files_expired: int  # data and delete files no kept snapshot references any more, deleted
    orphans_removed: int
    branches_dropped: list[str] = field(default_factory=list)
    seconds: float = 0.0
    not_compacted: str = ""  # why the table was not compacted, when it was not

    def line(self) -> str:
        branches = (
            f", {len(self.branches_dropped)} stale landing branches dropped" if self.table == BRONZE_MESSAGES else ""
        )
        compaction = (
            f"not compacted ({self.not_compacted})"
            if self.not_compacted
            else f"{self.files_rewritten} data files rewritten into {self.files_added}, "
            f"{self.delete_files_rewritten} delete files rewritten"
        )
        return (
            f"{self.table}: {compaction}, {self.snapshots_expired} snapshots expired "
            f"({self.files_expired} files deleted), {self.orphans_removed} orphan files removed{branches}; "
            f"{self.seconds:.1f}s"
        )


def layer_tables(layer: str) -> list[str]:
    """The tables of a layer of `runtime.tables` (constants of ours)."""
    return [table.name for table in TABLES[layer]]


def gold_tables(spark, source: str) -> list[str]:
    """The source's gold, history and daily as-of tables as they exist in its namespaces, and its run plan (each
    run that plans replaces it, and Iceberg keeps what it replaced until snapshots expire); views are not tables.
    Gold names are plain by construction (`spark_jobs.gold.names`), so `namespace.table` needs no quoting."""
    namespaces = (gold_namespace(source), daily_namespace(source))
    plan = f"lake_staging.{plan_model(source)}"
    return sorted(
        [
            f"{namespace}.{t.name}"
            for namespace in namespaces
            if spark.catalog.databaseExists(namespace)
            for t in spark.catalog.listTables(namespace)
            if not t.isTemporary and t.tableType != "VIEW"
        ]
        + ([plan] if spark.catalog.tableExists(plan) else [])
    )


def silver_positions_since(spark, config: PipelineConfig) -> int | None:
    """Commit time (epoch ms) of the oldest bronze snapshot a configured source's next silver run starts from:
    silver's incremental scan needs every bronze snapshot after it. None when nothing needs keeping."""
    if not spark.catalog.tableExists(SILVER_RUNS):
        return None
    from pyspark.sql import functions as F

    positions = (
        spark.table(SILVER_RUNS)
        .where((F.col("kind") == "incremental") & F.col("source").isin([s.name for s in config.sources]))
        .groupBy("source")
        .agg(F.max_by("bronze_snapshot_id", "finished_at").alias("position"))
        .collect()
    )
    snapshot_ids = [r["position"] for r in positions if r["position"] is not None]
    if not snapshot_ids:
        return None
    table = iceberg_table(spark, BRONZE_MESSAGES)
    kept = [table.snapshot(snapshot_id) for snapshot_id in snapshot_ids]
    times = [snapshot.timestampMillis() for snapshot in kept if snapshot is not None]
    return min(times) if times else None


def stale_landing_branches(spark) -> list[str]:
    """`land_*` branches of bronze that no landing run can publish any more: main has moved past the
    snapshot they fork from, so their fast-forward would be refused (the run that made them was killed,
    or will discard them and retry). A branch main can still be fast-forwarded to may belong to a run in
    progress and is kept."""
    table = iceberg_table(spark, BRONZE_MESSAGES)
    main = main_snapshot(spark)
    refs = table.refs()
    stale = []
    for name in sorted(java_items(refs.keySet())):
        if not name.startswith(LANDING_BRANCH_PREFIX):
            continue
        head = refs.get(name).snapshotId()
        if main is None or not snapshot_util(spark).isAncestorOf(table, head, main):
            stale.append(name)
    return stale


def maintain_table(
    spark,
    table: str,
    settings: MaintenanceSettings,
    keep_since_millis: int | None = None,
    published: bool = False,
    not_compacted: str = "",
) -> TableMaintenance:
    """Compact, expire and remove orphans of one table; bronze also loses its stale landing branches.

    `keep_since_millis`: no snapshot committed at or after this time is expired (silver's positions). `published`:
    a gold or history table, whose snapshot of the retention's start stays (`keep_published`). `not_compacted`:
    why the table is not to be compacted this time (empty: it is). Bronze is maintained between two landing
    commits of this process, never across one (`BRONZE_COMMITS`)."""
    with bronze_commits(table):
        return _maintain_table(spark, table, settings, keep_since_millis, published, not_compacted)


def keep_published(spark, table: str, since_millis: int) -> int | None:
    """Tag (`PUBLISHED_TAG`) the snapshot a gold or history table had at `since_millis`, the start of the retention,
    so that expiry keeps it; returns its id (None: the table is younger). A publication pins each table to the
    snapshot it had when the publication was made, and a table no run changed keeps an old snapshot for as long
    as it stays unchanged: every snapshot a publication within the retention can name is that one or newer."""
    loaded = iceberg_table(spark, table)
    at = snapshot_util(spark).nullableSnapshotIdAsOfTime(loaded, since_millis)
    if at is None:  # no snapshot that old
        return None
    manage = loaded.manageSnapshots()
    tag = manage.createTag if loaded.refs().get(PUBLISHED_TAG) is None else manage.replaceTag
    tag(PUBLISHED_TAG, at).commit()
    return at


@dataclass(frozen=True)
class Compaction:
    """What compacting one table did, in numbers."""

    table: str
    files_rewritten: int
    files_added: int
    delete_files_rewritten: int


def compact_table(spark, table: str, min_input_files: int = 5) -> Compaction:
    """Rewrite a table's small data files into few, their deletes applied, when there are at least
    `min_input_files` of them (Iceberg's default: 5), dropping the delete files only they referenced, then its
    other position delete files: a merge-on-read table that many runs merged into holds a data file and a delete
    file per run, which every later read and MERGE opens."""
    actions = spark_actions(spark)
    rewrite = actions.rewriteDataFiles(iceberg_table(spark, table))
    rewritten = (
        rewrite.option("min-input-files", str(min_input_files)).option("remove-dangling-deletes", "true").execute()
    )
    deletes = actions.rewritePositionDeletes(iceberg_table(spark, table)).execute()
    return Compaction(
        table, rewritten.rewrittenDataFilesCount(), rewritten.addedDataFilesCount(), deletes.rewrittenDeleteFilesCount()
    )


def _compaction(spark, table: str, not_compacted: str) -> tuple[Compaction, str]:
    """The table's compaction and, where there was none, why: `not_compacted` already says why not, or a run that
    committed to the table while it was being compacted (in cluster mode runs and maintenance write at once) made
    Iceberg refuse it, which leaves the compaction to the next maintenance."""
    if not_compacted:
        return Compaction(table, 0, 0, 0), not_compacted
    try:
        return compact_table(spark, table), ""
    except Exception as exc:
        conflict = commit_conflict_in(exc)
        if conflict is None:
            raise
        log.warning("%s: not compacted, another writer committed to it meanwhile: %s", table, conflict)
        return Compaction(table, 0, 0, 0), "another writer committed to it meanwhile; the next maintenance compacts it"


def _maintain_table(
    spark, table: str, settings: MaintenanceSettings, keep_since_millis: int | None, published: bool, not_compacted: str
) -> TableMaintenance:
    started = time.monotonic()
    actions = spark_actions(spark)
    compacted, not_compacted = _compaction(spark, table, not_compacted)
    dropped: list[str] = []
    if table == BRONZE_MESSAGES:
        adopted = adopt_summary_offsets(spark)
        if adopted:
            log.info("bronze offsets of %s copied from snapshot summaries into table properties", ", ".join(adopted))
        dropped = [branch for branch in stale_landing_branches(spark) if drop_branch(spark, branch)]
    now = int(time.time() * 1000)
    expire_before = now - settings.snapshot_retention_days * 86_400_000
    if keep_since_millis is not None and keep_since_millis < expire_before:
        expire_before = keep_since_millis
    if published:
        keep_published(spark, table, expire_before)
    before = _snapshot_ids(spark, table)
    expired = expire_snapshots(spark, actions, table, expire_before, settings.retain_last)
    orphans = (
        actions.deleteOrphanFiles(iceberg_table(spark, table))
        .olderThan(now - settings.orphan_age_hours * 3_600_000)
        .execute()
    )
    result = TableMaintenance(
        table=table,
        files_rewritten=compacted.files_rewritten,
        files_added=compacted.files_added,
        delete_files_rewritten=compacted.delete_files_rewritten,
        snapshots_expired=len(before - _snapshot_ids(spark, table)),
        files_expired=expired.deletedDataFilesCount()
        + expired.deletedEqualityDeleteFilesCount()
        + expired.deletedPositionDeleteFilesCount(),
        orphans_removed=len(java_items(orphans.orphanFileLocations())),
        branches_dropped=dropped,
        seconds=time.monotonic() - started,
        not_compacted=not_compacted,
    )
    log.info("%s", result.line())
    return result


def expire_snapshots(spark, actions, table: str, expire_before: int, retain_last: int, attempts: int = 5):
    """Expire snapshots, planning again when a concurrent commit made the plan wrong.

    A landing run may fork its `land_*` branch from a snapshot this expiry planned to remove (Iceberg's commit
    retry then refuses: "Still referenced by refs"), or drop a branch whose files the plan was reading ("File
    does not exist"). A fresh plan, from the table as it is now, leaves both alone."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import IllegalArgumentException

    for attempt in range(1, attempts + 1):
        try:
            return (
                actions.expireSnapshots(iceberg_table(spark, table))
                .expireOlderThan(expire_before)
                .retainLast(retain_last)
                .execute()
            )
        except (IllegalArgumentException, Py4JJavaError) as exc:
            concurrent = any(s in str(exc) for s in ("Still referenced by refs", "NotFoundException"))
            if not concurrent or attempt == attempts:
                raise
            log.info("%s: a concurrent commit changed what the expiry planned; planning again", table)


def _snapshot_ids(spark, table: str) -> set[int]:
    return {snapshot.snapshotId() for snapshot in java_items(iceberg_table(spark, table).snapshots())}


def maintain_layer(spark, config: PipelineConfig, layer: str) -> list[TableMaintenance]:
    """Maintain every table of a layer of `runtime.tables` (bronze, silver, gold bookkeeping: shared by all sources)."""
    ensure_tables(spark, layer)
    keep_since = None
    if layer == "bronze":  # first in every maintenance run
        _warn_about_orphan_age(config.maintenance)
        keep_since = silver_positions_since(spark, config)
    return [maintain_table(spark, table, config.maintenance, keep_since) for table in layer_tables(layer)]


def maintain_gold(spark, config: PipelineConfig, source: str) -> list[TableMaintenance]:
    """Maintain every gold (and history) table of one configured source, holding the source's lock as its runs
    do: a run's merge-on-read MERGE names the data files its deletes apply to, and a compaction committed while it
    ran would replace them, so Iceberg would refuse one of the two. A continuous driver holds the lock as long as
    it runs and compacts the tables it merges into itself (`steps.continuous`): then the gold tables are not
    compacted here, and their snapshots and orphan files are still kept in bounds."""
    config.source(source)
    published = f"{gold_namespace(source)}."
    holder = f"maintenance of {source}'s gold"
    with source_lock(config.local_dir, source, holder, unless_held_by=CONTINUOUS_HOLDER) as locked:
        not_compacted = "" if locked else "the continuous driver running for the source compacts it"
        if not locked:
            log.info("source %s: gold tables not compacted here: %s", source, not_compacted)
        return [
            maintain_table(
                spark, table, config.maintenance, published=table.startswith(published), not_compacted=not_compacted
            )
            for table in gold_tables(spark, source)
        ]


def maintain(spark, config: PipelineConfig, source: str | None = None) -> list[TableMaintenance]:
    """The shared tables (bronze, silver, gold bookkeeping), then the gold tables of `source` (default: of every
    configured source)."""
    sources = [config.source(source).name] if source else [s.name for s in config.sources]
    results = [r for layer in TABLES for r in maintain_layer(spark, config, layer)]  # bronze first
    for name in sources:
        results += maintain_gold(spark, config, name)
    log.info("maintenance: %s", summary_line(results))
    return results


def summary_line(results: list[TableMaintenance]) -> str:
    return (
        f"{len(results)} tables, {sum(r.files_rewritten for r in results)} data files rewritten, "
        f"{sum(r.snapshots_expired for r in results)} snapshots expired, "
        f"{sum(r.orphans_removed for r in results)} orphan files removed, "
        f"{sum(len(r.branches_dropped) for r in results)} stale landing branches dropped"
    )


def _warn_about_orphan_age(settings: MaintenanceSettings) -> None:
    if settings.orphan_age_hours < ICEBERG_ORPHAN_SAFETY_HOURS:
        log.warning(
            "maintenance.orphan_age_hours is %d: files a writer running now has not committed yet may be deleted; "
            "use %d or more unless nothing else writes during maintenance",
            settings.orphan_age_hours,
            ICEBERG_ORPHAN_SAFETY_HOURS,
        )
