"""The merge one group of tasks at a time: memory bounded whatever the number of ranks (issue 22).

:func:`synthtrace.tracelib.merge.merge_runs.merge_runs` holds every run's bursts, calls and messages at once; a
256-rank x 2,000-iteration campaign does not fit in 2 GB that way. :func:`merge_partitioned` gives the same result
(the same rows and values; see ``tests/test_merge_scale.py``) from runs it reads a group of tasks at a time
through a :class:`RunSource` (the warehouse's Parquet tables read with a predicate:
:class:`synthtrace.warehouse.merged.StoredRun`):

1. **cross-rank steps from compact tables**: the task layout (threads and their bursts per run), the counters, the
   logical message counts per channel (rank correspondence, same-program check) and the rows that decide every
   task's work profile (:func:`synthtrace.tracelib.merge.ranks.profile_rows`, read a group of tasks at a time);
2. **groups of tasks close by their messages** (:func:`task_groups`: tiles of a grid, not strips) whose bursts,
   with those of their **partners** (every task they exchange messages with, in any run), fit ``budget`` bursts:
   a group is aligned with its partners loaded,
   so that the logical messages tie its threads to theirs as in the whole run, and reports its own tasks only
   (:class:`synthtrace.tracelib.merge.merge_runs.OwnTasks`); what it reports (each reference burst with the
   matched bursts' counters, its provenance rows) is written out as Parquet parts, one per task, and freed; its
   tallies and its
   share of the choice sample are kept (small: sums, and at most ``CHOICE_SAMPLE`` rows for the whole run);
   **settled**: a task whose bursts one group paired otherwise than another (as its own task or as a partner)
   depends on tasks further away (a hub: a master's alignment depends on every worker, so a worker's group, which
   loads the master without the other workers, pairs them otherwise than the master's group): the groups holding
   it are aligned again with the tasks two messages away from it loaded too (at most ``MAX_LOAD`` x the budget;
   beyond, the merge says that some pairs may differ from the whole merge's), until every task's pairs agree;
3. **the decisions once**: the same-program check on the summed tallies, the transfer plans from the choice
   sample, the verdicts (:func:`synthtrace.tracelib.merge.merge_runs.decide`);
4. **the values part by part**: each part's counters transferred by the plans (:func:`merged_rows`).

A group is the unit a distributed worker (Dask, a Prefect task) would take next: it reads its tasks and their
partners, and returns a part and its sums. Not done this way: ``estimate_unmatched`` (its estimates pool bursts
of one call over all threads), runs whose bursts take DRAM_CAS from uncore samples (apportioned per node).
"""
from __future__ import annotations

import itertools
import shutil
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

import numpy as np
import polars as pl

from synthtrace.tracelib.merge.blocks import ScanRows
from synthtrace.tracelib.merge.communicators import on_reference_ids, renamed_communicators, tool_neutral_counts
from synthtrace.tracelib.merge.merge_runs import (KEYS, QUALITY_SCHEMA, AlignedRun, Blockwise, MergeOptions,
                                                  MergeResult, OwnTasks, Pairs, PartedTable, Recorded,
                                                  Reference, RunTables, Sample, Tally, TooFewRunsError, WidePairs,
                                                  _align_other, check_counters, compared_features, check_same_program,
                                                  choose_reference, decide, merged_blocks, narrow_columns,
                                                  paired_rows, pick_features, provenance,
                                                  renumbered_note, same_layout, shared_counters, timing_only_note,
                                                  sites_kept, without_sites)
from synthtrace.tracelib.merge.ranks import Correspondence, correspondence
from synthtrace.tracelib.thread_key import appl_base, task_key

#: rounds of aligning groups again with their partners' partners (each round: the groups whose partners' pairs
#: still disagree with those partners' own groups)
MAX_ROUNDS = 3
#: a group aligned again loads at most this many times ``budget`` bursts
MAX_LOAD = 3


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

    def communicators(self) -> pl.DataFrame | None:
        """The members of the run's communicators (:attr:`RunTables.communicators`; None: not known)."""

    def profile_rows(self, sites: bool = True) -> pl.DataFrame:
        """:func:`synthtrace.tracelib.merge.ranks.profile_rows` of the whole run's bursts; ``sites`` False: of its
        bursts with ``call_site`` NULL, as the merge compares runs that do not name call sites alike
        (:func:`~synthtrace.tracelib.merge.merge_runs.without_sites`)."""

    def call_sites(self) -> pl.DataFrame:
        """:func:`synthtrace.tracelib.merge.align.site_counts` of the whole run's MPI calls."""

    def load(self, tasks: Sequence[int], bursts_to: Path | None = None) -> RunTables:
        """The run restricted to ``tasks``: their bursts and MPI calls, and the communication records with an end
        on one of them; with ``bursts_to``, the bursts may be a lazy scan of that file, written then (kept until the
        merge ends)."""


