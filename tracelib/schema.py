"""Column names and types of the tidy tables every trace reader produces (DESIGN §3, §5).

Times are integer nanoseconds from the start of the trace; counters are integer counts per burst.
Paraver's 1-based appl/task/thread numbering is kept as it is in the trace.
"""
from __future__ import annotations

import polars as pl

THREAD_KEYS: list[str] = ["appl", "task", "thread"]
BURST_KEYS: list[str] = ["run_id", *THREAD_KEYS, "burst_seq"]

#: Fixed columns of the bursts table; one Int64 column per counter follows, named after the counter.
BURST_SCHEMA: dict[str, pl.DataType] = {
    "run_id": pl.String(),
    "appl": pl.Int32(),
    "task": pl.Int32(),
    "thread": pl.Int32(),
    "burst_seq": pl.Int64(),
    "cpu": pl.Int32(),
    "start_ns": pl.Int64(),
    "end_ns": pl.Int64(),
    "duration_ns": pl.Int64(),
    "mpi_call": pl.String(),  # the MPI call whose entry closes the burst (NULL at the end of a thread)
    "call_site": pl.String(),  # caller of that MPI call, "function (file:line)" when the .pcf resolves it
}

#: An optional Boolean column of the bursts table (a reader that can tell writes it on every burst; absent: False):
#: the thread's recording was switched off where the burst ends (Extrae_shutdown, event 40000012 value 0 and the
#: "Tracing Disabled" state; Score-P's MEASUREMENT OFF region), so the work after it up to the next burst is in no
#: record: the burst is not a piece of the one after the gap (mergeattack23 P4).
UNTRACED_AFTER = "untraced_after"
#: [contention25] merged_bursts' flag: the burst's transferred values are another machine state's
OTHER_STATE = "other_machine_state"

MPI_CALL_SCHEMA: dict[str, pl.DataType] = {
    "run_id": pl.String(),
    "appl": pl.Int32(),
    "task": pl.Int32(),
    "thread": pl.Int32(),
    "call_seq": pl.Int64(),
    "cpu": pl.Int32(),
    "mpi_call": pl.String(),
    "mpi_kind": pl.String(),  # point_to_point | collective | other
    "start_ns": pl.Int64(),
    "end_ns": pl.Int64(),
    "duration_ns": pl.Int64(),
    "bytes_sent": pl.Int64(),  # bytes
    "bytes_recv": pl.Int64(),  # bytes
    "peer": pl.Int32(),  # task of the first message partner (point-to-point) or NULL
    "n_messages": pl.Int32(),
    "comm": pl.Int64(),
    "root": pl.Int32(),
    "tag": pl.Int64(),
    "call_site": pl.String(),
}

RUN_SCHEMA: dict[str, pl.DataType] = {
    "run_id": pl.String(),
    "run_name": pl.String(),
    "experiment": pl.String(),
    "app": pl.String(),
    "started_at": pl.Datetime("us"),
    "format": pl.String(),
    "source_path": pl.String(),
    "source_bytes": pl.Int64(),
    "n_appl": pl.Int32(),
    "n_tasks": pl.Int32(),
    "n_threads": pl.Int32(),
    "n_nodes": pl.Int32(),
    "duration_ns": pl.Int64(),
    "counters": pl.List(pl.String()),
    "n_bursts": pl.Int64(),
    "n_mpi_calls": pl.Int64(),
    "warnings": pl.List(pl.String()),
    "ingested_at": pl.Datetime("us", "UTC"),
}


#: the columns a bursts-like (or MPI-call) table carries besides its counters: BURST_SCHEMA, MPI_CALL_SCHEMA, and
#: what a merged, labelled or analysed experiment adds
NON_COUNTER_COLUMNS: frozenset[str] = frozenset(BURST_SCHEMA) | frozenset(MPI_CALL_SCHEMA) | {
    "experiment", "run_name", "app", "match_score", "estimated", "phase", "archetype", "confidence", UNTRACED_AFTER,
    OTHER_STATE}


_RESERVED_LOWER = frozenset(c.lower() for c in NON_COUNTER_COLUMNS)


def is_reserved_column(name: str) -> bool:
    """True when a counter may not be stored under ``name``: a key or fixed column of the bursts-like tables (in any
    letter case: DuckDB's names are case-insensitive) or a private ``_`` name. The readers rename such a counter
    (a .pcf label ``task``, an OTF2 metric ``start_ns``) and say so."""
    return name.lower() in _RESERVED_LOWER or name.startswith("_")


def unreserved_column(name: str, suffix: str) -> str:
    """The column a counter named ``name`` is stored under when :func:`is_reserved_column` (``task`` ->
    ``task_<suffix>``, ``_hidden`` -> ``hidden_<suffix>``: never private, never a key)."""
    return f"{name.lstrip('_') or 'counter'}_{suffix}"


def counter_columns(bursts: pl.DataFrame | pl.LazyFrame) -> list[str]:
    """The counter columns of a bursts-like or MPI-call table, in table order: its numeric columns that are neither
    fixed (:data:`NON_COUNTER_COLUMNS`) nor private (named ``_...``). The one rule of the code base."""
    schema = bursts.collect_schema() if isinstance(bursts, pl.LazyFrame) else bursts.schema
    return [c for c, t in schema.items() if c not in NON_COUNTER_COLUMNS and t.is_numeric() and not c.startswith("_")]

#: Uncore counter samples (memory-controller CAS counts ...) read by tracer threads that run no application code
#: (Extrae's uncore readers, appl 2 of the LULESH traces): one row per sample and counter. ``value`` counts
#: events since the same thread's previous sample of that counter; ``node`` is the 1-based node of the reading
#: task (NULL when the trace has no resource information).
UNCORE_SCHEMA: dict[str, pl.DataType] = {
    "run_id": pl.String(),
    "appl": pl.Int32(),
    "task": pl.Int32(),
    "thread": pl.Int32(),
    "node": pl.Int32(),
    "time_ns": pl.Int64(),
    "counter": pl.String(),
    "value": pl.Int64(),
}

#: Events that became neither bursts, MPI calls nor counters (OpenMP, user functions, PROFET's memory metrics, ...)
#: and counter samples that no burst or call holds; one row per (type, value) pair of a record. Names from the
#: trace's own definitions (Paraver: the .pcf), NULL where it has none.
EVENT_SCHEMA: dict[str, pl.DataType] = {
    "run_id": pl.String(),
    "appl": pl.Int32(),
    "task": pl.Int32(),
    "thread": pl.Int32(),
    "time_ns": pl.Int64(),
    "type": pl.Int64(),
    "value": pl.Int64(),
    "type_name": pl.String(),
    "value_name": pl.String(),
}

#: Node of every thread of a run (1-based; NULL without resource information).
THREAD_NODE_SCHEMA: dict[str, pl.DataType] = {"appl": pl.Int32(), "task": pl.Int32(), "thread": pl.Int32(),
                                              "node": pl.Int32()}
