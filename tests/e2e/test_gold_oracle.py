"""Gold is the upstream database as of the consistent timestamp: the randomized oracle test.

For each distinct path through the pipeline a seeded random upstream workload (inserts, updates, key changes, at
least one in every seed, deletes, every DDL the generator draws, a table that existed before the changefeed,
watermarks) is encoded as TiCDC would, split into several landings at random points with redeliveries, and carried
through the real pipeline (broker, bronze, silver, dbt gold). After each run gold must equal the oracle
(ticdc_devkit.simulator.oracle) as of the consistent timestamp, row by row and value by value, and every gold
table's columns and types must be the upstream table's. Its history table must answer, for every moment up to the
consistent timestamp (every earlier consistent ts and every commit ts of the stream, and the moment just before
each), exactly the rows upstream had then, in the table's latest shape. A rebuild from silver equals the
incremental gold and history, and a rerun changes nothing (checked on one variant: with nothing new, no
protocol's data is read).

The paths (VARIANTS): Canal-JSON, whose stream carries the DDL text and sends key-changing updates unsplit
(`output-raw-change-event`), and Avro, whose schemas come from the registry without DDL text and whose deletes
carry no commit ts; no message of either may reach quarantine. That every protocol decodes a stream to the same
canonical changes is proven without Spark in tests/codecs (test_cross_protocol.py, and test_key_change.py for
unsplit updates); past the decoder the protocols share one code path, so the slow end-to-end property runs once
per path, not once per protocol. The Canal-JSON path also carries a table without a key (TiCDC's
`force-replicate`): its gold and history must be its change table, every distinct change once, whatever was
redelivered (README, "Tables without a key"). Each seed also draws the changefeed's own options its protocol allows
(`random_changefeed_options`): old values of the changed columns only or none, another time zone, Avro's BIGINT
UNSIGNED and DECIMAL as text (gold then keeps a DECIMAL's text: the stream has no scale), Canal-JSON's
content-compatible form, row checksums, large messages sent as claim checks (compressed or raw), deletes that carry
only their key (Canal-JSON, Open; such a stream has no keyless table, as TiCDC requires), with the source decoding
as that changefeed is configured. Rows that fail their checksum: test_checksum_quarantine.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import re

import pytest

from spark_jobs import erasure, steps
from spark_jobs.bronze.land import land_bronze
from spark_jobs.canonical.values import INTEGER_TYPES, canonical_type, parse_type
from spark_jobs.codecs import decoder_class
from spark_jobs.config import DELETE_MODES, GoldSettings, TableLayout, TableRules
from spark_jobs.errors import ErasureRefused
from spark_jobs.gold import names
from spark_jobs.gold.build import build_gold
from spark_jobs.gold.layout import current_layout, table_layout
from spark_jobs.gold.publish import tidb_time
from spark_jobs.runtime.sql import quote_ident
from spark_jobs.runtime.tables import SILVER_QUARANTINE
from spark_jobs.silver.build import build_silver
from ticdc_devkit.broker import produce
from ticdc_devkit.dumpling_export import write_export
from ticdc_devkit.gold_check import oracle_state, rows_state
from ticdc_devkit.registry import running_registry
from ticdc_devkit.simulator.avro import tidb_type
from ticdc_devkit.simulator.model import Column, Ddl, RowChange, Table, dispatch_partition, key_changed
from ticdc_devkit.simulator.oracle import (
    key_text,
    removed_rows,
    upstream_schemas,
    upstream_state,
    upstream_state_in_shape,
)
from ticdc_devkit.simulator.stream import EXTENSION_OPTIONS, encode_stream
from ticdc_devkit.simulator.workload import Workload, create_table_sql, random_workload

pytestmark = pytest.mark.e2e

PARTITIONS = 2
RUNS = 3
GOLD_COLUMNS = ("_row_key", "_commit_ts", "_op", "_deleted_at")

# What each canonical MySQL type is in gold (the README's type map, stated again here as the test's own oracle).
SPARK_TYPES = {
    "tinyint": "int",
    "smallint": "int",
    "mediumint": "int",
    "int": "int",
    "int unsigned": "bigint",
    "tinyint unsigned": "int",
    "smallint unsigned": "int",
    "mediumint unsigned": "int",
    "bigint": "bigint",
    "bigint unsigned": "decimal(20,0)",
    "float": "float",
    "double": "double",
    "date": "date",
    "datetime": "timestamp",
    "timestamp": "timestamp",
    "year": "int",
    "bit": "decimal(20,0)",
    "binary": "binary",
    "varbinary": "binary",
    "tinyblob": "binary",
    "blob": "binary",
    "mediumblob": "binary",
    "longblob": "binary",
}


def expected_spark_type(column: Column, protocol: str, unscaled_decimals: bool = False) -> str:
    """A column's type in gold: its MySQL type's, as far as the protocol tells it (Avro sends `tidb_type`
    alone, where TINYINT to MEDIUMINT are INT, and their unsigned forms INT UNSIGNED; with `unscaled_decimals`,
    Avro's string decimals, a DECIMAL's precision and scale are not sent, and gold keeps its text)."""
    mysql_type = column.type
    if protocol == "avro" and parse_type(mysql_type)[0] in INTEGER_TYPES:
        mysql_type = tidb_type(column)
    canonical = canonical_type(mysql_type)
    if canonical.startswith("decimal"):
        if "(" not in canonical or unscaled_decimals:
            return "string"
        wide = int(canonical.split("(")[1].split(",")[0]) > 38  # wider than Spark's decimals: exact text
        return "string" if wide else canonical.replace(" unsigned", "")
    return SPARK_TYPES.get(canonical, "string")


@pytest.fixture(scope="module")
def registry():
    with running_registry() as url:  # a stand-in: the real Schema Registry is Java and cannot run here
        yield url


def redelivered(messages, rng: random.Random):
    """TiCDC delivers at least once: after a restart it sends a partition's recent messages again."""
    out = list(messages)
    for partition in range(PARTITIONS):
        mine = [m for m in messages if m.partition == partition]
        if mine and rng.random() < 0.5:
            out.extend(mine[-rng.randint(1, min(4, len(mine))) :])
    return out


