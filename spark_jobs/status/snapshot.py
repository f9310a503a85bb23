"""The status snapshot of a source: one JSON file the pipeline writes and the status page reads.

`<local_dir>/status/<source>.json` is written by the ingest DAG's `record_status` task, which reads the
tables with Spark, and read by the status page in the Airflow API server, which must not open a
SparkSession (the embedded metastore admits one JVM at a time). Times are epoch milliseconds; TiDB
timestamps (TSO) are kept whole, their physical time is `ts >> 18` milliseconds. The file keeps the last
HISTORY_LIMIT runs, oldest first, for the charts; it is replaced atomically, so a reader never sees half.
"""

from __future__ import annotations

import json
from pathlib import Path

from spark_jobs.runtime.files import write_json_atomically

FORMAT_VERSION = 1
HISTORY_LIMIT = 100
LAYERS = ("landed", "decoded", "consistent", "gold")


def physical_ms(ts: int | None) -> int | None:
    """The physical part of a TiDB TSO, in epoch milliseconds."""
    return None if ts is None else ts >> 18


def status_dir(local_dir: Path) -> Path:
    return Path(local_dir) / "status"


def snapshot_path(local_dir: Path, source: str) -> Path:
    return status_dir(local_dir) / f"{source}.json"


def read_snapshot(local_dir: Path, source: str) -> dict | None:
    """The source's last snapshot, or None when no run has recorded one yet."""
    try:
        return json.loads(snapshot_path(local_dir, source).read_text())
    except FileNotFoundError:
        return None


def write_snapshot(local_dir: Path, snapshot: dict) -> Path:
    """Replace the source's snapshot; its history is the previous file's plus this run's, bounded."""
    path = snapshot_path(local_dir, snapshot["source"])
    previous = read_snapshot(local_dir, snapshot["source"]) or {}
    earlier = [r for r in previous.get("history", []) if r["run_id"] not in {h["run_id"] for h in snapshot["history"]}]
    document = {**snapshot, "history": (earlier + snapshot["history"])[-HISTORY_LIMIT:]}
    return write_json_atomically(path, document)
