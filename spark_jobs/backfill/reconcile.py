"""Reconciliation: each table as the lakehouse says it was at a TSO, against what the upstream had at that TSO.

The dbt tests compare gold with silver, so they cannot see rows that never reached silver (a retention gap
accepted, a changefeed filter, a wrong `time-zone` option). This compares with the upstream itself:

- **against a Dumpling export**: the export's TSO, its tables' rows read as a snapshot load reads them
  (`snapshot.read_export`, `snapshot.parse_rows`);
- **against a live TiDB** over the MySQL protocol (`mysql_upstream`): rows `AS OF TIMESTAMP` the TSO, by
  default the source's consistent ts (what gold is published as of).

The lakehouse side is the table's history as of the TSO (`history.as_of`, the one as-of mechanism). Upstream
values arrive as canonical text and are cast to the history table's column types as gold casts them
(`cast_canonical`), so both sides are compared as the same typed values: per table the row count and an
order-independent hash (the sum of every row's xxhash64 over its JSON, nulls included), and with `diff` the keys
whose rows are missing from the lakehouse, extra in it, or different. Columns only one side has (added or dropped
since the TSO) are not compared and are listed. A table without a key is not compared: its gold table is a change
table, not a state (README, "Tables without a key").

Every table's outcome is appended to `gold.reconciliations` (counts, hashes and at most DIFF_KEYS_KEPT keys; never
a value), which the status page and `/metrics` show.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from spark_jobs.backfill import daily, mysql_upstream, snapshot
from spark_jobs.backfill.dumpling import CsvOptions
from spark_jobs.config import TableRules
from spark_jobs.gold import history
from spark_jobs.runtime.results import Result
from spark_jobs.runtime.sql import quote_ident
from spark_jobs.runtime.tables import (
    GOLD_RECONCILIATIONS,
    NOT_COMPARED,
    NOT_IN_LAKE,
    NOT_UPSTREAM,
    RECONCILE_MISMATCHES,
    RECONCILED_DIFFERS,
    RECONCILED_MATCH,
    ensure_tables_once,
)

log = logging.getLogger(__name__)

DIFF_KEYS_KEPT = 100  # differing keys kept per table in gold.reconciliations (the counts are exact)
KINDS = ("missing", "extra", "changed")  # of a differing key: upstream only, the lakehouse only, both
WHAT = "reconcile --against"


@dataclass
class TableCheck:
    """One table's outcome; the counts of keys only with `diff`."""

    database: str
    table: str
    outcome: str
    upstream_rows: int | None = None
    lake_rows: int | None = None
    upstream_hash: int | None = None
    lake_hash: int | None = None
    missing_keys: int | None = None  # upstream has the key, the lakehouse not
    extra_keys: int | None = None  # the lakehouse has the key, upstream not
    changed_keys: int | None = None  # both have it, with different values
    diff_keys: list[str] = field(default_factory=list)  # JSON objects of key columns, at most DIFF_KEYS_KEPT
    columns_not_compared: list[str] = field(default_factory=list)
    note: str | None = None

    @property
    def name(self) -> str:
        return f"{self.database}.{self.table}"

    def line(self) -> str:
        text = f"  {self.name}: {self.outcome}"
        if self.upstream_rows is not None or self.lake_rows is not None:
            text += f" (upstream {_count(self.upstream_rows)} rows, lakehouse {_count(self.lake_rows)})"
        if self.outcome == RECONCILED_DIFFERS and self.missing_keys is not None:
            counts = (self.missing_keys, self.extra_keys or 0, self.changed_keys or 0)
            text += f"; {counts[0]} missing, {counts[1]} extra, {counts[2]} changed"
            shown = self.diff_keys[:5]
            if shown:
                more = sum(counts) - len(shown)
                text += ": " + ", ".join(shown) + (f" and {more} more" if more > 0 else "")
        if self.columns_not_compared:
            text += f"; not compared: {', '.join(self.columns_not_compared)}"
        if self.note:
            text += f"; {self.note}"
        return text


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


@dataclass
class ReconcileResult(Result):
    source: str
    reconciliation_id: str
    against: str  # as shown: a path, or a URL without a password
    kind: str  # dumpling | tidb | mysql
    as_of_ts: int
    tables: list[TableCheck]
    seconds: float
    note: str | None = None  # what the comparison could not hold to (a server that cannot read the past)

    @property
    def mismatched(self) -> list[TableCheck]:
        return [t for t in self.tables if t.outcome in RECONCILE_MISMATCHES]

    def lines(self) -> list[str]:
        outcomes = Counter(t.outcome for t in self.tables)
        counted = ", ".join(f"{n} {outcome}" for outcome, n in sorted(outcomes.items())) or "no tables"
        head = (
            f"{self.source}: reconciled {len(self.tables)} tables as of TiDB ts {self.as_of_ts} against "
            f"{self.kind} {self.against}: {counted}; {self.seconds:.1f}s"
        )
        return [head, *([f"  note: {self.note}"] if self.note else []), *(t.line() for t in self.tables)]


