"""Erasure: every row and version of one key of one upstream table, gone from the lakehouse and from its storage.

`erase` runs under the source's lock (the step takes it), in this order:

1. silver decodes what bronze holds of the source that it has not read yet (`build_silver`), so that silver lists
   every message that carries the key, by its Kafka coordinates;
2. bronze's rewrite is worked out before anything is written: a message silver lists for the key goes whole, or,
   where it carries other rows too (Open's batches, a Canal-JSON `data` list), is rewritten by its codec without
   the key's row (`codecs.without_events`), every other row's bytes as they were. A message that holds the key and
   another key in one event (an update that changed the key, sent whole) cannot lose one of them: the erasure
   stops, naming the message and both keys, and nothing is touched;
3. the erasure is recorded in `silver.erasures`: who, what (table, key columns, a SHA-256 of the key), when, and
   the commits where the key took another key's row (`_key_changes`); never a value. From then on no decode lets
   a change of the key committed up to the request into silver again (`silver.erased`), so neither a replay of
   bronze nor TiCDC sending the message again brings it back;
4. bronze loses and rewrites those messages in one commit; silver, gold, history and the daily table lose the
   key's rows, and the gold, history and daily files that held them are rewritten (gold's merges write delete
   files, which leave a deleted row in its data file);
5. the source is published again at the same consistent ts, pinned to the tables' new snapshots;
6. every table touched loses its snapshots older than the erasure (a gold, history or daily table its tags too),
   and with them the files that held the key; files of the source's own tables that no snapshot lists (left by a
   killed write) go as well. Bronze, shared by the sources, keeps the snapshots another source's silver has not
   read past yet, and drops the landing branches main has moved past;
7. the record gets the counts and the finish time.

A failed erasure is finished by running it again: each step finds what is left. Publications older than an
erasure name snapshots that no longer exist for the erased table; as-of reads go through the history table.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

import orjson

from spark_jobs.bronze.land import drop_branch
from spark_jobs.canonical.events import ChangeEvent, split_key_change
from spark_jobs.codecs import MULTI_ROW_PROTOCOLS, make_decoder, without_events
from spark_jobs.config import PipelineConfig, SourceSettings, decoder_options
from spark_jobs.errors import ConfigError, ErasureRefused
from spark_jobs.gold import names
from spark_jobs.gold.publish import TableState, publish_state, read_state
from spark_jobs.maintenance import expire_snapshots, silver_positions_since, stale_landing_branches
from spark_jobs.runtime.iceberg import iceberg_table, main_snapshot, spark_actions
from spark_jobs.runtime.jvm import java_class, java_items
from spark_jobs.runtime.results import Result
from spark_jobs.runtime.sql import quote_ident, temp_view
from spark_jobs.runtime.tables import (
    BRONZE_COMMITS,
    BRONZE_MESSAGES,
    GOLD_RECONCILIATIONS,
    SILVER_DDL_EVENTS,
    SILVER_ERASED_MESSAGES,
    SILVER_ERASURES,
    SILVER_PENDING,
    SILVER_ROW_CHANGES,
    bronze_commits,
    ensure_tables_once,
)
from spark_jobs.silver.build import build_silver, record_run
from spark_jobs.silver.decode import row_key
from spark_jobs.silver.erased import FLAG_KEY_CHANGE_SPLIT, key_hash

log = logging.getLogger(__name__)

KEY_COLUMN = "_row_key"  # gold's, history's and the daily tables' column of the row's key


def parse_key(text: str) -> dict[str, str]:
    """`{"id": 7}` -> the key's columns and their values as silver writes them (text); a ConfigError names what is
    wrong. A number or a string per column; a value of another type (a date, a decimal) is given as the text
    silver holds."""
    try:
        key = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"erase: --key must be a JSON object of the key's columns, got {text!r}: {exc}") from None
    if type(key) is not dict or not key:
        raise ConfigError(f"erase: --key must be a JSON object of the key's columns, got {text!r}")
    values = {}
    for column, value in key.items():
        if type(value) is int or type(value) is str:
            values[column] = str(value)
        else:
            raise ConfigError(
                f"erase: key column {column!r} is {value!r}; give a number or the value's text as silver holds it"
            )
    return values


@dataclass(frozen=True)
class Erased(Result):
    """What one erasure removed, in numbers (the record in `silver.erasures` has the same)."""

    erasure_id: str
    source: str
    table: str  # database.table upstream
    key_columns: list[str]
    bronze_dropped: int  # messages removed whole
    bronze_rewritten: int  # messages rewritten without the key's rows
    silver_rows: int
    gold_rows: int
    history_rows: int
    daily_rows: int
    snapshots_expired: int
    files_deleted: int
    waiting: int  # the source's messages still waiting for their schema: silver keeps the key out when they decode
    seconds: float

    def lines(self) -> list[str]:
        return [
            f"{self.source}: erased the key ({', '.join(self.key_columns)}) of {self.table} (erasure {self.erasure_id}): "
            f"{self.bronze_dropped} bronze messages removed, {self.bronze_rewritten} rewritten without it; "
            f"{self.silver_rows} silver rows, {self.gold_rows} gold rows, {self.history_rows} history versions, "
            f"{self.daily_rows} daily rows deleted",
            f"{self.snapshots_expired} snapshots expired and {self.files_deleted} files deleted that held it; "
            f"{self.waiting} messages of the source wait for their schema; {self.seconds:.1f}s",
        ]


def erase(
    spark, config: PipelineConfig, source_name: str, database: str, table: str, key: dict[str, str], requested_by: str
) -> Erased:
    """Erase one key of `database.table` from the source's lakehouse (see the module); the caller holds the
    source's lock."""
    source = config.source(source_name)
    started, requested_at = time.monotonic(), dt.datetime.now(dt.UTC)
    build_silver(spark, config, source.name)
    ensure_tables_once(spark, "gold")  # a lakehouse not yet published has no gold tables to look in
    known_as = _names(spark, source.name, database, table)
    named, name_args = _named(known_as)
    key_columns = _key_columns(spark, source.name, database, table, named, name_args)
    if sorted(key) != sorted(key_columns):
        raise ConfigError(
            f"erase: the key of {database}.{table} is ({', '.join(key_columns)}); --key gives ({', '.join(key)})"
        )
    erased_key = row_key(key_columns, None, key)
    assert erased_key is not None
    hashes = [key_hash(db, t, erased_key) for db, t in known_as]
    where = {"source": source.name, "row_key": erased_key}
    plan = _bronze_plan(spark, source, known_as, erased_key, hashes)
    erasure_id = uuid.uuid4().hex
    key_changes = _key_changes(spark, named, where | name_args)
    _record(
        spark, source.name, erasure_id, database, table, key_columns, hashes, key_changes, requested_by, requested_at
    )
    touched: list[str] = []
    replaced: list[str] = []
    if plan:
        replaced = _apply_bronze(spark, source.name, plan)
        markers = {f"hash_{i}": value for i, value in enumerate(hashes)}
        spark.sql(
            f"DELETE FROM {SILVER_ERASED_MESSAGES} WHERE source = :source"
            f" AND key_hash IN ({', '.join(':' + name for name in markers)})",
            args={"source": source.name, **markers},
        )
    # silver's next run reads bronze from here on: every snapshot before it expires below. Bronze and silver are
    # expired even when this run found nothing left to delete: an erasure cut short before its expiry left the
    # key in their older snapshots, and running it again finishes the job.
    record_run(spark, config, source.name, "incremental", main_snapshot(spark), {}, started)
    touched.extend([BRONZE_MESSAGES, SILVER_ROW_CHANGES])
    if key_changes:
        _keep_key_changes(spark, source.name)
    silver_rows = _delete(
        spark, SILVER_ROW_CHANGES, f"source = :source AND row_key = :row_key AND {named}", where | name_args
    )
    if _forget_in_reconciliations(spark, source.name, known_as, key):
        touched.append(GOLD_RECONCILIATIONS)
    state = [t for t in read_state(spark, source.name) if (t.upstream_database, t.upstream_table) == (database, table)]
    own: list[str] = []  # the source's own tables of the erased one
    counts = {"gold": 0, "history": 0, "daily": 0}
    daily = [".".join(quote_ident(part) for part in names.daily_table(source.name, db, t)) for db, t in known_as]
    for kind, relation in [
        *((kind, r) for t in state for kind, r in (("gold", t.gold_relation), ("history", t.history_relation))),
        *(("daily", relation) for relation in daily),
    ]:
        if not spark.catalog.tableExists(relation):
            continue
        deleted = _delete(spark, relation, f"{KEY_COLUMN} = :row_key", where)
        counts[kind] += deleted
        if deleted:
            _rewrite_files_holding(spark, relation, erased_key)
        own.append(relation)
    if state:  # pinned to the snapshots the expiry below keeps
        _publish_again(spark, config, source.name, state)
    expired, files = _expire(spark, config, touched, own)
    files += _delete_left(spark, BRONZE_MESSAGES, replaced)
    result = Erased(
        erasure_id=erasure_id,
        source=source.name,
        table=f"{database}.{table}",
        key_columns=key_columns,
        bronze_dropped=sum(1 for change in plan if change[3]),
        bronze_rewritten=sum(1 for change in plan if not change[3]),
        silver_rows=silver_rows,
        gold_rows=counts["gold"],
        history_rows=counts["history"],
        daily_rows=counts["daily"],
        snapshots_expired=expired,
        files_deleted=files,
        waiting=_waiting(spark, source.name),
        seconds=time.monotonic() - started,
    )
    _finish(spark, result)
    for line in result.lines():
        log.info("%s", line)
    return result


