"""The entry layer's names: `steps.<name>` is the step itself whichever of its modules were imported first
(a step module named like its step would shadow it: `steps.rebuild` was the module once, and the CLI's
`ticdc-lake rebuild` failed with "'module' object is not callable"), and what a DAG file's parse imports through
them."""

import importlib
import json
import os
import pkgutil
import subprocess
import sys
import types
from pathlib import Path

import spark_jobs.steps as steps

REPO = Path(__file__).resolve().parents[2]


def test_every_step_name_is_its_step_after_every_step_module_is_imported():
    for module in pkgutil.iter_modules(steps.__path__):
        importlib.import_module(f"{steps.__name__}.{module.name}")
    shadowed = {name for name in steps.__all__ if isinstance(getattr(steps, name), types.ModuleType)}
    assert shadowed == set()
    assert callable(steps.rebuild) and callable(steps.maintain) and callable(steps.land)


def test_parsing_every_dag_file_imports_neither_spark_arrow_nor_the_ddl_parser():
    """Airflow parses each DAG file in a process of its own, every 30 s by default: a file that imported Spark's,
    Arrow's or the DDL parser's modules (a second of CPU) through a step's module cost the scheduler's host that
    much on every parse. The files are parsed here as the DAG processor does, after Airflow's own imports, with
    the default configuration's sources."""
    probe = (
        "import json, runpy, sys, airflow.sdk\n"
        "before = set(sys.modules)\n"
        "for path in sys.argv[1:]:\n"
        "    runpy.run_path(path)\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in set(sys.modules) - before})))\n"
    )
    files = sorted(str(path) for path in (REPO / "dags").glob("*.py"))
    env = {name: value for name, value in os.environ.items() if name != "TICDC_LAKE_CONFIG"}
    done = subprocess.run([sys.executable, "-c", probe, *files], capture_output=True, text=True, cwd=REPO, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    imported = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert "spark_jobs" in imported, "the DAG files were not parsed"
    assert imported & {"pyspark", "pyarrow", "numpy", "sqlglot", "msgspec"} == set()
