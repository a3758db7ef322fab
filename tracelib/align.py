"""Align the burst sequences of two runs of the same program by MPI structure and timing (DESIGN §6).

For every thread (appl, task, thread) the bursts of the *other* run are matched to the bursts of the *reference*
run. A burst is described by

- its **signature**: the MPI call that closes it (call name, call site, communicator, peer, bytes sent/received),
  from the bursts joined with the MPI calls on (thread, burst end == call start); the **loose signature** drops
  peer and bytes (an ``MPI_ANY_SOURCE`` receive or ``MPI_Waitany`` completes messages in a run-dependent order);
- its **behaviour**: ``log1p`` of the reference counters (counters recorded by both runs, e.g. PAPI_TOT_INS),
  ``log1p`` of its duration in microseconds, and its relative position (0..1) in its phase — the bursts between
  two collectives on the world communicator.

The alignment works in three levels so its cost stays near-linear in the number of bursts:

1. **identical sequences** (same length, same signature at every position) align one-to-one (vectorised in
   Polars, no dynamic programming at all);
2. otherwise the thread is split at its **anchors**, the bursts closed by a collective on the world communicator.
   Equal anchor sequences pair up k-th to k-th; otherwise the anchor sequences themselves are aligned (a small
   dynamic programme over anchors, scored by signature and by the size of the segment before each anchor);
3. the **segments** between paired anchors are aligned one by one: identical segments one-to-one, the others by a
   banded Needleman-Wunsch dynamic programme whose match cost is structural (loose signatures must agree; a
   differing peer/size costs ``w_peer``) plus behavioural (reference counters, duration, phase position), with a
   per-burst gap cost that is small for tiny bursts (polling iterations of ``MPI_Test``/``MPI_Iprobe`` loops) and
   large for long ones, a match bonus, and a hard rejection of implausible pairs (reference counters or duration
   too far apart). The first and last segments of a thread have free end gaps: chopped traces start and end at
   different points of the execution.

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
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl
from numba import njit, prange

from tracelib.errors import BadInputError
from tracelib.schema import THREAD_KEYS

SIG_SEED = 0x5EED_5167  # seed of the signature hashes (stable within one Polars version, hashes are never stored)
_INF = 1e300


class AlignmentInputError(BadInputError):
    """A table handed to the aligner lacks the columns it needs."""


@dataclass(frozen=True)
class AlignConfig:
    """Weights of the alignment cost. Costs are dimensionless; ``log`` differences are natural logs.

    A pair (reference burst i, other burst j) with equal loose signatures costs
    ``w_peer * [signatures differ] + w_feat * mean_k |f_ik - f_jk| + w_dur * |ldur_i - ldur_j|
    + w_pos * |pos_i - pos_j| - bonus`` where ``f`` are ``log1p`` reference counters, ``ldur`` is
    ``log1p(duration / 1 us)`` and ``pos`` the relative position (0..1) in the phase. A pair whose loose signatures
    differ, whose mean reference-counter log difference exceeds ``reject_feat`` or whose duration log difference
    exceeds ``reject_dur`` is never matched. Leaving a burst unmatched costs
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
    band: int = 32  # half-width of the DP band beyond the length difference of a segment (bursts)
    max_cells: int = 20_000_000  # DP cells per segment before the band is narrowed
    # timing-only matching (no reference counter in common): duration weighs more, scores are lowered
    w_dur_timing_only: float = 1.0
    timing_only_factor: float = 0.6
    # anchors: cost of pairing two collectives = w_peer * [signatures differ] + |segment size log diffs|
    anchor_bonus: float = 3.0
    anchor_gap: float = 0.5
    # score of a match: struct factor (1 same signature, peer_score same loose signature) * exp(-behaviour cost)
    peer_score: float = 0.8


# --------------------------------------------------------------------------------------------- preparation
def world_communicators(calls: pl.DataFrame) -> pl.DataFrame:
    """Per appl, the communicators (``comm``, NULL read as -1) of collectives that every task of the appl calls."""
    coll = calls.filter(pl.col("mpi_kind") == "collective").select("appl", "task", pl.col("comm").fill_null(-1))
    n_tasks = calls.group_by("appl").agg(pl.col("task").n_unique().alias("_n"))
    return (coll.group_by("appl", "comm").agg(pl.col("task").n_unique().alias("_k"))
            .join(n_tasks, on="appl").filter(pl.col("_k") == pl.col("_n")).select("appl", "comm"))


