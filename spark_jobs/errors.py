"""The pipeline's named errors, in one place: callers catch a class, never a bare RuntimeError or a message.

It imports nothing of the project, so every layer, the codecs at the bottom included, raises these.

A TransientFault is a service that did not answer, timed out or refused the credentials: the task stops
with one line (source, what, where, what to check) before it writes anything, nothing is quarantined for
it, and the next run after recovery continues exactly (Airflow retries the task with backoff).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Self

__all__ = [
    "BrokerUnavailableError",
    "CatalogUnavailableError",
    "ClaimCheckUnavailableError",
    "CommitConflictError",
    "ConcurrentLandingError",
    "ConfigError",
    "DbtError",
    "DecodeError",
    "IncompleteDayError",
    "KafkaRangeError",
    "LandingGapError",
    "LandingInvariantError",
    "RegistryUnavailableError",
    "SchemaNotYetKnown",
    "SnapshotRefused",
    "TransientFault",
    "commit_conflict_in",
    "named_transient_faults",
    "redact_address",
    "transient_fault_in",
]


class DecodeError(ValueError):
    """A message that cannot be decoded; it goes to quarantine with str(self) as its reason."""

    def __init__(self, protocol: str, reason: str, where: str | None = None):
        self.protocol = protocol
        self.reason = reason
        self.where = where
        text = f"{protocol}: {reason}"
        if where:
            text += f" (at {where})"
        super().__init__(text)


class SchemaNotYetKnown(DecodeError):
    """A row whose table schema has not arrived yet (Simple protocol mid-stream); it waits, it is not bad."""

    def __init__(self, protocol: str, database: str, table: str, schema_version: int):
        self.database, self.table, self.schema_version = database, table, schema_version
        super().__init__(
            protocol, f"schema version {schema_version} of {database}.{table} not known yet", "schemaVersion"
        )


class ConfigError(ValueError):
    """A bad configuration or decoder option: stops the run before it touches a table."""


class LandingGapError(RuntimeError):
    """Offsets were never landed and Kafka no longer has them (or went backwards); the source does not accept gaps."""


class ConcurrentLandingError(RuntimeError):
    """Another landing run of the same source committed first; this run published nothing."""


class KafkaRangeError(RuntimeError):
    """A planned offset range could not be read: a record did not arrive in time, or the broker returned an error."""


class LandingInvariantError(RuntimeError):
    """A range yielded more records than it has offsets: a bug; the batch is not committed."""


class DbtError(RuntimeError):
    """A dbt command building or testing gold failed; the message is dbt's own."""


class SnapshotRefused(ConfigError):
    """A snapshot load that would make gold wrong, or gold over a load that did not finish: one line, nothing
    written."""


class IncompleteDayError(RuntimeError):
    """A daily as-of day ends after the source's consistent timestamp: its tables are not known to its end yet."""


class ErasureRefused(RuntimeError):
    """An erasure that would lose other rows than the erased key's: nothing was touched."""


class ReconcileMismatchError(RuntimeError):
    """A reconciliation found tables whose rows differ from the upstream's (recorded in gold.reconciliations)."""


class TransientFault(RuntimeError):
    """A service was unreachable, timed out or refused the credentials: not the data's fault, so retry.

    `detail` is the line without the source (the codecs that raise it inside Spark tasks do not know the
    source); `for_source` adds it where the source is known.
    """

    service = "service"

    def __init__(self, detail: str, source: str | None = None):
        self.detail, self.source = detail, source
        super().__init__(f"source {source}: {detail}" if source else detail)

    def __reduce__(self) -> tuple[type[Self], tuple[str, str | None]]:
        return type(self), (self.detail, self.source)

    @classmethod
    def at(cls, address: str, problem: str, check: str, source: str | None = None) -> Self:
        """`<service> <address, credentials redacted> <problem>; check <what to check>`."""
        return cls(f"{cls.service} {redact_address(address)} {problem}; check {check}", source)

    def for_source(self, source: str) -> Self:
        return self if self.source == source else type(self)(self.detail, source)


