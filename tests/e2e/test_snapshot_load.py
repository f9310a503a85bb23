"""The initial snapshot: a Dumpling export at a TSO in the middle of a change stream, then the changefeed.

A seeded random workload (every column type the codecs know, every DDL Canal-JSON carries) is cut at a TSO:
the export holds every table as of that TSO (SQL gzip-compressed, CSV plain and CSV zstd-compressed), and the
changefeed sends what follows it, starting a few transactions early (changes at or before the TSO that the
changefeed also sends must not apply twice). After the load and the ingest runs, gold must equal the upstream
database as of the consistent ts (the oracle), and history every moment from the export on. Loading the same
export again changes nothing; loading one gold has passed is refused with one line; a silver rebuild keeps
what the load wrote, and gold rebuilt from it is the same.
"""

from __future__ import annotations

import pytest

from spark_jobs.backfill.snapshot import load_snapshot
from spark_jobs.bronze.land import land_bronze
from spark_jobs.errors import ConfigError, SnapshotRefused
from spark_jobs.gold.build import build_gold
from spark_jobs.runtime.tables import SILVER_ROW_CHANGES, SILVER_SNAPSHOT_LOADS
from spark_jobs.silver.build import build_silver, rebuild_silver
from tests.e2e.test_gold_oracle import assert_gold_is_upstream, assert_history_is_upstream, gold_snapshot
from ticdc_devkit.broker import produce
from ticdc_devkit.dumpling_export import write_export
from ticdc_devkit.simulator.model import Ddl, RowChange, Watermark
from ticdc_devkit.simulator.oracle import upstream_schemas, upstream_state
from ticdc_devkit.simulator.stream import EXTENSION_OPTIONS, encode_stream
from ticdc_devkit.simulator.workload import random_workload

pytestmark = pytest.mark.e2e

SOURCE = "snapshot_shop"
OVERLAP = 6  # transactions before the export's TSO that the changefeed sends too


