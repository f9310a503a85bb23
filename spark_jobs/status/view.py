"""What the status page, its JSON and `/metrics` show: each source's snapshot, with lags as of now and the
broker's offsets asked live. Plain dicts of numbers and strings, the same for all three.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from spark_jobs.config import PipelineConfig, SourceSettings
from spark_jobs.runtime import heartbeat
from spark_jobs.status.live import BrokerOffsets, high_watermarks
from spark_jobs.status.snapshot import LAYERS, read_snapshot


def _ratio(count: int | None, seconds: float | None) -> float | None:
    return count / seconds if count is not None and seconds else None


def _task_seconds(run: dict, task: str) -> float | None:
    return (run.get("tasks", {}).get(task) or {}).get("seconds")


def _runs(history: list[dict]) -> list[dict]:
    """Newest first, with the rates of landing (records/s) and decoding (messages/s) over their tasks' durations."""
    return [
        {
            **run,
            "landed_per_second": _ratio(run["landed_records"], _task_seconds(run, "land")),
            "decoded_per_second": _ratio(run["decoded_messages"], _task_seconds(run, "decode")),
        }
        for run in reversed(history)
    ]


def _partitions(snapshot: dict, broker: BrokerOffsets) -> list[dict]:
    """Landed offset against the broker's high watermark, for every partition either side knows."""
    landed = {(p["topic"], p["partition"]): p["landed_offset"] for p in snapshot.get("partitions", [])}
    rows = []
    for topic, partition in sorted(set(landed) | set(broker.high_watermarks)):
        offset = landed.get((topic, partition))
        high = broker.high_watermarks.get((topic, partition))
        rows.append(
            {
                "topic": topic,
                "partition": partition,
                "landed_offset": offset,
                "high_watermark": high,
                "offset_lag": high - offset if high is not None and offset is not None else None,
            }
        )
    return rows


def continuous_view(beat: dict | None, now_ms: int) -> dict | None:
    """The source's continuous driver from its heartbeat (None when none ever ran): alive or not, its batch rate,
    how far gold is behind the clock, and its last batch."""
    if beat is None:
        return None
    recent = beat.get("recent") or []
    return {
        "alive": heartbeat.is_alive(beat, now_ms),
        "state": beat.get("state"),
        "pid": beat.get("pid"),
        "host": beat.get("host"),
        "batches": beat.get("batches", 0),
        "paused": beat.get("paused", 0),
        "batches_per_minute": heartbeat.batches_per_minute(beat),
        "gold_behind_seconds": heartbeat.freshness_seconds(beat, now_ms),
        "last_batch_seconds": recent[-1]["seconds"] if recent else None,
        "heartbeat_age_seconds": (now_ms - beat["heartbeat_at_ms"]) / 1000 if "heartbeat_at_ms" in beat else None,
        "fault": beat.get("fault"),
    }


def source_view(
    source: SourceSettings, snapshot: dict | None, broker: BrokerOffsets, now_ms: int, beat: dict | None = None
) -> dict:
    """One source as shown; `recorded` is False until the ingest DAG (or a continuous driver) has written a
    snapshot; `continuous` is None until a continuous driver has run."""
    view = {
        "source": source.name,
        "protocol": source.protocol,
        "broker": "reachable" if broker.reachable else "broker unreachable",
        "recorded": snapshot is not None,
        "continuous": continuous_view(beat, now_ms),
    }
    if snapshot is None:
        return {**view, "partitions": _partitions({}, broker)}
    layers = snapshot["layers"]
    return {
        **view,
        "recorded_at_ms": snapshot["recorded_at_ms"],
        "snapshot_age_seconds": (now_ms - snapshot["recorded_at_ms"]) / 1000,
        "consistency": snapshot["consistency"],
        "layers": [
            {
                "layer": layer,
                "ts": layers[layer]["ts"],
                "physical_ms": layers[layer]["physical_ms"],
                "lag_seconds": None
                if layers[layer]["physical_ms"] is None
                else (now_ms - layers[layer]["physical_ms"]) / 1000,
            }
            for layer in LAYERS
        ],
        "partitions": _partitions(snapshot, broker),
        "runs": _runs(snapshot["history"]),
        "quarantined": snapshot["quarantined"],
        "quarantine": snapshot["quarantine"],
        "checksum_failures": snapshot.get("checksum_failures"),  # None in a snapshot recorded before it was counted
        "gaps_total": snapshot["gaps_total"],
        "gaps": snapshot["gaps"],
        "needing_snapshot": snapshot["needing_snapshot"],
        "keyless": snapshot.get("keyless", []),  # absent from a snapshot recorded before keyless tables were listed
        "keyless_tables": snapshot.get("keyless_tables", "changes"),
        "gold_tables": snapshot["gold_tables"],
        "publication": snapshot.get("publication"),
        "reconciliation": snapshot.get("reconciliation"),  # None until the source is reconciled
        "table_rules": snapshot.get("table_rules") or {},  # absent from a snapshot recorded before table rules
    }


def status_views(config: PipelineConfig, now_ms: int | None = None) -> list[dict]:
    """Every configured source, its broker asked in parallel so one unreachable broker costs one timeout."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    with ThreadPoolExecutor(max_workers=min(8, len(config.sources))) as pool:
        brokers = list(pool.map(high_watermarks, config.sources))
    return [
        source_view(
            source,
            read_snapshot(config.local_dir, source.name),
            broker,
            now_ms,
            heartbeat.read_heartbeat(config.local_dir, source.name),
        )
        for source, broker in zip(config.sources, brokers)
    ]
