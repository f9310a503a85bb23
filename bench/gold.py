"""Gold's cost against the size of a table and against the number of tables.

    python bench/gold.py [--sizes 1000000,10000000] [--delta 10000] [--runs 2] [--variants hard,soft,partitioned]
    python bench/gold.py --tables 60,1000 [--touched-percent 1] [--rows 3] [--runs 2]
    python bench/gold.py --batches 40 [--batch-tables 4] [--batch-changes 1800] [--compact-every 10]
    python bench/gold.py --versions 100,1000

Each case runs in its own subprocess (one JVM and one embedded Derby metastore each, under
`.local/bench/gold/<case>/`, started fresh; Spark `local[2]`, driver memory 6g). Silver is seeded through the
silver writers (`merges.merge_ddl_events`, `merges.merge_row_changes`, `merges.merge_watermarks`) and the run
log (`build.record_run`), exactly as a silver run leaves them; only `build_gold` is timed. Each `build_gold`
includes the dbt staging and intermediate models, the gold and history models, the dbt tests and the
publication, as a scheduled run does. Nothing is asserted.

Size mode (`--sizes`): does a run cost what changed, or what the table holds? One upstream table,
`bench.orders` (6 columns, key `id`), created by a CREATE TABLE DDL event and filled by N inserts. Timed:

- initial: `build_gold` from that silver (gold and history built from scratch);
- incremental, `--runs` times: a delta of `--delta` new changes (60% updates, 25% inserts, 15% deletes of
  distinct keys, newer than the published ts) is written to silver (not timed), then `build_gold` applies it;
  the history table's growth per run is read from its snapshots (versions and bytes added);
- rebuild: `build_gold(rebuild=True)` at the same state, gold and history replaced from silver: the floor
  an incremental run is measured against.

The delta is the same number of changes at every size (by default 1% of the 1M table) so that the 10M/1M
ratio of incremental seconds says whether a run's cost follows the delta or the table: the goal is
10M/1M <= 1.5.

`--variants` runs the same cases per gold setting of the table (`VARIANTS`; each in its own subprocess and
lakehouse): `hard` (the default deletes, unpartitioned), `soft` (soft deletes: the merge reads each deleted row's
last values), `partitioned` (`bucket(8, customer_id)`, sorted by `id`: the merge writes into 8 partitions, its
deletes spread over all of them). Each variant's incremental run is reported against `hard`'s, the floor
measured in the same run.

Tables mode (`--tables`): does a run cost the tables it touches, or every table of the source? N upstream
tables `many.t<i>` (`id` int key, `n` int), each created by a DDL event and given `--rows` inserts, with a
watermark after them (as tests/e2e/test_gold_cost.py seeds them). Timed:

- first build: all N tables built from silver (seconds per table; goal <= 0.5);
- then, `--runs` times each: `--touched-percent` of the tables (at least one) get an update and an insert;
  only a newer watermark (no table changes: goal <= 5 s); 3 tables spread over the N get an update and an
  insert.

The same runs on a source of only 3 tables (its own subprocess) give the floor: touching 3 tables among N
against touching the same 3 alone says what the untouched tables cost a run (goal <= 1.2 at N = 1000). Each
run's count of tables built is reported, so an untouched table that is built shows.

Batches mode (`--batches`): does a long-running continuous driver's gold cost more the longer it runs? Each
merge-on-read MERGE adds a data file and a delete file to its table and joins the whole table, so without
compaction a batch's gold grows with the batches before it. `--batch-tables` tables of the many-tables shape, 50
rows each, then N runs of `--batch-changes` changes into every table (a third updates, the rest inserts), as a
continuous batch at 2,000 changes/s over 20 tables gives each table. Twice, each in its own subprocess: without
compaction, and compacted as the continuous driver compacts (`continuous.due_for_compaction`, after
`--compact-every` batches; `steps.maintaining.compact_gold`). Reported: the mean seconds of a run per window of
`--compact-every` runs, the compactions' seconds, and the last window's mean against the first's
(the first run of all left out: it warms the session). What is left of the growth with compaction follows the
tables' rows (each run adds about two thirds of its changes to every table and all of them to its history).

Versions mode (`--versions`): does the plan's reading of a table's DDL history cost what the history holds, or
its square? N schema versions of a 50-column table, each renaming a column and every tenth retyping one (the types
each version's values go through, `gold.plan.plan_versions`), in this process, no Spark; best of 5. The floor is
reading the versions' column lists (`json.loads`), which the plan does first and which grows with the versions
as the plan should. Reported: the plan against its floor at each number of versions, and the plan's time over
its floor's at the most versions against the same at the fewest (goal <= 1.5: the plan as linear as its reading).
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.harness import bench_pipeline, best_of, fresh_lake, run_child, summary_row, write_summary  # noqa: E402

BENCH_DIR = ROOT / ".local" / "bench" / "gold"
SOURCE = "bench"
TOPIC = "bench_gold"
DATABASE, TABLE = "bench", "orders"
CREATE_TABLE = (
    "CREATE TABLE `orders` (`id` BIGINT NOT NULL, `customer_id` BIGINT, `status` VARCHAR(16), "
    "`amount` DECIMAL(12,2), `note` VARCHAR(64), `updated_at` DATETIME, PRIMARY KEY (`id`))"
)
COLUMN_TYPES = {
    "id": "bigint",
    "customer_id": "bigint",
    "status": "varchar",
    "amount": "decimal",
    "note": "varchar",
    "updated_at": "datetime",
}
BASE_MS = 1_763_800_000_000
ROWS_PER_MS = 1_000  # commit ts advances one millisecond per this many changes
RESULT_PREFIX = "BENCH-GOLD-RESULT "

log = logging.getLogger("bench.gold")


def tso(physical_ms: int) -> int:
    return physical_ms << 18


# ---- silver as a silver run leaves it ----------------------------------------------------------------------


def decoded_changes(spark, first_offset: int, count: int, first_ms: int, plan: str):
    """`count` decoded row changes (the shape `decode_batches` emits) at offsets from `first_offset`, commit ts
    from `first_ms`. `plan` is a SQL expression of `i` (0-based) giving (op, id) as a struct."""
    types_sql = ", ".join(f"'{k}', '{v}'" for k, v in COLUMN_TYPES.items())
    image = (
        "map('id', cast(change.id as string), 'customer_id', cast(pmod(change.id * 31, 50000) as string), "
        "'status', element_at(array('new', 'paid', 'shipped', 'done'), cast(pmod(i + change.id, 4) + 1 as int)), "
        "'amount', format_string('%d.%02d', pmod(change.id * 7 + i, 100000), pmod(i, 100)), "
        "'note', concat('order note ', cast(pmod(change.id * 13 + i, 1000003) as string)), "
        "'updated_at', date_format(timestamp_millis({ms}), 'yyyy-MM-dd HH:mm:ss'))"
    )
    return (
        spark.range(count)
        .withColumnRenamed("id", "i")
        .selectExpr("i", f"{plan} as change")
        .selectExpr(
            f"'{TOPIC}' as topic",
            "0 as partition",
            f"{first_offset} + i as offset",
            "0 as event_index",
            "'row' as kind",
            "change.op as op",
            f"'{DATABASE}' as database",
            f"'{TABLE}' as `table`",
            f"shiftleft(cast({first_ms} + div(i, {ROWS_PER_MS}) as bigint), 18) as commit_ts",
            "to_json(array(cast(change.id as string))) as row_key",
            "array('id') as key_columns",
            f"case when change.op <> 'insert' then {image.format(ms=f'{first_ms} - 1')} end as before",
            f"case when change.op <> 'delete' then {image.format(ms=f'{first_ms} + div(i, {ROWS_PER_MS})')} end as after",
            f"map({types_sql}) as column_types",
            "cast(null as bigint) as schema_version",
            "cast(null as string) as ddl_type",
            "cast(null as string) as ddl_sql",
            "cast(null as string) as table_schema",
            "cast(array() as array<string>) as flags",
            "cast(null as string) as reason",
        )
    )


def silver_run(spark, config, decoded, ddl: bool = False, source: str = SOURCE) -> None:
    """Write one batch of decoded events as a silver run does (`decode_and_write`): DDL, row changes, watermarks,
    then the run's record."""
    from pyspark.sql import functions as F

    from spark_jobs.silver import build, merges

    started = time.monotonic()
    seq = build.next_silver_seq(spark, source)
    decoded = decoded.withColumn("source", F.lit(source)).cache()
    tally = decoded.groupBy("kind", "database", "table").count().collect()
    counts: dict[str, int] = {}
    for r in tally:
        counts[r["kind"]] = counts.get(r["kind"], 0) + r["count"]
    if ddl:
        merges.merge_ddl_events(spark, source, "canal-json", decoded)
    if counts.get("row"):
        tables = sum(r["kind"] == "row" for r in tally)
        merges.merge_row_changes(spark, source, decoded, seq, None, tables, counts["row"])
    if counts.get("watermark"):
        merges.merge_watermarks(spark, decoded)
    decoded.unpersist()
    counts["messages"] = counts["decoded"] = sum(counts.values())
    build.record_run(spark, config, source, "incremental", None, counts, started, silver_seq=seq)


