"""The Dumpling export reader (spark_jobs.backfill.dumpling) against what Dumpling writes.

The byte strings below are the outputs Dumpling's own tests expect from its writer (pingcap/tidb,
dumpling/export/writer_serial_test.go, metadata_test.go, sql_type.go): the reader must read exactly those.
The round trip then covers every column type the codecs know, in SQL and CSV, compressed every way Dumpling
compresses.
"""

from __future__ import annotations

import pytest

from spark_jobs import ddl
from spark_jobs.backfill import dumpling
from spark_jobs.backfill.dumpling import CsvOptions, DataFile, ExportError, Hex
from ticdc_devkit.dumpling_export import write_export
from ticdc_devkit.simulator.model import RowChange
from ticdc_devkit.simulator.oracle import upstream_schemas, upstream_state
from ticdc_devkit.simulator.workload import random_workload

EMPLOYEE = {
    "columns": [
        {"name": "id", "type": "int"},
        {"name": "gender", "type": "set"},
        {"name": "email", "type": "varchar"},
        {"name": "phone_number", "type": "varchar"},
        {"name": "status", "type": "text"},
    ]
}
EMPLOYEES = [
    {"id": "1", "gender": "male", "email": "bob@mail.com", "phone_number": "020-1234", "status": None},
    {"id": "2", "gender": "female", "email": "sarah@mail.com", "phone_number": "020-1253", "status": "healthy"},
    {"id": "3", "gender": "male", "email": "john@mail.com", "phone_number": "020-1256", "status": "healthy"},
    {"id": "4", "gender": "female", "email": "sarah@mail.com", "phone_number": "020-1235", "status": "healthy"},
]


def rows_of(name: str, data: bytes, schema: dict, options: CsvOptions | None = None) -> list[dict]:
    base, compression = dumpling.split_compression(name)
    file = DataFile(name, "test", "employee", base.rsplit(".", 1)[1], compression)
    return list(dumpling.canonical_rows(file, dumpling.decompress(data, compression), schema, options or CsvOptions()))


def test_metadata_of_tidb_gives_the_tso_and_refuses_a_binlog_position():
    tidb = "SHOW MASTER STATUS:\n\tLog: tidb-binlog\n\tPos: 420633329401856001\n\tGTID:\n\n"
    assert dumpling.snapshot_ts("Started dump at: 2020-11-10 10:40:19\n" + tidb) == 420633329401856001
    mysql = "SHOW MASTER STATUS:\n\tLog: ON.000001\n\tPos: 7502\n\tGTID:6ce40be3-e359-11e9-87e0-36933cb0ca5a:1-29\n\n"
    with pytest.raises(ExportError, match="Pos 7502 is not a TiDB TSO"):
        dumpling.snapshot_ts(mysql)
    with pytest.raises(ExportError, match="metadata: no 'Pos:'"):
        dumpling.snapshot_ts("Started dump at: 2020-11-10 10:40:19\n")


def test_sql_file_as_dumpling_writes_it():
    data = (
        b"/*!40101 SET NAMES binary*/;\n"
        b"/*!40014 SET FOREIGN_KEY_CHECKS=0*/;\n"
        b"INSERT INTO `employee` VALUES\n"
        b"(1,'male','bob@mail.com','020-1234',NULL),\n"
        b"(2,'female','sarah@mail.com','020-1253','healthy'),\n"
        b"(3,'male','john@mail.com','020-1256','healthy'),\n"
        b"(4,'female','sarah@mail.com','020-1235','healthy');\n"
    )
    assert rows_of("test.employee.000000000.sql", data, EMPLOYEE) == EMPLOYEES


