"""Protocol codecs: TiCDC Kafka messages in, canonical change events out.

One module per protocol; none of them knows Spark. Use `make_decoder(protocol, options)` and call
`decoder.decode(key, value, headers)` on each message; where `needs_partition_order(protocol)`, on the
messages of one partition in offset order (Simple's decoders learn schemas from earlier messages).

A decoder that can also decode column-wise (`column_decoder`) takes a batch of message values at once and gives
Arrow columns (`RowBlock`s) for the row messages of the usual form, leaving every other message to `decode`,
which stays the reference: the tests hold the two to the same answers.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from typing import Protocol as _Protocol

from spark_jobs.canonical.events import ChangeEvent
from spark_jobs.errors import ConfigError, DecodeError, SchemaNotYetKnown

if TYPE_CHECKING:  # Arrow only where a batch is decoded: a DAG file's parse reads the configuration, not messages
    from spark_jobs.canonical.blocks import RowBlock

# protocol name -> (module, decoder class)
_DECODERS = {
    "canal-json": ("spark_jobs.codecs.canal_json", "CanalJsonDecoder"),
    "open": ("spark_jobs.codecs.open_protocol", "OpenDecoder"),
    "debezium": ("spark_jobs.codecs.debezium", "DebeziumDecoder"),
    "avro": ("spark_jobs.codecs.avro", "AvroDecoder"),
    "simple-json": ("spark_jobs.codecs.simple", "SimpleJsonDecoder"),
    "simple-avro": ("spark_jobs.codecs.simple", "SimpleAvroDecoder"),
}
PROTOCOLS = tuple(_DECODERS)

Headers = list[tuple[str, bytes | None]] | None


class Decoder(_Protocol):
    protocol: str
    # option name -> (type, default); unknown names are a ConfigError
    OPTIONS: dict[str, tuple[type, Any]]

    def __init__(self, options: dict[str, Any]) -> None: ...

    def decode(self, key: bytes | None, value: bytes | None, headers: Headers = None) -> list[ChangeEvent]: ...


@dataclass(frozen=True)
class ColumnDecode:
    """A column-wise decode of a batch of messages: blocks of row changes, and the indices of the messages it
    left to the row-wise `decode` (in order), which gives their events or their exact error."""

    blocks: list[RowBlock]
    row_wise: list[int]


class ColumnDecoder(Decoder, _Protocol):
    def decode_columns(self, keys: Sequence[bytes | None], values: Sequence[bytes | None]) -> ColumnDecode: ...


def column_decoder(decoder: Decoder) -> ColumnDecoder | None:
    """The decoder itself where it decodes column-wise, else None. The caller decodes the messages a batch leaves
    to `decode` after its blocks: a decoder that learns from earlier messages (Simple's schemas) learns from every
    message of the batch, in order, inside `decode_columns`, so each row is read with the schema before it."""
    if not hasattr(decoder, "decode_columns"):
        return None
    column_wise: ColumnDecoder = decoder  # type: ignore[assignment]
    return column_wise


def decoder_class(protocol: str) -> type[Decoder]:
    if protocol not in _DECODERS:
        raise ConfigError(f"unknown protocol {protocol!r}; allowed: {', '.join(PROTOCOLS)}")
    module, name = _DECODERS[protocol]
    cls: type[Decoder] = getattr(importlib.import_module(module), name)
    return cls


def validate_options(protocol: str, options: Mapping[str, Any] | None) -> dict[str, Any]:
    """Options with defaults filled in and types coerced; a ConfigError names the bad one."""
    allowed = decoder_class(protocol).OPTIONS
    result = {name: default for name, (_, default) in allowed.items()}
    for name, raw in (options or {}).items():
        if name not in allowed:
            raise ConfigError(f"unknown option {name!r} for protocol {protocol}; allowed: {', '.join(sorted(allowed))}")
        kind = allowed[name][0]
        result[name] = _coerce(protocol, name, raw, kind)
    return result


def _coerce(protocol: str, name: str, raw: Any, kind: type) -> Any:
    if raw is None or (isinstance(raw, kind) and not (kind is int and isinstance(raw, bool))):
        return raw
    if kind is bool and isinstance(raw, str) and raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    if kind is int and isinstance(raw, str) and raw.lstrip("-").isdigit():
        return int(raw)
    if kind is str and isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return str(raw)
    raise ConfigError(f"option {name!r} for protocol {protocol} must be {kind.__name__}, got {raw!r}")


def sends_watermarks(protocol: str, options: Mapping[str, Any] | None = None) -> bool:
    """Whether a changefeed in this protocol sends resolved timestamps (watermarks) at all."""
    extension = validate_options(protocol, options).get("enable-tidb-extension", False)
    return protocol in ("open", "simple-json", "simple-avro") or (protocol in ("canal-json", "debezium") and extension)


def needs_partition_order(protocol: str) -> bool:
    """Whether a decoder must see each partition's messages in offset order: Simple's decoders learn schemas
    from earlier messages, and an Avro row without a commit ts is placed after the change before it. The other
    protocols decode every message on its own, in any order."""
    return protocol in ("avro", "simple-json", "simple-avro")


# protocols whose one Kafka message may carry changes of several rows: Open's batches, Canal-JSON's `data` list
MULTI_ROW_PROTOCOLS = ("open", "canal-json")
Message = tuple[bytes | None, bytes | None]  # (key, value)


def without_events(
    protocol: str, decoder: Decoder, key: bytes | None, value: bytes | None, drop: Callable[[ChangeEvent], bool]
) -> Message | None:
    """A message of a multi-row protocol without the events `drop` picks (erasure), every other event kept as it
    was: the message itself when none is picked, None when nothing is left. `decoder` decodes each part."""
    if protocol not in MULTI_ROW_PROTOCOLS:
        raise ConfigError(f"{protocol} sends one row per message: a message is dropped or kept whole")
    module = importlib.import_module(_DECODERS[protocol][0])
    rewrite: Callable[..., Message | None] = module.without_events
    return rewrite(decoder, key, value, drop)


def make_decoder(protocol: str, options: Mapping[str, Any] | None = None) -> Decoder:
    cls = decoder_class(protocol)
    return cls(validate_options(protocol, options))


__all__ = [
    "MULTI_ROW_PROTOCOLS",
    "PROTOCOLS",
    "ChangeEvent",
    "ColumnDecode",
    "ColumnDecoder",
    "ConfigError",
    "DecodeError",
    "Decoder",
    "Headers",
    "SchemaNotYetKnown",
    "column_decoder",
    "decoder_class",
    "make_decoder",
    "needs_partition_order",
    "sends_watermarks",
    "validate_options",
    "without_events",
]
