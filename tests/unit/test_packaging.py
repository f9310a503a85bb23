"""`pip install .` gives the product alone: the wheel holds `spark_jobs` and its data files, not the development
kit (devkit/), the tests or the benchmarks, and installed into a new venv with nothing else, `ticdc-lake` runs
(`--help`, `config`) while the kit and its dependencies are absent.

The venv is filled from uv's cache (`make venv` filled it from requirements.lock), hard-linked: a few seconds, not a
download. Not offline: `uv pip sync` caches the wheels but not the metadata a resolution reads, which a new
machine's cache lacks (uv fetches a wheel's metadata then).

The development venv itself is checked for one thing: its packages are compiled to bytecode, as `make venv` leaves
them."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UV = Path(sys.executable).with_name("uv")


def run(*args, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=300, cwd=cwd)


def checked(*args, cwd: Path | None = None) -> str:
    done = run(*args, cwd=cwd)
    assert done.returncode == 0, f"{' '.join(map(str, args))}: {done.stderr[-2000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path]:
    """(the wheel, the venv it was installed into with its dependencies and nothing more)."""
    work = tmp_path_factory.mktemp("package")
    checked(UV, "build", "--wheel", "--quiet", "--out-dir", work / "dist", ROOT)
    wheel = next((work / "dist").glob("ticdc_lakehouse-*.whl"))
    checked(UV, "venv", "--quiet", "--python", sys.executable, work / "venv")
    python = work / "venv" / "bin" / "python"
    lock = ROOT / "requirements.lock"
    checked(UV, "pip", "install", "--quiet", "--link-mode", "hardlink", "--python", python, "-c", lock, wheel)
    return wheel, work / "venv"


def test_the_wheel_holds_the_product_and_not_the_kit(installed):
    wheel, _ = installed
    names = zipfile.ZipFile(wheel).namelist()
    packages = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert packages == {"spark_jobs"}
    assert "spark_jobs/cli.py" in names and "spark_jobs/steps/__init__.py" in names
    assert any(n.startswith("spark_jobs/codecs/") and n.endswith(".avsc") for n in names)
    assert "spark_jobs/runtime/java/NoForkLocalFileSystem.java" in names  # compiled on first use (runtime/local_fs.py)
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    required = [line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert not [r for r in required if r.split()[0].lower() in {"moto", "flask", "pytest", "playwright"}], required


def test_the_installed_product_runs_without_the_kit(installed, tmp_path):
    _, venv = installed
    absent = checked(
        venv / "bin" / "python",
        "-c",
        "import importlib.util as u; print([m for m in ('ticdc_devkit', 'moto', 'flask', 'pytest') if u.find_spec(m)])",
        cwd=tmp_path,
    )
    assert absent.strip() == "[]"
    lake = venv / "bin" / "ticdc-lake"
    assert "{decode,config,land,silver,gold," in checked(lake, "--help", cwd=tmp_path)

    shown = checked(lake, "config", "--config", ROOT / "config" / "pipeline.yaml", cwd=tmp_path)
    assert shown.startswith(f"{ROOT / 'config' / 'pipeline.yaml'}: valid; mode embedded, local directory ")
    assert "source shop: canal-json from shop_cdc" in shown

    bad = tmp_path / "bad.yaml"
    bad.write_text("sources: [{name: x}]\n")
    refused = run(lake, "config", "--config", bad, cwd=tmp_path)
    assert refused.returncode == 2 and f"{bad}: sources[0]: missing required key 'protocol'" in refused.stderr


EXECUTOR_CHECK = """
import importlib, sys
from spark_jobs.runtime.executor_env import DRIVER_ONLY

blocked = {name.replace("-", "_") for name in DRIVER_ONLY if name != "pyspark"} | {"dbt", "pyhive"}  # pyspark.zip: theirs

class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ImportError(f"an executor has no {name}")

sys.meta_path.insert(0, Refuse())
for module in sys.argv[1:]:
    importlib.import_module(module)
"""


def test_what_executors_run_imports_nothing_their_environment_leaves_out():
    """The executors' environment (cluster mode) leaves out dbt and the Iceberg jars: the modules whose functions
    run in Spark tasks (landing, decoding, snapshot loading, daily tables) must import without them."""
    modules = [
        "spark_jobs.bronze.land",
        "spark_jobs.silver.decode",
        "spark_jobs.silver.build",
        "spark_jobs.backfill.snapshot",
        "spark_jobs.backfill.dumpling",
        "spark_jobs.backfill.daily",
    ]
    done = subprocess.run([sys.executable, "-c", EXECUTOR_CHECK, *modules], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("module", ["airflow", "dbt.cli.main", "pyspark.sql", "pyarrow", "spark_jobs.silver.build"])
def test_the_venv_holds_compiled_bytecode(module):
    """`make venv` compiles site-packages and the checkout: these machines set PYTHONDONTWRITEBYTECODE, so a module
    without its `.pyc` is compiled from source by every process that imports it (uv 0.13 compiled only the two
    editable packages when the flag was on the install alone, and every run paid seconds of CPU for it)."""
    source = importlib.util.find_spec(module).origin
    assert Path(importlib.util.cache_from_source(source)).exists(), (
        f"{module}: no bytecode beside {source}; run make venv"
    )
