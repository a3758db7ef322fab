"""Paraver records of simulated pairs, vectorised: Polars string concatenation over whole blocks.

Per pair (a burst and the MPI call that closes it), as Extrae writes them: the Running state, the MPI entry
event carrying the collective's sizes, the burst's counters and the caller, the MPI state, the exit event, and
the counters measured inside the call on their own record; per message a ``3:`` record. The first pair of a
thread is preceded by the Not-created state and the Application-begin event (with the active counter set and
zeroed counters); the last one, without a call, ends with the Application-end event carrying its counters. A
progress write inside a compute phase (:mod:`.io_split`) is written like a call: Extrae's I/O Write event with
the counters read at its entry, the I/O state, the event's end.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from synthtrace.tracelib.formats.paraver.records import CALLER_LINE_TYPE, CALLER_TYPE, COLLECTIVE_INFO_TYPES
from synthtrace.tracelib.formats.paraver.writer import (
    APPL_EVENT, COUNTER_SET_EVENT, ORDER_COMM, ORDER_ENTRY, ORDER_EXIT,
                                     ORDER_EXIT_COUNTERS, ORDER_STATE, STATE_NOT_CREATED, STATE_RUNNING, block,
                                     comm_line, state_line)
from synthtrace.simulator.builder import IO_WRITE, NO_CALL, PairBlock

IO_WRITE_EVENT, STATE_IO = 40_000_005, 12  # Extrae's "I/O Write" event (1 begin, 0 end) and the I/O thread state


@dataclass(frozen=True)
class RecordTables:
    """Lookups for one run: call id -> (event type, value, state); site id -> (function, line) caller values;
    the recorded counters (indices into the model's counters), their Extrae event types and their counts per ns
    inside MPI calls; cpu per task index."""

    call_type: np.ndarray
    call_value: np.ndarray
    call_state: np.ndarray
    site_func: np.ndarray
    site_line: np.ndarray
    counter_idx: np.ndarray
    counter_types: tuple[int, ...]
    mpi_rates: np.ndarray
    cpu_of_task: np.ndarray


def _counter_pieces(prefix: str, types: tuple[int, ...]) -> list[pl.Expr]:
    out: list[pl.Expr] = []
    for i, t in enumerate(types):
        out += [pl.lit(str(t)), pl.col(f"{prefix}{i}")]
    return out


def pair_records(pb: PairBlock, tabs: RecordTables, *, begin: np.ndarray | None = None) -> pl.DataFrame:
    """The record block (see :data:`synthtrace.tracelib.formats.paraver.writer.BLOCK_SCHEMA`) of one block of pairs.

    ``begin``: per task index, the time its application starts (only for the block holding each thread's first
    pair): adds the Not-created state before it and the Application-begin event at it.
    """
    c = pb.cols
    call = c["call"]
    has_call = call != NO_CALL  # an MPI call or an I/O write (see :mod:`.io_split`)
    io = call == IO_WRITE
    safe = np.where(call >= 0, call, 0)
    coll = c["coll_send"] >= 0
    data = {
        "cpu": tabs.cpu_of_task[c["task"]],
        "task": c["task"] + 1,
        "b_start": c["b_start"],
        "b_end": c["b_end"],
        "c_exit": c["c_exit"],
        "has_call": has_call,
        "ctype": np.where(io, IO_WRITE_EVENT, np.where(has_call, tabs.call_type[safe], APPL_EVENT)),
        "cval": np.where(has_call, np.where(io, 1, tabs.call_value[safe]), 0),
        "state": np.where(io, STATE_IO, tabs.call_state[safe]),
        "mpi": call >= 0,
        "func": tabs.site_func[c["site"]],
        "line": tabs.site_line[c["site"]],
        "cs": np.where(coll, c["coll_send"], -1),
        "cr": np.where(coll, c["coll_recv"], -1),
        # Extrae's root flag (50100003:1) on the root's own call only; every simulated collective is on the world,
        # where a task's rank is its index (:mod:`~synthtrace.tracelib.formats.paraver.collective_roots`)
        "root": np.where((c["root"] >= 0) & (c["root"] == c["task"]), 1, -1),
        "comm": c["comm"],
    }
    k = len(tabs.counter_types)
    sel = pb.counters[:, tabs.counter_idx]
    msel = np.rint((c["c_exit"] - c["b_end"]).astype(np.float64)[:, None] * tabs.mpi_rates[None, :]).astype(np.int64)
    for i in range(k):
        data[f"c{i}"] = sel[:, i]
        data[f"m{i}"] = msel[:, i]
    df = pl.DataFrame(data)
    task, one = pl.col("task"), pl.lit(1)
    # each number is turned into text once, then lines are glued from text columns
    df = df.with_columns(
        pl.concat_str([pl.col("cpu"), one, task, one], separator=":").alias("_pfx"),
        pl.col("b_start").cast(pl.String).alias("_bs"), pl.col("b_end").cast(pl.String).alias("_be"),
        pl.col("c_exit").cast(pl.String).alias("_cx"), pl.col("ctype").cast(pl.String).alias("_ct"),
        *([pl.concat_str(_counter_pieces("c", tabs.counter_types), separator=":").alias("_cnt"),
           pl.concat_str(_counter_pieces("m", tabs.counter_types), separator=":").alias("_mcnt")] if k else
          [pl.lit(None, pl.String).alias("_cnt"), pl.lit(None, pl.String).alias("_mcnt")]))
    pfx, bs, be, cx = pl.col("_pfx"), pl.col("_bs"), pl.col("_be"), pl.col("_cx")
    coll_part = pl.when(pl.col("cs") >= 0).then(
        pl.concat_str(
            [
                pl.lit(f"{COLLECTIVE_INFO_TYPES[0]}"),
                pl.col("cs"),
                pl.lit(f"{COLLECTIVE_INFO_TYPES[1]}"),
                pl.col("cr"),
                pl.when(pl.col("root") >= 0).then(
                    pl.concat_str([pl.lit(f"{COLLECTIVE_INFO_TYPES[2]}"), pl.col("root")], separator=":")
                ),
                pl.lit(f"{COLLECTIVE_INFO_TYPES[3]}"),
                pl.col("comm"),
            ],
            separator=":",
            ignore_nulls=True,
        )
    )
    callers = pl.when(pl.col("mpi")).then(pl.concat_str(
        [pl.lit(str(CALLER_TYPE)), pl.col("func"), pl.lit(str(CALLER_LINE_TYPE)), pl.col("line")], separator=":"))
    entry = pl.concat_str([pl.lit("2"), pfx, be, pl.col("_ct"), pl.col("cval"), coll_part, pl.col("_cnt"), callers],
                          separator=":", ignore_nulls=True)
    calls = df.filter(pl.col("has_call"))
    parts = [
        df.select(block(pl.col("b_start"), one, task, one, ORDER_STATE,
                        pl.concat_str([pl.lit("1"), pfx, bs, be, pl.lit(str(STATE_RUNNING))], separator=":"))),
        df.select(block(pl.col("b_end"), one, task, one, ORDER_ENTRY, entry)),
        calls.select(block(pl.col("b_end"), one, task, one, ORDER_STATE,
                           pl.concat_str([pl.lit("1"), pfx, be, cx, pl.col("state")], separator=":"))),
        calls.select(block(pl.col("c_exit"), one, task, one, ORDER_EXIT,
                           pl.concat_str([pl.lit("2"), pfx, cx, pl.col("_ct"), pl.lit("0")], separator=":"))),
    ]
    if k:
        parts.append(calls.select(block(pl.col("c_exit"), one, task, one, ORDER_EXIT_COUNTERS,
                                        pl.concat_str([pl.lit("2"), pfx, cx, pl.col("_mcnt")], separator=":"))))
    m = pb.messages
    if m and m["s_task"].size:
        md = pl.DataFrame({"s_cpu": tabs.cpu_of_task[m["s_task"]], "s_task": m["s_task"] + 1, "s_l": m["s_l"],
                           "s_p": m["s_p"], "r_cpu": tabs.cpu_of_task[m["r_task"]], "r_task": m["r_task"] + 1,
                           "r_l": m["r_l"], "r_p": m["r_p"], "size": m["size"], "tag": m["tag"]})
        s = [pl.col("s_cpu"), one, pl.col("s_task"), one, pl.col("s_l"), pl.col("s_p")]
        r = [pl.col("r_cpu"), one, pl.col("r_task"), one, pl.col("r_l"), pl.col("r_p")]
        parts.append(md.select(block(pl.col("s_p"), one, pl.col("s_task"), one, ORDER_COMM,
                                     comm_line(s, r, pl.col("size"), pl.col("tag")))))
    if begin is not None:
        parts += begin_records(begin, tabs)
    return pl.concat(parts)


def begin_records(begin: np.ndarray, tabs: RecordTables) -> list[pl.DataFrame]:
    """Not-created state from 0 and the Application-begin event (counter set 1, counters zeroed) per task."""
    df = pl.DataFrame({"cpu": tabs.cpu_of_task, "task": np.arange(1, begin.size + 1), "t": begin.astype(np.int64)})
    cpu, task, one = pl.col("cpu"), pl.col("task"), pl.lit(1)
    zeros = [x for t in tabs.counter_types for x in (pl.lit(str(t)), pl.lit("0"))]
    return [
        df.select(block(pl.lit(0), one, task, one, ORDER_STATE,
                        state_line(cpu, one, task, one, pl.lit(0), pl.col("t"), pl.lit(STATE_NOT_CREATED)))),
        df.select(block(pl.col("t"), one, task, one, ORDER_ENTRY, pl.concat_str(
            [pl.lit("2"), cpu, one, task, one, pl.col("t"), pl.lit(str(APPL_EVENT)), pl.lit("1"),
             pl.lit(str(COUNTER_SET_EVENT)), pl.lit("1"), *zeros], separator=":"))),
    ]
