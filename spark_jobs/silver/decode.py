"""Decode bronze rows into canonical event rows, one Arrow batch at a time (runs on executors).

Knows the codecs' entry point and Arrow, nothing of any one protocol and nothing of Spark.
Rows arrive sorted by (topic, partition, offset) so stateful protocols see each partition in order.
A TransientFault (registry or claim-check store unavailable) is not the message's fault: it fails the task
instead of quarantining, and the driver turns it back into the named error (silver.build).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.canonical.events import split_key_change
from spark_jobs.codecs import DecodeError, Headers, SchemaNotYetKnown, make_decoder
from spark_jobs.errors import TransientFault

HANDLE_KEY_ONLY_REASON = (
    "handle-key-only: the message holds only the key (configure claim-check for large messages upstream)"
)
# one bronze row as `_messages` gives it: (topic, partition, offset, kafka_ms, key, value, headers)
Message = tuple[str, int, int, int | None, bytes | None, bytes | None, Headers]
_STR_MAP = pa.map_(pa.string(), pa.string())
DECODED_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("event_index", pa.int32()),
        ("kind", pa.string()),  # row / ddl / watermark / bootstrap / quarantine / waiting
        ("op", pa.string()),
        ("database", pa.string()),
        ("table", pa.string()),
        ("commit_ts", pa.int64()),
        ("row_key", pa.string()),  # JSON array of the handle-key values
        ("key_columns", pa.list_(pa.string())),
        ("before", _STR_MAP),
        ("after", _STR_MAP),
        ("column_types", _STR_MAP),
        ("schema_version", pa.int64()),
        ("ddl_type", pa.string()),
        ("ddl_sql", pa.string()),
        ("table_schema", pa.string()),  # JSON
        ("flags", pa.list_(pa.string())),
        ("reason", pa.string()),  # quarantine / waiting: why
    ]
)


@dataclass(frozen=True)
class Primer:
    """An earlier message that announced a schema (Simple bootstrap or DDL), decoded before a task's rows."""

    key: bytes | None
    value: bytes | None


def row_key(key_columns: list[str], before: dict | None, after: dict | None) -> str | None:
    """The JSON array of the handle-key values (text: the snapshot loader hands it to Spark as a string)."""
    image = after if after is not None else before
    if image is None or not key_columns:
        return None
    return orjson.dumps([image.get(k) for k in key_columns]).decode()


def change_key(commit_ts: int | None, op: str | None, before: dict | None, after: dict | None) -> str:
    """What identifies a change of a table without a handle key (TiCDC replicates one with `force-replicate`):
    its commit ts, its op and both images, so a redelivered copy is the same change and silver keeps it once,
    and gold's change table holds each change as a row of its own (docs/architecture.md, decision 16)."""
    return orjson.dumps([commit_ts, op, before, after], option=orjson.OPT_SORT_KEYS).decode()


