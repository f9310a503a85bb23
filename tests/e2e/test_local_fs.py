"""Embedded mode's local file system: the session writes through the subclass that sets permissions with java.nio
(no chmod process a file), the permissions are Hadoop's, and Iceberg's files keep their checksum files."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from urllib.parse import urlsplit

import pytest

pytestmark = pytest.mark.e2e


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_the_session_writes_local_files_with_hadoops_permissions_and_checksums(spark, tmp_path):
    jvm = spark._jvm
    hadoop_path = jvm.org.apache.hadoop.fs.Path
    fs = hadoop_path(tmp_path.as_uri()).getFileSystem(spark._jsc.hadoopConfiguration())
    assert fs.getClass().getName() == "ticdc.lakehouse.NoForkLocalFileSystem"

    umask = os.umask(0)
    os.umask(umask)
    written = tmp_path / "sub" / "part.bin"
    out = fs.create(hadoop_path(written.as_uri()), False)
    out.write(bytearray(b"x" * 100))
    out.close()
    assert _mode(written) == 0o666 & ~umask
    assert _mode(written.parent) == 0o777 & ~umask
    assert (written.parent / ".part.bin.crc").is_file()

    fs.setPermission(hadoop_path(written.as_uri()), jvm.org.apache.hadoop.fs.permission.FsPermission("640"))
    assert _mode(written) == 0o640

    spark.sql("CREATE TABLE silver.local_fs_check (id int) USING iceberg")
    try:
        spark.sql("INSERT INTO silver.local_fs_check VALUES (1)")
        location = spark.sql("DESCRIBE TABLE EXTENDED silver.local_fs_check").where("col_name = 'Location'").first()
        data = list((Path(urlsplit(location.data_type).path) / "data").rglob("*.parquet"))
        assert len(data) == 1 and data[0].with_name(f".{data[0].name}.crc").is_file()
        assert _mode(data[0]) == 0o666 & ~umask
    finally:
        spark.sql("DROP TABLE silver.local_fs_check PURGE")
