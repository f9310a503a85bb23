"""Load a Dumpling export into silver: the rows a table had before the changefeed started.

TiDB users start a changefeed at the TSO of a Dumpling export; the lakehouse starts from that export. Its tables'
CREATE statements become `snapshot` DDL events at the export's TSO and its rows snapshot row changes (flag
`snapshot`) at that TSO, so that gold is the export plus every change after it: gold and history take a table's
snapshot as its state at that TSO, and changes the changefeed sent at or before it do not apply again
(docs/architecture.md, decision 15).

The data files are read by Spark tasks, one task per file (`-F`/`-r` in Dumpling splits big tables), so no row
passes through the driver. A load is recorded in `silver.snapshot_loads` when it starts and again when it
finishes; gold refuses to publish a source with a load that did not finish. Loading the same export again
changes nothing; a load at a TSO gold has already passed is refused unless forced (its result then asks for the
source's gold and history to be rebuilt from silver, which the `load_snapshot` step does).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass
from typing import cast

from spark_jobs.backfill import dumpling
from spark_jobs.config import PipelineConfig, TableRules
from spark_jobs.errors import ConfigError, SnapshotRefused
from spark_jobs.runtime.results import Result
from spark_jobs.runtime.tables import SILVER_ROW_CHANGES, ensure_tables_once
from spark_jobs.silver import snapshot_loads

log = logging.getLogger(__name__)
PROGRESS_SECONDS = 10.0
_EXPORT_ERROR = re.compile(r"^spark_jobs\.backfill\.dumpling\.ExportError: (.+)$", re.MULTILINE)


@dataclass
class SnapshotResult(Result):
    source: str
    location: str
    snapshot_ts: int
    tables: dict[str, int]  # db.table -> rows
    files: int
    seconds: float
    already_loaded: bool = False
    rebuild_gold: bool = False  # a forced load behind what gold published: its gold and history are rebuilt
    same_as: str | None = None  # an export already loaded from another location with the same TSO and rows

    def line(self) -> str:
        if self.already_loaded and self.same_as not in (None, self.location):
            return (
                f"{self.source}: the export at {self.location} (TSO {self.snapshot_ts}) holds the same rows as the "
                f"one loaded from {self.same_as}; nothing to do"
            )
        if self.already_loaded:
            return f"{self.source}: the export at {self.location} (TSO {self.snapshot_ts}) was loaded before; nothing to do"
        rows = sum(self.tables.values())
        rate = rows / self.seconds if self.seconds else 0.0
        return (
            f"{self.source}: snapshot at TSO {self.snapshot_ts} loaded from {self.location}: {rows} rows of "
            f"{len(self.tables)} tables from {self.files} files in {self.seconds:.0f} s ({rate:.0f} rows/s)"
        )


def load_snapshot(
    spark,
    config: PipelineConfig,
    source_name: str,
    location: str,
    tables: frozenset[tuple[str, str]] | None = None,
    csv: dumpling.CsvOptions | None = None,
    force: bool = False,
    progress=None,
) -> SnapshotResult:
    """Load the Dumpling export at `location` (a directory or an fsspec URL) into the source's silver tables.
    `progress(files_done, files, rows, seconds)` is called while the files are read."""
    from pyspark.sql import functions as F

    from spark_jobs.silver import merges
    from spark_jobs.silver.build import apply_table_rules, next_silver_seq, record_run
    from spark_jobs.silver.erased import mark_erased

    source = config.source(source_name)
    started = time.monotonic()
    plan = read_export(location, tables, "backfill snapshot --from", source.tables)
    export, chosen, statements, schemas = plan.export, plan.chosen, plan.statements, plan.schemas
    _refuse_keyless(source.name, schemas)
    ensure_tables_once(spark, "bronze")  # a lakehouse may start with the export, before anything landed
    ensure_tables_once(spark, "silver")
    earlier = snapshot_loads.load_record(spark, source.name, location, export.snapshot_ts)
    if earlier is not None and earlier["finished_at"] is not None:
        return SnapshotResult(source.name, location, export.snapshot_ts, {}, 0, 0.0, already_loaded=True)
    published = _published_ts(spark, source.name)
    behind = published is not None and published > export.snapshot_ts and not force
    same_ts = [r for r in snapshot_loads.finished_loads(spark, source.name, export.snapshot_ts)
               if {f"{d}.{t}" for d, t in chosen} <= set(r["tables"])]  # fmt: skip
    if behind and not same_ts:
        raise _behind(source.name, cast(int, published), export.snapshot_ts)
    files = plan.files
    log.info(
        "source %s: loading the snapshot at TSO %d from %s: %d tables, %d data files",
        source.name,
        export.snapshot_ts,
        location,
        len(chosen),
        len(files),
    )
    # every file is read before anything is written: an export that does not read changes nothing
    parsed, counts = parse_rows(spark, plan, csv, progress, "backfill snapshot --from")
    if same_ts and _holds_the_same_rows(spark, source.name, export.snapshot_ts, parsed, chosen):
        if parsed is not None:
            parsed.unpersist()
        result = SnapshotResult(
            source.name, location, export.snapshot_ts, {}, 0, 0.0, already_loaded=True, same_as=same_ts[0]["location"]
        )
        log.info("%s", result.line())
        return result
    if behind:
        raise _behind(source.name, cast(int, published), export.snapshot_ts)
    seq = next_silver_seq(spark, source.name)
    snapshot_loads.record_start(spark, source.name, location, export.snapshot_ts, chosen, seq, force)
    log.info("source %s: writing the snapshot into silver", source.name)
    merges.merge_snapshot_schemas(spark, source.name, source.protocol, export.snapshot_ts, statements, source.tables)
    if parsed is not None:
        rows = apply_table_rules(spark, parsed, source.tables).withColumn("source", F.lit(source.name))
        rows = mark_erased(spark, rows, source.name)  # an erased key stays out, though the export holds it
        merges.merge_row_changes(spark, source.name, rows, seq)
        parsed.unpersist()
    record_run(
        spark,
        config,
        source.name,
        "snapshot",
        None,
        {"row": sum(counts.values()), "ddl": len(statements)},
        started,
        silver_seq=seq,
    )
    snapshot_loads.record_finish(spark, source.name, location, export.snapshot_ts, len(files), sum(counts.values()))
    result = SnapshotResult(
        source.name,
        location,
        export.snapshot_ts,
        {f"{d}.{t}": counts.get((d, t), 0) for d, t in sorted(chosen)},
        len(files),
        time.monotonic() - started,
    )
    result.rebuild_gold = force and published is not None and published > export.snapshot_ts
    for table, rows in result.tables.items():
        log.info("source %s: snapshot of %s: %d rows", source.name, table, rows)
    log.info("%s", result.line())
    return result


def _behind(source: str, published: int, snapshot_ts: int) -> SnapshotRefused:
    return SnapshotRefused(
        f"source {source}: gold is published up to TiDB ts {published}, past the export's TSO "
        f"{snapshot_ts}: loading it would rewrite what gold has shown; run with --force to load it "
        "anyway (the source's gold and history are then rebuilt from silver)"
    )


def _holds_the_same_rows(spark, source: str, snapshot_ts: int, parsed, chosen) -> bool:
    """Whether the export's rows are, as a multiset, the rows an earlier load at the same TSO wrote into silver
    for these tables (count and an order-independent hash of every row: any compression or file split of the
    same export is the same)."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    def fingerprint(rows):
        row_hash = F.xxhash64("database", "table", "row_key", F.to_json(F.array_sort(F.map_entries("after"))))
        return tuple(rows.agg(F.count("*"), F.sum(row_hash.cast("decimal(38,0)"))).collect()[0])

    wanted = [f"{d}.{t}" for d, t in sorted(chosen)]
    loaded = spark.table(SILVER_ROW_CHANGES).where(
        (F.col("source") == source)
        & (F.col("commit_ts") == snapshot_ts)
        & (F.col("op") == "insert")  # a streamed insert at the TSO is the same change: silver kept one of the two
        & F.concat_ws(".", "database", "table").isin(wanted)
    )
    if parsed is None:
        return loaded.limit(1).count() == 0
    # silver keeps one row per key of a table (the first copy in file order, `merge_row_changes`): so does this
    first = Window.partitionBy("database", "table", "row_key").orderBy("topic", "partition", "offset")
    kept = parsed.withColumn("_n", F.row_number().over(first)).where("_n = 1")
    return fingerprint(kept) == fingerprint(loaded)


