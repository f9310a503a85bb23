"""The ingest steps of a source: land, decode, publish gold, and what a scheduled run does around them (the
freshness check, the status snapshot, the dbt docs site)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from spark_jobs.bronze.land import LandingResult, land_bronze
from spark_jobs.codecs import sends_watermarks
from spark_jobs.gold.build import GoldResult, RebuildScope, build_gold, run_dbt
from spark_jobs.gold.models import model_selector
from spark_jobs.runtime import freshness
from spark_jobs.runtime.results import Result
from spark_jobs.silver.build import SilverResult, build_silver
from spark_jobs.status import collect
from spark_jobs.steps.context import ConfigRef, pipeline_config, reading, writing


def land(source: str, config: ConfigRef = None) -> LandingResult:
    """New Kafka records of the source into bronze, exactly once."""
    cfg = pipeline_config(config, source)
    with writing(cfg, source, f"land {source}") as spark:
        return land_bronze(spark, cfg, source)


def decode(source: str, config: ConfigRef = None) -> SilverResult:
    """New bronze records of the source into silver."""
    cfg = pipeline_config(config, source)
    with writing(cfg, source, f"decode {source}") as spark:
        return build_silver(spark, cfg, source)


def publish_gold(
    source: str, config: ConfigRef = None, *, rebuild: bool | RebuildScope = False, test: bool = True
) -> GoldResult:
    """Gold and history up to the consistent timestamp, tested by dbt and published at one tag."""
    cfg = pipeline_config(config, source)
    with writing(cfg, source, f"publish gold {source}") as spark:
        return build_gold(spark, cfg, source, test=test, rebuild=rebuild)


@dataclass(frozen=True)
class RunResult(Result):
    """One scheduled run's three layers."""

    landed: LandingResult
    decoded: SilverResult
    published: GoldResult

    def xcom(self):
        return {"land": self.landed.xcom(), "decode": self.decoded.xcom(), "gold": self.published.xcom()}

    def lines(self) -> list[str]:
        return self.published.lines()


def run_once(source: str, config: ConfigRef = None) -> RunResult:
    """Land, decode and publish once, holding the source's lock from the first step to the last."""
    cfg = pipeline_config(config, source)
    with writing(cfg, source, f"run {source}"):
        return RunResult(land(source, cfg), decode(source, cfg), publish_gold(source, cfg))


def check_freshness(source: str, consistent_ts: int | None, config: ConfigRef = None) -> freshness.FreshnessCheck:
    """How old gold's consistent timestamp is against `freshness.warn_after` / `error_after` (logged), then dbt's
    own freshness test of silver's watermarks for a protocol that sends them. The caller decides what an error
    stops (the ingest DAG fails its task)."""
    cfg = pipeline_config(config, source)
    settings = cfg.source(source)
    check = freshness.check_freshness(source, consistent_ts, int(time.time() * 1000), cfg.freshness)
    (freshness.log.warning if check.state != freshness.OK else freshness.log.info)("%s", check.line())
    if check.state != freshness.ERROR and sends_watermarks(settings.protocol, settings.options):
        reading(cfg, f"freshness {source}")  # dbt runs inside this process's session
        run_dbt(
            ["source", "freshness", "--select", "source:silver.watermarks"],
            cfg,
            source,
            freshness.dbt_freshness_vars(cfg.freshness),
        )
    return check


def record_status(
    source: str,
    run_id: str,
    started_at_ms: int,
    tasks: dict[str, tuple[str | None, float | None]],
    gold_rows: dict[str, int] | None = None,
    config: ConfigRef = None,
) -> str:
    """The source's status snapshot (what the status page reads, without Spark): numbers from the tables (gold's
    row counts from the run's gold build when it ran) and the run's tasks (id -> state and seconds). Returns the
    file's path."""
    cfg = pipeline_config(config, source)
    run = collect.RunInfo(run_id, started_at_ms, {t: collect.TaskOutcome(*outcome) for t, outcome in tasks.items()})
    return str(collect.record_status(reading(cfg, f"status {source}"), cfg, source, run, gold_rows))


@dataclass(frozen=True)
class DocsResult(Result):
    catalog_relations: int  # tables and views the docs site describes


def generate_docs(source: str, config: ConfigRef = None) -> DocsResult:
    """The dbt docs site regenerated against the real tables (its catalog has their columns and sizes); the
    plugin serves it from `<local_dir>/dbt/target`. Only the configured sources' gold models are compiled: the
    checkout may hold generated models of sources this lakehouse does not have."""
    cfg = pipeline_config(config, source)
    reading(cfg, f"docs {source}")  # dbt runs inside this process's session
    selected = ["source:silver", "staging", "intermediate", *(model_selector(s.name) for s in cfg.sources)]
    run_dbt(["docs", "generate", "--select", *selected], cfg, source)
    catalog = json.loads((cfg.local_dir / "dbt" / "target" / "catalog.json").read_text())
    return DocsResult(len(catalog["nodes"]))
