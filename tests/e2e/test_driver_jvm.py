"""The driver's JVM as the session leaves it: py4j resolves PySpark's simple names to the classes PySpark means,
Java collections read whole without a Java exception, and the embedded metastore's two clients (Spark's and
Iceberg's) bring the same DataNucleus settings, so the metastore keeps one DataNucleus factory."""

from __future__ import annotations

import pytest

from spark_jobs.runtime.jvm import PYSPARK_SIMPLE_NAMES, java_class, java_items

pytestmark = pytest.mark.e2e


def test_pysparks_simple_names_resolve_to_the_classes_its_star_imports_find(spark):
    jvm = spark.sparkContext._jvm
    for name in PYSPARK_SIMPLE_NAMES:
        simple = name.rpartition(".")[2]
        assert getattr(jvm, simple)._fqn == name
        assert java_class(spark, name)._java_lang_class.getName() == name


def test_java_items_reads_a_collection_whole_and_raises_no_java_exception(spark, monkeypatch):
    from pyspark.errors.exceptions import captured

    converted = []
    real = captured.convert_exception
    monkeypatch.setattr(captured, "convert_exception", lambda e: converted.append(e) or real(e))
    items = spark.sparkContext._jvm.java.util.ArrayList()
    assert java_items(items) == []
    for value in ("a", "b", "c"):
        items.add(value)
    assert java_items(items) == ["a", "b", "c"]
    assert java_items(spark.sparkContext._jvm.java.util.TreeSet(items)) == ["a", "b", "c"]
    assert converted == []


def _datanucleus_settings(conf) -> dict[str, str]:
    """What Hive's ObjectStore compares to decide whether its DataNucleus factory must be built again."""
    keys = [entry.getKey() for entry in java_items(conf)]
    return {key: conf.get(key) for key in keys if "datanucleus" in key or "jdo" in key}


def test_the_metastores_two_clients_bring_the_same_datanucleus_settings(spark):
    spark.sql("SHOW TABLES IN bronze").collect()  # Spark's own client is up
    spark_client = spark._jsparkSession.sharedState().externalCatalog().unwrapped().client()
    session_catalog = spark._jsparkSession.sessionState().catalogManager().catalog("spark_catalog")
    iceberg = session_catalog
    for field in ("icebergCatalog", "icebergCatalog", "catalog"):  # SparkSessionCatalog, SparkCatalog, CachingCatalog
        declared = iceberg.getClass().getDeclaredField(field)
        declared.setAccessible(True)
        iceberg = declared.get(iceberg)
    assert iceberg.getClass().getName() == "org.apache.iceberg.hive.HiveCatalog"
    iceberg_conf = java_class(spark, "org.apache.hadoop.hive.conf.HiveConf")(iceberg.getConf(), iceberg.getClass())
    spark_settings = _datanucleus_settings(spark_client.conf())
    assert spark_settings and _datanucleus_settings(iceberg_conf) == spark_settings
