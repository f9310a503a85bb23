"""Landing into bronze against the real broker and Iceberg: exact bytes, caps, new topics, gaps, many topics
with a few records, and two runs of one source that cannot both commit the same range."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import Consumer, TopicPartition

from spark_jobs.bronze import land as landing
from spark_jobs.bronze.land import (
    SUMMARY_OFFSETS_ADOPTED,
    adopt_summary_offsets,
    broker_watermarks,
    commit_batch,
    committed_offsets,
    land_bronze,
    offsets_property,
)
from spark_jobs.errors import ConcurrentLandingError, LandingGapError
from spark_jobs.runtime.iceberg import iceberg_table, main_snapshot, snapshot_util
from spark_jobs.runtime.jvm import java_items
from spark_jobs.runtime.tables import BRONZE_LANDING_GAPS, BRONZE_LANDING_RUNS, BRONZE_MESSAGES, ensure_tables
from ticdc_devkit.broker import produce
from ticdc_devkit.simulator.model import Message

pytestmark = pytest.mark.e2e


def of_source(spark, table, source, columns):
    """The columns of a table's rows of one source."""
    return spark.sql(f"SELECT {columns} FROM {table} WHERE source = :source", args={"source": source}).collect()


def bronze_records(spark, source):
    rows = of_source(spark, BRONZE_MESSAGES, source, "topic, `partition`, `offset`, key, value, headers")
    out = {}
    for r in rows:
        coordinate = (r["topic"], r["partition"], r["offset"])
        assert coordinate not in out, f"{coordinate} landed twice"
        out[coordinate] = (
            bytes(r["key"]) if r["key"] is not None else None,
            bytes(r["value"]) if r["value"] is not None else None,
            [(h["key"], bytes(h["value"]) if h["value"] is not None else None) for h in r["headers"]],
        )
    return out


def landing_summaries(spark, source):
    """The summaries of the snapshots on main's history that `source` landed, newest first."""
    table = iceberg_table(spark, BRONZE_MESSAGES)
    found = []
    for ancestor in java_items(snapshot_util(spark).currentAncestors(table)):
        java_summary = ancestor.summary()
        summary = {key: java_summary.get(key) for key in java_items(java_summary.keySet())}
        if summary.get(landing.SUMMARY_SOURCE) == source:
            found.append(summary)
    return found


def expected_records(messages):
    offsets: dict = {}
    out = {}
    for m in messages:
        offset = offsets.get((m.topic, m.partition), 0)
        offsets[(m.topic, m.partition)] = offset + 1
        out[(m.topic, m.partition, offset)] = (m.key, m.value, list(m.headers))
    return out


def test_bytes_headers_large_and_empty_topics_land_exactly(spark, broker, source_config):
    broker.create_topics(["lb_data"], partitions=2)
    broker.create_topics(["lb_empty"], partitions=1)
    messages = [
        Message(
            "lb_data",
            i % 2,
            bytes([i, 0, 255, 10]) if i != 4 else None,
            None if i == 3 else (b"\x00" * 1_000_000 if i == 5 else bytes(range(256)) * i),
            (("h", b"\x00\xff"), ("h", b"repeated"), ("empty", b"")),
        )
        for i in range(12)
    ]
    produce(broker.bootstrap, messages)
    config = source_config("lb", topics=["lb_data", "lb_empty"])
    result = land_bronze(spark, config, "lb")
    assert result.records == 12 and result.per_partition == {("lb_data", 0): 6, ("lb_data", 1): 6}
    assert result.lag == {("lb_data", 0): 0, ("lb_data", 1): 0, ("lb_empty", 0): 0}
    assert bronze_records(spark, "lb") == expected_records(messages)
    runs = spark.sql(
        f"SELECT topic, `partition`, records, next_offset FROM {BRONZE_LANDING_RUNS} WHERE batch_id = :batch",
        args={"batch": result.batch_id},
    ).collect()
    assert sorted((r[0], r[1], r[2], r[3]) for r in runs) == [("lb_data", 0, 6, 6), ("lb_data", 1, 6, 6)]

    snapshot = main_snapshot(spark)
    again = land_bronze(spark, config, "lb")
    assert again.records == 0 and main_snapshot(spark) == snapshot


