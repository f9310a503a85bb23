"""Read offset ranges from Kafka into Arrow record batches, on Spark executors.

Assign and seek only: no consumer-group commits (the landing commit in Iceberg is the only record
of progress). Keys, values and headers stay bytes; nothing is parsed.

Every client here is quiet: librdkafka logs a line per connect retry (every 50 ms while a broker is down);
a BrokerWatch counts them instead, and a broker that stays unreachable stops the run with one
BrokerUnavailableError line saying for how long and how many attempts. The driver's metadata and offset
lookups go through `metadata_admin` (or `metadata_consumer`) for the same reason.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Generator, Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass
from typing import cast

import pyarrow as pa

from spark_jobs.errors import BrokerUnavailableError, KafkaRangeError

log = logging.getLogger(__name__)

CHECK_BROKER = "that Kafka runs and kafka.bootstrap_servers (and the network, TLS settings) reach it"
CHECK_CREDENTIALS = "kafka.sasl_username_env / sasl_password_env (or sasl_connection) and kafka.sasl_mechanism"
_CONNECT_FAILED = re.compile(r"Connect to \S+ failed: (.+?)(?: \(after |$)")
_SUPPRESSED = re.compile(r"(\d+) identical error\(s\) suppressed")

HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
MESSAGE_SCHEMA = pa.schema(  # a Kafka record as bronze keeps it and silver's decoder reads it
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),  # Spark takes microseconds only
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("headers", HEADER_TYPE),
    ]
)


@dataclass(frozen=True)
class RangeRead:
    """What reading one range gave: `read_range`'s return value."""

    records: int
    bytes: int  # keys and values
    last_offset: int | None
    cut_short: bool  # by the byte budget: the partition continues after last_offset


class BrokerWatch(logging.Handler):
    """librdkafka's `logger` and `error_cb` for one client: what it would print, counted and kept for one line."""

    def __init__(self, bootstrap: str):
        super().__init__()
        self.bootstrap = bootstrap
        self.started = time.monotonic()
        self.connect_failures = 0
        self.last_failure: str | None = None
        self.credentials_refused: str | None = None
        self._logger = logging.Logger("ticdc-lake.librdkafka")  # outside the logging tree: nothing propagates
        self._logger.addHandler(self)

    def client_settings(self) -> dict:
        return {"logger": self._logger, "error_cb": self.on_error}

    def emit(self, record: logging.LogRecord) -> None:
        found = _CONNECT_FAILED.search(record.getMessage())
        if found:
            suppressed = _SUPPRESSED.search(record.getMessage())
            self.connect_failures += 1 + (int(suppressed.group(1)) if suppressed else 0)
            self.last_failure = found.group(1).strip()

    def on_error(self, err) -> None:
        from confluent_kafka import KafkaError

        if err.code() in (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED):
            self.credentials_refused = err.str()

    def unavailable(
        self, doing: str, source: str | None = None, error=None, waited: float | None = None
    ) -> BrokerUnavailableError:
        """The one line: refused credentials, or unreachable for how long (`waited`, else since the client
        started) with how many connect attempts."""
        if self.credentials_refused:
            return BrokerUnavailableError.at(
                self.bootstrap,
                f"refused the credentials while {doing} ({self.credentials_refused})",
                CHECK_CREDENTIALS,
                source,
            )
        waited = waited if waited is not None else time.monotonic() - self.started
        if self.connect_failures:
            problem = (
                f"unreachable for {waited:.0f} s, {self.connect_failures} connect attempts"
                f" (last: {self.last_failure}) while {doing}"
            )
        else:
            reason = f": {error.str() if hasattr(error, 'str') else error}" if error is not None else ""
            problem = f"did not answer within {waited:.0f} s while {doing}{reason}"
        return BrokerUnavailableError.at(self.bootstrap, problem, CHECK_BROKER, source)

    def summary(self) -> str | None:
        """For a run that got through: the connect attempts that failed before the broker answered."""
        if not self.connect_failures:
            return None
        return (
            f"Kafka broker {self.bootstrap}: {self.connect_failures} connect attempts failed before it answered"
            f" (last: {self.last_failure})"
        )


@contextmanager
def metadata_consumer(settings: dict, source: str, group_id: str = "ticdc-lake-planner"):
    """A quiet consumer for the driver's metadata, watermark and offsets-for-times calls (give each
    the source's `kafka.timeout_seconds`): a KafkaException from any of them comes out as one
    BrokerUnavailableError line naming the source, the broker and what to check."""
    from confluent_kafka import Consumer

    watch = BrokerWatch(settings.get("bootstrap.servers", "?"))
    consumer = Consumer({**settings, "group.id": group_id, "enable.auto.commit": False, **watch.client_settings()})
    try:
        with _reported(watch, consumer, source):
            yield consumer
    finally:
        consumer.close()


@contextmanager
def metadata_admin(settings: dict, source: str):
    """A quiet admin client for the driver's metadata and batched offset lookups (`list_topics` with
    the source's `kafka.timeout_seconds`, then `list_offsets` below), reporting a KafkaException as
    `metadata_consumer` does. Consumer-only settings among `settings` are ignored by it (librdkafka's
    warning about them goes to the watch, not to stderr)."""
    from confluent_kafka.admin import AdminClient

    watch = BrokerWatch(settings.get("bootstrap.servers", "?"))
    with _reported(watch, AdminClient({**settings, **watch.client_settings()}), source) as admin:
        yield admin


