"""dbt's unit tests of the DDL-history replay (architecture.md, decision 6): fixed rows through int_consistent_ts,
int_schema_versions, int_table_changes and int_gold_tables, each compared with the rows the model must give
(dbt_project/models/intermediate/_intermediate__unit_tests.yml). They run as build_gold runs dbt: in-process, in
the test session's SparkSession. Every unit test the project declares must run and pass; dbt skipping one, or
selecting none, fails this test as much as a wrong row does."""

from __future__ import annotations

import json

import pytest
import yaml

from spark_jobs.gold import models as gold_models
from spark_jobs.gold.build import run_dbt
from spark_jobs.runtime.tables import ensure_tables

pytestmark = pytest.mark.e2e

# dbt types a unit test's input rows by the columns of the relation each input stands for, which it reads from
# the catalog: these must exist (with any rows) before the unit tests run.
INPUT_RELATIONS = ("stg_silver_runs", "stg_ddl_events", "stg_row_changes", "int_consistent_ts", "int_schema_versions")


def declared_unit_tests() -> set[str]:
    return {
        test["name"]
        for path in (gold_models.DBT_PROJECT / "models").rglob("*.yml")
        for test in (yaml.safe_load(path.read_text()) or {}).get("unit_tests", [])
    }


def test_the_replay_models_pass_their_dbt_unit_tests(spark, pipeline_config):
    declared = declared_unit_tests()
    assert len(declared) == 12  # the four replay models' tests (a new one: count it here)
    if not all(spark.catalog.tableExists(f"lake_staging.{name}") for name in INPUT_RELATIONS):
        # a session that has built no gold yet: the views and tables as build_gold makes them, over silver as it is
        ensure_tables(spark, "silver")
        run_dbt(["run", "--select", *INPUT_RELATIONS], pipeline_config, "shop")
    run_results = pipeline_config.local_dir / "dbt" / "target" / "run_results.json"
    run_results.unlink(missing_ok=True)

    run_dbt(["test", "--select", "test_type:unit"], pipeline_config, "shop")  # a failing unit test raises DbtError

    results = json.loads(run_results.read_text())["results"]
    ran = {r["unique_id"].removeprefix("unit_test.").split(".")[-1]: r["status"] for r in results}
    assert all(r["unique_id"].startswith("unit_test.") for r in results)
    assert ran == dict.fromkeys(declared, "pass")
