"""A long-lived driver (continuous mode) must not grow with the statements it has run: with the UI off nothing
reads Spark's status store, so the session keeps only the last few statements' plans and metrics in it."""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.e2e


def test_the_status_store_keeps_only_the_last_statements(spark):
    from spark_jobs.runtime.spark_session import STATUS_STORE_LIMITS

    limit = int(STATUS_STORE_LIMITS["spark.sql.ui.retainedExecutions"])
    for i in range(limit + 20):
        spark.sql(f"SELECT {i} AS n").collect()
    store = spark._jsparkSession.sharedState().statusStore()
    deadline = time.monotonic() + 30  # the listener and the store's clean-up run on their own threads
    while store.executionsCount() > limit and time.monotonic() < deadline:
        time.sleep(0.2)
    assert 0 < store.executionsCount() <= limit
    assert spark.sparkContext.getConf().get("spark.ui.retainedStages") == STATUS_STORE_LIMITS["spark.ui.retainedStages"]