class BrokerUnavailableError(TransientFault):
    """The Kafka broker could not be reached (or refused the credentials) within the timeout."""

    service = "Kafka broker"


class RegistryUnavailableError(TransientFault):
    """The Schema Registry was unreachable, timed out, refused the credentials or answered 5xx."""

    service = "schema registry"


class CatalogUnavailableError(TransientFault):
    """Cluster mode: the shared catalog (the Hive metastore service or a REST catalog) did not answer."""

    service = "catalog"


class ClaimCheckUnavailableError(TransientFault):
    """The claim-check store could not be read: down, not mounted, or permission denied."""

    service = "claim-check store"


class CommitConflictError(TransientFault):
    """Iceberg refused a commit because another writer committed to the same table first (in cluster mode, the
    maintenance DAG's compaction against a run's MERGE): nothing of the refused commit was written, and every step
    is safe to run again over what it left, so the run is retried as after an outage."""

    service = "Iceberg commit"


_USERINFO = re.compile(r"(?:(?<=//)|(?<=^)|(?<=,))[^/@\s,]*@")
_QUERY_VALUE = re.compile(r"(?<=[?&])([^=&#\s]+)=[^&#\s]*")


def cause_line(exc: BaseException, limit: int | None = None) -> str:
    """An exception's type and the first line of its message (a JVM error's stack trace follows it), for a
    one-line alert or heartbeat; at most `limit` characters of the message."""
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first[:limit]}"


def redact_address(address: str) -> str:
    """An address fit for a log line: no `user:password@`, no query-string values (tokens, signatures)."""
    return _QUERY_VALUE.sub(r"\1=***", _USERINFO.sub("", address))


_WORKER_FAULT = re.compile(r"^spark_jobs\.errors\.(\w+): (.+)$", re.MULTILINE)
# what Iceberg's commit validation says when another writer committed first (a ValidationException is otherwise a
# schema or spec problem, not transient), and the CommitFailedException its retries end in
_COMMIT_CONFLICT = re.compile(
    r"org\.apache\.iceberg\.exceptions\.(?:ValidationException: (?=Cannot commit|Found (?:new )?conflicting|"
    r"Missing required files)|CommitFailedException: )([^\n]{1,300})"
)


def transient_fault_in(exc: BaseException, source: str) -> TransientFault | None:
    """The TransientFault a Spark task raised, rebuilt on the driver from the worker's traceback (Spark
    hands it over as a PythonException whose text holds that traceback), or an Iceberg commit another writer's
    commit refused (CommitConflictError); None for any other failure."""
    if isinstance(exc, TransientFault):
        return exc.for_source(source)
    found = _WORKER_FAULT.findall(str(exc))
    for name, detail in reversed(found):
        cls = globals().get(name)
        if isinstance(cls, type) and issubclass(cls, TransientFault):
            return cls(detail.strip(), source)
    conflict = commit_conflict_in(exc)
    if conflict:
        return CommitConflictError(
            f"Iceberg refused a commit: another writer committed to the table first ({conflict}); run again", source
        )
    return None


def commit_conflict_in(exc: BaseException) -> str | None:
    """Iceberg's words, when `exc` is a commit it refused because another writer committed to the table first."""
    conflict = _COMMIT_CONFLICT.search(str(exc))
    return conflict.group(1).strip() if conflict else None


@contextmanager
def named_transient_faults(source: str) -> Iterator[None]:
    """Around Spark actions on the driver: a TransientFault a task raised comes out as itself, with the
    source, instead of a PythonException with the worker's traceback; every other failure as it was."""
    try:
        yield
    except Exception as exc:
        fault = transient_fault_in(exc, source)
        if fault is None or fault is exc:
            raise
        raise fault from None
