"""The plan of a source's gold run: per live upstream table, what the run does to its gold and history tables.

Decided once per run for every table together, from three small reads: the source's schema versions (dbt's DDL
replay, `int_schema_versions`), the recorded state (`gold.tables`, what each table is known right as of) and one
pass over what silver gained since that state (literal bounds, so silver's file statistics skip every older
file). A table is untouched when nothing since its recorded state can change it: no change silver gained since,
no change the consistent timestamp has just passed, no DDL, no TRUNCATE, no snapshot, no rebuild asked for. Its
rows upstream were the same at the new consistent timestamp as at the old one, so it is exactly right at the new
one with no work at all: the run neither builds, checks, counts nor commits it.

Modes, per layer: `rebuild` (new, renamed, truncated, snapshot loaded since, or asked for), `schema` (the schema
changed: the materialization widens in place or rebuilds), `incremental` (changes to apply), `unchanged`.
`check` says what the run's checks read of a table: `whole` after a rebuild or a schema change or when a full
check is asked for, `changed` the keys the run changed, none when the run leaves it alone.

The plan is written to `lake_staging.gold_<source>__plan` (a dbt source of the source's models, which read their
row from it); each row carries what a model needs to shape its rows without a join: the table's schema versions
(the name it had and its columns while each was valid) and its truncations; and what the source's gold settings
give the table: its delete mode, its layout's partition and sort SQL and the type mappings. A changed delete mode
rebuilds the gold table, changed type mappings both tables; a changed layout is evolved in place (gold.layout).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from spark_jobs.config import GoldSettings
from spark_jobs.gold import models as gold_models
from spark_jobs.gold.layout import table_layout
from spark_jobs.gold.publish import TableState
from spark_jobs.runtime.iceberg import kept_while_head
from spark_jobs.runtime.sql import quote_ident
from spark_jobs.runtime.tables import SILVER_DDL_EVENTS, SILVER_ROW_CHANGES

SCHEMA_VERSIONS = "lake_staging.int_schema_versions"
PLAN_SCHEMA = """table_uid STRING, upstream_database STRING, upstream_table STRING, columns STRING,
    key_columns ARRAY<STRING>, schema_fingerprint STRING, consistent_ts BIGINT, consistency STRING,
    silver_seq BIGINT, truncated_at_ts BIGINT, snapshot_at_ts BIGINT, needs_snapshot BOOLEAN,
    versions ARRAY<STRUCT<from_ts: BIGINT, to_ts: BIGINT, database: STRING, `table`: STRING,
        columns: ARRAY<STRUCT<id: INT, name: STRING, through: ARRAY<STRING>>>>>,
    truncations ARRAY<BIGINT>, previous_consistent_ts BIGINT, previous_silver_seq BIGINT, previous_columns STRING,
    previous_key_columns ARRAY<STRING>, late BOOLEAN, gold_mode STRING, history_mode STRING, reason STRING,
    gold_check STRING, history_check STRING, delete_mode STRING, partition_sql STRING, sort_sql STRING,
    type_mappings STRING"""


@dataclass(frozen=True)
class Request:
    """What a run is asked to do beyond what changed: rebuild tables (`True`: every table) of a layer, check
    every table whole."""

    rebuild_gold: bool | frozenset[tuple[str, str]] = False
    rebuild_history: bool | frozenset[tuple[str, str]] = False
    full_check: bool = False

    @property
    def asked(self) -> bool:
        return bool(self.rebuild_gold or self.rebuild_history or self.full_check)

    def rebuilds(self, layer: str, database: str, table: str) -> bool:
        asked = self.rebuild_gold if layer == "gold" else self.rebuild_history
        return asked is True or (bool(asked) and (database, table) in asked)  # type: ignore[operator]


@dataclass(frozen=True)
class TablePlan:
    """A live upstream table and what the run does to it."""

    model: gold_models.GoldModel
    schema_fingerprint: str
    consistent_ts: int
    consistency: str
    silver_seq: int
    truncated_at_ts: int | None
    snapshot_at_ts: int | None
    needs_snapshot: bool
    versions: list[dict]
    truncations: list[int]
    previous: TableState | None
    late: bool
    gold_mode: str
    history_mode: str
    reason: str
    full_check: bool = False
    # the silver rows its statements read: its changes since its state, None when they read the table whole
    changes: int | None = None

    @property
    def built(self) -> bool:
        return self.gold_mode != "unchanged" or self.history_mode != "unchanged"

    def check(self, mode: str) -> str | None:
        if self.full_check or mode in ("rebuild", "schema"):
            return "whole"
        return "changed" if mode == "incremental" else None

    def row(self) -> tuple:
        p = self.previous
        return (
            self.model.table_uid,
            self.model.database,
            self.model.table,
            json.dumps(self.model.columns),
            self.model.key_columns,
            self.schema_fingerprint,
            self.consistent_ts,
            self.consistency,
            self.silver_seq,
            self.truncated_at_ts,
            self.snapshot_at_ts,
            self.needs_snapshot,
            [
                (
                    v["from_ts"],
                    v["to_ts"],
                    v["database"],
                    v["table"],
                    [(c["id"], c["name"], c["through"]) for c in v["columns"]],
                )
                for v in self.versions
            ],
            self.truncations,
            p.consistent_ts if p else None,
            p.silver_seq if p else None,
            p.columns if p else None,
            p.key_columns if p else None,
            self.late,
            self.gold_mode,
            self.history_mode,
            self.reason,
            self.check(self.gold_mode),
            self.check(self.history_mode),
            self.model.delete_mode,
            self.model.layout.partition_sql,
            self.model.layout.sort_sql,
            self.model.types,
        )


@dataclass
class _Table:
    """One table's schema versions as the replay gives them, oldest first."""

    uid: str
    versions: list = field(default_factory=list)


