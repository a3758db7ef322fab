"""Align the burst sequences of two runs of the same program by MPI structure and timing (DESIGN §6).

For every thread (appl, task, thread) the bursts of the *other* run are matched to the bursts of the *reference*
run. A burst is described by

- its **signature**: the MPI call that closes it (call name, call site, communicator, peer, bytes sent/received),
  from the bursts joined with the MPI calls on (thread, burst end == call start), and the call that opened it
  (call name and site, partner and size): a burst is the work between two calls, so the second of two
  ``MPI_ANY_SOURCE`` receives of one run, which got the partner the first one got in the other run, does not
  take the other run's first burst for its own when a call of one run only opens it; the **loose signature** drops peer
  and bytes (an ``MPI_ANY_SOURCE`` receive or
  ``MPI_Waitany`` completes messages in a run-dependent order);
- its **opening message** (``osig``): the partner and size of the call that opened it, when it has a partner —
  what the burst works on after an ``MPI_ANY_SOURCE`` receive, whatever call received the message (the first
  receive of a round is often at its own call site) and whatever call happens to end the burst;
- its **behaviour**: ``log1p`` of the reference counters (counters recorded by both runs, e.g. PAPI_TOT_INS),
  ``log1p`` of its duration in microseconds, and its relative position (0..1) in its segment (below).

The alignment works in three levels so its cost stays linear in the number of bursts:

1. **identical sequences** (same length, same signature at every position) align one-to-one;
2. otherwise the **anchors** of :mod:`synthtrace.tracelib.merge.anchors` split every thread: bursts named by their
   logical position (iteration of the thread's own call sequence, exact signature, rank in the iteration) in both
   runs, the longest monotone chain of them. No time position over a phase or a run enters: runs whose clocks
   drift apart by many iterations, without any collective, still pair iteration k with iteration k;
3. the **segments** between consecutive anchors (mostly a few bursts: polling iterations, an optional call,
   messages completed in another order) are aligned one by one: identical segments one-to-one, the others by a
   banded Needleman-Wunsch dynamic programme whose match cost is structural (loose signatures must agree; a
   differing peer/size costs ``w_peer``) plus behavioural (reference counters, duration, position *within the
   segment*), with a per-burst gap cost that is small for tiny bursts (polling iterations of
   ``MPI_Test``/``MPI_Iprobe`` loops) and large for long ones, a match bonus, and a hard rejection of implausible
   pairs (reference counters or duration too far apart). The first and last segments of a thread have free end
   gaps: chopped traces start and end at different points of the execution. Two re-pairing passes follow the DP
   of each segment: by exact signature (messages completed in another order, :func:`_repair_order`), then by
   opening message over the segment *and the anchor that closes it* (:func:`_repair_substitutions`): a pair
   whose closing calls differ is allowed there when the opening messages agree and the reference counters and
   duration agree closely (a **substitution**, cost ``w_sub``), e.g. the last result of a master-worker round,
   processed before the round's collective in one run and before the next ``MPI_Iprobe`` in the other. Changes
   are kept chain by chain when they lower the cost, so a substitution never displaces a pair with the same
   signature. Last, key pairs that crossed another (and so could not be anchors) are restored where the
   programme left both their bursts unmatched (:func:`anchors.key_repair`);
4. the **message graph** (:mod:`synthtrace.tracelib.merge.message_graph`) ties the threads together: the two ends of a
   message must be matched to the two ends of one message of the other run. A thread whose matches disagree with
   its partners' both ways, more than any of those partners' do (a rank whose own call sequence and work cannot
   tell its iterations apart, whose trace starts later), is re-aligned with the pairs its partners' messages
   imply as anchors, and kept so where that leaves fewer of its messages disagreeing.

Why the dynamic programme is hand-written (compiled with Numba): the general-purpose aligners on PyPI (edlib,
parasail, rapidfuzz's Levenshtein) score symbols with a fixed substitution matrix and uniform gaps; they cannot
take a per-pair cost computed from floating-point behaviour (counters, duration, position) nor per-element gap
costs, which is what tells a polling iteration from a compute burst. The kernel is banded (``O(n * band)``
time and memory per segment), runs over all threads of a run in one compiled call, in parallel over threads.

:func:`sequence_table` prepares one run (once per run, whatever the number of pairs); :func:`align_runs` aligns
two prepared runs and returns the **match table**: one row per reference burst with the other run's
``other_seq`` (NULL when unmatched) and a ``match_score`` in [0, 1].
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import polars as pl
from numba import njit, prange

from synthtrace.tracelib.merge.anchors import force_pairs, key_pairs, key_repair
from synthtrace.tracelib.domain.mpi_calls import MPI_CALLS, calls_with
from synthtrace.tracelib.errors import BadInputError
from synthtrace.tracelib.formats.heap import release_free_heap
from synthtrace.tracelib.merge.message_graph import (
    MESSAGE_COLUMNS, Ends, agreement, bracketed, disagreeing, ends, follow_messages, logical_ends, message_ends)
from synthtrace.tracelib.merge.messages import BY_ARRIVAL_CALLS, POLLING_CALLS, is_completion
from synthtrace.tracelib.merge.pieces import host_rows
from synthtrace.tracelib.schema import THREAD_KEYS
from synthtrace.tracelib.thread_key import thread_key

#: the opening call's columns gathered for the message graph only (peer and bytes_recv are open_peer, open_bytes)
OPEN_ONLY = ("bytes_sent", "comm", "tag", "n_messages", "mpi_call")
SIG_SEED = 0x5EED_5167  # seed of the signature hashes (stable within one Polars version, hashes are never stored)
_INF = 1e300
#: the blocking completion calls, and the loose signature every burst one of them closes has in the kernels
WAIT_CALLS: tuple[str, ...] = calls_with(roles=("wait",))
WAIT_LSIG = np.int64(0x5A17_C1A5)
#: the least share of a run's calls at call sites the other run names too for two runs to name their sites alike
#: (:func:`sites_compared`): the same tool and build name every site alike but an optional call's
SITES_ALIKE = 0.5
#: the calls whose communicator no record of theirs names (neither point-to-point nor collective: start-up,
#: communicator and group management, one-sided, I/O): whether a trace gives them one depends on the tool
UNRECORDED_COMM_CALLS: tuple[str, ...] = tuple(sorted(n for n, c in MPI_CALLS.items() if c.kind == "other"))
#: the calls that receive one message and return with it (MPI_Recv, MPI_Sendrecv, ...)
BLOCKING_RECEIVES: tuple[str, ...] = calls_with(roles=("recv", "sendrecv"), blocking=True)
# the weights of AlignConfig as the compiled kernels get them: one float64 array, read by these indices (compile-time
# constants to Numba, so a named read costs what prm[8] did)
(P_BONUS, P_W_PEER, P_W_FEAT, P_W_DUR, P_W_POS, P_REJ_FEAT, P_REJ_DUR, P_TRIM_TOL, P_W_SUB, P_SUB_FEAT,
 P_SUB_DUR) = range(11)


class Side(NamedTuple):
    """One run's rows as the compiled kernels see them (row i of every array is row i of a prepared table)."""

    sig: np.ndarray  # int64 view of ``sig``
    lsig: np.ndarray  # int64 view of ``lsig``
    osig: np.ndarray  # int64 view of ``osig``
    feat: np.ndarray  # (rows, features) float64 log1p reference counters, NaN when not recorded
    ldur: np.ndarray  # log1p(duration / 1 us)
    pos: np.ndarray  # relative position (0..1) in the row's segment, written by the kernel
    gap: np.ndarray  # cost of leaving the row unmatched


class Times(NamedTuple):
    """Start and end (ns, float64) of one run's rows, as the compiled kernels see them."""

    start: np.ndarray
    end: np.ndarray


class Threads(NamedTuple):
    """The threads the kernel aligns: reference rows ``r_lo[t]:r_hi[t]`` with other rows ``o_lo[t]:o_hi[t]``."""

    r_lo: np.ndarray
    r_hi: np.ndarray
    o_lo: np.ndarray
    o_hi: np.ndarray


class AlignmentInputError(BadInputError):
    """A table handed to the aligner lacks the columns it needs."""


