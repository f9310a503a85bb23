"""Erase one key of one upstream table from a source's lakehouse: what `ticdc-lake erase` and the `ticdc_erase` DAG
run (`spark_jobs.erasure` says what goes, and in what order). The step holds the source's lock from start to end,
so the ingest runs of the source wait meanwhile."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spark_jobs.erasure import Erased, parse_key
from spark_jobs.errors import ConfigError
from spark_jobs.gold.history import split_table
from spark_jobs.runtime.results import Result
from spark_jobs.steps.context import ConfigRef, pipeline_config, writing


@dataclass(frozen=True)
class ErasureRequest(Result):
    """An erasure, validated before anything opens: never a value in it but the key's columns' names."""

    source: str
    database: str
    table: str
    key_columns: list[str]
    requested_by: str


def erase_request(params: Mapping[str, Any], config: ConfigRef = None) -> ErasureRequest:
    """An erasure's request from a trigger form or the command line (`source`, `table` as `db.t`, `key` as a JSON
    object, `requested_by`), checked against the configuration: a bad one raises ConfigError naming what is
    wrong."""
    source = str(params.get("source") or "")
    pipeline_config(config, source)
    try:
        database, table = split_table(str(params.get("table") or ""))
    except ValueError as exc:
        raise ConfigError(f"erase: {exc}") from None
    key = parse_key(str(params.get("key") or ""))
    requested_by = str(params.get("requested_by") or "").strip()
    if not requested_by:
        raise ConfigError("erase: requested_by must name who asks for the erasure (it is recorded)")
    return ErasureRequest(source, database, table, sorted(key), requested_by)


def erase(params: Mapping[str, Any], config: ConfigRef = None) -> Erased:
    """Erase the key (`params` as `erase_request` takes them), holding the source's lock throughout."""
    from spark_jobs import erasure

    cfg = pipeline_config(config)
    request = erase_request(params, cfg)
    key = parse_key(str(params["key"]))
    with writing(cfg, request.source, f"erase from {request.database}.{request.table}") as spark:
        return erasure.erase(spark, cfg, request.source, request.database, request.table, key, request.requested_by)
