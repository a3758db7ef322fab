"""What an export reads: an experiment's merged bursts (or its only run's bursts), the MPI calls of the run
they come from, and the burst archetypes when the analysis has run."""
from __future__ import annotations

import polars as pl

from synthtrace.tracelib.schema import THREAD_KEYS
from synthtrace.warehouse.errors import UnknownExperimentError
from synthtrace.warehouse.layout import Warehouse
from synthtrace.warehouse.runs import experiment_runs, run_bursts, run_calls

BURST_KEYS = [*THREAD_KEYS, "burst_seq"]


def load_export_tables(wh: Warehouse, experiment: str) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """(bursts with an ``archetype`` column when known, MPI calls) of the experiment's synthetic trace."""
    exp_dir = wh.experiment_dir(experiment)
    merged_file = exp_dir / "merged_bursts.parquet"
    if merged_file.is_file():
        bursts = pl.read_parquet(merged_file)
        # the merged bursts are the reference run's bursts: its MPI calls go with them
        calls = run_calls(wh, bursts.get_column("run_id")[0]) if bursts.height else None
    else:
        runs = experiment_runs(wh, experiment)
        if runs.height != 1:
            raise UnknownExperimentError(
                f"experiment {experiment!r} has {runs.height} runs and no merged trace yet: "
                f"run `synthtrace merge {experiment}` first"
            )
        run_id = runs.get_column("run_id")[0]
        bursts, calls = run_bursts(wh, run_id, dram_from_uncore=False), run_calls(wh, run_id)
    arch_file = exp_dir / "archetypes.parquet"
    if arch_file.is_file():
        arch = (pl.read_parquet(arch_file).filter(pl.col("unit") == "burst")
                .select(*BURST_KEYS, "archetype").unique(subset=BURST_KEYS, keep="first"))
        bursts = bursts.join(arch.with_columns(pl.col(k).cast(bursts.schema[k]) for k in BURST_KEYS),
                             on=BURST_KEYS, how="left")
    return bursts.sort(BURST_KEYS), calls
