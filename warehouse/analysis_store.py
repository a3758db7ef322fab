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
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
import tempfile
from typing import Any

import polars as pl

from synthtrace.tracelib.domain.counter_sanity import anomaly_rules
from synthtrace.tracelib.domain.counters import resolve
from synthtrace.tracelib.domain.uncore import DRAM_CAS_COLUMN, attribute_dram_cas
from synthtrace.warehouse.errors import WarehouseError
from synthtrace.warehouse.experiment import MERGED_FILE, Experiment, ExperimentTrace
from synthtrace.warehouse.layout import Warehouse
from synthtrace.warehouse.runs import run_parts, runs_table
from synthtrace.warehouse.stored import missing_file, stored_file, stored_folders, stored_parts
from synthtrace.warehouse.parts import read_part, scan_parts, schema_of

ANALYSIS_FILES: tuple[str, ...] = ("burst_metrics", "mpi_metrics", "phase_metrics", "archetypes")
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


@dataclass
class TraceWindows:
    """One trace of an experiment's analysis input (a run, or the merged trace) as lazy scans cut into windows:
    ``windows`` are filters that split its bursts and its MPI calls alike (by thread, and a long thread by start
    time), each row in one window; ``dram`` (burst keys, ``start_ns``, ``DRAM_CAS``) the CAS counts apportioned
    from the run's uncore samples, joined to each window's bursts; ``ordered``: sort each window as the stored run
    is read (thread, then sequence)."""

    bursts: pl.LazyFrame
    calls: pl.LazyFrame | None
    windows: list[pl.Expr]
    dram: pl.DataFrame | None = None
    ordered: bool = True

    def bursts_in(self, where: pl.Expr) -> pl.DataFrame:
        """The bursts of one window (with ``DRAM_CAS`` when apportioned)."""
        b = self.bursts.filter(where).collect()
        if self.ordered:
            b = b.sort(BURST_ORDER)
        if self.dram is not None:
            b = b.join(self.dram.filter(where).drop("start_ns"), on=BURST_ORDER, how="left", maintain_order="left")
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


def _dram_cas(wh: Warehouse, run_id: str, bursts: pl.LazyFrame) -> pl.DataFrame | None:
    """The run's uncore CAS counts apportioned to its bursts (burst keys, start_ns, ``DRAM_CAS``), computed as
    :func:`~synthtrace.warehouse.runs.run_bursts` does on the columns the apportioning reads only; None when the
    run has no uncore samples or its bursts measure DRAM CAS themselves."""
    uncore = run_parts(wh, run_id, "uncore/*.parquet")
    schema = bursts.collect_schema()
    cmap = resolve(schema.names())
    if not uncore or cmap.has("dram_cas"):
        return None
    counters = set(cmap.columns.get("l3_tcm", []))
    rules = anomaly_rules(schema)
    for c in list(counters):
        counters |= {r for _, expr in rules.get(c, []) for r in expr.meta.root_names()}
    keep = [c for c in schema.names() if c in {*BURST_ORDER, "start_ns", "end_ns", "duration_ns", *counters}]
    narrow = bursts.select(keep).collect().sort(BURST_ORDER)
    # the samples without their run id, their counter names as a dictionary: 4.5 M samples of a 1 GB LULESH tile
    # took 1.4 GB as stored (the same rates, in the same order: categories compare as their names)
    samples = (scan_parts(uncore).select("appl", "task", "thread", "node", "time_ns", "counter", "value")
               .with_columns(pl.col("counter").cast(pl.Categorical)).collect())
    threads = run_parts(wh, run_id, "threads.parquet")
    if not threads:
        raise missing_file(wh.run_dir(run_id) / "threads.parquet")
    out = attribute_dram_cas(narrow, samples, read_part(threads[0]))
    return out.select(*BURST_ORDER, "start_ns", DRAM_CAS_COLUMN) if DRAM_CAS_COLUMN in out.columns else None


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
    drams = {run_id: _dram_cas(wh, run_id, b) for run_id, b, _ in runs}
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
        return part if self.folder is None else pl.read_parquet(part)

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
        return pl.concat([pl.scan_parquet(p) for p in parts], how="diagonal_relaxed")

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


@contextmanager
def parts_folder() -> Iterator[Path]:
    """A temporary folder for the analysis' part files (removed when left)."""
    with tempfile.TemporaryDirectory(prefix="synthtrace-analysis-") as d:
        yield Path(d)
