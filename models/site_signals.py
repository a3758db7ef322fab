"""The nightly signals of every application's call sites, for regression detection (DESIGN §8).

From the per-(run, call site, rank) table of :func:`synthtrace.warehouse.history.site_rank_table`: one time
series point per (app, configuration, night, call site) with the site's time per visit and the signals that can
explain a change of it. Besides the call sites, every run has an :data:`APP_TOTAL` series: per rank, all compute
and MPI time of the run, its counters summed.

Points of a series: runs of the same application, configuration (tasks x threads) and night (``experiment`` and
the day of ``started_at``) are one point; they were recorded with different counter sets, so each quantity is
taken from the runs that recorded it. Points are ordered by ``started_at``.
"""
from __future__ import annotations

import polars as pl

from synthtrace.tracelib.domain.sums import exact_sum, float_sum
from synthtrace.warehouse.history import HISTORY_ROLES, site_rank_table
from synthtrace.warehouse.layout import Warehouse

#: the series of the whole application run (all sites of a rank summed)
APP_TOTAL = "(application total)"


def with_app_total(t: pl.DataFrame) -> pl.DataFrame:
    """``t`` plus one :data:`APP_TOTAL` row per (run, rank): every site's compute and MPI time and counters summed,
    as a single visit."""
    keys = ["app", "experiment", "run_id", "started_at", "n_tasks", "n_threads", "appl", "task", "thread"]
    total = t.group_by(keys).agg(
        pl.lit(APP_TOTAL).alias("call_site"), pl.lit(1, pl.Int64).alias("visits"),
        exact_sum(pl.col("compute_ns")), exact_sum(pl.col("mpi_ns")), pl.col("mpi_calls").sum(),
        exact_sum(pl.col("mpi_bytes")),
        *[pl.when(pl.col(r).is_not_null().all()).then(exact_sum(pl.col(r))).alias(r) for r in HISTORY_ROLES]
    ).with_columns(pl.col("compute_ns").alias("compute_med_ns"), pl.col("mpi_ns").alias("mpi_med_ns"))  # one visit
    return pl.concat([t, total.select(t.columns)], how="vertical_relaxed")


def site_history(wh: Warehouse, app: str | list[str] | None = None) -> pl.DataFrame:
    """:func:`site_signals` of the warehouse's :func:`~synthtrace.warehouse.history.site_rank_table` (of ``app``:
    one name or several; default every application)."""
    return site_signals(site_rank_table(wh, app))


