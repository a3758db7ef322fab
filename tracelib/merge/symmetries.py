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
stops at ``MAX_NUMBERINGS`` numberings or ``WORK_BUDGET`` units of work (edge visits, counted inside the
refinement too: a search that reaches it stops where it is and says it was bounded). The refinement revisits only
the tasks next to a colour that split in the round before, and of a colour that split all its parts but the
largest (Hopcroft's rule: the counts into the largest follow from the others'), so a pin costs O(edges x log tasks)
at most, whatever the rounds (a ring of n tasks needs about n/2 rounds after a pin, a torus its diameter): a Numba
kernel. Revisiting every edge each round took 1.4 s at 4k ring tasks, 33 s at 16k, > 400 s at 64k (review22 item
1; benchmarks/bench_symmetries_scale.py). networkx's VF2 enumerates isomorphisms exactly but took 0.1-6 s per
isomorphism at 64-1024 tasks here (benchmarks/RESULTS.md, session 22, ranks22).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import polars as pl

from synthtrace.tracelib.jit import cached_njit
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


_GOLDEN, _MUL1, _MUL2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


@cached_njit
def _mix(z: np.uint64 | np.ndarray) -> np.uint64 | np.ndarray:
    """A 64-bit hash of an unsigned value or of each of an array's (splitmix64's finaliser; arithmetic wraps)."""
    z = z + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _MUL1
    z = (z ^ (z >> np.uint64(27))) * _MUL2
    return z ^ (z >> np.uint64(31))


@cached_njit
def _refined(colours: np.ndarray, queue: np.ndarray, sizes: np.ndarray, next_id: int, ptr: np.ndarray,
             nbr: np.ndarray, kind_hash: np.ndarray, budget: int) -> int:
    """Refines ``colours`` (a colour id per node, in place) to the coarsest equitable partition, starting from the
    nodes in ``queue`` (whole colours; the partition is equitable with respect to every other colour). A round
    gives each node next to a queued node the multiset of (``kind_hash``, colour) over its queued neighbours (node
    ``q``'s entries ``ptr[q]:ptr[q + 1]`` of ``nbr``/``kind_hash``), splits each colour by it, and queues the parts
    that took a new id: every part but the largest when the whole colour was reached, else every part reached.
    ``sizes``: nodes per colour id, room for ``next_id`` + nodes. Returns the work (edge visits + nodes reached +
    rounds); past ``budget`` it stops where it is (the colours then part-refined)."""
    m = colours.size
    acc = np.zeros(m, np.uint64)
    seen = np.zeros(m, np.bool_)
    touched = np.empty(m, np.int64)
    work = 0
    while queue.size > 0:
        nt = 0
        for q in queue:
            cq = np.uint64(colours[q])
            for e in range(ptr[q], ptr[q + 1]):
                w = nbr[e]
                if not seen[w]:
                    seen[w] = True
                    touched[nt] = w
                    nt += 1
                acc[w] += _mix(kind_hash[e] ^ cq)
            work += ptr[q + 1] - ptr[q]
        work += nt + 1
        if work > budget:
            return work
        t = touched[:nt].copy()
        sig = acc[t]
        by_sig = np.argsort(sig, kind="mergesort")
        order = by_sig[np.argsort(colours[t][by_sig], kind="mergesort")]
        t, sig = t[order], sig[order]
        col = colours[t]
        for u in range(nt):
            acc[t[u]] = 0
            seen[t[u]] = False
        queued = np.empty(nt, np.int64)
        nq = 0
        i = 0
        while i < nt:  # colour col[i]: its reached nodes t[i:j], by signature
            j = i
            while j < nt and col[j] == col[i]:
                j += 1
            x = col[i]
            keep = -1  # the part that keeps the id (-1: the nodes not reached keep it)
            if j - i == sizes[x]:
                longest, g = 0, i
                while g < j:
                    k = g
                    while k < j and sig[k] == sig[g]:
                        k += 1
                    if k - g > longest:
                        longest, keep = k - g, g
                    g = k
                if longest == j - i:  # not split
                    i = j
                    continue
            g = i
            while g < j:
                k = g
                while k < j and sig[k] == sig[g]:
                    k += 1
                if g != keep:
                    sizes[next_id] = k - g
                    sizes[x] -= k - g
                    for u in range(g, k):
                        colours[t[u]] = next_id
                        queued[nq] = t[u]
                        nq += 1
                    next_id += 1
                g = k
            i = j
        queue = queued[:nq].copy()
    return work


