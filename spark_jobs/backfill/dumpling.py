"""Dumpling's export format: its files, its metadata, its SQL and CSV data files, as Dumpling writes them.

Knows the format and nothing of Spark (spark_jobs.backfill.snapshot reads an export with Spark).

An export directory holds (Dumpling's default file name template; `.gz`, `.zst` or `.snappy` appended to every
file when Dumpling ran with `--compress`):

- `metadata`: `Pos:` under `SHOW MASTER STATUS:` is the TSO the export was read at (TiDB);
- `{db}-schema-create.sql`: CREATE DATABASE;
- `{db}.{table}-schema.sql`: the table's CREATE TABLE (special comments such as `/*!40101 SET NAMES binary*/;`
  first); views (`-schema-view.sql`), sequences and triggers are not tables and are skipped;
- `{db}.{table}.{n}.sql`: `INSERT INTO `t` [(cols)] VALUES (..),(..);` statements. Strings are quoted with
  `'`, escaped with backslashes (`--escape-backslash`, the default) or by doubling the quote; numbers bare;
  binary, BLOB and BIT values as `x'hex'`; NULL as NULL;
- `{db}.{table}.{n}.csv`: `--filetype csv`, with `--csv-separator` (`,`), `--csv-delimiter` (`"`; strings,
  binary and BIT values are enclosed, numbers are not), `--csv-null-value` (`\\N`), `--csv-line-terminator`
  (`\\r\\n`), a header line of column names unless `--no-header`; binary values as raw bytes (the default
  `--csv-output-dialect`), escaped with backslashes like strings.

Every value is turned into the canonical text of its column's type (spark_jobs.canonical.values), the same text the
codecs give, so a row from an export and the same row from the change stream are equal.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from spark_jobs.canonical.values import (
    BINARY_TYPES,
    INTEGER_TYPES,
    decimal_scale,
    parse_type,
    text_bytes,
    text_decimal,
    text_double,
    text_float,
    text_timestamp_from_zone,
    text_year,
)
from spark_jobs.canonical.values import (
    time_zone as parse_zone,
)

COMPRESSIONS = {".gz": "gzip", ".zst": "zstd", ".snappy": "snappy"}
_SCHEMA_SUFFIX = "-schema.sql"
_DATABASE_SUFFIX = "-schema-create.sql"
_OTHER_SCHEMA_SUFFIXES = ("-schema-view.sql", "-schema-sequence.sql", "-schema-triggers.sql", "-schema-post.sql")
_DATA_RE = re.compile(r"^(?P<stem>.+)\.(?P<index>[0-9]+(?:\.[0-9]+)?)\.(?P<format>sql|csv)$")
_POS_RE = re.compile(r"^SHOW MASTER STATUS:\s*\n(?:\s+\S.*\n)*?\s+Pos:\s*([0-9]+)\s*$", re.M)
_ZONE_RE = re.compile(rb"SET\s+TIME_ZONE\s*=\s*'([^']*)'", re.I)


class ExportError(ValueError):
    """An export that cannot be read as Dumpling writes it; the message names the file and what is wrong."""


@dataclass(frozen=True)
class CsvOptions:
    """Dumpling's `--csv-*` options, with its defaults."""

    separator: bytes = b","
    delimiter: bytes = b'"'
    null_value: bytes = b"\\N"
    line_terminator: bytes = b"\r\n"
    header: bool = True
    escape_backslash: bool = True

    @classmethod
    def typed(
        cls, separator: str, delimiter: str, null_value: str, line_terminator: str, header: bool, escape_backslash: bool
    ) -> CsvOptions:
        """The options as typed on a command line or a trigger form: `\\r`, `\\n` and `\\t` in the separator,
        delimiter and line terminator are those characters; the null value is taken as it is (`\\N`)."""

        def escaped(text: str) -> bytes:
            return text.replace("\\r", "\r").replace("\\n", "\n").replace("\\t", "\t").encode()

        return cls(
            escaped(separator),
            escaped(delimiter),
            null_value.encode(),
            escaped(line_terminator),
            bool(header),
            bool(escape_backslash),
        )


@dataclass(frozen=True)
class DataFile:
    """One data file of a table: its path relative to the export, its format and compression."""

    name: str
    database: str
    table: str
    format: str  # sql | csv
    compression: str | None


