"""The merged trace in the formats other tools read: Chrome/Perfetto trace JSON, a Pipit-style events table,
plain CSV. Pure functions of burst (and MPI call) frames; times in ns in, in each format's unit out."""
from __future__ import annotations

import json
from collections.abc import Iterable
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


def _microseconds(column: str) -> pl.Expr:
    """The ns of ``column`` in µs, each the double nearest to the exact quotient, so that it prints as the exact
    decimal (1.2 for 1200 ns). Polars divides by a constant as a product with its inverse, which is not always the
    nearest double (1.2000000000000002, 1869355.6870000002); numpy divides."""
    return pl.col(column).map_batches(lambda s: pl.Series(s.cast(pl.Float64).to_numpy() / 1000.0, nan_to_null=True),
                                      return_dtype=pl.Float64)


def _slices(frame: pl.DataFrame, pid: pl.Expr, name: pl.Expr, cat: str, cname: pl.Expr,
            args: pl.Expr) -> pl.DataFrame:
    """Complete ("X") trace events, one per row of ``frame`` (start_ns, duration_ns; sorted by thread and start),
    times in µs."""
    return frame.select(
        pl.lit("X").alias("ph"), name.alias("name"), pl.lit(cat).alias("cat"), pid, pl.col("thread").alias("tid"),
        _microseconds("start_ns").alias("ts"), _microseconds("duration_ns").alias("dur"),
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
    issue 23 attack 7 A15). :func:`write_perfetto_windows` writes the same from a trace read a window at a time."""
    write_perfetto_windows(out, bursts.select("appl", "task"), [bursts], [] if calls is None else [calls], name)


def write_perfetto_windows(out: BinaryIO, tasks: pl.DataFrame, bursts: Iterable[pl.DataFrame],
                           calls: Iterable[pl.DataFrame] = (), name: str = "synthtrace") -> None:
    """:func:`write_perfetto` of a trace given as windows: ``tasks`` the (appl, task) of its bursts (repeats
    allowed), ``bursts`` and ``calls`` its bursts and MPI calls as frames that follow each other in
    (appl, task, thread, start_ns) order (each window is sorted here; one window holding everything is the whole
    trace), read as they are written, so that only a window is held at a time (issue 23 attack 7 A21)."""
    pid = (pl.col("appl") * 100_000 + pl.col("task")).alias("pid")
    meta = tasks.unique().sort("appl", "task").select(
        pl.lit("M").alias("ph"),
        pl.lit("process_name").alias("name"),
        pid,
        pl.struct(pl.format("rank {} (appl {} task {})", pl.col("task") - 1, "appl", "task").alias("name")).alias(
            "args"
        ),
    )

    def burst_events(f: pl.DataFrame) -> pl.DataFrame:
        arch = pl.col("archetype") if "archetype" in f.columns else pl.lit(None, pl.String)
        args = [pl.col("burst_seq"), pl.col("mpi_call"), *[pl.col(c) for c in counter_columns(f)]]
        if "match_score" in f.columns:
            args.append(pl.col("match_score"))
        return _slices(f, pid, arch.fill_null("burst"), "burst", arch.replace_strict(
            ARCHETYPE_COLOURS, default="generic_work", return_dtype=pl.String), pl.struct(args))

    def call_events(f: pl.DataFrame) -> pl.DataFrame:
        return _slices(f, pid, pl.col("mpi_call"), "mpi", pl.lit(MPI_COLOUR), pl.struct(
            "bytes_sent", "bytes_recv", "peer", "tag", "comm", "call_site", *counter_columns(f)))

    out.write(b'{"traceEvents":[')
    sep = b""
    windows = [((meta,), lambda f: f), (bursts, burst_events), (calls, call_events)]
    for frames, events in windows:
        for frame in frames:
            frame = frame.sort([*THREAD_KEYS, "start_ns"]) if "start_ns" in frame.columns else frame
            for at in range(0, frame.height, PERFETTO_BATCH_ROWS):
                out.write(sep + _json_rows(events(frame.slice(at, PERFETTO_BATCH_ROWS))))
                sep = b","
    out.write(b'],"displayTimeUnit":"ns","otherData":{"generator":"synthtrace","trace":' + json.dumps(name).encode()
              + b"}}")


def process_numbers(tasks: pl.DataFrame) -> dict[int, int]:
    """Pipit's 0-based ``Process`` of task 1 of each application, from the (appl, task) of every burst and MPI call
    (``tasks``): the tasks of later Paraver applications (appl 2, ...) numbered after those of the earlier ones so
    that no two share a number."""
    offsets = tasks.group_by("appl").agg(pl.col("task").max()).sort("appl")
    return dict(zip(offsets["appl"].to_list(), (offsets["task"].cum_sum() - offsets["task"]).to_list()))


def _process(first: dict[int, int]) -> pl.Expr:
    """Pipit's 0-based ``Process`` of each row (``first``: :func:`process_numbers`)."""
    return (pl.col("appl").replace_strict(first, return_dtype=pl.Int64) + pl.col("task") - 1).alias("Process")


