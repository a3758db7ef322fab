"""What an export reads: an experiment's trace (merged, or its only run) as stored, the MPI calls of the run it
comes from, and the burst archetypes when the analysis has run; whole (:func:`load_export_tables`) or as lazy scans
read a window at a time (:func:`export_scans`, :func:`key_windows`, :func:`time_windows`), so that an export holds
a window of the trace, not the trace (issue 23 attack 7 A21: a 1 GB trace's CSV export peaked at 1.8 GB, its
Pipit table at 3.2 GB)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import BinaryIO

import polars as pl

from synthtrace.tracelib.formats.exports import pipit_window, process_numbers, rows_within, write_perfetto_windows
from synthtrace.tracelib.schema import THREAD_KEYS
from synthtrace.warehouse.analysis_store import read_analysis
from synthtrace.warehouse.errors import UnknownExperimentError, WarehouseError
from synthtrace.warehouse.experiment import LOGICAL_MESSAGES, MERGED_FILE, Experiment
from synthtrace.warehouse.layout import Warehouse
from synthtrace.warehouse.parts import scan_parts
from synthtrace.warehouse.runs import run_parts

BURST_KEYS = [*THREAD_KEYS, "burst_seq"]
CALL_KEYS = [*THREAD_KEYS, "call_seq"]
#: the rows (bursts, MPI calls) an export reads at a time (the default of the ``rows`` below): a window's frames
#: take ~1 kB a row at most
EXPORT_WINDOW_ROWS = 200_000
#: the cells (rows x columns) an export reads at a time: a window of a wide trace (a run sampling thousands of
#: counter types, each a column) holds fewer rows (attack 18 F2: 10,000 bursts x 4,096 counter columns in one
#: window took 1.9 GB); a trace of up to 40 columns keeps :data:`EXPORT_WINDOW_ROWS`
EXPORT_WINDOW_CELLS = 8_000_000
#: the slices of a trace's time span whose rows are counted to cut it into windows of time
_TIME_SLICES = 4096


def _exportable(wh: Warehouse, experiment: str) -> Experiment:
    """The experiment ``experiment`` when it has a synthetic trace: merged, or a single run."""
    exp = wh.experiment(experiment)
    if not exp.is_merged and exp.require_runs().runs.height != 1:
        raise UnknownExperimentError(
            f"experiment {experiment!r} has {exp.runs.height} runs and no merged trace yet: "
            f"run `synthtrace merge {experiment}` first"
        )
    return exp


def load_export_tables(wh: Warehouse, experiment: str) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """(bursts with an ``archetype`` column when known, MPI calls) of the experiment's synthetic trace, whole."""
    trace = _exportable(wh, experiment).trace(dram_from_uncore=False)
    bursts = trace.bursts
    arch = read_analysis(wh, experiment, "archetypes")
    if arch is not None:
        bursts = _with_archetypes(bursts, arch.lazy()).collect()
    return bursts.sort(BURST_KEYS), trace.calls


def _with_archetypes(bursts: pl.DataFrame | pl.LazyFrame, arch: pl.LazyFrame) -> pl.LazyFrame:
    """``bursts`` with the ``archetype`` of each burst (first label of its keys) from the analysis' ``arch``, matched
    by run too where both say it (a label of another run's burst of the same number is no label: attack 11 E2)."""
    schema = bursts.collect_schema() if isinstance(bursts, pl.LazyFrame) else bursts.schema
    keys = [*BURST_KEYS, *(["run_id"] if "run_id" in schema and "run_id" in arch.collect_schema() else [])]
    arch = (arch.filter(pl.col("unit") == "burst").select(*keys, "archetype")
            .unique(subset=keys, keep="first", maintain_order=True))
    return bursts.lazy().join(arch.with_columns(pl.col(k).cast(schema[k]) for k in keys), on=keys,
                              how="left", maintain_order="left")


