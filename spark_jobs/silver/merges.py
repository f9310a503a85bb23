"""The silver writers: one idempotent MERGE per table, from a batch of decoded rows.

Row changes are deduplicated on source, database, table, key, commit_ts, op; DDL on source,
commit_ts, statement; watermarks keep the highest; quarantine and pending rows on Kafka
coordinates. Writing the same batch twice changes nothing.
"""

from __future__ import annotations

import json
import logging
from dataclasses import astuple, dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from spark_jobs import ddl
from spark_jobs.canonical.values import parse_type
from spark_jobs.config import SourceSettings, TableRules
from spark_jobs.runtime.iceberg import kept_while_head
from spark_jobs.runtime.sql import temp_view
from spark_jobs.runtime.tables import (
    BRONZE_MESSAGES,
    SILVER_DDL_EVENTS,
    SILVER_PENDING,
    SILVER_QUARANTINE,
    SILVER_ROW_CHANGES,
    SILVER_WATERMARKS,
)

log = logging.getLogger(__name__)

ROW_CHANGE_COLUMNS = (
    "source",
    "database",
    "table",
    "op",
    "commit_ts",
    "row_key",
    "key_columns",
    "before",
    "after",
    "column_types",
    "schema_version",
    "flags",
    "topic",
    "partition",
    "offset",
    "event_index",
    "silver_seq",
)


@dataclass(frozen=True)
class DdlEventRow:
    """One row of silver.ddl_events, in the table's column order."""

    source: str
    database: str | None
    table: str | None
    commit_ts: int
    ddl_type: str
    ddl_sql: str | None
    table_schema: str | None  # JSON
    schema_origin: str  # protocol | parsed | inferred | none
    topic: str
    partition: int
    offset: int
    old_database: str | None  # before a rename; else the same as database
    old_table: str | None
    table_uid: str | None  # the table's identity across renames (null for database DDL)
    needs_snapshot: bool
    understood: bool


# what makes a row change the same change: a redelivered copy has all of these equal
CHANGE_IDENTITY = ("database", "table", "row_key", "commit_ts", "op")

# Each gold and history model reads its own table's changes out of a run's. A run of at least this many row changes
# over several tables is written in up to RANGED_FILES files, each holding a contiguous range of tables, so that a
# model's predicate on its table skips the other files by their column statistics; a smaller run keeps one file a
# task, since more files cost every small run more than its models' reads save (docs/performance.md).
RANGED_FROM_ROWS = 50_000
RANGED_FILES = 16


