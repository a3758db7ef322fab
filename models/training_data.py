"""Which bursts a predictor learns from, and which bursts and counters each row of ``train --compare`` uses
(DESIGN §8).

- :func:`load_bursts`: an experiment's merged bursts when it was merged (every counter on every burst), else
  the bursts of each of its runs (each with its own counters).
- :func:`comparison_plan`: the merged counter set against each single-run counter set. Set ``run<k>`` is the
  counters the k-th run (by name) of each experiment recorded, and it is evaluated on bursts that carry exactly
  what that run measured: merged bursts (their run-k counters came from run k), or, in an experiment that was
  not merged, the bursts of its k-th run alone — never another run's bursts, which lack those counters.

``train`` and ``predict`` read only the columns a model can use (``columns=``: a choice made on a lazy scan of each
stored trace, :func:`~synthtrace.models.features.feature_columns`, :func:`~synthtrace.models.features.
prediction_columns`): the counters they leave out are never read (issue 23: a run sampling one of 4,096 counter
types per burst was read as bursts x 4,096 columns).
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import polars as pl

from synthtrace.models.features import counter_sets
from synthtrace.tracelib.schema import counter_columns
from synthtrace.warehouse.errors import UnknownExperimentError
from synthtrace.warehouse.layout import Warehouse
from synthtrace.warehouse.model_store import experiment_apps, merged_bursts_file
from synthtrace.warehouse.parts import read_part, scan_parts, schema_of
from synthtrace.warehouse.programs import run_programs
from synthtrace.warehouse.runs import run_bursts, run_parts, runs_table


#: the bursts a predictor learns from per experiment at most (attack 11 E8: ``train`` over the 4.7 M bursts of one
#: 2 GB run passed 5 GB and aborted under a 4 GB limit): a larger experiment gives a sample of them, each burst kept
#: by a hash of its keys (the same bursts every time), read a window at a time
TRAIN_BURSTS_PER_EXPERIMENT = 300_000
#: the keys whose hash picks a burst of the sample
_SAMPLE_KEYS = ("appl", "task", "thread", "burst_seq")
#: the columns to read of one stored trace's bursts, chosen on a lazy scan of them
ColumnChoice = Callable[[pl.LazyFrame], list[str]]


def load_bursts(wh: Warehouse, experiments: list[str] | None = None, max_per_experiment: int | None = None, *,
                columns: ColumnChoice | None = None) -> tuple[pl.DataFrame, dict]:
    """Bursts to learn from, with ``experiment``, ``app`` and ``program`` columns, and what they came from.

    ``program`` (the folds of every evaluation on unseen workloads): the program its runs were identified as at
    ingest (:mod:`synthtrace.warehouse.programs`: runs of one binary at any scale or file name are one), else the app.

    ``max_per_experiment``: an experiment with more bursts gives about that many (:func:`_sampled`; None: every
    burst, as ``predict`` needs). ``columns``: what to read of each stored trace (default: every column).
    Returns (frame, info) with info = {experiments, run_ids, merged: [experiments read merged], sampled:
    {experiment: share of its bursts kept} for those sampled, unread: [counter columns left out] when some were}.
    Raises :class:`~synthtrace.warehouse.errors.UnknownExperimentError` for a named experiment that does not exist.
    """
    apps = experiment_apps(wh)
    names = sorted(apps) if experiments is None else list(dict.fromkeys(experiments))
    missing = [e for e in names if e not in apps]
    if missing:
        raise UnknownExperimentError(
            f"no experiment {', '.join(map(repr, missing))} in {wh.root}"
            + (f" (experiments: {', '.join(sorted(apps))})" if apps else " (nothing ingested)")
        )
    runs = runs_table(wh)
    programs = run_programs(wh)
    parts, run_ids, merged, sampled, unread = [], [], [], {}, set()
    for exp in names:
        ids = runs.filter(pl.col("experiment") == exp).sort("run_name")["run_id"].to_list() if runs.height else []
        merged_file = merged_bursts_file(wh.experiment_dir(exp))  # its manifest read once
        if merged_file is not None:
            merged.append(exp)
        stored = _Stored(wh, merged_file, ids)
        stride, left_out = stored.stride(max_per_experiment), stored.left_out(columns)
        if stride > 1:
            sampled[exp] = 1 / stride
            df = _sampled(wh, exp, stride, left_out)
        else:
            df = _whole(wh, merged_file, ids, left_out)
            if merged_file is not None and "run_id" in df.columns:
                run_ids += [r for r in df["run_id"].unique().to_list() if r]
        run_ids += ids
        if df.height == 0:
            continue
        unread |= left_out
        program = next((programs[r] for r in ids if r in programs), None) or apps[exp]
        parts.append(df.with_columns(pl.lit(exp).alias("experiment"), pl.lit(apps[exp]).alias("app"),
                                     pl.lit(program).alias("program")))
    frame = pl.concat(parts, how="diagonal_relaxed") if parts else pl.DataFrame()
    info = {"experiments": names, "run_ids": sorted(set(run_ids)), "merged": merged}
    return frame, info | ({"sampled": sampled} if sampled else {}) | ({"unread": sorted(unread)} if unread else {})


@dataclass
class _Stored:
    """An experiment's stored traces: its merged bursts' file ``merged_file``, else the bursts of its runs
    ``run_ids``; each run's parts listed, and every file checked and its schema read, once (:attr:`scans`) for
    both the sample's stride and the columns left out."""

    wh: Warehouse
    merged_file: Path | None
    run_ids: list[str]

    @functools.cached_property
    def scans(self) -> list[pl.LazyFrame]:
        """A lazy scan per stored trace (a run without bursts has none); footers checked: damage is one line."""
        if self.merged_file is not None:
            return [scan_parts([self.merged_file])]
        return [scan_parts(parts) for r in self.run_ids if (parts := run_parts(self.wh, r, "bursts/*.parquet"))]

    def stride(self, cap: int | None) -> int:
        """1 when the experiment holds at most ``cap`` bursts (or no cap), else the k of a 1-in-k sample of them."""
        if cap is None:
            return 1
        n = sum(scan.select(pl.len()).collect().item() for scan in self.scans)
        return max(1, -(-n // cap))

    def left_out(self, columns: ColumnChoice | None) -> set[str]:
        """The counter columns that ``columns`` chooses to read of none of the stored traces (empty without a
        choice: every column is read)."""
        if columns is None:
            return set()
        read: set[str] = set()
        counters: set[str] = set()
        for scan in self.scans:
            read |= set(columns(scan))
            counters |= set(counter_columns(scan))
        return counters - read


def _whole(wh: Warehouse, merged_file: Path | None, run_ids: list[str], left_out: set[str] = frozenset()
           ) -> pl.DataFrame:
    """Every burst of an experiment: its merged bursts' file, else the bursts of its runs ``run_ids`` (empty when
    none has any), without the columns ``left_out`` (never read)."""
    if merged_file is not None:
        if not left_out:
            return read_part(merged_file)
        return read_part(merged_file, columns=[c for c in schema_of(merged_file) if c not in left_out])
    frames = [b for b in (run_bursts(wh, r, leave_out=left_out) for r in run_ids) if b.height]
    return pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()


@dataclass
class PredictionInput:
    """What ``predict`` reads of an experiment: ``windows``, its bursts (all in one frame when it holds at most the
    cap, else a window at a time), ``unread``, the counter columns left out (the model reads none of them), and
    ``run_ids``, the runs it was read from."""

    windows: Iterator[pl.DataFrame]
    unread: list[str]
    run_ids: list[str]  # the experiment's runs when it was read (by run name)


def prediction_input(wh: Warehouse, experiment: str, cap: int | None = None, *,
                     columns: ColumnChoice | None = None) -> PredictionInput:
    """The bursts ``predict`` reads of ``experiment`` (``columns``: of each stored trace, default every column):
    all of them in one frame, as :func:`load_bursts` reads them for training, when it holds at most ``cap`` bursts
    (default :data:`TRAIN_BURSTS_PER_EXPERIMENT`); else a window at a time (:func:`burst_windows`; attack 12 F7:
    never every burst of a 2 GB run at once). The runs table and the experiment's manifest are read once.

    Raises :class:`~synthtrace.warehouse.errors.UnknownExperimentError` for an experiment with no run and no folder.
    """
    runs = runs_table(wh)
    ids = runs.filter(pl.col("experiment") == experiment).sort("run_name")["run_id"].to_list() if runs.height else []
    folder = wh.experiment_dir(experiment)
    merged_file = merged_bursts_file(folder)
    if not ids and merged_file is None and not folder.is_dir():
        known = sorted(set(runs["experiment"].to_list())) if runs.height else []
        raise UnknownExperimentError(f"no experiment {experiment!r} in {wh.root}"
                                     + (f" (experiments: {', '.join(known)})" if known else " (nothing ingested)"))
    stored = _Stored(wh, merged_file, ids)
    left_out = stored.left_out(columns)
    if stored.stride(TRAIN_BURSTS_PER_EXPERIMENT if cap is None else cap) > 1:
        windows = burst_windows(wh, experiment, left_out)
    else:
        windows = iter([_whole(wh, merged_file, ids, left_out)])
    return PredictionInput(windows, sorted(left_out), ids)


def burst_windows(wh: Warehouse, experiment: str, left_out: set[str] = frozenset()) -> Iterator[pl.DataFrame]:
    """The bursts of ``experiment`` as the analysis reads them (its merged trace, or each run's bursts with their
    apportioned DRAM counts), without the columns ``left_out`` (never read), a window of about
    ``ANALYSIS_WINDOW_ROWS`` at a time: never the whole experiment in memory."""
    from synthtrace.warehouse.analysis_store import load_experiment_windows

    for trace in load_experiment_windows(wh, experiment).traces:
        if left_out:
            trace = replace(trace, bursts=trace.bursts.drop(left_out, strict=False))
        for where in trace.windows:
            yield trace.bursts_in(where)


def _sampled(wh: Warehouse, experiment: str, stride: int, left_out: set[str] = frozenset()) -> pl.DataFrame:
    """About one in ``stride`` bursts of ``experiment`` (those whose keys hash to 0 modulo ``stride``), read a
    window at a time (:func:`burst_windows`) without the columns ``left_out``."""
    keep = pl.struct(*_SAMPLE_KEYS).hash(seed=0) % stride == 0
    parts = [window.filter(keep) for window in burst_windows(wh, experiment, left_out)]
    return pl.concat([p for p in parts if p.height], how="diagonal_relaxed") if parts else pl.DataFrame()


@dataclass
class ComparisonPlan:
    """What ``train --compare`` evaluates.

    ``frame``: the bursts (with ``experiment``, ``app``, ``run_id``); ``sets``: ``run<k>`` -> experiment ->
    counters of its k-th run; ``rows``: ``run<k>`` -> predicate over ``frame`` selecting the bursts that set is
    evaluated on; ``note``: what to tell the user about the choice (None: nothing to say).
    """

    frame: pl.DataFrame
    sets: dict[str, dict[str, list[str]]]
    rows: dict[str, pl.Expr] = field(default_factory=dict)
    note: str | None = None


def comparison_plan(frame: pl.DataFrame, info: dict, runs: pl.DataFrame) -> ComparisonPlan | None:
    """The bursts and single-run counter sets to compare, from :func:`load_bursts`' (frame, info) and the runs
    view; None when the experiments were recorded with one counter set (nothing to compare).

    Merged experiments carry every counter; they are the comparison's bursts when they span two applications or
    more (grouped folds need two); else every experiment's bursts are, each single-run set on its own run's bursts
    in the experiments that were not merged.
    """
    runs = runs.filter(pl.col("experiment").is_in(info["experiments"])).sort("experiment", "run_name")
    sets = counter_sets(runs, per_experiment=True)
    if len({tuple(sorted(c)) for per_exp in sets.values() for c in per_exp.values()}) < 2:
        return None
    merged = frame.filter(pl.col("experiment").is_in(info["merged"]))
    if merged.height and merged["app"].n_unique() >= 2:
        return ComparisonPlan(merged, sets)
    kth = runs.with_columns(pl.format("run{}", pl.int_range(pl.len()).over("experiment")).alias("set"))
    own = {name: pl.col("experiment").is_in(info["merged"])
           | pl.col("run_id").is_in(kth.filter(pl.col("set") == name)["run_id"].to_list()) for name in sets}
    note = "comparison on every experiment's bursts: the merged ones hold one application" if merged.height else None
    return ComparisonPlan(frame, sets, own, note)
