"""Freshness in continuous mode: the seconds from each change's production to the first gold publication of it.

For every change of a steady stream over many tables, the seconds from its production to the gold publication that
first includes it, and the continuous driver's memory over the run.

    python bench/freshness.py [--minutes 10] [--rate 2000] [--tables 20] [--interval 10s] [--partitions 16]
                              [--cluster] [--json PATH]

A fresh lakehouse under `.local/bench/freshness/` (the relocated Iceberg jars kept), the embedded broker (Tansu)
with one topic of `--partitions` partitions, and a continuous driver, `ticdc-lake run --source bench_fresh
--continuous --interval <--interval>`, started as a subprocess on a configuration file of the bench's own
(Spark `local[2]`, driver memory 2g, 4 shuffle partitions; its log in `driver.log` there).

The producer (a thread of this process, one confluent-kafka producer, one record per produce batch as Tansu needs)
writes Canal-JSON with the TiDB extension as TiCDC does: first a CREATE TABLE for each of `--tables` tables of
an orders shape (12 columns) and a watermark; then, once the driver has published its first batch (Spark's start
and the tables' creation are not measured), `--rate` row changes a second for `--minutes` (every 0.1 s the
changes due by then: about 62% inserts, 33% updates, 5% deletes, spread evenly over the tables, dispatched by
index value), and a watermark to every partition each second, as TiCDC's resolved ts. Every commit ts and
watermark is a TSO taken from the wall clock when it is produced (physical ms << 18, strictly increasing), so a
change's commit ts says when it was produced. After the last change, watermarks go on until a publication
includes it (at most 5 minutes, or three times the longest batch); then the driver is stopped with SIGTERM (it
finishes the batch under way).

The driver's heartbeat (`<local_dir>/continuous/bench_fresh.json`) is read every 0.5 s; each batch it records
(finished_at_ms, consistent_ts, seconds) is a publication. A change's latency is the finish time of the first
publication whose consistent ts is >= its commit ts, minus its commit ts's physical time: it covers the wait for
the next watermark (up to 1 s), for the batch that lands it and for the one that publishes it, and that batch's
run. It is split into the wait before the publishing batch started and that batch's seconds. A change that no
publication includes by the driver's stop counts with the seconds until then, and the figures are then marked as
lower bounds. Reported: p50, p95 and max (also without the first minute), the changes/s produced, how far gold
was behind when production stopped, and the driver's rate (row changes per second of batch). Goal (issue 28):
p50 <= 15 s and p95 <= 30 s at 2,000 changes/s over 20 tables for 10 minutes.

Memory: every 5 s the RSS of the driver's JVM, of the driver's Python process and the sum over the Python workers
(`pyspark.daemon` and the workers it forks; pages shared with the daemon counted in each, so an upper bound), from
psutil (else /proc); the mean of each minute of production, and the last minute's against the second (goal: at
most 1.1x; with 2 minutes or less the second minute is the last). RSS cannot tell a leak from a heap that grows: the
JVM commits its heap as it grows towards its limit and keeps it. So the driver's JVM also writes a GC log (`gc.log`
there, a line per collection: the heap before and after it and the heap committed), and each minute reports the
least heap left after a collection (the data still live: a leak makes it climb) and the most heap committed.

The profile: each batch's seconds split into land, decode and gold from the driver's log lines (land's and gold's
lines give their seconds and phases; decode is the rest of the batch: silver and the run's own bookkeeping), and
gold's dbt phase split from dbt's `run_results.json` (read whenever it changes) into the gold and history models
and the checks; the rest of that phase is dbt's start. Also the CPU the driver's processes used (cores, from
/proc; in cluster mode the driver's only) and the machine's load average over the run, since the two cores are
shared. The summary is also written to `result.json` there, the raw figures to `raw.pickle`.

`--cluster` runs the same on a loopback cluster of its own (`ticdc_devkit.cluster`, without Airflow, under
`.local/bench/freshness/cluster/`): its broker, Spark standalone executors with the packed Python environment,
the Hive Metastore service, and dbt through the Thrift Server. There the memory is sampled for the driver's JVM,
the executors' JVMs (the driver's and the Thrift Server's), their Python workers and the Thrift Server's JVM.

Nothing is asserted; absolute numbers depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import array
import dataclasses
import datetime as dt
import json
import logging
import os
import pickle
import random
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import yaml  # noqa: E402

from bench.harness import bench_pipeline, fresh_lake, summary_row, write_summary  # noqa: E402
from bench.land import _descendants_proc, _descendants_psutil, _has_psutil  # noqa: E402
from bench.silver import CREATE_ORDERS, ORDERS, _cache_parse_type, order_row  # noqa: E402
from spark_jobs.runtime import heartbeat  # noqa: E402
from ticdc_devkit.broker import PRODUCER_SETTINGS, EmbeddedBroker, create_topics  # noqa: E402
from ticdc_devkit.simulator.model import Ddl, RowChange, Watermark  # noqa: E402
from ticdc_devkit.simulator.stream import EXTENSION_OPTIONS, encode_stream, make_encoder  # noqa: E402

BENCH_DIR = ROOT / ".local" / "bench" / "freshness"
SOURCE = "bench_fresh"
TOPIC = "bench_fresh"
PROTOCOL = "canal-json"
DATABASE = "shop"
TICK_SECONDS = 0.1  # the producer sends the changes due every this often
WATERMARK_SECONDS = 1.0
POLL_SECONDS = 0.5
SAMPLE_SECONDS = 5.0
WINDOW = 2_000  # updates and deletes pick among a table's most recent live rows
FIRST_BATCH_TIMEOUT = 900.0  # Spark's start and the first batch, on two busy cores
CATCH_UP_TIMEOUT = 300.0  # after the last change, for a publication that includes it (or 3 of the longest batch)
STOP_TIMEOUT = 300.0  # the batch under way when the driver is asked to stop
GOAL_P50, GOAL_P95, GOAL_MEMORY = 15.0, 30.0, 1.1
MB = 1024 * 1024
GC_LOG = BENCH_DIR / "gc.log"
GC_RE = re.compile(r"^\[([^\]]+)\] GC\(\d+\) Pause .* \d+M->(\d+)M\((\d+)M\)")

log = logging.getLogger("bench.freshness")


def _seconds(text: str) -> float:
    """A duration as the CLI takes it: seconds, or a number with s, m or h."""
    units = {"s": 1, "m": 60, "h": 3600}
    number, unit = (text[:-1], units[text[-1]]) if text[-1:] in units else (text, 1)
    seconds = float(number) * unit
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"a duration must be positive, got {text!r}")
    return seconds


# ---- the producer ----------------------------------------------------------------------------------------------


class Tso:
    """TiDB timestamps from the wall clock: physical ms << 18, strictly increasing (the logical part counts
    within a millisecond)."""

    def __init__(self) -> None:
        self.last = 0
        self.lock = threading.Lock()

    def next(self) -> int:
        with self.lock:
            self.last = max(self.last + 1, int(time.time() * 1000) << 18)
            return self.last


class Changes:
    """Row changes over `tables` tables of the orders shape, round robin, each table with its own live rows."""

    def __init__(self, tables: int, seed: int = 28):
        self.rng = random.Random(seed)
        self.tables = [
            dataclasses.replace(ORDERS, name=f"orders_{i:02d}", table_id=200 + i, schema_version=0)
            for i in range(tables)
        ]
        self.live: list[list[dict[str, Any]]] = [[] for _ in self.tables]
        self.next_id = 10_000_000
        self.turn = 0

    def ddl(self, tso: Tso) -> list:
        return [
            Ddl(tso.next(), DATABASE, t.name, CREATE_ORDERS.replace("`orders`", f"`{t.name}`"), "create_table", t)
            for t in self.tables
        ]

    def next(self, ts: int) -> RowChange:
        index = self.turn
        self.turn = (self.turn + 1) % len(self.tables)
        table, live, rng = self.tables[index], self.live[index], self.rng
        now = dt.datetime.fromtimestamp((ts >> 18) / 1000, dt.UTC).replace(tzinfo=None)
        r = rng.random()
        if r < 0.62 or len(live) < 20:
            self.next_id += 1
            row = order_row(self.rng, self.next_id, now)
            live.append(row)
            if len(live) > WINDOW:
                del live[: len(live) - WINDOW]
            return RowChange(ts, "insert", table, None, row)
        if r < 0.95:
            i = rng.randrange(len(live))
            old = live[i]
            new = {**old, "status": rng.choice(["paid", "shipped", "delivered", "cancelled"]), "updated_at": now}
            live[i] = new
            return RowChange(ts, "update", table, old, new)
        old = live.pop(rng.randrange(len(live)))
        return RowChange(ts, "delete", table, old, None)


class Producer:
    """The steady stream, in a thread: `rate` changes a second while `producing` is set, a watermark to every
    partition each second until `stop` is set. Every change's commit ts is kept, in production order."""

    def __init__(self, bootstrap: str, partitions: int, tables: int, rate: float):
        from confluent_kafka import Producer as KafkaProducer

        self.options = dict(EXTENSION_OPTIONS[PROTOCOL])
        make_encoder(PROTOCOL, self.options)  # imports the encoder's modules before parse_type is cached
        _cache_parse_type()
        self.partitions, self.rate = partitions, rate
        self.kafka = KafkaProducer({"bootstrap.servers": bootstrap, **PRODUCER_SETTINGS})
        self.errors: list[str] = []
        self.tso = Tso()
        self.changes = Changes(tables)
        self.commits = array.array("q")  # commit ts of every change, in production order
        self.watermarks = 0
        self.behind_max = 0  # the most changes due but not yet sent at a tick (the producer falling behind)
        self.queue_max = 0  # the most records librdkafka held undelivered
        self.producing = threading.Event()
        self.stop = threading.Event()
        self.started_at = self.ended_at = 0.0  # wall clock of the production window
        self.duration = 0.0
        self._thread = threading.Thread(target=self._run, name="producer", daemon=True)

    def send(self, events: list) -> int:
        messages = encode_stream(
            PROTOCOL, events, topic=TOPIC, partitions=self.partitions, options=self.options, dispatch="index-value"
        )
        for m in messages:
            while True:
                try:
                    self.kafka.produce(
                        m.topic, value=m.value, key=m.key, partition=m.partition, on_delivery=self._delivered
                    )
                    break
                except BufferError:  # the local queue is full: let deliveries drain, then try again
                    self.kafka.poll(0.1)
        self.kafka.poll(0)
        self.queue_max = max(self.queue_max, len(self.kafka))
        return len(messages)

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.errors.append(f"{msg.topic()}[{msg.partition()}]: {err}")

    def watermark(self) -> None:
        self.send([Watermark(self.tso.next())])
        self.watermarks += 1

    def start_production(self, duration: float) -> None:
        """Changes from now for `duration` seconds (the thread sends watermarks before, meanwhile and after)."""
        self.duration = duration
        self.started_at = time.time()
        self.producing.set()

    def _run(self) -> None:
        next_watermark = time.monotonic()
        produced_start = None
        while not self.stop.is_set():
            now = time.monotonic()
            if self.producing.is_set():
                if produced_start is None:
                    produced_start = now
                elapsed = now - produced_start
                if elapsed >= self.duration:
                    self.producing.clear()
                    self.ended_at = time.time()
                else:
                    due = int(self.rate * elapsed) - len(self.commits)
                    self.behind_max = max(self.behind_max, due - int(self.rate * TICK_SECONDS))
                    due = min(due, int(self.rate))  # at most a second's worth at once: the watermarks go on
                    if due > 0:
                        events = []
                        for _ in range(due):
                            ts = self.tso.next()
                            events.append(self.changes.next(ts))
                            self.commits.append(ts)
                        self.send(events)
            if now >= next_watermark:
                self.watermark()
                next_watermark += WATERMARK_SECONDS
                if next_watermark < now:
                    next_watermark = now + WATERMARK_SECONDS
            self.stop.wait(max(0.0, TICK_SECONDS - (time.monotonic() - now)))
        self.kafka.flush(60)

    def start(self, ddl: bool = True) -> None:
        if ddl:
            self.send(self.changes.ddl(self.tso))
        self.watermark()
        self._thread.start()

    def close(self) -> None:
        self.stop.set()
        self._thread.join()
        remaining = self.kafka.flush(60)
        if remaining or self.errors:
            raise RuntimeError(f"produce failed: {remaining} undelivered; {self.errors[:3]}")


