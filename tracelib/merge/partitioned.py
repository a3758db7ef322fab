"""The merge one group of tasks at a time: memory bounded whatever the number of ranks (issue 22).

:func:`synthtrace.tracelib.merge.merge_runs.merge_runs` holds every run's bursts, calls and messages at once; a
256-rank x 2,000-iteration campaign does not fit in 2 GB that way. :func:`merge_partitioned` gives the same result
(the same rows and values; see ``tests/test_merge_scale.py``) from runs it reads a group of tasks at a time
through a :class:`RunSource` (the warehouse's Parquet tables read with a predicate:
:class:`synthtrace.warehouse.merged.StoredRun`):

1. **cross-rank steps from compact tables**: the task layout (threads and their bursts per run), the counters, the
   logical message counts per channel (rank correspondence, same-program check) and the rows that decide every
   task's work profile (:func:`synthtrace.tracelib.merge.ranks.profile_rows`, read a group of tasks at a time);
2. **groups of consecutive tasks** (:func:`task_groups`) whose bursts, with those of their **partners** (every task
   they exchange messages with, in any run), fit ``budget`` bursts: a group is aligned with its partners loaded,
   so that the logical messages tie its threads to theirs as in the whole run, and reports its own tasks only
   (:class:`synthtrace.tracelib.merge.merge_runs.OwnTasks`); what it reports (each reference burst with the
   matched bursts' counters, its provenance rows) is written out as a Parquet part and freed; its tallies and its
   share of the choice sample are kept (small: sums, and at most ``CHOICE_SAMPLE`` rows for the whole run);
3. **the decisions once**: the same-program check on the summed tallies, the transfer plans from the choice
   sample, the verdicts (:func:`synthtrace.tracelib.merge.merge_runs.decide`);
4. **the values part by part**: each part's counters transferred by the plans (:func:`merged_rows`).

A group is the unit a distributed worker (Dask, a Prefect task) would take next: it reads its tasks and their
partners, and returns a part and its sums. Not done this way: ``estimate_unmatched`` (its estimates pool bursts
of one call over all threads), runs whose bursts take DRAM_CAS from uncore samples (apportioned per node).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

import numpy as np
import polars as pl

from synthtrace.tracelib.merge.align import sort_bursts
from synthtrace.tracelib.merge.merge_runs import (QUALITY_SCHEMA, AlignedRun, MergeOptions,
                                                  MergeResult, OwnTasks, Pairs, Recorded,
                                                  Reference, RunTables, Sample, Tally, TooFewRunsError,
                                                  _align_other, check_counters, check_same_program,
                                                  choose_reference, decide, merged_rows, pick_features, provenance,
                                                  renumbered_note, same_layout, timing_only_note)
from synthtrace.tracelib.merge.ranks import rank_mapping
from synthtrace.tracelib.thread_key import appl_base, task_key


class RunSource(Protocol):
    """One run read a group of tasks at a time (tasks: packed ``appl << ID_BITS | task`` keys)."""

    run_id: str
    run_name: str

    def threads(self) -> pl.DataFrame:
        """One row per thread with bursts: appl, task, thread, ``bursts`` (its number of bursts), sorted."""

    def counters(self) -> list[str]:
        """Counter columns with at least one recorded value (as :attr:`RunTables.counters`)."""

    def message_counts(self) -> pl.DataFrame:
        """The whole run's logical message counts (:func:`synthtrace.tracelib.merge.messages.message_counts`)."""

    def profile_rows(self) -> pl.DataFrame:
        """:func:`synthtrace.tracelib.merge.ranks.profile_rows` of the whole run's bursts."""

    def load(self, tasks: Sequence[int]) -> RunTables:
        """The run restricted to ``tasks``: their bursts and MPI calls, and the communication records with an end
        on one of them."""


@dataclass(frozen=True)
class Group:
    """Consecutive reference tasks (``tasks``, packed keys) and the tasks they exchange messages with
    (``partners``), loaded with them."""

    tasks: tuple[int, ...]
    partners: tuple[int, ...]


