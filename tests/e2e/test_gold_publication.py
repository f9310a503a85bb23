"""One consistent publication per source: every gold and history table pinned to one snapshot at the run's
consistent timestamp, the publication row written last, and a reader of the newest publication's snapshots sees
all tables at that one timestamp while later runs commit; as-of from history (the CLI's function) gives a table's
rows at any earlier moment."""

from __future__ import annotations

import datetime as dt
import threading

import pytest

from spark_jobs.bronze.land import land_bronze
from spark_jobs.canonical.values import canonical_type
from spark_jobs.cli import main
from spark_jobs.errors import DbtError
from spark_jobs.gold import names
from spark_jobs.gold.build import build_gold, run_dbt
from spark_jobs.gold.history import as_of
from spark_jobs.gold.publish import latest_publication, read_published, tag_name
from spark_jobs.runtime.iceberg import main_snapshot
from spark_jobs.silver.build import build_silver
from tests.e2e.test_silver import tso
from ticdc_devkit.broker import produce
from ticdc_devkit.gold_check import oracle_state, rows_state
from ticdc_devkit.simulator.model import Column, Ddl, RowChange, Table, Watermark
from ticdc_devkit.simulator.oracle import upstream_state
from ticdc_devkit.simulator.stream import EXTENSION_OPTIONS, encode_stream
from ticdc_devkit.simulator.workload import create_table_sql

pytestmark = pytest.mark.e2e

SOURCE = "published"
COLUMNS = (Column("id", "int", nullable=False), Column("n", "int"))
ORDERS = Table("pub", "orders", COLUMNS, ("id",), table_id=801)
ITEMS = Table("pub", "items", COLUMNS, ("id",), table_id=802)
RUNS = 4


def run_events(run: int) -> list:
    """Run `run`'s changes: both tables get a new row and every earlier row an update, then a watermark."""
    ms = 1000 * (run + 1)
    events: list = []
    if run == 0:
        events += [
            Ddl(tso(ms), "pub", t.name, create_table_sql(t), "create_table", table_after=t) for t in (ORDERS, ITEMS)
        ]
    for i, table in enumerate((ORDERS, ITEMS)):
        for key in range(run):
            events.append(
                RowChange(
                    tso(ms + 10 + key, i),
                    "update",
                    table,
                    before={"id": key, "n": run - 1},
                    after={"id": key, "n": run},
                )
            )
        events.append(RowChange(tso(ms + 100, i), "insert", table, after={"id": run, "n": run}))
    events.append(Watermark(tso(ms + 500)))
    return events


def state_of(rows) -> dict:
    columns = [(c.name, canonical_type(c.type)) for c in COLUMNS]
    return rows_state(rows, columns)


