"""review25 M1: the partitioned merge's rank correspondence compares the runs' work profiles with call sites left out
when the runs do not name them alike, as the whole merge does (mixed25's rule,
:func:`synthtrace.tracelib.merge.align.sites_compared`).

A renumbered run of a symmetric torus is told only by its tasks' work; traced by Extrae without caller events in one
run and by Score-P (call sites named) in the other, no profile key (call@site) of one run met one of the other in the
partitioned merge, so the work could not tell the numbering.
"""
from __future__ import annotations

import warnings
from dataclasses import replace


import synthtrace.simulator.mechanisms as mech
from synthtrace.tracelib.merge.merge_runs import MergeOptions, merge_runs
from synthtrace.tracelib.merge.partitioned import merge_partitioned
from synthtrace.warehouse import Warehouse
from synthtrace.warehouse.merged import StoredRun, merge_inputs
from testing.simulator_campaigns import ingested


def test_a_renumbered_mixed_campaign_merged_in_groups_numbers_its_tasks_as_the_whole_merge(tmp_path):
    spec = mech.campaign("renumbered_torus", 0)
    extrae = mech.simulate(tmp_path / "prv", replace(spec, shape=replace(spec.shape, sites="none")))
    scorep = mech.simulate(tmp_path / "otf2", replace(spec, trace_format="otf2", renumber_run=-1))
    wh = Warehouse(ingested([scorep.traces[0], extrae.traces[1]], tmp_path / "wh", "mixed"))
    exp = wh.experiment("mixed")
    whole = merge_runs(merge_inputs(exp), MergeOptions(), "mixed")
    assert any("call sites left out" in n for n in whole.warnings), whole.warnings
    sources = [StoredRun(wh, r, exp.run_names[r]) for r in exp.run_ids]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        part = merge_partitioned(sources, tmp_path / "spill", MergeOptions(), "mixed", budget=400)
    pairs = ["run_id", "task", "other_task"]
    cols = [c for c in pairs if c in whole.matches.columns]
    assert set(whole.quality.get_column("verdict")) == {"ok"}, whole.quality
    assert set(part.quality.get_column("verdict")) == {"ok"}, part.quality
    w = whole.matches.select(cols).unique().sort(cols)
    p = part.matches.collect().select(cols).unique().sort(cols)
    assert w.equals(p), (w, p)
