"""The merged trace in the formats other tools read: Chrome/Perfetto trace JSON, Pipit's events table,
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
#: cells (rows x columns) per batch at most: a wide trace's events (thousands of counter args each) come fewer at a
#: time (attack 18 F2); a frame of up to 32 columns keeps :data:`PERFETTO_BATCH_ROWS`
PERFETTO_BATCH_CELLS = 1_600_000


def rows_within(cells: int, width: int, rows: int) -> int:
    """The rows (``rows`` at most, one at least) of a table ``width`` columns wide that hold at most ``cells`` cells:
    what a window of a wide export reads or writes at a time (attack 18 F2)."""
    return max(1, min(rows, cells // max(1, width)))


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
            batch = rows_within(PERFETTO_BATCH_CELLS, frame.width, PERFETTO_BATCH_ROWS)
            for at in range(0, frame.height, batch):
                out.write(sep + _json_rows(events(frame.slice(at, batch))))
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


#: Pipit's columns before the metrics, as its readers name them (``Trace.from_csv`` reads them by name);
#: ``Attributes`` holds a message row's fields as JSON text (see :func:`pipit_window`)
PIPIT_KEYS = ("Timestamp (ns)", "Event Type", "Name", "Thread", "Process", "Attributes")
#: the MPI bytes of a call, a metric column of the table beside the counters
_CALL_BYTES = ["bytes_sent", "bytes_recv"]


def _spans(frame: pl.DataFrame, first: dict[int, int], name: pl.Expr, extra: list[str]) -> pl.DataFrame:
    """The columns of Pipit's rows of the spans ``frame`` (bursts or MPI calls)."""
    return frame.select(_process(first), pl.col("thread").sub(1).alias("Thread"), "start_ns", "end_ns",
                        name.alias("Name"), *extra)


def _enter(spans: pl.DataFrame) -> pl.DataFrame:
    """An Enter row at start_ns per span."""
    return spans.select(pl.col("start_ns").alias("Timestamp (ns)"), pl.lit("Enter").alias("Event Type"), "Name",
                        "Thread", "Process")


def _leave(spans: pl.DataFrame, on_leave: list[str]) -> pl.DataFrame:
    """A Leave row at end_ns per span, with the ``on_leave`` columns (the span's counts, made readings later)."""
    return spans.select(pl.col("end_ns").alias("Timestamp (ns)"), pl.lit("Leave").alias("Event Type"), "Name",
                        "Thread", "Process", *on_leave)


def _message_rows(messages: pl.DataFrame, first: dict[int, int], end: str) -> pl.DataFrame:
    """An ``Instant`` row per message of ``messages`` (the stored ``mpi_messages``: appl, comm, sender, receiver,
    tag, bytes, s_thread, s_time_ns, r_thread, r_time_ns) at its send (``end`` "s": ``MpiSend`` on the sender) or
    its receive ("r": ``MpiRecv`` on the receiver), its fields in ``Attributes`` as Pipit's OTF2 reader gives them
    (the partner's 0-based process, ``communicator``, ``msg_tag``, ``msg_length``); ends not recorded are left
    out."""
    base = pl.col("appl").replace_strict(first, return_dtype=pl.Int64) - 1
    me, partner = ("sender", "receiver") if end == "s" else ("receiver", "sender")
    return messages.filter(pl.col(f"{end}_time_ns").is_not_null()).select(
        pl.col(f"{end}_time_ns").alias("Timestamp (ns)"), pl.lit("Instant").alias("Event Type"),
        pl.lit("MpiSend" if end == "s" else "MpiRecv").alias("Name"), pl.col(f"{end}_thread").sub(1).alias("Thread"),
        (base + pl.col(me)).alias("Process"),
        pl.struct((base + pl.col(partner)).alias(partner), pl.col("comm").alias("communicator"),
                  pl.col("tag").alias("msg_tag"), pl.col("bytes").alias("msg_length")).struct.json_encode()
        .alias("Attributes"))


def pipit_events(bursts: pl.DataFrame, calls: pl.DataFrame | None = None,
                 messages: pl.DataFrame | None = None) -> pl.DataFrame:
    """Pipit's events table, as ``pipit.Trace.from_csv`` reads it and its functions use it: ``Timestamp (ns)``,
    ``Event Type``, ``Name``, ``Thread``, ``Process`` (0-based rank, later applications numbered after earlier
    ones), ``Attributes``, then one column per counter and the calls' ``bytes_sent``/``bytes_recv``. A burst is an
    Enter/Leave pair named ``Computation``, an MPI call a pair named after the call; a message (``messages``, the
    run's ``mpi_messages``) an ``Instant`` row ``MpiSend`` at its send and ``MpiRecv`` at its receive.

    The metric columns are readings, as Pipit's OTF2 reader gives a metric's values at each Enter and Leave: per
    thread, the counts of the spans that ended before the row, so that Leave minus Enter (``calc_inc_metrics``) is
    the span's counts (a span whose count is not known has none on its Leave row); message rows have none.
    ``Attributes`` is JSON text (a CSV holds no dicts): ``comm_matrix`` wants Pipit's dicts, so after
    ``Trace.from_csv`` parse it once: ``t.events["Attributes"] = t.events["Attributes"].map(json.loads,
    na_action="ignore")``. :func:`pipit_window` makes the same table a window of time at a time."""
    tasks = [bursts.select("appl", "task")] + ([calls.select("appl", "task")] if calls is not None else [])
    has_calls = calls is not None and calls.height > 0
    rows, _ = pipit_window(process_numbers(pl.concat(tasks)), bursts, bursts, calls if has_calls else None,
                           calls if has_calls else None, messages, messages)
    return rows


