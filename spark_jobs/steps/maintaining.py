"""The maintenance steps: compaction, snapshot expiry, orphan files and stale landing branches of every table."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from spark_jobs import maintenance
from spark_jobs.runtime.lock import CONTINUOUS_HOLDER
from spark_jobs.runtime.results import Result
from spark_jobs.runtime.spark_session import hold_embedded_metastore
from spark_jobs.runtime.tables import TABLES
from spark_jobs.steps.context import ConfigRef, pipeline_config, reading, writing


@dataclass(frozen=True)
class Maintained(Result):
    tables: list[maintenance.TableMaintenance]
    left_to_driver: bool = False  # embedded mode: a continuous driver holds the metastore and maintains it itself

    def xcom(self) -> dict[str, Any]:
        return {"tables": [t.xcom() for t in self.tables], "left_to_driver": self.left_to_driver}

    def lines(self) -> list[str]:
        if self.left_to_driver:
            return [f"maintenance: {LEFT_TO_DRIVER}"]
        return [*(t.line() for t in self.tables), f"maintenance: {maintenance.summary_line(self.tables)}"]


LEFT_TO_DRIVER = (
    "nothing done: a continuous driver holds the embedded metastore and maintains the lakehouse itself "
    "(maintenance.continuous_every)"
)


def _left_to_driver(cfg: Any, what: str) -> bool:
    """Embedded mode, where a continuous driver holds the metastore as long as it runs: a maintenance step would
    wait for it to stop, so it leaves the lakehouse to the driver, which maintains it itself (`steps.continuous`)."""
    if hold_embedded_metastore(cfg, what, unless_held_by=CONTINUOUS_HOLDER):
        return False
    maintenance.log.info("%s: %s", what, LEFT_TO_DRIVER)
    return True


def maintain(source: str | None = None, config: ConfigRef = None) -> Maintained:
    """Every shared table (bronze, silver, gold's bookkeeping), then the gold tables of `source` (default: every
    configured source's). Landing may run meanwhile: maintenance takes no source's lock."""
    cfg = pipeline_config(config, source)
    if _left_to_driver(cfg, "maintain"):
        return Maintained([], left_to_driver=True)
    return Maintained(maintenance.maintain(reading(cfg, "maintain"), cfg, source))


def maintain_shared(layer: str, config: ConfigRef = None) -> Maintained:
    """The shared tables of one layer: `bronze` (first: its expiry keeps what silver still reads), then `silver`
    (silver's tables and gold's bookkeeping)."""
    cfg = pipeline_config(config)
    if _left_to_driver(cfg, f"maintain {layer}"):
        return Maintained([], left_to_driver=True)
    spark = reading(cfg, f"maintain {layer}")
    layers = ["bronze"] if layer == "bronze" else [name for name in TABLES if name != "bronze"]
    return Maintained([t for name in layers for t in maintenance.maintain_layer(spark, cfg, name)])


def maintain_gold(source: str, config: ConfigRef = None) -> Maintained:
    """One source's gold and history tables."""
    cfg = pipeline_config(config, source)
    if _left_to_driver(cfg, f"maintain gold {source}"):
        return Maintained([], left_to_driver=True)
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
    results = list(results)
    tables = [maintenance.TableMaintenance(**t) for r in results for t in r["tables"]]
    line = maintenance.summary_line(tables)
    if any(r.get("left_to_driver") for r in results):
        line = f"{line}; {LEFT_TO_DRIVER}"
    maintenance.log.info("maintenance: %s", line)
    return line
