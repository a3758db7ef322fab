"""Plots and the self-contained HTML report of an analysed warehouse (DESIGN §7, §9).

Plots (matplotlib Figures built without pyplot: no global state, safe in the nightly flow's threads; every function
returns the Figure and the number of points it drew, so tests can check the artists before anything is saved):

- :func:`plot_roofline` — cache-aware roofline, one panel per memory level measured (L2, L3, DRAM), bursts
  coloured by archetype and sized by time; an *instruction* roofline (instructions/s vs instructions per DRAM
  byte) when the trace has no FP counters;
- :func:`plot_ridgeline` — the Ridgeline plane of phases: operational intensity (work per DRAM byte) against
  communication intensity (work per network byte), with the compute / memory / network regions of the machine;
- :func:`plot_timeline` — ranks x time coloured by archetype with the phase strip and, below, the phases'
  use of compute, memory and network against their roofs (campaign-diagram style).

:func:`build_report` writes one HTML file with the PNGs embedded as base64: it needs no network and no other file.
"""
from __future__ import annotations

import base64
import contextlib
import errno
import hashlib
import html
import io
import json
import math
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import matplotlib
import numpy as np
import polars as pl
from matplotlib.axis import Axis
from matplotlib.axes import Axes
from matplotlib.collections import PathCollection, PolyCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import EngFormatter, FuncFormatter, NullLocator

from synthtrace.models.analysis import analyse_stored, mix
from synthtrace.models.archetypes import ARCHETYPES, BALANCED, INSUFFICIENT, Thresholds
from synthtrace.tracelib.atomic_file import write_atomically
from synthtrace.tracelib.domain.machine import Machine, MachineProfileError
from synthtrace.tracelib.domain.counters import same_quantity
from synthtrace.tracelib.domain.metrics import MISSING_ROLES, ranks_per_socket
from synthtrace.tracelib.formats.source import files_under
from synthtrace.tracelib.domain.sums import float_sum
from synthtrace.warehouse.analysis_store import (
    AnalysisParts,
    experiments,
    load_experiment_windows,
)
from synthtrace.warehouse.layout import ReadOnlyWarehouseError, Warehouse
from synthtrace.warehouse.parts import read_part, read_parts, scan_parts
from synthtrace.warehouse.runs import runs_table
from synthtrace.warehouse.stored import stored_file

# Every text a plot draws comes from data (application, call-site and counter names from traces, a profile's name):
# matplotlib would parse `$...$` in them as TeX, so `run_$SLURM_JOB_ID` drew wrongly and `job_$^$` failed the whole
# report with a ParseSyntaxException (issue 23, attack 7 A4). No plot here uses math text.
matplotlib.rcParams["text.parse_math"] = False
_PALETTE = matplotlib.colormaps["tab20"].colors
#: one fixed colour per archetype, the same in every plot
COLORS: dict[str, tuple] = {a: _PALETTE[i % len(_PALETTE)] for i, a in enumerate(ARCHETYPES)}
COLORS[INSUFFICIENT] = (0.72, 0.72, 0.72)
COLORS[BALANCED] = (0.85, 0.93, 0.85)
MAX_POINTS = 5_000  # largest bursts drawn in a roofline panel (they carry most of the time; more only overlap)
MAX_RANKS = 64  # ranks drawn in the timeline
#: bursts and MPI calls the timeline draws one by one; beyond, it draws them per pixel (issue 23: a 1 GB trace's
#: 3.7 M units took GBs to draw and looked the same)
MAX_TIMELINE_UNITS = 200_000
TIMELINE_BINS = 2_000  # time columns of a timeline drawn per pixel (its axes are ~900 pixels wide)
TOP_CONSUMER_WINDOW = 500_000  # bursts joined with their labels at a time for the top consumers


def _plain_ticks(*axes: Axis) -> None:
    """Decade ticks with plain-text labels (``1000``, ``0.01``, ``1e+06``) on log or symlog axes, set after their
    scale. matplotlib's default ``10^{3}`` labels go through its mathtext parser, and its eight unlabelled minor
    ticks per decade are each a set of artists laid out on every draw: together most of a report's time."""
    for axis in axes:
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_locator(NullLocator())


def _color(name: str | None) -> tuple:
    return COLORS.get(name or INSUFFICIENT, (0.5, 0.5, 0.5))


def _sizes(seconds: np.ndarray) -> np.ndarray:
    """Marker areas (pt^2) growing with the square root of a burst's share of the time shown."""
    total = float(np.nansum(seconds)) or 1.0
    return 6.0 + 600.0 * np.sqrt(np.clip(seconds / total, 0.0, 1.0))


@dataclass
class PlotInfo:
    """What a plot function drew: the figure, points per panel, and the work unit (``flop`` or ``instruction``)."""

    figure: Figure
    points: dict[str, int]
    unit: str = "flop"

    @property
    def n_points(self) -> int:
        return sum(self.points.values())


# ============================================================================ roofline
def roofline_points(bm: pl.DataFrame | pl.LazyFrame, x: str, y: str, max_points: int = MAX_POINTS) -> pl.DataFrame:
    """The bursts a roofline panel draws: finite positive coordinates, the ``max_points`` longest (in their order
    when there are no more)."""
    lf = bm.lazy().filter(pl.col(x).is_finite() & pl.col(y).is_finite() & (pl.col(x) > 0) & (pl.col(y) > 0))
    if lf.select(pl.len()).collect(engine="streaming").item() > max_points:
        lf = lf.sort("duration_s", descending=True, maintain_order=True).head(max_points)
    return lf.collect(engine="streaming")


