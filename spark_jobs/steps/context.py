"""What every step needs before it touches a table: the configuration, the source's lock, the Spark session."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from spark_jobs.config import PipelineConfig, configured_source_names, load_config, reconciled_source_names
from spark_jobs.errors import named_transient_faults
from spark_jobs.runtime.lock import source_lock
from spark_jobs.runtime.spark_session import get_spark, hold_embedded_metastore

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ConfigRef = PipelineConfig | str | Path | None  # a loaded configuration, its file, or None: $TICDC_LAKE_CONFIG


def pipeline_config(config: ConfigRef = None, source: str | None = None) -> PipelineConfig:
    """The configuration, loaded and validated when given as a file; `source`, when given, must be one of its
    sources. A bad one raises ConfigError before anything opens."""
    loaded = config if isinstance(config, PipelineConfig) else load_config(config)
    if source is not None:
        loaded.source(source)
    return loaded


@contextmanager
def writing(config: PipelineConfig, source: str, what: str) -> Iterator[SparkSession]:
    """The Spark session, with the source's lock held for the block: runs of one source never write at once (a
    step of a run that holds the lock already, such as `run_once`, takes it again at no cost). A commit Iceberg
    refused because another writer (the maintenance DAG, in cluster mode) committed to the table first comes out
    as CommitConflictError, a TransientFault: retried as after an outage."""
    hold_embedded_metastore(config, what)
    with source_lock(config.local_dir, source, what):
        spark = get_spark(config, what)
        with named_transient_faults(source):
            yield spark


def reading(config: PipelineConfig, what: str) -> SparkSession:
    """The Spark session, for a step that only reads."""
    return get_spark(config, what)


def configured_sources(path: str | Path | None = None) -> list[str]:
    """The configured sources' names without validating the file: what a DAG file may read while it is parsed
    (a run validates the configuration first)."""
    return configured_source_names(path)


def reconciled_sources(path: str | Path | None = None) -> list[str]:
    """The sources with `reconcile.against` set, without validating the file: which ingest DAGs have a
    reconcile task."""
    return reconciled_source_names(path)
