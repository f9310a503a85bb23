"""Rebuild one layer of a source from the layer below: what `ticdc-lake rebuild` and the `ticdc_rebuild` DAG run.

silver is decoded again from all of bronze (per source: every table of a source comes from the same stream); gold
(current state) and history are replaced from silver, for every table of the source or the ones named. The result
equals what the incremental runs give, and running it again changes nothing. The caller holds the source's lock
(`runtime.lock`), so ingest runs of the source wait meanwhile.
"""

from __future__ import annotations

from spark_jobs.errors import ConfigError

LAYERS = ("silver", "gold", "history")


def parse_tables(text: str | None) -> frozenset[tuple[str, str]] | None:
    """`db.t,db.u` (backticks around a name that holds a dot or a comma) as (database, table) pairs; None: all."""
    from spark_jobs.gold.history import split_table

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


def rebuild_layer(spark, config, source: str, layer: str, tables: frozenset[tuple[str, str]] | None = None) -> str:
    """Rebuild `layer` of `source` (only `tables` of gold or history, if given); returns one summary line."""
    from spark_jobs.gold.build import RebuildScope, build_gold
    from spark_jobs.silver.build import rebuild_silver

    if layer not in LAYERS:
        raise ConfigError(f"rebuild: no layer {layer!r}; one of {', '.join(LAYERS)}")
    config.source(source)
    if layer == "silver":
        if tables:
            raise ConfigError("rebuild silver: silver is rebuilt per source (all its tables come from one stream)")
        r = rebuild_silver(spark, config, source)
        return (
            f"{source}: silver rebuilt from bronze: {r.messages} messages, {r.row_changes} row changes, "
            f"{r.ddl_events} DDL, {r.quarantined} quarantined; consistent ts {r.consistent_ts}"
        )
    result = build_gold(spark, config, source, rebuild=RebuildScope(frozenset({layer}), tables))
    counts = result.tables if layer == "gold" else result.history
    named = "every table" if tables is None else ", ".join(sorted(f"{d}.{t}" for d, t in tables))
    return (
        f"{source}: {layer} rebuilt from silver ({named}): {sum(counts.values())} "
        f"{'rows' if layer == 'gold' else 'versions'} in {len(counts)} tables, published as of TiDB ts "
        f"{result.consistent_ts}"
    )
