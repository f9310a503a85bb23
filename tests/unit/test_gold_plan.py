"""The types a version's values go through on their way to the latest (`gold.plan.plan_versions`): TiDB converts
every stored value at each MODIFY COLUMN. On the real Spark and dbt: tests/e2e/test_type_mappings.py
(`test_a_value_written_before_a_chain_of_type_changes_is_converted_at_each`)."""

from __future__ import annotations

import json

from spark_jobs.gold.plan import plan_versions


def _version(ts: int, types: dict[int, str]) -> dict:
    columns = [{"id": i, "name": f"c{i}", "type": t} for i, t in types.items()]
    return {
        "columns": json.dumps(columns),
        "valid_from_ts": ts,
        "valid_to_ts": None,
        "upstream_database": "d",
        "upstream_table": "t",
    }


def test_each_version_goes_through_the_types_its_columns_took_after_it_before_the_latest():
    live = [
        _version(1, {1: "varchar(3)", 2: "int"}),
        _version(2, {1: "bigint", 2: "int"}),  # 1 retyped
        _version(3, {1: "bigint", 2: "int", 3: "int"}),  # a column added: no type change
        _version(4, {1: "decimal(10,2)", 3: "bigint"}),  # 1 and 3 retyped, 2 dropped
        _version(5, {1: "varchar(20)", 3: "bigint", 4: "int"}),  # 1 retyped; a column added
    ]
    through = [{c["id"]: list(c["through"]) for c in v["columns"]} for v in plan_versions(live)]
    assert through == [
        {1: ["bigint", "decimal(10,2)"], 2: []},  # 2 is dropped at version 4: nothing after that
        {1: ["decimal(10,2)"], 2: []},
        {1: ["decimal(10,2)"], 2: [], 3: []},
        {1: [], 3: []},
        {1: [], 3: [], 4: []},
    ]
