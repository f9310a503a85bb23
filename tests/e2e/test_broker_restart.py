"""The broker really restarted: its process stopped and started again on the same port, its topics kept in an
object store on loopback (`EmbeddedBroker(storage="s3")`: Tansu on moto's S3), not frozen.

- `restart()` keeps topics, records (keys, values, headers, null values) and offsets: a consumer reads after it
  what was produced before, and new records continue the offsets;
- a broker restarted (down for DOWN_SECONDS) in the middle of a `ticdc-lake land` run, while its Spark tasks read
  (they hold connections to it): the run finishes (exit 0) or stops with one line naming the source and the
  broker (exit 75), with at most a few lines from librdkafka; the runs after it land the rest and then nothing
  new; bronze holds every produced record once, key and value byte for byte, and `ticdc-lake silver`
  quarantines nothing for the source.

The lakehouse is a directory of the test's own and its tables are read in a process of its own, as in
test_faults and the kill tests. The broker on S3 is slower than in memory (about 75 produced records a second
here), so the stream is small and the landing reads fetch 64 KB at a time (see LAKE_CLIENT).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from spark_jobs.config import load_config
from tests.e2e.kill import check_in_own_process, own_runtime
from tests.e2e.test_faults import EXIT_TRANSIENT, library_lines, problem_lines
from ticdc_devkit.broker import EmbeddedBroker, produce
from ticdc_devkit.simulator.model import Message
from ticdc_devkit.simulator.stream import EXTENSION_OPTIONS, encode_stream
from ticdc_devkit.simulator.workload import random_workload

pytestmark = pytest.mark.e2e

BIN = Path(sys.executable).parent
SOURCE, PARTITIONS, SEED = "restart_land", 2, 20261115
CHANGES = 400  # about 560 records of about 500 bytes
DOWN_SECONDS = 2.0  # between the broker's stop and its start
RESTART_AFTER_SECONDS = (0.0, 2.0)  # after the run's Spark tasks connected to the broker to read
# Tansu on S3 answers a fetch with every record up to fetch.max.bytes, one object read each: at the default 5 MB
# a fetch of the whole topic would take longer than a read waits for a record (10 s).
LAKE_CLIENT = {"fetch.max.bytes": "65536", "message.max.bytes": "65536"}


@pytest.fixture(scope="module")
def persistent_broker(tmp_path_factory):
    """A broker of this module's own, on its own port, keeping its topics in an object store of its own."""
    broker = EmbeddedBroker(tmp_path_factory.mktemp("persistent-broker"), storage="s3").start()
    yield broker
    broker.stop()