def test_topic_pattern_picks_up_a_topic_created_later(spark, broker, source_config):
    config = source_config("lp", topic_pattern="lp_.*")
    broker.create_topics(["lp_a"], partitions=1)
    first = [Message("lp_a", 0, b"a%d" % i, b"v%d" % i) for i in range(3)]
    produce(broker.bootstrap, first)
    assert land_bronze(spark, config, "lp").records == 3
    broker.create_topics(["lp_b"], partitions=2)
    second = [Message("lp_b", i % 2, b"b%d" % i, b"w%d" % i) for i in range(4)] + [Message("lp_a", 0, b"a9", b"v9")]
    produce(broker.bootstrap, second)
    assert land_bronze(spark, config, "lp").records == 5
    assert bronze_records(spark, "lp") == expected_records(first + second)


def test_many_topics_with_a_few_records_land_once_in_a_log_of_a_few_lines(spark, broker, source_config, caplog):
    """TiCDC's topic-per-table dispatcher read by a pattern: 40 one-partition topics, records on a few."""
    topics = [f"lm_t{i:02d}" for i in range(40)]
    broker.create_topics(topics)
    config = source_config("lm", topic_pattern=r"lm_t\d+")
    first = [Message(topics[i % 4 * 10], 0, b"a%d" % i, b"v%d" % i) for i in range(10)]  # 4 topics
    second = [Message(topics[i], 0, b"b%d" % i, b"w%d" % i) for i in range(1, 40, 3)]  # 13 topics, one each
    runs = []
    for messages in (first, [], second):
        produce(broker.bootstrap, messages)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="spark_jobs.bronze.land"):
            runs.append((land_bronze(spark, config, "lm"), list(caplog.messages)))
    (landed, landed_log), (idle, idle_log), (spread, spread_log) = runs

    assert bronze_records(spark, "lm") == expected_records(first + second)  # each record once
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "lm"})
    try:  # the batched lookup answers what a lookup per partition answers
        highs = {(t, 0): consumer.get_watermark_offsets(TopicPartition(t, 0), timeout=10)[1] for t in topics}
    finally:
        consumer.close()
    assert {tp: high for tp, (_, high) in broker_watermarks(config.source("lm"))[0].items()} == highs
    assert committed_offsets(spark, "lm") == highs  # every partition's offset, committed with its records
    assert sum(highs.values()) == len(first + second)

    assert (landed.records, len(landed.per_partition), len(landed.lag), set(landed.lag.values())) == (10, 4, 40, {0})
    assert len(landed_log) == 2, landed_log
    assert landed_log[0].startswith(f"source lm: landed 10 records ({landed.bytes} bytes) in batch {landed.batch_id}")
    assert " from 4 of 40 partitions, largest lag 0, " in landed_log[0]
    assert landed_log[1] == (
        "source lm: most records: lm_t00[0] 3 from offset 0, lm_t10[0] 3 from offset 0, "
        "lm_t20[0] 2 from offset 0, lm_t30[0] 2 from offset 0"
    )
    assert idle.records == 0 and len(idle_log) == 1 and "nothing new to land (40 partitions)" in idle_log[0]
    assert spread.records == 13 and len(spread_log) == 2, spread_log
    assert " from 13 of 40 partitions, " in spread_log[0]
    assert spread_log[1].count(" from offset ") == 10
    assert spread_log[1].endswith(" ... and 3 more partitions (each in bronze.landing_runs)")

    rows = spark.sql(
        f"SELECT batch_id, topic, `partition`, start_offset, next_offset, records, lag FROM {BRONZE_LANDING_RUNS} "
        "WHERE source = 'lm'"
    ).collect()
    assert sorted(tuple(r) for r in rows) == sorted(
        [(landed.batch_id, t, 0, 0, n, n, 0) for t, n in (("lm_t00", 3), ("lm_t10", 3), ("lm_t20", 2), ("lm_t30", 2))]
        + [(spread.batch_id, m.topic, 0, highs[(m.topic, 0)] - 1, highs[(m.topic, 0)], 1, 0) for m in second]
    )  # a row per partition that gained records, none for the others


