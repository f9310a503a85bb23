"""Spread a logical stream over partitions as a changefeed does, then encode it per protocol."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from ticdc_devkit.simulator.model import (
    Bootstrap,
    Ddl,
    Event,
    Message,
    RowChange,
    Watermark,
    dispatch_partition,
    split_key_changing_updates,
)

# A typical changefeed's options per protocol: the TiDB extension on wherever the protocol has one.
EXTENSION_OPTIONS: dict[str, dict[str, Any]] = {
    "canal-json": {"enable-tidb-extension": True},
    "open": {},
    "debezium": {"enable-tidb-extension": True},
    "avro": {"enable-tidb-extension": True},
    "simple-json": {},
    "simple-avro": {},
}

# protocol name -> (module, encoder class); each encoder has:
#   DDL_TO_ALL_PARTITIONS: bool   (Canal-JSON sends DDL to partition 0 only)
#   encode(events) -> list[(key, value, headers)]   for one partition's events, in order (may batch)
_ENCODERS = {
    "canal-json": ("ticdc_devkit.simulator.canal_json", "CanalJsonEncoder"),
    "open": ("ticdc_devkit.simulator.open_protocol", "OpenEncoder"),
    "debezium": ("ticdc_devkit.simulator.debezium", "DebeziumEncoder"),
    "avro": ("ticdc_devkit.simulator.avro", "AvroEncoder"),
    "simple-json": ("ticdc_devkit.simulator.simple", "SimpleJsonEncoder"),
    "simple-avro": ("ticdc_devkit.simulator.simple", "SimpleAvroEncoder"),
}


def make_encoder(protocol: str, options: Mapping[str, Any] | None = None):
    module, name = _ENCODERS[protocol]
    return getattr(importlib.import_module(module), name)(dict(options or {}))


# Protocols whose update carries a before image, so that a key-changing update can be sent whole (TiCDC's
# `output-raw-change-event = true`); Avro's update holds only the after image, so TiCDC always splits it.
RAW_CHANGE_PROTOCOLS = frozenset({"canal-json", "open", "debezium", "simple-json", "simple-avro"})


def partition_events(
    events: list[Event], partitions: int, *, ddl_to_all: bool, dispatch: str = "table", split: bool = True
) -> list[list[Event]]:
    """Events per partition in commit order: rows by the dispatcher, watermarks (and DDL) broadcast. A
    key-changing update is split into delete + insert unless `split` is False."""
    per: list[list[Event]] = [[] for _ in range(partitions)]
    for e in split_key_changing_updates(events) if split else events:
        if isinstance(e, RowChange):
            per[dispatch_partition(e, partitions, dispatch)].append(e)
        elif isinstance(e, Watermark) or (isinstance(e, (Ddl, Bootstrap)) and ddl_to_all):
            for p in per:
                p.append(e)
        else:
            per[0].append(e)
    return per


def encode_stream(
    protocol: str,
    events: list[Event],
    *,
    topic: str = "ticdc",
    partitions: int = 1,
    options: Mapping[str, Any] | None = None,
    dispatch: str = "table",
) -> list[Message]:
    """Every Kafka record TiCDC would produce for this stream, partition by partition. With the option
    `output-raw-change-event` (protocols of RAW_CHANGE_PROTOCOLS), a key-changing update is sent as one update
    whose before image holds the old key, as TiCDC sends it; otherwise as delete + insert."""
    options = dict(options or {})
    raw = bool(options.pop("output-raw-change-event", False))
    if raw and protocol not in RAW_CHANGE_PROTOCOLS:
        raise ValueError(f"{protocol} cannot carry a key-changing update whole (its update has no before image)")
    encoder = make_encoder(protocol, {"topic": topic, **options})
    out: list[Message] = []
    per_partition = partition_events(
        events, partitions, ddl_to_all=encoder.DDL_TO_ALL_PARTITIONS, dispatch=dispatch, split=not raw
    )
    for partition, part_events in enumerate(per_partition):
        for key, value, headers in encoder.encode(part_events):
            out.append(Message(topic, partition, key, value, tuple(headers or ())))
    return out
