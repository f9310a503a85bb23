"""The local file system jar: compiled once into the user's cache, found again without compiling, and its absence
(no JDK) a warning with Hadoop's own file system in its place."""

from __future__ import annotations

import logging
import os
import zipfile

import pytest

from spark_jobs.runtime import local_fs


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    local_fs.local_fs_jar.cache_clear()
    yield tmp_path / "cache" / "ticdc-lakehouse" / "jars"
    local_fs.local_fs_jar.cache_clear()


def test_compiled_once_into_the_cache_then_found_without_javac(fresh_cache, monkeypatch):
    jar = local_fs.local_fs_jar()
    assert jar is not None and jar.parent == fresh_cache
    with zipfile.ZipFile(jar) as z:
        assert sorted(z.namelist()) == [
            "ticdc/lakehouse/NoForkLocalFileSystem$Raw.class",
            "ticdc/lakehouse/NoForkLocalFileSystem.class",
        ]
    assert [p.name for p in fresh_cache.iterdir()] == [jar.name]  # no temporary directory left
    local_fs.local_fs_jar.cache_clear()
    monkeypatch.setattr(local_fs, "_javac", lambda: pytest.fail("compiled again"))
    assert local_fs.local_fs_jar() == jar


def test_without_javac_hadoops_file_system_and_one_warning(fresh_cache, monkeypatch, caplog):
    monkeypatch.setattr(local_fs, "_javac", lambda: None)
    with caplog.at_level(logging.WARNING, logger=local_fs.__name__):
        assert local_fs.local_fs_jar() is None
    assert [r.getMessage() for r in caplog.records] == [
        "no javac (a JDK) found: Hadoop's local file system starts a chmod process for every file it writes"
    ]
    assert not fresh_cache.exists() or not any(fresh_cache.iterdir())


def test_a_source_javac_refuses_is_a_warning_naming_the_file(fresh_cache, monkeypatch, tmp_path, caplog):
    broken = tmp_path / "NoForkLocalFileSystem.java"
    broken.write_text("package ticdc.lakehouse; public class NoForkLocalFileSystem extends Missing {}\n")
    monkeypatch.setattr(local_fs, "SOURCE", broken)
    with caplog.at_level(logging.WARNING, logger=local_fs.__name__):
        assert local_fs.local_fs_jar() is None
    (message,) = [r.getMessage() for r in caplog.records]
    assert str(broken) in message and "cannot find symbol" in message


def test_the_jar_is_appended_to_the_driver_class_path_once(monkeypatch, tmp_path):
    monkeypatch.setenv("SPARK_DIST_CLASSPATH", "/opt/hadoop/lib/*")
    jar = tmp_path / "ticdc-local-fs-x.jar"
    local_fs.put_on_driver_class_path(jar)
    local_fs.put_on_driver_class_path(jar)
    assert os.environ["SPARK_DIST_CLASSPATH"] == f"/opt/hadoop/lib/*{os.pathsep}{jar}"
