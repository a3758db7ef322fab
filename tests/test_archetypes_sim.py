"""Acceptance on simulated multi-run counter campaigns (the simulator's counter model and PMU constraint).

Macro-F1 of the rules with merged (and full) counters against the simulator's ground truth, the same score for
each single run's counter set beside it, and discovery's agreement (kappa) and stability (ARI).
"""
from __future__ import annotations

import pytest

pytest.importorskip("tracelib.simulator.counter_model")

from benchmarks.sim_archetypes import RANKS_PER_SOCKET, classify, macro_f1, simulate  # noqa: E402
from models.archetype_discovery import ArchetypeDiscovery  # noqa: E402
from models.archetypes import BURST_ARCHETYPES, INSUFFICIENT  # noqa: E402
from tracelib.metrics import burst_metrics  # noqa: E402


@pytest.fixture(scope="module")
def campaign():
    return simulate(n_per_kernel=120, seed=7)


def test_campaign_covers_the_burst_archetypes(campaign):
    assert set(campaign["truth"].to_list()) == set(BURST_ARCHETYPES)


def test_merged_counters_score_and_single_runs_beside_them(campaign):
    m, truth = campaign["machine"], campaign["truth"]
    scores = {name: macro_f1(truth, classify(f, m)) for name, f in campaign["frames"].items()}
    assert scores["full"] >= 0.95
    assert scores["merged"] >= 0.95
    singles = [v for k, v in scores.items() if k.startswith("run ")]
    assert len(singles) >= 4
    # no single run's counters decide every archetype: merging is what gets the score
    assert max(singles) < scores["merged"] - 0.3
    undecided = (classify(campaign["frames"]["run 1"], m) == INSUFFICIENT).mean()
    assert undecided > 0.3


def test_discovery_kappa_and_stability(campaign):
    m = campaign["machine"]
    bm = burst_metrics(campaign["frames"]["full"], m, ranks_per_socket=RANKS_PER_SOCKET)
    d = ArchetypeDiscovery(n_clusters=24, machine=m, ranks_per_socket=RANKS_PER_SOCKET, n_bootstrap=4,
                           random_state=1).fit(bm)
    assert d.kappa_ >= 0.8, d.summary()
    assert d.stability_ari_ >= 0.8, d.summary()
