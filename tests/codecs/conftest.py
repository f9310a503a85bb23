"""Fixtures the codec tests share."""

from __future__ import annotations

import pytest

from ticdc_devkit.registry import running_registry


@pytest.fixture(scope="module")
def registry_url():
    """A Schema Registry stand-in for the Avro protocol, one per test module."""
    with running_registry() as url:
        yield url
