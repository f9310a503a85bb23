"""What one landing run takes from Kafka: offset ranges per partition, capped, with gaps found.

Pure planning over broker metadata (no Spark, no Kafka client), so that new partitions, retention
gaps and topics re-created can be tested with metadata as input.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

TopicPartition = tuple[str, int]
OWN_TASK_RECORDS = 10_000  # a range of fewer records is read in less time than a Spark task of its own costs


@dataclass(frozen=True)
class OffsetRange:
    topic: str
    partition: int
    start: int  # first offset to land
    end: int  # one past the last offset to land

    @property
    def count(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class Gap:
    """Offsets the pipeline never landed and Kafka no longer has (retention), or offsets gone backwards."""

    topic: str
    partition: int
    kind: str  # "retention" | "offsets_went_backwards"
    start: int
    end: int

    def describe(self) -> str:
        if self.kind == "retention":
            return f"{self.topic}[{self.partition}] offsets {self.start}..{self.end - 1} were deleted by Kafka before landing"
        return f"{self.topic}[{self.partition}] offsets went backwards: landed up to {self.start}, broker ends at {self.end} (topic re-created?)"


@dataclass(frozen=True)
class LandingPlan:
    ranges: list[OffsetRange]
    next_offsets: dict[TopicPartition, int]  # where each partition stands after this run commits
    gaps: list[Gap]

    @property
    def records(self) -> int:
        return sum(r.count for r in self.ranges)


def start_offsets(
    watermarks: dict[TopicPartition, tuple[int, int]], start: str, at_start: dict[TopicPartition, int]
) -> dict[TopicPartition, int]:
    """Where each partition starts if it never landed, by the source's `landing.start`: `earliest` (the low
    watermark), `latest` (the high one) or epoch milliseconds (`at_start`: the broker's first offset at or
    after that time; none, offset -1, when every record is older: the high watermark)."""
    if start == "latest":
        return {tp: high for tp, (_, high) in watermarks.items()}
    if start.isdigit():
        return {tp: high if at_start[tp] < 0 else at_start[tp] for tp, (_, high) in watermarks.items()}
    return {tp: low for tp, (low, _) in watermarks.items()}


def plan_landing(
    committed: dict[TopicPartition, int],
    watermarks: dict[TopicPartition, tuple[int, int]],
    start_offsets: dict[TopicPartition, int],
    max_records: int,
) -> LandingPlan:
    """Ranges from where the last commit ended up to the high watermark, at most `max_records` in all.

    committed: next offset to land per partition already landed; watermarks: (low, high) per
    partition the broker has now; start_offsets: where a partition never landed starts (from the
    source's `start` setting). The cap is shared fairly: every partition gets its turn.
    """
    gaps: list[Gap] = []
    wanted: dict[TopicPartition, tuple[int, int]] = {}
    for tp, (low, high) in sorted(watermarks.items()):
        begin = committed.get(tp)
        if begin is None:
            begin = max(start_offsets.get(tp, low), low)
        elif begin > high:
            gaps.append(Gap(tp[0], tp[1], "offsets_went_backwards", begin, high))
            begin = low
        elif begin < low:
            gaps.append(Gap(tp[0], tp[1], "retention", begin, low))
            begin = low
        wanted[tp] = (begin, high)
    remaining = max_records
    ranges: list[OffsetRange] = []
    pending = {tp: (b, e) for tp, (b, e) in wanted.items() if e > b}
    while remaining > 0 and pending:
        share = max(1, remaining // len(pending))
        for tp in list(pending):
            b, e = pending[tp]
            take = min(e - b, share, remaining)
            if take <= 0:
                continue
            ranges.append(OffsetRange(tp[0], tp[1], b, b + take))
            remaining -= take
            if b + take >= e:
                del pending[tp]
            else:
                pending[tp] = (b + take, e)
    merged: dict[TopicPartition, OffsetRange] = {}
    for r in ranges:
        tp = (r.topic, r.partition)
        merged[tp] = OffsetRange(r.topic, r.partition, merged[tp].start, r.end) if tp in merged else r
    next_offsets = dict(committed)
    for tp, (b, _) in wanted.items():
        next_offsets[tp] = merged[tp].end if tp in merged else b
    return LandingPlan(sorted(merged.values(), key=lambda r: (r.topic, r.partition)), next_offsets, gaps)


def task_groups(ranges: list[OffsetRange], slots: int) -> list[list[OffsetRange]]:
    """The ranges as Spark tasks: no two ranges of `OWN_TASK_RECORDS` or more share one, smaller ones do, so
    that a run touching many partitions with a few records each starts as many tasks as Spark runs at once
    (`slots`), not one per partition. Largest range first, each to the task with the fewest records so far;
    within a task, topic and partition order."""
    own = sum(1 for r in ranges if r.count >= OWN_TASK_RECORDS)
    tasks = min(len(ranges), max(slots, own, 1))
    groups: list[list[OffsetRange]] = [[] for _ in range(tasks)]
    loads = [(0, i) for i in range(tasks)]
    for r in sorted(ranges, key=lambda r: (-r.count, r.topic, r.partition)):
        load, i = heapq.heappop(loads)
        groups[i].append(r)
        heapq.heappush(loads, (load + r.count, i))
    return [sorted(g, key=lambda r: (r.topic, r.partition)) for g in groups]