def _names(spark, source: str, database: str, table: str) -> list[tuple[str, str]]:
    """Every name the table had (silver keeps each change under the name it came with): its name, and the names
    of the tables the DDL history gives its identities (`table_uid`, kept through renames)."""
    rows = spark.sql(
        f"""WITH identities AS (
                SELECT DISTINCT table_uid FROM {SILVER_DDL_EVENTS}
                WHERE source = :source AND database = :database AND `table` = :table AND table_uid IS NOT NULL)
            SELECT DISTINCT e.database, e.`table`, e.old_database, e.old_table
            FROM {SILVER_DDL_EVENTS} e JOIN identities i ON e.table_uid = i.table_uid
            WHERE e.source = :source""",
        args={"source": source, "database": database, "table": table},
    ).collect()
    known = {(database, table)}
    for r in rows:
        known |= {(db, t) for db, t in ((r[0], r[1]), (r[2], r[3])) if db is not None and t is not None}
    return sorted(known)


def _named(
    known_as: list[tuple[str, str]], database: str = "database", table: str = "`table`"
) -> tuple[str, dict[str, str]]:
    """SQL that holds for a row of any of the names, over the columns `database` and `table` (names of ours), with
    its parameters."""
    tests, args = [], {}
    for i, (db, t) in enumerate(known_as):
        tests.append(f"({database} = :db_{i} AND {table} = :tb_{i})")
        args[f"db_{i}"], args[f"tb_{i}"] = db, t
    return f"({' OR '.join(tests)})", args