@dataclass(frozen=True)
class ExportPlan:
    """An export as read before any row: its TSO, the tables chosen, their CREATE statements (as `snapshot` DDL
    events) and schemas (as the one DDL interpreter reads them), and their data files."""

    location: str
    export: dumpling.Export
    chosen: set[tuple[str, str]]
    statements: list[dict]
    schemas: dict[tuple[str, str], dict]

    @property
    def files(self) -> list[dumpling.DataFile]:
        return [f for f in self.export.data_files if (f.database, f.table) in self.chosen]


def read_export(
    location: str, tables: frozenset[tuple[str, str]] | None, what: str, rules: TableRules | None = None
) -> ExportPlan:
    """The export at `location` (a directory or an fsspec URL), its tables (or those of `tables`) that the
    source's `rules` keep, read as far as their schemas; a location that is not a readable export raises
    ConfigError naming `what` was asked."""
    fs, root = _filesystem(location, what)
    export, chosen = _plan(fs, root, location, tables, what)
    if rules is not None and rules.filters:
        left_out = {t for t in chosen if not rules.keeps(*t)}
        if left_out:
            log.info("%s: %d tables of the export left out by the table rules", what, len(left_out))
        chosen = chosen - left_out
    statements = [
        {
            "database": database,
            "table": table,
            "ddl_sql": dumpling.create_statement(_read(fs, root, export.schemas[(database, table)]), name),
            "topic": f"dumpling:{name}",
        }
        for (database, table), name in sorted(export.schemas.items())
        if (database, table) in chosen
    ]
    return ExportPlan(location, export, chosen, statements, table_schemas(export.snapshot_ts, statements, what))


