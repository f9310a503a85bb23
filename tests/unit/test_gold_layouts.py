"""Gold layouts (a source's `gold.layouts`): how partition and sort fields read, how a bad one stops the run naming
the key, which table a glob gives a layout, and how a layout fits a table's columns. On the real Spark and
Iceberg: tests/e2e/test_gold_layouts.py, and the gold oracle with a random layout."""

from __future__ import annotations

import pytest

from spark_jobs.config import GoldSettings, TableLayout, load_config, partition_field, sort_field
from spark_jobs.errors import ConfigError
from spark_jobs.gold.layout import Layout, recorded_layout, table_layout

COLUMNS = [
    {"name": "ID", "type": "int"},
    {"name": "placed_at", "type": "datetime(6)"},
    {"name": "day", "type": "date"},
    {"name": "region", "type": "varchar(8)"},
    {"name": "price", "type": "double"},
]


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("region", ("identity", None, "region")),
        ("days(placed_at)", ("days", None, "placed_at")),
        ("HOURS( placed_at )", ("hours", None, "placed_at")),
        ("bucket(16, id)", ("bucket", 16, "id")),
        ("truncate(4,region)", ("truncate", 4, "region")),
    ],
)
def test_a_partition_field_reads_as_iceberg_names_it(text, field):
    assert partition_field(text) == field


def test_a_sort_field_is_a_column_and_a_direction():
    assert [sort_field(t) for t in ["a", "b DESC", "c asc"]] == [("a", "asc"), ("b", "desc"), ("c", "asc")]


@pytest.mark.parametrize(
    ("layout", "error"),
    [
        (
            "{partition_by: ['weeks(ts)']}",
            r"layouts\.shop\.\*\.partition_by\[0\]: 'weeks\(ts\)' is not a partition field",
        ),
        (
            "{partition_by: [id, 'bucket(0, id)']}",
            r"layouts\.shop\.\*\.partition_by\[1\]: 'bucket\(0, id\)': bucket needs",
        ),
        ("{sort_by: ['']}", r"layouts\.shop\.\*\.sort_by\[0\]: '' is not a sort field"),
        ("{partition_by: id}", r"layouts\.shop\.\*\.partition_by: must be a list"),
        ("{order_by: [id]}", r"layouts\.shop\.\*: unknown key 'order_by'"),
    ],
)
def test_a_bad_layout_stops_the_run_naming_the_key(tmp_path, layout, error):
    path = tmp_path / "pipeline.yaml"
    path.write_text(
        "sources:\n  - name: s\n    protocol: canal-json\n    topics: [t]\n    kafka: {bootstrap_servers: 'k:9092'}\n"
        f"    gold: {{layouts: {{'shop.*': {layout}}}}}\n"
    )
    with pytest.raises(ConfigError, match=error):
        load_config(path)


def test_a_layout_fits_the_columns_by_name_without_case():
    gold = GoldSettings(
        layouts={
            "shop.orders": TableLayout(partition_by=["days(PLACED_AT)", "bucket(8, id)"], sort_by=["region desc"]),
            "shop.*": TableLayout(partition_by=["day"]),
        }
    )
    layout = table_layout(gold, "s", "shop", "orders", COLUMNS)
    assert layout == Layout((("days", None, "placed_at"), ("bucket", 8, "ID")), (("region", "desc"),))
    assert layout.partition_sql == "days(`placed_at`), bucket(8, `ID`)" and layout.sort_sql == "`region` DESC"
    assert layout.described == "partitioned by days(placed_at), bucket(8, ID); sorted by region desc"
    assert recorded_layout(layout.text) == layout
    assert table_layout(gold, "s", "shop", "other", COLUMNS) == Layout((("identity", None, "day"),))
    assert table_layout(gold, "s", "crm", "orders", COLUMNS) == Layout() and Layout().text is None


@pytest.mark.parametrize(
    ("field", "error"),
    [
        ("hours(day)", r"gold\.layouts\.shop\.t\.partition_by: hours does not take column 'day' of shop\.t, a date"),
        ("truncate(2, price)", r"truncate does not take column 'price' of shop\.t, a double"),
        ("bucket(2, nope)", r"gold\.layouts\.shop\.t\.partition_by: shop\.t has no column 'nope' \(its columns: ID,"),
    ],
)
def test_a_layout_that_does_not_fit_the_table_names_the_glob_and_the_column(field, error):
    with pytest.raises(ConfigError, match=error):
        table_layout(GoldSettings(layouts={"shop.t": TableLayout(partition_by=[field])}), "s", "shop", "t", COLUMNS)