def merge_row_changes(
    spark,
    source: str,
    decoded,
    silver_seq: int,
    since: int | None = None,
    tables: int = 1,
    rows: int = 0,
) -> None:
    """Row changes once each; the first copy (in Kafka order) of a redelivered change is kept. Each new row
    carries the run's `silver_seq`, which is how gold finds what silver gained since its last run.

    A batch without copies (the usual run) is appended as it is: only the identity columns are compared, within
    the batch and with silver; a batch with copies goes through a window that keeps the first and a MERGE.

    `tables` and `rows`, the batch's counts of tables and of row changes, decide whether the append is written in
    ranges of tables (RANGED_FROM_ROWS). Rows flagged enum_index or values_raw come already read
    (`read_by_schema`): a copy is told by the key it has once read.

    `since`, the lowest commit ts among the batch's rows, bounds what is read of silver: a copy of a batch row
    has the same commit ts (it is part of the change's identity), so no copy is older, and files whose commit ts
    all lie below it are skipped by their column statistics. A redelivery older than the rest of the batch only
    lowers the bound (the run reads more of silver), it is never missed. A row without a commit ts is compared
    with the stored rows without one.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    batch = decoded.where("kind = 'row'")
    changes = batch.withColumn("silver_seq", F.lit(silver_seq))
    if not _has_copies(spark, source, batch, since):
        if rows >= RANGED_FROM_ROWS and tables > 1:
            changes = changes.repartitionByRange(min(tables, RANGED_FILES), "database", "table")
        changes.select(*ROW_CHANGE_COLUMNS).writeTo(SILVER_ROW_CHANGES).append()
        return
    first = Window.partitionBy(*CHANGE_IDENTITY).orderBy("topic", "partition", "offset", "event_index")
    changes = changes.withColumn("_n", F.row_number().over(first)).where("_n = 1").select(*ROW_CHANGE_COLUMNS)
    bound = "" if since is None else "AND (t.commit_ts >= :since OR t.commit_ts IS NULL)"
    params: dict[str, Any] = {"source": source} if since is None else {"source": source, "since": since}
    with temp_view(changes, "silver_batch_rows") as view:
        spark.sql(
            f"""
            MERGE INTO {SILVER_ROW_CHANGES} t USING {view} s
            ON t.source = :source {bound} AND t.source = s.source AND t.database = s.database
               AND t.`table` = s.`table` AND t.row_key <=> s.row_key AND t.commit_ts <=> s.commit_ts AND t.op = s.op
            WHEN NOT MATCHED THEN INSERT *""",
            args=params,
        )


def _has_copies(spark, source: str, batch, since: int | None) -> bool:
    """Whether a change of the batch is in it twice, or in silver already (a redelivery, or a run done again
    after a kill). Silver runs of a source take turns (runtime.lock), so nothing writes between this and the
    append."""
    from pyspark.sql import functions as F

    identity = batch.select(*CHANGE_IDENTITY)
    twice = identity.groupBy(*CHANGE_IDENTITY).count().where("count > 1").select(F.lit(1).alias("copy"))
    stored = spark.table(SILVER_ROW_CHANGES).where(F.col("source") == source)
    if since is not None:
        stored = stored.where((F.col("commit_ts") >= since) | F.col("commit_ts").isNull())
    b, t = identity.alias("b"), stored.select(*CHANGE_IDENTITY).alias("t")
    same = [F.col(f"b.{c}").eqNullSafe(F.col(f"t.{c}")) for c in CHANGE_IDENTITY]
    in_silver = b.join(t, same, "left_semi").select(F.lit(1).alias("copy"))
    # one job for both questions (an isEmpty each took two, and more when the first partitions it read were empty)
    return twice.unionByName(in_silver).limit(1).count() > 0


def merge_watermarks(spark, decoded) -> None:
    """The highest resolved ts per partition; a lower one arriving later changes nothing."""
    from pyspark.sql import functions as F

    highest = (
        decoded.where("kind = 'watermark'")
        .groupBy("source", "topic", "partition")
        .agg(F.max("commit_ts").alias("resolved_ts"))
    )
    with temp_view(highest, "silver_batch_watermarks") as batch:
        spark.sql(f"""
            MERGE INTO {SILVER_WATERMARKS} t USING {batch} s
            ON t.source = s.source AND t.topic = s.topic AND t.`partition` = s.`partition`
            WHEN MATCHED AND s.resolved_ts > t.resolved_ts THEN UPDATE SET t.resolved_ts = s.resolved_ts
            WHEN NOT MATCHED THEN INSERT *""")


def merge_quarantine(spark, source: SourceSettings, bronze, decoded, replaying: bool) -> None:
    """Quarantined messages with their reason and bytes. When replaying quarantine, the messages
    that neither failed nor wait any more decoded now, and leave it."""
    from pyspark.sql import functions as F

    problems = (
        decoded.where("kind IN ('quarantine', 'waiting')")
        .alias("d")
        .join(bronze.alias("b"), ["topic", "partition", "offset"])
        .select(
            F.lit(source.name).alias("source"),
            "topic",
            "partition",
            "offset",
            F.col("d.kind").alias("kind"),
            F.lit(source.protocol).alias("protocol"),
            F.col("d.reason").alias("reason"),
            F.col("b.key").alias("key"),
            F.col("b.value").alias("value"),
        )
    )
    with temp_view(problems, "silver_batch_problems") as batch:
        spark.sql(f"""
            MERGE INTO {SILVER_QUARANTINE} t USING (SELECT * FROM {batch} WHERE kind = 'quarantine') s
            ON t.source = s.source AND t.topic = s.topic AND t.`partition` = s.`partition` AND t.`offset` = s.`offset`
            WHEN MATCHED THEN UPDATE SET t.reason = s.reason
            WHEN NOT MATCHED THEN INSERT (source, topic, `partition`, `offset`, protocol, reason, key, value, quarantined_at)
                 VALUES (s.source, s.topic, s.`partition`, s.`offset`, s.protocol, s.reason, s.key, s.value, current_timestamp())""")
        if replaying:
            spark.sql(
                f"""DELETE FROM {SILVER_QUARANTINE} q WHERE q.source = :source AND NOT EXISTS (
                    SELECT 1 FROM {batch} o WHERE o.topic = q.topic AND o.`partition` = q.`partition` AND o.`offset` = q.`offset`)""",
                args={"source": source.name},
            )


def update_pending(spark, source: str, decoded) -> None:
    """Pending = the rows still waiting: new ones added, those decoded or quarantined now removed."""
    from pyspark.sql import functions as F

    seen = decoded.groupBy("topic", "partition", "offset").agg(
        F.max(F.when(F.col("kind") == "waiting", F.col("reason"))).alias("reason")
    )
    with temp_view(seen, "silver_batch_seen") as batch:
        spark.sql(
            f"""
            MERGE INTO {SILVER_PENDING} t USING {batch} s
            ON t.source = :source AND t.topic = s.topic AND t.`partition` = s.`partition` AND t.`offset` = s.`offset`
            WHEN MATCHED AND s.reason IS NULL THEN DELETE
            WHEN MATCHED THEN UPDATE SET t.reason = s.reason
            WHEN NOT MATCHED AND s.reason IS NOT NULL THEN INSERT (source, topic, `partition`, `offset`, reason, first_seen_at)
                 VALUES (:source, s.topic, s.`partition`, s.`offset`, s.reason, current_timestamp())""",
            args={"source": source},
        )


def expire_pending(spark, source: SourceSettings) -> int:
    """Rows that waited longer than the source allows go to quarantine with that reason.

    One cutoff for the count, the move and the delete, so a row expiring meanwhile is not deleted unmoved.
    """
    minutes = source.decoding.max_wait_minutes
    args = {
        "source": source.name,
        "protocol": source.protocol,
        "minutes": minutes,
        "cutoff": datetime.now(UTC) - timedelta(minutes=minutes),
    }
    count = spark.sql(
        f"SELECT count(*) FROM {SILVER_PENDING} WHERE source = :source AND first_seen_at < :cutoff", args=args
    ).collect()[0][0]
    if count:
        spark.sql(
            f"""
            MERGE INTO {SILVER_QUARANTINE} t USING (
                SELECT p.source, p.topic, p.`partition`, p.`offset`, p.reason, b.key, b.value FROM {SILVER_PENDING} p
                JOIN {BRONZE_MESSAGES} b ON b.source = p.source AND b.topic = p.topic AND b.`partition` = p.`partition`
                  AND b.`offset` = p.`offset` WHERE p.source = :source AND p.first_seen_at < :cutoff) s
            ON t.source = s.source AND t.topic = s.topic AND t.`partition` = s.`partition` AND t.`offset` = s.`offset`
            WHEN NOT MATCHED THEN INSERT (source, topic, `partition`, `offset`, protocol, reason, key, value, quarantined_at)
                 VALUES (s.source, s.topic, s.`partition`, s.`offset`, :protocol,
                         concat(s.reason, ' (still unknown after ', :minutes, ' minutes)'), s.key, s.value, current_timestamp())""",
            args=args,
        )
        spark.sql(f"DELETE FROM {SILVER_PENDING} WHERE source = :source AND first_seen_at < :cutoff", args=args)
        log.warning(
            "source %s: %d rows waited more than %d minutes for their schema: quarantined", source.name, count, minutes
        )
    return count


def merge_ddl_events(
    spark, source: str, protocol: str, decoded, shapes: list | None = None, rules: TableRules | None = None
) -> int:
    """Every DDL once, in commit order, with the schema after it from the one DDL interpreter (spark_jobs.ddl).

    Tables the stream shows without a DDL get an inferred schema event just before their first row: a table
    that existed before the changefeed (any protocol), a Simple bootstrap of a table not known yet, and, for
    Avro (which sends no DDL at all), every change of a table's writer schema.

    A statement or a row shape older than the newest DDL event silver holds (a partition that lags, a
    replayed quarantine) can change what the later events mean: a table first seen in late rows may be one a
    later DROP DATABASE dropped, or the one a later RENAME moved. Then the source's whole DDL history is
    replayed again in commit order from its recorded inputs plus the new ones, and replaces the old one in
    one commit (DDL events are few). Returns how many inferred events were added. `shapes`, when the caller
    has them already (`row_shapes`), saves a pass over `decoded`. Only the tables `rules` keep get events
    (`within_rules`).
    """
    statements = (
        decoded.where("kind IN ('ddl', 'bootstrap')")
        .select(
            "kind",
            "database",
            "table",
            "commit_ts",
            "ddl_type",
            "ddl_sql",
            "table_schema",
            "schema_version",
            "key_columns",
            "topic",
            "partition",
            "offset",
        )
        .collect()
    )
    if shapes is None:
        shapes = (
            decoded.where("kind = 'row'")
            .groupBy("database", "table", row_shape().alias("shape"))
            .agg(*row_shapes())
            .collect()
        )
    shapes = [r for r in shapes if r["shape"] is not None]
    if protocol == "avro":
        shapes = _shape_changes(decoded, shapes)
    if not statements and not shapes:
        return 0
    recorded = _recorded_ddl_events(spark, source)
    recorded_statements = {(r["commit_ts"], r["ddl_sql"]) for r in recorded}
    steps = [
        (r["commit_ts"] or r["schema_version"] or 0, 0, r["topic"], r["partition"], r["offset"], "statement", r)
        for r in statements
        if (r["commit_ts"] or r["schema_version"] or 0, r["ddl_sql"]) not in recorded_statements
    ] + [
        ((r["commit_ts"] or 1) - 1, 1, r["at"]["topic"], r["at"]["partition"], r["at"]["offset"], "shape", r)
        for r in shapes
    ]
    return _apply_steps(spark, source, protocol, steps, recorded, rules or TableRules())


def row_shape():
    """The column types of a row as text: a table's distinct shapes. Null for a row that holds only its key: one
    sent handle-key-only, or a delete of only its key columns (`delete-only-output-handle-key-columns`, which no
    message marks), whose columns say nothing of the table's."""
    from pyspark.sql import functions as F

    key_only = F.array_contains("flags", "handle_key_only") | (
        (F.col("op") == "delete") & (F.size("column_types") == F.size("key_columns"))
    )
    return F.when(~key_only, F.col("column_types").cast("string"))


