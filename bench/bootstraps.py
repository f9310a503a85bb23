"""A day of Simple-protocol bootstraps leaves a run's cost unchanged.

    python bench/bootstraps.py [--tables 20] [--partitions 2] [--hours 24] [--interval 120] [--json PATH]

TiCDC's Simple protocol sends a BOOTSTRAP of every active table to every partition every 120 s (or 10,000
messages) by default (`send-bootstrap-interval-in-sec`). Silver keeps the DDL history the size of the real DDL
history (one row per table and schema version), so a day of them must not make later runs read more.

In one subprocess (one JVM and one embedded Derby metastore, under `.local/bench/bootstraps/`, started fresh;
Spark `local[2]`, driver memory 4g): the embedded broker starts, a topic of `--partitions` partitions gets a
Simple-JSON stream of `--tables` tables (CREATE TABLE, a bootstrap, three rows each, a watermark), and a first
run (land, silver, gold) builds everything. Then, timed:

- before: a delta (one update in each of 3 tables, a watermark) carried by a run: land, silver, gold;
- the day: `--hours` of bootstraps (every `--interval` seconds, each table, each partition) with a watermark
  after each round, landed and decoded (the cost of taking them in, reported);
- after: the same delta again, carried by a run.

ratio = before / after (run seconds): 1.0 means the day of bootstraps left a run's cost unchanged (goal >= 0.9).
`silver.ddl_events` rows of the source are counted before and after the day: they must not grow. Nothing is
asserted; the bench is not part of the test suite.
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

from bench.harness import bench_pipeline, fresh_lake, run_child, summary_row, write_summary  # noqa: E402
from ticdc_devkit.broker import EmbeddedBroker, produce  # noqa: E402
from ticdc_devkit.simulator.model import Bootstrap, Column, Ddl, RowChange, Table, Watermark  # noqa: E402
from ticdc_devkit.simulator.stream import EXTENSION_OPTIONS, encode_stream  # noqa: E402
from ticdc_devkit.simulator.workload import create_table_sql  # noqa: E402

BENCH_DIR = ROOT / ".local" / "bench" / "bootstraps"
SOURCE, TOPIC, PROTOCOL = "bench_bootstraps", "bench_bootstraps", "simple-json"
RESULT_PREFIX = "BENCH-BOOTSTRAPS-RESULT "
BASE_MS = 1_763_900_000_000
TOUCHED = 3  # tables the delta of each measured run changes

log = logging.getLogger("bench.bootstraps")


def tso(ms: int) -> int:
    return (BASE_MS + ms) << 18


def tables(count: int) -> list[Table]:
    return [
        Table(  # Simple's schemaVersion: the commit ts of the CREATE TABLE (first_stream)
            "boot", f"t{i}", (Column("id", "int", nullable=False), Column("n", "int")), ("id",), 500 + i, tso(1 + i)
        )
        for i in range(count)
    ]


def first_stream(every: list[Table]) -> list:
    events: list = [  # each DDL its own commit ts, as TiDB gives them
        Ddl(tso(1 + i), t.database, t.name, create_table_sql(t), "create_table", table_after=t)
        for i, t in enumerate(every)
    ]
    events += [Bootstrap(t) for t in every]
    events += [
        RowChange(tso(1_000 + i), "insert", t, after={"id": k, "n": k}) for i, t in enumerate(every) for k in range(3)
    ]
    return [*events, Watermark(tso(10_000))]


def delta(every: list[Table], at_ms: int, n: int) -> list:
    step = max(1, len(every) // TOUCHED)
    changed = every[::step][:TOUCHED]
    events = [
        RowChange(tso(at_ms + i), "update", t, before={"id": 0, "n": n - 1}, after={"id": 0, "n": n})
        for i, t in enumerate(changed)
    ]
    return [*events, Watermark(tso(at_ms + 1_000))]


def a_day(every: list[Table], start_ms: int, hours: float, interval_s: int) -> list:
    """Bootstraps of every table every `interval_s` seconds for `hours`, a watermark after each round."""
    events: list = []
    for i in range(int(hours * 3600 / interval_s)):
        events += [Bootstrap(t) for t in every]
        events.append(Watermark(tso(start_ms + (i + 1) * interval_s * 1000)))
    return events


def bench_config(bootstrap: str, lake_dir: Path):
    from spark_jobs.config import KafkaSettings, SourceSettings

    source = SourceSettings(
        name=SOURCE,
        protocol=PROTOCOL,
        kafka=KafkaSettings(bootstrap_servers=bootstrap),
        topics=[TOPIC],
        options=dict(EXTENSION_OPTIONS[PROTOCOL]),
    )
    return bench_pipeline([source], lake_dir, "bench-bootstraps", "4g", shuffle_partitions=2)


def carry(spark, config, bootstrap: str, events: list, partitions: int) -> dict:
    """Produce the events (not timed), then one run: land, silver, gold, each timed."""
    from spark_jobs.bronze.land import land_bronze
    from spark_jobs.gold.build import build_gold
    from spark_jobs.silver.build import build_silver

    messages = encode_stream(PROTOCOL, events, topic=TOPIC, partitions=partitions, options=EXTENSION_OPTIONS[PROTOCOL])
    produce(bootstrap, messages)
    out: dict = {"messages": len(messages)}
    for stage, step in (("land", land_bronze), ("silver", build_silver), ("gold", build_gold)):
        started = time.monotonic()
        step(spark, config, SOURCE)
        out[f"{stage}_s"] = time.monotonic() - started
    out["run_s"] = out["land_s"] + out["silver_s"] + out["gold_s"]
    return out


def ddl_rows(spark) -> int:
    from spark_jobs.runtime.tables import SILVER_DDL_EVENTS

    return spark.sql(f"SELECT count(*) FROM {SILVER_DDL_EVENTS} WHERE source = :s", args={"s": SOURCE}).first()[0]


def one_run(table_count: int, partitions: int, hours: float, interval_s: int) -> dict:
    from spark_jobs.runtime.spark_session import get_spark
    from spark_jobs.runtime.tables import ensure_tables

    fresh_lake(BENCH_DIR)
    every = tables(table_count)
    result: dict = {"tables": table_count, "partitions": partitions, "hours": hours, "interval_s": interval_s}
    with EmbeddedBroker(BENCH_DIR / "broker") as broker:
        broker.create_topics([TOPIC], partitions=partitions)
        config = bench_config(broker.bootstrap, BENCH_DIR)
        spark = get_spark(config, app_name="bench-bootstraps")
        try:
            ensure_tables(spark, "bronze")
            ensure_tables(spark, "silver")
            carry(spark, config, broker.bootstrap, first_stream(every), partitions)
            carry(spark, config, broker.bootstrap, delta(every, 20_000, 1), partitions)  # warm: the first delta
            result["before"] = carry(spark, config, broker.bootstrap, delta(every, 30_000, 2), partitions)
            result["ddl_rows_before"] = ddl_rows(spark)
            log.info(
                "before the day: a run in %.1fs; %d DDL rows", result["before"]["run_s"], result["ddl_rows_before"]
            )
            day_ms = 40_000
            result["day"] = carry(spark, config, broker.bootstrap, a_day(every, day_ms, hours, interval_s), partitions)
            result["ddl_rows_after"] = ddl_rows(spark)
            log.info(
                "a day of bootstraps: %d messages taken in %.1fs; %d DDL rows",
                result["day"]["messages"],
                result["day"]["run_s"],
                result["ddl_rows_after"],
            )
            after_ms = day_ms + int(hours * 3600 * 1000) + 10_000
            result["after"] = carry(spark, config, broker.bootstrap, delta(every, after_ms, 3), partitions)
            log.info("after the day: a run in %.1fs", result["after"]["run_s"])
        finally:
            spark.stop()
    return result


def report(r: dict) -> None:
    print(
        f"{r['tables']} tables on {r['partitions']} partitions; a day = {r['hours']:g} h of bootstraps every "
        f"{r['interval_s']} s ({r['day']['messages']:,} messages, taken in {r['day']['run_s']:.1f}s)"
    )
    header = f"{'run':<8} {'land s':>7} {'silver s':>9} {'gold s':>7} {'run s':>7}"
    print(header)
    print("-" * len(header))
    for name in ("before", "after"):
        x = r[name]
        print(f"{name:<8} {x['land_s']:>7.1f} {x['silver_s']:>9.1f} {x['gold_s']:>7.1f} {x['run_s']:>7.1f}")
    print(
        f"silver.ddl_events rows: {r['ddl_rows_before']} before the day, {r['ddl_rows_after']} after; "
        f"ratio before/after {r['before']['run_s'] / r['after']['run_s']:.2f} (goal >= 0.9)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--interval", type=int, default=120, help="seconds between bootstrap rounds (TiCDC: 120)")
    parser.add_argument("--json", help="write the summary rows for `make bench` here")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # internal: the child
    args = parser.parse_args(argv)
    if args.one:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        print(RESULT_PREFIX + json.dumps(one_run(args.tables, args.partitions, args.hours, args.interval)), flush=True)
        return 0
    command = [sys.executable, __file__, "--one", "--tables", str(args.tables), "--partitions", str(args.partitions)]
    command += ["--hours", str(args.hours), "--interval", str(args.interval)]
    r = run_child(command, RESULT_PREFIX, "bootstraps")
    if r is None:
        return 1
    report(r)
    ratio = r["before"]["run_s"] / r["after"]["run_s"]
    write_summary(
        args.json,
        [
            summary_row(
                "bootstraps",
                f"{r['tables']} tables, a day of bootstraps",
                f"run {r['after']['run_s']:.1f}s after",
                f"{r['before']['run_s']:.1f}s before",
                ratio,
                ">= 0.9",
            )
        ],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
