"""Supervising a continuous driver from Airflow without holding a worker slot while it runs.

`WatchContinuousDriver` starts the source's driver (`ticdc-lake run --continuous`, a process of its own that
outlives the task) unless one is alive, then defers to `DriverHeartbeatTrigger`, which reads the driver's
heartbeat file in the triggerer every few seconds. The task resumes when the driver is gone (the task fails: its
retries, with exponential backoff, start the driver again, and each failure logs the pipeline's alert line), when
gold lags more than allowed (the task fails and alerts; the driver runs on), or after its watch (the task
succeeds with the driver's numbers, and the next DAG run watches on).
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator
from airflow.triggers.base import BaseTrigger, TriggerEvent

from spark_jobs.runtime import heartbeat
from spark_jobs.runtime.results import Result
from spark_jobs.steps.context import ConfigRef, pipeline_config

POLL_SECONDS = 5.0


@dataclass(frozen=True)
class DriverStatus(Result):
    """A source's continuous driver as its heartbeat shows it."""

    source: str
    alive: bool
    started: bool  # this call started it
    pid: int | None
    state: str | None
    batches: int
    consistent_ts: int | None
    behind_seconds: float | None  # gold's consistent ts against the wall clock
    batches_per_minute: float | None
    fault: str | None

    def lines(self) -> list[str]:
        if not self.alive:
            return [f"{self.source}: no continuous driver runs (last state {self.state})"]
        behind = "" if self.behind_seconds is None else f", gold {self.behind_seconds:.0f}s behind"
        return [
            f"{self.source}: continuous driver pid {self.pid} {'started' if self.started else 'running'}, "
            f"{self.state}, {self.batches} batches{behind}"
        ]


def status_of(source: str, beat: dict[str, Any] | None, started: bool = False) -> DriverStatus:
    return DriverStatus(
        source,
        heartbeat.is_alive(beat),
        started,
        None if beat is None else beat.get("pid"),
        None if beat is None else beat.get("state"),
        0 if beat is None else int(beat.get("batches", 0)),
        None if beat is None else beat.get("consistent_ts"),
        heartbeat.freshness_seconds(beat),
        heartbeat.batches_per_minute(beat),
        None if beat is None else beat.get("fault"),
    )


def driver_status(source: str, config: ConfigRef = None) -> DriverStatus:
    cfg = pipeline_config(config, source)
    return status_of(source, heartbeat.read_heartbeat(cfg.local_dir, source))


def start_driver(source: str, config: ConfigRef = None, *, interval: float = 10.0) -> DriverStatus:
    """The source's continuous driver: the one alive, or a new process (its log in
    `<local_dir>/continuous/<source>.log`) that runs until it is stopped or fails."""
    cfg = pipeline_config(config, source)
    beat = heartbeat.read_heartbeat(cfg.local_dir, source)
    if heartbeat.is_alive(beat):
        return status_of(source, beat)
    log_path = heartbeat.heartbeat_path(cfg.local_dir, source).with_suffix(".log")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "spark_jobs.cli", "run", "--source", source, "--continuous"]
    command += ["--interval", f"{interval}s", *(("--config", str(cfg.path)) if cfg.path != Path(".") else ())]
    with log_path.open("ab") as log_file:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file, start_new_session=True
        )
    # the driver's own heartbeats replace this one once it holds the source's lock
    starting: dict[str, Any] = {
        "source": source,
        "pid": process.pid,
        "host": socket.gethostname(),
        "state": heartbeat.STARTING,
        "interval_seconds": interval,
        "started_at_ms": heartbeat.now_ms(),
        "batches": 0,
        "consistent_ts": None if beat is None else beat.get("consistent_ts"),
        "recent": [],
    }
    heartbeat.write_heartbeat(cfg.local_dir, {**starting, "heartbeat_at_ms": heartbeat.now_ms()})
    return status_of(source, heartbeat.read_heartbeat(cfg.local_dir, source), started=True)


class DriverHeartbeatTrigger(BaseTrigger):
    """Fires when the driver is gone, when gold lags more than `max_lag_seconds` (0: never), or after
    `watch_seconds`; reads only the heartbeat file."""

    def __init__(
        self, source: str, local_dir: str, watch_seconds: float, max_lag_seconds: float, poll_seconds: float
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.source, self.local_dir = source, local_dir
        self.watch_seconds, self.max_lag_seconds, self.poll_seconds = watch_seconds, max_lag_seconds, poll_seconds

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{__name__}.DriverHeartbeatTrigger",
            {
                "source": self.source,
                "local_dir": self.local_dir,
                "watch_seconds": self.watch_seconds,
                "max_lag_seconds": self.max_lag_seconds,
                "poll_seconds": self.poll_seconds,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        deadline = time.monotonic() + self.watch_seconds
        while True:
            beat = await asyncio.to_thread(heartbeat.read_heartbeat, Path(self.local_dir), self.source)
            status = status_of(self.source, beat)
            lagging = (
                self.max_lag_seconds > 0
                and status.behind_seconds is not None
                and status.state != heartbeat.STARTING
                and status.behind_seconds > self.max_lag_seconds
            )
            outcome = "gone" if not status.alive else "lagging" if lagging else None
            if outcome is None and time.monotonic() >= deadline:
                outcome = "watched"
            if outcome is not None:
                yield TriggerEvent({"outcome": outcome, **status.xcom()})  # type: ignore[no-untyped-call]
                return
            await asyncio.sleep(self.poll_seconds)


class DriverGone(RuntimeError):
    """The continuous driver stopped or died (its log says why); the task's retry starts it again."""


class GoldLagging(RuntimeError):
    """The continuous driver runs, but gold is further behind than the DAG allows."""


class WatchContinuousDriver(BaseOperator):
    """Start (or adopt) the source's continuous driver and watch its heartbeat from the triggerer. Reads the
    DAG run's params `interval_seconds`, `watch_minutes` and `max_lag_seconds`."""

    def __init__(self, *, source: str, poll_seconds: float = POLL_SECONDS, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source, self.poll_seconds = source, poll_seconds

    def execute(self, context: Any) -> None:
        params = context["params"]
        cfg = pipeline_config(None, self.source)
        status = start_driver(self.source, cfg, interval=float(params["interval_seconds"]))
        for line in status.lines():
            self.log.info("%s", line)
        self.defer(
            trigger=DriverHeartbeatTrigger(
                self.source,
                str(cfg.local_dir),
                float(params["watch_minutes"]) * 60,
                float(params["max_lag_seconds"]),
                self.poll_seconds,
            ),
            method_name="watched",
        )

    def watched(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        outcome = event.pop("outcome")
        status = DriverStatus(**event)
        if outcome == "gone":
            raise DriverGone(
                f"the continuous driver of source {self.source} is gone after {status.batches} batches "
                f"(state {status.state}{'; ' + status.fault if status.fault else ''}); see "
                f"<local_dir>/continuous/{self.source}.log"
            )
        if outcome == "lagging":
            raise GoldLagging(
                f"source {self.source}: gold is {status.behind_seconds:.0f}s behind, over the DAG's max_lag_seconds"
            )
        for line in status.lines():
            self.log.info("%s", line)
        return status.xcom()
