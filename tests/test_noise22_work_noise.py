"""noise22: a matched pair's work measured against the campaign's own run-to-run noise (mergeattack21 M1, M2).

Two runs of one program on one input retire the same instructions in the same burst (within < 1 %); a burst whose
instructions differ far beyond that does other work in each run (dynamic scheduling), and its merged values are
another piece of work's. Before, only pairs off by more than x1.5 in work *and* rate counted (checks.MISFIT_LOG), so
such campaigns were merged `ok`."""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from synthtrace.tracelib.merge.checks import PairSignals, verdict
from synthtrace.tracelib.merge.noise import work_noise
from testing.simulator_campaigns import run_mechanism


def _pairs(rng: np.random.Generator, moved: dict[tuple[int, int], float], n: int = 200) -> pl.DataFrame:
    """Long matched pairs of 4 tasks x 2 threads, ``n`` each: counting noise (0.3 % sigma), and on the threads
    ``moved`` names that share of their pairs doing other work (x0.7-x1.4)."""
    rows = []
    for task in range(1, 5):
        for thread in (1, 2):
            dw = rng.normal(0.0, 0.003, n)
            k = int(moved.get((task, thread), 0.0) * n)
            dw[:k] = rng.choice([-1, 1], k) * rng.uniform(0.15, 0.35, k)
            rows.append(pl.DataFrame({"appl": 1, "task": task, "thread": thread, "dw": dw}))
    return pl.concat(rows)


def test_pairs_beyond_the_campaigns_noise_are_named_with_their_threads():
    rng = np.random.default_rng(1)
    healthy = work_noise(_pairs(rng, {}))
    assert healthy is not None and healthy.off == 0 and not healthy.suspect
    # OpenMP workers of a dynamically scheduled loop: most of their bursts hold other chunks in each run
    ompd = work_noise(_pairs(rng, {(t, 2): 0.6 for t in range(1, 5)}))
    assert ompd is not None and ompd.suspect and ompd.threaded
    assert 0.25 < ompd.share < 0.35, ompd.share
    assert ompd.where.startswith("task ") and "thread 2" in ompd.where and "thread 1" not in ompd.where
    sig = PairSignals(0.0, 0.0, 1.0, 1.0, 0, long_matched=1600, work_noise=ompd)
    v, why = verdict(sig, False)
    assert v == "suspect" and "schedule(dynamic)" in why and "task 1 thread 2" in why, why
    # a few ranks' jobs handed out by arrival (no OpenMP): named as tasks
    farm = work_noise(_pairs(rng, {(2, 1): 0.2, (3, 1): 0.1}))
    assert farm is not None and farm.suspect and not farm.threaded
    assert farm.where.startswith("task 2 thread 1"), farm.where


def test_every_bursts_work_moving_is_no_noise_to_hide_behind():
    """A campaign whose every pair differs by tens of percent (the simulator's work_sigma 0.3) has no quiet quarter:
    its scale is large and no pair stands out, but the median pair alone says the work per burst does not repeat."""
    rng = np.random.default_rng(2)
    p = pl.DataFrame({"appl": 1, "task": rng.integers(1, 5, 2000), "thread": 1, "dw": rng.normal(0.0, 0.42, 2000)})
    n = work_noise(p)
    assert n is not None and n.irreproducible and n.suspect
    assert "does not repeat" in n.reason()


@pytest.mark.parametrize("name, seed, ranks, iterations, where", [
    # M1: a master hands the next job to whichever worker asked (Recv(ANY_SOURCE)): a worker's k-th job burst is
    # another job in each run
    ("master_worker", 2, 5, 12, "arrival order"),
    # M2: OpenMP worker threads whose share of a parallel region's work differs from run to run (dynamic schedule)
    ("hybrid", 0, 4, 12, "schedule(dynamic)"),
])
def test_work_that_moves_between_runs_is_not_merged_ok(tmp_path, name, seed, ranks, iterations, where):
    """Before: `ok` on every counter (misfit 0: no pair off by x1.5 in work and rate)."""
    from synthtrace.tracelib.merge.merge_runs import merge_runs
    from testing.simulator_campaigns import read_campaign, simulated

    res = merge_runs(read_campaign(simulated(name, seed, tmp_path, ranks=ranks, iterations=iterations)))
    q = res.quality.filter(pl.col("method") != "recorded")
    assert set(q.get_column("verdict")) == {"suspect"}, q.select("counter", "verdict", "verdict_reason").rows()
    why = q.get_column("verdict_reason")[0]
    assert "moves between the runs" in why and where in why and "another piece of work" in why, why


def test_a_healthy_campaign_stays_ok(tmp_path):
    """A halo on a random graph, Testsome between interior chunks (arrival decides what completes), OS noise and
    placement: the work of every burst repeats, the verdict stays `ok`."""
    o = run_mechanism("completion", 0, tmp_path, ranks=8, iterations=20)
    assert o.right == 1.0 and o.verdict == "ok", (o.right, o.verdict, o.message)
