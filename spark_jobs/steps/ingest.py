"""The ingest steps of a source: land, decode, publish gold, and what a scheduled run does around them (the
freshness check, the status snapshot, the dbt docs site)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from spark_jobs.bronze.land import LandingResult, land_bronze
from spark_jobs.codecs import sends_watermarks
from spark_jobs.gold import docs as gold_docs
from spark_jobs.gold.build import GoldResult, RebuildScope, build_gold, run_dbt
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
    source: str,
    config: ConfigRef = None,
    *,
    rebuild: bool | RebuildScope = False,
    test: bool = True,
    full_check: bool = False,
) -> GoldResult:
    """Gold and history up to the consistent timestamp, at the cost of what changed: checked by dbt (every table
    whole with `full_check`) and published at one timestamp."""
    cfg = pipeline_config(config, source)
    with writing(cfg, source, f"publish gold {source}") as spark:
        return build_gold(spark, cfg, source, test=test, rebuild=rebuild, full_check=full_check)


@dataclass(frozen=True)
class RunResult(Result):
    """One scheduled run's three layers."""

    landed: LandingResult
    decoded: SilverResult
    published: GoldResult

    def xcom(self) -> dict[str, Any]:
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
            {"source_name": source, **freshness.dbt_freshness_vars(cfg.freshness)},
        )
    return check


def record_status(
    source: str,
    run_id: str,
    started_at_ms: int,
    tasks: dict[str, tuple[str | None, float | None]],
    config: ConfigRef = None,
) -> str:
    """The source's status snapshot (what the status page reads, without Spark): numbers from the tables and the
    gold state, and the run's tasks (id -> state and seconds). Returns the file's path."""
    cfg = pipeline_config(config, source)
    run = collect.RunInfo(run_id, started_at_ms, {t: collect.TaskOutcome(*outcome) for t, outcome in tasks.items()})
    return str(collect.record_status(reading(cfg, f"status {source}"), cfg, source, run))


@dataclass(frozen=True)
class DocsResult(Result):
    catalog_relations: int  # tables, views and sources the docs site describes


def generate_docs(source: str, built: list[str] | None = None, config: ConfigRef = None) -> DocsResult:
    """The dbt docs site regenerated (the plugin serves it from `<local_dir>/dbt/target`): the manifest whole,
    the catalog only for the relations `built` by the source's last gold run and those new to the site (None:
    every relation). Only this lakehouse's sources' gold models are in the project."""
    cfg = pipeline_config(config, source)
    return DocsResult(gold_docs.generate_docs(reading(cfg, f"docs {source}"), cfg, source, built))
