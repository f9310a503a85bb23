"""The broker's high watermarks, asked live by the status page with a short timeout (no Spark involved).

A broker that does not answer in time is reported as unreachable, never as zero lag; why it did not
answer goes to the log only (the page says "broker unreachable").
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from spark_jobs.bronze.land import source_topics
from spark_jobs.config import SourceSettings, kafka_client_settings

log = logging.getLogger(__name__)

TIMEOUT_SECONDS = 2.0


@dataclass(frozen=True)
class BrokerOffsets:
    reachable: bool
    high_watermarks: dict[tuple[str, int], int] = field(default_factory=dict)  # (topic, partition) -> high


def high_watermarks(source: SourceSettings, timeout: float = TIMEOUT_SECONDS) -> BrokerOffsets:
    """Every partition's high watermark of the source's topics, all asked within about `timeout` seconds."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    deadline = time.monotonic() + timeout
    try:
        consumer = Consumer(
            {
                **kafka_client_settings(source),
                "group.id": "ticdc-lake-status",
                "enable.auto.commit": False,
                "socket.connection.setup.timeout.ms": max(1000, int(timeout * 1000)),
                "log_level": 0,  # librdkafka's own lines repeat every retry; one warning below says it
            }
        )
    except (KafkaException, ValueError) as exc:  # a setting librdkafka refuses, or an unset secret
        log.warning("source %s: no Kafka client for the status page: %s", source.name, exc)
        return BrokerOffsets(False)
    try:
        metadata = consumer.list_topics(timeout=timeout)
        offsets = {}
        for topic in source_topics(source, list(metadata.topics)):
            described = metadata.topics.get(topic)
            if described is None or described.error is not None:
                continue
            for partition in sorted(described.partitions):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise KafkaException(f"no answer within {timeout}s")
                _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=remaining)
                offsets[(topic, partition)] = high
        return BrokerOffsets(True, offsets)
    except KafkaException as exc:
        log.warning("source %s: broker unreachable for the status page: %s", source.name, exc)
        return BrokerOffsets(False)
    finally:
        consumer.close()