def _forget_in_reconciliations(spark, source: str, known_as: list[tuple[str, str]], key: dict[str, str]) -> int:
    """Take the key out of the keys earlier reconciliations of the table list as differing (`diff_keys`: a kind and
    the key's columns as JSON); returns how many reconciliations listed it."""
    named, name_args = _named(known_as, "upstream_database", "upstream_table")
    rows = spark.sql(
        f"""SELECT reconciliation_id, upstream_database, upstream_table, diff_keys FROM {GOLD_RECONCILIATIONS}
            WHERE source = :source AND size(diff_keys) > 0 AND {named}""",
        args={"source": source, **name_args},
    ).collect()
    changed = []
    for r in rows:
        kept = [entry for entry in r["diff_keys"] if not _lists_key(entry, key)]
        if len(kept) < len(r["diff_keys"]):
            changed.append((r["reconciliation_id"], r["upstream_database"], r["upstream_table"], kept))
    if changed:
        frame = spark.createDataFrame(
            changed,
            "reconciliation_id string, upstream_database string, upstream_table string, diff_keys array<string>",
        )
        with temp_view(frame, "reconciled_keys") as view:
            spark.sql(
                f"""MERGE INTO {GOLD_RECONCILIATIONS} t USING {view} s
                    ON t.source = :source AND t.reconciliation_id = s.reconciliation_id
                    AND t.upstream_database = s.upstream_database AND t.upstream_table = s.upstream_table
                    WHEN MATCHED THEN UPDATE SET t.diff_keys = s.diff_keys""",
                args={"source": source},
            )
    return len(changed)


def _lists_key(entry: str, key: dict[str, str]) -> bool:
    """Whether a `diff_keys` entry (`<kind> {"id":7}`) is of the key."""
    _, _, text = entry.partition(" ")
    try:
        listed = orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return type(listed) is dict and {c: str(v) for c, v in listed.items()} == key


def key_columns(spark, source: str, database: str, table: str) -> list[str]:
    """The key columns `erase` takes in its key, by name: the table's key as its newest row change names them."""
    return _key_columns(spark, source, database, table, *_named(_names(spark, source, database, table)))


