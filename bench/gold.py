"""Gold's cost against the size of the table: the same delta into a 1M-row and a 10M-row table.

    python bench/gold.py [--sizes 1000000,10000000] [--delta 10000] [--runs 2]

For each size, in its own subprocess (one JVM and one embedded Derby metastore each, under
`.local/bench/gold/<size>/`, started fresh; Spark `local[2]`, driver memory 6g), silver is seeded with
one upstream table, `bench.orders` (6 columns, key `id`), created by a CREATE TABLE DDL event and then
filled by N inserts, through the silver writers (`merges.merge_ddl_events`, `merges.merge_row_changes`)
and the run log (`build.record_run`), exactly as a silver run leaves them. Then, timed:

- initial: `build_gold` from that silver (gold and history built from scratch);
- incremental, `--runs` times: a delta of `--delta` new changes (60% updates, 25% inserts, 15% deletes of
  distinct keys, newer than the published ts) is written to silver as a silver run writes it (not timed), then
  `build_gold` applies it; the history table's growth per run is read from its snapshots (versions and
  bytes added);
- rebuild: `build_gold(rebuild=True)` at the same state, gold and history replaced from silver: the floor
  an incremental run is measured against.

Each `build_gold` includes the dbt staging and intermediate models, the gold and history models, the
dbt tests and the publication, as a scheduled run does. The delta is the same number of changes at
every size (by default 1% of the 1M table) so that the 10M/1M ratio of incremental seconds says whether
a run's cost follows the delta or the table: the goal is 10M/1M <= 1.5. Nothing is asserted.
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

from bench.harness import fresh_lake, run_child, summary_row, write_summary  # noqa: E402

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


def silver_run(spark, config, decoded, ddl: bool = False) -> None:
    """Write one batch of decoded changes as a silver run does: DDL, row changes, then the run's record."""
    from pyspark.sql import functions as F

    from spark_jobs.silver import build, merges

    started = time.monotonic()
    seq = build.next_silver_seq(spark, SOURCE)
    decoded = decoded.withColumn("source", F.lit(SOURCE)).cache()
    if ddl:
        merges.merge_ddl_events(spark, SOURCE, "canal-json", decoded)
    merges.merge_row_changes(spark, SOURCE, decoded, seq)
    rows = decoded.count()
    decoded.unpersist()
    build.record_run(
        spark, config, SOURCE, "incremental", None, {"messages": rows, "row": rows}, started, silver_seq=seq
    )


def create_table_event(spark):
    from pyspark.sql.pandas.types import from_arrow_schema

    from spark_jobs.silver.decode import DECODED_SCHEMA

    schema = from_arrow_schema(DECODED_SCHEMA)
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


def bench_config(lake_dir: Path):
    from spark_jobs.config import KafkaSettings, PipelineConfig, RuntimeSettings, SourceSettings, SparkSettings

    source = SourceSettings(
        name=SOURCE, protocol="canal-json", kafka=KafkaSettings(bootstrap_servers="127.0.0.1:1"), topics=[TOPIC]
    )
    runtime = RuntimeSettings(
        mode="embedded",
        local_dir=str(lake_dir),
        spark=SparkSettings(
            master="local[2]", driver_memory="6g", shuffle_partitions=8, conf={"spark.ui.showConsoleProgress": "false"}
        ),
    )
    return PipelineConfig(sources=[source], runtime=runtime, path=lake_dir / "bench-gold.yaml")


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


def timed_gold(spark, config, rebuild: bool = False) -> dict:
    from spark_jobs.gold.build import build_gold

    with DbtTimer() as timer:
        started = time.monotonic()
        build_gold(spark, config, SOURCE, rebuild=rebuild)
        seconds = time.monotonic() - started
    return {"seconds": seconds, "steps": timer.seconds}


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


