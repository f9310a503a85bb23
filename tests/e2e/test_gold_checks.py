"""What dbt checks after a gold build, in one test per run (gold_run_checks): a rebuilt table whole, an incremental
build the keys it changed, so that the checks cost what the run costs (architecture.md, decision 6). A duplicate
among the changed rows of gold or history, or a row missing, fails the build's checks, naming the table and the
problem; a full check reads every table whole."""

from __future__ import annotations

import pytest

from spark_jobs.bronze.land import land_bronze
from spark_jobs.errors import DbtError
from spark_jobs.gold import models as gold_models
from spark_jobs.gold import names
from spark_jobs.gold.build import build_gold, run_dbt
from spark_jobs.runtime.sql import quote_ident
from spark_jobs.silver.build import build_silver
from tests.e2e.test_gold_late_rows import ITEMS, change
from tests.e2e.test_gold_oracle import assert_gold_is_upstream
from tests.e2e.test_silver import tso
from ticdc_devkit.broker import produce
from ticdc_devkit.simulator.model import Ddl, Watermark
from ticdc_devkit.simulator.stream import EXTENSION_OPTIONS, encode_stream
from ticdc_devkit.simulator.workload import Workload, create_table_sql

pytestmark = pytest.mark.e2e

FIRST = [
    Ddl(tso(10), "late", "items", create_table_sql(ITEMS), "create_table", table_after=ITEMS),
    *(change(20 + key, "insert", key, after=f"row {key}") for key in range(1, 6)),
    Watermark(tso(40)),
]
SECOND = [
    change(50, "update", 2, "row 2", "row 2, changed"),
    change(55, "update", 2, "row 2, changed", "row 2, changed again"),
    change(60, "delete", 3, "row 3"),
    change(65, "insert", 6, after="row 6"),
    Watermark(tso(70)),
]


def plan_of(spark, source: str) -> dict[str, str]:
    """What the source's last run's plan says its checks read of each layer (the one table here)."""
    (row,) = spark.sql(f"SELECT gold_check, history_check FROM lake_staging.{gold_models.plan_model(source)}").collect()
    return {"gold": row[0], "history": row[1]}