def decode_batches(
    batches: Iterator[pa.RecordBatch],
    protocol: str,
    options: dict[str, Any],
    primers: Sequence[Primer] = (),
    partition_ts: dict[tuple[str, int], int] | None = None,
) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: bronze (topic, partition, offset, timestamp, key, value, headers) -> DECODED_SCHEMA rows.

    `primers` are earlier schema-carrying messages (Simple bootstraps and DDL), decoded first so
    that state carries across runs; `partition_ts` the commit ts of the last change silver holds per
    (topic, partition), where a row without a commit ts goes when it is the first of its partition here.
    A row whose schema is not known yet is tried again once at the end of the task (its schema may come
    later in the same batch) before it is reported waiting.
    """
    decoder = make_decoder(protocol, options)
    for primer in primers:
        try:
            decoder.decode(primer.key, primer.value, None)
        except DecodeError:
            pass
    waiting: list[Message] = []
    last_ts: dict[tuple[str, int], int] = dict(partition_ts or {})
    for batch in batches:
        out = DecodedColumns()
        for message in _messages(batch):
            if _decode_one(decoder, protocol, message, out, last_ts) is not None:
                waiting.append(message)
        yield out.record_batch()
    if waiting:
        out = DecodedColumns()
        for message in waiting:
            reason = _decode_one(decoder, protocol, message, out, last_ts)
            if reason is not None:
                out.problem(*message[:3], "waiting", reason)
        yield out.record_batch()


def _messages(batch: pa.RecordBatch) -> Iterator[Message]:
    """(topic, partition, offset, kafka_ms, key, value, headers) per bronze row, each column converted to
    Python once for the whole batch (no per-row datetime: the record time as epoch milliseconds)."""
    column = batch.column
    timestamps = column("timestamp")
    micros = timestamps.cast(pa.timestamp("us", tz=timestamps.type.tz), safe=False).cast(pa.int64())
    headers = column("headers")
    if headers.null_count == len(headers) or not pc.sum(pc.list_value_length(headers)).as_py():
        header_lists: Iterator = itertools.repeat(None)
    else:
        header_lists = ([(h["key"], h["value"]) for h in row] or None if row else None for row in headers.to_pylist())
    return zip(
        column("topic").to_pylist(),
        column("partition").to_pylist(),
        column("offset").to_pylist(),
        pc.divide(micros, 1000).to_pylist(),
        column("key").to_pylist(),
        column("value").to_pylist(),
        header_lists,
    )


class DecodedColumns:
    """One output batch of DECODED_SCHEMA, kept as a Python list per column and turned into Arrow arrays once:
    maps and lists are flattened into keys, values and offsets (no per-row list of pairs for Arrow to convert)."""

    def __init__(self) -> None:
        self.columns: dict[str, list] = {name: [] for name in DECODED_SCHEMA.names}

    def record_batch(self) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays(
            [_array(self.columns[f.name], f.type, f.name in _SHARED_VALUES) for f in DECODED_SCHEMA],
            schema=DECODED_SCHEMA,
        )

    def problem(self, topic: str, partition: int, offset: int, kind: str, reason: str) -> None:
        """A message that did not decode (quarantine) or waits for its schema, with why."""
        columns = self.columns
        for values in columns.values():
            values.append(None)
        columns["topic"][-1], columns["partition"][-1], columns["offset"][-1] = topic, partition, offset
        columns["event_index"][-1], columns["kind"][-1], columns["reason"][-1] = 0, kind, reason
        columns["key_columns"][-1], columns["column_types"][-1], columns["flags"][-1] = [], {}, []


# columns whose values are mostly one shared object per table schema (the codecs cache them): each distinct
# object is converted once and repeated with `take`
_SHARED_VALUES = frozenset({"key_columns", "column_types", "flags"})


def _array(values: list, type_: pa.DataType, shared: bool = False) -> pa.Array:
    """An Arrow array of `type_`; a map or list column from its flattened parts (C loops, not a row at a time)."""
    if not (pa.types.is_map(type_) or pa.types.is_list(type_)):
        return pa.array(values, type_)
    if shared:
        positions: dict[int, int] = {}  # id() is unique here: `values` keeps every object alive
        indices = [positions.setdefault(id(v), len(positions)) for v in values]
        if len(positions) < len(values) // 2:
            distinct = list({id(v): v for v in values}.values())
            return _array(distinct, type_).take(pa.array(indices, pa.int32()))
    present = [v for v in values if v is not None]
    offsets = np.zeros(len(values) + 1, dtype=np.int32)
    np.cumsum([len(v) if v is not None else 0 for v in values], out=offsets[1:])
    mask = None if len(present) == len(values) else pa.array([v is None for v in values])
    keys = pa.array(list(itertools.chain.from_iterable(present)), pa.string())
    if pa.types.is_list(type_):
        return pa.ListArray.from_arrays(pa.array(offsets), keys, type_, mask=mask)
    items = pa.array(list(itertools.chain.from_iterable(v.values() for v in present)), pa.string())
    return pa.MapArray.from_arrays(pa.array(offsets), keys, items, type_, mask=mask)


def _decode_one(decoder, protocol: str, message: Message, out: DecodedColumns, last_ts: dict) -> str | None:
    """Decode one message into `out`; returns the reason when it waits for its schema (nothing appended).

    A row that carries no commit timestamp (Avro deletes; every Avro row without the TiDB extension) is
    placed just after the last commit seen on its partition (in this task, or in silver before it), or else
    at the Kafka record's timestamp (milliseconds, with the offset as the logical part): flagged
    commit_ts_inferred, it orders after the changes before it on its partition. An insert or update that
    holds only the handle key (large-message handle-key-only without claim-check) would write NULLs over
    real values in gold: its message goes to quarantine instead. An update that changed its row's key
    becomes the delete of the old key and the insert of the new (`split_key_change`).
    """
    topic, partition, offset, kafka_ms, key, value, headers = message
    try:
        events = decoder.decode(key, value, headers)
    except SchemaNotYetKnown as exc:
        return str(exc)
    except DecodeError as exc:
        out.problem(topic, partition, offset, "quarantine", str(exc))
        return None
    except TransientFault:
        raise
    except Exception as exc:  # a codec bug must not stop the pipeline or lose the message
        out.problem(topic, partition, offset, "quarantine", f"{protocol}: unexpected {exc.__class__.__name__}: {exc}")
        return None
    if any(e.flags and e.kind == "row" and e.op != "delete" and "handle_key_only" in e.flags for e in events):
        out.problem(topic, partition, offset, "quarantine", HANDLE_KEY_ONLY_REASON)
        return None
    columns = out.columns
    for index, e in enumerate(e for event in events for e in split_key_change(event)):
        commit_ts, flags, is_row = e.commit_ts, e.flags, e.kind == "row"
        if commit_ts is None and is_row:
            commit_ts = _inferred_commit_ts(last_ts.get((topic, partition)), kafka_ms, offset)
            flags = flags if "commit_ts_inferred" in flags else [*flags, "commit_ts_inferred"]
        if commit_ts is not None and is_row:
            last_ts[(topic, partition)] = commit_ts
        columns["topic"].append(topic)
        columns["partition"].append(partition)
        columns["offset"].append(offset)
        columns["event_index"].append(index)
        columns["kind"].append(e.kind)
        columns["op"].append(e.op)
        columns["database"].append(e.database)
        columns["table"].append(e.table or None)
        columns["commit_ts"].append(commit_ts)
        columns["row_key"].append(
            (
                row_key(e.key_columns, e.before, e.after)
                if e.key_columns
                else change_key(commit_ts, e.op, e.before, e.after)
            )
            if is_row
            else None
        )
        columns["key_columns"].append(e.key_columns)
        columns["before"].append(e.before)
        columns["after"].append(e.after)
        columns["column_types"].append(e.column_types)
        columns["schema_version"].append(e.schema_version)
        columns["ddl_type"].append(e.ddl_type)
        columns["ddl_sql"].append(e.ddl_sql)
        columns["table_schema"].append(orjson.dumps(e.table_schema) if e.table_schema is not None else None)
        columns["flags"].append(sorted(flags) if flags else flags)
        columns["reason"].append(None)
    return None


def _inferred_commit_ts(last_on_partition: int | None, kafka_ms: int | None, offset: int) -> int | None:
    if last_on_partition is not None:
        return last_on_partition + 1
    if kafka_ms is None:
        return None
    return (kafka_ms << 18) | (offset & 0x3FFFF)