def plot_roofline(bm: pl.DataFrame | pl.LazyFrame, machine: Machine, *, ranks_per_socket: float | None = None,
                  label_column: str = "archetype", max_points: int = MAX_POINTS,
                  labels: Callable[[pl.DataFrame], pl.DataFrame] | None = None) -> PlotInfo:
    """Cache-aware roofline of bursts (one panel per level with traffic measured). ``bm`` is burst metrics joined
    with a label column (default ``archetype``), or ``labels`` adds it (and ``provisional``) to the points drawn."""
    bm = bm.lazy()
    columns = bm.collect_schema().names()
    measured = bm.select(pl.col(c).drop_nulls().len().alias(c) for c in ("flops", "oi_l2", "oi_l3", "oi_dram")
                         if c in columns).collect(engine="streaming").row(0, named=True) if columns else {}
    has_flops = bool(measured.get("flops")) and bm.select((pl.col("flops").fill_null(0) > 0).any()).collect(
        engine="streaming").item()
    if has_flops:
        unit, rate = "flop", "flop_rate"
        panels = [(lvl, col, bw) for lvl, col, bw in (
            ("L2", "oi_l2", machine.cache_bw_core("l2")), ("L3", "oi_l3", machine.cache_bw_core("l3")),
            ("DRAM", "oi_dram", machine.dram_share(ranks_per_socket)))
            if measured.get(col) and bw]
        peak = machine.peak_flops_core()
        ceilings = {isa: machine.peak_flops_core(isa) for isa in machine.peak_flops_per_cycle}
    else:
        unit, rate = "instruction", "_ips"
        bm = bm.with_columns((pl.col("instructions") / pl.col("duration_s")).alias("_ips"))
        panels = [("DRAM", "ins_per_byte", machine.dram_share(ranks_per_socket))]
        peak = machine.peak_ips_core(4.0)
        ceilings = {"4 IPC": peak, "1 IPC": machine.peak_ips_core(1.0)}
    if not panels:
        panels = [("DRAM", "oi_dram", machine.dram_share(ranks_per_socket))]
    fig = Figure(figsize=(5.2 * len(panels), 4.4))
    axes = fig.subplots(1, len(panels), squeeze=False)
    points: dict[str, int] = {}
    for ax, (level, col, bw) in zip(axes[0], panels):
        pts = roofline_points(bm, col, rate, max_points)
        pts = labels(pts) if labels is not None else pts
        points[level] = pts.height
        xs = pts[col].to_numpy() if pts.height else np.array([1.0])
        ridge = peak / bw
        lo = min(ridge / 100, float(np.nanmin(xs)) / 2)
        hi = max(ridge * 100, float(np.nanmax(xs)) * 2)
        grid = np.logspace(math.log10(lo), math.log10(hi), 200)
        ax.plot(grid, np.minimum(grid * bw, peak) / 1e9, color="black", lw=1.6,
                label=f"{level} {bw / 1e9:.3g} GB/s")
        for name, c in ceilings.items():
            if c < peak:
                ax.plot(grid, np.minimum(grid * bw, c) / 1e9, color="black", lw=0.7, ls="--")
                ax.text(hi / 1.5, c / 1e9 * 1.05, name, fontsize=7, ha="right")
        # undecided bursts are drawn hollow, in the colour of their provisional archetype
        lab = pl.col(label_column).fill_null(INSUFFICIENT)
        prov = pl.col("provisional") if "provisional" in pts.columns else pl.lit(None, pl.String)
        pts = pts.with_columns(
            lab.alias("_lab"),
            (lab == INSUFFICIENT).alias("_undecided"),
            pl.when(lab == INSUFFICIENT).then(prov.fill_null(INSUFFICIENT)).otherwise(lab).alias("_col"),
        )
        total_s = float(pts["duration_s"].sum() or 1.0) if pts.height else 1.0
        for (name, undecided), sel in sorted(pts.group_by("_col", "_undecided"), key=lambda kv: (kv[0][1], kv[0][0])):
            area = 6.0 + 600.0 * np.sqrt(np.clip(sel["duration_s"].to_numpy() / total_s, 0.0, 1.0))
            ax.scatter(sel[col].to_numpy(), sel[rate].to_numpy() / 1e9, s=area,
                       facecolors="none" if undecided else [_color(name)], edgecolors=[_color(name)],
                       linewidths=0.9 if undecided else 0.0, alpha=0.7,
                       label=f"{name} (provisional)" if undecided else name)
        ax.set_xscale("log")
        ax.set_yscale("log")
        _plain_ticks(ax.xaxis, ax.yaxis)
        ax.set_xlim(lo, hi)
        ax.set_xlabel(f"{'operational' if unit == 'flop' else 'instruction'} intensity ({unit}s / {level} byte)")
        ax.set_ylabel("GFLOP/s per rank" if unit == "flop" else "G instructions/s per rank")
        ax.set_title(f"{level} roofline ({pts.height} bursts)")
        ax.grid(True, which="both", alpha=0.25)
        _legend(ax, loc="lower right")
    fig.tight_layout()
    return PlotInfo(fig, points, unit)


# ============================================================================ Ridgeline
def plot_ridgeline(pm: pl.DataFrame, machine: Machine, *, ranks_per_socket: float | None = None) -> PlotInfo:
    """Phases on the Ridgeline plane (per rank). Phases without network traffic sit on the top edge (▲)."""
    has_flops = "flops" in pm.columns and (pm["flops"].fill_null(0) > 0).any()
    oi, ci = ("oi", "ci") if has_flops else ("oi_ins", "ci_ins")
    unit = "flop" if has_flops else "instruction"
    rps = ranks_per_socket or float(machine.cores_per_socket)
    peak = machine.peak_flops_core() if has_flops else machine.peak_ips_core(4.0)
    bm, bn = machine.dram_share(ranks_per_socket), machine.link_bw() * machine.links_per_node / (rps * machine.sockets)
    pts = pm.filter(pl.col(oi).is_finite() & (pl.col(oi) > 0))
    fig = Figure(figsize=(6.4, 5.0))
    ax = fig.subplots()
    xr, yr = peak / bm, peak / bn
    xs = pts[oi].to_numpy() if pts.height else np.array([xr])
    ys_f = pts[ci].to_numpy() if pts.height else np.array([yr])
    finite_y = ys_f[np.isfinite(ys_f) & (ys_f > 0)]
    lo_x, hi_x = min(xr / 100, np.nanmin(xs) / 3), max(xr * 100, np.nanmax(xs) * 3)
    lo_y = min(yr / 100, np.nanmin(finite_y) / 3) if finite_y.size else yr / 100
    hi_y = max(yr * 100, np.nanmax(finite_y) * 3) if finite_y.size else yr * 100
    # regions: compute (both intensities past their ridges), memory, network
    ax.fill([xr, hi_x, hi_x, xr], [yr, yr, hi_y, hi_y], color="#e8f0fb", label="compute bound")
    ax.fill([lo_x, xr, xr, lo_x], [lo_x * bm / bn, yr, hi_y, hi_y], color="#fdf1e0", label="memory bound")
    ax.fill([lo_x, xr, hi_x, hi_x, lo_x], [lo_x * bm / bn, yr, yr, lo_y, lo_y], color="#f6e3ea", label="network bound")
    ax.plot([xr, xr], [yr, hi_y], color="black", lw=1)
    ax.plot([xr, hi_x], [yr, yr], color="black", lw=1)
    ax.plot([lo_x, xr], [lo_x * bm / bn, yr], color="black", lw=1)
    n = 0
    if pts.height:
        y_plot = np.where(np.isfinite(ys_f) & (ys_f > 0), ys_f, hi_y / 1.5)
        pts = pts.with_columns(pl.Series("_y", y_plot), pl.Series("_top", ~(np.isfinite(ys_f) & (ys_f > 0))))
        for name in sorted(set(pts["archetype"].fill_null(BALANCED).to_list())):
            labelled = False
            for top, marker in ((False, "o"), (True, "^")):
                sel = pts.filter((pl.col("archetype").fill_null(BALANCED) == name) & (pl.col("_top") == top))
                if sel.height:
                    ax.scatter(sel[oi].to_numpy(), sel["_y"].to_numpy(), s=_sizes(sel["elapsed_s"].to_numpy()),
                               marker=marker, color=_color(name) if name != BALANCED else "#4c9a4c", alpha=0.75,
                               edgecolors="black", linewidths=0.3, label=None if labelled else name)
                    labelled = True
                    n += sel.height
    ax.set_xscale("log")
    ax.set_yscale("log")
    _plain_ticks(ax.xaxis, ax.yaxis)
    ax.set_xlim(lo_x, hi_x)
    ax.set_ylim(lo_y, hi_y)
    ax.set_xlabel(f"operational intensity ({unit}s / DRAM byte)")
    ax.set_ylabel(f"communication intensity ({unit}s / network byte)")
    ax.set_title(f"Ridgeline plane: {n} phases (▲ no network traffic)")
    _legend(ax, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)  # beside, never over labels
    fig.tight_layout()
    return PlotInfo(fig, {"phases": n}, unit)


