"""Transient faults, injected for real on loopback: the run stops with one clear line (or finishes), nothing is
written half and nothing is quarantined for the outage, and the next run after recovery gives exactly what a
run without the fault gives.

- a broker that is down: `ticdc-lake land` exits 75 with one line, not librdkafka's retry chatter;
- a broker frozen (SIGSTOP) and continued in the middle of landing runs: bronze ends equal, byte for byte
  (key, value, headers per offset), to what was produced (a frozen process: the shared broker keeps its topics
  in memory; the broker stopped and started again on persistent storage is tests/e2e/test_broker_restart.py);
- the Schema Registry failing (503 after a first answer, 401, stopped) during silver runs: each run raises
  RegistryUnavailableError and writes nothing; after recovery silver equals a clean decode, none quarantined.

Landing runs are `ticdc-lake land` processes on a lakehouse of their own, as in test_landing_faults.
"""

from __future__ import annotations

import base64
import json
import random
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from spark_jobs.bronze.land import land_bronze
from spark_jobs.errors import RegistryUnavailableError
from spark_jobs.runtime.tables import SILVER_PENDING, SILVER_QUARANTINE, SILVER_ROW_CHANGES, SILVER_RUNS
from spark_jobs.silver.build import build_silver
from tests.e2e.kill import own_runtime
from tests.e2e.test_silver import count_of, land_and_decode, logical_stream, publish, silver_rows
from ticdc_devkit.broker import EmbeddedBroker, produce
from ticdc_devkit.registry import StandInRegistry
from ticdc_devkit.simulator.model import Message

pytestmark = pytest.mark.e2e

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]
EXIT_TRANSIENT = 75
FROZEN_SECONDS = 15.0  # longer than a read waits for a record (10 s), shorter than a metadata call (30 s)
PROGRESS_LINE = re.compile(r"\d\d:\d\d:\d\d (?!WARNING |ERROR |CRITICAL )")
CLIENT_LIBRARY_LINES = ("rdkafka", "Connect to", "Broker transport failure")


@pytest.fixture
def own_broker(tmp_path):
    """A broker of the test's own, to stop or freeze without touching the session's."""
    broker = EmbeddedBroker(tmp_path / "broker").start()
    yield broker
    broker.stop()


@pytest.fixture
def lakehouse(source_config, config_file, tmp_path):
    """Factory: a config file whose only source `name` reads `topic` from `bootstrap` (other `kafka` settings as
    keywords), on a lakehouse of its own."""
    runtime = own_runtime(tmp_path / "lake")

    def make(name: str, topic: str, bootstrap: str, **kafka) -> Path:
        config = source_config(name, topics=[topic], runtime=runtime, kafka={"bootstrap_servers": bootstrap, **kafka})
        return config_file(config, tmp_path / f"{name}.yaml")

    return make


def land(config: Path, source: str, freeze: tuple[EmbeddedBroker, float] | None = None) -> subprocess.CompletedProcess:
    """One `ticdc-lake land` process; with `freeze=(broker, delay)` the broker is frozen `delay` seconds after the
    process's Spark session is ready (when it plans and reads) and thawed FROZEN_SECONDS later."""
    command = [str(BIN / "ticdc-lake"), "land", "--source", source, "--config", str(config)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    stderr, thaw = [], None
    for line in process.stderr:
        stderr.append(line)
        if freeze is not None and thaw is None and "spark session ready" in line:
            broker, delay = freeze
            time.sleep(delay)
            broker.pause()
            thaw = threading.Timer(FROZEN_SECONDS, broker.resume)
            thaw.start()
    process.wait(timeout=600)
    if thaw is not None:
        thaw.join()
    return subprocess.CompletedProcess(command, process.returncode, "", "".join(stderr))


def problem_lines(stderr: str) -> list[str]:
    """Every line but our own progress lines (`12:00:01 message`; warnings and errors name their level)."""
    return [line for line in stderr.splitlines() if line.strip() and not PROGRESS_LINE.match(line)]


def library_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if any(s in line for s in CLIENT_LIBRARY_LINES)]


def test_landing_with_the_broker_down_is_one_line(own_broker, lakehouse):
    config = lakehouse("flt_down", "flt_down", own_broker.bootstrap, timeout_seconds=5)
    own_broker.stop()
    run = land(config, "flt_down")
    assert run.returncode == EXIT_TRANSIENT, run.stderr[-3000:]
    assert library_lines(run.stderr) == [], run.stderr[-3000:]
    lines = problem_lines(run.stderr)
    assert len(lines) == 1, run.stderr[-3000:]
    # within the source's kafka.timeout_seconds (5 here, 30 by default), give or take a second
    assert re.match(
        rf"ticdc-lake land: source flt_down: Kafka broker {re.escape(own_broker.bootstrap)} unreachable for [56] s, ",
        lines[0],
    ), lines[0]
    assert "connect attempts (last: Connection refused)" in lines[0] and "; check that Kafka runs" in lines[0]


