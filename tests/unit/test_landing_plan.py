"""Landing plans from broker metadata: where each partition resumes or starts, caps, new partitions, gaps,
and how the ranges are shared among Spark tasks.

Retention gaps and re-created topics are tested here with metadata as input: the embedded broker
(Tansu) cannot delete records (DeleteRecords crashes it) nor add partitions.
"""

from spark_jobs.bronze.plan import OWN_TASK_RECORDS, Gap, OffsetRange, plan_landing, start_offsets, task_groups


def test_resumes_where_the_last_commit_ended_and_picks_up_new_partitions():
    plan = plan_landing(
        committed={("t", 0): 5},
        watermarks={("t", 0): (0, 9), ("t", 1): (0, 4)},
        start_offsets={("t", 1): 0},
        max_records=100,
    )
    assert plan.ranges == [OffsetRange("t", 0, 5, 9), OffsetRange("t", 1, 0, 4)]
    assert plan.next_offsets == {("t", 0): 9, ("t", 1): 4}
    assert plan.gaps == [] and plan.records == 8


def test_cap_is_shared_and_the_next_run_continues():
    marks = {("t", 0): (0, 100), ("t", 1): (0, 10)}
    first = plan_landing({}, marks, {}, max_records=30)
    assert first.records == 30
    assert first.next_offsets == {("t", 0): 20, ("t", 1): 10}
    second = plan_landing(first.next_offsets, marks, {}, max_records=30)
    assert second.ranges == [OffsetRange("t", 0, 20, 50)]


def test_empty_topic_and_nothing_new():
    assert plan_landing({("t", 0): 7}, {("t", 0): (7, 7), ("e", 0): (0, 0)}, {}, 10).ranges == []


def test_retention_gap_and_offsets_going_backwards_are_reported():
    plan = plan_landing({("t", 0): 3, ("r", 0): 50}, {("t", 0): (10, 20), ("r", 0): (0, 5)}, {}, 100)
    assert Gap("t", 0, "retention", 3, 10) in plan.gaps
    assert Gap("r", 0, "offsets_went_backwards", 50, 5) in plan.gaps
    assert (
        "t[0] offsets 3..9 were deleted" in plan.gaps[1].describe()
        or "t[0] offsets 3..9 were deleted" in plan.gaps[0].describe()
    )
    assert plan.next_offsets == {("t", 0): 20, ("r", 0): 5}


def test_new_source_starting_at_latest_lands_nothing_old():
    plan = plan_landing({}, {("t", 0): (0, 40)}, {("t", 0): 40}, 100)
    assert plan.ranges == [] and plan.next_offsets == {("t", 0): 40}


def test_start_offsets_by_the_sources_start_setting():
    marks = {("t", 0): (2, 9), ("t", 1): (0, 0)}
    assert start_offsets(marks, "earliest", {}) == {("t", 0): 2, ("t", 1): 0}
    assert start_offsets(marks, "latest", {}) == {("t", 0): 9, ("t", 1): 0}
    # at a time: the broker's first offset at or after it, or the high watermark when every record is older
    assert start_offsets(marks, "1700000000000", {("t", 0): 5, ("t", 1): -1}) == {("t", 0): 5, ("t", 1): 0}


def test_small_ranges_share_tasks_and_large_ones_have_their_own():
    small = [OffsetRange(f"t{i:02d}", 0, 0, 1 + i % 3) for i in range(40)]
    groups = task_groups(small, slots=2)
    assert len(groups) == 2
    assert sorted(r.topic for g in groups for r in g) == [r.topic for r in small]
    assert abs(sum(r.count for r in groups[0]) - sum(r.count for r in groups[1])) <= 1
    assert all(g == sorted(g, key=lambda r: (r.topic, r.partition)) for g in groups)

    large = [OffsetRange("big", p, 0, OWN_TASK_RECORDS + p) for p in range(3)]
    groups = task_groups(large + small, slots=2)
    assert len(groups) == 3
    assert sorted(sum(1 for r in g if r.topic == "big") for g in groups) == [1, 1, 1]
    assert sum(len(g) for g in groups) == 43

    assert task_groups(small[:1], slots=8) == [small[:1]]
    assert task_groups([], slots=2) == []
