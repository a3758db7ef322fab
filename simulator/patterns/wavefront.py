"""Pipeline / wavefront sweep: ranks form a line; for each of K chunks a rank receives the chunk's boundary from its
upstream neighbour (MPI_Recv), computes the chunk and sends it downstream (MPI_Send). The pipeline fills and drains
every sweep, so ranks with equal work wait in turn: a balanced but serialised phase. An Allreduce ends the sweep.
"""
from __future__ import annotations

import numpy as np

from synthtrace.simulator.builder import CALL, BlockBuilder
from synthtrace.simulator.kernels import kid
from synthtrace.simulator.patterns.base import SITE_CONTROL, WORLD_COMM, Pattern, jitter

CHUNK_BYTES = 32 * 1024
CHUNKS = 6
TAG0 = 10


class Wavefront(Pattern):
    name = "wavefront"
    description = "pipeline sweep: MPI_Recv from upstream, compute a chunk, MPI_Send downstream; Allreduce per sweep"
    main_kernel = "sweep_chunk"
    kernels = ("sweep_chunk",)
    message_bytes = CHUNK_BYTES
    sites = (("sweep", "sweep.c", 71), ("sweep", "sweep.c", 84), ("converged", "sweep.c", 120))


    def pairs_per_iteration(self) -> int:
        return self.P * (2 * CHUNKS + 2)

    def block(self, b: BlockBuilder, base: np.random.Generator) -> None:
        p, P, net, shape = self.params, self.P, b.ctx.net, b.shape
        if P == 1:  # no pipeline: one burst per sweep
            w = b.work(
                kid("sweep_chunk"),
                p.ins("sweep_chunk", CHUNKS * 6.0e5 * jitter(base, shape, 0.02), main=self.main_kernel),
            )
            exit = b.close(b.first_starts + w.dur, net.allreduce(8, P), last=True)
            b.pair(w, b.first_starts, call=CALL["MPI_Allreduce"], exit=exit, slot=90, site=self.site(2),
                   coll=(8, 8, -1, WORLD_COMM), world=True)
            b.advance(exit)
            return
        task = np.arange(P)
        first = np.broadcast_to(task[None, :] == 0, shape)
        last = np.broadcast_to(task[None, :] == P - 1, shape)
        pre = [b.work(kid("poll"), 800.0) for _ in range(CHUNKS)]
        comp = [
            b.work(kid("sweep_chunk"), p.ins("sweep_chunk", 6.0e5 * jitter(base, shape, 0.02), main=self.main_kernel))
            for _ in range(CHUNKS)
        ]
        comp_eff = [c.plus(q).where(first, c) for c, q in zip(comp, pre)]  # rank 0 has no receive
        o, copy = net.call_ns, self.m / (0.8 * net.bw)
        B = b.n_it
        t = b.first_starts.copy()
        times = {
            k: np.zeros((B, P, CHUNKS)) for k in ("pre_start", "recv_exit", "comp_start", "send_entry", "send_exit")
        }
        for k in range(CHUNKS):
            for r in range(P):
                if r > 0:
                    times["pre_start"][:, r, k] = t[:, r]
                    entry = t[:, r] + pre[k].dur[:, r]
                    arrival = times["send_entry"][:, r - 1, k] + net.p2p(np.array([r - 1]), np.array([r]), self.m)
                    t[:, r] = np.maximum(entry + o, arrival + 200.0)
                    times["recv_exit"][:, r, k] = t[:, r]
                times["comp_start"][:, r, k] = t[:, r]
                t[:, r] = t[:, r] + comp_eff[k].dur[:, r]
                if r < P - 1:
                    times["send_entry"][:, r, k] = t[:, r]
                    t[:, r] = t[:, r] + o + copy
                    times["send_exit"][:, r, k] = t[:, r]
        up, down = np.maximum(task - 1, 0)[None, :], np.minimum(task + 1, P - 1)[None, :]
        for k in range(CHUNKS):
            # receive from upstream; on the last rank the burst also holds the previous chunk's computation
            work = comp_eff[k - 1].plus(pre[k]).where(last, pre[k]) if k else pre[k]
            start = (
                np.where(last, times["comp_start"][:, :, k - 1], times["pre_start"][:, :, k])
                if k
                else times["pre_start"][:, :, k]
            )
            b.pair(work, start, call=CALL["MPI_Recv"], exit=times["recv_exit"][:, :, k], slot=10 + 2 * k,
                   site=self.site(0), mask=~first, p2p=(0, self.m, up, TAG0 + k, 1))
            b.pair(comp_eff[k], times["comp_start"][:, :, k], call=CALL["MPI_Send"], exit=times["send_exit"][:, :, k],
                   slot=11 + 2 * k, site=self.site(1), mask=~last, p2p=(self.m, 0, down, TAG0 + k, 1))
            recv = np.roll(times["send_entry"][:, :, k], 1, axis=1), np.roll(times["send_exit"][:, :, k], 1, axis=1)
            b.message(up, np.broadcast_to(task[None, :], shape), recv[0], recv[1], times["recv_exit"][:, :, k],
                      times["recv_exit"][:, :, k], self.m, TAG0 + k, mask=~first)
        # end of the sweep: convergence check on every rank
        tail = b.work(kid("poll"), 1500.0)
        work = comp_eff[-1].plus(tail).where(last, tail)
        start = np.where(last, times["comp_start"][:, :, -1], times["send_exit"][:, :, -1])
        start = b.housekeeping(start, slot=80, site=SITE_CONTROL)
        exit = b.close(start + work.dur, net.allreduce(8, P), last=True)
        b.pair(work, start, call=CALL["MPI_Allreduce"], exit=exit, slot=90, site=self.site(2),
               coll=(8, 8, -1, WORLD_COMM), world=True)
        b.advance(exit)
