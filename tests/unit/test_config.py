"""A bad config stops the run with one line naming the file, the key and what is allowed."""

from __future__ import annotations

import itertools
import os

import pytest

from spark_jobs.config import configured_source_names, decoder_options, kafka_client_settings, load_config
from spark_jobs.errors import ConfigError

GOOD = """
runtime:
  mode: embedded
  local_dir: lake
sources:
  - name: shop
    protocol: canal-json
    topics: [shop_cdc]
    options: {enable-tidb-extension: true}
    kafka:
      bootstrap_servers: ${TEST_BOOTSTRAP:-127.0.0.1:9092}
      sasl_mechanism: PLAIN
      sasl_username_env: TEST_KAFKA_USER
      sasl_password_env: TEST_KAFKA_PASSWORD
  - name: orders_avro
    protocol: avro
    topic_pattern: "orders_.*"
    kafka: {bootstrap_servers: "127.0.0.1:9092"}
    schema_registry: {url: "http://127.0.0.1:8081", username_env: TEST_REG_USER, password_env: TEST_REG_PASSWORD}
"""


def write(tmp_path, text):
    path = tmp_path / "pipeline.yaml"
    path.write_text(text)
    return path


def test_valid_config_loads_with_env_and_secrets(tmp_path, monkeypatch):
    monkeypatch.setenv("TEST_BOOTSTRAP", "127.0.0.1:19092")
    monkeypatch.setenv("TEST_KAFKA_USER", "lake")
    monkeypatch.setenv("TEST_KAFKA_PASSWORD", "s3cret-kafka")
    monkeypatch.setenv("TEST_REG_USER", "reg")
    monkeypatch.setenv("TEST_REG_PASSWORD", "s3cret-registry")
    config = load_config(write(tmp_path, GOOD))
    shop = config.source("shop")
    assert shop.kafka.bootstrap_servers == "127.0.0.1:19092"
    assert config.local_dir == (tmp_path / "lake").resolve()
    settings = kafka_client_settings(shop)
    assert settings["sasl.password"] == "s3cret-kafka" and settings["sasl.mechanism"] == "PLAIN"
    options = decoder_options(config.source("orders_avro"))
    assert options["schema-registry-password"] == "s3cret-registry"
    # secrets are resolved only on demand: the loaded config and its repr never hold them
    assert "s3cret" not in repr(config)
    assert configured_source_names(tmp_path / "pipeline.yaml") == ["shop", "orders_avro"]


@pytest.mark.parametrize(
    "change, message",
    [
        (
            ("protocol: canal-json", "protocol: canal"),
            "sources[0].protocol: 'canal' is not allowed; allowed: canal-json, open, debezium, avro, simple-json, simple-avro",
        ),
        (("    topics: [shop_cdc]\n", ""), "sources[0]: give exactly one of 'topics' or 'topic_pattern'"),
        (
            ("enable-tidb-extension: true", "enable-tidb-extensions: true"),
            "sources[0].options: unknown option 'enable-tidb-extensions' for protocol canal-json",
        ),
        (
            ("enable-tidb-extension: true", "enable-tidb-extension: maybe"),
            "sources[0].options: option 'enable-tidb-extension' for protocol canal-json must be bool, got 'maybe'",
        ),
        (
            ("  local_dir: lake", "  local_dir: lake\n  colour: blue"),
            "runtime: unknown key 'colour'; allowed: mode, local_dir, spark, catalog, packages, dbt_target, thrift_server",
        ),
        (
            ("      bootstrap_servers: ${TEST_BOOTSTRAP:-127.0.0.1:9092}\n", ""),
            "sources[0].kafka: missing required key 'bootstrap_servers'",
        ),
        (
            ("      sasl_mechanism: PLAIN\n", "      sasl_mechanism: PLAIN\n      timeout_seconds: 0\n"),
            "sources[0].kafka.timeout_seconds: must be 1 or more, got 0",
        ),
        (("mode: embedded", "mode: cloud"), "runtime.mode: 'cloud' is not allowed; allowed: embedded, cluster"),
        (
            ("  local_dir: lake", "  local_dir: lake\n  dbt_target: thrift"),
            "runtime.dbt_target: 'thrift' is not allowed; allowed: embedded, cluster",
        ),
        (
            ("  local_dir: lake", "  local_dir: lake\n  dbt_target: cluster"),
            "runtime.dbt_target: cluster needs runtime.mode cluster",
        ),
        (
            (
                "  mode: embedded\n",
                "  mode: cluster\n  catalog: {uri: 'thrift://m:9083'}\n  dbt_target: cluster\n  thrift_server: thrift\n",
            ),
            "runtime.thrift_server: must be host:port for dbt_target cluster, got 'thrift'",
        ),
        (
            (
                '    schema_registry: {url: "http://127.0.0.1:8081", username_env: TEST_REG_USER, password_env: TEST_REG_PASSWORD}\n',
                "",
            ),
            "sources[1].schema_registry: required for protocol avro",
        ),
        (("name: orders_avro", "name: shop"), "sources[1].name: duplicate source name 'shop'"),
        (
            ("    topics: [shop_cdc]\n", "    topics: [shop_cdc]\n    gold: {keyless_tables: drop}\n"),
            "sources[0].gold.keyless_tables: 'drop' is not allowed; allowed: changes, skip",
        ),
    ],
)
def test_bad_config_names_file_key_and_allowed(tmp_path, change, message):
    path = write(tmp_path, GOOD.replace(*change))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value).startswith(f"{path.resolve()}: ")
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_bad_type_and_missing_file(tmp_path):
    with pytest.raises(
        ConfigError, match=r"sources\[0\]\.landing\.max_records_per_run: must be an integer, got 'lots'"
    ):
        load_config(
            write(
                tmp_path,
                GOOD.replace(
                    "    options: {enable-tidb-extension: true}\n",
                    "    options: {enable-tidb-extension: true}\n    landing: {max_records_per_run: lots}\n",
                ),
            )
        )
    with pytest.raises(ConfigError, match="configuration file not found"):
        load_config(tmp_path / "missing.yaml")