# per source: ((silver.ddl_events' location, its head, the DDL events the consistent ts has passed), the versions)
_VERSIONS_READ: dict[str, tuple[tuple, Any]] = {}


def _schema_versions(spark, source: str, ddl_events: int) -> list[_Table]:
    """The source's schema versions, oldest first per table. The replay reads only the DDL events the consistent
    ts has passed (`ddl_events` of them): while silver.ddl_events has the same head and the consistent ts has
    passed as many of them, it is the same set of events and the same versions, so a long-lived process
    (continuous mode) reads them again only after a DDL or a rewrite."""

    def read(_head: int | None) -> list:
        return spark.sql(
            f"""SELECT table_uid, upstream_database, upstream_table, ddl_type, valid_from_ts, valid_to_ts,
                       to_json(columns) AS columns, key_columns, is_dropped, needs_snapshot,
                       sha2(to_json(struct(upstream_database, upstream_table, columns, key_columns)), 256)
                           AS fingerprint
                FROM {SCHEMA_VERSIONS} WHERE source_name = :source""",
            args={"source": source},
        ).collect()

    rows = kept_while_head(_VERSIONS_READ, spark, SILVER_DDL_EVENTS, source, read, ddl_events)
    tables: dict[str, _Table] = {}
    for r in sorted(rows, key=lambda r: r["valid_from_ts"]):
        tables.setdefault(r["table_uid"], _Table(r["table_uid"])).versions.append(r)
    return list(tables.values())


@dataclass(frozen=True)
class _Changed:
    """What silver gained for one upstream name since the recorded state: the commit ts range, and the oldest
    commit ts among the changes silver gained (a late change is one older than what the state is right as of)."""

    first_ts: int
    last_ts: int
    first_new_ts: int | None
    changes: int


def _changed_names(
    spark, source: str, state: Iterable[TableState], consistent_ts: int
) -> dict[tuple[str, str], _Changed] | None:
    """Per upstream name, what silver gained since the oldest recorded state (None: no state, everything is new).
    One pass over silver between literal bounds."""
    recorded = list(state)
    if not recorded:
        return None
    seq, since = min(t.silver_seq for t in recorded), min(t.consistent_ts for t in recorded)
    rows = spark.sql(
        f"""SELECT database, `table`, min(commit_ts) AS first_ts, max(commit_ts) AS last_ts,
                   min(CASE WHEN silver_seq > :seq THEN commit_ts END) AS first_new_ts, count(*) AS changes
            FROM {SILVER_ROW_CHANGES}
            WHERE source = :source AND commit_ts <= :ts AND (silver_seq > :seq OR commit_ts > :since)
            GROUP BY database, `table`""",
        args={"source": source, "ts": consistent_ts, "seq": seq, "since": since},
    ).collect()
    return {(r[0], r[1]): _Changed(r[2], r[3], r[4], r[5]) for r in rows}


