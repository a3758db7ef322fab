"""Issue 22's acceptance on campaigns of every mechanism of the simulator (synthtrace.simulator.mechanisms): each
merge is >= 99.5 % right (bursts >= 10 us matched to their true logical burst), or, only where the place of an
inserted iteration cannot be decided, the span is marked and the verdict is not ``ok``; never ``ok`` below 99 %;
the rotation-symmetric ring and torus keep the numbering as it is; plain campaigns are never refused.

The cases are the benchmark's first seed of each mechanism at its default size and the smallest plain campaigns
the merge at the split commit got wrong (``benchmarks/bench_merge_mechanisms.py``, ``benchmarks/results/
merge_mechanisms.md``): every one fails on that merge except ``completion`` (receives recorded at their post),
kept as a guard. xfail until the merge of issue 22 (merge-core) lands; a harness error is not an expected failure.
"""
from __future__ import annotations

import pytest

from testing.simulator_campaigns import plain_size, run_mechanism

ISSUE = pytest.mark.xfail(strict=False, raises=AssertionError, reason="issue 22: merge-core")
#: (mechanism, slow); seed 0 at the mechanism's default size (8 ranks x 20-30 iterations unless named)
CASES = [
    ("completion", False), ("completion_at_wait", False), ("polling", False), ("extra_inner", False),
    ("missing_inner", False), ("repeated", False), ("extra_varying", False), ("checkpoint", False),
    ("no_callers", False), ("one_site", False), ("varying_rates", False), ("master_worker", True),
    ("pairs8", True), ("single10", True), ("placement", True),
]
#: plain campaigns the split commit's merge got wrong (refused, or below 99.5 %), smallest first
PLAIN_SEEDS = [103, 1, 48, 2, 105, 147]
#: what the merge of issue 22 (merge-core) gets right so far: no xfail mark
PASSING = {"completion", "completion_at_wait", "checkpoint", "ring", 103, 1, 2, 105,
           # merge-align: the work on an arrived message paired by that message, iterations placed by messages
           "torus", "no_callers", "one_site", "varying_rates", "placement", "pairs8", 48, 147,
           # merge-iter: iterations one run has more of placed by the iterations' work, ranks tied by their messages
           "extra_inner", "missing_inner", "repeated", "extra_varying",
           # merge-pieces: the work after a one-message receive paired by that message (gather truth by message k)
           "polling",
           # merge-hub: a task farm's clock a call made as often in both runs, a worker's k-th task its k-th message,
           # results one run lacks unmatched; a tail closed by another wait (single10) paired with the tail
           "master_worker", "single10"}


#: not yet right but honest about it (never `ok` below 99 %): the honesty is asserted, the share expected to fail
HONEST_SHORT: set[str] = set()


def _marks(key, slow: bool = False) -> list:
    return ([] if key in PASSING | HONEST_SHORT else [ISSUE]) + ([pytest.mark.slow] if slow else [])


def _right_or_says_so(o, name: str) -> None:
    """Issue 22's rule: never refused, never ``ok`` below 99 % right; accepted (>= 99.5 % right, or the span of an
    undecidable iteration marked and the verdict not ``ok``), which cases of HONEST_SHORT do not reach yet."""
    assert o.verdict != "refused", o.message
    assert o.honest, f"verdict ok with {o.right:.1%} right"
    if not o.accepted and name in HONEST_SHORT:
        pytest.xfail(f"issue 22: {o.right:.2%} right, verdict {o.verdict} (honest, not accepted yet)")
    assert o.accepted, (f"{o.right:.2%} right ({o.right_span:.2%} with the span's interchangeable bursts, "
                        f"{o.in_span} in the span, marked {o.span_marked}), verdict {o.verdict}")


#: (mechanism, seed, xfail mark or None, slow): run-to-run differences of real clusters added by merge-gen; the
#: first seed at the default size, irecv_any's seed 1 (its ANY_SOURCE receives take other faces in the two runs)
LATER = [("sendrecv", 0, None, False), ("persistent", 0, None, True), ("nb_collective", 0, None, False),
         ("sub_comms", 0, None, True), ("renumbered", 0, None, True), ("irecv_any", 1, None, True),
         ("hybrid_locks", 0, None, True), ("flush_all", 0, None, True), ("inner_counts", 0, None, True)]


@pytest.mark.parametrize("name, seed", [
    pytest.param(n, s, marks=[m for m in (mark, pytest.mark.slow if slow else None) if m], id=f"{n}-s{s}")
    for n, s, mark, slow in LATER])
def test_later_mechanism_merges_right_or_says_so(tmp_path, name, seed):
    _right_or_says_so(run_mechanism(name, seed, tmp_path), name)


@pytest.mark.parametrize("name", [pytest.param(n, marks=_marks(n, slow), id=n) for n, slow in CASES])
def test_mechanism_merges_right_or_says_so(tmp_path, name):
    _right_or_says_so(run_mechanism(name, 0, tmp_path), name)


@pytest.mark.parametrize("name", [pytest.param("ring", marks=_marks("ring"), id="ring"),
                                  pytest.param("torus", marks=_marks("torus", True), id="torus")])
def test_rotation_symmetric_keeps_the_numbering(tmp_path, name):
    o = run_mechanism(name, 0, tmp_path)
    assert o.verdict != "refused", o.message
    assert o.moved < 0.005, f"{o.moved:.1%} of the bursts matched to another task"
    assert o.right >= 0.995, f"{o.right:.2%} right, verdict {o.verdict}"


@pytest.mark.parametrize("seed", [pytest.param(s, marks=_marks(s)) for s in PLAIN_SEEDS])
def test_plain_campaigns_are_merged_right(tmp_path, seed):
    ranks, iterations = plain_size(seed)
    o = run_mechanism("plain", seed, tmp_path, ranks=ranks, iterations=iterations)
    assert o.verdict != "refused", o.message
    assert o.right >= 0.995, f"{o.right:.2%} right, verdict {o.verdict}"


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 2])
def test_inner_iterations_one_run_has_more_are_placed_by_their_work(tmp_path, seed):
    """An inner solver needs one more, one fewer, one more iteration in run 1 at three outer iterations (4 ranks x
    12 outer iterations of 4 inner ones, every inner iteration's work its own, so where the extra one lies is
    decidable). The inner iterations are the clock (the posts back their Waitall's count, as the outer Allreduce's
    one call backs its own) and their place is found by their work for all ranks tied by their messages: every
    burst >= 10 us matched to its true logical burst, verdict ok. Before (b28cf7f: posts never vote where another
    call can): the Allreduce's (12, 12) won a tie with the Waitall's (48, 49), two tasks' within-iteration alignment
    put the extra inner iteration on the wrong side of another: s0 99.25 % `suspect`, s2 99.75 %."""
    o = run_mechanism("inner_counts", seed, tmp_path, ranks=4, iterations=12)
    assert o.right == 1.0 and o.verdict == "ok", (o.right, o.verdict, o.message)