def test_unset_secret_is_a_config_error_naming_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv("TEST_KAFKA_USER", raising=False)
    config = load_config(write(tmp_path, GOOD))
    with pytest.raises(ConfigError, match="environment variable TEST_KAFKA_USER"):
        kafka_client_settings(config.source("shop"))


def test_secrets_from_an_airflow_connection(tmp_path, monkeypatch):
    """Airflow reads connections from AIRFLOW_CONN_<ID> (JSON) as from any secrets backend."""
    monkeypatch.setenv(
        "AIRFLOW_CONN_SHOP_KAFKA", '{"conn_type": "generic", "login": "lake", "password": "s3cret-conn"}'
    )
    text = GOOD.replace(
        "      sasl_username_env: TEST_KAFKA_USER\n      sasl_password_env: TEST_KAFKA_PASSWORD\n",
        "      sasl_connection: shop_kafka\n",
    )
    settings = kafka_client_settings(load_config(write(tmp_path, text)).source("shop"))
    assert (settings["sasl.username"], settings["sasl.password"]) == ("lake", "s3cret-conn")
    missing = GOOD.replace(
        "      sasl_username_env: TEST_KAFKA_USER\n      sasl_password_env: TEST_KAFKA_PASSWORD\n",
        "      sasl_connection: no_such_connection\n",
    )
    with pytest.raises(ConfigError, match="Airflow connection 'no_such_connection'"):
        kafka_client_settings(load_config(write(tmp_path, missing)).source("shop"))


def test_cluster_mode_spark_settings(tmp_path):
    """The cluster runtime: master URL, shared catalog, jars by Maven coordinate (no local paths)."""
    from spark_jobs.runtime.spark_session import spark_conf

    config = load_config(
        write(
            tmp_path,
            GOOD.replace(
                "  mode: embedded\n  local_dir: lake\n",
                """  mode: cluster
  spark: {master: "spark://spark-master:7077", conf: {spark.executor.memory: 4g}}
  catalog: {type: hive, uri: "thrift://metastore:9083", warehouse: "s3a://lake/warehouse"}
  packages: [org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.2]
""",
            ),
        )
    )
    conf = spark_conf(config)
    assert conf["spark.master"] == "spark://spark-master:7077"
    assert (
        conf["spark.sql.catalog.spark_catalog.uri"]
        == conf["spark.hadoop.hive.metastore.uris"]
        == "thrift://metastore:9083"
    )
    assert conf["spark.sql.catalog.spark_catalog.warehouse"] == "s3a://lake/warehouse"
    assert conf["spark.jars.packages"] == "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.2"
    assert conf["spark.executor.memory"] == "4g" and "spark.jars" not in conf


CLUSTER_RUNTIME = """  mode: cluster
  spark:
    master: "spark://127.0.0.1:7077"
    executor_env: env/executor-env.tar.gz
  catalog: {type: hive, uri: "thrift://127.0.0.1:9083", warehouse: "file:///tmp/lake"}
  dbt_target: cluster
  thrift_server: "127.0.0.1:10001"
"""


