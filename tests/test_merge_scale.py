"""The merge a group of tasks at a time (issue 22, memory bounded whatever the number of ranks): the same committed
result as the merge of the whole runs, on campaigns of the simulator read back from a warehouse."""
from __future__ import annotations

import warnings
from dataclasses import fields, replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import synthtrace
from synthtrace.pipelines import jobs
from synthtrace.tracelib.merge.checks import PairSignals, pair_signals
from synthtrace.tracelib.merge.merge_runs import MergeOptions, NotSameProgramError, Tally, merge_runs
from synthtrace.tracelib.merge.partitioned import PartedTable, merge_partitioned, task_groups
from synthtrace.tracelib.merge.ranks import _profiles, profile_rows
from synthtrace.warehouse import merged as merged_mod
from synthtrace.warehouse.checksums import write_manifest
from synthtrace.warehouse.layout import Warehouse
from synthtrace.warehouse.merged import StoredRun, export_merged, merge_inputs, merge_stored
from testing.simulator_campaigns import simulated


def _warehouse(tmp: Path, mechanism: str, seed: int = 0, **sizes) -> tuple[Warehouse, str]:
    c = simulated(mechanism, seed, tmp / "sim", **sizes)
    for t in c.traces:
        synthtrace.ingest(str(tmp / "wh"), str(t), experiment=mechanism)
    return Warehouse(tmp / "wh"), mechanism


