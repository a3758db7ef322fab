"""Where the POP tables live (DESIGN §5, §7): a run's inputs to them read back from Parquet, and the scaling table.

- ``experiments/<name>/pop_metrics.parquet``: one row per run of the experiment (the ``pop_metrics`` view),
  committed beside its merge;
- ``pop/pop_scaling.parquet``: one row per run of every application's series (the ``pop_scaling`` view),
  rewritten whole when any experiment's POP table changes.
"""
from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from synthtrace.tracelib.domain.counters import resolve
from synthtrace.tracelib.domain.pop import POP_METRICS_SCHEMA, POP_SCALING_SCHEMA
from synthtrace.tracelib.schema import THREAD_KEYS
from synthtrace.warehouse.layout import Warehouse
from synthtrace.warehouse.parts import read_part, schema_of
from synthtrace.warehouse.runs import run_parts
from synthtrace.warehouse.stored import Stored

POP_METRICS = "pop_metrics"
POP_SCALING = "pop_scaling"
#: the folder of the warehouse-wide POP files
POP_DIR = "pop"
_BURST_COLUMNS = ["run_id", *THREAD_KEYS, "end_ns", "duration_ns"]
#: the columns of the MPI calls POP and its replay read (the counters, call sites, peers and CPUs they do not: half
#: of the calls' memory)
_CALL_COLUMNS = ["run_id", *THREAD_KEYS, "call_seq", "mpi_call", "start_ns", "end_ns", "duration_ns", "bytes_sent",
                 "bytes_recv", "comm", "n_messages"]


@dataclass(frozen=True)
class RunPopInputs:
    """What the POP table of one run is computed from: its bursts (only the columns it needs, lazily), its MPI
    calls and its point-to-point messages (None when the run has none, or was ingested before they were kept)."""

    bursts: pl.LazyFrame
    calls: pl.DataFrame | None
    messages: pl.DataFrame | None


def run_pop_inputs(wh: Warehouse, run_id: str) -> RunPopInputs:
    """Read one run's POP inputs back from its folder."""
    parts = run_parts(wh, run_id, "bursts/*.parquet")  # what its commit wrote (attack 8 B1, B2)
    if parts:
        schemas = [schema_of(p) for p in parts]
        cmap = resolve(list(dict.fromkeys(c for schema in schemas for c in schema)))
        counters = sorted({c for role in ("ins", "cyc") for c in cmap.columns.get(role, [])})
        # read here, the few columns POP needs: a damaged page is then DamagedPartError naming its file, not a
        # Polars error wherever a lazy scan would be collected
        bursts = pl.concat([read_part(p, columns=[c for c in (*_BURST_COLUMNS, *counters) if c in schema])
                            for p, schema in zip(parts, schemas)], how="diagonal_relaxed").lazy()
    else:
        bursts = pl.LazyFrame(schema={"run_id": pl.String, "appl": pl.Int32, "task": pl.Int32, "thread": pl.Int32,
                                      "end_ns": pl.Int64, "duration_ns": pl.Int64})
    calls = next((read_part(f, columns=[c for c in _CALL_COLUMNS if c in schema_of(f)])
                  for f in run_parts(wh, run_id, "mpi_calls.parquet")), None)
    messages = next((read_part(f) for f in run_parts(wh, run_id, "messages.parquet")), None)
    return RunPopInputs(bursts, calls, messages)


def needs_stored_messages(calls: pl.DataFrame | None, messages: pl.DataFrame | None) -> bool:
    """True when a run's calls carry point-to-point messages that its folder does not hold (ingested before
    messages.parquet was written): its replay needs them from the source trace."""
    return (messages is None and calls is not None and "n_messages" in calls.columns
            and bool(calls["n_messages"].fill_null(0).sum() > 0))


def read_pop_metrics(wh: Warehouse) -> pl.DataFrame:
    """Every experiment's POP table, one row per run (typed and empty when none was computed)."""
    stored = Stored(wh.root)  # never a copied experiment folder's (attack 8 B1)
    files = sorted(f for f in wh.experiments_dir.glob(f"*/{POP_METRICS}.parquet")
                   if stored.keep(("experiments", f.parent.name, f.name))) if wh.experiments_dir.is_dir() else []
    frames = [read_part(f) for f in files]
    empty = pl.DataFrame(schema=POP_METRICS_SCHEMA)
    return pl.concat([empty, *frames], how="diagonal_relaxed") if frames else empty


def write_pop_scaling(wh: Warehouse, scaling: pl.DataFrame) -> None:
    """Replace the warehouse's scaling table (atomically: readers see the old or the new one)."""
    wh.update_dir(wh.root / POP_DIR, {POP_SCALING: scaling.select(list(POP_SCALING_SCHEMA))})


def read_pop_scaling(wh: Warehouse) -> pl.DataFrame:
    f = wh.root / POP_DIR / f"{POP_SCALING}.parquet"
    return read_part(f) if f.is_file() else pl.DataFrame(schema=POP_SCALING_SCHEMA)
