"""Rebuild one layer of a source from the layer below, on demand (trigger form: source, layer, tables)."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import Param, dag, get_current_context, task

from spark_jobs.config import configured_source_names
from spark_jobs.runtime.freshness import failure_callback
from spark_jobs.runtime.rebuild import LAYERS

SOURCES = configured_source_names()


@dag(
    dag_id="ticdc_rebuild",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 0, "on_failure_callback": failure_callback("all")},
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
            enum=list(LAYERS),
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
        from spark_jobs.config import load_config
        from spark_jobs.errors import ConfigError
        from spark_jobs.runtime.rebuild import parse_tables

        params = get_current_context()["params"]
        config = load_config()
        source = config.source(params["source"]).name
        tables = parse_tables(params.get("tables"))
        if tables and params["layer"] == "silver":
            raise ConfigError("rebuild silver: silver is rebuilt per source (all its tables come from one stream)")
        return {
            "source": source,
            "layer": params["layer"],
            "tables": sorted(list(pair) for pair in tables) if tables is not None else None,
        }

    @task
    def rebuild(request: dict) -> str:
        """Rebuild the layer under the source's lock; returns the summary line."""
        import logging

        from spark_jobs.config import load_config
        from spark_jobs.runtime.lock import source_lock
        from spark_jobs.runtime.rebuild import rebuild_layer
        from spark_jobs.runtime.spark_session import get_spark

        config = load_config()
        source = request["source"]
        tables = frozenset(tuple(pair) for pair in request["tables"]) if request["tables"] is not None else None
        with source_lock(config.local_dir, source, f"rebuild {request['layer']}"):
            line = rebuild_layer(get_spark(config), config, source, request["layer"], tables)
        logging.getLogger(__name__).info("%s", line)
        return line

    rebuild(check_request())


ticdc_rebuild()
