"""Merged experiments in the warehouse (DESIGN §5, §6), and the merged trace written back as Paraver.

::

    WAREHOUSE/experiments/<name>/merged_bursts.parquet   one row per burst of the reference run, every counter
    WAREHOUSE/experiments/<name>/merge_quality.parquet   one row per counter: source run, coverage, estimated error
    WAREHOUSE/experiments/<name>/merge_matches.parquet   reference burst -> matched burst of each other run

The three files are written together with ``experiment.json`` (the reference run and the merge options) by
:meth:`Experiment.commit_merge <synthtrace.warehouse.experiment.Experiment.commit_merge>`, so re-merging replaces the
merged data whole and a reader sees the old merge or the new one, never a mix; the merge itself (load, merge,
commit) is :func:`synthtrace.pipelines.jobs.merge_experiment`.
"""
from __future__ import annotations

from pathlib import Path

import polars as pl

from synthtrace.tracelib.errors import SynthtraceError
from synthtrace.tracelib.formats.source import is_paraver
from synthtrace.tracelib.merge.merge_runs import MergeResult
from synthtrace.warehouse.experiment import Experiment


def export_merged(exp: Experiment, result: MergeResult, out_stem: str | Path) -> Path:
    """Write the merged trace as Paraver ``OUT_STEM.prv/.pcf/.row``; returns the ``.prv`` path.

    The bursts are the merged bursts with every counter; the MPI calls (with the counters measured inside them) and
    the other events are the reference run's. Resources, date,
    communicators and ``.row`` names come from the reference run's own trace when it is a Paraver file (``.prv`` or
    ``.prv.gz``) still on disk, else from the bursts' layout; counter event types follow the runs' ``.pcf`` files where
    readable.
    """
    from synthtrace.tracelib.formats.paraver.reader import ParaverTrace
    from synthtrace.tracelib.formats.paraver.writer import TraceMeta, write_paraver

    paths = dict(zip(exp.run_ids, exp.runs.get_column("source_path").to_list()))
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
    calls = exp.calls(result.reference_run_id)
    calls = calls if calls is not None else pl.DataFrame()
    counters = [c for c in result.quality.get_column("counter").to_list() if c in result.merged.columns]
    events_dir = exp.wh.run_dir(result.reference_run_id) / "events"  # reader (issue 24.3/4): its other events too
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
