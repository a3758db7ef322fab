"""What the analysis stage reads and writes (DESIGN §5, §7): ``burst_metrics``, ``mpi_metrics``, ``phase_metrics``
and ``archetypes`` beside an experiment's merge, committed together by
:meth:`Experiment.commit <synthtrace.warehouse.experiment.Experiment.commit>` (a reader sees the old analysis or the
new one, never a mix).

What an experiment's analysis reads is its trace (:meth:`Experiment.trace
<synthtrace.warehouse.experiment.Experiment.trace>`): the merged bursts with the MPI calls of the merge's reference
run, or, before a merge, every single run with its own bursts and MPI calls, told apart by ``run_id``.
"""
from __future__ import annotations

import polars as pl

from synthtrace.warehouse.experiment import MERGED_FILE, ExperimentTrace
from synthtrace.warehouse.layout import Warehouse
from synthtrace.warehouse.runs import runs_table
from synthtrace.warehouse.parts import read_part, schema_of

ANALYSIS_FILES: tuple[str, ...] = ("burst_metrics", "mpi_metrics", "phase_metrics", "archetypes")
#: what the analysis of one experiment works on (its trace, labelled with ``experiment`` and ``run_id``)
ExperimentInput = ExperimentTrace


def experiments(wh: Warehouse) -> list[str]:
    """Names of the experiments that have runs or merged data, sorted."""
    names = set(runs_table(wh)["experiment"].drop_nulls().to_list())
    if wh.experiments_dir.is_dir():
        names |= {d.name for d in wh.experiments_dir.iterdir() if (d / MERGED_FILE).is_file()}
    return sorted(names)


def load_experiment(wh: Warehouse, experiment: str) -> ExperimentInput:
    """What the analysis of ``experiment`` reads (its trace, labelled); raises
    :class:`~synthtrace.warehouse.errors.UnknownExperimentError`."""
    return wh.experiment(experiment).trace().labelled()


def read_analysis(wh: Warehouse, experiment: str, name: str, without: tuple[str, ...] = ()) -> pl.DataFrame | None:
    """One stored analysis frame of an experiment (its columns but ``without``), or None if the analysis has not
    run."""
    f = wh.experiment_dir(experiment) / f"{name}.parquet"
    if not f.is_file():
        return None
    return read_part(f, columns=[c for c in schema_of(f) if c not in without]) if without else read_part(f)
