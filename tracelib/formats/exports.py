"""The merged trace in the formats other tools read: Chrome/Perfetto trace JSON, a Pipit-style events table,
plain CSV. Pure functions of burst (and MPI call) frames; times in ns in, in each format's unit out."""
from __future__ import annotations

import json
from typing import BinaryIO

import polars as pl

from synthtrace.tracelib.schema import THREAD_KEYS, counter_columns

#: Chrome trace viewer's reserved colour names, one per archetype (the viewer accepts no free colours)
ARCHETYPE_COLOURS: dict[str, str] = {
    "fine_grain": "grey",
    "compute_vector": "good",
    "compute_scalar": "olive",
    "core_bound": "yellow",
    "cache_bound": "rail_animation",
    "dram_bandwidth": "bad",
    "dram_latency": "terrible",
    "frontend_bound": "rail_load",
    "bad_speculation": "rail_idle",
    "comm_latency": "thread_state_iowait",
    "comm_bandwidth": "thread_state_running",
    "load_imbalance": "thread_state_uninterruptible",
    "serialization": "thread_state_sleeping",
    "insufficient_counters": "generic_work",
}
MPI_COLOUR = "thread_state_runnable"


#: rows per batch of trace events turned into JSON at a time (bounds the export's memory: ~1 kB of JSON a row)
PERFETTO_BATCH_ROWS = 50_000


def _slices(frame: pl.DataFrame, pid: pl.Expr, name: pl.Expr, cat: str, cname: pl.Expr,
            args: pl.Expr) -> pl.DataFrame:
    """Complete ("X") trace events, one per row of ``frame`` (start_ns, duration_ns; sorted by thread and start),
    times in µs."""
    return frame.select(
        pl.lit("X").alias("ph"), name.alias("name"), pl.lit(cat).alias("cat"), pid, pl.col("thread").alias("tid"),
        (pl.col("start_ns") / 1000).alias("ts"), (pl.col("duration_ns") / 1000).alias("dur"),
        cname.alias("cname"), args.alias("args"))


def _json_rows(df: pl.DataFrame) -> bytes:
    """The rows of ``df`` as comma-separated JSON objects (no brackets); b'' for an empty frame."""
    return df.write_json().encode()[1:-1] if df.height else b""


def write_perfetto(out: BinaryIO, bursts: pl.DataFrame, calls: pl.DataFrame | None = None,
                   name: str = "synthtrace") -> None:
    """Write Chrome trace-event JSON to ``out`` (loads in Perfetto and chrome://tracing): one process per rank, one
    track per thread, a complete event per burst coloured by its ``archetype`` column (when present) with its
    counters as args, and a complete event per MPI call (its counters, measured inside it, as args). Timestamps in
    µs (the format's unit) with ns precision. Written in batches of :data:`PERFETTO_BATCH_ROWS` events: the JSON
    of a trace is several times its size and is never held whole (a 307 MB trace's export peaked at 2.2 GB,
    issue 23 attack 7 A15)."""
    counters = counter_columns(bursts)
    pid = (pl.col("appl") * 100_000 + pl.col("task")).alias("pid")
    arch = pl.col("archetype") if "archetype" in bursts.columns else pl.lit(None, pl.String)
    procs = bursts.select("appl", "task").unique().sort("appl", "task")
    meta = procs.select(
        pl.lit("M").alias("ph"),
        pl.lit("process_name").alias("name"),
        pid,
        pl.struct(pl.format("rank {} (appl {} task {})", pl.col("task") - 1, "appl", "task").alias("name")).alias(
            "args"
        ),
    )
    args = [pl.col("burst_seq"), pl.col("mpi_call"), *[pl.col(c) for c in counters]]
    if "match_score" in bursts.columns:
        args.append(pl.col("match_score"))
    tables = [(bursts, lambda f: _slices(f, pid, arch.fill_null("burst"), "burst", arch.replace_strict(
        ARCHETYPE_COLOURS, default="generic_work", return_dtype=pl.String), pl.struct(args)))]
    if calls is not None and calls.height:
        tables.append((calls, lambda f: _slices(f, pid, pl.col("mpi_call"), "mpi", pl.lit(MPI_COLOUR), pl.struct(
            "bytes_sent", "bytes_recv", "peer", "tag", "comm", "call_site", *counter_columns(calls)))))
    out.write(b'{"traceEvents":[')
    sep = b""
    for frame, events in [(meta, lambda f: f), *tables]:
        frame = frame.sort([*THREAD_KEYS, "start_ns"]) if "start_ns" in frame.columns else frame
        for at in range(0, frame.height, PERFETTO_BATCH_ROWS):
            out.write(sep + _json_rows(events(frame.slice(at, PERFETTO_BATCH_ROWS))))
            sep = b","
    out.write(b'],"displayTimeUnit":"ns","otherData":{"generator":"synthtrace","trace":' + json.dumps(name).encode()
              + b"}}")


