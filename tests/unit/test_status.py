"""The status snapshot, its views, Prometheus text and the live broker offsets (no Spark)."""

from __future__ import annotations

import json
import re
import socket

from spark_jobs.codecs.checksum import FAILURE_PATTERN
from spark_jobs.config import KafkaSettings, SourceSettings
from spark_jobs.gold.publish import published_ts, record_publication
from spark_jobs.runtime import heartbeat
from spark_jobs.status.live import BrokerOffsets, high_watermarks
from spark_jobs.status.metrics import prometheus_text
from spark_jobs.status.snapshot import HISTORY_LIMIT, read_snapshot, snapshot_path, write_snapshot
from spark_jobs.status.view import source_view
from ticdc_devkit.broker import produce
from ticdc_devkit.simulator.model import Message

NOW = 1_800_000_000_000
TS = (NOW - 90_000) << 18  # a TiDB ts 90 s before NOW


def source(bootstrap: str = "127.0.0.1:1", topics=("shop_cdc",)) -> SourceSettings:
    return SourceSettings(
        name="shop", protocol="canal-json", kafka=KafkaSettings(bootstrap_servers=bootstrap), topics=list(topics)
    )


def run(run_id: str, landed: int = 10, land_seconds: float | None = 2.0) -> dict:
    return {
        "run_id": run_id,
        "started_at_ms": NOW - 60_000,
        "recorded_at_ms": NOW - 1_000,
        "tasks": {
            "land": {"state": "success", "seconds": land_seconds},
            "decode": {"state": "success", "seconds": 4.0},
            "publish_gold": {"state": "failed", "seconds": 9.5},
        },
        "landed_records": landed,
        "landed_bytes": 100 * landed,
        "decoded_messages": 8,
        "row_changes": 7,
        "ddl_events": 1,
        "quarantined": 1,
        "gold_rows": 5,
        "gold_consistent_ts": TS,
        "lag_seconds": {"landed": 30.0, "decoded": 90.0, "consistent": 90.0, "gold": None},
    }


def snapshot(history: list[dict] | None = None) -> dict:
    return {
        "version": 1,
        "source": "shop",
        "protocol": "canal-json",
        "recorded_at_ms": NOW - 1_000,
        "layers": {
            "landed": {"ts": None, "physical_ms": NOW - 30_000},
            "decoded": {"ts": TS, "physical_ms": TS >> 18},
            "consistent": {"ts": TS, "physical_ms": TS >> 18},
            "gold": {"ts": None, "physical_ms": None},
        },
        "consistency": "watermark",
        "partitions": [
            {"topic": "shop_cdc", "partition": 0, "landed_offset": 10},
            {"topic": "shop_cdc", "partition": 1, "landed_offset": 4},
        ],
        "quarantined": 3,
        "quarantine": [
            {
                "reason": 'bad "json"\nat 1',
                "messages": 3,
                "samples": [{"topic": "shop_cdc", "partition": 1, "offset": 2}],
            }
        ],
        "checksum_failures": 2,
        "gaps_total": 0,
        "gaps": [],
        "needing_snapshot": ["shop.orders"],
        "keyless": ["shop.audit_log"],
        "table_rules": {
            "include": ["shop.*"],
            "exclude": ["shop.tmp_*"],
            "exclude_columns": {"shop.customers": ["email"]},
        },
        "reconciliation": {
            "checked_at_ms": NOW - 5_000,
            "against": "mysql://checker@127.0.0.1:4000",
            "kind": "tidb",
            "as_of_ts": TS,
            "tables": 3,
            "outcomes": {"match": 1, "differs": 1, "not compared": 1},
            "mismatched": ["shop.orders: differs"],
        },
        "gold_tables": [
            {
                "relation": "gold_shop.shop__orders",
                "database": "shop",
                "table": "orders",
                "rows": 5,
                "consistent_ts": TS,
                "needs_snapshot": True,
                "deletes": "soft",
                "layout": "partitioned by days(placed_at); sorted by placed_at desc",
            }
        ],
        "history": history if history is not None else [run("r1")],
    }


