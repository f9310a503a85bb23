"""Rebuild one layer of a source from the layer below, on demand (trigger form: source, layer, tables)."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import Param, dag, get_current_context, task

from spark_jobs import steps

SOURCES = steps.configured_sources()


@dag(
    dag_id="ticdc_rebuild",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 0, "on_failure_callback": steps.failure_callback("all")},
    tags=["ticdc-lakehouse", "rebuild"],
    params={
        "source": Param(
            SOURCES[0] if SOURCES else "",
            type="string",
            **({"enum": SOURCES} if SOURCES else {}),
            title="Source",
            description="The configured source whose layer is rebuilt.",
        ),
        "layer": Param(
            "gold",
            type="string",
            enum=list(steps.LAYERS),
            title="Layer",
            description="silver: decoded again from all of bronze; gold (current state) or history: replaced from silver.",
        ),
        "tables": Param(
            "",
            type="string",
            title="Tables",
            description="gold or history only: database.table names separated by commas (`a.b`.`c` for dots); "
            "empty: every table of the source.",
        ),
    },
)
def ticdc_rebuild():
    """
    ### Rebuild a layer of a source from the layer below

    Trigger with the form (**source**, **layer**, **tables**); the same as `ticdc-lake rebuild LAYER --source S
    [--table db.t]`:

    1. **check_request**: the configuration is valid and the request names a configured source, a layer and
       (for gold or history) tables the source has; nothing is touched otherwise;
    2. **rebuild**: holds the source's lock for the whole rebuild, so the ingest DAG's `land`, `decode` and
       `publish_gold` of that source wait meanwhile (their log says for what), then
       - **silver**: clears the source's silver and decodes all of bronze again;
       - **gold** / **history**: replaces the current-state or history tables (all, or the ones named) from
         silver; the other tables of the source apply what is new, and the publication holds them all at one
         consistent ts.

    The result equals what the incremental runs give; running it again changes nothing. Returns one line with
    the numbers. Not retried: a failed rebuild is looked at, then triggered again.
    """

    @task
    def check_request() -> dict:
        """Validate the configuration and the form's values; returns the request."""
        return steps.rebuild_request(get_current_context()["params"]).xcom()

    @task
    def rebuild() -> str:
        """Rebuild the layer under the source's lock; returns the summary line."""
        return steps.rebuild(get_current_context()["params"]).line

    check_request() >> rebuild()


ticdc_rebuild()