@dataclass(frozen=True)
class AlignConfig:
    """Weights of the alignment cost. Costs are dimensionless; ``log`` differences are natural logs.

    A pair (reference burst i, other burst j) with equal loose signatures costs
    ``w_peer * [signatures differ] + w_feat * mean_k |f_ik - f_jk| + w_dur * |ldur_i - ldur_j|
    + w_pos * |pos_i - pos_j| - bonus`` where ``f`` are ``log1p`` reference counters, ``ldur`` is
    ``log1p(duration / 1 us)`` and ``pos`` the relative position (0..1) in the segment between two anchors. A pair whose
    mean
    reference-counter log difference exceeds ``reject_feat`` or whose duration log difference exceeds
    ``reject_dur`` is never matched, nor is a pair whose loose signatures differ, except as a substitution in the
    re-pairing by opening message (see ``w_sub``). Leaving a burst unmatched costs
    ``gap_base + gap_size * d / (d + gap_half_ns)`` for a burst of duration ``d`` (ns).
    """

    bonus: float = 2.0
    w_peer: float = 0.5
    w_feat: float = 2.0
    w_dur: float = 0.3
    w_pos: float = 1.0
    reject_feat: float = math.log(4.0)
    reject_dur: float = math.log(50.0)
    gap_base: float = 0.1
    gap_size: float = 1.0
    gap_half_ns: float = 10_000.0
    trim_tol: float = 0.3  # leading/trailing pairs of a segment costing at most this (+ bonus) match directly
    band: int = 32  # half-width of the DP band beyond the length difference of a segment (bursts)
    max_cells: int = 20_000_000  # DP cells per segment before the band is narrowed
    # timing-only matching (no reference counter in common): duration weighs more, scores are lowered
    w_dur_timing_only: float = 1.0
    timing_only_factor: float = 0.6
    # anchors from the logical positions of :mod:`synthtrace.tracelib.merge.anchors` (False: one dynamic programme per
    # thread, positions over the whole thread: the aligner without its anchors, for tests and benchmarks)
    anchors: bool = True
    # the message graph ties the threads together: a thread whose matches disagree with its partners' is
    # re-aligned on the pairs their messages imply, as anchors (:mod:`synthtrace.tracelib.merge.message_graph`; False,
    # or ``anchors`` False: off; the check, msg_agree / msg_misaligned, is always made)
    message_graph: bool = True
    # score of a match: struct factor (1 same signature, peer_score same loose signature, sub_score a substitution)
    # * exp(-behaviour cost)
    peer_score: float = 0.8
    # substitution: a pair whose closing calls differ but whose opening calls are the same message (call, site,
    # partner, size; see ``osig``) costs ``w_sub`` instead of being forbidden, if at least one reference counter
    # is compared and the mean reference-counter log difference is at most ``sub_feat`` and the duration log
    # difference at most ``sub_dur``. ``w_sub < w_peer``: when closing call and opening message disagree and
    # behaviour cannot tell, the message wins (the work of a burst is that of the message it starts with; the call
    # that ends it is whatever comes next, which the arrival order decides)
    w_sub: float = 0.3
    sub_feat: float = math.log(1.25)
    sub_dur: float = math.log(1.6)
    sub_score: float = 0.7
    carry_ns: float = 10_000.0  # a burst shorter than this (ns) passes its opening message on (see ``osig``)
    # the burst after a call that completed one message is paired by that message (anchors.arrival_pairs) unless
    # the burst the aligner chose behaves closer by more than this (behaviour cost, as in the pair cost); False:
    # by position alone (the aligner before the arrival pairs, for tests of the checks and benchmarks)
    arrival: bool = True
    arrival_tol: float = 0.1


# --------------------------------------------------------------------------------------------- preparation
def thread_id() -> pl.Expr:
    """``_tid``: the thread key of the row (:func:`synthtrace.tracelib.thread_key.thread_key`)."""
    return thread_key().alias("_tid")


def _sorted_by_thread(df: pl.DataFrame, seq: str) -> pl.DataFrame:
    """``df`` sorted by (``_tid``, ``seq``); a frame already in that order is returned as it is (no sort)."""
    tid = df.get_column("_tid").to_numpy()
    sq = df.get_column(seq).to_numpy()
    if df.height < 2 or bool(np.all((tid[1:] > tid[:-1]) | ((tid[1:] == tid[:-1]) & (sq[1:] > sq[:-1])))):
        return df
    return df.sort("_tid", seq, maintain_order=True)


def _closing_rows(b_tid: np.ndarray, b_end: np.ndarray, c_tid: np.ndarray, c_start: np.ndarray) -> np.ndarray:
    """For each burst (thread id, end time), the row of the first call of that thread starting at that time, or -1.

    Both inputs are sorted by thread then time; a call's position is found by binary search on (thread, time).
    """
    if c_tid.size == 0:
        return np.full(b_tid.size, -1, np.int64)
    order = np.lexsort((c_start, c_tid))  # calls by (thread, start); stable, so the first call_seq wins ties
    ct, cs = c_tid[order], c_start[order]
    threads = np.unique(np.r_[ct, b_tid])
    ci = np.searchsorted(threads, ct)
    bi = np.searchsorted(threads, b_tid)
    lo = int(min(cs.min(), b_end.min()))
    span = int(max(cs.max(), b_end.max())) - lo + 1
    if span * max(len(threads), 1) < 2**62:
        ck = ci.astype(np.int64) * span + (cs - lo)
        bk = bi.astype(np.int64) * span + (b_end - lo)
        pos = np.searchsorted(ck, bk, "left")
        ok = pos < ck.size
        ok[ok] = ck[pos[ok]] == bk[ok]
    else:  # times too far apart for one key: search thread by thread
        pos = np.full(b_tid.size, 0, np.int64)
        ok = np.zeros(b_tid.size, bool)
        for t in range(len(threads)):
            cl, ch = np.searchsorted(ci, [t, t + 1])
            bl, bh = np.searchsorted(bi, [t, t + 1])
            p = np.searchsorted(cs[cl:ch], b_end[bl:bh], "left")
            hit = p < ch - cl
            hit[hit] = cs[cl:ch][p[hit]] == b_end[bl:bh][hit]
            pos[bl:bh] = p + cl
            ok[bl:bh] = hit
    return np.where(ok, order[np.minimum(pos, order.size - 1)], -1).astype(np.int64)


#: the columns :func:`sequence_table` reads of the calls closing and opening each burst, none in its output
_CALL_HELPERS = ("open_peer", "open_bytes", "open_call", "comm", "call_site", "tag", "n_messages", "_close_seq",
                 "_open_seq", *[f"open_{k}" for k in OPEN_ONLY])