@pytest.mark.long
def test_a_broker_frozen_during_landing_runs_loses_and_duplicates_nothing(own_broker, lakehouse):
    rng = random.Random(15)
    topic, partitions = "flt_freeze", 3
    own_broker.create_topics([topic], partitions=partitions)
    config = lakehouse("flt_freeze", topic, own_broker.bootstrap)
    produced: list[Message] = []
    outcomes = []
    for _ in range(3):
        batch = [
            Message(
                topic,
                rng.randrange(partitions),
                rng.randbytes(rng.randrange(0, 16)) or None,
                rng.randbytes(rng.randrange(1, 4096)),
                tuple((f"h{i}", rng.randbytes(rng.randrange(1, 8))) for i in range(rng.randrange(0, 3))),
            )
            for _ in range(rng.randrange(200, 400))
        ]
        produce(own_broker.bootstrap, batch)
        produced += batch
        run = land(config, "flt_freeze", freeze=(own_broker, rng.uniform(0.0, 8.0)))
        outcomes.append(run.returncode)
        assert run.returncode in (0, EXIT_TRANSIENT), run.stderr[-3000:]
        assert len(library_lines(run.stderr)) <= 3, run.stderr[-3000:]
        if run.returncode == EXIT_TRANSIENT:
            lines = problem_lines(run.stderr)
            assert len(lines) == 1, run.stderr[-3000:]
            assert lines[0].startswith(f"ticdc-lake land: source flt_freeze: Kafka broker {own_broker.bootstrap} "), (
                lines
            )
    print(f"landing runs with the broker frozen: exit codes {outcomes}")
    drain = land(config, "flt_freeze")
    assert drain.returncode == 0, drain.stderr[-3000:]

    offsets: dict[int, int] = {}
    expected = {}
    for m in produced:
        offset = offsets[m.partition] = offsets.get(m.partition, -1) + 1
        expected[(topic, m.partition, offset)] = (m.key, m.value, [list(h) for h in m.headers])
    landed = dump_bronze(config, "flt_freeze")
    coordinates = [c for c, _ in landed]
    assert len(coordinates) == len(set(coordinates)), f"outcomes {outcomes}: a record landed twice"
    assert dict(landed) == expected, f"outcomes {outcomes}: {len(landed)} landed, {len(expected)} produced"


def dump_bronze(config: Path, source: str) -> list[tuple]:
    """[((topic, partition, offset), (key, value, headers))] of a source's bronze rows, read in a process of its own."""
    dump = subprocess.run(
        [str(BIN / "python"), "-m", "tests.e2e.test_faults", str(config), source],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    landed = []
    for line in dump.stdout.splitlines():
        topic, partition, offset, key, value, headers = json.loads(line)
        record = (_bytes(key), _bytes(value), [[name, _bytes(header)] for name, header in headers])
        landed.append(((topic, partition, offset), record))
    return landed


def _bytes(text: str | None) -> bytes | None:
    return base64.b64decode(text) if text is not None else None


def _text(data: bytes | None) -> str | None:
    return base64.b64encode(data).decode() if data is not None else None


def test_a_registry_outage_during_silver_runs_quarantines_nothing(spark, broker, source_config):
    """Decoded before the clean reference (so no schema is cached in the Python workers yet)."""
    events = logical_stream(rows=40, seed=15)
    with StandInRegistry() as registry:
        publish(broker, "avro", events, "flt_avro", registry=registry.url)
        publish(broker, "avro", events, "flt_avro_ref", registry=registry.url)
        config = source_config("flt_avro", "avro", registry=registry.url)
        assert land_bronze(spark, config, "flt_avro").records > 0

        outages = {
            "503 after one answer": (lambda: registry.outage(503, after=1), "answered HTTP 503"),
            "401": (lambda: registry.outage(401), "refused the credentials (HTTP 401)"),
            "stopped": (registry.stop, "unreachable: ConnectionError: [Errno 111] Connection refused"),
        }
        for name, (start_outage, said) in outages.items():
            start_outage()
            started = time.monotonic()
            with pytest.raises(RegistryUnavailableError) as info:
                build_silver(spark, config, "flt_avro")
            line = str(info.value)
            assert line.startswith(f"source flt_avro: schema registry {registry.url} "), name
            assert said in line and "; check " in line and "\n" not in line, line
            assert time.monotonic() - started < 120, name
            for table in (SILVER_ROW_CHANGES, SILVER_QUARANTINE, SILVER_PENDING, SILVER_RUNS):
                assert count_of(spark, table, "flt_avro") == 0, f"{name}: {table} was written"
        registry.start()
        registry.outage(None)

        result = build_silver(spark, config, "flt_avro")
        assert (result.quarantined, result.waiting) == (0, 0)
        assert count_of(spark, SILVER_QUARANTINE, "flt_avro") == 0
        _, reference = land_and_decode(
            spark, source_config("flt_avro_ref", "avro", registry=registry.url), "flt_avro_ref"
        )
        assert result.row_changes == reference.row_changes > 0
        assert silver_rows(spark, "flt_avro") == silver_rows(spark, "flt_avro_ref")


def _print_bronze(config_path: str, source: str) -> None:
    from spark_jobs.config import load_config
    from spark_jobs.runtime.spark_session import get_spark
    from spark_jobs.runtime.tables import BRONZE_MESSAGES

    spark = get_spark(load_config(config_path))
    query = f"SELECT topic, `partition`, `offset`, key, value, headers FROM {BRONZE_MESSAGES} WHERE source = :source"
    for r in spark.sql(query, args={"source": source}).toLocalIterator():
        headers = [[h["key"], _text(h["value"])] for h in r["headers"] or []]
        print(json.dumps([r["topic"], r["partition"], r["offset"], _text(r["key"]), _text(r["value"]), headers]))
    spark.stop()


if __name__ == "__main__":
    _print_bronze(sys.argv[1], sys.argv[2])
