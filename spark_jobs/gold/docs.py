"""The dbt docs site at the cost of what changed.

`dbt docs generate` describes every relation of the project in every run (its catalog: a table's columns and
types), which at hundreds of gold tables costs more than the run. Here dbt writes the site and the manifest
without compiling the models or reading the catalog (`--no-compile --empty-catalog`), and the catalog is kept
from run to run: the relations the run built, those new to the site and the small shared ones (staging,
intermediate, the plans) are described again from Spark's schemas and their tables' rows from the snapshot
summary, every other entry stays as it was, and an entry whose model or source is gone leaves.

The manifest too is written only when what it describes changed: gold's runs do not write it (`run_dbt`), and
this step parses the project again only when one of its files, the lakehouse's gold models (the digest their
writer keeps per source), the dbt target or dbt's version changed since the manifest was written (`manifest.sha256` beside it). A run that only changed
rows costs no dbt command here.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from spark_jobs.gold import models as gold_models
from spark_jobs.gold.build import dbt_profile_env, run_dbt
from spark_jobs.gold.publish import live_rows
from spark_jobs.runtime.files import write_json_atomically

SHARED_SCHEMAS = ("lake_staging", "silver")  # always described again: a few small relations
PROJECT_INPUTS = ("dbt_project.yml", "profiles.yml", "models", "macros", "tests")  # what dbt parses of the project


def _relation(node: dict) -> str:
    return f"{node['schema']}.{node.get('alias') or node.get('identifier') or node['name']}"


def _entry(spark, unique_id: str, relation: str, kind: str) -> dict | None:
    """A catalog entry in dbt's format, from the relation's Spark schema (None: the relation does not exist)."""
    if not spark.catalog.tableExists(relation):
        return None
    schema, _, name = relation.partition(".")
    columns = {
        field.name: {"type": field.dataType.simpleString(), "index": index, "name": field.name, "comment": None}
        for index, field in enumerate(spark.table(relation).schema.fields, 1)
    }
    stats = {
        "has_stats": {"id": "has_stats", "label": "Has Stats?", "value": False, "include": False, "description": ""}
    }
    if kind == "table":  # an Iceberg table: its live rows from its snapshot's summary, no Spark job
        stats["has_stats"]["value"] = True
        stats["rows"] = {
            "id": "rows", "label": "Rows", "value": live_rows(spark, relation)[1], "include": True,
            "description": "Live rows in the current snapshot (records less deleted rows)",
        }  # fmt: skip
    return {
        "metadata": {"type": kind, "schema": schema, "name": name, "database": None, "comment": None, "owner": None},
        "columns": columns,
        "stats": stats,
        "unique_id": unique_id,
    }


def generate_docs(spark, config, source: str, built: list[str] | None = None) -> int:
    """Regenerate the docs site under `<local_dir>/dbt/target` (the plugin serves it); `built`: the relations
    the source's last gold run built (None: describe every relation again). Returns the catalog's entries."""
    target = config.local_dir / "dbt" / "target"
    catalog_path = target / "catalog.json"
    previous = _read(catalog_path)
    digest, marker = _manifest_digest(config), target / "manifest.sha256"
    written = (target / "manifest.json").exists() and (target / "index.html").exists()
    if not (written and marker.exists() and marker.read_text() == digest):
        parsed = run_dbt(["parse"], config, source, write_manifest=True)
        run_dbt(["docs", "generate", "--no-compile", "--empty-catalog"], config, source, manifest=parsed)
        marker.write_text(digest)
    manifest = json.loads((target / "manifest.json").read_text())
    fresh = set(built) if built is not None else None
    catalog: dict[str, dict] = {"nodes": {}, "sources": {}}
    for section, items in (("nodes", manifest["nodes"]), ("sources", manifest["sources"])):
        for unique_id, node in items.items():
            if node["resource_type"] not in ("model", "source"):
                continue
            relation = _relation(node)
            kept = previous.get(section, {}).get(unique_id)
            stale = fresh is None or relation in fresh or node["schema"] in SHARED_SCHEMAS or kept is None
            kind = "view" if node.get("config", {}).get("materialized") == "view" else "table"
            entry = _entry(spark, unique_id, relation, kind) if stale else kept
            if entry is not None:
                catalog[section][unique_id] = entry
    kept_metadata = {k: manifest["metadata"].get(k) for k in ("dbt_version", "generated_at", "invocation_id", "env")}
    document = {
        "metadata": {"dbt_schema_version": "https://schemas.getdbt.com/dbt/catalog/v1.json", **kept_metadata},
        **catalog,
        "errors": None,
    }
    write_json_atomically(catalog_path, document)
    return len(catalog["nodes"]) + len(catalog["sources"])


def _manifest_digest(config) -> str:
    """What dbt's manifest is made of: the project's files (by path, size and modification time), the digests of
    the lakehouse's gold models that their writer keeps (`gold.models.models_digests`: one read per source, not per
    model), the dbt target and dbt's version. Taken before dbt parses, so a file changed meanwhile makes the next
    step parse again."""
    from dbt.version import __version__

    settings = [__version__, dbt_profile_env(config.runtime), gold_models.models_digests(config.local_dir)]
    digest = hashlib.sha256(json.dumps(settings).encode())
    for root in (gold_models.DBT_PROJECT / name for name in PROJECT_INPUTS):
        for path in sorted([root] if root.is_file() else root.rglob("*")):
            if path.is_file():
                stat = path.stat()
                digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return {}
