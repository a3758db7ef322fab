"""Inputs and outputs of the analysis stage: what to classify per experiment, and the atomic commit of
``burst_metrics``, ``mpi_metrics``, ``phase_metrics`` and ``archetypes`` (DESIGN §5, §7).

What an experiment's analysis reads:

- a **merged** experiment (``experiments/<name>/merged_bursts.parquet`` exists): the merged bursts, with the MPI
  calls of the merge's reference run (the merged bursts are that run's bursts);
- otherwise every **single run** of the experiment with its own bursts and MPI calls, told apart by ``run_id``.

The four outputs are written together: the experiment directory is rebuilt in staging (the files other stages
wrote there, such as ``merged_bursts.parquet``, are hard-linked in unchanged) and swapped in by one rename, so a
reader sees the old analysis or the new one, never a mix.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from synthtrace.warehouse.errors import RunsChangedError, UnknownExperimentError, WarehouseError
from synthtrace.warehouse.layout import Warehouse
from synthtrace.warehouse.runs import check_runs_still_in, run_bursts, run_calls, runs_table

ANALYSIS_FILES: tuple[str, ...] = ("burst_metrics", "mpi_metrics", "phase_metrics", "archetypes")
MERGED_FILE = "merged_bursts.parquet"
#: merged_bursts columns that may name the reference run the merge kept (first one present wins)
REFERENCE_COLUMNS = ("run_id", "reference_run_id", "ref_run_id")


@dataclass
class ExperimentInput:
    """What the analysis of one experiment works on."""

    experiment: str
    source: str  # "merged" | "runs"
    bursts: pl.DataFrame  # with experiment and run_id columns
    calls: pl.DataFrame | None  # with experiment and run_id columns, or None (no MPI)
    run_names: dict[str, str] = field(default_factory=dict)  # run_id -> run_name
    n_nodes: dict[str, int] = field(default_factory=dict)  # run_id -> nodes


def experiments(wh: Warehouse) -> list[str]:
    """Names of the experiments that have runs or merged data, sorted."""
    names = set(runs_table(wh)["experiment"].drop_nulls().to_list())
    if wh.experiments_dir.is_dir():
        names |= {d.name for d in wh.experiments_dir.iterdir() if (d / MERGED_FILE).is_file()}
    return sorted(names)


def load_experiment(wh: Warehouse, experiment: str) -> ExperimentInput:
    """Read what the analysis of ``experiment`` needs; raises :class:`UnknownExperimentError`."""
    runs = runs_table(wh).filter(pl.col("experiment") == experiment).sort("run_name")
    run_names = dict(zip(runs["run_id"].to_list(), runs["run_name"].to_list()))
    n_nodes = {r: int(n) for r, n in zip(runs["run_id"].to_list(), runs["n_nodes"].to_list()) if n is not None}
    merged = wh.experiment_dir(experiment) / MERGED_FILE
    if merged.is_file():
        bursts = pl.read_parquet(merged)
        ref = next((c for c in REFERENCE_COLUMNS if c in bursts.columns), None)
        ref_id = None
        if ref is not None and bursts[ref].n_unique() == 1:
            ref_id = bursts[ref][0]
        elif runs.height:
            ref_id = runs["run_id"][0]  # the merge's default reference: first run by name
        if ref is not None and ref != "run_id":
            bursts = bursts.drop(ref)
        bursts = bursts.drop("run_id", strict=False).with_columns(
            pl.lit(experiment).alias("experiment"), pl.lit(ref_id, pl.String).alias("run_id"))
        calls = run_calls(wh, ref_id) if ref_id else None
        if calls is not None:
            calls = calls.with_columns(pl.lit(experiment).alias("experiment"))
        return ExperimentInput(experiment, "merged", bursts, calls, run_names, n_nodes)
    if runs.height == 0:
        known = experiments(wh)
        raise UnknownExperimentError(f"no experiment {experiment!r} in {wh.root}"
                                     + (f" (experiments: {', '.join(known)})" if known else " (nothing ingested)"))
    parts = [run_bursts(wh, r) for r in runs["run_id"].to_list()]
    bursts = (
        pl.concat([p for p in parts if p.height], how="diagonal_relaxed")
        if any(p.height for p in parts)
        else pl.DataFrame()
    )
    if bursts.height == 0:
        raise WarehouseError(f"experiment {experiment!r}: its runs have no computation bursts")
    bursts = bursts.with_columns(pl.lit(experiment).alias("experiment"))
    cparts = [c for c in (run_calls(wh, r) for r in runs["run_id"].to_list()) if c is not None and c.height]
    calls = (
        pl.concat(cparts, how="diagonal_relaxed").with_columns(pl.lit(experiment).alias("experiment"))
        if cparts
        else None
    )
    return ExperimentInput(experiment, "runs", bursts, calls, run_names, n_nodes)


def write_analysis(wh: Warehouse, experiment: str, frames: dict[str, pl.DataFrame],
                   documents: dict[str, dict] | None = None, read: ExperimentInput | None = None) -> Path:
    """Commit the analysis frames of one experiment atomically; returns the experiment directory.

    ``frames`` maps names of :data:`ANALYSIS_FILES` to frames; ``documents`` (name -> JSON-able dict, e.g.
    ``archetype_discovery``) are written beside them as ``<name>.json``. Other files of the directory are kept.
    ``read``: the input the frames were computed from; if its runs left the experiment or its merged data was
    removed meanwhile (``runs rm|move``), nothing is written
    (:class:`~synthtrace.warehouse.errors.RunsChangedError`).
    """
    unknown = set(frames) - set(ANALYSIS_FILES)
    if unknown:
        raise ValueError(f"not analysis outputs: {sorted(unknown)}")
    target = wh.experiment_dir(experiment)

    def unchanged() -> None:
        if read is None:
            return
        check_runs_still_in(wh, experiment, read.run_names, "it was analysed")
        if read.source == "merged" and not (target / MERGED_FILE).is_file():
            raise RunsChangedError(f"experiment {experiment!r}: its merged data was removed while it was analysed "
                                   "(its runs changed); nothing was committed: merge it again")
    return wh.update_dir(target, frames, documents, check=unchanged)


def read_analysis(wh: Warehouse, experiment: str, name: str) -> pl.DataFrame | None:
    """One stored analysis frame of an experiment, or None if the analysis has not run."""
    f = wh.experiment_dir(experiment) / f"{name}.parquet"
    return pl.read_parquet(f) if f.is_file() else None
