"""One consistent publication per source and run: every gold and history table of the source as of one TiDB
timestamp, pinned to one snapshot each, made visible all at once.

dbt commits each table on its own, so a reader of the live tables between two commits could see them at
different timestamps. A publication fixes that without a multi-table transaction (Iceberg has none): one row in
`gold.publications` (source, consistent ts and its time, every table with the snapshot id it is pinned to and its
row count, run id, start and finish), written last. A reader that wants several tables at one timestamp reads the
newest publication row of the source and each table at its snapshot (`read_published`, or the dbt macro
`published`): whatever commits later, those snapshots stay as they were. A table the run did not change is pinned
to the snapshot it already had: nothing since can have changed it, so it is exactly right at the newer timestamp,
and the run commits nothing to it. Maintenance keeps every snapshot a publication within the retention can name.

`gold.tables` is the source's gold state: per table its relations, schema, the snapshots the newest publication
pins, its counts, and the consistent ts and silver_seq it is known right as of, which the next run's plan reads.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from spark_jobs.runtime.files import write_json_atomically
from spark_jobs.runtime.iceberg import iceberg_table
from spark_jobs.runtime.sql import quote_ident
from spark_jobs.runtime.tables import GOLD_PUBLICATIONS, GOLD_TABLES

log = logging.getLogger(__name__)


def tag_name(consistent_ts: int) -> str:
    """The name of a publication: only digits of ours after the prefix."""
    return f"ticdc_{int(consistent_ts)}"


def tidb_time(ts: int) -> dt.datetime:
    """The physical time of a TiDB timestamp (its high bits are milliseconds since the epoch), in UTC."""
    return dt.datetime.fromtimestamp((int(ts) >> 18) / 1000, tz=dt.UTC)


@dataclass(frozen=True)
class TableState:
    """One row of `gold.tables`: a gold table and its history as the newest publication holds them."""

    source: str
    table_uid: str
    upstream_database: str
    upstream_table: str
    gold_relation: str
    history_relation: str
    columns: str  # JSON: the schema's columns the tables are built in
    key_columns: list[str]
    schema_fingerprint: str
    consistent_ts: int  # the tables are exactly right as of this TiDB timestamp ...
    silver_seq: int  # ... with every change silver held up to this run
    gold_snapshot_id: int | None
    history_snapshot_id: int | None
    rows: int
    versions: int
    changed_ts: int  # the consistent ts of the run that last changed them
    ddl_events: int  # the source's published DDL events when recorded: one arriving late shows as a new count
    needs_snapshot: bool = False  # a published DDL changed rows TiCDC does not send, after the last snapshot
    delete_mode: str | None = None  # how deletes landed in the gold table (GoldSettings); None: hard (older state)
    layout: str | None = None  # the tables' Iceberg layout (gold.layout.Layout.text); None: unpartitioned, unordered
    types: str | None = None  # the type mappings they were built with (TypeMappings.text); None: the defaults

    @property
    def upstream(self) -> str:
        return f"{self.upstream_database}.{self.upstream_table}"

    def advanced(self, consistent_ts: int, silver_seq: int) -> TableState:
        """The same snapshots, known right at a newer consistent ts (nothing since changed the table)."""
        return replace(self, consistent_ts=consistent_ts, silver_seq=silver_seq)

    def repinned(self, spark) -> TableState:
        """The same table pinned to its tables' current snapshots, with their counts (something other than a run
        changed them: an erasure)."""
        gold_snapshot, rows = live_rows(spark, self.gold_relation)
        history_snapshot, versions = live_rows(spark, self.history_relation)
        return replace(
            self, gold_snapshot_id=gold_snapshot, history_snapshot_id=history_snapshot, rows=rows, versions=versions
        )


def read_state(spark, source: str) -> list[TableState]:
    """The source's gold state (empty before its first run)."""
    fields = [f for f in TableState.__dataclass_fields__]
    rows = spark.sql(
        f"SELECT {', '.join(quote_ident(f) for f in fields)} FROM {GOLD_TABLES} WHERE source = :source",
        args={"source": source},
    ).collect()
    states = []
    for r in rows:
        values: dict[str, Any] = {f: r[f] for f in fields}
        states.append(TableState(**(values | {"key_columns": list(r["key_columns"] or [])})))
    return states


def write_state(spark, source: str, tables: list[TableState]) -> None:
    """Replace the source's gold state with `tables`, in one commit."""
    from pyspark.sql import functions as F

    target = spark.table(GOLD_TABLES)
    rows = [(*asdict(t).values(), dt.datetime.now(dt.UTC).replace(tzinfo=None)) for t in tables]
    frame = spark.createDataFrame(rows, target.select([*TableState.__dataclass_fields__, "updated_at"]).schema)
    frame.select(*target.columns).writeTo(GOLD_TABLES).overwrite(F.col("source") == F.lit(source))


