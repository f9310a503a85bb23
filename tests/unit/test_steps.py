"""The entry layer's names: `steps.<name>` is the step itself whichever of its modules were imported first
(a step module named like its step would shadow it: `steps.rebuild` was the module once, and the CLI's
`ticdc-lake rebuild` failed with "'module' object is not callable")."""

import importlib
import pkgutil
import types

import spark_jobs.steps as steps


def test_every_step_name_is_its_step_after_every_step_module_is_imported():
    for module in pkgutil.iter_modules(steps.__path__):
        importlib.import_module(f"{steps.__name__}.{module.name}")
    shadowed = {name for name in steps.__all__ if isinstance(getattr(steps, name), types.ModuleType)}
    assert shadowed == set()
    assert callable(steps.rebuild) and callable(steps.maintain) and callable(steps.land)
