"""review25 item 1 (ranks25): the rank correspondence compares the work profiles a block of tasks at a time; the
last block of an appl that is not the last ran into the next appl's tasks (an IndexError out of the merge, for an
MPMD run or an Extrae run with uncore readers past ~400 tasks in its first appl). The evidence for a numbering must
not depend on the block size."""
from __future__ import annotations

import numpy as np
import pytest

from synthtrace.tracelib.merge import behaviour_cost, ranks
from synthtrace.tracelib.thread_key import task_int


def _behaviour(rng: np.random.Generator, n: int, cells: int) -> ranks.Behaviour:
    a = rng.normal(10, 1, (n, cells)).astype(np.float32)
    b = a + rng.normal(0, 0.01, (n, cells)).astype(np.float32)
    t = np.arange(1, n + 1)
    return ranks.Behaviour(t, t, a, b, behaviour_cost.BehaviourCost(a, b), True)


def test_the_evidence_of_a_numbering_is_the_same_in_blocks_of_any_size(monkeypatch):
    rng = np.random.default_rng(0)
    cells = 64
    appls = {1: _behaviour(rng, 10, cells), 2: _behaviour(rng, 6, cells)}
    nodes = np.array([task_int(appl, t) for appl, bh in appls.items() for t in bh.ref_tasks], np.int64)
    identity = np.arange(nodes.size)
    swapped = identity.copy()
    swapped[[0, 1]] = swapped[[1, 0]]

    def evidence(tasks_a_block: int) -> ranks.Evidence:
        monkeypatch.setattr(behaviour_cost, "_CELLS_AT_ONCE", tasks_a_block * cells)
        return ranks._evidence(ranks._Candidates(nodes, appls), identity, swapped, 0.01)

    whole = evidence(1_000)
    for tasks_a_block in (1, 3, 4, 7):
        got = evidence(tasks_a_block)
        assert got.cells == whole.cells > 0
        assert tuple(got) == pytest.approx(tuple(whole), rel=1e-9)  # float64 running sums, summed in other blocks
