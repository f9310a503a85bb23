"""The embedded broker: topics with partitions, exact bytes, headers, null values."""

from confluent_kafka import Consumer, TopicPartition

from ticdc_devkit.broker import produce
from ticdc_devkit.simulator.model import Message


def test_round_trip_bytes_headers_and_watermarks(broker):
    broker.create_topics(["broker_roundtrip"], partitions=2)
    sent = [
        Message(
            "broker_roundtrip",
            i % 2,
            bytes([i, 0, 255]),
            None if i == 3 else bytes(range(256)) * (i + 1),
            (("h", b"\x00\x01"), ("h", b"again")),
        )
        for i in range(8)
    ]
    assert produce(broker.bootstrap, sent) == 8
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "t", "enable.auto.commit": False})
    try:
        assert [consumer.get_watermark_offsets(TopicPartition("broker_roundtrip", p), timeout=10) for p in (0, 1)] == [
            (0, 4),
            (0, 4),
        ]
        consumer.assign([TopicPartition("broker_roundtrip", 1, 0)])
        got = []
        while len(got) < 4:
            got += [m for m in consumer.consume(4, timeout=5) if m.error() is None]
        assert [(m.key(), m.value(), m.headers()) for m in got] == [
            (s.key, s.value, list(s.headers)) for s in sent if s.partition == 1
        ]
    finally:
        consumer.close()