def _key_columns(spark, source: str, database: str, table: str, named: str, name_args: dict[str, str]) -> list[str]:
    """The table's key columns, as its newest row change in silver names them, under any name the table had (a
    table renamed since its last change has none under its name)."""
    rows = spark.sql(
        f"""SELECT key_columns FROM {SILVER_ROW_CHANGES} WHERE source = :source AND {named}
            ORDER BY commit_ts DESC LIMIT 1""",
        args={"source": source, **name_args},
    ).collect()
    if not rows:
        raise ConfigError(f"erase: source {source} has no row of {database}.{table} in silver")
    if not rows[0]["key_columns"]:
        raise ConfigError(f"erase: {database}.{table} has no key (TiCDC replicates it with force-replicate)")
    return list(rows[0]["key_columns"])


# a message's change: (topic, partition, offset, dropped whole, its new key, its new value)
BronzeChange = tuple[str, int, int, bool, bytes | None, bytes | None]


def _bronze_plan(
    spark, source: SourceSettings, known_as: list[tuple[str, str]], erased_key: str, hashes: list[str]
) -> list[BronzeChange]:
    """What bronze must lose: each message silver lists for the key (or noted when the key came again after an
    erasure), dropped or rewritten (nothing written yet)."""
    from pyspark.sql import functions as F

    coordinates = ["topic", "partition", "offset"]
    named, name_args = _named(known_as)
    listed = (
        spark.sql(
            f"""SELECT topic, `partition`, `offset` FROM {SILVER_ROW_CHANGES}
                WHERE source = :source AND row_key = :row_key AND {named}""",
            args={"source": source.name, "row_key": erased_key, **name_args},
        )
        .unionByName(
            spark.table(SILVER_ERASED_MESSAGES)
            .where((F.col("source") == source.name) & F.col("key_hash").isin(hashes))
            .select(*coordinates)
        )
        .distinct()
    )
    messages = (
        spark.table(BRONZE_MESSAGES)
        .where(F.col("source") == source.name)
        .join(listed, coordinates, "left_semi")
        .select(*coordinates, "key", "value")
        .collect()
    )
    if source.protocol not in MULTI_ROW_PROTOCOLS:
        _refuse_shared(spark, source.name, known_as, erased_key, listed)
        return [(m["topic"], m["partition"], m["offset"], True, None, None) for m in messages]
    decoder = make_decoder(source.protocol, decoder_options(source))
    plan: list[BronzeChange] = []
    for m in messages:
        where = f"{m['topic']}[{m['partition']}]@{m['offset']}"
        rewritten = without_events(source.protocol, decoder, m["key"], m["value"], _picker(known_as, erased_key, where))
        if rewritten is None:
            plan.append((m["topic"], m["partition"], m["offset"], True, None, None))
        elif rewritten != (m["key"], m["value"]):
            plan.append((m["topic"], m["partition"], m["offset"], False, *rewritten))
    return plan


def _picker(known_as: list[tuple[str, str]], erased_key: str, where: str):
    """Whether an event is a change of the erased key of the table, under any name it had (`without_events` drops
    it)."""
    names_of = set(known_as)

    def picked(event: ChangeEvent) -> bool:
        if event.kind != "row" or (event.database, event.table) not in names_of:
            return False
        keys = {row_key(part.key_columns, part.before, part.after) for part in split_key_change(event)}
        if erased_key not in keys:
            return False
        if len(keys) > 1:
            others = ", ".join(sorted(k for k in keys if k is not None and k != erased_key))
            raise ErasureRefused(
                f"erase: the message at {where} changes the key of a row of {event.database}.{event.table} from or "
                f"to the erased key and {others}; erasing it would lose the other key's row: erase both keys"
            )
        return True

    return picked


def _refuse_shared(spark, source: str, known_as: list[tuple[str, str]], erased_key: str, listed) -> None:
    """A protocol of one row per message whose message silver lists with another key too (an update that changed
    the key, sent whole) cannot lose the erased key alone."""
    named, name_args = _named(known_as)
    with temp_view(listed, "erased_coordinates") as view:
        found = spark.sql(
            f"""SELECT topic, `partition`, `offset`, database, `table`, row_key FROM {SILVER_ROW_CHANGES} r
                LEFT SEMI JOIN {view} l
                ON r.topic = l.topic AND r.`partition` = l.`partition` AND r.`offset` = l.`offset`
                WHERE r.source = :source AND (NOT {named} OR r.row_key <> :row_key) LIMIT 1""",
            args={"source": source, "row_key": erased_key, **name_args},
        ).collect()
    if found:
        o = found[0]
        raise ErasureRefused(
            f"erase: the message at {o['topic']}[{o['partition']}]@{o['offset']} carries the erased key and "
            f"{o['row_key']} of {o['database']}.{o['table']} too; erasing it would lose the other row: erase both"
        )


