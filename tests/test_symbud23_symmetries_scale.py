"""symbud23 (review22 item 1): the search of numberings carrying one run's message graph onto another's keeps to its
budget inside the colour refinement. A 1-D ring needs about n/2 rounds of refinement after its first pin; a
refinement that revisited every edge each round and checked the budget only between pins spent ~n^2 edge visits on
the first pin (33 s at 16k ranks, > 400 s at 64k, on every merge with messages). The work is counted (edge visits,
nodes reached, rounds), never timed."""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from synthtrace.tracelib.merge import symmetries
from synthtrace.tracelib.thread_key import task_int


def _ring(n: int, shift: int) -> pl.DataFrame:
    """Message counts of a ring of ``n`` tasks (a tag per direction), task r numbered (r + shift) % n."""
    r = np.arange(n)
    s = np.concatenate([r, r])
    d = np.concatenate([(r + 1) % n, (r - 1) % n])
    tag = np.repeat([1, 2], n)
    return pl.DataFrame({"appl": 1, "comm": 1, "sender": (s + shift) % n, "receiver": (d + shift) % n, "tag": tag,
                         "bytes": 8192, "n": 20}).cast({"sender": pl.Int32, "receiver": pl.Int32})


def _spied(monkeypatch) -> list:
    """The :class:`symmetries.Graphs` the next searches build (to read their work)."""
    built: list = []

    class Spy(symmetries.Graphs):
        def __init__(self, *args):
            super().__init__(*args)
            built.append(self)

    monkeypatch.setattr(symmetries, "Graphs", Spy)
    return built


def _search(n: int, shift: int):
    nodes = np.array([task_int(1, t) for t in range(n)], np.int64)
    rotation = (np.arange(n) + shift) % n  # perm[other task] = reference task: other task o is reference o + shift

    def closer(o: int, refs: np.ndarray) -> np.ndarray:  # behaviour naming each task's partner first
        return refs[np.argsort(refs != rotation[o], kind="stable")]

    return symmetries.numberings(nodes, _ring(n, 0), _ring(n, shift), closer), rotation


def _round_work(g) -> int:
    """The most work the search adds past its budget: a round of the refinement (each edge from both ends, each
    node reached, the round), a numbering checked edge by edge and a step of the search (each node)."""
    return 2 * g.src.size + 2 * g.n + 1 + g.src.size + 2 * g.n


def test_a_big_ring_is_searched_within_the_budget_and_its_rotation_found(monkeypatch):
    """A ring of 4,096 tasks whose other run is rotated by 5 (one of the ring's symmetries): the numbering as it is
    and the rotation (the pin behaviour names first) are both found, and the refinement's work stays within
    ``WORK_BUDGET`` (the refinement before: ~2,048 rounds x 16,384 edges on the first pin alone, twice the budget)."""
    built = _spied(monkeypatch)
    got, rotation = _search(4096, 5)
    assert any(np.array_equal(p, rotation) for p in got.found)
    assert any(np.array_equal(p, np.arange(4096)) for p in got.found)
    g = built[0]
    assert g.work <= symmetries.WORK_BUDGET + _round_work(g), g.work


@pytest.mark.parametrize("budget", [2_000, 60_000])
def test_a_search_past_its_budget_stops_inside_the_refinement_and_says_so(monkeypatch, budget):
    """With the budget smaller than one pin's refinement (2,000) or than a few pins' (60,000), the search stops
    where it is, inside the refinement, with ``complete`` False: what it found is kept (the numbering as it is),
    nothing wrong is found, and its work passes the budget by one round at most (before: the first pin ran all
    its rounds whatever the budget)."""
    monkeypatch.setattr(symmetries, "WORK_BUDGET", budget)
    built = _spied(monkeypatch)
    got, rotation = _search(2048, 7)
    assert not got.complete
    assert any(np.array_equal(p, np.arange(2048)) for p in got.found)
    assert all(np.array_equal(p, np.arange(2048)) or np.array_equal(p, (np.arange(2048) + k) % 2048)
               for p in got.found for k in [int(p[0])])  # each a rotation of the ring
    g = built[0]
    assert g.work <= budget + _round_work(g), g.work
