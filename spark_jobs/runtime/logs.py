"""Logging for the CLI, the demo and the tasks: a few clean lines of ours, the libraries' chatter off.

Spark's, Hive's and py4j's logs are silenced unless verbose: the CLI's -v sets TICDC_LAKE_VERBOSE=1, so that
every process started from it (the Airflow task runner, dbt, Spark's JVM) follows it too.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

VERBOSE_ENV = "TICDC_LAKE_VERBOSE"
QUIET_LOG4J = Path(__file__).with_name("log4j2-quiet.properties")
CHATTY_LIBRARIES = ("py4j", "urllib3", "filelock")
VERBOSE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def verbose_requested() -> bool:
    return os.environ.get(VERBOSE_ENV, "").strip().lower() in ("1", "true", "yes")


class CompactFormatter(logging.Formatter):
    """`12:00:01 message`; the level is named only for warnings and errors."""

    def __init__(self):
        super().__init__("%(asctime)s %(message)s", datefmt="%H:%M:%S")

    def formatMessage(self, record: logging.LogRecord) -> str:
        level = f"{record.levelname} " if record.levelno >= logging.WARNING else ""
        return f"{record.asctime} {level}{record.message}"


def configure_logging(verbose: bool = False) -> None:
    """Our loggers at INFO in the compact format, the libraries at WARNING; verbose (the argument or an
    inherited TICDC_LAKE_VERBOSE) means DEBUG with logger names, and is passed on to subprocesses."""
    if verbose:
        os.environ[VERBOSE_ENV] = "1"
    verbose = verbose_requested()
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(VERBOSE_FORMAT) if verbose else CompactFormatter())
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=[handler])
    quiet_libraries()


def quiet_libraries() -> None:
    """py4j, urllib3 and filelock at WARNING (INFO when verbose: their DEBUG lines trace every call)."""
    for name in CHATTY_LIBRARIES:
        logging.getLogger(name).setLevel(logging.INFO if verbose_requested() else logging.WARNING)


def with_quiet_spark_logs(conf: dict[str, str]) -> dict[str, str]:
    """Spark settings plus the quiet driver logging (log4j2 at ERROR, no console progress bars); verbose
    leaves Spark's own defaults. The log4j option goes first, so one the settings already hold still wins."""
    if verbose_requested():
        return conf
    java_options = f"-Dlog4j2.configurationFile={QUIET_LOG4J}"
    if conf.get("spark.driver.extraJavaOptions"):
        java_options += " " + conf["spark.driver.extraJavaOptions"]
    return {"spark.ui.showConsoleProgress": "false", **conf, "spark.driver.extraJavaOptions": java_options}
