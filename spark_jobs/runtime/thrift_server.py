"""The Spark Thrift Server that dbt uses in cluster mode (`runtime.dbt_target: cluster`).

It is a Spark application of its own on the cluster, started with the pipeline's own Spark settings
(`spark_conf`), so dbt sees the same catalog, Iceberg runtime and session settings as the jobs. The
loopback cluster and docker-compose.yml both start it with `ticdc-lake thrift-server`.
"""

from __future__ import annotations

from pathlib import Path

from spark_jobs.config import PipelineConfig
from spark_jobs.errors import ConfigError
from spark_jobs.runtime.spark_session import spark_conf

THRIFT_SERVER_CLASS = "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2"


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def spark_class() -> str:
    """pyspark's `bin/spark-class`: runs any Spark main class (master, worker, metastore, spark-submit)."""
    return str(spark_home() / "bin" / "spark-class")


def thrift_server_command(config: PipelineConfig, cores: int = 1) -> list[str]:
    """spark-submit of the Thrift Server on `runtime.thrift_server`'s port, with at most `cores` cores."""
    if config.runtime.mode != "cluster" or not config.runtime.thrift_server:
        raise ConfigError(f"{config.path}: the Thrift Server needs runtime.mode cluster and runtime.thrift_server")
    conf = spark_conf(config)
    conf.pop("spark.archives", None)  # SQL only: no Python on its executors
    conf["spark.cores.max"] = str(cores)
    if "spark.jars" in conf:  # statements run in the server's session threads, which see only the class path
        conf["spark.driver.extraClassPath"] = conf["spark.jars"].replace(",", ":")
    host, port = config.runtime.thrift_server.rsplit(":", 1)
    args = [spark_class(), "org.apache.spark.deploy.SparkSubmit"]
    args += ["--class", THRIFT_SERVER_CLASS, "--name", "ticdc-thrift-server"]
    for key, value in conf.items():
        args += ["--conf", f"{key}={value}"]
    args += ["--hiveconf", f"hive.server2.thrift.port={port}"]
    if host in ("127.0.0.1", "localhost"):
        args += ["--hiveconf", f"hive.server2.thrift.bind.host={host}"]
    return [*args, "spark-internal"]
