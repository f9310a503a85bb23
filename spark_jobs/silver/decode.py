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

from spark_jobs.canonical.blocks import RowBlock, struct_of
from spark_jobs.canonical.events import split_key_change
from spark_jobs.codecs import DecodeError, Headers, SchemaNotYetKnown, column_decoder, make_decoder
from spark_jobs.errors import TransientFault

HANDLE_KEY_ONLY_REASON = (
    "handle-key-only: the message holds only the key (configure claim-check for large messages upstream)"
)
COMMIT_TS_RANGE_REASON = "commit ts beyond a TSO's range (0 to 2^63 - 1): silver keeps it as a signed 64-bit integer"
_MAX_TS = (1 << 63) - 1
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
    column_wise: bool = True,
) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: bronze (topic, partition, offset, timestamp, key, value, headers) -> DECODED_SCHEMA rows.

    `primers` are earlier schema-carrying messages (Simple bootstraps and DDL), decoded first so
    that state carries across runs; `partition_ts` the commit ts of the last change silver holds per
    (topic, partition), where a row without a commit ts goes when it is the first of its partition here.
    A row whose schema is not known yet is tried again once at the end of the task (its schema may come
    later in the same batch) before it is reported waiting. Where the protocol's decoder decodes column-wise
    (and `column_wise`), a batch's row messages of the usual form become `block_rows` without a Python object
    per value, and only the other messages are decoded one by one.
    """
    decoder = make_decoder(protocol, options)
    by_columns = column_decoder(decoder) if column_wise else None
    for primer in primers:
        try:
            decoder.decode(primer.key, primer.value, None)
        except DecodeError:
            pass
    waiting: list[Message] = []
    placement = Placement(partition_ts, remember=protocol == "avro")
    held: DecodedColumns | None = None  # a batch's rows wait for the next batch, whose first change may place them
    for batch in batches:
        out = DecodedColumns()
        rest = batch
        if by_columns is not None:
            decoded = by_columns.decode_columns(batch.column("key").to_pylist(), batch.column("value").to_pylist())
            for block in decoded.blocks:
                yield block_rows(block, batch)
            rest = batch.take(pa.array(decoded.row_wise, pa.int32()))
        for message in _messages(rest):
            if _decode_one(decoder, protocol, message, out, placement) is not None:
                waiting.append(message)
        if held is not None:
            yield held.record_batch()
        held = out
    if waiting:
        out = DecodedColumns()
        for message in waiting:
            reason = _decode_one(decoder, protocol, message, out, placement)
            if reason is not None:
                out.problem(*message[:3], "waiting", reason)
        yield out.record_batch()
    if held is not None:
        yield held.record_batch()


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


def _decode_one(decoder, protocol: str, message: Message, out: DecodedColumns, placement: Placement) -> str | None:
    """Decode one message into `out`; returns the reason when it waits for its schema (nothing appended).

    A row that carries no commit timestamp (Avro deletes; every Avro row without the TiDB extension) is
    placed just after the last commit seen on its partition (in this task, or in silver before it), or else
    at the Kafka record's timestamp (milliseconds, with the offset as the logical part): flagged
    commit_ts_inferred, it orders after the changes before it on its partition (`Placement`). An insert or update that
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
    if any(e.commit_ts is not None and not 0 <= e.commit_ts <= _MAX_TS for e in events):
        out.problem(topic, partition, offset, "quarantine", f"{protocol}: {COMMIT_TS_RANGE_REASON}")
        return None
    columns = out.columns
    for index, e in enumerate(e for event in events for e in split_key_change(event)):
        commit_ts, flags, is_row = e.commit_ts, e.flags, e.kind == "row"
        if commit_ts is None and is_row:
            # a keyless row's key holds its commit ts (`change_key`): it keeps the place it is given here
            held = columns["commit_ts"] if e.key_columns else None
            commit_ts = placement.inferred((topic, partition), (key, value, index), kafka_ms, offset, held)
            flags = flags if "commit_ts_inferred" in flags else [*flags, "commit_ts_inferred"]
        elif commit_ts is not None and is_row:
            placement.stamped((topic, partition), (key, value, index), commit_ts)
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