def read_all(bootstrap: str, topic: str, partitions: int, timeout: float = 60.0) -> dict[tuple[int, int], tuple]:
    """{(partition, offset): (key, value, headers)} of every record the broker holds for `topic`."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "restart-check", "enable.auto.commit": False})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        records: dict[tuple[int, int], tuple] = {}
        deadline = time.monotonic() + timeout
        while len(records) < sum(ends.values()) and time.monotonic() < deadline:
            for m in consumer.consume(100, timeout=1.0):
                if m.error() is None:
                    records[(m.partition(), m.offset())] = (m.key(), m.value(), m.headers() or [])
        return records
    finally:
        consumer.close()


def expected_records(messages: list[Message]) -> dict[tuple[int, int], tuple]:
    """{(partition, offset): (key, value, headers)} as the broker numbers the produced messages."""
    offsets: dict[int, int] = {}
    expected = {}
    for m in messages:
        offset = offsets[m.partition] = offsets.get(m.partition, -1) + 1
        expected[(m.partition, offset)] = (m.key, m.value, list(m.headers))
    return expected


def test_a_restart_keeps_topics_records_and_offsets(persistent_broker):
    rng = random.Random(SEED)
    topic = "restart_keeps"
    persistent_broker.create_topics([topic], partitions=PARTITIONS)

    def batch(count: int) -> list[Message]:
        return [
            Message(
                topic,
                rng.randrange(PARTITIONS),
                rng.randbytes(rng.randrange(0, 12)) or None,
                None if rng.random() < 0.1 else rng.randbytes(rng.randrange(0, 300)),
                tuple((f"h{i}", rng.randbytes(rng.randrange(0, 6))) for i in range(rng.randrange(0, 3))),
            )
            for _ in range(count)
        ]

    before = batch(30)
    produce(persistent_broker.bootstrap, before)
    persistent_broker.restart(down_seconds=1.0)
    assert read_all(persistent_broker.bootstrap, topic, PARTITIONS) == expected_records(before)

    after = batch(10)  # the offsets continue where they were
    produce(persistent_broker.bootstrap, after)
    assert read_all(persistent_broker.bootstrap, topic, PARTITIONS) == expected_records(before + after)


def tasks_connected(driver: int, port: int) -> bool:
    """Whether a process under the `driver` process (a Spark task's Python worker, not the driver, which plans)
    holds a connection to the broker on `port`: the run reads. From /proc (Linux)."""
    sockets = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "01" and int(fields[2].split(":")[1], 16) == port:  # established, to the broker
            sockets.add(f"socket:[{fields[9]}]")
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    for pid in parents:
        ancestor = parents.get(pid)
        while ancestor not in (None, 0, 1, driver):
            ancestor = parents.get(ancestor)
        if ancestor != driver:
            continue
        try:
            if any(os.readlink(fd) in sockets for fd in Path(f"/proc/{pid}/fd").iterdir()):
                return True
        except OSError:
            continue
    return False


def land(config: Path, restart: tuple[EmbeddedBroker, float] | None = None) -> tuple[subprocess.CompletedProcess, str]:
    """One `ticdc-lake land` process; with `restart=(broker, delay)` the broker is restarted `delay` seconds after
    the run's Spark tasks connected to it to read. Returns the process and when the restart came: "reading",
    "after the reads" (the tasks had closed their connections), "after the run" or "never"."""
    command = [str(BIN / "ticdc-lake"), "land", "--source", SOURCE, "--config", str(config)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    moment, failed = [], []

    def restart_when_tasks_read(broker: EmbeddedBroker, delay: float) -> None:
        try:
            while process.poll() is None and not tasks_connected(process.pid, broker.port):
                time.sleep(0.2)
            time.sleep(delay)
            if process.poll() is not None:
                moment.append("after the run")
                return
            moment.append("reading" if tasks_connected(process.pid, broker.port) else "after the reads")
            broker.restart(down_seconds=DOWN_SECONDS)
        except BaseException as exc:  # raised again in the test's thread
            failed.append(exc)

    restarter = threading.Thread(target=restart_when_tasks_read, args=restart) if restart else None
    if restarter is not None:
        restarter.start()
    stderr = process.stderr.read()
    process.wait(timeout=600)
    if restarter is not None:
        restarter.join()
    if failed:
        raise failed[0]
    return subprocess.CompletedProcess(command, process.returncode, "", stderr), (moment or ["never"])[0]


def test_a_broker_restarted_during_landing_loses_and_duplicates_nothing(
    persistent_broker, source_config, config_file, tmp_path
):
    rng = random.Random(SEED)
    runtime = own_runtime(tmp_path / "lake")
    config = source_config(SOURCE, "canal-json", runtime=runtime)
    [source] = config.sources
    kafka = dataclasses.replace(source.kafka, bootstrap_servers=persistent_broker.bootstrap, client=LAKE_CLIENT)
    config_path = config_file(
        dataclasses.replace(config, sources=[dataclasses.replace(source, kafka=kafka)]), tmp_path / "pipeline.yaml"
    )
    workload = random_workload(SEED, tables=3, changes=CHANGES, protocol="canal-json")
    messages = encode_stream(
        "canal-json", workload.events, topic=SOURCE, partitions=PARTITIONS, options=EXTENSION_OPTIONS["canal-json"]
    )
    persistent_broker.create_topics([SOURCE], partitions=PARTITIONS)
    produce(persistent_broker.bootstrap, messages)

    run, moment = land(config_path, restart=(persistent_broker, rng.uniform(*RESTART_AFTER_SECONDS)))
    assert moment == "reading", f"the broker restarted {moment}, not while the run read:\n{run.stderr[-3000:]}"
    assert run.returncode in (0, EXIT_TRANSIENT), run.stderr[-3000:]
    assert len(library_lines(run.stderr)) <= 3, run.stderr[-3000:]
    problems = problem_lines(run.stderr)
    if run.returncode == EXIT_TRANSIENT:
        assert len(problems) == 1, run.stderr[-3000:]
        assert problems[0].startswith(
            f"ticdc-lake land: source {SOURCE}: Kafka broker {persistent_broker.bootstrap} "
        ), problems
    else:
        assert len(problems) <= 3, run.stderr[-3000:]
    print(f"landing run with the broker restarted: exit {run.returncode}, {len(problems)} problem lines")

    for _ in range(3):  # then land until nothing is new
        drain, _ = land(config_path)
        assert drain.returncode == 0, drain.stderr[-3000:]
        if f"source {SOURCE}: nothing new to land" in drain.stderr:
            break
    else:
        raise AssertionError(f"landing still found records to land after 3 runs:\n{drain.stderr[-3000:]}")

    silver = subprocess.run(
        [str(BIN / "ticdc-lake"), "silver", "--source", SOURCE, "--config", str(config_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert silver.returncode == 0, silver.stderr[-3000:]
    produced = tmp_path / "produced.json"
    expected = expected_records(messages)
    produced.write_text(json.dumps([[p, o, *map(_text, record[:2])] for (p, o), record in expected.items()]))
    check_in_own_process("tests.e2e.test_broker_restart", str(config_path), str(produced))


def _text(data: bytes | None) -> str | None:
    return base64.b64encode(data).decode() if data is not None else None


def check(config_path: str, produced_path: str) -> None:
    """Bronze holds each produced record once, key and value byte for byte; silver quarantined nothing."""
    from spark_jobs.runtime.spark_session import get_spark
    from spark_jobs.runtime.tables import BRONZE_MESSAGES, SILVER_QUARANTINE, SILVER_ROW_CHANGES

    spark = get_spark(load_config(config_path))
    args = {"source": SOURCE}
    rows = spark.sql(
        f"SELECT topic, `partition`, `offset`, key, value FROM {BRONZE_MESSAGES} WHERE source = :source", args=args
    ).collect()
    coordinates = [(r["topic"], r["partition"], r["offset"]) for r in rows]
    assert len(coordinates) == len(set(coordinates)), "a record landed twice"
    assert {r["topic"] for r in rows} == {SOURCE}
    landed = {(r["partition"], r["offset"]): (_text(r["key"]), _text(r["value"])) for r in rows}
    expected = {(p, o): (key, value) for p, o, key, value in json.loads(Path(produced_path).read_text())}
    assert landed == expected, f"{len(landed)} landed, {len(expected)} produced"
    quarantined = spark.sql(f"SELECT count(*) FROM {SILVER_QUARANTINE} WHERE source = :source", args=args).first()[0]
    assert quarantined == 0, f"silver quarantined {quarantined} messages of {SOURCE}"
    decoded = spark.sql(f"SELECT count(*) FROM {SILVER_ROW_CHANGES} WHERE source = :source", args=args).first()[0]
    assert decoded > 0, "silver is empty"
    spark.stop()


if __name__ == "__main__":
    check(sys.argv[1], sys.argv[2])
