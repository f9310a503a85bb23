"""One ingest DAG per configured source: land bronze, decode silver, build gold."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import Asset, Param, dag, get_current_context, task

from spark_jobs.config import configured_source_names
from spark_jobs.runtime.freshness import failure_callback


def gold_asset(source_name: str) -> Asset:
    return Asset(f"ticdc-lake://gold/{source_name}")


def ingest_dag(source_name: str):
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
            "on_failure_callback": failure_callback(source_name),
        },
        tags=["ticdc-lakehouse", "ingest", source_name],
        params={
            "rebuild_gold": Param(
                False,
                type="boolean",
                title="Rebuild gold from silver",
                description="Replace every gold table of the source from silver instead of applying what is new.",
            ),
        },
    )
    def ingest():
        """
        ### Ingest a TiCDC source into the lakehouse

        Every run takes what the source's Kafka topics gained since the last run and carries it
        through all three layers:

        1. **check_config**: the configuration file is valid (a bad one stops here, before any table);
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
        7. **generate_docs**: `dbt docs generate` against the gold tables just built (Browse > dbt docs).

        Every task is idempotent: running it again for the same input changes nothing. Runs of one
        source never overlap. The task logs say what happened in numbers. A failed task is retried with
        exponential backoff (30 s, 1 min, 2 min: transient faults such as a broker restart or a concurrent
        commit pass); each failure logs one `ticdc-lake alert:` line with the task, the source and the cause.
        """

        @task
        def check_config() -> str:
            """Validate the whole configuration and this source before any table is touched."""
            from spark_jobs.config import load_config

            config = load_config()
            source = config.source(source_name)
            return f"{source.name}: {source.protocol}"

        @task
        def land() -> dict:
            """Land new Kafka records into bronze; returns the counts."""
            from spark_jobs.bronze.land import land_bronze
            from spark_jobs.config import load_config
            from spark_jobs.runtime.lock import source_lock
            from spark_jobs.runtime.spark_session import get_spark

            config = load_config()
            with source_lock(config.local_dir, source_name, "ingest: land"):
                result = land_bronze(get_spark(config), config, source_name)
            return {"records": result.records, "bytes": result.bytes, "batch_id": result.batch_id}

        @task
        def decode() -> dict:
            """Decode new bronze records into the silver tables; returns the counts."""
            from spark_jobs.config import load_config
            from spark_jobs.runtime.lock import source_lock
            from spark_jobs.runtime.spark_session import get_spark
            from spark_jobs.silver.build import build_silver

            config = load_config()
            with source_lock(config.local_dir, source_name, "ingest: decode"):
                r = build_silver(get_spark(config), config, source_name)
            return {
                "messages": r.messages,
                "row_changes": r.row_changes,
                "ddl_events": r.ddl_events,
                "quarantined": r.quarantined,
                "waiting": r.waiting,
                "consistent_ts": r.consistent_ts,
            }

        @task(outlets=[gold_asset(source_name)])
        def publish_gold() -> dict:
            """Build and test the gold tables up to the consistent timestamp with dbt; returns rows per table."""
            from spark_jobs.config import load_config
            from spark_jobs.gold.build import build_gold
            from spark_jobs.runtime.lock import source_lock
            from spark_jobs.runtime.spark_session import get_spark

            config = load_config()
            rebuild = bool(get_current_context()["params"]["rebuild_gold"])
            with source_lock(config.local_dir, source_name, "ingest: publish_gold"):
                r = build_gold(get_spark(config), config, source_name, rebuild=rebuild)
            return {
                "consistent_ts": r.consistent_ts,
                "consistency": r.consistency,
                "tables": r.tables,
                "needing_snapshot": r.needing_snapshot,
            }

        @task
        def check_freshness(published: dict) -> dict:
            """Warn or fail when gold's consistent timestamp is older than the config allows; returns the state."""
            import time

            from airflow.sdk.exceptions import AirflowFailException

            from spark_jobs.codecs import sends_watermarks
            from spark_jobs.config import load_config
            from spark_jobs.gold.build import run_dbt
            from spark_jobs.runtime import freshness
            from spark_jobs.runtime.spark_session import get_spark

            config = load_config()
            source = config.source(source_name)
            check = freshness.check_freshness(
                source_name, published["consistent_ts"], int(time.time() * 1000), config.freshness
            )
            if check.state == freshness.ERROR:
                raise AirflowFailException(check.line())
            if check.state == freshness.WARN:
                freshness.log.warning("%s", check.line())
            else:
                freshness.log.info("%s", check.line())
            if sends_watermarks(source.protocol, source.options):
                get_spark(config)  # dbt runs inside this process's session
                run_dbt(
                    ["source", "freshness", "--select", "source:silver.watermarks"],
                    config,
                    source_name,
                    freshness.dbt_freshness_vars(config.freshness),
                )
            age = check.age.total_seconds() if check.age is not None else None
            return {"state": check.state, "consistent_ts": check.consistent_ts, "age_seconds": age}

        @task(trigger_rule="all_done")
        def record_status(published: dict | None) -> str:
            """Write the source's status snapshot (the status page reads it, without Spark): numbers from the
            tables (gold's row counts from publish_gold when it ran), this run's task durations from Airflow.
            Returns the snapshot's path."""
            from spark_jobs.config import load_config
            from spark_jobs.runtime.spark_session import get_spark
            from spark_jobs.status import collect

            context = get_current_context()
            run = context["dag_run"]
            tasks = {
                crumb["task_id"]: collect.TaskOutcome(crumb["state"], crumb["duration"])
                for crumb in context["ti"].get_task_breadcrumbs(run.dag_id, run.run_id)
            }
            started = run.start_date or run.run_after
            config = load_config()
            run_info = collect.RunInfo(run.run_id, int(started.timestamp() * 1000), tasks)
            gold_rows = (published or {}).get("tables")
            return str(collect.record_status(get_spark(config), config, source_name, run_info, gold_rows))

        @task
        def generate_docs(published: dict) -> dict:
            """Regenerate the dbt docs site against the real tables (so its catalog has their columns and
            sizes); the plugin serves it from `<local_dir>/dbt/target`. Returns what it documents.

            Only the configured sources' gold models are compiled: the checkout may hold generated models of
            sources this lakehouse does not have, which cannot compile against it."""
            import json

            from spark_jobs.config import load_config
            from spark_jobs.gold.build import run_dbt
            from spark_jobs.gold.models import model_selector
            from spark_jobs.runtime.spark_session import get_spark

            config = load_config()
            get_spark(config)  # dbt runs inside this process's session
            selected = ["source:silver", "staging", "intermediate", *(model_selector(s.name) for s in config.sources)]
            run_dbt(["docs", "generate", "--select", *selected], config, source_name)
            catalog = json.loads((config.local_dir / "dbt" / "target" / "catalog.json").read_text())
            return {"gold_tables": len(published["tables"]), "catalog_relations": len(catalog["nodes"])}

        # record_status is not last: a DAG run's state is its last tasks', and it succeeds after a failed layer
        published = publish_gold()
        check_config() >> land() >> decode() >> published
        check_freshness(published)
        record_status(published) >> generate_docs(published)

    return ingest()


for _name in configured_source_names():
    globals()[f"ticdc_ingest__{_name}"] = ingest_dag(_name)