def sequence_table(bursts: pl.DataFrame, calls: pl.DataFrame, features: Sequence[str],
                   config: AlignConfig = AlignConfig()) -> pl.DataFrame:
    """One run's bursts prepared for alignment, sorted by thread and ``burst_seq``.

    Columns: appl, task, thread, burst_seq, start_ns, end_ns, duration_ns (ns), mpi_call, peer, bytes_sent,
    bytes_recv (bytes), sig, lsig (UInt64 signature hashes), anchor (closed by a world collective), phase (number
    of anchors before the burst on its thread), pos (relative start position in the phase, 0..1), ldur
    (``log1p(duration / 1 us)``), gap (cost of leaving it unmatched), seg_n / seg_work (``log1p`` of the number of
    bursts and of the work — the first feature counter, else microseconds — of the phase that an anchor closes),
    and ``f_<counter>`` = ``log1p(counter)`` (NaN when not recorded) for each of ``features``.
    """
    need = {*THREAD_KEYS, "burst_seq", "start_ns", "end_ns", "duration_ns", "mpi_call", "call_site"}
    if missing := need - set(bursts.columns):
        raise AlignmentInputError(f"bursts table lacks columns {sorted(missing)}")
    if missing := [f for f in features if f not in bursts.columns]:
        raise AlignmentInputError(f"bursts table lacks counters {missing}")
    call_cols = {"mpi_kind": pl.String, "peer": pl.Int32, "bytes_sent": pl.Int64, "bytes_recv": pl.Int64,
                 "comm": pl.Int64}
    if calls.height:
        closing = (calls.sort([*THREAD_KEYS, "call_seq"])
                   .unique(subset=[*THREAD_KEYS, "start_ns"], keep="first", maintain_order=True)
                   .select(*[pl.col(k).cast(pl.Int32) for k in THREAD_KEYS], pl.col("start_ns").alias("end_ns"),
                           *[pl.col(c).cast(t) for c, t in call_cols.items()]))
        world = world_communicators(calls)
    else:
        closing = pl.DataFrame(schema={**dict.fromkeys(THREAD_KEYS, pl.Int32), "end_ns": pl.Int64, **call_cols})
        world = pl.DataFrame(schema={"appl": pl.Int32, "comm": pl.Int64})
    work = pl.col("_c_0").cast(pl.Float64) if features else pl.col("duration_ns") / 1e3
    thr = THREAD_KEYS
    b = (bursts.select(*[pl.col(k).cast(pl.Int32) for k in thr], "burst_seq", "start_ns", "end_ns", "duration_ns",
                       "mpi_call", "call_site", *[pl.col(f).alias(f"_c_{i}") for i, f in enumerate(features)])
         .sort([*thr, "burst_seq"])
         .join(closing, on=[*thr, "end_ns"], how="left", maintain_order="left")
         .with_columns(pl.col("comm").fill_null(-1).alias("_wcomm"))
         .join(world.select("appl", pl.col("comm").alias("_wcomm"), pl.lit(True).alias("_world")),
               on=["appl", "_wcomm"], how="left", maintain_order="left")
         .with_columns(
             pl.struct("mpi_call", "call_site", "comm", "peer", "bytes_sent", "bytes_recv").hash(SIG_SEED).alias("sig"),
             pl.struct("mpi_call", "call_site", "comm").hash(SIG_SEED).alias("lsig"),
             ((pl.col("mpi_kind") == "collective") & pl.col("_world").fill_null(False)).fill_null(False).alias("anchor"),
         )
         .with_columns((pl.col("anchor").cast(pl.Int64).cum_sum() - pl.col("anchor").cast(pl.Int64)).over(thr).alias("phase")))
    ph = [*thr, "phase"]
    t0 = pl.col("start_ns").min().over(ph)
    t1 = pl.col("end_ns").max().over(ph)
    b = b.with_columns(
        ((pl.col("start_ns") - t0) / (t1 - t0).clip(lower_bound=1)).cast(pl.Float64).alias("pos"),
        (pl.col("duration_ns").cast(pl.Float64) / 1e3).log1p().alias("ldur"),
        (config.gap_base + config.gap_size * pl.col("duration_ns") / (pl.col("duration_ns") + config.gap_half_ns)).alias("gap"),
        pl.len().over(ph).cast(pl.Float64).log1p().alias("seg_n"),
        work.sum().over(ph).log1p().alias("seg_work"),
        *[pl.col(f"_c_{i}").cast(pl.Float64).log1p().fill_null(float("nan")).alias(f"f_{f}") for i, f in enumerate(features)],
    )
    return b.drop("_world", "_wcomm", *[f"_c_{i}" for i in range(len(features))], "comm", "call_site", "mpi_kind")


