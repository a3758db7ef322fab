"""Iterations one run has and the other has not (issue 22 item 5): where the gap lies, or that it cannot be told.

An inner solver that converges one iteration later, a time step rejected and redone, a run stopped by its time
budget: the two runs' iteration clocks (:mod:`synthtrace.tracelib.merge.anchors`) then count different numbers of
iterations, and one offset per thread shifts every iteration on one side of the gap. The gap is placed by what
the iterations *do*:

1. **costs**: for every reference iteration k of a thread and every offset s around the thread's constant offset
   d0 (other iteration k + d0 + s), the mean ``|log|`` difference of the reference counters (duration without a
   common counter) over the long bursts that hold the same logical position (signature, rank in the iteration) in
   both iterations, in units of the thread's noise (the median over its iterations of the best offset's cost);
2. **ranks together**: the logical messages tie the ranks: a rank cannot do an extra iteration of a loop that
   exchanges messages without its partners doing it too, so the threads whose messages go between their
   iteration numbers with a constant lag form a group whose costs are summed on one iteration axis, and one path
   serves them all (**cross-rank anchors**: a rank never shifts by an iteration while its partners do not);
3. **path**: the cheapest path over offsets (Viterbi; ``ITERATION_GAP`` per thread for every iteration one run
   has and the other has not, at the ends too, so that nothing is free to be placed where it costs nothing);
4. **decided or not**: an iteration is *decided* when one offset fits clearly better than every other (its
   work or rates differ from its neighbours'); between two decided iterations of the same offset the path keeps
   that offset (a run of identical iterations never hides a pair of gaps), between two of different offsets the
   gap lies somewhere in the undecided stretch between them: the data cannot say where, the stretch is an
   **undecidable span** (so is a stretch at either end when the iteration counts leave an iteration to place).
   A reference iteration left without counterpart (the other run lacks it) is interchangeable with its alike
   neighbours: those are in the span too;
5. **each thread's own place**: tied threads change offset at one logical place, but each thread's clock ticks
   at its own call of the iteration, so the clock iteration that holds a decided change may lie one later or
   earlier on one thread than on the group's axis: the thread's own costs move its change
   (:func:`thread_shift`), its own straddling iteration pairs burst by burst, and its bursts are asked apart from
   threads at another place on the axis.

The result: per thread, other iteration -> reference iteration where the path leaves the constant offset, and the
reference iterations of the undecidable spans (their bursts are marked ``merge_matches.ambiguous``, the verdict
says how many).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import polars as pl
from numba import njit

from synthtrace.tracelib.merge.noise import NOISE_FLOOR  # an iteration's cost is noise below it (log units)

#: offsets searched beyond the iteration-count difference (iterations)
ITERATION_SLACK = 2
#: at most this many iterations of difference are placed (beyond: one offset, as before)
MAX_DIFFERENCE = 16
#: a thread with fewer iterations than this keeps one offset (its noise cannot be told from a few iterations: a
#: clock that ticks once in many of the program's iterations)
MIN_ITERATIONS = 8
#: cost of an iteration one run has and the other has not, per thread, in noise units
ITERATION_GAP = 6.0
#: a thread's iteration cost counts at most this many noise units (one disturbed iteration never decides alone)
COST_CAP = 30.0
#: an iteration is decided when its best offset's mean cost is at most this share of the next best's ...
DECIDE_RATIO = 0.5
#: ... and below it by at least this many noise units (divided by the square root of the threads judged)
DECIDE_MARGIN = 2.0
#: a thread's own iterations move a decided change of offset by at most this many iterations from its group's place
MAX_THREAD_SHIFT = 2
#: two offsets fit an iteration alike only when the better one fits: a mean cost per thread of at most this many
#: noise units (a matched iteration costs about 1), or, for one burst, at most this many
FIT_ITERATION, FIT_BURST = 3.0, 5.0


class IterationPaths(NamedTuple):
    """What :func:`iteration_paths` finds."""

    maps: pl.DataFrame  # _tid, _oit (other iteration), _rit (its reference iteration); threads whose path moved
    undecided: np.ndarray  # reference rows (int64) in an undecidable span whose own behaviour does not place them
    ref: np.ndarray  # reference rows of the pairs bursts of iterations that pair burst by burst make
    other: np.ndarray  # their other rows


def behaviour(t: pl.DataFrame, features: Sequence[str]) -> np.ndarray:
    """(rows, k) values that tell one iteration's burst from another's: the ``log1p`` reference counters, else the
    log duration."""
    cols = [f"f_{f}" for f in features] or ["ldur"]
    return np.ascontiguousarray(t.select(cols).to_numpy().astype(np.float64))


class Noise(NamedTuple):
    """A thread's noise: per behaviour column (``_tid``, ``_d0``...) and of their sum (``_tid``, ``_c``)."""

    columns: pl.DataFrame
    total: pl.DataFrame


