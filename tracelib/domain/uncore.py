"""DRAM traffic of bursts from uncore memory-controller samples (DESIGN §7: "uncore CAS x 64 when present").

Memory-controller CAS counters are per socket, read every few milliseconds by tracer threads that run no
application code (Extrae's uncore readers), so no burst carries them. This module turns those samples into a
per-burst count: on each node, the CAS rate between two samples of a reader is taken as constant, and at every
instant it is shared among the bursts running on the node in proportion to their last-level-cache miss rate
(each burst's misses spread evenly over its duration; by running time when the bursts have no LLC counter).
Traffic while no burst runs (all ranks in MPI or idle) goes to no burst. The result is a measured node total
apportioned by a model, finer than the 64 x LLC-miss estimate (it sees prefetches and write-backs) but not a
per-core measurement.
"""
from __future__ import annotations

import numpy as np
import polars as pl

from synthtrace.tracelib.domain.counter_sanity import sane_samples, without_anomalies
from synthtrace.tracelib.domain.counters import ROLES, resolve

#: column added to bursts: CAS commands (64 bytes each) apportioned to the burst (an alias of role ``dram_cas``)
DRAM_CAS_COLUMN = "DRAM_CAS"


def cas_rate_pieces(samples: pl.DataFrame) -> pl.DataFrame:
    """Piecewise-constant CAS rates per node from uncore samples (UNCORE_SCHEMA): one row per pair of
    consecutive samples of a (thread, counter) that counts DRAM CAS commands: node, start_ns, end_ns, rate
    (CAS per ns). A series' first sample is left out: the interval it counts started before the trace; so are
    impossible counts (:mod:`~synthtrace.tracelib.domain.counter_sanity`): no rate is known there."""
    cas = ROLES["dram_cas"].matches(samples.get_column("counter").unique().sort().to_list())
    if not cas:
        return pl.DataFrame(schema={"node": pl.Int32, "start_ns": pl.Int64, "end_ns": pl.Int64, "rate": pl.Float64})
    series = ["appl", "task", "thread", "counter"]
    return (samples.filter(pl.col("counter").is_in(cas))
            .sort(*series, "time_ns")
            .with_columns(pl.col("time_ns").shift(1).over(series).alias("start_ns"))
            .filter(pl.col("start_ns").is_not_null() & (pl.col("time_ns") > pl.col("start_ns")) & sane_samples())
            .select(pl.col("node").fill_null(0), "start_ns", pl.col("time_ns").alias("end_ns"),
                    (pl.col("value") / (pl.col("time_ns") - pl.col("start_ns"))).alias("rate")))


def _step_function(edges: np.ndarray, starts: np.ndarray, ends: np.ndarray, rate: np.ndarray) -> np.ndarray:
    """Sum of ``rate`` over the pieces covering each interval [edges[k], edges[k+1]) (piece k bounds in edges)."""
    level = np.zeros(edges.size, dtype=np.float64)
    np.add.at(level, np.searchsorted(edges, starts), rate)
    np.add.at(level, np.searchsorted(edges, ends), -rate)
    return np.cumsum(level)


def apportion(b_start: np.ndarray, b_end: np.ndarray, weight: np.ndarray, c_start: np.ndarray, c_end: np.ndarray,
              c_rate: np.ndarray) -> np.ndarray:
    """CAS count of each burst of one node (float).

    ``b_start``/``b_end`` (ns) and ``weight`` (LLC misses, or the duration) of the bursts; ``c_*``: the node's
    CAS rate pieces (ns, CAS/ns). A burst's share at any instant = its weight rate / the sum of the weight rates
    of the bursts running then.
    """
    out = np.zeros(b_start.size, dtype=np.float64)
    dur = (b_end - b_start).astype(np.float64)
    ok = (dur > 0) & np.isfinite(weight) & (weight > 0)
    if not ok.any() or c_rate.size == 0:
        return out
    bs, be, rho = b_start[ok], b_end[ok], weight[ok] / dur[ok]
    edges = np.unique(np.concatenate([bs, be, c_start, c_end]))
    c = _step_function(edges, c_start, c_end, c_rate)
    r = _step_function(edges, bs, be, rho)
    g = np.divide(c, r, out=np.zeros_like(c), where=r > 1e-300)  # CAS per unit of weight on each interval
    cum = np.concatenate([[0.0], np.cumsum(g[:-1] * np.diff(edges))])
    out[ok] = rho * (cum[np.searchsorted(edges, be)] - cum[np.searchsorted(edges, bs)])
    return out


def attribute_dram_cas(bursts: pl.DataFrame, samples: pl.DataFrame, thread_nodes: pl.DataFrame) -> pl.DataFrame:
    """``bursts`` with a :data:`DRAM_CAS_COLUMN` (Int64 counts) apportioned from the run's uncore ``samples``
    (UNCORE_SCHEMA) over the bursts of each node (``thread_nodes``: appl, task, thread, node). Returned
    unchanged when the bursts already measure DRAM CAS or the samples hold no CAS counter."""
    cmap = resolve(bursts)
    if bursts.height == 0 or samples.height == 0 or cmap.has("dram_cas"):
        return bursts
    pieces = cas_rate_pieces(samples)
    if pieces.height == 0:
        return bursts
    weight = cmap.expr("l3_tcm") if cmap.has("l3_tcm") else pl.col("duration_ns").cast(pl.Float64)
    frame = (without_anomalies(bursts).with_row_index("_row")
             .join(thread_nodes.select("appl", "task", "thread", pl.col("node").fill_null(0)),
                   on=["appl", "task", "thread"], how="left")
             .select("_row", pl.col("node").fill_null(0), "start_ns", "end_ns", weight.fill_null(0.0).alias("_w")))
    cas = np.zeros(bursts.height, dtype=np.float64)
    for (node,), part in frame.group_by("node"):
        mine = pieces.filter(pl.col("node") == node)
        cas[part.get_column("_row").to_numpy()] = apportion(
            part.get_column("start_ns").to_numpy(), part.get_column("end_ns").to_numpy(),
            part.get_column("_w").to_numpy(), mine.get_column("start_ns").to_numpy(),
            mine.get_column("end_ns").to_numpy(), mine.get_column("rate").to_numpy())
    return bursts.with_columns(pl.Series(DRAM_CAS_COLUMN, np.rint(cas).astype(np.int64)))
