"""What the loopback cluster's tables hold, read by a Spark application of its own on the cluster (cluster mode):

    python -m tests.e2e.cluster_check gold CONFIG     gold equals the upstream database of the shop stream
    python -m tests.e2e.cluster_check silver CONFIG   silver equals a clean decode of bronze (row for row)
    python -m tests.e2e.cluster_check all CONFIG      both, in one application

It fails (exit 1, the assertion on stderr) when they differ, and prints what it compared on success.
"""

from __future__ import annotations

import json
import sys

from spark_jobs.config import load_config
from spark_jobs.runtime.spark_session import get_spark
from spark_jobs.runtime.tables import BRONZE_MESSAGES
from spark_jobs.silver.build import rebuild_silver
from tests.e2e.test_ingest_dag import GOLD_V1, assert_gold_equals_oracle, last_watermark, of_shop
from tests.e2e.test_rebuild import silver_of_source
from ticdc_devkit.simulator.shop_stream import shop_stream


def main(what: str, config_path: str) -> None:
    if what not in ("gold", "silver", "all"):
        raise SystemExit(f"unknown check {what!r}; allowed: gold, silver, all")
    config = load_config(config_path)
    spark = get_spark(config, "ticdc-lakehouse cluster check")
    compared = {}
    if what in ("gold", "all"):
        events = shop_stream()
        assert_gold_equals_oracle(spark, events, last_watermark(events), GOLD_V1)
        compared.update({table: spark.table(table).count() for table in GOLD_V1})
    if what in ("silver", "all"):  # after gold: it rewrites silver from bronze
        kept = silver_of_source(spark, "shop")
        rebuild_silver(spark, config, "shop")
        clean = silver_of_source(spark, "shop")
        for table in clean:
            assert kept[table] == clean[table], f"{table} differs from a clean decode of bronze"
        compared.update({"bronze": of_shop(spark, BRONZE_MESSAGES), **{t: len(r) for t, r in clean.items()}})
    print(json.dumps(compared))


if __name__ == "__main__":
    main(*sys.argv[1:])