def gold_tables(spark, source: str) -> set[str]:
    """Every table in the source's gold namespace (current-state and history tables)."""
    namespace = names.gold_namespace(source)
    if namespace not in {r[0] for r in spark.sql("SHOW NAMESPACES").collect()}:
        return set()
    return {r["tableName"] for r in spark.sql(f"SHOW TABLES IN {quote_ident(namespace)}").collect()}


def gold_snapshot(spark, source: str) -> dict[str, list]:
    namespace = names.gold_namespace(source)
    return {
        t: sorted(map(tuple, spark.table(f"{quote_ident(namespace)}.{quote_ident(t)}").collect()))
        for t in sorted(gold_tables(spark, source))
    }


def assert_gold_is_upstream(
    spark,
    source: str,
    workload,
    as_of: int,
    rules: TableRules | None = None,
    gold: GoldSettings | None = None,
    exact_deletes: bool = True,
    erased: dict[tuple[str, str], tuple] | None = None,
    unscaled_decimals: bool = False,
    updates_as_inserts: bool = False,
) -> None:
    """Every upstream table (that the source's table `rules` keep) with rows as of `as_of` is a gold table with
    the same rows, values, columns and types; gold holds no other table (an upstream table that is still empty
    may have none yet). With soft or ignored deletes (`gold`'s delete modes) a keyed table holds the rows removed
    upstream too, with their last values; soft-deleted ones, and only they, with `_op` delete and `_deleted_at`
    the removal's commit time (with `exact_deletes` off, a time: the protocol's deletes carry none). A key
    `erased` from a table ((database, table) -> its key's values) is in none of it. An Avro delete placed on the
    other side of `as_of` than upstream's (`deletes_in_flight`) is as placed, and not compared further. With
    `unscaled_decimals` the stream gave no DECIMAL's scale: gold holds each value's text as sent, which a MODIFY
    that widens a DECIMAL's scale (or makes an integer a DECIMAL) does not pad upstream's way. With
    `updates_as_inserts` the stream sends updates as inserts (Open without old values): an ignored delete whose
    commit updates its table is applied, as one beside an insert is."""
    as_sent = unscaled_decimals
    rows = upstream_state(workload.events, as_of=as_of, preexisting=workload.preexisting, decimals_as_sent=as_sent)
    gold = gold or GoldSettings()
    removed = {
        mode: removed_rows(
            workload.events,
            mode,
            as_of=as_of,
            preexisting=workload.preexisting,
            decimals_as_sent=as_sent,
            updates_as_inserts=updates_as_inserts,
        )
        for mode in ("soft", "ignore")
    }
    schemas = kept_schemas(workload, as_of, rules)
    pending = deletes_in_flight(workload, [as_of]) if workload.protocol == "avro" else {}
    every = gold_tables(spark, source)
    present = {t for t in every if not t.endswith(names.HISTORY_SUFFIX)}
    wanted = {names.gold_table(db, t): (db, t) for db, t in schemas}
    assert present <= set(wanted), f"gold has tables upstream does not: {sorted(present - set(wanted))}"
    assert every - present == {t + names.HISTORY_SUFFIX for t in present}, "a gold table without its history"
    namespace = names.gold_namespace(source)
    for gold_name, (db, t) in sorted(wanted.items()):
        table = schemas[(db, t)]
        if gold_name not in present:
            assert not rows.get((db, t)), f"{db}.{t} has rows upstream but no gold table"
            continue
        relation = f"{quote_ident(namespace)}.{quote_ident(gold_name)}"
        fields = [f for f in spark.table(relation).schema.fields if f.name not in GOLD_COLUMNS]
        assert [(f.name, f.dataType.simpleString()) for f in fields] == [
            (c.name, expected_spark_type(c, workload.protocol, unscaled_decimals)) for c in table.columns
        ], f"{db}.{t}: gold columns differ from upstream"
        if not table.key:
            actual = changes_in(spark, relation, table, "_commit_ts")
            assert actual == keyless_changes(workload, db, t, as_of), f"{db}.{t}: change table differs as of {as_of}"
            continue
        wanted = table_layout(gold, source, db, t, [{"name": c.name, "type": c.type} for c in table.columns])
        assert current_layout(spark, relation) == wanted, f"{db}.{t}: gold is not laid out as gold.layouts says"
        columns = [(c.name, canonical_type(c.type)) for c in table.columns]
        mode = gold.delete_mode(db, t)
        kept = removed[mode].get((db, t), {}) if mode != "hard" else {}
        gold_rows = spark.table(relation).collect()
        actual = by_key(rows_state(gold_rows, columns), table.key)
        expected = by_key(
            oracle_state(rows.get((db, t), {}) | {k: r for k, (r, _) in kept.items()}, columns), table.key
        )
        if erased and (db, t) in erased:
            assert expected.pop(erased[(db, t)], None) is not None, f"{db}.{t}: the erased key was not upstream"
        in_flight = pending.get((db, t), {}).get(as_of, {})
        for key, placed in in_flight.items():  # an Avro delete placed across as_of
            assert mode != "hard" or (key in actual) == (as_of < placed), f"{db}.{t}: {key}, delete placed at {placed}"
            actual.pop(key, None)
            expected.pop(key, None)
        assert actual == expected, f"{db}.{t} ({mode} deletes) differs from upstream as of {as_of}"
        assert ("_deleted_at" in spark.table(relation).columns) == (mode == "soft"), f"{db}.{t}: _deleted_at"
        if mode == "soft":
            marked = {}
            for r in gold_rows:
                (values,) = rows_state([r], columns).values()
                key = tuple(values[k] for k in table.key)
                if (r["_deleted_at"] is not None or r["_op"] == "delete") and key not in in_flight:
                    marked[key] = (r["_op"], r["_deleted_at"])
            if not exact_deletes:
                marked = {key: (op, at is not None) for key, (op, at) in marked.items()}
            assert marked == {
                tuple(row[k] for k in table.key): (
                    "delete",
                    tidb_time(ts).replace(tzinfo=None) if exact_deletes else True,
                )
                for row, ts in kept.values()
                if tuple(row[k] for k in table.key) not in {(erased or {}).get((db, t)), *in_flight}
            }, f"{db}.{t}: the soft-deleted rows are not those removed upstream, at their commit time"