def test_a_run_checks_the_rows_it_changed_in_one_test(spark, broker, source_config):
    source = "gold_checks"
    broker.create_topics([source], partitions=1)
    config = source_config(source)
    options = EXTENSION_OPTIONS["canal-json"]
    gold = f"{quote_ident(names.gold_namespace(source))}.{quote_ident(names.gold_table('late', 'items'))}"
    history = f"{quote_ident(names.gold_namespace(source))}.{quote_ident(names.history_table('late', 'items'))}"

    produce(broker.bootstrap, encode_stream("canal-json", FIRST, topic=source, partitions=1, options=options))
    land_bronze(spark, config, source)
    build_silver(spark, config, source)
    first = build_gold(spark, config, source)
    assert first.consistent_ts == tso(40)
    assert plan_of(spark, source) == {"gold": "whole", "history": "whole"}  # built whole: checked whole

    produce(broker.bootstrap, encode_stream("canal-json", SECOND, topic=source, partitions=1, options=options))
    land_bronze(spark, config, source)
    build_silver(spark, config, source)
    second = build_gold(spark, config, source)
    assert second.consistent_ts == tso(70)
    assert_gold_is_upstream(spark, source, Workload(0, "canal-json", FIRST + SECOND, []), second.consistent_ts)
    assert second.history[history.replace("`", "")] == 5 + 2 + 1  # five inserts, two updates of row 2, row 6
    assert plan_of(spark, source) == {"gold": "changed", "history": "changed"}
    # the incremental history closed row 2's first version at its first new change and row 3's at its delete
    closed = spark.sql(f"SELECT id, _valid_to_ts FROM {history} WHERE _valid_from_ts < {tso(50)} AND NOT _is_current")
    assert {r["id"]: r["_valid_to_ts"] for r in closed.collect()} == {2: tso(50), 3: tso(60)}

    def failing_checks() -> set[tuple[str, str]]:
        """The checks fail; what they found: the test's own query, as dbt ran it, run again here."""
        with pytest.raises(DbtError) as failed:
            run_dbt(["test", "--select", gold_models.checks_model(source)], config, source)
        assert "gold_run_checks" in str(failed.value), failed.value
        (compiled,) = (config.local_dir / "dbt" / "target" / "run").rglob(
            f"gold_run_checks_{gold_models.checks_model(source)}_*.sql"
        )
        wrapped = (
            compiled.read_text()
        )  # dbt counts the test's rows: select count(*) ... from (<test>) dbt_internal_test
        query = wrapped[wrapped.index("from (") + len("from (") : wrapped.rindex(") dbt_internal_test")]
        return {(r["relation"], r["problem"]) for r in spark.sql(query).collect()}

    run_dbt(["test", "--select", gold_models.checks_model(source)], config, source)  # as built: passes
    spark.sql(f"INSERT INTO {gold} SELECT * FROM {gold} WHERE id = 2")  # a row the last run changed, twice
    spark.sql(f"INSERT INTO {history} SELECT * FROM {history} WHERE id = 6")  # a version it opened, twice
    relations = {"gold": gold.replace("`", ""), "history": history.replace("`", "")}
    assert failing_checks() == {
        (relations["gold"], "a _row_key more than once"),
        (relations["gold"], "gold rows differ from the keys silver says are live"),
        (relations["history"], "a version listed more than once"),
    }
    spark.sql(f"DELETE FROM {gold} WHERE id = 2")  # now a row the last run changed is missing
    assert failing_checks() == {
        (relations["gold"], "gold rows differ from the keys silver says are live"),
        (relations["history"], "a version listed more than once"),
    }

    rebuilt = build_gold(spark, config, source, rebuild=True)  # replaced from silver and checked whole: passes
    assert_gold_is_upstream(spark, source, Workload(0, "canal-json", FIRST + SECOND, []), rebuilt.consistent_ts)
    assert plan_of(spark, source) == {"gold": "whole", "history": "whole"}
    spark.sql(f"INSERT INTO {gold} SELECT * FROM {gold} WHERE id = 1")  # a row no run changed since the first
    assert failing_checks() == {  # a rebuilt table is checked whole
        (relations["gold"], "a _row_key more than once"),
        (relations["gold"], "gold rows differ from the keys silver says are live"),
    }
    # row 2's first version open again beside its newest: two open versions of one key, each listed once
    spark.sql(
        f"UPDATE {history} SET _valid_to_ts = NULL, _valid_to = NULL, _is_current = true "
        f"WHERE id = 2 AND _valid_from_ts < {tso(50)}"
    )
    assert failing_checks() == {
        (relations["gold"], "a _row_key more than once"),
        (relations["gold"], "gold rows differ from the keys silver says are live"),
        (relations["history"], "more than one open version"),
    }


def test_the_checks_union_thousands_of_tables_in_one_query_of_a_few_tasks(spark):
    """The run's checks read every checked table in one UNION ALL (macros/union_all.sql). A chain of that many
    unions overflowed Spark's parser at a first build of 1,000 tables (a chain of 1,500 does here), and a task per
    table made the check cost the square of the tables; nested in halves and coalesced, 1,500 parse, run in the
    tasks asked for and answer."""
    import jinja2
    from pyspark.sql import functions as F

    macros = (gold_models.DBT_PROJECT / "macros" / "union_all.sql").read_text()
    template = jinja2.Environment(extensions=["jinja2.ext.do"]).from_string(macros + "{{ union_all(queries, 4) }}")
    queries = [f"select {n} as n, 'table {n}' as relation" for n in range(1500)]
    union = spark.sql(template.render(queries=queries))
    assert union.rdd.getNumPartitions() == 4
    (row,) = union.agg(F.count("*"), F.sum("n"), F.count_distinct("relation")).collect()
    assert tuple(row) == (1500, sum(range(1500)), 1500)
