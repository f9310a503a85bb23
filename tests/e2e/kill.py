"""What the kill loops share: a change stream cut into slices, and one `ticdc-lake` process killed at a moment of
its own run.

Each process is a real `ticdc-lake` (its own Spark JVM) on a lakehouse directory of the test's own, so a killed JVM
never shares the embedded metastore with the test session's. What the tables hold afterwards is read in a process
of its own (`python -m tests.e2e.<module> ...`), the only one that may open that metastore then.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from spark_jobs.config import RuntimeSettings, SparkSettings
from ticdc_devkit.simulator.model import Message, Watermark
from ticdc_devkit.simulator.stream import EXTENSION_OPTIONS, encode_stream
from ticdc_devkit.simulator.workload import Workload

RUN_TIMEOUT_SECONDS = 900.0
# Kills per loop. Each costs a JVM start and the work up to its moment, so the moments are spread evenly over
# the phase's window (`Moments`) instead of drawn at random: six of them reach every part of it.
KILLS = int(os.environ.get("TICDC_KILL_LOOP_ITERATIONS", "6"))
BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]


def own_runtime(local_dir: Path) -> RuntimeSettings:
    """The runtime of a lakehouse of a test's own, for `ticdc-lake` processes (small Spark: they run beside the
    test session's)."""
    return RuntimeSettings(
        local_dir=str(local_dir), spark=SparkSettings(master="local[2]", driver_memory="1g", shuffle_partitions=2)
    )


def slices(workload: Workload, count: int, rng: random.Random, topic: str) -> list[list[Message]]:
    """The stream cut between transactions at `count - 1` random points, each slice ending with a watermark
    (TiCDC sends one every second), so that every run has rows to decode and publish. One partition: the slices
    land in commit order, and only the kills could make the tables differ."""
    events = workload.events
    stamps = [getattr(e, "commit_ts", None) for e in events]
    between = [i for i in range(1, len(events)) if None not in stamps[i - 1 : i + 1] and stamps[i - 1] < stamps[i]]
    cuts = [0, *sorted(rng.sample(between, count - 1)), len(events)]
    return [
        encode_stream(
            "canal-json",
            [*events[start:end], *([Watermark(stamps[end - 1])] if end < len(events) else [])],
            topic=topic,
            options=EXTENSION_OPTIONS["canal-json"],
        )
        for start, end in itertools.pairwise(cuts)
    ]


class Moments:
    """`count` kill delays spread over a phase: one at a random point of each of `count` equal parts of it, in a
    random order, so a short loop still kills early, midway and late. The phase's length is a guess at first; a
    run that finishes before its kill shows how long the phase took on this machine, and later delays take the
    same fractions of that (a faster machine must not turn the kills into clean runs)."""

    def __init__(self, rng: random.Random, count: int, window: float) -> None:
        fractions = [(i + rng.random()) / count for i in range(count)]
        rng.shuffle(fractions)
        self.fractions = iter(fractions)
        self.window = window

    def next_delay(self) -> float:
        return next(self.fractions) * self.window

    def phase_took(self, seconds: float) -> None:
        self.window = min(self.window, seconds)


def stderr_shows(output: Path, text: str) -> Callable[[], bool]:
    """A start signal: the process's log (its stderr, in `output`) has shown `text`."""
    return lambda: output.exists() and text in output.read_text(errors="replace")


def run(
    command: list[str], output: Path, started: Callable[[], bool] | None = None, moments: Moments | None = None
) -> str:
    """One `ticdc-lake` process, its stderr in `output`; with `moments`, killed (with its JVM) the next of their
    delays after `started()` first holds, and a run that finishes first tells them how long its phase took.
    Returns "killed" or "finished"; a run that fails on its own fails the test."""
    begun, phase_began, kill_at = time.monotonic(), None, None
    with output.open("wb") as stderr:
        process = subprocess.Popen(
            [str(BIN / "ticdc-lake"), *command],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
        )
        while process.poll() is None:
            now = time.monotonic()
            if moments is not None and phase_began is None and started is not None and started():
                phase_began, kill_at = now, now + moments.next_delay()
            if (kill_at is not None and now >= kill_at) or now - begun > RUN_TIMEOUT_SECONDS:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                _wait_for_group(process.pid)
                assert kill_at is not None, (
                    f"ticdc-lake {command[0]} ran over {RUN_TIMEOUT_SECONDS}s: {output.read_text()}"
                )
                return "killed"
            time.sleep(0.1)
    _wait_for_group(process.pid)
    if process.returncode != 0:
        raise AssertionError(
            f"ticdc-lake {command[0]} failed (exit {process.returncode}): {output.read_text()[-3000:]}"
        )
    if moments is not None and phase_began is not None:
        moments.phase_took(time.monotonic() - phase_began)
    return "finished"


def _wait_for_group(group: int, seconds: float = 120.0) -> None:
    """The run ends when its JVM does: Python exits first, and the JVM it started (in the same process group)
    then runs its shutdown hooks, which remove its Spark scratch; a check made before that sees the scratch of
    a run that finished cleanly (seen in CI). A zombie counts as ended (whether it is reaped is up to PID 1)."""
    deadline = time.monotonic() + seconds
    while _running_in_group(group):
        if time.monotonic() > deadline:
            raise AssertionError(f"the processes of a ticdc-lake run (group {group}) still ran {seconds}s after it")
        time.sleep(0.1)


def _running_in_group(group: int) -> bool:
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended while we looked
        if fields[0] != "Z" and int(fields[2]) == group:
            return True
    return False


def check_in_own_process(module: str, *args: str) -> None:
    """Run `python -m module args...`, the check that reads the killed lakehouse; its failure fails the test."""
    check = subprocess.run([str(BIN / "python"), "-m", module, *args], capture_output=True, text=True, cwd=REPO)
    assert check.returncode == 0, f"{module} {' '.join(args)} failed:\n{check.stderr[-5000:]}"
