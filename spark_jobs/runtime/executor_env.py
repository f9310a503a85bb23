"""The executors' Python for cluster mode: a packed virtual environment that Spark ships with `spark.archives`.

Spark documents two ways to get a package to executors: `--py-files` (pure-Python zips and eggs only) and a
packed environment unpacked beside each executor. Ours decodes with orjson, fastavro, pyarrow and
confluent-kafka, which are compiled, so only the packed environment works. It holds this package and what
code on an executor imports: the package's dependencies without pyspark (each executor has its own
`pyspark.zip`), the Iceberg jars (the driver serves them) and dbt (it runs on the driver, or through the Thrift
Server), plus pandas and numpy (PySpark's Arrow functions) and s3fs (snapshots and claim-check
files in an object store), at the versions of `requirements.lock`. It is a relocatable venv: its
`bin/python` is the base interpreter of the machine it was built on, so executors need the same Python
3.11 at the same path (true of the project's image and of a loopback cluster).

A cluster whose image already has the package installed needs none of this (leave `executor_env` unset).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import logging
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from spark_jobs.config import PROJECT_ROOT
from spark_jobs.errors import ConfigError

log = logging.getLogger(__name__)

EXTRA_REQUIREMENTS = ("pandas", "numpy", "s3fs")
# what no executor imports (test_packaging checks that decoding, landing and loading import none of them):
# each would add its whole dependency tree to every executor's unpacking
DRIVER_ONLY = ("pyspark", "snowpark-connect-deps-iceberg", "dbt-core", "dbt-spark")
LOCK = PROJECT_ROOT / "requirements.lock"


def executor_requirements() -> list[str]:
    """The package's dependencies for executors: pyproject's without DRIVER_ONLY, plus EXTRA_REQUIREMENTS."""
    declared = importlib.metadata.requires("ticdc-lakehouse") or []
    kept = [r for r in declared if "extra ==" not in r and _name(r) not in DRIVER_ONLY]
    return kept + list(EXTRA_REQUIREMENTS)


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _fingerprint() -> str:
    """Changes when the lock or any file of the package changes, so a stale archive is rebuilt."""
    digest = hashlib.sha256(LOCK.read_bytes())
    for path in sorted((PROJECT_ROOT / "spark_jobs").rglob("*")):
        if path.is_file() and path.suffix in (".py", ".avsc", ".properties"):
            digest.update(str(path.relative_to(PROJECT_ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def pack_executor_env(archive: Path) -> Path:
    """Build `archive` (a .tar.gz) unless it is current; returns it."""
    if not LOCK.is_file():
        raise ConfigError(f"{LOCK}: not found; the executors' environment is packed from a checkout")
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if uv is None:
        raise ConfigError("uv is required to pack the executors' environment (make venv installs it)")
    stamp = archive.with_name(archive.name + ".fingerprint")
    fingerprint = _fingerprint()
    if archive.is_file() and stamp.is_file() and stamp.read_text() == fingerprint:
        return archive
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=archive.parent, prefix=".executor-env-") as work:
        env = Path(work) / "env"
        python = f"{sys.version_info.major}.{sys.version_info.minor}"
        run = [uv, "--quiet"]
        subprocess.run([*run, "venv", "--relocatable", "--python", sys.executable, str(env)], check=True)
        target = ["--python", str(env / "bin" / "python")]
        subprocess.run(
            [*run, "pip", "install", *target, "--python-version", python, "-c", str(LOCK), *executor_requirements()],
            check=True,
        )
        # the package itself is pure Python: copied, not built (a build would write into the checkout)
        shutil.copytree(
            PROJECT_ROOT / "spark_jobs",
            env / "lib" / f"python{python}" / "site-packages" / "spark_jobs",
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )
        partial = Path(work) / archive.name
        with tarfile.open(partial, "w:gz", compresslevel=1) as tar:
            tar.add(env, arcname=".")
        partial.replace(archive)
    stamp.write_text(fingerprint)
    log.info("packed the executors' environment: %s (%.0f MB)", archive, archive.stat().st_size / 1e6)
    return archive
