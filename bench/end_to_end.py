"""Changes per second from Kafka to gold, against the sum of the floors of its three stages, measured in one run.

    python bench/end_to_end.py [--changes 1000000] [--cap 250000] [--fetch-bytes 1048576] [--json PATH]

In one subprocess (one JVM and one embedded Derby metastore, under `.local/bench/end_to_end/`, started
fresh; Spark `local[2]`, driver memory 4g, 4 shuffle partitions): the embedded broker starts, a topic with
4 partitions is created and bench/silver.py's orders stream (CREATE TABLE, then N row changes: about 62%
inserts, 33% updates, 5% deletes, one row per commit, a watermark every 5,000 changes) is encoded as
Canal-JSON with the TiDB extension, dispatched by index value, and produced, one record per produce batch
(Tansu's high watermark counts batches; docs/environment.md). Encoding and producing are not timed (their
seconds are reported). The topic carries bench/land.py's name, which its floor consumer reads.

Timed, as a scheduled run does it (the bronze and silver tables are created first, as they exist before every
run but the first; Spark's start is not timed):

- land: `land_bronze` with `max_records_per_run` = `--cap`, again until no partition lags (with
  `--fetch-bytes`, the source's `kafka.client` sets librdkafka's `max.partition.fetch.bytes` to it, see below);
- silver: `build_silver`, once;
- gold: `build_gold` (dbt staging and intermediate views, the gold and history models, the dbt tests, the
  publication), once.

changes/s = N / (land + silver + gold seconds). Then, on the same data, each stage's floor:

- land: a plain confluent-kafka consumer over the topic (bench/land.py's `floor_consume`), before Spark starts;
- silver: bench/silver.py's parse-only pass, a `mapInArrow` over bronze's values that parses each one with
  orjson and returns nothing, to the `noop` sink, read in the splits `build_silver` reads (best of 2);
- gold: the cheapest Spark way to the current state: silver.row_changes of the source, `max_by(struct(op,
  after), commit_ts)` per (database, table, row_key), the rows whose last op is not a delete, to the `noop`
  sink (best of 2); its row count (counted apart) is compared with gold's.

ratio = (sum of the floors) / (end-to-end seconds): 1.0 would mean the pipeline costs no more than the floors.

Tansu (the embedded broker) limits the size. It produces about 5,000 records/s here (1M: about 5 minutes with
the encoding) and answers fetches in a time that grows with the partition's length: the consumer floor reads
about 30,000 records/s at 100k changes (25,000 per partition) but 4,300/s at 1M (250,000 per partition), and
landing slows alike. With 16 MB fetches per partition (tried for the pipeline's reader, which now keeps
librdkafka's 1 MB) Tansu did not answer a fetch at offset ~105,000 of a 250,000-record partition within the
reader's 10 s, and `land_bronze` raised BrokerUnavailableError; `--fetch-bytes` sets the size to try others.
A run that stops so prints the stage and the error instead of the figure, and its summary line says so.
Absolute numbers depend on the machine, which is why the floors are measured alongside. Nothing is asserted;
the bench is not part of the test suite.
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
from bench.land import TOPIC, floor_consume  # noqa: E402
from bench.silver import CHUNK_ROWS, PARTITIONS, OrdersStream, _cache_parse_type, parse_only_function, timed  # noqa: E402
from ticdc_devkit.broker import EmbeddedBroker, produce  # noqa: E402
from ticdc_devkit.simulator.stream import EXTENSION_OPTIONS, encode_stream, make_encoder  # noqa: E402

BENCH_DIR = ROOT / ".local" / "bench" / "end_to_end"
SOURCE = "bench_e2e"
PROTOCOL = "canal-json"
RESULT_PREFIX = "BENCH-END-TO-END-RESULT "
STAGES = (
    ("land", "confluent-kafka consume loop"),
    ("silver", "parse-only mapInArrow (orjson), noop"),
    ("gold", "max_by(struct(op, after), commit_ts), noop"),
)

log = logging.getLogger("bench.end_to_end")


def produce_stream(bootstrap: str, changes: int) -> dict:
    """Encode and produce the stream chunk by chunk (bounded memory); encoding and producing timed apart."""
    options = dict(EXTENSION_OPTIONS[PROTOCOL])
    make_encoder(PROTOCOL, options)  # imports the encoder's modules before parse_type is cached
    _cache_parse_type()
    stream = OrdersStream()
    encode_s = produce_s = 0.0
    messages = 0
    step = max(1, changes // 10)
    next_report = step
    while stream.rows < changes:
        started = time.monotonic()
        events = stream.chunk(min(CHUNK_ROWS, changes - stream.rows))
        batch = encode_stream(
            PROTOCOL, events, topic=TOPIC, partitions=PARTITIONS, options=options, dispatch="index-value"
        )
        encode_s += time.monotonic() - started
        started = time.monotonic()
        messages += produce(bootstrap, batch)
        produce_s += time.monotonic() - started
        if stream.rows >= next_report or stream.rows == changes:
            log.info(
                "produced %s/%s changes (%s messages): encode %.0fs, produce %.0fs (%s msg/s)",
                f"{stream.rows:,}",
                f"{changes:,}",
                f"{messages:,}",
                encode_s,
                produce_s,
                f"{messages / produce_s:,.0f}",
            )
            next_report = (stream.rows // step + 1) * step
    return {"messages": messages, "encode_s": encode_s, "produce_s": produce_s}


def bench_config(bootstrap: str, lake_dir: Path, cap: int, fetch_bytes: int | None):
    from spark_jobs.config import (
        KafkaSettings,
        LandingSettings,
        SourceSettings,
    )

    source = SourceSettings(
        name=SOURCE,
        protocol=PROTOCOL,
        kafka=KafkaSettings(
            bootstrap_servers=bootstrap,
            client={"max.partition.fetch.bytes": str(fetch_bytes)} if fetch_bytes else {},
        ),
        topics=[TOPIC],
        options=dict(EXTENSION_OPTIONS[PROTOCOL]),
        landing=LandingSettings(max_records_per_run=cap),
    )
    return bench_pipeline([source], lake_dir, "bench-end-to-end", "4g")


def pipeline(spark, config) -> dict:
    """The three stages as a scheduled run does them, each timed. A broker that stops answering (Tansu on long
    partitions) ends the run with the stage and the error in `stopped`, so that the output says where it stopped."""
    from spark_jobs.errors import BrokerUnavailableError

    out: dict = {"land_runs": []}
    try:
        stages(spark, config, out)
    except BrokerUnavailableError as exc:
        out["stopped"] = f"{len(out['land_runs']) + 1}. landing run: {exc}"
        log.warning("stopped: %s", out["stopped"])
    return out


def stages(spark, config, out: dict) -> None:
    from spark_jobs.bronze.land import land_bronze
    from spark_jobs.gold.build import build_gold
    from spark_jobs.silver.build import build_silver

    started = time.monotonic()
    while True:
        r = land_bronze(spark, config, SOURCE)
        out["land_runs"].append({"records": r.records, "seconds": r.seconds})
        log.info("land run %d: %s records in %.1fs", len(out["land_runs"]), f"{r.records:,}", r.seconds)
        if r.records == 0 or not any(r.lag.values()):
            break
    out["land_s"] = time.monotonic() - started
    out["landed"] = sum(run["records"] for run in out["land_runs"])

    started = time.monotonic()
    s = build_silver(spark, config, SOURCE)
    out["silver_s"] = time.monotonic() - started
    out.update(row_changes=s.row_changes, quarantined=s.quarantined, consistent_ts=s.consistent_ts)
    log.info("build_silver: %s row changes in %.1fs", f"{s.row_changes:,}", out["silver_s"])

    started = time.monotonic()
    g = build_gold(spark, config, SOURCE)
    out["gold_s"] = time.monotonic() - started
    out["gold_rows"] = sum(g.tables.values())
    log.info("build_gold: %s rows in %.1fs", f"{out['gold_rows']:,}", out["gold_s"])


def floors(spark) -> dict:
    """The Spark floors of silver and gold on the data the pipeline just wrote."""
    from pyspark.sql import functions as F

    from spark_jobs.runtime.tables import BRONZE_MESSAGES, SILVER_ROW_CHANGES
    from spark_jobs.silver.build import DECODE_SPLIT_BYTES

    def noop(frame) -> None:
        frame.write.format("noop").mode("overwrite").save()

    bronze = (
        spark.read.format("iceberg")
        .option("split-size", DECODE_SPLIT_BYTES)
        .load(BRONZE_MESSAGES)
        .where(F.col("source") == SOURCE)
    )
    columns, parse = parse_only_function(PROTOCOL, {})
    parse_s = timed("floor silver: parse-only", lambda: noop(bronze.select(*columns).mapInArrow(parse, "n BIGINT")))

    current = (
        spark.table(SILVER_ROW_CHANGES)
        .where(F.col("source") == SOURCE)
        .groupBy("database", "table", "row_key")
        .agg(F.max_by(F.struct("op", "after"), "commit_ts").alias("last"))
        .where(F.col("last.op") != "delete")
    )
    current_s = timed("floor gold: max_by current state", lambda: noop(current))
    return {"parse_s": parse_s, "current_s": current_s, "current_rows": current.count()}


def one_run(changes: int, cap: int, fetch_bytes: int | None) -> dict:
    from spark_jobs.runtime.spark_session import get_spark
    from spark_jobs.runtime.tables import ensure_tables

    fresh_lake(BENCH_DIR)
    result: dict = {"changes": changes, "cap": cap, "fetch_bytes": fetch_bytes}
    with EmbeddedBroker(BENCH_DIR / "broker") as broker:
        broker.create_topics([TOPIC], partitions=PARTITIONS)
        log.info("producing %s changes to %s[0..%d] on %s", f"{changes:,}", TOPIC, PARTITIONS - 1, broker.bootstrap)
        result.update(produce_stream(broker.bootstrap, changes))

        consumed = floor_consume(broker.bootstrap)
        result.update(consume_s=consumed["seconds"], consumed=consumed["records"])
        log.info("floor land: consumed %s records in %.1fs", f"{consumed['records']:,}", consumed["seconds"])

        config = bench_config(broker.bootstrap, BENCH_DIR, cap, fetch_bytes)
        started = time.monotonic()
        spark = get_spark(config, app_name="bench-end-to-end")
        result["spark_start_s"] = time.monotonic() - started
        try:
            ensure_tables(spark, "bronze")
            ensure_tables(spark, "silver")
            result.update(pipeline(spark, config))
            if "stopped" not in result:
                result.update(floors(spark))
        finally:
            spark.stop()
    return result


# ---- the parent: one subprocess, then the table -------------------------------------------------------------


def totals(r: dict) -> tuple[float, float]:
    """(end-to-end seconds, sum of the floors' seconds)."""
    return r["land_s"] + r["silver_s"] + r["gold_s"], r["consume_s"] + r["parse_s"] + r["current_s"]


def report(r: dict) -> None:
    print()
    fetch = f"{r['fetch_bytes']:,}-byte" if r["fetch_bytes"] else "the pipeline's own"
    print(
        f"{r['changes']:,} Canal-JSON changes ({r['messages']:,} Kafka messages, {PARTITIONS} partitions, landed in "
        f"runs of up to {r['cap']:,} records with {fetch} partition fetches); untimed: encode {r['encode_s']:.0f}s, "
        f"produce {r['produce_s']:.0f}s, Spark start {r['spark_start_s']:.0f}s"
    )
    if "stopped" in r:
        print(f"consumer floor: {r['consumed']:,} records in {r['consume_s']:.1f}s")
        print(f"stopped in {r['stopped']}")
        return
    header = f"{'stage':<8} {'seconds':>8}  {'floor':<44} {'floor s':>8}"
    print(header)
    print("-" * len(header))
    total, floor = totals(r)
    floor_seconds = (r["consume_s"], r["parse_s"], r["current_s"])
    for (stage, floor_name), seconds in zip(STAGES, floor_seconds):
        print(f"{stage:<8} {r[f'{stage}_s']:>8.1f}  {floor_name:<44} {seconds:>8.1f}")
    print(f"{'total':<8} {total:>8.1f}  {'sum of the floors':<44} {floor:>8.1f}")
    print(
        f"land: {len(r['land_runs'])} runs, {r['landed']:,} records (consumer floor read {r['consumed']:,}); "
        f"silver: {r['row_changes']:,} row changes, {r['quarantined']} quarantined; "
        f"gold: {r['gold_rows']:,} rows (the max_by floor's current state: {r['current_rows']:,})"
    )
    print(
        f"end-to-end: {r['changes']:,} changes in {total:.1f} s = {r['changes'] / total:,.0f} changes/s; "
        f"floors sum {floor:.1f} s; ratio {floor / total:.2f}"
    )


def summary(r: dict) -> list[dict]:
    """`make bench`'s line: changes/s from Kafka to gold against the floors' sum (or where the run stopped)."""
    case = f"{r['changes']:,} Canal-JSON changes"
    if "stopped" in r:
        return [summary_row("end-to-end", case, "stopped: " + r["stopped"].split(":", 1)[0], "-", None)]
    total, floor = totals(r)
    return [
        summary_row(
            "end-to-end",
            case,
            f"{r['changes'] / total:,.0f} changes/s",
            f"consume + parse-only + max_by current state {floor:.1f} s",
            floor / total,
        )
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=1_000_000, help="row changes in the stream (default 1,000,000)")
    parser.add_argument("--cap", type=int, default=250_000, help="landing.max_records_per_run (default 250,000)")
    parser.add_argument(
        "--fetch-bytes",
        type=int,
        help="max.partition.fetch.bytes of the source's Kafka client (default: the pipeline's own, 16 MB)",
    )
    parser.add_argument("--json", help="write the summary rows for `make bench` here")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # internal: the child
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s", datefmt="%H:%M:%S"
    )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the `with`/`finally` clean-ups
    if args.one:
        print(RESULT_PREFIX + json.dumps(one_run(args.changes, args.cap, args.fetch_bytes)), flush=True)
        return 0
    script = str(Path(__file__).resolve())
    cmd = [sys.executable, script, "--one", "--changes", str(args.changes), "--cap", str(args.cap)]
    cmd += ["--fetch-bytes", str(args.fetch_bytes)] if args.fetch_bytes else []
    r = run_child(cmd, RESULT_PREFIX, f"{args.changes:,} changes")
    if r is None:
        return 1
    report(r)
    write_summary(args.json, summary(r))
    return 1 if "stopped" in r else 0


if __name__ == "__main__":
    sys.exit(main())
