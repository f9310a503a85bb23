"""Where silver places a row without a commit ts (Avro's deletes): `silver.decode.Placement`, message by message."""

from __future__ import annotations

from spark_jobs.silver.decode import Placement

PARTITION = ("billing", 1)


def place(placement: Placement, held: list, messages: list[tuple[str, int | None]]) -> None:
    """Feed (message, commit ts or None for a delete) in order, as the decoder does, into the batch's `held`."""
    for row, commit_ts in messages:
        if commit_ts is None:
            held.append(placement.inferred(PARTITION, (row,), None, len(held), held))
        else:
            placement.stamped(PARTITION, (row,), commit_ts)
            held.append(commit_ts)


def test_deletes_sent_again_with_the_change_after_them_take_the_places_they_had():
    """TiCDC sends the partition's last messages again: deletes and the insert after them, whose commit ts equals
    the change before the copies. The copies must keep the first deletes' commit ts, not land after that insert
    (where a row inserted again at that commit would be deleted)."""
    held: list = []
    first = [("insert a", 100), ("delete b", None), ("delete c", None), ("insert d", 200)]
    place(Placement(), held, first + first[1:])
    assert held == [100, 101, 102, 200, 101, 102, 200]


def test_a_delete_between_changes_of_one_commit_stays_in_that_commit():
    """A delete between two changes of one transaction (one commit ts) is the partition's own: it stays one
    tick after the change before it, and the new change after it at the same ts does not make it a copy."""
    held: list = []
    place(Placement(), held, [("insert a", 100), ("delete b", None), ("insert c", 100), ("insert d", 200)])
    assert held == [100, 101, 100, 200]


def test_deletes_sent_again_before_an_older_change_take_the_places_they_had():
    """The copies come before a copy of a change older than the one before them (the usual restart); the
    partition's own delete before them stays where it was."""
    held: list = []
    first = [("insert a", 100), ("delete b", None), ("insert c", 150), ("insert d", 200), ("delete e", None)]
    place(Placement(), held, first + first[1:3])
    assert held == [100, 101, 150, 200, 201, 101, 150]


def test_a_delete_and_its_copy_after_the_same_change_sent_again_keep_one_place():
    """The copies follow a partition's own delete that waits on the same change: only the copies are matched."""
    held: list = []
    first = [("insert a", 100), ("delete b", None), ("insert c", 150), ("delete e", None)]
    place(Placement(), held, first + first[1:3])
    assert held == [100, 101, 150, 151, 101, 150]