def test_snapshot_history_is_bounded_and_a_rerun_replaces_its_entry(tmp_path):
    assert read_snapshot(tmp_path, "shop") is None
    for i in range(HISTORY_LIMIT + 5):
        write_snapshot(tmp_path, snapshot([run(f"r{i}", landed=i)]))
    write_snapshot(tmp_path, snapshot([run(f"r{HISTORY_LIMIT + 4}", landed=999)]))  # the last run, retried
    history = read_snapshot(tmp_path, "shop")["history"]
    assert [r["run_id"] for r in history] == [f"r{i}" for i in range(5, HISTORY_LIMIT + 5)]
    assert history[-1]["landed_records"] == 999
    assert [p.name for p in snapshot_path(tmp_path, "shop").parent.iterdir()] == ["shop.json"]  # no temp file left
    json.loads(snapshot_path(tmp_path, "shop").read_text())


def test_the_newest_publication_is_read_back_without_spark(tmp_path):
    assert published_ts(tmp_path, "shop") is None
    record_publication(tmp_path, "shop", 462601493275475993, "ticdc_462601493275475993")
    record_publication(tmp_path, "other", 5, "ticdc_5")
    record_publication(tmp_path, "shop", 462601493275475999, "ticdc_462601493275475999")
    assert published_ts(tmp_path, "shop") == 462601493275475999
    assert published_ts(tmp_path, "other") == 5
    assert sorted(p.name for p in (tmp_path / "status").iterdir()) == ["other.published.json", "shop.published.json"]


def test_view_lags_as_of_now_offsets_against_the_broker_and_rates():
    broker = BrokerOffsets(True, {("shop_cdc", 0): 12, ("shop_cdc", 1): 4, ("shop_cdc", 2): 3})
    view = source_view(source(), snapshot([run("r1", landed=10), run("r2", landed=20, land_seconds=None)]), broker, NOW)
    assert view["broker"] == "reachable"
    assert {layer["layer"]: layer["lag_seconds"] for layer in view["layers"]} == {
        "landed": 30.0,
        "decoded": 90.0,
        "consistent": 90.0,
        "gold": None,
    }
    assert [(p["partition"], p["landed_offset"], p["high_watermark"], p["offset_lag"]) for p in view["partitions"]] == [
        (0, 10, 12, 2),
        (1, 4, 4, 0),
        (2, None, 3, None),  # a partition the broker has and nothing landed from yet
    ]
    assert [r["run_id"] for r in view["runs"]] == ["r2", "r1"]  # newest first
    assert view["runs"][0]["landed_per_second"] is None  # no duration known
    assert view["runs"][1]["landed_per_second"] == 5.0
    assert view["runs"][1]["decoded_per_second"] == 2.0
    assert view["snapshot_age_seconds"] == 1.0


def test_view_without_snapshot_or_broker():
    view = source_view(source(), None, BrokerOffsets(False), NOW)
    assert view == {
        "source": "shop",
        "protocol": "canal-json",
        "broker": "broker unreachable",
        "recorded": False,
        "continuous": None,
        "partitions": [],
    }
    unreachable = source_view(source(), snapshot(), BrokerOffsets(False), NOW)
    assert [p["high_watermark"] for p in unreachable["partitions"]] == [None, None]


def test_the_continuous_driver_is_shown_from_its_heartbeat_and_a_stale_one_as_not_running():
    tso = (NOW - 12_000) << 18  # gold 12 s behind
    recent = [{"finished_at_ms": NOW - 60_000 + 10_000 * i, "seconds": 4.0 + i, "records": 5} for i in range(7)]
    beat = {
        "source": "shop",
        "pid": 1,
        "host": "elsewhere",  # not this host: alive by the heartbeat's age alone
        "state": heartbeat.WAITING,
        "batches": 7,
        "paused": 1,
        "consistent_ts": tso,
        "recent": recent,
        "heartbeat_at_ms": NOW - 2_000,
    }
    shown = source_view(source(), None, BrokerOffsets(False), NOW, beat)["continuous"]
    assert shown["alive"] and shown["state"] == "waiting" and shown["batches"] == 7 and shown["paused"] == 1
    assert shown["batches_per_minute"] == 6.0 and shown["gold_behind_seconds"] == 12.0
    assert shown["last_batch_seconds"] == 10.0 and shown["heartbeat_age_seconds"] == 2.0
    metrics = prometheus_text([source_view(source(), None, BrokerOffsets(False), NOW, beat)])
    assert 'ticdc_lake_continuous_up{source="shop"} 1' in metrics
    assert 'ticdc_lake_continuous_gold_behind_seconds{source="shop"} 12.0' in metrics
    stale = {**beat, "heartbeat_at_ms": NOW - int(heartbeat.STALE_AFTER_SECONDS * 1000) - 1}
    assert not source_view(source(), None, BrokerOffsets(False), NOW, stale)["continuous"]["alive"]
    assert 'ticdc_lake_continuous_up{source="shop"} 0' in prometheus_text(
        [source_view(source(), None, BrokerOffsets(False), NOW, stale)]
    )
    gone_here = {**beat, "host": socket.gethostname(), "pid": 2**22 + 1}  # above Linux's largest pid
    assert not heartbeat.is_alive(gone_here, NOW)