@dataclass(frozen=True)
class Group:
    """Consecutive reference tasks (``tasks``, packed keys) and the tasks they exchange messages with
    (``partners``), loaded with them."""

    tasks: tuple[int, ...]
    partners: tuple[int, ...]


def task_groups(bursts: dict[int, int], partners: dict[int, set[int]], budget: int) -> list[Group]:
    """Tasks grouped by message locality so that a group's bursts and its partners' (``bursts``: per task, over
    every run) stay within ``budget``: a group starts at the first task not yet grouped and grows by the task, among
    its tasks' partners not yet grouped, whose bursts and partners add the fewest bursts to what it loads (a tile
    of a grid rather than a strip, so that fewer partners are loaded twice), else by the next task not yet grouped;
    a task whose own load exceeds the budget is a group alone. Every task is in exactly one group."""
    left = sorted(bursts)
    free = set(left)
    groups: list[Group] = []

    def cost(ts: set[int]) -> int:
        return sum(bursts.get(x, 0) for x in ts)
    nxt = 0
    while free:
        while left[nxt] not in free:
            nxt += 1
        tasks, loaded = [left[nxt]], {left[nxt], *partners.get(left[nxt], ())}
        free.discard(left[nxt])
        used = cost(loaded)
        while free:
            near = sorted({q for t in tasks for q in partners.get(t, ()) if q in free})
            pick = None
            if near:
                pick = min(near, key=lambda q: (cost({q, *partners.get(q, ())} - loaded), q))
            else:
                while left[nxt] not in free:
                    nxt += 1
                pick = left[nxt]
            more = {pick, *partners.get(pick, ())} - loaded
            if used + cost(more) > budget:
                break
            tasks.append(pick)
            free.discard(pick)
            loaded |= more
            used += cost(more)
        groups.append(Group(tuple(sorted(tasks)), tuple(sorted(loaded - set(tasks)))))
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


def _part_columns(j: int, info: AlignedRun, counters: Sequence[str]) -> list[pl.Series]:
    """What a part keeps of other run ``j``'s pairs: when its counters are read a block at a time
    (:class:`~synthtrace.tracelib.merge.merge_runs.WideRows`), the matched bursts' rows in the run's file of the
    group (``_src_row{j}``, NULL when unmatched or a unit of several pieces) and where units' sums stand for them
    (``_src_unit{j}``: the matched unit's row in the run's units' sums; ``_ref_unit{j}``: an apportioned reference
    burst's unit's in the reference's), else the reference's common counters (``_r{j}_``) and the matched bursts'
    counters (``_s{j}_``); the piece's share and the match score."""
    p = info.kept_pairs(counters)
    share = (p.share if p.share is not None else pl.Series([1.0] * p.score.len())).cast(pl.Float64)
    tail = [p.score.alias(f"_score{j}"), share.alias(f"_share{j}")]
    if isinstance(p, WidePairs):
        units = [r.alias(name) for r, name in ((p.src.unit_rows, f"_src_unit{j}"), (p.ref.unit_rows, f"_ref_unit{j}"))
                 if r is not None]
        return [p.src.rows.alias(f"_src_row{j}"), *units, *tail]
    cols = [p.reference.get_column(c).alias(f"_r{j}_{c}") for c in info.common]
    cols += [p.source.get_column(c).alias(f"_s{j}_{c}") for c in counters]
    return cols + tail


