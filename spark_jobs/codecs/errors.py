"""Decode errors: one clear line naming the protocol, the message and what was wrong."""

from __future__ import annotations


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
