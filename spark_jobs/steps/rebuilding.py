"""Rebuild one layer of a source from the layer below: what `ticdc-lake rebuild` and the `ticdc_rebuild` DAG run.

silver is decoded again from all of bronze (per source: every table of a source comes from the same stream); gold
(current state) and history are replaced from silver, for every table of the source or the ones named. The result
equals what the incremental runs give, and running it again changes nothing. The step holds the source's lock
from start to end, so ingest runs of the source wait meanwhile.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spark_jobs.backfill import daily
from spark_jobs.errors import ConfigError
from spark_jobs.gold.build import RebuildScope, build_gold
from spark_jobs.gold.history import split_table
from spark_jobs.runtime.results import Result
from spark_jobs.silver.build import rebuild_silver
from spark_jobs.steps.context import ConfigRef, pipeline_config, writing
from spark_jobs.steps.requests import LAYERS


def parse_tables(text: str | None) -> frozenset[tuple[str, str]] | None:
    """`db.t,db.u` (backticks around a name that holds a dot or a comma) as (database, table) pairs; None: all."""
    if text is None or not text.strip():
        return None
    items, current, quoted = [], "", False
    for char in text:
        if char == "`":
            quoted = not quoted
        if char == "," and not quoted:
            items.append(current)
            current = ""
        else:
            current += char
    items.append(current)
    try:
        return frozenset(split_table(item.strip()) for item in items if item.strip())
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


@dataclass(frozen=True)
class RebuildRequest(Result):
    """A rebuild, validated before anything opens."""

    source: str
    layer: str
    tables: list[tuple[str, str]] | None  # gold or history only; None: every table of the source


def rebuild_request(params: Mapping[str, Any], config: ConfigRef = None) -> RebuildRequest:
    """A rebuild's request from a trigger form or the command line (`source`, `layer`, `tables` as text), checked
    against the configuration: a bad one raises ConfigError, naming what is wrong."""
    source, layer = str(params["source"]), str(params["layer"])
    pipeline_config(config, source)
    if layer not in LAYERS:
        raise ConfigError(f"rebuild: no layer {layer!r}; one of {', '.join(LAYERS)}")
    tables = parse_tables(params.get("tables"))
    if tables and layer == "silver":
        raise ConfigError("rebuild silver: silver is rebuilt per source (all its tables come from one stream)")
    return RebuildRequest(source, layer, sorted(tables) if tables is not None else None)


@dataclass(frozen=True)
class Rebuilt(Result):
    line: str  # what the layer holds now, in numbers

    def lines(self) -> list[str]:
        return [self.line]


def rebuild(params: Mapping[str, Any], config: ConfigRef = None) -> Rebuilt:
    """Rebuild a layer of a source from the one below (`params` as `rebuild_request` takes them), holding the
    source's lock throughout."""
    cfg = pipeline_config(config)
    request = rebuild_request(params, cfg)
    source, layer = request.source, request.layer
    named = frozenset(request.tables) if request.tables is not None else None
    with writing(cfg, source, f"rebuild {layer} {source}") as spark:
        if layer == "silver":
            r = rebuild_silver(spark, cfg, source)
            removed = daily.remove_left_out(spark, source, cfg.source(source).tables)
            return Rebuilt(
                f"{source}: silver rebuilt from bronze: {r.messages} messages, {r.row_changes} row changes, "
                f"{r.ddl_events} DDL, {r.quarantined} quarantined, {r.left_out} row changes left out by the table "
                f"rules{f' (and {len(removed)} daily tables or columns)' if removed else ''}; "
                f"consistent ts {r.consistent_ts}"
            )
        result = build_gold(spark, cfg, source, rebuild=RebuildScope(frozenset({layer}), named))
    counts = result.tables if layer == "gold" else result.history
    which = "every table" if named is None else ", ".join(sorted(f"{d}.{t}" for d, t in named))
    return Rebuilt(
        f"{source}: {layer} rebuilt from silver ({which}): {sum(counts.values())} "
        f"{'rows' if layer == 'gold' else 'versions'} in {len(counts)} tables, published as of TiDB ts "
        f"{result.consistent_ts}"
    )
