"""What an export reads: an experiment's trace (merged, or its only run) as stored, the MPI calls of the run it
comes from, and the burst archetypes when the analysis has run."""
from __future__ import annotations

import polars as pl

from synthtrace.tracelib.schema import THREAD_KEYS
from synthtrace.warehouse.analysis_store import read_analysis
from synthtrace.warehouse.errors import UnknownExperimentError
from synthtrace.warehouse.layout import Warehouse

BURST_KEYS = [*THREAD_KEYS, "burst_seq"]


def load_export_tables(wh: Warehouse, experiment: str) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """(bursts with an ``archetype`` column when known, MPI calls) of the experiment's synthetic trace."""
    exp = wh.experiment(experiment)
    if not exp.is_merged and exp.require_runs().runs.height != 1:
        raise UnknownExperimentError(
            f"experiment {experiment!r} has {exp.runs.height} runs and no merged trace yet: "
            f"run `synthtrace merge {experiment}` first"
        )
    trace = exp.trace(dram_from_uncore=False)
    bursts = trace.bursts
    arch = read_analysis(wh, experiment, "archetypes")
    if arch is not None:
        arch = arch.filter(pl.col("unit") == "burst").select(*BURST_KEYS, "archetype").unique(subset=BURST_KEYS,
                                                                                               keep="first")
        bursts = bursts.join(arch.with_columns(pl.col(k).cast(bursts.schema[k]) for k in BURST_KEYS),
                             on=BURST_KEYS, how="left")
    return bursts.sort(BURST_KEYS), trace.calls
