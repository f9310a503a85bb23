"""A failed Spark job must not leave a closed Python worker in the pool for the next job (Spark 3.5 destroys a
killed task's worker after `spark.python.task.killTimeout`, even one the task has already given back to the pool;
docs/environment.md, "A killed task's Python worker")."""

from __future__ import annotations

import os
import pathlib
import time

import pytest
from pyspark import TaskContext

pytestmark = pytest.mark.e2e

SIBLING_SECONDS = 8  # longer than Spark's default timeout (2 s) plus its monitor's poll (2 s)


def test_the_python_job_after_a_failed_one_gets_live_workers(spark, tmp_path):
    idle = str(tmp_path / "first-worker-idle")

    def fail_partition_zero(batches):
        """Partition 0 fails once partition 1's first worker is back in the pool; partition 1 passes its rows on."""
        if TaskContext.get().partitionId() == 0:
            deadline = time.monotonic() + 60
            while not os.path.exists(idle) and time.monotonic() < deadline:
                time.sleep(0.05)
            raise ValueError("partition 0 fails")
        yield from batches

    def hold_the_task(batches):
        """A second Python stage of the same task: once it has read every row, the first stage's worker is idle
        in the pool, and the task runs on (killed when partition 0 fails) for SIBLING_SECONDS."""
        rows = list(batches)
        pathlib.Path(idle).touch()
        time.sleep(SIBLING_SECONDS)
        yield from rows

    with pytest.raises(Exception, match="partition 0 fails"):
        spark.range(0, 100, 1, 2).mapInArrow(fail_partition_zero, "id long").mapInArrow(
            hold_the_task, "id long"
        ).collect()
    # by then Spark's monitor has destroyed the idle worker (with the 2 s default), or the sibling has ended
    time.sleep(SIBLING_SECONDS)
    for _ in range(3):  # the pool hands out its idle workers in turn: every one of them must be alive
        assert spark.range(0, 10, 1, 2).mapInArrow(lambda batches: batches, "id long").count() == 10
