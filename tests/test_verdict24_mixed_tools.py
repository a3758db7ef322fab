"""verdict24: one program traced by Extrae in one run and by Score-P in another merges (mergeattack23 P6).

Extrae's communication records name no communicator (the point-to-point calls' ``comm`` is NULL), Score-P's OTF2
records name the world communicator's definition, so every logical message's identity (comm, sender, receiver, tag,
k) differed between the runs: the merge refused the campaign as "not the same program or decomposition" (0 % of the
logical messages agreed). The run's point-to-point communicators are now named as the reference names them
(:func:`synthtrace.tracelib.merge.communicators.tool_neutral`).
"""
from __future__ import annotations

from dataclasses import replace

import pytest

import synthtrace.simulator.mechanisms as mech
from synthtrace.pipelines.cli import main
from synthtrace.warehouse import Warehouse
from synthtrace.warehouse.sql import query
from testing.simulator_campaigns import ingested, merge_campaign


@pytest.fixture(scope="module")
def both_tools(tmp_path_factory) -> tuple[mech.Campaign, mech.Campaign]:
    """One campaign (every rank traced from its start) written twice, as Extrae's Paraver traces and as Score-P's
    OTF2 archives: the same runs, message for message."""
    spec = replace(mech.campaign("late_trace", 0), late_trace=())
    out = tmp_path_factory.mktemp("tools")
    return mech.simulate(out / "prv", spec), mech.simulate(out / "otf2", replace(spec, trace_format="otf2"))


@pytest.mark.parametrize("reference", ["extrae", "score-p"])
def test_runs_traced_by_extrae_and_score_p_merge(both_tools, reference):
    """Run 0 from one tool, run 1 from the other (either way round): merged, every burst placed. Failed first:
    refused ("cannot tell which task is which: 0% of their logical messages agree")."""
    prv, otf2 = both_tools
    first, second = (prv, otf2) if reference == "extrae" else (otf2, prv)
    o = merge_campaign(mech.Campaign(prv.spec, [first.traces[0], second.traces[1]], prv.truth, prv.counters))
    assert o.verdict == "ok", (o.verdict, o.message)
    assert o.right >= 0.995, o.right
    assert "traced by another tool" in o.message


def test_an_ingested_mixed_campaign_merges(both_tools, tmp_path):
    """The same through ``synthtrace ingest`` and ``synthtrace merge``: the warehouse keeps the messages logical
    (Extrae's point-to-point communicator stored as -1, Score-P's as its id). Failed first: exit 2, refused
    ("cannot tell which task is which")."""
    prv, otf2 = both_tools
    w = ingested([prv.traces[0], otf2.traces[1]], tmp_path, "mixed")
    assert main(["merge", "mixed", "-w", str(w)]) == 0
    verdicts = query(Warehouse(w), "select verdict from merge_quality").column("verdict").to_pylist()
    assert verdicts and set(verdicts) == {"ok"}, verdicts
