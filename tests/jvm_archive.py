"""A class-data-sharing archive of the Spark driver's classes, so that every Spark JVM the tests start maps the
classes a pipeline run loads instead of reading, verifying and linking them again.

The suite starts well over a hundred Spark JVMs (its own, each `ticdc-lake` process of the kill loops, each task
of the DAG runs), and on two cores starting one costs about 14 s of CPU, of which loading classes is a third.
`make test` builds the archive once (`python -m tests.jvm_archive`, about 40 s): one small session creates,
merges, branches, compacts and reads an Iceberg table, and the JVM writes what it loaded when it exits
(`-XX:ArchiveClassesAtExit`). `tests/conftest.py` then adds `-XX:SharedArchiveFile` to `SPARK_SUBMIT_OPTS`.

Only classes of the JVM's own class path are shared, and the Iceberg runtime comes with `spark.jars`, which Spark
loads in a class loader of its own. So the tests also put the Iceberg runtime on every Spark JVM's class path
(`SPARK_DIST_CLASSPATH`, which Spark's launcher appends to it): Spark's loader asks its parent first, so the
same classes of the same jars come from the class path, and from the archive. That took a session's CPU from
14.4 to 13.3 s here. The archive is keyed by the JVM, the Spark jars and the Iceberg runtime: a different one is
simply not used, and a JVM whose class path does not match the archive's starts without it (the JVM checks).
What runs is the same either way.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from spark_jobs.runtime import iceberg_runtime

REPO = Path(__file__).resolve().parent.parent
# C1 only and the serial collector: small heaps on two busy cores, where C2 and G1's concurrent threads cost more
# CPU than they save (docs/environment.md)
JIT_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m -XX:+UseSerialGC"
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"  # a mismatched archive is a fallback, not a warning on stdout
JVM_DIR = REPO / ".local" / "jvm"  # the archives, and the Iceberg runtime's relocated Jackson (jars/) for every JVM


def archive_path() -> Path | None:
    """Where the archive for this JVM, these Spark jars and this Iceberg runtime lives, or None without a JVM or
    Spark."""
    java, spec = shutil.which("java"), importlib.util.find_spec("pyspark")
    if java is None or spec is None or not spec.submodule_search_locations:
        return None
    jars = sorted(p.name for p in (Path(spec.submodule_search_locations[0]) / "jars").glob("*.jar"))
    iceberg = [iceberg_runtime.ICEBERG_JAR, iceberg_runtime.RELOCATION_VERSION]
    key = hashlib.sha256("\n".join([os.path.realpath(java), *jars, *iceberg]).encode()).hexdigest()[:16]
    return JVM_DIR / f"spark-driver-{key}.jsa"


def iceberg_class_path() -> str:
    """The Iceberg runtime's jars as a class path (the relocated Jackson built on first use)."""
    return os.pathsep.join(str(jar) for jar in iceberg_runtime.prepare_iceberg_runtime(JVM_DIR / "jars"))


def jvm_environment() -> dict[str, str]:
    """What every Spark JVM the tests start runs with: C1 only (docs/environment.md) and, if built, the archive
    with the class path it was made with."""
    archive = archive_path()
    if archive is None or not archive.is_file():
        return {"SPARK_SUBMIT_OPTS": JIT_OPTIONS}
    return {
        "SPARK_SUBMIT_OPTS": f"{JIT_OPTIONS} -XX:SharedArchiveFile={archive} {QUIET}",
        "SPARK_DIST_CLASSPATH": iceberg_class_path(),
    }


WORKLOAD = """
import sys
from spark_jobs.config import load_config
from spark_jobs.runtime.spark_session import get_spark

spark = get_spark(load_config(sys.argv[1]))
spark.sql("CREATE NAMESPACE IF NOT EXISTS silver")
spark.sql("CREATE TABLE silver.archive_t (id bigint, v string, ts timestamp) USING iceberg PARTITIONED BY (bucket(4, id))")
spark.sql("INSERT INTO silver.archive_t VALUES (1, 'a', current_timestamp()), (2, 'b', current_timestamp())")
spark.createDataFrame([(2, "c"), (3, "d")], "id bigint, v string").createOrReplaceTempView("changes")
spark.sql(
    "MERGE INTO silver.archive_t t USING changes c ON t.id = c.id"
    " WHEN MATCHED THEN UPDATE SET v = c.v WHEN NOT MATCHED THEN INSERT (id, v, ts) VALUES (c.id, c.v, null)"
)
spark.sql("SELECT id, max_by(v, id) OVER (PARTITION BY id % 2) FROM silver.archive_t").toPandas()
spark.sql("SELECT * FROM silver.archive_t.snapshots").collect()
spark.sql("ALTER TABLE silver.archive_t CREATE BRANCH land_archive")
spark.sql("INSERT INTO silver.archive_t.branch_land_archive VALUES (4, 'e', null)")
spark.sql("CALL spark_catalog.system.fast_forward('silver.archive_t', 'main', 'land_archive')")
spark.sql("CALL spark_catalog.system.rewrite_data_files(table => 'silver.archive_t')").collect()
spark.sql("CALL spark_catalog.system.expire_snapshots(table => 'silver.archive_t', retain_last => 1)").collect()
spark.sql("DELETE FROM silver.archive_t WHERE id = 1")
spark.sql("SELECT * FROM silver.archive_t.refs").collect()
spark.stop()
gateway = spark.sparkContext._gateway
gateway.proc.stdin.close()  # the JVM exits on EOF and writes the archive as it does
gateway.proc.wait(timeout=300)
"""

CONFIG = """
runtime:
  mode: embedded
  local_dir: {lake}
  spark: {{master: "local[2]", driver_memory: 1g, shuffle_partitions: 2}}
sources:
  - name: archive
    protocol: canal-json
    topics: [archive]
    kafka: {{bootstrap_servers: "127.0.0.1:9"}}
"""


def build() -> Path | None:
    """Build the archive unless it exists; returns it (None where there is no JVM or Spark to archive)."""
    archive = archive_path()
    if archive is None or archive.is_file():
        return archive
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(f".{archive.name}.{os.getpid()}")
    with tempfile.TemporaryDirectory(dir=archive.parent) as work:
        config = Path(work) / "pipeline.yaml"
        config.write_text(CONFIG.format(lake=Path(work) / "lake"))
        env = {
            **os.environ,
            "SPARK_SUBMIT_OPTS": f"{JIT_OPTIONS} -XX:ArchiveClassesAtExit={partial} {QUIET}",
            "SPARK_DIST_CLASSPATH": iceberg_class_path(),
        }
        done = subprocess.run(
            [sys.executable, "-c", WORKLOAD, str(config)], env=env, cwd=REPO, capture_output=True, text=True
        )
    if done.returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        print(f"no JVM class archive (the tests run without it): {done.stderr[-2000:]}", file=sys.stderr)
        return None
    partial.replace(archive)
    return archive


if __name__ == "__main__":
    built = build()
    if built is not None:
        print(f"JVM class archive: {built} ({built.stat().st_size // 2**20} MB)")
