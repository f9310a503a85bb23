"""What a step returns: a dataclass of plain fields that Airflow passes on as XCom (`xcom()`, JSON) and the
command line prints (`lines()`)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def plain(value: Any) -> Any:
    """`value` as JSON can hold it: dataclasses and mappings as dicts (keys as text; a tuple key joined with
    dots), sequences as lists, dates as ISO text, paths as text."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {(".".join(map(str, k)) if isinstance(k, tuple) else str(k)): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(v) for v in value]
    if isinstance(value, dt.date | dt.datetime):
        return value.isoformat()
    if isinstance(value, Path):
        return str(value)
    return value


class Result:
    """A step's result (mixed into the layers' result dataclasses)."""

    def xcom(self) -> dict[str, Any]:
        """The result as a DAG task returns it."""
        return plain(self)

    def lines(self) -> list[str]:
        """What `ticdc-lake` prints of it (the log has the detail)."""
        return []


class Phases(dict[str, float]):
    """Seconds a run spent per phase (landing: setup, plan, read_write, commit, bookkeeping; gold: state, plan,
    models, dbt, record), for its log line and the benchmarks."""

    @contextmanager
    def timed(self, phase: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self[phase] = self.get(phase, 0.0) + time.monotonic() - started

    def line(self) -> str:
        return ", ".join(f"{phase} {seconds:.1f}s" for phase, seconds in self.items())
