"""A live upstream over the MySQL protocol, read for reconciliation: a table's CREATE TABLE and its rows as of a
TSO, as MySQL's text protocol sends them. Knows the protocol and TiDB's reads in the past, nothing of Spark.

TiDB reads both as of the TSO: `SHOW CREATE TABLE` with the session's `tidb_snapshot` set to it, the rows with
`SELECT ... AS OF TIMESTAMP TIDB_PARSE_TSO(ts)`. Another server of the protocol (MySQL, MariaDB) cannot read the
past: its current state is read, and `as_of_note` says so. Values arrive as bytes in the text protocol's form,
which is Dumpling's: `dumpling.value_converter` turns them into canonical text, with the session's time zone
set to UTC for TIMESTAMP columns.

The password never travels in the URL (it would show in logs and process lists): it comes from an environment
variable (`TICDC_UPSTREAM_PASSWORD` unless the URL's `password_env` names another) or from an Airflow connection
(resolved by the step that calls this).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote, urlsplit

from spark_jobs.backfill import dumpling
from spark_jobs.errors import ConfigError
from spark_jobs.runtime.sql import quote_ident

PASSWORD_ENV = "TICDC_UPSTREAM_PASSWORD"
BATCH_ROWS = 10_000


@dataclass(frozen=True)
class Endpoint:
    """Where the upstream listens and who logs in; `shown` is how logs, pages and tables name it."""

    host: str
    port: int
    user: str
    password: str | None = field(default=None, repr=False)

    @property
    def shown(self) -> str:
        return f"mysql://{self.user}@{self.host}:{self.port}"


def endpoint_from_url(url: str) -> Endpoint:
    """`mysql://user@host[:port][?password_env=NAME]`, the password from that environment variable."""
    parts = urlsplit(url)
    if parts.scheme not in ("mysql", "tidb"):
        raise ConfigError(f"reconcile --against {url!r}: not a Dumpling export or a mysql:// URL")
    if parts.password is not None:
        shown = f"{parts.scheme}://{parts.username}:***@{parts.hostname}"
        raise ConfigError(
            f"reconcile --against {shown}: a password in the URL would show in logs and process lists; "
            f"set it in ${PASSWORD_ENV} (or the variable the URL's password_env names), or use airflow:CONN_ID"
        )
    if not parts.hostname or not parts.username:
        raise ConfigError(f"reconcile --against {url!r}: the URL needs a user and a host (mysql://user@host:4000)")
    variable = parse_qs(parts.query).get("password_env", [PASSWORD_ENV])[0]
    return Endpoint(parts.hostname, parts.port or 4000, unquote(parts.username), os.environ.get(variable))


class LiveUpstream:
    """One connection to the upstream for one reconciliation."""

    def __init__(self, endpoint: Endpoint, connect_timeout: float = 10.0):
        import pymysql  # type: ignore[import-untyped]  # no stubs installed (types-PyMySQL is not in the lock)

        self.endpoint = endpoint
        try:
            self.connection = pymysql.connect(
                host=endpoint.host,
                port=endpoint.port,
                user=endpoint.user,
                password=endpoint.password or "",
                charset="utf8mb4",
                use_unicode=False,
                conv={},  # every value as the bytes the text protocol sent
                connect_timeout=connect_timeout,
                autocommit=True,
            )
        except pymysql.err.OperationalError as exc:
            raise ConfigError(f"reconcile --against {endpoint.shown}: cannot connect ({exc.args[-1]})") from None
        self.server = (self._fetch_one("SELECT VERSION()") or (b"",))[0].decode()
        self.is_tidb = "tidb" in self.server.lower()
        self._execute("SET time_zone = '+00:00'")

    @property
    def as_of_note(self) -> str | None:
        """Why the rows read are not the ones at the TSO, if they are not."""
        if self.is_tidb:
            return None
        return f"the server is not TiDB ({self.server}): its current rows were read, not those as of the TSO"

    def create_table(self, database: str, table: str, ts: int) -> str | None:
        """The table's CREATE TABLE as of `ts` (TiDB) or now; None if it does not exist."""
        import pymysql  # type: ignore[import-untyped]

        if self.is_tidb:
            self._execute("SET @@tidb_snapshot = %s", (str(ts),))
        try:
            row = self._fetch_one(f"SHOW CREATE TABLE {quote_ident(database)}.{quote_ident(table)}")
        except pymysql.err.ProgrammingError as exc:
            if exc.args[0] == 1146:  # ER_NO_SUCH_TABLE
                return None
            raise
        finally:
            if self.is_tidb:
                self._execute("SET @@tidb_snapshot = ''")
        return row[1].decode("utf-8") if row else None

    def rows(self, database: str, table: str, columns: list[str], ts: int) -> Iterator[list[tuple]]:
        """The table's rows (the given columns, as bytes or None) in batches, as of `ts` on TiDB."""
        import pymysql.cursors  # type: ignore[import-untyped]

        select = ", ".join(quote_ident(c) for c in columns)
        query = f"SELECT {select} FROM {quote_ident(database)}.{quote_ident(table)}"
        params: tuple = ()
        if self.is_tidb:
            query += " AS OF TIMESTAMP TIDB_PARSE_TSO(%s)"
            params = (ts,)
        with self.connection.cursor(pymysql.cursors.SSCursor) as cursor:
            cursor.execute(query, params)
            while batch := cursor.fetchmany(BATCH_ROWS):
                yield list(batch)

    def close(self) -> None:
        self.connection.close()

    def _execute(self, query: str, params: tuple = ()) -> None:
        with self.connection.cursor() as cursor:
            cursor.execute(query, params)

    def _fetch_one(self, query: str) -> tuple | None:
        with self.connection.cursor() as cursor:
            cursor.execute(query)
            return cursor.fetchone()


def canonical_batch(rows: list[tuple], columns: list[dict]) -> list[dict[str, str | None]]:
    """Rows as the text protocol sent them -> column -> canonical text (UTC for TIMESTAMP columns)."""
    converters = [(c["name"], dumpling.value_converter(c["type"], "+00:00")) for c in columns]
    return [
        {name: None if value is None else convert(value) for (name, convert), value in zip(converters, row)}
        for row in rows
    ]