def decoded_schema():
    from pyspark.sql.pandas.types import from_arrow_schema

    from spark_jobs.silver.decode import DECODED_SCHEMA

    return from_arrow_schema(DECODED_SCHEMA)


def create_table_event(spark):
    schema = decoded_schema()
    row = dict.fromkeys(schema.names)
    row.update(
        topic=TOPIC,
        partition=0,
        offset=0,
        event_index=0,
        kind="ddl",
        database=DATABASE,
        table=TABLE,
        commit_ts=tso(BASE_MS - 1),
        ddl_type="create_table",
        ddl_sql=CREATE_TABLE,
        flags=[],
    )
    return spark.createDataFrame([row], schema)


def delta_plan(size: int, delta: int, run: int) -> str:
    """60% updates, 25% inserts, 15% deletes; updated and deleted keys are distinct within a run and spread
    over the whole table (a stride coprime with the size), inserted keys are new."""
    updates, deletes = delta * 60 // 100, delta * 15 // 100
    stride, start = 7_919, run * 104_729
    existing = f"pmod({start} + i * {stride}, {size}) + 1"
    new_id = f"{size} + {run * delta} + i - {updates + deletes} + 1"
    return (
        f"case when i < {updates} then named_struct('op', 'update', 'id', {existing}) "
        f"when i < {updates + deletes} then named_struct('op', 'delete', 'id', {existing}) "
        f"else named_struct('op', 'insert', 'id', cast({new_id} as bigint)) end"
    )


# ---- one size, in its own process ---------------------------------------------------------------------------


