"""The maintenance and freshness settings (validated, one line naming file and key), the freshness decision,
the maintenance DAG's shape and the one-line failure alert."""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest

from spark_jobs.config import FreshnessSettings, load_config, parse_duration
from spark_jobs.errors import ConfigError
from spark_jobs.runtime.freshness import (
    ERROR,
    OK,
    WARN,
    check_freshness,
    dbt_freshness_vars,
    failure_callback,
    log_task_failure,
)

SOURCES = """
sources:
  - name: shop
    protocol: canal-json
    topics: [shop_cdc]
    kafka: {bootstrap_servers: "127.0.0.1:9092"}
"""
DAGS = Path(__file__).resolve().parents[2] / "dags"


def load(tmp_path, extra: str):
    path = tmp_path / "pipeline.yaml"
    path.write_text(SOURCES + extra)
    return load_config(path)


def test_defaults_and_given_values_load(tmp_path):
    config = load(tmp_path, "")
    assert (config.maintenance.snapshot_retention_days, config.maintenance.retain_last) == (7, 10)
    assert config.maintenance.orphan_age_hours == 72
    assert config.maintenance.continuous_interval == timedelta(days=1)
    assert config.freshness.warn == timedelta(minutes=30) and config.freshness.error is None
    config = load(
        tmp_path,
        "maintenance: {snapshot_retention_days: 0, retain_last: 1, orphan_age_hours: 0, continuous_every: 6h}\n"
        "freshness: {warn_after: 90s, error_after: 2h}\n",
    )
    assert (config.maintenance.snapshot_retention_days, config.maintenance.retain_last) == (0, 1)
    assert config.maintenance.continuous_interval == timedelta(hours=6)
    assert config.freshness.warn == timedelta(seconds=90) and config.freshness.error == timedelta(hours=2)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("maintenance: {retain_last: 0}", r"maintenance\.retain_last: must be 1 or more, got 0"),
        ("maintenance: {snapshot_retention_days: -1}", r"maintenance\.snapshot_retention_days: must be 0 or more"),
        ("maintenance: {orphan_age_hours: -2}", r"maintenance\.orphan_age_hours: must be 0 or more"),
        ("maintenance: {orphan_age_hours: soon}", r"maintenance\.orphan_age_hours: must be an integer, got 'soon'"),
        ("maintenance: {continuous_every: daily}", r"maintenance\.continuous_every: 'daily' is not a duration"),
        ("maintenance: {continuous_every: 0h}", r"maintenance\.continuous_every: must be longer than 0"),
        ("maintenance: {keep: 3}", r"maintenance: unknown key 'keep'; allowed: snapshot_retention_days"),
        ("freshness: {warn_after: 30}", r"freshness\.warn_after: '30' is not a duration; use a whole number and s, m"),
        ("freshness: {error_after: 2 hours}", r"freshness\.error_after: '2 hours' is not a duration"),
        ("freshness: {warn_after: 0m}", r"freshness\.warn_after: must be longer than 0"),
        ("freshness: {warn_after: 3h, error_after: 2h}", r"freshness\.warn_after: must not be longer than"),
        ("freshness: [30m]", r"freshness: must be a mapping, got list"),
    ],
)
def test_a_bad_value_names_the_file_and_the_key(tmp_path, extra, message):
    with pytest.raises(ConfigError, match=message) as raised:
        load(tmp_path, extra + "\n")
    assert str(raised.value).startswith(str(tmp_path / "pipeline.yaml") + ": ")
    assert "\n" not in str(raised.value)


def test_durations():
    assert parse_duration("45s") == timedelta(seconds=45)
    assert parse_duration("2h") == timedelta(hours=2)
    assert parse_duration("1d") == timedelta(days=1)
    for bad in ("", "h", "1.5h", "-1h", "1w", "30 m"):
        with pytest.raises(ValueError):
            parse_duration(bad)


NOW = 1_800_000_000_000


def ts_ago(milliseconds: int) -> int:
    return (NOW - milliseconds) << 18 | 7  # a logical counter does not change the physical time


@pytest.mark.parametrize(
    ("age_ms", "limits", "state"),
    [
        (0, FreshnessSettings("30m", "2h"), OK),
        (30 * 60_000, FreshnessSettings("30m", "2h"), OK),  # at the limit: not older than it
        (30 * 60_000 + 1, FreshnessSettings("30m", "2h"), WARN),
        (2 * 3_600_000 + 1, FreshnessSettings("30m", "2h"), ERROR),
        (30 * 86_400_000, FreshnessSettings("30m", None), WARN),  # no error_after: never fails
        (-5_000, FreshnessSettings("30m", "2h"), OK),  # a clock behind TiDB's
    ],
)
def test_freshness_decision(age_ms, limits, state):
    check = check_freshness("shop", ts_ago(age_ms), NOW, limits)
    assert check.state == state
    assert check.age == timedelta(milliseconds=max(0, age_ms))
    assert check.line().startswith(f"source shop: freshness {state}: gold is consistent as of TiDB ts ")


