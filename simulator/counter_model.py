"""Counter model: every hardware counter of a burst from its kernel and instruction count, consistently.

Counts derive from one another the way hardware counts do: loads/stores/branches/FP from instructions, vector FP
from FP, FLOPs from FP instructions x lanes x (1 + FMA share), L1 misses bounded by loads+stores, L2 accesses =
L1 data + instruction misses >= L2 misses, L3 accesses = L2 misses >= L3 misses, mispredictions bounded by
branches. Cycles come from a CPI stack (base CPI + miss, misprediction and front-end penalties over the memory-
level parallelism), raised to what the rank's DRAM bandwidth share allows when a burst streams (so IPC, stall
cycles and duration follow from the counts); reference cycles tick at the nominal clock; duration = cycles /
the run's clock.

Run-to-run noise is multiplicative per counter (lognormal, relative sizes in :data:`NOISE_RANGES` by counter
class), drawn independently per burst and run, then the bounds above are re-imposed. Units: counts, ns, Hz.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from synthtrace.tracelib.domain.machine import Machine
from synthtrace.simulator.kernels import KERNELS, Kernel, kernel_table

#: fixed PMU counters (recorded in every run) then the programmable ones
FIXED_COUNTERS: tuple[str, ...] = ("PAPI_TOT_INS", "PAPI_TOT_CYC", "PAPI_REF_CYC")
PROGRAMMABLE_COUNTERS: tuple[str, ...] = (
    "PAPI_LD_INS", "PAPI_SR_INS", "PAPI_BR_INS", "PAPI_BR_MSP", "PAPI_FP_INS", "PAPI_VEC_DP", "PAPI_DP_OPS",
    "PAPI_L1_DCM", "PAPI_L1_ICM", "PAPI_L2_DCA", "PAPI_L2_DCM", "PAPI_L3_TCA", "PAPI_L3_TCM", "PAPI_TLB_DM",
    "PAPI_TLB_IM", "PAPI_RES_STL", "LONGEST_LAT_CACHE:MISS", "CYCLE_ACTIVITY:STALLS_L3_MISS",
)
COUNTERS: tuple[str, ...] = FIXED_COUNTERS + PROGRAMMABLE_COUNTERS
C: dict[str, int] = {name: i for i, name in enumerate(COUNTERS)}

#: relative noise (standard deviation of the log) per counter class: (low, high)
NOISE_RANGES: dict[str, tuple[float, float]] = {"instructions": (0.001, 0.005), "cycles": (0.01, 0.03),
                                                "misses": (0.02, 0.05)}
NOISE_CLASS: dict[str, str] = {
    **dict.fromkeys(("PAPI_TOT_INS", "PAPI_LD_INS", "PAPI_SR_INS", "PAPI_BR_INS", "PAPI_FP_INS", "PAPI_VEC_DP",
                     "PAPI_DP_OPS"), "instructions"),
    **dict.fromkeys(("PAPI_TOT_CYC", "PAPI_REF_CYC", "PAPI_RES_STL", "CYCLE_ACTIVITY:STALLS_L3_MISS"), "cycles"),
    **dict.fromkeys(("PAPI_BR_MSP", "PAPI_L1_DCM", "PAPI_L1_ICM", "PAPI_L2_DCA", "PAPI_L2_DCM", "PAPI_L3_TCA",
                     "PAPI_L3_TCM", "PAPI_TLB_DM", "PAPI_TLB_IM", "LONGEST_LAT_CACHE:MISS"), "misses"),
}

# penalties in core cycles
LAT_L2, LAT_L3, LAT_DRAM = 14.0, 45.0, 260.0
PEN_BRANCH, PEN_ICACHE, PEN_ITLB, PEN_DTLB = 17.0, 10.0, 30.0, 25.0
LINE = 64.0
#: at most this share of a level's accesses miss (L2: of L1 data + instruction misses; L3: of L2 misses)
MAX_L2_MISS_RATIO, MAX_L3_MISS_RATIO = 0.95, 0.98


#: counters that follow another one within a run (same clock / same misses): their noise is the parent's
TRACKS: dict[str, str] = {"PAPI_REF_CYC": "PAPI_TOT_CYC", "LONGEST_LAT_CACHE:MISS": "PAPI_L3_TCM"}
TRACK_JITTER = 0.002  # independent relative noise left between a counter and the one it tracks


def draw_noise_sizes(rng: np.random.Generator, scale: float = 1.0) -> np.ndarray:
    """One relative noise size per counter, uniform in its class range (times ``scale``); a counter that tracks
    another (:data:`TRACKS`) gets its parent's size."""
    lo = np.array([NOISE_RANGES[NOISE_CLASS[c]][0] for c in COUNTERS])
    hi = np.array([NOISE_RANGES[NOISE_CLASS[c]][1] for c in COUNTERS])
    sigma = rng.uniform(lo, hi) * scale
    for child, parent in TRACKS.items():
        sigma[C[child]] = sigma[C[parent]]
    return sigma


