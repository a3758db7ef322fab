"""The stages after ingest that the nightly flow runs, as plain functions.

Each is included only when the module that implements it is part of this installation; the flow reports the
others as skipped rather than faking them. Signatures: ``merge(experiment, warehouse)``,
``archetypes(experiment, warehouse, machine)``, ``detect(warehouse)``, ``retrain(warehouse)``, ``report(warehouse)``.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

#: stage -> (module, function) implementing it
STAGES: dict[str, tuple[str, str]] = {
    "merge": ("synthtrace.pipelines.cli_merge", "merge_step"),
    "archetypes": ("synthtrace.pipelines.cli_analysis", "archetype_mix"),
    "detect": ("synthtrace.pipelines.cli_models", "detect_step"),
    "retrain": ("synthtrace.pipelines.cli_models", "retrain_step"),
    "report": ("synthtrace.pipelines.cli_analysis", "report_file"),
}


def available() -> dict[str, Callable[..., Any]]:
    """Stage name -> function, for every stage implemented in this installation."""
    found = {}
    for stage, (module, func) in STAGES.items():
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
            continue
        if hasattr(mod, func):
            found[stage] = getattr(mod, func)
    return found
