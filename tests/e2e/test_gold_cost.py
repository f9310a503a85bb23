"""Gold at the cost of what changed: a run builds, checks and commits only the tables it must change; every other
table is pinned, as it is, in the run's publication at the new consistent timestamp, and every table equals the
upstream database after every run. A run with only a watermark runs no dbt and commits to no gold table; a run with
nothing new writes nothing; a full check reads every table whole (README, "What a gold run costs"). The docs site
describes again only the tables a run built, and parses dbt's project only when its models change. A process
checks its bookkeeping tables once, not in every run."""

from __future__ import annotations

import contextlib
import json

import pytest

from spark_jobs.bronze.land import land_bronze
from spark_jobs.errors import DbtError
from spark_jobs.gold import docs as gold_docs
from spark_jobs.gold import models as gold_models
from spark_jobs.gold import names
from spark_jobs.gold.build import build_gold
from spark_jobs.gold.plan import SCHEMA_VERSIONS
from spark_jobs.gold.publish import latest_publication
from spark_jobs.runtime.iceberg import main_snapshot
from spark_jobs.runtime.jvm import java_items
from spark_jobs.runtime.tables import GOLD_PUBLICATIONS
from spark_jobs.runtime.tables import TABLES as BOOKKEEPING
from spark_jobs.silver.build import build_silver
from tests.e2e.test_gold_oracle import assert_gold_is_upstream
from tests.e2e.test_silver import tso
from ticdc_devkit.broker import produce
from ticdc_devkit.simulator.model import Column, Ddl, RowChange, Table, Watermark
from ticdc_devkit.simulator.stream import EXTENSION_OPTIONS, encode_stream
from ticdc_devkit.simulator.workload import Workload, create_table_sql

pytestmark = pytest.mark.e2e

SOURCE = "gold_cost"
TABLES = [
    Table("many", f"t{i}", (Column("id", "int", nullable=False), Column("n", "int")), ("id",), table_id=900 + i)
    for i in range(8)
]
TOUCHED = TABLES[2:4]


def insert(ms: int, table: Table, key: int, n: int) -> RowChange:
    return RowChange(tso(ms), "insert", table, after={"id": key, "n": n})


def first_run() -> list:
    events: list = [Ddl(tso(1), t.database, t.name, create_table_sql(t), "create_table", table_after=t) for t in TABLES]
    events += [insert(10 + i, t, key, key) for i, t in enumerate(TABLES) for key in range(3)]
    return [*events, Watermark(tso(100))]


def second_run() -> list:
    table = TOUCHED[0]
    return [
        RowChange(tso(200), "update", table, before={"id": 1, "n": 1}, after={"id": 1, "n": 10}),
        RowChange(tso(210), "delete", table, before={"id": 2, "n": 2}),
        insert(220, TOUCHED[1], 7, 7),
        Watermark(tso(300)),
    ]


def snapshots(spark) -> dict[str, int]:
    namespace = names.gold_namespace(SOURCE)
    return {
        relation: main_snapshot(spark, relation)
        for t in TABLES
        for relation in (
            f"{namespace}.{names.gold_table(t.database, t.name)}",
            f"{namespace}.{names.history_table(t.database, t.name)}",
        )
    }


def publications(spark) -> int:
    return spark.sql(f"SELECT count(*) FROM {GOLD_PUBLICATIONS} WHERE source = :s", args={"s": SOURCE}).collect()[0][0]


def carry(spark, broker, config, events: list, source: str = SOURCE):
    produce(
        broker.bootstrap,
        encode_stream("canal-json", events, topic=source, partitions=1, options=EXTENSION_OPTIONS["canal-json"]),
    )
    land_bronze(spark, config, source)
    build_silver(spark, config, source)
    return build_gold(spark, config, source)


def silver_files(spark) -> int:
    return spark.sql(f"SELECT count(*) FROM silver.row_changes.files WHERE partition.source = '{SOURCE}'").first()[0]


def scanned_files(frame) -> tuple[int, int]:
    """The data files a query's Iceberg scan read and skipped (the scan's metrics, after the query ran)."""
    frame.collect()
    for leaf in java_items(frame._jdf.queryExecution().executedPlan().collectLeaves()):
        metrics = leaf.metrics()
        if metrics.contains("resultDataFiles"):
            return metrics.apply("resultDataFiles").value(), metrics.apply("skippedDataFiles").value()
    raise AssertionError("the query has no Iceberg scan")