def _pairs_of(part: pl.DataFrame, j: int, common: Sequence[str], counters: Sequence[str],
              folder: Path) -> Pairs | WidePairs:
    """Other run ``j``'s pairs back from a part (row i of ``source`` matched to reference row i), their counters
    read from the group's files in ``folder`` when the part keeps the rows they are at."""
    score, share = part.get_column(f"_score{j}"), part.get_column(f"_share{j}")
    if f"_src_row{j}" in part.columns:
        ref_units, src_units = Blockwise.units_paths(folder, j)
        return WidePairs(_scan_rows(part, folder / "reference.parquet", "_ref_row", f"_ref_unit{j}", ref_units),
                         _scan_rows(part, folder / f"other-{j:04d}.parquet", f"_src_row{j}", f"_src_unit{j}",
                                    src_units), score, share)
    row = paired_rows(score).alias("other_row")
    return Pairs(part.select(pl.col(f"_r{j}_{c}").alias(c) for c in common),
                 part.select(pl.col(f"_s{j}_{c}").alias(c) for c in counters), row, score, share)


def _scan_rows(part: pl.DataFrame, file: Path, rows: str, unit_rows: str, units: Path) -> ScanRows:
    """The rows of ``file`` a part's column ``rows`` names, the sums in ``units`` standing for them at the rows its
    column ``unit_rows`` names (when it has that column)."""
    scan = pl.scan_parquet(file, glob=False)
    if unit_rows not in part.columns:
        return ScanRows(scan, part.get_column(rows))
    return ScanRows(scan, part.get_column(rows), pl.scan_parquet(units, glob=False), part.get_column(unit_rows))


def _scanned(run: RunTables, path: Path) -> RunTables:
    """``run`` as loaded to ``path``: its bursts a lazy scan of that file (a frame's written there now)."""
    if isinstance(run.bursts, pl.DataFrame):
        run.bursts.write_parquet(path)
        return replace(run, bursts=pl.scan_parquet(path, glob=False))
    return run


def _as_run(source: RunSource) -> RunTables:
    """A run's identity as :func:`~synthtrace.tracelib.merge.merge_runs.merged_rows` reads it."""
    return RunTables(source.run_id, source.run_name, pl.DataFrame(), pl.DataFrame())


@dataclass
class GroupResult:
    """What a group of a partitioned merge keeps in memory, per other run: its tallies, its share of the choice
    sample and of the run's own sample; the reference's recorded values of its tasks; and the folder its runs'
    bursts were loaded to (its parts read their rows there)."""

    tallies: dict[str, Tally]
    samples: dict[str, Sample]
    run_samples: dict[str, pl.DataFrame]
    recorded: Recorded | None
    folder: Path


def _disagreeing(spill: Path, gi: int, n_others: int) -> set[int]:
    """The partner tasks (packed keys) whose bursts group ``gi`` paired otherwise than the tasks' own groups did,
    for any other run (from the groups' ``partners-`` and the tasks' ``matches-`` files in ``spill``)."""
    off: set[int] = set()
    for j in range(n_others):
        mine = pl.read_parquet(spill / f"partners-{j:04d}-{gi:05d}.parquet", glob=False)
        if not mine.height:
            continue
        tasks = mine.select(task_key().unique()).to_series().to_list()
        files = [f for t in sorted(tasks) if (f := spill / f"matches-{j:04d}-{t:012d}.parquet").is_file()]
        if not files:
            continue
        theirs = (pl.scan_parquet(files, glob=False).filter(task_key().is_in(tasks))
                  .select(*KEYS, "other_burst_seq").collect())
        diff = mine.join(theirs, on=KEYS, how="left").filter(
            pl.col("other_seq").ne_missing(pl.col("other_burst_seq")))
        off |= set(diff.select(task_key().unique()).to_series().to_list())
    return off