class Numberings(NamedTuple):
    """The numberings found, whether the search tried every choice (else some were left untried: bounded) and its
    work (edge visits, nodes reached and rounds of the refinement, edges checked)."""

    found: list[np.ndarray]
    complete: bool
    work: int = 0


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
        self.work = 0  # work of the refinement so far (edge visits, nodes reached, rounds)
        # node q's neighbours each taking (edge kind and direction, q's colour): its out-edges' targets, its in-edges'
        # sources
        by = np.concatenate([self.src, self.dst])
        order = np.argsort(by, kind="stable")
        self.nbr = np.concatenate([self.dst, self.src])[order]
        kind = self.kind.astype(np.uint64)
        self.kind_hash = np.concatenate([_mix(kind * np.uint64(2) + np.uint64(1)), _mix(kind * np.uint64(2))])[order]
        self.ptr = np.searchsorted(by[order], np.arange(2 * self.n + 1)).astype(np.int64)
        appl = _mix((nodes >> np.int64(ID_BITS)).astype(np.uint64))
        self.start = self.refine(np.concatenate([appl, appl]))

    def refine(self, colours: np.ndarray, queue: np.ndarray | None = None) -> np.ndarray | None:
        """The coarsest equitable refinement of ``colours`` (one per node of both graphs; equitable with respect to
        every colour but those of the nodes ``queue``, default all), colours numbered 0..k-1; None when it would
        take the work past ``WORK_BUDGET``."""
        colours = np.unique(colours, return_inverse=True)[1].reshape(-1).astype(np.int64)
        k = int(colours.max(initial=-1)) + 1
        sizes = np.zeros(k + colours.size, np.int64)
        sizes[:k] = np.bincount(colours, minlength=k)
        queue = np.arange(colours.size, dtype=np.int64) if queue is None else queue.astype(np.int64)
        self.work += int(_refined(colours, queue, sizes, k, self.ptr, self.nbr, self.kind_hash,
                                  WORK_BUDGET - self.work))
        if self.work > WORK_BUDGET:
            return None
        return np.unique(colours, return_inverse=True)[1].reshape(-1)

    def carries(self, perm: np.ndarray) -> bool:
        """Whether ``perm`` (perm[other task index] = reference task index) carries the other graph onto the
        reference's, edge kinds included."""
        n = np.int64(self.n)
        self.work += self.src.size
        ref, oth = self.src < n, self.src >= n
        code = lambda s, d, k: np.sort((s * n + d) * (int(self.kind.max(initial=0)) + 1) + k)  # noqa: E731
        mapped = code(perm[self.src[oth] - n], perm[self.dst[oth] - n], self.kind[oth])
        return bool(np.array_equal(code(self.src[ref], self.dst[ref], self.kind[ref]), mapped))

    def pinned(self, colours: np.ndarray, r: int, o: int) -> np.ndarray | None:
        """``colours`` (equitable) with reference node ``r`` and other node ``n + o`` given a colour of their own,
        refined (None: past the budget)."""
        c = colours.copy()
        pin = np.array([r, self.n + o])
        c[pin] = c.max() + 1
        return self.refine(c, pin)

    def paired(self, colours: np.ndarray, closer: Callable[[int, np.ndarray], np.ndarray],
               pair: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, int]] | None = None) -> np.ndarray | None:
        """A numbering pairing the tasks of each colour (as many of each run: checked before): ``pair(others,
        refs)`` (the reference tasks paired with the other tasks, one assignment per colour, and how many reference
        tasks it weighed) when given, else as
        ``closer`` orders the reference tasks left, one other task after another. The reference tasks weighed count
        as work (a star's leaves one at a time: ~n^2 / 2, attack23 F3); None when it would take the work past
        ``WORK_BUDGET``."""
        n = self.n
        perm = np.full(n, -1, np.int64)
        by_ref, by_oth = np.argsort(colours[:n], kind="stable"), np.argsort(colours[n:], kind="stable")
        bounds = np.flatnonzero(np.diff(colours[:n][by_ref])) + 1
        for rs, os in zip(np.split(by_ref, bounds), np.split(by_oth, bounds)):
            if rs.size == 1:
                perm[os] = rs
                self.work += 1
                continue
            if pair is not None:
                perm[os], weighed = pair(os, rs)
                self.work += weighed
                if self.work > WORK_BUDGET:
                    return None
                continue
            for o in os:
                self.work += rs.size
                if self.work > WORK_BUDGET:
                    return None
                perm[o] = pick = int(closer(int(o), rs)[0])
                rs = rs[rs != pick]
        return perm


