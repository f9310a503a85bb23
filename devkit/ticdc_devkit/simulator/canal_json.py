"""Canal-JSON as TiCDC's Go encoder writes it, for the logical stream of `simulator.model`.

Row messages follow the hand-written jwriter encoder (field order id, database, table, pkNames,
isDdl, type, es, ts, sql, sqlType, mysqlType, old, data, _tidb); DDL and watermark messages follow
`json.Marshal` of the JSONMessage struct (… mysqlType, data, old, _tidb). Strings use Go's HTML-safe
escaping. Two things TiCDC leaves to chance are fixed here so the bytes are reproducible: the
`mysqlType` map is written in column order (Go iterates a map randomly) and the build time `ts` is
`build_time_ms(commit_ts)`, by default the commit's physical milliseconds.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import uuid
from dataclasses import dataclass
from decimal import Decimal
from zoneinfo import ZoneInfo

from spark_jobs.canonical.events import ChangeEvent
from spark_jobs.canonical.values import (
    BINARY_TYPES,
    INTEGER_TYPES,
    canonical_type,
    decimal_scale,
    enum_elements,
    fsp_of,
    parse_type,
    text_date,
    text_datetime,
    text_decimal,
    text_double,
    text_float,
    text_time,
)
from spark_jobs.codecs.large_message import compress, write_claim_check
from ticdc_devkit.simulator import model
from ticdc_devkit.simulator.model import Bootstrap, Column, Ddl, Event, RowChange, Table, Watermark, expected_event

WATERMARK_TYPE = "TIDB_WATERMARK"
DEFAULT_THRESHOLD = 10 * 1024 * 1024
# Canal's DDL `type` per ddl_type, as TiCDC's convertDdlEventType gives it for the statement's TiDB action (exchange
# and reorganize partition and recover fall to its default, QUERY; alter_table stands for the table options, ALTER);
# the Simple protocol uses the same words
CANAL_DDL_TYPES = {
    "create_table": "CREATE",
    "drop_table": "ERASE",
    "rename_table": "RENAME",
    "truncate_table": "TRUNCATE",
    "add_column": "ALTER",
    "drop_column": "ALTER",
    "modify_column": "ALTER",
    "rename_column": "ALTER",
    "create_index": "CINDEX",
    "drop_index": "DINDEX",
    "create_database": "QUERY",
    "drop_database": "QUERY",
    "add_partition": "ALTER",
    "drop_partition": "ALTER",
    "truncate_partition": "ALTER",
    "exchange_partition": "QUERY",
    "reorganize_partition": "QUERY",
    "alter_table": "ALTER",
    "multi_schema_change": "ALTER",
    "recover_table": "QUERY",
    "other": "QUERY",
}
# java.sql.Types codes TiCDC writes in sqlType (MySQLType2JavaType)
_JAVA = {
    **model.JAVA_TYPES_AGREED,
    "timestamp": 93,
    "year": 12,
    "enum": 4,
    "set": -7,
    "tinytext": 2005,
    "text": 2005,
    "mediumtext": 2005,
    "longtext": 2005,
}
_UNSIGNED_PROMOTION = {
    "tinyint": (127, 5),
    "smallint": (32767, 4),
    "int": (2147483647, -5),
    "bigint": (9223372036854775807, 3),
}


# ---- Go JSON text ---------------------------------------------------------------------------------

_GO_ESCAPES = {i: f"\\u{i:04x}" for i in range(0x20)}
_GO_ESCAPES.update(
    {
        0x09: "\\t",
        0x0A: "\\n",
        0x0D: "\\r",
        0x22: '\\"',
        0x5C: "\\\\",
        0x3C: "\\u003c",
        0x3E: "\\u003e",
        0x26: "\\u0026",
        0x2028: "\\u2028",
        0x2029: "\\u2029",
    }
)


def go_string(text: str) -> str:
    """A JSON string as Go writes it: HTML-safe, control characters as \\u00XX except \\t \\n \\r."""
    return '"' + text.translate(_GO_ESCAPES) + '"'


def _go_float_text(shortest: str) -> str:
    """strconv.FormatFloat(x, 'f', -1, …): the shortest digits, never an exponent."""
    return format(Decimal(shortest).normalize(), "f")


# ---- options --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CanalOptions:
    extension: bool = False
    content_compatible: bool = False
    only_updated: bool = False
    delete_keys_only: bool = False
    compression: str = "none"
    large_message: str = "none"
    claim_check_uri: str | None = None
    claim_check_raw: bool = False
    threshold: int = DEFAULT_THRESHOLD
    zone: dt.tzinfo | None = None

    @classmethod
    def parse(cls, options: dict | None) -> CanalOptions:
        o = dict(options or {})

        def flag(name: str) -> bool:
            value = o.get(name, False)
            return value.lower() == "true" if isinstance(value, str) else bool(value)

        zone_name = o.get("time-zone") or "UTC"
        parsed = cls(
            extension=flag("enable-tidb-extension"),
            content_compatible=flag("content-compatible"),
            only_updated=flag("only-output-updated-columns") or flag("content-compatible"),
            delete_keys_only=flag("delete-only-output-handle-key-columns"),
            compression=o.get("large-message-handle-compression") or "none",
            large_message=o.get("large-message-handle-option") or "none",
            claim_check_uri=o.get("claim-check-storage-uri"),
            claim_check_raw=flag("claim-check-raw-value"),
            threshold=int(o.get("large-message-threshold", DEFAULT_THRESHOLD)),
            zone=None if zone_name.upper() == "UTC" else ZoneInfo(zone_name),
        )
        if parsed.large_message not in ("none", "handle-key-only", "claim-check"):
            raise ValueError(f"unknown large-message-handle-option {parsed.large_message!r}")
        if parsed.large_message != "none" and not parsed.extension:
            raise ValueError("TiCDC requires enable-tidb-extension=true for large-message-handle-option")
        if parsed.large_message == "claim-check" and not parsed.claim_check_uri:
            raise ValueError("claim-check needs claim-check-storage-uri")
        return parsed


# ---- column types ---------------------------------------------------------------------------------


def mysql_type(column: Column, full: bool) -> str:
    """What TiCDC writes in `mysqlType`: the bare type name (GetMySQLType), or with content-compatible
    the full definition as TiDB describes it (default display widths, `decimal(10,0)`, …)."""
    base, args, unsigned = parse_type(column.type)
    zerofill = "zerofill" in column.type.lower().split()
    if not full:
        text = base
    elif base in INTEGER_TYPES:
        text = f"{base}({args or model.INTEGER_DISPLAY_WIDTHS[base][unsigned]})"
    elif base == "decimal":
        parts = [p.strip() for p in (args or "10,0").split(",")]
        text = f"decimal({parts[0]},{parts[1] if len(parts) > 1 else 0})"
    elif base in ("char", "binary", "bit"):
        text = f"{base}({args or 1})"
    elif base == "year":
        text = "year(4)"
    elif base in ("datetime", "timestamp", "time"):
        text = f"{base}({fsp_of(column.type)})" if fsp_of(column.type) else base
    elif base in ("enum", "set"):
        text = (
            f"{base}("
            + ",".join("'" + e.replace("\\", "\\\\").replace("'", "''") + "'" for e in enum_elements(column.type))
            + ")"
        )
    elif args is not None and base in ("varchar", "varbinary", "float", "double"):
        text = f"{base}({args.replace(' ', '')})"
    else:
        text = base
    if unsigned and base in INTEGER_TYPES + ("decimal", "float", "double"):
        text += " unsigned"
    if zerofill:
        text += " zerofill"
    return text


def java_type(column: Column, value) -> int:
    base, _, unsigned = parse_type(column.type)
    if base in BINARY_TYPES:
        return 2004
    code = _JAVA.get(base, 12)
    if unsigned and value is not None and base in _UNSIGNED_PROMOTION:
        limit, promoted = _UNSIGNED_PROMOTION[base]
        if value > limit:
            return promoted
    return code


def column_value(column: Column, value, zone: dt.tzinfo | None) -> str | None:
    """The text TiCDC writes for a typed model value (None: JSON null)."""
    if value is None:
        return None
    base = column.base
    if base in INTEGER_TYPES or base in ("bit", "year"):
        return str(int(value))
    if base == "decimal":
        return text_decimal(Decimal(value), decimal_scale(column.type))
    if base == "float":
        return _go_float_text(text_float(value))
    if base == "double":
        return _go_float_text(text_double(value))
    if base == "date":
        return text_date(value)
    if base == "datetime":
        return text_datetime(value, fsp_of(column.type))
    if base == "timestamp":
        if zone is not None:
            value = value.replace(tzinfo=dt.UTC).astimezone(zone).replace(tzinfo=None)
        return text_datetime(value, fsp_of(column.type))
    if base == "time":
        return text_time(value, fsp_of(column.type))
    if base == "enum":
        elements = enum_elements(column.type)
        return str(elements.index(value) + 1 if value in elements else 0)
    if base == "set":
        chosen = set(value.split(",")) - {""} if isinstance(value, str) else set(value)
        return str(sum(1 << i for i, e in enumerate(enum_elements(column.type)) if e in chosen))
    if base in BINARY_TYPES:
        return bytes(value).decode("latin-1")
    return str(value)


# ---- messages -------------------------------------------------------------------------------------


def _physical_ms(ts: int) -> int:
    return ts >> 18


def _tidb_extension(fields: list[tuple[str, object]]) -> str:
    """`json.Marshal` of tidbExtension: every field is omitempty."""
    parts = [
        f'"{name}":{go_string(v) if isinstance(v, str) else ("true" if v is True else v)}' for name, v in fields if v
    ]
    return "{" + ",".join(parts) + "}"


def _struct_message(
    *,
    database: str,
    table: str,
    is_ddl: bool,
    kind: str,
    commit_ts: int,
    build_ms: int,
    sql: str,
    extension: list[tuple[str, object]] | None,
) -> bytes:
    text = (
        f'{{"id":0,"database":{go_string(database)},"table":{go_string(table)},"pkNames":null,'
        f'"isDdl":{"true" if is_ddl else "false"},"type":{go_string(kind)},"es":{_physical_ms(commit_ts)},'
        f'"ts":{build_ms},"sql":{go_string(sql)},"sqlType":null,"mysqlType":null,"data":null,"old":null'
    )
    if extension is not None:
        text += ',"_tidb":' + _tidb_extension(extension)
    return (text + "}").encode("utf-8")


def _row_texts(table: Table, row: dict | None, zone) -> dict[str, str | None]:
    return {c.name: column_value(c, (row or {}).get(c.name), zone) for c in table.columns}


def _fill(names: list[str], texts: dict[str, str | None]) -> str:
    return (
        "[{" + ",".join(f"{go_string(n)}:{'null' if texts[n] is None else go_string(texts[n])}" for n in names) + "}]"
    )


def row_message(
    change: RowChange,
    opts: CanalOptions,
    build_ms: int,
    *,
    too_large: bool = False,
    claim_check_location: str | None = None,
) -> bytes:
    """newJSONMessageForDML: the full row, or only the handle-key columns (too_large; a delete with
    `delete-only-output-handle-key-columns`, which no extension field marks)."""
    table = change.table
    key = set(table.key)
    keys_only = too_large or (change.op == "delete" and opts.delete_keys_only)
    columns = [c for c in table.columns if not keys_only or c.name in key]
    names = [c.name for c in columns]
    image = change.before if change.op == "delete" else change.after
    texts = _row_texts(table, image, opts.zone)
    pk_names = [c.name for c in table.columns if c.name in key]
    kind = change.op.upper()
    parts = [
        '{"id":0',
        f'"database":{go_string(table.database)}',
        f'"table":{go_string(table.name)}',
        '"pkNames":[' + ",".join(go_string(n) for n in pk_names) + "]",
        '"isDdl":false',
        f'"type":"{kind}"',
        f'"es":{_physical_ms(change.commit_ts)}',
        f'"ts":{build_ms}',
        '"sql":""',
        '"sqlType":'
        + (
            "{" + ",".join(f"{go_string(c.name)}:{java_type(c, (image or {}).get(c.name))}" for c in columns) + "}"
            if columns
            else "null"
        ),
        '"mysqlType":'
        + "{"
        + ",".join(f"{go_string(c.name)}:{go_string(mysql_type(c, opts.content_compatible))}" for c in columns)
        + "}",
    ]
    if change.op == "update":
        old_texts = _row_texts(table, change.before, opts.zone)
        old_names = [n for n in names if not opts.only_updated or old_texts[n] != texts[n]]
        parts.append('"old":' + _fill(old_names, old_texts))
    else:
        parts.append('"old":null')
    parts.append('"data":' + _fill(names, texts))
    if opts.extension:
        tidb = f'"_tidb":{{"commitTs":{change.commit_ts}'
        if too_large and opts.large_message == "handle-key-only":
            tidb += ',"onlyHandleKey":true'
        if too_large and opts.large_message == "claim-check":
            tidb += f',"claimCheckLocation":{go_string(claim_check_location or "")}'
        parts.append(tidb + "}")
    return (",".join(parts) + "}").encode("utf-8")


def is_too_large(value: bytes, opts: CanalOptions) -> bool:
    return opts.large_message != "none" and len(value) > opts.threshold


class CanalJsonEncoder:
    """Kafka records (key, value, headers) for one partition's events, as TiCDC's canal-json sink."""

    DDL_TO_ALL_PARTITIONS = False

    def __init__(self, options: dict):
        self.options = CanalOptions.parse(options)
        self.build_time_ms = _physical_ms
        self._claim_checks = 0

    def encode(self, events: list[Event]) -> list[tuple[bytes | None, bytes, None]]:
        out = []
        for event in events:
            value = self._encode_one(event)
            if value is not None:
                out.append((None, value, None))
        return out

    def _encode_one(self, event: Event) -> bytes | None:
        opts = self.options
        if isinstance(event, Bootstrap):
            return None
        if isinstance(event, Watermark):
            if not opts.extension:
                return None
            value = _struct_message(
                database="",
                table="",
                is_ddl=False,
                kind=WATERMARK_TYPE,
                commit_ts=event.ts,
                build_ms=self.build_time_ms(event.ts),
                sql="",
                extension=[("watermarkTs", event.ts)],
            )
            return compress(value, opts.compression)
        if isinstance(event, Ddl):
            value = _struct_message(
                database=event.database,
                table=event.table or "",
                is_ddl=True,
                kind=CANAL_DDL_TYPES[event.ddl_type],
                commit_ts=event.commit_ts,
                build_ms=self.build_time_ms(event.commit_ts),
                sql=event.sql,
                extension=[("commitTs", event.commit_ts)] if opts.extension else None,
            )
            return compress(value, opts.compression)
        build_ms = self.build_time_ms(event.commit_ts)
        value = compress(row_message(event, opts, build_ms), opts.compression)
        if not is_too_large(value, opts):
            return value
        if opts.large_message == "handle-key-only":
            return compress(row_message(event, opts, build_ms, too_large=True), opts.compression)
        location = self._claim_check_location(event)
        write_claim_check(location, None, value, opts.claim_check_raw)
        return compress(
            row_message(event, opts, build_ms, too_large=True, claim_check_location=location), opts.compression
        )

    def _claim_check_location(self, event: RowChange) -> str:
        """`<claim-check-storage-uri>/<uuid>.json`, the uuid made deterministic for the simulator."""
        self._claim_checks += 1
        seed = hashlib.md5(f"{event.commit_ts}:{self._claim_checks}".encode()).digest()
        name = f"{uuid.UUID(bytes=seed, version=4)}.json"
        return self.options.claim_check_uri.rstrip("/") + "/" + name


# ---- what the decoder must return ---------------------------------------------------------------


def expected(event: Event, options: dict | None = None) -> ChangeEvent | None:
    """The canonical event a Canal-JSON decoder returns for a logical event under these options.

    What Canal-JSON costs, starting from the lossless `model.expected_event`:
    - Bootstrap: not sent. Watermarks: sent only with enable-tidb-extension.
    - Without enable-tidb-extension the commit ts is known only to the millisecond (`es`):
      commit_ts = (ts >> 18) << 18, flag commit_ts_inferred (rows and DDL).
    - DDL carries no schema: table_schema is null; ddl_type is the statement's (`ddl.classify`), whatever
      the canal `type`. A database-level DDL has table null (canal sends "").
    - key_columns are `pkNames`, in column order (not the order of the key definition).
    - ENUM/SET arrive as 1-based index / bitmask; without content-compatible the labels are unknown:
      the index/bitmask text, flag enum_index (whenever a sent column is ENUM or SET).
    - Without content-compatible `mysqlType` has no scale: DECIMAL columns type as `decimal`, flag
      types_partial (values still carry the column's scale). With it, a DECIMAL declared without
      arguments types as `decimal(10,0)`.
    - only-output-updated-columns (implied by content-compatible): `old` holds only changed columns;
      the before image is refilled from the after image, flag old_value_partial on every UPDATE.
    - large-message-handle-option=handle-key-only, message above the threshold: only the handle-key
      columns (before, after, column_types), flag handle_key_only.
    - claim-check above the threshold: the full row is read from the file, flag claim_check.
    - delete-only-output-handle-key-columns: a delete's before image and column_types hold the handle-key
      columns only, unflagged (the message does not say so).
    - TIMESTAMP travels in the changefeed's time zone and is converted back to UTC (exact, except for
      wall-clock times repeated by a daylight-saving fold).
    """
    opts = CanalOptions.parse(options)
    if isinstance(event, Bootstrap):
        return None
    if isinstance(event, Watermark):
        return expected_event(event) if opts.extension else None
    result = expected_event(event)
    flags: set[str] = set()
    if not opts.extension:
        result.commit_ts = (result.commit_ts >> 18) << 18
        flags.add("commit_ts_inferred")
    if isinstance(event, Ddl):
        result.table_schema = None
        result.flags = sorted(flags)
        return result

    table = event.table
    columns = list(table.columns)
    if event.op == "delete" and opts.delete_keys_only:
        columns = [c for c in columns if c.name in table.key]
    if opts.large_message != "none":
        value = compress(row_message(event, opts, _physical_ms(event.commit_ts)), opts.compression)
        if is_too_large(value, opts):
            if opts.large_message == "handle-key-only":
                columns = [c for c in columns if c.name in table.key]
                flags.add("handle_key_only")
            else:
                flags.add("claim_check")
    names = [c.name for c in columns]
    result.key_columns = [c.name for c in table.columns if c.name in table.key]
    result.column_types = {
        c.name: canonical_type(mysql_type(c, True)) if opts.content_compatible else result.column_types[c.name]
        for c in columns
    }
    for c in columns:
        if c.base == "decimal" and not opts.content_compatible:
            result.column_types[c.name] = "decimal"
            flags.add("types_partial")
        if c.base in ("enum", "set") and not opts.content_compatible:
            flags.add("enum_index")
    for image_name in ("before", "after"):
        image = getattr(result, image_name)
        if image is None:
            continue
        source = getattr(event, image_name)
        restricted = {n: image[n] for n in names}
        if not opts.content_compatible:
            for c in columns:
                if c.base in ("enum", "set"):
                    restricted[c.name] = column_value(c, source.get(c.name), None)
        setattr(result, image_name, restricted)
    if event.op == "update" and opts.only_updated:
        flags.add("old_value_partial")
    result.flags = sorted(flags)
    return result


__all__ = ["CanalJsonEncoder", "CanalOptions", "expected", "go_string", "mysql_type", "row_message"]