def _process(bursts: pl.DataFrame, frame: pl.DataFrame) -> pl.Expr:
    """Pipit's 0-based ``Process`` of each row of ``frame``: the task's rank, the tasks of later Paraver
    applications (appl 2, ...) numbered after those of the earlier ones so that no two share a number."""
    offsets = (pl.concat([bursts.select("appl", "task"), frame.select("appl", "task")])
               .group_by("appl").agg(pl.col("task").max()).sort("appl"))
    first = dict(zip(offsets["appl"].to_list(), (offsets["task"].cum_sum() - offsets["task"]).to_list()))
    return (pl.col("appl").replace_strict(first, return_dtype=pl.Int64) + pl.col("task") - 1).alias("Process")


def _enter_leave(spans: pl.DataFrame, on_leave: list[str]) -> list[pl.DataFrame]:
    """An Enter row at start_ns and a Leave row at end_ns per span; the ``on_leave`` columns on the Leave row."""
    keep = ("Name", "Thread", "Process")
    return [spans.select(pl.col("start_ns").alias("Timestamp (ns)"), pl.lit("Enter").alias("Event Type"), *keep),
            spans.select(pl.col("end_ns").alias("Timestamp (ns)"), pl.lit("Leave").alias("Event Type"), *keep,
                         *on_leave)]


def pipit_events(bursts: pl.DataFrame, calls: pl.DataFrame | None = None) -> pl.DataFrame:
    """Pipit's events-table shape: ``Timestamp (ns)``, ``Event Type`` (Enter/Leave), ``Name``, ``Thread``,
    ``Process`` (0-based rank, later applications numbered after earlier ones), then one column per counter. A burst is
    an Enter/Leave pair named
    ``Computation`` whose counters sit on its Leave row (they are the burst's deltas); MPI calls are Enter/Leave
    pairs named after the call with their bytes and the counters measured inside them on the Leave row."""
    counters = counter_columns(bursts)
    base = bursts.select(
        _process(bursts, calls if calls is not None else bursts), pl.col("thread").sub(1).alias("Thread"),
        "start_ns", "end_ns", pl.lit("Computation").alias("Name"), *counters)
    parts = _enter_leave(base, counters)
    if calls is not None and calls.height:
        inside = counter_columns(calls)
        c = calls.select(_process(bursts, calls), pl.col("thread").sub(1).alias("Thread"),
                         "start_ns", "end_ns", pl.col("mpi_call").alias("Name"), "bytes_sent", "bytes_recv", *inside)
        parts += _enter_leave(c, ["bytes_sent", "bytes_recv", *inside])
    order = pl.col("Event Type").replace_strict({"Leave": 0, "Enter": 1}, return_dtype=pl.Int8)
    return (pl.concat(parts, how="diagonal_relaxed")
            .sort(["Timestamp (ns)", "Process", "Thread", order], maintain_order=True))