def _record(
    spark,
    source: str,
    erasure_id: str,
    database: str,
    table: str,
    key_columns: list[str],
    hashes: list[str],
    key_changes: list[tuple[str, str, int]],
    requested_by: str,
    requested_at: dt.datetime,
) -> None:
    row = (
        source,
        erasure_id,
        database,
        table,
        key_columns,
        hashes,
        (int(requested_at.timestamp() * 1000) << 18) | 0x3FFFF,  # every commit up to the request's millisecond
        requested_by,
        requested_at.replace(tzinfo=None),
        *([None] * 8),
        key_changes,
    )
    spark.createDataFrame([row], spark.table(SILVER_ERASURES).schema).writeTo(SILVER_ERASURES).append()


def _finish(spark, result: Erased) -> None:
    spark.sql(
        f"""UPDATE {SILVER_ERASURES} SET finished_at = current_timestamp(), bronze_dropped = :bronze_dropped,
            bronze_rewritten = :bronze_rewritten, silver_rows = :silver_rows, gold_rows = :gold_rows,
            history_rows = :history_rows, daily_rows = :daily_rows, files_deleted = :files_deleted
            WHERE source = :source AND erasure_id = :erasure_id""",
        args={
            "source": result.source,
            "erasure_id": result.erasure_id,
            "bronze_dropped": result.bronze_dropped,
            "bronze_rewritten": result.bronze_rewritten,
            "silver_rows": result.silver_rows,
            "gold_rows": result.gold_rows,
            "history_rows": result.history_rows,
            "daily_rows": result.daily_rows,
            "files_deleted": result.files_deleted,
        },
    )


def _apply_bronze(spark, source: str, plan: list[BronzeChange]) -> list[str]:
    """Drop and rewrite the planned messages in one commit (copy-on-write: the files that held them are replaced);
    returns the replaced files."""
    changes = spark.createDataFrame(
        plan, "topic string, `partition` int, `offset` bigint, dropped boolean, key binary, value binary"
    )
    with BRONZE_COMMITS, temp_view(changes, "erased_messages") as view:
        spark.sql(
            f"""MERGE INTO {BRONZE_MESSAGES} t USING {view} s
                ON t.source = :source AND t.topic = s.topic AND t.`partition` = s.`partition` AND t.`offset` = s.`offset`
                WHEN MATCHED AND s.dropped THEN DELETE
                WHEN MATCHED THEN UPDATE SET t.key = s.key, t.value = s.value""",
            args={"source": source},
        )
        table = iceberg_table(spark, BRONZE_MESSAGES)
        replaced = table.currentSnapshot().removedDataFiles(table.io())
        return [str(data_file.location()) for data_file in java_items(replaced)]


def _delete_left(spark, relation: str, paths: list[str]) -> int:
    """Delete the files among `paths` that expiry left because a snapshot it keeps still lists them; returns how
    many. Bronze keeps the snapshots another source's silver has not read past, and that read prunes by source
    (bronze's partition): it never opens this source's files."""
    io = iceberg_table(spark, relation).io()
    left = [path for path in paths if io.newInputFile(path).exists()]
    for path in left:
        io.deleteFile(path)
    return len(left)


def _key_changes(spark, named: str, args: dict[str, Any]) -> list[tuple[str, str, int]]:
    """The commits (table and commit ts) where a delete of another key shares a commit with an insert of the erased
    key: TiCDC splits an update that changed a key into a delete and an insert of one commit, and gold's `ignore`
    delete mode applies a delete only as half of such a change, which it tells by that insert. The erasure takes
    the insert away, so its record keeps these for every decode after it (`silver.erased`)."""
    rows = spark.sql(
        f"""SELECT DISTINCT database, `table`, commit_ts FROM {SILVER_ROW_CHANGES}
            WHERE source = :source AND {named} AND op = 'delete' AND row_key <> :row_key
              AND (database, `table`, commit_ts) IN (
                  SELECT database, `table`, commit_ts FROM {SILVER_ROW_CHANGES}
                  WHERE source = :source AND row_key = :row_key AND {named} AND op = 'insert')""",
        args=args,
    ).collect()
    return sorted((r["database"], r["table"], r["commit_ts"]) for r in rows)