def row_shapes() -> list:
    """Per (database, table, shape): where it first shows, as merge_ddl_events reads it, and its last commit ts."""
    from pyspark.sql import functions as F

    return [
        F.min("commit_ts").alias("commit_ts"),
        F.max("commit_ts").alias("last_ts"),
        # as entries: a map comes back to Python through a Java HashMap, which loses the column order
        F.first(F.map_entries("column_types")).alias("column_types"),
        F.first("key_columns").alias("key_columns"),
        F.min(F.struct("topic", "partition", "offset")).alias("at"),
    ]


def _shape_changes(decoded, shapes: list) -> list:
    """Avro's row shapes as the schema changes they are. A shape is a step where it first shows, which is each
    change only while a table's shapes follow one another. A shape that comes back within the batch (a column
    added, then dropped again: the writer schema returns to one seen before) shows first before the other one,
    so for a table whose shapes interleave every change of shape in commit order is a step, read from its rows
    (few tables, only in such a batch)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    by_table: dict[tuple, list] = {}
    for r in shapes:
        by_table.setdefault((r["database"], r["table"]), []).append(r)
    interleaved = {
        name
        for name, found in by_table.items()
        if any(
            a is not b
            and None not in (a["commit_ts"], a["last_ts"], b["commit_ts"])
            and a["commit_ts"] < b["commit_ts"] < a["last_ts"]
            for a in found
            for b in found
        )
    }
    if not interleaved:
        return shapes
    in_order = Window.partitionBy("database", "table").orderBy(
        "commit_ts", "topic", "partition", "offset", "event_index"
    )
    tables = F.array(*(F.struct(F.lit(d).alias("d"), F.lit(t).alias("t")) for d, t in sorted(interleaved)))
    changes = (
        decoded.where("kind = 'row'")
        .withColumn("shape", row_shape())
        .where(
            F.col("shape").isNotNull()
            & F.array_contains(tables, F.struct(F.col("database").alias("d"), F.col("table").alias("t")))
        )
        .withColumn("before", F.lag("shape").over(in_order))
        .where(F.col("before").isNull() | (F.col("before") != F.col("shape")))
        .select(
            "database",
            "table",
            "shape",
            "commit_ts",
            F.col("commit_ts").alias("last_ts"),
            F.map_entries("column_types").alias("column_types"),
            "key_columns",
            F.struct("topic", "partition", "offset").alias("at"),
        )
        .collect()
    )
    return [r for r in shapes if (r["database"], r["table"]) not in interleaved] + changes


def merge_snapshot_schemas(
    spark, source: str, protocol: str, snapshot_ts: int, statements: list[dict], rules: TableRules | None = None
) -> None:
    """The CREATE TABLE of each table of a Dumpling export as a `snapshot` DDL event at the export's TSO (after
    any DDL at that ts: the export saw it). The table's schema at the snapshot is the statement read as a new
    table; a table known already keeps its identity. `statements`: dicts of database, table, ddl_sql and
    topic (where it came from); a statement recorded already at that ts is not read again."""
    recorded = _recorded_ddl_events(spark, source)
    done = {(r["commit_ts"], r["ddl_sql"], r["database"], r["table"]) for r in recorded}
    steps = [
        (snapshot_ts, 2, r["topic"], 0, 0, "snapshot", r)
        for r in statements
        if (snapshot_ts, r["ddl_sql"], r["database"], r["table"]) not in done
    ]
    if steps:
        _apply_steps(spark, source, protocol, steps, recorded, rules or TableRules())


def _apply_steps(spark, source: str, protocol: str, steps: list, recorded: list, rules: TableRules) -> int:
    """New steps after the recorded ones: appended, or the whole history derived again when one is older than
    the newest recorded event. Returns how many inferred events were added."""
    recorded_statements = {(r["commit_ts"], r["ddl_sql"]) for r in recorded}
    newest = max((r["commit_ts"] for r in recorded), default=None)
    replay = newest is not None and any(step[0] < newest for step in steps)
    if replay:
        every_step = sorted([*_recorded_steps(recorded), *steps], key=lambda s: s[:5])
        out = within_rules(rules, _derived_events(source, protocol, every_step, announced=recorded_statements))
        _replace_ddl_events(spark, source, out)
        added = sum(e.schema_origin == "inferred" for e in out) - sum(
            r["schema_origin"] == "inferred" for r in recorded
        )
        log.info("source %s: DDL history replayed for changes older than its newest DDL: %d events", source, len(out))
        return max(added, 0)
    in_force = _schemas_in_force(recorded)
    derived = _derived_events(source, protocol, sorted(steps, key=lambda s: s[:5]), dict(in_force))
    out = within_rules(rules, derived, {s["table_uid"]: s for s in in_force.values() if s is not None})
    if out:
        _write_ddl_events(spark, out)
    return sum(event.schema_origin == "inferred" for event in out)


def _derived_events(
    source: str, protocol: str, steps: list, known: dict | None = None, announced: set | None = None
) -> list[DdlEventRow]:
    """The DDL events of `steps` (statements and row shapes in commit order) read against `known`; a
    statement not understood is logged unless it is in `announced` (logged when it first came)."""
    known = {} if known is None else known
    announced = announced or set()
    out: list[DdlEventRow] = []
    seen: set[tuple] = set()
    for commit_ts, _, topic, partition, offset, what, r in steps:
        where = (topic, partition, offset)
        if what == "shape":
            out.extend(_inferred_from_rows(source, protocol, r, commit_ts, known, where))
        elif what == "snapshot":
            out.extend(_snapshot_schema(source, r, commit_ts, known, where))
        elif r["kind"] == "bootstrap":
            # TiCDC repeats a table's bootstrap on every partition every 120 s: one row per table and version
            if ("bootstrap", r["database"], r["table"], commit_ts) not in seen:
                seen.add(("bootstrap", r["database"], r["table"], commit_ts))
                out.extend(_inferred_from_bootstrap(source, r, commit_ts, known, where))
        elif (commit_ts, r["ddl_sql"]) not in seen:
            seen.add((commit_ts, r["ddl_sql"]))
            out.extend(_interpreted(source, r, commit_ts, known, where, (commit_ts, r["ddl_sql"]) not in announced))
    return out


def within_rules(
    rules: TableRules, events: list[DdlEventRow], marked_before: dict[str, dict] | None = None
) -> list[DdlEventRow]:
    """The events of the tables `rules` keep. The interpreter reads every statement (a rename needs the table it
    moves), and what it derives for a left-out table is dropped here: a rename out of the kept tables is the
    drop of the table the lakehouse had, and a rename into them needs a snapshot (its rows so far were left
    out). A left-out column stays in the schema marked `left_out` (the interpreter needs it to read a later
    statement about it; gold's replay leaves it out) and its values never reach silver; a column left out
    before and kept now (a rename across the rules) needs a snapshot too. `marked_before`: the schemas in force
    before the events, by table_uid, as recorded."""
    if not rules.active:
        return events
    marked = dict(marked_before or {})
    out = []
    for e in events:
        kept = rules.keeps(e.database, e.table)
        renamed = e.old_table is not None and (e.old_database, e.old_table) != (e.database, e.table)
        kept_before = rules.keeps(e.old_database, e.old_table) if renamed else kept
        if kept:
            out.append(_columns_marked(rules, e if kept_before else replace(e, needs_snapshot=True), marked))
        elif kept_before:
            out.append(
                replace(
                    e,
                    database=e.old_database,
                    table=e.old_table,
                    ddl_type="drop_table",
                    table_schema=None,
                    needs_snapshot=False,
                )
            )
    return out


def _columns_marked(rules: TableRules, event: DdlEventRow, marked: dict[str, dict]) -> DdlEventRow:
    """The event with each column of its schema marked `left_out` as the rules say now (a key column never);
    one that `marked` (the table's schema before, by table_uid) had left out and that is kept now has no earlier
    values in silver, so the table needs a snapshot."""
    if event.table_schema is None:
        return event
    schema = json.loads(event.table_schema)
    left_out = rules.left_out_columns(event.database, event.table, schema["key_columns"])
    for column in schema["columns"]:
        column.pop("left_out", None)
        if column["name"].lower() in left_out:
            column["left_out"] = True
    before = marked.get(schema.get("table_uid") or "")
    was_left_out = {c["id"] for c in (before or {}).get("columns", []) if c.get("left_out")}
    returns = was_left_out & {c["id"] for c in schema["columns"] if not c.get("left_out")}
    if schema.get("table_uid"):
        marked[schema["table_uid"]] = schema
    return replace(event, table_schema=json.dumps(schema), needs_snapshot=event.needs_snapshot or bool(returns))


def _recorded_steps(recorded: list) -> list[tuple]:
    """The inputs silver's DDL events were derived from, as steps again: statements (with the schema a
    protocol carried), Simple bootstraps, and the row shapes inferred events were dated by."""
    steps = []
    for r in recorded:
        where = (r["topic"], r["partition"], r["offset"])
        schema: Any = json.loads(r["table_schema"]) if r["table_schema"] else None  # a JSON document, or None
        if r["schema_origin"] == "inferred":
            shape = {
                "database": r["database"],
                "table": r["table"],
                "column_types": [{"key": c["name"], "value": c["type"]} for c in schema["columns"]],
                "key_columns": schema["key_columns"],
            }
            steps.append((r["commit_ts"], 1, *where, "shape", shape))
            continue
        if r["ddl_type"] == "snapshot":
            steps.append((r["commit_ts"], 2, *where, "snapshot", r))
            continue
        statement = {
            "kind": "bootstrap" if r["ddl_type"] == "bootstrap" else "ddl",
            "database": r["database"],
            "table": r["table"],
            "ddl_sql": r["ddl_sql"],
            "table_schema": r["table_schema"] if r["schema_origin"] == "protocol" else None,
        }
        steps.append((r["commit_ts"], 0, *where, "statement", statement))
    return steps


def _interpreted(source: str, r, commit_ts: int, known: dict, where: tuple, announce: bool) -> list[DdlEventRow]:
    """One DDL statement read by the interpreter against the schemas in force: one event per table it touches."""
    protocol_schema = json.loads(r["table_schema"]) if r["table_schema"] else None
    changes = ddl.interpret(
        r["ddl_sql"] or "",
        database=r["database"],
        table=r["table"],
        commit_ts=commit_ts,
        schemas={name: schema for name, schema in known.items() if schema is not None},
        protocol_schema=protocol_schema,
    )
    out = []
    for change in changes:
        before = known.get((change.old_database, change.old_table)) or known.get((change.database, change.table))
        uid = (change.schema_after or before or {}).get("table_uid")
        if change.old_table is not None and (change.old_database, change.old_table) != (change.database, change.table):
            known.pop((change.old_database, change.old_table), None)
            out.extend(_displaced(source, change, known, uid, r["ddl_sql"], commit_ts, where))
        if change.table is not None:
            known[(change.database, change.table)] = change.schema_after
        if not change.understood and announce:
            log.warning(
                "source %s: DDL at ts %d not understood (%s): %s",
                source,
                commit_ts,
                change.note,
                (r["ddl_sql"] or "")[:200],
            )
        out.append(
            _event(
                source,
                change.database,
                change.table,
                commit_ts,
                change.ddl_type,
                r["ddl_sql"],
                change.schema_after,
                "protocol" if protocol_schema else "parsed",
                where,
                old=(change.old_database, change.old_table),
                uid=uid,
                needs_snapshot=change.needs_snapshot,
                understood=change.understood,
            )
        )
    return out


def _displaced(source: str, change, known: dict, uid, sql, commit_ts: int, where: tuple) -> list[DdlEventRow]:
    """The drop of a table silver knows under the name a rename takes. TiDB refuses a rename onto a table, so
    that one was never there: a Simple bootstrap sent after the rename names the table as it is called now but
    is dated by its schema's version, which a rename does not change, so it came before the rename in commit
    order and was read as a table of its own. The renamed table is the one the name means."""
    displaced = known.get((change.database, change.table))
    if displaced is None or displaced.get("table_uid") == uid:
        return []
    log.info(
        "source %s: RENAME at ts %d onto %s.%s, known from a schema dated before it: that was the renamed table",
        source,
        commit_ts,
        change.database,
        change.table,
    )
    return [
        _event(
            source,
            change.database,
            change.table,
            commit_ts,
            "drop_table",
            sql,
            None,
            "parsed",
            where,
            uid=displaced["table_uid"],
        )
    ]


def _snapshot_schema(source: str, r, commit_ts: int, known: dict, where: tuple) -> list[DdlEventRow]:
    """A table's CREATE TABLE from a Dumpling export, read as a new table; a table known already keeps its
    table_uid and the ids of the columns it still has by name (its earlier changes map onto them)."""
    name = (r["database"], r["table"])
    change = ddl.interpret(r["ddl_sql"], database=r["database"], table=r["table"], commit_ts=commit_ts, schemas={})[0]
    schema, previous = change.schema_after, known.get(name)
    if schema is not None and previous is not None:
        ids = {c["name"].lower(): c["id"] for c in previous["columns"]}
        next_id = previous["next_column_id"]
        for column in schema["columns"]:
            column["id"] = ids.get(column["name"].lower()) or next_id
            next_id += column["id"] == next_id
        schema.update(table_uid=previous["table_uid"], next_column_id=next_id)
    known[name] = schema
    return [
        _event(
            source,
            r["database"],
            r["table"],
            commit_ts,
            "snapshot",
            r["ddl_sql"],
            schema,
            "parsed",
            where,
            understood=change.understood and change.ddl_type == "create_table",
        )
    ]


def _inferred_from_bootstrap(source: str, r, commit_ts: int, known: dict, where: tuple) -> list[DdlEventRow]:
    """A Simple bootstrap: the schema of a table not known yet (an event of its own); a known table's is
    only recorded so that later runs can prime the decoder with it."""
    name = (r["database"], r["table"])
    if known.get(name) is not None or r["table_schema"] is None:
        return [
            _event(source, r["database"], r["table"], commit_ts, "bootstrap", r["ddl_sql"], None, "protocol", where)
        ]
    shown = json.loads(r["table_schema"])
    schema = ddl.inferred_schema(
        r["database"],
        r["table"],
        [(c["name"], c["type"]) for c in shown["columns"]],
        shown["key_columns"],
        commit_ts,
        {c["name"]: c["nullable"] for c in shown["columns"]},
        elements={c["name"]: c["elements"] for c in shown["columns"] if c.get("elements") is not None},
    )
    known[name] = schema
    return [_event(source, r["database"], r["table"], commit_ts, "bootstrap", r["ddl_sql"], schema, "protocol", where)]


def _inferred_from_rows(source: str, protocol: str, r, commit_ts: int, known: dict, where: tuple) -> list[DdlEventRow]:
    """The columns a table's rows show, where no DDL said them: a table first seen in rows, or (Avro) a
    changed writer schema. Dated just before the first row with that shape."""
    name = (r["database"], r["table"])
    previous = known.get(name)
    columns = [(entry["key"], entry["value"]) for entry in r["column_types"]]
    if previous is not None and (
        protocol != "avro" or [(c["name"], c["type"]) for c in previous["columns"]] == columns
    ):
        return []
    schema = ddl.inferred_schema(
        r["database"], r["table"], columns, list(r["key_columns"]), commit_ts, previous=previous
    )
    known[name] = schema
    origin = "the Avro writer schema" if protocol == "avro" else "the row messages"
    if previous is None:
        ddl_type, sql = "create_table", f"inferred from {origin}: table seen"
    else:
        before = {c["name"]: c["type"] for c in previous["columns"]}
        after = dict(columns)
        changes = (
            ("add_column", "added", [c for c in after if c not in before]),
            ("drop_column", "dropped", [c for c in before if c not in after]),
            ("modify_column", "retyped", [c for c in after if c in before and before[c] != after[c]]),
        )
        kinds = [kind for kind, _, cols in changes if cols]
        ddl_type = kinds[0] if len(kinds) == 1 else "multi_schema_change"
        sql = f"inferred from {origin}: " + "; ".join(
            f"{label} {', '.join(cols)}" for _, label, cols in changes if cols
        )
    return [_event(source, r["database"], r["table"], commit_ts, ddl_type, sql, schema, "inferred", where)]


def _event(
    source: str,
    database,
    table,
    commit_ts: int,
    ddl_type: str,
    sql,
    schema,
    origin: str,
    where: tuple,
    *,
    old: tuple | None = None,
    uid: str | None = None,
    needs_snapshot: bool = False,
    understood: bool = True,
) -> DdlEventRow:
    """One silver.ddl_events row; `uid` names the table a drop ended (its schema after is None)."""
    old_database, old_table = old if old is not None else (database, table)
    return DdlEventRow(
        source=source,
        database=database,
        table=table,
        commit_ts=commit_ts,
        ddl_type=ddl_type,
        ddl_sql=sql,
        table_schema=json.dumps(schema) if schema is not None else None,
        schema_origin=origin,
        topic=where[0],
        partition=where[1],
        offset=where[2],
        old_database=old_database,
        old_table=old_table,
        table_uid=uid or (schema["table_uid"] if schema is not None else None),
        needs_snapshot=needs_snapshot,
        understood=understood,
    )


def _write_ddl_events(spark, rows: list[DdlEventRow]) -> None:
    events = spark.createDataFrame([astuple(r) for r in rows], spark.table(SILVER_DDL_EVENTS).schema)
    with temp_view(events, "silver_batch_ddl") as batch:
        spark.sql(f"""
            MERGE INTO {SILVER_DDL_EVENTS} t USING {batch} s
            ON t.source = s.source AND t.commit_ts = s.commit_ts AND t.ddl_sql <=> s.ddl_sql
               AND t.database <=> s.database AND t.`table` <=> s.`table` AND t.ddl_type = s.ddl_type
            WHEN NOT MATCHED THEN INSERT *""")


# per source: ((the table's location, the snapshot read), the events read at it)
_RECORDED_READ: dict[str, tuple[tuple, Any]] = {}


def _recorded_ddl_events(spark, source: str) -> list:
    """The source's DDL events silver holds, in commit order. A run reads them twice (its DDL merge, the ENUM
    labels) and most runs add none: the events read at a snapshot are kept while it is the table's head, so the
    query runs only after a DDL was written."""
    from pyspark.sql import functions as F

    def read(head: int | None) -> list:
        if head is None:
            return []
        return (
            spark.read.format("iceberg")
            .option("snapshot-id", head)
            .load(SILVER_DDL_EVENTS)
            .where(F.col("source") == source)
            .orderBy("commit_ts", "topic", "partition", "offset")
            .collect()
        )

    return kept_while_head(_RECORDED_READ, spark, SILVER_DDL_EVENTS, source, read)


def schemas_in_force(spark, source: str) -> dict[tuple, dict | None]:
    """(database, table) -> the source's schema in force after every DDL event silver holds."""
    return _schemas_in_force(_recorded_ddl_events(spark, source))