@dataclass
class Export:
    """What an export's file listing says: its TSO, its tables' CREATE statements and their data files."""

    snapshot_ts: int
    schemas: dict[tuple[str, str], str] = field(default_factory=dict)  # (db, table) -> schema file name
    data_files: list[DataFile] = field(default_factory=list)


def split_compression(name: str) -> tuple[str, str | None]:
    """`a.t.000000000.sql.gz` -> (`a.t.000000000.sql`, `gzip`)."""
    for suffix, kind in COMPRESSIONS.items():
        if name.endswith(suffix):
            return name[: -len(suffix)], kind
    return name, None


def decompress(data: bytes, compression: str | None) -> bytes:
    """A whole file's bytes, uncompressed (Dumpling's snappy files use snappy's framing format)."""
    if compression is None:
        return data
    if compression == "gzip":
        return gzip.decompress(data)
    import cramjam

    codec = cramjam.zstd if compression == "zstd" else cramjam.snappy
    return bytes(codec.decompress(data))


def snapshot_ts(metadata: str, where: str = "metadata") -> int:
    """The TSO of the export: `Pos:` of the first `SHOW MASTER STATUS:` block (TiDB writes its TSO there)."""
    match = _POS_RE.search(metadata)
    if match is None:
        raise ExportError(f"{where}: no 'Pos:' under 'SHOW MASTER STATUS:' (is this a Dumpling export of TiDB?)")
    ts = int(match.group(1))
    if ts >> 18 < 1_000_000_000_000:
        raise ExportError(f"{where}: Pos {ts} is not a TiDB TSO (a MySQL binlog position?)")
    return ts


def plan_export(names: list[str], metadata: str) -> Export:
    """The export's tables and data files from the names of its files (relative to the export)."""
    export = Export(snapshot_ts(metadata))
    plain = {name: split_compression(name) for name in names}
    databases = {n.removesuffix(_DATABASE_SUFFIX) for n, _ in plain.values() if n.endswith(_DATABASE_SUFFIX)}
    for name, (base, _) in sorted(plain.items()):
        if base.endswith(_DATABASE_SUFFIX) or base.endswith(_OTHER_SCHEMA_SUFFIXES):
            continue
        if base.endswith(_SCHEMA_SUFFIX):
            export.schemas[_table_of(base.removesuffix(_SCHEMA_SUFFIX), databases, name)] = name
    for name, (base, compression) in sorted(plain.items()):
        match = _DATA_RE.match(base)
        if match is None:
            continue
        database, table = _table_of(match.group("stem"), databases, name)
        if (database, table) not in export.schemas:
            raise ExportError(f"{name}: data of {database}.{table}, which has no {database}.{table}{_SCHEMA_SUFFIX}")
        export.data_files.append(DataFile(name, database, table, match.group("format"), compression))
    return export


def _table_of(stem: str, databases: set[str], name: str) -> tuple[str, str]:
    """`db.table` of a file name: the database is one the export created (names may hold dots)."""
    for database in sorted(databases, key=len, reverse=True):
        if stem.startswith(database + "."):
            return database, stem[len(database) + 1 :]
    database, dot, table = stem.partition(".")
    if not dot:
        raise ExportError(f"{name}: not a Dumpling file name ({{db}}.{{table}}...)")
    return database, table


def create_statement(text: bytes, where: str) -> str:
    """The CREATE TABLE of a schema file, without Dumpling's special comments and the final `;`."""
    statements = [s.strip() for s in text.decode("utf-8").split(";\n")]
    for statement in statements:
        body = re.sub(r"^(?:/\*!.*?\*/\s*;?\s*)+", "", statement, flags=re.S).strip().rstrip(";")
        if body.upper().startswith("CREATE TABLE"):
            return body
    raise ExportError(f"{where}: no CREATE TABLE statement")


# ---- SQL data files ------------------------------------------------------------------------------

_ESCAPES = {ord("0"): b"\0", ord("n"): b"\n", ord("r"): b"\r", ord("t"): b"\t", ord("Z"): b"\032", ord("b"): b"\b"}
_INSERT_RE = re.compile(rb"INSERT\s+INTO\s+`(?:[^`]|``)*`\s*(?:\((?P<columns>[^)]*)\))?\s*VALUES\s*", re.I)
_BARE_RE = re.compile(rb"[^,)\s]+")
_SPACE = b" \t\r\n"


