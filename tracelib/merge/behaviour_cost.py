"""The behaviour cost of pairing a reference task with another run's task, and the assignment of tasks it gives
(the rank correspondence's behaviour, :mod:`synthtrace.tracelib.merge.ranks`).

A task's work profile is a row of cells (``log1p`` work of its first bursts per closing call, NaN where absent);
the cost of a pair of tasks is the mean |difference| over their common cells (``NO_COMMON`` without one).

Up to ``DENSE_TASKS`` tasks the whole tasks x tasks matrix is built and the assignment is SciPy's
``linear_sum_assignment`` (Hungarian method, exact). Above, the matrix is never built (16k tasks: 2.1 GB and
O(n^3), attack23 F4): costs are computed for the pairs asked only, and the assignment is the minimum weight full
matching (SciPy's ``min_weight_full_bipartite_matching``) over a sparse graph: each other task's
``NEIGHBOURS`` nearest reference tasks in the profiles' leading principal components (a KD-tree) and its
same-position task (so that a full matching always exists), weighed by their exact costs. The assignment is then
the best among those candidates (the exact one whenever its pairs all are candidates). Memory O(tasks x cells).
"""
from __future__ import annotations

import warnings
from functools import cached_property

import numpy as np
from scipy.optimize import linear_sum_assignment
from scipy.sparse import csr_array
from scipy.sparse.csgraph import min_weight_full_bipartite_matching
from scipy.spatial import cKDTree

#: tasks up to which the whole cost matrix is built (1024^2 x 8 B = 8 MiB) and the assignment is exact
DENSE_TASKS = 1024
#: candidate reference tasks per other task in the sparse assignment above ``DENSE_TASKS``
NEIGHBOURS = 32
#: principal components of the profiles the candidates are searched in, at most (those standing out, a variance
#: over ``SIGNAL`` times the median component's, when some do)
COMPONENTS, SIGNAL = 8, 2.0
#: other tasks whose nearest reference tasks are searched exactly above ``DENSE_TASKS`` (the search's first pin)
EXACT_NEAREST = 32
#: cost of a pair of tasks without a common profile cell
NO_COMMON = 1e6
#: profile cells compared at a time (pairs x cells): bounds the temporary arrays to ~2 MiB
_CELLS_AT_ONCE = 1 << 18


def mean_gap(a: np.ndarray, b: np.ndarray, missing: float = NO_COMMON) -> np.ndarray:
    """The mean |difference| of rows ``a[i]`` and ``b[i]`` (broadcast) over their common (non-NaN) cells,
    ``missing`` without one: one cost per row."""
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a pair of tasks without a common cell: NaN, then missing
        return np.nan_to_num(np.nanmean(np.abs(a - b), axis=-1), nan=missing)