def _whole(wh: Warehouse, name: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return merge_runs(merge_inputs(wh.experiment(name)), MergeOptions(), experiment=name)


@pytest.mark.parametrize("mechanism", ["renumbered", "completion", "pairs8", "master_worker"])
def test_partitioned_merge_is_the_whole_merge(tmp_path: Path, mechanism: str) -> None:
    """Renumbered ranks (the rank correspondence from profile rows and message counts), Testsome/Waitany completion
    on a neighbour graph, 8 runs with counter pairs, a master and its workers (a hub: the master's alignment
    depends on every worker, two messages away from each other): merged in groups of a few tasks with their
    partners, the merged bursts, quality and provenance are those of the whole runs' merge."""
    iterations = {"master_worker": 20, "pairs8": 6}.get(mechanism, 12)  # pairs8: 8 runs, the slowest to ingest
    wh, name = _warehouse(tmp_path, mechanism, ranks=8, iterations=iterations)
    whole = _whole(wh, name)
    exp = wh.experiment(name)
    steps: list[str] = []
    sources = [StoredRun(wh, r, exp.run_names[r]) for r in exp.run_ids]
    per_task = sum(s.threads().get_column("bursts").sum() for s in sources) // 8
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pairs8: runs without a common counter
        part = merge_partitioned(sources, tmp_path / "spill", MergeOptions(), name, budget=3 * per_task,
                                 on_step=lambda what, n: steps.append(what))
    assert sum("aligned" in s for s in steps) >= 3  # several groups, each a few tasks
    assert isinstance(part.merged, PartedTable)
    assert_frame_equal(part.merged.collect(), whole.merged, check_exact=False, rel_tol=1e-9)
    assert_frame_equal(part.quality, whole.quality, check_exact=False, rel_tol=1e-9)
    assert_frame_equal(part.matches.collect(), whole.matches)
    assert sorted(part.warnings) == sorted(whole.warnings)


def test_merge_command_commits_the_same_in_groups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``synthtrace merge`` (jobs.merge_experiment) on runs above the partition threshold commits what the whole
    merge commits, leaves no spilled part behind, and exports the merged trace as Paraver."""
    wh, name = _warehouse(tmp_path, "torus", ranks=9, iterations=10)
    whole = _whole(wh, name)
    monkeypatch.setattr(merged_mod, "PARTITION_BURSTS", 0)
    monkeypatch.setattr(merged_mod, "GROUP_BURSTS", merged_mod.stored_bursts(wh.experiment(name)) // 2)
    steps: list[tuple[str, int]] = []
    result = jobs.merge_experiment(wh.experiment(name), on_step=lambda what, n: steps.append((what, n)))
    assert any("group 2/" in s for s, _ in steps) and steps[-1][0] == "written"
    committed = wh.experiment(name).dir
    assert_frame_equal(pl.read_parquet(committed / "merged_bursts.parquet"), whole.merged, check_exact=False,
                       rel_tol=1e-9)
    assert_frame_equal(pl.read_parquet(committed / "merge_matches.parquet"), whole.matches)
    assert result.merged.height == whole.merged.height
    assert not list(wh.staging_dir.iterdir())
    # --export-prv after it: the merged bursts written back as Paraver
    prv = export_merged(wh.experiment(name), result, tmp_path / "out" / "merged")
    assert prv.is_file() and prv.stat().st_size > 0


def test_partitioned_merge_refuses_another_layout(tmp_path: Path) -> None:
    """Runs with other tasks are refused in groups as whole: one clear error naming both runs."""
    eight = simulated("completion", 0, tmp_path / "sim8", ranks=8, iterations=8)
    six = simulated("completion", 0, tmp_path / "sim6", ranks=6, iterations=8)
    for t in (eight.traces[0], six.traces[1]):
        synthtrace.ingest(str(tmp_path / "wh"), str(t), experiment="mixed_sizes")
    exp = Warehouse(tmp_path / "wh").experiment("mixed_sizes")
    with pytest.raises(NotSameProgramError, match="8 vs 6 tasks|6 vs 8 tasks"):
        merge_stored(exp, MergeOptions(), partition_bursts=0, group_bursts=100)


def test_task_groups_keep_partners_within_budget() -> None:
    """Consecutive tasks, each group with the partners of its tasks, within the budget unless one task alone
    exceeds it; every task in exactly one group."""
    bursts = {t: 100 for t in range(1, 17)}
    ring = {t: {(t % 16) + 1, ((t - 2) % 16) + 1} for t in range(1, 17)}
    groups = task_groups(bursts, ring, budget=600)
    assert [t for g in groups for t in g.tasks] == list(range(1, 17))
    for g in groups:
        assert set(g.partners) == set().union(*(ring[t] for t in g.tasks)) - set(g.tasks)
        assert 100 * (len(g.tasks) + len(g.partners)) <= 600
    assert [g.tasks for g in task_groups(bursts, ring, budget=50)] == [(t,) for t in range(1, 17)]


def test_profile_rows_decide_the_profiles_as_all_bursts() -> None:
    """The compact rows the rank correspondence reads give every task the work profile all its bursts give (keys
    that recur past the profile's length, runs of one call, several threads, calls without a site)."""
    rng = np.random.default_rng(7)
    for _ in range(20):
        n = int(rng.integers(50, 5000))
        b = pl.DataFrame({
            "appl": np.ones(n, np.int32), "task": rng.integers(1, 4, n).astype(np.int32),
            "thread": rng.integers(1, 3, n).astype(np.int32),
            "mpi_call": pl.Series(rng.choice(["MPI_Send", "MPI_Wait", "MPI_Test", "-"], n,
                                             p=[0.5, 0.3, 0.15, 0.05])).replace("-", None),
            "call_site": rng.choice(["a.c:1", "a.c:2"], n), "duration_ns": rng.integers(1, 10**6, n),
        }).with_row_index("burst_seq").sort("appl", "task", "thread", "burst_seq")
        rows = profile_rows(b)
        assert rows.height < b.height
        want, tasks = _profiles(b, 1)
        got, got_tasks = _profiles(rows, 1)
        assert np.array_equal(tasks, got_tasks)
        assert_frame_equal(got.sort("task", "key", "k"), want.sort("task", "key", "k"))


def test_pair_signals_of_task_groups_add_up_to_the_whole_runs() -> None:
    """The grouped merge sums its groups' signals: for groups of tasks, the sum of their PairSignals has every count
    and every share (misfit, long coverage, message agreement) of the signals of all tasks at once; the work shift
    (a median) is left to the choice sample; a merge's tallies carry every signal through their sum."""
    rng = np.random.default_rng(3)
    n, n_src = 4000, 4200
    task = np.sort(rng.integers(1, 9, n)).astype(np.int32)
    ref = pl.DataFrame({"appl": np.ones(n, np.int32), "task": task, "PAPI_TOT_INS": rng.lognormal(10, 1, n),
                        "PAPI_TOT_CYC": rng.lognormal(10, 1, n), "mpi_call": rng.choice(["MPI_Send", "MPI_Wait"], n)})
    src = pl.DataFrame({"PAPI_TOT_INS": rng.lognormal(10, 1, n_src), "PAPI_TOT_CYC": rng.lognormal(10, 1, n_src)})

    def maybe(p_null: float, p_true: float) -> pl.Series:
        return pl.Series(rng.random(n) < p_true).scatter(np.flatnonzero(rng.random(n) < p_null), None)
    matches = pl.DataFrame({
        "appl": np.ones(n, np.int32), "task": task, "thread": rng.integers(1, 3, n).astype(np.int32),
        "other_row": pl.Series(rng.integers(0, n_src, n)).scatter(np.flatnonzero(rng.random(n) < 0.1), None),
        "msg_agree": maybe(0.5, 0.9), "msg_misaligned": rng.random(n) < 0.01, "same_iter": maybe(0.1, 0.95),
        "msg_consistent": maybe(0.3, 0.9), "ambiguous_span": rng.random(n) < 0.02})
    long_ref = pl.Series(rng.random(n) < 0.6)
    whole = pair_signals(ref, src, matches, "PAPI_TOT_INS", "PAPI_TOT_CYC", long_ref)
    parts = [np.flatnonzero(task <= 3), np.flatnonzero((task > 3) & (task <= 6)), np.flatnonzero(task > 6)]
    sigs = [pair_signals(ref[rows], src, matches[rows], "PAPI_TOT_INS", "PAPI_TOT_CYC", long_ref.gather(rows))
            for rows in parts]
    summed = sigs[0] + sigs[1] + sigs[2]
    for f in fields(PairSignals):
        if f.name not in ("work_shift", "work_noise"):  # medians: from a sample
            assert getattr(summed, f.name) == getattr(whole, f.name), f.name
    assert summed.work_shift is None and whole.work_shift is not None
    assert whole.long_matched > 0 and whole.msg_misaligned > 0 and whole.undecided > 0
    tally = sum((Tally(rows=len(rows), pairs=s) for rows, s in zip(parts, sigs)), Tally())
    assert tally.rows == n
    assert tally.signals(whole) == replace(summed, work_shift=whole.work_shift, work_noise=whole.work_noise)


def test_merge_reads_the_stored_logical_messages(tmp_path: Path) -> None:
    """The merge takes each run's logical messages as ingest stored them (mpi_messages), not numbering the
    communication records again, with the same merged result as from the records; a run stored before its logical
    messages were kept is merged from its records, the same way."""
    wh, name = _warehouse(tmp_path, "completion", ranks=4, iterations=6)
    exp = wh.experiment(name)
    runs = merge_inputs(exp)
    for r in runs:
        stored = pl.read_parquet(wh.run_dir(r.run_id) / "mpi_messages.parquet").drop("run_id")
        assert_frame_equal(r.messages, stored)
    from_stored = _whole(wh, name)
    records = [replace(r, messages=pl.read_parquet(wh.run_dir(r.run_id) / "messages.parquet")) for r in runs]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from_records = merge_runs(records, MergeOptions(), experiment=name)
    for older in runs:  # as ingested before they were kept (its checksums without them too)
        (wh.run_dir(older.run_id) / "mpi_messages.parquet").unlink()
        write_manifest(wh.run_dir(older.run_id), folder=older.run_id)
    assert all("k" not in r.messages.columns for r in merge_inputs(exp))
    from_older = _whole(wh, name)
    for got in (from_records, from_older):
        assert_frame_equal(got.merged, from_stored.merged)
        assert_frame_equal(got.quality, from_stored.quality)
        assert_frame_equal(got.matches, from_stored.matches)


def test_task_groups_on_a_grid_are_tiles() -> None:
    """On a 2-D torus (8 x 8 ranks, 4 neighbours each) a group takes tasks close by their messages, so that fewer
    partners are loaded beside its own tasks than with strips of consecutive ranks (4 own + 10 partners at a
    budget of 16 tasks), every group within the budget, every task in one group."""
    px = py = 8
    grid = {}
    for r in range(px * py):
        x, y = r % px, r // px
        grid[r + 1] = {(x - 1) % px + y * px + 1, (x + 1) % px + y * px + 1, x + (y - 1) % py * px + 1,
                       x + (y + 1) % py * px + 1}
    bursts = dict.fromkeys(grid, 100)
    groups = task_groups(bursts, grid, budget=1600)
    assert sorted(t for g in groups for t in g.tasks) == sorted(grid)
    for g in groups:
        assert set(g.partners) == set().union(*(grid[t] for t in g.tasks)) - set(g.tasks)
        assert 100 * (len(g.tasks) + len(g.partners)) <= 1600
    loaded = sum(len(g.tasks) + len(g.partners) for g in groups)
    assert loaded <= 2.75 * len(grid)  # strips of 4: 3.5 tasks loaded per task
