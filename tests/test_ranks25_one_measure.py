"""ranks25 (note24 Open 3, 4; review24 F4 c): the rank correspondence's behaviour is one measure held once.

Memory (issue 23): torus24's long-burst work cells were a second pair of dense task x cell cubes beside the
behaviour's, both float64, and the comparisons of numberings copied whole cubes several times over (a ring of 16k
ranks: 1.37 GB). One measure: a star's leaves were paired by the behaviour assignment over every burst while the
search's orderings, its first pin and the numberings' distances weighed the long bursts alone; the glue bursts
between MPI calls follow a rank's place, not its role (mergeattack23 P9), and paired a renumbered star's workers by
their place."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import polars as pl

from benchmarks.bench_ranks22 import bursts, edges
from synthtrace.tracelib.merge import ranks
from synthtrace.tracelib.merge.merge_runs import renumbered_note
from synthtrace.tracelib.thread_key import task_int
from testing.held import traced_peak
from tests.test_rankscale24_scale import _renumbered_workers, _star, _star_bursts


def test_the_rank_correspondence_holds_its_work_profiles_once():
    """A ring of 2,048 ranks (3 closing calls x ``PROFILE`` bursts a task, every burst long, the other run numbered
    r + 5): numpy's allocations while the correspondence runs peak under 6 float64 copies of one run's profile
    cells (before: ~13.5, two pairs of float64 cubes and whole-cube temporaries), and the shift is still found."""
    n, shift = 2048, 5
    ref_b, oth_b = bursts(n, 0, 1), bursts(n, shift, 2)
    ref_c, oth_c = edges("ring", n, 0), edges("ring", n, shift)
    ranks.correspondence(ref_b, ref_c, oth_b, oth_c, ("ref", "other"))  # the modules it imports, loaded
    corr, peak = traced_peak(lambda: ranks.correspondence(ref_b, ref_c, oth_b, oth_c, ("ref", "other")))
    profile = n * 3 * ranks.PROFILE * 8  # one run's profile cells, float64 (bytes)
    assert peak < 6 * profile, f"peak {peak / profile:.1f} x one run's profiles"
    assert corr.tie is None
    assert corr.mapping == {task_int(1, (t + shift) % n + 1): t + 1 for t in range(n)}


GLUE = ("MPI_Isend", "MPI_Irecv", "MPI_Waitall")


def _placed_star_bursts(n: int, perm: np.ndarray, seed: int) -> pl.DataFrame:
    """A star's tasks, task t numbered perm[t] + 1: per iteration a work item (a long burst, each item's work its
    own, 30 % apart, closed by MPI_Recv) then three glue bursts (1,000 instructions x the place's factor, 15-30 %
    apart between places: the place is the rank's number, not its role), 0.3 % noise each."""
    rng, iters = np.random.default_rng(seed), 64
    item = 1e6 * np.exp(0.3 * np.random.default_rng(0).standard_normal((n, iters)))
    place = np.exp(0.3 * np.random.default_rng(1).standard_normal((n, len(GLUE))))
    number = perm  # task t runs on place perm[t]
    rows = []
    for t in range(n):
        ins = np.column_stack([item[t], 1e3 * np.tile(place[number[t]], (iters, 1))]).ravel()
        ins = ins * np.exp(0.003 * rng.standard_normal(ins.size))
        dur = np.column_stack([np.full(iters, 1e6), np.full((iters, len(GLUE)), 1e3)]).ravel()
        rows.append(pl.DataFrame({"task": np.full(ins.size, number[t] + 1, np.int32),
                                  "mpi_call": np.tile(["MPI_Recv", *GLUE], iters), "PAPI_TOT_INS": ins,
                                  "duration_ns": dur.astype(np.int64)}))
    return pl.concat(rows).with_columns(appl=pl.lit(1, pl.Int32), thread=pl.lit(1, pl.Int32),
                                        call_site=pl.lit("w.c:9")).sort("task", maintain_order=True)


def test_a_star_s_workers_are_paired_by_their_work_not_their_place():
    """A star of 64 tasks whose other run's launcher moved the workers by 7, each worker's glue bursts following its
    place (its number) and its long bursts its work items: the workers are paired by their work, as the search
    weighs numberings (before: by every burst, the glue's three cells to one, the numbering as it is kept)."""
    n, shift = 64, 7
    perm = _renumbered_workers(n, shift)
    corr = ranks.correspondence(_placed_star_bursts(n, np.arange(n), 1), _star(n, np.arange(n)),
                                _placed_star_bursts(n, perm, 2), _star(n, perm), ("ref", "other"))
    assert corr.mapping == {task_int(1, int(perm[t]) + 1): t + 1 for t in range(n)}
    assert corr.note is None  # 64 tasks: the assignment is the proven optimum


def test_a_renumbering_the_nearest_candidates_assignment_decided_says_it_is_no_proven_optimum():
    """A star of 2,048 tasks (above ``DENSE_TASKS``) whose workers are renumbered, paired by the behaviour
    assignment among each task's nearest candidates: the merge's note of the renumbered run says that assignment is
    not a proven optimum (before: said in behaviour_cost's docstring only)."""
    n, shift = 2048, 7
    perm = _renumbered_workers(n, shift)
    corr = ranks.correspondence(_star_bursts(n, np.arange(n), 1), _star(n, np.arange(n)),
                                _star_bursts(n, perm, 2), _star(n, perm), ("ref", "other"))
    assert corr.mapping == {task_int(1, int(perm[t]) + 1): t + 1 for t in range(n)}
    assert corr.note is not None and "not a proven optimum" in corr.note
    run = SimpleNamespace(run_name="run1")
    assert corr.note in renumbered_note(SimpleNamespace(run_name="run0"), run, corr.mapping, corr.note)
