"""sites26 (note25 Open 3): the machine-state check's chance of calling a campaign of no machine-state difference
``suspect`` stays near its 1 % over the tasks and the measures judged.

The check judges each task's rate per instruction on up to four measures (core cycles, L1, L2 and last-level misses);
each measure at 1 % made a campaign suspect several times as often on noise alone, and the tasks' robust spread,
estimated from the tasks themselves (their median absolute deviation), is uncertain enough at tens of tasks to put
one beyond the normal quantile far more often than that quantile says. Campaigns here: the reference and the other
run execute the same instructions at the same rates, each burst's counts off by an independent 10 % in each run
(the bursts' own run-to-run variability; LLC misses of one code vary several % a burst).
"""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from testing.noise_campaigns import RATES, noise_runs
from synthtrace.tracelib.merge.noise import rate_state

PAIRS, SIGMA = 20, 0.1


def _state(rng: np.random.Generator, tasks: int, contended: dict[int, float] | None = None):
    """:func:`rate_state` of one campaign of ``tasks`` x ``PAIRS`` matched pairs; ``contended``: task -> factor on
    its last-level misses in the other run."""
    ref, src = noise_runs(rng, tasks, PAIRS, SIGMA, contended)
    return rate_state(ref, src, pl.Series("other_row", np.arange(ref.height)), "PAPI_TOT_INS", list(RATES),
                      pl.Series(np.ones(ref.height, bool)))


@pytest.mark.parametrize("tasks", [8, 16, 64])
def test_campaigns_of_noise_alone_are_rarely_suspect(tasks):
    """Failed first: 16 tasks 52 of 200 campaigns suspect, 64 tasks 34 of 200 (each measure at the normal quantile
    of 1 - 0.01/2n)."""
    rng = np.random.default_rng(tasks)
    suspect = sum(bool(s is not None and s.suspect) for s in (_state(rng, tasks) for _ in range(200)))
    assert suspect <= 6, f"{suspect} of 200 noise-only campaigns suspect"


def test_a_contended_node_among_the_noise_is_still_named():
    """One node's four tasks miss the last-level cache x1.3 as often in the other run: named on that measure."""
    state = _state(np.random.default_rng(5), 64, {t: 1.3 for t in (9, 10, 11, 12)})
    lead = [s for s in (state, *state.others) if s.counter == "PAPI_L3_TCM"][0]
    assert sorted(t for t, _ in lead.outliers) == [9, 10, 11, 12], lead.reason()
    assert state.suspect


def _named(tasks: int, factor: float, seeds: range) -> int:
    """Campaigns of ``seeds`` whose task 3, missing the last-level cache x ``factor`` as often in the other run,
    makes the state suspect and is the one task named on that measure."""
    named = 0
    for seed in seeds:
        state = _state(np.random.default_rng(seed), tasks, {3: factor})
        lead = [s for s in (state, *state.others) if s.counter == "PAPI_L3_TCM"]
        named += bool(state.suspect and lead and [t for t, _ in lead[0].outliers] == [3])
    return named


@pytest.mark.parametrize(("tasks", "factor", "least"), [(8, 2.0, 32), (8, 1.5, 14), (6, 2.0, 24)])
def test_one_contended_task_among_few_is_named(tasks, factor, least):
    """review26 F1: 8 tasks (the LULESH pairs' size) or 6, one contended, in 40 seeded campaigns. The threshold is
    the null quantile of the statistic judged (max |d - median| / robust sigma): t at (n - 1) / 2 degrees of freedom
    was 14.3 robust sigmas at 8 tasks, 26 at 6, for null quantiles of 11.6 and 16.3. Failed first: named in 30, 9
    and 10 of 40 (now 34, 17, 28); at 8 tasks x1.3, 3 of 20 (the noise's own tail at 1 % false leaves no more)."""
    named = _named(tasks, factor, range(40))
    assert named >= least, f"named in {named} of 40 campaigns"
