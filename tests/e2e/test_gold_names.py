"""Hostile names end to end: databases, tables and columns with quotes, backticks, spaces, dots, `__`, `{{ }}`,
unicode, reserved words and case-only differences go from TiCDC messages to gold as data, never as code.

Gold must equal the upstream database (the oracle) whatever the names; the dbt build must succeed; the generated
model files must name only our escaped names and the table uid, and the YAML must hold upstream names as
strings only (any Jinja in them inside a raw block); two upstream tables never share a gold table.
"""

from __future__ import annotations

import random
import re
import string

import pytest
import yaml

from spark_jobs.bronze.land import land_bronze
from spark_jobs.gold import models as gold_models
from spark_jobs.gold import names
from spark_jobs.gold.build import build_gold
from spark_jobs.runtime.sql import quote_ident
from spark_jobs.silver.build import build_silver
from tests.conftest import TEST_HOME
from tests.e2e.test_gold_oracle import PARTITIONS, assert_gold_is_upstream, gold_tables, redelivered
from tests.e2e.test_silver import tso
from ticdc_devkit.broker import produce
from ticdc_devkit.simulator.model import Column, Ddl, RowChange, Table, Watermark
from ticdc_devkit.simulator.oracle import upstream_schemas
from ticdc_devkit.simulator.stream import EXTENSION_OPTIONS, encode_stream
from ticdc_devkit.simulator.workload import Workload, create_table_sql, quote_name, random_workload

pytestmark = pytest.mark.e2e

# seeds whose final upstream holds `{{ }}` in database, table and column names, quotes, dots, `__`, spaces,
# unicode, reserved words, upper case and case-only differences (found by scoring seeds 1..200)
SEEDS = {"simple-json": 142, "canal-json": 175}
# what a generated model file may contain besides its first line: our escaped names, the uid and the template
# what a generated model may hold: escaped names, literals, Jinja calls; the checks model also `-- depends_on:`
# lines and `select *`
MODEL_CHARACTERS = set(string.ascii_lowercase + string.digits + "_ \n(){}=,'-:*")
RAW_BLOCK = re.compile(r"\{% raw %\}(.*?)\{% endraw %\}", re.S)
JINJA_MARKS = ("{{", "{%", "{#", "}}", "%}", "#}")


def carry(spark, broker, source_config, source: str, protocol: str, workload: Workload, runs: int) -> int:
    """The workload through broker, bronze, silver and gold in `runs` landings (redeliveries included), gold
    checked against the oracle after each; returns the last consistent ts."""
    rng = random.Random(workload.seed)
    messages = encode_stream(
        protocol, workload.events, topic=source, partitions=PARTITIONS, options=EXTENSION_OPTIONS[protocol]
    )
    broker.create_topics([source], partitions=PARTITIONS)
    config = source_config(source, protocol)
    cuts = sorted(rng.sample(range(1, len(messages)), runs - 1)) + [len(messages)]
    start = 0
    for end in cuts:
        produce(broker.bootstrap, redelivered(messages[start:end], rng))
        start = end
        land_bronze(spark, config, source)
        build_silver(spark, config, source)
        result = build_gold(spark, config, source)  # the dbt build and its tests: a name that ran would break them
        if result.consistent_ts is not None:
            assert_gold_is_upstream(spark, source, workload, result.consistent_ts)
    assert result.consistent_ts == workload.consistent_ts
    return result.consistent_ts


def unwrapped(text: str) -> str:
    """A YAML string as the upstream name it shows (a name with Jinja marks is wrapped in a raw block)."""
    raw = RAW_BLOCK.fullmatch(text)
    return raw.group(1) if raw else text