@dataclass(frozen=True)
class Hex:
    """A value Dumpling wrote as `x'..'` (binary strings, BLOBs, BIT)."""

    data: bytes


def sql_rows(data: bytes, where: str) -> Iterator[tuple[list[str] | None, list[bytes | Hex | None]]]:
    """(column names of the INSERT or None, values) for every row of a Dumpling SQL data file. A value is the
    bytes of a quoted string or a bare literal, a Hex, or None for NULL."""
    pos, end = 0, len(data)
    while True:
        match = _INSERT_RE.search(data, pos)
        if match is None:
            return
        columns = (
            [c.strip().strip(b"`").replace(b"``", b"`").decode() for c in match.group("columns").split(b",")]
            if match.group("columns")
            else None
        )
        pos = match.end()
        while True:
            pos = _skip_space(data, pos)
            if pos >= end or data[pos] != ord("("):
                raise ExportError(f"{where}: byte {pos}: expected '(' starting a row")
            row, pos = _sql_row(data, pos + 1, where)
            yield columns, row
            pos = _skip_space(data, pos)
            if pos < end and data[pos] == ord(","):
                pos += 1
                continue
            if pos < end and data[pos] == ord(";"):
                pos += 1
                break
            raise ExportError(f"{where}: byte {pos}: expected ',' or ';' after a row")


def _skip_space(data: bytes, pos: int) -> int:
    while pos < len(data) and data[pos] in _SPACE:
        pos += 1
    return pos


def _sql_row(data: bytes, pos: int, where: str) -> tuple[list[bytes | Hex | None], int]:
    values: list[bytes | Hex | None] = []
    value: bytes | Hex | None
    while True:
        pos = _skip_space(data, pos)
        if data[pos : pos + 1] == b")" and not values:
            return values, pos + 1
        if data[pos : pos + 1] == b"'":
            value, pos = _quoted(data, pos + 1, b"'", True, where)
        elif data[pos : pos + 2] in (b"x'", b"X'"):
            close = data.find(b"'", pos + 2)
            if close < 0:
                raise ExportError(f"{where}: byte {pos}: unterminated x'...'")
            try:
                value, pos = Hex(bytes.fromhex(data[pos + 2 : close].decode("ascii"))), close + 1
            except (ValueError, UnicodeDecodeError):
                raise ExportError(f"{where}: byte {pos}: not a hex value") from None
        else:
            match = _BARE_RE.match(data, pos)
            if match is None:
                raise ExportError(f"{where}: byte {pos}: expected a value")
            text, pos = match.group(), match.end()
            value = None if text.upper() == b"NULL" else text
        values.append(value)
        pos = _skip_space(data, pos)
        if data[pos : pos + 1] == b",":
            pos += 1
        elif data[pos : pos + 1] == b")":
            return values, pos + 1
        else:
            raise ExportError(f"{where}: byte {pos}: expected ',' or ')' in a row")


def _quoted(data: bytes, pos: int, quote: bytes, backslash: bool, where: str) -> tuple[bytes, int]:
    """The bytes of a quoted value starting after its opening quote; backslash escapes (`\\n`, `\\0`, ...) and
    a doubled quote both accepted, as MySQL reads them."""
    out = bytearray()
    q = len(quote)
    while True:
        close = data.find(quote, pos)
        slash = data.find(b"\\", pos) if backslash else -1
        if close < 0 or slash + 1 >= len(data):
            raise ExportError(f"{where}: byte {pos}: unterminated quoted value")
        if 0 <= slash < close:
            out += data[pos:slash]
            escaped = data[slash + 1]
            out += _ESCAPES.get(escaped, bytes([escaped]))
            pos = slash + 2
            continue
        out += data[pos:close]
        if data[close + q : close + 2 * q] == quote:
            out += quote
            pos = close + 2 * q
            continue
        return bytes(out), close + q


def time_zone(data: bytes) -> str:
    """The session time zone a data file's TIMESTAMPs are written in (`SET TIME_ZONE='+00:00'`, Dumpling's
    default, when the file does not say)."""
    match = _ZONE_RE.search(data[:4096])
    return match.group(1).decode() if match else "+00:00"


# ---- CSV data files ------------------------------------------------------------------------------


