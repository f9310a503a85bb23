"""Bronze landing throughput and memory, against the floor of a plain Kafka consumer over the same topic.

    python bench/land.py [--sizes 100000,400000] [--cap 25000] [--value-bytes 1024]

For each size N, in its own subprocess (one JVM and one embedded Derby metastore per size, so that
the peak memory of each size is measured apart): start the embedded broker, create a topic with 4
partitions and produce N Canal-JSON-like messages of about `--value-bytes` bytes, one record per
produce batch (Tansu's high watermark counts batches; docs/environment.md). Then, in the same run:

- the floor: one confluent-kafka consumer, assign + seek to offset 0 on every partition, consume in
  batches until every partition reaches its high watermark; messages/s and MB/s;
- landing: `land_bronze` with `max_records_per_run` = `--cap`, run again and again until a run lands
  nothing (Spark `local[2]`, driver memory 2g, embedded mode under `.local/bench/land/lake-<N>`),
  while a background thread samples every 0.5 s the RSS of the Spark driver JVM and the sum over the
  Python workers (`pyspark.daemon` and the workers it forks; forked pages shared with the daemon are
  counted in each, so the sum is an upper bound). The ratio is landing msg/s / floor msg/s.

Tansu (the embedded broker) answers fetches in a time that grows with the partition's length (a
partition of 60,000 1 KB records was read at about a third of the rate of one of 30,000 here), so
both the floor and landing slow down with the topic size; the ratio cancels that out, the absolute
rates do not compare across sizes. Producing runs at about 3,000-6,000 messages/s.

Then a run's fixed cost, on the same lakehouse: the run that finds nothing new ends the loop above;
then `--tiny` times one record per partition is produced and landed (the median of those runs is "fixed s",
with its phases: setup, plan, read_write, commit, bookkeeping, and the Spark jobs it started); its floor is a
plain consumer that asks for the same metadata and watermarks and reads the same records. Then
`--history` empty commits carrying landing summaries of another source are added to bronze in one
transaction and the tiny runs are repeated: a run's cost must not grow with bronze's snapshots (nor, across
sizes, with its rows).

At the end the bronze row count (and the count of distinct partition/offset pairs) of the source
must equal what was produced: this is the only check, and a mismatch makes the script exit non-zero.
Nothing else is asserted; absolute numbers depend on the machine, which is why the floors are measured
alongside. The last line says whether the peak memory grew with the topic size (the cap should bound it).

    python bench/land.py --topics 40,1000 [--touched 4] [--records 12] [--tiny 5]

measures instead what a run costs per partition (TiCDC's `topic = "{schema}_{table}"` dispatcher gives a topic
per table, read with a `topic_pattern`). For each N, in its own subprocess: N one-partition topics and one more
topic on the embedded broker, one source reading the N by pattern and one reading the single topic (its
floor). `--tiny` times over, each run timed with its bookkeeping: a run of each that finds nothing new, then
`--records` records produced over `--touched` of the N topics and the same count on the single topic, and a
run of each. The medians give the records' ratio (N topics / one topic; goal at most 1.5 at 40 topics) and
what a partition with nothing new adds to a run (goal: 1,000 topics at most 10 s more than one topic,
extrapolated from the largest N when it is below 1,000, and marked so). The log lines of each run are
counted (the log summarises partitions). Bronze must then hold every produced record once, and each
source's committed offsets must equal the high watermarks: the only check, as above.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402

from bench.harness import bench_pipeline, fresh_lake, run_child, summary_row, write_summary  # noqa: E402
from ticdc_devkit.broker import EmbeddedBroker, produce  # noqa: E402
from ticdc_devkit.simulator.model import Message  # noqa: E402

BENCH_DIR = ROOT / ".local" / "bench" / "land"
TOPIC = "bench_land"
SOURCE = "bench"
PARTITIONS = 4
PRODUCE_CHUNK = 50_000  # one producer per chunk: librdkafka's queue holds 100,000 messages by default
SAMPLE_SECONDS = 0.5
RESULT_PREFIX = "BENCH-LAND-RESULT "
GROWTH_THRESHOLD = 0.20  # a larger peak by more than this share counts as "grew"
PHASES = ("setup", "plan", "read_write", "commit", "bookkeeping")
MB = 1024 * 1024

log = logging.getLogger("bench.land")


# ---- messages ----------------------------------------------------------------------------------------

_SQL_TYPES = {
    "order_id": -5,
    "customer_id": 4,
    "sku": 12,
    "quantity": 5,
    "unit_price": 3,
    "discount": 3,
    "total": 3,
    "currency": 1,
    "status": 4,
    "tags": -7,
    "note": 12,
    "weight_kg": 8,
    "ship_date": 91,
    "created_at": 93,
    "updated_at": 93,
}
_MYSQL_TYPES = {
    "order_id": "bigint unsigned",
    "customer_id": "int",
    "sku": "varchar",
    "quantity": "smallint unsigned",
    "unit_price": "decimal",
    "discount": "decimal",
    "total": "decimal",
    "currency": "char",
    "status": "enum",
    "tags": "set",
    "note": "varchar",
    "weight_kg": "double",
    "ship_date": "date",
    "created_at": "datetime",
    "updated_at": "timestamp",
}
_FILLER = (
    "Lieferung an Packstation, bitte klingeln; leave at the door if nobody answers. "
    "Fragile: glassware inside, keep upright. Gift wrap requested, no invoice in the parcel. "
) * 40
_BASE_MS = 1_763_800_000_000


def canal_json_value(i: int, size: int) -> bytes:
    """A TiCDC Canal-JSON INSERT (TiDB extension on) of an orders row, padded with its `note` column to
    `size` bytes; below about 1,050 bytes the `sqlType` map is left empty (below about 850 `mysqlType` too)."""
    ms = _BASE_MS + i * 3
    commit_ts = ms << 18 | (i & 3)
    row = {
        "order_id": str(10_000_000 + i),
        "customer_id": str((i * 7919) % 500_000 + 1),
        "sku": f"SKU-{(i * 31) % 100_000:05d}",
        "quantity": str(i % 20 + 1),
        "unit_price": f"{(i * 13) % 99_900 + 100}.{i % 100:02d}",
        "discount": ("0.0500", None, "0.1000", None)[i % 4],
        "total": f"{(i * 17) % 999_999}.{i % 97:02d}",
        "currency": ("EUR", "USD", "JPY")[i % 3],
        "status": "1",
        "tags": str(i % 16),
        "note": "",
        "weight_kg": f"{(i % 40_000) / 1000 + 0.1:.3f}",
        "ship_date": "2025-11-22",
        "created_at": "2025-11-22 08:00:00.000",
        "updated_at": "2025-11-22 08:00:00.000000",
    }
    message = {
        "id": 0,
        "database": "shop",
        "table": "orders",
        "pkNames": ["order_id"],
        "isDdl": False,
        "type": "INSERT",
        "es": ms,
        "ts": ms + 2,
        "sql": "",
        "sqlType": _SQL_TYPES,
        "mysqlType": _MYSQL_TYPES,
        "old": None,
        "data": [row],
        "_tidb": {"commitTs": commit_ts},
    }
    pad = size - len(orjson.dumps(message))
    for type_map in ("sqlType", "mysqlType"):  # the bare message is about 1,050 bytes: make room
        if pad >= 0:
            break
        message[type_map] = {}
        pad = size - len(orjson.dumps(message))
    if pad > 0:
        start = i % 97
        row["note"] = _FILLER[start : start + pad]
    return orjson.dumps(message)


def messages(n: int, value_bytes: int, first: int = 0) -> Iterator[Message]:
    for i in range(first, first + n):
        yield Message(TOPIC, i % PARTITIONS, b'{"order_id":%d}' % (10_000_000 + i), canal_json_value(i, value_bytes))


def produce_all(bootstrap: str, n: int, value_bytes: int) -> float:
    """Produce N messages in chunks (one producer each, one record per batch); log every ~10%."""
    started = time.monotonic()
    step = max(1, n // 10)
    done, next_report = 0, step
    while done < n:
        chunk = min(PRODUCE_CHUNK, step, n - done)
        produce(bootstrap, messages(chunk, value_bytes, first=done))
        done += chunk
        if done >= next_report or done == n:
            elapsed = time.monotonic() - started
            log.info(
                "produced %s/%s (%d%%) in %.0fs, %s msg/s",
                f"{done:,}",
                f"{n:,}",
                100 * done // n,
                elapsed,
                f"{done / elapsed:,.0f}",
            )
            next_report = (done // step + 1) * step
    return time.monotonic() - started


# ---- the floor: a plain consumer ---------------------------------------------------------------------


def floor_consume(bootstrap: str) -> dict:
    """Assign every partition at offset 0 and consume until each reaches its high watermark."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-land-floor",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        metadata = consumer.list_topics(TOPIC, timeout=30)
        partitions = sorted(metadata.topics[TOPIC].partitions)
        high = {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1] for p in partitions}
        started = time.monotonic()
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in partitions])
        position = {p: 0 for p in partitions}
        pending = {p for p in partitions if high[p] > 0}
        count = size = 0
        total, step = sum(high.values()), max(1, sum(high.values()) // 10)
        next_report = step
        while pending:
            for m in consumer.consume(10_000, timeout=1.0):
                if m.error() is not None:
                    raise RuntimeError(f"floor consumer: {m.error()}")
                value, key = m.value(), m.key()
                count += 1
                size += (len(value) if value is not None else 0) + (len(key) if key is not None else 0)
                p = m.partition()
                position[p] = m.offset() + 1
                if position[p] >= high[p]:
                    pending.discard(p)
            if count >= next_report and pending:
                elapsed = time.monotonic() - started
                log.info(
                    "floor: consumed %s/%s (%d%%) in %.0fs, %s msg/s",
                    f"{count:,}",
                    f"{total:,}",
                    100 * count // max(1, total),
                    elapsed,
                    f"{count / elapsed:,.0f}",
                )
                next_report = (count // step + 1) * step
        seconds = time.monotonic() - started
    finally:
        consumer.close()
    return {"records": count, "bytes": size, "seconds": seconds, "high": sum(high.values())}


def floor_tiny(bootstrap: str, offsets: dict[int, int]) -> float:
    """What any lander pays for a tiny run: a client, the topic's metadata and watermarks, and one record read
    from each partition at `offsets`."""
    from confluent_kafka import Consumer, TopicPartition

    started = time.monotonic()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-land-floor", "enable.auto.commit": False})
    try:
        partitions = sorted(consumer.list_topics(TOPIC, timeout=30).topics[TOPIC].partitions)
        for p in partitions:
            consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)
        consumer.assign([TopicPartition(TOPIC, p, offsets[p]) for p in partitions])
        pending = set(partitions)
        while pending:
            for m in consumer.consume(len(pending), timeout=1.0):
                if m.error() is None:
                    pending.discard(m.partition())
    finally:
        consumer.close()
    return time.monotonic() - started


# ---- memory sampling ---------------------------------------------------------------------------------


def _has_psutil() -> bool:
    try:
        import psutil  # noqa: F401

        return True
    except ImportError:
        return False


def _descendants_psutil(pid: int) -> list[tuple[int, str, int]]:
    import psutil

    out = []
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return out
    for child in children:
        try:
            out.append((child.pid, " ".join(child.cmdline()), child.memory_info().rss))
        except psutil.Error:
            continue
    return out


def _descendants_proc(pid: int) -> list[tuple[int, str, int]]:
    """The same from /proc: parent links from /proc/<pid>/stat, RSS from VmRSS in /proc/<pid>/status."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    wanted, frontier = set(), [pid]
    while frontier:
        parent = frontier.pop()
        for child, ppid in parents.items():
            if ppid == parent and child not in wanted:
                wanted.add(child)
                frontier.append(child)
    out = []
    for child in wanted:
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            rss = 0
            for line in Path(f"/proc/{child}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
            out.append((child, cmdline, rss))
        except OSError:
            continue
    return out


class MemorySampler:
    """Peak RSS of the Spark driver JVM and of the Python workers (summed), sampled in a thread."""

    def __init__(self, interval: float = SAMPLE_SECONDS):
        self.interval = interval
        self.descendants = _descendants_psutil if _has_psutil() else _descendants_proc
        self.method = "psutil" if _has_psutil() else "/proc"
        self.driver_peak = self.workers_peak = self.worker_max = self.workers_max_count = self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def sample(self) -> None:
        driver = workers = worker_max = count = 0
        for _, cmdline, rss in self.descendants(os.getpid()):
            argv0 = cmdline.split(" ", 1)[0]
            if argv0.endswith("java") and "SparkSubmit" in cmdline:
                driver = max(driver, rss)
            elif "pyspark.daemon" in cmdline or "pyspark.worker" in cmdline:
                workers += rss
                worker_max = max(worker_max, rss)
                count += 1
        self.driver_peak = max(self.driver_peak, driver)
        self.workers_peak = max(self.workers_peak, workers)
        self.worker_max = max(self.worker_max, worker_max)
        self.workers_max_count = max(self.workers_max_count, count)
        self.samples += 1

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> MemorySampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


# ---- one size, in its own process --------------------------------------------------------------------


def bench_config(bootstrap: str, lake_dir: Path, cap: int):
    from spark_jobs.config import (
        KafkaSettings,
        LandingSettings,
        SourceSettings,
    )

    source = SourceSettings(
        name=SOURCE,
        protocol="canal-json",
        kafka=KafkaSettings(bootstrap_servers=bootstrap),
        topics=[TOPIC],
        options={"enable-tidb-extension": True},
        landing=LandingSettings(max_records_per_run=cap),
    )
    return bench_pipeline([source], lake_dir, "bench-land", "2g")


def timed_run(spark, config, source: str = SOURCE) -> tuple[float, int, dict[str, float], int]:
    """One landing run: its wall time (bookkeeping included), records, phases and Spark jobs started."""
    from spark_jobs.bronze.land import land_bronze

    tracker = spark.sparkContext.statusTracker()
    last_job = _last_job_id(tracker)
    started = time.monotonic()
    r = land_bronze(spark, config, source)
    return time.monotonic() - started, r.records, dict(r.phases), _last_job_id(tracker) - last_job


def _last_job_id(tracker) -> int:
    """The newest Spark job's id (-1: none yet): ids are sequential, and the status store keeps only the last jobs,
    so a count of the jobs it lists stops growing."""
    return max(tracker.getJobIdsForGroup(None), default=-1)


def add_history(spark, commits: int) -> int:
    """`commits` empty snapshots carrying a landing summary of another source, in one transaction; returns how
    many snapshots bronze then has."""
    from spark_jobs.bronze.land import SUMMARY_BATCH, SUMMARY_OFFSETS, SUMMARY_SOURCE
    from spark_jobs.runtime.iceberg import iceberg_table
    from spark_jobs.runtime.tables import BRONZE_MESSAGES

    table = iceberg_table(spark, BRONZE_MESSAGES)
    transaction = table.newTransaction()
    for i in range(commits):
        offsets = json.dumps({"history": {str(p): i + 1 for p in range(PARTITIONS)}})
        append = transaction.newFastAppend()
        for key, value in {SUMMARY_SOURCE: "history", SUMMARY_BATCH: f"h{i}", SUMMARY_OFFSETS: offsets}.items():
            append.set(key, value)
        append.commit()
    transaction.commitTransaction()
    return snapshot_count(spark)


def snapshot_count(spark) -> int:
    from spark_jobs.runtime.iceberg import iceberg_table
    from spark_jobs.runtime.jvm import java_items
    from spark_jobs.runtime.tables import BRONZE_MESSAGES

    return len(java_items(iceberg_table(spark, BRONZE_MESSAGES).snapshots()))


def fixed_cost(spark, config, bootstrap: str, produced: int, tiny: int, history: int = 0) -> dict:
    """A run's fixed cost: the median of `tiny` runs landing one record per partition, with its phases and
    Spark jobs, and the floor (`floor_tiny`) for the same records; first `history` commits are added."""
    snapshots = add_history(spark, history) if history else snapshot_count(spark)
    walls, floors, jobs, phases = [], [], [], {phase: [] for phase in PHASES}
    for i in range(tiny):
        first = produced + i * PARTITIONS
        produce(bootstrap, messages(PARTITIONS, 64, first=first))
        floors.append(floor_tiny(bootstrap, {p: first // PARTITIONS for p in range(PARTITIONS)}))
        wall, records, run_phases, run_jobs = timed_run(spark, config)
        if records != PARTITIONS:
            log.warning("a tiny run landed %d records, expected %d", records, PARTITIONS)
        walls.append(wall)
        jobs.append(run_jobs)
        for phase in PHASES:
            phases[phase].append(run_phases.get(phase, 0.0))
    empty_wall, _, _, _ = timed_run(spark, config)
    result = {
        "snapshots": snapshots,
        "tiny_s": statistics.median(walls),
        "tiny_max_s": max(walls),
        "floor_s": statistics.median(floors),
        "empty_s": empty_wall,
        "jobs": statistics.median(jobs),
        "phases": {phase: statistics.median(v) for phase, v in phases.items()},
    }
    log.info(
        "fixed cost with %d bronze snapshots: %.2fs per tiny run (median of %d, max %.2f; floor %.2fs), "
        "%.2fs for a run that lands nothing, %g Spark jobs per run; %s",
        snapshots,
        result["tiny_s"],
        tiny,
        result["tiny_max_s"],
        result["floor_s"],
        empty_wall,
        result["jobs"],
        " ".join(f"{phase} {seconds:.2f}" for phase, seconds in result["phases"].items()),
    )
    return result


def one_size(n: int, cap: int, value_bytes: int, tiny: int, history: int) -> dict:
    from spark_jobs.bronze.land import land_bronze
    from spark_jobs.runtime.spark_session import get_spark
    from spark_jobs.runtime.tables import BRONZE_MESSAGES

    produced = n + 2 * tiny * PARTITIONS
    lake_dir = BENCH_DIR / f"lake-{n}"
    fresh_lake(lake_dir)
    result: dict = {"size": n, "cap": cap, "value_bytes": value_bytes, "tiny": tiny, "history": history}
    with EmbeddedBroker(BENCH_DIR / "broker") as broker:
        broker.create_topics([TOPIC], partitions=PARTITIONS)
        log.info("size %s: producing to %s[0..%d] on %s", f"{n:,}", TOPIC, PARTITIONS - 1, broker.bootstrap)
        result["produce_s"] = produce_all(broker.bootstrap, n, value_bytes)

        floor = floor_consume(broker.bootstrap)
        if floor["records"] != n:
            log.warning(
                "floor consumer read %d records, expected %d (high watermarks sum %d)",
                floor["records"],
                n,
                floor["high"],
            )
        result.update(
            floor_records=floor["records"],
            floor_bytes=floor["bytes"],
            floor_s=floor["seconds"],
            floor_rate=floor["records"] / floor["seconds"],
            floor_mb_s=floor["bytes"] / MB / floor["seconds"],
        )
        log.info(
            "floor: %s records in %.1fs, %s msg/s, %.1f MB/s",
            f"{floor['records']:,}",
            floor["seconds"],
            f"{result['floor_rate']:,.0f}",
            result["floor_mb_s"],
        )

        config = bench_config(broker.bootstrap, lake_dir, cap)
        started = time.monotonic()
        spark = get_spark(config, app_name=f"bench-land-{n}")
        result["spark_start_s"] = time.monotonic() - started
        try:
            sampler = MemorySampler()
            runs, landed, landed_bytes, bulk_phases = [], 0, 0, {}
            with sampler:
                started = time.monotonic()
                while True:
                    r = land_bronze(spark, config, SOURCE)
                    runs.append((r.records, r.seconds))
                    for phase, seconds in r.phases.items():
                        bulk_phases[phase] = bulk_phases.get(phase, 0.0) + seconds
                    landed += r.records
                    landed_bytes += r.bytes
                    log.info(
                        "landing run %d: %s records in %.1fs (%s msg/s); %s of %s landed",
                        len(runs),
                        f"{r.records:,}",
                        r.seconds,
                        f"{r.records / r.seconds:,.0f}" if r.seconds else "-",
                        f"{landed:,}",
                        f"{n:,}",
                    )
                    if r.records == 0:
                        break
                landing_s = time.monotonic() - started
            fixed = fixed_cost(spark, config, broker.bootstrap, n, tiny)
            fixed_many = fixed_cost(spark, config, broker.bootstrap, n + tiny * PARTITIONS, tiny, history)
            rows, distinct = spark.sql(
                f"SELECT count(*), count(DISTINCT topic, `partition`, `offset`) FROM {BRONZE_MESSAGES} "
                "WHERE source = :source",
                args={"source": SOURCE},
            ).collect()[0]
        finally:
            spark.stop()
    result.update(
        landing_s=landing_s,
        landing_runs=len(runs),
        landed=landed,
        landing_rate=landed / landing_s,
        # without the first run, which creates the bronze tables and warms the JVM and the Python workers
        later_rate=(sum(r for r, _ in runs[1:]) / sum(s for _, s in runs[1:])) if landed > runs[0][0] else None,
        later_ratio=(
            (sum(r for r, _ in runs[1:]) / sum(s for _, s in runs[1:])) / result["floor_rate"]
            if landed > runs[0][0]
            else None
        ),
        bulk_phases=bulk_phases,
        fixed=fixed,
        fixed_many=fixed_many,
        landing_mb_s=landed_bytes / MB / landing_s,
        ratio=(landed / landing_s) / result["floor_rate"],
        driver_peak_mb=sampler.driver_peak / MB,
        workers_peak_mb=sampler.workers_peak / MB,
        worker_max_mb=sampler.worker_max / MB,
        workers_max_count=sampler.workers_max_count,
        samples=sampler.samples,
        sampler=sampler.method,
        bronze_rows=rows,
        bronze_distinct=distinct,
        ok=(rows == produced and distinct == produced),
    )
    log.info(
        "bronze.kafka_messages has %s rows (%s distinct offsets) for %s produced: %s",
        f"{rows:,}",
        f"{distinct:,}",
        f"{produced:,}",
        "ok" if result["ok"] else "MISMATCH",
    )
    log.info(
        "size %s: landing %s msg/s in %d runs (%.1fs), ratio %.2f to the floor; peak RSS driver JVM %.0f MB, "
        "Python workers %.0f MB",
        f"{n:,}",
        f"{result['landing_rate']:,.0f}",
        len(runs),
        landing_s,
        result["ratio"],
        result["driver_peak_mb"],
        result["workers_peak_mb"],
    )
    return result


# ---- many topics, in its own process -----------------------------------------------------------------

MANY, ONE = "many", "one"  # the sources of the topics benchmark: N topics by pattern, and one topic
MANY_PREFIX, ONE_TOPIC = "bench_t", "bench_one"
TOPIC_GOAL_AT = 1_000  # topics at which a run with nothing new may cost at most TOPIC_GOAL_S more than at one
TOPIC_GOAL_S = 10.0
RECORDS_GOAL = 1.5  # records over a few of 40 topics / the same records on one topic


def topics_config(bootstrap: str, lake_dir: Path):
    from spark_jobs.config import KafkaSettings, SourceSettings

    def source(name: str, **topics) -> SourceSettings:
        kafka = KafkaSettings(bootstrap_servers=bootstrap)
        options = {"enable-tidb-extension": True}
        return SourceSettings(name=name, protocol="canal-json", kafka=kafka, options=options, **topics)

    sources = [source(MANY, topic_pattern=MANY_PREFIX + r"\d+"), source(ONE, topics=[ONE_TOPIC])]
    return bench_pipeline(sources, lake_dir, "bench-land-topics", "2g")


class LineCounter(logging.Handler):
    """Counts the landing module's log lines (INFO and up) between resets."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.lines += 1


def one_topics(n: int, touched: int, records: int, value_bytes: int, tiny: int) -> dict:
    """N one-partition topics against one topic: runs with nothing new, and runs landing `records` records
    spread over `touched` of the N topics against the same records on the one topic."""
    from spark_jobs.bronze.land import broker_watermarks, committed_offsets
    from spark_jobs.runtime.spark_session import get_spark
    from spark_jobs.runtime.tables import BRONZE_MESSAGES

    lake_dir = BENCH_DIR / f"topics-{n}"
    fresh_lake(lake_dir)
    names = [f"{MANY_PREFIX}{i:05d}" for i in range(n)]
    step = max(1, n // touched)
    hit = names[::step][:touched]  # spread over the N: tables touched now and then, not the first few
    result: dict = {"topics": n, "touched": len(hit), "records": records, "tiny": tiny}
    counter = LineCounter()
    logging.getLogger("spark_jobs.bronze.land").addHandler(counter)
    with EmbeddedBroker(BENCH_DIR / "broker") as broker:
        started = time.monotonic()
        for i in range(0, n, 500):  # the admin client's request stays small
            broker.create_topics(names[i : i + 500])
        broker.create_topics([ONE_TOPIC])
        result["create_s"] = time.monotonic() - started
        log.info("created %s topics in %.1fs on %s", f"{n:,}", result["create_s"], broker.bootstrap)
        config = topics_config(broker.bootstrap, lake_dir)
        spark = get_spark(config, app_name=f"bench-land-topics-{n}")
        produced = {MANY: 0, ONE: 0}
        runs: dict[str, list] = {f"{kind}_{source}": [] for kind in ("empty", "records") for source in (MANY, ONE)}
        try:
            for source in (ONE, MANY):  # creates the tables, warms the JVM and the Python workers
                timed_run(spark, config, source)
            for i in range(tiny):
                order = (MANY, ONE) if i % 2 else (ONE, MANY)
                for source in order:
                    counter.lines = 0
                    wall, landed, phases, _ = timed_run(spark, config, source)
                    runs[f"empty_{source}"].append((wall, phases, counter.lines))
                first = sum(produced.values())
                produce(
                    broker.bootstrap,
                    (
                        Message(hit[j % len(hit)], 0, b"%d" % (first + j), canal_json_value(first + j, value_bytes))
                        for j in range(records)
                    ),
                )
                produce(
                    broker.bootstrap,
                    (
                        Message(ONE_TOPIC, 0, b"%d" % (first + j), canal_json_value(first + j, value_bytes))
                        for j in range(records)
                    ),
                )
                produced[MANY] += records
                produced[ONE] += records
                for source in order:
                    counter.lines = 0
                    wall, landed, phases, _ = timed_run(spark, config, source)
                    if landed != records:
                        log.warning("source %s landed %d records, expected %d", source, landed, records)
                    runs[f"records_{source}"].append((wall, phases, counter.lines))
            counts = {}
            for source in (MANY, ONE):
                rows, distinct = spark.sql(
                    f"SELECT count(*), count(DISTINCT topic, `partition`, `offset`) FROM {BRONZE_MESSAGES} "
                    "WHERE source = :source",
                    args={"source": source},
                ).collect()[0]
                highs = {tp: high for tp, (_, high) in broker_watermarks(config.source(source))[0].items()}
                counts[source] = (rows, distinct, committed_offsets(spark, source) == highs)
        finally:
            spark.stop()
            logging.getLogger("spark_jobs.bronze.land").removeHandler(counter)
    for key, measured in runs.items():
        result[key] = {
            "s": statistics.median(wall for wall, _, _ in measured),
            "phases": {phase: statistics.median(p.get(phase, 0.0) for _, p, _ in measured) for phase in PHASES},
            "log_lines": max(lines for _, _, lines in measured),
        }
    result["ok"] = all(
        rows == produced[source] and distinct == produced[source] and offsets_ok
        for source, (rows, distinct, offsets_ok) in counts.items()
    )
    result["bronze"] = {source: list(c) for source, c in counts.items()}
    log.info(
        "%s topics: nothing new %.2fs (one topic %.2fs); %d records over %d topics %.2fs (one topic %.2fs); bronze %s",
        f"{n:,}",
        result[f"empty_{MANY}"]["s"],
        result[f"empty_{ONE}"]["s"],
        records,
        len(hit),
        result[f"records_{MANY}"]["s"],
        result[f"records_{ONE}"]["s"],
        "ok" if result["ok"] else f"MISMATCH {counts} for {produced}",
    )
    return result


def per_partition_ms(r: dict) -> float:
    """What one more partition with nothing new adds to a run, in milliseconds (from the medians)."""
    return 1000 * (r[f"empty_{MANY}"]["s"] - r[f"empty_{ONE}"]["s"]) / max(1, r["topics"] - 1)


def at_goal_topics(results: list[dict]) -> tuple[float, dict, bool]:
    """The extra seconds of a run with nothing new at TOPIC_GOAL_AT topics over one topic: measured at that N,
    else extrapolated from the largest N measured (True when extrapolated)."""
    measured = [r for r in results if r["topics"] >= TOPIC_GOAL_AT]
    r = min(measured, key=lambda r: r["topics"]) if measured else max(results, key=lambda r: r["topics"])
    extra = r[f"empty_{MANY}"]["s"] - r[f"empty_{ONE}"]["s"]
    if r["topics"] == TOPIC_GOAL_AT:
        return extra, r, False
    return per_partition_ms(r) * (TOPIC_GOAL_AT - 1) / 1000, r, r["topics"] < TOPIC_GOAL_AT


def topics_summary(results: list[dict]) -> list[dict]:
    """`make bench`'s lines: records over N topics against one topic, and a run with nothing new at N topics
    against one topic."""
    rows = []
    for r in results:
        many, one = r[f"records_{MANY}"]["s"], r[f"records_{ONE}"]["s"]
        rows.append(
            summary_row(
                "land",
                f"{r['records']} records over {r['touched']} of {r['topics']:,} topics / on 1 topic",
                f"{many:.2f} s",
                f"1 topic {one:.2f} s",
                many / one,
                f"<= {RECORDS_GOAL}" if r["topics"] <= 40 else None,
            )
        )
        many, one = r[f"empty_{MANY}"]["s"], r[f"empty_{ONE}"]["s"]
        rows.append(
            summary_row(
                "land",
                f"nothing new at {r['topics']:,} topics / at 1 topic ({per_partition_ms(r):.1f} ms per partition)",
                f"{many:.2f} s",
                f"1 topic {one:.2f} s",
                many / one,
                None,
            )
        )
    extra, r, extrapolated = at_goal_topics(results)
    one = r[f"empty_{ONE}"]["s"]
    rows.append(
        summary_row(
            "land",
            f"nothing new at {TOPIC_GOAL_AT:,} topics / at 1 topic (goal at most {TOPIC_GOAL_S:.0f} s more"
            + (f"; extrapolated from {r['topics']:,} topics)" if extrapolated else ")"),
            f"{one + extra:.2f} s{' (extrapolated)' if extrapolated else ''}",
            f"1 topic {one:.2f} s",
            (one + extra) / one,
            f"<= {(one + TOPIC_GOAL_S) / one:.1f}",
        )
    )
    return rows


def run_topics(n: int, args) -> dict | None:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--one-topics",
        str(n),
        "--touched",
        str(args.touched),
        "--records",
        str(args.records),
        "--value-bytes",
        str(args.value_bytes),
        "--tiny",
        str(args.tiny),
    ]
    return run_child(cmd, RESULT_PREFIX, f"{n:,} topics")


def run_each(listed: str, run) -> tuple[list[dict], list[int]]:
    """`run(n)` for each number of a comma-separated list (1_000 allowed): (results, the numbers that failed)."""
    results, failed = [], []
    for n in (int(x.replace("_", "")) for x in listed.split(",") if x.strip()):
        result = run(n)
        if result is None:
            failed.append(n)
        else:
            results.append(result)
    return results, failed


def topics_report(args) -> int:
    results, failed = run_each(args.topics, lambda n: run_topics(n, args))
    print()
    print(
        f"landing runs over N one-partition topics (a source with a topic_pattern) against one topic (the floor, "
        f"in the same run); median of {args.tiny} runs each, wall time with bookkeeping; {args.records} records "
        f"over {args.touched} of the N topics against {args.records} on the one topic; Spark local[2]"
    )
    header = (
        f"{'topics':>7} {'create s':>9} {'empty N s':>10} {'empty 1 s':>10} {'ms/part':>8} {'plan N s':>9} "
        f"{'plan 1 s':>9} {'recs N s':>9} {'recs 1 s':>9} {'ratio':>6} {'read_write N':>13} {'read_write 1':>13} "
        f"{'log lines':>10} {'bronze':>7}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        empty_many, empty_one = r[f"empty_{MANY}"], r[f"empty_{ONE}"]
        recs_many, recs_one = r[f"records_{MANY}"], r[f"records_{ONE}"]
        lines = max(r[key]["log_lines"] for key in (f"empty_{MANY}", f"records_{MANY}"))
        print(
            f"{r['topics']:>7,} {r['create_s']:>9.1f} {empty_many['s']:>10.2f} {empty_one['s']:>10.2f} "
            f"{per_partition_ms(r):>8.2f} {empty_many['phases']['plan']:>9.2f} {empty_one['phases']['plan']:>9.2f} "
            f"{recs_many['s']:>9.2f} {recs_one['s']:>9.2f} {recs_many['s'] / recs_one['s']:>6.2f} "
            f"{recs_many['phases']['read_write']:>13.2f} {recs_one['phases']['read_write']:>13.2f} "
            f"{lines:>10} {'ok' if r['ok'] else 'MISMATCH':>7}"
        )
    for n in failed:
        print(f"{n:>7,}  failed: see the log above")
    if results:
        extra, r, extrapolated = at_goal_topics(results)
        print(
            f"goals: {args.records} records over {args.touched} of 40 topics within {RECORDS_GOAL}x of the same "
            f"records on one topic; a run with nothing new at {TOPIC_GOAL_AT:,} topics at most {TOPIC_GOAL_S:.0f} s "
            f"more than at one topic: {extra:.2f} s more"
            + (f" (EXTRAPOLATED from {r['topics']:,} topics)" if extrapolated else f" (measured at {r['topics']:,})")
        )
        write_summary(args.json, topics_summary(results))
    bad = failed or [r["topics"] for r in results if not r["ok"]]
    if bad:
        print(
            f"bronze differs from the records produced (or the run failed) for: {', '.join(f'{n:,}' for n in bad)} topics"
        )
        return 1
    return 0


# ---- the parent: one subprocess per size, then the table ---------------------------------------------


def run_size(n: int, args) -> dict | None:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--one-size",
        str(n),
        "--cap",
        str(args.cap),
        "--value-bytes",
        str(args.value_bytes),
        "--tiny",
        str(args.tiny),
        "--history",
        str(args.history),
    ]
    return run_child(cmd, RESULT_PREFIX, f"size {n:,}")


def growth_line(results: list[dict]) -> str:
    small, large = min(results, key=lambda r: r["size"]), max(results, key=lambda r: r["size"])
    if small is large:
        return "one size only: no comparison of peak memory across topic sizes"
    parts, grew = [], []
    for key, name in (("driver_peak_mb", "driver JVM"), ("workers_peak_mb", "Python workers")):
        change = large[key] / small[key] - 1 if small[key] else float("inf")
        parts.append(f"{name} {small[key]:,.0f} -> {large[key]:,.0f} MB ({change:+.0%})")
        if change > GROWTH_THRESHOLD:
            grew.append(name)
    verdict = (
        f"peak memory GREW with topic size ({', '.join(grew)})" if grew else "peak memory did not grow with topic size"
    )
    return (
        f"{verdict}: {large['size'] / small['size']:.0f}x the messages ({small['size']:,} -> {large['size']:,}), "
        f"{'; '.join(parts)} (grew = more than {GROWTH_THRESHOLD:.0%} larger)"
    )


def summary(results: list[dict], cap: int) -> list[dict]:
    """`make bench`'s lines: landing against the plain consumer, a run's fixed cost (flat in bronze's snapshots),
    and peak memory of the largest size against the smallest."""
    rows = []
    for r in results:
        case = f"{r['size']:,} x {r['value_bytes']:,} B, cap {cap:,}"
        rows.append(
            summary_row(
                "land",
                case,
                f"{r['landing_rate']:,.0f} msg/s",
                f"consume loop {r['floor_rate']:,.0f} msg/s",
                r["ratio"],
                ">= 0.5",
            )
        )
        few, many = r["fixed"], r["fixed_many"]
        rows.append(
            summary_row(
                "land",
                f"fixed cost of a run, {few['snapshots']:,} snapshots (goal < 2 s)",
                f"{few['tiny_s']:.2f} s",
                f"consumer's metadata and reads {few['floor_s']:.2f} s",
                None,
            )
        )
        rows.append(
            summary_row(
                "land",
                f"fixed cost with {many['snapshots']:,} snapshots / with {few['snapshots']:,}",
                f"{many['tiny_s']:.2f} s",
                f"{few['tiny_s']:.2f} s",
                many["tiny_s"] / few["tiny_s"],
                "<= 1.3",
            )
        )
    if len(results) >= 2:
        small, large = min(results, key=lambda r: r["size"]), max(results, key=lambda r: r["size"])
        for key, name in (("driver_peak_mb", "driver"), ("workers_peak_mb", "Python workers")):
            rows.append(
                summary_row(
                    "land",
                    f"peak {name} memory, {large['size']:,} / {small['size']:,} messages",
                    f"{large[key]:,.0f} MB",
                    f"{small[key]:,.0f} MB",
                    large[key] / small[key],
                    "<= 1.2",
                )
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes",
        default="100000,400000",
        help="comma-separated message counts (default 100000,400000: the embedded broker slows down "
        "as partitions grow, so 1000000,4000000 only completes against a real Kafka)",
    )
    parser.add_argument("--cap", type=int, default=25_000, help="landing.max_records_per_run (default 25,000)")
    parser.add_argument("--value-bytes", type=int, default=1024, help="bytes per message value (default 1024)")
    parser.add_argument("--tiny", type=int, default=5, help="tiny runs per fixed-cost measurement (default 5)")
    parser.add_argument(
        "--history", type=int, default=200, help="commits added to bronze before the second measurement (default 200)"
    )
    parser.add_argument(
        "--topics",
        help="comma-separated topic counts: measure runs over that many one-partition topics instead of the sizes",
    )
    parser.add_argument("--touched", type=int, default=4, help="with --topics: topics that get records (default 4)")
    parser.add_argument(
        "--records", type=int, default=12, help="with --topics: records per run with records (default 12)"
    )
    parser.add_argument("--json", help="write the summary rows for `make bench` here")
    parser.add_argument("--one-size", type=int, help=argparse.SUPPRESS)  # internal: run one size, print a JSON line
    parser.add_argument("--one-topics", type=int, help=argparse.SUPPRESS)  # internal: one topic count, a JSON line
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s", datefmt="%H:%M:%S"
    )

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the `with`/`finally` clean-ups
    if args.one_size is not None:
        result = one_size(args.one_size, args.cap, args.value_bytes, args.tiny, args.history)
        print(RESULT_PREFIX + json.dumps(result), flush=True)
        return 0 if result["ok"] else 1
    if args.one_topics is not None:
        result = one_topics(args.one_topics, args.touched, args.records, args.value_bytes, args.tiny)
        print(RESULT_PREFIX + json.dumps(result), flush=True)
        return 0 if result["ok"] else 1
    if args.topics:
        return topics_report(args)

    results, failed = run_each(args.sizes, lambda n: run_size(n, args))
    print()
    print(
        f"landing into bronze, cap {args.cap:,} records per run, values of {args.value_bytes:,} bytes, "
        f"{PARTITIONS} partitions, Spark local[2], driver memory 2g"
    )
    print(
        "floor = one confluent-kafka consumer over the same topic; ratio = landing msg/s / floor msg/s; "
        "landing = all runs until one lands nothing (Spark start-up excluded); runs 2+ = without the first run"
    )
    header = (
        f"{'size':>10} {'produce s':>10} {'floor msg/s':>12} {'floor MB/s':>11} {'landing msg/s':>14} {'runs 2+ msg/s':>14} {'runs':>5} "
        f"{'ratio':>6} {'ratio 2+':>9} {'driver peak MB':>15} {'workers peak MB':>16} {'bronze rows':>12}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r['size']:>10,} {r['produce_s']:>10,.0f} {r['floor_rate']:>12,.0f} {r['floor_mb_s']:>11,.1f} "
            f"{r['landing_rate']:>14,.0f} {'-' if r['later_rate'] is None else format(r['later_rate'], ',.0f'):>14} {r['landing_runs']:>5} {r['ratio']:>6.2f} "
            f"{'-' if r['later_ratio'] is None else format(r['later_ratio'], '.2f'):>9} {r['driver_peak_mb']:>15,.0f} "
            f"{r['workers_peak_mb']:>16,.0f} {r['bronze_rows']:>12,}{'' if r['ok'] else '  MISMATCH'}"
        )
    print()
    print(
        f"fixed cost = median wall time of {args.tiny} runs landing one record per partition (bookkeeping included); "
        "floor = a plain consumer's metadata, watermarks and the same records; empty = a run that finds nothing; "
        f"then again after {args.history} commits added to bronze"
    )
    header = (
        f"{'size':>10} {'snapshots':>10} {'fixed s':>8} {'floor s':>8} {'empty s':>8} {'jobs':>5}  "
        + " ".join(f"{phase:>11}" for phase in PHASES)
        + f"  {'snapshots':>10} {'fixed s':>8} {'empty s':>8}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        few, many = r["fixed"], r["fixed_many"]
        print(
            f"{r['size']:>10,} {few['snapshots']:>10,} {few['tiny_s']:>8.2f} {few['floor_s']:>8.2f} {few['empty_s']:>8.2f} "
            f"{few['jobs']:>5g}  "
            + " ".join(f"{few['phases'][phase]:>11.2f}" for phase in PHASES)
            + f"  {many['snapshots']:>10,} {many['tiny_s']:>8.2f} {many['empty_s']:>8.2f}"
        )
    for r in results:
        bulk = ", ".join(f"{phase} {r['bulk_phases'].get(phase, 0.0):.1f}s" for phase in PHASES)
        print(f"{r['size']:>10,}: all {r['landing_runs']} runs of the landing: {bulk} (landing {r['landing_s']:.1f}s)")
    for n in failed:
        print(f"{n:>10,}  failed: see the log above")
    if results:
        print(
            f"workers = sum of RSS over pyspark.daemon and its workers (up to {max(r['workers_max_count'] for r in results)} "
            f"processes; largest single worker {max(r['worker_max_mb'] for r in results):,.0f} MB); "
            f"sampled every {SAMPLE_SECONDS}s via {results[0]['sampler']}"
        )
        print(growth_line(results))
        write_summary(args.json, summary(results, args.cap))
    bad = failed or [r["size"] for r in results if not r["ok"]]
    if bad:
        print(
            f"bronze row count differs from the messages produced (or the run failed) for: {', '.join(f'{n:,}' for n in bad)}"
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
