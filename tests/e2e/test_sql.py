"""The SQL helpers against the real SparkSession and Iceberg: hostile names stay one identifier,
values bound as parameters come back unchanged, and temp views are dropped whatever happens."""

from __future__ import annotations

import pytest

from spark_jobs.runtime.sql import qualified, quote_ident, temp_view

pytestmark = pytest.mark.e2e

HOSTILE_NAMES = [
    "back`tick",
    "``",
    "it's",
    'double"quote',
    "with space",
    "dot.ted",
    "ünïcødé 名前",
    "Upper",
    "x`; DROP TABLE bronze.kafka_messages; --",
]


def test_quote_ident_and_qualified_text():
    assert quote_ident("a`b") == "`a``b`"
    assert quote_ident("dot.ted") == "`dot.ted`"
    assert qualified("bronze", "kafka_messages", "refs") == "`bronze`.`kafka_messages`.`refs`"


def test_hostile_column_names_and_values_round_trip(spark):
    # the metastore takes only word characters in table names: a reserved word needs quoting all the same
    table = qualified("bronze", "select")
    columns = ", ".join(f"{quote_ident(name)} STRING" for name in HOSTILE_NAMES)
    spark.sql(f"CREATE TABLE {table} ({columns}) USING iceberg")
    try:
        markers = ", ".join(f":v{i}" for i in range(len(HOSTILE_NAMES)))
        spark.sql(f"INSERT INTO {table} VALUES ({markers})", args={f"v{i}": n for i, n in enumerate(HOSTILE_NAMES)})
        assert spark.table(table).columns == HOSTILE_NAMES
        for name in HOSTILE_NAMES:
            column = quote_ident(name)
            rows = spark.sql(f"SELECT {column} FROM {table} WHERE {column} = :value", args={"value": name})
            assert rows.columns == [name]
            assert [r[0] for r in rows.collect()] == [name]
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {table}")


def test_a_hostile_table_name_is_one_name_that_does_not_exist(spark):
    from pyspark.errors import AnalysisException

    for name in HOSTILE_NAMES:
        with pytest.raises(AnalysisException) as failure:
            spark.sql(f"SELECT * FROM {qualified('bronze', name)}").collect()
        assert failure.value.getErrorClass() == "TABLE_OR_VIEW_NOT_FOUND", name


def test_temp_view_is_unique_and_dropped_also_on_error(spark):
    frame = spark.createDataFrame([("it's", 1)], "name string, n int")
    with temp_view(frame, "sql_test") as first, temp_view(frame, "sql_test") as second:
        assert first != second
        assert spark.sql(f"SELECT name FROM {first} WHERE n = :n", args={"n": 1}).collect()[0][0] == "it's"
        names = [first.strip("`"), second.strip("`")]
        assert all(spark.catalog.tableExists(n) for n in names)
    assert not any(spark.catalog.tableExists(n) for n in names)

    with pytest.raises(RuntimeError, match="statement failed"), temp_view(frame, "sql_test") as view:
        failed = view.strip("`")
        raise RuntimeError("statement failed")
    assert not spark.catalog.tableExists(failed)

    with pytest.raises(ValueError, match="must be lowercase"), temp_view(frame, "no; DROP"):
        pass