@dataclass
class Upstream:
    """The upstream side of one reconciliation: its TSO, the schemas of its tables (as the DDL interpreter reads
    their CREATE TABLE; None for a table it does not have), and each table's rows as canonical text
    (`rows(database, table)`: a DataFrame with an `after` map column)."""

    kind: str
    shown: str
    as_of_ts: int
    schemas: dict[tuple[str, str], dict | None]
    rows: Callable[[str, str], Any]
    note: str | None = None
    release: Callable[[], None] = lambda: None


def export_upstream(spark, location: str, tables: frozenset[tuple[str, str]] | None, csv: CsvOptions | None):
    """A Dumpling export as the upstream: its own TSO, its tables (or those of `tables`)."""
    from pyspark.sql import functions as F

    plan = snapshot.read_export(location, tables, WHAT)
    parsed: list = []  # the export's rows, parsed once by the first table that asks (after the TSO is checked)

    def rows(database: str, table: str):
        if not parsed:
            parsed.append(snapshot.parse_rows(spark, plan, csv, None, WHAT)[0])
        if parsed[0] is None:
            return spark.createDataFrame([], "after map<string,string>")
        return parsed[0].where((F.col("database") == database) & (F.col("table") == table)).select("after")

    def release() -> None:
        if parsed and parsed[0] is not None:
            parsed[0].unpersist()

    return Upstream("dumpling", location, plan.export.snapshot_ts, dict(plan.schemas), rows, release=release)


def live_upstream(spark, live: mysql_upstream.LiveUpstream, shown: str, tables: list[tuple[str, str]], ts: int):
    """A live server as the upstream, read as of `ts` (TiDB) for the given tables."""
    statements = []
    missing = []
    for database, table in tables:
        create = live.create_table(database, table, ts)
        if create is None:
            missing.append((database, table))
        else:
            statements.append({"database": database, "table": table, "ddl_sql": create, "topic": f"{database}.{table}"})
    schemas: dict[tuple[str, str], dict | None] = dict(snapshot.table_schemas(ts, statements, WHAT))
    schemas |= dict.fromkeys(missing)

    def rows(database: str, table: str):
        schema = schemas[(database, table)]
        assert schema is not None
        columns = schema["columns"]
        batches = live.rows(database, table, [c["name"] for c in columns], ts)
        data = [(row,) for batch in batches for row in mysql_upstream.canonical_batch(batch, columns)]
        return spark.createDataFrame(data, "after map<string,string>")

    kind = "tidb" if live.is_tidb else "mysql"
    return Upstream(kind, shown, ts, schemas, rows, note=live.as_of_note, release=live.close)


def reconcile(
    spark,
    source: str,
    upstream: Upstream,
    tables: frozenset[tuple[str, str]] | None = None,
    diff: bool = False,
    rules: TableRules | None = None,
) -> ReconcileResult:
    """Compare every table of the upstream and of the lakehouse at the upstream's TSO (or only `tables`), record
    the outcomes in gold.reconciliations and return them. An upstream table the source's `rules` leave out is
    not compared."""
    started = time.monotonic()
    ts = upstream.as_of_ts
    consistent = history.consistent_ts(spark, source)
    if consistent is None or ts > consistent:
        raise ValueError(
            f"source {source}: the lakehouse is consistent as of TiDB ts {consistent}, before the TSO {ts} to "
            "reconcile at: history does not know it yet"
        )
    in_lake = set(daily.tables_at(spark, source, ts))
    names = sorted((set(upstream.schemas) | in_lake) if tables is None else tables)
    checks = []
    for database, table in names:
        asked = (database, table) in upstream.schemas  # a live upstream is asked for the lakehouse's tables
        schema = upstream.schemas.get((database, table))
        if rules is not None and not rules.keeps(database, table):
            checks.append(TableCheck(database, table, NOT_COMPARED, note="left out by the table rules"))
        elif (database, table) not in in_lake and schema is not None:
            checks.append(TableCheck(database, table, NOT_IN_LAKE, upstream.rows(database, table).count()))
        elif (database, table) not in in_lake:
            checks.append(TableCheck(database, table, NOT_COMPARED, note="neither side has it"))
        elif not asked:  # an export taken of some tables only
            checks.append(TableCheck(database, table, NOT_COMPARED, note=f"not in the {upstream.kind} export"))
        elif schema is None:
            lake_rows = history.as_of(spark, source, database, table, ts).count()
            checks.append(TableCheck(database, table, NOT_UPSTREAM, None, lake_rows))
        elif not schema["key_columns"]:
            checks.append(
                TableCheck(database, table, NOT_COMPARED, note="no key: its gold table is a change table, not a state")
            )
        else:
            checks.append(_compare(spark, source, upstream, schema, database, table, diff))
        log.info("reconcile %s:%s", source, checks[-1].line())
    result = ReconcileResult(source, uuid.uuid4().hex, upstream.shown, upstream.kind, ts, checks, 0.0, upstream.note)
    _record(spark, result)
    result.seconds = time.monotonic() - started
    return result


