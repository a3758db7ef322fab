"""Sums over many threads' or bursts' times (ns) and counts: Polars sums Int64 columns in Int64 and wraps silently
past 2^63 (attack 18 F1: six bursts of 2^61 ns each summed to a negative time). A trace of 2^20 threads, the
Paraver cap, passes 2^63 ns with 2.4 hours of bursts per thread."""
from __future__ import annotations

import polars as pl

#: below this a float64 sum is far enough from 2^63 that the exact Int64 sum did not wrap
_EXACT_BELOW = 9.2e18


def float_sum(expr: pl.Expr) -> pl.Expr:
    """The sum of ``expr`` in float64 (relative error ~1e-16, never wrapped): for totals that feed ratios, shares
    and seconds."""
    return expr.cast(pl.Float64).sum()


def exact_sum(expr: pl.Expr) -> pl.Expr:
    """The sum of the Int64 ``expr``, exact, or NULL where it passes int64 (never a wrapped value)."""
    return pl.when(float_sum(expr).abs() < _EXACT_BELOW).then(expr.sum())