def _touches(table: _Table, changed: dict[tuple[str, str], _Changed], previous: TableState) -> tuple[bool, bool, int]:
    """Whether silver gained changes of the table since its state (by the names it had while it had them), whether
    one of them came late, and how many changes its names gained. A name's changes are summarised by their range,
    so this may see a change that belongs to another table of the same name: a table built for nothing, never one
    missed."""
    touched = late = False
    changes = 0
    for v in table.versions:
        if v["is_dropped"]:
            continue
        c = changed.get((v["upstream_database"], v["upstream_table"]))
        if (
            c is None
            or c.last_ts < v["valid_from_ts"]
            or (v["valid_to_ts"] is not None and c.first_ts >= v["valid_to_ts"])
        ):
            continue
        touched = True
        late = late or (c.first_new_ts is not None and c.first_new_ts <= previous.consistent_ts)
        changes += c.changes
    return touched, late, changes


def plan_run(
    spark,
    source: str,
    consistent_ts: int,
    consistency: str,
    silver_seq: int,
    ddl_events: int,
    state: list[TableState],
    request: Request,
    gold: GoldSettings | None = None,
) -> list[TablePlan]:
    """The run's plan for every live table of the source (dropped tables are not in it, nor, when
    `gold.keyless_tables` is skip, tables without a handle key), each with its delete mode (a table without a key
    has none: its change table holds its deletes) and its layout (raises ConfigError when one does not fit)."""
    gold = gold or GoldSettings()
    recorded = {t.table_uid: t for t in state}
    changed = _changed_names(spark, source, state, consistent_ts)
    plans = []
    for table in _schema_versions(spark, source, ddl_events):
        latest = table.versions[-1]
        if latest["is_dropped"] or latest["valid_to_ts"] is not None:
            continue
        if gold.keyless_tables == "skip" and not latest["key_columns"]:
            continue
        live = [v for v in table.versions if not v["is_dropped"]]
        versions = plan_versions(live)
        truncations = [v["valid_from_ts"] for v in table.versions if v["ddl_type"] in ("truncate_table", "snapshot")]
        truncated = max((v["valid_from_ts"] for v in table.versions if v["ddl_type"] == "truncate_table"), default=None)
        snapshot = max((v["valid_from_ts"] for v in table.versions if v["ddl_type"] == "snapshot"), default=None)
        model = gold_models.GoldModel(
            source,
            table.uid,
            latest["upstream_database"],
            latest["upstream_table"],
            json.loads(latest["columns"]),
            list(latest["key_columns"] or []),
        )
        model = configured(model, gold)
        previous = recorded.get(table.uid)
        reason = _rebuild_reason(previous, model, truncated, snapshot) or _retyped_twice(versions, previous)
        gold_reason = _gold_rebuild_reason(previous, model)
        touched, late, changes = (
            (True, False, None) if changed is None or previous is None else _touches(table, changed, previous)
        )
        schema_changed = previous is not None and previous.schema_fingerprint != latest["fingerprint"]

        gold_mode, history_mode = (
            "rebuild"
            if request.rebuilds(layer, model.database, model.table)
            or reason is not None
            or (layer == "gold" and gold_reason is not None)
            else "schema"
            if schema_changed
            else "incremental"
            if touched
            else "unchanged"
            for layer in ("gold", "history")
        )
        why = (
            "rebuild requested"
            if "rebuild" in (gold_mode, history_mode) and reason is None and gold_reason is None
            else reason
            or gold_reason
            or ("schema changed" if schema_changed else "changes since the last run" if touched else "nothing to apply")
        )
        plans.append(
            TablePlan(
                model,
                latest["fingerprint"],
                consistent_ts,
                consistency,
                silver_seq,
                truncated,
                snapshot,
                any(v["needs_snapshot"] and v["valid_from_ts"] > (snapshot or -1) for v in table.versions),
                versions,
                truncations,
                previous,
                late,
                gold_mode,
                history_mode,
                why,
                request.full_check,
                changes if (gold_mode, history_mode) == ("incremental", "incremental") else None,
            )
        )
    return sorted(plans, key=lambda p: p.model.name)


