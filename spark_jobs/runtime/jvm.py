"""Calls into the driver's JVM through py4j that cost a call each, not a search of the class path.

py4j resolves `jvm.name` by loading a class of that name: a package name (`jvm.org`) or a simple name (`functions`)
is first tried as a class under every import, and each miss searches every jar on the class path (Spark's 250).
PySpark turns every Java exception into a Python one by asking py4j a dozen such questions (about 30 ms), and a
Python `for` over a Java collection ends on the iterator's exception. Measured in docs/performance.md ("py4j").
"""

from __future__ import annotations

from typing import Any

from py4j.java_gateway import JavaClass, java_import

# The simple names PySpark asks py4j for on every `F.col`, `F.lit`, query parameter, UDF and DataFrame it makes,
# each the class its own star imports find first (pyspark/java_gateway.py). Imported one by one, each resolves
# with one miss instead of one per star import before its package.
PYSPARK_SIMPLE_NAMES = (
    "org.apache.spark.sql.functions",
    "org.apache.spark.sql.Column",
    "org.apache.spark.sql.SparkSession",
    "org.apache.spark.sql.SparkSession$",
    "org.apache.spark.sql.api.python.PythonSQLUtils",
    "org.apache.spark.api.python.PythonUtils",
    "org.apache.spark.api.python.PythonRDD",
    "org.apache.spark.api.python.SerDeUtil",
    "org.apache.spark.api.python.SimplePythonFunction",
)


def import_pyspark_names(spark) -> None:
    """Import PySpark's most asked simple names into the session's JVM view, once per session."""
    for name in PYSPARK_SIMPLE_NAMES:
        java_import(spark.sparkContext._jvm, name)


def java_class(spark, name: str) -> Any:
    """The JVM class of a full name (its static methods), without py4j's walk down the packages of the name."""
    return JavaClass(name, spark.sparkContext._gateway._gateway_client)


def java_items(collection) -> list:
    """The elements of a Java collection or iterable (or a Scala one: a plan's children), asking the iterator
    `hasNext` instead of ending on its exception as a Python `for` does."""
    iterator = collection.iterator()
    items = []
    while iterator.hasNext():
        items.append(iterator.next())
    return items