def _spans(frame: pl.DataFrame, first: dict[int, int], name: pl.Expr, extra: list[str]) -> pl.DataFrame:
    """The columns of Pipit's rows of the spans ``frame`` (bursts or MPI calls)."""
    return frame.select(_process(first), pl.col("thread").sub(1).alias("Thread"), "start_ns", "end_ns",
                        name.alias("Name"), *extra)


def _enter(spans: pl.DataFrame) -> pl.DataFrame:
    """An Enter row at start_ns per span."""
    return spans.select(pl.col("start_ns").alias("Timestamp (ns)"), pl.lit("Enter").alias("Event Type"), "Name",
                        "Thread", "Process")


def _leave(spans: pl.DataFrame, on_leave: list[str]) -> pl.DataFrame:
    """A Leave row at end_ns per span, with the ``on_leave`` columns."""
    return spans.select(pl.col("end_ns").alias("Timestamp (ns)"), pl.lit("Leave").alias("Event Type"), "Name",
                        "Thread", "Process", *on_leave)


def pipit_events(bursts: pl.DataFrame, calls: pl.DataFrame | None = None) -> pl.DataFrame:
    """Pipit's events-table shape: ``Timestamp (ns)``, ``Event Type`` (Enter/Leave), ``Name``, ``Thread``,
    ``Process`` (0-based rank, later applications numbered after earlier ones), then one column per counter. A burst is
    an Enter/Leave pair named
    ``Computation`` whose counters sit on its Leave row (they are the burst's deltas); MPI calls are Enter/Leave
    pairs named after the call with their bytes and the counters measured inside them on the Leave row.
    :func:`pipit_window` makes the same table a window of time at a time."""
    tasks = [bursts.select("appl", "task")] + ([calls.select("appl", "task")] if calls is not None else [])
    has_calls = calls is not None and calls.height > 0
    return pipit_window(process_numbers(pl.concat(tasks)), bursts, bursts, calls if has_calls else None,
                        calls if has_calls else None)


def pipit_window(first: dict[int, int], entered: pl.DataFrame, left: pl.DataFrame, calls_entered: pl.DataFrame |
                 None = None, calls_left: pl.DataFrame | None = None) -> pl.DataFrame:
    """The rows of :func:`pipit_events` in one window of time: the Enter rows of the bursts ``entered`` and MPI
    calls ``calls_entered`` (those starting in the window), the Leave rows of ``left`` and ``calls_left`` (those
    ending in it); bursts in (appl, task, thread, burst_seq) order, calls in (appl, task, thread, call_seq) order,
    calls given (perhaps empty) whenever the trace has any, so that every window has the same columns. ``first``:
    :func:`process_numbers` of the whole trace. The windows of consecutive times, one after the other, are the
    whole table (issue 23 attack 7 A21: the table is never held whole)."""
    counters = counter_columns(entered)
    computation = pl.lit("Computation")
    parts = [_enter(_spans(entered, first, computation, [])), _leave(_spans(left, first, computation, counters),
                                                                     counters)]
    if calls_entered is not None and calls_left is not None:
        inside = counter_columns(calls_left)
        extra = ["bytes_sent", "bytes_recv", *inside]
        parts += [_enter(_spans(calls_entered, first, pl.col("mpi_call"), [])),
                  _leave(_spans(calls_left, first, pl.col("mpi_call"), extra), extra)]
    order = pl.col("Event Type").replace_strict({"Leave": 0, "Enter": 1}, return_dtype=pl.Int8)
    return (pl.concat(parts, how="diagonal_relaxed")
            .sort(["Timestamp (ns)", "Process", "Thread", order], maintain_order=True))