def csv_rows(data: bytes, options: CsvOptions, where: str) -> Iterator[list[bytes | None]]:
    """The fields of every line of a Dumpling CSV file (the header line included when there is one): bytes, or
    None for the null value written bare."""
    sep, quote, term = options.separator, options.delimiter, options.line_terminator
    pos, end = 0, len(data)
    while pos < end:
        fields: list[bytes | None] = []
        while True:
            if quote and data.startswith(quote, pos):
                value, pos = _quoted(data, pos + len(quote), quote, options.escape_backslash, where)
                fields.append(value)
            else:
                stops = [i for i in (data.find(sep, pos), data.find(term, pos)) if i >= 0]
                stop = min(stops) if stops else end
                raw = data[pos:stop]
                if options.escape_backslash and b"\\" in raw and raw != options.null_value:
                    raw = _unescaped(raw)
                fields.append(None if raw == options.null_value else raw)
                pos = stop
            if data.startswith(sep, pos):
                pos += len(sep)
                continue
            if data.startswith(term, pos) or pos >= end:
                pos += len(term)
                break
            raise ExportError(f"{where}: byte {pos}: expected a separator or the end of a line")
        yield fields


def _unescaped(raw: bytes) -> bytes:
    out, i = bytearray(), 0
    while i < len(raw):
        if raw[i] == ord("\\") and i + 1 < len(raw):
            out += _ESCAPES.get(raw[i + 1], bytes([raw[i + 1]]))
            i += 2
        else:
            out.append(raw[i])
            i += 1
    return bytes(out)


# ---- values --------------------------------------------------------------------------------------


def value_converter(column_type: str, zone: str):
    """bytes | Hex (as Dumpling wrote it) -> canonical text, for a column of this canonical MySQL type."""
    base = parse_type(column_type)[0]
    if base in INTEGER_TYPES:
        return lambda v: str(int(_raw(v)))
    if base == "decimal":
        scale = decimal_scale(column_type)
        return lambda v: text_decimal(Decimal(_raw(v).decode("ascii")), scale)
    if base == "float":
        return lambda v: text_float(_raw(v).decode("ascii"))
    if base == "double":
        return lambda v: text_double(_raw(v).decode("ascii"))
    if base == "year":
        return lambda v: text_year(int(_raw(v)))
    if base == "bit":
        return lambda v: str(int.from_bytes(_raw(v), "big"))
    if base in BINARY_TYPES:
        return lambda v: text_bytes(_raw(v))
    if base == "timestamp":
        tz = parse_zone(zone)
        return lambda v: text_timestamp_from_zone(_raw(v).decode("ascii"), tz)
    return lambda v: _raw(v).decode("utf-8")


def _raw(value: bytes | Hex) -> bytes:
    return value.data if isinstance(value, Hex) else value


def canonical_rows(
    file: DataFile, data: bytes, schema: dict, csv_options: CsvOptions
) -> Iterator[dict[str, str | None]]:
    """Every row of one data file as column -> canonical text, by the table's schema (as spark_jobs.ddl reads
    its CREATE TABLE)."""
    where = file.name
    names = [c["name"] for c in schema["columns"]]
    zone = time_zone(data) if file.format == "sql" else "+00:00"
    converters = {c["name"]: value_converter(c["type"], zone) for c in schema["columns"]}
    rows: Iterator[tuple[list[str] | None, Sequence[bytes | Hex | None]]]
    if file.format == "sql":
        rows = sql_rows(data, where)
    else:
        lines = csv_rows(data, csv_options, where)
        # a header field written as the null value is that text (no column is named so: an ExportError below)
        header = (
            [(f if f is not None else csv_options.null_value).decode("utf-8") for f in next(lines, [])]
            if csv_options.header
            else None
        )
        rows = ((header, fields) for fields in lines)
    for number, (columns, values) in enumerate(rows, start=1):
        columns = columns or names
        if len(values) != len(columns):
            raise ExportError(f"{where}: row {number} has {len(values)} values for {len(columns)} columns")
        row = {}
        for column, value in zip(columns, values, strict=True):
            if column not in converters:
                raise ExportError(f"{where}: column {column!r} is not in the table's CREATE TABLE")
            try:
                row[column] = None if value is None else converters[column](value)
            except (ValueError, ArithmeticError, UnicodeDecodeError) as exc:
                raise ExportError(f"{where}: row {number}, column {column!r}: {exc}") from None
        yield row
