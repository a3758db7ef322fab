"""verdict24: counters transferred from a run in another machine state are ``suspect`` (mergeattack23 P2, P7).

Two runs of one program on one machine state execute a burst's instructions at the same cycles per instruction,
give or take their nodes' clocks and placement (the LULESH 4+4 / 7+1 pair: every task within 3 % of the others
once summed over its bursts). A run whose tasks, some or all, run at another rate (a job sharing their node,
another build or data layout, huge pages off) also misses caches and memory otherwise: what is transferred from it
is that state's. The verdict read neither: ``ok`` with L3 misses 60 % off (P7), ``ok`` at 87 % right (P2).
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import polars as pl
import pytest

import synthtrace.simulator.mechanisms as mech
from synthtrace.tracelib.merge.noise import machine_state
from testing.simulator_campaigns import merge_campaign
from tests.test_verdict23_rules import _verdicts


def test_tasks_sharing_their_node_with_another_job_are_named(tmp_path, monkeypatch):
    """Run 1's tasks 1-4 (of 16) share their node with a memory-hungry job: ~x1.2 the cycles and more misses per
    instruction. Every burst is still placed right; the values transferred to those tasks' bursts are the contended
    state's. Failed first: ``ok``."""
    seen = _verdicts(monkeypatch)
    o = merge_campaign(mech.simulate(tmp_path, mech.campaign("shared_node", 0)))
    assert o.right >= 0.995, o.right
    sig, (v, why) = seen[0]
    assert o.verdict == "suspect" and v == "suspect", (o.verdict, why)
    assert why.startswith("tasks 1-4 (4 of 16)") and "another machine state" in why, why
    assert [t for t, _ in sig.machine.outliers] == [1, 2, 3, 4]


def test_the_same_campaign_uncontended_stays_ok(tmp_path, monkeypatch):
    """Control: the same runs without the other job (4 ranks per node, the nodes' clocks as ever): ``ok``."""
    seen = _verdicts(monkeypatch)
    o = merge_campaign(mech.simulate(tmp_path, replace(mech.campaign("shared_node", 0), plans=())))
    assert o.verdict == "ok", [w for _, w in seen]
    assert not seen[0][0].machine.suspect


def _pairs(task_ratio: dict[int, float], seed: int = 0, per_task: int = 40) -> pl.DataFrame:
    """Long pairs whose other run's cycles per instruction are ``task_ratio[task]`` x the reference's (each pair
    within 1 % noise), instructions as in the reference."""
    rng = np.random.default_rng(seed)
    rows = []
    for task, ratio in task_ratio.items():
        w = rng.uniform(1e5, 1e7, per_task)
        c = w * rng.uniform(0.5, 2.0, per_task)
        rows.append(pl.DataFrame({"appl": 1, "task": task, "w": w, "c": c, "o_w": w,
                                  "o_c": c * ratio * np.exp(rng.normal(0, 0.01, per_task))}))
    return pl.concat(rows)


@pytest.mark.parametrize("clocks", [(1.04, 0.96), (1.03, 0.98, 1.0, 0.97, 1.02, 1.01, 0.99, 1.05)])
def test_node_clocks_stay_within_the_campaign_s_spread(clocks):
    """Nodes of 8 tasks, each at its own clock in the other run (+-5 %: turbo, DVFS, placement): no task stands out,
    whichever the number of nodes."""
    state = machine_state(_pairs({t: clocks[(t - 1) // 8] for t in range(1, 8 * len(clocks) + 1)}), "PAPI_TOT_CYC")
    assert state is not None and not state.suspect, state


def test_every_task_at_another_rate_is_another_build():
    """mergeattack23 P7: the same instructions at x1.15 the cycles per instruction on every task (another build's
    data layout, huge pages off): no task stands out, the run as a whole does."""
    state = machine_state(_pairs({t: 1.15 * (1 + 0.02 * math.sin(t)) for t in range(1, 17)}), "PAPI_TOT_CYC")
    assert state.suspect and not state.outliers
    assert "on every task" in state.reason() and "x1.15" in state.reason(), state.reason()


def test_counts_of_retired_instructions_stay_ok_in_another_machine_state(tmp_path):
    """review24 F5: the machine state moves cache and memory counts, not how many instructions, branches, loads or
    stores retire. In the same contended campaign the branch instructions transferred from run 1 keep ``ok`` while
    its misses are ``suspect``. Failed first: PAPI_BR_INS ``suspect`` with the misses."""
    from synthtrace.tracelib.merge.merge_runs import merge_runs

    got = {}

    def merged(runs):
        got["result"] = merge_runs(runs)
        return got["result"]

    merge_campaign(mech.simulate(tmp_path, mech.campaign("shared_node", 0)), merged)
    q = got["result"].quality.filter(pl.col("method") != "recorded")
    verdicts = dict(zip(q.get_column("counter").to_list(), q.get_column("verdict").to_list()))
    assert verdicts["PAPI_BR_INS"] == "ok", verdicts
    assert verdicts["PAPI_L3_TCM"] == "suspect", verdicts
