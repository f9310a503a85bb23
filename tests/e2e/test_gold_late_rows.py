"""Late rows reach gold: a quarantined message replayed after gold published past its ts, a partition that
lags behind the one carrying the DDL, and a partition that landed after a gold build under `landed`
consistency each take their place in gold, and an older change never overwrites a newer one (README, "What
gold shows after each DDL")."""

from __future__ import annotations

import shutil

import pytest

from spark_jobs.bronze.land import land_bronze
from spark_jobs.gold import names
from spark_jobs.gold.build import build_gold
from spark_jobs.runtime.sql import quote_ident
from spark_jobs.runtime.tables import SILVER_QUARANTINE
from spark_jobs.silver.build import build_silver, replay_quarantine
from tests.e2e.test_gold_oracle import assert_gold_is_upstream
from tests.e2e.test_silver import of_source, tso
from ticdc_devkit.broker import produce
from ticdc_devkit.registry import running_registry
from ticdc_devkit.simulator.model import Column, Ddl, RowChange, Table, Watermark
from ticdc_devkit.simulator.stream import EXTENSION_OPTIONS, encode_stream
from ticdc_devkit.simulator.workload import Workload, create_table_sql, random_workload

pytestmark = pytest.mark.e2e

ITEMS = Table(
    "late",
    "items",
    (Column("id", "int", nullable=False), Column("note", "text")),
    key=("id",),
    table_id=700,
)
LARGE_MESSAGE_BYTES = 1024
BIG = "claim-checked " + "x" * 2 * LARGE_MESSAGE_BYTES  # a row this big travels in a claim-check file


def change(ms: int, op: str, key: int, before: str | None = None, after: str | None = None) -> RowChange:
    """A change of row `key` of ITEMS, its note before and after."""
    return RowChange(
        tso(ms),
        op,
        ITEMS,
        before={"id": key, "note": before} if op != "insert" else None,
        after={"id": key, "note": after} if op != "delete" else None,
    )


def late_stream() -> list:
    """Rows 1-3 and a watermark; then changes carrying BIG (sent through claim-check files) between changes
    that do not: row 1 is updated and deleted (big) before a newer insert, row 2's newest change is big,
    row 3 is updated and deleted (big), row 4 only ever big; a watermark past everything last."""
    return [
        Ddl(tso(10), "late", "items", create_table_sql(ITEMS), "create_table", table_after=ITEMS),
        change(20, "insert", 1, after="a"),
        change(30, "insert", 2, after="b"),
        change(40, "insert", 3, after="c"),
        Watermark(tso(45)),
        change(50, "update", 1, "a", BIG),
        change(55, "delete", 1, BIG),
        change(60, "insert", 1, after="reborn"),
        change(70, "insert", 4, after=BIG),
        change(80, "update", 2, "b", BIG),
        change(85, "update", 3, "c", BIG),
        change(90, "delete", 3, BIG),
        change(95, "insert", 5, after="e"),
        Watermark(tso(100)),
    ]


def claim_checked(event) -> bool:
    return isinstance(event, RowChange) and BIG in ((event.before or {}).get("note"), (event.after or {}).get("note"))


def gold_notes(spark, source: str) -> dict[int, str]:
    relation = f"{quote_ident(names.gold_namespace(source))}.{quote_ident(names.gold_table('late', 'items'))}"
    return {r["id"]: r["note"] for r in spark.table(relation).collect()}


def test_a_replayed_quarantined_message_lands_in_gold_without_overwriting_newer_changes(
    spark, broker, source_config, tmp_path
):
    """The claim-check files are not readable when silver first decodes (storage lagging behind Kafka): those
    messages go to quarantine and gold publishes past them; once the files are there, the replay brings them
    into gold."""
    source = "late_replay"
    events = late_stream()
    storage, withheld = tmp_path / "claim-checks", tmp_path / "not-yet-visible"
    encoder_options = {
        **EXTENSION_OPTIONS["canal-json"],
        "large-message-handle-option": "claim-check",
        "claim-check-storage-uri": str(storage),
        "large-message-threshold": LARGE_MESSAGE_BYTES,
    }
    messages = encode_stream("canal-json", events, topic=source, partitions=1, options=encoder_options)
    late = [e for e in events if claim_checked(e)]
    assert len(list(storage.iterdir())) == len(late) == 6
    shutil.move(storage, withheld)
    broker.create_topics([source], partitions=1)
    produce(broker.bootstrap, messages)
    config = source_config(source)

    land_bronze(spark, config, source)
    first = build_silver(spark, config, source)
    assert first.quarantined == len(late)
    assert all("claim-check file" in r[0] for r in of_source(spark, SILVER_QUARANTINE, source, "reason"))
    published = build_gold(spark, config, source)
    assert published.consistent_ts == tso(100)
    on_time = Workload(0, "canal-json", [e for e in events if not claim_checked(e)], [])
    assert_gold_is_upstream(spark, source, on_time, published.consistent_ts)
    assert gold_notes(spark, source) == {1: "reborn", 2: "b", 3: "c", 5: "e"}

    shutil.move(withheld, storage)
    replayed = replay_quarantine(spark, config, source)
    assert (replayed.decoded, replayed.quarantined) == (len(late), 0)
    after_replay = build_gold(spark, config, source)
    assert after_replay.consistent_ts == published.consistent_ts
    assert_gold_is_upstream(spark, source, Workload(0, "canal-json", events, []), after_replay.consistent_ts)
    # row 1's late update and delete are older than its insert in gold: they do not undo it; row 3's late delete
    # is its newest change: it is gone
    assert gold_notes(spark, source) == {1: "reborn", 2: BIG, 4: BIG, 5: "e"}


