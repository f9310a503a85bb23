"""A snapshot load survives a kill: `ticdc-lake backfill snapshot` killed with SIGKILL at random moments, KILLS
times, while an ingest run in between refuses to publish a half-loaded source (the changefeed's messages come
after the kills, so those runs publish nothing either way); then one load to completion and one ingest run: silver holds each exported row once, the load is recorded once as finished, and gold and history
equal the upstream database.
"""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from spark_jobs.config import load_config
from spark_jobs.runtime.spark_session import get_spark
from spark_jobs.runtime.tables import SILVER_ROW_CHANGES, SILVER_SNAPSHOT_LOADS
from tests.e2e.kill import BIN, KILLS, Moments, check_in_own_process, own_runtime, run, stderr_shows
from tests.e2e.test_gold_oracle import assert_gold_is_upstream, assert_history_is_upstream
from tests.e2e.test_snapshot_load import cut
from ticdc_devkit.broker import produce
from ticdc_devkit.dumpling_export import write_export
from ticdc_devkit.simulator.model import Ddl, RowChange, Watermark
from ticdc_devkit.simulator.oracle import upstream_schemas, upstream_state
from ticdc_devkit.simulator.stream import EXTENSION_OPTIONS, encode_stream
from ticdc_devkit.simulator.workload import random_workload

pytestmark = [pytest.mark.e2e, pytest.mark.long]

SOURCE, SEED = "killed_snapshot", 20261126
LOAD_WINDOW_SECONDS = 8.0  # shorter than a load takes here once its session is ready: most runs die mid-load
WRITE_WINDOW_SECONDS = 3.0  # shorter than writing silver takes here


def kill_workload():
    return random_workload(SEED, tables=3, changes=80, preexisting=1, protocol="canal-json")


def test_a_snapshot_load_killed_at_random_moments_then_rerun_loads_it_once(
    broker, source_config, config_file, tmp_path
):
    rng = random.Random(SEED)
    workload = kill_workload()
    tso, first = cut(workload)
    tables = upstream_schemas(workload.events, as_of=tso, preexisting=workload.preexisting)
    rows = upstream_state(workload.events, as_of=tso, preexisting=workload.preexisting)
    formats = dict(zip(sorted(tables), [("sql", "gzip"), ("csv", "zstd"), ("sql", None)], strict=False))
    export = write_export(tmp_path / "export", tso, tables, rows, formats, rows_per_file=3)
    runtime = own_runtime(tmp_path / "lake")
    config_path = config_file(source_config(SOURCE, "canal-json", runtime=runtime), tmp_path / "pipeline.yaml")
    broker.create_topics([SOURCE], partitions=1)
    on_source = ["--source", SOURCE, "--config", str(config_path)]
    load = ["backfill", "snapshot", *on_source, "--from", str(export)]
    outcomes = []
    write_moments = Moments(rng, KILLS, WRITE_WINDOW_SECONDS)
    load_moments = Moments(rng, KILLS, LOAD_WINDOW_SECONDS)
    for i in range(KILLS):
        log = tmp_path / f"load-{i}.log"
        # even kills come once the load has recorded its start (while it writes silver), odd ones anywhere
        # from its start (listing and reading the export, before anything is written)
        if i % 2 == 0:
            began = stderr_shows(log, "writing the snapshot into silver")
        else:
            began = stderr_shows(log, "spark session ready")
        outcomes.append(run(load, log, began, write_moments if i % 2 == 0 else load_moments))
        if outcomes[-1] == "finished":
            break  # loaded: every later load would find it done
        if i % 4 == 0:
            ingest = subprocess.run(
                [str(BIN / "ticdc-lake"), "run", *on_source], capture_output=True, text=True, start_new_session=True
            )
            assert ingest.returncode == 2, f"an ingest run published a half-loaded source: {ingest.stderr[-3000:]}"
            assert "did not finish; run `ticdc-lake backfill snapshot" in ingest.stderr, ingest.stderr[-3000:]
    assert outcomes.count("killed") >= min(KILLS, 4), f"too few loads were killed to mean anything: {outcomes}"
    streamed = [e for e in workload.events if isinstance(e, RowChange | Ddl) and e.commit_ts >= first]
    produce(
        broker.bootstrap,
        encode_stream(
            "canal-json",
            [*streamed, Watermark(workload.consistent_ts)],
            topic=SOURCE,
            options=EXTENSION_OPTIONS["canal-json"],
        ),
    )
    assert run(load, tmp_path / "reload.log") == "finished"
    assert run(["run", *on_source], tmp_path / "run.log") == "finished"
    exported = sum(len(r) for r in rows.values())
    check_in_own_process("tests.e2e.test_snapshot_kill", str(config_path), str(export), str(exported))


def check(config_path: str, export: str, exported: str) -> None:
    """Each exported row once in silver, one finished load record, gold and history equal to the oracle."""
    config = load_config(config_path)
    spark = get_spark(config)
    snapshot_rows = spark.sql(
        f"""SELECT count(*), count(DISTINCT database, `table`, row_key) FROM {SILVER_ROW_CHANGES}
            WHERE source = :source AND array_contains(flags, 'snapshot')""",
        args={"source": SOURCE},
    ).collect()[0]
    assert tuple(snapshot_rows) == (int(exported), int(exported)), f"silver holds {tuple(snapshot_rows)} snapshot rows"
    loads = spark.sql(
        f"SELECT location, `rows`, finished_at IS NOT NULL AS finished FROM {SILVER_SNAPSHOT_LOADS} WHERE source = :s",
        args={"s": SOURCE},
    ).collect()
    assert [tuple(r) for r in loads] == [(export, int(exported), True)], f"load records: {loads}"
    workload = kill_workload()
    tso, _ = cut(workload)
    assert_gold_is_upstream(spark, SOURCE, workload, workload.consistent_ts)
    stamps = sorted({e.commit_ts for e in workload.events if isinstance(e, RowChange) and e.commit_ts >= tso})
    assert_history_is_upstream(spark, SOURCE, workload, workload.consistent_ts, [tso, *stamps])
    spark.stop()


if __name__ == "__main__":
    check(sys.argv[1], sys.argv[2], sys.argv[3])
