"""One snapshot-load DAG per configured source: a Dumpling export into silver, on demand (trigger form)."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import Param, dag, get_current_context, task

from spark_jobs import steps

CSV_PARAMS = {
    field.name: Param(
        field.default,
        type="boolean" if isinstance(field.default, bool) else "string",
        title=field.title,
        description=field.help + ".",
    )
    for field in steps.CSV_FIELDS
}


def backfill_dag(source_name: str):
    @dag(
        dag_id=f"ticdc_backfill__{source_name}",
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,
        default_args={"retries": 0, "on_failure_callback": steps.failure_callback(source_name)},
        tags=["ticdc-lakehouse", "backfill", source_name],
        params={
            "from": Param(
                "",
                type="string",
                minLength=1,
                title="Export",
                description="The Dumpling export: a directory on the workers, or an object-store URL (s3://...).",
            ),
            "tables": Param(
                "",
                type="string",
                title="Tables",
                description="database.table names separated by commas (`a.b`.`c` for dots); empty: every table.",
            ),
            "force": Param(
                False,
                type="boolean",
                title="Force",
                description="Load even though gold is published past the export's TSO (the source's gold "
                "and history are then rebuilt from silver).",
            ),
            **CSV_PARAMS,
        },
    )
    def backfill():
        """
        ### Load a Dumpling export (the initial snapshot)

        TiDB users start a changefeed at the TSO of a Dumpling export (`metadata` holds it as `Pos:`); this DAG
        loads that export, so that gold is the export plus every change after it. Trigger it with the form; the
        same as `ticdc-lake backfill snapshot --source S --from PATH_OR_URL [--tables db.t,...]`:

        1. **check_request**: the configuration and the form are valid (a bad one stops here, before any table);
        2. **load_snapshot**: holds the source's lock (ingest runs of the source wait meanwhile), then
           - reads every data file of the export in a Spark task of its own (`.sql` INSERTs or `.csv`, plain or
             `.gz`/`.zst`/`.snappy`), logging files, rows and rows/s every 10 seconds;
           - writes the tables' CREATE statements as `snapshot` DDL events and the rows as snapshot row changes,
             both at the export's TSO, into silver; the next ingest run publishes them in gold and history.

        Loading the same export again changes nothing. An export whose TSO gold has already passed is refused
        with one line, unless **force** is set. A load that fails half-way leaves a record that keeps gold from
        publishing the source until the load is triggered again. Returns the rows per table. Not retried.
        """

        @task
        def check_request() -> dict:
            """Validate the configuration and the form's values; returns the request."""
            return steps.snapshot_request(source_name, get_current_context()["params"]).xcom()

        @task
        def load_snapshot() -> dict:
            """Load the export into silver under the source's lock; returns rows per table."""
            return steps.load_snapshot(source_name, get_current_context()["params"]).xcom()

        check_request() >> load_snapshot()

    return backfill()


for _source in steps.configured_sources():
    backfill_dag(_source)