# ---- the driver, its heartbeat and its memory --------------------------------------------------------------------


class Publications:
    """Every batch the heartbeat records, read every POLL_SECONDS in a thread (its `recent` list keeps the last 60,
    far more than pass between two reads)."""

    def __init__(self, local_dir: Path):
        self.local_dir = local_dir
        self.batches: dict[int, dict] = {}  # finished_at_ms -> the heartbeat's entry
        self.last: dict | None = None
        self.run_results = local_dir / "dbt" / "runs" / SOURCE / "target" / "run_results.json"  # gold's run project
        self.dbt: dict[int, dict] = {}  # run_results.json's mtime (ns) -> dbt_summary of that invocation
        self.stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="heartbeat-reader", daemon=True)

    def read(self) -> dict | None:
        beat = heartbeat.read_heartbeat(self.local_dir, SOURCE)
        if beat is not None:
            self.last = beat
            for entry in beat.get("recent", []):
                self.batches.setdefault(int(entry["finished_at_ms"]), entry)
        return beat

    def read_dbt(self) -> None:
        try:
            mtime = self.run_results.stat().st_mtime_ns
            if mtime not in self.dbt:
                self.dbt[mtime] = dbt_summary(json.loads(self.run_results.read_text()))
        except (OSError, ValueError, KeyError):
            pass  # not written yet, or being written

    def _run(self) -> None:
        while not self.stop.wait(POLL_SECONDS):
            self.read()
            self.read_dbt()

    def start(self) -> Publications:
        self._thread.start()
        return self

    def close(self) -> None:
        self.stop.set()
        self._thread.join()
        self.read()

    def covering(self, ts: int) -> bool:
        return any((b["consistent_ts"] or 0) >= ts for b in list(self.batches.values()))

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(finished_at_ms, consistent ts so far, seconds) per batch in order."""
        entries = [self.batches[k] for k in sorted(self.batches)]
        finished = np.array([e["finished_at_ms"] for e in entries], dtype=np.int64)
        ts = np.maximum.accumulate(np.array([e["consistent_ts"] or 0 for e in entries], dtype=np.int64))
        seconds = np.array([e["seconds"] for e in entries], dtype=np.float64)
        return finished, ts, seconds


def dbt_summary(doc: dict) -> dict:
    """What one `dbt build`/`run` of gold spent: its own elapsed seconds, the span of the gold and history models
    (run in parallel threads) and the span of the checks (the checks model and its test)."""

    def span(results: list[dict]) -> float:
        stamps = [t for r in results for t in r["timing"] if t.get("started_at") and t.get("completed_at")]
        if not stamps:
            return 0.0
        started = min(dt.datetime.fromisoformat(t["started_at"].replace("Z", "+00:00")) for t in stamps)
        completed = max(dt.datetime.fromisoformat(t["completed_at"].replace("Z", "+00:00")) for t in stamps)
        return (completed - started).total_seconds()

    checks = [r for r in doc["results"] if r["unique_id"].startswith("test.") or r["unique_id"].endswith("__checks")]
    models = [r for r in doc["results"] if r not in checks]
    return {
        "elapsed": float(doc["elapsed_time"]),
        "models": span(models),
        "model_nodes": len(models),
        "checks": span(checks),
        "slowest": max((r["execution_time"] for r in models), default=0.0),
    }


def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    """CPU seconds of a process and of its children it has waited for (utime, stime, cutime, cstime)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return sum(int(f) for f in fields[11:15]) / CLOCK_TICKS
    except (OSError, ValueError, IndexError):
        return 0.0