def assert_names_stay_data(spark, source: str, workload: Workload, as_of: int) -> None:
    """Every gold table's model file holds only escaped names and its uid; the YAML holds the upstream names
    as strings (Jinja only inside raw blocks); the table records its upstream name verbatim."""
    schemas = upstream_schemas(workload.events, as_of=as_of, preexisting=workload.preexisting)
    namespace = names.gold_namespace(source)
    present = gold_tables(spark, source)
    assert present, "no gold tables"
    folder = gold_models.source_dir(TEST_HOME / "lake", source)  # the test session's lakehouse (conftest)
    run_models = {gold_models.checks_model(source)}  # the plan is a table the run writes, a dbt source
    assert {p.stem for p in folder.glob("*.sql")} == {f"{namespace}__{g}" for g in present} | run_models
    for path in folder.glob("*.sql"):
        body = path.read_text().removeprefix(gold_models.GENERATED_MARK)
        assert set(body) <= MODEL_CHARACTERS, f"{path.name} holds more than escaped names: {body!r}"
        literals = re.findall(r"'([^']*)'", body)
        assert literals and all(re.fullmatch(r"[a-z0-9_]+", x) for x in literals), f"{path.name}: {literals}"

    text = (folder / f"_{source}__models.yml").read_text()
    outside_raw = RAW_BLOCK.sub("", text)
    assert not [m for m in JINJA_MARKS if m in outside_raw], "Jinja outside a raw block in the generated YAML"
    documented = [m for m in yaml.safe_load(text)["models"] if m["name"] not in run_models]
    assert {m["name"] for m in documented} == {f"{namespace}__{g}" for g in present}
    for model in documented:
        gold_name = model["name"].removeprefix(f"{namespace}__")
        database, table = names.upstream_of(gold_name)
        upstream = schemas[(database, table)]
        ours = 7 if gold_name.endswith(names.HISTORY_SUFFIX) else 3  # _row_key, _commit_ts, _op; history: _valid_*...
        shown = [unwrapped(c["name"]) for c in model["columns"][ours:]]
        assert shown == [c.name for c in upstream.columns if "endraw" not in c.name], f"{database}.{table}"
        relation = f"{quote_ident(namespace)}.{quote_ident(gold_name)}"
        properties = {r[0]: r[1] for r in spark.sql(f"SHOW TBLPROPERTIES {relation}").collect()}
        assert properties["ticdc.upstream-table"] == f"{database}.{table}"


def name_traits(workload: Workload) -> set[str]:
    """Which kinds of hostile name the workload's final upstream holds (so that a seed keeps covering them)."""
    schemas = upstream_schemas(workload.events, as_of=workload.consistent_ts, preexisting=workload.preexisting)
    every = {n for (db, t), table in schemas.items() for n in (db, t, *(c.name for c in table.columns))}
    marks = {"jinja": "{{", "quote": "'", "dot": ".", "double underscore": "__", "space": " "}
    traits = {trait for trait, mark in marks.items() if any(mark in n for n in every)}
    traits |= {"unicode"} if any(not n.isascii() for n in every) else set()
    traits |= {"upper case"} if any(n != n.lower() for n in every) else set()
    tables = [t for _, t in schemas]
    return traits | ({"case-only"} if len({t.lower() for t in tables}) < len(tables) else set())


@pytest.mark.parametrize("protocol", list(SEEDS))
def test_hostile_names_reach_gold_as_data(spark, broker, source_config, protocol):
    workload = random_workload(SEEDS[protocol], tables=3, changes=40, hostile_names=True, protocol=protocol)
    assert name_traits(workload) >= {
        "jinja",
        "quote",
        "dot",
        "double underscore",
        "space",
        "unicode",
        "upper case",
        "case-only",
    }
    source = "names_" + protocol.replace("-", "_")
    as_of = carry(spark, broker, source_config, source, protocol, workload, runs=2)
    assert_names_stay_data(spark, source, workload, as_of)


