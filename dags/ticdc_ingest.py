"""One ingest DAG per configured source: land bronze, decode silver, build gold."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import Asset, Param, dag, get_current_context, task

from spark_jobs import steps


def gold_asset(source_name: str) -> Asset:
    return Asset(f"ticdc-lake://gold/{source_name}")


def ingest_dag(source_name: str, reconciled: bool = False):
    @dag(
        dag_id=f"ticdc_ingest__{source_name}",
        schedule=timedelta(minutes=10),
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,
        max_active_tasks=1,
        default_args={
            "retries": 3,
            "retry_delay": timedelta(seconds=30),
            "retry_exponential_backoff": True,
            "max_retry_delay": timedelta(minutes=10),
            "on_failure_callback": steps.failure_callback(source_name),
        },
        tags=["ticdc-lakehouse", "ingest", source_name],
        params={
            "rebuild_gold": Param(
                False,
                type="boolean",
                title="Rebuild gold from silver",
                description="Replace every gold table of the source from silver instead of applying what is new.",
            ),
            "full_check": Param(
                False,
                type="boolean",
                title="Check every table whole",
                description="The run's dbt checks read every gold and history table whole, not only what it changed.",
            ),
        },
    )
    def ingest():
        """
        ### Ingest a TiCDC source into the lakehouse

        Every run takes what the source's Kafka topics gained since the last run and carries it
        through all three layers:

        1. **check_config**: the configuration file is valid (a bad one stops here, before any table); while the
           source's continuous driver runs (`ticdc_continuous`), the run is skipped here;
        2. **land**: new Kafka records into `bronze.kafka_messages`, exactly once (the offsets are
           committed in the same Iceberg commit as the rows);
        3. **decode**: new bronze records into `silver.row_changes`, `silver.ddl_events`,
           `silver.watermarks` and `silver.quarantine`;
        4. **publish_gold**: dbt replays the DDL history and builds `gold_<source>.<database>__<table>`
           up to the source's consistent timestamp, runs the dbt tests of every gold table, and updates
           the gold asset. Trigger with **rebuild_gold** to rebuild the source's gold from silver;
        5. **check_freshness**: the age of the consistent timestamp in TiDB time against the config's
           `freshness.warn_after` (a warning line, state `warn` in the return value) and `freshness.error_after`
           (the task fails, not retried), then `dbt source freshness` on silver's watermarks (protocols that
           send them);
        6. **record_status**: the numbers of the status page (Browse > Pipeline status), read from the
           tables; it runs even when a layer failed, since that is when the page is looked at;
        7. **generate_docs**: `dbt docs generate` against the gold tables just built (Browse > dbt docs);
        8. **reconcile** (only for a source with `reconcile.against` set): every table as of the published
           timestamp against that upstream (a live TiDB, or a Dumpling export at its own TSO), into
           `gold.reconciliations` and the status page; a table that differs fails the task (one alert line).

        Every task is idempotent: running it again for the same input changes nothing. Runs of one
        source never overlap. The task logs say what happened in numbers. A failed task is retried with
        exponential backoff (30 s, 1 min, 2 min: transient faults such as a broker restart or a concurrent
        commit pass); each failure logs one `ticdc-lake alert:` line with the task, the source and the cause.
        """

        @task
        def check_config() -> dict:
            """Validate the whole configuration and this source before any table is touched; skip the run while
            the source's continuous driver runs (it holds the source's lock)."""
            from airflow.sdk.exceptions import AirflowSkipException

            checked = steps.check_config(source=source_name).xcom()
            driver = steps.driver_status(source_name)
            if driver.alive:
                raise AirflowSkipException(f"{driver.lines()[0]}: the scheduled run is skipped")
            return checked

        @task
        def land() -> dict:
            """Land new Kafka records into bronze; returns the counts."""
            return steps.land(source_name).xcom()

        @task
        def decode() -> dict:
            """Decode new bronze records into the silver tables; returns the counts."""
            return steps.decode(source_name).xcom()

        @task(outlets=[gold_asset(source_name)])
        def publish_gold() -> dict:
            """Build and test the gold tables up to the consistent timestamp with dbt; returns rows per table."""
            params = get_current_context()["params"]
            return steps.publish_gold(
                source_name, rebuild=bool(params["rebuild_gold"]), full_check=bool(params["full_check"])
            ).xcom()

        @task
        def check_freshness(published: dict) -> dict:
            """Warn or fail when gold's consistent timestamp is older than the config allows; returns the state."""
            from airflow.sdk.exceptions import AirflowFailException

            check = steps.check_freshness(source_name, published["consistent_ts"])
            if check.state == steps.FRESHNESS_ERROR:
                raise AirflowFailException(check.line())
            return check.xcom()

        @task(trigger_rule="all_done")
        def record_status(published: dict | None) -> str:
            """Write the source's status snapshot (the status page reads it, without Spark): numbers from the
            tables and the gold state, this run's task durations from Airflow. Returns the snapshot's path."""
            context = get_current_context()
            run = context["dag_run"]
            started = run.start_date or run.run_after
            tasks = {
                crumb["task_id"]: (crumb["state"], crumb["duration"])
                for crumb in context["ti"].get_task_breadcrumbs(run.dag_id, run.run_id)
            }
            return steps.record_status(source_name, run.run_id, int(started.timestamp() * 1000), tasks)

        @task
        def generate_docs(published: dict) -> dict:
            """Regenerate the dbt docs site (Browse > dbt docs), describing again only the tables the run built;
            returns what it documents."""
            built = published["built"]
            return {"gold_tables": len(published["tables"]), **steps.generate_docs(source_name, built).xcom()}

        @task
        def reconcile(published: dict) -> dict:
            """Compare gold with the source's `reconcile.against` upstream; returns every table's outcome, and
            fails without a retry when one differs (the outcome is recorded first)."""
            from airflow.sdk.exceptions import AirflowFailException

            from spark_jobs.errors import ReconcileMismatchError

            try:
                return steps.reconcile(source_name).xcom()
            except ReconcileMismatchError as exc:
                raise AirflowFailException(str(exc)) from None

        # record_status is not last: a DAG run's state is its last tasks', and it succeeds after a failed layer
        published = publish_gold()
        check_config() >> land() >> decode() >> published
        check_freshness(published)
        status, docs = record_status(published), generate_docs(published)
        status >> docs
        if reconciled:  # a table that differs fails the run: the docs wait for the check, the status does not
            reconcile(published) >> [status, docs]

    return ingest()


_reconciled = set(steps.reconciled_sources())
for _name in steps.configured_sources():
    globals()[f"ticdc_ingest__{_name}"] = ingest_dag(_name, _name in _reconciled)
