"""The randomized workload and the oracle that knows every DDL.

The workload: the same seed gives the same stream in any process; across 20 seeds every DDL kind and
variant appears; every row change agrees with the upstream database the oracle replays; each protocol's
limits are kept; every encoder carries its protocol's workloads (hostile names included) to a decoder
that returns exactly what the simulator's `expected()` says. The oracle: one hand-written stream per DDL
kind, with the exact rows TiDB shows after it.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import pytest

from spark_jobs.canonical.values import INTEGER_TYPES, canonical_value, enum_elements
from spark_jobs.codecs import PROTOCOLS
from spark_jobs.ddl import classify
from tests.codecs.helpers import changefeed_options, decode_partitions
from tests.codecs.test_cross_protocol import EXPECTED
from ticdc_devkit.gold_check import canonical_text, oracle_state
from ticdc_devkit.registry import running_registry
from ticdc_devkit.simulator.avro import sanitize_name
from ticdc_devkit.simulator.model import Bootstrap, Column, Ddl, RowChange, Table, Watermark, key_changed
from ticdc_devkit.simulator.oracle import (
    Upstream,
    key_text,
    removed_rows,
    upstream_schemas,
    upstream_state,
    zero_value,
)
from ticdc_devkit.simulator.shop_stream import shop_stream, shop_stream_more, tso
from ticdc_devkit.simulator.stream import encode_stream, make_encoder, partition_events
from ticdc_devkit.simulator.workload import PROTOCOL_LIMITS, quote_name, random_workload

SEEDS = range(20)


# A workload's fingerprint, printed by a fresh interpreter (str hashing differs per process).
FINGERPRINT = (
    "import hashlib; from ticdc_devkit.simulator.workload import random_workload; "
    "w = random_workload(7, hostile_names=True, protocol='avro'); "
    "print(hashlib.sha256(repr((w.events, w.preexisting)).encode()).hexdigest())"
)


# ---- the workload -----------------------------------------------------------------------------------


def test_same_seed_same_workload_in_any_process():
    assert random_workload(7) == random_workload(7)
    assert random_workload(7) != random_workload(8)
    fingerprints = {
        subprocess.run(
            [sys.executable, "-c", FINGERPRINT],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parents[2],
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
        ).stdout
        for hash_seed in ("0", "1")
    }
    assert len(fingerprints) == 1


def test_a_workload_asked_for_a_key_change_has_one_and_is_otherwise_the_same():
    """Seed 20280128 (Simple-Avro, 70 changes) draws no key-changing update: asked for one, the stream gains it at
    its end, before the last resolved ts, moving a row upstream has to a key it has not; a seed that drew one is
    unchanged."""
    args = {"tables": 3, "changes": 70, "preexisting": 1, "protocol": "simple-avro"}
    plain, asked = random_workload(20280128, **args), random_workload(20280128, key_change=True, **args)
    assert not any(isinstance(e, RowChange) and key_changed(e) for e in plain.events)
    (added,) = [e for e in asked.events if isinstance(e, RowChange) and key_changed(e)]
    assert asked.events[-2] is added and isinstance(asked.events[-1], Watermark)
    assert asked.events[:-2] == plain.events[:-1]
    name = (added.table.database, added.table.name)
    old_key, new_key = key_text(added.table, added.before), key_text(added.table, added.after)
    before, after = (
        upstream_state(events, preexisting=asked.preexisting)[name] for events in (plain.events, asked.events)
    )
    assert old_key in before and new_key not in before
    assert old_key not in after and new_key in after
    drew_one = random_workload(20261124, **{**args, "protocol": "open"})
    assert any(isinstance(e, RowChange) and key_changed(e) for e in drew_one.events)
    assert random_workload(20261124, key_change=True, **{**args, "protocol": "open"}) == drew_one


def variants(events: list) -> set[str]:
    """The DDL kinds and row-change shapes a stream holds, read from its events."""
    found: set[str] = set()
    dropped_columns: dict[tuple, set[str]] = collections.defaultdict(set)
    dropped_tables: set[tuple] = set()
    deleted: dict[tuple, set] = collections.defaultdict(set)
    previous = None
    for e in events:
        if isinstance(e, Watermark):
            found.add("watermark")
        elif isinstance(e, RowChange):
            name, key = (e.table.database, e.table.name), key_text(e.table, e.after or e.before)
            found.update({"composite key"} if len(e.table.key) > 1 else ())
            found.update({"key-changing update"} if key_changed(e) else ())
            found.update({"insert of a deleted key"} if e.op == "insert" and key in deleted[name] else ())
            if e.op == "delete":
                deleted[name].add(key)
        if not isinstance(e, Ddl):
            continue
        found.add(e.ddl_type)
        name, before, after = (e.database, e.table), e.table_before, e.table_after
        if e.ddl_type == "create_table" and name in dropped_tables:
            found.add("create again after drop")
        if e.ddl_type == "drop_table":
            dropped_tables.add(name)
        if e.ddl_type == "rename_table":
            if previous is not None and previous.ddl_type == "rename_table" and previous.table_after == before:
                found.add("rename chain")
            dropped_columns[name] = dropped_columns.pop((before.database, before.name), set())
        if e.ddl_type in ("add_column", "drop_column", "modify_column", "rename_column", "multi_schema_change"):
            old, new = {c.name: c for c in before.columns}, {c.name: c for c in after.columns}
            added = [c for c in after.columns if c.name not in old]
            gone = [c for c in before.columns if c.name not in new]
            if e.ddl_type == "rename_column":
                found.add("CHANGE COLUMN" if "CHANGE COLUMN" in e.sql else "RENAME COLUMN")
                pairs = list(zip(gone, added))
            else:
                pairs = [(old[n], new[n]) for n in new if n in old]
                for c in added:
                    found.add(
                        "add: default" if c.default is not None else "add: nullable" if c.nullable else "add: zero"
                    )
                    found.update({"add a dropped name again"} if c.name in dropped_columns[name] else ())
                dropped_columns[name].update(c.name for c in gone)
            for a, b in pairs:
                old_family, new_family = (("int" if c.base in INTEGER_TYPES else c.base) for c in (a, b))
                if old_family != new_family:
                    found.add(f"modify: {old_family} -> {new_family}")
                elif a.type != b.type:
                    found.add(f"modify: wider {old_family}")
            found.update({"add FIRST"} if e.sql.endswith(" FIRST") else ())
            found.update({"add AFTER"} if e.ddl_type == "add_column" and " AFTER `" in e.sql else ())
            found.update({"ADD + DROP in one ALTER"} if added and gone and e.ddl_type == "multi_schema_change" else ())
        previous = e
    return found


def test_every_ddl_kind_and_variant_appears_across_seeds():
    found = set().union(*(variants(random_workload(seed).events) for seed in SEEDS))
    kinds = {"create_table", "drop_table", "rename_table", "truncate_table", "add_column", "drop_column"}
    kinds |= {"modify_column", "rename_column", "create_index", "drop_database", "multi_schema_change"}
    shapes = {"add: default", "add: nullable", "add: zero", "add FIRST", "add AFTER", "add a dropped name again"}
    shapes |= {"RENAME COLUMN", "CHANGE COLUMN", "modify: wider int", "modify: wider varchar"}
    shapes |= {"modify: wider decimal", "modify: int -> varchar", "modify: varchar -> int", "ADD + DROP in one ALTER"}
    shapes |= {"rename chain", "create again after drop", "create_database", "watermark", "composite key"}
    shapes |= {"key-changing update", "insert of a deleted key"}
    assert kinds | shapes <= found, sorted((kinds | shapes) - found)
    assert all(random_workload(seed).preexisting for seed in range(3))


def workloads():
    """Plain and hostile workloads, unrestricted and for each protocol."""
    for seed in range(6):
        yield random_workload(seed, hostile_names=seed % 2 == 1)
    for protocol in PROTOCOLS:
        yield random_workload(100, protocol=protocol, hostile_names=True)


def test_commit_order_transactions_and_watermarks():
    """Real TSOs in commit order; a DDL is its own transaction; a key changes once per transaction; a
    watermark comes after every change at or below it and before every change above it."""
    for w in workloads():
        changes = [e for e in w.events if isinstance(e, (Ddl, RowChange))]
        assert [e.commit_ts for e in changes] == sorted(e.commit_ts for e in changes)
        assert all(e.commit_ts >> 18 > 1_700_000_000_000 for e in changes)
        by_ts = collections.defaultdict(list)
        for e in changes:
            by_ts[e.commit_ts].append(e)
        for same_ts in by_ts.values():
            assert len(same_ts) == 1 or not any(isinstance(e, Ddl) for e in same_ts)
            keys = [
                key
                for e in same_ts
                if isinstance(e, RowChange)
                for key in {(e.table.database, e.table.name, key_text(e.table, i)) for i in (e.before, e.after) if i}
            ]
            assert len(keys) == len(set(keys))
        for i, e in enumerate(w.events):
            if isinstance(e, Watermark):
                assert all(c.commit_ts <= e.ts for c in w.events[:i] if isinstance(c, (Ddl, RowChange)))
                assert all(c.commit_ts > e.ts for c in w.events[i:] if isinstance(c, (Ddl, RowChange)))
        assert w.consistent_ts == w.events[-1].ts


def test_every_row_change_agrees_with_the_upstream_database():
    """Each row change is on the table's current schema; an update or delete carries exactly the row the
    oracle holds; an insert's key is free. The oracle accepts every DDL of every workload."""
    for w in workloads():
        upstream = Upstream(w.preexisting)
        for e in w.events:
            if isinstance(e, RowChange):
                name = (e.table.database, e.table.name)
                schema = upstream.schemas[name]
                assert (schema.columns, schema.key) == (e.table.columns, e.table.key), (w.seed, name)
                rows = upstream.rows[name]
                if e.before is not None:
                    assert rows[key_text(e.table, e.before)] == {
                        c.name: canonical_value(c.type, e.before[c.name]) for c in e.table.columns
                    }
                if e.op == "insert":
                    assert key_text(e.table, e.after) not in rows
            upstream.apply(e)
        assert upstream.rows == upstream_state(w.events, w.consistent_ts, w.preexisting)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_protocol_limits_are_kept(protocol):
    avoided = PROTOCOL_LIMITS[protocol]
    for seed in range(8):
        w = random_workload(seed, protocol=protocol, hostile_names=seed % 2 == 0)
        assert w.avoided == avoided
        ddl = [e for e in w.events if isinstance(e, Ddl)]
        assert not {e.ddl_type for e in ddl} & set(avoided)
        tables = [e.table for e in w.events if isinstance(e, RowChange)] + [e.table_after for e in ddl if e.table_after]
        columns = [c for t in tables for c in t.columns]
        preexisting = [c.base for t in w.preexisting for c in t.columns]
        if "preexisting_decimal" in avoided:
            assert "decimal" not in preexisting
        if "preexisting_enum_set" in avoided:
            assert not {"enum", "set"} & set(preexisting)
        if "preexisting_time" in avoided:
            assert "time" not in preexisting
        if "time_fraction" in avoided:
            assert all(c.type in ("time", "time(0)") for c in columns if c.base == "time")
        if "wide_decimal" in avoided:
            assert all(int(c.type[8:].split(",")[0]) <= 15 for c in columns if c.base == "decimal")
        if "quoted_labels" in avoided:
            labels = [label for c in columns if c.base in ("enum", "set") for label in enum_elements(c.type)]
            assert not any("'" in label or "\\" in label for label in labels)
        if "add_column_filled" in avoided:
            assert all(c.nullable and c.default is None for e in ddl if e.table_before for c in added_columns(e))
        if "colliding_names" in avoided:
            for t in tables:
                assert len({sanitize_name(c.name) for c in t.columns}) == len(t.columns)
            names = {(t.database, t.name) for t in tables}
            assert len({(sanitize_name(d), sanitize_name(n)) for d, n in names}) == len(names)
        if "silent_schema_change" in avoided:
            for e in ddl:
                if e.table_after is not None:
                    following = w.events[w.events.index(e) + 1 :]
                    assert next(r for r in following if isinstance(r, RowChange)).table == e.table_after
        if "ddl_before_first_row" in avoided:
            for table in w.preexisting:
                first = next(
                    e
                    for e in w.events
                    if (isinstance(e, RowChange) and e.table == table)
                    or (isinstance(e, Ddl) and e.table_before == table)
                )
                assert isinstance(first, RowChange)
        if protocol.startswith("simple"):
            assert w.events[: len(w.preexisting)] == [Bootstrap(t) for t in w.preexisting]


