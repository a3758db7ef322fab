"""review24 F2: the references a colour's pairing weighs count as the symmetry search's work.

rankscale24 (f972205) paired the colours left after the search's pins with one behaviour assignment
(``ranks._Candidates.pair``), counting each colour's reference tasks once; where the assignment's partners are not in
the colour, ``pair`` orders the free references by behaviour for up to ``PAIR_CLOSER`` tasks, each ordering weighing
every free reference: work outside ``WORK_BUDGET``."""
from __future__ import annotations

import numpy as np

from synthtrace.tracelib.merge import ranks, symmetries
from synthtrace.tracelib.thread_key import task_int
from tests.test_rankscale24_scale import _renumbered_workers, _star, _star_bursts


def test_the_references_a_pairing_weighs_count_as_search_work():
    """A star of 256 tasks, the other run's workers renumbered by 7, whose behaviour assignment names the master
    as every worker's partner (so no partner lies in the leaves' colour and every pairing orders references): the
    search's counted work is at least the references its orderings weighed."""
    n = 256
    perm = _renumbered_workers(n, 7)
    ref_bursts, oth_bursts = _star_bursts(n, np.arange(n), 1), _star_bursts(n, perm, 2)
    nodes = np.array([task_int(1, t) for t in range(1, n + 1)], np.int64)
    c = ranks._Candidates(nodes, ranks._behaviours(ref_bursts, oth_bursts))
    c.assigned = np.zeros_like(c.assigned)
    weighed = [0]
    closer = c.closer

    def counted(o: int, refs: np.ndarray) -> np.ndarray:
        weighed[0] += refs.size
        return closer(o, refs)

    c.closer = counted
    got = symmetries.numberings(nodes, _star(n, np.arange(n)), _star(n, perm), counted, c.surest, c.pair)
    assert got.found
    assert got.work >= weighed[0]
