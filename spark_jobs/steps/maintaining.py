"""The maintenance steps: compaction, snapshot expiry, orphan files and stale landing branches of every table."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from spark_jobs import maintenance
from spark_jobs.runtime.results import Result
from spark_jobs.runtime.tables import TABLES
from spark_jobs.steps.context import ConfigRef, pipeline_config, reading


@dataclass(frozen=True)
class Maintained(Result):
    tables: list[maintenance.TableMaintenance]

    def xcom(self) -> dict[str, Any]:
        return {"tables": [t.xcom() for t in self.tables]}

    def lines(self) -> list[str]:
        return [*(t.line() for t in self.tables), f"maintenance: {maintenance.summary_line(self.tables)}"]


def maintain(source: str | None = None, config: ConfigRef = None) -> Maintained:
    """Every shared table (bronze, silver, gold's bookkeeping), then the gold tables of `source` (default: every
    configured source's). Landing may run meanwhile: maintenance takes no source's lock."""
    cfg = pipeline_config(config, source)
    return Maintained(maintenance.maintain(reading(cfg, "maintain"), cfg, source))


def maintain_shared(layer: str, config: ConfigRef = None) -> Maintained:
    """The shared tables of one layer: `bronze` (first: its expiry keeps what silver still reads), then `silver`
    (silver's tables and gold's bookkeeping)."""
    cfg = pipeline_config(config)
    spark = reading(cfg, f"maintain {layer}")
    layers = ["bronze"] if layer == "bronze" else [name for name in TABLES if name != "bronze"]
    return Maintained([t for name in layers for t in maintenance.maintain_layer(spark, cfg, name)])


def maintain_gold(source: str, config: ConfigRef = None) -> Maintained:
    """One source's gold and history tables."""
    cfg = pipeline_config(config, source)
    return Maintained(maintenance.maintain_gold(reading(cfg, f"maintain gold {source}"), cfg, source))


def maintenance_report(results: Iterable[Mapping[str, Any]]) -> str:
    """One line with the totals over the tables of several maintenance steps (their XCom)."""
    tables = [maintenance.TableMaintenance(**t) for r in results for t in r["tables"]]
    line = maintenance.summary_line(tables)
    maintenance.log.info("maintenance: %s", line)
    return line
