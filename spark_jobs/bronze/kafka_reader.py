"""Read offset ranges from Kafka into Arrow record batches, on Spark executors.

Assign and seek only: no consumer-group commits (the landing commit in Iceberg is the only record
of progress). Keys, values and headers stay bytes; nothing is parsed.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from spark_jobs.errors import KafkaRangeError

HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
RECORD_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),  # Spark takes microseconds only
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("headers", HEADER_TYPE),
        ("record_bytes", pa.int64()),
        ("stopped_early", pa.bool_()),  # on the last record of a range cut short by the byte budget
    ]
)


def read_range(
    settings: dict,
    topic: str,
    partition: int,
    start: int,
    end: int,
    max_bytes: int | None = None,
    batch_rows: int = 10_000,
    poll_timeout: float = 10.0,
) -> Iterator[pa.RecordBatch]:
    """Every record of [start, end) of one partition, in offset order, in batches of `batch_rows`;
    at most about `max_bytes` of keys and values (at least one record), so memory stays bounded."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            **settings,
            "group.id": "ticdc-lake-landing",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "error",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        columns = _empty_columns()
        next_offset = start
        idle_polls = 0
        budget = max_bytes if max_bytes is not None else float("inf")
        while next_offset < end:
            msgs = consumer.consume(min(batch_rows, end - next_offset), timeout=1.0)
            if not msgs:
                idle_polls += 1
                if idle_polls > poll_timeout:
                    raise KafkaRangeError(
                        f"{topic}[{partition}]: no record at offset {next_offset} within {poll_timeout:.0f}s (range {start}..{end - 1})"
                    )
                continue
            idle_polls = 0
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        if m.offset() >= end:  # the rest of the range holds no records (transaction markers)
                            next_offset = end
                        continue
                    raise KafkaRangeError(f"{topic}[{partition}] at offset {next_offset}: {err}")
                offset = m.offset()
                if offset >= end:
                    next_offset = end
                    break
                if offset < next_offset:
                    continue
                budget -= _append(columns, m, topic, partition)
                next_offset = offset + 1
                if budget <= 0 and next_offset < end:
                    columns["stopped_early"][-1] = True
                    next_offset = end
                    break
            if len(columns["offset"]) >= batch_rows:
                yield _batch(columns)
                columns = _empty_columns()
        if columns["offset"]:
            yield _batch(columns)
    finally:
        consumer.close()


def _empty_columns() -> dict[str, list]:
    return {name: [] for name in RECORD_SCHEMA.names}


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
    size = (len(value) if value is not None else 0) + (len(key) if key is not None else 0)
    columns["record_bytes"].append(size)
    columns["stopped_early"].append(False)
    return size


def _batch(columns: dict[str, list]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(columns, schema=RECORD_SCHEMA)