# --------------------------------------------------------------------------------------------- kernel
@njit(cache=True, nogil=True)
def _pair_cost(i, j, rs, rl, rf, rd, rp, os_, ol, of, od, op, prm):
    """Cost of matching reference item i with other item j (``_INF`` when not allowed); see AlignConfig."""
    if rl[i] != ol[j]:
        return _INF
    bonus, w_peer, w_feat, w_dur, w_pos, rej_feat, rej_dur = prm[0], prm[1], prm[2], prm[3], prm[4], prm[5], prm[6]
    c = 0.0 if rs[i] == os_[j] else w_peer
    nf = rf.shape[1]
    if nf > 0:
        tot = 0.0
        k = 0
        for f in range(nf):
            a = rf[i, f]
            b = of[j, f]
            if a == a and b == b:  # both not NaN
                tot += abs(a - b)
                k += 1
        if k > 0:
            d = tot / k
            if d > rej_feat:
                return _INF
            c += w_feat * d
    dd = abs(rd[i] - od[j])
    if dd > rej_dur:
        return _INF
    c += w_dur * dd + w_pos * abs(rp[i] - op[j])
    return c - bonus


@njit(cache=True, nogil=True)
def _dp(rs, rl, rf, rd, rp, rg, os_, ol, of, od, op, og, free_start, free_end, mode, band, max_cells, prm, out):
    """Banded alignment of reference items (r*) to other items (o*); writes matched other index or -1 to ``out``.

    ``mode`` places the band: 0 along the proportional diagonal (both ends anchored), 1 along the diagonal ending
    at the bottom-right corner (free start), 2 along the diagonal starting at the top-left corner (free end).
    Returns the optimal cost.
    """
    n = rs.shape[0]
    m = os_.shape[0]
    for i in range(n):
        out[i] = -1
    if n == 0 or m == 0:
        return 0.0
    w = band + abs(n - m)
    if (n + 1) * (2 * w + 1) > max_cells:
        w = max(max_cells // (n + 1) // 2, band, m // n + 2)
    width = 2 * w + 1
    lo = np.empty(n + 1, np.int64)
    hi = np.empty(n + 1, np.int64)
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
    ptr = np.full((n + 1, width), 255, np.uint8)
    prev = np.full(width, _INF)
    cur = np.full(width, _INF)
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
                        c = _pair_cost(i - 1, j - 1, rs, rl, rf, rd, rp, os_, ol, of, od, op, prm)
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


@njit(cache=True, nogil=True)
def _align_segment(a0, a1, b0, b1, rs, rl, rf, rd, rp, rg, os_, ol, of, od, op, og,
                   free_start, free_end, mode, band, max_cells, prm, out):
    """Align reference rows [a0, a1) to other rows [b0, b1); ``out`` gets absolute other indices or -1."""
    n = a1 - a0
    m = b1 - b0
    if n <= 0:
        return
    if n == m:
        same = True
        for k in range(n):
            if rs[a0 + k] != os_[b0 + k]:
                same = False
                break
        if same:
            for k in range(n):
                out[a0 + k] = b0 + k
            return
    if m <= 0:
        return
    loc = np.empty(n, np.int64)
    _dp(rs[a0:a1], rl[a0:a1], rf[a0:a1], rd[a0:a1], rp[a0:a1], rg[a0:a1],
        os_[b0:b1], ol[b0:b1], of[b0:b1], od[b0:b1], op[b0:b1], og[b0:b1],
        free_start, free_end, mode, band, max_cells, prm, loc)
    for k in range(n):
        out[a0 + k] = b0 + loc[k] if loc[k] >= 0 else -1


@njit(cache=True, parallel=True)
def _align_threads(r_off, o_off, rs, rl, ra, rf, rd, rp, rg, rseg, os_, ol, oa, of, od, op, og, oseg,
                   band, max_cells, prm, aprm, anchor_gap, out):
    """Align every thread t: reference rows r_off[t]:r_off[t+1] to other rows o_off[t]:o_off[t+1].

    ``out[i]`` receives the absolute other row matched to reference row i, or -1.
    """
    n_threads = r_off.shape[0] - 1
    for t in prange(n_threads):
        a0 = r_off[t]
        a1 = r_off[t + 1]
        b0 = o_off[t]
        b1 = o_off[t + 1]
        n = a1 - a0
        m = b1 - b0
        for i in range(a0, a1):
            out[i] = -1
        if n == 0 or m == 0:
            continue
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
        # anchors
        na = 0
        for i in range(a0, a1):
            if ra[i]:
                na += 1
        nb = 0
        for j in range(b0, b1):
            if oa[j]:
                nb += 1
        ia = np.empty(na, np.int64)
        ib = np.empty(nb, np.int64)
        k = 0
        for i in range(a0, a1):
            if ra[i]:
                ia[k] = i
                k += 1
        k = 0
        for j in range(b0, b1):
            if oa[j]:
                ib[k] = j
                k += 1
        pair = np.full(na, -1, np.int64)  # absolute other row of the paired anchor
        if na > 0 and nb > 0:
            same = na == nb
            if same:
                for k in range(na):
                    if rs[ia[k]] != os_[ib[k]]:
                        same = False
                        break
            if same:
                for k in range(na):
                    pair[k] = ib[k]
            else:
                zr = np.zeros(na)
                zo = np.zeros(nb)
                gr = np.full(na, anchor_gap)
                go = np.full(nb, anchor_gap)
                loc = np.empty(na, np.int64)
                _dp(rs[ia], rl[ia], rseg[ia], zr, zr, gr, os_[ib], ol[ib], oseg[ib], zo, zo, go,
                    True, True, 0, band, max_cells, aprm, loc)
                for k in range(na):
                    if loc[k] >= 0:
                        pair[k] = ib[loc[k]]
        # segments between paired anchors
        pa = a0 - 1
        pb = b0 - 1
        first = True
        for k in range(na):
            if pair[k] < 0:
                continue
            _align_segment(pa + 1, ia[k], pb + 1, pair[k], rs, rl, rf, rd, rp, rg, os_, ol, of, od, op, og,
                           first, False, 1 if first else 0, band, max_cells, prm, out)
            out[ia[k]] = pair[k]
            pa = ia[k]
            pb = pair[k]
            first = False
        _align_segment(pa + 1, a1, pb + 1, b1, rs, rl, rf, rd, rp, rg, os_, ol, of, od, op, og,
                       first, True, 0 if first else 2, band, max_cells, prm, out)


# --------------------------------------------------------------------------------------------- driver
def _thread_offsets(keys: pl.DataFrame, threads: pl.DataFrame) -> np.ndarray:
    """Row offsets of each of ``threads`` (in order) in ``keys`` (sorted by thread), as int64[len(threads)+1]."""
    counts = threads.join(keys.group_by(THREAD_KEYS).len(), on=THREAD_KEYS, how="left", maintain_order="left")
    return np.concatenate([[0], np.cumsum(counts.get_column("len").fill_null(0).to_numpy())]).astype(np.int64)


def _arrays(t: pl.DataFrame, features: Sequence[str]) -> tuple:
    feats = (t.select([f"f_{f}" for f in features]).to_numpy().astype(np.float64, copy=False)
             if features else np.zeros((t.height, 0)))
    return (t.get_column("sig").to_numpy().view(np.int64), t.get_column("lsig").to_numpy().view(np.int64),
            t.get_column("anchor").to_numpy(), np.ascontiguousarray(feats),
            t.get_column("ldur").to_numpy().astype(np.float64), t.get_column("pos").to_numpy().astype(np.float64),
            t.get_column("gap").to_numpy().astype(np.float64),
            np.ascontiguousarray(t.select("seg_n", "seg_work").to_numpy().astype(np.float64)))


def align_runs(ref: pl.DataFrame, other: pl.DataFrame, features: Sequence[str],
               config: AlignConfig = AlignConfig()) -> pl.DataFrame:
    """Match the bursts of ``other`` to those of ``ref`` (both from :func:`sequence_table` with ``features``).

    ``features`` are the reference counters recorded by both runs; when empty, matching uses structure and timing
    only and every score is multiplied by ``config.timing_only_factor``.

    Returns one row per reference burst: appl, task, thread, burst_seq, other_seq (NULL when unmatched),
    match_score (Float64 in [0, 1], NULL when unmatched), same_sig (the two closing calls agree on call, site,
    communicator, peer and bytes; NULL when unmatched).
    """
    timing_only = len(features) == 0
    threads = ref.select(THREAD_KEYS).unique(maintain_order=True)
    # only threads present in both runs are aligned; the rest stays unmatched
    o_threads = other.select(THREAD_KEYS).unique()
    threads = threads.join(o_threads, on=THREAD_KEYS, how="semi", maintain_order="left")
    r = ref.join(threads, on=THREAD_KEYS, how="semi", maintain_order="left")
    o = other.join(threads, on=THREAD_KEYS, how="semi", maintain_order="left")
    r_off = _thread_offsets(r, threads)
    o_off = _thread_offsets(o, threads)
    rs, rl, ra, rf, rd, rp, rg, rseg = _arrays(r, features)
    os_, ol, oa, of, od, op, og, oseg = _arrays(o, features)
    w_dur = config.w_dur_timing_only if timing_only else config.w_dur
    prm = np.array([config.bonus, config.w_peer, config.w_feat, w_dur, config.w_pos, config.reject_feat,
                    config.reject_dur], np.float64)
    aprm = np.array([config.anchor_bonus, config.w_peer, 1.0, 0.0, 0.0, _INF, _INF], np.float64)
    out = np.empty(r.height, np.int64)
    _align_threads(r_off, o_off, rs, rl, ra, rf, rd, rp, rg, rseg, os_, ol, oa, of, od, op, og, oseg,
                   config.band, config.max_cells, prm, aprm, config.anchor_gap, out)
    o_seq = o.get_column("burst_seq").to_numpy()
    other_seq = np.where(out >= 0, o_seq[np.maximum(out, 0)], -1)
    hit = pl.Series(out >= 0)
    matched = r.select(*THREAD_KEYS, "burst_seq").with_columns(
        pl.when(hit).then(pl.Series(other_seq)).alias("other_seq"), pl.when(hit).then(pl.Series(out)).alias("_o"))
    scored = _score(r, o, matched, features, config, timing_only)
    full = ref.select(*THREAD_KEYS, "burst_seq").join(scored, on=[*THREAD_KEYS, "burst_seq"], how="left",
                                                      maintain_order="left")
    return full


def _score(r: pl.DataFrame, o: pl.DataFrame, matched: pl.DataFrame, features: Sequence[str], config: AlignConfig,
           timing_only: bool) -> pl.DataFrame:
    """Match score in [0, 1]: structural factor times exp(-behaviour cost) (see :class:`AlignConfig`)."""
    cols = ["sig", "lsig", "ldur", "pos", *[f"f_{f}" for f in features]]
    oo = o.select(cols).with_row_index("_o").with_columns(pl.col("_o").cast(pl.Int64))
    j = pl.concat([matched, r.select(cols)], how="horizontal").join(
        oo, on="_o", how="left", suffix="_o", maintain_order="left")
    w_dur = config.w_dur_timing_only if timing_only else config.w_dur
    d_feat = (pl.mean_horizontal([(pl.col(f"f_{f}") - pl.col(f"f_{f}_o")).abs().fill_nan(None) for f in features])
              .fill_null(0.0) if features else pl.lit(0.0))
    cost = (config.w_feat * d_feat + w_dur * (pl.col("ldur") - pl.col("ldur_o")).abs()
            + config.w_pos * (pl.col("pos") - pl.col("pos_o")).abs())
    same = pl.col("sig") == pl.col("sig_o")
    struct = pl.when(same).then(1.0).when(pl.col("lsig") == pl.col("lsig_o")).then(config.peer_score).otherwise(0.3)
    factor = config.timing_only_factor if timing_only else 1.0
    score = pl.when(pl.col("_o").is_null()).then(None).otherwise((struct * (-cost).exp() * factor).clip(0.0, 1.0))
    return j.select(*THREAD_KEYS, "burst_seq", "other_seq", score.alias("match_score"),
                    pl.when(pl.col("_o").is_null()).then(None).otherwise(same).alias("same_sig"))