def test_cluster_mode_ships_the_executors_python_and_forces_nothing_embedded(tmp_path, monkeypatch):
    """With executor_env: the archive (relative to the file) through spark.archives, the executors' Python in it;
    no loopback address or driver Python forced; tables not cached (other applications commit to them)."""
    from spark_jobs.runtime import spark_session

    # a copy of the environment: what the function sets must not reach the SparkSession later tests start
    # (monkeypatch.delenv of an unset variable records nothing to undo)
    unset = ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_LOCAL_IP", "SPARK_DIST_CLASSPATH")
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if k not in unset})
    config = load_config(write(tmp_path, GOOD.replace("  mode: embedded\n  local_dir: lake\n", CLUSTER_RUNTIME)))
    conf = spark_session.spark_conf(config)
    assert conf["spark.archives"] == f"{tmp_path / 'env' / 'executor-env.tar.gz'}#ticdc_env"
    assert conf["spark.sql.catalog.spark_catalog.cache-enabled"] == "false"
    assert "spark.driver.host" not in conf and "spark.jars.packages" not in conf
    assert conf["spark.jars"].endswith(".jar")  # no packages: the locally built Iceberg runtime
    assert "spark.hadoop.fs.file.impl" not in conf  # the executors write object storage with Hadoop's own
    spark_session._launch_environment(config)
    assert "SPARK_LOCAL_IP" not in os.environ and "SPARK_DIST_CLASSPATH" not in os.environ
    assert os.environ["PYSPARK_PYTHON"] == "./ticdc_env/bin/python"


def test_dbt_runs_through_the_thrift_server_the_config_names(tmp_path):
    from spark_jobs.gold.build import dbt_profile_env

    cluster = load_config(write(tmp_path, GOOD.replace("  mode: embedded\n  local_dir: lake\n", CLUSTER_RUNTIME)))
    assert dbt_profile_env(cluster.runtime) == {
        "TICDC_DBT_TARGET": "cluster",
        "TICDC_THRIFT_HOST": "127.0.0.1",
        "TICDC_THRIFT_PORT": "10001",
    }
    assert dbt_profile_env(load_config(write(tmp_path, GOOD)).runtime) == {"TICDC_DBT_TARGET": "embedded"}


def test_the_thrift_server_starts_with_the_pipelines_spark_settings(tmp_path):
    from spark_jobs.runtime.spark_session import spark_conf
    from spark_jobs.runtime.thrift_server import THRIFT_SERVER_CLASS, thrift_server_command

    config = load_config(write(tmp_path, GOOD.replace("  mode: embedded\n  local_dir: lake\n", CLUSTER_RUNTIME)))
    command = thrift_server_command(config, cores=1)
    settings = dict(arg.split("=", 1) for flag, arg in itertools.pairwise(command) if flag == "--conf")
    expected = {k: v for k, v in spark_conf(config).items() if k != "spark.archives"}
    assert {k: settings[k] for k in expected} == expected
    assert settings["spark.cores.max"] == "1" and "spark.archives" not in settings
    assert settings["spark.driver.extraClassPath"] == expected["spark.jars"].replace(",", ":")
    assert command[command.index("--class") + 1] == THRIFT_SERVER_CLASS
    assert "hive.server2.thrift.port=10001" in command and command[-1] == "spark-internal"
    with pytest.raises(ConfigError, match=r"needs runtime\.mode cluster"):
        thrift_server_command(load_config(write(tmp_path, GOOD)))


def test_configured_driver_java_options_follow_the_modes_own(tmp_path, monkeypatch):
    """A configured spark.driver.extraJavaOptions (a GC log, say) is added after the embedded mode's Derby home and
    temporary directory, not put in their place: without them the metastore would be created in the working
    directory."""
    from spark_jobs.runtime import iceberg_runtime, spark_session

    monkeypatch.setattr(iceberg_runtime, "prepare_iceberg_runtime", lambda cache_dir: [])
    text = GOOD.replace(
        "  local_dir: lake\n", "  local_dir: lake\n  spark: {conf: {spark.driver.extraJavaOptions: -Xlog:gc}}\n"
    )
    options = spark_session.spark_conf(load_config(write(tmp_path, text)))["spark.driver.extraJavaOptions"].split()
    derby = [o for o in options if o.startswith("-Dderby.system.home=")]
    assert len(derby) == 1
    assert options[-1] == "-Xlog:gc" and options.index(derby[0]) < options.index("-Xlog:gc")
    assert spark_session.DRIVER_THREAD_STACK in options
