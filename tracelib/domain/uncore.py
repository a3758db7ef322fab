"""DRAM traffic of bursts from uncore memory-controller samples (DESIGN §7: "uncore CAS x 64 when present").

Memory-controller CAS counters are per socket, read every few milliseconds by tracer threads that run no
application code (Extrae's uncore readers), so no burst carries them. This module turns those samples into a
per-burst count: on each node, the CAS rate between two samples of a reader is taken as constant, and at every
instant it is shared among the bursts running on the node in proportion to their last-level-cache miss rate
(each burst's misses spread evenly over its duration; by running time when the bursts have no LLC counter).
Traffic while no burst runs (all ranks in MPI or idle) goes to no burst. The result is a measured node total
apportioned by a model, finer than the 64 x LLC-miss estimate (it sees prefetches and write-backs) but not a
per-core measurement.

A run is apportioned whole (:func:`attribute_dram_cas`) or a window of time at a time (issue 23: a 2 GB trace's
9 M samples and 5 M bursts held at once took 1.3 GB): :class:`CasRatePieces` and :class:`DramApportioning` carry
what a window needs of the windows before it (each sample series' last time, each node's running sums at its last
instant, the bursts still running), so that every sum is the same sequence of additions as the whole run's and
the counts are identical.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from synthtrace.tracelib.domain.counter_sanity import sane_samples, without_anomalies
from synthtrace.tracelib.domain.counters import ROLES, resolve

#: column added to bursts: CAS commands (64 bytes each) apportioned to the burst (an alias of role ``dram_cas``)
DRAM_CAS_COLUMN = "DRAM_CAS"
#: one series of samples: a counter of one reader thread (the pieces' order, as the whole run sorts them)
SERIES = ["appl", "task", "thread", "counter"]
#: the rate pieces (:func:`cas_rate_pieces`; ``counter`` as a string)
PIECE_SCHEMA: dict[str, pl.DataType] = {"node": pl.Int32(), "appl": pl.Int32(), "task": pl.Int32(),
                                        "thread": pl.Int32(), "counter": pl.String(), "start_ns": pl.Int64(),
                                        "end_ns": pl.Int64(), "rate": pl.Float64()}


def cas_counters(counters: list[str]) -> list[str]:
    """The counters of ``counters`` (uncore sample names) that count DRAM CAS commands."""
    return ROLES["dram_cas"].matches(sorted(set(counters)))


class CasRatePieces:
    """Piecewise-constant CAS rates from uncore samples (UNCORE_SCHEMA) read a window of time at a time, each
    window's samples later than every sample of the windows before: the last time of each series is carried."""

    def __init__(self, cas: list[str]):
        self.cas = cas
        self._last = pl.DataFrame(schema={k: PIECE_SCHEMA[k] for k in SERIES} | {"time_ns": pl.Int64()})

    def window(self, samples: pl.DataFrame) -> pl.DataFrame:
        """The pieces (:data:`PIECE_SCHEMA`) that end at a sample of ``samples``: one row per pair of consecutive
        samples of a (thread, counter) counting DRAM CAS: node, the series, start_ns, end_ns, rate (CAS per ns),
        in series then time order. A series' first sample starts no piece (the interval it counts started before
        the trace); impossible counts (:mod:`~synthtrace.tracelib.domain.counter_sanity`) give none either."""
        if not self.cas:
            return pl.DataFrame(schema=PIECE_SCHEMA)
        mine = (samples.filter(pl.col("counter").cast(pl.String).is_in(self.cas))
                .select(*SERIES[:3], pl.col("counter").cast(pl.String), "node", "time_ns", "value")
                .with_columns(pl.lit(False).alias("_carried")))
        both = (pl.concat([self._last.with_columns(pl.lit(True).alias("_carried")), mine], how="diagonal_relaxed")
                .sort(*SERIES, "time_ns", maintain_order=True)
                .with_columns(pl.col("time_ns").shift(1).over(SERIES).alias("start_ns")))
        self._last = both.group_by(SERIES).agg(pl.col("time_ns").last()).select(*SERIES, "time_ns")
        return (both.filter(~pl.col("_carried") & pl.col("start_ns").is_not_null()
                            & (pl.col("time_ns") > pl.col("start_ns")) & sane_samples())
                .select(pl.col("node").fill_null(0).cast(pl.Int32), *SERIES, "start_ns",
                        pl.col("time_ns").alias("end_ns"),
                        (pl.col("value") / (pl.col("time_ns") - pl.col("start_ns"))).alias("rate")))