@contextmanager
def _reported(watch: BrokerWatch, client, source: str) -> Iterator:
    """`client`, its KafkaExceptions as one BrokerUnavailableError line; afterwards, the connect attempts that
    failed before the broker answered, as a warning. `poll(0)` hands the queued log lines and errors to the watch."""
    from confluent_kafka import KafkaException

    try:
        yield client
        client.poll(0)
    except KafkaException as exc:
        client.poll(0)
        raise watch.unavailable("asking for topic metadata and offsets", source, exc.args[0]) from None
    summary = watch.summary()
    if summary:
        log.warning("source %s: %s", source, summary)


def list_offsets(
    admin, partitions: list[tuple[str, int]], specs: dict, settings: dict, timeout: float
) -> dict[str, dict]:
    """Per name in `specs` (name -> OffsetSpec), the offset of every partition: one ListOffsets request per
    spec and leader broker, all sent before any answer is awaited, so the partition count costs no round
    trips. Read at the isolation level the consumers of `settings` read with (librdkafka's default is
    read_committed: the high watermark is then the last stable offset, as `get_watermark_offsets` answers).
    A KafkaException (a failed or timed-out request) propagates, for `metadata_admin` to report."""
    from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition

    if not partitions:
        return {name: {} for name in specs}
    isolation = (
        IsolationLevel.READ_UNCOMMITTED
        if settings.get("isolation.level") == "read_uncommitted"
        else IsolationLevel.READ_COMMITTED
    )
    asked = {
        name: admin.list_offsets(
            {TopicPartition(t, p): spec for t, p in partitions},
            isolation_level=isolation,
            request_timeout=timeout,
        )
        for name, spec in specs.items()
    }
    pending = [f for answers in asked.values() for f in answers.values()]
    _, late = futures.wait(pending, timeout=timeout + 5)  # librdkafka times them out first
    if late:
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"no answer to ListOffsets for {len(late)} partitions"))
    return {
        name: {(tp.topic, tp.partition): future.result().offset for tp, future in answers.items()}
        for name, answers in asked.items()
    }


def read_range(
    settings: dict,
    topic: str,
    partition: int,
    start: int,
    end: int,
    max_bytes: int | None = None,
    batch_rows: int = 10_000,
    poll_timeout: float = 10.0,
) -> Generator[pa.RecordBatch, None, RangeRead]:
    """Every record of [start, end) of one partition, in offset order, in batches of `batch_rows`;
    at most about `max_bytes` of keys and values (at least one record), so memory stays bounded.
    Returns what it read (`yield from` gives it), so that the caller needs no second pass over the rows.

    No record for `poll_timeout` seconds although the broker's watermarks said they are there is the
    broker's fault (stopped, unreachable, hung): BrokerUnavailableError. An error the broker returns for
    the partition is KafkaRangeError."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    watch = BrokerWatch(settings.get("bootstrap.servers", "?"))
    consumer = Consumer(
        {
            **settings,
            "group.id": "ticdc-lake-landing",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "error",
            **watch.client_settings(),
        }
    )
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        columns = _empty_columns()
        next_offset = start
        idle_polls = records = size = 0
        last_offset = None
        cut_short = False
        budget = max_bytes if max_bytes is not None else float("inf")
        while next_offset < end:
            msgs = consumer.consume(min(batch_rows, end - next_offset), timeout=1.0)
            if not msgs:
                idle_polls += 1
                if idle_polls > poll_timeout:
                    raise watch.unavailable(f"reading {topic}[{partition}] at offset {next_offset}", waited=idle_polls)
                continue
            idle_polls = 0
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        # an end-of-partition event carries the offset it reached
                        if cast(int, m.offset()) >= end:  # the rest of the range holds no records (transaction markers)
                            next_offset = end
                        continue
                    raise KafkaRangeError(f"{topic}[{partition}] at offset {next_offset}: {err}")
                offset = cast(int, m.offset())  # None only for an event without a record, which has an error
                if offset >= end:
                    next_offset = end
                    break
                if offset < next_offset:
                    continue
                record_bytes = _append(columns, m, topic, partition)
                records += 1
                size += record_bytes
                budget -= record_bytes
                last_offset = offset
                next_offset = offset + 1
                if budget <= 0 and next_offset < end:
                    cut_short = True
                    next_offset = end
                    break
            if len(columns["offset"]) >= batch_rows:
                yield _batch(columns)
                columns = _empty_columns()
        if columns["offset"]:
            yield _batch(columns)
        return RangeRead(records, size, last_offset, cut_short)
    finally:
        consumer.close()


def _empty_columns() -> dict[str, list]:
    return {name: [] for name in MESSAGE_SCHEMA.names}


def _append(columns: dict[str, list], m, topic: str, partition: int) -> int:
    """Add one record; returns its key and value bytes."""
    value = m.value()
    key = m.key()
    columns["topic"].append(topic)
    columns["partition"].append(partition)
    columns["offset"].append(m.offset())
    columns["timestamp"].append(m.timestamp()[1] * 1000)
    columns["key"].append(key)
    columns["value"].append(value)
    headers = m.headers()
    columns["headers"].append([{"key": k, "value": v} for k, v in headers] if headers else [])
    return (len(value) if value is not None else 0) + (len(key) if key is not None else 0)


def _batch(columns: dict[str, list]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(columns, schema=MESSAGE_SCHEMA)
