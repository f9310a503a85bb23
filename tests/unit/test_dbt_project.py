"""The dbt projects a lakehouse runs in (`gold.models.dbt_project`): links to the checkout's files and the
generated models under `gold/`, made in the lakehouse and nowhere in the checkout, and an older lakehouse's
generated models moved there rather than lost."""

from __future__ import annotations

from spark_jobs.gold import models as gold_models


def test_a_project_is_links_to_the_checkout_and_its_own_gold_models(tmp_path):
    root = gold_models.dbt_project(tmp_path / "dbt")
    for name in gold_models.PROJECT_LINKS:
        assert (root / name).is_symlink() and (root / name).resolve() == (gold_models.DBT_PROJECT / name).resolve()
    assert gold_models.models_root(tmp_path) == root / gold_models.GOLD_MODEL_PATH
    assert gold_models.dbt_project(root) == root  # made again: unchanged
    assert not (gold_models.DBT_PROJECT / gold_models.GOLD_MODEL_PATH).exists()


def test_an_older_lakehouse_keeps_its_generated_models(tmp_path):
    """Before, the generated models were in `<local_dir>/dbt/models/`, where a project now links the checkout's."""
    old = tmp_path / "dbt" / "models" / "marts" / "gold" / "shop"
    old.mkdir(parents=True)
    (old / "gold_shop__db__t.sql").write_text("select 1")
    root = gold_models.dbt_project(tmp_path / "dbt")
    moved = gold_models.source_dir(tmp_path, "shop") / "gold_shop__db__t.sql"
    assert moved.read_text() == "select 1"
    assert (root / "models").is_symlink()
