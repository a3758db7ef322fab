"""All-to-all transpose (FFT-like): per iteration a vectorised local FFT, a global transpose (MPI_Alltoall), the
strided packing of the transposed data, a second transpose, scalar twiddle factors and a small Allreduce. Large
all-to-all blocks: bandwidth-bound communication.
"""
from __future__ import annotations

import numpy as np

from synthtrace.simulator.builder import CALL, BlockBuilder
from synthtrace.simulator.kernels import kid
from synthtrace.simulator.patterns.base import SITE_CONTROL, WORLD_COMM, Pattern, jitter

BLOCK_BYTES = 256 * 1024  # per peer


class Transpose(Pattern):
    name = "transpose"
    description = "FFT-like: local FFT, MPI_Alltoall transpose, strided pack, Alltoall, twiddle, Allreduce"
    main_kernel = "fft_local"
    kernels = ("fft_local", "pack_transpose", "twiddle")
    message_bytes = BLOCK_BYTES
    sites = (("fft_forward", "fft.c", 203), ("transpose", "fft.c", 251), ("energy", "fft.c", 300))


    def pairs_per_iteration(self) -> int:
        return self.P * 4

    def block(self, b: BlockBuilder, base: np.random.Generator) -> None:
        p, P, net, shape = self.params, self.P, b.ctx.net, b.shape
        total = self.m * P
        t = b.first_starts
        steps = [("fft_local", 3.0e6, 0.02, self.site(0), True), ("pack_transpose", 6.0e5, 0.03, self.site(1), True),
                 ("twiddle", 8.0e5, 0.02, self.site(2), False)]
        for i, (kernel, ins, sigma, site, alltoall) in enumerate(steps):
            if i == 2:
                t = b.housekeeping(t, slot=25, site=SITE_CONTROL)
            w = b.work(kid(kernel), p.ins(kernel, ins * jitter(base, shape, sigma), main=self.main_kernel))
            if alltoall:
                cost, coll, call = net.alltoall(self.m, P), (total, total, -1, WORLD_COMM), CALL["MPI_Alltoall"]
            else:
                cost, coll, call = net.allreduce(8, P), (8, 8, -1, WORLD_COMM), CALL["MPI_Allreduce"]
            exit = b.close(t + w.dur, cost, last=(i == len(steps) - 1))
            b.pair(w, t, call=call, exit=exit, slot=10 * (i + 1), site=site, coll=coll, world=True)
            t = b.advance(exit)
