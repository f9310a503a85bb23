"""A failed Spark job must not leave a closed Python worker in the pool for the next job (Spark 3.5 destroys a
killed task's worker after `spark.python.task.killTimeout`, even one the task has already given back to the pool;
docs/environment.md, "A killed task's Python worker")."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.e2e

SIBLING_SECONDS = 8  # longer than Spark's default timeout (2 s) plus its monitor's poll (2 s)


def _fail_partition_zero(batches):
    """Partition 0 fails after a second; partition 1 passes its rows on at once, so its worker is soon idle."""
    import time

    from pyspark import TaskContext

    if TaskContext.get().partitionId() == 0:
        time.sleep(1)
        raise ValueError("partition 0 fails")
    yield from batches


def _hold_the_task(batches):
    """A second Python stage of the same task: partition 1's task runs on, killed, after its first worker is idle."""
    import time

    rows = list(batches)
    time.sleep(SIBLING_SECONDS)
    yield from rows


def _pass(batches):
    yield from batches


def test_the_python_job_after_a_failed_one_gets_live_workers(spark):
    with pytest.raises(Exception, match="partition 0 fails"):
        spark.range(0, 100, 1, 2).mapInArrow(_fail_partition_zero, "id long").mapInArrow(
            _hold_the_task, "id long"
        ).collect()
    for _ in range(3):  # the pool hands out its idle workers in turn: every one of them must be alive
        assert spark.range(0, 10, 1, 2).mapInArrow(_pass, "id long").count() == 10
