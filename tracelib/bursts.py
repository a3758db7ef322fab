"""Assembles computation bursts and MPI calls from a format's records, chunk by chunk (DESIGN §3).

Format readers (Paraver, OTF2) turn their records into four generic frames per chunk and feed them to a
:class:`BurstAssembler`, which keeps only the unfinished tail of every thread between chunks so memory stays
bounded:

- ``intervals``: appl, task, thread, cpu, start_ns, end_ns — Running intervals (adjacent ones are merged);
- ``samples``: appl, task, thread, time_ns, counter, value — counter deltas (counts) at a time;
  a sample at time t belongs to the burst with start < t <= end (Extrae emits them at the burst's end);
- ``mpi``: appl, task, thread, cpu, time_ns, kind, call (NULL at exit), bytes_sent, bytes_recv, root, comm,
  call_site — MPI entries and exits; collective sizes ride on the entry row;
- ``messages``: s_appl, s_task, s_thread, s_time_ns, r_appl, r_task, r_thread, r_time_ns, size, tag.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from tracelib.schema import BURST_SCHEMA, MPI_CALL_SCHEMA, THREAD_KEYS

INTERVAL_SCHEMA = {"appl": pl.Int32, "task": pl.Int32, "thread": pl.Int32, "cpu": pl.Int32,
                   "start_ns": pl.Int64, "end_ns": pl.Int64}
SAMPLE_SCHEMA = {"appl": pl.Int32, "task": pl.Int32, "thread": pl.Int32, "time_ns": pl.Int64,
                 "counter": pl.String, "value": pl.Int64}
MPI_EVENT_SCHEMA = {"appl": pl.Int32, "task": pl.Int32, "thread": pl.Int32, "cpu": pl.Int32, "time_ns": pl.Int64,
                    "kind": pl.String, "call": pl.String, "bytes_sent": pl.Int64, "bytes_recv": pl.Int64,
                    "root": pl.Int32, "comm": pl.Int64, "call_site": pl.String}
MESSAGE_SCHEMA = {"s_appl": pl.Int32, "s_task": pl.Int32, "s_thread": pl.Int32, "s_time_ns": pl.Int64,
                  "r_appl": pl.Int32, "r_task": pl.Int32, "r_thread": pl.Int32, "r_time_ns": pl.Int64,
                  "size": pl.Int64, "tag": pl.Int64}
HORIZON_SCHEMA = {"appl": pl.Int32, "task": pl.Int32, "thread": pl.Int32, "time_ns": pl.Int64}
_NEVER = 2**62  # a horizon beyond any trace: everything is final


@dataclass
class RecordBatch:
    """The generic records of one chunk (see module docstring for the columns)."""

    intervals: pl.DataFrame
    samples: pl.DataFrame
    mpi: pl.DataFrame
    messages: pl.DataFrame


@dataclass
class ReadSummary:
    """What reading a trace found, beyond the tables."""

    n_records: dict[int, int] = field(default_factory=dict)
    counters: list[str] = field(default_factory=list)
    n_bursts: int = 0
    n_calls: int = 0
    last_time_ns: int = 0
    warnings: list[str] = field(default_factory=list)
    messages: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=MESSAGE_SCHEMA))


def _empty(schema: dict) -> pl.DataFrame:
    return pl.DataFrame(schema=schema)


class BurstAssembler:
    """Turns record batches into finished bursts and MPI calls of one run.

    ``feed(batch, horizon)`` returns ``(bursts, calls)`` that are final: every record at or before their end
    has been seen, which holds for a thread once a later record of it has been read (``horizon``: the last
    time seen per thread). ``finish()`` returns the rest. Counter columns are named after the counters.
    """

    def __init__(self, run_id: str):
        self.run_id = run_id
        self._intervals = _empty(INTERVAL_SCHEMA)
        self._samples = _empty(SAMPLE_SCHEMA)
        self._mpi = _empty(MPI_EVENT_SCHEMA)
        self._burst_seq = pl.DataFrame(schema={**dict.fromkeys(THREAD_KEYS, pl.Int32), "next_seq": pl.Int64})
        self._call_seq = self._burst_seq.clone()
        self._recent_entries = _empty({k: MPI_EVENT_SCHEMA[k] for k in (*THREAD_KEYS, "time_ns", "call", "call_site")})
        self.counters: list[str] = []

    # ------------------------------------------------------------------ public
    def feed(self, batch: RecordBatch, horizon: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
        intervals = pl.concat([self._intervals, batch.intervals.select(INTERVAL_SCHEMA.keys())])
        samples = pl.concat([self._samples, batch.samples.select(SAMPLE_SCHEMA.keys())])
        mpi = pl.concat([self._mpi, batch.mpi.select(MPI_EVENT_SCHEMA.keys())])
        calls, open_mpi = self._pair_calls(mpi, horizon)
        bursts, open_intervals, open_samples = self._close_bursts(intervals, samples, mpi, horizon)
        self._intervals, self._samples, self._mpi = open_intervals, open_samples, open_mpi
        bursts = self._number(bursts, "burst_seq", "_burst_seq")
        counters = sorted(c for c in bursts.columns if c not in BURST_SCHEMA)
        self.counters = sorted(set(self.counters) | set(counters))
        bursts = bursts.select(*BURST_SCHEMA, *counters)
        calls = self._number(calls, "call_seq", "_call_seq").select(list(MPI_CALL_SCHEMA))
        return bursts, calls

    def finish(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        horizon = self._intervals.select(*THREAD_KEYS).unique().with_columns(pl.lit(_NEVER, pl.Int64).alias("time_ns"))
        horizon = pl.concat([horizon, self._mpi.select(*THREAD_KEYS).unique().with_columns(pl.lit(_NEVER, pl.Int64).alias("time_ns"))]).unique()
        empty = RecordBatch(_empty(INTERVAL_SCHEMA), _empty(SAMPLE_SCHEMA), _empty(MPI_EVENT_SCHEMA), _empty(MESSAGE_SCHEMA))
        return self.feed(empty, horizon)

    # ------------------------------------------------------------------ steps
    def _number(self, df: pl.DataFrame, seq_col: str, attr: str) -> pl.DataFrame:
        """Number rows per thread from 0 in time order, continuing across chunks."""
        if df.height == 0:
            return df.with_columns(pl.lit(None, pl.Int64).alias(seq_col))
        start = getattr(self, attr)
        df = (df.sort([*THREAD_KEYS, "start_ns"])
              .join(start, on=THREAD_KEYS, how="left")
              .with_columns((pl.col("next_seq").fill_null(0) + pl.int_range(pl.len()).over(THREAD_KEYS)).alias(seq_col))
              .drop("next_seq"))
        nxt = df.group_by(THREAD_KEYS).agg((pl.col(seq_col).max() + 1).alias("next_seq"))
        setattr(self, attr, pl.concat([start.join(nxt, on=THREAD_KEYS, how="anti"), nxt]))
        return df

    def _close_bursts(self, intervals: pl.DataFrame, samples: pl.DataFrame, mpi: pl.DataFrame,
                      horizon: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
        # merge adjacent Running intervals into maximal bursts, unless an MPI call (even one of 0 ns) sits between
        entries = self._entries(mpi)
        iv = (intervals.sort([*THREAD_KEYS, "start_ns"])
              .join(entries.select(*THREAD_KEYS, pl.col("time_ns").alias("start_ns"), pl.lit(True).alias("_call_at_start")),
                    on=[*THREAD_KEYS, "start_ns"], how="left")
              .with_columns(((pl.col("start_ns") != pl.col("end_ns").shift(1).over(THREAD_KEYS))
                             | pl.col("_call_at_start").fill_null(False)).fill_null(True)
                            .cum_sum().over(THREAD_KEYS).alias("_grp"))
              .drop("_call_at_start"))
        bursts = iv.group_by([*THREAD_KEYS, "_grp"], maintain_order=True).agg(
            pl.col("cpu").first(), pl.col("start_ns").first(), pl.col("end_ns").last())
        bursts = bursts.join(horizon.rename({"time_ns": "_horizon"}), on=THREAD_KEYS, how="left").with_columns(
            (pl.col("end_ns") < pl.col("_horizon").fill_null(-1)).alias("_final"))
        iv = iv.join(bursts.select(*THREAD_KEYS, "_grp", "_final"), on=[*THREAD_KEYS, "_grp"])
        open_intervals = iv.filter(~pl.col("_final")).select(INTERVAL_SCHEMA.keys())

        # assign each sample to the burst with start < t <= end
        b_sorted = bursts.select(*THREAD_KEYS, "start_ns", "end_ns", "_final").sort("end_ns")
        s = samples.sort("time_ns").join_asof(
            b_sorted, left_on="time_ns", right_on="end_ns", by=THREAD_KEYS, strategy="forward", check_sortedness=False)
        inside = pl.col("start_ns").is_not_null() & (pl.col("start_ns") < pl.col("time_ns"))
        open_samples = s.filter(inside & ~pl.col("_final")).select(SAMPLE_SCHEMA.keys())
        done = s.filter(inside & pl.col("_final"))
        sums = (done.group_by([*THREAD_KEYS, "start_ns", "counter"]).agg(pl.col("value").sum())
                .pivot(on="counter", index=[*THREAD_KEYS, "start_ns"], values="value"))

        final = bursts.filter(pl.col("_final")).drop("_grp", "_horizon", "_final")
        closing = entries.select(*THREAD_KEYS, pl.col("time_ns").alias("end_ns"), pl.col("call").alias("mpi_call"), "call_site")
        # entries at or after an open burst's end may close it in a later chunk, even once their call is paired
        open_ends = bursts.filter(~pl.col("_final")).group_by(THREAD_KEYS).agg(pl.col("end_ns").min().alias("_first_open_end"))
        self._recent_entries = entries.join(open_ends, on=THREAD_KEYS).filter(
            pl.col("time_ns") >= pl.col("_first_open_end")).drop("_first_open_end")
        final = (final.join(closing, on=[*THREAD_KEYS, "end_ns"], how="left")
                 .join(sums, on=[*THREAD_KEYS, "start_ns"], how="left")
                 .with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("duration_ns"),
                               pl.lit(self.run_id).alias("run_id")))
        counters = [c for c in final.columns if c not in BURST_SCHEMA]
        final = final.select([pl.col(k).cast(v) for k, v in BURST_SCHEMA.items() if k != "burst_seq"]
                             + [pl.col(c).cast(pl.Int64) for c in counters])
        return final, open_intervals, open_samples

    def _entries(self, mpi: pl.DataFrame) -> pl.DataFrame:
        """MPI entries (one per thread and time) of this feed and those kept for still-open bursts."""
        cols = [*THREAD_KEYS, "time_ns", "call", "call_site"]
        return (pl.concat([self._recent_entries, mpi.filter(pl.col("call").is_not_null()).select(cols)])
                .unique(subset=[*THREAD_KEYS, "time_ns"], keep="first", maintain_order=True))

    def _pair_calls(self, mpi: pl.DataFrame, horizon: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
        """Pair each MPI entry with the next exit of the same kind on its thread."""
        ev = mpi.sort([*THREAD_KEYS, "kind", "time_ns"], maintain_order=True).with_columns(
            pl.col("time_ns").shift(-1).over([*THREAD_KEYS, "kind"]).alias("_next_t"),
            pl.col("call").shift(-1).over([*THREAD_KEYS, "kind"]).alias("_next_call"),
        )
        entries = ev.filter(pl.col("call").is_not_null())
        paired = entries.filter(pl.col("_next_t").is_not_null())
        # an entry with nothing after it yet stays open for the next chunk (or the end of the trace)
        open_entries = entries.filter(pl.col("_next_t").is_null()).join(
            horizon.rename({"time_ns": "_h"}), on=THREAD_KEYS, how="left").filter(pl.col("_h").fill_null(0) < _NEVER)
        calls = paired.with_columns(pl.col("_next_t").alias("end_ns")).select(
            pl.lit(self.run_id).alias("run_id"), *THREAD_KEYS, "cpu", pl.col("call").alias("mpi_call"),
            pl.col("kind").alias("mpi_kind"), pl.col("time_ns").alias("start_ns"), "end_ns",
            (pl.col("_next_t") - pl.col("time_ns")).alias("duration_ns"), "bytes_sent", "bytes_recv",
            pl.lit(None, pl.Int32).alias("peer"), pl.lit(0, pl.Int32).alias("n_messages"), "comm", "root",
            pl.lit(None, pl.Int64).alias("tag"), "call_site")
        calls = calls.select([pl.col(k).cast(v) for k, v in MPI_CALL_SCHEMA.items() if k != "call_seq"])
        return calls, open_entries.select(MPI_EVENT_SCHEMA.keys())


def attach_messages(calls: pl.LazyFrame, messages: pl.DataFrame) -> pl.LazyFrame:
    """Add point-to-point bytes, peer, tag and message counts to MPI calls.

    A message's send side belongs to the sender's call that contains its logical send time, its receive side
    to the receiver's call that contains its logical receive time (times at call boundaries count as inside).
    Collective sizes already on the calls are kept and added to.
    """
    keys = [*THREAD_KEYS, "start_ns"]
    spans = calls.select(*THREAD_KEYS, "start_ns", "end_ns").sort("start_ns")

    def side(prefix: str, peer_prefix: str, col: str) -> pl.LazyFrame:
        m = messages.lazy().select(
            pl.col(f"{prefix}appl").alias("appl"), pl.col(f"{prefix}task").alias("task"),
            pl.col(f"{prefix}thread").alias("thread"), pl.col(f"{prefix}time_ns").alias("t"),
            pl.col(f"{peer_prefix}task").alias("peer"), "size", "tag").sort("t")
        hit = m.join_asof(spans, left_on="t", right_on="start_ns", by=THREAD_KEYS, strategy="backward",
                          check_sortedness=False).filter(pl.col("t") <= pl.col("end_ns"))
        return hit.group_by(keys).agg(pl.col("size").sum().alias(col), pl.col("peer").sort_by("t").first().alias(f"{col}_peer"),
                                      pl.col("tag").sort_by("t").first().alias(f"{col}_tag"), pl.len().alias(f"{col}_n"))

    sent = side("s_", "r_", "_sent")
    recv = side("r_", "s_", "_recv")
    return (calls.join(sent, on=keys, how="left").join(recv, on=keys, how="left").with_columns(
        (pl.col("bytes_sent").fill_null(0) + pl.col("_sent").fill_null(0)).alias("bytes_sent"),
        (pl.col("bytes_recv").fill_null(0) + pl.col("_recv").fill_null(0)).alias("bytes_recv"),
        pl.coalesce("_sent_peer", "_recv_peer").cast(pl.Int32).alias("peer"),
        pl.coalesce("_sent_tag", "_recv_tag").alias("tag"),
        (pl.col("_sent_n").fill_null(0) + pl.col("_recv_n").fill_null(0)).cast(pl.Int32).alias("n_messages"),
    ).select(list(MPI_CALL_SCHEMA)))
