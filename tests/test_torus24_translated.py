"""torus24 (mergeattack23 P9): a run whose roles are translated along a periodic torus, ranks alike on average.

A translation is an automorphism of the torus's message graph, so the messages cannot tell the translated numbering
from the one as it is; the ranks' work can, burst by burst over the iterations (each rank's subdomain varies per
iteration, the same in every run), on the long bursts: the glue between MPI calls follows the rank's place, not its
role, and drowned that signal (the merge kept the numbering as it is and said ``ok`` at 0 % right)."""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from synthtrace.tracelib.merge.ranks import correspondence
from synthtrace.tracelib.thread_key import MASK
from testing.simulator_campaigns import run_mechanism


@pytest.mark.parametrize(("seed", "ranks"), [(0, 16), (1, 64)])
def test_a_translated_torus_of_ranks_alike_on_average_is_renumbered_by_their_work_per_iteration(tmp_path, seed,
                                                                                               ranks):
    """Run 1's roles sit one rank further along x on a periodic torus (4x4, 8x8), ranks alike on average: the
    translation is found from the long bursts' work and the merge is right (before: ``ok``, 0 % right)."""
    o = run_mechanism("translated_torus", seed, tmp_path, ranks=ranks)
    assert o.verdict == "ok", (o.verdict, o.message)
    assert o.right >= 0.995, f"{o.right:.2%} right"
    assert o.moved > 0.99  # every burst paired with its role's in the translated run


def _ring_run(work: np.ndarray) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(bursts, message counts) of a symmetric ring of ``work.shape[0]`` tasks (tasks from 1), burst k of task t
    long, ``work[t, k]`` instructions, closed by an MPI_Sendrecv (even k: the halo) or an MPI_Allreduce (odd k)."""
    n, iters = work.shape
    task = np.repeat(np.arange(1, n + 1), iters)
    calls = np.tile(["MPI_Sendrecv", "MPI_Allreduce"], n * iters // 2)
    bursts = pl.DataFrame({"appl": 1, "task": task, "thread": 1, "burst_seq": np.tile(np.arange(iters), n),
                           "duration_ns": 100_000, "mpi_call": calls, "call_site": "solver.c:10",
                           "PAPI_TOT_INS": work.ravel().astype(np.int64)},
                          schema_overrides={"appl": pl.Int32, "task": pl.Int32, "thread": pl.Int32})
    s = np.arange(1, n + 1)
    counts = pl.DataFrame({"appl": 1, "comm": 0, "sender": np.concatenate([s, s]),
                           "receiver": np.concatenate([s % n + 1, (s - 2) % n + 1]), "tag": 5, "bytes": 8192,
                           "n": iters // 2})
    return bursts, counts


def test_a_ring_numbered_alike_keeps_its_numbering_without_a_tie():
    """A symmetric ring of ranks alike on average, each burst's work varying per iteration, numbered alike in both
    runs (counting noise 0.1 %): weighed on the long bursts, the numbering as it is fits clearly best of the ring's
    rotations and reflections and is kept without a tie."""
    rng = np.random.default_rng(7)
    work = 1e6 * np.exp(0.03 * rng.standard_normal((8, 64)))
    ref = _ring_run(work)
    oth = _ring_run(work * np.exp(0.001 * rng.standard_normal(work.shape)))
    c = correspondence(ref[0], ref[1], oth[0], oth[1], ("run0", "run1"))
    assert c.mapping is None and c.tie is None, c


def test_a_big_rotated_ring_of_ranks_barely_apart_is_found_from_the_task_that_stands_out():
    """A ring of 4,096 ranks 1 % apart in work (0.3 % noise per burst), the other run numbered r + 5: ranks this
    close are told apart only from the few whose work stands out, so the search's first pin must be weighed over
    every task, not a sample (the work cells' first pin over a sample of 5 kept the numbering as it is, a tie)."""
    n, shift = 4096, 5
    rng = np.random.default_rng(3)
    work = 1e6 * np.exp(0.01 * rng.standard_normal(n))[:, None] * np.ones((1, 64))
    ref = _ring_run(work * np.exp(0.003 * rng.standard_normal(work.shape)))
    oth = _ring_run(np.roll(work, shift, axis=0) * np.exp(0.003 * rng.standard_normal(work.shape)))
    c = correspondence(ref[0], ref[1], oth[0], oth[1], ("run0", "run1"))
    assert c.tie is None, c.tie
    assert c.mapping is not None
    assert all(ref_task == ((task & MASK) - 1 - shift) % n + 1 for task, ref_task in c.mapping.items())