def _schemas_in_force(recorded: list) -> dict[tuple, dict | None]:
    """(database, table) -> the schema in force after every recorded DDL event, replayed in commit order
    (a renamed table is known by its new name only; a dropped one maps to None)."""
    known: dict[tuple, dict | None] = {}
    for r in recorded:
        if r["table"] is None or (r["ddl_type"] == "bootstrap" and r["table_schema"] is None):
            continue  # database DDL; a bootstrap of a known table, recorded for priming only
        old = (r["old_database"], r["old_table"])
        if r["old_table"] is not None and old != (r["database"], r["table"]):
            known.pop(old, None)
        known[(r["database"], r["table"])] = json.loads(r["table_schema"]) if r["table_schema"] else None
    return known


def _replace_ddl_events(spark, source: str, rows: list[DdlEventRow]) -> None:
    """The source's DDL events replaced by `rows` in one commit (the table is partitioned by source)."""
    schema = spark.table(SILVER_DDL_EVENTS).schema
    spark.createDataFrame([astuple(r) for r in rows], schema).writeTo(SILVER_DDL_EVENTS).overwritePartitions()


def schema_history(spark, source: str):
    """What silver needs of each table's columns over time to read a flagged row's values, from silver.ddl_events:
    {(database, table): [(commit_ts, {column: (kind, labels, size)})]} in commit order. ENUM and SET with their
    labels: Canal-JSON (without content-compatible) and the Open protocol send indexes and bitmasks (enum_index).
    DATE, DATETIME and TIME with their fsp, TIMESTAMP, BIT and BIGINT UNSIGNED: Debezium without its
    schema sends them as numbers (an unsigned one past 2^63 wrapped negative) and ISO text (values_raw)."""
    history: dict = {}
    for r in _recorded_ddl_events(spark, source):
        if r["table"] is None:
            continue
        history.setdefault((r["database"], r["table"]), []).append(
            (r["commit_ts"], _read_columns(json.loads(r["table_schema"]) if r["table_schema"] else None))
        )
    return history