def cas_rate_pieces(samples: pl.DataFrame) -> pl.DataFrame:
    """Piecewise-constant CAS rates per node of a whole run's uncore samples (UNCORE_SCHEMA): node, start_ns,
    end_ns, rate (CAS per ns), as :meth:`CasRatePieces.window`."""
    pieces = CasRatePieces(cas_counters(samples.get_column("counter").unique().cast(pl.String).to_list()))
    return pieces.window(samples).select("node", "start_ns", "end_ns", "rate")


@dataclass
class _Running:
    """A node's running sums at its last instant seen: the CAS rate and the bursts' weight rate there, and the
    CAS per unit of weight accumulated up to it."""

    edge: int
    cas_rate: float
    weight_rate: float
    cum: float


def _levels(edges: np.ndarray, start: float, at_start: np.ndarray, up: np.ndarray, at_end: np.ndarray,
            down: np.ndarray) -> np.ndarray:
    """The running sum of a step function at each of ``edges``: ``start`` at edges[0], then ``up`` added at the
    edges ``at_start`` and ``down`` taken off at ``at_end`` (each edge's changes added first, in order)."""
    level = np.zeros(edges.size, dtype=np.float64)
    level[0] = start
    np.add.at(level, np.searchsorted(edges, at_start), up)
    np.add.at(level, np.searchsorted(edges, at_end), -down)
    return np.cumsum(level)


class DramApportioning:
    """CAS counts of bursts apportioned from rate pieces a window of time ``[lo, hi)`` at a time (in order), each
    node's running sums carried from window to window (:class:`_Running`), and the bursts still running."""

    def __init__(self, keys: list[str]):
        self.keys = keys
        self._running: dict[int, _Running] = {}
        self._open: dict[tuple, tuple[float, float]] = {}  # burst keys -> (weight rate, cum at its start)

    def node_window(self, node: int, bursts: pl.DataFrame, starting: pl.DataFrame, ending: pl.DataFrame,
                    lo: int | None, hi: int | None) -> np.ndarray:
        """CAS count (float) of each of ``bursts`` (one node's, in the run's order: ``keys``, start_ns, end_ns,
        ``_w`` the weight: LLC misses or the duration) that ends in ``[lo, hi)`` (NaN for the others, which must
        start there); ``starting``/``ending``: the node's pieces starting/ending in the window, in the run's order.
        A burst's share at any instant = its weight rate / the sum of the weight rates of the bursts running then."""
        bs = bursts.get_column("start_ns").to_numpy()
        be = bursts.get_column("end_ns").to_numpy()
        w = bursts.get_column("_w").to_numpy()
        dur = (be - bs).astype(np.float64)
        ok = (dur > 0) & np.isfinite(w) & (w > 0)
        rho = np.divide(w, dur, out=np.zeros_like(dur), where=ok)
        st = _inside(bs, lo, hi)
        en = _inside(be, lo, hi)
        out = np.where(en, 0.0, np.nan)
        cs, cr = starting.get_column("start_ns").to_numpy(), starting.get_column("rate").to_numpy()
        ce, er = ending.get_column("end_ns").to_numpy(), ending.get_column("rate").to_numpy()
        s_ok, e_ok = ok & st, ok & en
        edges = np.unique(np.concatenate([bs[s_ok], be[e_ok], cs, ce]))
        was = self._running.get(node)
        if was is not None:
            edges = np.concatenate([[was.edge], edges])
        if edges.size == 0:
            return out
        c = _levels(edges, was.cas_rate if was else 0.0, cs, cr, ce, er)
        r = _levels(edges, was.weight_rate if was else 0.0, bs[s_ok], rho[s_ok], be[e_ok], rho[e_ok])
        g = np.divide(c, r, out=np.zeros_like(c), where=r > 1e-300)  # CAS per unit of weight on each interval
        cum = np.cumsum(np.concatenate([[was.cum if was else 0.0], g[:-1] * np.diff(edges)]))
        self._running[node] = _Running(int(edges[-1]), float(c[-1]), float(r[-1]), float(cum[-1]))
        at_start = np.full(bs.size, np.nan)
        at_start[s_ok] = cum[np.searchsorted(edges, bs[s_ok])]
        held = ok & ~st & en  # started in an earlier window
        if held.any() or (s_ok & ~en).any():
            ids = bursts.select(self.keys).rows()
            for i in np.flatnonzero(held):
                rho[i], at_start[i] = self._open.pop(ids[i])
            for i in np.flatnonzero(s_ok & ~en):
                self._open[ids[i]] = (float(rho[i]), float(at_start[i]))
        done = e_ok
        out[done] = rho[done] * (cum[np.searchsorted(edges, be[done])] - at_start[done])
        return out

    def window(self, bursts: pl.DataFrame, thread_nodes: pl.DataFrame, starting: pl.DataFrame,
               ending: pl.DataFrame, lo: int | None, hi: int | None) -> pl.DataFrame:
        """The bursts (a bursts-like frame, in the run's order) of window ``[lo, hi)`` that end in it, with
        :data:`DRAM_CAS_COLUMN` (Int64 counts); ``bursts`` holds every burst that starts or ends in it, ``thread_nodes``
        (appl, task, thread, node) places them, ``starting``/``ending`` are the pieces that start/end in it."""
        cmap = resolve(bursts)
        weight = cmap.expr("l3_tcm") if cmap.has("l3_tcm") else pl.col("duration_ns").cast(pl.Float64)
        frame = (without_anomalies(bursts)
                 .join(thread_nodes.select("appl", "task", "thread", pl.col("node").fill_null(0)),
                       on=["appl", "task", "thread"], how="left", maintain_order="left")
                 .select(*self.keys, pl.col("node").fill_null(0), "start_ns", "end_ns",
                         weight.fill_null(0.0).alias("_w")))
        cas = np.full(frame.height, np.nan)
        rows = frame.with_row_index("_row")
        # every node with a burst or a rate piece changing here: a node's running sums change without its bursts
        nodes = pl.concat([f.get_column("node") for f in (rows, starting, ending)]).unique().sort().to_list()
        for node in nodes:
            part = rows.filter(pl.col("node") == node)
            cas[part.get_column("_row").to_numpy()] = self.node_window(
                node, part, starting.filter(pl.col("node") == node), ending.filter(pl.col("node") == node), lo, hi)
        ends = ~np.isnan(cas)
        return bursts.filter(pl.Series(ends)).with_columns(
            pl.Series(DRAM_CAS_COLUMN, np.rint(cas[ends]).astype(np.int64)))


