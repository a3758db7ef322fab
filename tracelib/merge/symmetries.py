"""The numberings of one run's tasks that carry its message graph onto another run's (graph isomorphisms).

A run's **message graph**: a node per task, an edge per (sender, receiver) pair and message kind (appl,
communicator, tag, bytes per message) the run's logical messages use, counts left aside (a run a few iterations
longer has the same graph). Two runs of one program have the same graph up to a renumbering of the tasks, and a
numbering that carries one onto the other is fixed up to the graph's **symmetries**: a ring or a torus maps onto
itself rotated, so the messages alone cannot tell a rotated numbering from the one as it is (the rank
correspondence, :mod:`synthtrace.tracelib.merge.ranks`, asks the tasks' behaviour then).

The numberings are found by colour refinement (1-dimensional Weisfeiler-Leman) of the two graphs side by side, a
task's colour refined by the multiset of (edge kind, neighbour's colour) of its out- and in-edges, and pinning:
while some colour holds several tasks, one task of the other run of the smallest such colour is paired with one of
the reference's (given a colour of their own) and the colours refined again; a numbering is read off when every
colour holds one task of each run, and checked edge by edge. The pins are tried in the order ``closer`` gives (the
tasks' behaviour): ``MAX_ANCHORS`` choices for the first, ``BRANCH`` for the next ``BRANCH_DEPTH``, the first
choice deeper, after ``MAX_PINS`` the colours left paired as ``closer`` pairs them (a star's leaves); the search
stops at ``MAX_NUMBERINGS`` numberings or ``WORK_BUDGET`` edge visits. Cost: O(edges x refinement rounds) per pin,
in NumPy (a ring of n tasks needs about n/2 rounds, a torus its diameter). networkx's VF2 enumerates isomorphisms
exactly but took 0.1-6 s per isomorphism at 64-1024 tasks here (benchmarks/RESULTS.md, session 22, ranks22).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import polars as pl

from synthtrace.tracelib.merge.messages import CHANNEL
from synthtrace.tracelib.thread_key import ID_BITS, task_key

#: reference tasks tried as the image of the anchor task (the closest in behaviour first)
MAX_ANCHORS = 24
#: pins after the anchor before the colours left are paired at once
MAX_PINS = 16
#: choices tried at each of the first BRANCH_DEPTH pins after the anchor (one deeper)
BRANCH, BRANCH_DEPTH = 4, 3
#: numberings the search completes at most
MAX_NUMBERINGS = 64
#: edge visits of the colour refinement the search may spend (a ring of 1024 tasks: ~2e6 per first pin, a 32x32
#: torus ~0.5e6)
WORK_BUDGET = 8_000_000


def _mix(x: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each value (splitmix64's finaliser; unsigned arithmetic wraps)."""
    z = x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


class Numberings(NamedTuple):
    """The numberings found and whether the search tried every choice (else some were left untried: bounded)."""

    found: list[np.ndarray]
    complete: bool


