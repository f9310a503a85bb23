"""The reconcile step: what the lakehouse says each table was at a TSO against the upstream
(spark_jobs.backfill.reconcile), from the command line or the ingest DAG's `reconcile` task."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from spark_jobs.backfill import mysql_upstream
from spark_jobs.backfill import reconcile as reconciliation
from spark_jobs.backfill.daily import tables_at
from spark_jobs.errors import ConfigError, ReconcileMismatchError
from spark_jobs.gold.history import consistent_ts
from spark_jobs.steps.backfill import csv_options
from spark_jobs.steps.context import ConfigRef, pipeline_config, writing
from spark_jobs.steps.rebuilding import parse_tables

log = logging.getLogger(__name__)
LIVE_SCHEMES = ("mysql://", "tidb://")


def reconcile(
    source: str,
    against: str | None = None,
    config: ConfigRef = None,
    tables: str | None = None,
    diff: bool | None = None,
    ts: int | None = None,
    csv: Mapping[str, Any] | None = None,
    fail_on_mismatch: bool = True,
) -> reconciliation.ReconcileResult:
    """Compare the source's tables with the upstream `against` (default: the source's `reconcile.against`): a
    Dumpling export at its own TSO, or a live server (`mysql://user@host:port`, `airflow:CONN_ID`) as of `ts`
    (default: the consistent ts gold is published as of). The outcome is recorded before a mismatch raises
    ReconcileMismatchError (unless `fail_on_mismatch` is off)."""
    cfg = pipeline_config(config, source)
    settings = cfg.source(source).reconcile
    location = against or settings.against
    if not location:
        raise ConfigError(f"source {source}: nothing to reconcile against: give --against or set reconcile.against")
    wanted = parse_tables(tables)
    live = location.startswith("airflow:") or location.startswith(LIVE_SCHEMES)
    if ts is not None and not live:
        raise ConfigError(f"reconcile --against {location}: an export is reconciled at its own TSO; leave out --ts")
    endpoint = _endpoint(location) if live else None  # a bad URL or connection stops here, before Spark
    with writing(cfg, source, f"reconcile {source}") as spark:
        if endpoint is None:
            upstream = reconciliation.export_upstream(spark, location, wanted, csv_options(csv or {}))
        else:
            at = ts if ts is not None else consistent_ts(spark, source)
            if at is None:
                raise ConfigError(f"source {source}: gold is not published yet; nothing to reconcile")
            shown = endpoint.shown if location.startswith(LIVE_SCHEMES) else f"{location} ({endpoint.shown})"
            names = sorted(wanted) if wanted is not None else tables_at(spark, source, at)
            upstream = reconciliation.live_upstream(spark, mysql_upstream.LiveUpstream(endpoint), shown, names, at)
        try:
            result = reconciliation.reconcile(
                spark, source, upstream, wanted, settings.diff if diff is None else diff, cfg.source(source).tables
            )
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        finally:
            upstream.release()
    for line in result.lines():
        log.info("%s", line)
    if fail_on_mismatch and result.mismatched:
        raise ReconcileMismatchError("\n".join(result.lines()))
    return result


def _endpoint(location: str) -> mysql_upstream.Endpoint:
    if not location.startswith("airflow:"):
        return mysql_upstream.endpoint_from_url(location)
    conn_id = location.removeprefix("airflow:")
    try:
        from airflow.sdk import BaseHook
    except ImportError:
        raise ConfigError(f"reconcile --against {location}: Airflow is not installed") from None
    try:
        conn = BaseHook.get_connection(conn_id)
    except Exception as exc:  # AirflowNotFoundException, or a secrets backend that cannot be reached
        raise ConfigError(f"reconcile --against {location}: no Airflow connection {conn_id!r} ({exc})") from None
    if not conn.host or not conn.login:
        raise ConfigError(f"reconcile --against {location}: the connection needs a host and a login")
    return mysql_upstream.Endpoint(conn.host, conn.port or 4000, conn.login, conn.password)