@dataclass(frozen=True)
class ExportScans:
    """An experiment's synthetic trace as lazy scans of its stored files (content checked when opened):
    ``bursts`` as stored, ``calls`` the MPI calls of the run the bursts are of (None: none), ``archetypes`` the
    analysis' labels (None: not analysed), ``messages`` that run's messages (``mpi_messages``; None: not stored)."""

    bursts: pl.LazyFrame
    calls: pl.LazyFrame | None
    archetypes: pl.LazyFrame | None
    messages: pl.LazyFrame | None = None

    def bursts_in(self, where: pl.Expr, labels: bool = True) -> pl.DataFrame:
        """The bursts ``where`` holds, with their ``archetype`` when known (``labels``), sorted by thread and
        burst_seq (as :func:`load_export_tables` gives them)."""
        lf = self.bursts.filter(where)
        if labels and self.archetypes is not None:
            lf = _with_archetypes(lf, self.archetypes.filter(where))
        return lf.collect(engine="streaming").sort(BURST_KEYS)

    def calls_in(self, where: pl.Expr) -> pl.DataFrame:
        """The MPI calls ``where`` holds, sorted by thread and call_seq (as the stored run gives them)."""
        assert self.calls is not None
        return self.calls.filter(where).collect(engine="streaming").sort(CALL_KEYS)

    def tasks(self, calls: bool = True) -> pl.DataFrame:
        """The (appl, task) of every burst and (``calls``) MPI call, each once."""
        scans = [self.bursts] + ([self.calls] if calls and self.calls is not None else [])
        return pl.concat([s.select("appl", "task").unique() for s in scans]).unique().collect(engine="streaming")

    def count(self, what: str) -> int:
        """The rows of ``bursts`` or ``calls``."""
        scan = getattr(self, what)
        return 0 if scan is None else int(scan.select(pl.len()).collect(engine="streaming").item())


def export_scans(wh: Warehouse, experiment: str) -> ExportScans:
    """:class:`ExportScans` of the experiment's synthetic trace: the merged bursts with the reference run's MPI
    calls, or the bursts and calls of its only run."""
    exp = _exportable(wh, experiment)
    if exp.is_merged:
        bursts = scan_parts([exp.dir / MERGED_FILE])
        run_id = exp.reference_run_id(None if exp.record().get("reference_run_id") else
                                      bursts.select("run_id").unique().collect(engine="streaming")
                                      if "run_id" in bursts.collect_schema() else None)
    else:
        run_id = exp.run_ids[0]
        parts = run_parts(wh, run_id, "bursts/*.parquet")  # what its commit wrote (attack 9 C3)
        if not parts:
            raise WarehouseError(f"experiment {experiment!r}: its runs have no computation bursts")
        bursts = scan_parts(parts)
    calls = wh.run_dir(run_id) / "mpi_calls.parquet" if run_id else None
    messages = wh.run_dir(run_id) / LOGICAL_MESSAGES if run_id else None
    arch = exp.dir / "archetypes.parquet"
    return ExportScans(bursts, scan_parts([calls]) if calls is not None and calls.is_file() else None,
                       scan_parts([arch]) if arch.is_file() else None,
                       scan_parts([messages]) if messages is not None and messages.is_file() else None)


def window_rows(scans: Sequence[pl.LazyFrame | None], rows: int | None = None) -> int:
    """The rows of ``scans`` an export reads at a time: ``rows`` (:data:`EXPORT_WINDOW_ROWS`), fewer when the
    widest of ``scans`` would pass :data:`EXPORT_WINDOW_CELLS` cells."""
    width = max((len(s.collect_schema()) for s in scans if s is not None), default=1)
    return rows_within(EXPORT_WINDOW_CELLS, width, rows or EXPORT_WINDOW_ROWS)


def _at_or_after(keys: Sequence[str], point: Sequence[int]) -> pl.Expr:
    """Rows whose ``keys`` come at or after ``point`` in lexicographic order."""
    expr = pl.col(keys[-1]) >= point[-1]
    for k, v in zip(reversed(keys[:-1]), reversed(point[:-1])):
        expr = (pl.col(k) > v) | ((pl.col(k) == v) & expr)
    return expr


def _between(keys: Sequence[str], lo: Sequence[int] | None, hi: Sequence[int] | None) -> pl.Expr:
    """Rows from ``lo`` (None: the first) up to, not including, ``hi`` (None: past the last) in ``keys`` order."""
    expr = pl.lit(True)
    if lo is not None:
        expr = expr & _at_or_after(keys, lo)
    if hi is not None:
        expr = expr & ~_at_or_after(keys, hi)
    return expr


