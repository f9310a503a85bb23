"""Delete modes on the real broker, Spark, Iceberg and dbt (README, "How deletes land"): three tables get the
same changes, one per mode, over two runs: a delete alone in its commit, a key change (TiCDC sends it as a
delete and an insert of one commit), a delete in the commit of another row's insert, a deleted key inserted again,
and a delete of a row that an earlier run published (the merge then has no values for it). The run's dbt checks
pass in every mode, and a changed mode rebuilds that gold table alone. Random modes run in the gold oracle too.
"""

from __future__ import annotations

import pytest

from spark_jobs.config import GoldSettings
from spark_jobs.gold import names
from spark_jobs.gold.build import build_gold
from spark_jobs.gold.publish import read_state, tidb_time
from spark_jobs.runtime.sql import quote_ident
from tests.e2e.streams import publish_stream
from tests.e2e.test_silver import tso
from ticdc_devkit.simulator.model import Column, Ddl, RowChange, Table, Watermark
from ticdc_devkit.simulator.workload import create_table_sql

pytestmark = pytest.mark.e2e

SOURCE = "deletes"
MODES = ("hard", "soft", "ignore")
TABLES = {
    mode: Table("del", f"t_{mode}", (Column("id", "int", nullable=False), Column("v", "varchar(16)")), ("id",), 800 + i)
    for i, mode in enumerate(MODES)
}
GOLD = GoldSettings(deletes="hard", table_deletes={"del.t_soft": "soft", "del.t_ig*": "ignore"})


def _changes(ms: int, *changes: tuple) -> list[RowChange]:
    """One commit at `ms` of the same changes to every table: (op, key before, value before, key after, value after)."""
    out = []
    for table in TABLES.values():
        for op, k0, v0, k1, v1 in changes:
            before = {"id": k0, "v": v0} if k0 is not None else None
            after = {"id": k1, "v": v1} if k1 is not None else None
            out.append(RowChange(tso(ms), op, table, before=before, after=after))
    return out


def _runs() -> list[list]:
    creates = [
        Ddl(tso(10 + i), "del", t.name, create_table_sql(t), "create_table", table_after=t)
        for i, t in enumerate(TABLES.values())
    ]
    first = [  # the first build: every change of the table read at once
        *creates,
        *_changes(20, *(("insert", None, None, k, v) for k, v in [(1, "a"), (2, "b"), (3, "c"), (4, "d")])),
        *_changes(50, ("delete", 1, "a", None, None)),  # alone in its commit
        *_changes(60, ("update", 2, "b", 20, "b")),  # a key change: TiCDC splits it
        *_changes(70, ("delete", 3, "c", None, None), ("insert", None, None, 5, "e")),  # in an insert's commit
        Watermark(tso(100)),
    ]
    second = [  # an incremental run: a merge into what the first published
        *_changes(110, ("insert", None, None, 1, "again")),  # a deleted key inserted again
        *_changes(120, ("update", 4, "d", 4, "d2")),
        *_changes(130, ("delete", 4, "d2", None, None)),  # its last values come in the same run
        *_changes(140, ("delete", 20, "b", None, None)),  # its last values are in gold only
        Watermark(tso(150)),
    ]
    return [first, second]


def _gold(spark, mode: str) -> dict[int, tuple]:
    """{id: (v, _op, _deleted_at)} of a table's gold rows (`_deleted_at` None where the table has none)."""
    relation = f"{quote_ident(names.gold_namespace(SOURCE))}.{quote_ident(names.gold_table('del', f't_{mode}'))}"
    rows = spark.table(relation).collect()
    return {r["id"]: (r["v"], r["_op"], r.asDict().get("_deleted_at")) for r in rows}


def _deleted(ms: int):
    return tidb_time(tso(ms)).replace(tzinfo=None)


def test_each_delete_mode_lands_deletes_as_it_says_and_a_changed_mode_rebuilds_gold_alone(spark, broker, source_config):
    broker.create_topics([SOURCE], partitions=1)
    config = source_config(SOURCE, gold=GOLD)
    for i, events in enumerate(_runs()):
        publish_stream(spark, broker, config, SOURCE, events)  # with dbt's checks, which know each mode
        if i == 0:
            assert _gold(spark, "hard") == {
                20: ("b", "insert", None),
                4: ("d", "insert", None),
                5: ("e", "insert", None),
            }
            assert _gold(spark, "soft") == _gold(spark, "hard") | {
                1: ("a", "delete", _deleted(50)),
                2: ("b", "delete", _deleted(60)),
                3: ("c", "delete", _deleted(70)),
            }
            assert _gold(spark, "ignore") == _gold(spark, "hard") | {1: ("a", "insert", None)}

    live = {1: ("again", "insert", None), 5: ("e", "insert", None)}
    assert _gold(spark, "hard") == live
    assert _gold(spark, "soft") == live | {
        2: ("b", "delete", _deleted(60)),
        3: ("c", "delete", _deleted(70)),
        4: ("d2", "delete", _deleted(130)),
        20: ("b", "delete", _deleted(140)),
    }
    # the delete of 3 shares its commit with the insert of 5: read as a key change (README, "How deletes land")
    assert _gold(spark, "ignore") == live | {4: ("d2", "update", None), 20: ("b", "insert", None)}
    state = {t.upstream_table: t for t in read_state(spark, SOURCE)}
    assert {name: t.delete_mode for name, t in state.items()} == {f"t_{m}": m for m in MODES}

    hard = source_config(SOURCE, gold=GoldSettings(table_deletes={"del.t_ignore": "ignore"}))
    result = build_gold(spark, hard, SOURCE)
    assert result.consistent_ts == tso(150)
    assert _gold(spark, "soft") == live, "soft to hard: the deleted rows go"
    after = {t.upstream_table: t for t in read_state(spark, SOURCE)}
    assert after["t_soft"].delete_mode == "hard"
    assert after["t_soft"].gold_snapshot_id != state["t_soft"].gold_snapshot_id
    assert after["t_soft"].history_snapshot_id == state["t_soft"].history_snapshot_id, (
        "history is the same in every mode"
    )
    assert {n: t.gold_snapshot_id for n, t in after.items() if n != "t_soft"} == {
        n: t.gold_snapshot_id for n, t in state.items() if n != "t_soft"
    }, "a table whose mode stayed is not built"
