"""Sums over many threads' or bursts' times (ns), bytes and counts: Polars sums Int64 (and Int32) columns in their
own type and wraps silently past it (attack 18 F1: six bursts of 2^61 ns each summed to a negative time; attack 19
F2, F11: one thread's sent bytes, or its overlapping bursts, wrapped in the per-thread sum before the total). A
trace of 2^20 threads, the Paraver cap, passes 2^63 ns with 2.4 hours of bursts per thread.

Every level of a sum is a :func:`float_sum` (exact for whole numbers below 2^53: 104 days in ns), and a stored
Int64 total or extreme is :func:`exact_sum` or :func:`as_int` of it: exact, or NULL past int64."""
from __future__ import annotations

import polars as pl

#: below this a float64 sum is far enough from 2^63 that the exact Int64 sum did not wrap
_EXACT_BELOW = 9.2e18


def float_sum(expr: pl.Expr) -> pl.Expr:
    """The sum of ``expr`` in float64 (relative error ~1e-16, never wrapped): for totals that feed ratios, shares
    and seconds, and for sums of a thread's records that are summed again."""
    return expr.cast(pl.Float64).sum()


def exact_sum(expr: pl.Expr) -> pl.Expr:
    """The sum of ``expr`` (Int64, or Float64 holding whole numbers: a :func:`float_sum` per thread) as an exact
    Int64, or NULL where it or a term passes int64 (never a wrapped value)."""
    within = (float_sum(expr).abs() < _EXACT_BELOW) & (expr.cast(pl.Float64).abs().max().fill_null(0.0) < _EXACT_BELOW)
    return pl.when(within).then(expr.cast(pl.Int64, strict=False).sum())


def as_int(expr: pl.Expr) -> pl.Expr:
    """A whole number held as float64 (a :func:`float_sum`, its maximum) as Int64, NULL past int64."""
    return pl.when(expr.abs() < _EXACT_BELOW).then(expr.cast(pl.Int64, strict=False))
