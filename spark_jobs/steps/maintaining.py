"""The maintenance steps: compaction, snapshot expiry, orphan files and stale landing branches of every table."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from spark_jobs import maintenance
from spark_jobs.runtime.results import Result
from spark_jobs.runtime.tables import TABLES
from spark_jobs.steps.context import ConfigRef, pipeline_config, reading, writing


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


@dataclass(frozen=True)
class Compacted(Result):
    source: str
    tables: list[maintenance.Compaction]
    seconds: float

    def lines(self) -> list[str]:
        return [
            f"{self.source}: {len(self.tables)} gold tables compacted, "
            f"{sum(t.files_rewritten for t in self.tables)} data files rewritten into "
            f"{sum(t.files_added for t in self.tables)}, "
            f"{sum(t.delete_files_rewritten for t in self.tables)} delete files rewritten; {self.seconds:.1f}s"
        ]


def compact_gold(source: str, relations: list[str], config: ConfigRef = None) -> Compacted:
    """Compact some of a source's gold and history tables (their small files and delete files), holding the
    source's lock: what the continuous driver does to the tables its batches keep merging into."""
    cfg = pipeline_config(config, source)
    started = time.monotonic()
    with writing(cfg, source, f"compact gold {source}") as spark:  # a table dropped or renamed since: none left
        compacted = [
            maintenance.compact_table(spark, r, min_input_files=2) for r in relations if spark.catalog.tableExists(r)
        ]
    return Compacted(source, compacted, time.monotonic() - started)


def maintenance_report(results: Iterable[Mapping[str, Any]]) -> str:
    """One line with the totals over the tables of several maintenance steps (their XCom)."""
    tables = [maintenance.TableMaintenance(**t) for r in results for t in r["tables"]]
    line = maintenance.summary_line(tables)
    maintenance.log.info("maintenance: %s", line)
    return line
