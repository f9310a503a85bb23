"""The backfill steps: a Dumpling export into silver (the initial snapshot), and the daily as-of tables."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from spark_jobs.backfill import daily
from spark_jobs.backfill.dumpling import CsvOptions
from spark_jobs.backfill.snapshot import SnapshotResult
from spark_jobs.backfill.snapshot import load_snapshot as load_export
from spark_jobs.gold.build import build_gold
from spark_jobs.gold.publish import published_ts
from spark_jobs.runtime.results import Result
from spark_jobs.steps.context import ConfigRef, pipeline_config, writing
from spark_jobs.steps.rebuilding import parse_tables
from spark_jobs.steps.requests import CSV_FIELDS

log = logging.getLogger(__name__)


def csv_options(values: Mapping[str, Any]) -> CsvOptions:
    """The CSV options of a request (missing ones at Dumpling's defaults)."""
    given = {f.name: values.get(f.name, f.default) for f in CSV_FIELDS}
    return CsvOptions.typed(
        str(given["csv_separator"]),
        str(given["csv_delimiter"]),
        str(given["csv_null_value"]),
        str(given["csv_line_terminator"]),
        bool(given["header"]),
        bool(given["escape_backslash"]),
    )


@dataclass(frozen=True)
class SnapshotRequest(Result):
    """A snapshot load, validated before anything opens."""

    source: str
    location: str
    tables: list[tuple[str, str]] | None
    csv: dict[str, Any]
    force: bool

    def xcom(self) -> dict[str, Any]:
        tables = [list(t) for t in self.tables] if self.tables is not None else None
        return {"source": self.source, "from": self.location, "tables": tables, "csv": self.csv, "force": self.force}


def snapshot_request(source: str, params: Mapping[str, Any], config: ConfigRef = None) -> SnapshotRequest:
    """A snapshot load's request from a trigger form or the command line (`from`, `tables`, `force` and the CSV
    fields), checked against the configuration: a bad one raises ConfigError, naming what is wrong."""
    pipeline_config(config, source)
    tables = parse_tables(params.get("tables"))
    return SnapshotRequest(
        source,
        str(params["from"]),
        sorted(tables) if tables is not None else None,
        {f.name: params.get(f.name, f.default) for f in CSV_FIELDS},
        bool(params.get("force", False)),
    )


def load_snapshot(
    source: str,
    params: Mapping[str, Any],
    config: ConfigRef = None,
    progress: Callable[[int, int, int, float], None] | None = None,
) -> SnapshotResult:
    """Load a Dumpling export into the source's silver at its TSO (`params` as `snapshot_request` takes them),
    holding the source's lock; a forced load behind what gold published rebuilds the source's gold and history
    from silver in the same step."""
    cfg = pipeline_config(config)
    request = snapshot_request(source, params, cfg)
    tables = frozenset(request.tables) if request.tables is not None else None
    with writing(cfg, request.source, f"backfill snapshot {request.source}") as spark:
        result = load_export(
            spark,
            cfg,
            request.source,
            request.location,
            tables,
            csv_options(request.csv),
            force=request.force,
            progress=progress,
        )
        if result.rebuild_gold:
            # every table: a loaded table may have been renamed or dropped since, and gold knows it by its name now
            log.info("source %s: rebuilding gold and history from silver (a forced load)", request.source)
            build_gold(spark, cfg, request.source, rebuild=True)
    return result


def day_status(source: str, day: dt.date, config: ConfigRef = None) -> daily.DayStatus:
    """Whether the source is published past the end of `day` (in `daily.timezone`), read from the newest
    publication's file beside the tables: no Spark and no lock, so a sensor may poke it every few minutes."""
    cfg = pipeline_config(config, source)
    zone = cfg.daily.timezone
    return daily.DayStatus(day, zone, daily.end_of_day_ts(day, zone), published_ts(cfg.local_dir, source))


def write_day(source: str, day: dt.date, config: ConfigRef = None) -> daily.DailyResult:
    """Every gold table of the source as it was at the end of `day`, into its daily table's partition."""
    cfg = pipeline_config(config, source)
    with writing(cfg, source, f"daily {source} {day}") as spark:
        result = daily.write_day(spark, source, day, cfg.daily.timezone)
    for line in daily.summary(result, cfg.daily.timezone):
        log.info("%s", line)
    return result
