"""Application variants: several applications per communication pattern whose kernels behave differently.

A real campaign holds many applications that share code structure (a halo-exchange stencil, a CG solver) but
differ in compute behaviour: their inputs, compilers and data layouts change miss rates, instruction mix and core
efficiency. :func:`variant_kernels` draws, for one application, a replacement for each of its pattern's own
kernels (``Pattern.kernels``) with the parameters of the base kernel (:data:`~.kernels.KERNELS`) perturbed:

- rates (MPKI of L1 data, L1 instruction, iTLB and dTLB; loads, stores, branches and FP per instruction;
  ``mlp``; ``cpi_base``) are multiplied by ``exp(s z)`` (log-normal);
- fractions (the local miss ratios ``l2_mpki / l1_mpki`` and ``l3_mpki / l2_mpki``, ``br_misp``, ``vec``,
  ``fma``) move by ``s z`` in logit space, so they stay in (0, 1); a fraction of exactly 0 or 1 stays;

``z`` standard normal, independent per application, kernel and parameter; ``s`` = spread x the parameter's
share in :data:`PERTURBED`: 1 for locality (miss rates and ratios, misprediction rate), 1/2 for the instruction
mix and the memory-level parallelism, 1/5 for the base CPI. ``mlp`` and ``cpi_base`` are what no counter reveals
(only cycle counters do, and they are ingredients of every predictor target), so their spread is an error floor
no counter set can remove; they vary less. Then the physics is re-imposed: loads + stores + branches <= 0.95 of
the instructions (scaled down together), FP <= 0.95 - branches, L1 data misses <= 0.98 x (loads + stores),
L1 >= L2 >= L3 (local miss ratios at most the counter model's 0.95 and 0.98, so the counts follow the parameters
exactly), ``mlp`` >= 1. ``stream_eff`` (the prefetchers' share of the DRAM bandwidth, a machine property) and
``intent`` (the base kernel's design, not a promise for the variant) stay.

MPI's own code (``poll``, ``mpi``) and the runtime's start-up and shut-down (:data:`~.kernels.SHARED_KERNELS`)
are the same library in every application and are never varied (the polling loop also keeps the MPI side's
timing and burst counts as calibrated). Draws depend on (seed, application name) only: an application keeps its
kernels on every night of a campaign, ``halo_2`` is the same whatever the number of applications, and a
different spread scales the same draws.
"""
from __future__ import annotations

import math
import zlib
from dataclasses import replace

import numpy as np

from synthtrace.tracelib.errors import BadInputError
from synthtrace.simulator.counter_model import MAX_L2_MISS_RATIO, MAX_L3_MISS_RATIO
from synthtrace.simulator.kernels import KERNELS, Kernel
from synthtrace.simulator.patterns import PATTERNS

#: parameter -> (how it moves: "log" multiplies by exp(s z), "logit" shifts the logit by s z; share of the spread).
#: ``l2_ratio`` = l2_mpki / l1_mpki and ``l3_ratio`` = l3_mpki / l2_mpki (local miss ratios).
PERTURBED: dict[str, tuple[str, float]] = {
    "l1_mpki": ("log", 1.0), "l2_ratio": ("logit", 1.0), "l3_ratio": ("logit", 1.0), "l1i_mpki": ("log", 1.0),
    "itlb_mpki": ("log", 1.0), "dtlb_mpki": ("log", 1.0), "br_misp": ("logit", 1.0),
    "ld": ("log", 0.5), "sr": ("log", 0.5), "br": ("log", 0.5), "fp": ("log", 0.5), "vec": ("logit", 0.5),
    "fma": ("logit", 0.5), "mlp": ("log", 0.5), "cpi_base": ("log", 0.2),
}
#: log (logit) standard deviation of the locality parameters when applications vary (``--kernel-spread``):
#: one standard deviation multiplies a miss rate by e^0.5 = 1.65 (95 % of applications within / x 2.7)
DEFAULT_SPREAD = 0.5
MAX_SPREAD = 2.0
MAX_MIX = 0.95  # loads + stores + branches, and FP + branches, per instruction
MAX_L1_PER_ACCESS = 0.98  # L1 data misses per load or store