def _judged(rk: pl.DataFrame, r_long: np.ndarray) -> pl.DataFrame:
    """The reference rows that judge iterations: long bursts of threads with a clock."""
    return (rk.select("_tid", pl.col("_it").cast(pl.Int64), "sig", "_rank", "_row", "_clock")
            .with_columns(pl.Series("_long", r_long))
            .filter(pl.col("_clock").is_not_null() & pl.col("_long")).drop("_clock", "_long"))


def _others(ok: pl.DataFrame, off: pl.DataFrame) -> pl.DataFrame:
    """The other run's clocked rows, their iteration counted in the reference's by the thread's offset ``_off``."""
    return (ok.filter(pl.col("_clock").is_not_null())
            .select("_tid", pl.col("_it").cast(pl.Int64), "sig", "_rank", pl.col("_row").alias("_orow"))
            .join(off, on="_tid").with_columns(pl.col("_it") - pl.col("_off")).drop("_off"))


def _differences(r: pl.DataFrame, o: pl.DataFrame, s: int, r_val: np.ndarray,
                 o_val: np.ndarray) -> pl.DataFrame:
    """Rows of ``r`` whose logical position the other iteration k + ``s`` holds, with ``_d<i>`` the ``|difference|``
    of behaviour column i (null when either is not recorded)."""
    p = r.select("_tid", "_it", "sig", "_rank", "_row").join(o.with_columns(pl.col("_it") - s),
                                                             on=["_tid", "_it", "sig", "_rank"])
    d = np.abs(r_val[p.get_column("_row").to_numpy()] - o_val[p.get_column("_orow").to_numpy()])
    return p.with_columns(pl.Series(f"_d{i}", d[:, i]).fill_nan(None) for i in range(r_val.shape[1]))


def _in_noise_units(c: pl.DataFrame, noise: Noise) -> pl.DataFrame:
    """``c`` with ``_c``: its ``_d<i>`` columns in noise units (capped), summed, in units of the sum's noise."""
    cols = [x for x in noise.columns.columns if x != "_tid"]
    c = c.join(noise.columns.rename({x: f"{x}_n" for x in cols}), on="_tid")
    c = c.with_columns((pl.col(x) / pl.col(f"{x}_n")).clip(upper_bound=COST_CAP) for x in cols)
    c = c.with_columns(pl.when(pl.any_horizontal(pl.col(cols).is_not_null())).then(pl.sum_horizontal(cols))
                       .alias("_c"))
    return (c.join(noise.total.rename({"_c": "_cn"}), on="_tid")
            .with_columns((pl.col("_c") / pl.col("_cn")).clip(upper_bound=COST_CAP)))


def _pair_costs(r: pl.DataFrame, o: pl.DataFrame, r_val: np.ndarray, o_val: np.ndarray,
                states: range) -> tuple[pl.DataFrame, Noise]:
    """Per (``_tid``, ``_it`` reference iteration, ``_s`` offset beyond the thread's constant one) how differently
    the other iteration k + s behaves, ``_c`` in noise units, and the threads' :class:`Noise`: over the long
    reference bursts (``r``, :func:`_judged`) whose logical position (``sig``, ``_rank``) that other iteration
    holds too (``o``, :func:`_others`), per behaviour column the mean ``|difference|`` divided by the thread's noise
    in that column (the median over its iterations of the best offset's mean), summed over the columns, then
    divided by the same median of that sum (a matched iteration costs about 1). A column that repeats to 0.1 %
    (instructions) weighs as much as its precision says, a noisy one (cache misses) little."""
    cols = [f"_d{i}" for i in range(r_val.shape[1])]
    parts = [_differences(r, o, s, r_val, o_val).group_by("_tid", "_it").agg(pl.col(cols).mean())
             .with_columns(pl.lit(s, pl.Int64).alias("_s")) for s in states]
    c = pl.concat(parts)

    def noise(x: str) -> pl.Expr:  # median over the thread's iterations of the best offset's value
        return pl.col(x).min().over("_tid", "_it").median().over("_tid").clip(NOISE_FLOOR).alias(x)
    columns = c.select("_tid", *[noise(x) for x in cols]).unique("_tid")
    c = _in_noise_units(c.drop("_c", strict=False), Noise(columns, columns.select("_tid", pl.lit(1.0).alias("_c"))))
    total = c.filter(pl.col("_c").is_not_null()).select("_tid", "_it", "_c").select(
        "_tid", pl.col("_c").min().over("_tid", "_it").median().over("_tid").clip(1e-9)).unique("_tid")
    c = c.filter(pl.col("_c").is_not_null()).select("_tid", "_it", "_s", "_c").join(total.rename({"_c": "_t"}),
                                                                                   on="_tid")
    return (c.select("_tid", "_it", "_s", (pl.col("_c") / pl.col("_t")).clip(upper_bound=COST_CAP).alias("_c")),
            Noise(columns, total))