BOOKKEEPING_DDL = tuple(
    f"{verb} {t.name}"
    for tables in BOOKKEEPING.values()
    for t in tables
    for verb in ("CREATE TABLE IF NOT EXISTS", "SHOW TBLPROPERTIES")
)


@contextlib.contextmanager
def statements(monkeypatch):
    """The SQL statements the session runs in the block (dbt's, in-process, included)."""
    from pyspark.sql import SparkSession

    ran: list[str] = []
    real_sql = SparkSession.sql

    def recorded(self, query, *args, **kwargs):
        ran.append(" ".join(query.split()))
        return real_sql(self, query, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(SparkSession, "sql", recorded)
        yield ran


def replays_read(ran: list[str]) -> int:
    """How many of the statements read the source's schema versions (dbt's DDL replay)."""
    return sum(f"FROM {SCHEMA_VERSIONS} WHERE" in q for q in ran)


def test_a_run_builds_only_the_tables_that_changed(spark, broker, source_config, monkeypatch):
    """The first run counts as large (merges.RANGED_FROM_ROWS): silver writes it in ranges of tables, and what a
    model reads of it, one table's changes, skips the other tables' files; the second, small, is one file."""
    from spark_jobs.silver import merges

    monkeypatch.setattr(merges, "RANGED_FROM_ROWS", 3 * len(TABLES))
    broker.create_topics([SOURCE], partitions=1)
    config = source_config(SOURCE)
    events = first_run()
    first = carry(spark, broker, config, events)
    assert len(first.built) == 2 * len(TABLES)
    assert_gold_is_upstream(spark, SOURCE, Workload(0, "canal-json", events, []), tso(100))
    before = snapshots(spark)
    table = TOUCHED[0]
    changes = spark.table("silver.row_changes").where(
        f"source = '{SOURCE}' AND database = '{table.database}' AND `table` = '{table.name}'"
    )
    read, skipped = scanned_files(changes.select("row_key"))
    assert changes.count() == 3 and read == 1 and skipped == silver_files(spark) - 1 >= 3

    events += second_run()
    files = silver_files(spark)
    with statements(monkeypatch) as ran:
        second = carry(spark, broker, config, second_run())
    assert ran and not [q for q in ran if q.startswith(BOOKKEEPING_DDL)]  # the tables were ensured once, before
    assert not replays_read(ran)  # no DDL since the first run: the schema versions it read still hold
    assert silver_files(spark) == files + 1  # a small run: one file
    assert second.consistent_ts == tso(300)
    assert_gold_is_upstream(spark, SOURCE, Workload(0, "canal-json", events, []), tso(300))
    after = snapshots(spark)
    changed = {relation for relation in after if after[relation] != before[relation]}
    namespace = names.gold_namespace(SOURCE)
    touched = {
        f"{namespace}.{name}"
        for t in TOUCHED
        for name in (names.gold_table(t.database, t.name), names.history_table(t.database, t.name))
    }
    assert changed == touched == set(second.built)
    run_models = {
        path.stem
        for path in (gold_models.run_root(config.local_dir, SOURCE) / gold_models.GOLD_MODEL_PATH).rglob("*.sql")
    }
    assert run_models == {gold_models.checks_model(SOURCE)} | {
        names.model_name(SOURCE, t.database, t.name) + suffix for t in TOUCHED for suffix in ("", names.HISTORY_SUFFIX)
    }  # the run's dbt parsed only the models it built
    publication = latest_publication(spark, SOURCE)
    assert publication["consistent_ts"] == tso(300)
    assert {t["relation"]: t["snapshot_id"] for t in publication["tables"]} == after  # untouched: pinned as they were
    assert {t["relation"]: t["rows"] for t in publication["tables"] if "__history" not in t["relation"]} == {
        f"{namespace}.{names.gold_table(t.database, t.name)}": 2 if t is TOUCHED[0] else 4 if t is TOUCHED[1] else 3
        for t in TABLES
    }

    events.append(Watermark(tso(400)))
    published = publications(spark)
    third = carry(spark, broker, config, [Watermark(tso(400))])  # only the consistent ts moves: no table changes
    assert third.consistent_ts == tso(400) and third.built == []
    assert snapshots(spark) == after and publications(spark) == published + 1
    assert latest_publication(spark, SOURCE)["consistent_ts"] == tso(400)
    assert_gold_is_upstream(spark, SOURCE, Workload(0, "canal-json", events, []), tso(400))

    again = build_gold(spark, config, SOURCE)  # nothing new at all: nothing is written
    assert again.built == [] and again.consistent_ts == tso(400) and publications(spark) == published + 1
    assert again.needing_snapshot == []

    # a DDL that changed rows TiCDC does not send: every later run names the table, whether it plans or not
    partitioned = TABLES[5]
    sql = f"ALTER TABLE `{partitioned.database}`.`{partitioned.name}` TRUNCATE PARTITION p0"
    truncated = Ddl(
        tso(500), "many", "t5", sql, "truncate_partition", table_after=partitioned, table_before=partitioned
    )
    with statements(monkeypatch) as ran:
        fourth = carry(spark, broker, config, [truncated, Watermark(tso(600))])
    assert fourth.needing_snapshot == ["many.t5"] and replays_read(ran) == 1  # a DDL: the replay is read again
    fifth = carry(spark, broker, config, [Watermark(tso(700))])
    assert fifth.built == [] and fifth.needing_snapshot == ["many.t5"]
    assert build_gold(spark, config, SOURCE).needing_snapshot == ["many.t5"]

    untouched = f"{namespace}.{names.gold_table(TABLES[0].database, TABLES[0].name)}"
    spark.sql(f"INSERT INTO {untouched} SELECT * FROM {untouched} WHERE id = 0")  # a duplicate no run wrote
    with pytest.raises(DbtError, match="gold_run_checks"):
        build_gold(spark, config, SOURCE, full_check=True)  # a full check reads every table whole


def test_the_docs_site_runs_dbt_only_when_the_models_change(spark, broker, source_config, monkeypatch):
    source = "gold_docs_cost"
    broker.create_topics([source], partitions=1)
    config = source_config(source)
    target = config.local_dir / "dbt" / "target"
    commands: list[str] = []
    real_run_dbt = gold_docs.run_dbt
    monkeypatch.setattr(
        gold_docs, "run_dbt", lambda args, *a, **k: commands.append(args[0]) or real_run_dbt(args, *a, **k)
    )

    def docs(built: list[str]) -> tuple[dict, dict]:
        commands.clear()
        gold_docs.generate_docs(spark, config, source, built)
        return json.loads((target / "manifest.json").read_text()), json.loads((target / "catalog.json").read_text())

    def rows(catalog: dict, table: Table) -> int:
        return catalog["nodes"][f"model.ticdc_lakehouse.{names.model_name(source, table.database, table.name)}"][
            "stats"
        ]["rows"]["value"]

    first, second, new = TABLES[:3]
    creates = [
        Ddl(tso(1), t.database, t.name, create_table_sql(t), "create_table", table_after=t) for t in (first, second)
    ]
    built = carry(
        spark,
        broker,
        config,
        [*creates, insert(10, first, 1, 1), insert(11, second, 1, 1), Watermark(tso(100))],
        source,
    ).built
    manifest, catalog = docs(built)
    assert commands == ["parse", "docs"]  # the project's models are new: dbt writes the manifest and the site
    assert rows(catalog, first) == 1 and rows(catalog, second) == 1
    written = (target / "manifest.json").stat().st_mtime_ns

    built = carry(spark, broker, config, [insert(200, first, 2, 2), Watermark(tso(300))], source).built
    manifest, catalog = docs(built)
    assert commands == []  # only rows changed: no dbt command, the manifest as it was, the built table described again
    assert (target / "manifest.json").stat().st_mtime_ns == written
    assert rows(catalog, first) == 2 and rows(catalog, second) == 1

    create = Ddl(tso(400), new.database, new.name, create_table_sql(new), "create_table", table_after=new)
    built = carry(spark, broker, config, [create, insert(410, new, 1, 1), Watermark(tso(500))], source).built
    manifest, catalog = docs(built)
    assert commands == ["parse", "docs"]  # a new table is a new model: the manifest is written again
    assert f"model.ticdc_lakehouse.{names.model_name(source, new.database, new.name)}" in manifest["nodes"]
    assert rows(catalog, new) == 1 and rows(catalog, first) == 2


def test_a_run_evaluates_interpreted_below_its_size_and_gold_is_the_same_either_way(
    spark, broker, source_config, monkeypatch
):
    """A run of a few rows evaluates Spark's expressions interpreted (compiling each new query's code costs more
    there); above the size, compiled. Gold equals upstream both ways, and the session's setting is restored."""
    from spark_jobs.gold import build as gold_build
    from spark_jobs.runtime import spark_session
    from spark_jobs.silver import build as silver_build

    source = "gold_cost_interpreted"
    broker.create_topics([source], partitions=1)
    config = source_config(source)
    modes: list[tuple[str, str | None]] = []

    def seen(step: str, real):
        def run(*args, **kwargs):
            modes.append((step, spark.conf.get("spark.sql.codegen.factoryMode", None)))
            return real(*args, **kwargs)

        return run

    def each_run(events: list) -> tuple[str | None, str | None]:
        """The run's silver and gold (its models and checks, not the views) modes; gold equals upstream after it."""
        modes.clear()
        carry(spark, broker, config, events, source)
        history.extend(events)
        assert_gold_is_upstream(spark, source, Workload(0, "canal-json", history, []), events[-1].ts)
        assert spark.conf.get("spark.sql.codegen.factoryMode", None) is None  # restored after each step
        return modes[0][1], modes[-1][1]

    monkeypatch.setattr(gold_build, "run_dbt", seen("gold", gold_build.run_dbt))
    monkeypatch.setattr(silver_build, "decode_and_write", seen("silver", silver_build.decode_and_write))
    tables = TABLES[:2]
    history: list = []
    creates = [Ddl(tso(1), t.database, t.name, create_table_sql(t), "create_table", table_after=t) for t in tables]
    first = [*creates, *(insert(10 + k, t, k, k) for t in tables for k in range(3)), Watermark(tso(100))]
    assert each_run(first) == ("NO_CODEGEN", "NO_CODEGEN")  # built whole: silver holds 6 rows
    second = [
        RowChange(tso(200), "update", tables[0], before={"id": 1, "n": 1}, after={"id": 1, "n": 10}),
        RowChange(tso(210), "delete", tables[1], before={"id": 2, "n": 2}),
        Watermark(tso(300)),
    ]
    assert each_run(second) == ("NO_CODEGEN", "NO_CODEGEN")  # 2 changes into tables of 3 rows
    monkeypatch.setattr(spark_session, "INTERPRETED_BELOW_ROWS", 0)  # every run is above the size
    third = [
        RowChange(tso(400), "update", tables[1], before={"id": 0, "n": 0}, after={"id": 0, "n": 5}),
        insert(410, tables[0], 9, 9),
        Watermark(tso(500)),
    ]
    assert each_run(third) == (None, None)


def test_a_new_source_parses_only_its_own_models(pipeline_config, tmp_path):
    """Every dbt project of a lakehouse is made of links to the checkout's files and its own gold models, so a
    source's first run starts from the lakehouse's first parse: dbt parses its few models, not the whole project
    (3 to 4 s a source). Nothing is written into the checkout. A command with vars (the freshness check), which
    makes dbt parse whole, runs in a project of its own and leaves the docs site's parse alone. Parse only: no table is
    built."""
    import dataclasses

    from spark_jobs.gold.build import run_dbt

    config = dataclasses.replace(
        pipeline_config, runtime=dataclasses.replace(pipeline_config.runtime, local_dir=str(tmp_path / "lake"))
    )
    columns = [{"id": 1, "name": "id", "type": "int", "nullable": False}]

    def first_parse(source: str) -> dict:
        model = gold_models.GoldModel(source, "a1", "shop", "orders", columns, ["id"])
        gold_models.write_run_models(config.local_dir, source, [model])
        run_dbt(["parse"], config, source, for_run=True)
        root = gold_models.run_root(config.local_dir, source)
        return json.loads((root / "target" / "perf_info.json").read_text())

    whole = first_parse("seeding")  # the lakehouse's first parse: the whole project
    own = first_parse("seeded")
    generated = len(list((gold_models.run_root(config.local_dir, "seeded") / gold_models.GOLD_MODEL_PATH).rglob("*.*")))
    assert generated == 4  # current state, history, checks, YAML
    assert whole["parsed_path_count"] > 50
    assert 0 < own["parsed_path_count"] <= generated
    assert own["path_count"] == whole["path_count"]  # the same project, less the other source's models
    assert not (gold_models.DBT_PROJECT / gold_models.GOLD_MODEL_PATH).exists()

    def docs_parse() -> dict:
        run_dbt(["parse"], config, "seeded")
        return json.loads((config.local_dir / "dbt" / "target" / "perf_info.json").read_text())

    docs_parse()
    run_dbt(["parse"], config, "seeded", {"freshness_warn_minutes": 1})  # vars: a project of its own
    assert docs_parse()["parsed_path_count"] == 0  # the docs site's project still holds its parse