def _inside(t: np.ndarray, lo: int | None, hi: int | None) -> np.ndarray:
    """True for the times in ``[lo, hi)`` (None: unbounded); a missing time (NaN) is in the first window."""
    if lo is None:
        return np.ones(t.size, dtype=bool) if hi is None else ~(t >= hi)
    return (t >= lo) & (t < hi) if hi is not None else t >= lo


def apportion(b_start: np.ndarray, b_end: np.ndarray, weight: np.ndarray, c_start: np.ndarray, c_end: np.ndarray,
              c_rate: np.ndarray) -> np.ndarray:
    """CAS count of each burst of one node (float), the whole run at once.

    ``b_start``/``b_end`` (ns) and ``weight`` (LLC misses, or the duration) of the bursts; ``c_*``: the node's
    CAS rate pieces (ns, CAS/ns). See :meth:`DramApportioning.node_window`.
    """
    bursts = pl.DataFrame({"_i": np.arange(b_start.size), "start_ns": b_start, "end_ns": b_end,
                           "_w": np.asarray(weight, dtype=np.float64)})
    pieces = pl.DataFrame({"start_ns": c_start, "end_ns": c_end, "rate": np.asarray(c_rate, dtype=np.float64)})
    return DramApportioning(["_i"]).node_window(0, bursts, pieces, pieces, None, None)


def attribute_dram_cas(bursts: pl.DataFrame, samples: pl.DataFrame, thread_nodes: pl.DataFrame) -> pl.DataFrame:
    """``bursts`` with a :data:`DRAM_CAS_COLUMN` (Int64 counts) apportioned from the run's uncore ``samples``
    (UNCORE_SCHEMA) over the bursts of each node (``thread_nodes``: appl, task, thread, node), the whole run at
    once. Returned unchanged when the bursts already measure DRAM CAS or the samples hold no CAS counter."""
    if bursts.height == 0 or samples.height == 0 or resolve(bursts).has("dram_cas"):
        return bursts
    pieces = CasRatePieces(cas_counters(samples.get_column("counter").unique().cast(pl.String).to_list()))
    whole = pieces.window(samples)
    if whole.height == 0:
        return bursts
    return DramApportioning([]).window(bursts, thread_nodes, whole, whole, None, None)