# the gold settings of the table per variant (`--variants`): GoldSettings' keyword arguments
VARIANTS: dict[str, dict] = {
    "hard": {},
    "soft": {"deletes": "soft"},
    "partitioned": {
        "layouts": {f"{DATABASE}.{TABLE}": {"partition_by": ["bucket(8, customer_id)"], "sort_by": ["id"]}}
    },
}


def gold_settings(variant: str):
    from spark_jobs.config import GoldSettings, TableLayout

    settings = dict(VARIANTS[variant])
    settings["layouts"] = {glob: TableLayout(**layout) for glob, layout in settings.get("layouts", {}).items()}
    return GoldSettings(**settings)


def bench_config(
    lake_dir: Path, source_name: str = SOURCE, topic: str = TOPIC, options: dict | None = None, variant: str = "hard"
):
    from spark_jobs.config import KafkaSettings, SourceSettings

    source = SourceSettings(
        name=source_name,
        protocol="canal-json",
        kafka=KafkaSettings(bootstrap_servers="127.0.0.1:1"),
        topics=[topic],
        options=options or {},
        gold=gold_settings(variant),
    )
    return bench_pipeline([source], lake_dir, "bench-gold", "6g", shuffle_partitions=8)


class DbtTimer:
    """Seconds spent in each `run_dbt` call of `build_gold`, by its first arguments."""

    def __init__(self):
        from spark_jobs.gold import build

        self.module, self.original, self.seconds = build, build.run_dbt, {}

    def __enter__(self) -> DbtTimer:
        def timed(args, *rest, **kwargs):
            started = time.monotonic()
            try:
                return self.original(args, *rest, **kwargs)
            finally:
                step = " ".join(args[:3])
                self.seconds[step] = self.seconds.get(step, 0.0) + time.monotonic() - started

        self.module.run_dbt = timed
        return self

    def __exit__(self, *exc) -> None:
        self.module.run_dbt = self.original


def timed_gold(spark, config, rebuild: bool = False, source: str = SOURCE) -> dict:
    """One `build_gold`: its seconds, dbt's share of them, its phases and how many upstream tables it built."""
    from spark_jobs.gold.build import build_gold

    with DbtTimer() as timer:
        started = time.monotonic()
        result = build_gold(spark, config, source, rebuild=rebuild)
        seconds = time.monotonic() - started
    return {
        "seconds": seconds,
        "steps": timer.seconds,
        "phases": result.phases,
        "built": len(result.built) // 2,
        "relations": result.built,
    }


def history_growth(spark, relation: str, versions_before: int, since_ms: int) -> dict:
    """What a run added to the history table: versions (rows), and the records and bytes its snapshots after
    `since_ms` wrote (a closed version is written again with its end: merge-on-read)."""
    rows = spark.sql(
        f"SELECT summary FROM {relation}.snapshots WHERE committed_at > timestamp_millis(:since)",
        args={"since": since_ms},
    ).collect()
    added = {"versions": spark.table(relation).count() - versions_before, "records": 0, "bytes": 0}
    for (summary,) in rows:
        added["records"] += int(summary.get("added-records", 0))
        added["bytes"] += int(summary.get("added-files-size", 0))  # data and delete files
    return added


def one_size(size: int, delta: int, runs: int, variant: str = "hard") -> dict:
    from spark_jobs.gold import names
    from spark_jobs.runtime.spark_session import get_spark

    lake_dir = BENCH_DIR / (str(size) if variant == "hard" else f"{size}-{variant}")
    fresh_lake(lake_dir)
    config = bench_config(lake_dir, variant=variant)
    spark = get_spark(config, app_name=f"bench-gold-{size}-{variant}")
    out: dict = {"size": size, "delta": delta, "variant": variant}
    try:
        from spark_jobs.runtime.tables import ensure_tables

        ensure_tables(spark, "silver")
        started = time.monotonic()
        silver_run(spark, config, create_table_event(spark), ddl=True)
        silver_run(spark, config, decoded_changes(spark, 1, size, BASE_MS, "named_struct('op', 'insert', 'id', i + 1)"))
        out["seed_s"] = time.monotonic() - started
        log.info("%s rows: silver seeded in %.0fs", f"{size:,}", out["seed_s"])

        out["initial"] = timed_gold(spark, config)
        log.info("%s rows: initial build_gold %.1fs", f"{size:,}", out["initial"]["seconds"])
        history = f"{names.gold_namespace(SOURCE)}.{names.history_table(DATABASE, TABLE)}"
        offset, first_ms = size + 1, BASE_MS + size // ROWS_PER_MS + 1
        out["incremental"] = []
        for run in range(1, runs + 1):
            silver_run(spark, config, decoded_changes(spark, offset, delta, first_ms, delta_plan(size, delta, run)))
            offset, first_ms = offset + delta, first_ms + delta // ROWS_PER_MS + 1
            versions, since = spark.table(history).count(), int(time.time() * 1000)
            step = timed_gold(spark, config)
            step["history"] = history_growth(spark, history, versions, since)
            out["incremental"].append(step)
            log.info("%s rows: incremental run %d: %.1fs", f"{size:,}", run, step["seconds"])
        out["rebuild"] = timed_gold(spark, config, rebuild=True)
        log.info("%s rows: rebuild %.1fs", f"{size:,}", out["rebuild"]["seconds"])
    finally:
        spark.stop()
    return out


# ---- many tables, in its own process ------------------------------------------------------------------------

TABLES_SOURCE = "bench_tables"
TABLES_TOPIC = "bench_gold_tables"
FLOOR_TABLES = 3  # the floor's source holds only the 3 tables the ratio's runs touch


