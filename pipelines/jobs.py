"""The stages after ingest, as plain functions the CLI commands and the nightly flow both call.

Imported directly (a missing or renamed function is an ImportError at start-up, never a stage silently
skipped). Signatures: ``merge(experiment, warehouse)``, ``archetypes(experiment, warehouse, machine)``,
``detect(warehouse)``, ``retrain(warehouse)``, ``report(warehouse, machine=...)``. Their bodies still live
beside the commands they serve (``cli_merge``, ``cli_analysis``, ``cli_models``).
"""
from __future__ import annotations

from synthtrace.pipelines.cli_analysis import archetype_mix as archetypes
from synthtrace.pipelines.cli_analysis import report_file as report
from synthtrace.pipelines.cli_merge import merge_step as merge
from synthtrace.pipelines.cli_models import detect_step as detect
from synthtrace.pipelines.cli_models import retrain_step as retrain

#: per-experiment stages, in order
EXPERIMENT_STAGES = {"merge": merge, "archetypes": archetypes}
#: warehouse-wide stages, in order
WAREHOUSE_STAGES = {"detect": detect, "retrain": retrain, "report": report}
STAGES = (*EXPERIMENT_STAGES, *WAREHOUSE_STAGES)
