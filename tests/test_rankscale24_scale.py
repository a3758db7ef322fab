"""rankscale24 (attack23 F4, F3): the rank correspondence of big campaigns within bounded memory and work.

F4: the behaviour of every reference task against every other task was a dense tasks x tasks matrix (16k ranks:
2.1 GB, then an O(n^3) assignment copying it) on every merge with map_ranks. Above ``DENSE_TASKS`` tasks no such
matrix is built: the memory is counted (numpy's allocations, traced), never timed.
F3: a master-worker star's leaves were paired one task at a time after the search's pins, each an ordering of all
reference tasks left (~n^2 / 2 per numbering, outside the work budget: 16k ranks 398 s). The work is counted."""
from __future__ import annotations

import tracemalloc

import numpy as np
import polars as pl

from benchmarks.bench_ranks22 import bursts, edges
from synthtrace.tracelib.merge import behaviour_cost, ranks, symmetries
from synthtrace.tracelib.thread_key import task_int


def test_the_behaviour_of_many_tasks_is_weighed_without_a_tasks_x_tasks_matrix():
    """4,096 tasks of 8 bursts closed by two calls in turn, each burst's work its own (30 % apart), the other run
    alike (0.3 % noise): their behaviour, the behaviour assignment and the search's first pin take numpy allocations
    peaking under half the 128 MiB a tasks x tasks matrix of float64 takes (before: that matrix, then the
    assignment's copy of it); the assignment pairs each task with its own."""
    n = 4096
    assert n > behaviour_cost.DENSE_TASKS
    t = np.repeat(np.arange(1, n + 1), 8)
    work = np.exp(0.3 * np.random.default_rng(0).standard_normal(t.size))

    def run(seed: int) -> pl.DataFrame:
        ins = 1e6 * work * np.exp(0.003 * np.random.default_rng(seed).standard_normal(t.size))
        return pl.DataFrame({"appl": 1, "task": t.astype(np.int32), "thread": 1,
                             "mpi_call": np.tile(["MPI_Allreduce", "MPI_Send"], t.size // 2), "call_site": "a.c:3",
                             "PAPI_TOT_INS": ins, "duration_ns": ins})

    ref, oth = run(1), run(2)
    nodes = np.array([task_int(1, k) for k in range(1, n + 1)], np.int64)
    tracemalloc.start()
    try:
        behaviours = ranks._behaviours(ref, oth)
        best = ranks._assignment(behaviours)
        ranks._Candidates(nodes, behaviours).surest(np.arange(n))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < n * n * 8 / 2, f"peak {peak / 2**20:.1f} MiB traced"
    assert best.mapping == {task_int(1, k): k for k in range(1, n + 1)}


def test_a_big_rotated_ring_is_found_by_the_sparse_assignment():
    """A ring of 2,048 ranks (above ``DENSE_TASKS``; work 1 % apart per rank, 0.3 % noise) whose other run numbers
    rank r as r + 5: the rotation is found without a tie, as the whole matrix found it."""
    n, shift = 2048, 5
    assert n > behaviour_cost.DENSE_TASKS
    corr = ranks.correspondence(bursts(n, 0, 1), edges("ring", n, 0), bursts(n, shift, 2), edges("ring", n, shift),
                                ("ref", "other"))
    assert corr.mapping == {task_int(1, (t + shift) % n + 1): t + 1 for t in range(n)}
    assert corr.tie is None


def _star(n: int, perm: np.ndarray) -> pl.DataFrame:
    """Message counts of a master-worker star of ``n`` tasks (task 0 sends work to every other, tag 1, and gets
    results back, tag 2), task t numbered perm[t] + 1."""
    w = np.arange(1, n)
    s, d = np.concatenate([np.zeros(n - 1, np.int64), w]), np.concatenate([w, np.zeros(n - 1, np.int64)])
    tag = np.repeat([1, 2], n - 1)
    return pl.DataFrame({"appl": 1, "comm": 1, "sender": perm[s] + 1, "receiver": perm[d] + 1, "tag": tag,
                         "bytes": 8192, "n": 20}).cast({"sender": pl.Int32, "receiver": pl.Int32})


def _renumbered_workers(n: int, shift: int) -> np.ndarray:
    """Task t's number in a run whose launcher moved the workers by ``shift`` (the master stays 0)."""
    return np.concatenate([[0], (np.arange(1, n) - 1 + shift) % (n - 1) + 1])


def test_a_star_s_leaves_are_paired_within_the_work_budget():
    """A star of 1,024 tasks, the other run's workers renumbered, with a pin order that weighs every reference task
    it is given (as the behaviour does): the reference tasks weighed over the whole search stay within
    ``WORK_BUDGET`` and the search's own count of work too (before: every numbering paired the 1,023 leaves one at
    a time, ~520k tasks weighed each, 64 numberings: ~34M, outside the count)."""
    n = 1024
    nodes = np.array([task_int(1, t) for t in range(1, n + 1)], np.int64)
    work = np.random.default_rng(0).random(n)
    weighed = [0]

    def closer(o: int, refs: np.ndarray) -> np.ndarray:
        weighed[0] += refs.size
        return refs[np.argsort(np.abs(work[refs] - work[o]), kind="stable")]

    got = symmetries.numberings(nodes, _star(n, np.arange(n)), _star(n, _renumbered_workers(n, 7)), closer)
    assert weighed[0] <= symmetries.WORK_BUDGET + n
    assert got.work <= symmetries.WORK_BUDGET + 8 * n
    assert not got.complete


def _star_bursts(n: int, perm: np.ndarray, seed: int) -> pl.DataFrame:
    """64 work items per task (each item's work its own, 30 % apart: a static schedule hands each worker the same
    items in every run), each a burst closed by MPI_Recv then one closed by MPI_Send, 0.3 % noise; task t numbered
    perm[t] + 1."""
    t = np.repeat(np.arange(n), 128)
    work = np.exp(0.3 * np.random.default_rng(0).standard_normal(t.size))
    ins = 1e6 * work * np.exp(0.003 * np.random.default_rng(seed).standard_normal(t.size))
    return pl.DataFrame({"appl": 1, "task": (perm[t] + 1).astype(np.int32), "thread": 1,
                         "mpi_call": np.tile(["MPI_Recv", "MPI_Send"], t.size // 2), "call_site": "w.c:9",
                         "PAPI_TOT_INS": ins, "duration_ns": ins}).sort("task", maintain_order=True)


def test_a_star_whose_workers_are_renumbered_is_mapped_back_by_behaviour():
    """A star of 2,048 tasks whose other run's launcher moved the workers by 7: the graph maps onto itself under any
    renumbering of the workers, and their work items name each: the renumbering is found (the leaves paired
    at once by the behaviour assignment, not one at a time)."""
    n, shift = 2048, 7
    perm = _renumbered_workers(n, shift)
    corr = ranks.correspondence(_star_bursts(n, np.arange(n), 1), _star(n, np.arange(n)),
                                _star_bursts(n, perm, 2), _star(n, perm), ("ref", "other"))
    assert corr.mapping == {task_int(1, int(perm[t]) + 1): t + 1 for t in range(n)}