def merge_partitioned(sources: Sequence[RunSource], spill: Path, options: MergeOptions = MergeOptions(),
                      experiment: str = "", budget: int = 400_000,
                      on_step: Callable[[str, int], None] | None = None, max_load: int | None = None) -> MergeResult:
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
    for o in others:  # communicator ids are per-run handles: the rank correspondence counts by members
        counts[o.run_id] = tool_neutral_counts(on_reference_ids(counts[o.run_id], ref.communicators(),
                                                                o.communicators()), counts[ref.run_id])
    check_counters(ref, others, counters_of, lambda r: int(counts[r.run_id].get_column("n").sum()) > 0, options)
    threads = {r.run_id: r.threads() for r in sources}
    notes: list[str] = []
    sites = sites_kept({r.run_id: r.call_sites() for r in sources}, ref.run_id, {r.run_id: r.run_name for r in sources},
                       notes)
    renum: dict[str, dict[int, int] | None] = {}
    ties: dict[str, str | None] = {}  # [ranks22] the rank correspondences' ties, for the verdicts
    ref_profile = ref.profile_rows(sites) if options.map_ranks else None
    if on_step and ref_profile is not None:
        on_step(f"{ref.run_name}: work profiles read", 0)  # the total is known once the groups are
    for o in others:
        same_layout(threads[ref.run_id], threads[o.run_id], ref.run_name, o.run_name)
        corr = (correspondence(ref_profile, counts[ref.run_id], o.profile_rows(sites), counts[o.run_id],
                               (ref.run_name, o.run_name)) if options.map_ranks else Correspondence(None))
        renum[o.run_id], ties[o.run_id] = corr.mapping, corr.tie
        if on_step and options.map_ranks:
            on_step(f"{o.run_name}: work profiles read, tasks put in correspondence", 0)
        if renum[o.run_id]:
            notes.append(renumbered_note(ref, o, renum[o.run_id], corr.note))
        common = shared_counters(counters_of[ref.run_id], counters_of[o.run_id])
        if msg := timing_only_note(ref, o, pick_features(common)):
            notes.append(msg)
    # per task (reference numbering): bursts of every run, and partners in any run
    per_task = {r.run_id: _bursts_per_task(threads[r.run_id], renum.get(r.run_id)) for r in sources}
    load: dict[int, int] = {}
    partners: dict[int, set[int]] = {}
    for r in sources:
        for t, n in per_task[r.run_id].items():
            load[t] = load.get(t, 0) + n
        m = _packed(renum.get(r.run_id))  # the other runs' partners in the reference's numbering
        for a, bs in _partners(counts[r.run_id]).items():
            partners.setdefault(m.get(a, a), set()).update(m.get(b, b) for b in bs)
    groups = task_groups(load, partners, budget)
    inverse = {o.run_id: {v_key: k for k, v_key in _packed(renum[o.run_id]).items()} for o in others}
    starts = {r.run_id: _starts(per_task[r.run_id]) for r in sources}
    totals = {r.run_id: sum(per_task[r.run_id].values()) for r in sources}
    spill.mkdir(parents=True, exist_ok=True)
    n_steps = len(groups) + len(load) + (len(sources) if options.map_ranks else 0)  # groups, parts (a task's)
    aligned: dict[str, AlignedRun] = {}  # the last group's (decide() reads the common counters and features)
    features = compared_features(counters_of[ref.run_id], [counters_of[o.run_id] for o in others])
    narrow = list(dict.fromkeys(c for o in others for common in [shared_counters(counters_of[ref.run_id],
                                                                                 counters_of[o.run_id])]
                                for c in narrow_columns(pick_features(common), common)))

    loads = itertools.count()  # each alignment of a group reads its runs into a folder of its own

    def aligned_group(gi: int, g: Group, keys: Sequence[int]) -> GroupResult:
        """Group ``g`` aligned with the tasks ``keys`` loaded (its tasks first): its part, provenance and
        partners' pairs written to ``spill``, its sums and samples returned. The runs' bursts are read as lazy scans
        of files in the group's folder, their counters a block at a time where needed (issue 23: a wide run's
        group read whole took more than 3 GB): the part keeps each reference burst's row in the reference's file
        and, per other run, its matched burst's or the rows of units' sums written there when a unit is split
        (:class:`~synthtrace.tracelib.merge.merge_runs.WideRows`)."""
        folder = spill / "groups" / f"{next(loads):05d}"
        folder.mkdir(parents=True)
        r_run = _scanned(ref.load(keys, folder / "reference.parquet"), folder / "reference.parquet")
        r = Reference.of(r_run if sites else without_sites(r_run), options, counters_of[ref.run_id], features)
        blocks = Blockwise(folder, r_run, tuple(narrow))
        own = frozenset(g.tasks)
        out = GroupResult({}, {}, {}, None, folder)
        ref_keys, ref_rows = blocks.reference_rows(KEYS)
        mine = OwnTasks(own, {}, 0, {}, 0).rows(ref_keys)
        columns = [ref_keys[mine].select("appl", "task"), ref_rows.gather(mine).alias("_ref_row").to_frame()]
        for j, o in enumerate(others):
            tasks = OwnTasks(own, starts[ref.run_id], totals[ref.run_id], starts[o.run_id], totals[o.run_id])
            path = folder / f"other-{j:04d}.parquet"
            loaded = _scanned(o.load([inverse[o.run_id].get(k, k) for k in keys], path), path)
            ids = renamed_communicators(loaded if sites else without_sites(loaded), r_run, renum[o.run_id])
            o_run = ids.run  # communicator ids are per-run handles: matched by members
            if gi == 0:
                notes.extend(ids.notes)
            aligned[o.run_id] = info = _align_other(r, o_run, renum[o.run_id], counters_of[o.run_id], options, tasks,
                                                    blocks=blocks.of_run(j))
            out.tallies[o.run_id], out.samples[o.run_id] = info.tally, info.sample
            out.run_samples[o.run_id] = info.run_sample
            _by_task(provenance(experiment, info), spill, f"matches-{j:04d}")
            info.partner_pairs.write_parquet(spill / f"partners-{j:04d}-{gi:05d}.parquet")
            columns.append(pl.DataFrame(_part_columns(j, info, counters_of[o.run_id])))
        out.recorded = Recorded.scanned(r_run.bursts.filter(task_key().is_in(list(own))),  # type: ignore[union-attr]
                                        counters_of[ref.run_id], options.min_error_duration_ns)
        _by_task(pl.concat(columns, how="horizontal").with_columns(pl.lit(folder.name).alias("_group")), spill,
                 "pairs")
        return out

    done: list[GroupResult] = []
    closure: list[set[int]] = []
    for gi, g in enumerate(groups):
        closure.append({*g.tasks, *g.partners})
        done.append(aligned_group(gi, g, [*g.tasks, *g.partners]))
        if on_step:
            on_step(f"group {gi + 1}/{len(groups)} aligned ({len(g.tasks)} tasks, {len(g.partners)} partners)",
                    n_steps)
    # a group aligned its partners without their own partners: where it paired a partner's bursts otherwise than
    # the partner's own group did (a hub, whose alignment depends on every task it exchanges with), the group is
    # aligned again with that partner's partners loaded too, unless that load would exceed ``max_load``
    max_load = max_load or MAX_LOAD * budget
    owner = {t: gi for gi, g in enumerate(groups) for t in g.tasks}
    unsettled: set[int] = set()
    check = set(range(len(groups)))
    for _ in range(MAX_ROUNDS):
        redo = []
        off: dict[int, set[int]] = {}  # per group, its tasks (own or partners) paired otherwise in another group
        for gi in sorted(check):
            for t in _disagreeing(spill, gi, len(others)):
                off.setdefault(gi, set()).add(t)
                off.setdefault(owner[t], set()).add(t)
        for gi, tasks in sorted(off.items()):
            near = {q for t in tasks for q in partners.get(t, ())}  # two messages away from those tasks
            grown = closure[gi] | near | {q for t in near for q in partners.get(t, ())}
            if grown == closure[gi]:
                continue
            if sum(load.get(t, 0) for t in grown) > max_load:
                unsettled.add(gi)
                continue
            redo.append(gi)
            closure[gi] = grown
        # next round: the groups aligned again, and those whose partners' own groups were
        moved = {t for gi in redo for t in groups[gi].tasks}
        check = set(redo) | {gi for gi in range(len(groups)) if closure[gi] & moved}
        for gi in redo:
            g = groups[gi]
            superseded = done[gi].folder  # review23 item 7: its parts read the new folder, this one no more
            done[gi] = aligned_group(gi, g, [*g.tasks, *sorted(closure[gi] - set(g.tasks))])
            shutil.rmtree(superseded)
            if on_step:
                on_step(f"group {gi + 1}/{len(groups)} aligned again with its partners' partners "
                        f"({len(closure[gi]) - len(g.tasks)} tasks loaded beside its own)", n_steps)
        if not redo:
            break
    if unsettled:
        notes.append(f"{len(unsettled)} of {len(groups)} groups of tasks were aligned with partners whose own "
                     f"partners did not fit the memory bound: their pairs may differ from the merge of the whole runs")
    tallies = {o.run_id: sum((d.tallies[o.run_id] for d in done), Tally()).tied(ties[o.run_id]) for o in others}
    recorded = done[0].recorded
    for d in done[1:]:
        recorded = recorded + d.recorded
    samples = {o.run_id: [d.samples[o.run_id] for d in done] for o in others}
    run_samples = {o.run_id: [d.run_samples[o.run_id] for d in done] for o in others}
    tasks = sorted(load)  # the parts in the order of the whole run: by task
    parts = [(t, f) for t in tasks if (f := spill / f"pairs-{t:012d}.parquet").is_file()]
    unwritten = Counter(owner[t] for t, _ in parts)  # per group, its parts not yet written as merged rows
    matches = [f for j in range(len(others)) for t in tasks
               if (f := spill / f"matches-{j:04d}-{t:012d}.parquet").is_file()]
    for f in spill.glob("partners-*.parquet"):
        f.unlink()
    for o in others:
        check_same_program(ref, o, tallies[o.run_id], options, notes,
                           calls="the MPI calls of its tasks differ")
    transfer = decide(ref, counters_of[ref.run_id], others, counters_of, aligned, tallies,
                      {k: Sample.concat(v) for k, v in samples.items()},
                      {k: pl.concat(v, how="diagonal_relaxed") for k, v in run_samples.items()}, recorded, options,
                      notes)
    merged: list[Path] = []
    valued: list[Recorded] = []  # the transferred values each part got (merge_quality's coverage)
    for gi, (t, p) in enumerate(parts):
        part = pl.read_parquet(p, glob=False)
        folder = spill / "groups" / part.get_column("_group")[0]
        pairs = {o.run_id: _pairs_of(part, j, aligned[o.run_id].common, counters_of[o.run_id], folder)
                 for j, o in enumerate(others)}
        reference = replace(_as_run(ref), bursts=pl.scan_parquet(folder / "reference.parquet", glob=False))
        files, _, got = merged_blocks(reference, part.get_column("_ref_row"), pairs, transfer, experiment,
                                      spill / p.name.replace("pairs-", "merged-").removesuffix(".parquet"),
                                      options.min_error_duration_ns)
        merged += files
        valued.append(got)
        p.unlink()
        unwritten[owner[t]] -= 1
        if not unwritten[owner[t]]:  # review23 item 7: a group's spilled bursts go once its parts are merged
            shutil.rmtree(folder)
        if on_step:
            on_step(f"part {gi + 1}/{len(parts)} written", n_steps)
    quality = pl.DataFrame([{**q.__dict__, "experiment": experiment, "reference_run": ref.run_name,
                             "n_bursts": recorded.rows if recorded else 0}
                            for q in (sum(valued[1:], valued[0]).covered(transfer.quality) if valued
                                      else transfer.quality)],
                           schema=QUALITY_SCHEMA)
    return MergeResult(experiment, ref.run_id, ref.run_name, PartedTable(merged), quality,
                       PartedTable(matches), notes)


