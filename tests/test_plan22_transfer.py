"""mergeattack22 N2 and N4: what the merge transfers when it cannot test it.

N2: two runs sharing no counter (run 0 {TOT_INS, L1_DCM, L2_DCM}, run 1 {TOT_CYC, L3_TCM, BR_MSP}) merged ``ok``
with run 1's cycles copied verbatim: cycles count time, and each run runs its ranks at its own speed (placement, a
slow node, the clock), so the copied cycles carried the other run's speed. A count of time follows the reference
burst's own duration (the other run's rate per ns); with no common counter nothing estimates the error, so ``ok``
means a timing-independent count copied from a pair the logical messages validated, and says "unverified".

N4: with only instructions and cycles in common, no common counter could test a co-variation rescaling, yet one was
chosen (on glue bursts between back-to-back calls, other code than the compute bursts at the same call).
"""
from __future__ import annotations

from dataclasses import replace

import polars as pl
import pytest

import synthtrace.simulator.mechanisms as mech
from synthtrace.tracelib.merge.merge_runs import merge_runs
from testing.simulator_campaigns import read_campaign

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
MIN_NS = 10_000


def _merged(tmp_path, mechanism: str, sets: tuple[tuple[str, ...], ...], seed: int = 1):
    """The merge of ``mechanism``'s campaign with these counter sets, and the reference run's true counters."""
    c = mech.simulate(tmp_path, replace(mech.campaign(mechanism, seed), counter_sets=sets))
    res = merge_runs(read_campaign(c))
    truth = c.truth.filter(pl.col("run_name") == res.reference_run).select(
        pl.col("task").cast(pl.Int32), "burst_seq", *[pl.col(x).alias(f"true_{x}") for x in c.truth.columns
                                                     if x.startswith("PAPI_")])
    return res, res.merged.join(truth, on=["task", "burst_seq"]).filter(pl.col("duration_ns") >= MIN_NS)


def _errors(merged: pl.DataFrame, counter: str) -> pl.Series:
    return merged.select(((pl.col(counter) - pl.col(f"true_{counter}")).abs() / pl.col(f"true_{counter}"))
                         .alias("e")).drop_nulls().get_column("e")


def test_cycles_from_a_run_sharing_no_counter_follow_the_reference_duration(tmp_path):
    """Placement campaign (a slow node per run): run 1's cycles land within 2 % of what the reference burst ran for
    nearly everywhere, and merge_quality says the values are unverified. Before: copied verbatim (the other run's
    speed), ``ok`` with no reason."""
    sets = (("PAPI_TOT_INS", "PAPI_L1_DCM", "PAPI_L2_DCM"), ("PAPI_TOT_CYC", "PAPI_L3_TCM", "PAPI_BR_MSP"))
    res, merged = _merged(tmp_path, "placement", sets)
    e = _errors(merged, "PAPI_TOT_CYC")
    assert e.len() > 1000
    assert float(e.median()) < 0.01, float(e.median())
    q = {r["counter"]: r for r in res.quality.iter_rows(named=True)}
    assert q["PAPI_TOT_CYC"]["method"] == "transferred_per_ns"
    assert q["PAPI_TOT_CYC"]["verdict"] == "suspect"
    for c in ("PAPI_TOT_CYC", "PAPI_L3_TCM", "PAPI_BR_MSP"):
        assert q[c]["verdict_reason"].startswith("unverified"), q[c]
        assert q[c]["estimated_error"] is None


def test_cycles_at_the_reference_duration_are_suspect_whatever_else_is_common(tmp_path):
    """review22: the same untested plan (cycles from a run whose only common counter is instructions, taken per ns
    over the reference burst's duration) was ``ok`` with no reason, where from a run sharing no counter it is
    ``suspect``: no common count of time tests either."""
    sets = (("PAPI_TOT_INS", "PAPI_L1_DCM", "PAPI_L2_DCM"), ("PAPI_TOT_INS", "PAPI_TOT_CYC", "PAPI_BR_MSP"))
    res, _ = _merged(tmp_path, "placement", sets)
    q = {r["counter"]: r for r in res.quality.iter_rows(named=True)}
    assert q["PAPI_TOT_CYC"]["method"] == "transferred_per_ns"
    assert q["PAPI_TOT_CYC"]["verdict"] == "suspect", q["PAPI_TOT_CYC"]
    assert q["PAPI_TOT_CYC"]["verdict_reason"].startswith("unverified: a count of time"), q["PAPI_TOT_CYC"]
    assert q["PAPI_BR_MSP"]["verdict"] == "ok"  # a count per instruction, tested by the common instructions