def test_sql_values_escaped_hex_and_a_column_list():
    schema = {"columns": [{"name": "a", "type": "varchar"}, {"name": "b", "type": "varbinary"}]}
    data = b"INSERT INTO `t` (`b`,`a`) VALUES\n(x'31323334','it\\'s \\\\ a\\nb\\0'),\n(x'','o''k');\n"
    assert rows_of("test.t.000000001.sql", data, schema) == [
        {"b": "MTIzNA==", "a": "it's \\ a\nb\0"},
        {"b": "", "a": "o'k"},
    ]
    assert list(dumpling.sql_rows(b"INSERT INTO `t` VALUES (NULL,x'05');", "f")) == [(None, [None, Hex(b"\x05")])]
    with pytest.raises(ExportError, match=r"f: byte \d+: expected ',' or ';' after a row"):
        list(dumpling.sql_rows(b"INSERT INTO `t` VALUES (1) (2);", "f"))


@pytest.mark.parametrize(
    ("data", "options"),
    [
        (  # Dumpling's defaults: numbers bare, strings enclosed in ", \N for NULL, \r\n
            b'1,"male","bob@mail.com","020-1234",\\N\r\n2,"female","sarah@mail.com","020-1253","healthy"\r\n'
            b'3,"male","john@mail.com","020-1256","healthy"\r\n4,"female","sarah@mail.com","020-1235","healthy"\r\n',
            CsvOptions(header=False),
        ),
        (  # --csv-delimiter "'" --csv-separator ";" --csv-line-terminator "\n"
            b"1;'male';'bob@mail.com';'020-1234';\\N\n2;'female';'sarah@mail.com';'020-1253';'healthy'\n"
            b"3;'male';'john@mail.com';'020-1256';'healthy'\n4;'female';'sarah@mail.com';'020-1235';'healthy'\n",
            CsvOptions(separator=b";", delimiter=b"'", line_terminator=b"\n", header=False),
        ),
        (  # multi-byte separator and delimiter, the delimiter inside values doubled (--escape-backslash=false), header
            b"maidma&;,?magenderma&;,?maemamailma&;,?maphone_numberma&;,?mastatusma\r\n"
            b"1&;,?mamamalema&;,?mabob@mamail.comma&;,?ma020-1234ma&;,?\\N\r\n"
            b"2&;,?mafemamalema&;,?masarah@mamail.comma&;,?ma020-1253ma&;,?mahealthyma\r\n"
            b"3&;,?mamamalema&;,?majohn@mamail.comma&;,?ma020-1256ma&;,?mahealthyma\r\n"
            b"4&;,?mafemamalema&;,?masarah@mamail.comma&;,?ma020-1235ma&;,?mahealthyma\r\n",
            CsvOptions(separator=b"&;,?", delimiter=b"ma", escape_backslash=False),
        ),
    ],
    ids=["defaults", "separator-delimiter-terminator", "multibyte-header-doubled"],
)
def test_csv_files_as_dumpling_writes_them(data, options):
    assert rows_of("test.employee.000000000.csv", data, EMPLOYEE, options) == EMPLOYEES


def test_csv_options_as_typed_on_a_command_line():
    assert CsvOptions.typed(",", '"', "\\N", "\\r\\n", True, True) == CsvOptions()
    assert CsvOptions.typed("\\t", "'", "NULL", "\\n", False, False) == CsvOptions(
        b"\t", b"'", b"NULL", b"\n", header=False, escape_backslash=False
    )


def test_csv_escapes_and_a_null_text_that_is_quoted():
    schema = {"columns": [{"name": "a", "type": "varchar"}, {"name": "b", "type": "blob"}]}
    data = b'"a","b"\r\n"x\\"y\\\\z\\nw","\\0\\r"\r\n"\\\\N",\\N\r\n'
    assert rows_of("test.t.000000000.csv", data, schema) == [
        {"a": 'x"y\\z\nw', "b": "AA0="},
        {"a": "\\N", "b": None},
    ]