def kept_schemas(workload, as_of: int, rules: TableRules | None) -> dict:
    """The upstream tables as of `as_of` that the table rules keep, without the columns they leave out (a key
    column is always kept)."""
    schemas = upstream_schemas(workload.events, as_of=as_of, preexisting=workload.preexisting)
    if rules is None:
        return schemas
    kept = {}
    for name, table in schemas.items():
        if rules.keeps(*name):
            left_out = rules.left_out_columns(*name) - {k.lower() for k in table.key}
            kept[name] = dataclasses.replace(
                table, columns=tuple(c for c in table.columns if c.name.lower() not in left_out)
            )
    return kept


def assert_history_is_upstream(
    spark,
    source: str,
    workload,
    now: int,
    moments: list[int],
    rules: TableRules | None = None,
    unscaled_decimals: bool = False,
) -> None:
    """For every gold table and every moment up to `now`: the versions its history table holds open at that
    moment are upstream's rows then, in the table's shape as of `now`. An Avro delete carries no commit ts
    and is placed one past the change before it on its partition (docs/architecture.md, invariant 7): between
    that moment and the delete's true ts the row must be as placed, and is left out of the comparison. No
    history is of a table the table `rules` leave out. With `unscaled_decimals`, as in `assert_gold_is_upstream`."""
    schemas = kept_schemas(workload, now, rules)
    namespace = names.gold_namespace(source)
    histories = {t for t in gold_tables(spark, source) if t.endswith(names.HISTORY_SUFFIX)}
    shapes = {
        moment: upstream_state_in_shape(
            workload.events, moment, now, preexisting=workload.preexisting, decimals_as_sent=unscaled_decimals
        )
        for moment in moments
        if moment <= now
    }
    pending = deletes_in_flight(workload, moments) if workload.protocol == "avro" else {}
    for history in sorted(histories):
        db, t = names.upstream_of(history)
        assert (db, t) in schemas, f"history {history}: of a table upstream has not or the table rules leave out"
        table = schemas[(db, t)]
        if not table.key:  # every change a version of its own, none closed (no TRUNCATE of it upstream)
            relation = f"{quote_ident(namespace)}.{quote_ident(history)}"
            assert changes_in(spark, relation, table, "_valid_from_ts") == keyless_changes(workload, db, t, now)
            assert not spark.table(relation).where("_valid_to_ts IS NOT NULL").count(), f"{db}.{t}: a closed change"
            continue
        columns = [(c.name, canonical_type(c.type)) for c in table.columns]
        versions = spark.table(f"{quote_ident(namespace)}.{quote_ident(history)}").collect()
        for moment, state in shapes.items():
            open_then = [
                v for v in versions if v["_valid_from_ts"] <= moment and (v["_valid_to_ts"] or moment + 1) > moment
            ]
            actual = by_key(rows_state(open_then, columns), table.key)
            assert len(actual) == len(open_then), f"{db}.{t}: two versions of a row open at {moment}"
            expected = by_key(oracle_state(state.get((db, t), {}), columns), table.key)
            for key, placed in pending.get((db, t), {}).get(moment, {}).items():
                assert (key in actual) == (moment < placed), f"{db}.{t}: {key} at {moment}, delete placed at {placed}"
                actual.pop(key, None)
                expected.pop(key, None)
            differing = {
                key: {
                    c: (a, e)
                    for c in {*(actual.get(key) or {}), *(expected.get(key) or {})}
                    if (a := (actual.get(key) or {}).get(c)) != (e := (expected.get(key) or {}).get(c))
                }
                for key in actual.keys() | expected.keys()
                if actual.get(key) != expected.get(key)
            }
            assert not differing, (
                f"{db}.{t}: history as of {moment} differs from upstream then (now {now}): {differing}"
            )


