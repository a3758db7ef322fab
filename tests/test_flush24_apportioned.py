"""mergeattack23 P1/P10: a reference piece apportioned a share of the other run's whole unit holds the unit's
average rates, right only where the unit runs at one rate throughout, which the counters both runs recorded cannot
show for the others (cache, branches): an estimate, counted and said as one; pieces the reference's own counters
show ran at other rates are NULL, with their own reason (not "pairs the alignment could not make")."""
from __future__ import annotations

from synthtrace.tracelib.merge.checks import PairSignals, verdict


def _sig(**kw) -> PairSignals:
    return PairSignals(0.0, 0.0, 1.0, None, 0, long_matched=400, long_total=400, **kw)


def test_apportioned_pieces_make_the_verdict_suspect_and_say_so():
    got, why = verdict(_sig(apportioned=16), timing_only=False)
    assert got == "suspect" and "apportioned by work" in why and "16 bursts" in why
    assert verdict(_sig(apportioned=1), timing_only=False) == ("ok", "")  # within the tolerance (0.5 %)


def test_pieces_of_other_rates_have_their_own_reason():
    got, why = verdict(_sig(uneven=16, unpaired=0), timing_only=False)
    assert got == "suspect" and "other rates" in why and "could not make" not in why
