"""The source lock: a second holder waits (and says for whom), a killed holder leaves no stale lock; a process
lock is held until its process ends; and the rebuild command's table list."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from spark_jobs.errors import ConfigError
from spark_jobs.runtime import lock
from spark_jobs.runtime.lock import CONTINUOUS_HOLDER, hold_for_process, source_lock
from spark_jobs.steps.rebuilding import parse_tables


def test_a_second_holder_waits_until_the_first_is_done(tmp_path, caplog):
    order: list[str] = []
    held = threading.Event()

    def first():
        with source_lock(tmp_path, "shop", "rebuild gold"):
            held.set()
            time.sleep(1.5)
            order.append("first done")

    thread = threading.Thread(target=first)
    thread.start()
    held.wait(10)
    with (
        caplog.at_level(logging.INFO, logger="spark_jobs.runtime.lock"),
        source_lock(tmp_path, "shop", "ingest: land", poll_seconds=0.05),
    ):
        order.append("second in")
    thread.join()
    assert order == ["first done", "second in"]
    assert f"source shop: ingest: land waits for rebuild gold (pid {os.getpid()}" in caplog.text
    assert "ingest: land waited" in caplog.text


def test_other_sources_do_not_wait(tmp_path):
    with source_lock(tmp_path, "shop", "rebuild gold"):
        started = time.monotonic()
        with source_lock(tmp_path, "crm", "ingest: land"):
            assert time.monotonic() - started < 1


def test_a_continuous_driver_is_not_waited_for_where_asked(tmp_path):
    """Maintenance does not wait for a continuous driver, which holds the lock as long as it runs; it waits for
    any other run."""
    release, held = threading.Event(), threading.Event()

    def hold(holder: str) -> threading.Thread:
        def run():
            with source_lock(tmp_path, "shop", holder):
                held.set()
                release.wait(10)

        thread = threading.Thread(target=run)
        thread.start()
        held.wait(10)
        return thread

    driver = hold(f"{CONTINUOUS_HOLDER} shop")
    started = time.monotonic()
    with source_lock(tmp_path, "shop", "maintenance", unless_held_by=CONTINUOUS_HOLDER) as locked:
        assert locked is False and time.monotonic() - started < 1
    release.set()
    driver.join()

    release.clear()
    held.clear()
    run = hold("ingest: publish gold")
    threading.Timer(0.5, release.set).start()
    with source_lock(tmp_path, "shop", "maintenance", poll_seconds=0.05, unless_held_by=CONTINUOUS_HOLDER) as locked:
        assert locked is True and release.is_set()
    run.join()


def test_a_killed_holder_leaves_no_stale_lock(tmp_path):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time, pathlib\n"
            "from spark_jobs.runtime.lock import CONTINUOUS_HOLDER, source_lock\n"
            f"with source_lock(pathlib.Path({str(tmp_path)!r}), 'shop', 'ticdc-lake silver'):\n"
            "    print('held', flush=True)\n"
            "    time.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    done = threading.Event()

    def take():
        with source_lock(tmp_path, "shop", "ticdc-lake silver"):
            done.set()

    threading.Thread(target=take, daemon=True).start()
    assert done.wait(10), "the lock of a killed process was still held"


def _process_holding(path, holder: str, seconds: float) -> subprocess.Popen:
    """A process that takes the process lock on `path`, says so, and ends `seconds` later (or when killed)."""
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import logging, pathlib, sys, time\n"
            "from spark_jobs.runtime.lock import hold_for_process\n"
            "logging.basicConfig(level=logging.INFO, stream=sys.stdout, format='%(message)s')\n"
            f"hold_for_process(pathlib.Path({str(path)!r}), 'embedded metastore', {holder!r}, poll_seconds=0.05)\n"
            "print('held', time.time(), flush=True)\n"
            f"time.sleep({seconds})\n"
            "print('ending', time.time(), flush=True)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )


def test_a_process_lock_is_held_until_its_process_ends(tmp_path):
    """What a second process's Spark step does in embedded mode: it waits, saying for whom, until the process
    holding the metastore has ended, then takes it."""
    path = tmp_path / "metastore_db.lock"
    first = _process_holding(path, "publish gold shop", 2.0)
    assert first.stdout.readline().split()[0] == "held"
    second = _process_holding(path, "maintain", 0)
    lines = second.communicate(timeout=60)[0].splitlines()
    first_lines = first.communicate(timeout=60)[0].splitlines()
    assert lines[0].startswith(f"embedded metastore: maintain waits for publish gold shop (pid {first.pid}, since ")
    assert lines[1].startswith("embedded metastore: maintain waited ") and lines[1].endswith("s; going on")
    ended = float(first_lines[-1].split()[1])
    taken = float(lines[2].split()[1])
    assert lines[2].startswith("held") and taken >= ended, "the second process took the lock while the first ran"


def test_a_process_lock_held_by_a_continuous_driver_is_not_waited_for_where_asked(tmp_path, monkeypatch):
    """What a maintenance step does in embedded mode while a continuous driver holds the metastore: it goes on at
    once without the lock (the driver maintains the lakehouse itself), and waits for any other holder."""
    monkeypatch.setattr(lock, "_PROCESS_LOCKS", {})
    path = tmp_path / "metastore_db.lock"
    driver = _process_holding(path, f"{CONTINUOUS_HOLDER} shop", 30)
    try:
        assert driver.stdout.readline().split()[0] == "held"
        started = time.monotonic()
        assert hold_for_process(path, "embedded metastore", "maintain", unless_held_by=CONTINUOUS_HOLDER) is False
        assert time.monotonic() - started < 1 and not lock._PROCESS_LOCKS
    finally:
        driver.kill()
        driver.wait()
    taken = []
    assert hold_for_process(
        path, "embedded metastore", "maintain", unless_held_by=CONTINUOUS_HOLDER, on_taken=lambda: taken.append(1)
    )
    assert taken == [1] and list(lock._PROCESS_LOCKS) == [path.resolve()]
    assert hold_for_process(path, "embedded metastore", "maintain", on_taken=lambda: taken.append(2))
    assert taken == [1], "on_taken ran for a lock the process already held"
    lock._PROCESS_LOCKS.pop(path.resolve()).close()


def test_a_process_lock_is_taken_once_per_process(tmp_path, monkeypatch):
    monkeypatch.setattr(lock, "_PROCESS_LOCKS", {})
    path = tmp_path / "metastore_db.lock"
    hold_for_process(path, "embedded metastore", "tests")
    taken = threading.Event()
    thread = threading.Thread(target=lambda: (hold_for_process(path, "embedded metastore", "a thread"), taken.set()))
    thread.start()
    assert taken.wait(5), "a second thread of the holding process waited for its own process"
    thread.join()
    assert list(lock._PROCESS_LOCKS) == [path.resolve()]
    killed = _process_holding(path, "another process", 0)
    try:
        assert killed.stdout.readline().startswith("embedded metastore: another process waits for tests")
    finally:
        killed.kill()
        killed.wait()
        lock._PROCESS_LOCKS.pop(path.resolve()).close()
    after = _process_holding(path, "the next process", 0)
    assert after.communicate(timeout=30)[0].splitlines()[0].startswith("held"), "a closed process lock still held"


@pytest.mark.parametrize(
    ("text", "tables"),
    [
        (None, None),
        ("  ", None),
        ("shop.orders", {("shop", "orders")}),
        ("shop.orders, crm.items", {("shop", "orders"), ("crm", "items")}),
        ("`a.b`.`c,d`,shop.t", {("a.b", "c,d"), ("shop", "t")}),
        ("`we``ird`.`t`", {("we`ird", "t")}),
    ],
)
def test_rebuild_table_lists(text, tables):
    assert parse_tables(text) == (frozenset(tables) if tables is not None else None)


def test_a_table_without_its_database_is_refused():
    with pytest.raises(ConfigError, match=r"--table must be database\.table, got 'orders'"):
        parse_tables("orders")
