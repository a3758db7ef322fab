"""How often the merge's machine-state check calls a campaign of no machine-state difference ``suspect``, and how
often it names one contended task (sites26, alpha26, alpha27).

Each campaign (testing/noise_campaigns.py): ``--tasks`` tasks x ``--pairs`` long matched pairs, the reference and the
other run executing the same instructions at the same rates (cycles, L1/L2/last-level misses per instruction), each
burst's four counts off by an independent log-normal ``--sigma`` in each run; with ``--contended FACTOR`` task 1
misses the last-level cache x FACTOR as often in the other run, and a campaign counts when it is suspect with task 1
(alone) named on that measure. Rules, on the same campaigns: ``normal`` (before sites26: each measure at
RATE_ALPHA, the normal quantile of 1 - RATE_ALPHA / 2n), ``t(n-1)/2`` (sites26: Student's t quantile of
1 - RATE_ALPHA / 2nm at (n - 1) / 2 degrees of freedom), ``alpha26`` (noise.STATE_T_DF's degrees of freedom to 16
tasks, beyond (n - 1) / 2), ``now``: :func:`synthtrace.tracelib.merge.noise.rate_state`.

    nice -n 10 python benchmarks/bench_state_noise.py --campaigns 2000 --tasks 64 --pairs 20 --sigma 0.1
    nice -n 10 python benchmarks/bench_state_noise.py --campaigns 500 --tasks 8 --contended 2
    nice -n 10 python benchmarks/bench_state_noise.py --null-table   # the source of noise.STATE_T_DF
    nice -n 10 python benchmarks/bench_state_noise.py --null-table --sizes 16,24,32,64,128,256,1024,4096 --draws 400000
        # beyond 16 tasks: the source of noise.STATE_T_DF_PER_TASK, STATE_T_DF_BASE (the now column's error)
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from statistics import NormalDist

import numpy as np
import polars as pl
from scipy.optimize import brentq
from scipy.special import stdtrit

from synthtrace.tracelib.merge.noise import (MAD_SIGMA, RATE_ALPHA, RATE_FLOOR, RATE_K, RATE_MIN_TASKS, RATE_SHIFT,
                                             STATE_T_DF, rate_state, state_threshold, task_rates)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from testing.noise_campaigns import RATES, noise_runs

#: a rule's threshold (robust sigmas) by tasks judged and measures judged
Threshold = Callable[[int, int], float]
OLD_RULES: dict[str, Threshold] = {
    "normal": lambda n, m: NormalDist().inv_cdf(1 - RATE_ALPHA / (2 * n)),
    "t(n-1)/2": lambda n, m: float(stdtrit((n - 1) / 2, 1 - RATE_ALPHA / (2 * n * m))),
    "alpha26": lambda n, m: float(stdtrit(STATE_T_DF.get(n, (n - 1) / 2), 1 - RATE_ALPHA / (2 * n * m))),
}
#: values of the null statistic simulated at once (memory: 8 bytes x this x 3)
NULL_BLOCK = 4_000_000


def old_rule_names(ref: pl.DataFrame, src: pl.DataFrame, threshold: Threshold) -> set[int] | None:
    """The tasks an older rule names (every measure's outliers beyond max(RATE_K, threshold) robust sigmas, at
    least RATE_FLOOR), the empty set when it calls the campaign suspect for a shift of every task, None when not
    suspect."""
    named: set[int] = set()
    suspect = False
    for c in RATES:
        pairs = ref.select("appl", "task", pl.col("PAPI_TOT_INS").alias("w"), pl.col(c).alias("c")).with_columns(
            src.select(pl.col("PAPI_TOT_INS").alias("o_w"), pl.col(c).alias("o_c")))
        rates = task_rates(pairs)
        d = rates.get_column("dw")
        if d.len() < RATE_MIN_TASKS:
            continue
        shift = float(d.median())  # type: ignore[arg-type]
        spread = MAD_SIGMA * float((d - shift).abs().median())  # type: ignore[arg-type]
        k = max(RATE_K, threshold(d.len(), len(RATES)))
        off = rates.filter((pl.col("dw") - shift).abs() > max(k * spread, RATE_FLOOR)).get_column("task").to_list()
        suspect |= abs(shift) > RATE_SHIFT or bool(off)
        named |= set(off)
    return named if suspect else None


def null_table(draws: int, measures: int, seed: int, sizes: list[int]) -> None:
    """Print, by tasks n of ``sizes``, the 1 - RATE_ALPHA / measures quantile of max |d - median| / (MAD_SIGMA x MAD)
    over n normal tasks (``draws`` draws, at most 4 x 10^8 values a size), the degrees of freedom whose t quantile of
    1 - RATE_ALPHA / 2n measures equals it, and the now rule's threshold (noise.state_threshold) against it."""
    rng = np.random.default_rng(seed)
    for n in sizes:
        stats = []
        left = min(draws, max(10_000, 400_000_000 // n))
        while left > 0:
            rows = min(left, max(1, NULL_BLOCK // n))
            left -= rows
            d = rng.standard_normal((rows, n))
            dev = np.abs(d - np.median(d, axis=1, keepdims=True))
            stats.append(dev.max(axis=1) / (MAD_SIGMA * np.median(dev, axis=1)))
        q = float(np.quantile(np.concatenate(stats), 1 - RATE_ALPHA / measures))
        p = 1 - RATE_ALPHA / (2 * n * measures)
        df = brentq(lambda v, p=p, q=q: float(stdtrit(v, p)) - q, 0.05, 1e6)
        now = state_threshold(n, measures)
        print(f"{n:5d} tasks: null quantile {q:7.3f}, t at (n-1)/2 {float(stdtrit((n - 1) / 2, p)):7.3f}, "
              f"df {df:8.2f} ({df / n:.3f} n), now {now:7.3f} ({now / q - 1:+.1%})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--campaigns", type=int, default=2000)
    ap.add_argument("--tasks", type=int, default=64)
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--sigma", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=26)
    ap.add_argument("--contended", type=float, default=None, metavar="FACTOR",
                    help="task 1's last-level misses x FACTOR in the other run: count the campaigns naming it")
    ap.add_argument("--null-table", action="store_true", help="simulate the statistic's null quantile by tasks")
    ap.add_argument("--draws", type=int, default=1_000_000, help="--null-table: draws a task count")
    ap.add_argument("--sizes", default=",".join(map(str, [*range(4, 17), 24, 32, 48, 64, 128])),
                    help="--null-table: the task counts, comma-separated")
    ap.add_argument("--measures", type=int, default=None, help="--null-table: m (default: the 4 measures)")
    a = ap.parse_args()
    if a.null_table:
        null_table(a.draws, a.measures or len(RATES), a.seed, [int(n) for n in a.sizes.split(",")])
        return
    rng = np.random.default_rng(a.seed)
    contended = {1: a.contended} if a.contended else None
    counts = dict.fromkeys([*OLD_RULES, "now"], 0)
    for _ in range(a.campaigns):
        ref, src = noise_runs(rng, a.tasks, a.pairs, a.sigma, contended)
        rows = pl.Series("other_row", np.arange(ref.height))
        state = rate_state(ref, src, rows, "PAPI_TOT_INS", list(RATES), pl.Series(np.ones(ref.height, bool)))
        now = None
        if state is not None and state.suspect:
            now = {t for s in (state, *state.others) if s.suspect for t, _ in s.outliers}
        for name, named in [*((n, old_rule_names(ref, src, k)) for n, k in OLD_RULES.items()), ("now", now)]:
            counts[name] += named is not None and (not contended or named == {1})
    what = f"named task 1 (x{a.contended})" if contended else "suspect on noise alone"
    print(f"{a.campaigns} campaigns x {a.tasks} tasks x {a.pairs} pairs, sigma {a.sigma}: {what}: "
          + ", ".join(f"{k} {v} ({v / a.campaigns:.1%})" for k, v in counts.items()))


if __name__ == "__main__":
    main()
