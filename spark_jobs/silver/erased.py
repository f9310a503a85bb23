"""Keys erased from a source (`ticdc-lake erase`, `spark_jobs.erasure`) stay out of silver for good.

`silver.erasures` keeps, per erasure, a SHA-256 of the table and the key under each name the table had
(`key_hashes`), never a value, and the TiDB time of the request (`through_ts`). Every decode (an incremental run, a
rebuild of silver from bronze, a quarantine replay, a Dumpling snapshot load) marks a row change whose table and key hash to a recorded erasure, committed at or before its
`through_ts`, as kind `erased`, which no merge takes: the same message sent again by TiCDC, or a Kafka topic read
again from the start, cannot bring the key back. A change committed after the request is new data and goes in.
Where such a change came again, its message's coordinates go to `silver.erased_messages` (bronze holds what Kafka
sent), so that erasing the key again removes the message from bronze too.
"""

from __future__ import annotations

import hashlib
import logging
from typing import NamedTuple

from spark_jobs.runtime.tables import SILVER_ERASED_MESSAGES, SILVER_ERASURES

log = logging.getLogger(__name__)

ERASED = "erased"  # the decoded kind of a row change of an erased key
_SEPARATOR = "\x00"  # in no database or table name, nor in a key's JSON text


def key_hash(database: str, table: str, row_key: str) -> str:
    """What `silver.erasures` holds of an erased key: a SHA-256 (hex) of its table and its `row_key` text."""
    return hashlib.sha256(_SEPARATOR.join((database, table, row_key)).encode("utf-8")).hexdigest()


# What an erasure's recorded key change does to its delete, as SQL over silver's `flags` (here and in
# `erasure._keep_key_changes`, which flags silver's rows already merged).
FLAG_KEY_CHANGE_SPLIT = "array_sort(array_union(coalesce(flags, array()), array('key_change_split')))"


class Erasures(NamedTuple):
    """What a decode needs of a source's erasures."""

    through: dict[str, int]  # key hash -> the newest commit ts erased
    key_changes: set[tuple[str, str, int]]  # commits (database, table, commit ts) recorded as key changes


def erasures(spark, source: str) -> Erasures:
    """The source's erasures, in one read of `silver.erasures` (a few rows, read once per decode)."""
    from pyspark.sql import functions as F

    # `key_changes` is none in an erasure recorded before they were kept
    rows = (
        spark.table(SILVER_ERASURES)
        .where(F.col("source") == source)
        .select("key_hashes", "through_ts", "key_changes")
        .collect()
    )
    through: dict[str, int] = {}
    for r in rows:
        for hashed in r["key_hashes"]:
            through[hashed] = max(through.get(hashed, r["through_ts"]), r["through_ts"])
    changes = {(c["database"], c["table"], c["commit_ts"]) for r in rows for c in r["key_changes"] or ()}
    return Erasures(through, changes)


def mark_erased(spark, decoded, source: str):
    """The decoded events with every row change of an erased key committed by its erasure's `through_ts` marked
    kind `erased` (the same hash as `key_hash`, computed by Spark per row only when the source has erasures), and
    the deletes the erasures recorded as halves of key changes flagged `key_change_split`; `decoded` itself when
    the source has no erasure. Rows flagged values_raw must be read first (`merges.read_by_schema`): their decoded
    key holds the raw numbers, not the key the erasure hashed."""
    from pyspark.sql import functions as F

    through, changes = erasures(spark, source)
    if not through:
        return decoded
    hashed = hashed_key()
    limits = F.create_map(*[F.lit(value) for item in through.items() for value in item])
    erased = (F.col("kind") == "row") & (F.col("commit_ts") <= F.try_element_at(limits, hashed))
    marked = decoded.withColumn("kind", F.when(erased, F.lit(ERASED)).otherwise(F.col("kind")))
    if not changes:
        return marked
    commits = F.create_map(*[F.lit(value) for change in changes for value in (_SEPARATOR.join(map(str, change)), True)])
    commit = F.concat_ws(_SEPARATOR, "database", "table", F.col("commit_ts").cast("string"))
    split = (
        (F.col("kind") == "row")
        & (F.col("op") == "delete")
        & F.coalesce(F.try_element_at(commits, commit), F.lit(False))
    )
    return marked.withColumn("flags", F.when(split, F.expr(FLAG_KEY_CHANGE_SPLIT)).otherwise(F.col("flags")))


def hashed_key():
    """`key_hash` of a decoded row change, computed by Spark."""
    from pyspark.sql import functions as F

    return F.sha2(F.concat_ws(_SEPARATOR, "database", "table", "row_key"), 256)


def record_erased_messages(spark, decoded, source: str, changes: int) -> None:
    """Note where changes of erased keys came again (their messages stay in bronze until the key is erased again)."""
    from pyspark.sql import functions as F

    seen = (
        decoded.where(F.col("kind") == ERASED)
        .select(F.lit(source).alias("source"), "topic", "partition", "offset", hashed_key().alias("key_hash"))
        .distinct()
        .withColumn("seen_at", F.current_timestamp())
    )
    seen.writeTo(SILVER_ERASED_MESSAGES).append()
    log.warning(
        "source %s: %d changes of erased keys came again; silver kept them out, bronze holds their messages until "
        "`ticdc-lake erase` is run again for the key",
        source,
        changes,
    )
