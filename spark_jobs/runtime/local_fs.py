"""Embedded mode's Hadoop file system for local files: Hadoop's own, with permissions set without a child process.

Without Hadoop's native library, which pyspark does not ship, Hadoop's local file system sets the permissions of
every file and directory it creates by running `chmod` in a child process of the driver's JVM. An Iceberg commit
creates data files, manifests, a manifest list and a metadata file, each with its checksum file, so a small write
started about ten processes (a first build of 20 small gold tables and its bookkeeping, 1,380). The subclass in
`java/NoForkLocalFileSystem.java` sets the same permissions through java.nio; everything else is Hadoop's, checksum
files included (docs/architecture.md, decision 25).

It is compiled once per machine with the JDK's `javac` into the user's cache, keyed by its source and Hadoop's jar,
so every process finds it at the same path (the tests' class-data-sharing archive needs one class path). Without a
`javac` the pipeline runs on Hadoop's file system: the same files, more slowly.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

from spark_jobs.runtime.iceberg_runtime import pyspark_jars

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("java") / "NoForkLocalFileSystem.java"
CLASS_NAME = "ticdc.lakehouse.NoForkLocalFileSystem"
HADOOP_API_JAR = "hadoop-client-api-*.jar"


def _cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ticdc-lakehouse" / "jars"


def _javac() -> str | None:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "javac").is_file():
        return str(Path(java_home) / "bin" / "javac")
    return shutil.which("javac")


def _hadoop_api_jar() -> Path:
    jars = sorted(pyspark_jars().glob(HADOOP_API_JAR))
    if not jars:
        raise RuntimeError(f"no {HADOOP_API_JAR} among pyspark's jars")
    return jars[-1]


@functools.cache
def local_fs_jar() -> Path | None:
    """The jar holding `CLASS_NAME`, compiled on first use; None (and one warning) when no `javac` is found."""
    hadoop = _hadoop_api_jar()
    source = SOURCE.read_bytes()
    digest = hashlib.sha256(source + hadoop.name.encode()).hexdigest()[:12]
    jar = _cache_dir() / f"ticdc-local-fs-{digest}.jar"
    if jar.is_file():
        return jar
    javac = _javac()
    if javac is None:
        log.warning(
            "no javac (a JDK) found: Hadoop's local file system starts a chmod process for every file it writes"
        )
        return None
    jar.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=jar.parent) as tmp:
        done = subprocess.run(
            [javac, "-nowarn", "--release", "11", "-d", tmp, "-cp", str(hadoop), str(SOURCE)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            log.warning("%s did not compile %s (Hadoop's local file system is used): %s", javac, SOURCE, done.stderr)
            return None
        built = Path(tmp) / "built.jar"
        with zipfile.ZipFile(built, "w", zipfile.ZIP_DEFLATED) as out:
            for cls in sorted(Path(tmp).rglob("*.class")):
                out.write(cls, cls.relative_to(tmp).as_posix())
        built.replace(jar)  # atomic: a process compiling beside this one writes the same bytes
    log.info("compiled %s into %s", CLASS_NAME, jar)
    return jar


def put_on_driver_class_path(jar: Path) -> None:
    """Append the jar to the class path of the driver JVM this process launches. Spark's launcher puts
    SPARK_DIST_CLASSPATH last, so a class-data-sharing archive dumped without it still matches its prefix."""
    entries = [e for e in os.environ.get("SPARK_DIST_CLASSPATH", "").split(os.pathsep) if e]
    if str(jar) not in entries:
        os.environ["SPARK_DIST_CLASSPATH"] = os.pathsep.join([*entries, str(jar)])
