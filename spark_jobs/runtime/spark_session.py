"""The SparkSession every job uses: embedded (local, Iceberg on an embedded Hive metastore) or cluster."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from spark_jobs.config import CatalogSettings, PipelineConfig, secret
from spark_jobs.errors import CatalogUnavailableError, ConfigError
from spark_jobs.runtime.jvm import import_pyspark_names
from spark_jobs.runtime.local_fs import CLASS_NAME as LOCAL_FS_CLASS
from spark_jobs.runtime.local_fs import local_fs_jar, put_on_driver_class_path
from spark_jobs.runtime.lock import hold_for_process
from spark_jobs.runtime.logs import quiet_libraries, verbose_requested, with_quiet_spark_logs

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

NAMESPACES = ("bronze", "silver", "gold")
EXECUTOR_ENV = "ticdc_env"  # where spark.archives unpacks the executors' Python, in each executor's directory


def embedded_paths(local_dir: Path) -> dict[str, Path]:
    return {
        "warehouse": local_dir / "warehouse",
        "metastore": local_dir / "metastore_db",
        "derby_home": local_dir / "derby",
        "jars": local_dir / "jars",
        "tmp": local_dir / "spark-tmp",
    }


def hold_embedded_metastore(config: PipelineConfig, holder: str, unless_held_by: str | None = None) -> bool:
    """Embedded mode: this process holds the metastore from now until it ends, and a Spark step of another
    process waits for it (logged every minute) where Derby would refuse it (`XSDB6`, one JVM at a time). Taken
    before any source's lock, so that no two processes each wait for what the other holds. A process whose JVM
    runs already holds the metastore it opened, and opens no other. Whoever takes it empties the Spark scratch
    directory: all in it is left by processes that have ended (a killed JVM leaves its copy of the jars, 43 MB).
    False, without waiting, where the holder's name starts with `unless_held_by`; True in cluster mode."""
    from pyspark import SparkContext

    if config.runtime.mode != "embedded" or SparkContext._active_spark_context is not None:
        return True
    paths = embedded_paths(config.local_dir)
    lock = paths["metastore"].with_name(paths["metastore"].name + ".lock")
    return hold_for_process(
        lock, "embedded metastore", holder, unless_held_by=unless_held_by, on_taken=lambda: _empty(paths["tmp"])
    )


def _empty(directory: Path) -> None:
    for left in directory.iterdir() if directory.is_dir() else ():
        if left.is_dir() and not left.is_symlink():
            shutil.rmtree(left, ignore_errors=True)
        else:
            left.unlink(missing_ok=True)


def _discard_half_created_metastore(paths: dict[str, Path]) -> Path:
    """A process killed while Derby created the metastore leaves a database no one can open again;
    a metastore is marked complete once a session came up on it, and an unmarked one is removed
    (it holds no tables: none can be created before the mark)."""
    ready = paths["metastore"].with_name(paths["metastore"].name + ".ready")
    if paths["metastore"].exists() and not ready.exists():
        log.warning("removing the half-created metastore %s (a run was killed while creating it)", paths["metastore"])
        shutil.rmtree(paths["metastore"])
    return ready


DRIVER_THREAD_STACK = "-Xss32m"


STATUS_STORE_LIMITS = {
    "spark.sql.ui.retainedExecutions": "50",
    "spark.ui.retainedJobs": "100",
    "spark.ui.retainedStages": "100",
    "spark.ui.dagGraph.retainedRootRDDs": "100",
}