def key_windows(scan: pl.LazyFrame, keys: Sequence[str], rows: int | None = None) -> list[pl.Expr]:
    """Filters that cut ``scan`` into consecutive windows of at most about ``rows`` rows in ``keys`` order (the
    thread keys, then one numeric column): whole threads together while they fit, a larger thread's rows cut by
    ranges of the last key. Together the windows hold every row whose keys are set, each once."""
    rows = rows or EXPORT_WINDOW_ROWS
    *group, last = keys
    stats = (scan.group_by(group).agg(pl.len().alias("n"), pl.col(last).min().alias("lo"),
                                      pl.col(last).max().alias("hi"))
             .drop_nulls().sort(group).collect(engine="streaming"))
    cuts: list[tuple[int, ...]] = []
    held = 0
    for row in stats.iter_rows():
        *g, n, lo, hi = row
        if held and held + n > rows:
            cuts.append((*g, lo))
            held = 0
        pieces = -(-n // rows)
        for i in range(1, pieces):
            cuts.append((*g, lo + (hi - lo + 1) * i // pieces))
        held = n - (n * (pieces - 1) // pieces) if pieces > 1 else held + n
    bounds: list[tuple[int, ...] | None] = [None, *cuts, None]
    return [_between(keys, lo, hi) for lo, hi in zip(bounds, bounds[1:])]


def time_windows(scans: Sequence[pl.LazyFrame], rows: int | None = None) -> list[tuple[int | None, int | None]]:
    """Consecutive windows of time ``[lo, hi)`` (ns; None: unbounded) in each of which about ``rows`` spans of
    ``scans`` (bursts, MPI calls) start or end, or fewer; together they cover every time."""
    rows = rows or EXPORT_WINDOW_ROWS
    times = [s.select(c) for s in scans for c in ("start_ns", "end_ns")]
    both = pl.concat([t.select(pl.all().alias("t")) for t in times])
    lo, hi = both.select(pl.col("t").min().alias("lo"), pl.col("t").max().alias("hi")).collect(
        engine="streaming").row(0)
    if lo is None:
        return [(None, None)]
    width = max(1, -(-(hi - lo + 1) // _TIME_SLICES))
    counts = (both.drop_nulls().select(((pl.col("t") - lo) // width).alias("b")).group_by("b").len().sort("b")
              .collect(engine="streaming"))
    cuts, held = [], 0
    for b, n in counts.iter_rows():
        if held and held + n > rows:
            cuts.append(lo + b * width)
            held = 0
        held += n
    bounds: list[int | None] = [None, *cuts, None]
    return list(zip(bounds, bounds[1:]))


def in_time(column: str, lo: int | None, hi: int | None) -> pl.Expr:
    """Rows whose ``column`` lies in ``[lo, hi)`` (ns; None: unbounded). A missing time belongs to the first
    window, where a sort puts it."""
    expr = pl.lit(True) if lo is None else pl.col(column) >= lo
    if hi is not None:
        expr = expr & (pl.col(column) < hi)
    return expr | pl.col(column).is_null() if lo is None else expr


def write_csv(out: BinaryIO, scans: ExportScans, rows: int | None = None) -> int:
    """The bursts as CSV (one row per burst, as :func:`load_export_tables` gives them), a window at a time;
    returns the bursts written."""
    rows = window_rows([scans.bursts], rows)
    n = 0
    for i, where in enumerate(key_windows(scans.bursts, BURST_KEYS, rows)):
        window = scans.bursts_in(where)
        window.write_csv(out, include_header=i == 0)
        n += window.height
    return n


def write_pipit(out: BinaryIO, scans: ExportScans, rows: int | None = None) -> None:
    """Pipit's events table (:func:`~synthtrace.tracelib.formats.exports.pipit_events`) as CSV, a window of time
    at a time, each window's readings carried on into the next."""
    first = process_numbers(scans.tasks())
    tables = [scans.bursts] + ([scans.calls] if scans.calls is not None and scans.count("calls") else [])
    rows = window_rows(tables, rows)
    totals = None
    for i, (lo, hi) in enumerate(time_windows(tables, rows)):
        starts, ends = in_time("start_ns", lo, hi), in_time("end_ns", lo, hi)
        bursts = scans.bursts_in(starts | ends, labels=False)
        calls = scans.calls_in(starts | ends) if len(tables) > 1 else None
        sent, received = (None, None) if scans.messages is None else (
            scans.messages.filter(in_time(f"{end}_time_ns", lo, hi)).collect(engine="streaming") for end in "sr")
        window, totals = pipit_window(first, bursts.filter(starts), bursts.filter(ends),
                                      calls.filter(starts) if calls is not None else None,
                                      calls.filter(ends) if calls is not None else None, sent, received, totals)
        window.write_csv(out, include_header=i == 0)


def write_perfetto(out: BinaryIO, scans: ExportScans, name: str, rows: int | None = None) -> None:
    """Chrome/Perfetto trace JSON (:func:`~synthtrace.tracelib.formats.exports.write_perfetto`), a window at a
    time."""
    keys = [*THREAD_KEYS, "start_ns"]
    bursts = (scans.bursts_in(w) for w in key_windows(scans.bursts, keys, window_rows([scans.bursts], rows)))
    calls = (scans.calls_in(w) for w in key_windows(scans.calls, keys, window_rows([scans.calls], rows))
             ) if scans.calls is not None else ()
    write_perfetto_windows(out, scans.tasks(calls=False), bursts, calls, name)