class Border(NamedTuple):
    """What the bursts around the changes of offset say (:func:`border_bursts`; reference and other rows, int64)."""

    undecided: np.ndarray  # reference rows whose partner the data cannot place
    ref: np.ndarray  # reference rows of the pairs the bursts' own behaviour makes
    other: np.ndarray  # their other rows


def _split(side: np.ndarray) -> int:
    """Where a run of choices (0: before the change, 1: after it, -1: none) changes sides: the index that leaves
    the fewest choices on the wrong side."""
    wrong = np.r_[0, np.cumsum(side == 1)] + np.r_[np.cumsum((side == 0)[::-1])[::-1], 0]
    return int(np.argmin(wrong))


def border_bursts(r: pl.DataFrame, o: pl.DataFrame, r_val: np.ndarray, o_val: np.ndarray, around: pl.DataFrame,
                  noise: Noise) -> Border:
    """The bursts around each change of offset, asked one by one (``around``: per thread ``_tid``, its group ``_g``
    and place ``_p`` on the group's axis, and change ``_ch`` the iterations ``_it`` near it, the offsets ``_a``
    before and ``_b`` after it beyond the thread's constant one, ``_k0`` the first iteration at ``_b`` on the
    group's axis, ``_free`` the iterations that pair burst by burst, ``_drop`` when the offset drops,
    ``_partial`` the thread's first or last iteration when the change is at the trace's start or end). A burst is
    judged with the bursts at its place in its iteration on the tied threads (their mean cost, the margin
    shrinking with their number): ranks that exchange messages do the same work at the same place.

    - a burst of a free iteration that fits one offset clearly better than the other pairs with that offset's
      burst (a clock iteration straddles two logical iterations: its part before the change pairs at ``_a``, its
      part after at ``_b``), in burst order (the side changes once);
    - the run of long bursts, from the change outwards, that fit both offsets alike is undecidable: the inserted
      iteration's bursts, wherever the clock cut it. Inside the run the change is put at its last iteration border
      (a solver converging later iterates last; an inserted iteration is a whole one). A run shorter than an
      iteration's bursts is a change the bursts place (work that repeats on the change's border); a dropped offset
      leaves one reference iteration without partner: any of an iteration's bursts on either side of the run may
      be it."""
    none = np.zeros(0, np.int64)
    r = r.join(around, on=["_tid", "_it"])
    if r.height == 0:
        return Border(none, none, none)
    cost = []
    for side in ("_a", "_b"):  # the other iteration k + offset, named by its reference number k + offset
        at = r.select("_tid", (pl.col("_it") + pl.col(side)).alias("_it"), "sig", "_rank", "_row").unique("_row")
        c = _in_noise_units(_differences(at, o, 0, r_val, o_val), noise)
        cost.append(c.select("_row", pl.col("_c").alias(f"{side}_c"), pl.col("_orow").alias(f"{side}_row")))
    r = (r.join(cost[0], on="_row", how="left").join(cost[1], on="_row", how="left")
         .with_columns((pl.col("_it") + pl.col("_p")).alias("_kp"),
                       pl.col("_row").rank("ordinal").over("_tid", "_ch", "_it").alias("_pos"),
                       (pl.col("_it") == pl.col("_partial")).alias("_isp")))
    on = ["_g", "_ch", "_kp", "_pos"]
    both = pl.col("_a_c").is_not_null() & pl.col("_b_c").is_not_null()
    q = (r.group_by(on).agg(pl.col("_a_c").filter(both).mean(), pl.col("_b_c").filter(both).mean(),
                            both.sum().alias("_n"), pl.col("_k0", "_drop", "_free").first(), pl.col("_isp").all())
         .sort(on))
    x, y = (q.get_column(c).fill_null(np.nan).to_numpy() for c in ("_a_c", "_b_c"))
    margin = DECIDE_MARGIN / np.sqrt(np.maximum(q.get_column("_n").to_numpy(), 1))
    same = _alike(x, y, margin, FIT_BURST)
    clear = _clear(x, y, margin) & (np.fmin(x, y) <= FIT_BURST)
    side = np.where(clear & (x < y), 0, np.where(clear & (y < x), 1, -1))
    marked = np.zeros(q.height, bool)
    its = q.get_column("_kp").to_numpy()
    k0, drop, free, isp = (q.get_column(c).to_numpy() for c in ("_k0", "_drop", "_free", "_isp"))
    key = q.select("_g", "_ch").hash_rows().to_numpy()
    cut = np.r_[0, np.flatnonzero(key[1:] != key[:-1]) + 1, key.size]
    for lo, hi in zip(cut[:-1], cut[1:]):  # one change of one group at a time, its bursts in order
        sm, it = same[lo:hi], its[lo:hi]
        per_iteration = max(1, int(np.median(np.unique(it, return_counts=True)[1])))
        mid = int(np.searchsorted(it, k0[lo]))
        left = mid
        while left > 0 and sm[left - 1]:
            left -= 1
        right = mid
        while right < sm.size and sm[right]:
            right += 1
        borders = np.flatnonzero(np.diff(it[left:right + 1]) != 0) + left + 1 if right > left else np.zeros(0, int)
        at = int(borders[-1]) if borders.size and borders[-1] <= right else right
        side[lo + left:lo + at], side[lo + at:lo + right] = 0, 1
        if right - left < per_iteration or isp[lo + left:lo + right].all():
            continue
        if drop[lo]:
            left, right = max(left - per_iteration, 0), min(right + per_iteration, sm.size)
        marked[lo + left:lo + right] = True
    side = np.where(free, side, -1)
    r = (r.join(q.select(*on, pl.Series("_side", side), pl.Series("_marked", marked)), on=on)
         .sort("_tid", "_ch", "_row"))
    undecided = r.filter("_marked").get_column("_row").to_numpy()
    # per thread: the side changes once (the fewest choices on the wrong side), one partner each, in order
    pairs = r.filter(pl.col("_side") >= 0).select(
        "_tid", "_ch", "_row", "_side",
        pl.when(pl.col("_side") == 0).then(pl.col("_a_row")).otherwise(pl.col("_b_row")).fill_null(-1).alias("_o"))
    pr, po = [], []
    key = pairs.select("_tid", "_ch").hash_rows().to_numpy()
    cut = np.r_[0, np.flatnonzero(key[1:] != key[:-1]) + 1, key.size]
    sd, orow, rows = (pairs.get_column(c).to_numpy() for c in ("_side", "_o", "_row"))
    for lo, hi in zip(cut[:-1], cut[1:]):
        t = _split(sd[lo:hi])
        keep = np.r_[sd[lo:lo + t] == 0, sd[lo + t:hi] == 1] & (orow[lo:hi] >= 0)
        got = orow[lo:hi][keep]
        # of two that share a partner, the later has none (one that converged earlier lacks its last iteration)
        ok = got > np.maximum.accumulate(np.r_[-1, got[:-1]])
        pr.append(rows[lo:hi][keep][ok])
        po.append(got[ok])
    cat = [np.concatenate(v).astype(np.int64) if v else none for v in (pr, po)]
    return Border(undecided.astype(np.int64), *cat)