def spark_conf(config: PipelineConfig) -> dict[str, str]:
    """All Spark settings for the configured mode (shown by `ticdc-lake config`)."""
    rt = config.runtime
    conf = {
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        "spark.sql.catalog.spark_catalog": "org.apache.iceberg.spark.SparkSessionCatalog",
        "spark.sql.shuffle.partitions": str(rt.spark.shuffle_partitions),
        "spark.driver.memory": rt.spark.driver_memory,
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.iceberg.handle-timestamp-without-timezone": "true",
        # with the UI off nothing reads Spark's status store, yet it keeps the plans and metrics of the last 1,000
        # statements, jobs and stages: a continuous driver runs a hundred statements a batch, so the store would
        # grow for its first ten batches (docs/performance.md, "Continuous mode")
        **STATUS_STORE_LIMITS,
        # Spark 3.5 destroys a killed task's Python worker this long after the kill even when the task has already
        # given the worker back to the idle pool, and the pool then hands the closed socket to the next task
        # ("Socket is closed"): a killed task (a sibling of a failed one) gets a minute to finish on its own
        # (docs/environment.md, "A killed task's Python worker")
        "spark.python.task.killTimeout": "60s",
    }
    if rt.mode == "embedded":
        from spark_jobs.runtime.iceberg_runtime import prepare_iceberg_runtime

        paths = embedded_paths(config.local_dir)
        for name, p in paths.items():
            if name != "metastore":  # Derby refuses to create a database in an existing directory
                p.mkdir(parents=True, exist_ok=True)
        jars = prepare_iceberg_runtime(paths["jars"])
        if local_fs_jar() is not None:  # get_spark puts it on the driver's class path
            conf["spark.hadoop.fs.file.impl"] = LOCAL_FS_CLASS
        conf.update(
            {
                "spark.master": rt.spark.master,
                "spark.jars": ",".join(str(j) for j in jars),
                "spark.sql.catalog.spark_catalog.type": "hive",
                "spark.sql.catalogImplementation": "hive",
                "spark.sql.warehouse.dir": str(paths["warehouse"]),
                "spark.hadoop.javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={paths['metastore']};create=true",
                "spark.hadoop.iceberg.engine.hive.lock-enabled": "false",
                # gold replaces a table in one commit when a DDL changed its columns' types; the metastore
                # must not refuse that (Iceberg, not Hive, owns the schema)
                "spark.hadoop.hive.metastore.disallow.incompatible.col.type.changes": "false",
                "spark.hadoop.hive.metastore.schema.verification": "false",
                # Spark's own metastore client sets this, so Iceberg's must too: the embedded metastore keeps one
                # DataNucleus factory, and closes and builds it again (a second of CPU) whenever a thread's client
                # brings other DataNucleus settings than the last one did (docs/performance.md)
                "spark.hadoop.datanucleus.schema.autoCreateAll": "true",
                # DataNucleus 4.1 shares a compiled metastore query between threads and may read it half-built
                # (NullPointerException "keyIdx is null" in an Iceberg commit while dbt's threads commit): each
                # query is compiled by its own thread instead (docs/architecture.md, decision 11)
                "spark.hadoop.datanucleus.cache.queryCompilation.type": "none",
                "spark.hadoop.datanucleus.cache.queryCompilationDatastore.type": "none",
                "spark.driver.extraJavaOptions": f"-Dderby.system.home={paths['derby_home']} -Djava.io.tmpdir={paths['tmp']}",
                "spark.local.dir": str(paths["tmp"]),
                "spark.driver.bindAddress": "127.0.0.1",
                "spark.driver.host": "127.0.0.1",
            }
        )
    else:
        cat = rt.catalog
        conf.update(
            {
                "spark.master": rt.spark.master,
                "spark.sql.catalog.spark_catalog.type": cat.type,
                "spark.sql.catalog.spark_catalog.uri": cat.uri,
                "spark.sql.catalog.spark_catalog.warehouse": cat.warehouse,
                "spark.sql.warehouse.dir": cat.warehouse,
                # other applications write the same tables (the Thrift Server gold, the jobs bronze and silver):
                # a session must see their commits, not the table as it first loaded it (Iceberg caches tables
                # for as long as they are used)
                "spark.sql.catalog.spark_catalog.cache-enabled": "false",
            }
        )
        if rt.packages:
            conf["spark.jars.packages"] = ",".join(rt.packages)
        else:  # no Maven repository reachable: the driver serves the locally built runtime to the executors
            from spark_jobs.runtime.iceberg_runtime import prepare_iceberg_runtime

            conf["spark.jars"] = ",".join(str(j) for j in prepare_iceberg_runtime(config.local_dir / "jars"))
        if cat.type == "hive":
            conf["spark.sql.catalogImplementation"] = "hive"
            conf["spark.hadoop.hive.metastore.uris"] = cat.uri
        token = secret(cat.credentials_env)  # None: no credentials_env
        if token is not None:
            conf["spark.sql.catalog.spark_catalog.token"] = token
        archive = executor_env_archive(config)
        if archive is not None:
            conf["spark.archives"] = f"{archive}#{EXECUTOR_ENV}"
    own_java_options = conf.get("spark.driver.extraJavaOptions", "")
    conf.update(rt.spark.conf)
    if own_java_options and "spark.driver.extraJavaOptions" in rt.spark.conf:
        # the configured JVM options come after the mode's (later ones win) instead of dropping its Derby home
        conf["spark.driver.extraJavaOptions"] = f"{own_java_options} {rt.spark.conf['spark.driver.extraJavaOptions']}"
    # the driver's threads (and the Thrift Server's, which dbt's queries run in) get 32 MB stacks: the checks of
    # 1,000 gold tables give Spark's optimizer an OR a thousand levels deep (a union's constraints are an OR of its
    # children's), which overflows the default 1 MB; an -Xss among the settings' own options comes later and wins
    java_options = conf.get("spark.driver.extraJavaOptions", "")
    conf["spark.driver.extraJavaOptions"] = f"{DRIVER_THREAD_STACK} {java_options}".strip()
    return with_quiet_spark_logs(conf)


