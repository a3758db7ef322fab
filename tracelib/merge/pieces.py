"""Compute phases read as several bursts: many-to-one matches of the merge (DESIGN §6).

A burst that no MPI call closes (``mpi_call`` NULL before a later MPI call of its thread: the counters were read
at a user event, a sampling point, a buffer flush) and the bursts after it up to that call are the **pieces** of
one **unit**: the work between two MPI calls. Runs split a phase at different points, or only some runs split it,
so the merge aligns units (:func:`units`: counters and running time summed over the pieces, from the first
piece's start to the last one's end, closed by the last one's call, named by the last one's ``burst_seq``) and
then goes back to the reference run's bursts (:func:`expand`): where the two matched units have as many
pieces, each with about the same share of its unit's work (cut at the same points), the pieces pair one to
one; otherwise every reference piece takes the other unit whole, apportioned by its share of its own unit's
work (instructions when recorded, else running time), unless the reference's own common counters show that its
pieces ran at other rates (:func:`_uneven`: then the unit's pieces get no match). A piece of one run is so never
paired with a neighbouring burst of the other.

A **worker thread** (a thread of a task whose MPI calls another thread, its **master**, makes: OpenMP workers) has no
call to close a unit: its bursts are cut by barriers, lock waits and the tracer's flushes at points that timing
decides. Its units are the master's instead: the bursts of a worker that lie in one **epoch** of its master (from
the start of a master unit to the start of the next one: the fork of a parallel region to the next fork) are one
unit, hosted by that master unit (:func:`host_rows`), and the worker's unit is matched through its host's match
(:func:`synthtrace.tracelib.merge.align.align_runs`), not by its position in its own thread.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from synthtrace.tracelib.domain.sums import exact_sum
from synthtrace.tracelib.schema import THREAD_KEYS, UNTRACED_AFTER, counter_columns
from synthtrace.tracelib.thread_key import thread_key
from synthtrace.tracelib.merge.noise import NOISE_FLOOR, long_pairs, off_limit
from synthtrace.tracelib.merge.transfer import work_counter


@dataclass(frozen=True)
class Units:
    """The units of one run's bursts (rows sorted by thread, then ``burst_seq``).

    ``unit``: the unit of every burst row; ``first``: the first burst row of every unit; ``size``: its number of
    pieces; ``table``: one row per unit with the bursts' columns (see the module docstring).
    """

    unit: np.ndarray
    first: np.ndarray
    size: np.ndarray
    table: pl.DataFrame
    #: per unit, how it borders spans its thread's recording was off in (:func:`untraced_edges`): bit 1 it ends
    #: where recording stopped, bit 2 it begins where recording resumed; 0 neither
    untraced: np.ndarray | None = None

    @property
    def split(self) -> bool:
        """Whether any unit has more than one piece."""
        return bool((self.size > 1).any())


def host_rows(bursts: pl.DataFrame) -> np.ndarray:
    """Per row of ``bursts`` (appl, task, thread, start_ns, end_ns, mpi_call; sorted by thread, then ``burst_seq``),
    the row of the master burst whose epoch holds the middle of the row's burst, for rows of worker threads; -1
    elsewhere (masters, threads of tasks without MPI calls, worker bursts before the master's first burst).

    A task's master is its lowest thread with a burst closed by an MPI call, its workers the other threads of the
    task without any; a master burst's epoch runs from its start to the start of the master's next burst (the
    middle, not the start, so that a worker that leaves a barrier a little before its master still falls in the
    master's epoch, and one that works on after its master reached the join still in the region's).
    """
    t = bursts.select("appl", "task", "thread", "start_ns", "end_ns",
                      pl.col("mpi_call").is_not_null().alias("_closed")).with_row_index("_row")
    per_thread = t.group_by("appl", "task", "thread").agg(pl.col("_closed").any())
    master = (per_thread.filter("_closed").group_by("appl", "task").agg(pl.col("thread").min().alias("_master")))
    t = t.join(master, on=["appl", "task"], how="left", maintain_order="left").join(
        per_thread.rename({"_closed": "_mpi_thread"}), on=["appl", "task", "thread"], how="left",
        maintain_order="left")
    hosts = np.full(bursts.height, -1, np.int64)
    masters = (t.filter(pl.col("thread") == pl.col("_master"))
               .select("appl", "task", pl.col("_row").alias("_host"), pl.col("start_ns").alias("_t")).sort("_t"))
    workers = (t.filter(pl.col("_master").is_not_null() & (pl.col("thread") != pl.col("_master"))
                        & ~pl.col("_mpi_thread"))
               .select("appl", "task", "_row", ((pl.col("start_ns") + pl.col("end_ns")) // 2).alias("_t")).sort("_t"))
    if workers.height and masters.height:
        j = workers.join_asof(masters, on="_t", by=["appl", "task"], strategy="backward",
                             check_sortedness=False)  # both sorted by _t just above
        got = j.filter(pl.col("_host").is_not_null())
        hosts[got.get_column("_row").to_numpy()] = got.get_column("_host").to_numpy()
    return hosts


def units(bursts: pl.DataFrame) -> Units:
    """The units of ``bursts`` (sorted by thread, then ``burst_seq``, as :func:`align.sort_bursts` leaves them)."""
    n = bursts.height
    # a piece lies before a later burst of its thread that an MPI call closes: threads without MPI calls (OpenMP
    # workers, sequential programs) and what follows a thread's last call are never units of several bursts
    # that way
    last_closed = pl.col("_row").filter(pl.col("mpi_call").is_not_null()).max().over(THREAD_KEYS)
    piece = (bursts.select(*THREAD_KEYS, "mpi_call").with_row_index("_row")
             .select((pl.col("mpi_call").is_null() & (pl.col("_row") < last_closed)).fill_null(False))
             .to_series().to_numpy())
    # a worker's bursts in one epoch of its master are one unit (the master's unit hosts them)
    host = host_rows(bursts)
    if n > 1 and (host >= 0).any():
        master_unit = np.cumsum(~piece) - ~piece
        hu = np.where(host >= 0, master_unit[np.maximum(host, 0)], -1)
        tid = bursts.select(thread_key()).to_series().to_numpy()
        piece[:-1] |= (hu[:-1] >= 0) & (hu[:-1] == hu[1:]) & (tid[:-1] == tid[1:])
    off, after = untraced_edges(bursts)
    piece &= ~off  # a burst its thread's recording stopped after closes its unit as a call does (P4)
    unit = np.cumsum(~piece) - ~piece  # a piece belongs to the unit of the burst after it
    first = np.flatnonzero(np.r_[True, unit[1:] != unit[:-1]]) if n else np.zeros(0, np.int64)
    size = np.diff(np.r_[first, n])
    last = np.r_[first[1:] - 1, n - 1] if n else first
    untraced = np.where(off[last], ENDS_UNTRACED, 0) | np.where(after[first], BEGINS_UNTRACED, 0)
    if not piece.any():
        return Units(unit, first, size, bursts, untraced)
    counters = counter_columns(bursts)
    last = [c for c in bursts.columns if c not in (*counters, "start_ns", "cpu", "duration_ns", *THREAD_KEYS)]
    table = (bursts.with_columns(pl.Series("_unit", unit))
             .group_by("_unit", maintain_order=True)
             .agg(*[pl.col(c).first() for c in (*THREAD_KEYS, "cpu", "start_ns") if c in bursts.columns],
                  *[pl.col(c).last() for c in last], *summed(["duration_ns", *counters], bursts.schema))
             .select(bursts.columns))
    return Units(unit, first, size, table, untraced)


def summed(columns: Sequence[str], schema: pl.Schema) -> list[pl.Expr]:
    """A unit's ``columns`` (of ``schema``: ``duration_ns`` and counters) from its pieces' (an aggregation over the
    pieces of a unit): the running time summed; a counter summed where every piece recorded it (and its sum is
    within int64), else NULL."""
    return [_unit_sum(c, schema) if c == "duration_ns"
            else pl.when(pl.col(c).null_count() == 0).then(_unit_sum(c, schema)).alias(c) for c in columns]


#: :attr:`Units.untraced` bits: the unit ends where its thread's recording stopped / begins where it resumed
ENDS_UNTRACED, BEGINS_UNTRACED = 1, 2


def untraced_edges(bursts: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``bursts`` (sorted by thread, then ``burst_seq``): whether its thread's recording was switched
    off where it ends (:data:`UNTRACED_AFTER`; False when the reader could not tell), and whether it begins where
    recording resumed (the burst before it on its thread was so cut)."""
    n = bursts.height
    if UNTRACED_AFTER not in bursts.columns or not n:
        return np.zeros(n, bool), np.zeros(n, bool)
    flag = pl.col(UNTRACED_AFTER).fill_null(False)
    flags = bursts.select(flag.alias("off"), flag.shift(1, fill_value=False).over(THREAD_KEYS).alias("after"))
    return flags.get_column("off").to_numpy(), flags.get_column("after").to_numpy()


def without_untraced(unit_matches: pl.DataFrame, ref_units: Units, other_units: Units) -> tuple[pl.DataFrame,
                                                                                              np.ndarray]:
    """``unit_matches`` (one row per reference unit, ``other_row`` a unit row of ``other_units``) with no match where
    the two units border spans their runs did not record otherwise (:attr:`Units.untraced`): a burst cut by
    Extrae_shutdown or Score-P's measurement off, or begun by the restart, holds part of a phase that a run
    recording it whole holds in one burst with work the other never recorded (mergeattack23 P4). Two runs that
    switched recording off at the same point (the same window in every run) still pair. Also, per reference unit,
    whether it borders such a span without a counterpart cut alike (matched or not by the alignment)."""
    other = unit_matches.get_column("other_row")
    matched = other.is_not_null().to_numpy()
    ref_cut = ref_units.untraced if ref_units.untraced is not None else np.zeros(matched.size, np.int64)
    o_cut = other_units.untraced if other_units.untraced is not None else np.zeros(other_units.size.size, np.int64)
    untraced = ref_cut != 0
    if ref_cut.any() or o_cut.any():
        untraced[matched] = ref_cut[matched] != o_cut[other.drop_nulls().to_numpy()]
    dropped = matched & untraced
    if not dropped.any():
        return unit_matches, untraced
    gone = pl.Series(dropped)
    return unit_matches.with_columns(pl.when(gone).then(None).otherwise(pl.col(c)).alias(c)
                                     for c in ("other_seq", "other_row", "match_score")), untraced


def _unit_sum(column: str, schema: pl.Schema) -> pl.Expr:
    """A unit's sum of its pieces' ``column``: exact for integers (NULL past int64, never wrapped), as summed for
    floats."""
    expr, dtype = pl.col(column), schema[column]
    return (exact_sum(expr).cast(dtype, strict=False) if dtype.is_integer() else expr.sum()).alias(column)


@dataclass(frozen=True)
class Expanded:
    """A unit match table taken back to the reference run's bursts.

    ``matches``: one row per reference burst (columns of :func:`align.align_runs`), ``other_row`` indexing
    ``source``: the other run's bursts followed by its multi-piece units; ``reference``: the reference bursts
    with every counter of an apportioned burst replaced by its unit's sum (what the source row is compared
    with); ``share``: the burst's share of its unit's work (1 where pieces pair one to one).
    """

    matches: pl.DataFrame
    source: pl.DataFrame
    reference: pl.DataFrame
    share: pl.Series
    #: per reference burst: apportioned a share of the other run's unit (an estimate: its unit's average rates)
    apportioned: np.ndarray | None = None
    #: per reference burst: left unmatched because its unit's pieces ran at other rates (:func:`_uneven`)
    uneven: np.ndarray | None = None


#: pieces of two units pair one to one when each one's share of its unit's work differs by at most this
PIECE_CUT_TOL = 0.1


def _work_shares(bursts: pl.DataFrame, u: Units, work: str | None) -> np.ndarray:
    """Every burst's share of its unit's work (instructions when recorded, else running time); NaN for a unit of
    no work."""
    w = (bursts.get_column(work) if work else bursts.get_column("duration_ns")).cast(pl.Float64).fill_null(0.0)
    unit_w = np.bincount(u.unit, weights=w.to_numpy(), minlength=u.size.size)[u.unit]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(unit_w > 0, w.to_numpy() / unit_w, np.nan)


def _uneven(long: np.ndarray, ref_values: pl.DataFrame, ref_table: pl.DataFrame, ref_units: Units,
            share: np.ndarray, apportioned: np.ndarray, common: list[str], work: str | None,
            pair_noise: dict[str, float]) -> np.ndarray:
    """Per reference unit: whether its pieces ran at other rates (mergeattack23 P1), so that no piece's value is
    its share of the unit's. A unit the other run cuts elsewhere is apportioned by work (``share``), which is
    right only where the unit's code is one kernel at one rate; a tracer's flush inside a unit of two kernels
    leaves pieces of other rates. The reference shows it on its own counters: a common counter (other than the
    work) apportioned like the transferred ones misses what the piece recorded by more than a pair of one
    campaign is allowed to (:func:`noise.off_limit` at the counter's own run-to-run noise per burst,
    ``pair_noise``: the median |log ratio| of the long bursts paired one to one, floored at the counting noise; a
    count that follows timing, cycles, varies per burst with it). Pieces not ``long`` (shorter than
    the merge's error threshold: a short piece next to a flush runs the tracer's probe and cold caches) are not
    judged, nor pieces with fewer than ``MIN_JUDGED_COUNT`` of a counter (either way) on that counter.
    ``ref_values``, ``ref_table``: the reference bursts' and units' values of the counters judged here."""
    uneven = np.zeros(ref_units.size.size, bool)
    rates = [c for c in common if c != work and c in ref_values.columns and c in ref_table.columns]
    if not apportioned.any() or not rates:
        return uneven
    at = np.flatnonzero(apportioned & np.isfinite(share) & long)
    units_at = ref_units.unit[at]
    for c in rates:
        limit = off_limit(max(pair_noise.get(c, 0.0), NOISE_FLOOR))
        rec = ref_values.get_column(c).cast(pl.Float64).gather(at).fill_null(np.nan).to_numpy()
        pred = ref_table.get_column(c).cast(pl.Float64).gather(units_at).fill_null(np.nan).to_numpy() * share[at]
        judged = (rec >= MIN_JUDGED_COUNT) & (pred >= MIN_JUDGED_COUNT)
        with np.errstate(invalid="ignore", divide="ignore"):
            off = judged & (np.abs(np.log(pred / rec)) > limit)
        uneven[units_at[off]] = True
    return uneven


def _held(ref_bursts: pl.DataFrame, other_bursts: pl.DataFrame, ref_units: Units) -> CounterBatches:
    """The :data:`CounterBatches` of frames that hold every counter: one batch, the counters each has."""
    def batches(common: Sequence[str]) -> Iterator[tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]]:
        ref, other, table = (f.select(c for c in common if c in f.columns)
                             for f in (ref_bursts, other_bursts, ref_units.table))
        yield ref, other, table
    return batches


