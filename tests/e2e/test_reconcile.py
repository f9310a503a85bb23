"""Reconciliation against the upstream (`ticdc-lake reconcile`): the lakehouse's tables as of a TSO against what
the upstream had then, by row count and an order-independent hash of every row, and with `diff` the keys.

Against a Dumpling export: an export of the upstream at a TSO mid-stream matches; exports with injected
differences (a row missing, a value changed, a row extra) are found, table by table, with the exact keys. Against
a live server over the MySQL protocol: a MariaDB of the test's own on loopback (Debian's, installed by `make test`)
holds the upstream's final rows; it matches, then a changed and a deleted row are found.

What a non-TiDB server leaves unproven: MariaDB has no `AS OF TIMESTAMP`, so the live path reads its current
rows (the result says so), and the reads as of a TSO that TiDB would answer (`AS OF TIMESTAMP
TIDB_PARSE_TSO(ts)`, `tidb_snapshot` for the CREATE TABLE) are not exercised here; nor is TiDB's own text form of
its types (MariaDB and TiDB agree on those of these tables).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time

import pytest

from spark_jobs import steps
from spark_jobs.bronze.land import land_bronze
from spark_jobs.canonical.values import INTEGER_TYPES
from spark_jobs.errors import ConfigError, ReconcileMismatchError
from spark_jobs.gold.build import build_gold
from spark_jobs.runtime.tables import GOLD_RECONCILIATIONS
from spark_jobs.silver.build import build_silver
from spark_jobs.status.collect import RunInfo, record_status
from spark_jobs.status.view import status_views
from ticdc_devkit.broker import produce
from ticdc_devkit.dumpling_export import write_export
from ticdc_devkit.simulator.model import RowChange
from ticdc_devkit.simulator.oracle import upstream_schemas, upstream_state
from ticdc_devkit.simulator.shop_stream import shop_stream
from ticdc_devkit.simulator.stream import EXTENSION_OPTIONS, encode_stream
from ticdc_devkit.simulator.workload import create_table_sql, random_workload

pytestmark = pytest.mark.e2e

SOURCE, LIVE_SOURCE = "reconciled", "reconciled_live"
MARIADB = ("/usr/sbin/mariadbd", "/usr/bin/mariadb-install-db")


def ingest(spark, broker, config, source: str, events) -> int:
    broker.create_topics([source], partitions=1)
    produce(
        broker.bootstrap, encode_stream("canal-json", events, topic=source, options=EXTENSION_OPTIONS["canal-json"])
    )
    land_bronze(spark, config, source)
    build_silver(spark, config, source)
    return build_gold(spark, config, source).consistent_ts


def outcomes(result) -> dict[str, str]:
    return {t.name: t.outcome for t in result.tables}


def test_an_export_of_the_upstream_matches_and_injected_differences_are_found(spark, broker, source_config, tmp_path):
    workload = random_workload(20261126, tables=3, changes=60, ddl=False, preexisting=0, protocol="canal-json")
    config = source_config(SOURCE, "canal-json")
    consistent = ingest(spark, broker, config, SOURCE, workload.events)
    stamps = sorted({e.commit_ts for e in workload.events if isinstance(e, RowChange)})
    tso = stamps[len(stamps) // 2]
    assert tso < consistent
    tables = upstream_schemas(workload.events, as_of=tso)
    rows = upstream_state(workload.events, as_of=tso)
    formats = dict(zip(sorted(tables), [("sql", "gzip"), ("csv", None), ("csv", "zstd")], strict=False))

    clean = steps.reconcile(SOURCE, str(write_export(tmp_path / "clean", tso, tables, rows, formats)), config)
    assert clean.as_of_ts == tso and clean.kind == "dumpling"
    assert outcomes(clean) == {f"{d}.{t}": "match" for d, t in tables}
    assert [t.upstream_rows for t in clean.tables] == [len(rows.get(name, {})) for name in sorted(tables)]
    assert all(t.upstream_rows == t.lake_rows and t.upstream_hash == t.lake_hash for t in clean.tables)

    # one table loses a row, one has a value changed and one gains a row that upstream never had
    def injectable(name) -> bool:  # two rows or more, one integer key column and another integer column
        table = tables[name]
        integers = [c.name for c in table.columns if c.base in INTEGER_TYPES]
        return len(rows.get(name, {})) >= 2 and len(table.key) == 1 and table.key[0] in integers and len(integers) > 1

    name = sorted(n for n in tables if injectable(n))
    assert name, "the workload must leave a table whose rows the test can change"
    target = tables[name[0]]
    (key_column,) = target.key
    changed_column = next(c for c in target.columns if c.name != key_column and c.base in INTEGER_TYPES)
    keys = sorted(rows[name[0]], key=lambda k: int(rows[name[0]][k][key_column]))
    dropped, altered = keys[0], keys[1]
    table_rows = {k: dict(v) for k, v in rows[name[0]].items() if k != dropped}
    old = table_rows[altered][changed_column.name]
    table_rows[altered][changed_column.name] = "0" if old not in ("0", None) else "1"
    extra_key = max(int(v[key_column]) for v in rows[name[0]].values()) + 1000
    table_rows[(str(extra_key),)] = {**table_rows[altered], key_column: str(extra_key)}
    injected = {**rows, name[0]: table_rows}
    differing = write_export(tmp_path / "differing", tso, tables, injected, formats)

    with pytest.raises(ReconcileMismatchError, match=f"{target.database}.{target.name}: differs"):
        steps.reconcile(SOURCE, str(differing), config, diff=True)
    recorded = spark.sql(
        f"""SELECT * FROM {GOLD_RECONCILIATIONS} WHERE source = '{SOURCE}'
            AND reconciliation_id = (SELECT max_by(reconciliation_id, checked_at) FROM {GOLD_RECONCILIATIONS}
                                     WHERE source = '{SOURCE}')"""
    ).collect()
    by_table = {f"{r['upstream_database']}.{r['upstream_table']}": r for r in recorded}
    assert by_table.keys() == {f"{d}.{t}" for d, t in tables}
    row = by_table[f"{target.database}.{target.name}"]
    assert (row["outcome"], row["missing_keys"], row["extra_keys"], row["changed_keys"]) == ("differs", 1, 1, 1)
    assert row["upstream_rows"] == len(rows[name[0]]) and row["lake_rows"] == len(rows[name[0]])
    key_of = {dropped: rows[name[0]][dropped][key_column], altered: rows[name[0]][altered][key_column]}
    assert sorted(row["diff_keys"]) == sorted(
        [
            f'changed {{"{key_column}":{key_of[altered]}}}',
            f'extra {{"{key_column}":{key_of[dropped]}}}',
            f'missing {{"{key_column}":{extra_key}}}',
        ]
    )
    assert all(r["outcome"] == "match" for n, r in by_table.items() if n != f"{target.database}.{target.name}")

    # the status page and /metrics show the newest reconciliation
    record_status(spark, config, SOURCE, RunInfo("reconciled-run", 0))
    (view,) = [v for v in status_views(config) if v["source"] == SOURCE]
    assert view["reconciliation"]["mismatched"] == [f"{target.database}.{target.name}: differs"]
    assert view["reconciliation"]["as_of_ts"] == tso and view["reconciliation"]["kind"] == "dumpling"

    # an export the lakehouse cannot know yet, and a location that is not an export, stop with one line
    later = write_export(tmp_path / "later", consistent + (1 << 18), tables, rows, formats)
    with pytest.raises(ConfigError, match="history does not know it yet"):
        steps.reconcile(SOURCE, str(later), config)
    with pytest.raises(ConfigError, match="no 'metadata' file"):
        steps.reconcile(SOURCE, str(tmp_path), config)


def test_a_password_never_travels_in_the_url(source_config):
    config = source_config(SOURCE, "canal-json")
    with pytest.raises(ConfigError, match=r"mysql://checker:\*\*\*@db: a password in the URL") as raised:
        steps.reconcile(SOURCE, "mysql://checker:hunter2@db:4000", config)
    assert "hunter2" not in str(raised.value)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def mariadb(tmp_path_factory):
    """A MariaDB server of the test's own on loopback, with a user `checker` whose password is in the
    environment; the root user connects over the server's socket to load it."""
    missing = [p for p in MARIADB if not os.path.exists(p)]
    assert not missing, (
        f"{missing} not found: `make test` installs Debian's mariadb-server (apt-get install -y mariadb-server)"
    )
    root = tmp_path_factory.mktemp("mariadb")
    datadir, socket_path, port = root / "data", root / "mysqld.sock", _free_port()
    subprocess.run(
        [
            MARIADB[1],
            f"--datadir={datadir}",
            "--user=root",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
        ],
        check=True,
        capture_output=True,
    )
    server = subprocess.Popen(
        [MARIADB[0], "--no-defaults", f"--datadir={datadir}", f"--socket={socket_path}", f"--port={port}"]
        + ["--bind-address=127.0.0.1", "--user=root", f"--pid-file={root / 'mysqld.pid'}", "--skip-log-bin"]
        + [f"--log-error={root / 'error.log'}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    import pymysql

    deadline = time.monotonic() + 60
    while True:
        try:
            admin = pymysql.connect(unix_socket=str(socket_path), user="root", autocommit=True)
            break
        except pymysql.err.OperationalError:
            assert server.poll() is None and time.monotonic() < deadline, (root / "error.log").read_text()
            time.sleep(0.3)
    with admin.cursor() as cursor:
        cursor.execute("CREATE USER 'checker'@'127.0.0.1' IDENTIFIED BY 'reconcile-pw'")
        cursor.execute("GRANT SELECT ON *.* TO 'checker'@'127.0.0.1'")
    try:
        yield admin, port
    finally:
        admin.close()
        server.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(30)
        if server.poll() is None:
            server.kill()
        shutil.rmtree(root, ignore_errors=True)


def load_upstream(admin, events) -> None:
    """The upstream's final tables and rows into the server, values as parameters."""
    tables, rows = upstream_schemas(events), upstream_state(events)
    with admin.cursor() as cursor:
        for database in sorted({d for d, _ in tables}):
            cursor.execute(f"CREATE DATABASE `{database}`")
        for name, table in sorted(tables.items()):
            cursor.execute(create_table_sql(table))
            columns = [c.name for c in table.columns]
            insert = (
                f"INSERT INTO `{table.database}`.`{table.name}` ({', '.join(f'`{c}`' for c in columns)}) "
                f"VALUES ({', '.join(['%s'] * len(columns))})"
            )
            cursor.executemany(insert, [tuple(r.get(c) for c in columns) for r in rows.get(name, {}).values()])


def test_a_live_server_over_the_mysql_protocol_matches_then_shows_what_changed(
    spark, broker, source_config, mariadb, monkeypatch
):
    admin, port = mariadb
    events = shop_stream()
    config = source_config(LIVE_SOURCE, "canal-json")
    ingest(spark, broker, config, LIVE_SOURCE, events)
    load_upstream(admin, events)
    url = f"mysql://checker@127.0.0.1:{port}"

    monkeypatch.setenv("TICDC_UPSTREAM_PASSWORD", "wrong")
    with pytest.raises(ConfigError, match=f"reconcile --against mysql://checker@127.0.0.1:{port}: cannot connect"):
        steps.reconcile(LIVE_SOURCE, url, config)

    monkeypatch.setenv("TICDC_UPSTREAM_PASSWORD", "reconcile-pw")
    result = steps.reconcile(LIVE_SOURCE, url, config, diff=True)
    assert result.kind == "mysql" and "not TiDB" in (result.note or "")
    tables = upstream_state(events)
    assert outcomes(result) == {f"{d}.{t}": "match" for d, t in tables}
    assert sum(t.lake_rows or 0 for t in result.tables) == sum(len(r) for r in tables.values()) > 0

    # an Airflow connection names the same server (Airflow reads AIRFLOW_CONN_* from the environment)
    monkeypatch.setenv("AIRFLOW_CONN_SHOP_UPSTREAM", f"mysql://checker:reconcile-pw@127.0.0.1:{port}")
    first_table = next(iter(sorted(tables)))
    via_airflow = steps.reconcile(LIVE_SOURCE, "airflow:shop_upstream", config, tables=".".join(first_table))
    assert outcomes(via_airflow) == {".".join(first_table): "match"}
    assert via_airflow.against == f"airflow:shop_upstream (mysql://checker@127.0.0.1:{port})"
    assert "reconcile-pw" not in " ".join(via_airflow.lines())

    database, table = next(name for name in sorted(tables) if len(tables[name]) >= 2)
    upstream = upstream_schemas(events)[(database, table)]
    (key,) = upstream.key
    first, second = sorted(tables[(database, table)].values(), key=lambda r: r[key])[:2]
    text_column = next(c.name for c in upstream.columns if c.name != key and c.type.startswith("varchar"))
    with admin.cursor() as cursor:
        cursor.execute(
            f"UPDATE `{database}`.`{table}` SET `{text_column}` = 'changed' WHERE `{key}` = %s", (first[key],)
        )
        cursor.execute(f"DELETE FROM `{database}`.`{table}` WHERE `{key}` = %s", (second[key],))
    with pytest.raises(ReconcileMismatchError) as raised:
        steps.reconcile(LIVE_SOURCE, url, config, diff=True)
    (differs,) = [line for line in str(raised.value).splitlines() if ": differs" in line]
    assert f"{database}.{table}: differs" in differs and "0 missing, 1 extra, 1 changed" in differs
