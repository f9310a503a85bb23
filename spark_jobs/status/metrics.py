"""The status views as Prometheus text (exposition format 0.0.4): every number the status page shows.

TiDB timestamps are exposed as physical times in seconds (a whole TSO does not fit a float exactly), so
an alert can compare them with `time()`. A value nobody knows yet (no snapshot, broker unreachable) is
left out rather than reported as zero.
"""

from __future__ import annotations

from collections.abc import Iterator

from spark_jobs.status.snapshot import physical_ms

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

HELP = {
    "ticdc_lake_status_recorded": "1 once the ingest DAG has recorded a status snapshot of the source.",
    "ticdc_lake_status_age_seconds": "Seconds since the source's status snapshot was recorded.",
    "ticdc_lake_broker_up": "1 if the source's Kafka broker answered the status page within its timeout.",
    "ticdc_lake_layer_time_seconds": "Physical time of the newest change per layer (landed: Kafka timestamp; decoded, consistent, gold: TiDB ts).",
    "ticdc_lake_lag_seconds": "Now minus the physical time of the newest change per layer.",
    "ticdc_lake_continuous_up": "1 while the source's continuous driver runs (its heartbeat is fresh).",
    "ticdc_lake_continuous_batches": "Batches the source's running (or last) continuous driver has finished.",
    "ticdc_lake_continuous_batches_per_minute": "The continuous driver's batches per minute, over its recent batches.",
    "ticdc_lake_continuous_gold_behind_seconds": "Now minus the physical time of the continuous driver's gold consistent ts.",
    "ticdc_lake_landed_offset": "Next offset to land per partition.",
    "ticdc_lake_high_watermark": "The broker's high watermark per partition, asked live.",
    "ticdc_lake_offset_lag": "High watermark minus landed offset per partition.",
    "ticdc_lake_quarantined_messages": "Messages in silver.quarantine.",
    "ticdc_lake_quarantine_reason_messages": "Messages in silver.quarantine per reason (the most frequent reasons).",
    "ticdc_lake_checksum_failures": "Messages quarantined for a row checksum mismatch or a row TiCDC marked corrupted.",
    "ticdc_lake_landing_gaps": "Offset ranges recorded in bronze.landing_gaps.",
    "ticdc_lake_tables_needing_snapshot": "Upstream tables whose gold needs a fresh snapshot.",
    "ticdc_lake_gold_rows": "Rows per gold table.",
    "ticdc_lake_gold_consistent_time_seconds": "Physical time of each gold table's consistent TiDB ts.",
    "ticdc_lake_reconciled_tables": "Tables of the newest reconciliation against the upstream, per outcome.",
    "ticdc_lake_reconcile_mismatched_tables": "Tables whose rows differed from the upstream's in the newest reconciliation.",
    "ticdc_lake_reconciled_time_seconds": "When the newest reconciliation ran.",
    "ticdc_lake_last_run_task_seconds": "Duration of each task of the last recorded DAG run.",
    "ticdc_lake_last_run_task_success": "1 if the task of the last recorded DAG run succeeded.",
    "ticdc_lake_last_run_landed_records": "Records landed by the last recorded DAG run.",
    "ticdc_lake_last_run_decoded_messages": "Messages decoded by the last recorded DAG run.",
    "ticdc_lake_last_run_row_changes": "Row changes written to silver by the last recorded DAG run.",
}

Sample = tuple[str, dict[str, str], float | int | None]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _seconds(ms: int | None) -> float | None:
    return None if ms is None else ms / 1000


def _samples(view: dict) -> Iterator[Sample]:
    source = {"source": view["source"]}
    yield "ticdc_lake_status_recorded", source, int(view["recorded"])
    yield "ticdc_lake_broker_up", source, int(view["broker"] == "reachable")
    continuous = view.get("continuous")
    if continuous is not None:
        yield "ticdc_lake_continuous_up", source, int(continuous["alive"])
        yield "ticdc_lake_continuous_batches", source, continuous["batches"]
        yield "ticdc_lake_continuous_batches_per_minute", source, continuous["batches_per_minute"]
        yield "ticdc_lake_continuous_gold_behind_seconds", source, continuous["gold_behind_seconds"]
    for p in view["partitions"]:
        labels = {**source, "topic": p["topic"], "partition": str(p["partition"])}
        yield "ticdc_lake_landed_offset", labels, p["landed_offset"]
        yield "ticdc_lake_high_watermark", labels, p["high_watermark"]
        yield "ticdc_lake_offset_lag", labels, p["offset_lag"]
    if not view["recorded"]:
        return
    yield "ticdc_lake_status_age_seconds", source, view["snapshot_age_seconds"]
    for layer in view["layers"]:
        labels = {**source, "layer": layer["layer"]}
        yield "ticdc_lake_layer_time_seconds", labels, _seconds(layer["physical_ms"])
        yield "ticdc_lake_lag_seconds", labels, layer["lag_seconds"]
    yield "ticdc_lake_quarantined_messages", source, view["quarantined"]
    for q in view["quarantine"]:
        yield "ticdc_lake_quarantine_reason_messages", {**source, "reason": q["reason"]}, q["messages"]
    yield "ticdc_lake_checksum_failures", source, view["checksum_failures"]
    yield "ticdc_lake_landing_gaps", source, view["gaps_total"]
    yield "ticdc_lake_tables_needing_snapshot", source, len(view["needing_snapshot"])
    for t in view["gold_tables"]:
        labels = {**source, "table": t["relation"]}
        yield "ticdc_lake_gold_rows", labels, t["rows"]
        yield "ticdc_lake_gold_consistent_time_seconds", labels, _seconds(physical_ms(t["consistent_ts"]))
    reconciliation = view.get("reconciliation")
    if reconciliation:
        for outcome, tables in sorted(reconciliation["outcomes"].items()):
            yield "ticdc_lake_reconciled_tables", {**source, "outcome": outcome}, tables
        yield "ticdc_lake_reconcile_mismatched_tables", source, len(reconciliation["mismatched"])
        yield "ticdc_lake_reconciled_time_seconds", source, _seconds(reconciliation["checked_at_ms"])
    if view["runs"]:
        last = view["runs"][0]
        for task, outcome in sorted(last["tasks"].items()):
            labels = {**source, "task": task}
            yield "ticdc_lake_last_run_task_seconds", labels, outcome["seconds"]
            yield "ticdc_lake_last_run_task_success", labels, int(outcome["state"] == "success")
        yield "ticdc_lake_last_run_landed_records", source, last["landed_records"]
        yield "ticdc_lake_last_run_decoded_messages", source, last["decoded_messages"]
        yield "ticdc_lake_last_run_row_changes", source, last["row_changes"]


def prometheus_text(views: list[dict]) -> str:
    """All sources' samples, grouped per metric (the format wants one block per metric name)."""
    blocks: dict[str, list[str]] = {name: [] for name in HELP}
    for view in views:
        for name, labels, value in _samples(view):
            if value is None:
                continue
            label_text = ",".join(f'{key}="{_escape(str(v))}"' for key, v in labels.items())
            blocks[name].append(f"{name}{{{label_text}}} {value}")
    lines = []
    for name, samples in blocks.items():
        if samples:
            lines += [f"# HELP {name} {HELP[name]}", f"# TYPE {name} gauge", *samples]
    return "\n".join(lines) + "\n"