def _keep_key_changes(spark, source: str) -> None:
    """Flag `key_change_split` in silver on the deletes the source's erasures recorded as halves of key changes
    (`_key_changes`), as every later decode does, so that a rebuild of gold does not bring their rows back."""
    spark.sql(
        f"""UPDATE {SILVER_ROW_CHANGES}
            SET flags = {FLAG_KEY_CHANGE_SPLIT}
            WHERE source = :source AND op = 'delete'
              AND NOT coalesce(array_contains(flags, 'key_change_split'), false)
              AND (database, `table`, commit_ts) IN (
                  SELECT inline(key_changes) FROM {SILVER_ERASURES} WHERE source = :source)""",
        args={"source": source},
    )


def _delete(spark, relation: str, condition: str, args: dict[str, Any]) -> int:
    """Delete the rows `condition` holds for; returns how many there were."""
    used = {name: value for name, value in args.items() if f":{name}" in condition}
    count = spark.sql(f"SELECT count(*) FROM {relation} WHERE {condition}", args=used).collect()[0][0]
    if count:
        spark.sql(f"DELETE FROM {relation} WHERE {condition}", args=used)
    return int(count)


def _rewrite_files_holding(spark, relation: str, erased_key: str) -> None:
    """Rewrite every data file that may hold the key (by its statistics), applying the delete files: a merge-on-read
    delete leaves the row in its data file."""
    holding = java_class(spark, "org.apache.iceberg.expressions.Expressions").equal(KEY_COLUMN, erased_key)
    rewrite = spark_actions(spark).rewriteDataFiles(iceberg_table(spark, relation)).filter(holding)
    rewrite.option("rewrite-all", "true").execute()


def _publish_again(spark, config: PipelineConfig, source: str, erased: list[TableState]) -> None:
    """The source's publication again, at the consistent ts its state is right as of, with the erased table
    pinned to its new snapshots."""
    changed = {t.table_uid for t in erased}
    state = [t.repinned(spark) if t.table_uid in changed else t for t in read_state(spark, source)]
    consistent_ts = max(t.consistent_ts for t in state)
    publish_state(spark, config.local_dir, source, consistent_ts, state, dt.datetime.now(dt.UTC))


def _expire(spark, config: PipelineConfig, shared: list[str], own: list[str]) -> tuple[int, int]:
    """Expire every snapshot older than now of the tables touched (see the module, step 6); returns the snapshots
    expired and the files deleted."""
    actions = spark_actions(spark)
    snapshots = files = 0
    for relation in [*shared, *own]:
        keep_since = None
        if relation == BRONZE_MESSAGES:
            for branch in stale_landing_branches(spark):
                drop_branch(spark, branch)
            keep_since = silver_positions_since(spark, config)
        if relation in own:
            _drop_tags(spark, relation)
        now = int(time.time() * 1000) + 1
        before = len(java_items(iceberg_table(spark, relation).snapshots()))
        with bronze_commits(relation):
            expired = expire_snapshots(spark, actions, relation, min(now, keep_since or now), 1)
        snapshots += before - len(java_items(iceberg_table(spark, relation).snapshots()))
        files += (
            expired.deletedDataFilesCount()
            + expired.deletedPositionDeleteFilesCount()
            + expired.deletedEqualityDeleteFilesCount()
            + expired.deletedManifestsCount()
        )
        if relation in own:  # the source's own table, under its lock: no write of another run is in flight
            orphans = actions.deleteOrphanFiles(iceberg_table(spark, relation)).olderThan(now).execute()
            files += len(java_items(orphans.orphanFileLocations()))
    return snapshots, files


def _drop_tags(spark, relation: str) -> None:
    """Remove the tags of a table (maintenance's `ticdc_published`): a tagged snapshot never expires."""
    table = iceberg_table(spark, relation)
    refs = table.refs()
    tags = [name for name in java_items(refs.keySet()) if refs.get(name).isTag()]
    if tags:
        manage = table.manageSnapshots()
        for name in tags:
            manage = manage.removeTag(name)
        manage.commit()


def _waiting(spark, source: str) -> int:
    from pyspark.sql import functions as F

    return spark.table(SILVER_PENDING).where(F.col("source") == source).count()