def _typed(text, data_type):
    """Canonical text as gold types it (the dbt macro cast_canonical, by the column's Spark type)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType, StringType

    if isinstance(data_type, BinaryType):
        return F.unbase64(text)
    if isinstance(data_type, StringType):
        return text
    return text.cast(data_type)


def _compare(spark, source: str, upstream: Upstream, schema: dict, database: str, table: str, diff: bool):
    from pyspark.sql import functions as F

    lake = history.as_of(spark, source, database, table, upstream.as_of_ts)
    upstream_columns = [c["name"] for c in schema["columns"]]
    compared = [c for c in lake.columns if c in upstream_columns]
    not_compared = sorted(set(lake.columns) ^ set(upstream_columns))
    types = {f.name: f.dataType for f in lake.schema.fields}
    theirs = upstream.rows(database, table).select(*[_typed(F.col("after")[c], types[c]).alias(c) for c in compared])
    ours = lake.select(*[quote_ident(c) for c in compared])
    keys = [c for c in schema["key_columns"] if c in compared]

    def fingerprinted(rows, side: str):
        row = F.to_json(F.struct(*[F.col(quote_ident(c)) for c in compared]), {"ignoreNullFields": "false"})
        key = F.to_json(F.struct(*[F.col(quote_ident(c)) for c in keys]), {"ignoreNullFields": "false"})
        return rows.select(F.lit(side).alias("side"), key.alias("k"), F.xxhash64(row).alias("h"))

    both = fingerprinted(theirs, "upstream").unionByName(fingerprinted(ours, "lake"))
    totals = both.groupBy("side").agg(F.count("*").alias("n"), F.sum(F.col("h").cast("decimal(38,0)")).alias("sum"))
    sides = {r["side"]: (int(r["n"]), int(r["sum"] or 0)) for r in totals.collect()}
    (up_rows, up_hash), (lake_rows, lake_hash) = sides.get("upstream", (0, 0)), sides.get("lake", (0, 0))
    same = (up_rows, up_hash) == (lake_rows, lake_hash)
    check = TableCheck(
        database,
        table,
        RECONCILED_MATCH if same else RECONCILED_DIFFERS,
        up_rows,
        lake_rows,
        up_hash,
        lake_hash,
        columns_not_compared=not_compared,
    )
    if diff and len(keys) < len(schema["key_columns"]):
        check.note = "keys not listed: a key column is not in both"
    elif diff:
        _diff(check, both)
    return check


def _diff(check: TableCheck, both) -> None:
    """The keys whose rows differ, in one job: missing from the lakehouse, extra in it, changed."""
    from pyspark.sql import functions as F

    per_key = both.groupBy("k").agg(
        F.max(F.when(F.col("side") == "upstream", F.col("h"))).alias("upstream"),
        F.max(F.when(F.col("side") == "lake", F.col("h"))).alias("lake"),
    )
    kind = (
        F.when(F.col("lake").isNull(), "missing")
        .when(F.col("upstream").isNull(), "extra")
        .when(F.col("upstream") != F.col("lake"), "changed")
    )
    kept = F.slice(F.array_sort(F.collect_list("k")), 1, DIFF_KEYS_KEPT)
    found = {
        r["kind"]: (r["n"], r["keys"])
        for r in per_key.select(kind.alias("kind"), "k")
        .where("kind IS NOT NULL")
        .groupBy("kind")
        .agg(F.count("*").alias("n"), kept.alias("keys"))
        .collect()
    }
    check.missing_keys, check.extra_keys, check.changed_keys = (found.get(k, (0, []))[0] for k in KINDS)
    check.diff_keys = [f"{kind} {key}" for kind in KINDS for key in found.get(kind, (0, []))[1]]
    check.diff_keys = check.diff_keys[:DIFF_KEYS_KEPT]


def _record(spark, result: ReconcileResult) -> None:
    """One row per table into gold.reconciliations, in one commit."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    ensure_tables_once(spark, "gold")
    rows = [
        (
            result.source,
            result.reconciliation_id,
            result.against,
            result.kind,
            result.as_of_ts,
            t.database,
            t.table,
            t.outcome,
            t.upstream_rows,
            t.lake_rows,
            _decimal(t.upstream_hash),
            _decimal(t.lake_hash),
            t.missing_keys,
            t.extra_keys,
            t.changed_keys,
            t.diff_keys,
            t.columns_not_compared,
            "; ".join(n for n in (t.note, result.note) if n) or None,
        )
        for t in result.tables
    ]
    table = spark.table(GOLD_RECONCILIATIONS)
    given = [f for f in table.schema.fields if f.name != "checked_at"]
    recorded = spark.createDataFrame(rows, StructType(given)).withColumn("checked_at", F.current_timestamp())
    recorded.select(*[quote_ident(c) for c in table.columns]).writeTo(GOLD_RECONCILIATIONS).append()


def _decimal(value: int | None):
    from decimal import Decimal

    return None if value is None else Decimal(value)
