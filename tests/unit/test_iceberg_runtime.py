"""The relocated Jackson classes Iceberg's PyPI runtime jar needs."""

import zipfile

from spark_jobs.runtime.iceberg_runtime import prepare_iceberg_runtime, relocate_class


def test_jar_is_built_once_with_every_reference_relocated(tmp_path):
    jars = prepare_iceberg_runtime(tmp_path)
    shaded = jars[-1]
    mtime = shaded.stat().st_mtime_ns
    assert prepare_iceberg_runtime(tmp_path)[-1].stat().st_mtime_ns == mtime
    with zipfile.ZipFile(shaded) as z:
        names = z.namelist()
        assert "org/apache/iceberg/shaded/com/fasterxml/jackson/core/JsonFactoryBuilder.class" in names
        assert not [n for n in names if n.startswith("com/fasterxml/")]
        data = z.read("org/apache/iceberg/shaded/com/fasterxml/jackson/databind/ObjectMapper.class")
        assert b"Lcom/fasterxml/jackson/" not in data
        assert b"org/apache/iceberg/shaded/com/fasterxml/jackson/core/JsonFactory" in data
        assert relocate_class(data) == data  # already relocated: nothing left to rewrite
