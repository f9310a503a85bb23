"""One snapshot-load DAG per configured source: a Dumpling export into silver, on demand (trigger form)."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import Param, dag, get_current_context, task

from spark_jobs.config import configured_source_names
from spark_jobs.runtime.freshness import failure_callback


def backfill_dag(source_name: str):
    @dag(
        dag_id=f"ticdc_backfill__{source_name}",
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,
        default_args={"retries": 0, "on_failure_callback": failure_callback(source_name)},
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
            "csv_separator": Param(
                ",", type="string", title="CSV separator", description="Dumpling's --csv-separator."
            ),
            "csv_delimiter": Param(
                '"', type="string", title="CSV delimiter", description="Dumpling's --csv-delimiter."
            ),
            "csv_null_value": Param(
                "\\N", type="string", title="CSV null value", description="Dumpling's --csv-null-value."
            ),
            "csv_line_terminator": Param(
                "\\r\\n",
                type="string",
                title="CSV line terminator",
                description="Dumpling's --csv-line-terminator (\\r, \\n and \\t as escapes).",
            ),
            "csv_header": Param(
                True, type="boolean", title="CSV header", description="The CSV files start with a header line."
            ),
            "escape_backslash": Param(
                True,
                type="boolean",
                title="Escape backslash",
                description="Values are escaped with backslashes (Dumpling's --escape-backslash, on by default).",
            ),
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
            from spark_jobs.config import load_config
            from spark_jobs.runtime.rebuild import parse_tables

            params = get_current_context()["params"]
            load_config().source(source_name)
            tables = parse_tables(params.get("tables"))
            return {**params, "tables": sorted(list(pair) for pair in tables) if tables is not None else None}

        @task
        def load_snapshot(request: dict) -> dict:
            """Load the export into silver under the source's lock; returns rows per table."""
            from spark_jobs.backfill.dumpling import CsvOptions
            from spark_jobs.backfill.snapshot import load_snapshot as load
            from spark_jobs.config import load_config
            from spark_jobs.runtime.lock import source_lock
            from spark_jobs.runtime.spark_session import get_spark

            config = load_config()
            tables = frozenset(tuple(p) for p in request["tables"]) if request["tables"] is not None else None
            csv = CsvOptions.typed(
                request["csv_separator"],
                request["csv_delimiter"],
                request["csv_null_value"],
                request["csv_line_terminator"],
                request["csv_header"],
                request["escape_backslash"],
            )
            with source_lock(config.local_dir, source_name, "backfill: load_snapshot"):
                result = load(
                    get_spark(config), config, source_name, request["from"], tables, csv, force=bool(request["force"])
                )
            return {"snapshot_ts": result.snapshot_ts, "tables": result.tables, "already_loaded": result.already_loaded}

        load_snapshot(check_request())

    return backfill()


for _source in configured_source_names():
    backfill_dag(_source)
