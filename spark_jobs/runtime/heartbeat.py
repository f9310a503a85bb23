"""The continuous driver's heartbeat: `<local_dir>/continuous/<source>.json`.

The driver (`ticdc-lake run --continuous`) rewrites it every few seconds from a thread of its own, and after every
batch; its Airflow supervisor and the status page read it without starting Spark. A heartbeat older than
`stale_after` seconds means the driver is gone (killed, its host down) or hung: the supervisor starts another.
Times are epoch milliseconds; TiDB timestamps are kept whole (their physical time is `ts >> 18` ms).
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

from spark_jobs.runtime.files import write_json_atomically

BEAT_SECONDS = 5.0  # how often the driver's thread rewrites the file
STALE_AFTER_SECONDS = 60.0  # a heartbeat older than this: the driver is gone
RECENT_BATCHES = 60  # batches kept for the rate the status page shows

# what the driver is doing
STARTING, RUNNING, WAITING, PAUSED, STOPPED, FAILED = "starting", "running", "waiting", "paused", "stopped", "failed"


def heartbeat_path(local_dir: Path, source: str) -> Path:
    return Path(local_dir) / "continuous" / f"{source}.json"


def read_heartbeat(local_dir: Path, source: str) -> dict[str, Any] | None:
    """The source's last heartbeat, or None when no continuous driver ever ran (or the file is being replaced
    by a writer on a file system without atomic renames)."""
    try:
        document: dict[str, Any] = json.loads(heartbeat_path(local_dir, source).read_text())
    except (FileNotFoundError, ValueError):
        return None
    return document


def write_heartbeat(local_dir: Path, document: dict[str, Any]) -> Path:
    return write_json_atomically(heartbeat_path(local_dir, document["source"]), document)


def now_ms() -> int:
    return int(time.time() * 1000)


def process_alive(pid: int) -> bool:
    """Whether a process of this host runs (a zombie, killed but not yet reaped by its parent, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def is_alive(
    heartbeat: dict[str, Any] | None, at_ms: int | None = None, stale_after: float = STALE_AFTER_SECONDS
) -> bool:
    """Whether a driver is running: a heartbeat in a running state, rewritten within `stale_after` seconds, whose
    process (when it ran on this host) still exists. A driver just started waits for the source's lock (another
    run may hold it) before it beats: it is alive while its process is."""
    if heartbeat is None or heartbeat.get("state") in (STOPPED, FAILED):
        return False
    here = heartbeat.get("host") == socket.gethostname() and heartbeat.get("pid") is not None
    if here and not process_alive(int(heartbeat["pid"])):
        return False
    if here and heartbeat.get("state") == STARTING:
        return True
    at = now_ms() if at_ms is None else at_ms
    return bool(at - int(heartbeat.get("heartbeat_at_ms", 0)) <= stale_after * 1000)


def freshness_seconds(heartbeat: dict[str, Any] | None, at_ms: int | None = None) -> float | None:
    """How far gold's consistent timestamp is behind the wall clock, from the last batch the heartbeat records."""
    ts = None if heartbeat is None else heartbeat.get("consistent_ts")
    if ts is None:
        return None
    return ((now_ms() if at_ms is None else at_ms) - (int(ts) >> 18)) / 1000


def batches_per_minute(heartbeat: dict[str, Any] | None) -> float | None:
    """Batches finished per minute over the recent ones the heartbeat keeps."""
    recent = [] if heartbeat is None else heartbeat.get("recent", [])
    if len(recent) < 2:
        return None
    span = (recent[-1]["finished_at_ms"] - recent[0]["finished_at_ms"]) / 60000
    return (len(recent) - 1) / span if span > 0 else None
