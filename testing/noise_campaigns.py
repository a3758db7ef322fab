"""Matched burst pairs of no machine-state difference, for the machine-state check's tests and
``benchmarks/bench_state_noise.py``.

One generator for every caller: the reference and the other run execute the same instructions (1e6-1e7 a burst) at
the same rates per instruction, each burst's counts off by an independent log-normal ``sigma`` in each run (the
bursts' own run-to-run variability; last-level misses of one code vary several % a burst); ``contended``: task ->
factor on one counter's counts in the other run (a job sharing its node). :func:`noise_runs` gives the two runs'
burst tables (row i matched to row i, as ``rate_state`` takes them); :func:`noise_pairs` the one-measure pairs frame
``machine_state`` takes, from the same draws.
"""
from __future__ import annotations

import numpy as np
import polars as pl

#: events per instruction of the four measures the check judges
RATES = {"PAPI_TOT_CYC": 1.0, "PAPI_L1_DCM": 2e-2, "PAPI_L2_DCM": 5e-3, "PAPI_L3_TCM": 1e-3}


def noise_runs(rng: np.random.Generator, tasks: int, pairs: int, sigma: float,
               contended: dict[int, float] | None = None, rates: dict[str, float] | None = None,
               counter: str = "PAPI_L3_TCM") -> tuple[pl.DataFrame, pl.DataFrame]:
    """The reference's bursts (appl, task, PAPI_TOT_INS, the ``rates`` counters; default :data:`RATES`) and the
    other run's (PAPI_TOT_INS, the counters) of ``tasks`` x ``pairs`` matched bursts; ``contended``: task -> factor
    on ``counter`` in the other run."""
    rates = RATES if rates is None else rates
    n = tasks * pairs
    task = np.repeat(np.arange(1, tasks + 1), pairs)
    w = rng.uniform(1e6, 1e7, n)
    factor = np.ones(n)
    for t, f in (contended or {}).items():
        factor[task == t] = f

    def run(scale: np.ndarray) -> dict[str, np.ndarray]:
        return {c: w * r * (scale if c == counter else 1.0) * np.exp(rng.normal(0.0, sigma, n))
                for c, r in rates.items()}
    ref = pl.DataFrame({"appl": np.ones(n, np.int64), "task": task, "PAPI_TOT_INS": w, **run(np.ones(n))})
    return ref, pl.DataFrame({"PAPI_TOT_INS": w, **run(factor)})


def noise_pairs(rng: np.random.Generator, tasks: int, pairs: int, sigma: float,
                contended: dict[int, float] | None = None, counter: str = "PAPI_L3_TCM",
                rate: float = 1e-3) -> pl.DataFrame:
    """:func:`noise_runs` of the one ``counter`` (``rate`` per instruction) as matched pairs: appl, task, ``w``,
    ``c`` (the reference burst's instructions and events), ``o_w``, ``o_c`` (its match's)."""
    ref, src = noise_runs(rng, tasks, pairs, sigma, contended, {counter: rate}, counter)
    return ref.select("appl", "task", pl.col("PAPI_TOT_INS").alias("w"), pl.col(counter).alias("c")).with_columns(
        src.select(pl.col("PAPI_TOT_INS").alias("o_w"), pl.col(counter).alias("o_c")))
