"""Write a Dumpling export of the simulator's upstream tables, as Dumpling writes one (for tests and the demo).

The layout, the `metadata` file, the SQL and CSV data files, their quoting and escaping and the compressed file
suffixes follow Dumpling's own writer and tests (dumpling/export/writer_util.go, sql_type.go, metadata.go in
pingcap/tidb); spark_jobs.backfill.dumpling is the reader. Values come in as canonical text (the oracle's rows)
and are written as Dumpling writes what TiDB returns: numbers bare, strings and temporal values quoted, binary
strings and BIT as `x'..'` in SQL and raw bytes in CSV.
"""

from __future__ import annotations

import base64
import datetime as dt
import gzip
from collections.abc import Mapping
from pathlib import Path

from spark_jobs.canonical.values import BINARY_TYPES, INTEGER_TYPES, parse_type, type_args
from ticdc_devkit.simulator.model import Table
from ticdc_devkit.simulator.workload import create_table_sql, quote_name

_NUMBERS = (*INTEGER_TYPES, "decimal", "float", "double")
_SQL_ESCAPES = {0: b"\\0", 10: b"\\n", 13: b"\\r", 92: b"\\\\", 39: b"\\'", 34: b'\\"', 26: b"\\Z"}
_SUFFIX = {None: "", "gzip": ".gz", "zstd": ".zst", "snappy": ".snappy"}


def _kind(column_type: str) -> str:
    base = parse_type(column_type)[0]
    if base in _NUMBERS:
        return "number"
    if base in BINARY_TYPES or base == "bit":
        return "bytes"
    return "string"


def _bytes_of(column_type: str, text: str) -> bytes:
    """The bytes TiDB returns for a binary string (canonical text: base64) or a BIT(M) (canonical: the number)."""
    base = parse_type(column_type)[0]
    if base == "bit":
        width = (int(type_args(column_type) or 1) + 7) // 8
        return int(text).to_bytes(width, "big")
    return base64.b64decode(text)


def _sql_value(column_type: str, text: str | None) -> bytes:
    if text is None:
        return b"NULL"
    kind = _kind(column_type)
    if kind == "number":
        return text.encode()
    if kind == "bytes":
        return b"x'" + _bytes_of(column_type, text).hex().encode() + b"'"
    raw = text.encode()
    return b"'" + b"".join(_SQL_ESCAPES.get(b, bytes([b])) for b in raw) + b"'"


def _csv_escape(raw: bytes, delimiter: bytes) -> bytes:
    escapes = {0: b"\\0", 13: b"\\r", 10: b"\\n", 92: b"\\\\", delimiter[0]: b"\\" + delimiter[:1]}
    return b"".join(escapes.get(b, bytes([b])) for b in raw)


def _csv_value(column_type: str, text: str | None, options: Mapping[str, bytes]) -> bytes:
    if text is None:
        return options["null_value"]
    kind = _kind(column_type)
    if kind == "number":
        return text.encode()
    raw = _bytes_of(column_type, text) if kind == "bytes" else text.encode()
    return options["delimiter"] + _csv_escape(raw, options["delimiter"]) + options["delimiter"]


def _compress(data: bytes, compression: str | None) -> bytes:
    if compression is None:
        return data
    if compression == "gzip":
        return gzip.compress(data)
    import cramjam

    return bytes((cramjam.zstd if compression == "zstd" else cramjam.snappy).compress(data))


def write_export(
    directory: Path,
    snapshot_ts: int,
    tables: Mapping[tuple[str, str], Table],
    rows: Mapping[tuple[str, str], Mapping[str, Mapping[str, str | None]]],
    formats: Mapping[tuple[str, str], tuple[str, str | None]] | None = None,
    rows_per_file: int = 7,
    rows_per_statement: int = 3,
    csv_options: Mapping[str, bytes] | None = None,
) -> Path:
    """An export of `tables` with their `rows` (canonical text by column) at `snapshot_ts`. `formats` gives a
    table's (`sql` | `csv`, compression or None); SQL, uncompressed by default. Several files per table and
    several INSERT statements per file, as `-r`/`-F` and `-s` make Dumpling write."""
    options = {"separator": b",", "delimiter": b'"', "null_value": b"\\N", "terminator": b"\r\n", **(csv_options or {})}
    directory.mkdir(parents=True, exist_ok=True)
    started = dt.datetime(2026, 1, 1, 0, 0, 0)
    (directory / "metadata").write_text(
        f"Started dump at: {started:%Y-%m-%d %H:%M:%S}\n"
        f"SHOW MASTER STATUS:\n\tLog: tidb-binlog\n\tPos: {snapshot_ts}\n\tGTID:\n\n"
        f"Finished dump at: {started:%Y-%m-%d %H:%M:%S}\n"
    )
    for database in sorted({d for d, _ in tables}):
        (directory / f"{database}-schema-create.sql").write_text(
            f"/*!40101 SET NAMES binary*/;\nCREATE DATABASE {quote_name(database)} "
            "/*!40100 DEFAULT CHARACTER SET utf8mb4 */;\n"
        )
    for (database, name), table in sorted(tables.items()):
        file_format, compression = (formats or {}).get((database, name), ("sql", None))
        suffix = _SUFFIX[compression]
        (directory / f"{database}.{name}-schema.sql{suffix}").write_bytes(
            _compress(
                (
                    "/*!40101 SET NAMES binary*/;\n"
                    + create_table_sql(table, qualified=False)
                    + " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;\n"
                ).encode(),
                compression,
            )
        )
        table_rows = [rows.get((database, name), {})[k] for k in sorted(rows.get((database, name), {}))]
        for index, start in enumerate(range(0, len(table_rows), rows_per_file)):
            chunk = table_rows[start : start + rows_per_file]
            if file_format == "sql":
                data = _sql_file(table, chunk, rows_per_statement)
            else:
                data = _csv_file(table, chunk, options)
            (directory / f"{database}.{name}.{index:09d}.{file_format}{suffix}").write_bytes(
                _compress(data, compression)
            )
    return directory


def _sql_file(table: Table, rows: list, per_statement: int) -> bytes:
    out = [b"/*!40101 SET NAMES binary*/;\n", b"/*!40014 SET FOREIGN_KEY_CHECKS=0*/;\n"]
    for start in range(0, len(rows), per_statement):
        out.append(b"INSERT INTO " + quote_name(table.name).encode() + b" VALUES\n")
        values = [
            b"(" + b",".join(_sql_value(c.type, row.get(c.name)) for c in table.columns) + b")"
            for row in rows[start : start + per_statement]
        ]
        out.append(b",\n".join(values) + b";\n")
    return b"".join(out)


def _csv_file(table: Table, rows: list, options: Mapping[str, bytes]) -> bytes:
    delimiter, separator, terminator = options["delimiter"], options["separator"], options["terminator"]
    header = separator.join(delimiter + c.name.encode() + delimiter for c in table.columns)
    lines = [header] + [
        separator.join(_csv_value(c.type, row.get(c.name), options) for c in table.columns) for row in rows
    ]
    return b"".join(line + terminator for line in lines)
