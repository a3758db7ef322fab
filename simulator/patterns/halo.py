"""Halo-exchange stencil on a 2-D torus (a ring when the ranks do not factor): each iteration posts receives from
its neighbours, computes the boundary, sends it, polls ``MPI_Testall`` until the neighbours' faces arrived (the
poll count depends on how late the neighbours are, so it differs between runs), computes the interior and
reduces the residual. Every sixth iteration one rank refines its mesh (heavier interior): a load-imbalanced phase.
With ``coll_every`` k the residual is reduced every k-th iteration only (0: never); the other iterations end in an
``MPI_Waitall`` on the sent faces, so the trace holds no world collective there. The builder still ends them on one
exit time for all ranks (its segments), so ranks stay as synchronised as with the reduction: what changes is the
MPI structure the merge sees, not the timing.
"""
from __future__ import annotations

import numpy as np

from synthtrace.simulator.builder import CALL, BlockBuilder
from synthtrace.simulator.kernels import kid
from synthtrace.simulator.patterns.base import SITE_CONTROL, WORLD_COMM, AppParams, Pattern, jitter

FACE_BYTES = 128 * 1024
REFINE_EVERY, REFINE_FACTOR = 6, 1.8
TAG0 = 100


def grid(p: int) -> tuple[int, int]:
    """(px, py) with px * py = p and px >= py as close to square as possible."""
    py = int(np.floor(np.sqrt(p)))
    while p % py:
        py -= 1
    return p // py, py


def neighbours(p: int) -> tuple[np.ndarray, np.ndarray]:
    """Neighbour task indices ``(p, nn)`` (W, E[, S, N]) and the opposite direction of each direction."""
    px, py = grid(p)
    r = np.arange(p)
    x, y = r % px, r // px
    dirs = [((x - 1) % px) + y * px, ((x + 1) % px) + y * px]
    opp = [1, 0]
    if py > 1:
        dirs += [x + ((y - 1) % py) * px, x + ((y + 1) % py) * px]
        opp += [3, 2]
    if p == 1:
        return np.zeros((1, 0), dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.stack(dirs, axis=1), np.asarray(opp)


class Halo(Pattern):
    name = "halo"
    description = "halo-exchange stencil: Irecv/Isend with neighbours, MPI_Testall polling, Allreduce"
    main_kernel = "stencil_interior"
    kernels = ("stencil_interior", "pack_halo", "stencil_boundary", "dot")
    sites = (("exchange_halo", "halo.c", 88), ("exchange_halo", "halo.c", 97), ("wait_halo", "halo.c", 131),
             ("residual", "solver.c", 57))

    message_bytes = FACE_BYTES

    def __init__(self, params: AppParams, rng: np.random.Generator):
        super().__init__(params, rng)
        self.nb, self.opp = neighbours(self.P)

    def pairs_per_iteration(self) -> int:
        return self.P * (3 + 2 * self.nb.shape[1] + 4)

    def block(self, b: BlockBuilder, base: np.random.Generator) -> None:
        p, P, net = self.params, self.P, b.ctx.net
        shape = b.shape
        nn = self.nb.shape[1]
        task = np.arange(P)
        its = b.it0 + np.arange(b.n_it)
        heavy_rank = base.integers(0, P, size=b.n_it)
        refine = np.ones(shape)
        hit = (its % REFINE_EVERY) == REFINE_EVERY - 1
        refine[hit, heavy_rank[hit]] = REFINE_FACTOR
        t = b.first_starts
        irecv_exit, isend_entry, isend_exit = [], [], []
        # post the receives (the first one after packing)
        for j in range(nn):
            w = b.work(kid("pack_halo") if j == 0 else kid("poll"), 6000.0 if j == 0 else 500.0)
            src = self.nb[:, j]
            t = b.pair(w, t, call=CALL["MPI_Irecv"], slot=10 + j, site=self.site(0),
                       p2p=(0, self.m, src[None, :], TAG0 + self.opp[j], 1))
            irecv_exit.append(t)
        # boundary, then send the faces
        w = b.work(kid("stencil_boundary"), p.ins("stencil_boundary", 4.0e5 * jitter(base, shape, 0.06)))
        for j in range(nn):
            if j:
                w = b.work(kid("poll"), 500.0)
            isend_entry.append(t + w.dur)
            t = b.pair(w, t, call=CALL["MPI_Isend"], slot=20 + j, site=self.site(1),
                       p2p=(self.m, 0, self.nb[:, j][None, :], TAG0 + j, 1))
            isend_exit.append(t)
        t = b.housekeeping(t, slot=30, site=SITE_CONTROL)
        # a short corner update, then poll until every face has arrived
        w = b.work(kid("dot"), 4000.0 * jitter(base, shape, 0.1))
        entry = t + w.dur
        if nn:
            arrival = np.stack([
                np.maximum(isend_entry[self.opp[j]][:, self.nb[:, j]], irecv_exit[j])
                + net.p2p(self.nb[:, j][None, :], task[None, :], self.m) for j in range(nn)], axis=0)
            ready = arrival.max(axis=0)
        else:
            ready = entry
        first, done = b.poll_loop(entry, ready, call=CALL["MPI_Testall"], slot=40, site=self.site(2))
        t = b.pair(w, t, call=CALL["MPI_Testall"], exit=first, slot=40, site=self.site(2))
        t = done
        for j in range(nn):
            src = self.nb[:, j]
            b.message(src[None, :], task[None, :], isend_entry[self.opp[j]][:, src], isend_exit[self.opp[j]][:, src],
                      irecv_exit[j], done, self.m, TAG0 + self.opp[j])
        # interior (the refined rank works longer), then the residual reduction closes the iteration
        ins = p.ins("stencil_interior", 2.5e6 * jitter(base, shape, 0.02) * refine, main=self.main_kernel)
        w = b.work(kid("stencil_interior"), ins)
        reduce = np.broadcast_to(p.reduces(its)[:, None], shape)
        exit = b.close(t + w.dur, np.where(reduce[:, 0], net.allreduce(8, P), net.call_ns), last=True)
        b.pair(w, t, call=CALL["MPI_Allreduce"], exit=exit, slot=50, site=self.site(3),
               coll=(8, 8, -1, WORLD_COMM), world=True, mask=reduce)
        if p.coll_every != 1:
            b.pair(w, t, call=CALL["MPI_Waitall"], exit=exit, slot=50, site=self.site(2), mask=~reduce)
        b.advance(exit)
