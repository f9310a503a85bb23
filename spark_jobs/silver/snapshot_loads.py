"""`silver.snapshot_loads`: the record of every Dumpling snapshot loaded into a source's silver, started and finished.

A load writes silver in several commits; its record says when it started and when it finished, so that gold never
publishes a source while a load is half done (`unfinished_load`), and a load run again finishes what was left.
"""

from __future__ import annotations

import json

from spark_jobs.runtime.tables import SILVER_SNAPSHOT_LOADS, ensure_tables_once


def unfinished_load(spark, source: str):
    """The source's snapshot load that started and did not finish, or None (gold must not publish then)."""
    ensure_tables_once(spark, "silver")
    rows = spark.sql(
        f"SELECT location, snapshot_ts FROM {SILVER_SNAPSHOT_LOADS} WHERE source = :source AND finished_at IS NULL",
        args={"source": source},
    ).collect()
    return rows[0] if rows else None


def load_record(spark, source: str, location: str, snapshot_ts: int):
    """The record of a load of this export, or None."""
    rows = spark.sql(
        f"""SELECT * FROM {SILVER_SNAPSHOT_LOADS}
            WHERE source = :source AND location = :location AND snapshot_ts = :ts""",
        args={"source": source, "location": location, "ts": snapshot_ts},
    ).collect()
    return rows[0] if rows else None


def finished_loads(spark, source: str, snapshot_ts: int) -> list:
    """The finished loads of an export at this TSO, from any location (the same export moved or recompressed)."""
    return spark.sql(
        f"""SELECT location, tables FROM {SILVER_SNAPSHOT_LOADS}
            WHERE source = :source AND snapshot_ts = :ts AND finished_at IS NOT NULL ORDER BY started_at""",
        args={"source": source, "ts": snapshot_ts},
    ).collect()


def record_start(spark, source, location, snapshot_ts, tables, seq, force) -> None:
    """The load has started (a load found started and not finished keeps gold from publishing)."""
    spark.sql(
        f"""MERGE INTO {SILVER_SNAPSHOT_LOADS} t
            USING (SELECT :source AS source, :location AS location, :ts AS snapshot_ts) s
            ON t.source = s.source AND t.location = s.location AND t.snapshot_ts = s.snapshot_ts
            WHEN MATCHED THEN UPDATE SET silver_seq = :seq, forced = :force, started_at = current_timestamp()
            WHEN NOT MATCHED THEN INSERT (source, location, snapshot_ts, tables, files, `rows`, silver_seq, forced,
                started_at, finished_at)
                VALUES (s.source, s.location, s.snapshot_ts, from_json(:tables, 'array<string>'), NULL, NULL, :seq,
                :force, current_timestamp(), NULL)""",
        args={
            "source": source,
            "location": location,
            "ts": snapshot_ts,
            "seq": seq,
            "force": force,
            "tables": json.dumps([f"{d}.{t}" for d, t in sorted(tables)]),
        },
    )


def record_finish(spark, source, location, snapshot_ts, files, rows) -> None:
    """The load has finished: gold may publish what it wrote."""
    spark.sql(
        f"""UPDATE {SILVER_SNAPSHOT_LOADS} SET files = :files, `rows` = :rows, finished_at = current_timestamp()
            WHERE source = :source AND location = :location AND snapshot_ts = :ts""",
        args={"source": source, "location": location, "ts": snapshot_ts, "files": files, "rows": rows},
    )
