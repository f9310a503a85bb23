"""A hand-written stream through the whole pipeline, for the end-to-end tests of one capability."""

from __future__ import annotations

from spark_jobs.bronze.land import land_bronze
from spark_jobs.gold.build import build_gold
from spark_jobs.silver.build import build_silver
from ticdc_devkit.broker import produce
from ticdc_devkit.simulator.stream import EXTENSION_OPTIONS, encode_stream


def send(broker, source: str, events: list, protocol: str = "canal-json", options: dict | None = None) -> None:
    """The Kafka records TiCDC would send for `events`, on the source's topic (one partition), with the protocol's
    extension options and `options` over them."""
    options = {**EXTENSION_OPTIONS[protocol], **(options or {})}
    produce(broker.bootstrap, encode_stream(protocol, events, topic=source, options=options))


def land_and_decode(spark, config, source: str) -> None:
    land_bronze(spark, config, source)
    build_silver(spark, config, source)


def publish_stream(spark, broker, config, source: str, events: list):
    """`events` sent, landed, decoded and published to gold (with dbt's checks); returns the gold result."""
    send(broker, source, events)
    land_and_decode(spark, config, source)
    return build_gold(spark, config, source)