# Spark compiles each new query's code (whole-stage Java source through Janino, then the JIT); on a few thousand rows
# that costs more than evaluating the expressions interpreted. Measured on 2 cores (docs/performance.md): a first
# build of 60 small gold tables and a continuous batch of 7,000 changes faster interpreted, 100,000 messages into
# silver the same either way, a 1M-row gold rebuild 38% slower and 10,000 changes merged into 1M rows 11.6 to
# 15.1 s against 9.3 to 11.4 s compiled.
# A step whose statements read fewer rows than this each, on average, runs interpreted.
INTERPRETED_BELOW_ROWS = 50_000
INTERPRETED = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}


@contextmanager
def expressions_for(spark, config: PipelineConfig, rows: int, statements: int = 1) -> Iterator[None]:
    """Spark's expressions evaluated interpreted inside the block when the step's `statements` read fewer than
    `INTERPRETED_BELOW_ROWS` rows each on average. Settings the configuration gives either key are left as they
    are. The choice is the session's, so two steps in threads of one process may see each other's: a cost, never a
    different result (both ways evaluate the same expressions)."""
    if rows >= INTERPRETED_BELOW_ROWS * statements or any(key in config.runtime.spark.conf for key in INTERPRETED):
        yield
        return
    before = {key: spark.conf.get(key, None) for key in INTERPRETED}
    for key, value in INTERPRETED.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def executor_env_archive(config: PipelineConfig) -> Path | None:
    """Cluster mode: the packed Python environment the executors run (relative to the config file), if any."""
    if config.runtime.mode != "cluster" or not config.runtime.spark.executor_env:
        return None
    p = Path(config.runtime.spark.executor_env)
    return p if p.is_absolute() else (config.path.parent / p).resolve()


def _launch_environment(config: PipelineConfig) -> None:
    """Which Python the Spark Python workers run. Embedded: this one, on loopback, and the driver's class path
    holds the local file system that starts no chmod processes. Cluster: the shipped environment, else the
    executors' own (PySpark sends PYSPARK_PYTHON with every Python function)."""
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if config.runtime.mode == "embedded":
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        jar = local_fs_jar()
        if jar is not None:
            put_on_driver_class_path(jar)
    elif executor_env_archive(config) is not None:
        os.environ["PYSPARK_PYTHON"] = f"./{EXECUTOR_ENV}/bin/python"


def check_catalog_reachable(catalog: CatalogSettings, timeout_seconds: float = 5.0) -> None:
    """Cluster mode: the catalog answers on one of its addresses before a session is built, so an outage is one
    line (a TransientFault, retried by Airflow) instead of the Hive client's minutes of retries and a JVM trace."""
    problems = []
    for uri in (u.strip() for u in catalog.uri.split(",") if u.strip()):
        parts = urlsplit(uri)
        default_port = {"thrift": 9083, "https": 443}.get(parts.scheme, 80)
        try:
            socket.create_connection((parts.hostname or "", parts.port or default_port), timeout_seconds).close()
            return
        except OSError as exc:
            problems.append(exc.strerror or type(exc).__name__)
    raise CatalogUnavailableError.at(
        catalog.uri,
        f"unreachable ({', '.join(problems) or 'no address'})",
        "that the metastore (or REST catalog) service is running and runtime.catalog.uri",
    )


def get_spark(config: PipelineConfig, app_name: str = "ticdc-lakehouse") -> SparkSession:
    """The process's SparkSession (created once, then reused), with bronze/silver/gold namespaces."""
    from pyspark.sql import SparkSession

    _launch_environment(config)
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    quiet_libraries()  # py4j's INFO lines also reach processes that did not configure logging (Airflow tasks)
    if config.runtime.mode == "cluster":
        check_catalog_reachable(config.runtime.catalog)
        archive = executor_env_archive(config)
        if archive is not None and not archive.is_file():
            raise ConfigError(
                f"{config.path}: runtime.spark.executor_env: {archive} does not exist; "
                "build it with `ticdc-lake pack-env`"
            )
    hold_embedded_metastore(config, app_name)
    ready = (
        _discard_half_created_metastore(embedded_paths(config.local_dir)) if config.runtime.mode == "embedded" else None
    )
    builder = SparkSession.builder.appName(app_name)
    for key, value in spark_conf(config).items():
        builder = builder.config(key, value)
    spark = builder.enableHiveSupport().getOrCreate()
    import_pyspark_names(spark)
    if verbose_requested():  # quiet runs keep the log4j2 file's levels
        spark.sparkContext.setLogLevel("WARN")
    for ns in NAMESPACES:
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {ns}")
    if ready is not None:
        ready.touch()
    log.info("spark session ready: master=%s mode=%s", spark.sparkContext.master, config.runtime.mode)
    return spark
