"""TiCDC Open Protocol encoder for the simulator, byte for byte as TiCDC's Go encoder writes it.

Modelled on pingcap/ticdc `pkg/sink/codec/open` (codec.go, encoder.go): keys and values are written
field by field with jsoniter (HTML characters not escaped), columns in table order, each as
{"t": type code, "h": true (handle key only), "f": column flags, "v": value}; rows are batched up
to `max-batch-size` rows and `max-message-bytes`; DDL and resolved events are one per message.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from decimal import Decimal
from typing import Any

from spark_jobs.canonical.events import ChangeEvent
from spark_jobs.canonical.values import (
    canonical_type,
    decimal_scale,
    enum_elements,
    fsp_of,
    parse_type,
    text_bytes,
    text_date,
    text_datetime,
    text_decimal,
    text_float,
    text_time,
    to_float32,
)
from spark_jobs.codecs.large_message import compress, write_claim_check
from spark_jobs.codecs.open_protocol import parse_time_zone
from spark_jobs.ddl import interpret
from ticdc_devkit.simulator.model import Bootstrap, Ddl, Event, RowChange, Table, Watermark, expected_event

BATCH_VERSION = (1).to_bytes(8, "big")
# sarama's per-record overhead TiCDC adds when it measures a message (common.MaxRecordOverhead)
MAX_RECORD_OVERHEAD = 5 * 5 + 10 + 1

TYPE_CODES = {
    "tinyint": 1,
    "smallint": 2,
    "int": 3,
    "float": 4,
    "double": 5,
    "timestamp": 7,
    "bigint": 8,
    "mediumint": 9,
    "date": 10,
    "time": 11,
    "datetime": 12,
    "year": 13,
    "varchar": 15,
    "varbinary": 15,
    "bit": 16,
    "json": 245,
    "decimal": 246,
    "enum": 247,
    "set": 248,
    "tinytext": 249,
    "tinyblob": 249,
    "mediumtext": 250,
    "mediumblob": 250,
    "longtext": 251,
    "longblob": 251,
    "text": 252,
    "blob": 252,
    "char": 254,
    "binary": 254,
}
# Column types TiDB gives a character set; every other column has charset "binary" (Binary flag).
CHARACTER_TYPES = ("char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set")

BINARY_FLAG, HANDLE_KEY_FLAG, PRIMARY_KEY_FLAG = 0x01, 0x02, 0x08
MULTIPLE_KEY_FLAG, NULLABLE_FLAG, UNSIGNED_FLAG = 0x20, 0x40, 0x80

# TiDB ActionType for each ddl_type (rename column is a modify-column job in TiDB)
ACTION_TYPES = {
    "create_database": 1,
    "drop_database": 2,
    "create_table": 3,
    "drop_table": 4,
    "add_column": 5,
    "drop_column": 6,
    "create_index": 7,
    "drop_index": 8,
    "truncate_table": 11,
    "modify_column": 12,
    "rename_column": 12,
    "rename_table": 14,
    "add_partition": 19,
    "drop_partition": 20,
    "truncate_partition": 23,
    "recover_table": 25,
    "exchange_partition": 42,
    "multi_schema_change": 61,
    "reorganize_partition": 64,
}
MULTI_SCHEMA_CHANGE, RENAME_TABLES = 61, 47
# (ddl_type, words of the statement, the more specific action they mean)
_ACTIONS_BY_WORDS = [
    ("create_index", "PRIMARY KEY", 32),
    ("drop_index", "PRIMARY KEY", 33),
    ("reorganize_partition", "PARTITION BY", 71),
    ("reorganize_partition", "REMOVE PARTITIONING", 72),
    ("recover_table", "FLASHBACK DATABASE", 63),
    ("modify_column", "SET DEFAULT", 15),
    ("modify_column", "DROP DEFAULT", 15),
]
# actions of the statements without a ddl_type of their own (alter_table, other), by a word they hold
_OTHER_ACTIONS = [
    ("ALTER DATABASE", 26),
    ("CREATE VIEW", 21),
    ("DROP VIEW", 24),
    ("COMMENT", 17),
    ("AUTO_INCREMENT", 13),
    ("RENAME INDEX", 18),
    ("TIFLASH REPLICA", 30),
    ("CHARSET", 22),
    ("CHARACTER SET", 22),
    ("COLLATE", 22),
]

DEFAULT_OPTIONS = {
    "enable-old-value": True,
    "only-output-updated-columns": False,
    "delete-only-output-handle-key-columns": False,
    "large-message-handle-compression": "none",
    "large-message-handle-option": "none",
    "claim-check-storage-uri": None,
    "large-message-threshold": None,  # unset: max-message-bytes, as TiCDC decides
    "max-batch-size": 16,
    "max-message-bytes": 1048576,
    "time-zone": "UTC",
}

_JSON_ESCAPES = {i: f"\\u{i:04x}" for i in range(0x20)}
_JSON_ESCAPES.update({ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t", ord('"'): '\\"', ord("\\"): "\\\\"})


def json_string(text: str) -> str:
    """A JSON string as jsoniter writes it with EscapeHTML off: only quote, backslash and controls escaped."""
    return '"' + text.translate(_JSON_ESCAPES) + '"'


_GO_SHORT_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def go_quote(data: bytes) -> str:
    """Go's strconv.Quote(string(data)) without its quotes: invalid UTF-8 as \\xNN, unprintables escaped."""
    text = data.decode("utf-8", "surrogateescape")
    if text.isprintable() and '"' not in text and "\\" not in text:
        return text
    parts = []
    for char in text:
        code = ord(char)
        if 0xDC80 <= code <= 0xDCFF:
            parts.append(f"\\x{code - 0xDC00:02x}")
        elif char == '"' or char == "\\":
            parts.append("\\" + char)
        elif char.isprintable():
            parts.append(char)
        elif char in _GO_SHORT_ESCAPES:
            parts.append(_GO_SHORT_ESCAPES[char])
        elif code < 0x20 or code == 0x7F:
            parts.append(f"\\x{code:02x}")
        elif code < 0x10000:
            parts.append(f"\\u{code:04x}")
        else:
            parts.append(f"\\U{code:08x}")
    return "".join(parts)


