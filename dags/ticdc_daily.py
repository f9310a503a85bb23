"""One daily as-of DAG per configured source: every gold table as it was at the end of the run's day."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from airflow.sdk import BaseSensorOperator, dag, task

from spark_jobs import steps

POKE_INTERVAL = timedelta(minutes=10)
WAIT_AT_MOST = timedelta(days=2)  # a scheduled run starts as its day begins: the day itself, then the lag


def run_day(context) -> date:
    """The day a run writes: its logical date (a run triggered without one: the time it was due), in UTC."""
    dag_run = context["dag_run"]
    moment = dag_run.logical_date or dag_run.run_after
    return moment.astimezone(UTC).date()


class DayComplete(BaseSensorOperator):
    """Waits until the source's consistent timestamp has reached the end of the run's day; returns the day's status
    (day, time zone, the day's end as a TiDB ts, the source's consistent ts)."""

    def __init__(self, *, source_name: str, **kwargs):
        super().__init__(**kwargs)
        self.source_name = source_name

    def poke(self, context):
        """Reads the newest publication's consistent ts from its file beside the tables: no Spark and no lock,
        so a poke every few minutes costs nothing and never holds up the source's ingest runs."""
        from airflow.sdk.bases.sensor import PokeReturnValue

        status = steps.day_status(self.source_name, run_day(context))
        self.log.info("%s", status.line(self.source_name))
        return PokeReturnValue(is_done=status.complete, xcom_value=status.xcom())


def daily_dag(source_name: str):
    @dag(
        dag_id=f"ticdc_daily__{source_name}",
        schedule="@daily",
        start_date=datetime(2020, 1, 1, tzinfo=UTC),
        catchup=False,
        max_active_runs=2,
        max_active_tasks=1,
        default_args={
            "retries": 2,
            "retry_delay": timedelta(minutes=1),
            "retry_exponential_backoff": True,
            "on_failure_callback": steps.failure_callback(source_name),
        },
        tags=["ticdc-lakehouse", "daily", source_name],
    )
    def daily():
        """
        ### Daily as-of tables of a TiCDC source

        Every run writes, for its **logical date**, every gold table of the source as it was at the end of that
        day into `daily_<source>.<database>__<table>`: one partition per day (`_as_of_date`), the day's end as a
        TiDB timestamp in `_as_of_ts`, the row's `_row_key` and the table's columns in their latest shape. The
        rows come from the history tables (`…__history`), the same as-of as `ticdc-lake as-of`.

        1. **wait_for_day**: a sensor (reschedule mode: it holds no worker between pokes; every 10 minutes,
           at most 2 days) until the source's consistent timestamp (its newest gold publication, read from
           `<local_dir>/status/<source>.published.json` without Spark) has reached the end of the day. A scheduled run starts at midnight UTC as its day begins, so it waits through
           the day and then for the pipeline's lag. A day is never written before it is complete;
        2. **write_day**: holds the source's lock (as the ingest steps do), then replaces that day's partition
           of every table that existed at the end of the day, one commit per table; a partition that already
           holds the same rows is left alone. Logs the tables and rows per table.

        The day ends at midnight in `daily.timezone` of the configuration (`config/pipeline.yaml`, UTC by
        default); the logical date itself is a UTC date. Past days come from Airflow's own backfill (the
        scheduler runs the runs it records; the DAG must be unpaused):

        ```
        airflow backfill create --dag-id ticdc_daily__shop --from-date 2026-01-01 --to-date 2026-01-07
        ```

        and a day again with `--reprocess-behavior completed`: its partitions end up as they were if nothing
        changed in history (no new snapshot), or as history says now. A table that gained columns since an
        earlier day gets them in its daily table (earlier days read null); a column whose type changed is widened
        in place, or the daily table is rewritten once with earlier days' values cast. Rows are in each table's
        shape at the time the day is written, as history keeps them.
        """
        wait = DayComplete(
            task_id="wait_for_day",
            source_name=source_name,
            mode="reschedule",
            poke_interval=POKE_INTERVAL,
            timeout=WAIT_AT_MOST,
            retries=0,
        )

        @task
        def write_day(status: dict) -> dict:
            """Write the day's partition of every daily table of the source; returns rows per table."""
            return steps.write_day(source_name, date.fromisoformat(status["day"])).xcom()

        write_day(wait.output)

    return daily()


for _name in steps.configured_sources():
    globals()[f"ticdc_daily__{_name}"] = daily_dag(_name)