KEYLESS = Table(
    "keyless_db", "audit", (Column("who", "varchar(8)", nullable=False), Column("n", "int", nullable=False)), ()
)


def with_keyless_table(workload: Workload, rng: random.Random) -> Workload:
    """The workload with a table without a key beside it: created before everything, then changed inside the
    workload's own transactions (at their commit ts): inserts from a small pool of rows, so equal rows exist
    upstream, an identical insert twice in one transaction now and then, updates and deletes of rows it holds."""
    stamps = [e.commit_ts for e in workload.events if isinstance(e, RowChange | Ddl)]
    events: list = [
        Ddl(
            min(stamps) - 1,
            KEYLESS.database,
            KEYLESS.name,
            create_table_sql(KEYLESS),
            "create_table",
            table_after=KEYLESS,
        )
    ]
    held: list[dict] = []
    for e in workload.events:
        events.append(e)
        if not isinstance(e, RowChange) or rng.random() > 0.4:
            continue
        row = {"who": rng.choice("abc"), "n": rng.randint(1, 3)}
        pick = rng.random()
        if not held or pick < 0.4:
            held.append(row)
            events.append(RowChange(e.commit_ts, "insert", KEYLESS, after=row))
            if rng.random() < 0.2:  # the same row inserted twice in one transaction
                held.append(row)
                events.append(RowChange(e.commit_ts, "insert", KEYLESS, after=row))
        elif pick < 0.75:
            old = held.pop(rng.randrange(len(held)))
            held.append(row)
            if old != row:  # TiDB writes no change for an update that changes nothing
                events.append(RowChange(e.commit_ts, "update", KEYLESS, before=old, after=row))
        else:
            events.append(RowChange(e.commit_ts, "delete", KEYLESS, before=held.pop(rng.randrange(len(held)))))
    return dataclasses.replace(workload, events=events)


def keyless_changes(workload: Workload, db: str, t: str, as_of: int) -> list[tuple]:
    """A keyless table's change table as of `as_of`: each distinct change (commit ts, op, both images) once,
    shown as its commit ts, op and row (a delete's: the row it deleted)."""
    seen, out = set(), []
    for e in workload.events:
        if isinstance(e, RowChange) and (e.table.database, e.table.name) == (db, t) and e.commit_ts <= as_of:
            identity = (e.commit_ts, e.op, *(tuple(sorted((i or {}).items())) for i in (e.before, e.after)))
            if identity not in seen:
                seen.add(identity)
                row = e.before if e.op == "delete" else e.after
                out.append((e.commit_ts, e.op, *(row[c.name] for c in e.table.columns)))
    return sorted(out)


def changes_in(spark, relation: str, table: Table, stamp: str) -> list[tuple]:
    columns = ", ".join(quote_ident(c.name) for c in table.columns)
    return sorted(tuple(r) for r in spark.sql(f"SELECT {stamp}, _op, {columns} FROM {relation}").collect())