def chunks(rows: int, cells: int) -> range:
    """The starts of blocks of rows of ``cells`` cells each compared at a time (``_CELLS_AT_ONCE`` cells a block)."""
    return range(0, rows, max(1, _CELLS_AT_ONCE // max(1, cells)))


def paired_gaps(ref: np.ndarray, oth: np.ndarray, rows: np.ndarray, cols: np.ndarray,
                missing: float = NO_COMMON) -> np.ndarray:
    """:func:`mean_gap` of rows ``ref[rows[i]]`` and ``oth[cols[i]]``, a block of pairs at a time: the temporaries
    stay ~2 MiB whatever the tasks and cells."""
    out = np.empty(rows.size)
    step = chunks(rows.size, ref.shape[1]).step
    for i in range(0, rows.size, step):
        out[i:i + step] = mean_gap(ref[rows[i:i + step]], oth[cols[i:i + step]], missing)
    return out


class BehaviourCost:
    """The costs of pairing reference tasks (rows of ``ref``: task x profile cell) with the other run's (rows of
    ``oth``), as many in both runs; indices are row positions."""

    def __init__(self, ref: np.ndarray, oth: np.ndarray):
        self.ref, self.oth = ref, oth
        self.n = ref.shape[0]
        #: whether the assignment is the exact one (the whole matrix built); else the best over nearest candidates
        self.exact = self.n <= DENSE_TASKS

    @cached_property
    def _matrix(self) -> np.ndarray:
        """The whole matrix (reference task x other task), built only up to ``DENSE_TASKS`` tasks."""
        cost = np.empty((self.n, self.n))
        for r in range(self.n):  # one reference task at a time: memory O(tasks x cells), not O(tasks^2 x cells)
            cost[r] = mean_gap(self.ref[r][None, :], self.oth)
        return cost

    def pairs(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """The costs of pairs (reference ``rows[i]``, other ``cols[i]``)."""
        rows, cols = np.asarray(rows, np.int64), np.asarray(cols, np.int64)
        if self.exact:
            return self._matrix[rows, cols]
        return paired_gaps(self.ref, self.oth, rows, cols)

    def column(self, o: int, rows: np.ndarray) -> np.ndarray:
        """The costs of other task ``o`` with reference tasks ``rows``."""
        return self.pairs(rows, np.full(np.size(rows), o, np.int64))

    @cached_property
    def _candidates(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(reference task, other task, cost) of the sparse assignment's edges: per other task its ``NEIGHBOURS``
        nearest reference tasks in the profiles' leading principal components, and its same-position task."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a cell absent from every task: its mean NaN, then 0
            fill = np.nan_to_num((np.nansum(self.ref, axis=0) + np.nansum(self.oth, axis=0))
                                 / (np.isfinite(self.ref).sum(axis=0) + np.isfinite(self.oth).sum(axis=0)))

        def centred(x: np.ndarray) -> np.ndarray:
            y = x - fill.astype(x.dtype)  # the profiles' own precision: a float32 cube is not copied as float64
            y[np.isnan(y)] = 0.0
            return y

        ref, oth = centred(self.ref), centred(self.oth)
        # the leading directions from a sample of tasks: enough to place every task, O(sample x cells^2)
        sample = ref[np.linspace(0, self.n - 1, min(self.n, 4096)).astype(np.int64)]
        _, size, axes = np.linalg.svd(sample, full_matrices=False)
        # the components of the noise alone would drown the few that stand out (a rank's share of the work); none
        # standing out, the cells vary alike (each task's own work per burst, or noise alone): the leading ones
        standing = int((size ** 2 > SIGNAL * np.median(size ** 2)).sum())
        axes = axes[:min(COMPONENTS, standing or COMPONENTS)]
        ref, oth = ref @ axes.T, oth @ axes.T
        k = min(NEIGHBOURS, self.n)
        near = cKDTree(ref).query(oth, k=k)[1].reshape(self.n, k)
        rows = np.concatenate([near.ravel(), np.arange(self.n)])
        cols = np.concatenate([np.repeat(np.arange(self.n), k), np.arange(self.n)])
        code = np.unique(cols * self.n + rows)
        rows, cols = code % self.n, code // self.n
        return rows, cols, self.pairs(rows, cols)

    @cached_property
    def partner(self) -> np.ndarray:
        """The assignment minimising the summed cost: partner[other task] = reference task."""
        if self.exact:
            rows, cols = linear_sum_assignment(self._matrix)
        else:
            r, c, w = self._candidates
            # + 1: the matching takes an explicit zero weight for no edge; a constant per edge moves no optimum
            graph = csr_array((w + 1.0, (c, r)), shape=(self.n, self.n))
            cols, rows = min_weight_full_bipartite_matching(graph)
        partner = np.empty(self.n, np.int64)
        partner[cols] = rows
        return partner

    def nearest_two(self, others: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the smallest cost, the next) of each other task of ``others`` over the reference tasks; the next is inf for
        a single task. Above ``DENSE_TASKS`` exact for the ``EXACT_NEAREST`` others whose candidates' gap is widest,
        the rest given no gap (both their candidates' smallest)."""
        others = np.asarray(others, np.int64)
        if self.exact:
            cols = np.sort(self._matrix[:, others], axis=0)
            return cols[0], cols[1] if self.n > 1 else np.full(others.size, np.inf)
        _, c, w = self._candidates
        order = np.lexsort((w, c))
        c, w = c[order], w[order]
        start = np.searchsorted(c, others)
        count = np.searchsorted(c, others, side="right") - start
        nearest = w[start]
        second = np.where(count > 1, w[np.minimum(start + 1, w.size - 1)], np.inf)
        gap = (second - nearest) / np.maximum(nearest, 1e-12)
        widest = np.argsort(-gap, kind="stable")[:EXACT_NEAREST]
        second = nearest.copy()
        rows = np.arange(self.n)
        for i in widest:
            col = np.partition(self.column(int(others[i]), rows), 1)
            nearest[i], second[i] = col[0], col[1]
        return nearest, second