def block_rows(block: RowBlock, batch: pa.RecordBatch) -> pa.RecordBatch:
    """DECODED_SCHEMA rows of a block decoded from `batch`'s values, as `_decode_one` makes them of each event:
    an update that changed its row's key split in two (`split_key_change`), each row's event index within its
    message and its row key, the images as maps. Arrow compute throughout, a Python object per distinct value at
    most (a key value that JSON must escape, a table without a key)."""
    message, commit_ts, op, before, after = block.message, block.commit_ts, block.op, block.before, block.after
    row_flags = dict(block.row_flags)
    names = block.names
    changed = _key_changed(block)
    if changed is not None:
        split = changed.to_numpy(zero_copy_only=False)
        repeats = 1 + split.astype(np.int64)
        ends = np.cumsum(repeats)
        rows = pa.array(np.repeat(np.arange(len(block)), repeats))
        deleting = np.zeros(len(rows), bool)
        deleting[(ends - repeats)[split]] = True
        inserting = np.zeros(len(rows), bool)
        inserting[(ends - 1)[split]] = True
        message, commit_ts = message.take(rows), commit_ts.take(rows)
        op = pc.if_else(deleting, "delete", pc.if_else(inserting, "insert", op.take(rows)))
        before, after = before.take(rows), after.take(rows)
        before = struct_of(
            names, [before.field(j) for j in range(len(names))], pc.and_not(before.is_valid(), inserting)
        )
        after = struct_of(names, [after.field(j) for j in range(len(names))], pc.and_not(after.is_valid(), deleting))
        row_flags = {flag: mask.take(rows) for flag, mask in row_flags.items()}
        row_flags["key_change_split"] = pa.array(deleting | inserting)
    count = len(message)
    positions = message.to_numpy()
    first = np.searchsorted(positions, positions, side="left")
    every = pa.array(np.zeros(count, np.int32))
    arrays = {
        "topic": batch.column("topic").take(message),
        "partition": batch.column("partition").take(message),
        "offset": batch.column("offset").take(message),
        "event_index": pa.array((np.arange(count) - first).astype(np.int32)),
        "kind": pa.array(["row"], pa.string()).take(every),
        "op": op,
        "database": pa.array([block.database], pa.string()).take(every),
        "table": pa.array([block.table], pa.string()).take(every),
        "commit_ts": commit_ts,
        "row_key": _row_keys(block, commit_ts, op, before, after),
        "key_columns": pa.array([block.key_columns], pa.list_(pa.string())).take(every),
        "before": _map_of(before, names),
        "after": _map_of(after, names),
        "column_types": _array([block.column_types], _STR_MAP).take(every),
        "schema_version": pa.array([block.schema_version], pa.int64()).take(every),
        "flags": _flags(block.flags, row_flags, count),
    }
    return pa.RecordBatch.from_arrays(
        [arrays[f.name] if f.name in arrays else pa.nulls(count, f.type) for f in DECODED_SCHEMA],
        schema=DECODED_SCHEMA,
    )


def _key_changed(block: RowBlock) -> pa.Array | None:
    """Which updates changed their row's key (both images hold it; a null differs from any text); None if none."""
    key = [k for k in block.key_columns if k in block.names]
    is_update = pc.equal(block.op, "update")
    if not key or not pc.any(is_update).as_py():
        return None
    changed = pa.array(np.zeros(len(block), bool))
    for k in key:
        old, new = block.before.field(k), block.after.field(k)
        differs = pc.or_(pc.xor(old.is_null(), new.is_null()), pc.fill_null(pc.not_equal(old, new), False))
        changed = pc.or_(changed, differs)
    changed = pc.and_(changed, is_update)
    return changed if pc.any(changed).as_py() else None


def _row_keys(block: RowBlock, commit_ts: pa.Array, op: pa.Array, before: pa.Array, after: pa.Array) -> pa.Array:
    """`row_key` of each row, or `change_key` for a table without a key (force-replicate, row by row)."""
    if not block.key_columns:
        return pa.array(
            [
                change_key(ts, o, b, a)
                for ts, o, b, a in zip(commit_ts.to_pylist(), op.to_pylist(), before.to_pylist(), after.to_pylist())
            ],
            pa.string(),
        )
    has_after = after.is_valid()
    parts = []
    for k in block.key_columns:
        if k in block.names:
            parts.append(_json_text(pc.if_else(has_after, after.field(k), before.field(k))))
        else:
            parts.append(pa.array(["null"] * len(after), pa.string()))
    return pc.binary_join_element_wise("[", pc.binary_join_element_wise(*parts, ","), "]", "")


# text that JSON writes escaped: orjson escapes the quote, the backslash and the control characters
_ESCAPED = r'["\\\x00-\x1f]'


def _json_text(values: pa.Array) -> pa.Array:
    """Each text as the JSON string `orjson.dumps` writes (null as `null`)."""
    quoted = pc.binary_join_element_wise('"', values, '"', "")
    escaped = pc.fill_null(pc.match_substring_regex(values, _ESCAPED), False)
    if pc.any(escaped).as_py():
        texts = [orjson.dumps(v).decode() for v in values.filter(escaped).to_pylist()]
        quoted = pc.replace_with_mask(quoted, escaped, pa.array(texts, pa.string()))
    return pc.fill_null(quoted, "null")


def _map_of(image: pa.Array, names: list[str]) -> pa.Array:
    """A struct array of images as a map array (null where the struct is), each map's keys in `names` order."""
    present = image.is_valid().to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(present)
    width, count = len(names), len(image)
    items = pa.concat_arrays([image.field(j) for j in range(width)])
    order = (np.arange(width)[None, :] * count + rows[:, None]).ravel()
    offsets = np.zeros(count + 1, np.int32)
    np.cumsum(present * width, out=offsets[1:])
    return pa.MapArray.from_arrays(
        pa.array(offsets),
        pa.array(names, pa.string()).take(pa.array(np.tile(np.arange(width), len(rows)))),
        items.take(pa.array(order)),
        _STR_MAP,
        mask=pa.array(~present),
    )