def test_file_names_compression_and_what_is_not_a_table():
    names = [
        "metadata",
        "a.b-schema-create.sql",
        "a.b.t-schema.sql.gz",
        "a.b.t.000000000.sql.gz",
        "a.b.t.000000001.sql.gz",
        "x-schema-create.sql",
        "x.v-schema-view.sql",
        "x.u-schema.sql.zst",
        "x.u.0000000010000.csv.zst",
    ]
    export = dumpling.plan_export(names, "SHOW MASTER STATUS:\n\tLog: tidb-binlog\n\tPos: 420633329401856001\n")
    assert export.schemas == {("a.b", "t"): "a.b.t-schema.sql.gz", ("x", "u"): "x.u-schema.sql.zst"}
    assert [(f.database, f.table, f.format, f.compression) for f in export.data_files] == [
        ("a.b", "t", "sql", "gzip"),
        ("a.b", "t", "sql", "gzip"),
        ("x", "u", "csv", "zstd"),
    ]
    with pytest.raises(ExportError, match=r"x\.w\.000000000\.sql: data of x\.w, which has no x\.w-schema\.sql"):
        dumpling.plan_export([*names, "x.w.000000000.sql"], "SHOW MASTER STATUS:\n\tPos: 420633329401856001\n")


def test_a_bad_value_names_the_file_row_and_column():
    with pytest.raises(ExportError, match=r"test\.employee\.000000000\.sql: row 2, column 'id'"):
        rows_of(
            "test.employee.000000000.sql",
            b"INSERT INTO `employee` VALUES (1,'a','b','c',NULL),('x','a','b','c',NULL);",
            EMPLOYEE,
        )


def test_timestamps_in_the_session_time_zone_become_utc():
    schema = {"columns": [{"name": "ts", "type": "timestamp"}]}
    data = b"/*!40103 SET TIME_ZONE='+08:00' */;\nINSERT INTO `t` VALUES ('2026-01-01 08:00:00.250');\n"
    assert rows_of("test.t.000000000.sql", data, schema) == [{"ts": "2026-01-01 00:00:00.250"}]


@pytest.mark.parametrize("seed", range(6))
def test_every_column_type_round_trips_in_every_format_and_compression(tmp_path, seed):
    """An export of a random workload's tables (every column type the codecs know) reads back as the oracle's
    canonical text, in SQL and CSV, plain and gzip/zstd/snappy compressed."""
    workload = random_workload(seed, tables=3, changes=150, preexisting=1)
    stamps = sorted({e.commit_ts for e in workload.events if isinstance(e, RowChange)})
    ts = stamps[len(stamps) * 2 // 3]
    rows = upstream_state(workload.events, as_of=ts, preexisting=workload.preexisting)
    schemas = upstream_schemas(workload.events, as_of=ts, preexisting=workload.preexisting)
    formats = {
        name: (("sql", "csv")[i % 2], (None, "gzip", "zstd", "snappy")[(i + seed) % 4])
        for i, name in enumerate(sorted(schemas))
    }
    write_export(tmp_path, ts, schemas, rows, formats)
    export = dumpling.plan_export([p.name for p in tmp_path.iterdir()], (tmp_path / "metadata").read_text())
    assert export.snapshot_ts == ts
    assert set(export.schemas) == set(schemas)
    for name, schema_file in export.schemas.items():
        text = dumpling.decompress((tmp_path / schema_file).read_bytes(), dumpling.split_compression(schema_file)[1])
        change = ddl.interpret(
            dumpling.create_statement(text, schema_file), database=name[0], table=name[1], commit_ts=ts, schemas={}
        )[0]
        assert change.understood and change.ddl_type == "create_table"
        got = {}
        for file in (f for f in export.data_files if (f.database, f.table) == name):
            data = dumpling.decompress((tmp_path / file.name).read_bytes(), file.compression)
            for row in dumpling.canonical_rows(file, data, change.schema_after, CsvOptions()):
                got[tuple(row[k] for k in change.schema_after["key_columns"])] = row
        key = schemas[name].key
        assert got == {tuple(v[k] for k in key): v for v in rows.get(name, {}).values()}, f"{name} {formats[name]}"