def pipit_window(first: dict[int, int], entered: pl.DataFrame, left: pl.DataFrame, calls_entered: pl.DataFrame |
                 None = None, calls_left: pl.DataFrame | None = None, sent: pl.DataFrame | None = None,
                 received: pl.DataFrame | None = None,
                 totals: pl.DataFrame | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The rows of :func:`pipit_events` in one window of time, and the readings they end with: the Enter rows of
    the bursts ``entered`` and MPI calls ``calls_entered`` (those starting in the window), the Leave rows of ``left``
    and ``calls_left`` (those ending in it), the message rows of the messages ``sent`` and ``received`` in it; bursts
    in (appl, task, thread, burst_seq) order, calls in (appl, task, thread, call_seq) order, calls given (perhaps
    empty) whenever the trace has any and messages whenever it stores them, so that every window has the same
    columns. ``first``: :func:`process_numbers` of the whole trace; ``totals``: the readings the windows before
    ended with (None: the first window), per (Process, Thread). The windows of consecutive times, one after the
    other, are the whole table (issue 23 attack 7 A21: the table is never held whole)."""
    counters = counter_columns(entered)
    computation = pl.lit("Computation")
    has_calls = calls_entered is not None and calls_left is not None
    bursts_left = _spans(left, first, computation, counters)
    if has_calls:  # a burst moves no bytes: 0, not unknown
        bursts_left = bursts_left.with_columns(pl.lit(0, pl.Int64).alias(c) for c in _CALL_BYTES)
    parts = [_enter(_spans(entered, first, computation, [])),
             _leave(bursts_left, [*counters, *(_CALL_BYTES if has_calls else [])])]
    if has_calls:
        extra = [*_CALL_BYTES, *counter_columns(calls_left)]
        parts += [_enter(_spans(calls_entered, first, pl.col("mpi_call"), [])),
                  _leave(_spans(calls_left, first, pl.col("mpi_call"), extra), extra)]
    if sent is not None and received is not None:
        parts += [_message_rows(sent, first, "s"), _message_rows(received, first, "r")]
    order = pl.col("Event Type").replace_strict({"Leave": 0, "Enter": 1, "Instant": 2}, return_dtype=pl.Int8)
    rows = (pl.concat(parts, how="diagonal_relaxed")
            .sort(["Timestamp (ns)", "Process", "Thread", order], maintain_order=True))
    if "Attributes" not in rows.columns:
        rows = rows.with_columns(pl.lit(None, pl.String).alias("Attributes"))
    metrics = [c for c in rows.columns if c not in PIPIT_KEYS]
    return _readings(rows.select(*PIPIT_KEYS, *metrics), metrics, totals)


def _readings(rows: pl.DataFrame, metrics: list[str], totals: pl.DataFrame | None) -> tuple[pl.DataFrame,
                                                                                           pl.DataFrame]:
    """``rows`` (time-ordered; each span's counts on its Leave row) with each of ``metrics`` as Pipit's readings:
    per (Process, Thread), ``totals`` (the counts before the window) plus the counts of the spans that ended at or
    before the row, on Enter and Leave rows (a Leave whose count is not known: none); and the new totals."""
    keys = ["Process", "Thread"]
    before = (totals if totals is not None else pl.DataFrame(schema={"Process": pl.Int64, "Thread": pl.Int64}))
    before = before.select(*keys, *[pl.col(c).alias(f"_before_{c}") if c in before.columns
                                    else pl.lit(0, pl.Int64).alias(f"_before_{c}") for c in metrics])
    leave, span = pl.col("Event Type") == "Leave", pl.col("Event Type").is_in(["Enter", "Leave"])
    run = rows.with_columns(pl.col(k).cast(pl.Int64) for k in keys).join(
        before, on=keys, how="left", maintain_order="left").with_columns(
        (pl.col(f"_before_{c}").fill_null(0) + pl.when(leave).then(pl.col(c).fill_null(0)).otherwise(0)
         .cum_sum().over(keys)).alias(f"_total_{c}") for c in metrics)
    now = (pl.concat([before.select(*keys, *[pl.col(f"_before_{c}").alias(c) for c in metrics]),
                      run.select(*keys, *[pl.col(f"_total_{c}").alias(c) for c in metrics])], how="vertical_relaxed")
           .group_by(keys, maintain_order=True).last())
    out = run.select(*PIPIT_KEYS, *[pl.when(leave & pl.col(c).is_null()).then(None).when(span)
                                    .then(pl.col(f"_total_{c}")).otherwise(None).alias(c) for c in metrics])
    return out, now
