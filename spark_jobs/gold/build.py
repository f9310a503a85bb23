"""Build a source's gold tables with dbt, inside the pipeline's SparkSession.

dbt does the replay: staging and intermediate models turn silver's DDL history into schema versions and
table identities, and one generated model per upstream table (`gold.models`) shapes its rows. This
module only writes the model files from what the intermediate models publish and invokes dbt: the
views, then the source's gold models, then the dbt tests (a failing test fails the run, naming it).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import time
from dataclasses import dataclass, field

from spark_jobs.errors import ConfigError, DbtError, SnapshotRefused
from spark_jobs.gold import models as gold_models
from spark_jobs.gold import names
from spark_jobs.gold.publish import PublishedTable, current_snapshot, publish, record_publication
from spark_jobs.runtime.logs import verbose_requested
from spark_jobs.runtime.results import Result
from spark_jobs.silver.snapshot_loads import unfinished_load

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GoldResult(Result):
    source: str
    consistent_ts: int | None
    consistency: str | None
    tables: dict[str, int]  # gold relation -> rows
    needing_snapshot: list[str]  # upstream tables whose gold cannot follow without a fresh snapshot
    seconds: float
    history: dict[str, int] = field(default_factory=dict)  # history relation -> versions
    publication: str | None = None  # the tag every table of this run's publication carries

    def lines(self) -> list[str]:
        return [
            f"{self.source}: {len(self.tables)} gold tables consistent as of TiDB ts {self.consistent_ts}"
            f" ({self.consistency}), {sum(self.tables.values())} rows; {self.seconds:.1f}s",
            *(f"  {table} needs a fresh snapshot (see the log)" for table in self.needing_snapshot),
        ]


def dbt_profile_env(runtime) -> dict[str, str]:
    """The environment dbt's profile reads: the target (`runtime.dbt_target`) and, for `cluster`, the Thrift
    Server's address."""
    env = {"TICDC_DBT_TARGET": runtime.dbt_target}
    if runtime.dbt_target == "cluster":
        host, port = runtime.thrift_server.rsplit(":", 1)
        env |= {"TICDC_THRIFT_HOST": host, "TICDC_THRIFT_PORT": port}
    return env


def run_dbt(args: list[str], config, source_name: str, extra_vars: dict | None = None) -> None:
    """One dbt command in-process: in the open SparkSession (target `embedded`) or through the Spark Thrift
    Server (`cluster`); a failure raises DbtError naming the failing models or tests. dbt's compiled files and
    logs go under `<local_dir>/dbt`, not the checkout. Vars other than the last command's make dbt parse the
    whole project again (seconds): what one command needs goes in `extra_vars` only when it must be a var."""
    from dbt.cli.main import dbtRunner

    os.environ.setdefault("DBT_SEND_ANONYMOUS_USAGE_STATS", "False")
    os.environ.update(dbt_profile_env(config.runtime))
    work_dir = config.local_dir / "dbt"
    project = str(gold_models.DBT_PROJECT)
    result = dbtRunner().invoke(
        [
            *args,
            *("--project-dir", project, "--profiles-dir", project),
            *("--target-path", str(work_dir / "target"), "--log-path", str(work_dir / "logs")),
            *("--vars", json.dumps({"source_name": source_name, **(extra_vars or {})})),
            *([] if verbose_requested() else ["--quiet"]),
        ]
    )
    if not result.success:
        failures = [
            f"{r.node.name}: {r.message}"
            for r in (
                result.result if isinstance(result.result, list | tuple) else getattr(result.result, "results", [])
            )
            if getattr(r, "status", None) not in ("success", "pass", None)
        ]
        raise DbtError(f"dbt {args[0]} for source {source_name} failed: {'; '.join(failures) or result.exception}")


def published_tables(spark, source_name: str) -> list[gold_models.GoldModel]:
    """The source's gold tables as the intermediate models publish them (dropped tables excluded)."""
    rows = spark.sql(
        "SELECT table_uid, upstream_database, upstream_table, to_json(columns) AS columns, key_columns "
        "FROM lake_staging.int_gold_tables WHERE source_name = :source",
        args={"source": source_name},
    ).collect()
    return sorted(
        (
            gold_models.GoldModel(
                source_name,
                r["table_uid"],
                r["upstream_database"],
                r["upstream_table"],
                json.loads(r["columns"]),
                list(r["key_columns"] or []),
            )
            for r in rows
        ),
        key=lambda m: m.name,
    )


def _needing_snapshot(spark, source_name: str) -> list[str]:
    rows = spark.sql(
        "SELECT upstream_database, upstream_table FROM lake_staging.int_gold_tables "
        "WHERE source_name = :source AND needs_snapshot ORDER BY 1, 2",
        args={"source": source_name},
    ).collect()
    return [f"{r[0]}.{r[1]}" for r in rows]


