"""What the analysis stage reads and writes (DESIGN §5, §7): ``burst_metrics``, ``mpi_metrics``, ``phase_metrics``
and ``archetypes`` beside an experiment's merge, committed together by
:meth:`Experiment.commit <synthtrace.warehouse.experiment.Experiment.commit>` (a reader sees the old analysis or the
new one, never a mix).

What an experiment's analysis reads is its trace (:meth:`Experiment.trace
<synthtrace.warehouse.experiment.Experiment.trace>`): the merged bursts with the MPI calls of the merge's reference
run, or, before a merge, every single run with its own bursts and MPI calls, told apart by ``run_id``.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from synthtrace.tracelib.domain.counter_sanity import anomaly_rules
from synthtrace.tracelib.domain.counters import resolve
from synthtrace.tracelib.domain.uncore import (
    DRAM_CAS_COLUMN,
    PIECE_SCHEMA,
    SERIES,
    CasRatePieces,
    DramApportioning,
    cas_counters,
)
from synthtrace.warehouse.errors import WarehouseError
from synthtrace.warehouse.experiment import MERGED_FILE, Experiment, ExperimentTrace
from synthtrace.warehouse.layout import Warehouse
from synthtrace.warehouse.runs import run_parts, runs_table
from synthtrace.warehouse.stored import missing_file, stored_file, stored_folders, stored_parts
from synthtrace.warehouse.parts import read_part, scan_parts, schema_of

#: the bursts the analysis of a stored experiment holds at a time (issue 23: a window's frames, metrics and
#: rule columns take ~2 kB a burst; the whole 1 GB LULESH tile, 2.5 M bursts, took 5.6 GB)
ANALYSIS_WINDOW_ROWS = 150_000
#: the columns that order a window's bursts and MPI calls (as :func:`~synthtrace.warehouse.runs.run_bursts` and
#: ``run_calls`` give them) and cut a trace into windows (a thread's rows by their start time)
BURST_ORDER = ["appl", "task", "thread", "burst_seq"]
CALL_ORDER = ["appl", "task", "thread", "call_seq"]
WINDOW_KEYS = ["appl", "task", "thread", "start_ns"]
#: what the analysis of one experiment works on (its trace, labelled with ``experiment`` and ``run_id``)
ExperimentInput = ExperimentTrace


def experiments(wh: Warehouse) -> list[str]:
    """Names of the experiments that have runs or a stored merge, sorted (a copied experiment folder is none:
    :func:`~synthtrace.warehouse.stored.stored_folders`)."""
    names = set(runs_table(wh)["experiment"].drop_nulls().to_list())
    names |= {name for name in stored_folders(wh.root, "experiments")
              if stored_file(wh.experiment_dir(name), MERGED_FILE) is not None}
    return sorted(names)


def load_experiment(wh: Warehouse, experiment: str) -> ExperimentInput:
    """What the analysis of ``experiment`` reads (its trace, labelled); raises
    :class:`~synthtrace.warehouse.errors.UnknownExperimentError`."""
    return wh.experiment(experiment).trace().labelled()


def read_analysis(wh: Warehouse, experiment: str, name: str, without: tuple[str, ...] = ()) -> pl.DataFrame | None:
    """One stored analysis frame of an experiment (its columns but ``without``), or None if the analysis has not
    run."""
    f = wh.experiment_dir(experiment) / f"{name}.parquet"
    if not f.is_file():
        return None
    return read_part(f, columns=[c for c in schema_of(f) if c not in without]) if without else read_part(f)


#: the spans (bursts and uncore samples, each counted at its start and end) a window of the DRAM apportioning
#: holds, per burst of the analysis' windows: its frames are narrow (~100 bytes a burst or sample)
DRAM_WINDOW_FACTOR = 4


@dataclass
class UncoreInput:
    """What apportioning one run's uncore CAS samples to its bursts reads (:mod:`~synthtrace.tracelib.domain.uncore`),
    as lazy scans cut into ``windows`` of time ``[lo, hi)`` (ns; None: unbounded): the bursts' narrow columns, the
    samples, the threads' nodes, the CAS counters and the rate pieces that end in a later window than they start
    (``straddling``: at most one per series and window edge)."""

    bursts: pl.LazyFrame
    samples: pl.LazyFrame
    thread_nodes: pl.DataFrame
    cas: list[str]
    windows: list[tuple[int | None, int | None]]
    straddling: pl.DataFrame

    @classmethod
    def of(cls, bursts: pl.LazyFrame, samples: pl.LazyFrame, thread_nodes: pl.DataFrame, cas: list[str],
           windows: list[tuple[int | None, int | None]]) -> UncoreInput | None:
        """The input, its samples read once a window at a time for the pieces that cross a window's end; None when
        no two samples of a series give a rate (nothing is apportioned)."""
        from synthtrace.warehouse.export_views import in_time  # it reads the stored analysis: imported here

        pieces, straddling, n = CasRatePieces(cas), [pl.DataFrame(schema=PIECE_SCHEMA)], 0
        for lo, hi in windows:
            ending = pieces.window(samples.filter(in_time("time_ns", lo, hi)).collect())
            n += ending.height
            if lo is not None:
                straddling.append(ending.filter(pl.col("start_ns") < lo))
        return cls(bursts, samples, thread_nodes, cas, windows, pl.concat(straddling)) if n else None

    def apportioned(self) -> Iterator[pl.DataFrame]:
        """Each window's bursts that end in it with their CAS counts (burst keys, start_ns, ``DRAM_CAS``): the
        counts of the whole run apportioned at once, a window at a time."""
        from synthtrace.warehouse.export_views import in_time  # it reads the stored analysis: imported here

        pieces, share = CasRatePieces(self.cas), DramApportioning(BURST_ORDER)
        for lo, hi in self.windows:
            ending = pieces.window(self.samples.filter(in_time("time_ns", lo, hi)).collect())
            later = self.straddling.filter(in_time("start_ns", lo, hi) & ~in_time("end_ns", lo, hi))
            starting = pl.concat([ending.filter(pl.col("start_ns") >= lo) if lo is not None else ending, later]
                                 ).sort(*SERIES, "end_ns", maintain_order=True)
            bursts = (self.bursts.filter(in_time("start_ns", lo, hi) | in_time("end_ns", lo, hi)).collect()
                      .sort(BURST_ORDER))
            yield share.window(bursts, self.thread_nodes, starting, ending, lo, hi).select(
                *BURST_ORDER, "start_ns", DRAM_CAS_COLUMN)


@dataclass
class TraceWindows:
    """One trace of an experiment's analysis input (a run, or the merged trace) as lazy scans cut into windows:
    ``windows`` are filters that split its bursts and its MPI calls alike (by thread, and a long thread by start
    time), each row in one window; ``uncore`` the run's uncore CAS samples, apportioned to its bursts
    (:meth:`prepare`) and joined to each window's bursts as ``DRAM_CAS``; ``ordered``: sort each window as the
    stored run is read (thread, then sequence)."""

    bursts: pl.LazyFrame
    calls: pl.LazyFrame | None
    windows: list[pl.Expr]
    uncore: UncoreInput | None = None
    ordered: bool = True
    #: the apportioned CAS counts (burst keys, start_ns, ``DRAM_CAS``), once :meth:`prepare` has run, and the
    #: parts holding them
    dram: pl.LazyFrame | None = None
    dram_parts: AnalysisParts | None = None

    def prepare(self, parts: AnalysisParts, name: str) -> None:
        """Apportion the run's uncore CAS samples (if any) a window of time at a time into frame ``name`` of
        ``parts`` (again for other parts: an analysis' scratch goes with it): each analysis window then reads its
        bursts' counts from there."""
        if self.uncore is None or self.dram_parts is parts:
            return
        for frame in self.uncore.apportioned():
            parts.add(name, frame)
        self.dram, self.dram_parts = parts.scan(name), parts

    def bursts_in(self, where: pl.Expr) -> pl.DataFrame:
        """The bursts of one window (with ``DRAM_CAS`` when apportioned)."""
        if self.uncore is not None and self.dram is None:
            self.prepare(AnalysisParts(), "dram")
        b = self.bursts.filter(where).collect()
        if self.ordered:
            b = b.sort(BURST_ORDER)
        if self.dram is not None:
            b = b.join(self.dram.filter(where).drop("start_ns").collect(), on=BURST_ORDER, how="left",
                       maintain_order="left")
        return b

    def calls_in(self, where: pl.Expr) -> pl.DataFrame | None:
        """The MPI calls of one window (None: the trace has none)."""
        if self.calls is None:
            return None
        c = self.calls.filter(where).collect()
        return c.sort(CALL_ORDER) if self.ordered else c

    def count(self) -> int:
        """Its bursts."""
        return int(self.bursts.select(pl.len()).collect().item())


@dataclass
class AnalysisInput:
    """What the analysis of a stored experiment reads (see :func:`load_experiment`), a window at a time: its
    traces (one per run, or the merged one), its runs' names and nodes."""

    experiment: str
    source: str  # "merged" | "runs"
    traces: list[TraceWindows]
    run_names: dict[str, str] = field(default_factory=dict)
    n_nodes: dict[str, int] = field(default_factory=dict)


def uncore_input(wh: Warehouse, run_id: str, bursts: pl.LazyFrame, rows: int) -> UncoreInput | None:
    """What apportioning the run's uncore CAS samples to its ``bursts`` (the stored run, scanned) reads, in windows
    of time of about ``rows`` bursts and samples, as :func:`~synthtrace.warehouse.runs.run_bursts` apportions them
    whole (the same counts); None when the run has no uncore CAS samples, its bursts measure DRAM CAS themselves or
    no two samples of a series give a rate."""
    from synthtrace.warehouse.export_views import time_windows  # they read the analysis: imported here

    uncore = run_parts(wh, run_id, "uncore/*.parquet")
    schema = bursts.collect_schema()
    cmap = resolve(schema.names())
    if not uncore or cmap.has("dram_cas"):
        return None
    samples = scan_parts(uncore).select("appl", "task", "thread", "node", "time_ns", "counter", "value")
    cas = cas_counters(samples.select(pl.col("counter").unique()).collect().get_column("counter").to_list())
    if not cas:
        return None
    samples = samples.filter(pl.col("counter").is_in(cas))
    counters = set(cmap.columns.get("l3_tcm", []))
    rules = anomaly_rules(schema)
    for c in list(counters):
        counters |= {r for _, expr in rules.get(c, []) for r in expr.meta.root_names()}
    narrow = bursts.select([c for c in schema.names()
                            if c in {*BURST_ORDER, "start_ns", "end_ns", "duration_ns", *counters}])
    windows = time_windows([narrow, samples.select(pl.col("time_ns").alias("start_ns"),
                                                   pl.col("time_ns").alias("end_ns"))], DRAM_WINDOW_FACTOR * rows)
    threads = run_parts(wh, run_id, "threads.parquet")
    if not threads:
        raise missing_file(wh.run_dir(run_id) / "threads.parquet")
    return UncoreInput.of(narrow, samples, read_part(threads[0]), cas, windows)


def _with_columns_of(scan: pl.LazyFrame, schema: dict[str, pl.DataType]) -> pl.LazyFrame:
    """``scan`` with every column of ``schema`` (those it lacks NULL), in ``schema``'s order: the runs of an
    experiment read as their union by name."""
    have = scan.collect_schema()
    return scan.with_columns(pl.lit(None, dtype).alias(c) for c, dtype in schema.items() if c not in have).select(
        [c for c in schema])


def load_experiment_windows(wh: Warehouse, experiment: str | Experiment, rows: int | None = None) -> AnalysisInput:
    """What the analysis of ``experiment`` (a name, or the experiment already read: its runs table is not read
    again) reads, as :class:`TraceWindows` of about ``rows`` bursts (:data:`ANALYSIS_WINDOW_ROWS`): the trace
    :func:`load_experiment` reads whole, labelled alike. Raises
    :class:`~synthtrace.warehouse.errors.UnknownExperimentError` or :class:`WarehouseError` as it does."""
    from synthtrace.warehouse.export_views import key_windows  # it reads the stored analysis: imported here

    rows = rows or ANALYSIS_WINDOW_ROWS
    exp = wh.experiment(experiment) if isinstance(experiment, str) else experiment
    experiment = exp.name
    if exp.is_merged:
        bursts = scan_parts([stored_file(exp.dir, MERGED_FILE)])
        ref = exp.reference_run_id(None if exp.record().get("reference_run_id") else
                                   bursts.select("run_id").unique().collect() if "run_id" in
                                   bursts.collect_schema() else None)
        # the reference run's calls; none when it is gone (as ``run_calls`` reads them)
        calls_files = stored_parts(wh.run_dir(ref), "mpi_calls.parquet") if ref else []
        calls = scan_parts(calls_files) if calls_files else None
        trace = ExperimentTrace(experiment, "merged", bursts, calls, ref, exp.run_names, exp.n_nodes).labelled()
        traces = [TraceWindows(trace.bursts, trace.calls, key_windows(trace.bursts, WINDOW_KEYS, rows))]
        return AnalysisInput(experiment, "merged", traces, exp.run_names, exp.n_nodes)
    exp.require_runs()
    runs: list[tuple[str, pl.LazyFrame, pl.LazyFrame | None]] = []
    for run_id in exp.run_ids:
        parts = run_parts(wh, run_id, "bursts/*.parquet")
        if parts:
            f = run_parts(wh, run_id, "mpi_calls.parquet")
            runs.append((run_id, scan_parts(parts), scan_parts(f) if f else None))
    drams = {run_id: uncore_input(wh, run_id, b, rows) for run_id, b, _ in runs}
    # the runs' bursts (and calls) read as one frame unioned by name, as the whole trace is
    union: dict[str, pl.DataType] = {}
    call_union: dict[str, pl.DataType] = {}
    for run_id, b, c in runs:
        union.update({k: v for k, v in b.collect_schema().items() if k not in union})
        if drams[run_id] is not None and DRAM_CAS_COLUMN not in union:
            union[DRAM_CAS_COLUMN] = pl.Int64()
        if c is not None:
            call_union.update({k: v for k, v in c.collect_schema().items() if k not in call_union})
    traces = []
    for run_id, b, c in runs:
        if drams[run_id] is None and DRAM_CAS_COLUMN in union and DRAM_CAS_COLUMN not in b.collect_schema():
            b = b.with_columns(pl.lit(None, pl.Int64).alias(DRAM_CAS_COLUMN))
        schema = {k: v for k, v in union.items() if drams[run_id] is None or k != DRAM_CAS_COLUMN}
        trace = ExperimentTrace(experiment, "runs", _with_columns_of(b, schema),
                                _with_columns_of(c, call_union) if c is not None else None).labelled()
        if trace.bursts.select(pl.len()).collect().item():
            traces.append(TraceWindows(trace.bursts, trace.calls, key_windows(trace.bursts, WINDOW_KEYS, rows),
                                       drams[run_id]))
    if not traces:
        raise WarehouseError(f"experiment {experiment!r}: its runs have no computation bursts")
    return AnalysisInput(experiment, "runs", traces, exp.run_names, exp.n_nodes)


class AnalysisParts:
    """The analysis' frames as they are computed, a window at a time: part files in ``folder`` (None: frames in
    memory), each frame the union by name of its parts in order. :meth:`frame` gives a frame whole (in memory)
    or as :class:`StoredParts` that write themselves into the warehouse without being held whole."""

    def __init__(self, folder: Path | None = None):
        self.folder = folder
        self.parts: dict[str, list[Any]] = {}

    def add(self, name: str, df: pl.DataFrame) -> int:
        """Append a part to frame ``name``; returns its index."""
        parts = self.parts.setdefault(name, [])
        if self.folder is None:
            parts.append(df)
        else:
            path = self.folder / f"{name}-{len(parts):06d}.parquet"
            df.write_parquet(path)
            parts.append(path)
        return len(parts) - 1

    def get(self, name: str, i: int) -> pl.DataFrame:
        """Part ``i`` of frame ``name``."""
        part = self.parts[name][i]
        return part if self.folder is None else pl.read_parquet(part, glob=False)

    def replace(self, name: str, i: int, df: pl.DataFrame) -> None:
        """Put ``df`` in place of part ``i`` of frame ``name``."""
        if self.folder is None:
            self.parts[name][i] = df
        else:
            df.write_parquet(self.parts[name][i])

    def count(self, name: str) -> int:
        return len(self.parts.get(name, []))

    def scan(self, name: str) -> pl.LazyFrame:
        """Frame ``name`` as a lazy union by name of its parts."""
        parts = self.parts[name]
        if self.folder is None:
            return pl.concat([p.lazy() for p in parts], how="diagonal_relaxed")
        return pl.concat([pl.scan_parquet(p, glob=False) for p in parts], how="diagonal_relaxed")

    def frame(self, name: str, empty: pl.DataFrame) -> pl.DataFrame | StoredParts:
        """Frame ``name`` (``empty`` when it has no part): whole in memory, else :class:`StoredParts`."""
        if not self.count(name):
            return empty
        if self.folder is None:
            return pl.concat(self.parts[name], how="diagonal_relaxed")
        return StoredParts(self.scan(name))


@dataclass(frozen=True)
class StoredParts:
    """A frame held as part files, committed as one Parquet file by :meth:`write_parquet` (what
    :meth:`Warehouse.update_dir <synthtrace.warehouse.layout.Warehouse.update_dir>` calls on each frame it
    writes): streamed from the parts, never held whole."""

    scan: pl.LazyFrame

    def write_parquet(self, path: str | Path, **options: Any) -> None:
        self.scan.sink_parquet(path, **options)

    def lazy(self) -> pl.LazyFrame:
        return self.scan

