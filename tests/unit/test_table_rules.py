"""Table rules (a source's `tables.include` / `tables.exclude`): which names they keep, how a bad rule stops the
run, and what the DDL history of the kept tables says when a rename crosses the rules. Rows of a left-out table
are filtered in Spark by the same globs (tests/e2e/test_table_rules.py, and the gold oracle with random rules)."""

from __future__ import annotations

import json

import pytest

from spark_jobs.config import TableRules, glob_regexes, load_config
from spark_jobs.errors import ConfigError
from spark_jobs.silver.merges import _derived_events, within_rules


@pytest.mark.parametrize(
    ("include", "exclude", "name", "kept"),
    [
        ([], [], ("any", "thing"), True),
        (["shop.*"], [], ("shop", "orders"), True),
        (["shop.*"], [], ("crm", "orders"), False),
        (["shop.*"], [], ("SHOP", "Orders"), True),  # TiDB compares names without case
        ([], ["shop.tmp_*"], ("shop", "tmp_1"), False),
        ([], ["shop.tmp_*"], ("shop", "tmp"), True),
        ([], ["*.t?"], ("a", "t1"), False),
        ([], ["*.t?"], ("a", "t12"), True),
        (["shop.*"], ["shop.secret"], ("shop", "secret"), False),  # exclude wins
        ([], ["`a.b`.t"], ("a.b", "t"), False),  # a backquoted part is a name as it is, dot included
        ([], ["`a.b`.t"], ("a", "b.t"), True),
        ([], ["`we``ird`.*"], ("we`ird", "x"), False),
        ([], ["`sh*p`.x"], ("shop", "x"), True),  # no glob inside backquotes
        ([], ["Ünï.*"], ("üNÏ", "x"), False),
        (["shop.*"], [], ("shop", None), True),  # a database's own statement is never left out
    ],
)
def test_rules_keep_the_tables_they_name(include, exclude, name, kept):
    assert TableRules(include=include, exclude=exclude).keeps(*name) is kept


def test_a_glob_is_a_regex_java_reads_too():
    assert glob_regexes("s.h?p.*") == ("s", r"h.p\..*")
    assert glob_regexes("`a.b`.x(1)") == (r"a\.b", r"x\(1\)")


@pytest.mark.parametrize("rule", ["shop", "shop.", ".orders", "`shop.orders", ""])
def test_a_rule_that_is_not_db_table_stops_the_run_naming_it(tmp_path, rule):
    path = tmp_path / "pipeline.yaml"
    path.write_text(
        "sources:\n  - name: s\n    protocol: canal-json\n    topics: [t]\n    kafka: {bootstrap_servers: 'k:9092'}\n"
        f"    tables:\n      include: ['shop.*']\n      exclude: ['{rule}']\n"
    )
    with pytest.raises(ConfigError, match=r"sources\[0\]\.tables\.exclude\[0\]: .* must be db\.table"):
        load_config(path)


def _statement(ts: int, sql: str, database: str, table: str | None) -> tuple:
    row = {"kind": "ddl", "database": database, "table": table, "ddl_sql": sql, "table_schema": None}
    return (ts, 0, "t", 0, ts, "statement", row)


def test_a_rename_across_the_rules_is_a_drop_out_of_them_and_a_snapshot_into_them():
    rules = TableRules(exclude=["shop.secret*"])
    steps = [
        _statement(1, "CREATE TABLE shop.orders (id int primary key)", "shop", "orders"),
        _statement(2, "CREATE TABLE shop.secret_a (id int primary key)", "shop", "secret_a"),
        _statement(3, "ALTER TABLE shop.secret_a ADD COLUMN v int", "shop", "secret_a"),
        _statement(4, "RENAME TABLE shop.orders TO shop.secret_orders", "shop", "secret_orders"),
        _statement(5, "RENAME TABLE shop.secret_a TO shop.a", "shop", "a"),
        _statement(6, "CREATE DATABASE crm", "crm", None),
    ]
    events = within_rules(rules, _derived_events("s", "canal-json", steps))
    seen = [(e.commit_ts, e.ddl_type, e.database, e.table, e.table_schema is None, e.needs_snapshot) for e in events]
    assert seen == [
        (1, "create_table", "shop", "orders", False, False),
        (4, "drop_table", "shop", "orders", True, False),  # renamed out: gone from the lakehouse
        (5, "rename_table", "shop", "a", False, True),  # renamed in: its rows so far were left out
        (6, "create_database", "crm", None, True, False),
    ]
    assert within_rules(TableRules(), events) == events