def test_checksum_failures_are_shown_and_unknown_in_an_older_snapshot():
    broker = BrokerOffsets(True, {})
    assert source_view(source(), snapshot(), broker, NOW)["checksum_failures"] == 2
    older = {k: v for k, v in snapshot().items() if k != "checksum_failures"}
    view = source_view(source(), older, broker, NOW)
    assert view["checksum_failures"] is None
    assert "ticdc_lake_checksum_failures" not in prometheus_text([view])  # unknown, so absent rather than zero


def test_checksum_failure_pattern_matches_the_codecs_reasons():
    """The status collector counts quarantine reasons by this pattern (Spark RLIKE; Java and Python regex agree)."""
    pattern = re.compile(FAILURE_PATTERN)
    assert pattern.match("avro: row checksum mismatch: shop.t new image, expected 1, computed 2 (checksum version 1)")
    assert pattern.match("simple-json: row marked corrupted by TiCDC: shop.t (at checksum.corrupted)")
    assert not pattern.match("simple-json: cannot compute the row checksum of shop.t (new image): column 'a'")
    assert not pattern.match('canal-json: bad value "row checksum mismatch"')


def test_prometheus_text_has_every_number_once_per_metric_and_escapes_labels():
    views = [
        source_view(source(), snapshot(), BrokerOffsets(True, {("shop_cdc", 0): 12, ("shop_cdc", 1): 4}), NOW),
        source_view(
            SourceSettings(name="other", protocol="open", kafka=KafkaSettings("x:1"), topics=["t"]),
            None,
            BrokerOffsets(False),
            NOW,
        ),
    ]
    text = prometheus_text(views)
    lines = text.splitlines()
    assert 'ticdc_lake_status_recorded{source="shop"} 1' in lines
    assert 'ticdc_lake_status_recorded{source="other"} 0' in lines
    assert 'ticdc_lake_broker_up{source="other"} 0' in lines
    assert 'ticdc_lake_offset_lag{source="shop",topic="shop_cdc",partition="0"} 2' in lines
    assert 'ticdc_lake_lag_seconds{source="shop",layer="decoded"} 90.0' in lines
    assert 'ticdc_lake_quarantine_reason_messages{source="shop",reason="bad \\"json\\"\\nat 1"} 3' in lines
    assert 'ticdc_lake_gold_rows{source="shop",table="gold_shop.shop__orders"} 5' in lines
    assert 'ticdc_lake_tables_needing_snapshot{source="shop"} 1' in lines
    assert 'ticdc_lake_checksum_failures{source="shop"} 2' in lines
    assert 'ticdc_lake_last_run_task_success{source="shop",task="publish_gold"} 0' in lines
    assert 'ticdc_lake_last_run_task_seconds{source="shop",task="land"} 2.0' in lines
    assert 'ticdc_lake_reconciled_tables{source="shop",outcome="differs"} 1' in lines
    assert 'ticdc_lake_reconcile_mismatched_tables{source="shop"} 1' in lines
    assert f'ticdc_lake_reconciled_time_seconds{{source="shop"}} {(NOW - 5_000) / 1000}' in lines
    assert not any('layer="gold"' in line for line in lines)  # unknown, so absent rather than zero
    names = [line.split()[2] for line in lines if line.startswith("# TYPE")]
    assert len(names) == len(set(names))
    for name in names:  # each metric's samples follow its header, together
        block = [i for i, line in enumerate(lines) if line.startswith(name + "{")]
        assert block == list(range(block[0], block[0] + len(block)))


def test_high_watermarks_live_from_the_broker(broker):
    broker.create_topics(["status_live"], partitions=2)
    produce(broker.bootstrap, [Message("status_live", i % 2, None, b"x") for i in range(5)])
    offsets = high_watermarks(source(broker.bootstrap, ["status_live"]))
    assert offsets == BrokerOffsets(True, {("status_live", 0): 3, ("status_live", 1): 2})


def test_an_unreachable_broker_says_so_within_the_timeout():
    import time

    started = time.monotonic()
    assert high_watermarks(source("127.0.0.1:1"), timeout=1.0) == BrokerOffsets(False)
    assert time.monotonic() - started < 5
