"""sites26 (review25 M2): whether a merge compares its runs' call sites is decided per run id, not per run name.

A run's name is its trace's stem (an OTF2 archive's folder), so one experiment can hold two runs of one name: the
same stem ingested from two folders into one ``--experiment``. Keyed by name, the two runs' call-site counts folded
into one entry: an Extrae run without caller events and a Score-P run naming its sites by the enclosing region,
both named ``run0``, looked like runs naming their sites alike, the sites entered every signature and the merge
matched next to nothing (mixed25's campaign, the mixed16 case of mergeattack23 P6).
"""
from __future__ import annotations

import shutil
from dataclasses import replace

import pytest

import synthtrace.simulator.mechanisms as mech
from synthtrace.pipelines.cli import main
from synthtrace.tracelib.merge.merge_runs import MergeOptions, merge_runs
from synthtrace.warehouse import Warehouse
from synthtrace.warehouse.merged import merge_inputs
from testing.simulator_campaigns import mechanism_score


@pytest.fixture(scope="module")
def alike(tmp_path_factory) -> tuple[Warehouse, mech.Campaign, str]:
    """One campaign's run 0 traced by Extrae without callers (``extrae/run0.prv``) and its run 1 by Score-P, its
    archive's folder named ``run0`` too (``score-p/run0/traces.otf2``), ingested into one experiment."""
    out = tmp_path_factory.mktemp("sites26")
    spec = replace(mech.campaign("late_trace", 0), late_trace=())
    extrae = mech.simulate(out / "prv", replace(spec, shape=replace(spec.shape, sites="none")))
    score_p = mech.simulate(out / "otf2", replace(spec, trace_format="otf2"))
    camp = out / "campaign"
    (camp / "extrae").mkdir(parents=True)
    for suffix in (".prv", ".pcf", ".row"):
        shutil.copy(extrae.traces[0].with_suffix(suffix), camp / "extrae" / f"run0{suffix}")
    shutil.copytree(score_p.traces[1].parent, camp / "score-p" / "run0")
    assert main(["ingest", str(camp), "--experiment", "alike", "-w", str(out / "wh")]) == 0
    return Warehouse(out / "wh"), extrae, score_p.traces[1].parent.name


def test_one_experiment_can_hold_two_runs_of_one_name(alike):
    wh, _, _ = alike
    names = wh.experiment("alike").run_names
    assert len(names) == 2 and set(names.values()) == {"run0"}, names


def test_two_runs_of_one_name_traced_by_two_tools_are_compared_without_call_sites(alike):
    """Failed first: the sites compared (one entry for both runs), 43 % of the long bursts matched, ``bad``."""
    wh, extrae, run1 = alike
    exp = wh.experiment("alike")
    runs = merge_inputs(exp)
    result = merge_runs(runs, MergeOptions(), "alike")
    assert any("call sites left out" in n for n in result.warnings), result.warnings
    assert set(result.quality.get_column("verdict")) == {"ok"}, result.quality.select("counter", "verdict_reason")
    # the truth names the runs as the simulator wrote them: run 0's trace stem (Extrae), run 1's archive (Score-P)
    simulated = {r: run1 if str(path).endswith(".otf2") else extrae.traces[0].stem
                 for r, path in exp.runs.select("run_id", "source_path").iter_rows()}
    matches = result.matches.with_columns(result.matches.get_column("other_run_id").replace(simulated))
    other = next(r for r in simulated if r != result.reference_run_id)
    right = mechanism_score(extrae.truth, simulated[result.reference_run_id], simulated[other], matches)[0]
    assert right >= 0.995, right