def _read_columns(table_schema: dict | None) -> dict[str, tuple[str, list[str] | None, int]]:
    if not table_schema:
        return {}
    read = {}
    for c in table_schema["columns"]:
        base, _, unsigned = parse_type(c["type"])
        if base in ("enum", "set") and c.get("elements") is not None:
            read[c["name"]] = (base, c["elements"], 0)
        elif base in ("date", "datetime", "time", "timestamp", "bit"):
            read[c["name"]] = (base, None, c.get("fsp") or 0)
        elif base == "bigint" and unsigned:
            read[c["name"]] = ("unsigned", None, 0)
    return read


# the flags of a row whose values are read with its table's columns as DDL declared them (`read_by_schema`)
READ_BY_SCHEMA = ("enum_index", "values_raw")


def read_by_schema_flagged():
    """Whether a row's values are only readable with its table's column definitions (flag enum_index or
    values_raw)."""
    from pyspark.sql import functions as F

    flags = F.coalesce("flags", F.array().cast("array<string>"))
    return F.arrays_overlap(flags, F.array(*map(F.lit, READ_BY_SCHEMA)))


def read_by_schema(spark, source: str, decoded):
    """Decoded events with the rows flagged enum_index or values_raw read with the columns in force at their
    commit ts, when known (silver.ddl_events, this batch's DDL merged first). Done before anything compares keys
    (an erasure's, a copy's), since a values_raw row's key is only known once read."""
    history = schema_history(spark, source)
    if not any(defs for versions in history.values() for _, defs in versions):
        return decoded
    return read_rows(spark, decoded, history)