def test_record_and_byte_caps_bound_a_run_and_the_next_run_continues(spark, broker, source_config):
    broker.create_topics(["lc"], partitions=2)
    messages = [Message("lc", i % 2, None, b"x" * 100) for i in range(20)]
    produce(broker.bootstrap, messages)
    config = source_config("lc", landing={"max_records_per_run": 7})
    assert [land_bronze(spark, config, "lc").records for _ in range(4)] == [7, 7, 6, 0]
    assert bronze_records(spark, "lc") == expected_records(messages)

    more = [Message("lc", 0, None, b"y" * 100) for _ in range(10)]
    produce(broker.bootstrap, more)
    capped = source_config("lc", landing={"max_bytes_per_run": 350})
    counts = []
    while n := land_bronze(spark, capped, "lc").records:
        counts.append(n)
    assert counts == [4, 4, 2]  # 350 bytes admit 4 records of 100 (the budget is crossed by the 4th)
    assert bronze_records(spark, "lc") == expected_records(messages + more)

    # one snapshot per run, whose summary says where the run ended, also when the byte budget cut it short
    summaries = landing_summaries(spark, "lc")
    assert len(summaries) == 6
    assert summaries[0][landing.SUMMARY_OFFSETS] == '{"lc":{"0":20,"1":10}}'
    assert [landing.json.loads(s[landing.SUMMARY_RANGES]) for s in summaries[:3]] == [
        [["lc", 0, 18, 20]],
        [["lc", 0, 14, 18]],
        [["lc", 0, 10, 14]],
    ]
    # a cut run's snapshot was made again with its real end; expiring the one it replaced keeps the files
    replaced = [int(s[landing.PICKED_FROM]) for s in summaries if landing.PICKED_FROM in s]
    assert len(replaced) == 2
    expire = iceberg_table(spark, BRONZE_MESSAGES).expireSnapshots()
    for snapshot_id in replaced:
        expire = expire.expireSnapshotId(snapshot_id)
    expire.commit()
    assert bronze_records(spark, "lc") == expected_records(messages + more)


def test_offsets_kept_only_in_a_snapshot_summary_are_found_and_adopted(spark, broker, source_config):
    """A source landed before the offsets property existed, in a bronze not yet adopted: the newest summary
    holds its offsets until maintenance copies them into the property and says so."""
    broker.create_topics(["la"], partitions=1)
    produce(broker.bootstrap, [Message("la", 0, None, b"a%d" % i) for i in range(4)])
    config = source_config("la")
    assert land_bronze(spark, config, "la").records == 4
    iceberg_table(spark, BRONZE_MESSAGES).updateProperties().remove(offsets_property("la")).remove(
        SUMMARY_OFFSETS_ADOPTED
    ).commit()
    assert committed_offsets(spark, "la") == {("la", 0): 4}
    assert "la" in adopt_summary_offsets(spark)
    properties = iceberg_table(spark, BRONZE_MESSAGES).properties()
    assert properties.get(offsets_property("la")) == '{"la":{"0":4}}'
    assert properties.get(SUMMARY_OFFSETS_ADOPTED) == "true"
    assert adopt_summary_offsets(spark) == []
    produce(broker.bootstrap, [Message("la", 0, None, b"b%d" % i) for i in range(2)])
    assert land_bronze(spark, config, "la").records == 2
    assert committed_offsets(spark, "la") == {("la", 0): 6}


