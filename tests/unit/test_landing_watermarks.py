"""The broker's watermarks in batched requests: one metadata request and one ListOffsets call per offset kind,
whatever the partition count, with the answers and start offsets a per-partition lookup gave. An admin client
stand-in records the calls; the unreachable broker is a closed port on loopback."""

from __future__ import annotations

import logging
from concurrent.futures import Future
from types import SimpleNamespace

import pytest
from confluent_kafka import IsolationLevel, KafkaError, KafkaException
from confluent_kafka.admin import OffsetSpec

from spark_jobs.bronze.kafka_reader import list_offsets
from spark_jobs.bronze.land import LandingResult, partition_watermarks, run_lines
from spark_jobs.bronze.plan import OffsetRange, plan_landing
from spark_jobs.config import KafkaSettings, LandingSettings, SourceSettings


class StandInAdmin:
    """Answers `list_topics` and `list_offsets` from `offsets` ({(topic, partition): (low, high, at_time)});
    `failing` partitions answer with a KafkaException."""

    def __init__(self, offsets: dict, failing: tuple = ()):
        self.offsets, self.failing = offsets, failing
        self.calls: list[tuple[str, int, object]] = []
        self.timeouts: set[float] = set()

    def list_topics(self, timeout):
        self.calls.append(("list_topics", 0, None))
        self.timeouts.add(timeout)
        topics: dict[str, dict[int, None]] = {}
        for topic, partition in self.offsets:
            topics.setdefault(topic, {})[partition] = None
        return SimpleNamespace(topics={t: SimpleNamespace(error=None, partitions=parts) for t, parts in topics.items()})

    def list_offsets(self, wanted, isolation_level, request_timeout):
        self.timeouts.add(request_timeout)
        kind = type(next(iter(wanted.values()))).__name__
        self.calls.append((kind, len(wanted), isolation_level))
        answers = {}
        for tp in wanted:
            low, high, at_time = self.offsets[(tp.topic, tp.partition)]
            future: Future = Future()
            if (tp.topic, tp.partition) in self.failing:
                future.set_exception(KafkaException(KafkaError(KafkaError._TIMED_OUT, "timed out")))
            else:
                offset = {"EarliestSpec": low, "LatestSpec": high, "TimestampSpec": at_time}[kind]
                future.set_result(SimpleNamespace(offset=offset))
            answers[tp] = future
        return answers


def source(start: str = "earliest", timeout_seconds: int = 30, **topics) -> SourceSettings:
    return SourceSettings(
        name="wm",
        protocol="canal-json",
        kafka=KafkaSettings(bootstrap_servers="127.0.0.1:9", timeout_seconds=timeout_seconds),
        landing=LandingSettings(start=start),
        **(topics or {"topic_pattern": r"wm_\d+"}),
    )


# 300 topics of 2 partitions: partition 0 holds offsets 3..9, partition 1 is empty at 5
BROKER = {(f"wm_{i:03d}", p): ((3, 10, 4) if p == 0 else (5, 5, -1)) for i in range(300) for p in (0, 1)}


def test_every_partition_in_one_metadata_request_and_one_call_per_offset_kind():
    admin = StandInAdmin({**BROKER, ("other", 0): (0, 1, 0), ("__consumer_offsets", 0): (0, 1, 0)})
    watermarks, starts = partition_watermarks(admin, source(), {})
    assert admin.calls == [
        ("list_topics", 0, None),
        ("EarliestSpec", 600, IsolationLevel.READ_COMMITTED),
        ("LatestSpec", 600, IsolationLevel.READ_COMMITTED),
    ]
    assert watermarks == {tp: (low, high) for tp, (low, high, _) in BROKER.items()}
    assert starts == {tp: low for tp, (low, _, _) in BROKER.items()}


def test_start_latest_and_start_at_a_time():
    admin = StandInAdmin(BROKER)
    _, starts = partition_watermarks(admin, source("latest"), {})
    assert starts == {tp: high for tp, (_, high, _) in BROKER.items()} and len(admin.calls) == 3

    admin = StandInAdmin(BROKER)
    _, starts = partition_watermarks(admin, source("1700000000000"), {})
    assert [kind for kind, _, _ in admin.calls] == ["list_topics", "EarliestSpec", "LatestSpec", "TimestampSpec"]
    # the first offset at or after the time, or (-1: every record is older) the high watermark
    assert starts == {tp: 4 if tp[1] == 0 else 5 for tp in BROKER}


def test_every_request_waits_the_sources_kafka_timeout():
    admin = StandInAdmin(BROKER)
    partition_watermarks(admin, source(timeout_seconds=5), {})
    assert admin.timeouts == {5}


def test_the_consumers_isolation_level_is_kept():
    admin = StandInAdmin(BROKER)
    partition_watermarks(admin, source(), {"isolation.level": "read_uncommitted"})
    assert {level for _, _, level in admin.calls[1:]} == {IsolationLevel.READ_UNCOMMITTED}


def test_a_listed_topic_that_does_not_exist_is_skipped_with_a_warning(caplog):
    admin = StandInAdmin({("wm_a", 0): (0, 2, 0)})
    with caplog.at_level(logging.WARNING, logger="spark_jobs.bronze.land"):
        watermarks, _ = partition_watermarks(admin, source(topics=["wm_a", "wm_gone"]), {})
    assert watermarks == {("wm_a", 0): (0, 2)}
    assert caplog.messages == ["source wm: topic wm_gone does not exist (yet)"]

    nothing = StandInAdmin({("x", 0): (0, 1, 0)})
    assert partition_watermarks(nothing, source(), {}) == ({}, {})
    assert nothing.calls == [("list_topics", 0, None)]  # no partition, no offsets request


def test_a_partition_whose_lookup_failed_fails_the_lookup():
    admin = StandInAdmin(BROKER, failing=(("wm_007", 1),))
    with pytest.raises(KafkaException, match="timed out"):
        list_offsets(admin, sorted(BROKER), {"high": OffsetSpec.latest()}, {}, timeout=30)


def test_the_log_of_a_run_over_many_partitions_is_two_lines():
    ranges = [OffsetRange(f"t{i:02d}", 0, 0, i + 1) for i in range(40)]
    watermarks = {(r.topic, 0): (0, r.end) for r in ranges} | {(f"idle{i}", 0): (0, 0) for i in range(960)}
    plan = plan_landing({}, watermarks, {}, 10_000)
    per_partition = {(r.topic, 0): r.count for r in ranges}
    result = LandingResult(
        source="wm",
        batch_id="b1",
        records=sum(per_partition.values()),
        bytes=12_345,
        per_partition=per_partition,
        lag={tp: 0 for tp in watermarks} | {("t07", 0): 3},
        gaps=[],
        seconds=2.0,
        phases={"plan": 0.5, "read_write": 1.5},
    )
    totals, detail = run_lines(result, plan, 2.5)
    assert totals == (
        "source wm: landed 820 records (12345 bytes) in batch b1 from 40 of 1000 partitions, largest lag 3 "
        "(t07[0]), 328 records/s, 2.5s (plan 0.5s, read_write 1.5s)"
    )
    assert detail.startswith("source wm: most records: t39[0] 40 from offset 0, t38[0] 39 from offset 0, ")
    assert detail.count(" from offset ") == 10
    assert detail.endswith("t30[0] 31 from offset 0 ... and 30 more partitions (each in bronze.landing_runs)")