def test_no_consistent_timestamp_yet_warns():
    check = check_freshness("shop", None, NOW, FreshnessSettings("30m", "2h"))
    assert (check.state, check.age) == (WARN, None)
    assert check.line() == "source shop: freshness warn: no consistent timestamp yet"


def test_dbt_gets_the_same_limits_in_minutes():
    assert dbt_freshness_vars(FreshnessSettings("90s", "2h")) == {
        "freshness_warn_minutes": 2,
        "freshness_error_minutes": 120,
    }
    assert dbt_freshness_vars(FreshnessSettings("30m", None))["freshness_error_minutes"] is None


def test_failure_callback_logs_one_line_with_task_source_and_cause(caplog):
    ti = SimpleNamespace(dag_id="ticdc_ingest__shop", task_id="land", map_index=-1)
    error = TimeoutError("broker 127.0.0.1:9092 did not answer in 30s\n  at the second line\n  and a third")
    with caplog.at_level(logging.ERROR, logger="spark_jobs.runtime.freshness"):
        failure_callback("shop")({"ti": ti, "exception": error})
    assert [r.getMessage() for r in caplog.records] == [
        "ticdc-lake alert: task ticdc_ingest__shop.land failed for source shop: "
        "TimeoutError: broker 127.0.0.1:9092 did not answer in 30s"
    ]
    mapped = SimpleNamespace(dag_id="ticdc_maintenance", task_id="maintain_gold", map_index=2)
    assert log_task_failure({"ti": mapped}, "all") == (
        "ticdc-lake alert: task ticdc_maintenance.maintain_gold[2] failed for source all: no exception recorded"
    )


def test_dags_import_with_alerting_retries_and_their_tasks(tmp_path, monkeypatch):
    from airflow.dag_processing.dagbag import DagBag

    (tmp_path / "pipeline.yaml").write_text(SOURCES)
    monkeypatch.setenv("TICDC_LAKE_CONFIG", str(tmp_path / "pipeline.yaml"))
    bag = DagBag(dag_folder=str(DAGS))
    assert not bag.import_errors, bag.import_errors
    maintenance = bag.dags["ticdc_maintenance"]
    assert {t.task_id for t in maintenance.tasks} == {
        "check_config",
        "maintain_bronze",
        "maintain_silver",
        "maintain_gold",
        "report",
    }
    assert maintenance.catchup is False and "Keep the lakehouse tables fast" in maintenance.doc_md
    assert all(t.on_failure_callback for t in maintenance.tasks)
    ingest = bag.dags["ticdc_ingest__shop"]
    assert ingest.get_task("check_freshness").upstream_task_ids == {"publish_gold"}
    rebuild = bag.dags["ticdc_rebuild"]
    assert rebuild.get_task("rebuild").upstream_task_ids == {"check_request"}
    form = {name: rebuild.params.get_param(name).schema for name in ("source", "layer", "tables")}
    assert form["layer"]["enum"] == ["silver", "gold", "history"] and "shop" in form["source"]["enum"]
    assert "Rebuild a layer of a source" in rebuild.doc_md
    for t in ingest.tasks:
        assert t.on_failure_callback and t.retries >= 1 and t.retry_exponential_backoff
    continuous = bag.dags["ticdc_continuous__shop"]
    (watch,) = continuous.tasks
    assert watch.task_id == "watch_driver" and watch.source == "shop"
    assert continuous.is_paused_upon_creation and continuous.max_active_runs == 1
    assert watch.on_failure_callback and watch.on_retry_callback and watch.retries >= 3
    assert watch.retry_exponential_backoff
    assert continuous.params.get_param("interval_seconds").schema["minimum"] == 1
    assert "Run a TiCDC source continuously" in continuous.doc_md


def test_only_a_source_with_an_upstream_to_reconcile_against_has_a_reconcile_task(tmp_path, monkeypatch):
    from airflow.dag_processing.dagbag import DagBag

    checked = """
  - name: orders
    protocol: canal-json
    topics: [orders_cdc]
    kafka: {bootstrap_servers: "127.0.0.1:9092"}
    reconcile: {against: "mysql://checker@127.0.0.1:4000", diff: true}
"""
    (tmp_path / "pipeline.yaml").write_text(SOURCES + checked)
    monkeypatch.setenv("TICDC_LAKE_CONFIG", str(tmp_path / "pipeline.yaml"))
    assert load_config(tmp_path / "pipeline.yaml").source("orders").reconcile.diff is True
    bag = DagBag(dag_folder=str(DAGS))
    assert not bag.import_errors, bag.import_errors
    assert "reconcile" not in bag.dags["ticdc_ingest__shop"].task_ids
    orders = bag.dags["ticdc_ingest__orders"]
    assert orders.get_task("reconcile").upstream_task_ids == {"publish_gold"}
    # the status page shows the outcome of this run's check; a table that differs fails the run (the docs wait)
    assert orders.get_task("reconcile").downstream_task_ids == {"record_status", "generate_docs"}
    assert "reconcile" in orders.doc_md