def test_a_left_out_column_stays_in_the_schema_marked_and_a_later_statement_about_it_reads():
    rules = TableRules(exclude_columns={"shop.c*": ["EMAIL", "id"]})
    steps = [
        _statement(
            1,
            "CREATE TABLE shop.customers (id int primary key, email varchar(20), city varchar(9))",
            "shop",
            "customers",
        ),
        _statement(2, "ALTER TABLE shop.customers MODIFY email varchar(40)", "shop", "customers"),
    ]
    events = within_rules(rules, _derived_events("s", "canal-json", steps))
    assert [e.understood for e in events] == [True, True]
    for event in events:
        columns = {c["name"]: c.get("left_out", False) for c in json.loads(event.table_schema)["columns"]}
        assert columns == {"id": False, "email": True, "city": False}  # a key column is never left out
    assert TableRules(exclude_columns={"shop.c*": ["email"]}).left_out_columns("SHOP", "Customers") == {"email"}


def test_an_empty_column_list_stops_the_run_naming_it(tmp_path):
    path = tmp_path / "pipeline.yaml"
    path.write_text(
        "sources:\n  - name: s\n    protocol: canal-json\n    topics: [t]\n    kafka: {bootstrap_servers: 'k:9092'}\n"
        "    tables:\n      exclude_columns: {'shop.customers': []}\n"
    )
    with pytest.raises(ConfigError, match=r"sources\[0\]\.tables\.exclude_columns\.shop\.customers: must list"):
        load_config(path)


def test_a_column_left_out_under_a_table_s_old_name_and_kept_under_its_new_one_needs_a_snapshot():
    """The soak's seed 29 of Canal-JSON: `code` of shop.stock left out, the table renamed shop.products, where no
    rule leaves it out: its values so far never reached silver."""
    rules = TableRules(exclude_columns={"shop.stock": ["code"]})
    steps = [
        _statement(1, "CREATE TABLE shop.stock (code json, amount int primary key)", "shop", "stock"),
        _statement(2, "RENAME TABLE shop.stock TO shop.products", "shop", "products"),
        _statement(3, "ALTER TABLE shop.products ADD COLUMN note int", "shop", "products"),
    ]
    events = within_rules(rules, _derived_events("s", "canal-json", steps))
    assert [(e.table, e.needs_snapshot) for e in events] == [("stock", False), ("products", True), ("products", False)]
    left_out = [{c["name"] for c in json.loads(e.table_schema)["columns"] if c.get("left_out")} for e in events]
    assert left_out == [{"code"}, set(), set()]


def test_a_column_renamed_from_a_left_out_name_to_a_kept_one_needs_a_snapshot():
    rules = TableRules(exclude_columns={"shop.customers": ["email"]})
    steps = [
        _statement(1, "CREATE TABLE shop.customers (id int primary key, email varchar(20))", "shop", "customers"),
        _statement(2, "ALTER TABLE shop.customers MODIFY email varchar(40)", "shop", "customers"),
        _statement(3, "ALTER TABLE shop.customers RENAME COLUMN email TO contact", "shop", "customers"),
        _statement(4, "ALTER TABLE shop.customers ADD COLUMN city varchar(9)", "shop", "customers"),
    ]
    events = within_rules(rules, _derived_events("s", "canal-json", steps))
    assert [e.needs_snapshot for e in events] == [False, False, True, False]  # contact's values so far: left out
    # the same across runs: the schema recorded before (marked) is what the next run's events are read against
    first = within_rules(rules, _derived_events("s", "canal-json", steps[:2]))
    before = {json.loads(first[-1].table_schema)["table_uid"]: json.loads(first[-1].table_schema)}
    later = within_rules(
        rules,
        _derived_events("s", "canal-json", steps[2:], {("shop", "customers"): before[next(iter(before))]}),
        before,
    )
    assert [e.needs_snapshot for e in later] == [True, False]