def check_spread(spread: float) -> None:
    """Raise :class:`BadInputError` unless 0 <= ``spread`` <= :data:`MAX_SPREAD`."""
    if not (math.isfinite(spread) and 0.0 <= spread <= MAX_SPREAD):
        raise BadInputError(f"--kernel-spread must be between 0 and {MAX_SPREAD:g} (a log standard deviation; "
                            f"got {spread:g})")


def _logit_shift(p: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Fractions ``p`` moved by ``d`` in logit space (0 and 1 stay)."""
    inner = (p > 0) & (p < 1)
    q = np.clip(p, 1e-12, 1 - 1e-12)
    moved = 1.0 / (1.0 + np.exp(-(np.log(q / (1 - q)) + d)))
    return np.where(inner, moved, p)


def perturb(base: Kernel, z: np.ndarray, spread: float) -> Kernel:
    """``base`` with every :data:`PERTURBED` parameter moved by ``spread`` x its share x ``z`` (standard normal
    draws in :data:`PERTURBED` order), the physics re-imposed (module docstring)."""
    names = list(PERTURBED)
    ratios = {"l2_ratio": base.l2_mpki / base.l1_mpki if base.l1_mpki > 0 else 0.0,
              "l3_ratio": base.l3_mpki / base.l2_mpki if base.l2_mpki > 0 else 0.0}
    x = np.array([ratios[n] if n in ratios else getattr(base, n) for n in names], dtype=np.float64)
    s = spread * np.array([PERTURBED[n][1] for n in names]) * np.asarray(z, dtype=np.float64)
    is_log = np.array([PERTURBED[n][0] == "log" for n in names])
    x = np.where(is_log, x * np.exp(s), _logit_shift(np.minimum(x, 1.0), s))
    v = dict(zip(names, x.tolist()))
    mix = v["ld"] + v["sr"] + v["br"]
    if mix > MAX_MIX:
        for n in ("ld", "sr", "br"):
            v[n] *= MAX_MIX / mix
    v["fp"] = min(v["fp"], MAX_MIX - v["br"])
    l1 = min(v["l1_mpki"], MAX_L1_PER_ACCESS * 1000.0 * (v["ld"] + v["sr"]))
    l2 = l1 * min(v.pop("l2_ratio"), MAX_L2_MISS_RATIO)
    l3 = l2 * min(v.pop("l3_ratio"), MAX_L3_MISS_RATIO)
    return replace(base, **{**v, "l1_mpki": l1, "l2_mpki": l2, "l3_mpki": l3, "mlp": max(v["mlp"], 1.0)})


def variant_kernels(seed: int, app: str, pattern: str, spread: float = DEFAULT_SPREAD,
                    base: tuple[Kernel, ...] = KERNELS) -> dict[str, Kernel]:
    """Kernel name -> replacement kernel for application ``app`` of ``pattern``: each of the pattern's own kernels
    perturbed (module docstring). Deterministic in (``seed``, ``app``); ``{}`` when ``spread`` is 0."""
    check_spread(spread)
    if pattern not in PATTERNS:
        raise BadInputError(f"unknown pattern {pattern!r} (known: {', '.join(PATTERNS)})")
    if spread == 0:
        return {}
    own = PATTERNS[pattern].kernels
    rng = np.random.default_rng([seed, zlib.crc32(app.encode()), zlib.crc32(b"kernel variants")])
    z = rng.standard_normal((len(own), len(PERTURBED)))
    by_name = {k.name: k for k in base}
    return {name: perturb(by_name[name], z[i], spread) for i, name in enumerate(own)}


def app_variants(apps: dict[str, str], seed: int, spread: float) -> dict[str, dict[str, Kernel]]:
    """Replacement kernels of every application (``apps``: app -> pattern); see :func:`variant_kernels`."""
    check_spread(spread)
    return {app: variant_kernels(seed, app, pattern, spread) for app, pattern in apps.items()}