def deletes_in_flight(workload, moments: list[int]) -> dict[tuple[str, str], dict[int, dict[tuple, int]]]:
    """Per table and moment: the keys of rows whose delete (a delete, or the old key of a key change) carries
    no commit ts and is placed (one past the last commit ts placed on its partition, as silver's decoder
    does) on the other side of the moment than upstream's, with the ts it is placed at. A delete in the same
    transaction as the change before it lands one tick late; one after it, early."""
    last_ts: dict[int, int] = {}
    out: dict[tuple[str, str], dict[int, dict[tuple, int]]] = {}
    for e in workload.events:
        if not isinstance(e, RowChange):
            continue
        partition = dispatch_partition(e, PARTITIONS)
        old_key = key_text(e.table, e.before) if e.before is not None else None
        new_key = key_text(e.table, e.after) if e.after is not None else None
        if old_key is not None and old_key != new_key and partition in last_ts:
            last_ts[partition] += 1
            placed = last_ts[partition]
            for m in (m for m in moments if min(placed, e.commit_ts) <= m < max(placed, e.commit_ts)):
                out.setdefault((e.table.database, e.table.name), {}).setdefault(m, {})[old_key] = placed
        if e.after is not None:
            last_ts[partition] = e.commit_ts
    return out


def moments_of(workload, rng: random.Random, consistent: list[int]) -> list[int]:
    """Every earlier consistent ts, and a sample of the stream's commit timestamps and the moments just
    before them (a version must open exactly at its change)."""
    stamps = sorted({e.commit_ts for e in workload.events if isinstance(e, RowChange | Ddl)})
    picked = rng.sample(stamps, min(len(stamps), 25))
    return sorted({*consistent, *picked, *(ts - 1 for ts in picked)})


def by_key(state: dict, key: tuple[str, ...]) -> dict:
    """Rows keyed by their key columns' values in the table's key order (protocols list a composite key's
    columns in their own order, so `_row_key` is not compared itself)."""
    return {tuple(values[k] for k in key): values for values in state.values()}


def random_table_rules(workload: Workload, rng: random.Random) -> TableRules:
    """Rules that leave out one random table of the workload (by a glob) and one column of another, and include
    every database by name, so the oracle runs with a filter that renames, drops, retyped columns and the
    keyless table meet. A table renamed from a left-out name into a kept one needs a snapshot (its earlier rows
    were left out: test_table_rules.py), and so does a column renamed into the kept ones, or kept under the name a
    table is renamed to and left out under its old one (seed 29 of Canal-JSON: `code` of shop.stock, renamed
    shop.products): a stream alone cannot give their earlier values, and such a choice is drawn again."""
    renamed_columns = {
        c.name.lower()
        for e in workload.events
        if isinstance(e, Ddl) and e.ddl_type == "rename_column"
        for t in (e.table_before, e.table_after)
        if t is not None
        for c in t.columns
    }
    renames = [
        ((e.table_before.database, e.table_before.name), (e.database, e.table))
        for e in workload.events
        if isinstance(e, Ddl) and e.ddl_type == "rename_table" and e.table_before is not None
    ]
    tables = sorted({(e.table.database, e.table.name) for e in workload.events if isinstance(e, RowChange)})
    databases = sorted({db for db, _ in tables})
    for _ in range(20):
        db, t = rng.choice(tables)
        glob = t[:-1] + "?" if len(t) > 1 and rng.random() < 0.5 else t
        columns = sorted(
            {
                (e.table.database, e.table.name, c.name)
                for e in workload.events
                if isinstance(e, RowChange) and e.table.database != KEYLESS.database
                for c in e.table.columns
                if c.name not in e.table.key and c.name.lower() not in renamed_columns
            }
        )
        tables_only = TableRules(
            include=[f"`{d.replace('`', '``')}`.*" for d in databases],
            exclude=[f"`{db.replace('`', '``')}`.{glob.replace('.', '?').replace('`', '?')}"],
        )
        columns = [c for c in columns if tables_only.keeps(c[0], c[1])]
        if not columns:
            continue
        cdb, ct, column = rng.choice(columns)
        rules = dataclasses.replace(
            tables_only, exclude_columns={f"`{cdb.replace('`', '``')}`.`{ct.replace('`', '``')}`": [column]}
        )
        if not any(
            (not rules.keeps(*old) and rules.keeps(*new)) or rules.left_out_columns(*old) - rules.left_out_columns(*new)
            for old, new in renames
        ):
            return rules
    for db, t in tables:  # rarely (seed 19 of Canal-JSON): twenty draws met renames; the table alone, if any fits
        rules = TableRules(
            include=[f"`{d.replace('`', '``')}`.*" for d in databases],
            exclude=[f"`{db.replace('`', '``')}`.`{t.replace('`', '``')}`"],
        )
        if not any(not rules.keeps(*old) and rules.keeps(*new) for old, new in renames):
            return rules
    raise AssertionError(f"no table rule leaves a renamed table alone among {tables}")


