"""Erase one key of one upstream table from a source's lakehouse, on demand (trigger form: source, table, key, by)."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import Param, dag, get_current_context, task

from spark_jobs import steps

SOURCES = steps.configured_sources()


@dag(
    dag_id="ticdc_erase",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 0, "on_failure_callback": steps.failure_callback("all")},
    tags=["ticdc-lakehouse", "erasure"],
    params={
        "source": Param(
            SOURCES[0] if SOURCES else "",
            type="string",
            **({"enum": SOURCES} if SOURCES else {}),
            title="Source",
            description="The configured source whose lakehouse holds the key.",
        ),
        "table": Param(
            "",
            type="string",
            title="Table",
            description="database.table as upstream names it (`a.b`.`c` for a name with a dot).",
        ),
        "key": Param(
            "",
            type="string",
            title="Key",
            description='The key\'s columns as a JSON object, e.g. {"id": 7}. It is not recorded: the erasure '
            "keeps a SHA-256 of it.",
        ),
        "requested_by": Param(
            "",
            type="string",
            title="Requested by",
            description="Who asks for the erasure (recorded with it).",
        ),
    },
)
def ticdc_erase():
    """
    ### Erase one key of a table from the lakehouse

    Trigger with the form (**source**, **table**, **key**, **requested by**); the same as `ticdc-lake erase
    --source S --table db.t --key '{"id": 7}' --by NAME`:

    1. **check_request**: the configuration is valid, the source is configured, the table is `database.table`
       and the key a JSON object; nothing is touched otherwise;
    2. **erase**: holds the source's lock for the whole erasure (the ingest DAG's tasks of that source wait),
       then removes every row and version of the key from silver, gold, history and the daily table, and every
       bronze message that carries it (a message that carries other rows too, as Open's batches do, is
       rewritten without it); publishes the source again; expires the snapshots and deletes the files that
       still held it. The erasure is recorded in `silver.erasures` (who, what, when; never a value), and no
       later decode lets the key's earlier changes into silver again.

    Returns the numbers in two lines. Not retried: a failed erasure is looked at, then triggered again, which
    finishes what is left.
    """

    @task
    def check_request() -> dict:
        """Validate the configuration and the form's values; returns the request (without the key's values)."""
        return steps.erase_request(get_current_context()["params"]).xcom()

    @task
    def erase() -> list[str]:
        """Erase the key under the source's lock; returns the summary lines."""
        return steps.erase(get_current_context()["params"]).lines()

    check_request() >> erase()


ticdc_erase()