def message_lags(t: pl.DataFrame, keys: pl.DataFrame) -> pl.DataFrame:
    """Per (``_a`` sending thread, ``_b`` receiving thread) of one run, the most common ``_lag`` (and how many
    messages have it, ``_n``): receiving iteration minus sending iteration of their logical messages (``smsg`` /
    ``rmsg`` of ``t``, iterations ``_it`` of ``keys``, row for row)."""
    if "smsg" not in t.columns or "rmsg" not in t.columns:
        return pl.DataFrame(schema={"_a": keys.schema["_tid"], "_b": keys.schema["_tid"], "_lag": pl.Int64,
                                    "_n": pl.UInt32})
    k = keys.select("_tid", pl.col("_it").cast(pl.Int64), "_clock")
    s = (k.with_columns(pl.Series("_m", t.get_column("smsg"))).filter((pl.col("_m") > 1) & pl.col("_clock")
                                                                       .is_not_null()))
    r = (k.with_columns(pl.Series("_m", t.get_column("rmsg"))).filter((pl.col("_m") > 1) & pl.col("_clock")
                                                                       .is_not_null()))
    return (s.select(pl.col("_tid").alias("_a"), pl.col("_it").alias("_ia"), "_m")
            .join(r.select(pl.col("_tid").alias("_b"), pl.col("_it").alias("_ib"), "_m"), on="_m")
            .filter(pl.col("_a") != pl.col("_b"))
            .group_by("_a", "_b", (pl.col("_ib") - pl.col("_ia")).alias("_lag")).agg(pl.len().alias("_n"))
            .sort("_a", "_b", "_n", "_lag", descending=[False, False, True, False])
            .unique(["_a", "_b"], keep="first").select("_a", "_b", "_lag", "_n"))


