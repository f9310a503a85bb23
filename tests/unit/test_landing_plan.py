"""Landing plans from broker metadata: where each partition resumes, caps, new partitions, gaps.

Retention gaps and re-created topics are tested here with metadata as input: the embedded broker
(Tansu) cannot delete records (DeleteRecords crashes it) nor add partitions.
"""

from spark_jobs.bronze.plan import Gap, OffsetRange, plan_landing


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