def added_columns(e: Ddl) -> list[Column]:
    names = {c.name for c in e.table_before.columns}
    return [c for c in e.table_after.columns if c.name not in names]


HOSTILE_MARKS = {
    "quote": lambda n: "'" in n or '"' in n,
    "backtick": lambda n: "`" in n,
    "space": lambda n: " " in n,
    "dot": lambda n: "." in n,
    "double underscore": lambda n: "__" in n,
    "jinja braces": lambda n: "{{" in n,
    "unicode": lambda n: not n.isascii(),
    "reserved word": lambda n: n.lower() in ("select", "group", "desc", "order", "key", "from", "table"),
}


def test_hostile_names_cover_every_kind_and_are_quoted_in_sql():
    found, case_only = set(), False
    for seed in range(6):
        w = random_workload(seed, hostile_names=True)
        tables = {(t.database, t.name): t for t in w.preexisting}
        tables.update({(e.database, e.table): e.table_after for e in w.events if isinstance(e, Ddl) and e.table_after})
        names = [n for t in tables.values() for n in (t.database, t.name, *(c.name for c in t.columns))]
        found |= {mark for mark, test in HOSTILE_MARKS.items() for n in names if test(n)}
        by_lower = collections.defaultdict(set)
        for database, table in tables:
            by_lower[table.lower()].add((database, table))
        case_only |= any(
            len({t for _, t in pairs}) > 1 and len({d for d, _ in pairs}) > 1 for pairs in by_lower.values()
        )
        for e in w.events:
            if isinstance(e, Ddl):
                assert quote_name(e.table if e.table is not None else e.database) in e.sql
    assert found == set(HOSTILE_MARKS)
    assert case_only, "no two databases hold tables whose names differ only in case"