def site_signals(t: pl.DataFrame) -> pl.DataFrame:
    """One row per (app, configuration, point, call site) of a :func:`~synthtrace.warehouse.history.site_rank_table`
    frame: the signals of that call site that night (the :data:`APP_TOTAL` site is the whole run: its time is
    the rank's compute + MPI time of the run).

    Signals (NULL where no run of the point recorded what they need):

    - ``time_ns``: time per visit of the site (ns): compute before the call + the call, each the median over
      the rank's visits (robust to a burst stretched by OS noise), averaged over ranks;
    - ``compute_ns``, ``mpi_ns``: its two parts (ns per visit); ``load_balance``: mean / max over ranks of the
      per-visit compute time at the site;
    - ``instructions`` (per visit and rank), ``ipc``, ``l1_mpki``, ``l2_mpki``, ``l3_mpki``, ``br_mpki``,
      ``icache_mpki`` (per 1000 instructions), ``br_per_ins``, ``br_misp_rate`` (mispredicted / branches),
      ``fp_share`` (FP / instructions), ``vec_share`` (vector / FP);
    - ``mpi_bytes``: bytes of the messages the site posts per visit and rank (each point-to-point message at its
      send and its receive end, collectives their sizes; never what a completion call happened to complete, nor
      per call, whose count polls make timing-dependent: see :mod:`synthtrace.warehouse.history`), ``mpi_bw``
      (those bytes / MPI time per visit: bytes per ns = GB/s, including the waits).

    Keys: app, config (``<tasks>x<threads>``), point (experiment@day), started_at (first run of the point),
    run_id (that run), call_site, runs (runs in the point).
    """
    if t.height == 0:
        return pl.DataFrame()
    t = with_app_total(t).with_columns(
        pl.format("{}x{}", pl.col("n_tasks"), pl.col("n_threads")).alias("config"),
        pl.format("{}@{}", pl.col("experiment"), pl.col("started_at").dt.date()).alias("point"))
    ins_ok = pl.col("ins") > 0
    per_run = t.group_by("app", "config", "point", "run_id", "started_at", "call_site").agg(
        pl.col("compute_med_ns").mean().alias("_comp"), pl.col("mpi_med_ns").mean().alias("_mpi"),
        pl.col("visits").sum().alias("_visits"), pl.col("mpi_calls").sum().alias("_calls"),
        float_sum(pl.col("mpi_bytes")).alias("_bytes"),
        pl.col("compute_med_ns").max().alias("_cmax"),
        *[float_sum(pl.col(r)).alias(r) for r in HISTORY_ROLES],
        *[pl.col(r).is_not_null().all().alias(f"_has_{r}") for r in HISTORY_ROLES],
    ).with_columns(*[pl.when(pl.col(f"_has_{r}")).then(pl.col(r)).alias(r) for r in HISTORY_ROLES])
    ins = pl.col("ins")
    rate = lambda c, s=1000.0: pl.when(ins > 0).then(pl.col(c) * s / ins)  # noqa: E731
    per_run = per_run.select(
        "app",
        "config",
        "point",
        "run_id",
        "started_at",
        "call_site",
        (pl.col("_comp") + pl.col("_mpi")).alias("time_ns"),
        pl.col("_comp").alias("compute_ns"),
        pl.col("_mpi").alias("mpi_ns"),
        pl.when(pl.col("_cmax") > 0).then(pl.col("_comp") / pl.col("_cmax")).alias("load_balance"),
        pl.when(ins_ok).then(ins / pl.col("_visits")).alias("instructions"),
        pl.when(pl.col("cyc") > 0).then(ins / pl.col("cyc")).alias("ipc"),
        rate("l1_dcm").alias("l1_mpki"),
        rate("l2_dcm").alias("l2_mpki"),
        rate("l3_tcm").alias("l3_mpki"),
        rate("br_msp").alias("br_mpki"),
        rate("br_ins", 1.0).alias("br_per_ins"),
        rate("l1_icm").alias("icache_mpki"),
        rate("fp_ins", 1.0).alias("fp_share"),
        pl.when(pl.col("fp_ins") > 0).then(pl.col("vec_ins") / pl.col("fp_ins")).alias("vec_share"),
        pl.when(pl.col("_calls") > 0).then(pl.col("_bytes") / pl.col("_visits")).alias("mpi_bytes"),
        pl.when((pl.col("_mpi") > 0) & (pl.col("_calls") > 0))
        .then(pl.col("_bytes") / pl.col("_visits") / pl.col("_mpi"))
        .alias("mpi_bw"),
    )
    signals = [c for c in per_run.columns if c not in ("app", "config", "point", "run_id", "started_at", "call_site")]
    first = (
        per_run.sort("started_at", "run_id")
        .group_by("app", "config", "point", "call_site", maintain_order=True)
        .agg(
            pl.col("started_at").first(),
            pl.col("run_id").first(),
            pl.len().alias("runs"),
            *[pl.col(s).mean() for s in signals],
        )
    )
    # quantities of different runs combine at the point: mispredicted share of branches
    first = first.with_columns(pl.when(pl.col("br_per_ins") > 0).then(pl.col("br_mpki") / 1000 / pl.col("br_per_ins"))
                               .alias("br_misp_rate"))
    return first.sort("app", "config", "call_site", "started_at")
