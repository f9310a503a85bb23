"""One writer per source at a time: the ingest steps and the rebuilds of a source take its lock, so a run of
the ingest DAG triggered while a rebuild runs waits for it (and the other way round), instead of both writing.

A thread that already holds a source's lock takes it again at no cost (`ticdc-lake run` holds it across its
steps, each of which takes it too). The lock is an exclusive `flock` on `<local_dir>/locks/<source>.lock`, taken
before the Spark session opens. The kernel drops it when its process ends, even by SIGKILL, so a killed run never
leaves a stale lock. The file says who holds it, for the waiting side's log. In cluster mode `runtime.local_dir`
must be a directory every Airflow worker shares.

A process lock (`hold_for_process`) is the same kind of lock, held from when it is taken until the process ends:
in embedded mode, the metastore's (`spark_session.hold_embedded_metastore`), since Derby admits one JVM at a time.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

log = logging.getLogger(__name__)

REPORT_EVERY_SECONDS = 60.0
CONTINUOUS_HOLDER = "continuous"  # how a continuous driver's holder name starts: it holds the lock while it runs
_HELD = threading.local()  # .paths: the lock files this thread holds


def lock_path(local_dir: Path, source: str) -> Path:
    return local_dir / "locks" / f"{source}.lock"


def _held_by(path: Path) -> dict:
    try:
        held = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return {}
    return held if isinstance(held, dict) else {}


def _holder(path: Path) -> str:
    held = _held_by(path)
    return f"{held.get('holder', 'another run')} (pid {held.get('pid', '?')}, since {held.get('since', '?')})"


@contextmanager
def source_lock(
    local_dir: Path, source: str, holder: str, poll_seconds: float = 0.5, unless_held_by: str | None = None
) -> Iterator[bool]:
    """Hold the source's lock for the block, waiting as long as another run holds it (logged when the wait
    starts, every minute while it lasts, and when it ends); yields True. With `unless_held_by`, a holder whose name
    starts with it is not waited for: the block runs at once without the lock, and the lock yields False."""
    path = lock_path(local_dir, source).resolve()
    held = _HELD.__dict__.setdefault("paths", set())
    if path in held:
        yield True
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as handle:
        if not _take(handle, path, f"source {source}", holder, poll_seconds, unless_held_by):
            yield False
            return
        held.add(path)
        try:
            yield True
        finally:
            held.discard(path)
            handle.seek(0)
            handle.truncate()
            handle.flush()
            fcntl.flock(handle, fcntl.LOCK_UN)


def _take(handle: IO[str], path: Path, what: str, holder: str, poll_seconds: float, unless_held_by: str | None) -> bool:
    """Wait for the exclusive lock on `handle` (logged when the wait starts, every minute while it lasts, and
    when it ends), then write who holds it; False, without waiting, where the holder's name starts with
    `unless_held_by`."""
    started = time.monotonic()
    reported = None
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if unless_held_by and str(_held_by(path).get("holder", "")).startswith(unless_held_by):
                return False
            now = time.monotonic()
            if reported is None or now - reported >= REPORT_EVERY_SECONDS:
                log.info("%s: %s waits for %s to finish", what, holder, _holder(path))
                reported = now
            time.sleep(poll_seconds)
    if reported is not None:
        log.info("%s: %s waited %.0fs; going on", what, holder, time.monotonic() - started)
    handle.seek(0)
    handle.truncate()
    since = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    handle.write(json.dumps({"holder": holder, "pid": os.getpid(), "since": since}))
    handle.flush()
    return True


_PROCESS_LOCKS: dict[Path, IO[str]] = {}  # the process locks this process holds, open until it ends
_PROCESS_LOCKS_TAKING = threading.Lock()  # flock's locks are per open file: one handle per path in a process


def hold_for_process(
    path: Path,
    what: str,
    holder: str,
    poll_seconds: float = 0.5,
    unless_held_by: str | None = None,
    on_taken: Callable[[], None] | None = None,
) -> bool:
    """Hold the exclusive lock on `path` from now until the process ends, waiting as long as another process
    holds it (logged as `source_lock` logs); a process that holds it already goes on at once. `on_taken` runs when
    this call took it, that is when every process that held it before has ended. False, without waiting, where
    the holder's name starts with `unless_held_by`."""
    path = path.resolve()
    with _PROCESS_LOCKS_TAKING:
        if path in _PROCESS_LOCKS:
            return True
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = path.open("a+")
        try:
            taken = _take(handle, path, what, holder, poll_seconds, unless_held_by)
        except BaseException:  # interrupted while waiting: nothing held, no handle left open
            handle.close()
            raise
        if not taken:
            handle.close()
            return False
        _PROCESS_LOCKS[path] = handle
    if on_taken is not None:
        on_taken()
    return True
