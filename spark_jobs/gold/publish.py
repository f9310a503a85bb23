"""One consistent publication per source and run: every gold and history table of the source as of one TiDB
timestamp, made visible all at once.

dbt commits each table on its own, so a reader of the live tables between two commits could see them at
different timestamps. A publication fixes that without a multi-table transaction (Iceberg has none): each
table's snapshot is tagged `ticdc_<consistent ts>`, and then, last, one row goes into `gold.publications`
(source, consistent ts and its time, every table with its snapshot id and row count, run id, start and
finish). A reader that wants several tables at one timestamp reads the newest publication row of the source
and each table at that row's tag (`read_published`, or the dbt macro `published`): whatever commits later,
those snapshots stay as they were. Tags are kept `retention_days` (the tag's max ref age), and go with the
snapshots `expire_snapshots` removes after that.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import uuid
from dataclasses import dataclass
from pathlib import Path

from spark_jobs.runtime.files import write_json_atomically
from spark_jobs.runtime.sql import quote_ident
from spark_jobs.runtime.tables import GOLD_PUBLICATIONS, ensure_tables

log = logging.getLogger(__name__)

DEFAULT_RETENTION_DAYS = 7


def tag_name(consistent_ts: int) -> str:
    """The tag of a publication: only digits of ours after the prefix."""
    return f"ticdc_{int(consistent_ts)}"


def tidb_time(ts: int) -> dt.datetime:
    """The physical time of a TiDB timestamp (its high bits are milliseconds since the epoch), in UTC."""
    return dt.datetime.fromtimestamp((int(ts) >> 18) / 1000, tz=dt.UTC)


@dataclass(frozen=True)
class PublishedTable:
    relation: str  # namespace.table, escaped names of ours
    upstream: str  # database.table upstream
    snapshot_id: int
    rows: int


def publish(
    spark,
    source: str,
    consistent_ts: int,
    tables: list[PublishedTable],
    started: dt.datetime,
    retention_days: int = DEFAULT_RETENTION_DAYS,
) -> str:
    """Tag every table's current snapshot, then record the publication; returns its tag."""
    tag = tag_name(consistent_ts)
    days = int(retention_days)
    for table in tables:
        namespace, _, name = table.relation.partition(".")
        spark.sql(
            f"ALTER TABLE {quote_ident(namespace)}.{quote_ident(name)} CREATE OR REPLACE TAG {quote_ident(tag)} "
            f"AS OF VERSION {int(table.snapshot_id)} RETAIN {days} DAYS"
        )
    ensure_tables(spark, "gold")
    row = (
        source,
        int(consistent_ts),
        tidb_time(consistent_ts).replace(tzinfo=None),
        tag,
        [(t.relation, t.upstream, int(t.snapshot_id), int(t.rows)) for t in tables],
        uuid.uuid4().hex,
        started.astimezone(dt.UTC).replace(tzinfo=None),
        dt.datetime.now(dt.UTC).replace(tzinfo=None),
    )
    spark.createDataFrame([row], spark.table(GOLD_PUBLICATIONS).schema).writeTo(GOLD_PUBLICATIONS).append()
    log.info("source %s: published %d tables as of TiDB ts %d (tag %s)", source, len(tables), consistent_ts, tag)
    return tag


def current_snapshot(spark, relation: str) -> int | None:
    namespace, _, name = relation.partition(".")
    rows = spark.sql(
        f"SELECT snapshot_id FROM {quote_ident(namespace)}.{quote_ident(name)}.refs WHERE name = 'main'"
    ).collect()
    return rows[0][0] if rows else None


def latest_publication(spark, source: str):
    """The source's newest publication row, or None."""
    ensure_tables(spark, "gold")
    rows = spark.sql(
        f"SELECT * FROM {GOLD_PUBLICATIONS} WHERE source = :source ORDER BY finished_at DESC, consistent_ts DESC LIMIT 1",
        args={"source": source},
    ).collect()
    return rows[0] if rows else None


def read_published(spark, relation: str, publication):
    """A table as the publication tagged it (the snapshot the tag names, whatever committed since)."""
    namespace, _, name = relation.partition(".")
    return spark.read.option("tag", publication["tag"]).table(f"{quote_ident(namespace)}.{quote_ident(name)}")


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