def test_readers_of_the_newest_publication_see_every_table_at_one_timestamp(
    spark, broker, source_config, config_file, tmp_path, capsys
):
    broker.create_topics([SOURCE], partitions=1)
    config = source_config(SOURCE)
    relations = {t: f"{names.gold_namespace(SOURCE)}.{names.gold_table('pub', t.name)}" for t in (ORDERS, ITEMS)}
    events: list = []
    seen: dict[int, int] = {}
    problems: list[str] = []
    stop = threading.Event()

    def read_publications() -> None:
        """Read both tables at the newest publication's snapshots, over and over, while runs commit."""
        while not stop.wait(0.5):
            try:
                read_newest()
            except Exception as exc:  # a reader that fails says why, rather than seeing nothing
                problems.append(f"{type(exc).__name__}: {exc}")
                return

    def read_newest() -> None:
        publication = latest_publication(spark, SOURCE)
        if publication is None:
            return
        ts = publication["consistent_ts"]
        expected = upstream_state(list(events), as_of=ts)
        for table, relation in relations.items():
            got = state_of(read_published(spark, relation, publication).collect())
            want = oracle_state(expected.get(("pub", table.name), {}), [(c.name, c.type) for c in COLUMNS])
            if got != want:
                problems.append(f"{relation} at publication {ts}: {got} != {want}")
        seen[ts] = seen.get(ts, 0) + 1

    reader = threading.Thread(target=read_publications, daemon=True)
    reader.start()
    try:
        for run in range(RUNS):
            batch = run_events(run)
            events.extend(batch)
            produce(
                broker.bootstrap,
                encode_stream("canal-json", batch, topic=SOURCE, options=EXTENSION_OPTIONS["canal-json"]),
            )
            land_bronze(spark, config, SOURCE)
            build_silver(spark, config, SOURCE)
            result = build_gold(spark, config, SOURCE)
            assert result.publication == tag_name(result.consistent_ts)
            publication = latest_publication(spark, SOURCE)
            assert publication["consistent_ts"] == result.consistent_ts == tso(1000 * (run + 1) + 500)
            published = {t["relation"]: t for t in publication["tables"]}
            assert set(published) == {
                r for relation in relations.values() for r in (relation, relation + names.HISTORY_SUFFIX)
            }
            for table in published.values():  # both tables change every run: pinned to what the run committed
                assert table["snapshot_id"] == main_snapshot(spark, table["relation"]), table
            assert published[relations[ORDERS]]["rows"] == run + 1
    finally:
        stop.set()
        reader.join(timeout=120)
    assert not problems, problems[:3]
    assert len(seen) >= 2, f"the reader saw too few publications to mean anything: {seen}"

    # every earlier moment, from history: each run's watermark, and just before each run's insert
    for run in range(RUNS):
        for moment in (tso(1000 * (run + 1) + 500), tso(1000 * (run + 1) + 100) - 1):
            expected = upstream_state(events, as_of=moment)
            for table in (ORDERS, ITEMS):
                got = state_of(as_of(spark, SOURCE, "pub", table.name, moment, keep_row_key=True).collect())
                want = oracle_state(expected.get(("pub", table.name), {}), [(c.name, c.type) for c in COLUMNS])
                assert got == want, f"pub.{table.name} as of {moment}"
    with pytest.raises(ValueError, match="later than source published's consistent ts"):
        as_of(spark, SOURCE, "pub", "orders", tso(1000 * RUNS + 501))

    # a dbt model reads the publication's snapshot with the `published` macro, whatever committed since
    orders = relations[ORDERS]
    spark.sql(f"INSERT INTO {orders} SELECT * FROM {orders} WHERE id = 0")  # a commit no publication names
    shown = run_dbt(
        ["show", "--inline", f"select count(*) as n from {{{{ published('{orders}', '{SOURCE}') }}}}"], config, SOURCE
    )
    assert [tuple(r) for r in shown.results[0].agate_table.rows] == [(RUNS,)]
    assert spark.table(orders).count() == RUNS + 1
    with pytest.raises(DbtError, match=r"pins no snapshot of gold_published\.none"):
        run_dbt(
            ["show", "--inline", f"select 1 from {{{{ published('gold_published.none', '{SOURCE}') }}}}"],
            config,
            SOURCE,
        )

    path = str(config_file(config, tmp_path / "pipeline.yaml"))
    capsys.readouterr()
    assert (
        main(["as-of", "--source", SOURCE, "--table", "pub.orders", "--ts", str(tso(2100) - 1), "--config", path]) == 0
    )
    assert capsys.readouterr().out.splitlines()[-1] == f"pub.orders as of TiDB ts {tso(2100) - 1}: 1 rows"
    at = (dt.datetime(2025, 11, 23, 12, 13, 20, tzinfo=dt.UTC) + dt.timedelta(milliseconds=3100)).isoformat()
    assert main(["as-of", "--source", SOURCE, "--table", "pub.items", "--time", at, "--config", path]) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith(": 3 rows")
    assert main(["as-of", "--source", SOURCE, "--table", "pub.nothing", "--ts", "1", "--config", path]) == 2
    assert "has no history table for pub.nothing" in capsys.readouterr().err