# One map image read with its columns' definitions `d` (`_read_columns`); columns `d` does not name, and values not
# of the form the flag says, stay as sent. enum_index: an ENUM by 1-based index (0 the empty string), a SET by
# bitmask. values_raw (Debezium's numbers): a DATE by days since 1970, a DATETIME by epoch milliseconds (fsp up to
# 3) or microseconds, a TIME by microseconds, a TIMESTAMP as ISO text in UTC, a BIT(n > 1) as base64 of its
# little-endian bytes (a BIT(1) as 0 or 1, which no base64 is), a BIGINT UNSIGNED past 2^63 as its wrapped
# negative; each becomes its canonical text (docs/canonical-event.md), fractions at the column's fsp.
_READ = """transform_values({image}, (k, v) -> CASE
    WHEN d.definitions[k] IS NULL OR v IS NULL THEN v
    WHEN d.definitions[k].kind IN ('enum', 'set') THEN CASE
        WHEN NOT array_contains(r.flags, 'enum_index') OR NOT v RLIKE '^[0-9]+$' THEN v
        WHEN d.definitions[k].kind = 'enum' THEN
            CASE WHEN CAST(v AS INT) = 0 THEN '' ELSE coalesce(element_at(d.definitions[k].labels, CAST(v AS INT)), v)
            END
        ELSE array_join(filter(d.definitions[k].labels, (x, i) -> shiftright(CAST(v AS BIGINT), i) & 1 = 1), ',')
        END
    WHEN NOT array_contains(r.flags, 'values_raw') THEN v
    WHEN d.definitions[k].kind = 'timestamp' THEN regexp_replace(v, '^([0-9]{4}-[0-9]{2}-[0-9]{2})T([0-9:.]+)Z$', '$1 $2')
    WHEN d.definitions[k].kind = 'unsigned' THEN
        IF(v RLIKE '^-[0-9]{1,19}$', CAST(CAST(v AS DECIMAL(20,0)) + 18446744073709551616 AS STRING), v)
    WHEN d.definitions[k].kind = 'bit' THEN CASE WHEN v RLIKE '^[01]$' THEN v
        ELSE coalesce(conv(array_join(reverse(regexp_extract_all(hex(unbase64(v)), '..', 0)), ''), 16, 10), v) END
    WHEN NOT v RLIKE '^-?[0-9]{1,18}$' THEN v
    WHEN d.definitions[k].kind = 'date' THEN date_format(date_add(DATE'1970-01-01', CAST(v AS INT)), 'yyyy-MM-dd')
    WHEN d.definitions[k].kind = 'datetime' THEN element_at(transform(
        array(timestamp_micros(CAST(v AS BIGINT) * IF(d.definitions[k].size <= 3, 1000, 1))),
        t -> concat(date_format(t, 'yyyy-MM-dd HH:mm:ss'), IF(d.definitions[k].size > 0,
                    concat('.', substr(date_format(t, 'SSSSSS'), 1, d.definitions[k].size)), ''))), 1)
    ELSE element_at(transform(array(abs(CAST(v AS BIGINT))), m -> concat(
        IF(v LIKE '-%', '-', ''),
        format_string('%02d:%02d:%02d', m div 3600000000, (m div 60000000) % 60, (m div 1000000) % 60),
        IF(d.definitions[k].size > 0,
           concat('.', substr(lpad(CAST(m % 1000000 AS STRING), 6, '0'), 1, d.definitions[k].size)), ''))), 1)
    END)"""


