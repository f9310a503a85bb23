"""Daily maintenance of every lakehouse table: compaction, snapshot expiry, orphan files, stale landing branches."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import dag, task

from spark_jobs import steps


@dag(
    dag_id="ticdc_maintenance",
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    max_active_tasks=1,
    default_args={
        "retries": 2,
        "retry_delay": timedelta(minutes=5),
        "retry_exponential_backoff": True,
        "max_retry_delay": timedelta(minutes=30),
        "on_failure_callback": steps.failure_callback("all"),
    },
    tags=["ticdc-lakehouse", "maintenance"],
)
def ticdc_maintenance():
    """
    ### Keep the lakehouse tables fast and small

    Once a day, for every table (bronze and silver, shared by all sources, then each configured source's gold
    tables), through Iceberg's Java actions:

    1. **check_config**: the configuration is valid; returns the source names;
    2. **maintain_bronze**: `rewrite_data_files` (many small landing files into few),
       `rewrite_position_delete_files`, dropping the `land_*` branches no landing run can publish any more (left
       by killed runs), `expire_snapshots` and `remove_orphan_files`. Bronze offsets are a table property and
       survive all of it; snapshots a configured source's next silver run still reads are kept;
    3. **maintain_silver**: the same for the silver tables and gold's shared bookkeeping tables;
    4. **maintain_gold**: the same for one source's gold tables (one task per source);
    5. **report**: the totals in one line.

    Retention comes from the config's `maintenance` section: `snapshot_retention_days`, `retain_last` (main's
    newest snapshots always kept) and `orphan_age_hours` (keep it at 24 or more while anything else writes).
    Snapshots a tag or branch references are never expired (Iceberg keeps them by itself). Landing may run at the
    same time: a landing commit that meets a maintenance commit plans again and retries; nothing is lost.
    In embedded mode, while a continuous driver runs, every task returns at once: the driver holds the metastore
    and maintains the lakehouse itself (`maintenance.continuous_every`), and the report says so.
    A failed task logs one `ticdc-lake alert:` line with its cause.
    """

    @task
    def check_config() -> list[str]:
        """Validate the configuration; returns the configured source names."""
        return steps.check_config().names

    @task
    def maintain_bronze(sources: list[str]) -> dict:
        """Maintain the bronze tables (once the config is known to be valid); returns one summary per table."""
        return steps.maintain_shared("bronze").xcom()

    @task
    def maintain_silver(bronze: dict) -> dict:
        """Maintain the silver tables and gold's shared bookkeeping tables (after bronze, whose expiry reads
        silver's positions)."""
        return steps.maintain_shared("silver").xcom()

    @task
    def maintain_gold(source: str) -> dict:
        """Maintain one source's gold and history tables."""
        return steps.maintain_gold(source).xcom()

    @task
    def report(bronze: dict, silver: dict, gold: list[dict]) -> str:
        """One line with the totals over every table."""
        return steps.maintenance_report([bronze, silver, *gold])

    sources = check_config()
    bronze = maintain_bronze(sources)
    silver = maintain_silver(bronze)
    gold = maintain_gold.expand(source=sources)
    silver >> gold
    report(bronze, silver, gold)


ticdc_maintenance()
