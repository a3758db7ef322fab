"""sites26 (review25 F4): ``other_machine_state`` marks values estimated from a run in another machine state too.

``--estimate`` fills a reference burst the other run left unmatched with the medians of that run's bursts of the same
thread and loose signature first (times the burst's own instructions): where the task ran in another machine state
in that run (a job sharing its node), the estimate is that state's as much as a transferred value is. The campaign
is the simulator's ``shared_node`` (run 1's tasks 1-4 contended), run 1's task 1 traced from iteration 2 on, so
task 1's first bursts in the reference are unmatched and estimated from run 1's contended bursts.
"""
from __future__ import annotations

from dataclasses import replace

import polars as pl

import synthtrace.simulator.mechanisms as mech
from synthtrace.tracelib.merge.merge_runs import MergeOptions, merge_runs
from synthtrace.tracelib.schema import OTHER_STATE
from testing.simulator_campaigns import read_campaign


def test_values_estimated_from_a_run_in_another_machine_state_are_flagged(tmp_path):
    """Failed first: task 1's 23 estimated bursts unflagged (the flag was set before the estimates filled them)."""
    spec = replace(mech.campaign("shared_node", 0), late_trace=(1, 0, 2))
    res = merge_runs(read_campaign(mech.simulate(tmp_path, spec)), MergeOptions(estimate_unmatched=True))
    q = res.quality.filter(pl.col("counter") == "PAPI_L3_TCM").row(0, named=True)
    assert q["verdict"] == "suspect" and q["verdict_reason"].startswith("tasks 1-4"), q
    estimated = res.merged.filter(pl.col("estimated") & pl.col("PAPI_L3_TCM").is_not_null())
    contended = pl.col("task").is_in([1, 2, 3, 4])
    assert estimated.filter(pl.col("task") == 1).height >= 10, estimated.group_by("task").len()
    assert estimated.filter(contended).get_column(OTHER_STATE).all()
    assert not estimated.filter(~contended).get_column(OTHER_STATE).any()
    # no burst of an uncontended task is flagged, transferred or estimated
    assert not res.merged.filter(~contended).get_column(OTHER_STATE).any()
