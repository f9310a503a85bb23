"""The steps of cluster mode that run no pipeline: the Spark Thrift Server for dbt, and the executors' Python."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

from spark_jobs.runtime.executor_env import pack_executor_env
from spark_jobs.runtime.thrift_server import spark_home, thrift_server_command
from spark_jobs.steps.context import ConfigRef, pipeline_config


def serve_thrift(config: ConfigRef = None, cores: int = 1) -> NoReturn:
    """The Spark Thrift Server in this process (a container's or a supervisor's signals reach it)."""
    command = thrift_server_command(pipeline_config(config), cores)
    os.environ.setdefault("SPARK_HOME", str(spark_home()))
    os.execv(command[0], command)


def pack_env(output: str | Path) -> Path:
    """The executors' packed Python environment (spark.archives), rebuilt unless current; returns the archive."""
    return pack_executor_env(Path(output).resolve())