def one_size(size: int, delta: int, runs: int) -> dict:
    from spark_jobs.gold import names
    from spark_jobs.runtime.spark_session import get_spark

    lake_dir = BENCH_DIR / str(size)
    fresh_lake(lake_dir)
    config = bench_config(lake_dir)
    spark = get_spark(config, app_name=f"bench-gold-{size}")
    out: dict = {"size": size, "delta": delta}
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


# ---- the parent: one subprocess per size, then the table -----------------------------------------------------


def run_size(size: int, delta: int, runs: int) -> dict | None:
    script = str(Path(__file__).resolve())
    cmd = [sys.executable, script, "--one", str(size), "--delta", str(delta), "--runs", str(runs)]
    return run_child(cmd, RESULT_PREFIX, f"{size:,} rows")


def report(results: list[dict]) -> None:
    print()
    print("seconds of build_gold (dbt staging + intermediate, gold + history models, dbt tests, publication);")
    print("incremental: best of the runs; Spark local[2] on a shared 2-core machine (noisy).")
    header = (
        f"{'rows':>11} {'delta':>7} {'initial s':>10} {'incremental s':>14} {'rebuild s':>10} "
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
            f"{r['size']:>11,} {r['delta']:>7,} {r['initial']['seconds']:>10.1f} {best['seconds']:>14.1f} "
            f"{r['rebuild']['seconds']:>10.1f} {best['seconds'] / r['rebuild']['seconds']:>13.2f} "
            f"{versions:>22,.0f} {records:>17,.0f} {mb:>6.2f}"
        )
    print()
    print("where an incremental run's time goes (seconds, best run):")
    for r in results:
        best = min(r["incremental"], key=lambda s: s["seconds"])
        steps = ", ".join(f"dbt {k} {v:.1f}" for k, v in best["steps"].items())
        print(
            f"  {r['size']:>11,}: {steps}; counts and publication {best['seconds'] - sum(best['steps'].values()):.1f}"
        )
    if len(results) >= 2:
        small, large = results[0], results[-1]
        ratio = min(s["seconds"] for s in large["incremental"]) / min(s["seconds"] for s in small["incremental"])
        print()
        print(
            f"goal: incremental {large['size']:,} / {small['size']:,} <= 1.5: {ratio:.2f} "
            f"({'met' if ratio <= 1.5 else 'NOT met'})"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000,10000000", help="rows in the table, comma-separated")
    parser.add_argument("--delta", type=int, default=10_000, help="changes per incremental run (default 10,000)")
    parser.add_argument("--runs", type=int, default=2, help="incremental runs per size (default 2)")
    parser.add_argument("--json", help="write the summary rows for `make bench` here")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # internal: run one size, print a JSON line
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s", datefmt="%H:%M:%S"
    )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the `finally` clean-ups
    if args.one:
        print(RESULT_PREFIX + json.dumps(one_size(args.one, args.delta, args.runs)), flush=True)
        return 0
    sizes = sorted(int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip())
    results, failed = [], []
    for size in sizes:
        r = run_size(size, args.delta, args.runs)
        (results if r is not None else failed).append(r if r is not None else size)
    if results:
        report(results)
        write_summary(args.json, summary(results))
    return 1 if failed else 0


def summary(results: list[dict]) -> list[dict]:
    """`make bench`'s lines: each size's incremental run against its rebuild, and the largest against the smallest."""
    rows = []
    for r in results:
        best = min(r["incremental"], key=lambda s: s["seconds"])["seconds"]
        rows.append(
            summary_row(
                "gold",
                f"{r['delta']:,} changes into {r['size']:,} rows",
                f"incremental {best:.1f} s",
                f"rebuild {r['rebuild']['seconds']:.1f} s",
                r["rebuild"]["seconds"] / best,
            )
        )
    if len(results) >= 2:
        small, large = results[0], results[-1]
        small_s = min(s["seconds"] for s in small["incremental"])
        large_s = min(s["seconds"] for s in large["incremental"])
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


if __name__ == "__main__":
    sys.exit(main())
