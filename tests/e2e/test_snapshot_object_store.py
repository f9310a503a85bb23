"""A Dumpling export in an object store: `ticdc-lake backfill snapshot --from s3://bucket/prefix` reads it there.

The store is moto's S3 on loopback (devkit/ticdc_devkit/object_store.py; S3 itself cannot run here), reached through
fsspec's s3fs with the endpoint and credentials from the environment, as a deployment passes them. The load runs
as a `ticdc-lake` process of its own (its Spark tasks read the files with that environment); what silver holds
is read in a process of its own afterwards.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from spark_jobs.config import load_config
from spark_jobs.runtime.spark_session import get_spark
from spark_jobs.runtime.tables import SILVER_ROW_CHANGES, SILVER_SNAPSHOT_LOADS
from tests.e2e.kill import BIN, check_in_own_process, own_runtime
from ticdc_devkit.dumpling_export import write_export
from ticdc_devkit.object_store import ObjectStore
from ticdc_devkit.simulator.model import RowChange
from ticdc_devkit.simulator.oracle import upstream_schemas, upstream_state
from ticdc_devkit.simulator.workload import random_workload

pytestmark = pytest.mark.e2e

SOURCE = "snapshot_s3"
URL = "s3://exports/shop-dump"


def test_a_snapshot_loads_from_an_object_store_url(source_config, config_file, tmp_path):
    workload = random_workload(20261127, tables=3, changes=60, preexisting=1, protocol="canal-json")
    tso = sorted(e.commit_ts for e in workload.events if isinstance(e, RowChange))[-10]
    tables = upstream_schemas(workload.events, as_of=tso, preexisting=workload.preexisting)
    rows = upstream_state(workload.events, as_of=tso, preexisting=workload.preexisting)
    exported = {f"{d}.{t}": len(rows.get((d, t), {})) for d, t in tables}
    formats = dict(zip(sorted(tables), [("csv", "gzip"), ("sql", "zstd"), ("sql", None)], strict=False))
    export = write_export(tmp_path / "export", tso, tables, rows, formats)
    config_path = config_file(
        source_config(SOURCE, "canal-json", runtime=own_runtime(tmp_path / "lake")), tmp_path / "pipeline.yaml"
    )

    with ObjectStore(tmp_path / "store", bucket="exports") as store:
        import s3fs

        s3fs.S3FileSystem(key=store.env()["AWS_ACCESS_KEY_ID"], secret=store.env()["AWS_SECRET_ACCESS_KEY"],
                          endpoint_url=store.endpoint).put(f"{export}/", URL.removeprefix("s3://") + "/", recursive=True)  # fmt: skip
        env = {**os.environ, **store.env(), "FSSPEC_S3_ENDPOINT_URL": store.endpoint}
        load = subprocess.run(
            [str(BIN / "ticdc-lake"), "backfill", "snapshot", "--source", SOURCE, "--config", str(config_path),
             "--from", URL],
            capture_output=True, text=True, env=env, start_new_session=True,
        )  # fmt: skip
    assert load.returncode == 0, load.stderr[-3000:]
    assert f"{sum(exported.values())} rows of {len(tables)} tables" in load.stdout, load.stdout
    for table, count in exported.items():
        assert f"  {table}: {count} rows" in load.stdout, load.stdout
    check_in_own_process("tests.e2e.test_snapshot_object_store", str(config_path), str(sum(exported.values())))


def check(config_path: str, exported: str) -> None:
    """Silver holds every exported row once, at the export's TSO, and the load is recorded as finished."""
    spark = get_spark(load_config(config_path))
    stored = spark.sql(
        f"""SELECT count(*), count(DISTINCT database, `table`, row_key), count(DISTINCT commit_ts)
            FROM {SILVER_ROW_CHANGES} WHERE source = :source AND array_contains(flags, 'snapshot')""",
        args={"source": SOURCE},
    ).collect()[0]
    assert tuple(stored) == (int(exported), int(exported), 1), f"silver holds {tuple(stored)}"
    loads = spark.sql(
        f"SELECT location, `rows`, finished_at IS NOT NULL FROM {SILVER_SNAPSHOT_LOADS} WHERE source = :source",
        args={"source": SOURCE},
    ).collect()
    assert [tuple(r) for r in loads] == [(URL, int(exported), True)], loads
    spark.stop()


if __name__ == "__main__":
    check(sys.argv[1], sys.argv[2])