def tied_groups(threads: np.ndarray, lags: pl.DataFrame) -> dict[int, tuple[int, int]]:
    """Thread -> (group, place): threads tied by the reference run's logical messages share a group; ``place``
    puts each thread's iteration k at k + place on the group's axis (a message sent in iteration i and received
    in iteration i + lag: the receiver's axis is shifted by -lag). The other run is not asked: a thread whose trace
    starts an iteration later there numbers its messages otherwise, and is tied all the same (its constant offset
    says by how much). Edges are taken in order of their message counts; one that contradicts the places already
    given is left out."""
    parent = {int(t): int(t) for t in threads}
    place = {int(t): 0 for t in threads}  # offset to the parent

    def find(x: int) -> tuple[int, int]:
        p, acc = x, 0
        while parent[p] != p:
            acc += place[p]
            p = parent[p]
        return p, acc
    edges = lags.sort("_n", "_a", "_b", descending=[True, False, False]).select("_a", "_b", "_lag")
    for a, b, lag in edges.iter_rows():
        if a not in parent or b not in parent:
            continue
        (ra, pa), (rb, pb) = find(a), find(b)
        if ra != rb:  # place(b) = place(a) - lag
            parent[rb] = ra
            place[rb] = pa - lag - pb
    return {t: find(t) for t in parent}


@njit(cache=True, nogil=True)
def _viterbi(cost: np.ndarray, gap: np.ndarray, start: np.ndarray, end: np.ndarray, zero: int) -> np.ndarray:
    """Cheapest path of states (columns of ``cost``, rows = iterations): ``cost[k, s]`` per step, ``gap[k]`` per
    unit of state change into step k, ``start[s]`` / ``end[s]`` at the ends. Ties keep the state, then prefer
    the state ``zero``."""
    n, w = cost.shape
    out = np.full(n, zero, np.int64)
    if n == 0:
        return out
    acc = start + cost[0]
    back = np.zeros((n, w), np.int64)
    for k in range(1, n):
        new = np.empty(w)
        for s in range(w):
            best, arg = np.inf, s
            for t in range(w):
                c = acc[t] + abs(s - t) * gap[k]
                tie = abs(c - best) <= 1e-9 and (t == s or (arg != s and abs(t - zero) < abs(arg - zero)))
                if c < best - 1e-9 or tie:
                    best, arg = c, t
            new[s] = best + cost[k, s]
            back[k, s] = arg
        acc = new
    acc = acc + end
    s = zero
    for t in range(w):
        if acc[t] < acc[s] - 1e-9:
            s = t
    for k in range(n - 1, -1, -1):
        out[k] = s
        s = back[k, s]
    return out


def alike(mean: np.ndarray, margin: np.ndarray) -> np.ndarray:
    """(K, w, w) whether two offsets fit iteration k alike (:func:`_alike`; ``mean``, the mean cost per thread in
    noise units, ``margin[k]``)."""
    return _alike(mean[:, :, None], mean[:, None, :], margin[:, None, None], FIT_ITERATION)


def _alike(x: np.ndarray, y: np.ndarray, margin: np.ndarray | float, fit: float) -> np.ndarray:
    """Whether two costs are both judged, the smaller one a fit (at most ``fit``), and neither clearly below the
    other (:func:`_clear`): two offsets that both misfit are not alike, they both say no."""
    return np.isfinite(x) & np.isfinite(y) & (np.fmin(x, y) <= fit) & ~_clear(x, y, margin)


def _clear(x: np.ndarray, y: np.ndarray, margin: np.ndarray | float) -> np.ndarray:
    """Whether the smaller of two costs is clearly below the other (see :func:`alike`)."""
    lo, hi = np.fmin(x, y), np.fmax(x, y)
    return (lo <= DECIDE_RATIO * hi) & (hi - lo >= margin)


class Change(NamedTuple):
    """A change of offset from ``a`` to ``b`` (states) at iteration ``k0`` (0: before the first, K: after the last),
    the run of iterations ``k1`` .. ``k2`` - 1 around it that fit both alike, whether that run is a ``span`` (the
    change could lie anywhere in it), and the iterations ``free_lo`` .. ``free_hi`` - 1 that pair burst by burst:
    the span and a neighbour on either side that fits neither offset (a clock iteration that straddles the
    change: part of it on each side). A change at the start or the end pairs nothing burst by burst: traces cut
    at other points keep their iterations in order, the span is only said."""

    k0: int
    k1: int
    k2: int
    a: int
    b: int
    span: bool
    free_lo: int
    free_hi: int