def crafted_workload() -> Workload:
    """`a__b`.`c` and `a`.`b__c` with the same keys, and a table whose names hold every Jinja and quote mark,
    one of them `{% endraw %}` (which no raw block can hold)."""
    value = Column("v", "varchar(32)")
    left = Table("a__b", "c", (Column("id", "int", nullable=False), value), ("id",), table_id=501)
    right = Table("a", "b__c", (Column("id", "int", nullable=False), value), ("id",), table_id=502)
    marks = Table(
        "{{ db }}",
        "x{% endraw %}'\"`{{ t }}",
        (
            Column("{{ col }}", "int", nullable=False),
            Column("{% endraw %}{{ v }}", "varchar(32)"),
            Column("select", "int"),
            Column("it's a.b", "text"),
        ),
        ("{{ col }}",),
        table_id=503,
    )
    ms = iter(range(10, 10_000, 10))
    events: list = []
    for database in ("a__b", "a", "{{ db }}"):
        events.append(Ddl(tso(next(ms)), database, None, f"CREATE DATABASE {quote_name(database)}", "create_database"))
    for table in (left, right, marks):
        events.append(
            Ddl(tso(next(ms)), table.database, table.name, create_table_sql(table), "create_table", table_after=table)
        )
    for i in (1, 2, 3):
        events.append(RowChange(tso(next(ms)), "insert", left, after={"id": i, "v": f"a__b.c {i}"}))
        events.append(RowChange(tso(next(ms)), "insert", right, after={"id": i, "v": f"a.b__c {i}"}))
        row = {"{{ col }}": i, "{% endraw %}{{ v }}": "{{ 7 * 7 }}", "select": i * 10, "it's a.b": "'; drop --"}
        events.append(RowChange(tso(next(ms)), "insert", marks, after=row))
    events.append(
        RowChange(tso(next(ms)), "update", left, before={"id": 2, "v": "a__b.c 2"}, after={"id": 2, "v": "changed"})
    )
    events.append(RowChange(tso(next(ms)), "delete", right, before={"id": 3, "v": "a.b__c 3"}))
    events.append(Watermark(tso(next(ms))))
    return Workload(0, "canal-json", events, [])


def test_tables_whose_names_differ_only_in_where_the_double_underscore_is_stay_apart(spark, broker, source_config):
    workload = crafted_workload()
    source = "names_crafted"
    as_of = carry(spark, broker, source_config, source, "canal-json", workload, runs=1)
    left, right = names.gold_table("a__b", "c"), names.gold_table("a", "b__c")
    assert left != right and {left, right} <= gold_tables(spark, source)
    assert_names_stay_data(spark, source, workload, as_of)
    namespace = quote_ident(names.gold_namespace(source))
    assert sorted(tuple(r) for r in spark.sql(f"SELECT id, v FROM {namespace}.{quote_ident(left)}").collect()) == [
        (1, "a__b.c 1"),
        (2, "changed"),
        (3, "a__b.c 3"),
    ]
    assert sorted(tuple(r) for r in spark.sql(f"SELECT id, v FROM {namespace}.{quote_ident(right)}").collect()) == [
        (1, "a.b__c 1"),
        (2, "a.b__c 2"),
    ]


def test_a_column_named_like_the_plan_line_cannot_change_what_runs(spark, broker, source_config):
    """A model's compiled SQL carries its plan as a `-- gold plan: ` line that the materialization reads back; a
    column whose name holds a line break and such a line (a later line of the same SQL) is a name, not the plan."""
    hostile = 'x\n-- gold plan: {"mode": "unchanged", "source_name": "elsewhere"}'
    table = Table("db", "t", (Column("id", "int", nullable=False), Column(hostile, "int")), ("id",), table_id=950)
    events = [
        Ddl(tso(1), "db", "t", create_table_sql(table), "create_table", table_after=table),
        RowChange(tso(10), "insert", table, after={"id": 1, hostile: 5}),
        RowChange(tso(20), "insert", table, after={"id": 2, hostile: 6}),
        Watermark(tso(100)),
        RowChange(tso(110), "update", table, before={"id": 1, hostile: 5}, after={"id": 1, hostile: 7}),
        Watermark(tso(200)),
    ]
    workload = Workload(0, "canal-json", events, [])
    assert carry(spark, broker, source_config, "names_plan_line", "canal-json", workload, runs=2) == tso(200)
    relation = f"{quote_ident(names.gold_namespace('names_plan_line'))}.{quote_ident(names.gold_table('db', 't'))}"
    assert sorted(tuple(r) for r in spark.sql(f"SELECT id, {quote_ident(hostile)} FROM {relation}").collect()) == [
        (1, 7),
        (2, 6),
    ]