def test_rows_of_a_partition_behind_a_rename_reach_the_renamed_table(spark, broker, source_config):
    """Canal-JSON sends DDL to partition 0 and rows by table: `late`.`notes` (rows on partition 1) is renamed to
    `late`.`users` (partition 0). Partition 1 lags: its inserts, older than the RENAME, land in the run after
    the one that decoded the RENAME. They are rows of the renamed table, not of a table of the old name."""
    source = "late_behind_rename"
    notes = Table("late", "notes", ITEMS.columns, ITEMS.key, table_id=701)
    users = Table("late", "users", ITEMS.columns, ITEMS.key, table_id=701)
    events = [
        Ddl(tso(10), "late", "notes", create_table_sql(notes), "create_table", table_after=notes),
        Watermark(tso(15)),
        *(RowChange(tso(20 + i), "insert", notes, after={"id": i, "note": f"n{i}"}) for i in (1, 2, 3)),
        Ddl(
            tso(50),
            "late",
            "users",
            "RENAME TABLE `late`.`notes` TO `late`.`users`",
            "rename_table",
            table_after=users,
            table_before=notes,
        ),
        RowChange(tso(60), "update", users, before={"id": 2, "note": "n2"}, after={"id": 2, "note": "renamed"}),
        RowChange(tso(65), "insert", users, after={"id": 4, "note": "n4"}),
        Watermark(tso(70)),
    ]
    workload = Workload(0, "canal-json", events, [])
    messages = encode_stream("canal-json", events, topic=source, partitions=2, options=EXTENSION_OPTIONS["canal-json"])
    lagging = [m for m in messages if m.partition == 1]
    assert len(lagging) == 5  # the watermark at 15, the three inserts, the watermark at 70
    broker.create_topics([source], partitions=2)
    config = source_config(source)
    for batch in ([m for m in messages if m.partition == 0] + lagging[:1], lagging[1:]):
        produce(broker.bootstrap, batch)
        land_bronze(spark, config, source)
        build_silver(spark, config, source)
        result = build_gold(spark, config, source)
        assert result.consistent_ts is not None
        assert_gold_is_upstream(spark, source, workload, result.consistent_ts)
    assert result.consistent_ts == tso(70)


def test_a_partition_landed_after_a_gold_build_takes_its_place_under_landed_consistency(spark, broker, source_config):
    """Avro sends no watermarks: gold publishes what landed. Rows are dispatched by key, so both partitions hold
    changes of every table; partition 1 reaches Kafka only after gold was built from partition 0."""
    source = "late_partition"
    workload = random_workload(1, tables=2, changes=30, protocol="avro")
    with running_registry() as registry:
        options = {**EXTENSION_OPTIONS["avro"], "schema-registry-url": registry}
        messages = encode_stream(
            "avro", workload.events, topic=source, partitions=2, options=options, dispatch="index-value"
        )
        early = [m for m in messages if m.partition == 0]
        late = [m for m in messages if m.partition == 1]
        assert early and late
        broker.create_topics([source], partitions=2)
        config = source_config(source, "avro", registry=registry)

        produce(broker.bootstrap, early)
        land_bronze(spark, config, source)
        build_silver(spark, config, source)
        first = build_gold(spark, config, source)
        assert first.consistency == "landed" and first.consistent_ts is not None

        produce(broker.bootstrap, late)
        land_bronze(spark, config, source)
        build_silver(spark, config, source)
        second = build_gold(spark, config, source)
    assert second.consistent_ts >= first.consistent_ts
    assert_gold_is_upstream(spark, source, workload, second.consistent_ts)