# ============================================================================ timeline
def timeline_bars(arch: pl.DataFrame | pl.LazyFrame, ranks: pl.DataFrame, t0: int,
                  max_units: int = MAX_TIMELINE_UNITS, bins: int = TIMELINE_BINS) -> tuple[pl.DataFrame, bool]:
    """The bars the timeline draws for the bursts and MPI calls of ``ranks`` (task, thread, row ``_y``): unit,
    ``_x0`` (s since ``t0``), ``_len`` (s), row ``_y``, label ``_lab`` (the provisional one where insufficient),
    ``_insuff``, and ``_n`` the units a bar stands for. Up to ``max_units`` units, one bar each; beyond, as a
    trace viewer draws, per pixel: the time axis cut in ``bins`` columns, a unit as long as a column or longer
    drawn itself, the shorter ones of each (row, column, label) as one bar as long as their summed time, stacked
    in the column. Returns the bars and whether they were aggregated."""
    lab = pl.when(pl.col("archetype") == INSUFFICIENT).then(pl.col("provisional")).otherwise(pl.col("archetype"))
    units = (arch.lazy().filter(pl.col("unit").is_in(["burst", "mpi"]))
             .join(ranks.lazy().select("task", "thread", pl.col("_y").cast(pl.Int64)), on=["task", "thread"])
             .select("unit", "start_ns", "duration_ns", "_y", lab.alias("_lab"),
                     (pl.col("archetype") == INSUFFICIENT).alias("_insuff")))
    n, end = units.select(pl.len(), (pl.col("start_ns") + pl.col("duration_ns")).max()).collect(
        engine="streaming").row(0)
    seconds = [((pl.col("start_ns") - t0) * 1e-9).alias("_x0"), (pl.col("duration_ns") * 1e-9).alias("_len")]
    cols = ["unit", "_x0", "_len", "_y", "_lab", "_insuff", "_n"]
    if n <= max_units:
        one = units.with_columns(*seconds, pl.lit(1, pl.UInt32).alias("_n")).select(cols)
        return one.collect(engine="streaming"), False
    width = max(1, -(-(end - t0) // bins))  # ns per column
    long = units.filter(pl.col("duration_ns") >= width).with_columns(*seconds, pl.lit(1, pl.UInt32).alias("_n"))
    short = (units.filter(pl.col("duration_ns") < width)
             .with_columns(((pl.col("start_ns") - t0) // width).alias("_bin"))
             .group_by("unit", "_y", "_bin", "_lab", "_insuff")
             .agg(float_sum(pl.col("duration_ns")).alias("_ns"), pl.len().cast(pl.UInt32).alias("_n"))
             .sort("unit", "_y", "_bin", "_lab", nulls_last=True)
             .with_columns(pl.col("_ns").cum_sum().over("unit", "_y", "_bin").alias("_end"))
             .with_columns(((pl.col("_bin") * width + pl.col("_end") - pl.col("_ns")) * 1e-9).alias("_x0"),
                           (pl.col("_ns") * 1e-9).alias("_len")))
    return pl.concat([long.select(cols), short.select(cols)], how="vertical_relaxed").collect(engine="streaming"), True


def plot_timeline(arch: pl.DataFrame | pl.LazyFrame, pm: pl.DataFrame | None, machine: Machine, *,
                  ranks_per_socket: float | None = None, max_ranks: int = MAX_RANKS,
                  max_units: int = MAX_TIMELINE_UNITS) -> PlotInfo:
    """Ranks x time coloured by archetype (bursts; MPI calls as thin bars), phase strip on top and, below, each
    phase's use of compute, DRAM and network relative to its roofs (campaign diagram). More than ``max_units``
    bursts and calls are drawn per pixel (:func:`timeline_bars`)."""
    lf = arch.lazy()
    ranks = (lf.filter(pl.col("unit") == "burst").select("task", "thread").unique().sort("task", "thread")
             .head(max_ranks).collect(engine="streaming").with_row_index("_y"))
    fig = Figure(figsize=(11, 6.6), layout="constrained")
    grid = fig.add_gridspec(3, 1, height_ratios=[3, 0.12, 1.2])
    ax = fig.add_subplot(grid[0])  # fig.axes[0] holds the bars and nothing else
    strip = fig.add_subplot(grid[1], sharex=ax)  # the phases, between the bars and their use of the roofs
    ax2 = fig.add_subplot(grid[2], sharex=ax)
    strip.set_yticks([])
    strip.tick_params(labelbottom=False, bottom=False)
    # time labels under the bars themselves (not only under the roof panel), in engineering units: 5 ms, 1.2 s
    ax.tick_params(labelbottom=True)
    ax.xaxis.set_major_formatter(EngFormatter(unit="s"))
    ax.set_xlabel("time since the trace's first burst", fontsize=8)
    t0 = int(lf.select(pl.col("start_ns").min()).collect(engine="streaming").item() or 0)
    n = 0
    drawn: set[str] = set()
    undecided_drawn = False
    bars, per_pixel = timeline_bars(lf, ranks, t0, max_units)
    for unit, height in (("burst", 0.8), ("mpi", 0.3)):  # MPI calls: thin bars (hatching thousands is slow)
        d = bars.filter(pl.col("unit") == unit)
        for (name, insuff), g in d.group_by("_lab", "_insuff"):
            ax.add_collection(PolyCollection(
                _bars(g["_x0"].to_numpy(), g["_len"].to_numpy(), g["_y"].to_numpy(), height),
                facecolors=_color(name), edgecolors="none", hatch="..." if insuff else None,
                alpha=0.55 if insuff else 1.0))
            n += int(g["_n"].sum())
            drawn.add(name or INSUFFICIENT)
            undecided_drawn = undecided_drawn or bool(insuff)
    ax.autoscale_view()
    labels = [f"{t}.{th}" for t, th in zip(ranks["task"].to_list(), ranks["thread"].to_list())]
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels, fontsize=6 if len(labels) > 16 else 8)
    ax.set_ylabel("task.thread")
    ax.invert_yaxis()
    handles = [Patch(color=_color(a), label=a) for a in sorted(drawn)]
    if undecided_drawn:
        handles.append(
            Patch(
                facecolor="white",
                edgecolor="black",
                hatch="...",
                label="dotted: insufficient counters,\nprovisional archetype",
            )
        )
    if (bars["unit"] == "mpi").any():
        handles.append(Patch(facecolor="white", edgecolor="white", label="thin bars: MPI calls"))
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_title(f"timeline: {n} bursts and MPI calls of {_tasks_threads(ranks)}, coloured by archetype"
                 + (" (per pixel: each archetype's share of the time)" if per_pixel else ""))
    strip.set_ylabel("phases", rotation=0, ha="right", va="center", fontsize=7)
    if pm is not None and pm.height:
        p = pm.with_columns(
            ((pl.col("start_ns") - t0) * 1e-9).alias("_s"), ((pl.col("end_ns") - t0) * 1e-9).alias("_e")
        )
        for (name,), g in p.group_by("archetype"):  # the phase strip: one collection per archetype
            strip.broken_barh(list(zip(g["_s"].to_list(), (g["_e"] - g["_s"]).to_list())), (0, 1),
                              facecolors=_color(name) if name != BALANCED else "#4c9a4c")
        strip.set_ylim(0, 1)
        ax2.vlines(p["_s"].to_numpy(), 0, 1, transform=ax2.get_xaxis_transform(), color="black", lw=0.3, alpha=0.25)
        rps = ranks_per_socket or float(machine.cores_per_socket)
        share = machine.dram_share(ranks_per_socket)
        net = machine.link_bw() * machine.links_per_node / (rps * machine.sockets)
        has_flops = (p["flops"].fill_null(0) > 0).any() if "flops" in p.columns else False
        work = (
            (pl.col("flops") / (pl.col("elapsed_s") * pl.col("n_ranks")) / machine.peak_flops_core())
            if has_flops
            else (pl.col("instructions") / (pl.col("elapsed_s") * pl.col("n_ranks")) / machine.peak_ips_core(4.0))
        )
        u = p.with_columns(work.alias("compute"),
                           (pl.col("dram_bytes") / (pl.col("elapsed_s") * pl.col("n_ranks")) / share).alias("memory"),
                           (pl.col("network_bytes") / (pl.col("elapsed_s") * pl.col("n_ranks")) / net).alias("network"))
        for col, color in (("compute", "#1f77b4"), ("memory", "#ff7f0e"), ("network", "#d62728")):
            # one segment per phase (phases of different ranks may overlap in time: no connecting lines)
            ax2.hlines(u[col].fill_null(0.0).fill_nan(0.0).to_numpy(), u["_s"].to_numpy(), u["_e"].to_numpy(),
                       color=color, lw=1.6, label=f"{col} / roof")
        ax2.axhline(1.0, color="black", lw=0.6, ls="--")
        ax2.set_yscale("symlog", linthresh=0.01)
        _plain_ticks(ax2.yaxis)
        ax2.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax2.set_ylabel("use of roof")
    ax2.set_xlabel("time since the trace's first burst")
    ax2.xaxis.set_major_formatter(EngFormatter(unit="s"))
    return PlotInfo(fig, {"units": n})


def _bars(start_s: np.ndarray, length_s: np.ndarray, row: np.ndarray, height: float = 0.8) -> np.ndarray:
    """Rectangles (n x 4 corners x (x, y)) of bars starting at ``start_s`` lasting ``length_s`` on rows ``row``."""
    x0, x1 = start_s, start_s + length_s
    y0, y1 = row - height / 2, row + height / 2
    return np.stack([np.column_stack(c) for c in ((x0, y0), (x0, y1), (x1, y1), (x1, y0))], axis=1)


def _tasks_threads(ranks: pl.DataFrame) -> str:
    """'8 tasks', or '1 task x 24 threads' (the most threads of any task) for the (task, thread) rows drawn."""
    tasks = ranks["task"].n_unique()
    threads = int(ranks.group_by("task").len()["len"].max() or 0)
    what = f"{tasks} task{'s' if tasks != 1 else ''}"
    return f"{what} x {threads} threads" if threads > 1 else what


# ============================================================================ alerts
MAX_ALERT_PLOTS = 12  # alerts drawn over their nights (the strongest first)


def plot_alert_history(history: pl.DataFrame, alert: dict) -> PlotInfo:
    """One alert's series over the nights: time per visit of its call site (µs) and, on a second axis, the signal
    that moved most (largest |z|), with the night of the change marked. ``history`` is
    :func:`synthtrace.models.site_signals.site_history` of the alert's application."""
    h = history.filter((pl.col("config") == alert["config"]) & (pl.col("call_site") == alert["call_site"])
                       ).sort("started_at")
    fig = Figure(figsize=(6.4, 2.6))
    ax = fig.subplots()
    nights = h["started_at"].to_list()
    ax.plot(nights, (h["time_ns"] / 1e3).to_list(), marker="o", ms=3, lw=1.2, color="#1f77b4", label="time per visit")
    ax.set_ylabel("µs per visit", color="#1f77b4")
    moved = sorted((sg for sg in alert.get("signals") or [] if sg.get("name") in h.columns and sg["name"] != "time_ns"),
                   key=lambda sg: -abs(sg.get("z") or 0.0))
    if moved:
        ax2 = ax.twinx()
        ax2.plot(
            nights, h[moved[0]["name"]].to_list(), marker="s", ms=3, lw=1.0, color="#d62728", label=moved[0]["name"]
        )
        ax2.set_ylabel(moved[0]["name"], color="#d62728")
    if alert.get("changed_at") is not None:
        ax.axvline(alert["changed_at"], color="black", lw=0.8, ls="--")
    ax.set_title(f"{alert['app']} {alert['config']} at {alert['call_site']}", fontsize=9)
    fig.autofmt_xdate()
    fig.tight_layout()
    return PlotInfo(fig, {"nights": h.height})


def alerts_section(wh: Warehouse, alerts: pl.DataFrame | None) -> str:
    """The alerts table (signals as ``name before → after (z)``) and the strongest alerts' series over the nights."""
    if alerts is None or alerts.height == 0:
        return "<p class='note'>No regression alerts" + (" (detector has not run)." if alerts is None else ".") + "</p>"
    from synthtrace.models.site_signals import site_history

    order = ["score"] if "score" in alerts.columns else []
    alerts = alerts.sort(order, descending=True, nulls_last=True) if order else alerts
    shown = [c for c in ("app", "config", "call_site", "changed_at", "point", "magnitude", "score", "archetype_before",
                         "archetype_after", "signals", "explained_by") if c in alerts.columns]
    parts = ["<div class='alert'>" + _table(alerts.select(shown)) + "</div>"]
    histories: dict[str, pl.DataFrame] = {}
    for alert in alerts.head(MAX_ALERT_PLOTS).iter_rows(named=True):
        if alert["app"] not in histories:
            histories[alert["app"]] = site_history(wh, alert["app"])
        if histories[alert["app"]].height:
            parts.append(_img(figure_png(plot_alert_history(histories[alert["app"]], alert).figure),
                              f"history of {alert['app']} at {alert['call_site']}"))
    return "\n".join(parts)


#: the marker area (points^2) of a scatter's entry in a legend: the points themselves are sized by their time
LEGEND_MARKER_AREA = 30.0


def _legend(ax: Axes, **where: object) -> None:
    """The axes' legend (``where``: matplotlib's placement arguments), each scatter's marker drawn at one size, not
    at its first point's, which could cover its own label and its neighbours'."""
    legend = ax.legend(fontsize=7, **where)
    for handle in legend.legend_handles:
        if isinstance(handle, PathCollection):
            handle.set_sizes([LEGEND_MARKER_AREA])


def figure_png(fig: Figure, path: Path | None = None, dpi: int = 110) -> bytes:
    """Render a figure to PNG bytes (and to ``path`` when given)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    data = buf.getvalue()
    if path is not None:
        write_atomically(path, lambda p: p.write_bytes(data))
    return data


# ============================================================================ report
_CSS = """body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1250px}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ccc;margin-top:28px}h3{font-size:15px}
table{border-collapse:collapse;font-size:12px;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 7px;text-align:right}
th{background:#f2f2f2}td.l,th.l{text-align:left}.bar{display:inline-block;height:9px;background:#4878a8}
.note{color:#666;font-size:12px}img{max-width:100%;border:1px solid #eee;margin:6px 0}.alert{color:#a40000}
.warn{background:#fff3cd;border:1px solid #e0b000;padding:6px 10px;margin:8px 0;font-size:13px}
.warn.bad{background:#f8d7da;border-color:#a40000}nav.toc{font-size:13px;columns:2}nav.toc a{color:#24579a}
nav.toc .l3{margin-left:18px;font-size:12px}"""


def heading(level: int, text: str, anchor: str) -> str:
    """An ``<h2>``/``<h3>`` with an id: the table of contents lists every heading made here."""
    return f"<h{level} id='{html.escape(_anchor(anchor))}'>{html.escape(text)}</h{level}>"


def _anchor(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-").lower() or "section"


_HEADING = re.compile(r"<h([23]) id='([^']+)'>(.*?)</h\1>", re.S)
_WARNING = re.compile(r"<div class='warn[^']*' data-summary='([^']*)'>")


def table_of_contents(body: str) -> str:
    """Links to every heading of ``body`` made by :func:`heading`, sections (h2) and their parts (h3)."""
    items = [f"<div class='l{lvl}'><a href='#{anchor}'>{text}</a></div>"
             for lvl, anchor, text in _HEADING.findall(body)]
    return f"<nav class='toc'><b>Contents</b>{''.join(items)}</nav>" if items else ""


def warning(text: str, *, summary: str, bad: bool = False) -> str:
    """A banner; ``summary`` (plain text) is also listed at the top of the report."""
    return (f"<div class='warn{' bad' if bad else ''}' data-summary='{html.escape(summary, quote=True)}'>"
            f"&#9888; {text}</div>")


def warnings_in(body: str) -> list[str]:
    """The summaries of the banners in ``body`` (HTML-escaped text)."""
    return _WARNING.findall(body)



def _table(df: pl.DataFrame, *, bars: str | None = None, max_rows: int = 50) -> str:
    if df.height == 0:
        return "<p class='note'>(none)</p>"
    head = "".join(f"<th class='l'>{html.escape(c)}</th>" if df[c].dtype == pl.String else f"<th>{html.escape(c)}</th>"
                   for c in df.columns)
    rows = []
    for r in df.head(max_rows).iter_rows(named=True):
        cells = []
        for c, v in r.items():
            if isinstance(v, float):
                txt = "" if v is None or math.isnan(v) else (f"{v:.1%}" if c.endswith("share") else f"{v:.4g}")
                if c == bars and not math.isnan(v):
                    txt = f"<span class='bar' style='width:{max(1, int(v * 120))}px'></span> {txt}"
                cells.append(f"<td>{txt}</td>")
            else:
                cells.append(f"<td class='l'>{html.escape(_cell_text(v))}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    more = f"<p class='note'>{df.height - max_rows} more rows not shown</p>" if df.height > max_rows else ""
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>{more}"


def _number(v: float) -> str:
    return "" if v is None or math.isnan(v) else f"{v:.4g}"


def _cell_text(v: object) -> str:
    """A cell as text a reader takes in: lists joined, a signal ``{name, before, after, z}`` as
    ``ipc 1.2 → 0.9 (z -6.1)``, other records as ``key value`` pairs."""
    if v is None:
        return ""
    if isinstance(v, list):
        return "; ".join(_cell_text(x) for x in v)
    if isinstance(v, dict):
        if {"name", "before", "after"} <= v.keys():
            z = f" (z {v['z']:+.1f})" if isinstance(v.get("z"), float) and not math.isnan(v["z"]) else ""
            return f"{v['name']} {_number(v['before'])} → {_number(v['after'])}{z}"
        return ", ".join(f"{k} {_cell_text(x)}" for k, x in v.items())
    if isinstance(v, float):
        return _number(v)
    return str(v)


def _img(png: bytes, alt: str) -> str:
    return f"<img alt='{html.escape(alt)}' src='data:image/png;base64,{base64.b64encode(png).decode()}'>"


def _top_consumers(bm: pl.DataFrame | pl.LazyFrame, arch: pl.DataFrame | pl.LazyFrame, n: int = 15) -> pl.DataFrame:
    """Where the time goes: bursts grouped by what closed them (the MPI call site, else the call; a burst no MPI
    call closes is a thread's last one, ``(end of thread)``, or one of code without MPI, ``(no MPI call)``, as
    in an OpenMP-only trace) and by archetype."""
    from synthtrace.warehouse.export_views import key_windows

    b = (arch.lazy().filter(pl.col("unit") == "burst")
         .select("run_id", "appl", "task", "thread", "burst_seq", "archetype"))
    keys = ["run_id", "appl", "task", "thread", "burst_seq"]
    bm = bm.lazy()
    columns = bm.collect_schema().names()
    last = pl.col("burst_seq") == pl.col("_last")
    lasts = bm.group_by(keys[:-1]).agg(pl.col("burst_seq").max().alias("_last")).collect(engine="streaming")
    site = bm.join(lasts.lazy(), on=keys[:-1], how="left").select(
        *keys, pl.coalesce(pl.col("call_site") if "call_site" in columns else pl.lit(None, pl.String),
                           pl.col("mpi_call") if "mpi_call" in columns else pl.lit(None, pl.String),
                           pl.when(last).then(pl.lit("(end of thread)")).otherwise(pl.lit("(no MPI call)"))
                           ).alias("closed_by"), "duration_s", "ipc")
    # issue 23: joined a window of bursts at a time (the whole join took 0.9 GB for a 2 GB trace's 5 M bursts)
    parts = [site.filter(where).join(b.filter(where), on=keys, how="left")
             .group_by("closed_by", "archetype")
             .agg(pl.len().alias("bursts"), pl.col("duration_s").sum().alias("time_s"),
                  pl.col("ipc").sum().alias("_ipc"), pl.col("ipc").count().alias("_n_ipc"))
             .collect(engine="streaming") for where in key_windows(bm, keys[1:], TOP_CONSUMER_WINDOW)]
    per = (pl.concat(parts).group_by("closed_by", "archetype")
           .agg(pl.col("bursts").sum(), pl.col("time_s").sum(),
                (pl.col("_ipc").sum() / pl.col("_n_ipc").sum()).alias("mean_ipc")))
    total = float(per["time_s"].sum() or 1.0)
    return (
        per.with_columns((pl.col("time_s") / total).alias("time_share"))
        .sort("time_s", descending=True)
        .head(n)
    )


def _optional_view(wh: Warehouse, pattern: str) -> pl.DataFrame | None:
    files = sorted(wh.root.glob(pattern))
    if not files:
        return None
    return read_parts(files)  # [helper integrity] issue 23: checked against the stored checksums


#: Parts of every experiment's section after the built-in ones, in order. Each takes (warehouse, experiment, machine
#: profile) and returns HTML starting with a :func:`heading` of level 3 (the table of contents lists it), or "" when it
#: has nothing to say. Other modules append to it (the POP efficiencies, issue 25); a part's output is cached with
#: its section (:func:`section_key`: the experiment's runs and the files of its folder).
EXPERIMENT_PARTS: list[Callable[[Warehouse, str, Machine], str]] = []
#: Parts of the report after the experiments overview, before the experiment sections: each takes the warehouse
#: and returns HTML starting with a level-2 :func:`heading`, or "". Other modules append to it.
REPORT_PARTS: list[Callable[[Warehouse], str]] = []
#: share of burst time above a roof beyond which the profile is taken for another machine's
ROOF_EXCESS_WARN = 0.01


def merge_verdict(quality: pl.DataFrame) -> tuple[str, str]:
    """An experiment's merge verdict (the worst of its counters') and the reason its worst counter gives."""
    from synthtrace.tracelib.merge.checks import worst

    if "verdict" not in quality.columns or quality.height == 0:
        return "ok", ""
    v = worst(quality["verdict"].fill_null("ok"))
    reasons = (quality.filter(pl.col("verdict") == v)["verdict_reason"].drop_nulls().to_list()
               if "verdict_reason" in quality.columns else [])
    return v, next((r for r in reasons if r), "")


def roof_excess(bm: pl.DataFrame | pl.LazyFrame, machine: Machine) -> dict[str, float]:
    """Share of burst time above each per-core roof of ``machine``: the compute roof (FLOP/s at its widest ISA)
    and, for bursts without FLOP counts, the instruction roof the roofline draws (4 instructions per cycle at the
    profile's clock). A core cannot exceed them: time above means the profile is not the machine's."""
    bm = bm.lazy()
    columns = bm.collect_schema().names()
    if "duration_s" not in columns:
        return {}
    total = float(bm.select(pl.col("duration_s").sum()).collect(engine="streaming").item() or 0.0)
    if total <= 0:
        return {}
    rate = pl.col("duration_s")
    checks = {}
    if "flop_rate" in columns:
        checks[f"compute roof ({machine.peak_flops_core() / 1e9:.3g} GFLOP/s per core)"] = (
            pl.col("flop_rate") > machine.peak_flops_core())
    if "instructions" in columns:
        no_flops = pl.col("flop_rate").is_null() if "flop_rate" in columns else pl.lit(True)
        checks[f"instruction roof ({machine.peak_ips_core(4.0) / 1e9:.3g} G instructions/s per core)"] = (
            no_flops & (pl.col("instructions") / rate > machine.peak_ips_core(4.0)))
    shares = bm.select(*[(pl.when(c.fill_null(False)).then(rate).otherwise(0.0).sum() / total).alias(name)
                         for name, c in checks.items()]).collect(engine="streaming").row(0, named=True)
    return {name: float(v) for name, v in shares.items() if v}


def _profile_warning(name: str, bm: pl.DataFrame | pl.LazyFrame, machine: Machine) -> str:
    over = {roof: share for roof, share in roof_excess(bm, machine).items() if share > ROOF_EXCESS_WARN}
    if not over:
        return ""
    what = "; ".join(f"{share:.1%} of burst time above the {roof}" for roof, share in over.items())
    return warning(f"{html.escape(what)} of the profile <b>{html.escape(machine.name)}</b>: the profile is probably "
                   "not this machine: --machine PRESET (<code>synthtrace machines</code> lists them) or a machine.toml "
                   "beside the traces", summary=f"{name}: the profile is probably not this machine ({what})")


def _counter_advice(arch: pl.DataFrame | pl.LazyFrame, bm: pl.DataFrame | pl.LazyFrame,
                    recorded: list[str]) -> list[str]:
    """What to say of the bursts no archetype rule could decide: the counters that would decide them and no run
    of the experiment recorded (record them in another run and merge); apart, the bursts without any counter
    sample (a thread's last burst: no MPI call closed it, so no counter was read) and those whose recorded counters
    hold no usable value (impossible values are treated as missing)."""
    insuff = arch.lazy().filter((pl.col("unit") == "burst") & (pl.col("archetype") == INSUFFICIENT))
    if not insuff.select(pl.len()).collect(engine="streaming").item():
        return []
    bm = bm.lazy()
    have, columns = insuff.collect_schema().names(), bm.collect_schema().names()
    keys = [k for k in ("run_id", "appl", "task", "thread", "burst_seq") if k in have and k in columns]
    if "missing_roles" in columns and keys:
        sampled = bm.select(*keys, (pl.col("missing_roles").list.len() < len(MISSING_ROLES)).alias("_sampled"))
        insuff = insuff.join(sampled, on=keys, how="left").with_columns(pl.col("_sampled").fill_null(True))
    else:
        insuff = insuff.with_columns(pl.lit(True).alias("_sampled"))
    n_sampled, n_unsampled, unsampled_ns = insuff.select(
        pl.col("_sampled").sum().alias("n"), (~pl.col("_sampled")).sum().alias("u"),
        float_sum(pl.col("duration_ns").filter(~pl.col("_sampled"))).alias("u_ns")).collect(engine="streaming").row(0)
    insuff = insuff.filter(pl.col("_sampled"))

    def is_recorded(label: str) -> bool:
        return any(same_quantity(token, c) or token == c for token in re.findall(r"[A-Za-z0-9_:]+", label)
                   for c in recorded)

    need = (insuff.select("missing_counters", "duration_ns").explode("missing_counters")
            .drop_nulls("missing_counters")
            .group_by("missing_counters").agg(pl.len().alias("bursts"), (float_sum(pl.col("duration_ns")) * 1e-9)
                                                                         .alias("time_s"))
            .collect(engine="streaming")
            .with_columns(pl.col("missing_counters").map_elements(is_recorded, return_dtype=pl.Boolean)
                          .alias("_recorded"))
            .sort("time_s", descending=True))
    parts = []
    absent = (need.filter(~pl.col("_recorded")).drop("_recorded")
              .rename({"missing_counters": "counter that would decide"}))
    if absent.height:
        parts += [f"<p class='note'>{n_sampled} bursts are <b>insufficient_counters</b>: the counters below, which "
                  "no run of this experiment recorded, would decide them (record them in another run and merge).</p>",
                  _table(absent)]
    present = need.filter(pl.col("_recorded"))
    if present.height:
        names = html.escape(", ".join(present["missing_counters"].to_list()))
        parts.append(f"<p class='note'>Bursts lack values of counters the experiment recorded ({names}): impossible "
                     "values are treated as missing (<code>counter_anomalies</code>), or the run that recorded them "
                     "was not merged.</p>")
    if n_unsampled:
        parts.append(f"<p class='note'>{n_unsampled} bursts ({(unsampled_ns or 0) * 1e-9:.3g} s) have "
                     "no counter sample at all: a thread's last burst, which no MPI call closed, so the tracer read no "
                     "counter (no other run can supply them).</p>")
    if n_sampled:
        prov = (insuff.group_by("provisional")
                .agg(pl.len().alias("bursts"), (float_sum(pl.col("duration_ns")) * 1e-9).alias("time_s"))
                .collect(engine="streaming").sort("time_s", descending=True))
        parts += ["<p class='note'>Provisional archetypes of the bursts with samples (first rule that fires among "
                  "those the counters decide):</p>", _table(prov)]
    return parts


#: the columns of the stored archetypes a section does not read: the evidence texts, the alternatives and the
#: clusters, 60 % of the frame's memory (635 of 1,030 MB for a 1 GB trace's 3.7 M bursts and MPI calls, attack 7 A21)
UNREAD_ARCHETYPE_COLUMNS = ("experiment", "confidence", "evidence", "could_also_be", "cluster", "cluster_archetype")


def experiment_section(wh: Warehouse, name: str, machine: Machine, thresholds: Thresholds | None = None,
                       plot_dir: Path | None = None) -> tuple[str, dict]:
    """HTML of one experiment (computing the analysis, without discovery, when it was not stored). The stored
    frames are scanned, never read whole (issue 23): the tables are aggregates, the roofline draws the longest
    bursts and the timeline draws a large trace per pixel."""
    files = {n: stored_file(wh.experiment_dir(name), f"{n}.parquet")
             for n in ("archetypes", "burst_metrics", "phase_metrics")}
    if all(f is not None for f in files.values()):
        arch, bm = scan_parts([files["archetypes"]]), scan_parts([files["burst_metrics"]])
        arch = arch.drop([c for c in UNREAD_ARCHETYPE_COLUMNS if c in arch.collect_schema()])
        discovery = {}
        disc_file = wh.experiment_dir(name) / "archetype_discovery.json"
        if disc_file.is_file():
            discovery = json.loads(disc_file.read_text())
        return _experiment_html(wh, name, machine, arch, bm, read_part(files["phase_metrics"]), discovery, plot_dir)
    with analysis_scratch(wh, name) as folder:
        res = analyse_stored(load_experiment_windows(wh, name), AnalysisParts(folder), machine=machine,
                             thresholds=thresholds, discover=False)
        return _experiment_html(wh, name, machine, res.archetypes.lazy(), res.burst_metrics.lazy(),
                                res.phase_metrics.lazy().collect(), res.discovery, plot_dir)


@contextlib.contextmanager
def analysis_scratch(wh: Warehouse, name: str) -> Iterator[Path]:
    """Where the report's analysis of experiment ``name`` (not analysed yet) keeps its part files: the warehouse's
    scratch in ``.staging`` (:meth:`~synthtrace.warehouse.layout.Warehouse.scratch`, as archetypes and merge keep
    theirs: on the warehouse's disk, a full disk one line naming the experiment), the stale staging of killed
    writers, a killed report's parts among them, cleared first. A warehouse this process cannot write (a reader's
    read-only mount) keeps them in a folder of ``$TMPDIR`` held locked, which the next report clears when its
    holder was killed. They were in ``$TMPDIR`` and a kill -9 left them there for good (attack 9)."""
    from synthtrace.pipelines.cli_base import held_folder

    with contextlib.ExitStack() as stack:
        try:
            folder = stack.enter_context(wh.ensure().scratch(wh.experiment_dir(name), "report"))
        except (ReadOnlyWarehouseError, OSError) as exc:
            if isinstance(exc, OSError) and exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise
            folder = stack.enter_context(held_folder(Path(tempfile.gettempdir()), "synthtrace-report"))
        yield folder


def _experiment_html(wh: Warehouse, name: str, machine: Machine, arch: pl.LazyFrame, bm: pl.LazyFrame,
                     pm: pl.DataFrame, discovery: dict, plot_dir: Path | None) -> tuple[str, dict]:
    """:func:`experiment_section` of an analysis: its archetypes and burst metrics scanned, its phase metrics."""
    parts = [heading(2, f"Experiment {name}", f"experiment-{name}")]
    mq = wh.experiment_dir(name) / "merge_quality.parquet"
    q = read_part(mq) if mq.is_file() else None  # [helper integrity] issue 23
    verdict, reason = merge_verdict(q) if q is not None else ("", "")
    if verdict and verdict != "ok":
        parts.append(warning(
            f"merge verdict <b>{verdict}</b>{': ' + html.escape(reason) if reason else ''}. The merged counters of "
            "this experiment, and the metrics, archetypes and plots drawn from them, may be wrong"
            f"{' (misaligned runs)' if verdict == 'bad' else ''}: check the runs (<code>synthtrace runs</code>) and "
            "the merge quality below.", summary=f"{name}: merge verdict {verdict}" + (f" ({reason})" if reason else ""),
            bad=verdict == "bad"))
    if (note := wh.experiment(name).merge_coverage_note()) is not None:
        parts.append(warning(html.escape(note), summary=note))
    parts.append(_machine_note(machine))
    # plots of one run: the merged trace (one run) or, before a merge, the first run; the table covers every run
    has_run = "run_id" in bm.collect_schema()
    run_ids = (bm.select(pl.col("run_id").unique(maintain_order=True)).collect(engine="streaming")["run_id"].to_list()
               if has_run else [None])
    rid = run_ids[0]
    b = bm.filter(pl.col("run_id") == rid) if rid is not None else bm
    parts.append(_profile_warning(name, bm, machine))
    if q is not None:
        cols = [c for c in ("counter", "verdict", "verdict_reason", "source_run", "method", "coverage",
                            "estimated_error", "estimated_error_p95", "cross_run_diff", "match_rate") if c in q.columns]
        parts += [heading(3, "Merge quality", f"merge-quality-{name}"), _table(q.select(cols))]
    parts += [heading(3, "Archetype mix", f"archetype-mix-{name}"), _table(mix(arch), bars="time_share")]
    experiment_runs = runs_table(wh).filter(pl.col("experiment") == name)
    recorded = (experiment_runs["counters"].explode().drop_nulls().unique().to_list()
                if "counters" in experiment_runs.columns else [])
    parts += _counter_advice(arch, bm, recorded)
    if discovery and "kappa" in discovery:
        parts.append(
            f"<p class='note'>Unsupervised discovery: {discovery.get('n_clusters')} duration-weighted "
            f"clusters on {', '.join(discovery.get('features', []))}; Cohen's kappa vs rules "
            f"{discovery.get('kappa', float('nan')):.3f} on {discovery.get('n_compared')} bursts, bootstrap ARI "
            f"{discovery.get('stability_ari', float('nan')):.3f}.</p>"
        )
    a = arch.filter(pl.col("run_id") == rid) if rid is not None else arch
    p = pm.filter(pl.col("run_id") == rid) if rid is not None and "run_id" in pm.columns else pm
    keys = ["run_id", "appl", "task", "thread", "burst_seq"]

    def labelled(points: pl.DataFrame) -> pl.DataFrame:
        """The roofline's points with their burst's archetype (the labels of their bursts only are read)."""
        mine = a.filter((pl.col("unit") == "burst") & pl.col("burst_seq").is_in(points["burst_seq"].unique().implode()))
        return points.join(mine.select(*keys, "archetype", "provisional").collect(engine="streaming")
                           .with_columns(pl.col(k).cast(points.schema[k]) for k in keys),
                           on=keys, how="left", maintain_order="left")

    rps = ranks_per_socket(b, machine)
    phase_labels = a.filter(pl.col("unit") == "phase").select("run_id", "appl", "phase", "archetype")
    pa = p.join(phase_labels.collect(engine="streaming"),
                on=["run_id", "appl", "phase"], how="left") if "archetype" not in p.columns else p
    stem = f"{name}.{rid}" if rid else name
    parts.append(heading(3, "Roofline, Ridgeline and timeline", f"plots-{name}"))
    if verdict:
        said = "" if verdict == "ok" else f": {html.escape(reason)}" if reason else ""
        parts.append(f"<p class='{'note' if verdict == 'ok' else 'alert'}'>Merge verdict of these plots' data: "
                     f"<b>{verdict}</b>{said}.</p>")
    else:
        parts.append("<p class='note'>Not merged: the plots show one run's own counters.</p>")
    if len(run_ids) > 1:
        parts.append(f"<p class='note'>Plots of run {html.escape(str(rid))}, the first of {len(run_ids)} runs "
                     f"(merge the experiment for one synthetic trace of them all).</p>")
    for kind, plot in (("roofline", lambda: plot_roofline(b, machine, ranks_per_socket=rps, labels=labelled)),
                       ("ridgeline", lambda: plot_ridgeline(pa, machine, ranks_per_socket=rps)),
                       ("timeline", lambda: plot_timeline(a, pa, machine, ranks_per_socket=rps))):
        png = figure_png(plot().figure, (plot_dir / f"{stem}.{kind}.png") if plot_dir else None)
        parts.append(_img(png, f"{kind} of {stem}"))
    parts += [heading(3, "Top time consumers (what closed the burst x archetype)", f"top-consumers-{name}"),
              _table(_top_consumers(bm, arch), bars="time_share")]
    parts += [part(wh, name, machine) for part in EXPERIMENT_PARTS]
    return "\n".join(x for x in parts if x), discovery


#: bump when the HTML of a section changes shape: cached sections of an older shape are not reused
SECTION_FORMAT = 2


def section_key(wh: Warehouse, name: str, machine: Machine, thresholds: Thresholds | None) -> str:
    """What an experiment's section is drawn from: its runs (ids name their content), the files of its folder
    (merge, analysis; by size and modification time), the machine profile and the thresholds."""
    folder = wh.experiment_dir(name)
    # any depth, no linked folder entered; each file stat'ed once (a listing entry keeps its stat)
    files = sorted((os.path.relpath(e.path, folder), st.st_size, st.st_mtime_ns)
                   for e in files_under(folder) for st in (e.stat(),)) if folder.is_dir() else []
    runs = runs_table(wh).filter(pl.col("experiment") == name)["run_id"].sort().to_list()
    what = [SECTION_FORMAT, runs, files, machine.as_dict(), machine.source, thresholds and thresholds.as_dict()]
    return hashlib.sha256(json.dumps(what, default=str).encode()).hexdigest()[:20]


def cached_section(wh: Warehouse, name: str, machine: Machine, thresholds: Thresholds | None = None) -> str:
    """:func:`experiment_section`, drawn once per state of the experiment: kept in ``WAREHOUSE/.cache/report/``
    (outside every view) and reused while :func:`section_key` is unchanged, so a nightly report redraws only the
    experiments that changed. A warehouse that cannot be written to is simply not cached."""
    folder = wh.root / ".cache" / "report" / name  # name: checked by section_key (wh.experiment_dir)
    hit = folder / f"{section_key(wh, name, machine, thresholds)}.html"
    if hit.is_file():
        return hit.read_text(encoding="utf-8")
    section, _ = experiment_section(wh, name, machine, thresholds)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("*.html"):
            old.unlink(missing_ok=True)
        write_atomically(hit, lambda p: p.write_text(section, encoding="utf-8"))  # for a report built meanwhile
    except OSError:  # a read-only warehouse or a full disk: the report is still written, its sections drawn each
        for made in (folder, folder.parent, folder.parent.parent):  # time; [helper edges] no empty cache folder stays
            try:
                made.rmdir()
            except OSError:  # kept sections of other experiments (or not ours to remove)
                break
    return section


def experiment_overview(wh: Warehouse) -> pl.DataFrame:
    """One row per experiment: its applications, first start, runs, whether it was merged, newest first."""
    runs = runs_table(wh)
    if runs.height == 0:
        return runs
    return (
        runs.group_by("experiment")
        .agg(
            pl.col("app").unique().sort().str.join(", ").alias("apps"),
            pl.col("started_at").min(),
            pl.len().alias("runs"),
        )
        .with_columns(
            pl.col("experiment")
            .map_elements(lambda e: (wh.experiment_dir(e) / "merged_bursts.parquet").is_file(), return_dtype=pl.Boolean)
            .alias("merged")
        )
        .sort("started_at", "experiment", descending=True, nulls_last=True)
    )


def latest_per_app(wh: Warehouse) -> list[str]:
    """The newest experiment (by its runs' start) of every application, sorted by app; an experiment holding
    several applications is listed once."""
    runs = runs_table(wh)
    if runs.height == 0:
        return experiments(wh)
    newest = (
        runs.group_by("app", "experiment")
        .agg(pl.col("started_at").min())
        .sort("started_at", "experiment", nulls_last=True)
        .group_by("app", maintain_order=True)
        .last()
        .sort("app")
    )
    return newest["experiment"].unique(maintain_order=True).to_list()


def _machine_note(machine: Machine) -> str:
    """Which machine profile the roofs come from, and its main figures."""
    bw = ", ".join(f"{k} {v:g} GB/s" for k, v in machine.bandwidth_gbs.items())
    return (f"<p class='note'>Machine profile <b>{html.escape(machine.name)}</b> "
            f"({html.escape(machine.source or 'built in')}): {machine.sockets} sockets x "
            f"{machine.cores_per_socket} cores at {machine.frequency_ghz:g} GHz; {html.escape(bw)}. Roofs, archetype "
            "thresholds and the Ridgeline regions use it (change it with --machine).</p>")


def report_sections(wh: Warehouse, experiment: str | None = None) -> list[str]:
    """The experiments the report gives a full section (plots): ``experiment``, else the newest of each app."""
    return [experiment] if experiment else latest_per_app(wh)


def build_report(wh: Warehouse, out: str | Path, *, experiment: str | None = None, machine: str | None = None,
                 thresholds: Thresholds | None = None, plot_dir: Path | None = None,
                 on_step: Callable[[str], None] | None = None) -> Path:
    """Write the self-contained HTML report of the warehouse: one experiment, or an overview of all with full
    sections (plots) for the newest experiment of each application — a nightly report stays readable and quick to
    build however long the history grows. Each experiment's roofs come from ``machine`` (``--machine``: a preset
    or TOML file) when given, else from the ``machine.toml`` beside its traces, else the default preset, as in its
    analysis. ``on_step`` is told each section done (:func:`report_sections` + 1 steps)."""
    step = on_step or (lambda _: None)
    names = report_sections(wh, experiment)
    body = [heading(2, "Alerts", "alerts"), alerts_section(wh, _optional_view(wh, "regressions/*.parquet"))]
    step("alerts")
    if not names:
        body.append("<p>The warehouse holds no experiment yet.</p>")
    elif not experiment:
        body += [heading(2, "Experiments", "experiments"), _table(experiment_overview(wh), max_rows=500)]
    body += [part(wh) for part in REPORT_PARTS]
    profiles: dict[str, list[str]] = {}
    for n in names:
        try:
            profile = wh.experiment(n).machine(machine)  # arch (issue 26): the profile is the experiment's
        except MachineProfileError as exc:  # [helper security2] issue 23 F4: one experiment's bad machine.toml
            if machine is not None or experiment:  # is said in its section; the overview report goes on
                raise
            body += [heading(2, f"Experiment {n}", f"experiment-{n}"),
                     warning(html.escape(str(exc)), summary=f"{n}: not analysed: {exc}", bad=True)]
            step(n)
            continue
        profiles.setdefault(f"<b>{html.escape(profile.name)}</b> ({html.escape(profile.source or 'built in')})",
                            []).append(n)
        body.append(cached_section(wh, n, profile, thresholds) if plot_dir is None else
                    experiment_section(wh, n, profile, thresholds, plot_dir)[0])
        step(n)
    main = "".join(x for x in body if x)
    used = "; ".join(f"{label} for {html.escape(', '.join(exps))}" for label, exps in profiles.items())
    top = [f"<h1>synthtrace report</h1><p class='note'>warehouse {html.escape(str(wh.root))} · generated "
           f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC</p>"]
    if used:
        top.append(f"<p>Machine profile: {used}. Roofs and archetype thresholds come from it "
                   "(<code>--machine</code>, or a machine.toml beside the traces).</p>")
    said = warnings_in(main)
    if said:
        top.append("<div class='warn'><b>Warnings</b><ul>" + "".join(f"<li>{w}</li>" for w in said) + "</ul></div>")
    doc = (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>synthtrace report</title>"
           f"<style>{_CSS}</style></head><body>{''.join(top)}{table_of_contents(main)}{main}</body></html>")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    return write_atomically(out, lambda p: p.write_text(doc, encoding="utf-8"))


# the POP efficiency section (issue 25), a warehouse-level part
from synthtrace.pipelines.report_pop import pop_section  # noqa: E402

REPORT_PARTS.append(pop_section)
