"""Delete modes (a source's `gold.deletes` and `gold.table_deletes`): which mode a table gets, how a bad setting
stops the run, why a changed mode rebuilds the gold table alone, what the dbt docs say, and which rows the oracle
says a gold table keeps. The modes on the real broker, Spark, Iceberg and dbt: tests/e2e/test_delete_modes.py,
and the gold oracle with random modes."""

from __future__ import annotations

import pytest

from spark_jobs.config import GoldSettings, load_config
from spark_jobs.errors import ConfigError
from spark_jobs.gold import models as gold_models
from spark_jobs.gold.plan import _gold_rebuild_reason
from spark_jobs.gold.publish import TableState
from ticdc_devkit.simulator.model import Column, Ddl, RowChange, Table
from ticdc_devkit.simulator.oracle import removed_rows, upstream_state

SOURCE = (
    "sources:\n  - name: s\n    protocol: {protocol}\n    topics: [t]\n    kafka: {{bootstrap_servers: 'k:9092'}}\n"
)


def test_the_first_table_rule_that_matches_sets_the_mode_else_the_source_default():
    gold = GoldSettings(deletes="soft", table_deletes={"archive.*": "ignore", "*.*": "hard"})
    assert gold.delete_mode("ARCHIVE", "events") == "ignore"  # names compared without case, as TiDB does
    assert gold.delete_mode("shop", "orders") == "hard"
    assert GoldSettings(deletes="soft").delete_mode("shop", "orders") == "soft"


@pytest.mark.parametrize(
    ("protocol", "gold", "error"),
    [
        ("canal-json", "deletes: purge", r"sources\[0\]\.gold\.deletes: 'purge' is not allowed; allowed: hard, soft"),
        ("canal-json", "table_deletes: {'shop.*': Soft}", r"sources\[0\]\.gold\.table_deletes\.shop\.\*: 'Soft' is"),
        (
            "canal-json",
            "table_deletes: {'shop': soft}",
            r"sources\[0\]\.gold\.table_deletes\.shop: .* must be db\.table",
        ),
        ("avro", "table_deletes: {'shop.*': ignore}", r"sources\[0\]\.gold: delete mode ignore needs deletes that"),
    ],
)
def test_a_bad_delete_mode_stops_the_run_naming_the_key(tmp_path, protocol, gold, error):
    path = tmp_path / "pipeline.yaml"
    registry = "    schema_registry: {url: 'http://r:8081'}\n" if protocol == "avro" else ""
    path.write_text(SOURCE.format(protocol=protocol) + registry + f"    gold: {{{gold}}}\n")
    with pytest.raises(ConfigError, match=error):
        load_config(path)


def _state(mode: str | None) -> TableState:
    return TableState(
        "s", "uid", "shop", "t", "g.t", "g.t__history", "[]", ["id"], "f", 1, 1, 1, 1, 0, 0, 1, 0, False, mode
    )


def test_a_changed_mode_rebuilds_the_gold_table_and_older_state_reads_as_hard():
    model = gold_models.GoldModel("s", "uid", "shop", "t", [], ["id"], delete_mode="soft")
    assert _gold_rebuild_reason(_state("hard"), model) == "delete mode changed from hard to soft"
    assert _gold_rebuild_reason(_state(None), model) == "delete mode changed from hard to soft"
    assert _gold_rebuild_reason(_state("soft"), model) is None
    assert _gold_rebuild_reason(None, model) is None  # a new table is rebuilt anyway


def test_the_dbt_docs_say_the_mode_and_describe_deleted_at():
    columns = [{"id": 1, "name": "id", "type": "int", "nullable": False}]
    soft = gold_models._model_yaml(gold_models.GoldModel("s", "u", "shop", "t", columns, ["id"], delete_mode="soft"))
    assert "Deletes are soft" in soft["description"]
    assert [c["name"] for c in soft["columns"]][:4] == ["_row_key", "_commit_ts", "_op", "_deleted_at"]
    ignore = gold_models._model_yaml(
        gold_models.GoldModel("s", "u", "shop", "t", columns, ["id"], delete_mode="ignore")
    )
    assert "Deletes are ignored" in ignore["description"] and "_deleted_at" not in str(ignore["columns"])


def test_the_oracle_keeps_removed_rows_by_mode():
    table = Table("shop", "t", (Column("id", "int", nullable=False), Column("v", "varchar(8)")), ("id",), 1, 1)
    grown = Table("shop", "t", (*table.columns, Column("w", "int", default=7)), ("id",), 1, 5)
    events = [
        RowChange(1, "insert", table, after={"id": 1, "v": "a"}),
        RowChange(1, "insert", table, after={"id": 2, "v": "b"}),
        RowChange(1, "insert", table, after={"id": 3, "v": "c"}),
        RowChange(2, "delete", table, before={"id": 1, "v": "a"}),  # a delete alone in its commit
        RowChange(3, "update", table, before={"id": 2, "v": "b"}, after={"id": 20, "v": "b"}),  # a key change
        RowChange(4, "delete", table, before={"id": 3, "v": "c"}),  # deleted ...
        RowChange(4, "insert", table, after={"id": 4, "v": "d"}),  # ... in the commit of an insert: a key change?
        Ddl(
            5,
            "shop",
            "t",
            "ALTER TABLE t ADD COLUMN w INT DEFAULT 7",
            "add_column",
            table_before=table,
            table_after=grown,
        ),
    ]
    assert set(upstream_state(events)[("shop", "t")]) == {("20",), ("4",)}
    soft = removed_rows(events, "soft")[("shop", "t")]
    assert soft == {
        ("1",): ({"id": "1", "v": "a", "w": "7"}, 2),
        ("2",): ({"id": "2", "v": "b", "w": "7"}, 3),
        ("3",): ({"id": "3", "v": "c", "w": "7"}, 4),
    }
    assert removed_rows(events, "ignore")[("shop", "t")] == {("1",): ({"id": "1", "v": "a", "w": "7"}, 2)}
    assert removed_rows(events + [RowChange(6, "insert", grown, after={"id": 1, "v": "z", "w": 0})], "soft")[
        ("shop", "t")
    ].keys() == {("2",), ("3",)}, "an insert of a removed key brings it back"