def task_groups(bursts: dict[int, int], partners: dict[int, set[int]], budget: int) -> list[Group]:
    """Consecutive tasks (by packed key) grouped so that a group's bursts and its partners' (``bursts``: per task,
    over every run) stay within ``budget``; a task whose own load exceeds it is a group alone."""
    groups: list[Group] = []
    tasks: list[int] = []
    loaded: set[int] = set()
    for t in sorted(bursts):
        more = {t, *partners.get(t, ())} - loaded
        if tasks and sum(bursts.get(x, 0) for x in loaded | more) > budget:
            groups.append(Group(tuple(tasks), tuple(sorted(loaded - set(tasks)))))
            tasks, loaded = [], set()
            more = {t, *partners.get(t, ())}
        tasks.append(t)
        loaded |= more
    if tasks:
        groups.append(Group(tuple(tasks), tuple(sorted(loaded - set(tasks)))))
    return groups


def _partners(counts: pl.DataFrame) -> dict[int, set[int]]:
    """Per task (packed key), the tasks it sends to or receives from (a message count table)."""
    pairs = counts.select(task_key("appl", "sender").alias("a"), task_key("appl", "receiver").alias("b")).unique()
    out: dict[int, set[int]] = {}
    for a, b in pairs.iter_rows():
        if a != b:
            out.setdefault(a, set()).add(b)
            out.setdefault(b, set()).add(a)
    return out


class PartedTable:
    """A table written part by part as Parquet files, read or written whole without holding it in memory."""

    def __init__(self, parts: Sequence[Path]):
        self.parts = list(parts)

    @property
    def height(self) -> int:
        return sum(pl.scan_parquet(p).select(pl.len()).collect().item() for p in self.parts)

    def lazy(self) -> pl.LazyFrame:
        return pl.scan_parquet(self.parts)

    def collect(self) -> pl.DataFrame:
        return self.lazy().collect()

    def write_parquet(self, path: Path | str, **options) -> None:
        """The parts as one Parquet file (streamed)."""
        self.lazy().sink_parquet(path, **options)


def _part_columns(j: int, info: AlignedRun, counters: Sequence[str]) -> list[pl.Series]:
    """What a part keeps of other run ``j``'s pairs: the reference's common counters (``_r{j}_``), the matched
    bursts' counters (``_s{j}_``, NULL when unmatched), the match score and the piece's share."""
    p = info.pairs
    row = p.other_row
    cols = [p.reference.get_column(c).alias(f"_r{j}_{c}") for c in info.common]
    cols += [p.source.get_column(c).gather(row).alias(f"_s{j}_{c}") for c in counters]
    cols += [p.score.alias(f"_score{j}"), (p.share if p.share is not None else pl.Series([1.0] * row.len()))
             .cast(pl.Float64).alias(f"_share{j}")]
    return cols


def _pairs_of(part: pl.DataFrame, j: int, common: Sequence[str], counters: Sequence[str]) -> Pairs:
    """Other run ``j``'s pairs back from a part (row i of ``source`` matched to reference row i)."""
    score = part.get_column(f"_score{j}")
    row = pl.Series("other_row", np.arange(part.height), pl.Int64).scatter(
        np.flatnonzero(score.is_null().to_numpy()), None)
    return Pairs(part.select(pl.col(f"_r{j}_{c}").alias(c) for c in common),
                 part.select(pl.col(f"_s{j}_{c}").alias(c) for c in counters), row, score,
                 part.get_column(f"_share{j}"))