def live_rows(spark, relation: str) -> tuple[int | None, int]:
    """A table's current snapshot and its live rows, from the snapshot's summary (no Spark job): records less the
    rows its delete files delete (the merges write position deletes, each row deleted once)."""
    snapshot = iceberg_table(spark, relation).currentSnapshot()
    if snapshot is None:
        return None, 0
    summary = snapshot.summary()

    def total(key: str) -> int:
        value = summary.get(key)
        return int(value) if value is not None else 0

    rows = total("total-records") - total("total-position-deletes") - total("total-equality-deletes")
    return snapshot.snapshotId(), rows


@dataclass(frozen=True)
class PublishedTable:
    relation: str  # namespace.table, escaped names of ours
    upstream: str  # database.table upstream
    snapshot_id: int | None
    rows: int


def published_tables(state: list[TableState]) -> list[PublishedTable]:
    """What a publication lists of a source's state: every gold and history table with its pinned snapshot."""
    return [
        PublishedTable(relation, t.upstream, snapshot, rows)
        for t in state
        for relation, snapshot, rows in (
            (t.gold_relation, t.gold_snapshot_id, t.rows),
            (t.history_relation, t.history_snapshot_id, t.versions),
        )
    ]


def publish(spark, source: str, consistent_ts: int, tables: list[PublishedTable], started: dt.datetime) -> str:
    """Record the publication (one commit); returns its name."""
    tag = tag_name(consistent_ts)
    row = (
        source,
        int(consistent_ts),
        tidb_time(consistent_ts).replace(tzinfo=None),
        tag,
        [(t.relation, t.upstream, t.snapshot_id, int(t.rows)) for t in tables],
        uuid.uuid4().hex,
        started.astimezone(dt.UTC).replace(tzinfo=None),
        dt.datetime.now(dt.UTC).replace(tzinfo=None),
    )
    spark.createDataFrame([row], spark.table(GOLD_PUBLICATIONS).schema).writeTo(GOLD_PUBLICATIONS).append()
    log.info("source %s: published %d tables as of TiDB ts %d", source, len(tables), consistent_ts)
    return tag


def publish_state(
    spark, local_dir: str | Path, source: str, consistent_ts: int, tables: list[TableState], started: dt.datetime
) -> str:
    """Write the source's state and its publication (two commits, whatever the number of tables), then the
    publication's file; returns the publication's name."""
    write_state(spark, source, tables)
    tag = publish(spark, source, consistent_ts, published_tables(tables), started)
    record_publication(Path(local_dir), source, consistent_ts, tag)
    return tag


def latest_publication(spark, source: str):
    """The source's newest publication row, or None. Two reads: the newest finish (two small columns of every
    row), then that row alone (the files of other runs are skipped by their statistics)."""
    if not spark.catalog.tableExists(GOLD_PUBLICATIONS):
        return None
    newest = spark.sql(
        f"SELECT max(finished_at) FROM {GOLD_PUBLICATIONS} WHERE source = :source", args={"source": source}
    ).collect()[0][0]
    if newest is None:
        return None
    rows = spark.sql(
        f"""SELECT * FROM {GOLD_PUBLICATIONS} WHERE source = :source AND finished_at = :finished
            ORDER BY consistent_ts DESC LIMIT 1""",
        args={"source": source, "finished": newest},
    ).collect()
    return rows[0] if rows else None


def read_published(spark, relation: str, publication):
    """A table as the publication pinned it (its snapshot then, whatever committed since)."""
    pinned = {t["relation"]: t["snapshot_id"] for t in publication["tables"]}
    if relation not in pinned:
        raise ValueError(f"publication {publication['tag']} of source {publication['source']} has no table {relation}")
    namespace, _, name = relation.partition(".")
    return spark.read.option("snapshot-id", pinned[relation]).table(f"{quote_ident(namespace)}.{quote_ident(name)}")


def publication_path(local_dir: Path, source: str) -> Path:
    return Path(local_dir) / "status" / f"{source}.published.json"


def record_publication(local_dir: Path, source: str, consistent_ts: int, tag: str) -> Path:
    """The source's newest publication, beside the tables (`build_gold` writes it after `gold.publications`'
    row), for readers that must not start Spark: the daily DAG's sensor, which pokes every few minutes."""
    document = {"source": source, "consistent_ts": consistent_ts, "tag": tag}
    return write_json_atomically(publication_path(local_dir, source), document)


def published_ts(local_dir: Path, source: str) -> int | None:
    """The consistent ts of the source's newest publication, or None when none was recorded."""
    try:
        return int(json.loads(publication_path(local_dir, source).read_text())["consistent_ts"])
    except FileNotFoundError:
        return None
