"""review23 item 2: the per-ns leave-one-out test of a count of time leaves out the reference pieces apportioned a
share of the other run's whole unit (share < 1). Such a row's counters are its unit's sums (``Expanded.reference``,
what the source row is compared with) but its duration is the piece's own, so per_ns (the source unit's count times
the duration ratio) would be judged a share-fold off where it is right, biasing the choice against per_ns in
traces with frequent buffer flushes."""
from __future__ import annotations

import numpy as np
import polars as pl

from synthtrace.tracelib.merge.transfer import choose

CYC, INS = "PAPI_TOT_CYC", "PAPI_TOT_INS"


def _pairs(n_whole: int, n_pieces: int) -> tuple[pl.DataFrame, pl.DataFrame, pl.Series]:
    """Pairs of bursts whose cycles follow their time (2 per ns, both runs) and whose instructions do not (the IPC
    varies per burst), then reference pieces of half their unit: counters the unit's sums, duration their own."""
    rng = np.random.default_rng(3)
    n = n_whole + n_pieces
    dur = rng.integers(50_000, 500_000, n)
    ins = (dur * rng.uniform(0.8, 2.4, n)).astype(np.int64)
    keys = {"appl": np.ones(n, np.int32), "task": np.arange(n, dtype=np.int32) % 4 + 1, "thread": np.ones(n, np.int32)}
    src = pl.DataFrame({**keys, "duration_ns": dur, CYC: 2 * dur, INS: ins})
    share = np.r_[np.ones(n_whole), np.full(n_pieces, 0.5)]
    ref = pl.DataFrame({**keys, "duration_ns": (dur * share).astype(np.int64), CYC: 2 * dur, INS: ins})
    return ref, src, pl.Series("share", share)


def test_per_ns_is_judged_on_whole_bursts_only():
    ref, src, share = _pairs(20, 30)
    long = pl.Series([True] * ref.height)
    choice = choose(ref, src, pl.Series("other_row", np.arange(ref.height)), [INS, CYC], long, None,
                    share=share)
    median, _ = choice.tested["per_ns"][CYC]
    assert median < 0.01  # cycles follow time: per_ns is exact on every whole pair
    assert choice.plan(src, "PAPI_REF_CYC", [INS, CYC]).per_ns  # so a count of time goes per ns