def sequence_table(bursts: pl.DataFrame, calls: pl.DataFrame, features: Sequence[str],
                   config: AlignConfig = AlignConfig(), messages: pl.DataFrame | None = None) -> pl.DataFrame:
    """One run's bursts prepared for alignment, sorted by thread and ``burst_seq`` (a sorted input keeps its order).

    Columns: appl, task, thread, burst_seq, start_ns, end_ns, duration_ns (ns), mpi_call, peer, bytes_sent,
    bytes_recv (bytes), sig, lsig, csig (UInt64 hashes of the signature, the loose signature and the closing
    call alone), osig (UInt64 hash of the message that opened the burst: the opening call's partner and the bytes
    it received, whatever call received it (the first receive of an ``MPI_ANY_SOURCE`` round may sit at another
    call site than the others), when that call has a partner; else the ``osig`` the previous burst got from its own
    opening call if that burst lasted less than ``carry_ns``; 0 otherwise), rsite / rline (UInt64 hash of the
    blocking receive that opened the burst: its call, site and communicator, and with the sender; 0 otherwise),
    smsg / rmsg / schan / rchan (the message the burst sends and receives, and their channels:
    :func:`synthtrace.tracelib.merge.message_graph.message_ends`), ``repeat`` (a burst closed by a completion or
    polling call that also closed the burst before it: one unit with it), host (the row of the master burst whose
    epoch holds a worker thread's burst, -1 for other rows: :func:`synthtrace.tracelib.merge.pieces.host_rows`), ldur
    (``log1p(duration / 1 us)``), and ``f_<counter>`` = ``log1p(counter)`` (NaN when not recorded) for each of
    ``features``. The cost of leaving a burst unmatched is not a column: :func:`gap_costs` of its duration.
    """
    need = {*THREAD_KEYS, "burst_seq", "start_ns", "end_ns", "duration_ns", "mpi_call", "call_site"}
    if missing := need - set(bursts.columns):
        raise AlignmentInputError(f"bursts table lacks columns {sorted(missing)}")
    if missing := [f for f in features if f not in bursts.columns]:
        raise AlignmentInputError(f"bursts table lacks counters {missing}")
    call_cols = {"peer": pl.Int32, "bytes_sent": pl.Int64, "bytes_recv": pl.Int64, "comm": pl.Int64,
                 "tag": pl.Int64, "n_messages": pl.Int32}
    thr = THREAD_KEYS
    b = (bursts.select(*[pl.col(k).cast(pl.Int32) for k in thr], "burst_seq", "start_ns", "end_ns", "duration_ns",
                       "mpi_call", "call_site", *[pl.col(f).alias(f"_c_{i}") for i, f in enumerate(features)])
         .with_columns(thread_id()))
    b = _sorted_by_thread(b, "burst_seq")
    # the MPI call closing each burst: same thread, call start == burst end (first such call)
    if calls.height:
        # a completion call (Wait/Test families) posts no message: which messages it completed depends on their
        # arrival, so its partner and sizes stay out of every signature; its communicator too when what it completed
        # depends on arrival (an OTF2 reader names it from the records it holds: a Testsome's is the world's in one
        # run, none in the other; mergeacc18), and of a call that is neither point-to-point nor collective: a tool
        # names one there or not (Extrae may give MPI_Init the world's, Score-P writes no record in it; mixed25)
        posts = ~is_completion(pl.col("mpi_call"))
        fixed = ~pl.col("mpi_call").is_in([*BY_ARRIVAL_CALLS, *UNRECORDED_COMM_CALLS]).fill_null(False)
        c = _sorted_by_thread(calls.select(thread_id(), "call_seq", "start_ns", "end_ns", "appl",
                                           *[pl.when(fixed if k == "comm" else posts).then(pl.col(k).cast(t)).alias(k)
                                             if k in calls.columns else pl.lit(None, t).alias(k)
                                             for k, t in call_cols.items()],
                                           pl.struct("mpi_call", "call_site").hash(SIG_SEED).alias("_csig"),
                                           pl.col("mpi_call").cast(pl.String)),
                              "call_seq")
        b_tid, c_tid = b.get_column("_tid").to_numpy(), c.get_column("_tid").to_numpy()
        rows = _closing_rows(b_tid, b.get_column("end_ns").to_numpy(), c_tid, c.get_column("start_ns").to_numpy())
        idx = pl.Series(rows).scatter(np.flatnonzero(rows < 0), None)
        b = b.with_columns(c.select(*[pl.col(k).gather(idx) for k in call_cols],
                                    pl.col("call_seq").gather(idx).alias("_close_seq")))
        # the call that opened the burst (exit == burst start): its partner and size tell which message the
        # burst processes after an MPI_ANY_SOURCE receive or MPI_Waitany
        rows = _closing_rows(b_tid, b.get_column("start_ns").to_numpy(), c_tid, c.get_column("end_ns").to_numpy())
        idx = pl.Series(rows).scatter(np.flatnonzero(rows < 0), None)
        b = b.with_columns(c.select(pl.col("peer").gather(idx).alias("open_peer"),
                                    pl.col("bytes_recv").gather(idx).alias("open_bytes"),
                                    pl.col("_csig").gather(idx).alias("open_call"),
                                    pl.col("call_seq").gather(idx).alias("_open_seq"),
                                    *[pl.col(k).gather(idx).alias(f"open_{k}") for k in OPEN_ONLY]))
        del c, c_tid, rows, idx  # the calls' copy: not held while the signatures and message ends are made
        release_free_heap()  # and what the closing and opening calls' searches freed
    else:
        b = b.with_columns(*[pl.lit(None, t).alias(k) for k, t in call_cols.items()],
                           pl.lit(None, pl.Int32).alias("open_peer"), pl.lit(None, pl.Int64).alias("open_bytes"),
                           pl.lit(None, pl.UInt64).alias("open_call"), pl.lit(None, pl.Int64).alias("_close_seq"),
                           pl.lit(None, pl.Int64).alias("_open_seq"),
                           *[pl.lit(None, {**call_cols, "mpi_call": pl.String}[k]).alias(f"open_{k}")
                             for k in OPEN_ONLY])
    b = b.with_columns(
        pl.struct("mpi_call", "call_site", "comm", "peer", "bytes_sent", "bytes_recv", "open_call", "open_peer",
                  "open_bytes")
        .hash(SIG_SEED).alias("sig"),
        pl.struct("mpi_call", "call_site", "comm").hash(SIG_SEED).alias("lsig"),
        pl.struct("mpi_call", "call_site", "comm", "peer", "bytes_sent", "bytes_recv").hash(SIG_SEED).alias("csig"),
        # the message a burst starts with: only for an opening call with a partner; 0 = none
        pl.when(pl.col("open_peer").is_not_null())
        .then(pl.struct("open_peer", "open_bytes").hash(SIG_SEED).replace(0, 1)).otherwise(0)
        .cast(pl.UInt64).alias("osig"),
        # the blocking receive that opened the burst: its call site and communicator (rsite), and with the sender
        # (rline); 0 = none
        *[pl.when(pl.col("open_mpi_call").is_in(list(BLOCKING_RECEIVES)).fill_null(False)
                  & pl.col("open_peer").is_not_null() & (pl.col("open_bytes").fill_null(0) > 0))
          .then(pl.struct("open_call", "open_comm", *extra).hash(SIG_SEED).replace(0, 1)).otherwise(0)
          .cast(pl.UInt64).alias(name) for name, extra in (("rsite", ()), ("rline", ("open_peer",)))],
    )
    # the messages a burst sends (its closing call) and receives (its opening call): message_graph
    if messages is not None:  # the run's logical messages: every end named exactly, whatever the timing
        ends_ = logical_ends(b.select("appl", "task", "thread", "mpi_call", "_close_seq", "_open_seq",
                                      pl.col("open_mpi_call").alias("_open_call")), messages)
    else:  # from the calls' partners and sizes, channels shifted by time (message_graph.message_ends)
        opening = {"peer": "open_peer", "bytes_recv": "open_bytes", **{k: f"open_{k}" for k in OPEN_ONLY}}
        ends_ = message_ends(
            b.select("appl", "task", *MESSAGE_COLUMNS, pl.col("end_ns").alias("t")),
            b.select("appl", "task", *[pl.col(opening[k]).alias(k) for k in MESSAGE_COLUMNS],
                     pl.col("start_ns").alias("t")))
    # the call columns the signatures and message ends were made of are let go before the table grows (issue 23)
    b = pl.concat([b.drop(*_CALL_HELPERS), ends_], how="horizontal")
    n = b.height
    tid = b.get_column("_tid").to_numpy()
    dur = b.get_column("duration_ns").to_numpy().astype(np.float64)
    new_thread = np.ones(n, bool)
    new_thread[1:] = tid[1:] != tid[:-1]
    # a burst opened by a call without a partner right after a short burst (a housekeeping probe between a
    # receive and the work on its message) starts with that short burst's message (one step, not along a chain)
    osig = b.get_column("osig").to_numpy()
    carry = np.zeros(n, bool)
    carry[1:] = (osig[1:] == 0) & ~new_thread[1:] & (dur[:-1] < config.carry_ns)
    osig = np.where(carry, np.roll(osig, 1), osig)
    # a run of completion or polling calls is one unit (Test x N is Test x M): every burst after the first of
    # the run is a repeat, which counts for no iteration clock
    lsig = b.get_column("lsig").to_numpy()
    repeat = np.zeros(n, bool)
    repeat[1:] = ~new_thread[1:] & (lsig[1:] == lsig[:-1])
    repeat &= b.select((is_completion(pl.col("mpi_call")) | pl.col("mpi_call").is_in(list(POLLING_CALLS)))
                       .fill_null(False)).to_series().to_numpy()
    b = b.with_columns(
        pl.Series("osig", osig, pl.UInt64),
        pl.Series("repeat", repeat, pl.Boolean),
        pl.Series("host", host_rows(b), pl.Int64),
        pl.Series("ldur", np.log1p(dur / 1e3), pl.Float64),
        *[
            pl.col(f"_c_{i}").cast(pl.Float64).log1p().fill_null(float("nan")).alias(f"f_{f}")
            for i, f in enumerate(features)
        ],
    )
    return b.drop(*[f"_c_{i}" for i in range(len(features))])



