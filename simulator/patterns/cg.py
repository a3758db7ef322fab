"""CG-like solver: per iteration a sparse matrix-vector product with a neighbour exchange (Isend/Irecv/Waitall on a
ring), a dot product reduced with MPI_Allreduce, vector updates (AXPY) with a norm Allreduce, and a preconditioner
with a third Allreduce. Three small global reductions per iteration: latency-bound communication.
"""
from __future__ import annotations

import numpy as np

from synthtrace.simulator.builder import CALL, BlockBuilder
from synthtrace.simulator.kernels import kid
from synthtrace.simulator.patterns.base import SITE_CONTROL, WORLD_COMM, AppParams, Pattern, jitter

HALO_BYTES = 8 * 1024
TAG = 7


class CG(Pattern):
    name = "cg"
    description = "CG-like solver: SpMV with ring exchange and Waitall, three Allreduces per iteration"
    main_kernel = "spmv"
    kernels = ("spmv", "pack_halo", "dot", "axpy", "precond")
    sites = (("spmv_exchange", "cg.c", 142), ("spmv_exchange", "cg.c", 149), ("spmv_exchange", "cg.c", 158),
             ("dot", "blas.c", 33), ("norm2", "blas.c", 61), ("precondition", "pc.c", 210))

    message_bytes = HALO_BYTES

    def __init__(self, params: AppParams, rng: np.random.Generator):
        super().__init__(params, rng)
        r = np.arange(self.P)
        self.nb = np.stack([(r - 1) % self.P, (r + 1) % self.P], axis=1) if self.P > 1 else np.zeros((1, 0), np.int64)

    def pairs_per_iteration(self) -> int:
        return self.P * 9

    def block(self, b: BlockBuilder, base: np.random.Generator) -> None:
        p, P, net, shape = self.params, self.P, b.ctx.net, b.shape
        nn = self.nb.shape[1]
        task = np.arange(P)
        t = b.first_starts
        irecv_exit, isend_entry, isend_exit = [], [], []
        for j in range(nn):
            w = b.work(kid("poll"), 900.0 if j == 0 else 400.0)
            t = b.pair(w, t, call=CALL["MPI_Irecv"], slot=10 + j, site=self.site(0),
                       p2p=(0, self.m, self.nb[:, j][None, :], TAG, 1))
            irecv_exit.append(t)
        for j in range(nn):
            w = b.work(kid("pack_halo"), 3000.0)
            isend_entry.append(t + w.dur)
            t = b.pair(w, t, call=CALL["MPI_Isend"], slot=20 + j, site=self.site(1),
                       p2p=(self.m, 0, self.nb[:, j][None, :], TAG, 1))
            isend_exit.append(t)
        # the product overlaps the exchange; Waitall then blocks until both neighbours' data arrived
        w = b.work(kid("spmv"), p.ins("spmv", 1.2e6 * jitter(base, shape, 0.03), main=self.main_kernel))
        entry = t + w.dur
        ready = entry
        arrivals = []
        for j in range(nn):
            src = self.nb[:, j]
            k = 1 - j  # the neighbour sends to us from its opposite slot
            a = np.maximum(isend_entry[k][:, src], irecv_exit[j]) + net.p2p(src[None, :], task[None, :], self.m)
            arrivals.append(a)
            ready = np.maximum(ready, a)
        done = np.maximum(entry + net.call_ns, ready + 200.0)
        t = b.pair(w, t, call=CALL["MPI_Waitall"], exit=done, slot=30, site=self.site(2))
        for j in range(nn):
            src = self.nb[:, j]
            k = 1 - j
            b.message(src[None, :], task[None, :], isend_entry[k][:, src], isend_exit[k][:, src], irecv_exit[j], done,
                      self.m, TAG)
        # dot product and its reduction
        w = b.work(kid("dot"), 6000.0 * jitter(base, shape, 0.05))
        exit = b.close(t + w.dur, net.allreduce(8, P))
        b.pair(w, t, call=CALL["MPI_Allreduce"], exit=exit, slot=40, site=self.site(3), coll=(8, 8, -1, WORLD_COMM),
               world=True)
        t = b.advance(exit)
        # vector updates and the residual norm
        w = b.work(kid("axpy"), p.ins("axpy", 9.0e5 * jitter(base, shape, 0.02)))
        exit = b.close(t + w.dur, net.allreduce(8, P))
        b.pair(w, t, call=CALL["MPI_Allreduce"], exit=exit, slot=50, site=self.site(4), coll=(8, 8, -1, WORLD_COMM),
               world=True)
        t = b.advance(exit)
        t = b.housekeeping(t, slot=55, site=SITE_CONTROL)
        # preconditioner, then rho = (r, z)
        w = b.work(kid("precond"), p.ins("precond", 5.0e5 * jitter(base, shape, 0.03)))
        exit = b.close(t + w.dur, net.allreduce(8, P), last=True)
        b.pair(w, t, call=CALL["MPI_Allreduce"], exit=exit, slot=60, site=self.site(5), coll=(8, 8, -1, WORLD_COMM),
               world=True)
        b.advance(exit)
