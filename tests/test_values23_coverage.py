"""values23, mergeattack22 N5: merge_quality's coverage of a transferred counter counted matches, not values (a
counter recorded only part of the time: multiplexed counter sets, a rank without counters)."""
from __future__ import annotations

import polars as pl
import pytest

from synthtrace.tracelib.merge.merge_runs import MergeOptions, RunTables, merge_runs
from testing.merge_campaigns import make_runs

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
MIN_NS = 10_000


def _part_time_runs(seed: int) -> list[RunTables]:
    """Two runs of one halo program; the other run records BR_MSP only part of the time: never on task 3 (a rank
    whose counters failed) and, as Extrae's multiplexed counter sets alternate, not in odd iterations' bursts
    after the world collective (its bursts from every other Allreduce on)."""
    runs = make_runs(seed=seed, n_tasks=4, n_iters=40, n_runs=2, p_swap=0.0,
                     counter_sets=[["PAPI_TOT_INS", "PAPI_TOT_CYC", "PAPI_L1_DCM"],
                                   ["PAPI_TOT_INS", "PAPI_TOT_CYC", "PAPI_L1_DCM", "PAPI_BR_MSP"]])
    src = runs[1].bursts
    colls = (pl.col("mpi_call") == "MPI_Allreduce").cum_sum().over("task", "thread")
    off = (pl.col("task") == 3) | (colls % 2 == 1)
    src = src.with_columns(pl.when(off).then(None).otherwise(pl.col("PAPI_BR_MSP")).alias("PAPI_BR_MSP"))
    return [RunTables(runs[0].run_id, runs[0].run_name, runs[0].bursts, runs[0].mpi_calls),
            RunTables(runs[1].run_id, runs[1].run_name, src, runs[1].mpi_calls)]


@pytest.mark.parametrize("estimate", [False, True])
def test_coverage_counts_values_not_matches(estimate):
    """mergeattack22 N5: a counter the other run recorded only part of the time is NULL on about 60 % of the
    reference bursts though nearly all are matched; merge_quality's coverage and coverage_long say the share that
    got a value (they said ~1, the match rate), and with estimates, coverage + estimated_share is the share of
    bursts with any value (it exceeded 1)."""
    res = merge_runs(_part_time_runs(3), MergeOptions(estimate_unmatched=estimate))
    q = res.quality.filter(pl.col("counter") == "PAPI_BR_MSP").row(0, named=True)
    m = res.merged
    assert q["match_rate"] > 0.8
    long = pl.col("duration_ns") >= MIN_NS
    recorded = pl.col("PAPI_BR_MSP").is_not_null() & ~pl.col("estimated")
    got = m.select(recorded.mean().alias("all"), recorded.filter(long).mean().alias("long"),
                   pl.col("PAPI_BR_MSP").is_not_null().mean().alias("any")).row(0, named=True)
    assert 0.2 < got["all"] < q["match_rate"] - 0.2, (q, got)
    assert q["coverage"] == pytest.approx(got["all"]), (q, got)
    assert q["coverage_long"] == pytest.approx(got["long"]), (q, got)
    assert q["coverage"] + q["estimated_share"] == pytest.approx(got["any"]), (q, got)
    if estimate:
        assert got["any"] > 0.9
