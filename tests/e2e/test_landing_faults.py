"""Exactly once under faults: landing runs killed with SIGKILL at random moments of their landing (a seeded delay
after the Spark session is ready, so they die planning, reading, writing or committing) lose nothing and duplicate
nothing. Each run is a real `ticdc-lake land` process (its own Spark JVM) on a lakehouse directory of its own, so a
killed JVM never shares the metastore with this test's; its stderr is kept beside the lakehouse."""

from __future__ import annotations

import base64
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.kill import KILLS, Moments, own_runtime, run, stderr_shows
from ticdc_devkit.broker import produce
from ticdc_devkit.simulator.model import Message

pytestmark = [pytest.mark.e2e, pytest.mark.long]

TOPIC, PARTITIONS = "kill_loop", 3
LANDING_WINDOW_SECONDS = 15.0  # a first guess at how long a capped landing run takes once its session is ready
BIN = Path(sys.executable).parent


def land(config: Path, log: Path, kill_at: Moments | None) -> str:
    """One landing process, killed (with its JVM) at the next of `kill_at`'s moments after its Spark session is
    ready if still running."""
    return run(
        ["land", "--source", "kl", "--config", str(config)], log, stderr_shows(log, "spark session ready"), kill_at
    )


def test_killed_landing_runs_lose_nothing_and_duplicate_nothing(broker, source_config, config_file, tmp_path):
    rng = random.Random(20261122)
    runtime = own_runtime(tmp_path / "lake")

    def lakehouse_config(name: str, cap: int) -> Path:
        return config_file(
            source_config("kl", topics=[TOPIC], landing={"max_records_per_run": cap}, runtime=runtime),
            tmp_path / name,
        )

    config = lakehouse_config("pipeline.yaml", cap=150)
    drain = lakehouse_config("drain.yaml", cap=1_000_000)  # the same lakehouse without the small cap
    broker.create_topics([TOPIC], partitions=PARTITIONS)
    produced: list[Message] = []
    outcomes = []
    landing_moments = Moments(rng, KILLS, LANDING_WINDOW_SECONDS)
    for i in range(KILLS):
        batch = [
            Message(
                TOPIC,
                rng.randrange(PARTITIONS),
                rng.randbytes(rng.randrange(0, 16)) or None,
                rng.randbytes(rng.randrange(1, 2048)),
            )
            for _ in range(rng.randrange(50, 250))
        ]
        produce(broker.bootstrap, batch)
        produced += batch
        outcomes.append(land(config, tmp_path / f"land-{i}.log", kill_at=landing_moments))
    assert land(drain, tmp_path / "drain.log", kill_at=None) == "finished"
    assert outcomes.count("killed") >= KILLS // 3, f"too few runs were killed to mean anything: {outcomes}"

    dump = subprocess.run(
        [str(BIN / "python"), "-m", "tests.e2e.dump_bronze", str(config), "kl"],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    landed = [json.loads(line) for line in dump.stdout.splitlines()]
    coordinates = [(t, p, o) for t, p, o, _, _ in landed]
    assert len(coordinates) == len(set(coordinates)), "a record landed twice"
    offsets: dict = {}
    expected = {}
    for m in produced:
        o = offsets.get(m.partition, 0)
        offsets[m.partition] = o + 1
        expected[(TOPIC, m.partition, o)] = (m.key, m.value)
    got = {(t, p, o): (base64.b64decode(k) if k is not None else None, base64.b64decode(v)) for t, p, o, k, v in landed}
    assert got == expected, f"{len(got)} landed, {len(expected)} produced"
