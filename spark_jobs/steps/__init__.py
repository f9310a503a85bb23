"""The entry layer: every DAG task and every `ticdc-lake` command is one call to a step here.

A step owns what every entry needs and no layer below it does: the configuration (a loaded one, its file, or
`$TICDC_LAKE_CONFIG`), the source's lock when it writes (runs of one source never write at once), the process's
Spark session, and a result of plain fields (a DAG task returns its `xcom()`, the command prints its `lines()`).
Below this layer nothing loads a configuration file, takes a lock or starts a session on its own.

Importing this package costs nothing (DAG files import it while Airflow parses them): a step's module, and Spark
with it, is imported the first time the step is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# the name of each step (or what goes with it) -> the module that defines it
_WHERE = {
    "CSV_FIELDS": "requests",
    "day_status": "backfill",
    "load_snapshot": "backfill",
    "snapshot_request": "backfill",
    "write_day": "backfill",
    "pack_env": "cluster",
    "serve_thrift": "cluster",
    "configured_sources": "context",
    "run_continuously": "continuous",
    "reconciled_sources": "context",
    "erase": "erasing",
    "erase_request": "erasing",
    "check_freshness": "ingest",
    "decode": "ingest",
    "generate_docs": "ingest",
    "land": "ingest",
    "publish_gold": "ingest",
    "record_status": "ingest",
    "run_once": "ingest",
    "as_of": "inspect",
    "check_config": "inspect",
    "decode_messages": "inspect",
    "quarantine_list": "inspect",
    "quarantine_replay": "inspect",
    "compact_gold": "maintaining",
    "maintain": "maintaining",
    "maintain_gold": "maintaining",
    "maintain_shared": "maintaining",
    "maintenance_report": "maintaining",
    "LAYERS": "requests",
    "rebuild": "rebuilding",
    "rebuild_request": "rebuilding",
    "reconcile": "reconciling",
    "driver_status": "supervising",
    "start_driver": "supervising",
    "WatchContinuousDriver": "supervising",
    "failure_callback": "spark_jobs.runtime.freshness",  # what every DAG's tasks alert with
    "FRESHNESS_ERROR": "spark_jobs.runtime.freshness",
}

__all__ = [
    "CSV_FIELDS",
    "FRESHNESS_ERROR",
    "LAYERS",
    "WatchContinuousDriver",
    "as_of",
    "check_config",
    "check_freshness",
    "compact_gold",
    "configured_sources",
    "day_status",
    "decode",
    "decode_messages",
    "driver_status",
    "erase",
    "erase_request",
    "failure_callback",
    "generate_docs",
    "land",
    "load_snapshot",
    "maintain",
    "maintain_gold",
    "maintain_shared",
    "maintenance_report",
    "pack_env",
    "publish_gold",
    "quarantine_list",
    "quarantine_replay",
    "rebuild",
    "rebuild_request",
    "reconcile",
    "reconciled_sources",
    "record_status",
    "run_continuously",
    "run_once",
    "serve_thrift",
    "snapshot_request",
    "start_driver",
    "write_day",
]

if TYPE_CHECKING:
    from spark_jobs.runtime.freshness import ERROR as FRESHNESS_ERROR
    from spark_jobs.runtime.freshness import failure_callback
    from spark_jobs.steps.backfill import day_status, load_snapshot, snapshot_request, write_day
    from spark_jobs.steps.cluster import pack_env, serve_thrift
    from spark_jobs.steps.context import configured_sources, reconciled_sources
    from spark_jobs.steps.continuous import run_continuously
    from spark_jobs.steps.erasing import erase, erase_request
    from spark_jobs.steps.ingest import (
        check_freshness,
        decode,
        generate_docs,
        land,
        publish_gold,
        record_status,
        run_once,
    )
    from spark_jobs.steps.inspect import as_of, check_config, decode_messages, quarantine_list, quarantine_replay
    from spark_jobs.steps.maintaining import (
        compact_gold,
        maintain,
        maintain_gold,
        maintain_shared,
        maintenance_report,
    )
    from spark_jobs.steps.rebuilding import rebuild, rebuild_request
    from spark_jobs.steps.reconciling import reconcile
    from spark_jobs.steps.requests import CSV_FIELDS, LAYERS
    from spark_jobs.steps.supervising import WatchContinuousDriver, driver_status, start_driver


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    where = importlib.import_module(module if "." in module else f"{__name__}.{module}")
    value = getattr(where, "ERROR" if name == "FRESHNESS_ERROR" else name)
    globals()[name] = value
    return value
