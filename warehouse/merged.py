"""Storage of merged experiments: read an experiment's runs, merge them, commit the result atomically (DESIGN §5, §6).

::

    WAREHOUSE/experiments/<name>/merged_bursts.parquet   one row per burst of the reference run, every counter
    WAREHOUSE/experiments/<name>/merge_quality.parquet   one row per counter: source run, coverage, estimated error
    WAREHOUSE/experiments/<name>/merge_matches.parquet   reference burst -> matched burst of each other run

The three files are written together: the experiment directory is rebuilt in staging (files that other stages
wrote there, such as ``burst_metrics.parquet``, are hard-linked in unchanged) and swapped in by one rename with
:meth:`Warehouse.staged` (``replace=True``), so re-merging replaces the merged data whole and a reader sees the
old merge or the new one, never a mix. When the merge fails nothing is written.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import polars as pl

from synthtrace.tracelib.errors import SynthtraceError
from synthtrace.tracelib.formats.source import is_paraver
from synthtrace.tracelib.merge.merge_runs import MergeOptions, MergeResult, RunTables, merge_runs
from synthtrace.warehouse.layout import Warehouse
from synthtrace.warehouse.runs import check_runs_still_in, experiment_runs, run_bursts, run_calls

def load_runs(wh: Warehouse, experiment: str) -> list[RunTables]:
    """Every run of ``experiment`` with its bursts and MPI calls, sorted by run name."""
    out = []
    for run_id, run_name in experiment_runs(wh, experiment).select("run_id", "run_name").iter_rows():
        calls = run_calls(wh, run_id)
        out.append(RunTables(run_id, run_name, run_bursts(wh, run_id), calls if calls is not None else pl.DataFrame()))
    return out


def write_merge(wh: Warehouse, result: MergeResult, read: Sequence[str] = ()) -> Path:
    """Commit a merge result as the experiment's merged data (replacing any earlier merge); returns the folder.
    ``read``: the run ids it was computed from; if one has left the experiment meanwhile (``runs rm|move``),
    nothing is written (:class:`~synthtrace.warehouse.errors.RunsChangedError`)."""
    return wh.update_dir(wh.experiment_dir(result.experiment), {
        "merged_bursts": result.merged, "merge_quality": result.quality, "merge_matches": result.matches},
        check=lambda: check_runs_still_in(wh, result.experiment, read, "it merged"))


def merge_experiment(wh: Warehouse, experiment: str, options: MergeOptions = MergeOptions(),
                     on_step: Callable[[str, int], None] | None = None) -> MergeResult:
    """Load, merge and commit one experiment. On any error the warehouse is left as it was. ``on_step(what,
    total)`` is called as each step ends: reading the runs, each step of
    :func:`~synthtrace.tracelib.merge.merge_runs.merge_runs`, writing the result."""
    runs = load_runs(wh, experiment)
    # merge_runs' steps (each other run, each counter) and the reading and writing around them
    total = len(runs) + 1 + len({c for r in runs for c in r.counters})
    if on_step:
        on_step(f"read {len(runs)} runs", total)
    result = merge_runs(runs, options, experiment=experiment,
                        on_step=(lambda what, _: on_step(what, total)) if on_step else None)
    write_merge(wh, result, [r.run_id for r in runs])
    if on_step:
        on_step("written", total)
    return result


def export_merged(wh: Warehouse, result: MergeResult, out_stem: str | Path) -> Path:
    """Write the merged trace as Paraver ``OUT_STEM.prv/.pcf/.row``; returns the ``.prv`` path.

    The bursts are the merged bursts with every counter; the MPI calls (with the counters measured inside them) and
    the other events are the reference run's. Resources, date,
    communicators and ``.row`` names come from the reference run's own trace when it is a Paraver file (``.prv`` or
    ``.prv.gz``) still on disk, else from the bursts' layout; counter event types follow the runs' ``.pcf`` files where
    readable.
    """
    from synthtrace.tracelib.formats.paraver.reader import ParaverTrace
    from synthtrace.tracelib.formats.paraver.writer import TraceMeta, write_paraver

    runs = experiment_runs(wh, result.experiment)
    paths = dict(zip(runs.get_column("run_id").to_list(), runs.get_column("source_path").to_list()))
    metas = {}
    for run_id, path in paths.items():
        if path and is_paraver(Path(path)) and Path(path).is_file():
            try:
                metas[run_id] = TraceMeta.from_trace(ParaverTrace(path))
            except SynthtraceError:
                continue
    meta = metas.get(result.reference_run_id) or _meta_from_bursts(result.merged, TraceMeta)
    for m in metas.values():  # counter types of counters the reference run did not record
        for name, etype in m.counter_types.items():
            meta.counter_types.setdefault(name, etype)
        for name, label in m.counter_labels.items():
            meta.counter_labels.setdefault(name, label)
    calls_file = wh.run_dir(result.reference_run_id) / "mpi_calls.parquet"
    calls = pl.read_parquet(calls_file) if calls_file.is_file() else pl.DataFrame()
    counters = [c for c in result.quality.get_column("counter").to_list() if c in result.merged.columns]
    events_dir = wh.run_dir(result.reference_run_id) / "events"  # reader (issue 24.3/4): its other events too
    events = pl.read_parquet(events_dir / "*.parquet") if any(events_dir.glob("*.parquet")) else None
    return write_paraver(out_stem, result.merged, calls, meta, counters=counters, events=events)


def _meta_from_bursts(bursts: pl.DataFrame, meta_type):
    """Paraver resources fitted to the bursts: every appl/task/thread seen, one cpu per thread on one node."""
    layout = bursts.group_by("appl", "task").agg(pl.col("thread").max()).sort("appl", "task")
    n_appl = int(layout.get_column("appl").max())
    threads = []
    for a in range(1, n_appl + 1):
        t = dict(layout.filter(pl.col("appl") == a).select("task", "thread").iter_rows())
        threads.append(tuple(int(t.get(k, 1)) for k in range(1, (max(t) if t else 1) + 1)))
    n_cpus = max(int(bursts.get_column("cpu").max() or 1), sum(sum(t) for t in threads))
    return meta_type(cpus_per_node=(n_cpus,), threads_per_task=tuple(threads),
                     node_of_task=tuple(tuple([1] * len(t)) for t in threads))
