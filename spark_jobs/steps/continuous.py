"""Continuous mode: one long-lived process runs the source's ingest in micro-batches, each a whole `run_once`
(land exactly once, decode and dedupe, publish gold at one consistent timestamp, with history), so a change
reaches gold a batch after it reaches Kafka instead of a schedule's period later.

The driver holds the source's lock from start to stop, so no scheduled run or rebuild of the source writes
while it runs. It keeps one JVM and one Spark session for all its batches, stops between batches on SIGTERM or
SIGINT, pauses on a transient fault (a broker or catalog down: one line per attempt, then the same batch again
after a growing wait), and stops on any other error (its supervisor restarts it). A heartbeat file says what it
is doing (`runtime.heartbeat`).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from spark_jobs.errors import ConfigError, TransientFault, cause_line
from spark_jobs.runtime import heartbeat
from spark_jobs.runtime.lock import CONTINUOUS_HOLDER, source_lock
from spark_jobs.runtime.results import Result
from spark_jobs.runtime.spark_session import hold_embedded_metastore
from spark_jobs.steps.context import ConfigRef, pipeline_config, writing
from spark_jobs.steps.ingest import RunResult, generate_docs, record_status, run_once
from spark_jobs.steps.maintaining import compact_gold, maintain

log = logging.getLogger(__name__)

MAX_PAUSE_SECONDS = 300.0  # the longest wait between two attempts after a transient fault
STATUS_EVERY_SECONDS = 60.0  # how often the driver records the status page's snapshot
DOCS_EVERY = 10  # the docs site: once every this many status records
COMPACT_AFTER = 10  # a gold or history table is compacted once this many batches have merged into it


def due_for_compaction(merged: Counter[str], after: int | None = None) -> list[str]:
    """Of the tables merged into since their last compaction (with how many batches each), those to compact after
    this batch: `after` (default COMPACT_AFTER) batches or more, the longest-merged first, and at most one in
    `after` of the tables a batch, so that the compactions are spread over the batches. Every table a batch touches
    reaches the count in the same batch; compacting them all at once (40 tables: 30 s) stalled that batch's changes."""
    after = after or COMPACT_AFTER
    ready = sorted(
        (relation for relation, batches in merged.items() if batches >= after), key=lambda r: (-merged[r], r)
    )
    return sorted(ready[: max(1, -(-len(merged) // after))])


@dataclass(frozen=True)
class ContinuousResult(Result):
    """What a continuous driver did from its start to its stop."""

    source: str
    batches: int
    paused: int  # attempts that met a transient fault
    records: int  # Kafka records landed
    row_changes: int  # row changes decoded into silver
    consistent_ts: int | None  # gold's, after the last batch
    seconds: float
    stopped_by: str  # "signal", "stop" (asked in-process) or "max_batches"
    per_batch_seconds: list[float] = field(default_factory=list)
    compacted: int = 0  # compactions of a gold or history table (COMPACT_AFTER)
    maintained: int = 0  # maintenance runs of the whole lakehouse (embedded mode: maintenance.continuous_every)

    def lines(self) -> list[str]:
        return [
            f"{self.source}: {self.batches} batches in {self.seconds:.1f}s ({self.paused} paused), "
            f"{self.records} records landed, {self.row_changes} row changes; gold as of TiDB ts "
            f"{self.consistent_ts}; {self.compacted} table compactions, {self.maintained} lakehouse maintenance "
            f"runs; stopped by {self.stopped_by}"
        ]


def pause_seconds(interval: float, attempt: int) -> float:
    """The wait before attempt `attempt + 1` after `attempt` transient faults in a row: the interval, doubled
    each time, at most MAX_PAUSE_SECONDS."""
    return float(min(max(interval, 1.0) * 2 ** (attempt - 1), MAX_PAUSE_SECONDS))


class _Driver:
    """The loop's counters and its heartbeat, which a thread of its own rewrites every few seconds (a batch can
    take longer than the heartbeat's staleness limit)."""

    def __init__(self, source: str, local_dir: Any, interval: float):
        self.source, self.local_dir, self.interval = source, local_dir, interval
        self.started = time.monotonic()
        self.lock = threading.Lock()
        self.batches = self.paused = self.records = self.row_changes = self.faults_in_a_row = 0
        self.consistent_ts: int | None = None
        self.per_batch: list[float] = []
        self.built: set[str] = set()  # relations built since the docs site was last regenerated
        self.merged: Counter[str] = Counter()  # relation -> batches that built it since it was last compacted
        self.compacted = 0  # compactions of a gold or history table
        self.maintained = 0  # maintenance runs of the lakehouse
        # when the lakehouse was last maintained by a driver of the source (its heartbeat keeps it across restarts)
        previous = heartbeat.read_heartbeat(local_dir, source) or {}
        self.maintained_at_ms: int = previous.get("maintained_at_ms") or heartbeat.now_ms()
        self.status_kept = self.docs_kept = float("-inf")
        self.document: dict[str, Any] = {
            "source": source,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "interval_seconds": interval,
            "state": heartbeat.STARTING,
            "batches": 0,
            "paused": 0,
            "records": 0,
            "row_changes": 0,
            "consistent_ts": None,
            "published_at_ms": None,
            "fault": None,
            "recent": [],
            "maintained_at_ms": self.maintained_at_ms,
        }

    def beat(self, **changes: Any) -> None:
        with self.lock:
            self.document.update(changes, heartbeat_at_ms=heartbeat.now_ms())
            heartbeat.write_heartbeat(self.local_dir, self.document)

    @contextmanager
    def beating(self) -> Iterator[None]:
        done = threading.Event()

        def keep_beating() -> None:
            while not done.wait(heartbeat.BEAT_SECONDS):
                self.beat()

        self.beat(started_at_ms=heartbeat.now_ms())
        thread = threading.Thread(target=keep_beating, name=f"heartbeat {self.source}", daemon=True)
        thread.start()
        try:
            yield
        except BaseException as exc:
            done.set()
            self.beat(state=heartbeat.FAILED, fault=cause_line(exc, 300))
            raise
        done.set()
        thread.join()
        self.beat(state=heartbeat.STOPPED)

    def finished(self, run: RunResult, seconds: float) -> None:
        self.batches += 1
        self.faults_in_a_row = 0
        self.records += run.landed.records
        self.row_changes += run.decoded.row_changes
        self.consistent_ts = run.published.consistent_ts
        self.per_batch.append(seconds)
        behind = heartbeat.freshness_seconds({"consistent_ts": self.consistent_ts})
        log.info(
            "source %s batch %d: %d records landed, %d row changes, %d tables built; gold as of TiDB ts %s%s; %.1fs",
            self.source,
            self.batches,
            run.landed.records,
            run.decoded.row_changes,
            len(run.published.built),
            self.consistent_ts,
            "" if behind is None else f" ({behind:.1f}s behind)",
            seconds,
        )
        done = heartbeat.now_ms()
        recent = {
            "finished_at_ms": done,
            "seconds": round(seconds, 3),
            "records": run.landed.records,
            "row_changes": run.decoded.row_changes,
            "consistent_ts": self.consistent_ts,
        }
        self.beat(
            state=heartbeat.WAITING,
            batches=self.batches,
            records=self.records,
            row_changes=self.row_changes,
            consistent_ts=self.consistent_ts,
            published_at_ms=done,
            fault=None,
            recent=[*self.document["recent"], recent][-heartbeat.RECENT_BATCHES :],
        )

    def keep_pages(self, cfg: Any, run: RunResult, started_at_ms: int, every: float) -> None:
        """What the ingest DAG's last tasks do after a run: the status page's snapshot (this batch's numbers) at
        most every `every` seconds, and the docs site, for the relations built since, DOCS_EVERY times as
        seldom (it runs dbt). A transient fault leaves them to a later batch: the data is published."""
        self.built.update(run.published.built)
        now = time.monotonic()
        try:
            if now - self.status_kept >= every:
                tasks: dict[str, tuple[str | None, float | None]] = {
                    "land": ("success", run.landed.seconds),
                    "decode": ("success", run.decoded.seconds),
                    "publish_gold": ("success", run.published.seconds),
                }
                run_id = f"continuous__{self.document['started_at_ms']}__{self.batches}"
                record_status(self.source, run_id, started_at_ms, tasks, cfg)
                self.status_kept = now
            if self.built and now - self.docs_kept >= every * DOCS_EVERY:
                generate_docs(self.source, sorted(self.built), cfg)
                self.built.clear()
                self.docs_kept = now
        except TransientFault as fault:
            log.warning("source %s: pages not kept after batch %d: %s", self.source, self.batches, fault)

    def keep_tables(self, cfg: Any, run: RunResult) -> None:
        """Compact the gold and history tables COMPACT_AFTER batches have merged into since their last compaction:
        each batch adds a data file and a delete file to every table it changes, and a MERGE joins its whole table,
        so without this a batch would cost more the longer the driver runs (docs/performance.md). A transient fault
        leaves them to a later batch."""
        self.merged.update(run.published.built)
        due = due_for_compaction(self.merged)
        if not due:
            return
        try:
            compacted = compact_gold(self.source, due, cfg)
        except TransientFault as fault:
            log.warning("source %s: tables not compacted after batch %d: %s", self.source, self.batches, fault)
            return
        for relation in due:
            del self.merged[relation]
        self.compacted += len(due)
        log.info("%s", compacted.lines()[0])

    def keep_lakehouse(self, cfg: Any) -> None:
        """Embedded mode: the driver holds the metastore as long as it runs, so the maintenance DAG's steps leave
        the lakehouse to it (`steps.maintaining`), and it maintains every table of the lakehouse (snapshot expiry,
        orphan files, compaction) once `maintenance.continuous_every` has passed since it last did. Without this
        the snapshots a batch commits would pile up for as long as the driver runs. A transient fault leaves it to
        a later batch; any other failure is logged and tried again an interval later: maintenance must not stop
        the batches."""
        if cfg.runtime.mode != "embedded":
            return
        every = cfg.maintenance.continuous_interval
        if heartbeat.now_ms() - self.maintained_at_ms < every.total_seconds() * 1000:
            return
        try:
            line = maintain(config=cfg).lines()[-1]
            self.maintained += 1
            log.info("source %s: lakehouse maintained after batch %d: %s", self.source, self.batches, line)
        except TransientFault as fault:
            log.warning("source %s: lakehouse not maintained after batch %d: %s", self.source, self.batches, fault)
            return
        except Exception as exc:  # logged with its cause: the batches go on
            log.warning(
                "source %s: lakehouse maintenance failed after batch %d: %s; trying again in %s",
                self.source,
                self.batches,
                cause_line(exc, 300),
                cfg.maintenance.continuous_every,
            )
        self.maintained_at_ms = heartbeat.now_ms()
        self.beat(maintained_at_ms=self.maintained_at_ms)

    def pause(self, fault: TransientFault) -> float:
        self.paused += 1
        self.faults_in_a_row += 1
        wait = pause_seconds(self.interval, self.faults_in_a_row)
        log.warning(
            "source %s: batch %d paused (attempt %d): %s; trying again in %.0fs",
            self.source,
            self.batches + 1,
            self.faults_in_a_row,
            fault,
            wait,
        )
        self.beat(state=heartbeat.PAUSED, paused=self.paused, fault=str(fault))
        return wait

    def result(self, stopped_by: str) -> ContinuousResult:
        return ContinuousResult(
            self.source,
            self.batches,
            self.paused,
            self.records,
            self.row_changes,
            self.consistent_ts,
            time.monotonic() - self.started,
            stopped_by,
            self.per_batch,
            self.compacted,
            self.maintained,
        )


@contextmanager
def _stopped_by_signals(stop: threading.Event, signalled: list[int]) -> Iterator[None]:
    """SIGTERM and SIGINT set `stop` (the batch under way finishes first); only the main thread can take
    signals, so elsewhere (a test's thread) only `stop` ends the loop."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_signal(number: int, _frame: Any) -> None:
        if not stop.is_set():
            log.info("%s: stopping after the batch under way", signal.Signals(number).name)
        signalled.append(number)
        stop.set()

    previous = {number: signal.signal(number, on_signal) for number in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def run_continuously(
    source: str,
    config: ConfigRef = None,
    *,
    interval: float = 10.0,
    max_batches: int | None = None,
    stop: threading.Event | None = None,
    status_every: float = STATUS_EVERY_SECONDS,
) -> ContinuousResult:
    """Run the source's ingest in batches, one starting `interval` seconds after the last one started (at
    once when a batch took longer), until SIGTERM/SIGINT, `stop`, or `max_batches`. The status page's snapshot
    and the docs site are kept every `status_every` seconds, after a batch."""
    cfg = pipeline_config(config, source)
    if not interval > 0:
        raise ConfigError(f"--interval must be a positive number of seconds, got {interval}")
    stop = stop or threading.Event()
    signalled: list[int] = []
    driver = _Driver(source, cfg.local_dir, interval)
    # the locks first: a driver that waits for another run (or another driver) writes no heartbeat meanwhile
    hold_embedded_metastore(cfg, f"{CONTINUOUS_HOLDER} {source}")
    with (
        _stopped_by_signals(stop, signalled),
        source_lock(cfg.local_dir, source, f"{CONTINUOUS_HOLDER} {source}"),
        driver.beating(),
        writing(cfg, source, f"{CONTINUOUS_HOLDER} {source}"),
    ):
        log.info("source %s: running continuously, a batch every %.0fs", source, interval)
        while not stop.is_set() and (max_batches is None or driver.batches < max_batches):
            started, started_at_ms = time.monotonic(), heartbeat.now_ms()
            driver.beat(state=heartbeat.RUNNING)
            try:
                run = run_once(source, cfg)
            except TransientFault as fault:
                stop.wait(driver.pause(fault))
                continue
            driver.finished(run, time.monotonic() - started)
            driver.keep_tables(cfg, run)
            driver.keep_lakehouse(cfg)
            driver.keep_pages(cfg, run, started_at_ms, status_every)
            if max_batches is None or driver.batches < max_batches:
                stop.wait(max(0.0, interval - (time.monotonic() - started)))
    stopped_by = "signal" if signalled else "stop" if stop.is_set() else "max_batches"
    return driver.result(stopped_by)
