"""Files the pipeline writes beside its tables for readers that must not start Spark (the status page, the daily
DAG's sensor)."""

from __future__ import annotations

import json
import os
from pathlib import Path


def write_json_atomically(path: Path, document: dict) -> Path:
    """Write the file whole (a temporary file, then a rename), so a reader never sees half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(document, indent=1, sort_keys=True))
    os.replace(tmp, path)
    return path
