"""The pipeline configuration: sources and runtime, validated before anything runs.

One YAML file declares everything. A mistake stops the run with one line naming the file, the key
and what is allowed. Secrets are never in the file: a `*_env` key names the environment variable that holds
them, or a `*connection` key names an Airflow connection; their values are never logged.
Strings may use `${VAR}` or `${VAR:-default}` for non-secret values such as broker addresses.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import types
import typing
import zoneinfo
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from spark_jobs.codecs import PROTOCOLS, validate_options
from spark_jobs.errors import ConfigError

# The checkout: the default config, the DAGs and the dbt project live beside the package.
PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = PROJECT_ROOT / "config" / "pipeline.yaml"
_ENV_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_DURATION_RE = re.compile(r"(\d+)([smhd])")
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class SparkSettings:
    master: str = "local[2]"
    driver_memory: str = "2g"
    shuffle_partitions: int = 4
    conf: dict[str, str] = field(default_factory=dict)
    # cluster: the executors' Python (`ticdc-lake pack-env`), shipped through spark.archives;
    # none: the executors' own `python3` has the package and its dependencies (the project's image)
    executor_env: str | None = None


@dataclass(frozen=True)
class CatalogSettings:
    """Cluster mode only: the shared catalog over object storage."""

    type: str = "hive"  # hive | rest
    uri: str = ""
    warehouse: str = ""
    credentials_env: str | None = None  # env var holding the catalog token (REST), never logged


@dataclass(frozen=True)
class RuntimeSettings:
    mode: str = "embedded"  # embedded | cluster
    local_dir: str = ".local"  # embedded: warehouse, metastore, broker logs (relative to the file)
    spark: SparkSettings = field(default_factory=SparkSettings)
    catalog: CatalogSettings = field(default_factory=CatalogSettings)
    packages: list[str] = field(default_factory=list)  # cluster: jars by Maven coordinate (none: built locally)
    dbt_target: str = "embedded"  # embedded: dbt in the job's SparkSession; cluster: through the Thrift Server
    thrift_server: str | None = None  # host:port of the Spark Thrift Server (dbt_target cluster)


@dataclass(frozen=True)
class KafkaSettings:
    bootstrap_servers: str
    security_protocol: str = "PLAINTEXT"  # PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL
    sasl_mechanism: str | None = None  # PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512
    sasl_username_env: str | None = None
    sasl_password_env: str | None = None
    sasl_connection: str | None = None  # an Airflow connection id holding login and password instead
    ssl_ca_location: str | None = None
    client: dict[str, str] = field(default_factory=dict)  # extra librdkafka settings (no secrets)
    timeout_seconds: int = 30  # a metadata or offsets request unanswered this long stops the run (transient)


@dataclass(frozen=True)
class SchemaRegistrySettings:
    url: str
    username_env: str | None = None
    password_env: str | None = None
    connection: str | None = None  # an Airflow connection id holding login and password instead
    ca_file: str | None = None


@dataclass(frozen=True)
class LandingSettings:
    start: str = "earliest"  # earliest | latest | an epoch-milliseconds timestamp
    max_records_per_run: int = 1_000_000
    max_bytes_per_run: int = 1_073_741_824
    accept_gaps: bool = False


@dataclass(frozen=True)
class DecodingSettings:
    max_wait_minutes: int = 60  # a row waiting for its schema (Simple) goes to quarantine after this


@dataclass(frozen=True)
class TableLayout:
    """How a gold table and its history are laid out in Iceberg (README, "How gold is laid out"): partition fields
    (`col`, `years(col)`, `months(col)`, `days(col)`, `hours(col)`, `bucket(N, col)`, `truncate(N, col)`) and a
    sort order (`col`, `col desc`), by upstream column names. Changed later, the next run evolves the tables'
    spec in place (no rewrite: files written before keep the spec they were written in)."""

    partition_by: list[str] = field(default_factory=list)
    sort_by: list[str] = field(default_factory=list)

    @property
    def partition_fields(self) -> list[tuple[str, int | None, str]]:
        """(transform, its width or bucket count, column) per partition field; raises ValueError naming a bad one."""
        return [partition_field(text) for text in self.partition_by]

    @property
    def sort_fields(self) -> list[tuple[str, str]]:
        """(column, asc or desc) per sort field; raises ValueError naming a bad one."""
        return [sort_field(text) for text in self.sort_by]


PARTITION_TRANSFORMS = ("identity", "years", "months", "days", "hours", "bucket", "truncate")
_PARTITION_RE = re.compile(
    r"\s*(?:(?P<time>years|months|days|hours)\s*\(\s*(?P<tc>[^()]+?)\s*\)"
    r"|(?P<sized>bucket|truncate)\s*\(\s*(?P<n>[0-9]+)\s*,\s*(?P<sc>[^()]+?)\s*\)"
    r"|(?P<ic>[^()]+?))\s*",
    re.IGNORECASE,
)


def partition_field(text: str) -> tuple[str, int | None, str]:
    match = _PARTITION_RE.fullmatch(text)
    if not match or not text.strip():
        raise ValueError(
            f"{text!r} is not a partition field: col, years|months|days|hours(col), bucket|truncate(N, col)"
        )
    if match["time"]:
        return match["time"].lower(), None, match["tc"]
    if match["sized"]:
        if int(match["n"]) <= 0:
            raise ValueError(f"{text!r}: {match['sized']} needs a positive number")
        return match["sized"].lower(), int(match["n"]), match["sc"]
    return "identity", None, match["ic"]


def sort_field(text: str) -> tuple[str, str]:
    match = re.fullmatch(r"\s*(.+?)(?:\s+(asc|desc))?\s*", text, re.IGNORECASE)
    if not match or not text.strip():
        raise ValueError(f"{text!r} is not a sort field: col, col asc or col desc")
    return match[1], (match[2] or "asc").lower()


@dataclass(frozen=True)
class TypeMappings:
    """Optional gold types for MySQL types whose default gold type users often do not want (README, "Column
    types in gold"). Past the narrower type's range a value stops the run, naming the table and column."""

    bigint_unsigned: str = "decimal"  # decimal: decimal(20,0), every value fits; bigint: bigint
    wide_decimal: str = "string"  # DECIMAL wider than 38 digits: string; decimal38: decimal(38, its scale)
    tinyint1: str = "int"  # TINYINT(1), MySQL's BOOL, as the DDL declares it: int; boolean: false for 0, else true

    @property
    def text(self) -> str | None:
        """What gold.tables records (None: the defaults)."""
        return None if self == TypeMappings() else json.dumps(dataclasses.asdict(self), sort_keys=True)


TYPE_MAPPINGS = {
    "bigint_unsigned": ("decimal", "bigint"),
    "wide_decimal": ("string", "decimal38"),
    "tinyint1": ("int", "boolean"),
}


@dataclass(frozen=True)
class GoldSettings:
    """How the source's gold tables hold what has no row identity (README, "Tables without a key") and how a
    delete lands in a keyed table's current state (README, "How deletes land"): `hard` removes the row, `soft`
    keeps it with `_deleted_at`, `ignore` keeps it as it was (a key change still removes the old key).
    `table_deletes` maps `db.table` globs to a mode; the first that matches a table wins, else `deletes`."""

    keyless_tables: str = "changes"  # changes: a change table per keyless table; skip: no gold table for them
    deletes: str = "hard"
    table_deletes: dict[str, str] = field(default_factory=dict)
    layouts: dict[str, TableLayout] = field(default_factory=dict)  # db.table glob -> layout; the first match wins
    types: TypeMappings = field(default_factory=TypeMappings)

    def delete_mode(self, database: str, table: str) -> str:
        """The delete mode of `database.table`."""
        return next((m for p, m in self.table_deletes.items() if _matches(p, database, table)), self.deletes)

    def layout(self, database: str, table: str) -> tuple[str, TableLayout]:
        """The layout of `database.table` and the glob that set it ("" and no layout: none did)."""
        return next(((p, lay) for p, lay in self.layouts.items() if _matches(p, database, table)), ("", TableLayout()))


KEYLESS_TABLE_MODES = ("changes", "skip")
DELETE_MODES = ("hard", "soft", "ignore")


@dataclass(frozen=True)
class ReconcileSettings:
    """What the ingest DAG's `reconcile` task compares gold with after every run (README, "Reconciliation"): a
    Dumpling export's location, `mysql://user@host:port` (the password from $TICDC_UPSTREAM_PASSWORD) or
    `airflow:CONN_ID`. Unset: the DAG has no reconcile task."""

    against: str | None = None
    diff: bool = False  # list the keys of differing rows, not only the counts and hashes


@dataclass(frozen=True)
class TableRules:
    """Which upstream tables the lakehouse holds (README, "Which tables"): `db.table` globs (`*` any run of
    characters, `?` one), compared without case as TiDB compares names. A table is kept when it matches an
    `include` rule (or there are none) and no `exclude` rule. `exclude_columns` maps a `db.table` glob to the
    columns left out of its tables (names without case; a key column is always kept). Bronze keeps every raw
    message."""

    include: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    exclude_columns: dict[str, list[str]] = field(default_factory=dict)

    @property
    def filters(self) -> bool:
        """Whether some table is left out."""
        return bool(self.include or self.exclude)

    @property
    def active(self) -> bool:
        """Whether some table or column is left out."""
        return self.filters or bool(self.exclude_columns)

    def left_out_columns(self, database: str | None, table: str | None, key_columns: Iterable[str] = ()) -> set[str]:
        """The columns (lower case) `exclude_columns` leaves out of `database.table`; a key column never."""
        return {
            column.lower()
            for pattern, columns in self.exclude_columns.items()
            if _matches(pattern, database, table)
            for column in columns
        } - {k.lower() for k in key_columns}

    def keeps(self, database: str | None, table: str | None) -> bool:
        """Whether rows of `database.table` reach silver; statements of no table (a database's) always do."""
        if table is None or not self.filters:
            return True

        def matches(patterns: list[str]) -> bool:
            return any(_matches(pattern, database, table) for pattern in patterns)

        return (not self.include or matches(self.include)) and not matches(self.exclude)


def _matches(pattern: str, database: str | None, table: str | None) -> bool:
    db, tb = glob_regexes(pattern)
    flags = re.IGNORECASE | re.DOTALL
    return table is not None and bool(re.fullmatch(db, database or "", flags) and re.fullmatch(tb, table, flags))


def glob_parts(pattern: str) -> tuple[str, str] | None:
    """A `db.table` rule's two parts, split at the first dot outside backquotes (a backquoted part is a name as
    it is, `` a backquote: `a.b`.t), each still with its backquotes; None when it is not two parts."""
    quoted, current = False, ""
    parts: list[str] = []
    for c in pattern:
        if c == "`":
            quoted = not quoted
        if c == "." and not quoted and not parts:
            parts.append(current)
            current = ""
            continue
        current += c
    parts.append(current)
    if len(parts) != 2 or not all(parts) or quoted:
        return None
    return parts[0], parts[1]


@cache
def glob_regexes(pattern: str) -> tuple[str, str]:
    """A `db.table` rule as two regular expressions, of the database and of the table, that Python and Java
    (Spark's `rlike`) read alike: `*` any run of characters, `?` one, a backquoted part a name as it is."""
    parts = glob_parts(pattern)
    if parts is None:
        raise ValueError(f"{pattern!r} is not db.table")

    def regex(glob: str) -> str:
        if len(glob) >= 2 and glob[0] == glob[-1] == "`":
            return re.escape(glob[1:-1].replace("``", "`"))
        return "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in glob)

    return regex(parts[0]), regex(parts[1])


@dataclass(frozen=True)
class SourceSettings:
    name: str
    protocol: str
    kafka: KafkaSettings
    topics: list[str] = field(default_factory=list)
    topic_pattern: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    schema_registry: SchemaRegistrySettings | None = None
    landing: LandingSettings = field(default_factory=LandingSettings)
    decoding: DecodingSettings = field(default_factory=DecodingSettings)
    gold: GoldSettings = field(default_factory=GoldSettings)
    reconcile: ReconcileSettings = field(default_factory=ReconcileSettings)
    tables: TableRules = field(default_factory=TableRules)


@dataclass(frozen=True)
class MaintenanceSettings:
    """What `ticdc-lake maintain` keeps of every table (snapshots referenced by a tag or branch are always kept)."""

    snapshot_retention_days: int = 7  # snapshots older than this are expired ...
    retain_last: int = 10  # ... but never the newest this many of main
    orphan_age_hours: int = 72  # files no snapshot references are deleted once older than this
    # in embedded mode a continuous driver holds the metastore, so it maintains the lakehouse itself this often
    continuous_every: str = "1d"

    @property
    def continuous_interval(self) -> timedelta:
        return parse_duration(self.continuous_every)


@dataclass(frozen=True)
class FreshnessSettings:
    """How old a source's consistent timestamp may be (durations: 90s, 30m, 2h, 1d); no error_after: never fail."""

    warn_after: str = "30m"
    error_after: str | None = None

    @property
    def warn(self) -> timedelta:
        return parse_duration(self.warn_after)

    @property
    def error(self) -> timedelta | None:
        return parse_duration(self.error_after) if self.error_after is not None else None


@dataclass(frozen=True)
class DailySettings:
    """The daily as-of tables (`ticdc_daily__<source>`): a day ends at midnight in this IANA time zone."""

    timezone: str = "UTC"


@dataclass(frozen=True)
class PipelineConfig:
    sources: list[SourceSettings]
    runtime: RuntimeSettings = field(default_factory=RuntimeSettings)
    maintenance: MaintenanceSettings = field(default_factory=MaintenanceSettings)
    freshness: FreshnessSettings = field(default_factory=FreshnessSettings)
    daily: DailySettings = field(default_factory=DailySettings)
    path: Path = Path(".")

    def source(self, name: str) -> SourceSettings:
        for s in self.sources:
            if s.name == name:
                return s
        raise ConfigError(f"{self.path}: no source named {name!r}; sources: {', '.join(s.name for s in self.sources)}")

    @property
    def local_dir(self) -> Path:
        p = Path(self.runtime.local_dir)
        return p if p.is_absolute() else (self.path.parent / p).resolve()


def parse_duration(text: str) -> timedelta:
    """`90s`, `30m`, `2h` or `1d` as a timedelta; ValueError for anything else."""
    match = _DURATION_RE.fullmatch(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a duration; use a whole number and s, m, h or d (30m, 2h)")
    return timedelta(seconds=int(match[1]) * _DURATION_UNITS[match[2]])


def _expand_env(value: str) -> str:
    return _ENV_RE.sub(
        lambda m: os.environ.get(m.group(1), m.group(2) if m.group(2) is not None else m.group(0)), value
    )


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        return " or ".join(_type_name(a) for a in typing.get_args(tp) if a is not type(None))
    if origin is not None:
        return origin.__name__
    return "mapping" if dataclasses.is_dataclass(tp) else tp.__name__


def _build(tp: Any, data: Any, where: str, file: Path) -> Any:
    """Build a value of type `tp` from YAML data; the first mistake raises one ConfigError line."""

    def fail(what: str) -> ConfigError:
        return ConfigError(f"{file}: {where}: {what}")

    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if data is None:
            return None
        return _build(args[0], data, where, file)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(data, dict):
            raise fail(f"must be a mapping, got {type(data).__name__}")
        hints = typing.get_type_hints(tp)
        fields = {f.name: f for f in dataclasses.fields(tp) if f.name != "path"}
        unknown = sorted(set(data) - set(fields))
        if unknown:
            raise fail(f"unknown key {unknown[0]!r}; allowed: {', '.join(fields)}")
        kwargs = {}
        for name, f in fields.items():
            if name in data:
                kwargs[name] = _build(hints[name], data[name], f"{where}.{name}" if where else name, file)
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise fail(f"missing required key {name!r}")
        return tp(**kwargs)
    if origin is list:
        if not isinstance(data, list):
            raise fail(f"must be a list, got {type(data).__name__}")
        (item,) = typing.get_args(tp)
        return [_build(item, v, f"{where}[{i}]", file) for i, v in enumerate(data)]
    if origin is dict:
        if not isinstance(data, dict):
            raise fail(f"must be a mapping, got {type(data).__name__}")
        _, value_tp = typing.get_args(tp)
        return {
            str(k): (
                _build(value_tp, v, f"{where}.{k}", file)
                if value_tp is not Any
                else (_expand_env(v) if isinstance(v, str) else v)
            )
            for k, v in data.items()
        }
    if tp is bool:
        if not isinstance(data, bool):
            raise fail(f"must be true or false, got {data!r}")
        return data
    if tp is int:
        if isinstance(data, bool) or not isinstance(data, int):
            raise fail(f"must be an integer, got {data!r}")
        return data
    if tp is str:
        if isinstance(data, (dict, list)) or data is None:
            raise fail(f"must be a string, got {type(data).__name__}")
        return _expand_env(str(data))
    return data


def _check(config: PipelineConfig, file: Path) -> None:
    def fail(where: str, what: str) -> ConfigError:
        return ConfigError(f"{file}: {where}: {what}")

    rt = config.runtime
    if rt.mode not in ("embedded", "cluster"):
        raise fail("runtime.mode", f"{rt.mode!r} is not allowed; allowed: embedded, cluster")
    if rt.mode == "cluster" and not rt.catalog.uri:
        raise fail("runtime.catalog.uri", "required in cluster mode")
    if rt.dbt_target not in ("embedded", "cluster"):
        raise fail("runtime.dbt_target", f"{rt.dbt_target!r} is not allowed; allowed: embedded, cluster")
    if rt.dbt_target == "cluster" and rt.mode != "cluster":
        raise fail("runtime.dbt_target", "cluster needs runtime.mode cluster (the Thrift Server shares its catalog)")
    if rt.dbt_target == "cluster" and not re.fullmatch(r"[^:\s]+:\d+", rt.thrift_server or ""):
        raise fail("runtime.thrift_server", f"must be host:port for dbt_target cluster, got {rt.thrift_server!r}")
    if rt.catalog.type not in ("hive", "rest"):
        raise fail("runtime.catalog.type", f"{rt.catalog.type!r} is not allowed; allowed: hive, rest")
    m = config.maintenance
    if m.snapshot_retention_days < 0:
        raise fail("maintenance.snapshot_retention_days", f"must be 0 or more, got {m.snapshot_retention_days}")
    if m.retain_last < 1:
        raise fail("maintenance.retain_last", f"must be 1 or more, got {m.retain_last}")
    if m.orphan_age_hours < 0:
        raise fail("maintenance.orphan_age_hours", f"must be 0 or more, got {m.orphan_age_hours}")
    try:
        if not m.continuous_interval:
            raise fail("maintenance.continuous_every", "must be longer than 0")
    except ValueError as exc:
        raise fail("maintenance.continuous_every", str(exc)) from None
    durations = {}
    for key in ("warn_after", "error_after"):
        text = getattr(config.freshness, key)
        if text is None:
            continue
        try:
            durations[key] = parse_duration(text)
        except ValueError as exc:
            raise fail(f"freshness.{key}", str(exc)) from None
        if not durations[key]:
            raise fail(f"freshness.{key}", "must be longer than 0")
    if "error_after" in durations and durations["warn_after"] > durations["error_after"]:
        raise fail("freshness.warn_after", "must not be longer than freshness.error_after")
    try:
        zoneinfo.ZoneInfo(config.daily.timezone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise fail(
            "daily.timezone",
            f"{config.daily.timezone!r} is not a known time zone; use an IANA name (UTC, Asia/Shanghai)",
        ) from None
    if not config.sources:
        raise fail("sources", "at least one source is required")
    names: set[str] = set()
    for i, s in enumerate(config.sources):
        where = f"sources[{i}]"
        if not _NAME_RE.match(s.name):
            raise fail(f"{where}.name", f"{s.name!r} must be lowercase letters, digits and underscores")
        if s.name in names:
            raise fail(f"{where}.name", f"duplicate source name {s.name!r}")
        names.add(s.name)
        if s.protocol not in PROTOCOLS:
            raise fail(f"{where}.protocol", f"{s.protocol!r} is not allowed; allowed: {', '.join(PROTOCOLS)}")
        if bool(s.topics) == bool(s.topic_pattern):
            raise fail(f"{where}", "give exactly one of 'topics' or 'topic_pattern'")
        if s.topic_pattern:
            try:
                re.compile(s.topic_pattern)
            except re.error as exc:
                raise fail(f"{where}.topic_pattern", f"not a regular expression: {exc}") from None
        try:
            validate_options(s.protocol, s.options)
        except ConfigError as exc:
            raise fail(f"{where}.options", str(exc)) from None
        if s.protocol == "avro" and s.schema_registry is None:
            raise fail(f"{where}.schema_registry", "required for protocol avro")
        if s.kafka.security_protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            raise fail(
                f"{where}.kafka.security_protocol",
                f"{s.kafka.security_protocol!r} is not allowed; allowed: PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL",
            )
        if s.kafka.timeout_seconds < 1:
            raise fail(f"{where}.kafka.timeout_seconds", f"must be 1 or more, got {s.kafka.timeout_seconds}")
        start = s.landing.start
        if start not in ("earliest", "latest") and not start.isdigit():
            raise fail(
                f"{where}.landing.start", f"{start!r} is not allowed; allowed: earliest, latest, or epoch milliseconds"
            )
        if s.landing.max_records_per_run <= 0 or s.landing.max_bytes_per_run <= 0:
            raise fail(f"{where}.landing", "max_records_per_run and max_bytes_per_run must be positive")
        rules = [(f"{key}[{j}]", p) for key in ("include", "exclude") for j, p in enumerate(getattr(s.tables, key))]
        for key, pattern in [*rules, *((f"exclude_columns.{p}", p) for p in s.tables.exclude_columns)]:
            if glob_parts(pattern) is None:
                raise fail(
                    f"{where}.tables.{key}",
                    f"{pattern!r} must be db.table (globs * and ?; a name with a dot in backquotes: `a.b`.t)",
                )
        for pattern, columns in s.tables.exclude_columns.items():
            if not columns or not all(columns):
                raise fail(f"{where}.tables.exclude_columns.{pattern}", "must list one or more column names")
        modes = [("deletes", s.gold.deletes), *((f"table_deletes.{p}", m) for p, m in s.gold.table_deletes.items())]
        for key, mode in modes:
            if mode not in DELETE_MODES:
                raise fail(f"{where}.gold.{key}", f"{mode!r} is not allowed; allowed: {', '.join(DELETE_MODES)}")
        if s.protocol == "avro" and "ignore" in {mode for _, mode in modes}:
            raise fail(
                f"{where}.gold",
                "delete mode ignore needs deletes that carry their commit ts, to tell a key change from a delete; "
                'Avro\'s deletes carry none (README, "How deletes land")',
            )
        for pattern in s.gold.table_deletes:
            if glob_parts(pattern) is None:
                raise fail(f"{where}.gold.table_deletes.{pattern}", f"{pattern!r} must be db.table (globs * and ?)")
        for pattern, layout in s.gold.layouts.items():
            if glob_parts(pattern) is None:
                raise fail(f"{where}.gold.layouts.{pattern}", f"{pattern!r} must be db.table (globs * and ?)")
            for key in ("partition_by", "sort_by"):
                for j, text in enumerate(getattr(layout, key)):
                    try:
                        partition_field(text) if key == "partition_by" else sort_field(text)
                    except ValueError as exc:
                        raise fail(f"{where}.gold.layouts.{pattern}.{key}[{j}]", str(exc)) from None
        for key, allowed in TYPE_MAPPINGS.items():
            if getattr(s.gold.types, key) not in allowed:
                raise fail(
                    f"{where}.gold.types.{key}",
                    f"{getattr(s.gold.types, key)!r} is not allowed; allowed: {', '.join(allowed)}",
                )
        if s.gold.keyless_tables not in KEYLESS_TABLE_MODES:
            raise fail(
                f"{where}.gold.keyless_tables",
                f"{s.gold.keyless_tables!r} is not allowed; allowed: {', '.join(KEYLESS_TABLE_MODES)}",
            )


def config_path(path: str | Path | None = None) -> Path:
    """The config file: the one given, else `TICDC_LAKE_CONFIG`, else the embedded default."""
    return Path(path or os.environ.get("TICDC_LAKE_CONFIG") or DEFAULT_CONFIG).resolve()


def _unvalidated_sources(path: str | Path | None) -> list[dict]:
    """The sources as the file has them, named ones only, without validating: cheap enough for DAG parsing
    (each run validates)."""
    try:
        doc = yaml.safe_load(config_path(path).read_text()) or {}
    except (OSError, yaml.YAMLError):
        return []
    sources = doc.get("sources") if isinstance(doc, dict) else None
    return [s for s in sources or [] if isinstance(s, dict) and isinstance(s.get("name"), str)]


def configured_source_names(path: str | Path | None = None) -> list[str]:
    """Source names only, without validating."""
    return [s["name"] for s in _unvalidated_sources(path)]


def reconciled_source_names(path: str | Path | None = None) -> list[str]:
    """The sources with `reconcile.against` set, without validating: whose ingest DAG has a reconcile task."""
    return [
        s["name"]
        for s in _unvalidated_sources(path)
        if isinstance(s.get("reconcile"), dict) and s["reconcile"].get("against")
    ]


def load_config(path: str | Path | None = None) -> PipelineConfig:
    """Load and validate; `TICDC_LAKE_CONFIG` names the file when no path is given."""
    file = config_path(path)
    try:
        data = yaml.safe_load(file.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{file}: configuration file not found") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{file}: not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{file}: must be a mapping with 'sources' and 'runtime'")
    config = dataclasses.replace(_build(PipelineConfig, data, "", file), path=file)
    _check(config, file)
    return config


def secret(env_name: str | None) -> str | None:
    """A secret's value from the environment; a named but unset variable is a config error."""
    if not env_name:
        return None
    value = os.environ.get(env_name)
    if value is None:
        raise ConfigError(f"environment variable {env_name} (a secret named in the config) is not set")
    return value


def connection_login(connection_id: str) -> tuple[str, str]:
    """(login, password) of an Airflow connection (its secrets backend, or AIRFLOW_CONN_<ID>)."""
    try:
        from airflow.sdk import BaseHook

        conn = BaseHook.get_connection(connection_id)
    except Exception as exc:  # Airflow raises its own not-found type; the message names the id only
        raise ConfigError(
            f"Airflow connection {connection_id!r} (named in the config) is not available: {exc.__class__.__name__}"
        ) from None
    return conn.login or "", conn.password or ""


def decoder_options(source: SourceSettings) -> dict[str, Any]:
    """The codec options of a source, with the registry settings and secrets resolved."""
    options = dict(source.options)
    if source.schema_registry is not None:
        reg = source.schema_registry
        options["schema-registry-url"] = reg.url
        if reg.connection:
            options["schema-registry-username"], options["schema-registry-password"] = connection_login(reg.connection)
        elif reg.username_env:
            options["schema-registry-username"] = secret(reg.username_env)
            options["schema-registry-password"] = secret(reg.password_env)
        if reg.ca_file:
            options["schema-registry-ca-file"] = reg.ca_file
    return options


def kafka_client_settings(source: SourceSettings) -> dict[str, str]:
    """librdkafka settings for a source's consumers (secrets resolved here, never logged)."""
    k = source.kafka
    settings = {"bootstrap.servers": k.bootstrap_servers, "security.protocol": k.security_protocol, **k.client}
    if k.sasl_mechanism:
        settings["sasl.mechanism"] = k.sasl_mechanism
        if k.sasl_connection:
            settings["sasl.username"], settings["sasl.password"] = connection_login(k.sasl_connection)
        else:
            settings["sasl.username"] = secret(k.sasl_username_env) or ""
            settings["sasl.password"] = secret(k.sasl_password_env) or ""
    if k.ssl_ca_location:
        settings["ssl.ca.location"] = k.ssl_ca_location
    return settings