def read_rows(spark, rows, history):
    """`rows` with the values of rows flagged enum_index or values_raw read by their columns' definitions
    (`_READ`), in the JVM: the flagged rows meet the definitions in force at their commit ts (`history` from
    schema_history; the newest at or before it, or the newest of all for a row without one) through a broadcast
    join; a row whose definitions are known then loses both flags."""
    from pyspark.sql import functions as F

    versions = []
    for (database, table), entries in history.items():
        for i, (since, definitions) in enumerate(entries):
            until = entries[i + 1][0] if i + 1 < len(entries) else None
            versions.append((database, table, since, until, definitions))
    definitions = spark.createDataFrame(
        versions,
        "database STRING, `table` STRING, since BIGINT, until BIGINT, "
        "definitions MAP<STRING, STRUCT<kind: STRING, labels: ARRAY<STRING>, size: INT>>",
    ).where("size(definitions) > 0")
    flagged = read_by_schema_flagged()
    r, d = rows.where(flagged).alias("r"), F.broadcast(definitions).alias("d")
    in_force = (
        (F.col("r.database") == F.col("d.database"))
        & (F.col("r.table") == F.col("d.table"))
        & (F.col("r.commit_ts").isNull() | (F.col("r.commit_ts") >= F.col("d.since")))
        & (F.col("d.until").isNull() | ((F.col("r.commit_ts") < F.col("d.until")) & F.col("r.commit_ts").isNotNull()))
    )
    known = F.col("d.definitions").isNotNull()
    unflagged = F.array_except("r.flags", F.array(*map(F.lit, READ_BY_SCHEMA)))
    # a key whose values were numbers is the key of the values read (decode.row_key's JSON array)
    rekeyed = known & F.expr(
        "array_contains(r.flags, 'values_raw') AND exists(r.key_columns, k -> d.definitions[k] IS NOT NULL)"
    )
    read = (
        r.join(d, in_force, "left")
        .select(
            *[
                F.when(known, F.expr(_READ.replace("{image}", f"r.{name}"))).otherwise(F.col(f"r.{name}")).alias(name)
                if name in ("before", "after")
                else F.when(known, unflagged).otherwise(F.col("r.flags")).alias(name)
                if name == "flags"
                else F.col(f"r.{name}")
                for name in rows.columns
            ],
            rekeyed.alias("_rekeyed"),
        )
        .withColumn(
            "row_key",
            F.when(
                F.col("_rekeyed") & F.col("row_key").isNotNull(),
                F.to_json(F.expr("transform(key_columns, k -> coalesce(after, before)[k])")),
            ).otherwise(F.col("row_key")),
        )
        .drop("_rekeyed")
    )
    return rows.where(~flagged).unionByName(read)
