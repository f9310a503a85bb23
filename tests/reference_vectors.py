"""Load the TiCDC reference vectors in tests/vectors/ticdc-reference/ (copied from TiCDC's test suites; index.md names each source) as (key, value) bytes."""

from __future__ import annotations

import json
from pathlib import Path

VECTOR_DIR = Path(__file__).resolve().parent / "vectors" / "ticdc-reference"


def _bytes(encoding: str | None, text: str | None) -> bytes | None:
    if encoding in (None, "absent") or text is None:
        return None
    if encoding == "utf8":
        return text.encode("utf-8")
    if encoding == "hex":
        return bytes.fromhex(text)
    raise ValueError(f"unknown vector encoding {encoding!r}")


def load_vector(name: str) -> dict:
    """The envelope, with `key_bytes` and `value_bytes` added."""
    doc = json.loads((VECTOR_DIR / name).read_text())
    doc["key_bytes"] = _bytes(doc.get("kafka_key_encoding"), doc.get("kafka_key"))
    doc["value_bytes"] = _bytes(doc.get("kafka_value_encoding"), doc.get("kafka_value"))
    doc["name"] = name
    return doc


def vector_names(prefix: str) -> list[str]:
    return sorted(p.name for p in VECTOR_DIR.glob(f"{prefix}*.json"))
