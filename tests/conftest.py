"""Session fixtures: one broker, one SparkSession, one migrated Airflow database for the whole run.

Everything lives under `.local/tests/run-<pid>/` in the checkout (git-ignored); a run removes the
directories of earlier runs that are no longer alive, never those of a run still going.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.jvm_archive import jvm_environment

REPO = Path(__file__).resolve().parent.parent
TEST_ROOT = REPO / ".local" / "tests"
TEST_HOME = TEST_ROOT / f"run-{os.getpid()}"

# Airflow reads its settings at import time: set them before anything imports it.
os.environ.update(
    {
        "AIRFLOW_HOME": str(TEST_HOME / "airflow"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW__API_AUTH__JWT_SECRET": "test-only-jwt-secret-" + "x" * 64,
        "DBT_SEND_ANONYMOUS_USAGE_STATS": "False",
        "TICDC_LAKE_HOME": str(TEST_HOME / "lake"),
        "TICDC_LAKE_CONFIG": str(TEST_HOME / "pipeline.yaml"),
    }
)
# Every Spark JVM the suite starts (its own, each `ticdc-lake` process of the kill loops, Airflow's tasks) runs
# small data for seconds to minutes, where C2's compilations cost more CPU than they save: C1 alone takes nearly
# half off a short run's JVM CPU on two cores (docs/environment.md). Only the JIT differs; what runs is the same.
# C1 alone would also shrink the code cache to 48 MB, which a long run's generated code fills ("Out of space in
# CodeCache"): it keeps the default's 240 MB. Where `make test` built the class archive, every JVM maps it
# (tests/jvm_archive.py), with the Iceberg runtime on its class path: half of a JVM start's CPU again.
for _name, _value in jvm_environment().items():
    os.environ.setdefault(_name, _value)

TEST_CONFIG = """
runtime:
  mode: embedded
  local_dir: {lake}
  spark:
    master: local[2]
    driver_memory: 3g
    shuffle_partitions: 4
sources:
  - name: shop
    protocol: canal-json
    topics: [shop_cdc]
    options:
      enable-tidb-extension: true
    kafka:
      bootstrap_servers: {bootstrap}
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_FILE_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report):
    """Seconds per test file (setup, call and teardown), for the table in docs/test-times.md."""
    _FILE_SECONDS[report.nodeid.split("::")[0]] = _FILE_SECONDS.get(report.nodeid.split("::")[0], 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    """The test files by the seconds they took, slowest first: what each file costs the suite."""
    if not _FILE_SECONDS:
        return
    terminalreporter.section("seconds per test file")
    for path, seconds in sorted(_FILE_SECONDS.items(), key=lambda item: -item[1]):
        terminalreporter.write_line(f"{seconds:8.1f}s {path}")


def _cost_rank(item: pytest.Item) -> int:
    """Where a test's file goes in the run: the loopback cluster and the kill loops (minutes each) first, then
    the other end-to-end tests, then the rest (seconds), so that `make test`'s workers, which take whole files in
    this order, end together rather than one running a long file alone at the end."""
    markers = {m.name for m in item.iter_markers()}
    return 0 if markers & {"cluster", "long"} else 1 if "e2e" in markers else 2


def pytest_collection_modifyitems(items):
    items.sort(key=_cost_rank)  # stable: a file's tests keep their order


def pytest_unconfigure(config):
    """After the session, a log line no handler can write is dropped, not printed as a traceback: py4j's garbage
    collection thread may still log (`logging.info`, the root logger) once the session's JVM has exited, through a
    handler a test set up on the stream pytest captured and has closed by then."""
    logging.raiseExceptions = False


def pytest_sessionstart(session):
    for old in TEST_ROOT.glob("run-*") if TEST_ROOT.exists() else []:
        pid = old.name.removeprefix("run-")
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    TEST_HOME.mkdir(parents=True, exist_ok=True)


@pytest.fixture(scope="session")
def broker():
    from ticdc_devkit.broker import EmbeddedBroker

    b = EmbeddedBroker(TEST_HOME / "broker").start()
    yield b
    b.stop()


@pytest.fixture(scope="session")
def pipeline_config(broker):
    """The test config file (also `TICDC_LAKE_CONFIG` for the DAGs), pointing at the test broker."""
    from spark_jobs.config import load_config

    path = Path(os.environ["TICDC_LAKE_CONFIG"])
    path.write_text(TEST_CONFIG.format(lake=TEST_HOME / "lake", bootstrap=broker.bootstrap))
    return load_config(path)


@pytest.fixture(scope="session")
def spark(pipeline_config):
    from spark_jobs.runtime.spark_session import get_spark

    session = get_spark(pipeline_config, "ticdc-lakehouse tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def airflow_db():
    """A throw-away Airflow metadata database, migrated once."""
    Path(os.environ["AIRFLOW_HOME"]).mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
        check=True,
        stdout=subprocess.DEVNULL,
        env=os.environ.copy(),
    )
    return Path(os.environ["AIRFLOW_HOME"])