def _by_task(frame: pl.DataFrame, spill: Path, name: str) -> None:
    """``frame`` (a group's rows, sorted by task) written as one file per task: ``<name>-<packed key>.parquet``,
    so that the parts read back by task are in the whole run's order whatever tasks a group held."""
    keys = frame.select(task_key().alias("_k")).to_series()
    for key, part in zip(keys.unique(maintain_order=True).to_list(),
                         frame.with_columns(keys).partition_by("_k", maintain_order=True, include_key=False)):
        part.write_parquet(spill / f"{name}-{key:012d}.parquet")


def _packed(mapping: dict[int, int] | None) -> dict[int, int]:
    """{own packed key: reference packed key} of a rank mapping ({own packed key: reference task})."""
    return {k: appl_base(k) + v for k, v in (mapping or {}).items()}


def _bursts_per_task(threads: pl.DataFrame, mapping: dict[int, int] | None) -> dict[int, int]:
    """Bursts per task (packed key in the reference's numbering) of a run's thread table."""
    per = threads.group_by(task_key().alias("k")).agg(pl.col("bursts").sum())
    m = _packed(mapping)
    return {m.get(k, k): int(n) for k, n in per.iter_rows()}


def _starts(per_task: dict[int, int]) -> dict[int, int]:
    """Per task, the row its bursts start at in the run's bursts sorted by task."""
    keys = sorted(per_task)
    return dict(zip(keys, np.r_[0, np.cumsum([per_task[k] for k in keys])[:-1]].tolist()))