def _rebuild_reason(
    previous: TableState | None, model: gold_models.GoldModel, truncated: int | None, snapshot: int | None
) -> str | None:
    if previous is None:
        return "new table"
    if previous.types != model.types:
        return "type mappings changed"
    if (previous.upstream_database, previous.upstream_table) != (model.database, model.table):
        return "renamed"
    if truncated is not None and truncated > previous.consistent_ts:
        return "truncated"
    if snapshot is not None and snapshot > previous.consistent_ts:
        return "a Dumpling snapshot was loaded"
    return None


def configured(model: gold_models.GoldModel, gold: GoldSettings) -> gold_models.GoldModel:
    """The model with what the source's gold settings give its table: its delete mode (a table without a key has
    none: its change table holds its deletes), its layout (ConfigError when it does not fit) and the type
    mappings."""
    return replace(
        model,
        delete_mode=gold.delete_mode(model.database, model.table) if model.key_columns else "hard",
        layout=table_layout(gold, model.source, model.database, model.table, model.columns),
        types=gold.types.text,
    )


def _gold_rebuild_reason(previous: TableState | None, model: gold_models.GoldModel) -> str | None:
    """Why the gold table alone is rebuilt: its delete mode changed (history keeps every version in every mode)."""
    recorded = (previous.delete_mode or "hard") if previous is not None else model.delete_mode
    if recorded != model.delete_mode:
        return f"delete mode changed from {recorded} to {model.delete_mode}"
    return None


def plan_versions(live: list) -> list[dict]:
    """A table's live schema versions as its models read them: each column's id, its name then, and the types it
    took after that version before its latest one (`through`). TiDB converts every stored value at each MODIFY
    COLUMN, so a value written before a chain of type changes is converted through each type of the chain
    (`canonical_through`), not only to the latest."""
    columns = [json.loads(v["columns"] or "[]") for v in live]
    # walked from the latest version back, each column's types from a version on, a repeat kept once: linear in
    # the versions, whose number grows with every DDL of a table's life; a chain is one tuple, shared by every
    # version it holds for, and a column retyped no more has the empty tuple, so little is made per version
    types_from: dict[int, tuple[str, ...]] = {}
    chains: list[dict[int, tuple[str, ...]]] = []
    for version in reversed(columns):
        types_from = {
            c["id"]: (
                types_from[c["id"]]
                if c["id"] in types_from and types_from[c["id"]][0] == c["type"]
                else (c["type"], *types_from.get(c["id"], ()))
            )
            for c in version
        }
        chains.append(types_from)
    chains.reverse()
    return [
        {
            "from_ts": v["valid_from_ts"],
            "to_ts": v["valid_to_ts"],
            "database": v["upstream_database"],
            "table": v["upstream_table"],
            "columns": [{"id": c["id"], "name": c["name"], "through": chains[i][c["id"]][1:-1]} for c in columns[i]],
        }
        for i, v in enumerate(live)
    ]


def _retyped_twice(versions: list[dict], previous: TableState | None) -> str | None:
    """Why the tables are rebuilt when a column changed type more than once since the recorded state: its rows
    were shaped in the type it had then, and a value goes through every type since, which the in-place change
    from the recorded shape to the latest cannot give."""
    if previous is None:
        return None
    in_force = [v for v in versions if v["from_ts"] <= previous.consistent_ts]
    if in_force and any(c["through"] for c in in_force[-1]["columns"]):
        return "a column changed type more than once since the last run"
    return None


def write_plan(spark, source: str, plans: list[TablePlan]) -> None:
    """The plan where the source's models read it (one commit, replacing the last run's)."""
    relation = f"lake_staging.{quote_ident(gold_models.plan_model(source))}"
    frame = spark.createDataFrame([p.row() for p in plans], PLAN_SCHEMA)
    frame.writeTo(relation).using("iceberg").tableProperty("format-version", "2").createOrReplace()