def settle(path: np.ndarray, mean: np.ndarray, margin: np.ndarray, zero: int,
           final: int) -> tuple[np.ndarray, list[Change]]:
    """(path, changes) from the Viterbi ``path`` over K iterations and ``mean`` (K, w), the mean cost per thread of
    each iteration under each offset, in noise units (NaN: not judged; see :func:`alike`).

    A stretch the path moved to another offset and back, whose iterations fit both offsets alike, is put back (a
    run of identical iterations never hides a pair of gaps). Each remaining change of offset, a -> b at iteration
    k0, could lie anywhere in the run of iterations around k0 that fit a and b alike: that run is a span (where
    the offset drops, a reference iteration has no partner, interchangeable with its alike neighbours: the two
    iterations bounding the run too, unless the two sharing the other iteration fit it clearly differently). So
    is the run at the start when the path does not start at ``zero`` (the offset the runs' starts imply) and at
    the end when it does not end at ``final`` (the offset the iteration counts imply): the iterations one run has
    more of may lie inside it. A span of the first or the last iteration alone is not one: those iterations are
    partial (cut by the clock's place in the iteration, the prologue or the epilogue) and follow their
    neighbour."""
    n = path.size
    path = path.copy()
    if n == 0:
        return path, []
    same = alike(mean, margin)
    changed = True
    while changed:  # bumps: a -> b -> a over iterations alike under a and b
        changed = False
        edges = np.r_[0, np.flatnonzero(np.diff(path)) + 1, n]
        for i in range(1, edges.size - 2):
            lo, hi = edges[i], edges[i + 1]
            a, b = path[lo - 1], path[lo]
            if path[hi] == a and same[lo:hi, a, b].all():
                path[lo:hi] = a
                changed = True
                break
    changes = [(int(k), int(path[k - 1]), int(path[k])) for k in np.flatnonzero(np.diff(path)) + 1]
    if path[0] != zero:
        changes.append((0, zero, int(path[0])))
    if path[-1] != final:
        changes.append((n, int(path[-1]), final))
    out = []
    for k0, a, b in changes:
        k1 = k0
        while k1 > 0 and same[k1 - 1, a, b]:
            k1 -= 1
        k2 = k0
        while k2 < n and same[k2, a, b]:
            k2 += 1
        if b < a and 0 < k0 < n:  # iterations k0 - 1 and k0 share one other iteration
            twin = bool(_alike(mean[k0 - 1, a], mean[k0, b], margin[k0], FIT_ITERATION))
            if k2 > k1 or twin:
                k1, k2 = max(k1 - 1, 0), min(k2 + 1, n)
        span = not (k2 <= k1 or (k2 - k1 == 1 and (k1 == 0 or k2 == n)))
        lo, hi = (k1, k2) if span and 0 < k0 < n else (k0, k0)  # at the ends: the window's start or end
        if 0 < k0 < n:
            lo -= int(lo > 0 and mean[lo - 1, a] > FIT_ITERATION)
            hi += int(hi < n and mean[hi, b] > FIT_ITERATION)
        out.append(Change(k0, k1, k2, a, b, span, lo, hi))
    return path, out


def thread_shift(tc: np.ndarray, ch: Change, p: int) -> int:
    """How many iterations later (> 0) or earlier (< 0) than on its group's axis a thread's own iterations put a
    decided change of offset ``ch`` (``tc``: the thread's cost per iteration and state, in its noise units, NaN
    where not judged; ``p``: its place on the axis). Threads tied by messages change offset at one logical place,
    but their clocks tick at different calls of the iteration: the clock iteration that holds the change (part of
    it before, part after) may be one later on a thread whose clock ticks earlier in the iteration than its
    partners'. While the thread's first iteration at the new offset clearly fits the old one (at most
    ``MAX_THREAD_SHIFT``), the change lies later; while its last at the old offset clearly fits the new one,
    earlier. An undecidable span, or a change at either end, stays where the group put it."""
    n = tc.shape[0]
    k0 = ch.k0 - p
    if ch.span or not 0 < k0 < n:
        return 0

    def fits(k: int, x: int, y: int) -> bool:  # iteration k fits state x clearly better than y
        cx, cy = tc[k, x], tc[k, y]
        return bool(np.isfinite(cx) and np.isfinite(cy) and cx <= FIT_ITERATION and cx < cy
                    and _clear(np.array(cx), np.array(cy), DECIDE_MARGIN))
    d = 0
    while d < MAX_THREAD_SHIFT and k0 + d < n - 1 and fits(k0 + d, ch.a, ch.b):
        d += 1
    if d == 0:
        while -d < MAX_THREAD_SHIFT and k0 + d > 1 and fits(k0 + d - 1, ch.b, ch.a):
            d -= 1
    return d


