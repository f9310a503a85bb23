"""Row checksums end to end: a random Simple-JSON stream with TiDB's row checksums (`integrity-check-level =
"correctness"`), then two of its inserts delivered again, one with a checksum that no longer matches its row and
one marked corrupted by TiCDC. Every row of the stream passes its check and gold equals the upstream database;
the two copies go to quarantine with their reasons, and the status snapshot, the status page's view and
`/metrics` count them as checksum failures (codec-level cases: tests/codecs/test_checksum.py)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from spark_jobs.bronze.land import land_bronze
from spark_jobs.gold.build import build_gold
from spark_jobs.runtime.tables import SILVER_QUARANTINE
from spark_jobs.silver.build import build_silver
from spark_jobs.status.collect import RunInfo, record_status
from spark_jobs.status.metrics import prometheus_text
from spark_jobs.status.view import status_views
from tests.e2e.test_gold_oracle import assert_gold_is_upstream
from ticdc_devkit.broker import produce
from ticdc_devkit.simulator.stream import encode_stream
from ticdc_devkit.simulator.workload import random_workload

pytestmark = pytest.mark.e2e

SOURCE, SEED = "checksums", 20261126


def with_checksum(value: bytes, change) -> bytes:
    doc = json.loads(value)
    change(doc["checksum"])
    return json.dumps(doc).encode()


def test_rows_failing_their_checksum_go_to_quarantine_and_are_counted(spark, broker, source_config):
    workload = random_workload(SEED, tables=2, changes=20, protocol="simple-json")
    options = {"integrity-check-level": "correctness"}
    messages = encode_stream("simple-json", workload.events, topic=SOURCE, partitions=1, options=options)
    inserts = [m for m in messages if json.loads(m.value).get("type") == "INSERT"]
    bad = [
        dataclasses.replace(inserts[3], value=with_checksum(inserts[3].value, lambda c: c.update(current=1))),
        dataclasses.replace(inserts[7], value=with_checksum(inserts[7].value, lambda c: c.update(corrupted=True))),
    ]
    broker.create_topics([SOURCE], partitions=1)
    produce(broker.bootstrap, messages + bad)
    config = source_config(SOURCE, "simple-json")
    land_bronze(spark, config, SOURCE)
    build_silver(spark, config, SOURCE)
    result = build_gold(spark, config, SOURCE)
    assert result.consistent_ts == workload.consistent_ts
    assert_gold_is_upstream(spark, SOURCE, workload, workload.consistent_ts)

    quarantined = spark.sql(
        f"SELECT `offset`, reason FROM {SILVER_QUARANTINE} WHERE source = :s ORDER BY `offset`", args={"s": SOURCE}
    ).collect()
    assert [r["offset"] for r in quarantined] == [len(messages), len(messages) + 1]
    assert "row checksum mismatch" in quarantined[0]["reason"] and "expected 1," in quarantined[0]["reason"]
    assert "row marked corrupted by TiCDC" in quarantined[1]["reason"]

    record_status(spark, config, SOURCE, RunInfo("checksums-run", 0))
    (view,) = [v for v in status_views(config) if v["source"] == SOURCE]
    assert view["checksum_failures"] == 2
    assert f'ticdc_lake_checksum_failures{{source="{SOURCE}"}} 2' in prometheus_text([view])
