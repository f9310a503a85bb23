"""Silver's invariants against real Spark and Iceberg tables, with every protocol landed from the
real broker: one logical stream gives the same row changes in all five protocols; redeliveries and
replays change nothing; rebuilding equals the incremental runs; nothing is lost
(landed = decoded + quarantined + waiting); bad messages wait in quarantine and replay once."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import random

import pytest

from spark_jobs.bronze.land import land_bronze
from spark_jobs.cli import main
from spark_jobs.gold.build import build_gold
from spark_jobs.runtime.iceberg import main_snapshot
from spark_jobs.runtime.tables import (
    BRONZE_MESSAGES,
    SILVER_DDL_EVENTS,
    SILVER_PENDING,
    SILVER_QUARANTINE,
    SILVER_ROW_CHANGES,
    SILVER_RUNS,
    SILVER_WATERMARKS,
)
from spark_jobs.silver.build import build_silver, rebuild_silver, replay_quarantine
from ticdc_devkit.broker import produce
from ticdc_devkit.registry import running_registry
from ticdc_devkit.simulator.model import (
    Bootstrap,
    Column,
    Ddl,
    Message,
    RowChange,
    Table,
    Watermark,
    expected_event,
    split_key_changing_updates,
)
from ticdc_devkit.simulator.stream import EXTENSION_OPTIONS, encode_stream
from ticdc_devkit.simulator.workload import create_table_sql

pytestmark = pytest.mark.e2e

PARTITIONS = 2
ITEMS = Table(
    "inv",
    "items",
    (
        Column("id", "int", nullable=False),
        Column("name", "varchar(32)"),
        Column("qty", "int"),
        Column("price", "double"),
        Column("status", "enum('new','paid','gone')"),
        Column("created", "datetime(3)"),
        Column("note", "text"),
    ),
    key=("id",),
    table_id=300,
    schema_version=1,
)


def tso(ms: int, logical: int = 0) -> int:
    return ((1_763_900_000_000 + ms) << 18) + logical


def logical_stream(rows: int = 30, seed: int = 7) -> list:
    """CREATE TABLE, a bootstrap (Simple only), inserts, updates (one changes the key), deletes, watermarks."""
    rng = random.Random(seed)
    cols = ", ".join(f"`{c.name}` {c.type}{'' if c.nullable else ' NOT NULL'}" for c in ITEMS.columns)
    events: list = [
        Ddl(
            tso(0),
            "inv",
            "items",
            f"CREATE TABLE `inv`.`items` ({cols}, PRIMARY KEY (`id`))",
            "create_table",
            table_after=ITEMS,
        ),
        Bootstrap(ITEMS),
    ]
    live: dict[int, dict] = {}
    ms = 10
    for i in range(1, rows + 1):
        row = {
            "id": i,
            "name": f"item {i} ✓",
            "qty": rng.randrange(-5, 500),
            "price": rng.choice([0.5, 1.25, 3.0, 1e-3]),
            "status": rng.choice(["new", "paid"]),
            "created": dt.datetime(2025, 11, 1, 8, 0, i % 60, 1000 * (i % 1000)),
            "note": None if i % 3 else "α" * i,
        }
        live[i] = row
        events.append(RowChange(tso(ms), "insert", ITEMS, after=row))
        ms += 1
        if i % 10 == 0:
            events.append(Watermark(tso(ms)))
            ms += 1
    for i in range(1, rows + 1, 4):
        before = live[i]
        live[i] = {**before, "qty": before["qty"] + 1, "status": "gone"}
        events.append(RowChange(tso(ms), "update", ITEMS, before=before, after=live[i]))
        ms += 1
    for i in range(2, rows + 1, 5):
        events.append(RowChange(tso(ms), "delete", ITEMS, before=live.pop(i)))
        ms += 1
    before = live.pop(3)
    live[1000] = {**before, "id": 1000}
    events.append(RowChange(tso(ms), "update", ITEMS, before=before, after=live[1000]))
    ms += 1
    events.append(Watermark(tso(ms)))
    return events


def publish(broker, protocol, events, topic, registry=None, options=None):
    broker.create_topics([topic], partitions=PARTITIONS)
    encoder_options = dict(EXTENSION_OPTIONS[protocol] if options is None else options)
    if registry:
        encoder_options["schema-registry-url"] = registry
    messages = encode_stream(protocol, events, topic=topic, partitions=PARTITIONS, options=encoder_options)
    produce(broker.bootstrap, messages)
    return messages


def land_and_decode(spark, config, name):
    landed = land_bronze(spark, config, name).records
    return landed, build_silver(spark, config, name)


def of_source(spark, table, source, columns, where="true"):
    """The columns of a table's rows of one source (`where`: a further condition of the test's)."""
    return spark.sql(
        f"SELECT {columns} FROM {table} WHERE source = :source AND ({where})", args={"source": source}
    ).collect()


def count_of(spark, table, source, column="*"):
    return of_source(spark, table, source, f"count({column})")[0][0]


def silver_rows(spark, source):
    rows = of_source(
        spark, SILVER_ROW_CHANGES, source, "database, `table`, op, commit_ts, row_key, before, after, flags"
    )
    return sorted(
        (
            r["database"],
            r["table"],
            r["op"],
            r["commit_ts"],
            r["row_key"],
            tuple(sorted((r["before"] or {}).items())) if r["before"] is not None else None,
            tuple(sorted((r["after"] or {}).items())) if r["after"] is not None else None,
        )
        for r in rows
    )


def expected_rows(events):
    """Row changes as a lossless protocol must give them (the simulator's canonical events)."""
    out = []
    for e in encode_split(events):
        x = expected_event(e)
        key = "[" + ",".join(f'"{x.after[k] if x.after else x.before[k]}"' for k in x.key_columns) + "]"
        out.append(
            (
                x.database,
                x.table,
                x.op,
                x.commit_ts,
                key,
                tuple(sorted(x.before.items())) if x.before is not None else None,
                tuple(sorted(x.after.items())) if x.after is not None else None,
            )
        )
    return sorted(out)


def encode_split(events):
    return [e for e in split_key_changing_updates(events) if isinstance(e, RowChange)]


def without_losses(rows, protocol):
    """Only the documented losses of each protocol are taken out (README, "what each costs")."""
    out = []
    for database, table, op, commit_ts, key, before, after in rows:
        if protocol == "avro":
            # Avro: updates carry no before image; deletes carry only the key and no commit ts
            before = None
            commit_ts = None if op == "delete" else commit_ts
        if protocol == "debezium":
            # Debezium does not carry the fractional digits of DATETIME: it sends milliseconds (3 digits)
            pass
        out.append((database, table, op, commit_ts, key, before, after))
    return sorted(out, key=repr)


def key_only_before(rows):
    return [r if r[2] != "delete" else r[:5] + (None, None) for r in rows]


@pytest.fixture(scope="module")
def registry():
    with running_registry() as url:  # a stand-in: the real Schema Registry is Java and cannot run here
        yield url


@pytest.fixture(scope="module")
def every_protocol(spark, broker, source_config, registry):
    """The same logical stream landed and decoded in each protocol: {protocol: (config, landed, result)}."""
    events = logical_stream()
    out = {}
    for protocol in EXTENSION_OPTIONS:
        name = "inv_" + protocol.replace("-", "_")
        reg = registry if protocol == "avro" else None
        publish(broker, protocol, events, name, registry=reg)
        config = source_config(name, protocol, registry=reg)
        landed, result = land_and_decode(spark, config, name)
        out[protocol] = (config, name, landed, result)
    return events, out


def test_every_protocol_gives_the_same_row_changes(spark, every_protocol):
    events, sources = every_protocol
    expected = expected_rows(events)
    for protocol, (_, name, _landed, result) in sources.items():
        got = silver_rows(spark, name)
        assert result.quarantined == 0 and result.waiting == 0, f"{protocol}: {result}"
        if protocol == "avro":
            assert key_only_before(without_losses(got, protocol)) == key_only_before(
                without_losses(expected, protocol)
            ), protocol
        else:
            assert got == expected, f"{protocol} silver rows differ from the logical stream"


def test_landed_equals_decoded_plus_quarantined_plus_waiting(spark, every_protocol):
    _, sources = every_protocol
    for protocol, (_, name, landed, _result) in sources.items():
        bronze = count_of(spark, BRONZE_MESSAGES, name)
        decoded = of_source(spark, SILVER_RUNS, name, "sum(decoded)")[0][0]
        quarantined = count_of(spark, SILVER_QUARANTINE, name)
        waiting = count_of(spark, SILVER_PENDING, name)
        assert bronze == landed == decoded + quarantined + waiting, protocol


def test_consistent_ts_is_the_last_watermark_and_ddl_is_once(spark, every_protocol):
    events, sources = every_protocol
    last = max(e.ts for e in events if isinstance(e, Watermark))
    for protocol, (_, name, _, result) in sources.items():
        if protocol == "avro":
            assert result.consistency == "landed"
            continue
        assert (result.consistent_ts, result.consistency) == (last, "watermark"), protocol
        ddl = of_source(spark, SILVER_DDL_EVENTS, name, "ddl_type, table_schema", "ddl_type <> 'bootstrap'")
        assert [d["ddl_type"] for d in ddl] == ["create_table"], protocol  # broadcast to every partition, stored once
        assert '"elements": ["new", "paid", "gone"]' in ddl[0]["table_schema"]


def test_running_again_changes_nothing_and_rebuild_equals_incremental(spark, broker, every_protocol):
    _, sources = every_protocol
    config, name, _, _ = sources["canal-json"]
    snapshots = {t: main_snapshot(spark, t) for t in (SILVER_ROW_CHANGES, SILVER_DDL_EVENTS, SILVER_WATERMARKS)}
    incremental = silver_rows(spark, name)
    again = build_silver(spark, config, name)
    assert again.messages == 0
    assert {t: main_snapshot(spark, t) for t in snapshots} == snapshots
    # a second batch decoded incrementally, then everything rebuilt from bronze
    extra = [
        RowChange(
            tso(90_000 + i),
            "insert",
            ITEMS,
            after={
                "id": 5000 + i,
                "name": "late",
                "qty": 1,
                "price": 2.5,
                "status": "new",
                "created": dt.datetime(2025, 11, 2),
                "note": None,
            },
        )
        for i in range(5)
    ] + [Watermark(tso(90_010))]
    publish(broker, "canal-json", extra, name)
    land_and_decode(spark, config, name)
    incremental = silver_rows(spark, name)
    assert len(incremental) == len(expected_rows(logical_stream())) + 5
    rebuilt = rebuild_silver(spark, config, name)
    assert silver_rows(spark, name) == incremental
    assert rebuilt.consistent_ts == tso(90_010)


def test_redeliveries_and_reordering_give_the_same_silver(spark, broker, source_config):
    """30% of the messages delivered again, later, on their partition (TiCDC is at least once)."""
    rng = random.Random(3)
    events = logical_stream(seed=11)
    clean = encode_stream(
        "canal-json", events, topic="inv_dirty", partitions=PARTITIONS, options=EXTENSION_OPTIONS["canal-json"]
    )
    dirty = list(clean)
    for m in rng.sample(clean, k=int(len(clean) * 0.3)):
        later = [i for i, d in enumerate(dirty) if d.partition == m.partition and d is not m]
        dirty.insert(rng.choice(later) + 1 if later else len(dirty), m)
    broker.create_topics(["inv_dirty"], partitions=PARTITIONS)
    produce(broker.bootstrap, dirty)
    config = source_config("inv_dirty")
    landed, _result = land_and_decode(spark, config, "inv_dirty")
    assert landed == len(dirty) > len(clean)
    assert silver_rows(spark, "inv_dirty") == expected_rows(events)
    ddl = count_of(spark, SILVER_DDL_EVENTS, "inv_dirty")
    assert ddl == 1


def test_a_watermark_going_backwards_does_not_move_the_consistent_ts_back(spark, broker, source_config):
    events = logical_stream(rows=5)
    last = max(e.ts for e in events if isinstance(e, Watermark))
    publish(broker, "canal-json", events, "inv_wm")
    config = source_config("inv_wm")
    assert land_and_decode(spark, config, "inv_wm")[1].consistent_ts == last
    publish(broker, "canal-json", [Watermark(last - 100)], "inv_wm")
    result = land_and_decode(spark, config, "inv_wm")[1]
    assert result.watermarks == PARTITIONS and result.consistent_ts == last


def test_simple_consumer_starting_mid_stream_catches_up_at_the_bootstrap(spark, broker, source_config):
    events = logical_stream(seed=5)
    rows_only = [e for e in events if not isinstance(e, (Ddl, Bootstrap))]
    publish(broker, "simple-json", rows_only, "inv_mid")
    config = source_config("inv_mid", "simple-json")
    _landed, first = land_and_decode(spark, config, "inv_mid")
    assert first.waiting == len([m for m in rows_only if isinstance(m, RowChange)]) + 1  # the key change is two rows
    assert silver_rows(spark, "inv_mid") == []
    publish(broker, "simple-json", [Bootstrap(ITEMS)], "inv_mid")
    _, second = land_and_decode(spark, config, "inv_mid")
    assert second.waiting == 0 and count_of(spark, SILVER_PENDING, "inv_mid") == 0
    assert silver_rows(spark, "inv_mid") == expected_rows(events)
    # rows that never get their schema go to quarantine once they waited too long
    publish(
        broker,
        "simple-json",
        [
            RowChange(
                tso(99_000),
                "insert",
                dataclasses.replace(ITEMS, schema_version=77),
                after={
                    "id": 9,
                    "name": "x",
                    "qty": 1,
                    "price": 1.0,
                    "status": "new",
                    "created": dt.datetime(2025, 1, 1),
                    "note": None,
                },
            )
        ],
        "inv_mid",
    )
    impatient = source_config("inv_mid", "simple-json", decoding={"max_wait_minutes": 0})
    _, third = land_and_decode(spark, impatient, "inv_mid")
    reasons = [r[0] for r in of_source(spark, SILVER_QUARANTINE, "inv_mid", "reason")]
    assert (
        third.quarantined == 1
        and len(reasons) == 1
        and "schema version 77" in reasons[0]
        and "still unknown after 0 minutes" in reasons[0]
    )


def test_periodic_simple_bootstraps_keep_the_ddl_history_the_size_of_the_real_one(spark, broker, source_config):
    """TiCDC repeats every table's bootstrap on every partition (every 120 s or 10,000 messages): silver keeps
    one DDL event per table and schema version, so the replay every gold run reads does not grow with time."""
    events = logical_stream(seed=9)
    publish(broker, "simple-json", events, "inv_boot")
    config = source_config("inv_boot", "simple-json")
    land_and_decode(spark, config, "inv_boot")
    recorded = count_of(spark, SILVER_DDL_EVENTS, "inv_boot")
    assert count_of(spark, SILVER_DDL_EVENTS, "inv_boot", "CASE WHEN ddl_type = 'bootstrap' THEN 1 END") == 1
    for _ in range(2):  # two runs, each after the periodic bootstrap came three times on every partition
        publish(broker, "simple-json", [Bootstrap(ITEMS)] * 3, "inv_boot")
        land_and_decode(spark, config, "inv_boot")
    assert count_of(spark, SILVER_DDL_EVENTS, "inv_boot") == recorded
    assert silver_rows(spark, "inv_boot") == expected_rows(events)


def test_a_simple_bootstrap_after_a_rename_is_the_renamed_table_not_a_new_one(spark, broker, source_config):
    """A rename leaves a table's schema version as it was, so the bootstrap TiCDC sends after it names the table
    as it is called now but is dated before the rename. Read in commit order, it announced a table of its own
    under the new name, and gold then had two tables for one name and stopped. The rename drops that one."""

    items = dataclasses.replace(ITEMS, schema_version=tso(0))
    goods = dataclasses.replace(items, name="goods")
    row = {"name": "a", "qty": 1, "price": 1.0, "status": "new", "created": dt.datetime(2025, 1, 1), "note": None}
    events = [
        Ddl(tso(0), "inv", "items", create_table_sql(items), "create_table", table_after=items),
        Bootstrap(items),
        RowChange(tso(1), "insert", items, after={"id": 1, **row}),
        Ddl(
            tso(3),
            "inv",
            "goods",
            "RENAME TABLE `inv`.`items` TO `inv`.`goods`",
            "rename_table",
            table_after=goods,
            table_before=items,
        ),
        Bootstrap(goods),
        RowChange(tso(4), "insert", goods, after={"id": 2, **row}),
        Watermark(tso(5)),
    ]
    publish(broker, "simple-json", events, "inv_renamed")
    config = source_config("inv_renamed", "simple-json")
    land_and_decode(spark, config, "inv_renamed")
    ddl = of_source(spark, SILVER_DDL_EVENTS, "inv_renamed", "commit_ts, `table`, ddl_type, table_uid")
    uids = {d["table_uid"] for d in ddl if d["ddl_type"] == "create_table"}
    announced = {d["table_uid"] for d in ddl if d["ddl_type"] == "bootstrap" and d["table"] == "goods"}
    assert len(uids) == 1 and len(announced) == 1 and announced != uids
    dropped = [(d["commit_ts"], d["table"], d["table_uid"]) for d in ddl if d["ddl_type"] == "drop_table"]
    assert dropped == [(tso(3), "goods", *announced)]
    result = build_gold(spark, config, "inv_renamed")
    assert result.tables == {"gold_inv_renamed.inv__goods": 2}


def test_a_delete_that_carries_only_its_key_does_not_shape_a_table_seen_in_rows(spark, broker, source_config):
    """With `delete-only-output-handle-key-columns` a delete holds its key columns alone, and nothing marks it. A
    table that existed before the changefeed is known from its rows' columns; when its first change is such a
    delete, that row must not make it a table of its key alone, which would leave every other column out of
    silver's schema and out of gold."""
    row = {"name": "a", "qty": 1, "price": 1.5, "status": "paid", "created": dt.datetime(2025, 1, 1), "note": "n"}
    events = [
        RowChange(tso(1), "delete", ITEMS, before={"id": 1, **row}),
        RowChange(tso(2), "insert", ITEMS, after={"id": 2, **row}),
        RowChange(tso(3), "update", ITEMS, before={"id": 2, **row}, after={"id": 2, **row, "qty": 7}),
        Watermark(tso(4)),
    ]
    options = {"enable-tidb-extension": True, "delete-only-output-handle-key-columns": True}
    messages = publish(broker, "canal-json", events, "inv_keys_only", options=options)
    assert any(b'"data":[{"id":"1"}]' in m.value for m in messages)  # the delete as TiCDC sends it
    config = source_config("inv_keys_only", "canal-json", options={"enable-tidb-extension": True})
    land_and_decode(spark, config, "inv_keys_only")
    ddl = of_source(spark, SILVER_DDL_EVENTS, "inv_keys_only", "ddl_type, table_schema")
    assert [d["ddl_type"] for d in ddl] == ["create_table"]
    assert [c["name"] for c in json.loads(ddl[0]["table_schema"])["columns"]] == [c.name for c in ITEMS.columns]
    result = build_gold(spark, config, "inv_keys_only")
    assert result.tables == {"gold_inv_keys_only.inv__items": 1}
    (gold,) = spark.table("gold_inv_keys_only.inv__items").collect()
    assert (gold["id"], gold["name"], gold["qty"], gold["price"], gold["note"]) == (2, "a", 7, 1.5, "n")


def test_bad_messages_go_to_quarantine_and_replay_once_after_a_fix(
    spark, broker, source_config, config_file, tmp_path, capsys
):
    good = encode_stream(
        "canal-json",
        logical_stream(rows=4),
        topic="inv_bad",
        partitions=1,
        options={**EXTENSION_OPTIONS["canal-json"], "large-message-handle-compression": "snappy"},
    )
    bad = [
        Message("inv_bad", 0, None, b'{"truncated": '),
        Message("inv_bad", 0, None, b"\x00\x00\x00\x00\x07" + b"\x02" * 20),
        Message("inv_bad", 0, None, b"\xff\xfe not snappy"),
    ]
    broker.create_topics(["inv_bad"], partitions=1)
    produce(broker.bootstrap, good[:3] + bad + good[3:])
    # the changefeed compresses with snappy, but the source was configured without it: everything is quarantined
    wrong = source_config("inv_bad")
    landed, first = land_and_decode(spark, wrong, "inv_bad")
    assert first.quarantined == landed and first.row_changes == 0
    reasons = {r[0] for r in of_source(spark, SILVER_QUARANTINE, "inv_bad", "reason")}
    assert all(r.startswith("canal-json: ") for r in reasons)
    fixed = source_config(
        "inv_bad", options={**EXTENSION_OPTIONS["canal-json"], "large-message-handle-compression": "snappy"}
    )
    replayed = replay_quarantine(spark, fixed, "inv_bad")
    assert replayed.decoded == len(good) and replayed.quarantined == len(bad)
    left = {(r[0], r[1]) for r in of_source(spark, SILVER_QUARANTINE, "inv_bad", "`offset`, reason")}
    assert {o for o, _ in left} == {3, 4, 5}
    assert any("corrupt snappy" in r for _, r in left)
    rows = silver_rows(spark, "inv_bad")
    assert rows == expected_rows(logical_stream(rows=4))
    replay_quarantine(spark, fixed, "inv_bad")
    assert silver_rows(spark, "inv_bad") == rows  # replaying again duplicates nothing

    # more messages, good and bad in one batch: the bad ones are quarantined, the rest goes through
    later = [
        RowChange(
            tso(70_000 + i),
            "insert",
            ITEMS,
            after={
                "id": 7000 + i,
                "name": "n",
                "qty": i,
                "price": 1.0,
                "status": "paid",
                "created": dt.datetime(2025, 3, 1),
                "note": None,
            },
        )
        for i in range(3)
    ]
    more = encode_stream(
        "canal-json",
        later,
        topic="inv_bad",
        partitions=1,
        options={**EXTENSION_OPTIONS["canal-json"], "large-message-handle-compression": "snappy"},
    )
    produce(broker.bootstrap, [more[0], Message("inv_bad", 0, None, more[1].value[:-7]), more[1], more[2]])
    _, mixed = land_and_decode(spark, fixed, "inv_bad")
    assert (mixed.decoded, mixed.quarantined, mixed.row_changes) == (3, 1, 3)
    assert {r[0] for r in of_source(spark, SILVER_QUARANTINE, "inv_bad", "`offset`")} == {
        3,
        4,
        5,
        14,
    }

    written = config_file(fixed, tmp_path / "quarantine.yaml")
    assert main(["quarantine", "list", "--source", "inv_bad", "--config", str(written)]) == 0
    listed = capsys.readouterr().out
    assert "inv_bad" in listed and "inv_bad[0]@14" in listed and "corrupt snappy" in listed


def test_an_avro_delete_sent_again_after_a_restart_does_not_delete_the_row_inserted_since(
    spark, broker, source_config, registry
):
    """An Avro delete carries no commit ts: silver places it just after the change before it on its partition.
    After a restart TiCDC sends a partition's recent messages again; a delete at the head of what it sends again
    must go where it went the first time, not after the changes that followed it, among them the insert of the
    same row again: gold would lose a row upstream has. A delete of the partition's own just before what is sent
    again stays where it is (the oracle's random workloads meet both: test_gold_oracle.py)."""
    base = {"name": "a", "qty": 1, "price": 1.0, "status": "new", "created": dt.datetime(2025, 1, 1), "note": None}
    events = [
        RowChange(tso(1), "insert", ITEMS, after={"id": 1, **base}),
        RowChange(tso(2), "insert", ITEMS, after={"id": 2, **base}),
        RowChange(tso(3), "delete", ITEMS, before={"id": 1, **base}),
        RowChange(tso(4), "update", ITEMS, before={"id": 2, **base}, after={"id": 2, **base, "qty": 2}),
        RowChange(tso(5), "insert", ITEMS, after={"id": 1, **base, "qty": 5}),
        RowChange(tso(6), "delete", ITEMS, before={"id": 2, **base, "qty": 2}),
    ]
    messages = publish(broker, "avro", events, "inv_avro_again", registry=registry)
    assert len({m.partition for m in messages}) == 1  # one table: one partition
    produce(broker.bootstrap, messages[2:5])  # sent again from the first delete on
    config = source_config("inv_avro_again", "avro", registry=registry)
    land_and_decode(spark, config, "inv_avro_again")
    changes = sorted(
        (r["row_key"], r["commit_ts"], r["op"])
        for r in of_source(spark, SILVER_ROW_CHANGES, "inv_avro_again", "commit_ts, op, row_key")
    )
    # the copy of the first delete took its place, and silver kept one of the two: row 1's newest change is its
    # insert again; the second delete, just before what was sent again, kept its own
    assert changes == [
        ('["1"]', tso(1), "insert"),
        ('["1"]', tso(2) + 1, "delete"),
        ('["1"]', tso(5), "insert"),
        ('["2"]', tso(2), "insert"),
        ('["2"]', tso(4), "update"),
        ('["2"]', tso(5) + 1, "delete"),
    ]


def test_an_avro_writer_schema_that_comes_back_in_one_run_is_a_change_too(spark, broker, source_config, registry):
    """A column added and dropped again within what one silver run decodes: the writer schema returns to the one
    the table had (the registry gives it its old id), and the drop is a change of schema as much as the add."""
    wider = dataclasses.replace(ITEMS, columns=ITEMS.columns + (Column("color", "varchar(8)"),))
    base = {"name": "a", "qty": 1, "price": 1.0, "status": "new", "created": dt.datetime(2025, 1, 1), "note": None}
    events = [
        RowChange(tso(1), "insert", ITEMS, after={"id": 1, **base}),
        RowChange(tso(2), "insert", wider, after={"id": 2, **base, "color": "red"}),
        RowChange(tso(3), "insert", ITEMS, after={"id": 3, **base}),
        RowChange(tso(4), "insert", ITEMS, after={"id": 4, **base}),
    ]
    publish(broker, "avro", events, "inv_avro_back", registry=registry)
    config = source_config("inv_avro_back", "avro", registry=registry)
    _, result = land_and_decode(spark, config, "inv_avro_back")
    assert result.decoded == 4
    ddl = sorted(
        of_source(spark, SILVER_DDL_EVENTS, "inv_avro_back", "ddl_type, ddl_sql, commit_ts, table_schema"),
        key=lambda d: d["commit_ts"],
    )
    assert [(d["ddl_type"], d["ddl_sql"], d["commit_ts"]) for d in ddl] == [
        ("create_table", "inferred from the Avro writer schema: table seen", tso(1) - 1),
        ("add_column", "inferred from the Avro writer schema: added color", tso(2) - 1),
        ("drop_column", "inferred from the Avro writer schema: dropped color", tso(3) - 1),
    ]
    assert "color" not in [c["name"] for c in json.loads(ddl[-1]["table_schema"])["columns"]]


def test_avro_writer_schema_change_becomes_an_inferred_ddl(spark, broker, source_config, registry):
    wider = dataclasses.replace(ITEMS, columns=ITEMS.columns + (Column("color", "varchar(8)"),))
    base = {"name": "a", "qty": 1, "price": 1.0, "status": "new", "created": dt.datetime(2025, 1, 1), "note": None}
    events = [
        RowChange(tso(1), "insert", ITEMS, after={"id": 1, **base}),
        RowChange(tso(2), "insert", wider, after={"id": 2, **base, "color": "red"}),
    ]
    messages = publish(broker, "avro", events, "inv_avro_ddl", registry=registry)
    unknown_id = Message(
        "inv_avro_ddl", messages[0].partition, messages[0].key, b"\x00\x00\x0f\x42\x3f" + messages[0].value[5:]
    )
    produce(broker.bootstrap, [unknown_id])
    config = source_config("inv_avro_ddl", "avro", registry=registry)
    _, result = land_and_decode(spark, config, "inv_avro_ddl")
    assert (result.decoded, result.quarantined) == (2, 1)
    reason = of_source(spark, SILVER_QUARANTINE, "inv_avro_ddl", "reason")[0][0]
    assert reason.startswith("avro: ") and "schema id 999999 not found" in reason
    ddl = sorted(
        of_source(spark, SILVER_DDL_EVENTS, "inv_avro_ddl", "ddl_type, ddl_sql, commit_ts, schema_origin"),
        key=lambda d: d["commit_ts"],
    )
    assert [(d["ddl_type"], d["schema_origin"]) for d in ddl] == [
        ("create_table", "inferred"),
        ("add_column", "inferred"),
    ]
    assert (
        ddl[1]["ddl_sql"] == "inferred from the Avro writer schema: added color" and ddl[1]["commit_ts"] == tso(2) - 1
    )