@dataclass
class CounterModel:
    """Counts of bursts of one run: ``machine`` roofs, the rank's DRAM share, the run's clock, noise sizes."""

    machine: Machine
    dram_share: float  # bytes/s one rank can draw from DRAM
    freq_hz: float  # the run's core clock
    sigma: np.ndarray  # relative noise per counter (0 = noise-free)
    kernels: tuple[Kernel, ...] = KERNELS

    def __post_init__(self) -> None:
        self._k = kernel_table(self.kernels)
        self.ref_hz = self.machine.frequency_ghz * 1e9
        self.lanes = float(self.machine.vector_lanes)

    def counts(self, kernel: np.ndarray, ins: np.ndarray, rng: np.random.Generator | None
               ) -> tuple[np.ndarray, np.ndarray]:
        """Counters (int64, one column per :data:`COUNTERS`) and duration (ns, int64) of bursts.

        ``kernel``: kernel ids; ``ins``: noise-free instruction counts; ``rng``: noise source (None = no noise).
        """
        k = {p: v[kernel] for p, v in self._k.items()}
        ins = np.asarray(ins, dtype=np.float64)
        n = ins.size
        x = np.empty((n, len(COUNTERS)), dtype=np.float64)
        ld, sr, br = ins * k["ld"], ins * k["sr"], ins * k["br"]
        fp = ins * k["fp"]
        vec = fp * k["vec"]
        flops = (fp - vec + vec * self.lanes) * (1.0 + k["fma"])
        l1 = np.minimum(ins * k["l1_mpki"] * 1e-3, ld + sr)
        l1i = ins * k["l1i_mpki"] * 1e-3
        l2a = l1 + l1i
        l2 = np.minimum(ins * k["l2_mpki"] * 1e-3, MAX_L2_MISS_RATIO * l2a)
        l3 = np.minimum(ins * k["l3_mpki"] * 1e-3, MAX_L3_MISS_RATIO * l2)
        itlb, dtlb = ins * k["itlb_mpki"] * 1e-3, ins * k["dtlb_mpki"] * 1e-3
        brm = br * k["br_misp"]
        core = ins * k["cpi_base"]
        mem = l3 * LAT_DRAM / k["mlp"]
        cpi_cycles = (core + (l2a - l2) * LAT_L2 / k["mlp"] + (l2 - l3) * LAT_L3 / k["mlp"] + mem
                      + brm * PEN_BRANCH + l1i * PEN_ICACHE + itlb * PEN_ITLB + dtlb * PEN_DTLB / k["mlp"])
        bw_cycles = LINE * l3 / (k["stream_eff"] * self.dram_share) * self.freq_hz
        cycles = np.maximum(cpi_cycles, bw_cycles)
        stalls = cycles - 0.6 * core
        mem_stalls = mem + (cycles - cpi_cycles)
        cols = {
            "PAPI_TOT_INS": ins,
            "PAPI_TOT_CYC": cycles,
            "PAPI_REF_CYC": cycles * self.ref_hz / self.freq_hz,
            "PAPI_LD_INS": ld,
            "PAPI_SR_INS": sr,
            "PAPI_BR_INS": br,
            "PAPI_BR_MSP": brm,
            "PAPI_FP_INS": fp,
            "PAPI_VEC_DP": vec,
            "PAPI_DP_OPS": flops,
            "PAPI_L1_DCM": l1,
            "PAPI_L1_ICM": l1i,
            "PAPI_L2_DCA": l2a,
            "PAPI_L2_DCM": l2,
            "PAPI_L3_TCA": l2,
            "PAPI_L3_TCM": l3,
            "PAPI_TLB_DM": dtlb,
            "PAPI_TLB_IM": itlb,
            "PAPI_RES_STL": stalls,
            "LONGEST_LAT_CACHE:MISS": 0.97 * l3,
            "CYCLE_ACTIVITY:STALLS_L3_MISS": mem_stalls,
        }
        for name, col in cols.items():
            x[:, C[name]] = col
        if rng is not None and n:
            noisy = x[:, [C[p] for p in TRACKS.values()]] / np.maximum(x[:, [C[c] for c in TRACKS]], 1e-300)
            x *= np.exp(
                rng.standard_normal((n, len(COUNTERS)), dtype=np.float32) * self.sigma[None, :].astype(np.float32)
            )
            self._bound(x)
            for j, (child, parent) in enumerate(TRACKS.items()):  # same clock / same misses: the parent's noise
                x[:, C[child]] = x[:, C[parent]] / noisy[:, j] * np.exp(TRACK_JITTER * rng.standard_normal(n))
        out = np.rint(x).astype(np.int64)
        dur = np.maximum(np.rint(out[:, C["PAPI_TOT_CYC"]] / self.freq_hz * 1e9), 1).astype(np.int64)
        return out, dur

    @staticmethod
    def _bound(x: np.ndarray) -> None:
        """Re-impose the hardware bounds after noise (in place)."""
        def cap(name: str, bound: np.ndarray) -> None:
            np.minimum(x[:, C[name]], bound, out=x[:, C[name]])
        cap("PAPI_L1_DCM", x[:, C["PAPI_LD_INS"]] + x[:, C["PAPI_SR_INS"]])
        cap("PAPI_L2_DCM", x[:, C["PAPI_L2_DCA"]])
        cap("PAPI_L3_TCM", x[:, C["PAPI_L3_TCA"]])
        cap("LONGEST_LAT_CACHE:MISS", x[:, C["PAPI_L3_TCA"]])
        cap("PAPI_BR_MSP", x[:, C["PAPI_BR_INS"]])
        cap("PAPI_VEC_DP", x[:, C["PAPI_FP_INS"]])
        cap("PAPI_RES_STL", x[:, C["PAPI_TOT_CYC"]])
        cap("CYCLE_ACTIVITY:STALLS_L3_MISS", x[:, C["PAPI_RES_STL"]])
        ins = x[:, C["PAPI_TOT_INS"]]
        for name in ("PAPI_LD_INS", "PAPI_SR_INS", "PAPI_BR_INS", "PAPI_FP_INS"):
            cap(name, ins)

    def mpi_rates(self, kernel: int) -> np.ndarray:
        """Counts per ns of every counter inside MPI calls: the busy progress loop of ``kernel`` (no noise; these
        counts belong to no burst). Counters inside a call = its duration x these rates."""
        probe, dur = self.counts(np.array([kernel]), np.array([1.0e6]), None)
        return probe[0] / max(int(dur[0]), 1)
