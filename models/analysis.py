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
from dataclasses import dataclass, field, replace

import polars as pl

from synthtrace.models.archetype_discovery import ArchetypeDiscovery, DiscoveryError
from synthtrace.models.archetypes import ArchetypeRules, Thresholds
from synthtrace.tracelib.domain.counters import CounterMap, resolve
from synthtrace.tracelib.domain.machine import Machine, load_machine
from synthtrace.tracelib.domain.sums import float_sum
from synthtrace.tracelib.domain.metrics import (
    BURST_FLAG_COLUMNS,
    BURST_ID_COLUMNS,
    assign_phases,
    burst_metrics,
    combine_phase_units,
    mpi_metrics,
    phase_units,
    phase_units_metrics,
    ranks_per_socket,
    source_keys,
    world_collectives,
)
from synthtrace.tracelib.domain.uncore import DRAM_CAS_COLUMN
from synthtrace.tracelib.schema import counter_columns
from synthtrace.warehouse.analysis_store import (
    BURST_ORDER,
    WINDOW_KEYS,
    AnalysisInput,
    AnalysisParts,
    StoredParts,
    TraceWindows,
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
    """The four analysis frames of an experiment, and the discovery figures. A frame is whole in memory, or (the
    analysis of a stored experiment) :class:`~synthtrace.warehouse.analysis_store.StoredParts` or a lazy scan."""

    burst_metrics: pl.DataFrame | StoredParts | pl.LazyFrame
    mpi_metrics: pl.DataFrame | StoredParts | pl.LazyFrame
    phase_metrics: pl.DataFrame | StoredParts | pl.LazyFrame
    archetypes: pl.DataFrame | StoredParts | pl.LazyFrame
    discovery: dict = field(default_factory=dict)

    def frames(self) -> dict[str, pl.DataFrame | StoredParts | pl.LazyFrame]:
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


def mix(archetypes: pl.DataFrame | pl.LazyFrame | StoredParts) -> pl.DataFrame:
    """The archetype mix: per unit and archetype, count, total time (s) and share of the unit's time."""
    return (archetypes.lazy().group_by("unit", "archetype")
            .agg(pl.len().alias("count"), (float_sum(pl.col("duration_ns")) * 1e-9).alias("time_s"))
            .with_columns((pl.col("time_s") / pl.col("time_s").sum().over("unit")).alias("time_share"))
            .sort("unit", "time_s", descending=[False, True]).collect())


#: the bursts discovery is fitted on at most (a deterministic sample, every k-th burst, beyond): its fitted figures
#: are those of the whole trace up to this size
DISCOVERY_SAMPLE_ROWS = 200_000
#: what :func:`mpi_metrics` reads of the burst a call closes
_CLOSING = ["experiment", "run_id", "appl", "task", "thread", "end_ns", "flops", "instructions"]


def metric_inputs(names: list[str], cmap: CounterMap) -> list[str]:
    """The columns of a bursts-like frame (column ``names``, in order) the metrics, rules and discovery read: its
    keys and times and the counters ``cmap`` (resolved on all of ``names``) gives a role. A run sampling thousands
    of counter types no role knows is read as these few (attack 18 F2: not bursts x counter types)."""
    used = {*BURST_ID_COLUMNS, *BURST_FLAG_COLUMNS, *BURST_ORDER, *WINDOW_KEYS, DRAM_CAS_COLUMN, *cmap.fp_arith}
    used |= {c for cols in cmap.columns.values() for c in cols}
    return [c for c in names if c in used]


def _frames_of(bursts: pl.DataFrame, calls: pl.DataFrame | None) -> list[TraceWindows]:
    """An in-memory bursts-like frame (and its MPI calls) as one window per trace it holds (see :func:`analyse`)."""
    keys = source_keys(bursts)
    groups = bursts.partition_by(keys, as_dict=False, maintain_order=True) if keys else [bursts]
    out = []
    for g in groups:
        g = g.filter(pl.col("appl").is_not_null()) if "appl" in g.columns else g
        gc = None
        if calls is not None and calls.height:
            gc = calls
            for k in keys:
                gc = gc.filter(pl.col(k) == g[k][0]) if k in calls.columns else gc
        out.append(TraceWindows(g.lazy(), gc.lazy() if gc is not None else None, [pl.lit(True)], ordered=False))
    return out


def analyse(bursts: pl.DataFrame, calls: pl.DataFrame | None, *, machine: Machine | None = None,
            thresholds: Thresholds | None = None, n_nodes: dict[str, int] | None = None,
            discover: bool = True, discovery_params: dict | None = None) -> AnalysisResult:
    """Metrics and archetypes of a bursts-like frame (one run, several runs, or a merged experiment).

    Frames holding several traces are told apart by their ``experiment``/``run_id`` columns; each trace is
    measured against its own rank-per-socket DRAM share. ``n_nodes`` (run_id -> nodes) refines that share.
    """
    return analyse_windows(_frames_of(bursts, calls), AnalysisParts(), machine=machine, thresholds=thresholds,
                           n_nodes=n_nodes, discover=discover, discovery_params=discovery_params, sample_rows=None)


def _world(trace: TraceWindows) -> pl.DataFrame | None:
    """The world collectives of a trace (None: no MPI calls, every burst in phase 0)."""
    calls = trace.calls
    if calls is None or "mpi_kind" not in calls.collect_schema() or not calls.select(pl.len()).collect().item():
        return None
    return world_collectives(calls)


def analyse_windows(traces: list[TraceWindows], parts: AnalysisParts, *, machine: Machine | None = None,
                    thresholds: Thresholds | None = None, n_nodes: dict[str, int] | None = None,
                    discover: bool = True, discovery_params: dict | None = None,
                    sample_rows: int | None = DISCOVERY_SAMPLE_ROWS) -> AnalysisResult:
    """:func:`analyse` a window at a time: each trace's windows are measured and classified in turn and written
    to ``parts``; phases are measured from the per-rank sums of every window (exact: sums of ns and counts).
    Labels and metrics are those of the whole trace. Discovery is fitted on every burst up to ``sample_rows``
    (None: no limit), beyond on every k-th burst, and predicts every burst a window at a time."""
    machine = machine or load_machine()
    thresholds = thresholds or Thresholds()
    total = sum(t.count() for t in traces) if sample_rows is not None else 0
    step = max(1, -(-total // sample_rows)) if sample_rows else 1
    sample: list[pl.DataFrame] = []
    labels: list[pl.Series] = []
    seen = 0
    rps_by_size: list[tuple[int, float]] = []
    burst_parts: list[int] = []  # archetypes parts holding bursts (cluster columns filled in after discovery)
    for k, trace in enumerate(traces):
        trace.prepare(parts, f"dram-{k}")  # the run's uncore DRAM CAS apportioned a window of time at a time
        names = trace.bursts.collect_schema().names()  # once (review: it was collected six times a trace)
        cmap = resolve(names)
        trace = replace(trace, bursts=trace.bursts.select(metric_inputs(names, cmap)),
                        # the calls' measures read keys, times and bytes, never a counter (attack 19 F6)
                        calls=None if trace.calls is None else trace.calls.drop(counter_columns(trace.calls)))
        rid = trace.bursts.select(pl.col("run_id").first()).collect().item() if "run_id" in names else None
        # its threads, read once as a frame (no other schema to collect): what the ranks per socket count
        threads = trace.bursts.select([c for c in ("appl", "task", "thread") if c in names]).unique().collect()
        rps = ranks_per_socket(threads, machine, (n_nodes or {}).get(rid))
        rules = ArchetypeRules(machine, thresholds, ranks_per_socket=rps, counter_map=cmap).fit()
        world = _world(trace)
        units, n, closing = [], 0, None
        for where in trace.windows:
            b = trace.bursts_in(where)
            if not b.height:
                continue
            c = trace.calls_in(where)
            bm = burst_metrics(b, machine, ranks_per_socket=rps)
            del b
            bm, c = assign_phases(bm, c, world=world)
            units.append(phase_units(bm, c))
            n += bm.height
            cb = rules.classify_bursts(bm)
            if discover:
                keep = pl.select((pl.int_range(seen, seen + bm.height, dtype=pl.Int64) % step) == 0).to_series()
                sample.append(bm.filter(keep) if step > 1 else bm)
                labels.append(cb["archetype"].filter(keep) if step > 1 else cb["archetype"])
            seen += bm.height
            burst_parts.append(parts.add("archetypes", _unit_rows(cb, "burst")))
            del cb
            if c is not None and c.height:
                # the burst a call closes may be in the window before (the last of its thread there)
                work = bm.select([k for k in _CLOSING if k in bm.columns])
                prev = bm if closing is None else pl.concat([closing, work], how="diagonal_relaxed")
                mm = mpi_metrics(c, machine, prev)
                parts.add("mpi_metrics", mm)
                parts.add("archetypes", _unit_rows(rules.classify_mpi(mm), "mpi"))
                closing = (work if closing is None else pl.concat([closing, work], how="diagonal_relaxed")).group_by(
                    [k for k in ("experiment", "run_id", "appl", "task", "thread") if k in work.columns],
                    maintain_order=True).last()
            parts.add("burst_metrics", bm.drop("missing_roles"))
        rps_by_size.append((n, rps))
        if units:
            pm = rules.classify_phases(phase_units_metrics(combine_phase_units(units), machine, ranks_per_socket=rps))
            parts.add("phase_metrics", pm.drop("could_also_be", "missing_counters", "provisional", strict=False))
            parts.add("archetypes", _unit_rows(pm, "phase"))
    summary: dict = {}
    if discover and seen:
        rps = max(rps_by_size)[1]
        params = {"machine": machine, "thresholds": thresholds, "ranks_per_socket": rps, **(discovery_params or {})}
        fitted = pl.concat(sample, how="diagonal_relaxed")
        try:
            disc = ArchetypeDiscovery(**params).fit(fitted, pl.concat(labels))
            del fitted, sample
            summary = disc.summary() | ({"sampled_every": step} if step > 1 else {})
            for i, part in enumerate(burst_parts):
                bm = parts.get("burst_metrics", i)
                parts.replace("archetypes", part, parts.get("archetypes", part).with_columns(
                    disc.predict_cluster(bm).alias("cluster"), disc.predict(bm).alias("cluster_archetype")))
        except DiscoveryError as exc:
            summary = {"skipped": str(exc)}
    empty_mpi = pl.DataFrame(schema={"experiment": pl.String, "run_id": pl.String})
    empty = pl.DataFrame(schema=ARCHETYPE_COLUMNS)
    return AnalysisResult(
        burst_metrics=parts.frame("burst_metrics", pl.DataFrame()),
        mpi_metrics=parts.frame("mpi_metrics", empty_mpi),
        phase_metrics=parts.frame("phase_metrics", pl.DataFrame()),
        archetypes=parts.frame("archetypes", empty),
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


def analyse_stored(inp: AnalysisInput, parts: AnalysisParts, *, machine: Machine | None = None,
                   thresholds: Thresholds | None = None, discover: bool = True) -> AnalysisResult:
    """:func:`analyse_windows` on a stored experiment's windows (:func:`~synthtrace.warehouse.analysis_store.
    load_experiment_windows`), its frames written to ``parts``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=RuntimeWarning)
        return analyse_windows(inp.traces, parts, machine=machine, thresholds=thresholds, n_nodes=inp.n_nodes,
                               discover=discover)
