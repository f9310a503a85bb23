"""The pipeline's named errors, in one place: callers catch a class, never a bare RuntimeError or a message.

ConfigError is defined beside the codecs (they raise it for bad options) and re-exported here.
"""

from __future__ import annotations

from spark_jobs.codecs.errors import ConfigError

__all__ = [
    "BrokerUnavailableError",
    "ConcurrentLandingError",
    "ConfigError",
    "DbtError",
    "KafkaRangeError",
    "LandingGapError",
    "LandingInvariantError",
]


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


class BrokerUnavailableError(RuntimeError):
    """The Kafka broker could not be reached within the timeout."""
