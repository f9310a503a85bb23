"""Print a source's bronze records as JSON lines (run in its own process, with its own metastore)."""

from __future__ import annotations

import base64
import json
import sys

from spark_jobs.config import load_config
from spark_jobs.runtime.spark_session import get_spark
from spark_jobs.runtime.tables import BRONZE_MESSAGES


def main(config_path: str, source: str) -> None:
    spark = get_spark(load_config(config_path))
    for r in spark.sql(
        f"SELECT topic, `partition`, `offset`, key, value FROM {BRONZE_MESSAGES} WHERE source = :source",
        args={"source": source},
    ).toLocalIterator():
        print(
            json.dumps(
                [
                    r["topic"],
                    r["partition"],
                    r["offset"],
                    base64.b64encode(r["key"]).decode() if r["key"] is not None else None,
                    base64.b64encode(r["value"]).decode() if r["value"] is not None else None,
                ]
            )
        )
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
