"""Build a source's gold tables with dbt, inside the pipeline's SparkSession, at the cost of what changed.

dbt does the replay: staging and intermediate views turn silver's DDL history into schema versions and table
identities; the run's plan (`gold.plan`) says from them, from `gold.tables` and from one bounded read of silver's
new changes what the run does to each table; one generated model per upstream table and layer (`gold.models`)
shapes its rows. This module writes the plan and the model files, runs dbt on the tables the plan says changed
(and the one test that checks them), and records the source's state and publication (`gold.publish`):

- nothing new in silver since the recorded state: nothing runs and nothing is written;
- only the consistent timestamp moved (watermarks), with no change or DDL behind it: no dbt at all; every table
  is pinned again, as it is, at the newer timestamp;
- otherwise one dbt invocation builds only the changed tables' models (the views are created only when missing
  or changed).
Untouched tables are neither built, tested, counted nor committed to: the publication pins them to the snapshot
they already have (why that is exact: docs/architecture.md, decision 6).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass, field, replace
from typing import Any

from spark_jobs.config import GoldSettings
from spark_jobs.errors import ConfigError, DbtError, SnapshotRefused
from spark_jobs.gold import layout, names
from spark_jobs.gold import models as gold_models
from spark_jobs.gold.plan import Request, TablePlan, configured, plan_run, write_plan
from spark_jobs.gold.publish import TableState, live_rows, publish_state, read_state
from spark_jobs.runtime.logs import verbose_requested
from spark_jobs.runtime.results import Phases, Result
from spark_jobs.runtime.spark_session import expressions_for
from spark_jobs.runtime.sql import quote_ident
from spark_jobs.runtime.tables import SILVER_DDL_EVENTS, SILVER_ROW_CHANGES, SILVER_RUNS, ensure_tables_once
from spark_jobs.silver.snapshot_loads import unfinished_load

log = logging.getLogger(__name__)

TABLES_LOGGED = 20  # a run that built more tables logs the first ones and a count


@dataclass(frozen=True)
class GoldResult(Result):
    source: str
    consistent_ts: int | None
    consistency: str | None
    tables: dict[str, int]  # gold relation -> rows (every table of the source)
    needing_snapshot: list[str]  # upstream tables whose gold cannot follow without a fresh snapshot
    seconds: float
    history: dict[str, int] = field(default_factory=dict)  # history relation -> versions
    publication: str | None = None  # the name of this run's publication
    built: list[str] = field(default_factory=list)  # the relations this run built (the rest are pinned as they were)
    phases: dict[str, float] = field(default_factory=dict)  # seconds per phase: state, plan, models, dbt, record

    def lines(self) -> list[str]:
        return [
            f"{self.source}: {len(self.tables)} gold tables consistent as of TiDB ts {self.consistent_ts}"
            f" ({self.consistency}), {sum(self.tables.values())} rows, {len(self.built)} tables built;"
            f" {self.seconds:.1f}s",
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


def run_dbt(
    args: list[str],
    config,
    source_name: str,
    extra_vars: dict | None = None,
    write_manifest: bool = False,
    manifest: Any = None,
    for_run: bool = False,
) -> Any:
    """One dbt command in-process: in the open SparkSession (target `embedded`) or through the Spark Thrift
    Server (`cluster`); returns dbt's result, and a failure raises DbtError naming the failing models or tests.
    dbt's compiled files and logs go under `<local_dir>/dbt`, not the checkout. Vars are given only where a command
    needs them (the freshness limits): a change of vars makes dbt parse the whole project again, while without them
    it parses only the files that changed. So a command with vars runs in a project of its own, without gold
    models (`<local_dir>/dbt/with_vars`): its whole parse costs the same at 3 tables as at 1,000, and it never
    makes the docs site's or a run's project parse whole again.

    dbt writes `manifest.json` twice per command, describing every model of the project (3.3 s a run at 1,000
    gold tables), so only `write_manifest` (the docs site's step, `gold.docs`) has it written; a command that runs
    nodes still leaves its `run_results.json`, which is as small as the run. `manifest`: one parsed already, so
    that dbt does not parse the project again. `for_run`: the source's run project, of only the models its run
    builds or checks (`gold_models.write_run_models`), with its own target; otherwise the lakehouse's, of every
    gold model, in `<local_dir>/dbt/target` (the docs site)."""
    from dbt.artifacts.schemas.run import RunExecutionResult
    from dbt.cli.main import dbtRunner

    os.environ.setdefault("DBT_SEND_ANONYMOUS_USAGE_STATS", "False")
    os.environ.update(dbt_profile_env(config.runtime))
    work_dir = config.local_dir / "dbt"
    if for_run:
        root = gold_models.run_root(config.local_dir, source_name)
    else:
        root = work_dir / "with_vars" if extra_vars else work_dir
    root = gold_models.dbt_project(root)
    gold_models.seed_partial_parse(root, config.local_dir)
    result = dbtRunner(manifest=manifest).invoke(
        [
            *args,
            *("--project-dir", str(root), "--profiles-dir", str(gold_models.DBT_PROJECT)),
            *("--target-path", str(root / "target"), "--log-path", str(work_dir / "logs")),
            *(("--vars", json.dumps(extra_vars)) if extra_vars else ()),
            *([] if write_manifest else ["--no-write-json"]),
            *([] if verbose_requested() else ["--quiet"]),
        ]
    )
    if not write_manifest and isinstance(result.result, RunExecutionResult):  # run, build, test (not freshness)
        result.result.write(str(root / "target" / "run_results.json"))
    if result.success and for_run and not extra_vars:
        gold_models.keep_partial_parse(root, config.local_dir)
    if not result.success:
        results: Any = (
            result.result if isinstance(result.result, list | tuple) else getattr(result.result, "results", [])
        )
        failures = [
            f"{r.node.name}: {r.message}"
            for r in results
            if getattr(r, "status", None) not in ("success", "pass", None) and hasattr(r, "node")
        ]
        raise DbtError(f"dbt {args[0]} for source {source_name} failed: {'; '.join(failures) or result.exception}")
    return result.result


@dataclass(frozen=True)
class RebuildScope:
    """Which gold tables a run replaces from silver: the current state, the history or both, of some upstream
    tables (`(database, table)` pairs) or of all."""

    layers: frozenset[str] = frozenset({"gold", "history"})
    tables: frozenset[tuple[str, str]] | None = None


@dataclass(frozen=True)
class SilverPosition:
    """How far silver is: the consistent ts of its newest run (what gold publishes up to), the highest
    silver_seq, and how many of the source's DDL events that consistent ts has passed."""

    consistent_ts: int
    consistency: str
    silver_seq: int
    ddl_events: int


def silver_position(spark, source: str) -> SilverPosition | None:
    """Where silver is for the source (as int_consistent_ts says it), or None before a consistent ts exists."""
    rows = spark.sql(
        f"""SELECT consistent_ts, consistency, max(silver_seq) OVER () AS silver_seq
            FROM {SILVER_RUNS} WHERE source = :source ORDER BY finished_at DESC LIMIT 1""",
        args={"source": source},
    ).collect()
    if not rows or rows[0]["consistent_ts"] is None:
        return None
    ts = int(rows[0]["consistent_ts"])
    ddl = spark.sql(
        f"SELECT count(*) FROM {SILVER_DDL_EVENTS} WHERE source = :source AND commit_ts <= :ts",
        args={"source": source, "ts": ts},
    ).collect()[0][0]
    return SilverPosition(ts, rows[0]["consistency"], int(rows[0]["silver_seq"] or 0), int(ddl))


def _changes_since(spark, source: str, state: list[TableState], position: SilverPosition) -> bool:
    """Whether silver holds a row change that the recorded state has not applied and the consistent ts has
    passed: the bounds are literals, so silver's file statistics skip every older file."""
    rows = spark.sql(
        f"""SELECT 1 FROM {SILVER_ROW_CHANGES}
            WHERE source = :source AND commit_ts <= :ts AND (silver_seq > :seq OR commit_ts > :since) LIMIT 1""",
        args={
            "source": source,
            "ts": position.consistent_ts,
            "seq": min(t.silver_seq for t in state),
            "since": min(t.consistent_ts for t in state),
        },
    ).collect()
    return bool(rows)


def planned_models(spark, source_name: str) -> list[gold_models.GoldModel]:
    """The source's gold tables as its last run's plan saw them (dropped tables excluded)."""
    rows = spark.sql(
        f"""SELECT table_uid, upstream_database, upstream_table, columns, key_columns
            FROM lake_staging.{quote_ident(gold_models.plan_model(source_name))} ORDER BY upstream_database, upstream_table"""
    ).collect()
    return [gold_models.GoldModel(source_name, r[0], r[1], r[2], json.loads(r[3]), list(r[4] or [])) for r in rows]


def _asked(scope: RebuildScope, layer: str) -> bool | frozenset[tuple[str, str]]:
    if layer not in scope.layers:
        return False
    return True if scope.tables is None else scope.tables


def build_gold(
    spark,
    config,
    source_name: str,
    test: bool = True,
    rebuild: bool | RebuildScope = False,
    full_check: bool = False,
) -> GoldResult:
    """Gold and history of the source up to silver's consistent timestamp, at the cost of what changed, checked
    by dbt (`test`) and published at one timestamp.

    `rebuild` replaces gold tables from silver (True: every table of the source); the result equals the
    incremental one. `full_check` checks every table whole, not only what the run changed. The tables not rebuilt
    apply what is new, so the publication still holds every table of the source at one consistent ts.
    """
    run = _Run(source_name, time.monotonic(), dt.datetime.now(dt.UTC), Phases())
    pinned: list[TableState] | None = None  # a run with only watermarks: every table as it is, at the newer ts
    with run.phases.timed("state"):
        settings = config.source(source_name).gold
        skip_keyless = settings.keyless_tables == "skip"
        unfinished = unfinished_load(spark, source_name)
        if unfinished is not None:
            raise SnapshotRefused(
                f"source {source_name}: the snapshot load of {unfinished['location']} (TSO "
                f"{unfinished['snapshot_ts']}) did not finish; run `ticdc-lake backfill snapshot --source "
                f"{source_name} --from {unfinished['location']}` again before gold is published"
            )
        ensure_tables_once(spark, "gold")
        position = silver_position(spark, source_name)
        if position is None:
            log.info("source %s: no gold tables to publish yet (no consistent ts)", source_name)
            return GoldResult(source_name, None, None, {}, [], time.monotonic() - run.started)
        scope = RebuildScope() if rebuild is True else rebuild or RebuildScope(layers=frozenset())
        request = Request(_asked(scope, "gold"), _asked(scope, "history"), full_check)
        state = read_state(spark, source_name)
        up_to_date = False
        settings_changed = (skip_keyless and any(not t.key_columns for t in state)) or any(
            _settings_changed(settings, t) for t in state
        )
        if (
            state
            and not request.asked
            and not settings_changed
            and all(t.ddl_events == position.ddl_events for t in state)
        ):
            up_to_date = all(
                (t.consistent_ts, t.silver_seq) == (position.consistent_ts, position.silver_seq) for t in state
            )
            if not up_to_date and not _changes_since(spark, source_name, state, position):
                pinned = [t.advanced(position.consistent_ts, position.silver_seq) for t in state]
    if up_to_date:
        log.info("source %s: gold is up to date as of TiDB ts %d", source_name, position.consistent_ts)
        return _result(run, position, state, [], None)
    if pinned is not None:
        return _record(spark, config, run, position, pinned, [])

    with run.phases.timed("plan"):
        views = _views_to_create(spark, config)
        if views:  # a view holds no data: created when missing or when the project changed
            run_dbt(["run", "--select", *views, "--no-populate-cache"], config, source_name, for_run=True)
            _views_created(config, views)
        planned = plan_run(
            spark,
            source_name,
            position.consistent_ts,
            position.consistency,
            position.silver_seq,
            position.ddl_events,
            state,
            request,
            settings,
        )
        unknown = sorted((scope.tables or frozenset()) - {(p.model.database, p.model.table) for p in planned})
        if unknown:
            raise ConfigError(f"source {source_name} has no gold table {', '.join(f'{d}.{t}' for d, t in unknown)}")
    with run.phases.timed("models"):
        write_plan(spark, source_name, planned)
        rules = config.source(source_name).tables
        models = [p.model.under(rules) for p in planned]
        gold_models.write_models(config.local_dir, source_name, models)
        ran = [m for p, m in zip(planned, models, strict=True) if p.built or p.full_check]
        gold_models.write_run_models(config.local_dir, source_name, ran)
        _drop_stale_tables(spark, source_name, [p.model for p in planned])
        _evolve_layouts(spark, planned)

    with run.phases.timed("dbt"):
        selected = [
            *(p.model.name for p in planned if p.gold_mode != "unchanged"),
            *(p.model.history_name for p in planned if p.history_mode != "unchanged"),
        ]
        checks = [gold_models.checks_model(source_name)] if test and (selected or full_check) else []
        if selected or checks:
            command = "build" if checks else "run"
            with expressions_for(spark, config, *_rows_read(spark, source_name, planned)):
                run_dbt(
                    [command, "--select", *selected, *checks, "--no-populate-cache"], config, source_name, for_run=True
                )
    tables = _state_after(spark, planned, {t.table_uid: t for t in state}, position)
    built = [r for p in planned if p.built for r in (p.model.relation, p.model.history_relation)]
    return _record(spark, config, run, position, tables, built)


def _rows_read(spark, source_name: str, planned: list[TablePlan]) -> tuple[int, int]:
    """About how many rows the run's models and checks read, and in how many statements: a table applied reads its
    changes and its gold and history tables; one read whole (new, rebuilt, or checked whole) reads every row silver
    holds for the source (counted from file statistics)."""
    read = [p for p in planned if p.built or p.full_check]
    rows = sum(p.previous.rows + p.previous.versions for p in read if p.previous is not None)
    if all(p.changes is not None and not p.full_check for p in read):
        rows += sum(p.changes or 0 for p in read)
    else:
        counted = spark.sql(
            f"SELECT count(*) FROM {SILVER_ROW_CHANGES} WHERE source = :source", args={"source": source_name}
        )
        rows += int(counted.collect()[0][0])
    return rows, 2 * len(read) + 1


def _settings_changed(settings: GoldSettings, table: TableState) -> bool:
    """Whether the source's gold settings now give a table another delete mode, type mappings or layout than it
    was built with."""
    columns = json.loads(table.columns)
    model = gold_models.GoldModel(
        table.source, table.table_uid, table.upstream_database, table.upstream_table, columns, table.key_columns
    )
    now = configured(model, settings)
    return ((table.delete_mode or "hard"), table.layout, table.types) != (now.delete_mode, now.layout.text, now.types)


def _evolve_layouts(spark, planned: list[TablePlan]) -> None:
    """Bring the existing tables whose layout the source's settings changed to the new one, in place (a table the
    run rebuilds is created in it)."""
    for p in planned:
        if p.previous is None or p.previous.layout == p.model.layout.text:
            continue
        for relation, mode in ((p.model.relation, p.gold_mode), (p.model.history_relation, p.history_mode)):
            if mode != "rebuild":
                for change in layout.evolve(spark, relation, p.model.layout):
                    log.info("%s: %s (the files written before keep their layout)", relation, change)


@dataclass(frozen=True)
class _Run:
    source: str
    started: float
    started_at: dt.datetime
    phases: Phases


def _state_after(
    spark, planned: list[TablePlan], recorded: dict[str, TableState], position: SilverPosition
) -> list[TableState]:
    """Every live table's state after the run: a built table with its new snapshots and counts (from the
    snapshots' summaries), an untouched one as it was, at the run's consistent ts."""
    tables = []
    for p in planned:
        m, before = p.model, recorded.get(p.model.table_uid)
        if p.built or before is None:
            gold_snapshot, rows = live_rows(spark, m.relation)
            history_snapshot, versions = live_rows(spark, m.history_relation)
            tables.append(
                TableState(
                    m.source,
                    m.table_uid,
                    m.database,
                    m.table,
                    m.relation,
                    m.history_relation,
                    json.dumps(m.columns),
                    m.key_columns,
                    p.schema_fingerprint,
                    position.consistent_ts,
                    position.silver_seq,
                    gold_snapshot,
                    history_snapshot,
                    rows,
                    versions,
                    position.consistent_ts,
                    position.ddl_events,
                    p.needs_snapshot,
                    m.delete_mode,
                    m.layout.text,
                    m.types,
                )
            )
        else:
            tables.append(
                replace(
                    before.advanced(position.consistent_ts, position.silver_seq),
                    needs_snapshot=p.needs_snapshot,
                    layout=m.layout.text,
                )
            )
    return tables


def _record(
    spark,
    config,
    run: _Run,
    position: SilverPosition,
    tables: list[TableState],
    built: list[str],
) -> GoldResult:
    """Write the source's state and publication (two commits, whatever the number of tables) and the
    publication's file; log the run in a few lines."""
    with run.phases.timed("record"):
        tables = [replace(t, ddl_events=position.ddl_events) for t in tables]
        tag = publish_state(spark, config.local_dir, run.source, position.consistent_ts, tables, run.started_at)
    result = _result(run, position, tables, built, tag)
    for relation in built[:TABLES_LOGGED]:
        rows = result.tables.get(relation, result.history.get(relation))
        log.info("  %s: %s rows", relation, rows)
    if len(built) > TABLES_LOGGED:
        log.info("  ... and %d more tables built", len(built) - TABLES_LOGGED)
    log.info(
        "source %s: %d gold tables consistent as of TiDB ts %d (%s), %d built, %d pinned as they were; %.1fs (%s)",
        run.source,
        len(tables),
        position.consistent_ts,
        position.consistency,
        len(built) // 2,
        len(tables) - len(built) // 2,
        time.monotonic() - run.started,
        run.phases.line(),
    )
    return result


def _result(
    run: _Run,
    position: SilverPosition,
    tables: list[TableState],
    built: list[str],
    tag: str | None,
) -> GoldResult:
    """The run's result; every table that needs a fresh snapshot is warned about on every run, planned or not."""
    needing = sorted(t.upstream for t in tables if t.needs_snapshot)
    for upstream in needing:
        log.warning(
            "source %s: %s needs a fresh snapshot: a DDL deleted or changed rows TiCDC does not send (partition "
            "maintenance, recover, key change or a statement not understood); gold may differ until a fresh "
            "snapshot of it is loaded",
            run.source,
            upstream,
        )
    return GoldResult(
        run.source,
        position.consistent_ts,
        position.consistency,
        {t.gold_relation: t.rows for t in tables},
        needing,
        time.monotonic() - run.started,
        {t.history_relation: t.versions for t in tables},
        tag,
        built,
        dict(run.phases),
    )


def _project_digest() -> str:
    """What the staging and intermediate views are made of: the project's model and macro files."""
    digest = hashlib.sha256()
    for path in sorted(gold_models.DBT_PROJECT.glob("models/**/*.sql")) + sorted(
        gold_models.DBT_PROJECT.glob("macros/*")
    ):
        digest.update(str(path.relative_to(gold_models.DBT_PROJECT)).encode() + b"\0" + path.read_bytes())
    digest.update((gold_models.DBT_PROJECT / "dbt_project.yml").read_bytes())
    return digest.hexdigest()


def _view_models() -> list[str]:
    models = gold_models.DBT_PROJECT / "models"
    names = {p.stem for folder in ("staging", "intermediate") for p in (models / folder).glob("*.sql")}
    return sorted(names)


def _views_to_create(spark, config) -> list[str]:
    """The view models to create in this run: none when every one exists and the project has not changed since
    they were created (a view holds no data: its definition is all it has)."""
    marker = config.local_dir / "dbt" / "views.sha256"
    current = marker.exists() and marker.read_text() == _project_digest()
    if current and all(spark.catalog.tableExists(f"lake_staging.{name}") for name in _view_models()):
        return []
    return _view_models()


def _views_created(config, views: list[str]) -> None:
    if views:
        marker = config.local_dir / "dbt" / "views.sha256"
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(_project_digest())


def _drop_stale_tables(spark, source: str, wanted: list[gold_models.GoldModel]) -> None:
    """Drop the source's gold and history tables no live upstream table wants any more: the table was dropped
    upstream, or renamed (its gold table now has the new name)."""
    namespace = names.gold_namespace(source)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {quote_ident(namespace)}")
    keep = {a for m in wanted for a in (m.alias, m.history_alias)}
    for row in spark.sql(f"SHOW TABLES IN {quote_ident(namespace)}").collect():
        if not row["isTemporary"] and row["tableName"] not in keep:
            log.info("gold %s.%s: dropped (its upstream table was dropped or renamed)", namespace, row["tableName"])
            spark.sql(f"DROP TABLE IF EXISTS {quote_ident(namespace)}.{quote_ident(row['tableName'])}")
