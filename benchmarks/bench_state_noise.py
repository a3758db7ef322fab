"""How often the merge's machine-state check calls a campaign of no machine-state difference ``suspect`` (sites26).

Each campaign: ``--tasks`` tasks x ``--pairs`` long matched pairs, the reference and the other run executing the same
instructions at the same rates (cycles, L1/L2/last-level misses per instruction), each burst's four counts off by an
independent log-normal ``--sigma`` in each run (the bursts' own run-to-run variability; LLC misses of one code vary
several % a burst). ``before``: the rule before sites26 (each measure at RATE_ALPHA, the normal quantile);
``after``: :func:`synthtrace.tracelib.merge.noise.rate_state` suspect (the t quantile over the tasks and the
measures judged). Prints the campaigns suspect by each, on the same campaigns.

    nice -n 10 python benchmarks/bench_state_noise.py --campaigns 2000 --tasks 64 --pairs 20 --sigma 0.1
"""
from __future__ import annotations

import argparse
from statistics import NormalDist

import numpy as np
import polars as pl

from synthtrace.tracelib.merge.noise import (MAD_SIGMA, RATE_ALPHA, RATE_FLOOR, RATE_K, RATE_MIN_TASKS, RATE_SHIFT,
                                             rate_state, task_rates)

#: the counters and their events per instruction
RATES = {"PAPI_TOT_CYC": 1.0, "PAPI_L1_DCM": 2e-2, "PAPI_L2_DCM": 5e-3, "PAPI_L3_TCM": 1e-3}


def campaign(rng: np.random.Generator, tasks: int, pairs: int, sigma: float) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The reference's and the other run's bursts of one noise-only campaign (row i of one matched to row i)."""
    n = tasks * pairs
    w = rng.uniform(1e6, 1e7, n)
    keys = {"appl": np.ones(n, np.int64), "task": np.repeat(np.arange(1, tasks + 1), pairs)}

    def run() -> dict[str, np.ndarray]:
        return {c: w * r * np.exp(rng.normal(0.0, sigma, n)) for c, r in RATES.items()}
    return pl.DataFrame({**keys, "PAPI_TOT_INS": w, **run()}), pl.DataFrame({"PAPI_TOT_INS": w, **run()})


def before_sites26(ref: pl.DataFrame, src: pl.DataFrame) -> bool:
    """The rule before sites26: some measure has a task beyond the normal quantile of 1 - RATE_ALPHA / 2n robust
    sigmas (at least RATE_K, RATE_FLOOR) of its own, or every task beyond RATE_SHIFT."""
    for c in RATES:
        pairs = ref.select("appl", "task", pl.col("PAPI_TOT_INS").alias("w"), pl.col(c).alias("c")).with_columns(
            src.select(pl.col("PAPI_TOT_INS").alias("o_w"), pl.col(c).alias("o_c")))
        d = task_rates(pairs).get_column("dw")
        if d.len() < RATE_MIN_TASKS:
            continue
        shift = float(d.median())  # type: ignore[arg-type]
        spread = MAD_SIGMA * float((d - shift).abs().median())  # type: ignore[arg-type]
        k = max(RATE_K, NormalDist().inv_cdf(1 - RATE_ALPHA / (2 * d.len())))
        if abs(shift) > RATE_SHIFT or float((d - shift).abs().max()) > max(k * spread, RATE_FLOOR):  # type: ignore[arg-type]
            return True
    return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--campaigns", type=int, default=2000)
    ap.add_argument("--tasks", type=int, default=64)
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--sigma", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=26)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    before = after = 0
    for _ in range(a.campaigns):
        ref, src = campaign(rng, a.tasks, a.pairs, a.sigma)
        rows = pl.Series("other_row", np.arange(ref.height))
        state = rate_state(ref, src, rows, "PAPI_TOT_INS", list(RATES), pl.Series(np.ones(ref.height, bool)))
        after += bool(state is not None and state.suspect)
        before += before_sites26(ref, src)
    print(f"{a.campaigns} campaigns x {a.tasks} tasks x {a.pairs} pairs, sigma {a.sigma}: suspect "
          f"before sites26 {before} ({before / a.campaigns:.2%}), after {after} "
          f"({after / a.campaigns:.2%})")


if __name__ == "__main__":
    main()