def go_float(value: float, bits: int) -> str:
    """jsoniter's WriteFloat32/64: shortest digits, positional unless below 1e-6 or from 1e21 on."""
    if bits == 32:
        value = to_float32(value)
        shortest = text_float(value)
        small = to_float32(abs(value)) < to_float32(1e-6)
    else:
        shortest = repr(float(value))
        small = abs(value) < 1e-6
    digits = Decimal(shortest)
    if value != 0 and (small or abs(value) >= 1e21):
        return format(digits, "e")
    text = format(digits, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def _bool_option(value) -> bool:
    return value.lower() == "true" if isinstance(value, str) else bool(value)


class _ColumnSpec:
    """How one column is written: its type code, flags and value writer."""

    __slots__ = ("base", "flag", "head", "is_key", "is_zero", "name", "write")

    def __init__(self, table: Table, index: int, zone):
        column = table.columns[index]
        base, _, unsigned = parse_type(column.type)
        self.name = column.name
        self.base = base
        self.is_key = column.name in table.key
        code = TYPE_CODES[base]
        flag = 0 if base in CHARACTER_TYPES else BINARY_FLAG
        if self.is_key:
            flag |= HANDLE_KEY_FLAG | PRIMARY_KEY_FLAG | (MULTIPLE_KEY_FLAG if len(table.key) > 1 else 0)
        elif column.nullable:
            flag |= NULLABLE_FLAG
        if unsigned:
            flag |= UNSIGNED_FLAG
        self.flag = flag
        self.head = (
            json_string(column.name)
            + ':{"t":'
            + str(code)
            + (',"h":true' if self.is_key else "")
            + ',"f":'
            + str(flag)
            + ',"v":'
        )
        self.write, self.is_zero = _value_writer(column.type, base, zone)

    def field(self, value) -> str:
        return self.head + ("null" if value is None else self.write(value)) + "}"


def _value_writer(definition: str, base: str, zone):
    """(value -> JSON text, value -> whether TiCDC treats it as zero in only-updated-columns `p`)."""
    never = lambda value: False  # noqa: E731
    if base in ("tinyint", "smallint", "mediumint", "int", "bigint", "bit", "year"):
        return (lambda value: str(int(value))), never
    if base == "float":
        return (lambda value: go_float(value, 32)), never
    if base == "double":
        return (lambda value: go_float(value, 64)), never
    if base == "decimal":
        scale = decimal_scale(definition)
        return (lambda value: json_string(text_decimal(Decimal(value), scale))), (lambda value: Decimal(value) == 0)
    if base == "date":
        return (lambda value: json_string(text_date(value))), never
    if base == "datetime":
        fsp = fsp_of(definition)
        return (lambda value: json_string(text_datetime(value, fsp))), never
    if base == "timestamp":
        fsp = fsp_of(definition)

        def timestamp(value: dt.datetime) -> str:
            if zone is not None:
                value = value.replace(tzinfo=dt.UTC).astimezone(zone).replace(tzinfo=None)
            return json_string(text_datetime(value, fsp))

        return timestamp, never
    if base == "time":
        # TiCDC reads TIME with fsp 0 (row.GetDuration(idx, 0)): the fraction is cut off
        return (lambda value: json_string(text_time(value, 0))), (
            lambda value: text_time(value, 0).lstrip("-") == "00:00:00"
        )
    if base == "json":
        return json_string, _json_is_zero
    if base == "enum":
        elements = enum_elements(definition)
        index = lambda label: 0 if label == "" else elements.index(label) + 1  # noqa: E731
        return (lambda value: str(index(value))), (lambda value: index(value) == 0)
    if base == "set":
        elements = enum_elements(definition)

        def bitmask(labels) -> int:
            chosen = set(labels.split(",")) - {""} if isinstance(labels, str) else set(labels)
            return sum(1 << i for i, label in enumerate(elements) if label in chosen)

        return (lambda value: str(bitmask(value))), (lambda value: bitmask(value) == 0)
    if base in ("tinyblob", "blob", "mediumblob", "longblob"):
        return (lambda value: '"' + text_bytes(value) + '"'), (lambda value: len(value) == 0)
    if base in ("tinytext", "text", "mediumtext", "longtext"):
        return (lambda value: '"' + text_bytes(value.encode("utf-8")) + '"'), (lambda value: len(value) == 0)
    if base in ("binary", "varbinary"):
        return (lambda value: json_string(go_quote(value))), (lambda value: len(value) == 0)
    if base in ("char", "varchar"):
        return json_string, (lambda value: len(value) == 0)
    raise ValueError(f"the Open Protocol simulator has no encoding for column type {definition!r}")


def _json_is_zero(text: str) -> bool:
    """TiDB's BinaryJSON.IsZero: only a numeric JSON 0 is zero."""
    try:
        parsed = json.loads(text)
    except ValueError:
        return False
    return not isinstance(parsed, bool) and isinstance(parsed, (int, float)) and parsed == 0


def _changed(spec: _ColumnSpec, old, new) -> bool:
    """Whether TiCDC's only-updated-columns comparison sees a change (FLOAT compares as float32)."""
    if spec.base == "float":
        return to_float32(old) != to_float32(new)
    return old != new


class OpenEncoder:
    """Encodes one partition's logical events as TiCDC's Open Protocol messages."""

    DDL_TO_ALL_PARTITIONS = True

    def __init__(self, options: dict):
        merged = {**DEFAULT_OPTIONS, **options}  # other keys (topic, other protocols' options) do not apply
        self.old_value = _bool_option(merged["enable-old-value"])
        self.only_updated = _bool_option(merged["only-output-updated-columns"])
        self.delete_keys_only = _bool_option(merged["delete-only-output-handle-key-columns"])
        self.compression = merged["large-message-handle-compression"] or "none"
        self.large_message = merged["large-message-handle-option"] or "none"
        if self.large_message not in ("none", "handle-key-only", "claim-check"):
            raise ValueError(f"unknown large-message-handle-option {self.large_message!r}")
        self.claim_check_uri = merged["claim-check-storage-uri"]
        if self.large_message == "claim-check" and not self.claim_check_uri:
            raise ValueError("large-message-handle-option claim-check needs claim-check-storage-uri")
        self.max_batch_size = int(merged["max-batch-size"])
        self.max_message_bytes = int(merged["max-message-bytes"])
        threshold = merged["large-message-threshold"]
        self.threshold = self.max_message_bytes if threshold is None else int(threshold)
        self.zone = parse_time_zone(merged["time-zone"])
        self._specs: dict[Table, list[_ColumnSpec]] = {}

    def specs(self, table: Table) -> list[_ColumnSpec]:
        specs = self._specs.get(table)
        if specs is None:
            specs = self._specs[table] = [_ColumnSpec(table, i, self.zone) for i in range(len(table.columns))]
        return specs

    # -- single items

    def row_item(
        self, change: RowChange, handle_key_only: bool = False, claim_check_location: str = ""
    ) -> tuple[bytes, bytes]:
        """(key JSON, compressed value JSON) of one row, as codec.go encodeRowChangedEvent writes them."""
        table = change.table
        key = (
            '{"ts":'
            + str(change.commit_ts)
            + ',"scm":'
            + json_string(table.database)
            + ',"tbl":'
            + json_string(table.name)
            + ',"t":1'
        )
        if handle_key_only:
            key += ',"ohk":true'
        if claim_check_location:
            key += ',"ohk":false,"ccl":' + json_string(claim_check_location)
        key += "}"
        specs = self.specs(table)
        if handle_key_only or (change.op == "delete" and self.delete_keys_only):  # the latter unmarked
            specs = [spec for spec in specs if spec.is_key]
        if change.op == "delete":
            value = '{"d":{' + self._fields(specs, change.before) + "}}"
        elif change.op == "insert":
            value = '{"u":{' + self._fields(specs, change.after) + "}}"
        else:
            value = '{"u":{' + self._fields(specs, change.after) + "}"
            if self.old_value:
                if self.only_updated:
                    value += ',"p":{' + self._updated_fields(specs, change.before, change.after) + "}"
                else:
                    value += ',"p":{' + self._fields(specs, change.before) + "}"
            value += "}"
        return key.encode("utf-8"), compress(value.encode("utf-8"), self.compression)

    @staticmethod
    def _fields(specs: list[_ColumnSpec], row: dict[str, Any]) -> str:
        return ",".join(spec.field(row.get(spec.name)) for spec in specs)

    @staticmethod
    def _updated_fields(specs: list[_ColumnSpec], before: dict[str, Any], after: dict[str, Any]) -> str:
        """codec.go writeUpdatedColumnFieldValues: changed columns only, a zero old value written as null."""
        fields = []
        for spec in specs:
            old, new = before.get(spec.name), after.get(spec.name)
            if old is None and new is None:
                continue
            if old is None:
                fields.append(spec.field(None))
            elif new is None:
                fields.append(spec.field(old))
            elif _changed(spec, old, new):
                fields.append(spec.field(None if spec.is_zero(old) else old))
        return ",".join(fields)

    @staticmethod
    def message_length(key: bytes, value: bytes) -> int:
        """TiCDC's size of a single-row message: items, both length prefixes, version and record overhead."""
        return len(key) + len(value) + MAX_RECORD_OVERHEAD + 16 + 8

    def is_large(self, change: RowChange) -> bool:
        key, value = self.row_item(change)
        return self.message_length(key, value) > self.threshold

    def ddl_message(self, ddl: Ddl) -> tuple[bytes, bytes]:
        key = (
            '{"ts":'
            + str(ddl.commit_ts)
            + ',"scm":'
            + json_string(ddl.database)
            + ',"tbl":'
            + json_string(ddl.table or "")
            + ',"t":2}'
        ).encode("utf-8")
        value = compress(
            ('{"q":' + json_string(ddl.sql) + ',"t":' + str(action_type(ddl)) + "}").encode("utf-8"), self.compression
        )
        return (BATCH_VERSION + len(key).to_bytes(8, "big") + key, len(value).to_bytes(8, "big") + value)

    @staticmethod
    def resolved_message(ts: int) -> tuple[bytes, bytes]:
        key = ('{"ts":' + str(ts) + ',"t":3}').encode("utf-8")
        return BATCH_VERSION + len(key).to_bytes(8, "big") + key, bytes(8)

    def _row_for_message(self, change: RowChange) -> tuple[bytes, bytes]:
        """The row item, replaced by a handle-key-only or claim-check item when it is too large."""
        key, value = self.row_item(change)
        if self.message_length(key, value) <= self.threshold:
            return key, value
        if self.large_message == "none":
            raise ValueError(
                f"row of {change.table.database}.{change.table.name} at {change.commit_ts} is "
                f"{self.message_length(key, value)} bytes, over {self.threshold} (ErrMessageTooLarge)"
            )
        if self.large_message == "claim-check":
            location = self.claim_check_uri.rstrip("/") + "/" + str(uuid.uuid4()) + ".json"
            write_claim_check(
                location, BATCH_VERSION + len(key).to_bytes(8, "big") + key, len(value).to_bytes(8, "big") + value
            )
            key, value = self.row_item(change, handle_key_only=True, claim_check_location=location)
        else:
            key, value = self.row_item(change, handle_key_only=True)
        if self.message_length(key, value) > self.threshold:
            raise ValueError(
                f"row of {change.table.database}.{change.table.name} at {change.commit_ts} is too "
                "large even with only its handle key (ErrMessageTooLarge)"
            )
        return key, value

    # -- the stream

    def encode(self, events: list[Event]) -> list[tuple[bytes, bytes, list]]:
        out: list[tuple[bytes, bytes, list]] = []
        batch: list[Any] = []  # [key bytearray, value bytearray, rows]

        def flush():
            if batch:
                out.append((bytes(batch[0]), bytes(batch[1]), []))
                batch.clear()

        for event in events:
            if isinstance(event, RowChange):
                key, value = self._row_for_message(event)
                key_item = len(key).to_bytes(8, "big") + key
                value_item = len(value).to_bytes(8, "big") + value
                length = len(key) + len(value) + 16
                if (
                    not batch
                    or len(batch[0]) + len(batch[1]) + MAX_RECORD_OVERHEAD + length > self.max_message_bytes
                    or batch[2] >= self.max_batch_size
                ):
                    flush()
                    batch.extend([bytearray(BATCH_VERSION + key_item), bytearray(value_item), 1])
                else:
                    batch[0] += key_item
                    batch[1] += value_item
                    batch[2] += 1
            elif isinstance(event, Ddl):
                flush()
                key, value = self.ddl_message(event)
                out.append((key, value, []))
            elif isinstance(event, Watermark):
                flush()
                key, value = self.resolved_message(event.ts)
                out.append((key, value, []))
            elif isinstance(event, Bootstrap):
                continue
            else:
                raise TypeError(f"not a logical event: {event!r}")
        flush()
        return out


def action_type(ddl: Ddl) -> int:
    """The TiDB ActionType TiCDC sends as the DDL value's `t`.

    An ALTER TABLE of more than one clause is one multi-schema-change job, whatever its clauses; a RENAME TABLE
    of several tables is one rename-tables job.
    """
    changes = interpret(ddl.sql, database=ddl.database, table=ddl.table, commit_ts=ddl.commit_ts, schemas={})
    if len(changes) == 1 and len(changes[0].clauses) > 1:
        return MULTI_SCHEMA_CHANGE
    if ddl.ddl_type == "rename_table" and len(changes) > 1:
        return RENAME_TABLES
    sql = " ".join(ddl.sql.upper().split())
    for ddl_type, words, action in _ACTIONS_BY_WORDS:
        if ddl.ddl_type == ddl_type and words in sql:
            return action
    if ddl.ddl_type in ACTION_TYPES:
        return ACTION_TYPES[ddl.ddl_type]
    for words, action in _OTHER_ACTIONS:
        if words in sql:
            return action
    return 17


def expected(event: Event, options: dict | None = None) -> ChangeEvent | None:
    """What the Open Protocol decoder returns for a logical event under these changefeed options.

    The Open Protocol costs, starting from the lossless `model.expected_event`:
    - Bootstrap: not sent at all (None).
    - DDL: no table schema (`table_schema` None); the type is the statement's (`ddl.classify`): TiDB's
      action type says less (a modify-column job may rename, a multi-schema change may be of one kind).
    - DECIMAL: values keep their digits and scale, but the column type is plain `decimal`
      (no precision/scale on the wire): flag `types_partial`.
    - ENUM/SET: the 1-based index / bitmask instead of the labels: flag `enum_index`.
    - TIME: TiCDC writes TIME with fsp 0, so fractional seconds are cut off (toward zero) and the
      event is flagged `fsp_unknown` whenever a TIME column is present.
    - key_columns: in table column order (the wire carries a flag per column, not the index order).
    - enable-old-value off: an update is sent as its new image only, which is an insert on the wire:
      op `insert`, no before image; every such row (real inserts too) is flagged `old_value_missing`.
    - only-output-updated-columns (old value on): `p` holds only changed columns, refilled from the new
      image (flag `old_value_partial` on every update); TiCDC writes null for a changed column whose old
      value was zero/empty ('' or b'', DECIMAL 0, ENUM index 0, empty SET, JSON 0, TIME 00:00:00).
    - handle-key-only large messages: before/after/column_types hold the handle-key columns only:
      flag `handle_key_only`.
    - claim-check large messages: the full row is read back from the file: flag `claim_check`.
    - delete-only-output-handle-key-columns: a delete's before image and column_types hold the handle-key
      columns only, unflagged (the message does not say so).
    - TIMESTAMP: sent in the changefeed time zone and converted back to UTC; a wall-clock time in a
      DST fold converts with its first occurrence.
    """
    options = dict(options or {})
    if isinstance(event, Bootstrap):
        return None
    result = expected_event(event)
    if isinstance(event, Watermark):
        return result
    if isinstance(event, Ddl):
        result.table_schema = None
        return result
    encoder = OpenEncoder(options)
    table = event.table
    flags: list[str] = []
    columns = list(table.columns)
    if event.op == "delete" and encoder.delete_keys_only:
        columns = [c for c in columns if c.name in table.key]
    if encoder.is_large(event) and encoder.large_message == "handle-key-only":
        columns = [c for c in columns if c.name in table.key]
        flags.append("handle_key_only")
    elif encoder.is_large(event) and encoder.large_message == "claim-check":
        flags.append("claim_check")
    names = [c.name for c in columns]
    result.key_columns = [c.name for c in table.columns if c.name in table.key]
    result.column_types = {c.name: "decimal" if c.base == "decimal" else canonical_type(c.type) for c in columns}
    specs = {spec.name: spec for spec in encoder.specs(table)}

    def image(row: dict[str, Any] | None, canonical: dict[str, str | None] | None):
        if row is None:
            return None
        out = {}
        for name in names:
            value, base = row.get(name), specs[name].base
            if value is None:
                out[name] = None
            elif base in ("enum", "set"):
                out[name] = specs[name].write(value)
            elif base == "time":
                out[name] = text_time(value, 0)
            else:
                out[name] = canonical[name]
        return out

    before = image(event.before, result.before)
    after = image(event.after, result.after)
    if event.op == "update" and not encoder.old_value:
        result.op, before = "insert", None
    if result.op == "insert" and not encoder.old_value:
        flags.append("old_value_missing")
    if result.op == "update" and encoder.only_updated:
        flags.append("old_value_partial")
        for name in names:
            old, new = event.before.get(name), event.after.get(name)
            if old is not None and new is not None and _changed(specs[name], old, new) and specs[name].is_zero(old):
                before[name] = None
    result.before, result.after = before, after
    bases = {specs[name].base for name in names}
    if bases & {"enum", "set"}:
        flags.append("enum_index")
    if "decimal" in bases:
        flags.append("types_partial")
    if "time" in bases:
        flags.append("fsp_unknown")
    result.flags = flags
    return result


__all__ = ["OpenEncoder", "action_type", "expected", "go_float", "go_quote", "json_string"]