def random_gold_settings(
    workload: Workload, rng: random.Random, protocol: str, rules: TableRules | None
) -> GoldSettings:
    """Every delete mode at once: a random one as the source default, each other one for a random table that the
    `rules` keep and that has deletes, by its name (Avro's deletes carry no commit ts, so it has no ignore mode:
    config.py). And a random layout for one table, on a key column every table of its name has."""
    kept = {
        (e.table.database, e.table.name)
        for e in workload.events
        if isinstance(e, RowChange) and (rules is None or rules.keeps(e.table.database, e.table.name))
    }
    deleting = sorted(
        {(e.table.database, e.table.name) for e in workload.events if isinstance(e, RowChange) and e.op == "delete"}
        & kept
    )
    modes = rng.sample(
        [m for m in DELETE_MODES if protocol != "avro" or m != "ignore"], k=2 if protocol == "avro" else 3
    )

    def glob(db: str, t: str) -> str:
        return f"`{db.replace('`', '``')}`.`{t.replace('`', '``')}`"

    chosen = rng.sample(deleting, min(len(deleting), len(modes) - 1))
    shapes: dict[tuple[str, str], list[Table]] = {}
    for e in workload.events:
        for t in (
            [e.table] if isinstance(e, RowChange) else [e.table_before, e.table_after] if isinstance(e, Ddl) else []
        ):
            if t is not None:
                shapes.setdefault((t.database, t.name), []).append(t)
    layouts = {}
    for name in sorted(kept):
        common = set.intersection(*(set(t.key) for t in shapes[name]))
        plain = sorted(c for c in common if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", c))
        if plain and not layouts and rng.random() < 0.7:
            column = rng.choice(plain)
            field = rng.choice([f"bucket({rng.choice([2, 4])}, {column})", f"truncate(3, {column})", column])
            layouts[glob(*name)] = TableLayout(partition_by=[field], sort_by=rng.choice([[], [f"{column} desc"]]))
    return GoldSettings(
        deletes=modes[0], table_deletes={glob(*name): m for name, m in zip(chosen, modes[1:])}, layouts=layouts
    )


# protocol -> the changefeed options beyond the protocol's own (EXTENSION_OPTIONS)
VARIANTS = {"canal-json": {"output-raw-change-event": True}, "avro": {}}
CLAIM_CHECKS = ("canal-json", "open", "simple-json", "simple-avro")  # TiCDC's Avro and Debezium have none
PARTIAL_OLD = ("canal-json", "open")  # `only-output-updated-columns`
KEYS_ONLY_DELETES = ("canal-json", "open")  # `delete-only-output-handle-key-columns`
TIME_ZONES = ("canal-json", "simple-json", "simple-avro", "avro")  # TIMESTAMP values sent in the changefeed's zone
SIMPLE = ("simple-json", "simple-avro")


def random_changefeed_options(protocol: str, seed: int, events, claims, base: dict) -> dict:
    """`base` and a changefeed's own options, drawn per seed among what TiCDC lets it set for the protocol: an
    update's old values of the changed columns only or none, TIMESTAMPs in another time zone, Avro's BIGINT UNSIGNED
    as text or DECIMALs as text without their scale, Canal-JSON's content-compatible form (full types: a DECIMAL's
    scale, an ENUM's labels), rows with TiDB's checksum (Simple; Avro with both as text), and large
    messages sent as claim checks (a threshold among the stream's own message sizes, so that some of its messages
    go as claim checks and the rest as they are, where TiCDC accepts one; the files maybe compressed or raw). From a
    generator of their own, so that the workload's other draws stay as they were."""
    rng = random.Random(seed * 31 + 7)
    options = dict(base)
    if protocol in PARTIAL_OLD and rng.random() < 0.5:
        options["only-output-updated-columns"] = True
    if protocol in TIME_ZONES and rng.random() < 0.5:
        options["time-zone"] = rng.choice(["Asia/Shanghai", "America/New_York"])
    if protocol == "avro" and rng.random() < 0.5:
        options["avro-bigint-unsigned-handling-mode"] = "string"
    if protocol == "debezium" and rng.random() < 0.5:
        options["debezium-output-old-value"] = False  # TiCDC then sends an update without its before image
    if protocol == "open" and rng.random() < 0.3:
        options["enable-old-value"] = False  # an update then reads as an insert of its new values
    if protocol == "canal-json" and rng.random() < 0.3:
        options["content-compatible"] = True  # implies old values of the changed columns only
    if protocol == "avro" and rng.random() < 0.3:
        options["avro-decimal-handling-mode"] = "string"  # a DECIMAL's value as text, its precision and scale unsent
    as_text = ("avro-decimal-handling-mode", "avro-bigint-unsigned-handling-mode")
    # TiCDC's Avro sends row checksums only with both as text
    checkable = protocol in SIMPLE or all(options.get(name) == "string" for name in as_text)
    if checkable and rng.random() < 0.5:
        options["integrity-check-level"] = "correctness"  # every row with TiDB's checksum, which the decoder checks
    if protocol in CLAIM_CHECKS and rng.random() < 0.5:
        options["large-message-handle-compression"] = rng.choice(["none", "lz4", "snappy"])
        if protocol != "open" and rng.random() < 0.5:
            options["claim-check-raw-value"] = True
        one_row = {**options, "max-batch-size": 1} if protocol == "open" else options  # Open's limit is a row's
        plain = encode_stream(protocol, events, topic="sizes", partitions=PARTITIONS, options=one_row)
        sizes = sorted({len(m.key or b"") + len(m.value or b"") for m in plain})
        claimed = options | {"large-message-handle-option": "claim-check", "claim-check-storage-uri": str(claims)}
        trials = {**claimed, "claim-check-storage-uri": str(claims.with_name(claims.name + "-trials"))}
        for threshold in sizes[int(len(sizes) * rng.uniform(0.5, 0.9)) :]:
            trial = {**trials, "large-message-threshold": threshold}
            try:  # TiCDC fails a changefeed whose claim-check message is over the threshold too: a larger one
                encode_stream(protocol, events, topic="sizes", partitions=PARTITIONS, options=trial)
            except ValueError:
                continue
            return claimed | {"large-message-threshold": threshold}
        # every claim-check message would be over its threshold (Open's small rows, whose claim-check item names
        # a long path): a changefeed TiCDC fails, so this stream goes without claim checks
    return options


WITH_KEYLESS = ("canal-json",)  # TiCDC's Avro refuses a table without a key
WITH_RULES = ("canal-json",)  # table rules act past the decoder, on every protocol alike


# More workloads per path for a soak run: TICDC_ORACLE_SEEDS=20 runs 20 seeds of each (the suite runs one), and
# TICDC_ORACLE_PROTOCOLS=all (or a list: open,simple-json) runs the other protocols as paths of their own too.
SEEDS = int(os.environ.get("TICDC_ORACLE_SEEDS", "1"))
PROTOCOLS = os.environ.get("TICDC_ORACLE_PROTOCOLS", ",".join(VARIANTS))
PATHS = list(EXTENSION_OPTIONS) if PROTOCOLS == "all" else [p.strip() for p in PROTOCOLS.split(",")]


@pytest.mark.parametrize("protocol", PATHS)
@pytest.mark.parametrize("run", range(SEEDS))
def test_gold_equals_upstream_for_random_workloads(spark, broker, source_config, registry, protocol, run, tmp_path):
    seed = 20261123 + list(EXTENSION_OPTIONS).index(protocol) + 1000 * run
    rng = random.Random(seed)
    # Debezium without its schema: its rows carry JSON's types alone, which no table typed by its rows alone can
    # turn into upstream's, so that stream starts with no table from before the changefeed (README, "Types")
    schemaless = protocol == "debezium" and random.Random(f"schemaless {seed}").random() < 0.4
    workload = random_workload(
        seed, tables=3, changes=70, preexisting=0 if schemaless else 1, protocol=protocol, key_change=True
    )
    # deletes that carry their key alone, drawn apart so that the seed's other draws stay as they were; TiCDC
    # refuses them beside `force-replicate`, so such a stream has no table without a key
    keys_only = protocol in KEYS_ONLY_DELETES and random.Random(f"keys-only deletes {seed}").random() < 0.3
    if protocol in WITH_KEYLESS and not keys_only:
        workload = with_keyless_table(workload, rng)
    source = "oracle_" + protocol.replace("-", "_") + (f"_{run}" if run else "")
    claims = tmp_path / "claim-checks"
    base = {**EXTENSION_OPTIONS[protocol], **VARIANTS.get(protocol, {})}
    if keys_only:
        base["delete-only-output-handle-key-columns"] = True
    options = random_changefeed_options(protocol, seed, workload.events, claims, base)
    if schemaless:
        options["debezium-disable-schema"] = True  # DATE, DATETIME, TIME, BIT as numbers: silver reads them by DDL
    unscaled = options.get("avro-decimal-handling-mode") == "string"  # gold then keeps a DECIMAL's text
    updates_as_inserts = options.get("enable-old-value") is False  # Open: an update reads as an insert
    assert any(isinstance(e, RowChange) and key_changed(e) for e in workload.events), "no key change to carry"
    reg = registry if protocol == "avro" else None
    if reg:
        options["schema-registry-url"] = reg
    messages = encode_stream(protocol, workload.events, topic=source, partitions=PARTITIONS, options=options)
    broker.create_topics([source], partitions=PARTITIONS)
    rules = random_table_rules(workload, rng) if protocol in WITH_RULES else None
    gold = random_gold_settings(workload, rng, protocol, rules)
    exact_deletes = protocol != "avro"  # Avro's deletes carry no commit ts: silver infers it
    decoding = {name: value for name, value in options.items() if name in decoder_class(protocol).OPTIONS}
    config = source_config(source, protocol, options=decoding, registry=reg, tables=rules, gold=gold)
    cuts = sorted(rng.sample(range(1, len(messages)), RUNS - 1)) + [len(messages)]
    start, consistent = 0, []
    for end in cuts:
        produce(broker.bootstrap, redelivered(messages[start:end], rng))
        start = end
        land_bronze(spark, config, source)
        build_silver(spark, config, source)
        result = build_gold(spark, config, source, test=end == len(messages))  # dbt's tests: once, at the end
        if (result.consistency == "watermark" or end == len(messages)) and result.consistent_ts is not None:
            assert_gold_is_upstream(
                spark,
                source,
                workload,
                result.consistent_ts,
                rules,
                gold,
                exact_deletes,
                unscaled_decimals=unscaled,
                updates_as_inserts=updates_as_inserts,
            )
            consistent.append(result.consistent_ts)
            moments = moments_of(workload, rng, consistent)
            assert_history_is_upstream(spark, source, workload, result.consistent_ts, moments, rules, unscaled)
    assert result.consistent_ts is not None
    if result.consistency == "watermark":
        assert result.consistent_ts == workload.consistent_ts
    quarantined = spark.sql(f"SELECT reason FROM {SILVER_QUARANTINE} WHERE source = :s", args={"s": source}).collect()
    assert not quarantined, f"a message of the stream went to quarantine: {quarantined[:3]}"

    incremental = gold_snapshot(spark, source)
    if protocol == "canal-json":  # a rerun with nothing new is the same for every protocol: one variant pays for it
        build_gold(spark, config, source)
        assert gold_snapshot(spark, source) == incremental, "a rerun changed gold"
        # reconciliation finds every keyed table equal to an export of the upstream at the consistent ts (every
        # column type, after every DDL); the keyless table, which an export cannot key, is not compared, nor a
        # table the rules leave out
        ts, pre = result.consistent_ts, workload.preexisting
        keyed = {n: t for n, t in kept_schemas(workload, ts, None).items() if t.key}
        export = write_export(
            tmp_path / "export", ts, keyed, upstream_state(workload.events, as_of=ts, preexisting=pre)
        )
        checked = steps.reconcile(source, str(export), config, diff=True)
        outcomes = {t.name: (t.outcome, t.note) for t in checked.tables}
        assert {name: outcome for name, (outcome, _) in outcomes.items() if outcome != "not compared"} == {
            f"{d}.{t}": "match" for d, t in keyed if rules is None or rules.keeps(d, t)
        }
        left_out = {f"{d}.{t}" for d, t in keyed if rules is not None and not rules.keeps(d, t)}
        assert {name: outcomes[name] for name in left_out} == {
            name: ("not compared", "left out by the table rules") for name in left_out
        }
    erased = erase_random_key(spark, config, source, workload, result.consistent_ts, rules, rng)
    assert_gold_is_upstream(
        spark, source, workload, result.consistent_ts, rules, gold, exact_deletes, erased, unscaled, updates_as_inserts
    )
    incremental = gold_snapshot(spark, source)
    build_gold(spark, config, source, rebuild=True)
    assert gold_snapshot(spark, source) == incremental, "gold rebuilt from silver differs from the incremental gold"


def erase_random_key(spark, config, source: str, workload, ts: int, rules, rng) -> dict[tuple[str, str], tuple]:
    """Erase a random row's key of a random keyed gold table, one renamed upstream where there is one (its
    earlier changes are in silver under its earlier name); returns {(database, table): the key's values}, empty
    when no keyed table has a row. A key that an update sent whole moved is refused, nothing touched
    (tests/unit/test_erasure.py): another is tried, and every key refused fails the test. The key's history goes
    too."""
    namespace, present = names.gold_namespace(source), gold_tables(spark, source)
    candidates = []
    for (db, t), table in sorted(kept_schemas(workload, ts, rules).items()):
        if table.key and names.gold_table(db, t) in present:
            relation = f"{quote_ident(namespace)}.{quote_ident(names.gold_table(db, t))}"
            columns = [(c.name, canonical_type(c.type)) for c in table.columns]
            candidates += [(db, t, table, columns, r) for r in spark.table(relation).collect()]
    renamed = {(e.database, e.table) for e in workload.events if isinstance(e, Ddl) and e.ddl_type == "rename_table"}
    rng.shuffle(candidates)
    candidates.sort(key=lambda c: c[:2] not in renamed)
    refused = []
    for db, t, table, columns, row in candidates:
        key = dict(zip(erasure.key_columns(spark, source, db, t), json.loads(row["_row_key"])))
        try:
            erasure.erase(spark, config, source, db, t, key, "the gold oracle")
        except ErasureRefused as refusal:
            refused.append(str(refusal))
            continue
        history = f"{quote_ident(namespace)}.{quote_ident(names.gold_table(db, t) + names.HISTORY_SUFFIX)}"
        assert not spark.sql(f"SELECT * FROM {history} WHERE _row_key = :k", args={"k": row["_row_key"]}).count()
        (values,) = rows_state([row], columns).values()
        return {(db, t): tuple(values[k] for k in table.key)}
    assert not refused, f"every key's erasure was refused: {refused[:3]}"
    return {}