def _all_processes() -> list[tuple[int, int, str]]:
    """(pid, parent pid, command line) of every process."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            out.append((int(entry), int(stat.rsplit(")", 1)[1].split()[1]), cmdline.strip()))
        except (OSError, ValueError, IndexError):
            continue
    return out


def _is_python_worker(cmdline: str) -> bool:
    return "pyspark.daemon" in cmdline or "pyspark.worker" in cmdline


class MemorySampler:
    """RSS per process kind every SAMPLE_SECONDS, in a thread: (seconds since production started, {kind: bytes}).
    Embedded: the driver's JVM, the driver's Python and its Python workers (descendants of the driver process).
    Cluster: also the executors' JVMs and their Python workers, and the Thrift Server's JVM."""

    def __init__(self, driver_pid: int, worker_pid: int | None = None, thrift_pid: int | None = None):
        self.driver_pid, self.worker_pid, self.thrift_pid = driver_pid, worker_pid, thrift_pid
        self.descendants = _descendants_psutil if _has_psutil() else _descendants_proc
        self.method = "psutil" if _has_psutil() else "/proc"
        self.samples: list[tuple[float, dict[str, int]]] = []
        self.cpu: list[tuple[float, float, float]] = []  # (seconds since production started, driver CPU s, load)
        self.origin: float | None = None  # wall clock of the production's start
        self.stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def sample(self) -> tuple[dict[str, int], float]:
        kinds = {"driver JVM": 0, "driver Python": _rss(self.driver_pid), "workers": 0}
        descendants = self.descendants(self.driver_pid)
        cpu = sum(_cpu_seconds(pid) for pid in [self.driver_pid, *(d[0] for d in descendants)])
        for _, cmdline, rss in descendants:
            if cmdline.split(" ", 1)[0].endswith("java") and "SparkSubmit" in cmdline:
                kinds["driver JVM"] = max(kinds["driver JVM"], rss)
            elif _is_python_worker(cmdline):
                kinds["workers"] += rss
        if self.worker_pid is not None:
            kinds |= {"executor JVMs": 0, "executor workers": 0, "Thrift Server JVM": 0}
            processes = _all_processes()
            children: dict[int, list[int]] = {}
            for pid, ppid, _ in processes:
                children.setdefault(ppid, []).append(pid)
            command = {pid: cmdline for pid, _, cmdline in processes}
            executors = [
                pid
                for pid in children.get(self.worker_pid, [])
                if "CoarseGrainedExecutorBackend" in command.get(pid, "")
            ]
            for executor in executors:
                kinds["executor JVMs"] += _rss(executor)
                frontier = list(children.get(executor, []))
                while frontier:
                    pid = frontier.pop()
                    if _is_python_worker(command.get(pid, "")):
                        kinds["executor workers"] += _rss(pid)
                    frontier += children.get(pid, [])
            if self.thrift_pid:
                jvms = [self.thrift_pid, *children.get(self.thrift_pid, [])]
                kinds["Thrift Server JVM"] = max(_rss(pid) for pid in jvms)
        return kinds, cpu

    def _run(self) -> None:
        while True:
            kinds, cpu = self.sample()
            if self.origin is not None:
                at = time.time() - self.origin
                self.samples.append((at, kinds))
                self.cpu.append((at, cpu, os.getloadavg()[0]))
            if self.stop.wait(SAMPLE_SECONDS):
                return

    def start(self) -> MemorySampler:
        self._thread.start()
        return self

    def close(self) -> None:
        self.stop.set()
        self._thread.join()

    def per_minute(self, minutes: int) -> dict[str, list[float | None]]:
        """Mean RSS (MB) per kind in each minute of production."""
        kinds = list(self.samples[0][1]) if self.samples else []
        out: dict[str, list[float | None]] = {}
        for kind in kinds:
            means: list[float | None] = []
            for minute in range(minutes):
                values = [s[kind] for t, s in self.samples if minute * 60 <= t < (minute + 1) * 60]
                means.append(statistics.fmean(values) / MB if values else None)
            out[kind] = means
        return out

    def cores(self, seconds: float) -> tuple[float | None, float | None]:
        """(cores the driver's processes used, mean 1-minute load average) over the first `seconds` of production."""
        within = [c for c in self.cpu if c[0] <= seconds]
        if len(within) < 2:
            return None, None
        (t0, cpu0, _), (t1, cpu1, _) = within[0], within[-1]
        return (cpu1 - cpu0) / (t1 - t0) if t1 > t0 else None, statistics.fmean(c[2] for c in within)


def gc_java_options(path: Path) -> str:
    """The driver JVM's option for its GC log: a line per collection, stamped with the wall clock in UTC."""
    return f"-Xlog:gc:file={path}:utctime"


def gc_per_minute(path: Path, origin: float, minutes: int) -> dict[str, list[float | None]]:
    """Per minute of production, from the driver JVM's GC log: the least heap (MB) left after a collection, and the
    most heap committed."""
    after: list[list[int]] = [[] for _ in range(minutes)]
    committed: list[list[int]] = [[] for _ in range(minutes)]
    for line in path.read_text().splitlines() if path.exists() else []:
        found = GC_RE.match(line)
        if not found:
            continue
        at = dt.datetime.strptime(found[1], "%Y-%m-%dT%H:%M:%S.%f%z").timestamp() - origin
        if 0 <= at < minutes * 60:
            after[int(at // 60)].append(int(found[2]))
            committed[int(at // 60)].append(int(found[3]))
    return {
        "driver JVM heap after GC": [float(min(m)) if m else None for m in after],
        "driver JVM heap committed": [float(max(m)) if m else None for m in committed],
    }


# ---- the driver's log: each batch's seconds split into land, decode and gold --------------------------------------

LAND_RE = re.compile(r": (?:landed (\d+) records|nothing new to land).*, ([\d.]+)s \(([^()]*)\)$")
GOLD_RE = re.compile(r"gold tables consistent as of TiDB ts \d+ .*; ([\d.]+)s \(([^()]*)\)$")
BATCH_RE = re.compile(r"source \S+ batch (\d+): (\d+) records landed, (\d+) row changes, .*; ([\d.]+)s$")


def _phases(text: str) -> dict[str, float]:
    out = {}
    for part in text.split(", "):
        name, _, seconds = part.rpartition(" ")
        if name and seconds.endswith("s"):
            out[name] = float(seconds[:-1])
    return out


def parse_driver_log(path: Path) -> list[dict]:
    """One entry per batch: its number, records, row changes, seconds, land and gold seconds and phases, and
    decode = the rest."""
    batches: list[dict] = []
    land: tuple[float, dict] | None = None
    gold: tuple[float, dict] | None = None
    for line in path.read_text(errors="replace").splitlines():
        if m := LAND_RE.search(line):
            land = (float(m[2]), _phases(m[3]))
        elif m := GOLD_RE.search(line):
            gold = (float(m[1]), _phases(m[2]))
        elif m := BATCH_RE.search(line):
            seconds = float(m[4])
            land_s, land_phases = land or (0.0, {})
            gold_s, gold_phases = gold or (0.0, {})
            batches.append(
                {
                    "batch": int(m[1]),
                    "records": int(m[2]),
                    "row_changes": int(m[3]),
                    "seconds": seconds,
                    "land": land_s,
                    "land_phases": land_phases,
                    "gold": gold_s,
                    "gold_phases": gold_phases,
                    "decode": max(0.0, seconds - land_s - gold_s),
                }
            )
            land = gold = None
    return batches


def profile(batches: list[dict]) -> dict:
    """Mean seconds per batch of the batches that decoded row changes: batch, land, decode, gold and their phases."""
    busy = [b for b in batches if b["row_changes"]]
    if not busy:
        return {"batches": 0}
    out: dict[str, Any] = {"batches": len(busy)}
    for key in ("seconds", "land", "decode", "gold", "records", "row_changes"):
        out[key] = statistics.fmean(b[key] for b in busy)
    for step in ("land", "gold"):
        names = list(dict.fromkeys(name for b in busy for name in b[f"{step}_phases"]))
        out[f"{step}_phases"] = {n: statistics.fmean(b[f"{step}_phases"].get(n, 0.0) for b in busy) for n in names}
    third = max(1, len(busy) // 3)
    out["capacity"] = sum(b["row_changes"] for b in busy) / sum(b["seconds"] for b in busy)
    out["first_third"] = {
        k: statistics.fmean(b[k] for b in busy[:third]) for k in ("seconds", "land", "decode", "gold")
    }
    out["last_third"] = {
        k: statistics.fmean(b[k] for b in busy[-third:]) for k in ("seconds", "land", "decode", "gold")
    }
    return out


# ---- one run ----------------------------------------------------------------------------------------------------


def source_settings(bootstrap: str):
    from spark_jobs.config import KafkaSettings, SourceSettings

    return SourceSettings(
        name=SOURCE,
        protocol=PROTOCOL,
        kafka=KafkaSettings(bootstrap_servers=bootstrap),
        topics=[TOPIC],
        options=dict(EXTENSION_OPTIONS[PROTOCOL]),
    )


def write_config(config, path: Path) -> Path:
    """A PipelineConfig as the YAML file `ticdc-lake --config` reads (as tests/e2e/conftest.py writes it)."""
    doc = {field: value for field, value in dataclasses.asdict(config).items() if field != "path"}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def start_driver(config_path: Path, interval: float, log_path: Path) -> subprocess.Popen:
    """`ticdc-lake run --continuous` in a session of its own (so its JVM and workers can be stopped with it)."""
    command = [str(Path(sys.executable).parent / "ticdc-lake"), "run", "--source", SOURCE]
    command += ["--config", str(config_path), "--continuous", "--interval", f"{interval:g}s"]
    with log_path.open("ab") as out:
        return subprocess.Popen(
            command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )


def stop_driver(driver: subprocess.Popen) -> int:
    """SIGTERM (the batch under way finishes first); the whole session killed if it does not end in time."""
    if driver.poll() is None:
        driver.send_signal(signal.SIGTERM)
        try:
            return driver.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            log.warning("the driver did not stop within %.0fs of SIGTERM: killing it", STOP_TIMEOUT)
            os.killpg(driver.pid, signal.SIGKILL)
    return driver.wait()


def wait_for(condition, timeout: float, what: str, driver: subprocess.Popen, log_path: Path) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if driver.poll() is not None:
            raise RuntimeError(f"the driver exited (code {driver.returncode}) while waiting for {what}; see {log_path}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"no {what} within {timeout:.0f}s; see {log_path}")
        time.sleep(POLL_SECONDS)


def measure(
    args,
    bootstrap: str,
    config_path: Path,
    local_dir: Path,
    worker_pid: int | None = None,
    thrift_pid: int | None = None,
) -> dict:
    """Produce, drive, poll and sample; the raw figures."""
    create_topics(bootstrap, [TOPIC], args.partitions)
    producer = Producer(bootstrap, args.partitions, args.tables, args.rate)
    producer.start()
    log_path = BENCH_DIR / "driver.log"
    log.info("driver: ticdc-lake run --continuous --interval %gs (log %s)", args.interval, log_path)
    started = time.monotonic()
    driver = start_driver(config_path, args.interval, log_path)
    publications = Publications(local_dir).start()
    sampler = MemorySampler(driver.pid, worker_pid, thrift_pid).start()
    out: dict[str, Any] = {}
    try:
        wait_for(lambda: bool(publications.batches), FIRST_BATCH_TIMEOUT, "first batch", driver, log_path)
        out["first_batch_s"] = time.monotonic() - started
        log.info(
            "first batch published %.0fs after the driver's start; producing for %g min",
            out["first_batch_s"],
            args.minutes,
        )
        duration = args.minutes * 60
        producer.start_production(duration)
        sampler.origin = producer.started_at
        next_report = time.monotonic() + 60
        while producer.producing.is_set() or not producer.ended_at:
            if driver.poll() is not None:
                raise RuntimeError(f"the driver exited (code {driver.returncode}); see {log_path}")
            if time.monotonic() >= next_report:
                beat = publications.last or {}
                behind = heartbeat.freshness_seconds(beat)
                log.info(
                    "%s changes produced; %d batches, gold %s behind",
                    f"{len(producer.commits):,}",
                    beat.get("batches", 0),
                    "-" if behind is None else f"{behind:.1f}s",
                )
                next_report += 60
            time.sleep(POLL_SECONDS)
        last = producer.commits[-1] if producer.commits else 0
        log.info(
            "production over: %s changes; waiting for a publication that includes the last",
            f"{len(producer.commits):,}",
        )
        _, _, seconds = publications.arrays()
        try:
            wait_for(
                lambda: publications.covering(last),
                max(CATCH_UP_TIMEOUT, 3 * float(seconds.max(initial=0))),
                "publication of the last change",
                driver,
                log_path,
            )
        except RuntimeError as exc:
            out["stopped"] = str(exc)
            log.warning("%s", exc)
    finally:
        code = stop_driver(driver)
        out["ended_ms"] = time.time() * 1000
        publications.close()
        if out.get("stopped") and producer.commits and publications.covering(producer.commits[-1]):
            out["stopped"] = None  # the batch under way when the driver was stopped published the last change
            out["last_by_stopped_batch"] = True
        sampler.close()
        producer.close()
    minutes = max(1, int(np.ceil(args.minutes)))
    out.update(
        driver_exit=code,
        commits=np.frombuffer(producer.commits, dtype=np.int64) if producer.commits else np.zeros(0, np.int64),
        production_s=producer.ended_at - producer.started_at,
        watermarks=producer.watermarks,
        behind_max=producer.behind_max,
        queue_max=producer.queue_max,
        publications=publications.arrays(),
        heartbeat=publications.last,
        memory=sampler.per_minute(minutes) | gc_per_minute(GC_LOG, producer.started_at, minutes),
        memory_method=sampler.method,
        cores=sampler.cores(args.minutes * 60),
        log_batches=parse_driver_log(log_path),
        dbt=[d for t, d in sorted(publications.dbt.items()) if d["model_nodes"] and t >= producer.started_at * 1e9],
    )
    return out


def latencies(commits: np.ndarray, publications: tuple[np.ndarray, np.ndarray, np.ndarray], ended_ms: float) -> dict:
    """Each change's seconds to the first publication including it, and its split: the wait before the publishing
    batch started and that batch's seconds. A change no publication included gets the seconds until the driver
    stopped (`ended_ms`), a lower bound."""
    finished, ts, seconds = publications
    index = np.searchsorted(ts, commits, side="left")
    included = index < len(ts)
    produced_ms = (commits >> 18).astype(np.float64)
    published_ms = np.where(included, finished[np.minimum(index, len(ts) - 1)] if len(ts) else 0, ended_ms)
    latency = (published_ms - produced_ms) / 1000
    batch = seconds[index[included]]
    return {
        "changes": len(commits),
        "unpublished": int((~included).sum()),
        "latency": latency,
        "wait": latency[included] - batch,
        "batch": batch,
    }


def summarise(args, raw: dict) -> dict:
    r = {k: v for k, v in raw.items() if k not in ("commits", "publications", "log_batches", "dbt")}
    ended_ms = raw.get("ended_ms") or (raw["heartbeat"] or {}).get("heartbeat_at_ms", time.time() * 1000)
    commits = raw["commits"]
    lat = latencies(commits, raw["publications"], ended_ms)
    r["changes"] = lat["changes"]
    r["unpublished"] = lat["unpublished"]
    r["rate"] = lat["changes"] / raw["production_s"] if raw["production_s"] else 0.0
    if lat["changes"]:
        p50, p95 = np.percentile(lat["latency"], [50, 95])
        r.update(p50=float(p50), p95=float(p95), max=float(lat["latency"].max()), mean=float(lat["latency"].mean()))
        if len(lat["batch"]):
            r.update(wait_mean=float(lat["wait"].mean()), batch_mean=float(lat["batch"].mean()))
        # after the first minute: without the first batches, whose gold tables get their first rows
        late = (commits >> 18) >= (commits[0] >> 18) + 60_000
        if late.any():
            r["p50_after_first_minute"], r["p95_after_first_minute"] = (
                float(v) for v in np.percentile(lat["latency"][late], [50, 95])
            )
        # how far gold was behind when production stopped
        finished, ts, _ = raw["publications"]
        end_ms = (int(commits[-1]) >> 18) + 1
        before = ts[finished <= end_ms]
        r["behind_at_end"] = (end_ms - (int(before[-1]) >> 18)) / 1000 if len(before) else None
    finished, _, seconds = raw["publications"]
    start_ms = raw["commits"][0] >> 18 if len(raw["commits"]) else 0
    during = [s for f, s in zip(finished, seconds) if f >= start_ms]
    r["batches"] = len(during)
    r["batch_s"] = statistics.fmean(during) if during else None
    r["profile"] = profile(raw["log_batches"])
    if raw["dbt"]:
        r["profile"]["dbt"] = {k: statistics.fmean(d[k] for d in raw["dbt"]) for k in raw["dbt"][0]}
        r["profile"]["dbt"]["invocations"] = len(raw["dbt"])
    mem = raw["memory"]
    r["memory_ratio"] = {}
    for kind, means in mem.items():
        second, last = (means[1] if len(means) > 1 else means[0]), means[-1]
        r["memory_ratio"][kind] = last / second if second and last else None
    return r


# ---- the parent: the run and its report ---------------------------------------------------------------------------


def run(args) -> dict:
    fresh_lake(BENCH_DIR)
    if args.cluster:
        return run_cluster(args)
    with EmbeddedBroker(BENCH_DIR / "broker") as broker:
        config = bench_pipeline([source_settings(broker.bootstrap)], BENCH_DIR, "bench-freshness", "2g")
        config.runtime.spark.conf["spark.driver.extraJavaOptions"] = gc_java_options(GC_LOG)
        path = write_config(config, BENCH_DIR / "bench-freshness.yaml")
        return measure(args, broker.bootstrap, path, BENCH_DIR)


def run_cluster(args) -> dict:
    from spark_jobs.config import DEFAULT_CONFIG
    from ticdc_devkit.cluster import LoopbackCluster

    directory = BENCH_DIR / "cluster"
    log.info("starting a loopback cluster under %s (no Airflow)", directory)
    cluster = LoopbackCluster(directory).up(DEFAULT_CONFIG, airflow=False)
    try:
        bootstrap = f"127.0.0.1:{cluster.port('broker')}"
        raw = yaml.safe_load(cluster.config_path.read_text())
        raw["sources"] = [dataclasses.asdict(source_settings(bootstrap))]
        conf = raw["runtime"]["spark"].setdefault("conf", {})
        conf["spark.driver.extraJavaOptions"] = (
            f"{conf.get('spark.driver.extraJavaOptions', '')} {gc_java_options(GC_LOG)}"
        )
        path = BENCH_DIR / "bench-freshness-cluster.yaml"
        path.write_text(yaml.safe_dump(raw, sort_keys=False))
        local_dir = Path(raw["runtime"]["local_dir"])
        services = cluster.services
        return measure(args, bootstrap, path, local_dir, services["spark-worker"].pid, services["thrift-server"].pid)
    finally:
        log.info("stopping the loopback cluster: %s", ", ".join(cluster.down()))


def report(args, r: dict) -> None:
    mode = "cluster mode (loopback cluster)" if args.cluster else "embedded mode (local[2])"
    print()
    print(
        f"freshness, {mode}: {args.rate:,.0f} changes/s asked over {args.tables} tables, {args.partitions} partitions, "
        f"{args.minutes:g} min, a batch every {args.interval:g}s asked; Spark's start and first batch "
        f"{r['first_batch_s']:.0f}s (not measured)"
    )
    print(
        f"produced {r['changes']:,} changes at {r['rate']:,.0f}/s, a watermark to every partition each second "
        f"(at most {r['behind_max']:,} changes behind schedule, {r['queue_max']:,} records queued in the producer)"
    )
    if "p50" not in r:
        print(f"no change was published: {r.get('stopped', 'see the driver log')}")
        return
    at_least = ">= " if r["unpublished"] else ""
    met = not r["unpublished"] and r["p50"] <= GOAL_P50 and r["p95"] <= GOAL_P95
    print(
        f"latency from production to the first publication including it: p50 {at_least}{r['p50']:.1f}s, "
        f"p95 {at_least}{r['p95']:.1f}s, max {at_least}{r['max']:.1f}s (goal p50 <= {GOAL_P50:g}s, "
        f"p95 <= {GOAL_P95:g}s: {'met' if met else 'not met'})"
    )
    if r["unpublished"]:
        print(
            f"  {r['unpublished']:,} changes ({r['unpublished'] / r['changes']:.0%}) were in no publication when the "
            "driver stopped: each counted with the seconds until then, so the figures are lower bounds"
        )
    if "p50_after_first_minute" in r:
        print(
            f"  after the first minute: p50 {at_least}{r['p50_after_first_minute']:.1f}s, "
            f"p95 {at_least}{r['p95_after_first_minute']:.1f}s"
        )
    if "wait_mean" in r:
        print(
            f"  published changes: mean {r['wait_mean'] + r['batch_mean']:.1f}s = {r['wait_mean']:.1f}s waiting for the "
            f"batch that publishes it to start + {r['batch_mean']:.1f}s of that batch"
        )
    if r.get("behind_at_end") is not None:
        capacity = r["profile"].get("capacity")
        print(
            f"  gold was {r['behind_at_end']:.0f}s behind when production stopped"
            + (
                ""
                if capacity is None
                else f"; the driver decodes and publishes {capacity:,.0f} row changes per second "
                f"of batch (batches with row changes; {args.rate:,.0f}/s produced)"
            )
        )
    used, load = r["cores"]
    whose = "the driver's processes (not the executors)" if args.cluster else "its processes"
    machine = "" if used is None else f"; {whose} used {used:.2f} cores, the machine's load average {load:.1f}"
    print(
        f"driver: {r['batches']} batches from the production's start to the end, mean {r['batch_s']:.1f}s a batch{machine}"
    )
    p = r["profile"]
    if p["batches"]:

        def phases(d: dict) -> str:
            return ", ".join(f"{k} {v:.1f}" for k, v in d.items())

        print(
            f"profile (mean of {p['batches']} batches with row changes, {p['records']:,.0f} records each): "
            f"{p['seconds']:.1f}s = land {p['land']:.1f}s ({phases(p['land_phases'])}) + decode {p['decode']:.1f}s "
            f"+ gold {p['gold']:.1f}s ({phases(p['gold_phases'])})"
        )
        f, last = p["first_third"], p["last_third"]
        print(
            f"  first third of the batches: {f['seconds']:.1f}s (land {f['land']:.1f}, decode {f['decode']:.1f}, "
            f"gold {f['gold']:.1f}); last third: {last['seconds']:.1f}s (land {last['land']:.1f}, "
            f"decode {last['decode']:.1f}, gold {last['gold']:.1f})"
        )
        if "dbt" in p:
            d = p["dbt"]
            print(
                f"  gold's dbt phase: dbt's own {d['elapsed']:.1f}s = the {d['model_nodes']:.0f} gold and history models "
                f"{d['models']:.1f}s (in parallel; the slowest {d['slowest']:.1f}s) + the checks {d['checks']:.1f}s "
                f"(mean of {d['invocations']} dbt builds); the rest of the phase, {p['gold_phases'].get('dbt', 0) - d['elapsed']:.1f}s, "
                "is dbt's start"
            )
    minutes = len(next(iter(r["memory"].values()), []))
    note = " (the second minute is the last)" if minutes <= 2 else ""
    print(
        f"memory (MB per minute of production: RSS, the mean, {r['memory_method']}; the driver JVM's heap after GC, "
        f"the least, and committed, the most; last minute / second{note}):"
    )
    for kind, means in r["memory"].items():
        if not any(means):
            continue  # none of that kind (the driver's local workers in cluster mode)
        ratio = r["memory_ratio"][kind]
        shown = " ".join("-" if m is None else f"{m:,.0f}" for m in means)
        print(f"  {kind:<25} {shown}  ratio {'-' if ratio is None else f'{ratio:.2f}'}")
    if r.get("stopped"):
        print(f"stopped: {r['stopped']}")
    elif r.get("last_by_stopped_batch"):
        print("the last change was published only by the batch under way when the driver was stopped")


def summary(args, r: dict) -> list[dict]:
    """`make bench`'s lines: p50 and p95 against their goals, and each memory's last minute against its second."""
    mode = "cluster" if args.cluster else "embedded"
    case = f"{args.rate:,.0f} changes/s, {args.tables} tables, {args.minutes:g} min, {mode}"
    if "p50" not in r:
        return [summary_row("freshness", case, "stopped: nothing published", "-", None)]
    at_least = ">= " if r["unpublished"] else ""
    rows = [
        summary_row(
            "freshness", case, f"p50 {at_least}{r['p50']:.1f} s", f"goal {GOAL_P50:g} s", r["p50"] / GOAL_P50, "<= 1.0"
        ),
        summary_row(
            "freshness",
            case,
            f"p95 {at_least}{r['p95']:.1f} s (max {at_least}{r['max']:.0f} s, {r['rate']:,.0f} changes/s)",
            f"goal {GOAL_P95:g} s",
            r["p95"] / GOAL_P95,
            "<= 1.0",
        ),
    ]
    for kind in ("driver JVM", "driver JVM heap after GC", "workers", "executor JVMs", "executor workers"):
        means, ratio = r["memory"].get(kind), r["memory_ratio"].get(kind)
        if means and ratio is not None:
            second = means[1] if len(means) > 1 else means[0]
            measure = kind if "heap" in kind else f"{kind} RSS"
            rows.append(
                summary_row(
                    "freshness",
                    case,
                    f"{measure} last minute {means[-1]:,.0f} MB",
                    f"second minute {second:,.0f} MB",
                    ratio,
                    f"<= {GOAL_MEMORY}",
                )
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="minutes of production (default 10)")
    parser.add_argument("--rate", type=float, default=2000.0, help="row changes a second (default 2,000)")
    parser.add_argument("--tables", type=int, default=20, help="tables the changes are spread over (default 20)")
    parser.add_argument("--interval", type=_seconds, default=10.0, help="the driver's --interval (default 10s)")
    parser.add_argument("--partitions", type=int, default=16, help="partitions of the topic (default 16)")
    parser.add_argument("--cluster", action="store_true", help="on a loopback cluster of its own")
    parser.add_argument("--json", help="write the summary rows for `make bench` here")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s", datefmt="%H:%M:%S"
    )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the `with`/`finally` clean-ups
    raw = run(args)
    with (BENCH_DIR / "raw.pickle").open("wb") as f:  # the run's raw figures, to summarise again
        pickle.dump(raw, f)
    r = summarise(args, raw)
    report(args, r)
    write_summary(args.json, summary(args, r))
    (BENCH_DIR / "result.json").write_text(json.dumps(r, indent=1, default=str))
    return 0 if "p50" in r and not r.get("stopped") else 1


if __name__ == "__main__":
    sys.exit(main())