@dataclass(frozen=True)
class RebuildScope:
    """Which gold tables a run replaces from silver: the current state, the history or both, of some upstream
    tables (`(database, table)` pairs) or of all."""

    layers: frozenset[str] = frozenset({"gold", "history"})
    tables: frozenset[tuple[str, str]] | None = None

    def aliases(self, model: gold_models.GoldModel) -> list[str]:
        if self.tables is not None and (model.database, model.table) not in self.tables:
            return []
        return [
            alias for layer, alias in (("gold", model.alias), ("history", model.history_alias)) if layer in self.layers
        ]


def build_gold(spark, config, source_name: str, test: bool = True, rebuild: bool | RebuildScope = False) -> GoldResult:
    """The views, the source's gold models and (by default) the dbt tests; returns rows per gold table.

    `rebuild` replaces gold tables from silver (True: every table of the source); the result equals the
    incremental one. The tables not rebuilt apply what is new, so the publication still holds every table of
    the source at one consistent ts.
    """
    started, started_at = time.monotonic(), dt.datetime.now(dt.UTC)
    config.source(source_name)
    unfinished = unfinished_load(spark, source_name)
    if unfinished is not None:
        raise SnapshotRefused(
            f"source {source_name}: the snapshot load of {unfinished['location']} (TSO {unfinished['snapshot_ts']}) "
            f"did not finish; run `ticdc-lake backfill snapshot --source {source_name} --from "
            f"{unfinished['location']}` again before gold is published"
        )
    run_dbt(["run", "--select", "staging", "intermediate"], config, source_name)
    tables = published_tables(spark, source_name)
    scope = RebuildScope() if rebuild is True else rebuild or RebuildScope(layers=frozenset())
    unknown = sorted((scope.tables or set()) - {(m.database, m.table) for m in tables})
    if unknown:
        raise ConfigError(f"source {source_name} has no gold table {', '.join(f'{d}.{t}' for d, t in unknown)}")
    gold_models.write_models(source_name, tables)
    consistent = spark.sql(
        "SELECT consistent_ts, consistency FROM lake_staging.int_consistent_ts WHERE source_name = :source",
        args={"source": source_name},
    ).collect()
    ts, how = (consistent[0][0], consistent[0][1]) if consistent else (None, None)
    namespace = names.gold_namespace(source_name)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {namespace}")
    keep = [a for m in tables for a in (m.alias, m.history_alias)]
    drop_args = json.dumps({"namespace": namespace, "keep": keep})
    run_dbt(["run-operation", "drop_stale_gold_tables", "--args", drop_args], config, source_name)
    if not tables or ts is None:
        log.info("source %s: no gold tables to publish yet (consistent ts %s)", source_name, ts)
        return GoldResult(source_name, ts, how, {}, [], time.monotonic() - started)
    selector = gold_models.model_selector(source_name)
    rebuilt = sorted(alias for m in tables for alias in scope.aliases(m))
    run_dbt(["run", "--select", selector], config, source_name, {"rebuild_tables": rebuilt} if rebuilt else None)
    if test:
        run_dbt(["test", "--select", selector], config, source_name)
    counts = {m.relation: spark.table(m.relation).count() for m in tables}
    versions = {m.history_relation: spark.table(m.history_relation).count() for m in tables}
    for m in tables:
        log.info(
            "  %s (%s.%s): %d rows, %d versions in history",
            m.relation,
            m.database,
            m.table,
            counts[m.relation],
            versions[m.history_relation],
        )
    needing = _needing_snapshot(spark, source_name)
    for table in needing:
        log.warning(
            "source %s: %s needs a fresh snapshot: a DDL deleted or changed rows TiCDC does not send "
            "(partition maintenance, recover, key change or a statement not understood); gold may differ "
            "until a fresh snapshot of it is loaded",
            source_name,
            table,
        )
    log.info(
        "source %s: %d gold tables consistent as of TiDB ts %s (%s) in %.1fs",
        source_name,
        len(counts),
        ts,
        how,
        time.monotonic() - started,
    )
    tag = publish(
        spark,
        source_name,
        ts,
        [
            PublishedTable(relation, f"{m.database}.{m.table}", current_snapshot(spark, relation), rows)
            for m in tables
            for relation, rows in ((m.relation, counts[m.relation]), (m.history_relation, versions[m.history_relation]))
        ],
        started_at,
    )
    record_publication(config.local_dir, source_name, ts, tag)
    return GoldResult(source_name, ts, how, counts, needing, time.monotonic() - started, versions, tag)
