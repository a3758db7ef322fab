"""contention25: a node sharing its sockets with another job while the nodes' clocks spread (mergeattack23 P2), and
merged_bursts' flag of the bursts whose values are another machine state's.

A node's clock (DVFS, turbo, another clock setting) scales the cycles per instruction of its ranks, not how often
they miss the caches: where the clocks move a contended node's cycles per instruction back into the other nodes'
spread (mergeattack23 contention64 seed 1: x1.10 contended, x0.92 in the reference), a cache counter both runs
recorded still shows the other job's memory traffic. The runs here are the simulator's ``shared_node`` campaign
(run 1's tasks 1-4, one node of 4, contended: ~x1.2 the cycles and more misses per instruction) recording
last-level-cache misses in both runs, each node's core cycles then scaled by its clock in that run.
"""
from __future__ import annotations

from dataclasses import replace

import polars as pl
import pytest

import synthtrace.simulator.mechanisms as mech
from synthtrace.tracelib.merge.merge_runs import MergeOptions, RunTables, merge_runs
from synthtrace.tracelib.schema import OTHER_STATE
from synthtrace.warehouse.layout import Warehouse
from synthtrace.warehouse.sql import query
from testing.simulator_campaigns import merge_campaign
from testing.traces import LULESH_A, LULESH_B
from tests.test_verdict23_rules import _verdicts

#: both runs record last-level-cache misses; run 1 adds what the reference lacks (a count of retired branch
#: instructions among them, which no machine state moves)
SETS = (("PAPI_TOT_INS", "PAPI_TOT_CYC", "PAPI_L3_TCM", "PAPI_L1_DCM", "PAPI_SR_INS"),
        ("PAPI_TOT_INS", "PAPI_TOT_CYC", "PAPI_L3_TCM", "PAPI_BR_MSP", "PAPI_L2_DCM", "PAPI_BR_INS"))
#: each node's cycles factor per run (4 tasks per node): node 0 (tasks 1-4) at x1.23 in the reference, the
#: contended run's ~x1.2 on those tasks, so their cycles per instruction agree between the runs within the other
#: nodes' +-4 % spread
HIDING = ((1.23, 0.97, 1.03, 1.00), (1.00, 1.04, 0.96, 1.02))
#: the same nodes' clocks, node 0 as the others
PLAIN = ((1.01, 0.97, 1.03, 1.00), (1.00, 1.04, 0.96, 1.02))


def _campaign(tmp_path, contended: bool = True):
    spec = replace(mech.campaign("shared_node", 0), counter_sets=SETS)
    return mech.simulate(tmp_path, spec if contended else replace(spec, plans=()))


def _clocked(clocks):
    """``merge(runs)`` with each run's core cycles of node ``(task - 1) // 4`` scaled by ``clocks[run][node]``."""
    def merge(runs):
        scaled = []
        for run, factors in zip(runs, clocks):
            node = (pl.col("task") - 1) // 4
            factor = pl.lit(1.0)
            for n, f in enumerate(factors):
                factor = pl.when(node == n).then(f).otherwise(factor)
            cyc = (pl.col("PAPI_TOT_CYC") * factor).round().cast(run.bursts.schema["PAPI_TOT_CYC"])
            scaled.append(replace(run, bursts=run.bursts.with_columns(cyc)))
        return merge_runs(scaled)
    return merge


def test_a_contended_node_inside_the_clock_spread_is_named_by_its_misses(tmp_path, monkeypatch):
    """Tasks 1-4 run at the reference's cycles per instruction (x1.23 contended over x1.23 clocked) but miss the
    last-level cache otherwise: their transferred cache and memory counters are the contended state's. Failed
    first: ``ok`` (the cycles per instruction alone, within the nodes' spread)."""
    seen = _verdicts(monkeypatch)
    o = merge_campaign(_campaign(tmp_path), _clocked(HIDING))
    assert o.right >= 0.995, o.right
    sig, (v, why) = seen[0]
    assert v == "suspect" and o.verdict == "suspect", why
    assert why.startswith("tasks 1-4 (4 of 16)") and "misses per instruction (PAPI_L3_TCM)" in why, why
    assert not any(t in {1, 2, 3, 4} for t, _ in _cycle_outliers(sig)), "the cycles alone name them"


def _cycle_outliers(sig):
    """The cycles-per-instruction outliers of the judged pairs (what the merge before read alone): the cycles'
    state among the measures judged (review25 F3: it must have been judged, not skipped)."""
    cycles = [s for s in (sig.machine, *sig.machine.others) if s.measure == "cycles per instruction"]
    assert len(cycles) == 1, "the cycles per instruction were not judged"
    return cycles[0].outliers


def test_the_same_nodes_uncontended_stay_ok(tmp_path, monkeypatch):
    """Control: the same runs without the other job, the nodes' clocks +-4 %: ``ok``, no burst flagged."""
    seen = _verdicts(monkeypatch)
    got = {}

    def merge(runs):
        got["result"] = _clocked(PLAIN)(runs)
        return got["result"]

    o = merge_campaign(_campaign(tmp_path, contended=False), merge)
    assert o.verdict == "ok", [w for _, w in seen]
    assert not got["result"].merged.get_column(OTHER_STATE).any()


