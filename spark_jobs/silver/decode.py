"""Decode bronze rows into canonical event rows, one Arrow batch at a time (runs on executors).

Knows the codecs' entry point and Arrow, nothing of any one protocol and nothing of Spark.
Rows arrive sorted by (topic, partition, offset) so stateful protocols see each partition in order.
A TransientFault (registry or claim-check store unavailable) is not the message's fault: it fails the task
instead of quarantining, and the driver turns it back into the named error (silver.build).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa

from spark_jobs.codecs import DecodeError, SchemaNotYetKnown, make_decoder
from spark_jobs.errors import TransientFault

HANDLE_KEY_ONLY_REASON = (
    "handle-key-only: the message holds only the key (configure claim-check for large messages upstream)"
)
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
    image = after if after is not None else before
    if image is None or not key_columns:
        return None
    return orjson.dumps([image.get(k) for k in key_columns]).decode()


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
    (topic, partition), where a row without a commit ts goes when it is the first of its partition here. A row whose schema is not known yet is tried again once at the
    end of the task (its schema may come later in the same batch) before it is reported waiting.
    """
    decoder = make_decoder(protocol, options)
    for primer in primers:
        try:
            decoder.decode(primer.key, primer.value, None)
        except DecodeError:
            pass
    waiting: list[tuple] = []
    last_ts: dict[tuple[str, int], int] = dict(partition_ts or {})
    for batch in batches:
        out = _empty()
        cols = batch.to_pydict()
        for i in range(batch.num_rows):
            timestamp = cols["timestamp"][i]
            message = (
                cols["topic"][i],
                cols["partition"][i],
                cols["offset"][i],
                int(timestamp.timestamp() * 1000) if timestamp is not None else None,
                cols["key"][i],
                cols["value"][i],
                [(h["key"], h["value"]) for h in cols["headers"][i] or []],
            )
            if _decode_one(decoder, protocol, message, out, last_ts) is not None:
                waiting.append(message)
        yield pa.RecordBatch.from_pydict(out, schema=DECODED_SCHEMA)
    if waiting:
        out = _empty()
        for message in waiting:
            reason = _decode_one(decoder, protocol, message, out, last_ts)
            if reason is not None:
                _append_problem(out, *message[:3], "waiting", reason)
        yield pa.RecordBatch.from_pydict(out, schema=DECODED_SCHEMA)


def _empty() -> dict[str, list]:
    return {name: [] for name in DECODED_SCHEMA.names}


def _decode_one(decoder, protocol: str, message: tuple, out: dict[str, list], last_ts: dict) -> str | None:
    """Decode one message into `out`; returns the reason when it waits for its schema (nothing appended).

    A row that carries no commit timestamp (Avro deletes; every Avro row without the TiDB extension) is
    placed just after the last commit seen on its partition (in this task, or in silver before it), or else at the Kafka record's
    timestamp (milliseconds, with the offset as the logical part): flagged commit_ts_inferred, it orders
    after the changes before it on its partition. An insert or update that holds only the handle key
    (large-message handle-key-only without claim-check) would write NULLs over real values in gold: its
    message goes to quarantine instead.
    """
    topic, partition, offset, kafka_ms, key, value, headers = message
    try:
        events = decoder.decode(key, value, headers)
    except SchemaNotYetKnown as exc:
        return str(exc)
    except DecodeError as exc:
        _append_problem(out, topic, partition, offset, "quarantine", str(exc))
        return None
    except TransientFault:
        raise
    except Exception as exc:  # a codec bug must not stop the pipeline or lose the message
        _append_problem(
            out, topic, partition, offset, "quarantine", f"{protocol}: unexpected {exc.__class__.__name__}: {exc}"
        )
        return None
    if any(e.kind == "row" and e.op != "delete" and "handle_key_only" in e.flags for e in events):
        _append_problem(out, topic, partition, offset, "quarantine", HANDLE_KEY_ONLY_REASON)
        return None
    for index, e in enumerate(events):
        commit_ts, flags = e.commit_ts, e.flags
        if commit_ts is None and e.kind == "row":
            commit_ts = _inferred_commit_ts(last_ts.get((topic, partition)), kafka_ms, offset)
            flags = flags if "commit_ts_inferred" in flags else [*flags, "commit_ts_inferred"]
        if commit_ts is not None and e.kind == "row":
            last_ts[(topic, partition)] = commit_ts
        out["topic"].append(topic)
        out["partition"].append(partition)
        out["offset"].append(offset)
        out["event_index"].append(index)
        out["kind"].append(e.kind)
        out["op"].append(e.op)
        out["database"].append(e.database)
        out["table"].append(e.table or None)
        out["commit_ts"].append(commit_ts)
        out["row_key"].append(row_key(e.key_columns, e.before, e.after) if e.kind == "row" else None)
        out["key_columns"].append(e.key_columns)
        out["before"].append(list(e.before.items()) if e.before is not None else None)
        out["after"].append(list(e.after.items()) if e.after is not None else None)
        out["column_types"].append(list(e.column_types.items()))
        out["schema_version"].append(e.schema_version)
        out["ddl_type"].append(e.ddl_type)
        out["ddl_sql"].append(e.ddl_sql)
        out["table_schema"].append(orjson.dumps(e.table_schema).decode() if e.table_schema is not None else None)
        out["flags"].append(sorted(flags))
        out["reason"].append(None)
    return None


def _inferred_commit_ts(last_on_partition: int | None, kafka_ms: int | None, offset: int) -> int | None:
    if last_on_partition is not None:
        return last_on_partition + 1
    if kafka_ms is None:
        return None
    return (kafka_ms << 18) | (offset & 0x3FFFF)


def _append_problem(out: dict[str, list], topic: str, partition: int, offset: int, kind: str, reason: str) -> None:
    for name in DECODED_SCHEMA.names:
        out[name].append(None)
    out["topic"][-1], out["partition"][-1], out["offset"][-1] = topic, partition, offset
    out["event_index"][-1], out["kind"][-1], out["reason"][-1] = 0, kind, reason
    out["key_columns"][-1], out["column_types"][-1], out["flags"][-1] = [], [], []
