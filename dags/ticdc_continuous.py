"""One continuous DAG per configured source: a long-lived driver publishes gold within seconds of the commit."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import Param, dag

from spark_jobs import steps


def continuous_dag(source_name: str):
    @dag(
        dag_id=f"ticdc_continuous__{source_name}",
        schedule="@continuous",
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,
        is_paused_upon_creation=True,
        default_args={
            "retries": 8,
            "retry_delay": timedelta(seconds=30),
            "retry_exponential_backoff": True,
            "max_retry_delay": timedelta(minutes=10),
            "on_retry_callback": steps.failure_callback(source_name),
            "on_failure_callback": steps.failure_callback(source_name),
        },
        tags=["ticdc-lakehouse", "continuous", source_name],
        params={
            "interval_seconds": Param(
                10, type="integer", minimum=1, title="Seconds between batches", description="A batch starts this often."
            ),
            "watch_minutes": Param(
                30,
                type="number",
                exclusiveMinimum=0,
                title="Minutes per watch",
                description="How long one DAG run watches the driver; the next run watches on.",
            ),
            "max_lag_seconds": Param(
                600,
                type="integer",
                minimum=0,
                title="Most gold may lag (seconds)",
                description="Alert when gold's consistent timestamp is further behind the clock (0: never).",
            ),
        },
    )
    def continuous():
        """
        ### Run a TiCDC source continuously

        Paused when it first appears: the scheduled ingest DAG stays the default. Turn this DAG on (and the
        source's `ticdc_ingest` DAG off) to publish gold within seconds of the commit instead of every 10 minutes.

        **watch_driver** starts the source's continuous driver (`ticdc-lake run --source S --continuous`: one
        process, one Spark session, land, decode and publish gold in batches every **interval_seconds**, with
        every guarantee of a scheduled run) unless one is alive, then hands the watch to Airflow's triggerer,
        which reads the driver's heartbeat (`<local_dir>/continuous/<source>.json`) every few seconds without
        holding a worker slot. The task:

        - **fails when the driver is gone** (killed, failed, its host down): each failure logs one
          `ticdc-lake alert:` line, and its retry starts the driver again after 30 s, 1 min, 2 min, ... up to
          10 min (the driver's log is `<local_dir>/continuous/<source>.log`);
        - **fails when gold lags** more than **max_lag_seconds** behind the clock (an alert; the driver runs on);
        - **succeeds after watch_minutes**, with the driver's batches and freshness; the next DAG run (the
          schedule is `@continuous`) watches on.

        The driver holds the source's lock: a scheduled run, backfill or rebuild of the source waits for it to
        stop (SIGTERM stops it between batches). Pipeline status shows its state, batch rate and freshness.
        """
        steps.WatchContinuousDriver(task_id="watch_driver", source=source_name)

    return continuous()


for _name in steps.configured_sources():
    globals()[f"ticdc_continuous__{_name}"] = continuous_dag(_name)