def site_counts(calls: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
    """A run's MPI calls per call site they name (``call_site``; ``n``: calls); no row for the calls naming none."""
    if "call_site" not in calls.collect_schema().names():
        return pl.DataFrame(schema={"call_site": pl.String, "n": pl.UInt32})
    return calls.lazy().select("call_site").drop_nulls().group_by("call_site").agg(pl.len().alias("n")).collect()


def sites_compared(counts: Mapping[str, pl.DataFrame], reference: str,
                   names: Mapping[str, str] | None = None) -> tuple[bool, str | None]:
    """Whether a merge compares its runs' call sites (in the burst signatures and the checks), from each run's
    :func:`site_counts` (by run id; ``reference``: the reference's id; ``names``: the runs' names for the note, the
    ids by default), and what the merge notes when they do not. A call site is a tool's name for a place in the
    code: Extrae's caller events name the calling function and line ("exchange (halo.c:88)"), or nothing when the
    run was traced without them; Score-P names the enclosing region ("int main(int, char**)"); another build moves
    the lines. So the sites are compared only when every run names them alike: each run that names some has at least
    :data:`SITES_ALIKE` of its calls at a site the reference names, and the reference as many at sites the run names;
    else no run's are (mergeattack23 P6: no signature of a Score-P run equalled one of an Extrae run without callers,
    19.5 % right). Keyed by id, not name: one experiment can hold two runs of one name (one trace stem ingested from
    two folders), which a name would fold into one (review25 M2).

    One decision for the whole campaign, not one per pair: in a mixed campaign (two Extrae runs and a Score-P run)
    the Extrae pair is compared without its sites too. The reference's signatures, call structure and opened
    messages are built once and serve every other run, in the whole merge and in each group of the partitioned one;
    per pair they would be built twice over the reference (its time and memory, issue 23) for what the sites do not
    add: the calls, their partners, bytes and order already tell the bursts apart (22 simulator mechanisms merged
    with and without sites: the same verdicts and the same share right, benchmarks/RESULTS.md, sites26)."""
    ref = counts[reference]
    named = {run: c for run, c in counts.items() if c.height}
    if not named or (ref.height and len(named) == len(counts) and all(
            _share_at(c, ref) >= SITES_ALIKE and _share_at(ref, c) >= SITES_ALIKE for c in named.values())):
        return True, None
    label = _run_labels(list(counts), names or {run: run for run in counts})
    unnamed = sorted(label[run] for run in counts if run not in named)
    other = sorted(label[run] for run in named if run != reference
                   and min(_share_at(named[run], ref), _share_at(ref, named[run])) < SITES_ALIKE)
    why = ([f"{', '.join(unnamed)} name(s) none"] if unnamed else []) + (
        [f"{', '.join(other)} name(s) them otherwise than {label[reference]} (another tool or build)"]
        if other and ref.height else [])
    return False, f"call sites left out of the alignment: {'; '.join(why)}"


def _run_labels(runs: list[str], names: Mapping[str, str]) -> dict[str, str]:
    """Each run id's name in words, ``name (run id)`` where another run has the same name."""
    seen = Counter(names[run] for run in runs)
    return {run: names[run] if seen[names[run]] == 1 else f"{names[run]} (run {run})" for run in runs}


def _share_at(a: pl.DataFrame, b: pl.DataFrame) -> float:
    """The share of the calls of :func:`site_counts` ``a`` at a site ``b`` names too."""
    total = int(a.get_column("n").sum())
    common = int(a.join(b.select("call_site"), on="call_site", how="semi").get_column("n").sum())
    return common / total if total else 0.0


# --------------------------------------------------------------------------------------------- kernel
@njit(cache=True, nogil=True)
def _feat_dist(i, j, rf, of):
    """Mean ``|log1p`` difference| of the reference counters both items recorded, and how many there were."""
    tot = 0.0
    k = 0
    for f in range(rf.shape[1]):
        a = rf[i, f]
        b = of[j, f]
        if a == a and b == b:  # both not NaN
            tot += abs(a - b)
            k += 1
    return (tot / k if k > 0 else 0.0), k


@njit(cache=True, nogil=True)
def _pair_cost(i, j, ref, oth, prm):
    """Cost of matching reference row i of ``ref`` with row j of ``oth`` (:class:`Side`; ``_INF`` when not
    allowed); see AlignConfig."""
    if ref.lsig[i] != oth.lsig[j]:
        return _INF
    bonus, w_peer, w_feat, w_dur = prm[P_BONUS], prm[P_W_PEER], prm[P_W_FEAT], prm[P_W_DUR]
    w_pos, rej_feat, rej_dur = prm[P_W_POS], prm[P_REJ_FEAT], prm[P_REJ_DUR]
    c = 0.0 if ref.sig[i] == oth.sig[j] else w_peer
    d, k = _feat_dist(i, j, ref.feat, oth.feat)
    if k > 0:
        if d > rej_feat:
            return _INF
        c += w_feat * d
    dd = abs(ref.ldur[i] - oth.ldur[j])
    if dd > rej_dur:
        return _INF
    c += w_dur * dd + w_pos * abs(ref.pos[i] - oth.pos[j])
    return c - bonus


@njit(cache=True, nogil=True)
def _any_cost(i, j, ref, oth, prm):
    """Cost of a pair of any kind: :func:`_pair_cost` when the loose signatures agree, else a substitution.

    A substitution (closing calls differ) needs the same opening message (``ro[i] == oo[j] != 0``), at least one
    reference counter compared, a mean counter log difference of at most ``sub_feat`` and a duration log
    difference of at most ``sub_dur``; it costs ``w_sub`` plus the behaviour cost, minus the bonus. ``_INF``
    otherwise.
    """
    if ref.lsig[i] == oth.lsig[j]:
        return _pair_cost(i, j, ref, oth, prm)
    if ref.osig[i] == 0 or ref.osig[i] != oth.osig[j]:
        return _INF
    d, k = _feat_dist(i, j, ref.feat, oth.feat)
    dd = abs(ref.ldur[i] - oth.ldur[j])
    if k == 0 or d > prm[P_SUB_FEAT] or dd > prm[P_SUB_DUR]:
        return _INF
    return (prm[P_W_SUB] + prm[P_W_FEAT] * d + prm[P_W_DUR] * dd + prm[P_W_POS] * abs(ref.pos[i] - oth.pos[j])
            - prm[P_BONUS])


@njit(cache=True, nogil=True)
def _dp(ref, oth, free_start, free_end, mode, band, max_cells, prm, out, ws_u8, ws_i, ws_f):
    """Banded alignment of the rows of ``ref`` to those of ``oth`` (:class:`Side`, one segment each); writes the
    matched other index or -1 to ``out``.

    ``mode`` places the band: 0 along the proportional diagonal (both ends anchored), 1 along the diagonal ending
    at the bottom-right corner (free start), 2 along the diagonal starting at the top-left corner (free end).
    ``ws_*`` are scratch buffers reused between calls (a larger one is allocated when they are too small).
    Returns the optimal cost.
    """
    n = ref.sig.shape[0]
    m = oth.sig.shape[0]
    rg = ref.gap
    og = oth.gap
    for i in range(n):
        out[i] = -1
    if n == 0 or m == 0:
        return 0.0
    w = band + abs(n - m)
    if (n + 1) * (2 * w + 1) > max_cells:
        w = max(max_cells // (n + 1) // 2, band, m // n + 2)
    width = 2 * w + 1
    if ws_i.shape[0] < 2 * (n + 1):
        ws_i = np.empty(2 * (n + 1), np.int64)
    if ws_u8.shape[0] < (n + 1) * width:
        ws_u8 = np.empty((n + 1) * width, np.uint8)
    if ws_f.shape[0] < 2 * width:
        ws_f = np.empty(2 * width)
    lo = ws_i[:n + 1]
    hi = ws_i[n + 1:2 * (n + 1)]
    for i in range(n + 1):
        if mode == 0:
            c = (i * m) // n
        elif mode == 1:
            c = i + m - n
        else:
            c = i
        c = min(max(c, 0), m)
        lo[i] = max(0, c - w)
        hi[i] = min(m, c + w)
    ptr = ws_u8[:(n + 1) * width].reshape((n + 1, width))
    prev = ws_f[:width]
    cur = ws_f[width:2 * width]
    for x in range(width):
        prev[x] = _INF
    end_best = _INF  # best cost ending on column m before the last row (free end: the rest of ref is skipped)
    end_i = -1
    for i in range(n + 1):
        li = lo[i]
        for x in range(width):
            cur[x] = _INF
        for j in range(li, hi[i] + 1):
            best = _INF
            p = 255
            if (i == 0 or j == 0) and (free_start or (i == 0 and j == 0)):
                best = 0.0
                p = 3
            if i > 0:
                lp = lo[i - 1]
                hp = hi[i - 1]
                if j >= 1 and lp <= j - 1 <= hp:
                    v = prev[j - 1 - lp]
                    if v < _INF:
                        c = _pair_cost(i - 1, j - 1, ref, oth, prm)
                        if c < _INF and v + c < best:
                            best = v + c
                            p = 0
                if lp <= j <= hp:
                    v = prev[j - lp]
                    if v < _INF and v + rg[i - 1] < best:
                        best = v + rg[i - 1]
                        p = 1
            if j - 1 >= li:
                v = cur[j - 1 - li]
                if v < _INF and v + og[j - 1] < best:
                    best = v + og[j - 1]
                    p = 2
            cur[j - li] = best
            ptr[i, j - li] = p
        if free_end and hi[i] == m and i < n and cur[m - li] < end_best:
            end_best = cur[m - li]
            end_i = i
        if i < n:
            for x in range(width):
                prev[x] = cur[x]
    # end cell
    bi = n
    bj = m
    best = _INF
    if free_end:
        for j in range(lo[n], hi[n] + 1):
            if cur[j - lo[n]] < best:
                best = cur[j - lo[n]]
                bi = n
                bj = j
        if end_best < best:
            best = end_best
            bi = end_i
            bj = m
    else:
        if lo[n] <= m <= hi[n]:
            best = cur[m - lo[n]]
    if best >= _INF:
        return _INF
    i = bi
    j = bj
    while i > 0 or j > 0:
        p = ptr[i, j - lo[i]]
        if p == 0:
            out[i - 1] = j - 1
            i -= 1
            j -= 1
        elif p == 1:
            i -= 1
        elif p == 2:
            j -= 1
        else:
            break
    return best


_MAX_REPAIR = 2048  # re-pairing candidates per side and segment beyond which a pass is skipped (O(n * m) pass)


@njit(cache=True, nogil=True)
def _candidates(a0, a1, b0, b1, ref, oth, out, by_message, min_rows):
    """Rows a re-pairing pass may change: (reference rows of [a0, a1), other rows of [b0, b1)), absolute indices;
    none when either range has fewer than ``min_rows`` rows or either side more than ``_MAX_REPAIR`` candidates.

    ``by_message`` False (exact signature): reference rows unmatched or matched with a differing signature ``sig``,
    and other rows unmatched or matched so. True (opening message): reference rows with a message
    (``osig != 0``) unmatched or matched to a row that starts with a different known message, and other rows with a
    message unmatched or matched to such a reference row.
    """
    none = np.empty(0, np.int64)
    rs, ro, os_, oo = ref.sig, ref.osig, oth.sig, oth.osig
    if a1 - a0 < min_rows or b1 - b0 < min_rows:
        return none, none
    inv = np.full(b1 - b0, -1, np.int64)  # the reference row matched to each other row
    for i in range(a0, a1):
        if out[i] >= b0 and out[i] < b1:
            inv[out[i] - b0] = i
    r_ok = np.empty(a1 - a0, np.bool_)
    for i in range(a0, a1):
        j = out[i]
        if by_message:
            r_ok[i - a0] = ro[i] != 0 and (j < 0 or (oo[j] != 0 and oo[j] != ro[i]))
        else:
            r_ok[i - a0] = j < 0 or rs[i] != os_[j]
    o_ok = np.empty(b1 - b0, np.bool_)
    for j in range(b0, b1):
        i = inv[j - b0]
        if by_message:
            o_ok[j - b0] = oo[j] != 0 and (i < 0 or (ro[i] != 0 and ro[i] != oo[j]))
        else:
            o_ok[j - b0] = i < 0 or rs[i] != os_[j]
    ref_i = np.flatnonzero(r_ok) + a0
    oth_j = np.flatnonzero(o_ok) + b0
    if ref_i.shape[0] == 0 or oth_j.shape[0] == 0 or ref_i.shape[0] > _MAX_REPAIR or oth_j.shape[0] > _MAX_REPAIR:
        return none, none
    return ref_i, oth_j


@njit(cache=True, nogil=True)
def _pick(ref_i, oth_j, ref, oth, prm, out, by_message):
    """New partners of the candidate rows of a re-pairing pass (see :func:`_candidates`) and how many changed.

    In order, each reference row ``ref_i[x]`` takes the not yet taken row of ``oth_j`` with the same key (``sig``,
    the exact signature, or with ``by_message`` ``osig``, the opening message) of lowest cost (:func:`_pair_cost`,
    or :func:`_any_cost` below 0, the cost of staying unmatched, with ``by_message``); the rows that get none keep
    their old partner when nobody took it. Returns (new partner per x or -1, rows whose partner changed).
    """
    nr = ref_i.shape[0]
    no = oth_j.shape[0]
    rk = ref.osig if by_message else ref.sig
    ok = oth.osig if by_message else oth.sig
    new = np.full(nr, -1, np.int64)
    used = np.zeros(no, np.bool_)
    found = 0
    for x in range(nr):
        i = ref_i[x]
        best = 0.0 if by_message else _INF
        by = -1
        for y in range(no):
            if not used[y] and ok[oth_j[y]] == rk[i]:
                if by_message:
                    c = _any_cost(i, oth_j[y], ref, oth, prm)
                else:
                    c = _pair_cost(i, oth_j[y], ref, oth, prm)
                if c < best:
                    best = c
                    by = y
        if by >= 0:
            new[x] = oth_j[by]
            used[by] = True
            if oth_j[by] != out[i]:
                found += 1
    if found == 0:
        return new, found
    for x in range(nr):  # the rest keep their old partner when nobody took it
        j = out[ref_i[x]]
        if new[x] < 0 and j >= 0:
            free = True
            for y in range(no):
                if oth_j[y] == j:
                    free = not used[y]
                    used[y] = True
                    break
            if free:
                new[x] = j
    return new, found


@njit(cache=True, nogil=True)
def _repair_order(a0, a1, b0, b1, ref, oth, prm, out):
    """Re-pair bursts of one segment by exact signature where the order differs between runs.

    ``MPI_ANY_SOURCE`` receives and ``MPI_Waitany`` complete messages in a run-dependent order, and the burst
    after each one processes that message: the logical burst follows the message (its partner and size are in the
    signature, through the opening call), not the position, which a monotone alignment cannot follow. Reference
    rows of [a0, a1) that are unmatched or matched with a differing signature each take the first free other row
    of [b0, b1) with their exact signature (free: unmatched or matched with a differing signature); the others keep
    their match if its partner is still free. The new pairing is kept when its total cost (pair costs minus match
    bonuses) is no worse than before (+0.02 per row), so behaviour decides where it disagrees.
    """
    ref_i, oth_j = _candidates(a0, a1, b0, b1, ref, oth, out, False, 2)
    nr = ref_i.shape[0]
    if nr == 0:
        return
    beh = prm.copy()  # behaviour alone judges the re-pairing: the signatures already chose the candidates
    beh[P_W_PEER] = 0.0
    new, found = _pick(ref_i, oth_j, ref, oth, beh, out, False)
    if found == 0:
        return
    old_cost = 0.0
    new_cost = 0.0
    for x in range(nr):
        if out[ref_i[x]] >= 0:
            c = _pair_cost(ref_i[x], out[ref_i[x]], ref, oth, beh)
            old_cost += c if c < _INF else 0.0
        if new[x] >= 0:
            c = _pair_cost(ref_i[x], new[x], ref, oth, beh)
            new_cost += c if c < _INF else 0.0
    if new_cost <= old_cost + 0.02 * nr:
        for x in range(nr):
            out[ref_i[x]] = new[x]


@njit(cache=True, nogil=True)
def _repair_substitutions(a0, a1, b0, b1, ref, oth, prm, out):
    """Re-pair bursts of one segment by their opening message where their closing calls differ between runs.

    The burst that processes a message received from ``MPI_ANY_SOURCE`` ends at whatever call comes next, and
    that depends on the order of arrival: the last result of a master-worker round is processed before the
    round's collective in one run and before the next ``MPI_Iprobe`` in the other. ``[a0, a1)`` and ``[b0, b1)``
    include the anchor that closes the segment (a collective, paired by position), so such bursts can change
    places with it. Eligible are the reference rows with an opening message (``ro != 0``) that are unmatched or
    matched to a burst that starts with a *different* message (both known: a pair whose other burst starts with
    no known message, e.g. after a call of one run only, is left alone), and the other rows with an opening
    message that are unmatched or matched to an eligible reference row. Each eligible reference row, in order,
    takes the eligible other row with the same opening message of lowest :func:`_any_cost` if that is below 0
    (the cost of staying unmatched); the others keep their partner if it is still free. The changes form chains
    (x takes the old partner of x', which takes that of x'', ...); a chain is kept only when it lowers the total
    cost of its pairs (structure included: ``w_peer`` for a differing signature, ``w_sub`` for a substitution;
    position not counted): behaviour decides where closing call and opening message disagree, a tie goes to the
    opening message (``w_sub < w_peer``), and a substitution never displaces a pair with the same signature.
    """
    ref_i, oth_j = _candidates(a0, a1, b0, b1, ref, oth, out, True, 1)
    nr = ref_i.shape[0]
    if nr == 0:
        return
    beh = prm.copy()
    beh[P_W_POS] = 0.0  # no position: a burst that changes places with the anchor changes its position in the phase
    new, found = _pick(ref_i, oth_j, ref, oth, beh, out, True)
    if found == 0:
        return
    owner = np.full(b1 - b0, -1, np.int64)  # x whose old partner each other row was
    for x in range(nr):
        j = out[ref_i[x]]
        if j >= b0 and j < b1:
            owner[j - b0] = x
    # the changes form chains (x takes the old partner of x', x' that of x'', ...): each chain is kept or
    # undone as a whole, by its total cost
    root = np.arange(nr)
    for x in range(nr):
        if new[x] >= b0 and new[x] < b1 and owner[new[x] - b0] >= 0:
            u = x
            while root[u] != u:
                u = root[u]
            v = owner[new[x] - b0]
            while root[v] != v:
                v = root[v]
            root[max(u, v)] = min(u, v)
    gain = np.zeros(nr)
    for x in range(nr):
        u = x
        while root[u] != u:
            u = root[u]
        root[x] = u
        i = ref_i[x]
        if out[i] >= 0:
            c = _any_cost(i, out[i], ref, oth, beh)
            gain[u] += c if c < _INF else 0.0
        if new[x] >= 0:
            c = _any_cost(i, new[x], ref, oth, beh)
            gain[u] -= c if c < _INF else 0.0
    for x in range(nr):
        if gain[root[x]] > 1e-9:
            out[ref_i[x]] = new[x]


@njit(cache=True, nogil=True)
def _rows(side, lo, hi):
    """Rows [lo, hi) of a :class:`Side` (views)."""
    return Side(side.sig[lo:hi], side.lsig[lo:hi], side.osig[lo:hi], side.feat[lo:hi], side.ldur[lo:hi],
                side.pos[lo:hi], side.gap[lo:hi])


@njit(cache=True, nogil=True)
def _align_segment(a0, a1, b0, b1, ea1, eb1, ref, oth, free_start, free_end, mode, band, max_cells, prm, out, ws):
    """Align reference rows [a0, a1) of ``ref`` to rows [b0, b1) of ``oth`` (:class:`Side`); ``out`` gets absolute
    other indices or -1. ``ws`` are the scratch buffers (uint8, int64, float64, int64) of :func:`_dp`.

    Leading and trailing pairs with the same signature and near-identical behaviour (pair cost within
    ``trim_tol`` of the best possible) are matched directly, unless that end of the segment is free; the DP only
    sees what lies between. Then :func:`_repair_order` re-pairs by exact signature and
    :func:`_repair_substitutions` by opening message over [a0, ea1) x [b0, eb1): the segment plus the paired
    anchor that closes it (``ea1 = a1 + 1``, ``eb1 = b1 + 1``, that pair already in ``out``; ``a1``, ``b1`` when
    the segment ends the thread).
    """
    rs, os_ = ref.sig, oth.sig
    ws_u8, ws_i, ws_f, ws_loc = ws
    if a1 - a0 <= 0:
        _repair_substitutions(a0, ea1, b0, eb1, ref, oth, prm, out)
        return
    if a1 - a0 == b1 - b0:
        same = True
        for k in range(a1 - a0):
            if rs[a0 + k] != os_[b0 + k]:
                same = False
                break
        if same:
            for k in range(a1 - a0):
                out[a0 + k] = b0 + k
            return
    seg0, seg1, segb0, segb1 = a0, a1, b0, b1
    tol = prm[P_TRIM_TOL] - prm[P_BONUS]
    if not free_start:
        while a0 < a1 and b0 < b1 and rs[a0] == os_[b0] and \
                _pair_cost(a0, b0, ref, oth, prm) <= tol:
            out[a0] = b0
            a0 += 1
            b0 += 1
    if not free_end:
        while a1 > a0 and b1 > b0 and rs[a1 - 1] == os_[b1 - 1] and \
                _pair_cost(a1 - 1, b1 - 1, ref, oth, prm) <= tol:
            out[a1 - 1] = b1 - 1
            a1 -= 1
            b1 -= 1
    n = a1 - a0
    m = b1 - b0
    if n > 0 and m > 0:
        loc = ws_loc[:n] if ws_loc.shape[0] >= n else np.empty(n, np.int64)
        _dp(_rows(ref, a0, a1), _rows(oth, b0, b1), free_start, free_end, mode, band, max_cells, prm, loc, ws_u8,
            ws_i, ws_f)
        for k in range(n):
            out[a0 + k] = b0 + loc[k] if loc[k] >= 0 else -1
    _repair_order(seg0, seg1, segb0, segb1, ref, oth, prm, out)
    _repair_substitutions(seg0, ea1, segb0, eb1, ref, oth, prm, out)


@njit(cache=True, nogil=True)
def _local_positions(time, a0, a1, pos):
    """Relative start position (0..1) of rows [a0, a1) within the time they span (:class:`Times`), written to
    ``pos``."""
    if a1 <= a0:
        return
    t0 = time.start[a0]
    span = max(time.end[a1 - 1] - t0, 1.0)
    for i in range(a0, a1):
        pos[i] = (time.start[i] - t0) / span


@njit(cache=True, parallel=True)
def _align_threads(threads, anchor, ref, oth, r_time, o_time, band, max_cells, prm, out):
    """Align every thread t of ``threads`` (:class:`Threads`): rows of ``ref`` to rows of ``oth`` (:class:`Side`).

    ``anchor[i]`` is the other row paired with reference row i by :mod:`synthtrace.tracelib.merge.anchors` (-1: none;
    increasing along each thread). The segments between consecutive anchors are aligned by :func:`_align_segment`
    with positions judged locally: ``ref.pos`` / ``oth.pos`` receive each row's relative position in its own
    segment (from ``r_time`` / ``o_time``, :class:`Times`). ``out[i]`` receives the absolute other row matched to
    reference row i, or -1 (rows of the threads aligned only).
    """
    rs, rp, os_, op = ref.sig, ref.pos, oth.sig, oth.pos
    for t in prange(threads.r_lo.shape[0]):
        a0 = threads.r_lo[t]
        a1 = threads.r_hi[t]
        b0 = threads.o_lo[t]
        b1 = threads.o_hi[t]
        n = a1 - a0
        m = b1 - b0
        for i in range(a0, a1):
            out[i] = -1
            rp[i] = 0.0
        for j in range(b0, b1):
            op[j] = 0.0
        if n == 0 or m == 0:
            continue
        ws = (np.empty(1 << 16, np.uint8), np.empty(4096, np.int64), np.empty(4096), np.empty(2048, np.int64))
        if n == m:
            same = True
            for k in range(n):
                if rs[a0 + k] != os_[b0 + k]:
                    same = False
                    break
            if same:
                for k in range(n):
                    out[a0 + k] = b0 + k
                continue
        pa = a0 - 1
        pb = b0 - 1
        first = True
        for i in range(a0, a1):
            j = anchor[i]
            if j < 0:
                continue
            out[i] = j
            _local_positions(r_time, pa + 1, i, rp)
            _local_positions(o_time, pb + 1, j, op)
            mode = 1 if first else 0
            _align_segment(pa + 1, i, pb + 1, j, i + 1, j + 1, ref, oth, first, False, mode, band, max_cells, prm,
                           out, ws)
            pa = i
            pb = j
            first = False
        _local_positions(r_time, pa + 1, a1, rp)
        _local_positions(o_time, pb + 1, b1, op)
        mode = 0 if first else 2
        _align_segment(pa + 1, a1, pb + 1, b1, a1, b1, ref, oth, first, True, mode, band, max_cells, prm, out, ws)


@njit(cache=True, parallel=True)
def _score_kernel(out, ref, oth, prm, peer_score, sub_score, factor, named):
    """Match score of every reference row (see :class:`AlignConfig`) and whether the signatures agree: ``out[i]``
    is the row of ``oth`` matched to row i of ``ref`` (both :class:`Side`, positions written), ``prm`` the
    kernels' parameter vector (``P_*``), ``factor`` what every score is multiplied by.

    Pairs that the fast paths matched by signature alone are checked here too: one whose reference counters or
    duration are implausibly far apart is unmatched (``out[i] = -1``), unless ``named[i]``: a pair that structure
    alone names (a worker thread's unit in the region its master's match names), scored but kept.
    """
    n = out.shape[0]
    score = np.zeros(n)
    same = np.zeros(n, np.bool_)
    for i in prange(n):
        j = out[i]
        if j < 0:
            continue
        d_feat, _ = _feat_dist(i, j, ref.feat, oth.feat)
        d_dur = abs(ref.ldur[i] - oth.ldur[j])
        if (d_feat > prm[P_REJ_FEAT] or d_dur > prm[P_REJ_DUR]) and not named[i]:
            out[i] = -1
            continue
        cost = prm[P_W_FEAT] * d_feat + prm[P_W_DUR] * d_dur + prm[P_W_POS] * abs(ref.pos[i] - oth.pos[j])
        same[i] = ref.sig[i] == oth.sig[j]
        if same[i]:
            st = 1.0
        elif ref.lsig[i] == oth.lsig[j]:
            st = peer_score
        else:  # a substitution (same opening message, different closing call)
            st = sub_score if ref.osig[i] != 0 and ref.osig[i] == oth.osig[j] else 0.3
        score[i] = min(1.0, max(0.0, st * np.exp(-cost) * factor))
    return score, same


def _next_unopened(a: np.ndarray, b: np.ndarray, tid: np.ndarray, opened: np.ndarray) -> np.ndarray:
    """Per pair of positions, whether ``b`` is the burst right after ``a`` on its thread (``tid`` per position) and
    was opened by a call that completed no message (``opened`` per position: one that did); ``b`` -1: False."""
    nb = np.minimum(np.maximum(b, 0), tid.size - 1)
    return (b == a + 1) & (tid[a] == tid[nb]) & ~opened[nb]


def _behaviour_cost(ri: np.ndarray, oj: np.ndarray, ref: Side, oth: Side, prm: np.ndarray) -> np.ndarray:
    """How far the work of the pairs (``ri``, ``oj``) of rows of ``ref`` and ``oth`` lies apart: ``w_feat`` * mean
    reference-counter log difference where a counter is compared, else ``w_dur`` * duration log difference (the
    counters say what work a burst did; its duration also holds the noise and the contention of its run)."""
    diff = np.abs(ref.feat[ri] - oth.feat[oj])
    known = ~np.isnan(diff)
    feat = np.nansum(diff, axis=1) / np.maximum(known.sum(axis=1), 1)
    return np.where(known.any(axis=1), prm[P_W_FEAT] * feat, prm[P_W_DUR] * np.abs(ref.ldur[ri] - oth.ldur[oj]))


# --------------------------------------------------------------------------------------------- driver
def gap_costs(duration_ns: np.ndarray, config: AlignConfig) -> np.ndarray:
    """The cost of leaving each burst unmatched (float64; ``duration_ns``: its duration, ns), see AlignConfig."""
    dur = duration_ns.astype(np.float64)
    return config.gap_base + config.gap_size * dur / (dur + config.gap_half_ns)


def _arrays(t: pl.DataFrame, features: Sequence[str], config: AlignConfig) -> tuple:
    """The rows of a sequence table as the kernels read them (:class:`Side` but ``pos``, then :class:`Times`); the
    gap costs are computed here, not held in the table (issue 23)."""
    feats = (t.select([f"f_{f}" for f in features]).to_numpy().astype(np.float64, copy=False)
             if features else np.zeros((t.height, 0)))
    return (
        t.get_column("sig").to_numpy().view(np.int64),
        # which wait a program makes follows arrival (an MPI_Waitany for a face still missing, then the MPI_Waitall;
        # or the MPI_Waitall alone when every face came during the overlap): the bursts a wait closes pair whichever
        # wait it is, an exact signature costs less (w_peer)
        np.where(t.get_column("mpi_call").is_in(list(WAIT_CALLS)).fill_null(False).to_numpy(), WAIT_LSIG,
                 t.get_column("lsig").to_numpy().view(np.int64)),
        t.get_column("osig").to_numpy().view(np.int64),
        np.ascontiguousarray(feats),
        t.get_column("ldur").to_numpy().astype(np.float64, copy=False),  # the table's own (read-only) buffer
        t.get_column("start_ns").to_numpy().astype(np.float64),
        t.get_column("end_ns").to_numpy().astype(np.float64),
        gap_costs(t.get_column("duration_ns").to_numpy(), config),
    )


def sort_bursts(bursts: pl.DataFrame) -> pl.DataFrame:
    """``bursts`` in the row order :func:`sequence_table` uses (thread, then ``burst_seq``); no copy if already so."""
    b = _sorted_by_thread(bursts.with_columns(thread_id()), "burst_seq")
    return b.drop("_tid")


def _through_hosts(ref: pl.DataFrame, other: pl.DataFrame, other_row: np.ndarray) -> np.ndarray | None:
    """``other_row`` (per row of ``ref``, the matched row of ``other`` or -1) with every worker thread's row
    matched through its master: to the other run's row of the same thread hosted by the master row that its host
    is matched to, or to none (the worker did no work in that epoch of the other run, or its host has no match).
    None when ``ref`` has no worker rows. A worker's bursts are cut by barriers, lock waits and flushes where timing
    decides, so its position in its own thread says nothing; its master's MPI calls say which region it is in."""
    r_host = ref.get_column("host").to_numpy()
    worker = np.flatnonzero(r_host >= 0)
    if worker.size == 0:
        return None
    mine = pl.DataFrame({"_tid": ref.get_column("_tid").gather(worker),
                         "_mh": other_row[r_host[worker]], "_i": worker})
    theirs = (other.select("_tid", pl.col("host").alias("_mh")).with_row_index("_j")
              .filter(pl.col("_mh") >= 0).with_columns(pl.col("_j").cast(pl.Int64)))
    got = mine.join(theirs, on=["_tid", "_mh"], how="left", maintain_order="left").get_column("_j")
    out = other_row.copy()
    out[worker] = got.fill_null(-1).to_numpy()
    return out


def _realigner(out: np.ndarray, sides: tuple[Side, Side], times: tuple[Times, Times],
               offsets: tuple[np.ndarray, np.ndarray], config: AlignConfig, prm: np.ndarray,
               new_pos: list[np.ndarray]) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """The re-alignment :func:`message_graph.follow_messages` calls: threads ``t`` of the pairs ``out`` aligned
    again on ``anchors`` (positions from ``sides``' and written to ``new_pos``); ``offsets``: the threads' first
    rows in both runs."""
    (ref_side, oth_side), (r_time, o_time), (r_off, o_off) = sides, times, offsets

    def realign(t: np.ndarray, anchors: np.ndarray) -> np.ndarray:
        o = out.copy()
        r_s, o_s = ref_side._replace(pos=ref_side.pos.copy()), oth_side._replace(pos=oth_side.pos.copy())
        _align_threads(Threads(r_off[t], r_off[t + 1], o_off[t], o_off[t + 1]), anchors, r_s, o_s, r_time,
                       o_time, config.band, config.max_cells, prm, o)
        new_pos[:] = [r_s.pos, o_s.pos]
        return o
    return realign


def align_runs(ref: pl.DataFrame, other: pl.DataFrame, features: Sequence[str],
               config: AlignConfig = AlignConfig()) -> pl.DataFrame:
    """Match the bursts of ``other`` to those of ``ref`` (both from :func:`sequence_table` with ``features``).

    ``features`` are the reference counters recorded by both runs; when empty, matching uses structure and timing
    only and every score is multiplied by ``config.timing_only_factor``.

    Returns one row per reference burst, in the row order of ``ref``: appl, task, thread, burst_seq, other_seq
    (NULL when unmatched), other_row (the matched row's index in ``other``, NULL when unmatched), match_score
    (Float64 in [0, 1], NULL when unmatched), same_sig (the two closing calls agree on call, site, communicator,
    peer and bytes; NULL when unmatched), same_iter (both bursts lie in the same iteration of their thread's call
    sequence, see :mod:`synthtrace.tracelib.merge.anchors`; NULL when unmatched or the thread has no iteration clock),
    msg_agree (the message the burst sends or receives is matched end to end to one message of the other run; NULL
    when not checked) and msg_misaligned (the burst's thread disagrees with its partners' messages both ways), see
    :mod:`synthtrace.tracelib.merge.message_graph`, and msg_consistent (the nearest checked messages before and after
    the burst on its thread, itself included, have their ends matched to one message each: :func:`bracketed`; NULL
    when unmatched or none is checked), ambiguous_span (an iteration span whose place the data cannot tell) and
    message_absent (unmatched: the burst works on an arrived message the other run lacks, :func:`anchors.orphans`).
    With ``config.message_graph``, a thread whose matches disagree with
    its partners' is re-aligned on the pairs their messages imply (:func:`message_graph.follow_messages`).
    """
    timing_only = len(features) == 0
    prm = _parameters(config, timing_only)
    # each step a function: what it reads dies when it returns, and its NumPy garbage is handed back (glibc keeps
    # what NumPy frees in its arenas; Polars' allocations come from another allocator) before the next step
    # allocates (issue 23: the alignment's peak was the match table built over the pairing's arrays)
    paired = _pair(ref, other, features, config, prm)
    release_free_heap()
    score, same = _scores(ref, other, features, config, prm, paired, timing_only)
    release_free_heap()
    return _match_table(ref, other, paired, score, same)


class _Paired(NamedTuple):
    """What :func:`_pair` leaves for the scores and the match table (per row of the runs' sequence tables)."""

    other_row: np.ndarray  # int64 per reference row: the matched row of the other table, -1 unmatched
    ref_pos: np.ndarray  # float64 per reference row: relative position in its segment (0: named pair)
    other_pos: np.ndarray  # float64 per other row: idem
    named: np.ndarray  # bool per reference row: a pair structure alone names, kept whatever its behaviour
    ref_iteration: np.ndarray  # int64 per reference row (anchors.KeyPairs)
    other_iteration: np.ndarray  # int64 per other row, in the reference's numbering (shifted by follow_messages)
    undecidable: np.ndarray  # bool per reference row (anchors.KeyPairs)
    orphan_ref: np.ndarray  # bool per reference row (anchors.KeyPairs)


def _parameters(config: AlignConfig, timing_only: bool) -> np.ndarray:
    """The kernels' parameter vector (``P_*``) of ``config``."""
    w_dur = config.w_dur_timing_only if timing_only else config.w_dur
    prm = np.empty(P_SUB_DUR + 1, np.float64)
    prm[[P_BONUS, P_W_PEER, P_W_FEAT, P_W_DUR, P_W_POS, P_REJ_FEAT, P_REJ_DUR, P_TRIM_TOL, P_W_SUB, P_SUB_FEAT,
         P_SUB_DUR]] = (config.bonus, config.w_peer, config.w_feat, w_dur, config.w_pos, config.reject_feat,
                        config.reject_dur, config.trim_tol, config.w_sub, config.sub_feat, config.sub_dur)
    return prm


def _scores(ref: pl.DataFrame, other: pl.DataFrame, features: Sequence[str], config: AlignConfig, prm: np.ndarray,
            paired: _Paired, timing_only: bool) -> tuple[np.ndarray, np.ndarray]:
    """Match score (float64) and signature agreement (bool) of every reference row's pair; a pair whose behaviour
    is implausibly far apart is unmatched in ``paired.other_row`` (:func:`_score_kernel`). The kernels' arrays are
    built again here (the pairing's died with it) and die on return."""
    rs, rl, ro, rf, rd, _, _, rg = _arrays(ref, features, config)
    os_, ol, oo, of, od, _, _, og = _arrays(other, features, config)
    return _score_kernel(paired.other_row, Side(rs, rl, ro, rf, rd, paired.ref_pos, rg),
                         Side(os_, ol, oo, of, od, paired.other_pos, og), prm, config.peer_score, config.sub_score,
                         config.timing_only_factor if timing_only else 1.0, paired.named)


def _anchor(ri: np.ndarray, oj: np.ndarray, rows: int) -> np.ndarray:
    """Per kept reference row (``rows`` of them), the kept other row it is anchored to (-1: none); ``ri``, ``oj``:
    the anchors' positions."""
    anchor = np.full(rows, -1, np.int64)
    anchor[ri] = oj
    return anchor


def _every_row(values: np.ndarray, rows: np.ndarray, height: int) -> np.ndarray:
    """``values`` of the kept ``rows`` of a table of ``height`` rows, 0.0 on the others (``values`` itself, no copy,
    when every row is kept)."""
    if rows.size == height:
        return values
    out = np.zeros(height)
    out[rows] = values
    return out


def _pair(ref: pl.DataFrame, other: pl.DataFrame, features: Sequence[str], config: AlignConfig,
          prm: np.ndarray) -> _Paired:
    """The pairs of :func:`align_runs` (unscored): key pairs, the aligner, the message graph, arrivals, orphans,
    lines and worker threads through their hosts."""
    r_tid = ref.get_column("_tid").to_numpy()
    o_tid = other.get_column("_tid").to_numpy()
    threads = np.intersect1d(np.unique(r_tid), np.unique(o_tid))
    # every thread's rows are contiguous (sorted tables), so threads present in only one run are simply skipped:
    # their reference rows keep -1
    r_bounds = np.c_[np.searchsorted(r_tid, threads, "left"), np.searchsorted(r_tid, threads, "right")]
    o_bounds = np.c_[np.searchsorted(o_tid, threads, "left"), np.searchsorted(o_tid, threads, "right")]
    r_keep = np.zeros(ref.height, bool)
    for lo, hi in r_bounds:  # one iteration per thread, not per row
        r_keep[lo:hi] = True
    o_keep = np.zeros(other.height, bool)
    for lo, hi in o_bounds:
        o_keep[lo:hi] = True
    r_rows = np.flatnonzero(r_keep)
    o_rows = np.flatnonzero(o_keep)
    r_off = np.r_[0, np.cumsum(r_bounds[:, 1] - r_bounds[:, 0])].astype(np.int64)
    o_off = np.r_[0, np.cumsum(o_bounds[:, 1] - o_bounds[:, 0])].astype(np.int64)
    # the key pairs first: the aligner's arrays (~1/3 of a sequence table) are not held while they are found
    kp = key_pairs(ref, other, features, (config.reject_feat, config.reject_dur), (config.sub_feat, config.sub_dur))
    release_free_heap()  # what finding them freed, before the aligner's arrays are made
    ref_arrays = _arrays(ref, features, config)
    other_arrays = _arrays(other, features, config)
    rs, rl, ro, rf, rd, rt0, rt1, rg = (ref_arrays if r_rows.size == ref.height
                                        else (x[r_rows] for x in ref_arrays))
    os_, ol, oo, of, od, ot0, ot1, og = (other_arrays if o_rows.size == other.height
                                         else (x[o_rows] for x in other_arrays))
    # anchors: key pairs of the kept rows, their longest monotone chain per thread
    r_pos = np.full(ref.height, -1, np.int64)
    r_pos[r_rows] = np.arange(r_rows.size)
    o_pos = np.full(other.height, -1, np.int64)
    o_pos[o_rows] = np.arange(o_rows.size)
    ki, kj, chain, mi, mj = kp.ref, kp.other, kp.chain, kp.msg_ref, kp.msg_other
    r_it, o_it = kp.ref_iteration, kp.other_iteration
    if config.anchors:
        inside = (r_pos[ki] >= 0) & (o_pos[kj] >= 0)
        ki, kj, chain = r_pos[ki[inside]], o_pos[kj[inside]], chain[inside]
        inside = (r_pos[mi] >= 0) & (o_pos[mj] >= 0)
        mi, mj = r_pos[mi[inside]], o_pos[mj[inside]]
    else:
        ki = kj = mi = mj = np.zeros(0, np.int64)
        chain = np.zeros(0, bool)
    out = np.empty(r_rows.size, np.int64)
    rp = np.zeros(r_rows.size)
    op = np.zeros(o_rows.size)
    ref_side, oth_side = Side(rs, rl, ro, rf, rd, rp, rg), Side(os_, ol, oo, of, od, op, og)
    r_time, o_time = Times(rt0, rt1), Times(ot0, ot1)
    _align_threads(Threads(r_off[:-1], r_off[1:], o_off[:-1], o_off[1:]), _anchor(ki[chain], kj[chain], r_rows.size),
                   ref_side, oth_side, r_time, o_time, config.band, config.max_cells, prm, out)
    release_free_heap()  # the anchors (made for this call alone) and the kernel's own work
    for pi, pj in ((ki, kj), (mi, mj)):  # key pairs, then message pairs, outrank what behaviour chose
        if pi.size:
            out = key_repair(out, pi, pj)
            keyed = out[pi] == pj
            rp[pi[keyed]] = 0.0  # a pair named by its logical position: no position term
            op[pj[keyed]] = 0.0
    if config.message_graph and config.anchors:  # the partners' messages give anchors: none without anchors
        new_pos: list[np.ndarray] = []  # the positions the re-alignment wrote (kept for the threads it moved)
        r_ends, o_ends = ends(ref), ends(other)
        # the kept rows' ends (a copy only when a thread of one run is not in the other)
        out, moved = follow_messages(out, r_ends if r_rows.size == ref.height else Ends(*(x[r_rows] for x in r_ends)),
                                     o_ends if o_rows.size == other.height else Ends(*(x[o_rows] for x in o_ends)),
                                     r_off, o_off, _realigner(out, (ref_side, oth_side), (r_time, o_time),
                                                              (r_off, o_off), config, prm, new_pos))
        for t in moved:  # the thread's new positions, and the iteration offset its partners' messages gave it
            rp[r_off[t]:r_off[t + 1]] = new_pos[0][r_off[t]:r_off[t + 1]]
            op[o_off[t]:o_off[t + 1]] = new_pos[1][o_off[t]:o_off[t + 1]]
            rr = r_rows[r_off[t]:r_off[t + 1]]
            hit = out[r_off[t]:r_off[t + 1]] >= 0
            oo_ = o_rows[out[r_off[t]:r_off[t + 1]][hit]]
            ok = (r_it[rr[hit]] >= 0) & (o_it[oo_] >= 0)
            if ok.any():
                idx = o_rows[o_off[t]:o_off[t + 1]]
                shift = int(np.median(r_it[rr[hit]][ok] - o_it[oo_][ok]))
                o_it[idx] = np.where(o_it[idx] >= 0, o_it[idx] + shift, -1)
    if config.anchors and config.arrival:  # the work on an arrived message is that message's, whatever its order
        ai, aj = kp.arrival_ref, kp.arrival_other
        # in the iteration the thread lies in now (the message graph may have moved a thread by an iteration),
        # unless both runs name the message (then it is the same message whatever iteration each clock says)
        r_amsg = ref.get_column("amsg").to_numpy()[ai]
        named = (r_amsg != 0) & (r_amsg == other.get_column("amsg").to_numpy()[aj])
        inside = (r_pos[ai] >= 0) & (o_pos[aj] >= 0) & ((r_it[ai] == o_it[aj]) | named)
        ai, aj = r_pos[ai[inside]], o_pos[aj[inside]]
        # unless behaviour says the work follows the place in the call sequence: the burst the aligner chose
        # for it, or the burst the aligner gave the message's burst, behaves clearly closer (a program whose work
        # after a receive does not depend on which message came; one run's extra work after the message)
        now = out[ai]
        holder = np.full(oth_side.sig.size, -1, np.int64)
        holder[out[out >= 0]] = np.flatnonzero(out >= 0)
        held = holder[aj]
        cost = _behaviour_cost(ai, aj, ref_side, oth_side, prm) - config.arrival_tol
        take = ((now < 0) | (cost <= _behaviour_cost(ai, np.maximum(now, 0), ref_side, oth_side, prm))) & (
            (held < 0) | (cost <= _behaviour_cost(np.maximum(held, 0), aj, ref_side, oth_side, prm)))
        # nor where one run made a call between the arrival and the work the other run did after it (a
        # housekeeping or control call of that run alone): the aligner left the burst the message opened without
        # a partner and gave the other burst to the next one of its thread, opened by that call, not by a message
        r_open = ref.get_column("achan").to_numpy()[r_rows] != 0
        o_open = other.get_column("achan").to_numpy()[o_rows] != 0
        take &= ~(((now < 0) & _next_unopened(ai, held, r_tid[r_rows], r_open))
                  | ((held < 0) & _next_unopened(aj, now, o_tid[o_rows], o_open)))
        out = force_pairs(out, ai[take], aj[take])
    if config.anchors and config.arrival:  # the work on a message the other run lacks has no counterpart
        r_orphan, o_orphan = kp.orphan_ref[r_rows], kp.orphan_other[o_rows]
        held = out >= 0
        held[held] = r_orphan[held] | o_orphan[out[held]]
        out[held] = -1
    lined = np.zeros(ref.height, np.bool_)
    if config.anchors:  # the k-th message from a site's one sender is the k-th receive: structure alone names it
        li, lj = kp.line_ref, kp.line_other
        inside = (r_pos[li] >= 0) & (o_pos[lj] >= 0) & (r_it[li] == o_it[lj])
        li, lj = li[inside], lj[inside]
        out = force_pairs(out, r_pos[li], o_pos[lj])
        lined[li] = True
    other_row = np.full(ref.height, -1, np.int64)
    other_row[r_rows] = np.where(out >= 0, o_rows[np.maximum(out, 0)], -1)
    rp_all, op_all = _every_row(rp, r_rows, ref.height), _every_row(op, o_rows, other.height)
    hosted = _through_hosts(ref, other, other_row)
    named = lined.copy()  # scored but kept whatever their behaviour
    if hosted is not None:  # worker threads' units: their master's match, no position term
        other_row = hosted
        named |= ref.get_column("host").to_numpy() >= 0
        rp_all[named] = 0.0
        op_all[other.get_column("host").to_numpy() >= 0] = 0.0
    return _Paired(other_row, rp_all, op_all, named, r_it, o_it, kp.undecidable, kp.orphan_ref)


def _match_table(ref: pl.DataFrame, other: pl.DataFrame, paired: _Paired, score: np.ndarray,
                 same: np.ndarray) -> pl.DataFrame:
    """:func:`align_runs`' table of ``paired`` and its scores (see there)."""
    other_row, r_it, o_it = paired.other_row, paired.ref_iteration, paired.other_iteration
    r_tid = ref.get_column("_tid").to_numpy()
    hit = other_row >= 0
    safe = np.maximum(other_row, 0)
    miss = np.flatnonzero(~hit)
    o_seq = other.get_column("burst_seq").to_numpy()[safe]
    r_amsg = ref.get_column("amsg").to_numpy()
    by_message = hit & (r_amsg != 0) & (r_amsg == other.get_column("amsg").to_numpy()[safe])
    agree = agreement(ends(ref), ends(other), other_row)
    misaligned = disagreeing(ends(ref), r_tid, agree).filter("misaligned").get_column("t").to_numpy()
    return ref.select(*THREAD_KEYS, "burst_seq").with_columns(
        pl.Series("other_seq", o_seq, pl.Int64).scatter(miss, None),
        pl.Series("other_row", other_row, pl.Int64).scatter(miss, None),
        pl.Series("match_score", score, pl.Float64).scatter(miss, None),
        pl.Series("same_sig", same, pl.Boolean).scatter(miss, None),
        # the pair lies in the same iteration of both runs' own call sequences (NULL: unmatched, no clock, or both
        # work on one message both runs name, wherever each run's clock puts it)
        pl.Series("same_iter", r_it == o_it[safe], pl.Boolean).scatter(
            np.flatnonzero(~hit | (r_it < 0) | (o_it[safe] < 0) | by_message), None),
        # the two ends of the row's message are matched to the two ends of one message (NULL: not checked)
        pl.Series("msg_agree", agree == 1, pl.Boolean).scatter(np.flatnonzero(agree < 0), None),
        # the row's thread disagrees with its partners' messages both ways (message_graph.disagreeing)
        pl.Series("msg_misaligned", np.isin(r_tid, misaligned), pl.Boolean),
        # the checked messages just before and after the pair on its thread agree (NULL: unmatched, or none checked)
        bracketed(r_tid, agree, hit),
        # [helper merge-iter] the burst lies in an iteration span one run has more of, whose place the data cannot
        # tell (anchors.KeyPairs.undecidable): its partner is one of several interchangeable bursts
        pl.Series("ambiguous_span", paired.undecidable, pl.Boolean),
        # the burst works on an arrived message the other run does not have (anchors.orphans): no counterpart
        pl.Series("message_absent", paired.orphan_ref & ~hit, pl.Boolean))