def table_schemas(ts: int, statements: list[dict], what: str) -> dict[tuple[str, str], dict]:
    """Each table's schema as the one DDL interpreter reads its CREATE TABLE (what the values are parsed by);
    a table TiCDC cannot replicate, or a statement not understood, raises ConfigError before anything is read."""
    from spark_jobs import ddl

    schemas = {}
    for r in statements:
        name = (r["database"], r["table"])
        change = ddl.interpret(r["ddl_sql"], database=name[0], table=name[1], commit_ts=ts, schemas={})[0]
        if not change.understood or change.schema_after is None:
            raise ConfigError(f"{what}: {r['topic'].removeprefix('dumpling:')}: {change.note or 'not a CREATE TABLE'}")
        schemas[name] = change.schema_after
    return schemas


def _refuse_keyless(source: str, schemas: dict[tuple[str, str], dict]) -> None:
    keyless = sorted(f"{d}.{t}" for (d, t), schema in schemas.items() if not schema["key_columns"])
    if keyless:
        raise SnapshotRefused(
            f"source {source}: {', '.join(keyless)} has no primary key or NOT NULL unique key: its gold table is "
            'a change table (README, "Tables without a key"), which a snapshot\'s rows, having no identity, cannot '
            "start; leave it out with --tables"
        )


def _filesystem(location: str, what: str):
    import fsspec.core

    try:
        fs, root = fsspec.core.url_to_fs(location)
    except (ImportError, ValueError) as exc:
        raise ConfigError(f"{what} {location}: cannot open it ({exc})") from None
    if not fs.isdir(root):
        raise ConfigError(f"{what} {location}: no such directory")
    return fs, root


def _read(fs, root: str, name: str) -> bytes:
    compression = dumpling.split_compression(name)[1]
    with fs.open(f"{root.rstrip('/')}/{name}", "rb") as f:
        return dumpling.decompress(f.read(), compression)