# ---- every encoder, every decoder ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def registry_url():
    with running_registry() as url:
        yield url


@pytest.mark.parametrize("hostile", [False, True], ids=["plain", "hostile"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_every_protocol_carries_its_workloads(protocol, hostile, registry_url):
    """Encoded as TiCDC would over 3 partitions, every message decodes (no DecodeError) to exactly what the
    protocol's expected() says (a DDL's ddl_type: `ddl.classify` of its statement, which is also the type the
    workload gave it); names, every kind of hostile one included, come back as sent (Avro: by its name rule)."""
    options = changefeed_options(protocol, registry_url)
    ddl_to_all = make_encoder(protocol, options).DDL_TO_ALL_PARTITIONS
    rename = sanitize_name if protocol == "avro" else str
    sent_names: set[str] = set()
    for seed in (11, 12) if hostile else (11,):
        w = random_workload(seed, protocol=protocol, hostile_names=hostile)
        assert all(classify(e.sql) == e.ddl_type for e in w.events if isinstance(e, Ddl))
        decoded = decode_partitions(protocol, encode_stream(protocol, w.events, partitions=3, options=options), options)
        for partition, events in enumerate(partition_events(w.events, 3, ddl_to_all=ddl_to_all)):
            want = [x.to_dict() for x in (EXPECTED[protocol](e, options) for e in events) if x is not None]
            got = decoded.get(partition, [])
            assert len(got) == len(want), partition
            for g, x in zip(got, want):
                assert g == x
        rows = [e for e in w.events if isinstance(e, RowChange)]
        sent = {(e.table.database, e.table.name, c.name) for e in rows for c in e.table.columns}
        got_names = {
            (e["database"], e["table"], column)
            for events in decoded.values()
            for e in events
            if e["kind"] == "row"
            for column in (e["after"] or e["before"])
        }
        assert got_names == {tuple(map(rename, names)) for names in sent}
        sent_names.update(name for names in sent for name in names)
    if hostile:
        assert all(any(test(n) for n in sent_names) for test in HOSTILE_MARKS.values())


# ---- the oracle, one DDL kind at a time ----------------------------------------------------------------


ITEMS = Table(
    "shop",
    "items",
    (Column("id", "int", nullable=False), Column("qty", "int"), Column("name", "varchar(8)")),
    key=("id",),
)


def insert(n: int, table: Table, **row) -> RowChange:
    return RowChange(tso(n), "insert", table, after=row)


def create(n: int, table: Table) -> Ddl:
    return Ddl(
        tso(n), table.database, table.name, f"CREATE TABLE {quote_name(table.name)} (...)", "create_table", table
    )


def alter(n: int, ddl_type: str, before: Table, after: Table, sql: str = "ALTER TABLE …") -> Ddl:
    return Ddl(tso(n), after.database, after.name, sql, ddl_type, table_after=after, table_before=before)


def with_columns(table: Table, *columns: Column, key: tuple[str, ...] | None = None) -> Table:
    return replace(table, columns=columns, key=key or table.key)


def items_with_rows() -> list:
    return [create(1, ITEMS), insert(2, ITEMS, id=1, qty=5, name="a"), insert(3, ITEMS, id=2, qty=None, name="b")]


def test_oracle_create_table_starts_empty_also_after_a_drop():
    other = with_columns(ITEMS, Column("id", "bigint", nullable=False), Column("label", "text"))
    events = items_with_rows() + [Ddl(tso(4), "shop", "items", "DROP TABLE `items`", "drop_table", None, ITEMS)]
    assert upstream_state(events, tso(3)) == {
        ("shop", "items"): {("1",): {"id": "1", "qty": "5", "name": "a"}, ("2",): {"id": "2", "qty": None, "name": "b"}}
    }
    assert upstream_state(events) == {}
    events += [create(5, other), insert(6, other, id=9, label="x")]
    assert upstream_state(events, tso(5)) == {("shop", "items"): {}}
    assert upstream_state(events) == {("shop", "items"): {("9",): {"id": "9", "label": "x"}}}
    assert upstream_schemas(events)[("shop", "items")] == other


def test_oracle_pads_a_decimal_whose_scale_a_modify_widens_unless_asked_for_the_text_as_sent():
    before = with_columns(ITEMS, Column("id", "bigint", nullable=False), Column("price", "decimal(10,2)"))
    after = with_columns(ITEMS, Column("id", "bigint", nullable=False), Column("price", "decimal(12,3)"))
    events = [
        create(1, before),
        insert(2, before, id=1, price=Decimal("1.50")),
        Ddl(
            tso(3), "shop", "items", "ALTER TABLE `items` MODIFY `price` decimal(12,3)", "modify_column", after, before
        ),
        insert(4, after, id=2, price=Decimal("2.25")),
    ]
    assert upstream_state(events) == {
        ("shop", "items"): {("1",): {"id": "1", "price": "1.500"}, ("2",): {"id": "2", "price": "2.250"}}
    }
    # Avro's string decimals carry no scale: a row written before the MODIFY keeps the text it was sent with
    assert upstream_state(events, decimals_as_sent=True) == {
        ("shop", "items"): {("1",): {"id": "1", "price": "1.50"}, ("2",): {"id": "2", "price": "2.250"}}
    }


def test_oracle_ignores_a_delete_unless_its_commit_inserts_or_with_updates_sent_as_inserts_updates():
    """With ignored deletes gold keeps a deleted row unless the delete's commit inserts into its table (a key change
    TiCDC split); where the stream sends updates as inserts (Open without old values) an update counts too."""
    events = items_with_rows() + [
        RowChange(tso(5), "update", ITEMS, {"id": 1, "qty": 5, "name": "a"}, {"id": 1, "qty": 6, "name": "a"}),
        RowChange(tso(5), "delete", ITEMS, {"id": 2, "qty": None, "name": "b"}, None),
    ]
    kept = {("shop", "items"): {("2",): ({"id": "2", "qty": None, "name": "b"}, tso(5))}}
    assert removed_rows(events, "ignore") == kept
    assert removed_rows(events, "ignore", updates_as_inserts=True) == {("shop", "items"): {}}


def test_oracle_rename_table_moves_rows_along_a_chain():
    b, c = replace(ITEMS, name="b"), replace(ITEMS, name="c")
    events = items_with_rows() + [
        Ddl(tso(4), "shop", "b", "RENAME TABLE `items` TO `b`", "rename_table", b, ITEMS),
        Ddl(tso(5), "shop", "c", "RENAME TABLE `b` TO `c`", "rename_table", c, b),
        insert(6, c, id=3, qty=1, name="c"),
    ]
    assert list(upstream_state(events, tso(4))) == [("shop", "b")]
    assert upstream_state(events) == {
        ("shop", "c"): {
            ("1",): {"id": "1", "qty": "5", "name": "a"},
            ("2",): {"id": "2", "qty": None, "name": "b"},
            ("3",): {"id": "3", "qty": "1", "name": "c"},
        }
    }
    assert upstream_schemas(events) == {("shop", "c"): c}


def test_oracle_truncate_table_empties_it():
    after = replace(ITEMS, table_id=101, schema_version=tso(4))
    events = items_with_rows() + [
        Ddl(tso(4), "shop", "items", "TRUNCATE TABLE `items`", "truncate_table", after, ITEMS)
    ]
    events.append(insert(5, after, id=1, qty=0, name=""))
    assert upstream_state(events, tso(4)) == {("shop", "items"): {}}
    assert upstream_state(events) == {("shop", "items"): {("1",): {"id": "1", "qty": "0", "name": ""}}}


def test_oracle_add_column_fills_the_default_null_or_tidb_zero_value():
    added = (
        Column("note", "varchar(8)"),  # nullable, no default: NULL
        Column("tier", "varchar(8)", default="n/a"),  # DEFAULT
        Column("score", "decimal(5,2)", nullable=False),  # NOT NULL, no default: TiDB's zero value
        Column("state", "enum('new','old')", nullable=False),  # ENUM: its first label
        Column("raw", "binary(2)", nullable=False),
        Column("doc", "json", nullable=False),
        Column("yr", "year", nullable=False),
        Column("tags", "set('x','y')", nullable=False, default=("y",)),
    )
    table, events = ITEMS, items_with_rows()
    for n, column in enumerate(added, start=4):
        after = with_columns(table, column, *table.columns) if n == 4 else with_columns(table, *table.columns, column)
        events.append(alter(n, "add_column", table, after))
        table = after
    filled = {"tier": "n/a", "score": "0.00", "state": "new", "raw": "AAA=", "doc": "null", "yr": "0000", "tags": "y"}
    assert upstream_state(events) == {
        ("shop", "items"): {
            ("1",): {"note": None, "id": "1", "qty": "5", "name": "a", **filled},
            ("2",): {"note": None, "id": "2", "qty": None, "name": "b", **filled},
        }
    }
    assert [c.name for c in upstream_schemas(events)[("shop", "items")].columns][:2] == ["note", "id"]  # FIRST
    with pytest.raises(ValueError, match="0000-00-00"):
        zero_value(Column("d", "datetime", nullable=False))


def test_oracle_drop_column_and_adding_it_again_does_not_bring_values_back():
    without = with_columns(ITEMS, ITEMS.columns[0], ITEMS.columns[2])
    again = with_columns(ITEMS, *without.columns, Column("qty", "int"))
    events = items_with_rows() + [alter(4, "drop_column", ITEMS, without)]
    assert upstream_state(events)[("shop", "items")][("1",)] == {"id": "1", "name": "a"}
    events.append(alter(5, "add_column", without, again))
    assert upstream_state(events)[("shop", "items")] == {
        ("1",): {"id": "1", "name": "a", "qty": None},
        ("2",): {"id": "2", "name": "b", "qty": None},
    }


def test_oracle_rename_column_keeps_values_under_the_new_name_also_for_the_key():
    renamed = with_columns(
        ITEMS,
        Column("item_id", "int", nullable=False),
        Column("qty", "int"),
        Column("Name", "varchar(8)"),
        key=("item_id",),
    )
    events = items_with_rows() + [alter(4, "rename_column", ITEMS, renamed)]
    events.append(RowChange(tso(5), "delete", renamed, before={"item_id": 2, "qty": None, "Name": "b"}))
    assert upstream_state(events) == {("shop", "items"): {("1",): {"item_id": "1", "qty": "5", "Name": "a"}}}


def test_oracle_change_column_renames_and_converts():
    changed = with_columns(ITEMS, ITEMS.columns[0], Column("amount", "varchar(32)"), ITEMS.columns[2])
    events = items_with_rows() + [alter(4, "rename_column", ITEMS, changed, "ALTER TABLE … CHANGE COLUMN …")]
    assert upstream_state(events)[("shop", "items")] == {
        ("1",): {"id": "1", "amount": "5", "name": "a"},
        ("2",): {"id": "2", "amount": None, "name": "b"},
    }


def test_oracle_modify_column_converts_to_the_new_types_canonical_text():
    before = Table(
        "shop",
        "m",
        (
            Column("id", "int", nullable=False),
            Column("small", "smallint unsigned"),
            Column("price", "decimal(5,2)"),
            Column("label", "varchar(4)"),
            Column("count", "int"),
            Column("digits", "varchar(32)"),
        ),
        key=("id",),
    )
    after = with_columns(
        before,
        before.columns[0],
        Column("small", "bigint unsigned"),
        Column("price", "decimal(7,3)"),
        Column("label", "varchar(64)"),
        Column("count", "varchar(32)"),
        Column("digits", "int"),
    )
    row = {"id": 1, "small": 65535, "price": Decimal("-1.50"), "label": "Ünï", "count": -42, "digits": "007"}
    events = [create(1, before), insert(2, before, **row)]
    for n, column in enumerate(after.columns[1:], start=3):  # one MODIFY per column
        table = upstream_schemas(events)[("shop", "m")]
        events.append(
            alter(
                n,
                "modify_column",
                table,
                with_columns(table, *(column if c.name == column.name else c for c in table.columns)),
            )
        )
    assert upstream_state(events) == {
        ("shop", "m"): {
            ("1",): {"id": "1", "small": "65535", "price": "-1.500", "label": "Ünï", "count": "-42", "digits": "7"}
        }
    }
    assert upstream_schemas(events)[("shop", "m")].columns == after.columns


@pytest.mark.parametrize(("definition", "value"), [("varchar(8)", "abc"), ("varchar(16)", "99999999999")])
def test_oracle_refuses_a_modify_tidb_would_refuse(definition, value):
    before = Table("shop", "m", (Column("id", "int", nullable=False), Column("v", definition)), key=("id",))
    after = with_columns(before, before.columns[0], Column("v", "int"))
    with pytest.raises(ValueError):
        upstream_state([create(1, before), insert(2, before, id=1, v=value), alter(3, "modify_column", before, after)])


def test_oracle_multi_clause_alter_applies_each_clause():
    after = with_columns(
        ITEMS, ITEMS.columns[0], ITEMS.columns[2], Column("flag", "tinyint", nullable=False, default=1)
    )
    events = items_with_rows() + [alter(4, "multi_schema_change", ITEMS, after, "ALTER TABLE … ADD …, DROP …")]
    assert upstream_state(events)[("shop", "items")] == {
        ("1",): {"id": "1", "name": "a", "flag": "1"},
        ("2",): {"id": "2", "name": "b", "flag": "1"},
    }


def test_oracle_create_index_changes_no_row():
    after = replace(ITEMS, schema_version=tso(4))
    events = items_with_rows() + [alter(4, "create_index", ITEMS, after, "CREATE INDEX `i` ON `items` (`qty`)")]
    assert upstream_state(events) == upstream_state(items_with_rows())
    assert upstream_schemas(events)[("shop", "items")] == after


def test_oracle_drop_database_removes_its_tables_only():
    elsewhere = replace(ITEMS, database="crm")
    events = items_with_rows() + [create(4, elsewhere), insert(5, elsewhere, id=1, qty=1, name="z")]
    events.append(Ddl(tso(6), "shop", None, "DROP DATABASE `shop`", "drop_database"))
    assert upstream_state(events) == {("crm", "items"): {("1",): {"id": "1", "qty": "1", "name": "z"}}}
    assert list(upstream_schemas(events)) == [("crm", "items")]


def test_oracle_preexisting_tables_exist_empty_from_the_start():
    assert upstream_state([], preexisting=[ITEMS]) == {("shop", "items"): {}}
    events = [insert(2, ITEMS, id=1, qty=1, name="a"), Watermark(tso(3)), insert(4, ITEMS, id=2, qty=2, name="b")]
    assert upstream_state(events, tso(3), preexisting=[ITEMS]) == {
        ("shop", "items"): {("1",): {"id": "1", "qty": "1", "name": "a"}}
    }
    assert upstream_schemas(events, preexisting=[ITEMS]) == {("shop", "items"): ITEMS}


def test_oracle_keeps_the_shop_streams_state_for_its_callers():
    events = shop_stream() + shop_stream_more()
    upstream = upstream_state(events, as_of=tso(10_008))
    customers = oracle_state(upstream[("shop", "customers")], [("id", "int"), ("tier", "varchar")])
    assert ("7",) not in customers and ("2",) not in customers and customers[("700",)] == {"id": "700", "tier": None}
    assert customers[("1",)]["tier"] == "silver" and customers[("3",)] == {"id": "3", "tier": None}
    assert len(upstream[("shop", "orders")]) == 39


def test_gold_text_of_a_year_has_four_digits():
    assert canonical_text(0, "year") == "0000"
    assert canonical_text(2024, "year") == "2024"