def merge_partitioned(sources: Sequence[RunSource], spill: Path, options: MergeOptions = MergeOptions(),
                      experiment: str = "", budget: int = 400_000,
                      on_step: Callable[[str, int], None] | None = None) -> MergeResult:
    """:func:`~synthtrace.tracelib.merge.merge_runs.merge_runs` of the runs ``sources`` read a group of tasks at a
    time (see the module docstring); ``budget``: bursts (all runs) loaded at once; ``spill``: an empty folder for
    the parts (the result's ``merged`` and ``matches`` are :class:`PartedTable` over files in it: commit them
    before removing it). ``on_step(what, total)`` is told each group aligned and each part written. Raises what
    ``merge_runs`` raises."""
    if options.estimate_unmatched:
        raise ValueError("estimate_unmatched pools bursts over all threads: merge in one piece (merge_runs)")
    if len(sources) < 2:
        raise TooFewRunsError(f"experiment {experiment!r} has {len(sources)} run(s); merging needs at least two")
    ri = choose_reference(sources, options.reference)
    ref = sources[ri]
    others = sorted((r for i, r in enumerate(sources) if i != ri), key=lambda r: (r.run_name, r.run_id))
    counters_of = {r.run_id: r.counters() for r in sources}
    counts = {r.run_id: r.message_counts() for r in sources}
    check_counters(ref, others, counters_of, lambda r: int(counts[r.run_id].get_column("n").sum()) > 0, options)
    threads = {r.run_id: r.threads() for r in sources}
    notes: list[str] = []
    renum: dict[str, dict[int, int] | None] = {}
    ref_profile = ref.profile_rows() if options.map_ranks else None
    if on_step and ref_profile is not None:
        on_step(f"{ref.run_name}: work profiles read", 0)  # the total is known once the groups are
    for o in others:
        same_layout(threads[ref.run_id], threads[o.run_id], ref.run_name, o.run_name)
        renum[o.run_id] = (rank_mapping(ref_profile, counts[ref.run_id], o.profile_rows(), counts[o.run_id],
                                        (ref.run_name, o.run_name)) if options.map_ranks else None)
        if on_step and options.map_ranks:
            on_step(f"{o.run_name}: work profiles read, tasks put in correspondence", 0)
        if renum[o.run_id]:
            notes.append(renumbered_note(ref, o, renum[o.run_id]))
        common = [c for c in counters_of[ref.run_id] if c in counters_of[o.run_id]]
        if msg := timing_only_note(ref, o, pick_features(common)):
            notes.append(msg)
    # per task (reference numbering): bursts of every run, and partners in any run
    per_task = {r.run_id: _bursts_per_task(threads[r.run_id], renum.get(r.run_id)) for r in sources}
    load: dict[int, int] = {}
    partners: dict[int, set[int]] = {}
    for r in sources:
        for t, n in per_task[r.run_id].items():
            load[t] = load.get(t, 0) + n
        m = renum.get(r.run_id)
        for a, bs in _partners(counts[r.run_id]).items():
            partners.setdefault(m.get(a, a) if m else a, set()).update(_mapped(bs, m))
    groups = task_groups(load, partners, budget)
    n_steps = 2 * len(groups) + (len(sources) if options.map_ranks else 0)
    inverse = {o.run_id: {v_key: k for k, v_key in _packed(renum[o.run_id]).items()} for o in others}
    starts = {r.run_id: _starts(per_task[r.run_id]) for r in sources}
    totals = {r.run_id: sum(per_task[r.run_id].values()) for r in sources}
    tallies = {o.run_id: Tally() for o in others}
    samples: dict[str, list[Sample]] = {o.run_id: [] for o in others}
    run_samples: dict[str, list[pl.DataFrame]] = {o.run_id: [] for o in others}
    recorded: Recorded | None = None
    parts: list[Path] = []
    matches: list[Path] = []
    aligned: dict[str, AlignedRun] = {}
    spill.mkdir(parents=True, exist_ok=True)
    for gi, g in enumerate(groups):
        keys = [*g.tasks, *g.partners]
        r_run = ref.load(keys)
        r_run = replace(r_run, bursts=sort_bursts(r_run.bursts))
        r = Reference.of(r_run, options, counters_of[ref.run_id])
        first = g.tasks[0]
        for o in others:
            inv = inverse[o.run_id]
            own = OwnTasks(frozenset(g.tasks), starts[ref.run_id][first], totals[ref.run_id],
                           starts[o.run_id][first], totals[o.run_id])
            o_run = o.load([inv.get(k, k) for k in keys])
            aligned[o.run_id] = info = _align_other(r, o_run, renum[o.run_id], counters_of[o.run_id], options, own)
            tallies[o.run_id] += info.tally
            samples[o.run_id].append(info.sample)
            run_samples[o.run_id].append(info.run_sample)
        own_rows = OwnTasks(frozenset(g.tasks), 0, 0, 0, 0).rows(r_run.bursts)
        ref_own = r_run.bursts[own_rows]
        long_own = ref_own.get_column("duration_ns") >= options.min_error_duration_ns
        rec = Recorded.of(ref_own, counters_of[ref.run_id], long_own)
        recorded = rec if recorded is None else recorded + rec
        part = pl.concat([ref_own, pl.DataFrame([c for j, o in enumerate(others) for c in _part_columns(
            j, aligned[o.run_id], counters_of[o.run_id])])], how="horizontal")
        parts.append(spill / f"pairs-{gi:05d}.parquet")
        part.write_parquet(parts[-1])
        for j, o in enumerate(others):  # merge_matches run by run, each run's rows in task order
            matches.append(spill / f"matches-{j:04d}-{gi:05d}.parquet")
            provenance(experiment, aligned[o.run_id]).write_parquet(matches[-1])
        del part, r_run, r, ref_own
        if on_step:
            on_step(f"group {gi + 1}/{len(groups)} aligned ({len(g.tasks)} tasks, {len(g.partners)} partners)",
                    n_steps)
    for o in others:
        check_same_program(ref, o, tallies[o.run_id], options, notes,
                           calls="the MPI calls of its tasks differ")
    transfer = decide(ref, counters_of[ref.run_id], others, counters_of, aligned, tallies,
                      {k: Sample.concat(v) for k, v in samples.items()},
                      {k: pl.concat(v) for k, v in run_samples.items()}, recorded, options, notes)
    merged: list[Path] = []
    for gi, p in enumerate(parts):
        part = pl.read_parquet(p)
        pairs = {o.run_id: _pairs_of(part, j, aligned[o.run_id].common, counters_of[o.run_id])
                 for j, o in enumerate(others)}
        merged.append(spill / f"merged-{gi:05d}.parquet")
        merged_rows(part, pairs, transfer, experiment, ref).write_parquet(merged[-1])
        p.unlink()
        if on_step:
            on_step(f"part {gi + 1}/{len(parts)} written", n_steps)
    quality = pl.DataFrame([{**q.__dict__, "experiment": experiment, "reference_run": ref.run_name,
                             "n_bursts": recorded.rows if recorded else 0} for q in transfer.quality],
                           schema=QUALITY_SCHEMA)
    return MergeResult(experiment, ref.run_id, ref.run_name, PartedTable(merged), quality,
                       PartedTable(sorted(matches)), notes)


def _packed(mapping: dict[int, int] | None) -> dict[int, int]:
    """{own packed key: reference packed key} of a rank mapping ({own packed key: reference task})."""
    return {k: appl_base(k) + v for k, v in (mapping or {}).items()}


def _mapped(keys: set[int], mapping: dict[int, int] | None) -> set[int]:
    m = _packed(mapping)
    return {m.get(k, k) for k in keys}


def _bursts_per_task(threads: pl.DataFrame, mapping: dict[int, int] | None) -> dict[int, int]:
    """Bursts per task (packed key in the reference's numbering) of a run's thread table."""
    per = threads.group_by(task_key().alias("k")).agg(pl.col("bursts").sum())
    m = _packed(mapping)
    return {m.get(k, k): int(n) for k, n in per.iter_rows()}


def _starts(per_task: dict[int, int]) -> dict[int, int]:
    """Per task, the row its bursts start at in the run's bursts sorted by task."""
    keys = sorted(per_task)
    return dict(zip(keys, np.r_[0, np.cumsum([per_task[k] for k in keys])[:-1]].tolist()))