def cut(workload):
    """(export TSO, first ts the changefeed sends): the TSO is a row change's commit ts mid-stream; the changefeed
    starts up to OVERLAP transactions before it, with no DDL in between (a changefeed started earlier than the
    export sends those too)."""
    events = workload.events
    for at in range(len(events) // 2, len(events)):
        if not isinstance(events[at], RowChange):
            continue
        tso, start = events[at].commit_ts, at
        while start > 0 and isinstance(events[start - 1], RowChange):
            start -= 1
        earlier = sorted({e.commit_ts for e in events[start:at] if e.commit_ts < tso})
        if len(earlier) >= 2:
            return tso, earlier[-min(OVERLAP, len(earlier))]
    raise AssertionError("no row change with transactions before it and no DDL between them")


def silver_rows(spark) -> int:
    return spark.table(SILVER_ROW_CHANGES).where(f"source = '{SOURCE}'").count()


def snapshot_rows(spark) -> int:
    """The load's rows (an exported row the changefeed also sent, at the export's TSO, is stored once)."""
    return spark.table(SILVER_ROW_CHANGES).where(f"source = '{SOURCE}' AND array_contains(flags, 'snapshot')").count()


def test_a_dumpling_export_then_the_changefeed_give_the_upstream_database(spark, broker, source_config, tmp_path):
    workload = random_workload(20261124, tables=3, changes=90, preexisting=1, protocol="canal-json")
    tso, first = cut(workload)
    tables = upstream_schemas(workload.events, as_of=tso, preexisting=workload.preexisting)
    rows = upstream_state(workload.events, as_of=tso, preexisting=workload.preexisting)
    assert sum(len(r) for r in rows.values()) > 5, "the export must hold rows"
    formats = dict(zip(sorted(tables), [("sql", "gzip"), ("csv", None), ("csv", "zstd")], strict=False))
    export = write_export(tmp_path / "export", tso, tables, rows, formats)

    streamed = [
        e
        for e in workload.events
        if (isinstance(e, RowChange | Ddl) and e.commit_ts >= first) or (isinstance(e, Watermark) and e.ts >= first)
    ]
    half = len(streamed) // 2
    while not isinstance(streamed[half - 1], RowChange):
        half += 1
    parts = [
        [*streamed[:half], Watermark(streamed[half - 1].commit_ts)],
        streamed[half:],
    ]
    broker.create_topics([SOURCE], partitions=1)
    config = source_config(SOURCE, "canal-json")
    options = EXTENSION_OPTIONS["canal-json"]

    bad = write_export(tmp_path / "bad-export", tso, tables, rows, {name: ("sql", None) for name in tables})
    damaged = next(bad.glob("*.000000000.sql"))
    damaged.write_bytes(damaged.read_bytes().replace(b"VALUES\n(", b"VALUES\n(,", 1))
    with pytest.raises(ConfigError, match=rf"{damaged.name}: byte \d+: expected a value"):
        load_snapshot(spark, config, SOURCE, str(bad))
    assert spark.table(SILVER_SNAPSHOT_LOADS).where(f"source = '{SOURCE}'").count() == 0, "a bad export wrote"

    produce(broker.bootstrap, encode_stream("canal-json", parts[0], topic=SOURCE, options=options))
    land_bronze(spark, config, SOURCE)
    build_silver(spark, config, SOURCE)
    loaded = load_snapshot(spark, config, SOURCE, str(export))
    assert loaded.snapshot_ts == tso and loaded.files >= len([t for t in rows.values() if t])
    assert sum(loaded.tables.values()) == sum(len(r) for r in rows.values())
    result = build_gold(spark, config, SOURCE)
    assert result.consistent_ts >= tso
    assert_gold_is_upstream(spark, SOURCE, workload, result.consistent_ts)
    moments = sorted({tso, result.consistent_ts, *(e.commit_ts for e in streamed if isinstance(e, RowChange))})
    assert_history_is_upstream(
        spark, SOURCE, workload, result.consistent_ts, [m for m in moments if tso <= m <= result.consistent_ts]
    )

    before = silver_rows(spark)
    again = load_snapshot(spark, config, SOURCE, str(export))
    assert again.already_loaded and silver_rows(spark) == before, "a second load of the same export changed silver"
    assert snapshot_rows(spark) > 0

    produce(broker.bootstrap, encode_stream("canal-json", parts[1], topic=SOURCE, options=options))
    land_bronze(spark, config, SOURCE)
    build_silver(spark, config, SOURCE)
    result = build_gold(spark, config, SOURCE)
    assert result.consistent_ts == workload.consistent_ts
    assert_gold_is_upstream(spark, SOURCE, workload, result.consistent_ts)
    moments = sorted({*moments, *(e.commit_ts for e in workload.events if isinstance(e, RowChange))})
    assert_history_is_upstream(
        spark, SOURCE, workload, result.consistent_ts, [m for m in moments if tso <= m <= result.consistent_ts]
    )

    # the same export again, elsewhere and in other compressions: the same TSO and rows, nothing to do
    recompressed = {name: ("sql", "zstd") if fmt == "csv" else ("csv", "gzip") for name, (fmt, _) in formats.items()}
    copy = write_export(tmp_path / "late-export", tso, tables, rows, recompressed)
    before = silver_rows(spark)
    same = load_snapshot(spark, config, SOURCE, str(copy))
    assert same.already_loaded and same.same_as == str(export) and silver_rows(spark) == before
    assert "holds the same rows as the one loaded from" in same.line()
    # an export at that TSO whose rows differ (one row missing) would rewrite what gold showed: refused
    name = next(n for n in sorted(rows) if rows[n])
    missing = {**rows, name: dict(list(rows[name].items())[1:])}
    differing = write_export(tmp_path / "differing-export", tso, tables, missing, formats)
    with pytest.raises(
        SnapshotRefused, match=rf"gold is published up to TiDB ts {result.consistent_ts}, past the export's TSO {tso}"
    ):
        load_snapshot(spark, config, SOURCE, str(differing))
    loads = spark.table(SILVER_SNAPSHOT_LOADS).where(f"source = '{SOURCE}'").collect()
    assert [(r["location"], r["rows"], r["finished_at"] is not None) for r in loads] == [
        (str(export), sum(len(r) for r in rows.values()), True)
    ], "a refused load left a record"

    incremental, before = gold_snapshot(spark, SOURCE), (silver_rows(spark), snapshot_rows(spark))
    rebuild_silver(spark, config, SOURCE)
    assert (silver_rows(spark), snapshot_rows(spark)) == before, "a silver rebuild lost what the load wrote"
    build_gold(spark, config, SOURCE, rebuild=True)
    assert gold_snapshot(spark, SOURCE) == incremental, "gold rebuilt after a silver rebuild differs"