#: a piece's count of a counter below which its ratio to the apportioned count is not judged (counting noise)
MIN_JUDGED_COUNT = 1000


#: the common counters' values :func:`expand` judges pieces' rates on, a batch of counters at a time: given the
#: counters, per batch (reference bursts, other bursts, reference units' table) with the batch's counters, rows as
#: ``ref_bursts``, ``other_bursts`` and ``ref_units.table`` (issue 23: a wide run's are read from its file)
CounterBatches = Callable[[Sequence[str]], Iterator[tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]]]


def expand(ref_bursts: pl.DataFrame, ref_units: Units, other_bursts: pl.DataFrame, other_units: Units,
           unit_matches: pl.DataFrame, common: list[str], min_duration_ns: int = 0,
           counter_batches: CounterBatches | None = None) -> Expanded:
    """Per reference burst, its source row and share (see the module docstring) from the match table of the two
    runs' units (``unit_matches``, one row per reference unit, ``other_row`` a unit row of ``other_units``);
    ``min_duration_ns``: the shortest piece whose rates are judged (:func:`_uneven`); ``counter_batches``: where
    the common counters' values are read (None: the frames given, which hold them)."""
    u = ref_units.unit
    v = unit_matches.get_column("other_row").fill_null(-1).to_numpy()[u]
    hit = v >= 0
    vs = np.maximum(v, 0)
    piece = np.arange(u.size) - ref_units.first[u]
    work = work_counter(common)
    ref_share = _work_shares(ref_bursts, ref_units, work)
    # pieces pair one to one only where both units are cut alike: as many pieces, each with about the same share
    # of its unit's work (a unit cut at other points, e.g. by writes on a timer of its own, is taken whole)
    same_size = hit & (ref_units.size[u] == other_units.size[vs])
    twin = np.where(same_size, other_units.first[vs] + piece, 0)
    off = same_size & ~(np.abs(ref_share - _work_shares(other_bursts, other_units, work)[twin]) <= PIECE_CUT_TOL)
    cut_elsewhere = np.zeros(ref_units.size.size, bool)
    np.logical_or.at(cut_elsewhere, u, off)
    one_to_one = same_size & ~cut_elsewhere[u]
    # the other run's multi-piece units follow its bursts in the source table
    multi = np.flatnonzero(other_units.size > 1)
    slot = np.full(other_units.size.size, -1, np.int64)
    slot[multi] = other_bursts.height + np.arange(multi.size)
    row = np.where(one_to_one, other_units.first[vs] + piece,
                   np.where(other_units.size[vs] > 1, slot[vs], other_units.first[vs]))
    apportioned = hit & ~one_to_one & (ref_units.size[u] > 1)
    if apportioned.any():
        # each counter's run-to-run noise per burst: the median |log ratio| of the long bursts paired one to one
        single = pl.Series(hit & (ref_units.size[u] == 1) & (other_units.size[vs] == 1)
                           & (ref_bursts.get_column("duration_ns").to_numpy() >= min_duration_ns))
        paired = pl.Series("other_row", other_units.first[vs], pl.Int64)
        long = ref_bursts.get_column("duration_ns").to_numpy() >= min_duration_ns
        uneven_units = np.zeros(ref_units.size.size, bool)
        batches = counter_batches or _held(ref_bursts, other_bursts, ref_units)
        for ref_values, other_values, ref_table in batches(common):
            keyed = ref_bursts.select(THREAD_KEYS).hstack(ref_values)
            noise = {c: float(long_pairs(keyed, other_values, paired, c, single).get_column("dw").abs().median()
                              or 0.0) for c in ref_values.columns if c in other_values.columns}
            uneven_units |= _uneven(long, ref_values, ref_table, ref_units, ref_share, apportioned, common, work,
                                    noise)
        uneven = apportioned & uneven_units[u]
        hit &= ~uneven
    else:
        uneven = apportioned
    row = np.where(hit, row, -1)
    source = pl.concat([other_bursts, other_units.table[multi]]) if multi.size else other_bursts
    apportion = apportioned & hit  # the apportioned units whose pieces' rates held
    share = pl.Series(np.where(apportion & np.isfinite(ref_share), ref_share, 1.0))
    reference = ref_bursts
    if apportion.any():
        counters = [c for c in counter_columns(ref_bursts) if c in ref_units.table.columns]
        sums = ref_units.table.select(pl.col(c).gather(u) for c in counters)
        reference = ref_bursts.with_columns(
            pl.when(pl.Series(apportion)).then(sums.get_column(c)).otherwise(pl.col(c)).alias(c) for c in counters)
    safe = pl.Series(np.where(hit, row, 0))
    gone = np.flatnonzero(~hit)
    per_unit = unit_matches.select("match_score", "same_sig", "same_iter", "msg_agree", "msg_misaligned",
                                   "msg_consistent", "ambiguous_span", "message_absent")[u]
    matches = ref_bursts.select(*THREAD_KEYS, "burst_seq").with_columns(
        source.get_column("burst_seq").gather(safe).scatter(gone, None).alias("other_seq"),
        pl.Series("other_row", row, pl.Int64).scatter(gone, None), *per_unit.get_columns())
    return Expanded(matches, source, reference, share.alias("share"), apportion, uneven)