def many_tables(count: int) -> list:
    """`count` small upstream tables, as tests/e2e/test_gold_cost.py declares them."""
    from ticdc_devkit.simulator.model import Column, Table

    columns = (Column("id", "int", nullable=False), Column("n", "int"))
    return [Table("many", f"t{i}", columns, ("id",), table_id=900 + i) for i in range(count)]


def spread(tables: list, count: int) -> list:
    """`count` of the tables, evenly spread (the first one always among them)."""
    return [tables[i * len(tables) // count] for i in range(count)]


class TablesSilver:
    """Silver of the many-tables source, one silver run per batch: each batch's events take the next offsets of
    the topic's one partition and the next commit timestamps, and a watermark follows them. Upstream's rows are
    followed so that an update carries the row's before image."""

    def __init__(self, spark, config, tables: list):
        self.spark, self.config, self.tables = spark, config, tables
        self.schema = decoded_schema()
        self.offset, self.ms = 0, BASE_MS
        self.rows: dict[str, dict[int, int]] = {t.name: {} for t in tables}  # table -> key -> n

    def event(self, kind: str, **fields) -> dict:
        row = dict.fromkeys(self.schema.names)
        row.update(topic=TABLES_TOPIC, partition=0, offset=self.offset, event_index=0, kind=kind, flags=[])
        row.update(commit_ts=tso(self.ms), **fields)
        self.offset, self.ms = self.offset + 1, self.ms + 1
        return row

    def change(self, table, op: str, key: int, n: int | None) -> dict:
        before = self.rows[table.name].get(key)
        if n is None:
            self.rows[table.name].pop(key)
        else:
            self.rows[table.name][key] = n
        return self.event(
            "row",
            op=op,
            database=table.database,
            table=table.name,
            row_key=json.dumps([str(key)]),
            key_columns=list(table.key),
            before=None if before is None else {"id": str(key), "n": str(before)},
            after=None if n is None else {"id": str(key), "n": str(n)},
            column_types={"id": "int", "n": "int"},
        )

    def run(self, events: list[dict], ddl: bool = False) -> None:
        events.append(self.event("watermark"))
        silver_run(self.spark, self.config, self.spark.createDataFrame(events, self.schema), ddl, TABLES_SOURCE)

    def seed(self, rows: int) -> None:
        """A CREATE TABLE per table, then `rows` inserts into each."""
        from ticdc_devkit.simulator.workload import create_table_sql

        events = [
            self.event("ddl", database=t.database, table=t.name, ddl_type="create_table", ddl_sql=create_table_sql(t))
            for t in self.tables
        ]
        events += [self.change(t, "insert", key, key) for t in self.tables for key in range(rows)]
        self.run(events, ddl=True)

    def touch(self, tables: list) -> None:
        """An update of the first row and an insert of a new row into each of `tables`."""
        events = []
        for t in tables:
            rows = self.rows[t.name]
            events += [self.change(t, "update", 0, rows[0] + 1), self.change(t, "insert", max(rows) + 1, 0)]
        self.run(events)

    def watermark(self) -> None:
        """Only the consistent timestamp moves."""
        self.run([])

    def grow(self, tables: list, changes: int) -> None:
        """`changes` row changes into each of `tables`: a third updates of rows spread over what it holds, the
        rest inserts of new rows."""
        events = []
        for t in tables:
            rows = self.rows[t.name]
            keys, updates = sorted(rows), changes // 3
            events += [
                self.change(t, "update", k, rows[k] + 1) for k in keys[:: max(len(keys) // updates, 1)][:updates]
            ]
            first = max(rows) + 1
            events += [self.change(t, "insert", first + i, i) for i in range(changes - updates)]
        self.run(events)


def tables_session(name: str):
    """A fresh lakehouse for the many-tables source under `name`, its Spark session and configuration, with
    bronze's committed offsets set so that silver's watermarks make the consistent ts."""
    from spark_jobs.bronze.land import offsets_property
    from spark_jobs.runtime.spark_session import get_spark
    from spark_jobs.runtime.tables import BRONZE_MESSAGES, ensure_tables
    from ticdc_devkit.simulator.stream import EXTENSION_OPTIONS

    lake_dir = BENCH_DIR / name
    fresh_lake(lake_dir)
    config = bench_config(lake_dir, TABLES_SOURCE, TABLES_TOPIC, EXTENSION_OPTIONS["canal-json"])
    spark = get_spark(config, app_name=f"bench-gold-{name}")
    ensure_tables(spark, "bronze")
    ensure_tables(spark, "silver")
    # the consistent ts is the lowest watermark over the partitions landing committed: here the topic's one
    offsets = json.dumps({TABLES_TOPIC: {"0": 1}})
    spark.sql(f"ALTER TABLE {BRONZE_MESSAGES} SET TBLPROPERTIES ('{offsets_property(TABLES_SOURCE)}' = '{offsets}')")
    return spark, config


def one_tables(count: int, percent: float, rows: int, runs: int) -> dict:
    spark, config = tables_session(f"tables-{count}")
    tables = many_tables(count)
    touched = max(1, round(count * percent / 100))
    out: dict = {"tables": count, "rows": rows, "touched": touched, "touch": [], "none": [], "three": []}
    try:
        silver = TablesSilver(spark, config, tables)
        started = time.monotonic()
        silver.seed(rows)
        out["seed_s"] = time.monotonic() - started
        log.info("%d tables: silver seeded in %.0fs", count, out["seed_s"])

        out["first"] = timed_gold(spark, config, source=TABLES_SOURCE)
        log.info("%d tables: first build %.1fs", count, out["first"]["seconds"])
        for run in range(1, runs + 1):
            for case, touch in (
                ("touch", lambda: silver.touch(spread(tables, touched))),
                ("none", silver.watermark),
                ("three", lambda: silver.touch(spread(tables, FLOOR_TABLES))),
            ):
                touch()
                out[case].append(timed_gold(spark, config, source=TABLES_SOURCE))
                step = out[case][-1]
                log.info("%d tables: run %d, %s: %.1fs, %d built", count, run, case, step["seconds"], step["built"])
    finally:
        spark.stop()
    return out


# ---- batches of a long-running driver, in its own process ------------------------------------------------------

BATCH_SEED_ROWS = 50


def one_batches(batches: int, table_count: int, changes: int, compact_every: int) -> dict:
    """`batches` gold runs of `changes` changes into each of `table_count` tables; with `compact_every`, the tables
    are compacted as the continuous driver compacts them, after that many batches. 0: never compacted."""
    from collections import Counter

    from spark_jobs.steps import continuous
    from spark_jobs.steps.maintaining import compact_gold

    spark, config = tables_session(f"batches-{compact_every}")
    tables = many_tables(table_count)
    out: dict = {"tables": table_count, "changes": changes, "compact_every": compact_every, "runs": []}
    try:
        silver = TablesSilver(spark, config, tables)
        silver.seed(BATCH_SEED_ROWS)
        out["first"] = timed_gold(spark, config, source=TABLES_SOURCE)
        built: Counter[str] = Counter()
        for run in range(1, batches + 1):
            silver.grow(tables, changes)
            step = timed_gold(spark, config, source=TABLES_SOURCE)
            built.update(step.pop("relations"))
            due = continuous.due_for_compaction(built, compact_every) if compact_every else []
            if due:
                step["compaction_s"] = compact_gold(TABLES_SOURCE, due, config).seconds
                for relation in due:
                    del built[relation]
            out["runs"].append(step)
            log.info(
                "batches (compact every %s): run %d: %.1fs%s",
                compact_every or "never",
                run,
                step["seconds"],
                f", compacted {len(due)} tables in {step['compaction_s']:.1f}s" if due else "",
            )
    finally:
        spark.stop()
    return out


# ---- the parent: one subprocess per size, then the table -----------------------------------------------------


def run_size(size: int, delta: int, runs: int, variant: str = "hard") -> dict | None:
    script = str(Path(__file__).resolve())
    cmd = [sys.executable, script, "--one", str(size), "--delta", str(delta), "--runs", str(runs)]
    return run_child([*cmd, "--variant", variant], RESULT_PREFIX, f"{size:,} rows ({variant})")


def report(results: list[dict]) -> None:
    print()
    print("seconds of build_gold (dbt staging + intermediate, gold + history models, dbt tests, publication);")
    print("incremental: best of the runs; Spark local[2] on a shared 2-core machine (noisy).")
    header = (
        f"{'rows':>11} {'variant':>12} {'delta':>7} {'initial s':>10} {'incremental s':>14} {'rebuild s':>10} "
        f"{'incr/rebuild':>13} {'history +versions/run':>22} {'+records written':>17} {'+MB':>6}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        best = min(r["incremental"], key=lambda s: s["seconds"])
        runs = len(r["incremental"])
        versions = sum(s["history"]["versions"] for s in r["incremental"]) / runs
        records = sum(s["history"]["records"] for s in r["incremental"]) / runs
        mb = sum(s["history"]["bytes"] for s in r["incremental"]) / runs / 1e6
        print(
            f"{r['size']:>11,} {r['variant']:>12} {r['delta']:>7,} {r['initial']['seconds']:>10.1f} "
            f"{best['seconds']:>14.1f} "
            f"{r['rebuild']['seconds']:>10.1f} {best['seconds'] / r['rebuild']['seconds']:>13.2f} "
            f"{versions:>22,.0f} {records:>17,.0f} {mb:>6.2f}"
        )
    print()
    print("where an incremental run's time goes (seconds, best run):")
    for r in results:
        best = min(r["incremental"], key=lambda s: s["seconds"])
        steps = ", ".join(f"dbt {k} {v:.1f}" for k, v in best["steps"].items())
        print(
            f"  {r['size']:>11,} {r['variant']}: {steps}; "
            f"counts and publication {best['seconds'] - sum(best['steps'].values()):.1f}"
        )
    for variant, hard, r in variant_pairs(results):
        print(
            f"  {variant} against hard at {r['size']:,} rows: incremental {incremental_s(r):.1f} s against "
            f"{incremental_s(hard):.1f} s = {incremental_s(hard) / incremental_s(r):.2f} of the floor"
        )
    hards = [r for r in results if r["variant"] == "hard"]
    if len(hards) >= 2:
        small, large = hards[0], hards[-1]
        ratio = incremental_s(large) / incremental_s(small)
        print()
        print(
            f"goal: incremental {large['size']:,} / {small['size']:,} <= 1.5: {ratio:.2f} "
            f"({'met' if ratio <= 1.5 else 'NOT met'})"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000,10000000", help="rows in the table, comma-separated")
    parser.add_argument("--delta", type=int, default=10_000, help="changes per incremental run (default 10,000)")
    parser.add_argument(
        "--runs",
        type=int,
        default=2,
        help="incremental runs per size, or runs of each case per number of tables (default 2)",
    )
    parser.add_argument("--tables", help="many-tables mode: numbers of tables, comma-separated (e.g. 60,1000)")
    parser.add_argument("--touched-percent", type=float, default=1.0, help="tables touched per run (default 1%%)")
    parser.add_argument("--rows", type=int, default=3, help="rows per table in many-tables mode (default 3)")
    parser.add_argument(
        "--variants", default="hard", help=f"size mode: gold settings of the table, of {', '.join(VARIANTS)}"
    )
    parser.add_argument(
        "--batches", type=int, help="batches mode: gold runs of a long-running driver, without and with compaction"
    )
    parser.add_argument("--batch-tables", type=int, default=4, help="tables in batches mode (default 4)")
    parser.add_argument(
        "--batch-changes", type=int, default=1_800, help="changes into each table a run, batches mode (default 1,800)"
    )
    parser.add_argument(
        "--compact-every", type=int, default=10, help="runs that build a table before it is compacted (default 10)"
    )
    parser.add_argument("--versions", help="versions mode: schema versions of one table, comma-separated (100,1000)")
    parser.add_argument("--json", help="write the summary rows for `make bench` here")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # internal: run one size, print a JSON line
    parser.add_argument("--variant", default="hard", choices=list(VARIANTS), help=argparse.SUPPRESS)  # with --one
    parser.add_argument("--one-tables", type=int, help=argparse.SUPPRESS)  # internal: one number of tables
    parser.add_argument("--one-batches", type=int, help=argparse.SUPPRESS)  # internal: batches, one way
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s", datefmt="%H:%M:%S"
    )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the `finally` clean-ups
    if args.one:
        print(RESULT_PREFIX + json.dumps(one_size(args.one, args.delta, args.runs, args.variant)), flush=True)
        return 0
    if args.one_tables:
        result = one_tables(args.one_tables, args.touched_percent, args.rows, args.runs)
        print(RESULT_PREFIX + json.dumps(result), flush=True)
        return 0
    if args.one_batches:
        result = one_batches(args.one_batches, args.batch_tables, args.batch_changes, args.compact_every)
        print(RESULT_PREFIX + json.dumps(result), flush=True)
        return 0
    if args.tables:
        return main_tables(args)
    if args.batches:
        return main_batches(args)
    if args.versions:
        return main_versions(args)
    sizes = sorted(int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip())
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        parser.error(f"--variants: no variant {', '.join(unknown)}; of {', '.join(VARIANTS)}")
    results, failed = [], []
    for size in sizes:
        for variant in variants:
            r = run_size(size, args.delta, args.runs, variant)
            (results if r is not None else failed).append(r if r is not None else size)
    if results:
        report(results)
        write_summary(args.json, summary(results))
    return 1 if failed else 0


def incremental_s(result: dict) -> float:
    """The best incremental run's seconds."""
    return min(s["seconds"] for s in result["incremental"])


def variant_pairs(results: list[dict]) -> list[tuple[str, dict, dict]]:
    """(variant, the hard result of its size, its result) for each variant other than hard measured beside it."""
    hard = {r["size"]: r for r in results if r["variant"] == "hard"}
    return [(r["variant"], hard[r["size"]], r) for r in results if r["variant"] != "hard" and r["size"] in hard]


def summary(results: list[dict]) -> list[dict]:
    """`make bench`'s lines: each size's incremental run against its rebuild, each variant's against hard's, and
    the largest against the smallest."""
    rows = []
    for r in results:
        best = incremental_s(r)
        variant = "" if r["variant"] == "hard" else f" ({r['variant']})"
        rows.append(
            summary_row(
                "gold",
                f"{r['delta']:,} changes into {r['size']:,} rows{variant}",
                f"incremental {best:.1f} s",
                f"rebuild {r['rebuild']['seconds']:.1f} s",
                r["rebuild"]["seconds"] / best,
            )
        )
    for variant, hard, r in variant_pairs(results):
        rows.append(
            summary_row(
                "gold",
                f"incremental {variant} / hard, {r['size']:,} rows",
                f"{incremental_s(r):.1f} s",
                f"{incremental_s(hard):.1f} s",
                incremental_s(hard) / incremental_s(r),
            )
        )
    hards = [r for r in results if r["variant"] == "hard"]
    if len(hards) >= 2:
        small, large = hards[0], hards[-1]
        small_s, large_s = incremental_s(small), incremental_s(large)
        rows.append(
            summary_row(
                "gold",
                f"incremental into {large['size']:,} rows / into {small['size']:,}",
                f"{large_s:.1f} s",
                f"{small_s:.1f} s",
                large_s / small_s,
                "<= 1.5",
            )
        )
    return rows


# ---- the parent, many tables: one subprocess per number of tables and one for the floor ----------------------


def run_tables(count: int, percent: float, rows: int, runs: int) -> dict | None:
    script = str(Path(__file__).resolve())
    cmd = [sys.executable, script, "--one-tables", str(count), "--touched-percent", str(percent)]
    cmd += ["--rows", str(rows), "--runs", str(runs)]
    return run_child(cmd, RESULT_PREFIX, f"{count} tables")


def best(r: dict, case: str) -> dict:
    return min(r[case], key=lambda s: s["seconds"])


def unexpected_builds(r: dict) -> list[str]:
    """The runs that built other than the tables they touched (an untouched table built, or a touched one not)."""
    wanted = {"touch": r["touched"], "none": 0, "three": FLOOR_TABLES}
    odd = [f"first build built {r['first']['built']}"] if r["first"]["built"] != r["tables"] else []
    for case, count in wanted.items():
        odd += [
            f"{case} run {i} built {s['built']} (touched {count})"
            for i, s in enumerate(r[case], 1)
            if s["built"] != count
        ]
    return odd


def tables_report(results: list[dict], floor: dict, percent: float) -> None:
    print()
    print("seconds of build_gold (dbt staging + intermediate, gold + history models, dbt tests, publication),")
    print(
        f"best of the runs; tables of 2 int columns and {floor['rows']} rows; Spark local[2] on a shared 2-core machine."
    )
    header = (
        f"{'tables':>7} {'first s':>8} {'s/table':>8} {'touched':>8} {'touch s':>8} {'s/touched':>10} "
        f"{'none s':>7} {'touch 3 s':>10} {'3 alone s':>10} {'ratio':>6}"
    )
    print(header)
    print("-" * len(header))
    alone = best(floor, "three")["seconds"]
    for r in [floor, *results]:
        touch, three = best(r, "touch")["seconds"], best(r, "three")["seconds"]
        print(
            f"{r['tables']:>7,} {r['first']['seconds']:>8.1f} {r['first']['seconds'] / r['tables']:>8.2f} "
            f"{r['touched']:>8,} {touch:>8.1f} {touch / r['touched']:>10.1f} {best(r, 'none')['seconds']:>7.1f} "
            f"{three:>10.1f} {alone:>10.1f} {three / alone:>6.2f}"
        )
    print()
    print("where a run's time goes (seconds per phase of build_gold, best run):")
    for r in [floor, *results]:
        for case, label in (("touch", f"touch {percent:g}%"), ("none", "touch none"), ("three", "touch 3")):
            phases = ", ".join(f"{k} {v:.1f}" for k, v in best(r, case)["phases"].items())
            print(f"  {r['tables']:>6,} tables, {label:<11} {phases}")
    odd = [f"{r['tables']} tables: {line}" for r in [floor, *results] for line in unexpected_builds(r)]
    print()
    print("tables built: " + ("; ".join(odd) if odd else "as touched in every run (untouched tables pinned)"))
    for r in results:
        first, none = r["first"]["seconds"] / r["tables"], best(r, "none")["seconds"]
        ratio = best(r, "three")["seconds"] / alone
        print(
            f"goals at {r['tables']:,} tables: first build {first:.2f} s/table <= 0.5 ({met(first <= 0.5)}), "
            f"touch none {none:.1f} s <= 5 ({met(none <= 5)}), touch 3 / 3 alone {ratio:.2f} <= 1.2 ({met(ratio <= 1.2)})"
        )


def met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def tables_summary(results: list[dict], floor: dict, percent: float) -> list[dict]:
    """`make bench`'s lines: per number of tables, the first build per table, a run touching a few, one touching
    none, and touching 3 among them against touching the same 3 alone."""
    rows = []
    alone = best(floor, "three")["seconds"]
    for r in results:
        n, first = r["tables"], r["first"]["seconds"]
        touch, none, three = (best(r, case)["seconds"] for case in ("touch", "none", "three"))
        rows += [
            summary_row(
                "gold_tables", f"{n:,} tables: first build s/table", f"{first:.1f} s", "-", first / n, "<= 0.5"
            ),
            summary_row(
                "gold_tables",
                f"{n:,} tables: touch {percent:g}% ({r['touched']}) s",
                f"{touch / r['touched']:.1f} s/table",
                "-",
                touch,
            ),
            summary_row("gold_tables", f"{n:,} tables: touch none s", "watermark only", "-", none, "<= 5"),
            summary_row(
                "gold_tables",
                f"touch 3 of {n:,} / 3 alone",
                f"{three:.1f} s",
                f"{alone:.1f} s",
                three / alone,
                "<= 1.2",
            ),
        ]
    return rows


def main_tables(args) -> int:
    counts = sorted({int(s.replace("_", "")) for s in args.tables.split(",") if s.strip()})
    floor = run_tables(FLOOR_TABLES, args.touched_percent, args.rows, args.runs)
    if floor is None:
        return 1
    results, failed = [], []
    for count in counts:
        r = floor if count == FLOOR_TABLES else run_tables(count, args.touched_percent, args.rows, args.runs)
        (results if r is not None else failed).append(r if r is not None else count)
    if results:
        tables_report(results, floor, args.touched_percent)
        write_summary(args.json, tables_summary(results, floor, args.touched_percent))
    return 1 if failed else 0


# ---- the parent, batches: one subprocess without compaction and one with ------------------------------------


def run_batches(batches: int, table_count: int, changes: int, compact_every: int) -> dict | None:
    script = str(Path(__file__).resolve())
    cmd = [sys.executable, script, "--one-batches", str(batches), "--batch-tables", str(table_count)]
    cmd += ["--batch-changes", str(changes), "--compact-every", str(compact_every)]
    return run_child(cmd, RESULT_PREFIX, f"{batches} batches, compacted every {compact_every or 'never'}")


def windows(r: dict, size: int) -> list[tuple[int, int, float, float]]:
    """(first run, last run, mean seconds of a run, compaction seconds) per window of `size` runs; the first run of
    all is left out of the means (it warms the session)."""
    runs = r["runs"]
    out = []
    for start in range(0, len(runs), size):
        window = runs[start : start + size]
        timed = window[1:] if start == 0 and len(window) > 1 else window
        mean = sum(s["seconds"] for s in timed) / len(timed)
        out.append((start + 1, start + len(window), mean, sum(s.get("compaction_s", 0.0) for s in window)))
    return out


def growth(r: dict, size: int) -> float:
    """The last window's mean seconds a run (its compactions spread over its runs) against the first's."""
    spread = [mean + compactions / (last - first + 1) for first, last, mean, compactions in windows(r, size)]
    return spread[-1] / spread[0]


def batches_report(never: dict, compacted: dict) -> None:
    size = compacted["compact_every"]
    print()
    print(
        f"seconds of build_gold a run, {never['changes']:,} changes into each of {never['tables']} tables a run, "
        f"mean per window of {size} runs; Spark local[2], 2 cores."
    )
    header = f"{'runs':>9} {'not compacted':>14} {'compacted every ' + str(size):>20} {'its compactions s':>18}"
    print(header)
    print("-" * len(header))
    for a, b in zip(windows(never, size), windows(compacted, size), strict=True):
        print(f"{f'{a[0]} to {a[1]}':>9} {a[2]:>14.1f} {b[2]:>20.1f} {b[3]:>18.1f}")
    print()
    print(
        f"last window / first: not compacted {growth(never, size):.2f}, compacted {growth(compacted, size):.2f} "
        f"(compactions spread over their runs; goal <= 1.2: {met(growth(compacted, size) <= 1.2)})"
    )


def batches_summary(never: dict, compacted: dict) -> list[dict]:
    """`make bench`'s lines: the last window's run against the first's, without and with compaction."""
    size, n = compacted["compact_every"], len(compacted["runs"])
    shape = f"{n} runs of {never['changes']:,} changes into each of {never['tables']} tables"
    rows = []
    for r, label, goal in ((never, "not compacted", None), (compacted, f"compacted every {size} runs", "<= 1.2")):
        w = windows(r, size)
        rows.append(
            summary_row(
                "gold_batches",
                f"{shape}, {label}: last {size} runs / first",
                f"{w[-1][2]:.1f} s a run",
                f"{w[0][2]:.1f} s a run",
                growth(r, size),
                goal,
            )
        )
    return rows


def main_batches(args) -> int:
    never = run_batches(args.batches, args.batch_tables, args.batch_changes, 0)
    compacted = run_batches(args.batches, args.batch_tables, args.batch_changes, args.compact_every)
    if never is None or compacted is None:
        return 1
    batches_report(never, compacted)
    write_summary(args.json, batches_summary(never, compacted))
    return 0


# ---- versions: the plan's reading of a long DDL history, in this process ------------------------------------

VERSION_COLUMNS = 50
VERSION_TYPES = ("int", "bigint", "decimal(12,2)", "varchar(20)", "varchar(64)")


def schema_versions(count: int) -> list[dict]:
    """`count` live versions of one table as `int_schema_versions` gives them: each renames a column, and every
    tenth retypes one too (the types a value goes through grow with the retypes after it, not with the versions)."""
    names, types = [f"c{c}" for c in range(VERSION_COLUMNS)], ["int"] * VERSION_COLUMNS
    versions = []
    for i in range(count):
        names[i % VERSION_COLUMNS] = f"c{i % VERSION_COLUMNS}_{i}"
        if i % 10 == 0:
            types[i % VERSION_COLUMNS] = VERSION_TYPES[(i // 10) % len(VERSION_TYPES)]
        columns = [{"id": c, "name": names[c], "type": t} for c, t in enumerate(types)]
        versions.append(
            {
                "columns": json.dumps(columns),
                "valid_from_ts": i,
                "valid_to_ts": i + 1 if i + 1 < count else None,
                "upstream_database": DATABASE,
                "upstream_table": TABLE,
            }
        )
    return versions


def main_versions(args) -> int:
    from spark_jobs.gold.plan import plan_versions

    counts = sorted({int(s.replace("_", "")) for s in args.versions.split(",") if s.strip()})
    results = []
    for count in counts:
        live = schema_versions(count)
        floor, _ = best_of(lambda live=live: [json.loads(v["columns"]) for v in live], 5)
        plan, _ = best_of(lambda live=live: plan_versions(live), 5)
        results.append({"versions": count, "floor": floor, "plan": plan})
        print(
            f"{count:,} versions x {VERSION_COLUMNS} columns: plan {plan * 1000:.1f} ms, "
            f"reading them {floor * 1000:.1f} ms (the plan at {floor / plan:.2f} of its speed)"
        )
    first, last = results[0], results[-1]
    growth = (last["plan"] / last["floor"]) / (first["plan"] / first["floor"])
    if len(results) > 1:
        print(f"the plan over its floor, {last['versions']:,} versions against {first['versions']:,}: {growth:.2f}")
    rows = [
        summary_row(
            "gold_plan",
            f"{r['versions']:,} schema versions x {VERSION_COLUMNS} columns: the plan",
            f"{r['plan'] * 1000:.1f} ms",
            f"json.loads {r['floor'] * 1000:.1f} ms",
            r["floor"] / r["plan"],
        )
        for r in results
    ]
    if len(results) > 1:
        rows.append(
            summary_row(
                "gold_plan",
                f"plan / floor, {last['versions']:,} versions against {first['versions']:,}",
                f"{last['plan'] / last['floor']:.2f}",
                f"{first['plan'] / first['floor']:.2f}",
                growth,
                "<= 1.5",
            )
        )
    write_summary(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
