"""The analysis stage of one experiment: metrics, rule archetypes and discovered archetypes (DESIGN §7).

:func:`analyse` works on frames, without a warehouse; :func:`synthtrace.pipelines.jobs.analyse` reads an
experiment's trace, calls it and commits the four outputs (``burst_metrics``, ``mpi_metrics``, ``phase_metrics``,
``archetypes``) atomically.

The ``archetypes`` frame has one row per burst, MPI call (those that move data, and collectives) and phase:
experiment, run_id, appl, task, thread, burst_seq (NULL for other units), call_seq (MPI calls only), unit
(``burst``|``mpi``|``phase``), phase, start_ns, duration_ns, archetype, confidence, evidence, could_also_be
(archetypes that counters not recorded could still make win), missing_counters (the counters that would decide),
provisional (the label while it is provisional; for insufficient_counters the best guess), and for bursts the discovered
``cluster`` and ``cluster_archetype``.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import polars as pl

from synthtrace.models.archetype_discovery import ArchetypeDiscovery, DiscoveryError
from synthtrace.models.archetypes import ArchetypeRules, Thresholds
from synthtrace.tracelib.domain.counters import resolve
from synthtrace.tracelib.domain.machine import Machine, load_machine
from synthtrace.tracelib.domain.metrics import (
    assign_phases,
    burst_metrics,
    mpi_metrics,
    phase_metrics,
    ranks_per_socket,
    source_keys,
)
from synthtrace.warehouse.experiment import ExperimentTrace

ARCHETYPE_COLUMNS: dict[str, pl.DataType] = {
    "experiment": pl.String(), "run_id": pl.String(), "appl": pl.Int32(), "task": pl.Int32(), "thread": pl.Int32(),
    "burst_seq": pl.Int64(), "call_seq": pl.Int64(), "unit": pl.String(), "phase": pl.Int64(),
    "start_ns": pl.Int64(), "duration_ns": pl.Int64(), "archetype": pl.String(), "confidence": pl.Float64(),
    "evidence": pl.String(), "could_also_be": pl.List(pl.String()), "missing_counters": pl.List(pl.String()),
    "provisional": pl.String(),
    "cluster": pl.Int64(), "cluster_archetype": pl.String(),
}


@dataclass
class AnalysisResult:
    """The four analysis frames of an experiment, and the discovery figures."""

    burst_metrics: pl.DataFrame
    mpi_metrics: pl.DataFrame
    phase_metrics: pl.DataFrame
    archetypes: pl.DataFrame
    discovery: dict = field(default_factory=dict)

    def frames(self) -> dict[str, pl.DataFrame]:
        return {"burst_metrics": self.burst_metrics, "mpi_metrics": self.mpi_metrics,
                "phase_metrics": self.phase_metrics, "archetypes": self.archetypes}


def _unit_rows(df: pl.DataFrame, unit: str) -> pl.DataFrame:
    """Project a classified frame onto the archetypes schema (absent keys NULL)."""
    exprs = []
    for name, dtype in ARCHETYPE_COLUMNS.items():
        if name == "unit":
            exprs.append(pl.lit(unit).alias("unit"))
        elif name in df.columns and not (unit == "phase" and name in ("task", "thread")):
            exprs.append(pl.col(name).cast(dtype))
        elif name == "duration_ns" and "elapsed_s" in df.columns:
            exprs.append((pl.col("elapsed_s") * 1e9).round().cast(pl.Int64).alias(name))
        else:
            exprs.append(pl.lit(None, dtype).alias(name))
    return df.select(exprs)


def mix(archetypes: pl.DataFrame) -> pl.DataFrame:
    """The archetype mix: per unit and archetype, count, total time (s) and share of the unit's time."""
    return (archetypes.group_by("unit", "archetype")
            .agg(pl.len().alias("count"), (pl.col("duration_ns").sum() * 1e-9).alias("time_s"))
            .with_columns((pl.col("time_s") / pl.col("time_s").sum().over("unit")).alias("time_share"))
            .sort("unit", "time_s", descending=[False, True]))