def _flags(flags: tuple[str, ...], row_flags: dict[str, pa.Array], count: int) -> pa.Array:
    """Each row's sorted flags: the block's, and those of `row_flags` that mark it."""
    names = list(row_flags)
    code = np.zeros(count, np.int64)
    for bit, flag in enumerate(names):
        code |= row_flags[flag].to_numpy(zero_copy_only=False).astype(np.int64) << bit
    distinct, inverse = np.unique(code, return_inverse=True)
    lists = [sorted({*flags, *(f for bit, f in enumerate(names) if c >> bit & 1)}) for c in distinct.tolist()]
    return pa.array(lists, pa.list_(pa.string())).take(pa.array(inverse.astype(np.int32)))


class Placement:
    """Where a row without a commit ts goes on its partition (Avro's deletes carry none): just after the change
    before it, since a partition's changes come in commit order.

    Except where TiCDC sends a partition's recent messages again (after a restart, at new offsets): a delete at
    the head of what is sent again would land after every change that followed it the first time, and delete a
    row inserted again since. The change after it tells: one older than the change before the delete, or a copy
    of that very change (of its commit ts, where a new change would be the same transaction going on). Then the
    deletes waiting before it are matched, from the last back, against the messages before that change's first
    copy: a delete identical to the message at the same distance is its copy and takes its commit ts (silver then
    keeps one of the two); the others are the partition's own, and stay. Where the first copy was decoded in an
    earlier run and nothing of this partition came before the deletes here, they are copies, and go just before
    the change.

    It remembers the messages of a partition decoded one by one only where rows may lack a commit ts
    (`remember`: Avro), at most `MEMORY` of them: past that it starts again, and the rows waiting then keep
    their place after the change before them."""

    MEMORY = 100_000

    def __init__(self, partition_ts: dict[tuple[str, int], int] | None = None, remember: bool = True) -> None:
        self.last: dict[tuple[str, int], int] = dict(partition_ts or {})
        self.remember = remember
        # per partition, the messages decoded one by one in order: (fingerprint, commit ts given or carried)
        self._seen: dict[tuple[str, int], list[list]] = {}
        self._first: dict[tuple[tuple[str, int], int, int], int] = {}  # (partition, commit ts, fingerprint) -> position
        # partition -> (the commit ts before its waiting rows, whether it is of this task's messages,
        # [(position, held commit ts column, index)])
        self._waiting: dict[tuple[str, int], tuple[int, bool, list[tuple[int, list, int]]]] = {}

    def inferred(
        self, partition: tuple[str, int], row: tuple, kafka_ms: int | None, offset: int, held: list | None
    ) -> int | None:
        """The commit ts of a row without one, about to be appended to `held` (its batch's commit ts column, which
        the next change may still correct; None: placed for good). `row`: its message's key and value and its
        index there, hashed only where messages are remembered."""
        before = self.last.get(partition)
        commit_ts = _inferred_commit_ts(before, kafka_ms, offset)
        if commit_ts is not None:
            self.last[partition] = commit_ts
        if self.remember:
            seen = self._remembered(partition)
            if commit_ts is not None and before is not None and held is not None:
                self._waiting.setdefault(partition, (before, bool(seen), []))[2].append((len(seen), held, len(held)))
            seen.append([hash(row), commit_ts])
        return commit_ts

    def stamped(self, partition: tuple[str, int], row: tuple, commit_ts: int) -> None:
        """A change with its commit ts: where it is older than the change before the rows waiting on its
        partition, they are copies or the partition's own (above)."""
        if not self.remember:
            self.last[partition] = commit_ts
            return
        fingerprint = hash(row)
        seen = self._remembered(partition)
        here = len(seen)
        seen.append([fingerprint, commit_ts])
        first = self._first.setdefault((partition, commit_ts, fingerprint), here)
        self.last[partition] = commit_ts
        waiting = self._waiting.pop(partition, None)
        if waiting is None or commit_ts > waiting[0] or (commit_ts == waiting[0] and first == here):
            return
        _, anchored, rows = waiting
        if first < here:  # its first copy was decoded here: match the waiting rows against what came before it
            shift = here - first
            for position, held, index in reversed(rows):
                original = seen[position - shift] if position >= shift else None
                if original is None or original[0] != seen[position][0] or original[1] is None:
                    break
                held[index] = seen[position][1] = original[1]
        elif not anchored:  # sent again from before this run: every waiting row is a copy
            for n, (position, held, index) in enumerate(rows):
                held[index] = seen[position][1] = commit_ts - len(rows) + n

    def _remembered(self, partition: tuple[str, int]) -> list[list]:
        seen = self._seen.setdefault(partition, [])
        if len(seen) >= self.MEMORY:
            seen.clear()
            self._waiting.pop(partition, None)
            self._first = {k: v for k, v in self._first.items() if k[0] != partition}
        return seen


def _inferred_commit_ts(last_on_partition: int | None, kafka_ms: int | None, offset: int) -> int | None:
    if last_on_partition is not None:
        return last_on_partition + 1
    if kafka_ms is None:
        return None
    return (kafka_ms << 18) | (offset & 0x3FFFF)