def test_offsets_going_backwards_fail_or_are_accepted_and_recorded(spark, broker, source_config):
    broker.create_topics(["lg"], partitions=1)
    produce(broker.bootstrap, [Message("lg", 0, None, b"old%d" % i) for i in range(5)])
    config = source_config("lg")
    assert land_bronze(spark, config, "lg").records == 5
    broker.delete_topics(["lg"])
    broker.create_topics(["lg"], partitions=1)
    produce(broker.bootstrap, [Message("lg", 0, None, b"new%d" % i) for i in range(2)])
    snapshot = main_snapshot(spark)
    with pytest.raises(
        LandingGapError, match=r"source lg: lg\[0\] offsets went backwards: landed up to 5, broker ends at 2"
    ):
        land_bronze(spark, config, "lg")
    assert main_snapshot(spark) == snapshot
    accepting = source_config("lg", landing={"accept_gaps": True})
    result = land_bronze(spark, accepting, "lg")
    assert result.records == 2 and [g.kind for g in result.gaps] == ["offsets_went_backwards"]
    gaps = of_source(spark, BRONZE_LANDING_GAPS, "lg", "topic, `partition`, kind, first_offset, end_offset")
    assert [tuple(g) for g in gaps] == [("lg", 0, "offsets_went_backwards", 5, 2)]
    values = sorted(bytes(r[0]) for r in of_source(spark, BRONZE_MESSAGES, "lg", "value"))
    assert values == [b"new0", b"new1", b"old0", b"old1", b"old2", b"old3", b"old4"]


def test_retention_gap_fails_or_is_recorded(spark, broker, source_config, monkeypatch):
    """Tansu cannot delete records (DeleteRecords crashes it): the broker's low watermark is moved
    past what was landed at the planning level, with the real broker behind everything else."""
    broker.create_topics(["lr"], partitions=1)
    produce(broker.bootstrap, [Message("lr", 0, None, b"r%d" % i) for i in range(10)])
    config = source_config("lr", landing={"max_records_per_run": 3})
    assert land_bronze(spark, config, "lr").records == 3
    real = landing.broker_watermarks

    def retention_moved_low_watermark(source):
        marks, starts = real(source)
        return {tp: (6, high) for tp, (_, high) in marks.items()}, starts

    monkeypatch.setattr(landing, "broker_watermarks", retention_moved_low_watermark)
    with pytest.raises(LandingGapError, match=r"lr\[0\] offsets 3..5 were deleted by Kafka before landing"):
        land_bronze(spark, config, "lr")
    accepting = source_config("lr", landing={"accept_gaps": True})
    assert land_bronze(spark, accepting, "lr").records == 4
    offsets = sorted(r[0] for r in of_source(spark, BRONZE_MESSAGES, "lr", "`offset`"))
    assert offsets == [0, 1, 2, 6, 7, 8, 9]
    gaps = of_source(spark, BRONZE_LANDING_GAPS, "lr", "kind, first_offset, end_offset")
    assert [tuple(g) for g in gaps] == [("retention", 3, 6)]


def test_a_second_run_of_the_same_source_cannot_commit_the_same_range(spark, broker, source_config):
    broker.create_topics(["lx"], partitions=1)
    messages = [Message("lx", 0, b"k%d" % i, b"v%d" % i) for i in range(6)]
    produce(broker.bootstrap, messages)
    config = source_config("lx")
    source = config.source("lx")
    ensure_tables(spark, "bronze")
    # run A plans and reads ...
    base = main_snapshot(spark)
    plan, _ = landing.plan_run(spark, source)
    rows_a = landing.read_records(spark, source, plan.ranges, "runA").drop("record_bytes", "stopped_early").cache()
    assert rows_a.count() == 6
    # ... run B lands the same range and commits first ...
    assert land_bronze(spark, config, "lx").records == 6
    # ... so run A's commit is refused and publishes nothing
    with pytest.raises(ConcurrentLandingError):
        commit_batch(
            spark,
            rows_a,
            base,
            {
                landing.SUMMARY_SOURCE: "lx",
                landing.SUMMARY_BATCH: "runA",
                landing.SUMMARY_OFFSETS: "{}",
                landing.SUMMARY_RANGES: "[]",
            },
            "lx",
        )
    assert bronze_records(spark, "lx") == expected_records(messages)
    assert [r[0] for r in spark.sql(f"SELECT name FROM {BRONZE_MESSAGES}.refs").collect()] == ["main"]
