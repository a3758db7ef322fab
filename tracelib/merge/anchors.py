"""Anchors of the alignment of two runs: bursts that are the same logical burst by structure alone (DESIGN §6).

The time of a run drifts against another's (clock rates, OS noise, a slower node): after some thousand
iterations two runs are many iterations apart in time, so no position in time over a whole run can tell which
iteration a burst belongs to. The call sequence can: an MPI program repeats the same calls iteration after
iteration, so every thread gets an **iteration clock** from its own call sequence and the bursts are keyed by
*logical position*:

1. the **clock signature** of a thread is the closing call (of a run of completion or polling calls, which repeat
   as often as messages arrive, the first only; call, site, communicator, partner, bytes; ``csig`` of
   :func:`synthtrace.tracelib.merge.align.sequence_table`) that closes the most bursts among those that close the same
   number of bursts as most other signatures do (the calls made once per iteration), present in both runs,
   among calls whose bursts are long (at least 90 % of them >= ``CLOCK_MIN_NS``: polling iterations repeat a
   run-dependent number of times) and that are no short probe or test (one extra ``MPI_Iprobe`` in one run's
   iteration must not shift every later iteration of that run), calls that receive from a named partner last
   (an ``MPI_ANY_SOURCE`` receive takes its place in the iteration from the arrival order); each call site votes
   once for the number of iterations, whatever the partners and sizes it is made with;
2. the **iteration** of a burst is the number of clock bursts before it on its thread, and its **rank** the number
   of bursts with its exact signature before it in that iteration. ``(iteration, signature, rank)`` names a
   logical burst in either run whatever the timing; an optional call missing in one iteration or a polling loop of
   another length shifts nothing beyond that iteration;
3. traces chopped at different points start at different iterations: the **offset** between the two runs'
   iteration numbers is the one under which the clock bursts' reference counters (or durations) agree best over
   the overlap, 0 unless another offset fits clearly better (:func:`_best_offset`), the median of these over the
   threads (the chop cuts every rank at about the same time), or one iteration off where more bursts then find a
   partner (a window that starts mid-iteration; :func:`_offsets`); where the runs differ by whole iterations (an
   inner solver that converged later, a repeated time step), the offset changes along the run, placed by the
   iterations' work for the threads tied by their messages together, and where the data cannot place it the span
   is said (:mod:`synthtrace.tracelib.merge.iterations`);
4. bursts of the two runs with the same logical position and plausible behaviour (reference counters and duration
   within the aligner's rejection limits) form **key pairs**. Messages completed in another order
   (``MPI_ANY_SOURCE``, ``MPI_Waitany``) make key pairs cross: those anchor nothing (whether the work before a
   receive follows the position or the message, behaviour decides in the dynamic programme). The longest
   monotone chain of the other key pairs of each thread (:func:`longest_chain`, O(n log n)) is the set of anchors
   between which the aligner runs its dynamic programme
   on short segments, so the cost stays linear in the number of bursts. The key pairs left out of the chain still
   name the true partner of their bursts: :func:`key_repair` restores them after the dynamic programme, and so
   the **message pairs** (same opening message, same iteration) of bursts whose closing calls differ.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import polars as pl
from numba import njit

from synthtrace.tracelib.formats.heap import release_free_heap
from synthtrace.tracelib.merge.iterations import iteration_paths
from synthtrace.tracelib.domain.mpi_calls import calls_with
from synthtrace.tracelib.merge.messages import POLLING_CALLS

#: bursts shorter than this (ns) do not choose the clock signature (polling iterations)
CLOCK_MIN_NS = 10_000.0
#: an offset other than 0 is chosen only when its mean clock-burst difference is below this share of offset 0's
OFFSET_GAIN = 0.8
#: offsets searched beyond the difference in clock counts (iterations)
OFFSET_SLACK = 2
#: a thread takes the iteration offset its logical messages give when at least this share of them agree on it
MESSAGE_OFFSET_SHARE = 0.6
#: ... and at least this many
MESSAGE_OFFSET_MIN = 3
#: candidate offsets whose mean behaviour difference over their key pairs is within (factor, plus) of the best
OFFSET_TOL = (1.25, 0.01)


#: nonblocking point-to-point posts
_POSTS = calls_with(roles=("send", "recv", "sendrecv"), blocking=False)


def _clock_signatures(ref: pl.DataFrame, other: pl.DataFrame) -> pl.DataFrame:
    """Per thread (``_tid``), the clock call ``_clock`` (a ``csig``) chosen on the reference run among those both
    runs have."""
    # a completion or polling call repeats as often as messages arrive: the first of a run of them counts
    ref, other = ref.filter(~pl.col("repeat")), other.filter(~pl.col("repeat"))
    counts = (ref.group_by("_tid", pl.col("csig").alias("sig"))
              .agg(pl.len().alias("n"), pl.col("duration_ns").quantile(0.1).alias("d"), pl.col("lsig").first(),
                   # a receive from a named partner may be a wildcard's: its place in the iteration varies
                   (pl.col("peer").is_not_null() & (pl.col("bytes_recv").fill_null(0) > 0)).any().alias("_recv"),
                   # a probe or test right after another call is made as often as the timing lets it (a
                   # housekeeping MPI_Iprobe in one run's iteration only): it ticks no clock while a call the
                   # program makes itself can. The first test of a polling loop after the iteration's work can
                   pl.col("mpi_call").is_in(list(POLLING_CALLS)).any().alias("_poll"),
                   pl.col("mpi_call").is_in(list(_POSTS)).any().alias("_post"))
              .with_columns(pl.col("_poll") & (pl.col("d") < CLOCK_MIN_NS))
              .join(other.group_by("_tid", pl.col("csig").alias("sig")).agg(pl.len().alias("m")), on=["_tid", "sig"]))
    counts = counts.filter((pl.col("n") >= 2) & (pl.col("m") >= 2))
    # one vote per call site (lsig: call, site, communicator), shared by the partners and sizes it is made with: a
    # halo exchange whose neighbours or sizes change every iteration makes one signature per (partner, size), each
    # a few times, which must not outvote the calls made once per iteration (mixed s16: 233 Isend/Irecv
    # signatures made twice each against Wait, Waitall, Iallreduce and Testall made 60 times). A probe or test votes
    # for nothing (see _poll)
    # a nonblocking post is made as many times per iteration as the thread posts messages to a partner (twice to the
    # one neighbour of a 2x2 halo: 800 Isend and 800 Irecv outvoted 400 Waitall), so on a thread where another call
    # can vote (the wait that completes the posts, the collective that ends the iteration) the posts never propose a
    # count of their own: they vote for the (n, m) of such a call only. An inner solver's posts, made once per inner
    # iteration with its wait, back the wait's count: the inner iterations, which one run may have more of, are the
    # clock, and iterations.iteration_paths places the extra ones by their work, pooled over the ranks tied by their
    # messages (inner_counts s0: its Waitall's (120, 121) lost a tie to the Allreduce's (30, 30) and two tasks put an
    # inner iteration on the wrong side of another, 99.59 % right)
    backed = ~pl.col("_post") & ~pl.col("_poll")
    counts = counts.filter((pl.col("n") >= 2) & (pl.col("m") >= 2)).with_columns(
        (pl.col("_post") & backed.any().over("_tid") & ~backed.any().over("_tid", "n", "m")).alias("_post"))
    counts = counts.with_columns(pl.when(pl.col("_poll") | pl.col("_post")).then(0.0)
                                 .otherwise(1.0 / pl.len().over("_tid", "lsig")).alias("_w"))
    # the calls made once per iteration are made as often as each other in the reference (n) and in the other run
    # (m): the (n, m) shared by most calls is the number of iterations. A call whose partner or size follows the
    # arrival order (a reply to whoever sent, a size that carries a task index) is made a count of times that
    # differs from run to run, so such calls scatter over many (n, m) and do not outvote the iteration's calls
    # (which, in a task farm, are often short: a Bcast, a first receive, a stop message). Ties: counts equal in
    # both runs, long bursts, more iterations
    per_count = (counts.group_by("_tid", "n", "m")
                 .agg(pl.col("_w").sum().alias("k"),
                      pl.col("_w").filter(pl.col("d") >= CLOCK_MIN_NS).sum().alias("_kl"))
                 .sort("_tid", "k", (pl.col("n") - pl.col("m")).abs(), "_kl", "n",
                       descending=[False, True, False, True, True])
                 .unique("_tid", keep="first")
                 .select("_tid", pl.col("n").alias("_n_iter"), pl.col("m").alias("_m_iter")))
    return (counts.join(per_count, on="_tid").filter((pl.col("n") == pl.col("_n_iter"))
                                                      & (pl.col("m") == pl.col("_m_iter")))
            .sort("_tid", "_poll", "_recv", "d", "sig", descending=[False, False, False, True, False])
            .unique("_tid", keep="first").select("_tid", pl.col("sig").alias("_clock")))


def _logical_keys(t: pl.DataFrame, clocks: pl.DataFrame) -> pl.DataFrame:
    """``t`` (row order kept) with ``_it`` (clock bursts before the row on its thread; 0 without a clock) and
    ``_rank`` (bursts with the row's signature before it in that iteration)."""
    k = t.select("_tid", "sig", "csig", "repeat").with_row_index("_row").join(clocks, on="_tid", how="left",
                                                                      maintain_order="left")
    tick = ((k.get_column("csig") == k.get_column("_clock")).fill_null(False) & ~k.get_column("repeat")
            ).cast(pl.Int64).to_numpy()
    tid = k.get_column("_tid").to_numpy()
    first = np.r_[True, tid[1:] != tid[:-1]] if tid.size else np.zeros(0, bool)  # rows of a thread are contiguous
    before = np.cumsum(tick) - tick
    k = k.with_columns(pl.Series("_it", before - np.maximum.accumulate(np.where(first, before, 0))))
    return k.with_columns(pl.Series("_rank", rank_within(k.select("_tid", "_it", "sig"))))


def rank_within(keys: pl.DataFrame) -> np.ndarray:
    """For each row, how many earlier rows have the same values in every column of ``keys`` (a cumulative count
    per group, by one stable sort of the rows' hashes instead of a window over many small groups)."""
    h = keys.hash_rows(seed=0).to_numpy()
    order = np.argsort(h, kind="stable")
    hs = h[order]
    idx = np.arange(h.size)
    start = np.r_[True, hs[1:] != hs[:-1]] if h.size else np.zeros(0, bool)
    rank = np.empty(h.size, np.int64)
    rank[order] = idx - np.maximum.accumulate(np.where(start, idx, 0))
    return rank


@njit(cache=True, nogil=True)
def _best_offset(x: np.ndarray, y: np.ndarray, slack: int, gain: float) -> int:
    """Offset d (reference clock burst k <-> other clock burst k + d) whose mean |x_k - y_{k+d}| over the overlap
    is smallest; 0 unless another offset is below ``gain`` times offset 0's mean. NaN values are skipped."""
    n, m = x.shape[0], y.shape[0]
    lo, hi = min(0, m - n) - slack, max(0, m - n) + slack
    best_d, best_c, zero_c = 0, np.inf, np.inf
    need = max(1, min(n, m) // 2)
    for d in range(lo, hi + 1):
        tot, k = 0.0, 0
        for i in range(max(0, -d), min(n, m - d)):
            v = abs(x[i] - y[i + d])
            if v == v:
                tot += v
                k += 1
        if k < need:
            continue
        c = tot / k
        if d == 0:
            zero_c = c
        if c < best_c:
            best_c, best_d = c, d
    if zero_c < np.inf and not best_c < gain * zero_c:
        return 0
    return best_d


ON = ["_tid", "_it", "sig", "_rank"]


def _offsets(rk: pl.DataFrame, ok: pl.DataFrame, r_val: np.ndarray, o_val: np.ndarray,
             r_long: np.ndarray) -> pl.DataFrame:
    """Per thread, the iteration offset of the other run (``_off``, other iteration = reference iteration + off).

    Each thread's clock bursts give a best offset by behaviour (:func:`_best_offset`); their median over the
    threads (every rank is chopped at about the same time) and 0, each +-1, are the candidates. Of those whose key
    pairs differ in behaviour (mean |difference| of ``r_val`` / ``o_val``) within ``OFFSET_TOL`` of the thread's
    best, a thread takes the one under which most of its bursts find a key partner (a window that starts
    mid-iteration moves the iteration boundary by one), ties going to the behaviour's median, then to 0.
    """
    rows = []
    r_clock = rk.filter((pl.col("csig") == pl.col("_clock")) & ~pl.col("repeat")).select("_tid", "_row")
    o_clock = ok.filter((pl.col("csig") == pl.col("_clock")) & ~pl.col("repeat")).select("_tid", "_row")
    o_groups = {t: g for (t,), g in o_clock.partition_by("_tid", as_dict=True).items()}
    for (tid,), g in r_clock.partition_by("_tid", as_dict=True).items():  # one iteration per thread
        og = o_groups.get(tid)
        if og is None:
            continue
        x = r_val[g.get_column("_row").to_numpy()]
        y = o_val[og.get_column("_row").to_numpy()]
        rows.append(_best_offset(x, y, OFFSET_SLACK, OFFSET_GAIN))
    med = int(round(float(np.median(rows)))) if rows else 0
    cands = sorted({med - 1, med, med + 1, -1, 0, 1})
    # judged on long bursts: polling iterations, hundreds per wait, are alike in every iteration
    r = rk.select(*ON, pl.Series("_v", r_val), pl.Series("_long", r_long)).filter(pl.col("_long")).drop("_long")
    o = ok.select(*ON, pl.Series("_w", o_val))
    fit = pl.concat([
        join_by_threads(r, o.with_columns(pl.col("_it") - c), ON)
        .group_by("_tid").agg(pl.len().alias("_k"), (pl.col("_v") - pl.col("_w")).abs().mean().alias("_d"))
        .with_columns(pl.lit(c, pl.Int64).alias("_off"))
        for c in cands])
    # close enough to the best fit of the thread: then the most key pairs, the behaviour's median, 0
    fit = fit.filter(pl.col("_d").fill_nan(0.0) <= OFFSET_TOL[0] * pl.col("_d").fill_nan(0.0).min().over("_tid")
                     + OFFSET_TOL[1])
    return (fit.sort("_tid", pl.col("_k"), (pl.col("_off") - med).abs(), pl.col("_off").abs(),
                     descending=[False, True, False, False])
            .unique("_tid", keep="first").select("_tid", "_off"))


def _message_offsets(ref: pl.DataFrame, other: pl.DataFrame, rk: pl.DataFrame, ok: pl.DataFrame) -> pl.DataFrame:
    """Per thread, the iteration offset (``_moff``, other iteration = reference iteration + offset) under which the
    bursts that send or receive the same logical message (``smsg`` / ``rmsg`` of
    :func:`synthtrace.tracelib.merge.message_graph.logical_ends`, named the same way in both runs) lie in the same
    iteration: when at least ``MESSAGE_OFFSET_SHARE`` of the messages it sends agree on one, and so do those it
    receives, and sends and receives agree (a trace that starts later on one rank names that rank's sends from its
    own start: they then disagree with its receives, and the thread gets none)."""
    parts = []
    for col in ("smsg", "rmsg"):
        if col not in ref.columns or col not in other.columns:
            continue
        r = rk.select("_tid", "_it", pl.Series(col, ref.get_column(col))).filter(pl.col(col) > 1)
        o = (ok.select("_tid", pl.col("_it").alias("_oit"), pl.Series(col, other.get_column(col)))
             .filter(pl.col(col) > 1))
        parts.append(r.join(o, on=["_tid", col]).select("_tid", pl.lit(col).alias("_way"),
                                                        (pl.col("_oit") - pl.col("_it")).alias("_moff")))
    if not parts:
        return pl.DataFrame(schema={"_tid": rk.schema["_tid"], "_moff": pl.Int64})
    way = (pl.concat(parts).group_by("_tid", "_way", "_moff").agg(pl.len().alias("_n"))
           .with_columns(pl.col("_n").sum().over("_tid", "_way").alias("_all"))
           .filter((pl.col("_n") >= MESSAGE_OFFSET_SHARE * pl.col("_all")) & (pl.col("_n") >= MESSAGE_OFFSET_MIN)))
    return (way.group_by("_tid").agg(pl.col("_moff").first(), pl.col("_moff").n_unique().alias("_k"))
            .filter(pl.col("_k") == 1).select(pl.col("_tid").cast(rk.schema["_tid"]), pl.col("_moff").cast(pl.Int64)))


def _with_message_offsets(off: pl.DataFrame, moff: pl.DataFrame) -> pl.DataFrame:
    """The threads' iteration offsets (``off``: ``_tid``, ``_off`` from behaviour) placed relative to each other
    by their logical messages (``moff`` of :func:`_message_offsets`): a thread with a message offset takes the
    threads' median behaviour offset plus its message offset's difference to the median message offset. Message
    names count from each trace's start, so they fix how the ranks lie to each other (one rank's trace cut
    mid-iteration, one whose behaviour is the same every iteration); where the two runs' windows start, the
    behaviour decides, as before."""
    if moff.height == 0 or off.height == 0:
        return off
    base = int(round(float(off.get_column("_off").median())))
    mid = int(round(float(moff.get_column("_moff").median())))
    return (off.join(moff, on="_tid", how="full", coalesce=True)
            .select("_tid", pl.coalesce(pl.col("_moff") - mid + base, "_off").cast(pl.Int64).alias("_off")))


def _behaviour(t: pl.DataFrame, features: Sequence[str]) -> np.ndarray:
    """The value that identifies an iteration's clock burst: the first feature (log1p counter), else log duration."""
    col = f"f_{features[0]}" if features else "ldur"
    return t.get_column(col).to_numpy().astype(np.float64)


@njit(cache=True, nogil=True)
def longest_chain(tid: np.ndarray, other: np.ndarray) -> np.ndarray:
    """Keep-mask of the longest strictly increasing chain of ``other`` within each run of equal ``tid`` (pairs
    sorted by thread, then reference row): patience sorting, O(n log n)."""
    n = tid.shape[0]
    keep = np.zeros(n, np.bool_)
    s = 0
    while s < n:
        e = s
        while e < n and tid[e] == tid[s]:
            e += 1
        m = e - s
        tails = np.empty(m, np.int64)  # index (into the run) of the smallest tail of each chain length
        prev = np.full(m, -1, np.int64)
        length = 0
        for k in range(m):
            v = other[s + k]
            lo, hi = 0, length
            while lo < hi:
                mid = (lo + hi) // 2
                if other[s + tails[mid]] < v:
                    lo = mid + 1
                else:
                    hi = mid
            if lo > 0:
                prev[k] = tails[lo - 1]
            tails[lo] = k
            if lo == length:
                length += 1
        if length > 0:
            k = tails[length - 1]
            while k >= 0:
                keep[s + k] = True
                k = prev[k]
        s = e
    return keep


def _plausible(ref: pl.DataFrame, other: pl.DataFrame, ri: np.ndarray, oj: np.ndarray, features: Sequence[str],
               max_feat: float, max_dur: float) -> np.ndarray:
    """Mask of pairs whose mean reference-counter log difference is at most ``max_feat`` and whose duration log
    difference is at most ``max_dur``."""
    if ri.size and features:
        cols = [f"f_{f}" for f in features]
        diff = np.abs(ref.select(cols).to_numpy()[ri] - other.select(cols).to_numpy()[oj])
        both = ~np.isnan(diff)
        feat = np.where(both.any(axis=1), np.nansum(diff, axis=1) / np.maximum(both.sum(axis=1), 1), 0.0)
    else:
        feat = np.zeros(ri.size)
    dur = np.abs(ref.get_column("ldur").to_numpy()[ri] - other.get_column("ldur").to_numpy()[oj])
    return (feat <= max_feat) & (dur <= max_dur)


#: rows of a run's keys joined at once (issue 23): the keys of two runs are joined a group of threads at a time
JOIN_ROWS = 250_000


def thread_groups(tid: pl.Series, rows: int | None = None) -> list[pl.Series]:
    """The threads of ``tid`` (a table's ``_tid`` column), in order, in consecutive groups of at most ``rows`` rows
    (default ``JOIN_ROWS``; a thread with more is a group of its own); one group when the table has at most ``rows``
    rows."""
    rows = JOIN_ROWS if rows is None else rows
    if tid.len() <= rows:
        return [tid.unique()]
    n = tid.value_counts(sort=False).sort(tid.name)
    size = n.get_column("count").to_numpy()
    group = np.zeros(size.size, np.int64)
    fill = 0
    for i, k in enumerate(size):  # one step per thread, not per row
        if fill and fill + k > rows:
            group[i:] += 1
            fill = 0
        fill += k
    threads = n.get_column(tid.name)
    return [threads.filter(pl.Series(group == g)) for g in range(int(group[-1]) + 1)]


def join_by_threads(left: pl.DataFrame, right: pl.DataFrame, on: list[str], rows: int | None = None) -> pl.DataFrame:
    """``left.join(right, on=on)`` (``on`` starting with ``_tid``), computed a group of threads at a time
    (:func:`thread_groups`: a join of two whole runs' keys held ~250 MB of hash tables and output at 1.3 M bursts
    per run). The same rows; their order, which a join does not keep, may differ."""
    groups = thread_groups(left.get_column("_tid"), rows)
    if len(groups) == 1:
        return left.join(right, on=on)
    return pl.concat([left.filter(pl.col("_tid").is_in(g.implode())).join(
        right.filter(pl.col("_tid").is_in(g.implode())), on=on) for g in groups])


def _join_pairs(rk: pl.DataFrame, ok: pl.DataFrame, on: list[str]) -> tuple[np.ndarray, np.ndarray]:
    p = join_by_threads(rk.select(*on, "_row"), ok.select(*on, pl.col("_row").alias("_orow")), on).sort("_row")
    return p.get_column("_row").to_numpy().astype(np.int64), p.get_column("_orow").to_numpy().astype(np.int64)


class KeyPairs(NamedTuple):
    """What :func:`key_pairs` finds (rows of the two prepared tables, int64 arrays)."""

    ref: np.ndarray  # reference rows of the key pairs, sorted
    other: np.ndarray  # their other rows
    chain: np.ndarray  # bool per key pair: in its thread's longest monotone chain (an anchor)
    msg_ref: np.ndarray  # reference rows of the message pairs
    msg_other: np.ndarray  # their other rows
    ref_iteration: np.ndarray  # iteration of every reference row (-1: no clock)
    other_iteration: np.ndarray  # iteration of every other row in the reference's numbering (-1: no clock)
    arrival_ref: np.ndarray  # reference rows of the arrival pairs (:func:`arrival_pairs`)
    arrival_other: np.ndarray  # their other rows
    undecidable: np.ndarray  # bool per reference row: in an iteration span whose counterpart the data cannot place
    line_ref: np.ndarray  # reference rows of the line pairs (:func:`line_pairs`)
    line_other: np.ndarray  # their other rows
    orphan_ref: np.ndarray  # bool per reference row: works on an arrived message the other run lacks (:func:`orphans`)
    orphan_other: np.ndarray  # bool per other row: idem, a message the reference lacks


def key_pairs(ref: pl.DataFrame, other: pl.DataFrame, features: Sequence[str], reject: tuple[float, float],
              substitute: tuple[float, float]) -> KeyPairs:
    """Key pairs of two prepared runs (rows of :func:`synthtrace.tracelib.merge.align.sequence_table` tables).

    Returns (reference rows, other rows, anchor mask, message reference rows, message other rows, iteration of
    every reference row, iteration of every other row in the reference's numbering; -1 without a clock): the key
    pairs
    sorted by reference row and which of them form each thread's longest monotone chain, kept when their mean
    reference-counter and duration log differences are within ``reject``; then the **message pairs**: bursts
    that start with the same message (``osig``: the partner and size of the opening call) as the same-rank burst of
    that message in the same iteration, within the tighter ``substitute`` limits. The other run's iterations are
    mapped to the reference's by one offset per thread, or, where the runs differ by whole iterations, by the
    iteration paths of :mod:`synthtrace.tracelib.merge.iterations` (whose undecidable spans are returned too).
    A message pair is the burst
    that processes a result from ``MPI_ANY_SOURCE`` whatever call happens to end it (the last result of a round
    may be processed before the round's collective in one run and before the next probe in the other).
    """
    clocks = _clock_signatures(ref, other)
    rk, ok = _logical_keys(ref, clocks), _logical_keys(other, clocks)
    r_long = ref.get_column("duration_ns").to_numpy() >= CLOCK_MIN_NS
    off = _offsets(rk, ok, _behaviour(ref, features), _behaviour(other, features), r_long)
    off = _with_message_offsets(off, _message_offsets(ref, other, rk, ok))
    paths = iteration_paths(rk, ok, ref, other, features, r_long, off)
    maps = paths.maps
    ok = (ok.join(off, on="_tid", how="left", maintain_order="left")
          .join(maps, left_on=["_tid", "_it"], right_on=["_tid", "_oit"], how="left", maintain_order="left")
          .with_columns(pl.when(pl.col("_tid").is_in(maps.get_column("_tid").unique().implode()))
                        .then(pl.col("_rit").fill_null(-1 - pl.col("_it")))
                        .otherwise(pl.col("_it") - pl.col("_off").fill_null(0)).alias("_it"))
          .drop("_rit"))
    undecidable = np.zeros(ref.height, bool)
    undecidable[paths.undecided] = True
    release_free_heap()  # what the clocks, offsets and iteration paths freed, before the keys' join
    ri, oj = _join_pairs(rk, ok, ON)
    if paths.ref.size:  # bursts of iterations that pair burst by burst, where their own work places them
        order = np.argsort(np.r_[ri, paths.ref], kind="stable")
        ri, oj = np.r_[ri, paths.ref][order], np.r_[oj, paths.other][order]
    keep = _plausible(ref, other, ri, oj, features, *reject)
    ri, oj = ri[keep], oj[keep]
    # a pair that crosses another of its iteration (messages completed in another order) anchors nothing: its
    # place among the iteration's key pairs differs between the runs
    it = rk.get_column("_it").to_numpy()[ri]
    tid = ref.get_column("_tid").to_numpy()[ri]
    # pairs are sorted by reference row: a pair's place among its iteration's pairs on the reference side is the
    # count of earlier pairs of the iteration; on the other side, of pairs whose other row is smaller
    ti = pl.DataFrame({"t": tid, "i": it})
    o_order = np.argsort(oj, kind="stable")
    o_place = np.empty(oj.size, np.int64)
    o_place[o_order] = rank_within(ti[o_order])
    straight = rank_within(ti) == o_place
    chain = np.zeros(ri.size, bool)
    chain[straight] = longest_chain(tid[straight], oj[straight])
    del it, tid, ti, o_order, o_place, straight  # the chain's transients: not held through the message pairs
    release_free_heap()  # and what the join and the chain freed, before the message pairs'
    msg = ["_tid", "_it", "osig", "_mrank"]
    # the keys' columns the message pairs read, not all of them, copied for the rows that start with a message
    rm, om = (k.select("_tid", "_it", "_row", pl.Series("osig", t.get_column("osig"))).filter(pl.col("osig") != 0)
              for k, t in ((rk, ref), (ok, other)))
    rm, om = (m.with_columns(pl.Series("_mrank", rank_within(m.select("_tid", "_it", "osig")))) for m in (rm, om))
    mi, mj = _join_pairs(rm, om, msg)
    keep = _plausible(ref, other, mi, mj, features, *substitute) if features else np.zeros(mi.size, bool)
    clocked = [(k.get_column("_clock").is_not_null() & k.get_column("_it").is_not_null()).to_numpy() for k in (rk, ok)]
    r_it = np.where(clocked[0], rk.get_column("_it").fill_null(-1).to_numpy(), -1)
    o_it = np.where(clocked[1], ok.get_column("_it").fill_null(-1).to_numpy(), -1)
    release_free_heap()  # and theirs, before the arrivals' joins and the orphans'
    ai, aj = arrival_pairs(ref, other, rk, ok)
    # one message's work: alike in both runs; its duration, where counters tell the work, only within the rejection
    # limit (a processing burst slowed by noise or a busy node)
    plausible = _plausible(ref, other, ai, aj, features, substitute[0], reject[1] if features else substitute[1])
    li, lj = line_pairs(rk, ok, ref, other)
    return KeyPairs(ri, oj, chain, mi[keep], mj[keep], r_it, o_it, ai[plausible], aj[plausible], undecidable, li, lj,
                    *orphans(ref, other, rk, ok))


def line_pairs(rk: pl.DataFrame, ok: pl.DataFrame, ref: pl.DataFrame,
               other: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(reference rows, other rows) of the bursts opened by the k-th receive of an iteration at a receive site that
    hears from one sender only, in both runs (``rsite`` / ``rline`` of
    :func:`synthtrace.tracelib.merge.align.sequence_table`; ``rk`` / ``ok``: the runs' logical keys, the other's
    iterations in the reference's numbering). MPI delivers one sender's messages to a receive in the order they
    were sent (non-overtaking), so there the k-th receive of the iteration is the k-th message whatever the
    timing: its place in the call sequence and its message name the same burst, and behaviour has nothing to
    decide. A task farm's worker is the case: how many tasks it gets in an iteration, and which, follows arrival,
    so its k-th task in one run may be work of another size than in the other; it is still the burst of that
    message (the logical identity). The bursts are ranked per call that closes them too: the message that ends
    the loop (a stop message from the same sender at the same site) opens other work than a task, and a worker
    with one task fewer gets its stop message as the k-th."""
    lines = []
    for k, t in ((rk, ref), (ok, other)):
        r = k.select("_tid", "_it", "_row", *[pl.Series(c, t.get_column(c)) for c in ("rsite", "rline", "lsig")])
        lines.append(r.filter(pl.col("rsite") != 0))
    # sites that hear from one sender in each run, the same one
    one = [x.group_by("_tid", "rsite").agg(pl.col("rline").n_unique().alias("_n"), pl.col("rline").first())
           .filter(pl.col("_n") == 1).drop("_n") for x in lines]
    one = one[0].join(one[1], on=["_tid", "rsite", "rline"]).select("_tid", "rline")
    on = ["_tid", "_it", "rline", "lsig", "_lrank"]
    r, o = (x.join(one, on=["_tid", "rline"]).filter(pl.col("_it").is_not_null() & (pl.col("_it") >= 0))
            .sort("_row") for x in lines)
    r, o = (x.with_columns(pl.Series("_lrank", rank_within(x.select("_tid", "_it", "rline", "lsig")), pl.Int64))
            for x in (r, o))
    ri, oj = _join_pairs(r, o, on)
    return _following(ri, oj, ref, other)


#: bursts after a line pair that follow it by program order (same signatures in both runs), at most
LINE_FOLLOW = 4


def _following(ri: np.ndarray, oj: np.ndarray, ref: pl.DataFrame,
               other: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The pairs (``ri``, ``oj``) and the bursts that follow each in both runs up to the next receive (``rsite``):
    the same calls in the same order after the k-th message (a progress report half-way through a task, then the
    result) are the same logical bursts, whatever their work."""
    r_tid, o_tid = ref.get_column("_tid").to_numpy(), other.get_column("_tid").to_numpy()
    r_sig, o_sig = ref.get_column("sig").to_numpy(), other.get_column("sig").to_numpy()
    r_free, o_free = ref.get_column("rsite").to_numpy() == 0, other.get_column("rsite").to_numpy() == 0
    out_r, out_o = [ri], [oj]
    cur_r, cur_o = ri, oj
    for _ in range(LINE_FOLLOW):
        nr, no = cur_r + 1, cur_o + 1
        ok = (nr < ref.height) & (no < other.height)
        nr, no, cur_r, cur_o = nr[ok], no[ok], cur_r[ok], cur_o[ok]
        ok = ((r_tid[nr] == r_tid[cur_r]) & (o_tid[no] == o_tid[cur_o]) & (r_sig[nr] == o_sig[no])
              & r_free[nr] & o_free[no])
        cur_r, cur_o = nr[ok], no[ok]
        if cur_r.size == 0:
            break
        out_r.append(cur_r)
        out_o.append(cur_o)
    ri, oj = np.concatenate(out_r), np.concatenate(out_o)
    order = np.argsort(ri, kind="stable")
    return ri[order], oj[order]


def arrival_pairs(ref: pl.DataFrame, other: pl.DataFrame, rk: pl.DataFrame,
                  ok: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(reference rows, other rows) of the bursts that work on the same arrived message: opened by a call that
    completed one message (``achan``, its channel: :func:`synthtrace.tracelib.merge.message_graph.logical_ends`),
    the same-rank one of that channel in the same iteration (``rk`` / ``ok``: the two runs' logical keys, the
    other's iterations in the reference's numbering). Which message an ``MPI_Waitany`` or an ``MPI_ANY_SOURCE``
    receive completes depends on arrival; the work after it is that message's (MPI's non-overtaking rule orders
    the messages of one channel, so the k-th of a channel in an iteration is the same message in both runs).

    [helper merge-pieces] A burst whose message both runs name (``amsg``: the logical message, channel and k over
    the run) is paired by that name, whatever iteration each run's clock puts it in, on channels that delivered as
    many such messages to the thread in both runs: a result that a fast rank sent early is received in an earlier
    round of the receiver's loop in one run than in the other, and a clock that ticks at an arrival-ordered call
    misplaces a round's end. The others by their rank on the channel in the iteration (traces chopped at other
    points number a channel's messages from another k; an extra iteration numbers the messages after it one
    further)."""
    # only on a channel that delivered as many messages to the thread in both runs: where one run has a message
    # more (an extra iteration), the messages after it are numbered one further and k names another message
    named = [k.select("_tid", "_row", *[pl.Series(c, t.get_column(c)) for c in ("amsg", "achan")])
             .filter(pl.col("amsg") != 0).unique(["_tid", "amsg"], keep="none") for k, t in ((rk, ref), (ok, other))]
    same = (named[0].group_by("_tid", "achan").len().join(named[1].group_by("_tid", "achan").len(),
                                                          on=["_tid", "achan"])
            .filter(pl.col("len") == pl.col("len_right")).select("_tid", "achan"))
    named = [n.join(same, on=["_tid", "achan"]) for n in named]
    ni, nj = _join_pairs(*named, ["_tid", "amsg"])
    ra, oa = _arrivals(ref, rk), _arrivals(other, ok)
    ci, cj = _join_pairs(ra, oa, ARRIVAL)
    free = ~np.isin(ci, ni) & ~np.isin(cj, nj)
    ri, oj = np.r_[ni, ci[free]], np.r_[nj, cj[free]]
    order = np.argsort(ri, kind="stable")
    return ri[order], oj[order]


#: an arrived message in an iteration: its channel and its rank on the channel in the iteration
ARRIVAL = ["_tid", "_it", "achan", "_arank"]


def _arrivals(t: pl.DataFrame, keys: pl.DataFrame) -> pl.DataFrame:
    """The rows of ``t`` opened by a call that completed one message (``achan`` != 0) with their ``ARRIVAL`` key
    (``keys``: the run's logical keys, iterations in the reference's numbering)."""
    a = (keys.select("_tid", "_it", "_row", *[pl.Series(c, t.get_column(c)) for c in ("achan", "amsg")])
         .filter(pl.col("achan") != 0))
    return a.with_columns(pl.Series("_arank", rank_within(a.select("_tid", "_it", "achan")), pl.Int64))


def orphans(ref: pl.DataFrame, other: pl.DataFrame, rk: pl.DataFrame,
            ok: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Bool per reference row and per other row: the burst works on an arrived message that the other run does not
    have, a message of a channel (``achan``) that both runs use in that iteration, but fewer times in the other.
    A deterministic program sends the same messages in every run; a task farm does not: which worker takes how
    many tasks follows arrival, so the master gets a fourth result from one worker in one run and from another
    in the other. The work on such a message has no counterpart (the other run's burst at that place works on
    another message). A message the other run names too (``amsg``: channel and k over the run) is no orphan: a
    rank that ran ahead had its next message received one iteration early there."""
    ra, oa = _arrivals(ref, rk), _arrivals(other, ok)
    both = (ra.select("_tid", "_it", "achan").unique()
            .join(oa.select("_tid", "_it", "achan").unique(), on=["_tid", "_it", "achan"]))
    out = []
    for mine, theirs, height in ((ra, oa, ref.height), (oa, ra, other.height)):
        rows = (mine.join(both, on=["_tid", "_it", "achan"]).join(theirs.select(ARRIVAL), on=ARRIVAL, how="anti")
                .join(theirs.select("_tid", "amsg"), on=["_tid", "amsg"], how="anti")
                .get_column("_row").to_numpy())
        mask = np.zeros(height, bool)
        mask[rows] = True
        out.append(mask)
    return out[0], out[1]


def force_pairs(out: np.ndarray, ri: np.ndarray, oj: np.ndarray) -> np.ndarray:
    """``out`` (other row per reference row, -1 unmatched) with every pair (``ri``, ``oj``) made a match: the
    reference row that held ``oj`` takes the row ``ri`` held (two bursts completed in the other order trade
    places), so no other row is matched twice."""
    out = out.copy()
    _force(out, ri.astype(np.int64), oj.astype(np.int64))
    return out


@njit(cache=True, nogil=True)
def _force(out: np.ndarray, ri: np.ndarray, oj: np.ndarray) -> None:
    size = oj.max() + 1 if oj.size else 0
    for v in out:
        size = max(size, v + 1)
    owner = np.full(size, -1, np.int64)
    for i in range(out.shape[0]):
        if out[i] >= 0:
            owner[out[i]] = i
    for k in range(ri.shape[0]):
        i, j = ri[k], oj[k]
        old = out[i]
        if old == j:
            continue
        holder = owner[j]
        out[i] = j
        owner[j] = i
        if old >= 0:
            owner[old] = -1
        if holder >= 0 and holder != i:
            out[holder] = old
            if old >= 0:
                owner[old] = holder


def key_repair(out: np.ndarray, ri: np.ndarray, oj: np.ndarray) -> np.ndarray:
    """``out`` (other row per reference row, -1 unmatched) with the pairs (``ri``, ``oj``) restored where the
    aligner left both bursts unmatched: a logical position named by structure, where behaviour found nothing
    better. (Where it paired them otherwise, e.g. by position across an ``MPI_ANY_SOURCE`` receive, behaviour
    already judged, and its choice stands.)"""
    out = out.copy()
    taken = np.zeros(max(int(oj.max(initial=-1)), int(out.max(initial=-1))) + 1, bool)
    taken[out[out >= 0]] = True
    take = (out[ri] < 0) & ~taken[oj]
    out[ri[take]] = oj[take]
    return out