def test_merged_bursts_flag_the_bursts_another_machine_state_supplied(tmp_path, run_cli):
    """review24 F5's rest (note24 Open 2): the machine-state verdict names the tasks, and merged_bursts marks their
    bursts, so a query can leave them out: ``other_machine_state`` is set on tasks 1-4's bursts that got run 1's
    cache counters, on no other burst. Failed first: no such column (QueryError)."""
    c = mech.simulate(tmp_path, mech.campaign("shared_node", 0))
    wh = tmp_path / "wh"
    assert run_cli("ingest", *c.traces, "--experiment", "x", "-w", wh)[0] == 0
    code, out, err = run_cli("merge", "x", "-w", wh)
    assert code == 0, err
    got = pl.from_arrow(query(Warehouse(wh), f"""SELECT task, {OTHER_STATE} AS flagged,
        PAPI_L3_TCM IS NOT NULL AS valued, count(*) AS n FROM merged_bursts GROUP BY ALL"""))
    flagged = got.filter(pl.col("flagged"))
    assert set(flagged.get_column("task").to_list()) == {1, 2, 3, 4}, got
    assert flagged.get_column("valued").all()  # a burst left NULL carries no other state's value
    missed = got.filter(pl.col("task").is_in([1, 2, 3, 4]) & pl.col("valued") & ~pl.col("flagged"))
    assert missed.height == 0, missed


def test_counts_of_retired_instructions_alone_flag_no_burst(tmp_path):
    """A run in another machine state that supplies only counts of retired instructions (branches here) supplies
    values no machine state moves: no burst is flagged (review24 F5)."""
    sets = (SETS[0], ("PAPI_TOT_INS", "PAPI_TOT_CYC", "PAPI_L3_TCM", "PAPI_BR_INS"))
    spec = replace(mech.campaign("shared_node", 0), counter_sets=sets)
    got = {}

    def merge(runs):
        got["result"] = merge_runs(runs)
        return got["result"]

    merge_campaign(mech.simulate(tmp_path, spec), merge)
    q = got["result"].quality.filter(pl.col("method") != "recorded")
    assert set(q.get_column("verdict")) == {"ok"}, q.select("counter", "verdict", "verdict_reason").rows()
    assert not got["result"].merged.get_column(OTHER_STATE).any()


@pytest.mark.skipif(not LULESH_B.is_file(), reason="real traces not found")
def test_lulesh_placed_otherwise_keeps_reference_cycles_per_ns_unflagged(monkeypatch):
    """The real LULESH pair (ranks 7+1 over the sockets in the reference, 4+4 in the other run), the reference without
    its reference cycles, last-level-cache misses in common: the other run misses x0.82 as often per instruction on
    every task (fewer ranks share each L3; task 8, alone on its socket in the reference, x1.5), another machine state
    for its cache counters. Its reference cycles are
    transferred per ns (the nominal clock over the reference burst's own duration), which no machine state moves:
    right within 1 %, ``ok`` and no burst flagged."""
    from synthtrace.tracelib.formats.paraver.reader import ParaverTrace

    def read(path, run_id: str) -> RunTables:
        b, c, _ = ParaverTrace(path).read_tables(run_id)
        return RunTables(run_id, path.stem, b, c)

    full, src = read(LULESH_B, "B"), read(LULESH_A, "A")
    ref = RunTables(full.run_id, full.run_name, full.bursts.drop("PAPI_REF_CYC"), full.mpi_calls)
    seen = _verdicts(monkeypatch)
    res = merge_runs([src, ref], MergeOptions(reference=full.run_name))
    state = seen[0][0].machine
    assert state.suspect and state.counter == "LONGEST_LAT_CACHE:MISS" and state.shift > 0.15, state
    assert [t for t, _ in state.outliers] == [8], state  # the rank alone on its socket in the reference
    q = res.quality.filter(pl.col("counter") == "PAPI_REF_CYC").row(0, named=True)
    assert q["method"] == "transferred_per_ns" and q["verdict"] == "ok", q
    keys = ["appl", "task", "thread", "burst_seq"]
    j = res.merged.join(full.bursts.select(*keys, pl.col("PAPI_REF_CYC").alias("t")), on=keys).filter(
        (pl.col("duration_ns") >= 10_000) & pl.col("PAPI_REF_CYC").is_not_null())
    assert j.select(((pl.col("PAPI_REF_CYC") - pl.col("t")).abs() / pl.col("t")).median()).item() <= 0.01
    assert not res.merged.get_column(OTHER_STATE).any()


def test_a_task_with_few_misses_is_not_judged_on_them():
    """A task that misses the cache a few times per burst (a rank doing little memory work: tens of misses in all)
    differs between runs by its counting noise alone (1/sqrt(count): ~20 %), not by its machine state; the other
    tasks' sums of 10^5 misses agree within 1 %. Only counts large enough to show a few percent are judged.
    Failed first: task 16 named ('run at x1.200 the reference's misses per instruction')."""
    import numpy as np

    from synthtrace.tracelib.merge.noise import machine_state

    rng = np.random.default_rng(3)
    rows = []
    for task in range(1, 17):
        w = rng.uniform(1e6, 2e6, 10)
        rate = 3e-6 if task == 16 else 1e-2  # misses per instruction
        rows.append(pl.DataFrame({"appl": 1, "task": task, "w": w, "c": rng.poisson(w * rate).astype(float),
                                  "o_w": w, "o_c": rng.poisson(w * rate).astype(float)}))
    pairs = pl.concat(rows).filter((pl.col("c") > 0) & (pl.col("o_c") > 0))
    state = machine_state(pairs, "PAPI_L3_TCM", "misses per instruction")
    assert state is not None and not state.suspect, state.reason()
