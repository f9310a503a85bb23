"""The steps that look rather than build: the configuration, decoding messages by hand, quarantine, a table as of
a moment. Quarantine replay writes, and holds the source's lock."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from spark_jobs.canonical.events import ChangeEvent
from spark_jobs.codecs import make_decoder
from spark_jobs.errors import DecodeError
from spark_jobs.gold.history import as_of as rows_as_of
from spark_jobs.gold.history import split_table, ts_at
from spark_jobs.runtime.results import Result
from spark_jobs.runtime.tables import SILVER_QUARANTINE, ensure_tables_once
from spark_jobs.silver.build import replay_quarantine
from spark_jobs.steps.context import ConfigRef, pipeline_config, reading, writing


@dataclass(frozen=True)
class ConfigSummary(Result):
    path: str
    mode: str
    local_dir: str
    names: list[str]  # the sources'
    sources: list[str]  # one line per source: name, protocol, topics, broker

    def lines(self) -> list[str]:
        return [f"{self.path}: valid; mode {self.mode}, local directory {self.local_dir}", *self.sources]


def check_config(config: ConfigRef = None, source: str | None = None) -> ConfigSummary:
    """The whole configuration validated (and `source` one of its sources); a bad one raises ConfigError."""
    cfg = pipeline_config(config, source)
    chosen = [s for s in cfg.sources if source is None or s.name == source]
    sources = [
        f"  source {s.name}: {s.protocol} from "
        f"{', '.join(s.topics) if s.topics else f'pattern {s.topic_pattern}'} at {s.kafka.bootstrap_servers}"
        for s in chosen
    ]
    return ConfigSummary(str(cfg.path), cfg.runtime.mode, str(cfg.local_dir), [s.name for s in chosen], sources)


Message = tuple[str, bytes | None, bytes | None]  # where it came from (for an error), key, value


def decode_messages(
    protocol: str, options: Mapping[str, Any], messages: Iterable[Message]
) -> Iterator[tuple[str, list[ChangeEvent] | DecodeError]]:
    """Each message decoded in order, as `ticdc-lake decode` shows it: its events, or the error that would
    quarantine it. No Spark, no tables."""
    decoder = make_decoder(protocol, options)
    for where, key, value in messages:
        try:
            yield where, decoder.decode(key, value, None)
        except DecodeError as exc:
            yield where, exc


@dataclass(frozen=True)
class QuarantineListing(Result):
    reasons: list[tuple[str, str, int]]  # source, reason, messages
    messages: list[str]  # the first messages, one line each

    def lines(self) -> list[str]:
        if not self.reasons:
            return ["quarantine is empty"]
        return [
            f"{'source':16} {'messages':>8}  reason",
            *(f"{source:16} {n:>8}  {reason}" for source, reason, n in self.reasons),
            "",
            *self.messages,
        ]


def quarantine_list(source: str | None = None, limit: int = 50, config: ConfigRef = None) -> QuarantineListing:
    """Quarantined messages: counts by source and reason, then the first `limit` messages."""
    from pyspark.sql import functions as F

    cfg = pipeline_config(config, source)
    sources = [source] if source else [s.name for s in cfg.sources]
    spark = reading(cfg, "quarantine list")
    ensure_tables_once(spark, "silver")
    quarantined = spark.table(SILVER_QUARANTINE).where(F.col("source").isin(sources))
    counts = (
        quarantined.groupBy("source", "reason")
        .agg(F.count("*").alias("n"))
        .orderBy("source", F.col("n").desc())
        .collect()
    )
    listed = (
        quarantined.select("source", "topic", "partition", "offset", "quarantined_at", "reason")
        .orderBy("source", "topic", "partition", "offset")
        .limit(limit)
        .collect()
    )
    return QuarantineListing(
        [(r["source"], r["reason"], r["n"]) for r in counts],
        [
            f"{r['source']} {r['topic']}[{r['partition']}]@{r['offset']} "
            f"({r['quarantined_at']:%Y-%m-%d %H:%M:%S}): {r['reason']}"
            for r in listed
        ],
    )


@dataclass(frozen=True)
class Replayed(Result):
    sources: list[
        tuple[str, int, int, int]
    ]  # source; quarantined before; of those decoded into silver; still quarantined

    def lines(self) -> list[str]:
        return [
            f"{source}: {before} quarantined, {decoded} decoded and moved into silver, {left} still quarantined"
            for source, before, decoded, left in self.sources
        ]


def quarantine_replay(source: str | None = None, config: ConfigRef = None) -> Replayed:
    """Decode the quarantined messages of `source` (default: of every source) again after a fix, holding each
    source's lock while its messages are replayed."""
    from pyspark.sql import functions as F

    cfg = pipeline_config(config, source)
    replayed = []
    for name in [source] if source else [s.name for s in cfg.sources]:
        with writing(cfg, name, f"quarantine replay {name}") as spark:
            ensure_tables_once(spark, "silver")
            before = spark.table(SILVER_QUARANTINE).where(F.col("source") == name).count()
            result = replay_quarantine(spark, cfg, name)
        replayed.append((name, before, result.decoded, result.quarantined))
    return Replayed(replayed)


@dataclass(frozen=True)
class AsOf(Result):
    table: str
    ts: int
    columns: list[str]
    rows: list[tuple[Any, ...]]  # the first rows asked for
    count: int  # all rows

    def lines(self) -> list[str]:
        shown = [" | ".join(self.columns), *(" | ".join("NULL" if v is None else str(v) for v in r) for r in self.rows)]
        return [*(shown if self.rows else []), f"{self.table} as of TiDB ts {self.ts}: {self.count} rows"]


def as_of(
    source: str,
    table: str,
    *,
    ts: int | None = None,
    time: dt.datetime | str | None = None,
    limit: int = 50,
    config: ConfigRef = None,
) -> AsOf:
    """A table's rows at a TiDB timestamp, or at a time (every commit up to that millisecond), from its history
    table. A bad table name or time raises ValueError."""
    database, name = split_table(table)
    if ts is None:
        if time is None:
            raise ValueError("give a TiDB timestamp or a time")
        ts = ts_at(dt.datetime.fromisoformat(time) if isinstance(time, str) else time)
    cfg = pipeline_config(config, source)
    rows = rows_as_of(reading(cfg, f"as-of {source}"), source, database, name, ts)
    return AsOf(f"{database}.{name}", ts, rows.columns, [tuple(r) for r in rows.limit(limit).collect()], rows.count())
