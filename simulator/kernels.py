"""Computation kernels: per-instruction behaviour of the code a burst runs, one per intended archetype.

A :class:`Kernel` gives instruction mix (loads, stores, branches, FP and vector FP per instruction), cache and TLB
misses per 1000 instructions (MPKI) at each level, branch misprediction rate and the core's base CPI. The counter
model (:mod:`synthtrace.simulator.counter_model`) turns a kernel and an instruction count into every counter and
the cycles (hence the duration) of a burst. ``intent`` is the DESIGN §7 archetype the kernel is built to show; the
ground truth's ``archetype`` is what the rules say on the simulated counters (they agree by construction, with
margins wide enough for run-to-run noise).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np


@dataclass(frozen=True)
class Kernel:
    """Behaviour of one kind of computation. Rates are per instruction; MPKI per 1000 instructions."""

    name: str
    intent: str  # archetype the kernel is designed to show when its bursts are long enough
    ld: float  # loads / instruction
    sr: float  # stores / instruction
    br: float  # branches / instruction
    fp: float  # FP instructions / instruction
    vec: float  # vector share of FP instructions
    fma: float  # FMA share of FP instructions (2 FLOPs per lane)
    l1_mpki: float  # L1 data misses
    l2_mpki: float  # L2 misses (data)
    l3_mpki: float  # last-level misses (each one 64 bytes of DRAM traffic)
    l1i_mpki: float = 0.5  # L1 instruction misses
    itlb_mpki: float = 0.02
    dtlb_mpki: float = 0.1
    br_misp: float = 0.002  # mispredicted / branches
    cpi_base: float = 0.35  # cycles / instruction with every access hitting L1
    mlp: float = 4.0  # memory-level parallelism (overlapping misses)
    stream_eff: float = 0.85  # fraction of the rank's DRAM share a bandwidth-bound burst reaches

    def scaled(self, **factors: float) -> Kernel:
        """A copy with some fields multiplied (regressions: ``l1_mpki=1.3`` ...)."""
        return replace(self, **{k: getattr(self, k) * v for k, v in factors.items()})


#: The kernels of the five applications (and MPI's own code, for the counters measured inside calls).
KERNELS: tuple[Kernel, ...] = (
    Kernel("startup", "compute_scalar", ld=0.28, sr=0.12, br=0.16, fp=0.02, vec=0.0, fma=0.0,
           l1_mpki=3.0, l2_mpki=0.8, l3_mpki=0.05, l1i_mpki=1.0, br_misp=0.004, cpi_base=0.42),
    Kernel("poll", "fine_grain", ld=0.30, sr=0.10, br=0.20, fp=0.0, vec=0.0, fma=0.0,
           l1_mpki=2.0, l2_mpki=0.5, l3_mpki=0.02, l1i_mpki=1.5, br_misp=0.01, cpi_base=0.5),
    Kernel("pack_halo", "fine_grain", ld=0.35, sr=0.30, br=0.05, fp=0.0, vec=0.0, fma=0.0,
           l1_mpki=40.0, l2_mpki=8.0, l3_mpki=0.2, cpi_base=0.4, mlp=2.0),
    # streaming kernels: every vector access a new line, prefetched (DRAM latency hidden, bandwidth-limited)
    Kernel("stencil_interior", "dram_bandwidth", ld=0.30, sr=0.10, br=0.04, fp=0.30, vec=0.9, fma=0.5,
           l1_mpki=390.0, l2_mpki=385.0, l3_mpki=380.0, cpi_base=0.25, mlp=1000.0),
    Kernel("stencil_boundary", "cache_bound", ld=0.36, sr=0.14, br=0.08, fp=0.18, vec=0.2, fma=0.3,
           l1_mpki=55.0, l2_mpki=12.0, l3_mpki=0.3, cpi_base=0.45, mlp=2.0),
    Kernel("axpy", "dram_bandwidth", ld=0.30, sr=0.15, br=0.03, fp=0.25, vec=0.95, fma=1.0,
           l1_mpki=440.0, l2_mpki=430.0, l3_mpki=420.0, cpi_base=0.25, mlp=1000.0),
    Kernel("dot", "fine_grain", ld=0.45, sr=0.01, br=0.05, fp=0.3, vec=0.9, fma=1.0,
           l1_mpki=30.0, l2_mpki=6.0, l3_mpki=0.4, cpi_base=0.35),
    Kernel("spmv", "dram_latency", ld=0.40, sr=0.05, br=0.12, fp=0.2, vec=0.1, fma=1.0,
           l1_mpki=50.0, l2_mpki=25.0, l3_mpki=6.0, dtlb_mpki=2.0, br_misp=0.01, cpi_base=0.4, mlp=1.5),
    Kernel("precond", "core_bound", ld=0.30, sr=0.10, br=0.08, fp=0.30, vec=0.05, fma=0.2,
           l1_mpki=4.0, l2_mpki=1.0, l3_mpki=0.1, br_misp=0.004, cpi_base=1.6),
    Kernel("fft_local", "compute_vector", ld=0.25, sr=0.12, br=0.03, fp=0.50, vec=0.92, fma=0.5,
           l1_mpki=8.0, l2_mpki=2.0, l3_mpki=0.05, cpi_base=0.45),
    Kernel("pack_transpose", "cache_bound", ld=0.35, sr=0.30, br=0.05, fp=0.0, vec=0.0, fma=0.0,
           l1_mpki=60.0, l2_mpki=12.0, l3_mpki=0.3, dtlb_mpki=1.0, cpi_base=0.4, mlp=2.0),
    Kernel("twiddle", "compute_scalar", ld=0.25, sr=0.10, br=0.06, fp=0.35, vec=0.15, fma=0.5,
           l1_mpki=4.0, l2_mpki=1.0, l3_mpki=0.05, cpi_base=0.36),
    Kernel("sweep_chunk", "compute_scalar", ld=0.30, sr=0.10, br=0.10, fp=0.30, vec=0.10, fma=0.3,
           l1_mpki=5.0, l2_mpki=1.0, l3_mpki=0.05, br_misp=0.003, cpi_base=0.38),
    Kernel("interpret", "frontend_bound", ld=0.30, sr=0.12, br=0.20, fp=0.05, vec=0.0, fma=0.0,
           l1_mpki=12.0, l2_mpki=2.0, l3_mpki=0.2, l1i_mpki=14.0, itlb_mpki=1.5, br_misp=0.008, cpi_base=0.55),
    Kernel("branchy_search", "bad_speculation", ld=0.25, sr=0.08, br=0.22, fp=0.02, vec=0.0, fma=0.0,
           l1_mpki=12.0, l2_mpki=2.0, l3_mpki=0.1, l1i_mpki=1.0, br_misp=0.08, cpi_base=0.5),
    Kernel("reduce_results", "bad_speculation", ld=0.28, sr=0.10, br=0.20, fp=0.05, vec=0.0, fma=0.0,
           l1_mpki=15.0, l2_mpki=3.0, l3_mpki=0.1, br_misp=0.07, cpi_base=0.5),
    Kernel("finalize", "compute_scalar", ld=0.28, sr=0.12, br=0.16, fp=0.02, vec=0.0, fma=0.0,
           l1_mpki=3.0, l2_mpki=0.8, l3_mpki=0.05, l1i_mpki=1.0, br_misp=0.004, cpi_base=0.42),
    Kernel("mpi", "fine_grain", ld=0.30, sr=0.12, br=0.22, fp=0.0, vec=0.0, fma=0.0,
           l1_mpki=6.0, l2_mpki=1.5, l3_mpki=0.3, l1i_mpki=2.0, br_misp=0.01, cpi_base=0.6),
    # issue 15: 9 % of branches mispredicted (~20 per 1000 instructions) with ~1 LLC miss per 1000 instructions,
    # just over the DRAM rules' threshold; appended so the ids of the kernels above are unchanged
    Kernel("branchy_mispredict", "bad_speculation", ld=0.26, sr=0.08, br=0.22, fp=0.01, vec=0.0, fma=0.0,
           l1_mpki=10.0, l2_mpki=2.5, l3_mpki=1.1, l1i_mpki=1.0, br_misp=0.09, cpi_base=0.5, mlp=2.0),
)
KERNEL_INDEX: dict[str, int] = {k.name: i for i, k in enumerate(KERNELS)}
MPI_KERNEL = KERNEL_INDEX["mpi"]
#: kernels of MPI's own code and of the runtime's start-up / shut-down: the same in every application
SHARED_KERNELS: tuple[str, ...] = ("startup", "poll", "finalize", "mpi")

#: numeric parameters as arrays indexed by kernel id (vectorised lookups)
PARAMS = ("ld", "sr", "br", "fp", "vec", "fma", "l1_mpki", "l2_mpki", "l3_mpki", "l1i_mpki", "itlb_mpki",
          "dtlb_mpki", "br_misp", "cpi_base", "mlp", "stream_eff")


def kernel_table(kernels: tuple[Kernel, ...] = KERNELS) -> dict[str, np.ndarray]:
    """Parameter name -> float array over kernel ids."""
    return {p: np.array([getattr(k, p) for k in kernels], dtype=np.float64) for p in PARAMS}


def kid(name: str) -> int:
    """Kernel id of a kernel name."""
    return KERNEL_INDEX[name]


def base_kernel(name: str) -> Kernel:
    """The kernel ``name`` as :data:`KERNELS` defines it (before application variants or regressions)."""
    return KERNELS[KERNEL_INDEX[name]]