def analyse(bursts: pl.DataFrame, calls: pl.DataFrame | None, *, machine: Machine | None = None,
            thresholds: Thresholds | None = None, n_nodes: dict[str, int] | None = None,
            discover: bool = True, discovery_params: dict | None = None) -> AnalysisResult:
    """Metrics and archetypes of a bursts-like frame (one run, several runs, or a merged experiment).

    Frames holding several traces are told apart by their ``experiment``/``run_id`` columns; each trace is
    measured against its own rank-per-socket DRAM share. ``n_nodes`` (run_id -> nodes) refines that share.
    """
    machine = machine or load_machine()
    thresholds = thresholds or Thresholds()
    keys = source_keys(bursts)
    groups = bursts.partition_by(keys, as_dict=False, maintain_order=True) if keys else [bursts]
    bm_parts, mm_parts, pm_parts, arch_parts = [], [], [], []
    rps_by_size: list[tuple[int, float]] = []
    for g in groups:
        g = g.filter(pl.col("appl").is_not_null()) if "appl" in g.columns else g
        rid = g["run_id"][0] if "run_id" in g.columns and g.height else None
        rps = ranks_per_socket(g, machine, (n_nodes or {}).get(rid))
        rps_by_size.append((g.height, rps))
        rules = ArchetypeRules(machine, thresholds, ranks_per_socket=rps, counter_map=resolve(g)).fit()
        gc = None
        if calls is not None and calls.height:
            gc = calls
            for k in keys:
                gc = gc.filter(pl.col(k) == g[k][0]) if k in calls.columns else gc
        bm = burst_metrics(g, machine, ranks_per_socket=rps)
        bm, gc = assign_phases(bm, gc)
        pm = rules.classify_phases(phase_metrics(bm, gc, machine, ranks_per_socket=rps))
        bm_parts.append(bm)
        pm_parts.append(pm)
        cb = rules.classify_bursts(bm)
        arch_parts.append(("burst", cb))
        if gc is not None and gc.height:
            mm = mpi_metrics(gc, machine, bm)
            mm_parts.append(mm)
            arch_parts.append(("mpi", rules.classify_mpi(mm)))
        arch_parts.append(("phase", pm))
    bm_all = pl.concat(bm_parts, how="diagonal_relaxed")
    summary: dict = {}
    cluster = pl.Series("cluster", [None] * bm_all.height, dtype=pl.Int64)
    cluster_arch = pl.Series("cluster_archetype", [None] * bm_all.height, dtype=pl.String)
    if discover and bm_all.height:
        rps = max(rps_by_size)[1]
        params = {"machine": machine, "thresholds": thresholds, "ranks_per_socket": rps, **(discovery_params or {})}
        burst_labels = pl.concat([df["archetype"] for u, df in arch_parts if u == "burst"])
        try:
            disc = ArchetypeDiscovery(**params).fit(bm_all, burst_labels)
            cluster, cluster_arch = disc.predict_cluster(bm_all), disc.predict(bm_all)
            summary = disc.summary()
        except DiscoveryError as exc:
            summary = {"skipped": str(exc)}
    arch_frames = []
    offset = 0
    for unit, df in arch_parts:
        if unit == "burst":
            df = df.with_columns(cluster.slice(offset, df.height).alias("cluster"),
                                 cluster_arch.slice(offset, df.height).alias("cluster_archetype"))
            offset += df.height
        arch_frames.append(_unit_rows(df, unit))
    archetypes = pl.concat(arch_frames, how="vertical")
    empty_mpi = pl.DataFrame(schema={"experiment": pl.String, "run_id": pl.String})
    return AnalysisResult(
        burst_metrics=bm_all.drop("missing_roles"),
        mpi_metrics=pl.concat(mm_parts, how="diagonal_relaxed") if mm_parts else empty_mpi,
        phase_metrics=pl.concat(pm_parts, how="diagonal_relaxed").drop(
            "could_also_be", "missing_counters", "provisional", strict=False
        ),
        archetypes=archetypes,
        discovery=summary,
    )


def analyse_input(inp: ExperimentTrace, *, machine: Machine | None = None, thresholds: Thresholds | None = None,
                  discover: bool = True) -> AnalysisResult:
    """:func:`analyse` on an experiment's trace labelled with ``experiment`` and ``run_id`` (see
    :meth:`~synthtrace.warehouse.experiment.ExperimentTrace.labelled`)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=RuntimeWarning)
        return analyse(inp.bursts, inp.calls, machine=machine, thresholds=thresholds, n_nodes=inp.n_nodes,
                       discover=discover)