def iteration_paths(rk: pl.DataFrame, ok: pl.DataFrame, ref: pl.DataFrame, other: pl.DataFrame,
                    features: Sequence[str], r_long: np.ndarray, off: pl.DataFrame) -> IterationPaths:
    """Where the two runs' iterations differ by whole iterations (see the module docstring): ``rk`` / ``ok`` the
    logical keys of :func:`synthtrace.tracelib.merge.anchors._logical_keys` (row for row ``ref`` / ``other``,
    prepared tables), ``r_long`` the reference rows long enough to judge, ``off`` the threads' constant offsets
    (``_tid``, ``_off``)."""
    tid_t = rk.schema["_tid"]
    nothing = np.zeros(0, np.int64)
    none = IterationPaths(pl.DataFrame(schema={"_tid": tid_t, "_oit": pl.Int64, "_rit": pl.Int64}), nothing, nothing,
                          nothing)
    off = off.select("_tid", pl.col("_off").fill_null(0).cast(pl.Int64))
    counts = [k.filter(pl.col("_clock").is_not_null()).group_by("_tid").agg((pl.col("_it").max() + 1)
                                                                              .cast(pl.Int64).alias(c))
              for k, c in ((rk, "_n"), (ok, "_m"))]
    # threads whose clock is an MPI call: a thread without one (an OpenMP worker) follows its master elsewhere
    mpi = (rk.select("_tid", (pl.col("csig") == pl.col("_clock")).fill_null(False).alias("_tick"),
                     pl.Series("_mpi", ref.get_column("mpi_call").is_not_null()))
           .filter("_tick").group_by("_tid").agg(pl.col("_mpi").all()).filter("_mpi").select("_tid"))
    th = (counts[0].join(counts[1], on="_tid").join(mpi, on="_tid").join(off, on="_tid", how="left")
          .with_columns(pl.col("_off").fill_null(0))
          .with_columns((pl.col("_m") - pl.col("_n") - pl.col("_off")).alias("_delta"))
          .filter((pl.col("_n") >= MIN_ITERATIONS) & (pl.col("_m") >= MIN_ITERATIONS)
                  & (pl.col("_delta").abs() <= MAX_DIFFERENCE)))
    if th.height == 0:
        return none
    lo = min(0, int(th.get_column("_delta").min())) - ITERATION_SLACK
    hi = max(0, int(th.get_column("_delta").max())) + ITERATION_SLACK
    states = range(lo, hi + 1)
    r_val, o_val = behaviour(ref, features), behaviour(other, features)
    judged, others = _judged(rk, r_long), _others(ok, th.select("_tid", "_off"))
    costs, noise = _pair_costs(judged, others, r_val, o_val, states)
    if costs.height == 0:
        return none
    groups = tied_groups(th.get_column("_tid").to_numpy(), message_lags(ref, rk))
    th = th.with_columns(pl.col("_tid").replace_strict({t: g for t, (g, _) in groups.items()}, default=None,
                                                      return_dtype=pl.Int64).alias("_g"),
                         pl.col("_tid").replace_strict({t: p for t, (_, p) in groups.items()}, default=0,
                                                       return_dtype=pl.Int64).alias("_p"))
    w = len(states)
    zero = -lo
    s_all = np.arange(lo, hi + 1)
    maps, around = [], []
    for (gid,), g in sorted(th.partition_by("_g", as_dict=True).items()):  # one group of tied threads at a time
        g = g.with_columns(pl.col("_p") - pl.col("_p").min())
        K = int((g.get_column("_p") + g.get_column("_n")).max())
        c = costs.join(g.select("_tid", "_p"), on="_tid")
        k_idx = (c.get_column("_it") + c.get_column("_p")).to_numpy()
        s_idx = c.get_column("_s").to_numpy() - lo
        total, capped, seen = np.zeros((K, w)), np.zeros((K, w)), np.zeros((K, w))
        np.add.at(total, (k_idx, s_idx), c.get_column("_c").to_numpy())
        # on the path, one iteration of a thread never outweighs the two gaps of a detour: a single iteration that
        # differs (noise, a burst cut in two) is a mismatch, not an iteration inserted and another dropped
        np.add.at(capped, (k_idx, s_idx), np.minimum(c.get_column("_c").to_numpy(), ITERATION_GAP))
        np.add.at(seen, (k_idx, s_idx), 1.0)
        present = np.zeros(K)  # threads with an iteration at each place of the group's axis
        gap = np.zeros((K, w))  # out of the other run's range: that thread's reference iteration has no partner
        inside = np.zeros((K, w))  # threads whose other iteration exists there
        start, end = np.zeros(w), np.zeros(w)
        for p, n, m, o in g.select("_p", "_n", "_m", "_off").iter_rows():
            present[p:p + n] += 1
            j = np.arange(n)[:, None] + o + s_all[None, :]
            out = (j < 0) | (j >= m)
            gap[p:p + n] += np.where(out, ITERATION_GAP, 0.0)
            inside[p:p + n] += ~out
            start += ITERATION_GAP * np.maximum(s_all, 0)  # other iterations before the first: no partner
            end += ITERATION_GAP * np.maximum((m - n - o) - s_all, 0)  # ... and after the last
        mean = np.where(seen > 0, total / np.maximum(seen, 1), np.nan)
        # a place no common long burst judges costs what a matched iteration costs: 1 noise unit per thread
        step = capped + (inside - seen).clip(0) + gap
        path = _viterbi(step, ITERATION_GAP * np.maximum(present, 1.0), start, end, zero)
        margin = DECIDE_MARGIN / np.sqrt(np.maximum(seen.max(axis=1), 1.0))
        final = min(max(zero + int(np.round(np.median(g.get_column("_delta").to_numpy()))), 0), w - 1)
        path, changes = settle(path, mean, margin, zero, final)
        if not changes:
            continue
        own = {t: f for (t,), f in c.partition_by("_tid", as_dict=True).items()}
        kinds: dict[tuple[int, ...], int] = {}  # pooling groups of border bursts
        for t, p, n, m, o in g.select("_tid", "_p", "_n", "_m", "_off").iter_rows():
            k = np.arange(n)
            tc = np.full((n, w), np.nan)
            if t in own:
                f = own[t].filter(pl.col("_it") < n)
                tc[f.get_column("_it").to_numpy(), f.get_column("_s").to_numpy() - lo] = f.get_column("_c").to_numpy()
            tpath = path[p:p + n].copy()
            shifts = [thread_shift(tc, ch, p) for ch in changes]
            for ch, d in zip(changes, shifts):  # this thread's own iterations place its change elsewhere
                k0 = ch.k0 - p
                tpath[min(k0, k0 + d):max(k0, k0 + d)] = ch.a if d > 0 else ch.b
            j = k + o + tpath - zero
            # of two reference iterations sharing one other iteration, the one that fits it worse has no partner
            # (alike: the later, as a solver that converged earlier lacks its last iteration)
            cost = mean[p + k, tpath]
            dup = np.flatnonzero(j[1:] == j[:-1])
            later_better = (cost[dup + 1] < cost[dup]) & _clear(cost[dup], cost[dup + 1], margin[p + dup + 1])
            keep = np.ones(n, bool)
            keep[np.where(later_better, dup, dup + 1)] = False
            keep &= (j >= 0) & (j < m)
            # a span's iterations and the other iterations between its neighbours' partners pair by their
            # bursts' own behaviour and order (the dynamic programme between anchors), not as whole iterations
            free = np.zeros(m + 1, bool)
            for i, (ch, d) in enumerate(zip(changes, shifts)):
                k1, k2, k0 = max(ch.free_lo - p + d, 0), min(ch.free_hi - p + d, n), ch.k0 - p + d
                if not ch.span and 0 < k0 < n:  # the thread's own iterations that straddle its change are free too
                    k1 = min(k1, k0 - int(tc[k0 - 1, ch.a] > FIT_ITERATION))
                    k2 = max(k2, k0 + int(tc[k0, ch.b] > FIT_ITERATION))
                near = np.arange(max(k1 - 1, 0), min(max(k2, k0) + 1, n))
                # the iterations where the bursts are asked one by one, pooled with the threads whose change and
                # free iterations lie alike; around a decided change, only with those at the same place on the
                # axis too (where a thread's clock ticks in the iteration differs: the same place on the axis
                # may be another part of the iteration)
                kind = (i, d, k1 - k0, k2 - k0, p if not ch.span else 0)
                if near.size:
                    end = 0 if ch.k0 == 0 else (n - 1 if ch.k0 == K else -1)
                    one = {"_tid": t, "_g": gid, "_p": p, "_ch": kinds.setdefault(kind, len(kinds)),
                           "_a": ch.a - zero, "_b": ch.b - zero, "_k0": ch.k0 + d, "_drop": ch.b < ch.a,
                           "_partial": end}
                    around.append(pl.DataFrame({"_it": near, "_free": (near >= k1) & (near < k2)}
                                               | {c: np.full(near.size, v) for c, v in one.items()}))
                if k2 <= k1:
                    continue
                keep[k1:k2] = False
                j_lo = j[k1 - 1] + 1 if k1 > 0 else 0
                j_hi = j[k2] if k2 < n else m
                free[max(j_lo, 0):max(min(j_hi, m), 0)] = True
            keep &= ~free[np.clip(j, 0, m)]
            keep[keep] &= j[keep] > np.maximum.accumulate(np.r_[-1, j[keep][:-1]])  # in order, one each
            maps.append(pl.DataFrame({"_tid": np.full(int(keep.sum()), t), "_oit": j[keep], "_rit": k[keep]}))
    out_maps = (pl.concat(maps).select(pl.col("_tid").cast(tid_t), pl.col("_oit", "_rit").cast(pl.Int64))
                if maps else none.maps)
    if not around:
        return none._replace(maps=out_maps)
    near = pl.concat(around).with_columns(pl.col("_tid").cast(tid_t), pl.col("_it", "_a", "_b", "_k0").cast(pl.Int64))
    return IterationPaths(out_maps, *border_bursts(judged, others, r_val, o_val, near, noise))