def numberings(nodes: np.ndarray, ref_counts: pl.DataFrame, oth_counts: pl.DataFrame,
               closer: Callable[[int, np.ndarray], np.ndarray],
               first: Callable[[np.ndarray], int] | None = None,
               pair: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, int]] | None = None) -> Numberings:
    """The :class:`Numberings` (perm[other task index] = reference task index, both over ``nodes``: sorted task keys)
    that carry the other run's message graph onto the reference's, distinct: the one as it is when it does, and those a
    bounded search finds: pins tried in ``closer`` order (``MAX_ANCHORS`` images of the anchor, ``BRANCH`` choices
    at the ``BRANCH_DEPTH`` pins after it, the first choice deeper), at most ``MAX_NUMBERINGS`` numberings and
    ``WORK_BUDGET`` units of work (:attr:`Numberings.work`); [] when the graphs differ. ``first(others)``: which of
    the other tasks ``others`` (the first colour to pin) to pin first (default: the first; the rank correspondence
    gives the one whose behaviour singles out its partner best). ``pair(others, refs)``: the colours left after
    ``MAX_PINS`` pins paired at once (:meth:`Graphs.paired`; default: as ``closer`` orders them, one at a time); a
    search whose work is past the budget pairs no more."""
    g = Graphs(nodes, ref_counts, oth_counts)
    n = g.n
    if not n or not g.complete or g.src.size == 0:
        return Numberings([], True)
    found: dict[bytes, np.ndarray] = {}
    ident = np.arange(n)
    if g.carries(ident):
        found[ident.tobytes()] = ident
    if g.start is None:  # the refinement alone went past the budget
        return Numberings(list(found.values()), False, g.work)
    left = [MAX_NUMBERINGS]
    cut = [False]  # a choice left untried

    def search(colours: np.ndarray, depth: int) -> None:
        g.work += colours.size
        counts_r = np.bincount(colours[:n], minlength=colours.max() + 1)
        if not np.array_equal(counts_r, np.bincount(colours[n:], minlength=colours.max() + 1)):
            return
        if counts_r.max(initial=0) <= 1 or depth > MAX_PINS:
            if counts_r.max(initial=0) <= 1:
                perm = np.empty(n, np.int64)
                perm[np.argsort(colours[n:])] = np.argsort(colours[:n])
            else:  # colours still shared by several tasks after MAX_PINS pins (a star's leaves): pairing is work
                perm = g.paired(colours, closer, pair) if g.work <= WORK_BUDGET else None
                if perm is None:  # the budget is spent (attack23 F3)
                    cut[0] = True
                    return
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
            pinned = g.pinned(colours, int(r), o) if left[0] > 0 and g.work <= WORK_BUDGET else None
            if pinned is None:
                cut[0] = True
                return
            search(pinned, depth + 1)

    search(g.start, 0)
    return Numberings(list(found.values()), not cut[0], g.work)
