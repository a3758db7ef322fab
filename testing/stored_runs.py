"""A warehouse holding many stored runs without ingesting each: what many nights leave behind (ingest scaling)."""
from __future__ import annotations

import re
import shutil
from dataclasses import replace
from pathlib import Path

import polars as pl

from synthtrace.tracelib.merge.merge_runs import RunTables
from synthtrace.warehouse import Warehouse
from synthtrace.warehouse.experiment import Experiment
from synthtrace.warehouse.merged import merge_inputs
from testing.traces import JACOBI, copy_trace


def warehouse_with_runs(root: Path, n_runs: int) -> Warehouse:
    """A warehouse at ``root`` with ``n_runs`` runs: the real jacobi trace ingested once (from a copy beside
    ``root``), and its run folder copied under ``n_runs - 1`` other ids."""
    from synthtrace.warehouse.ingest import ingest_trace

    wh = Warehouse(root)
    first = wh.run_dir(ingest_trace(wh, copy_trace(JACOBI, root.parent / f"{root.name}-seed")).run_id)
    row = pl.read_parquet(first / "run.parquet")
    for k in range(n_runs - 1):
        run_id = f"{k:016x}"
        with wh.staged(wh.run_dir(run_id)) as stage:  # [helper integrity] committed with its checksums, as ingest does
            shutil.copytree(first, stage, dirs_exist_ok=True, ignore=shutil.ignore_patterns("checksums.json"))
            row.with_columns(pl.lit(run_id).alias("run_id")).write_parquet(stage / "run.parquet")
    return wh


def another_run_of(prv: Path, dest: Path, day: int) -> Path:
    """A copy of ``prv`` (with its .pcf/.row) in ``dest`` as another run of the same program: the day of the header's
    date set to ``day``, so its content (run_id) differs while its .pcf names the same symbols."""
    copy = copy_trace(prv, dest)
    header, _, body = copy.read_bytes().partition(b"\n")
    copy.write_bytes(re.sub(rb"^#Paraver \(\d\d/", b"#Paraver (%02d/" % day, header) + b"\n" + body)
    return copy


def whole_run_tables(exp: Experiment) -> list[RunTables]:
    """Every run of ``exp`` with its whole stored tables (every column, as :meth:`Experiment.bursts` and
    :meth:`Experiment.calls` read them), sorted by run name: the reference the merge's narrowed reads
    (:func:`~synthtrace.warehouse.merged.merge_inputs`) are checked against."""
    out = []
    for r in merge_inputs(exp):
        calls = exp.calls(r.run_id)
        out.append(replace(r, bursts=exp.bursts(r.run_id), mpi_calls=calls if calls is not None else pl.DataFrame()))
    return out