def _plan(fs, root: str, location: str, tables: frozenset[tuple[str, str]] | None, what: str):
    prefix = root.rstrip("/") + "/"
    names = [path.removeprefix(prefix) for path in fs.find(root) if path.startswith(prefix)]
    if "metadata" not in names:
        raise ConfigError(f"{what} {location}: no 'metadata' file (not a Dumpling export?)")
    try:
        export = dumpling.plan_export(names, _read(fs, root, "metadata").decode("utf-8", "replace"))
    except dumpling.ExportError as exc:
        raise ConfigError(f"{what} {location}: {exc}") from None
    present = set(export.schemas)
    missing = sorted(f"{d}.{t}" for d, t in (tables or frozenset()) - present)
    if missing:
        raise ConfigError(f"{what} {location}: the export has no table {', '.join(missing)}")
    return export, present if tables is None else set(tables)


def _published_ts(spark, source: str) -> int | None:
    from spark_jobs.gold.publish import latest_publication

    publication = latest_publication(spark, source)
    return publication["consistent_ts"] if publication is not None else None


def parse_rows(spark, plan: ExportPlan, csv: dumpling.CsvOptions | None, progress, what: str):
    """Every data file parsed by its own Spark task into snapshot row changes (persisted; the caller unpersists
    them): (the rows or None; rows per table). A file that does not read as Dumpling writes it raises ConfigError
    with its line."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    from spark_jobs.silver.decode import DECODED_SCHEMA, row_key

    location, snapshot_ts, files, schemas = plan.location, plan.export.snapshot_ts, plan.files, plan.schemas
    if not files:
        return None, {}
    csv = csv or dumpling.CsvOptions()
    sc = spark.sparkContext
    rows_read = sc.accumulator(0)
    files_read = sc.accumulator(0)
    wanted = {name: {c["name"]: c["type"] for c in schema["columns"]} for name, schema in schemas.items()}
    keys = {  # in the table's column order, as TiCDC sends the handle key: the same row_key as the stream's
        name: [c["name"] for c in schema["columns"] if c["name"] in schema["key_columns"]]
        for name, schema in schemas.items()
    }

    def read_files(part):
        import fsspec.core

        fs, root = fsspec.core.url_to_fs(location)
        for file in part:
            name = (file.database, file.table)
            schema = {"columns": [{"name": n, "type": t} for n, t in wanted[name].items()]}
            data = _read(fs, root, file.name)
            count = 0
            for count, row in enumerate(dumpling.canonical_rows(file, data, schema, csv), start=1):
                yield (
                    f"dumpling:{file.name}", 0, count, 0, "row", "insert", file.database, file.table, snapshot_ts,
                    row_key(keys[name], None, row), keys[name], None, row, wanted[name], None, None, None, None,
                    ["snapshot"], None,
                )  # fmt: skip
            rows_read.add(count)
            files_read.add(1)

    parsed = spark.createDataFrame(
        sc.parallelize(files, len(files)).mapPartitions(read_files), from_arrow_schema(DECODED_SCHEMA)
    ).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        with _progress_while(progress, len(files), files_read, rows_read):
            counts = {
                (r["database"], r["table"]): r["n"]
                for r in parsed.groupBy("database", "table").agg(F.count("*").alias("n")).collect()
            }
    except Exception as exc:
        parsed.unpersist()
        found = _EXPORT_ERROR.findall(str(exc))
        if found:
            raise ConfigError(f"{what} {location}: {found[-1].strip()}") from None
        raise
    return parsed, counts


class _progress_while:
    """Calls `progress(files_done, files, rows, seconds)` every second (and logs every PROGRESS_SECONDS) while
    the block runs; the accumulators grow as Spark tasks finish."""

    def __init__(self, progress, files: int, files_read, rows_read):
        self.progress, self.files, self.files_read, self.rows_read = progress, files, files_read, rows_read
        self.stop = threading.Event()

    def __enter__(self):
        self.started = time.monotonic()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self) -> None:
        last_log = self.started
        while not self.stop.wait(1.0):
            now = time.monotonic()
            self._report(now)
            if now - last_log >= PROGRESS_SECONDS:
                last_log = now
                done, rows = self.files_read.value, self.rows_read.value
                log.info(
                    "snapshot load: %d/%d files, %d rows, %.0f rows/s",
                    done,
                    self.files,
                    rows,
                    rows / (now - self.started),
                )

    def _report(self, now: float) -> None:
        if self.progress is not None:
            self.progress(self.files_read.value, self.files, self.rows_read.value, now - self.started)

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        self._report(time.monotonic())
        return False
