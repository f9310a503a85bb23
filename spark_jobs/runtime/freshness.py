"""What the DAGs alert with: how fresh a source's gold is, and one log line per failed task.

Freshness is the age of the source's consistent timestamp (what gold is published up to), in TiDB time:
a TiDB timestamp's upper bits are its physical time in milliseconds. Beyond `freshness.warn_after` the check
warns, beyond `freshness.error_after` (when set) the task fails; a source with no consistent timestamp yet warns.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from spark_jobs.config import FreshnessSettings
from spark_jobs.errors import cause_line
from spark_jobs.runtime.results import Result

log = logging.getLogger(__name__)

TSO_PHYSICAL_SHIFT = 18  # a TiDB timestamp is (physical milliseconds << 18) | logical counter
OK, WARN, ERROR = "ok", "warn", "error"


@dataclass(frozen=True)
class FreshnessCheck(Result):
    source: str
    state: str  # ok | warn | error
    consistent_ts: int | None
    age: timedelta | None  # now minus the consistent timestamp's physical time

    def xcom(self) -> dict[str, Any]:
        age = self.age.total_seconds() if self.age is not None else None
        return {"state": self.state, "consistent_ts": self.consistent_ts, "age_seconds": age}

    def line(self) -> str:
        if self.age is None:
            return f"source {self.source}: freshness {self.state}: no consistent timestamp yet"
        return (
            f"source {self.source}: freshness {self.state}: gold is consistent as of TiDB ts {self.consistent_ts}, "
            f"{_duration_text(self.age)} ago"
        )


def tso_millis(ts: int) -> int:
    return ts >> TSO_PHYSICAL_SHIFT


def check_freshness(
    source: str, consistent_ts: int | None, now_millis: int, limits: FreshnessSettings
) -> FreshnessCheck:
    """The freshness state of a source whose gold is consistent as of `consistent_ts` (None: nothing yet)."""
    if consistent_ts is None:
        return FreshnessCheck(source, WARN, None, None)
    age = timedelta(milliseconds=max(0, now_millis - tso_millis(consistent_ts)))
    state = ERROR if limits.error is not None and age > limits.error else WARN if age > limits.warn else OK
    return FreshnessCheck(source, state, consistent_ts, age)


def dbt_freshness_vars(limits: FreshnessSettings) -> dict[str, int | None]:
    """The same limits for `dbt source freshness` on silver (whole minutes, rounded up; None: no error level)."""

    def minutes(limit: timedelta | None) -> int | None:
        return None if limit is None else max(1, math.ceil(limit.total_seconds() / 60))

    return {"freshness_warn_minutes": minutes(limits.warn), "freshness_error_minutes": minutes(limits.error)}


def _duration_text(age: timedelta) -> str:
    seconds = int(age.total_seconds())
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


def log_task_failure(context, source: str) -> str:
    """Airflow's on_failure_callback: ONE line with the task, the source and the cause (the exception's
    first line). Returns the line."""
    ti = context.get("ti")
    task = f"{ti.dag_id}.{ti.task_id}" if ti is not None else "unknown task"
    if ti is not None and getattr(ti, "map_index", -1) not in (-1, None):
        task += f"[{ti.map_index}]"
    exception = context.get("exception")
    cause = cause_line(exception) if exception is not None else "no exception recorded"
    line = f"ticdc-lake alert: task {task} failed for source {source}: {cause}"
    log.error(line)
    return line


def failure_callback(source: str):
    """An on_failure_callback for tasks of `source` (`all` for tasks over every source)."""

    def callback(context) -> None:
        log_task_failure(context, source)

    return callback
