"""One way to make a pipeline config for the end-to-end tests: a single source on the test broker."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml


@pytest.fixture(scope="session")
def source_config(pipeline_config, broker):
    """Factory: `source_config(name, protocol, ...)` -> a PipelineConfig whose only source is `name`.

    The source reads `topics` (default: the topic named like the source) or `topic_pattern` from the
    test broker, decodes with the options the simulator encodes with (unless `options` is given), and
    takes `kafka` / `landing` / `decoding` settings as overrides, `tables` as its table rules and `gold` as its gold settings; `runtime` replaces the
    test session's runtime.
    """
    from spark_jobs.config import KafkaSettings, SchemaRegistrySettings, SourceSettings
    from ticdc_devkit.simulator.stream import EXTENSION_OPTIONS

    def make(
        name: str,
        protocol: str = "canal-json",
        *,
        topics: list[str] | None = None,
        topic_pattern: str | None = None,
        options: dict | None = None,
        registry: str | None = None,
        kafka: dict | None = None,
        landing: dict | None = None,
        decoding: dict | None = None,
        runtime=None,
        tables=None,
        gold=None,
    ):
        source = SourceSettings(
            name=name,
            protocol=protocol,
            kafka=KafkaSettings(**{"bootstrap_servers": broker.bootstrap, **(kafka or {})}),
            topics=list(topics) if topics is not None else ([] if topic_pattern else [name]),
            topic_pattern=topic_pattern,
            options=dict(EXTENSION_OPTIONS[protocol] if options is None else options),
            schema_registry=SchemaRegistrySettings(url=registry) if registry else None,
        )
        if tables is not None:
            source = dataclasses.replace(source, tables=tables)
        if gold is not None:
            source = dataclasses.replace(source, gold=gold)
        source = dataclasses.replace(
            source,
            landing=dataclasses.replace(source.landing, **(landing or {})),
            decoding=dataclasses.replace(source.decoding, **(decoding or {})),
        )
        return dataclasses.replace(pipeline_config, sources=[source], runtime=runtime or pipeline_config.runtime)

    return make


@pytest.fixture(scope="session")
def config_file():
    """Factory: `config_file(config, path)` writes a PipelineConfig as the YAML file `ticdc-lake --config` reads."""

    def write(config, path: Path) -> Path:
        doc = {field: value for field, value in dataclasses.asdict(config).items() if field != "path"}
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path

    return write