class Graphs:
    """The two runs' message graphs side by side: nodes 0..n-1 the reference's tasks, n..2n-1 the other run's (both
    ``nodes``: sorted task keys, appl << ID_BITS | task), edges (source, target, kind) over the 2n nodes."""

    def __init__(self, nodes: np.ndarray, ref_counts: pl.DataFrame, oth_counts: pl.DataFrame):
        self.nodes, self.n = nodes, nodes.size
        kinds = [c for c in CHANNEL if c not in ("sender", "receiver")] + ["bytes"]
        both = pl.concat([ref_counts.with_columns(pl.lit(0).alias("_run")),
                          oth_counts.with_columns(pl.lit(1).alias("_run"))], how="vertical_relaxed")
        both = both.select(task_key("appl", "sender").alias("s"), task_key("appl", "receiver").alias("r"), "_run",
                           pl.struct(kinds).rank("dense").cast(pl.Int64).alias("kind")).unique()
        s, r = both.get_column("s").to_numpy(), both.get_column("r").to_numpy()
        si, ri = np.searchsorted(nodes, s).clip(0, nodes.size - 1), np.searchsorted(nodes, r).clip(0, nodes.size - 1)
        known = (nodes[si] == s) & (nodes[ri] == r)
        off = both.get_column("_run").to_numpy() * self.n
        self.src, self.dst = (si + off)[known], (ri + off)[known]
        self.kind = both.get_column("kind").to_numpy()[known]
        self.complete = bool(known.all())
        self.work = 0  # edge visits of the refinement so far
        appl = _mix(nodes >> np.int64(ID_BITS))
        self.start = self.refine(np.concatenate([appl, appl]))

    def refine(self, colours: np.ndarray) -> np.ndarray:
        """Colour refinement from ``colours`` (one per node of both graphs) until the number of colours holds."""
        colours = np.unique(colours, return_inverse=True)[1]
        out_h, in_h = _mix(self.kind * 2), _mix(self.kind * 2 + 1)
        while True:
            self.work += self.src.size
            c = colours.astype(np.uint64)
            acc = _mix(c)
            np.add.at(acc, self.src, _mix(out_h ^ c[self.dst]))
            np.add.at(acc, self.dst, _mix(in_h ^ c[self.src]))
            key = _mix(acc ^ _mix(c + np.uint64(1)))  # 64-bit: collisions negligible
            new = np.unique(key, return_inverse=True)[1].reshape(-1)
            if new.max(initial=0) == colours.max(initial=0):
                return new
            colours = new

    def carries(self, perm: np.ndarray) -> bool:
        """Whether ``perm`` (perm[other task index] = reference task index) carries the other graph onto the
        reference's, edge kinds included."""
        n = np.int64(self.n)
        ref, oth = self.src < n, self.src >= n
        code = lambda s, d, k: np.sort((s * n + d) * (int(self.kind.max(initial=0)) + 1) + k)  # noqa: E731
        mapped = code(perm[self.src[oth] - n], perm[self.dst[oth] - n], self.kind[oth])
        return bool(np.array_equal(code(self.src[ref], self.dst[ref], self.kind[ref]), mapped))

    def pinned(self, colours: np.ndarray, r: int, o: int) -> np.ndarray:
        """``colours`` with reference node ``r`` and other node ``n + o`` given a colour of their own, refined."""
        c = colours.copy()
        c[[r, self.n + o]] = c.max() + 1
        return self.refine(c)

    def paired(self, colours: np.ndarray, closer: Callable[[int, np.ndarray], np.ndarray]) -> np.ndarray:
        """A numbering pairing the tasks of each colour as ``closer`` orders them, one other task after another."""
        n = self.n
        perm = np.full(n, -1, np.int64)
        for cls in np.unique(colours[n:]):
            rs = np.flatnonzero(colours[:n] == cls)
            for o in np.flatnonzero(colours[n:] == cls):
                perm[o] = pick = int(closer(int(o), rs)[0])
                rs = rs[rs != pick]
        return perm


def numberings(nodes: np.ndarray, ref_counts: pl.DataFrame, oth_counts: pl.DataFrame,
               closer: Callable[[int, np.ndarray], np.ndarray],
               first: Callable[[np.ndarray], int] | None = None) -> Numberings:
    """The :class:`Numberings` (perm[other task index] = reference task index, both over ``nodes``: sorted task keys)
    that carry the other run's message graph onto the reference's, distinct: the one as it is when it does, and those a
    bounded search finds: pins tried in ``closer`` order (``MAX_ANCHORS`` images of the anchor, ``BRANCH`` choices
    at the ``BRANCH_DEPTH`` pins after it, the first choice deeper), at most ``MAX_NUMBERINGS`` numberings and
    ``WORK_BUDGET`` edge visits of the refinement; [] when the graphs differ. ``first(others)``: which of the other
    tasks ``others`` (the first colour to pin) to pin first (default: the first; the rank correspondence gives the one
    whose behaviour singles out its partner best)."""
    g = Graphs(nodes, ref_counts, oth_counts)
    n = g.n
    if not n or not g.complete or g.src.size == 0:
        return Numberings([], True)
    found: dict[bytes, np.ndarray] = {}
    ident = np.arange(n)
    if g.carries(ident):
        found[ident.tobytes()] = ident
    left = [MAX_NUMBERINGS]
    cut = [False]  # a choice left untried

    def search(colours: np.ndarray, depth: int) -> None:
        counts_r = np.bincount(colours[:n], minlength=colours.max() + 1)
        if not np.array_equal(counts_r, np.bincount(colours[n:], minlength=colours.max() + 1)):
            return
        if counts_r.max(initial=0) <= 1 or depth > MAX_PINS:
            perm = np.empty(n, np.int64)
            if counts_r.max(initial=0) <= 1:
                perm[np.argsort(colours[n:])] = np.argsort(colours[:n])
            else:  # colours still shared by several tasks after MAX_PINS pins (a star's leaves)
                perm = g.paired(colours, closer)
            left[0] -= 1
            if g.carries(perm):
                found.setdefault(perm.tobytes(), perm)
            return
        cls = int(np.flatnonzero(counts_r > 1)[np.argmin(counts_r[counts_r > 1])])
        others = np.flatnonzero(colours[n:] == cls)
        o = int(first(others)) if depth == 0 and first is not None else int(others[0])
        width = MAX_ANCHORS if depth == 0 else BRANCH if depth <= BRANCH_DEPTH else 1
        choices = closer(o, np.flatnonzero(colours[:n] == cls))
        cut[0] |= choices.size > width
        for r in choices[:width]:
            if left[0] <= 0 or g.work > WORK_BUDGET:
                cut[0] = True
                return
            search(g.pinned(colours, int(r), o), depth + 1)

    search(g.start, 0)
    return Numberings(list(found.values()), not cut[0])
