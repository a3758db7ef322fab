"""The folded carry's memory follows the carried samples, not the declared threads x counter types (attack 17 F5,
tracelib/formats/bursts.py `_folded_carry`): a header declaring 400,000 threads made the fold allocate a slot x
counter table of 8 B per declared thread and counter type (3.8 GB and more) as soon as more than
FOLD_CARRIED_SAMPLES samples were carried. The rows kept and their values are those of the old kernel (its loop is
kept here as the reference)."""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from synthtrace.tracelib.formats import bursts


def _old_fold(carry_sm, open_b, cdest, sm_th, sm_t, sm_c, sm_v, horizon, n_codes, w_th, w_t):
    """The old kernel's answer (its loop, with a dict for its slot x counter table): the kept rows, their values and
    the first sample whose add passed int64 (-1: none)."""
    value = sm_v[carry_sm].tolist()
    key: dict[int, int] = {}
    for i in carry_sm:
        if open_b[i] >= 0 and open_b[i] not in key:
            key[int(open_b[i])] = len(key)
    n_open = len(key)
    waiting = sorted(range(len(w_th)), key=lambda k: (w_th[k], w_t[k]))
    rep: dict[int, int] = {}
    kept = [True] * len(carry_sm)
    for j, i in enumerate(carry_sm):
        t, x = int(sm_th[i]), int(sm_t[i])
        if x >= horizon[t]:
            continue
        if open_b[i] >= 0:
            slot = key[int(open_b[i])]
        elif cdest[i] == -2:
            first = sum(1 for k in waiting if w_th[k] < t)
            lo = first + sum(1 for k in waiting if w_th[k] == t and w_t[k] < x)
            slot = n_open + t + lo
        else:
            continue
        s = slot * n_codes + int(sm_c[i])
        r = rep.get(s)
        if r is None:
            rep[s] = j
        else:
            hold, other = (j, r) if x >= sm_t[carry_sm[r]] else (r, j)
            value[hold] += value[other]
            if not -(2**63) <= value[hold] < 2**63:
                return carry_sm, None, int(i)
            kept[other] = False
            rep[s] = hold
    keep = np.array(kept, dtype=bool)
    return carry_sm[keep], np.array(value, dtype=np.int64)[keep], -1


def _case(rng: np.random.Generator, n_threads: int, n_codes: int, n_sm: int, big: bool):
    """A random chunk's samples and what the assembler would hand the fold: open bursts, waiting entries, times
    with many ties, horizons cutting some samples off; ``big``: values near 2^62, whose sums pass int64."""
    sm_th = rng.integers(0, n_threads, n_sm)
    sm_t = rng.integers(0, 40, n_sm)
    sm_c = rng.integers(0, n_codes, n_sm)
    sm_v = rng.integers(-1000, 1000, n_sm) + (rng.integers(-2, 8, n_sm) << 60 if big else 0)
    n_bursts = int(rng.integers(1, 8))
    open_b = np.where(rng.random(n_sm) < 0.5, rng.integers(0, n_bursts, n_sm), -1)
    cdest = np.where(rng.random(n_sm) < 0.7, -2, -1)
    n_w = int(rng.integers(0, 10))
    w_th = rng.integers(0, n_threads, n_w)
    w_t = rng.integers(0, 40, n_w)
    horizon = rng.integers(20, 45, n_threads)
    carry_sm = np.flatnonzero(rng.random(n_sm) < 0.8)
    return carry_sm, open_b, cdest, sm_th, sm_t, sm_c, sm_v, horizon, n_bursts, w_th, w_t


@pytest.mark.parametrize("big", [False, True], ids=["sums", "int64-passed"])
@pytest.mark.parametrize("seed", range(30))
def test_the_fold_keeps_what_the_old_kernel_kept(seed, big):
    """The same rows kept with the same sums; or, a sum passing int64, the same sample named."""
    rng = np.random.default_rng(seed)
    n_threads, n_codes = int(rng.integers(1, 6)), int(rng.integers(1, 5))
    carry_sm, open_b, cdest, sm_th, sm_t, sm_c, sm_v, horizon, n_bursts, w_th, w_t = _case(
        rng, n_threads, n_codes, int(rng.integers(1, 400)), big)
    rows, values, wrapped = bursts._folded_carry(carry_sm, open_b, cdest, sm_th, sm_t, sm_c, sm_v, horizon, n_bursts,
                                                 n_codes, n_threads, w_th, w_t, 0)
    old_rows, old_values, old_wrapped = _old_fold(carry_sm, open_b, cdest, sm_th, sm_t, sm_c, sm_v, horizon, n_codes,
                                                  w_th, w_t)
    assert wrapped == old_wrapped
    if wrapped < 0:
        assert rows.tolist() == old_rows.tolist()
        assert values.tolist() == old_values.tolist()
        assert sum(values.tolist()) == sum(sm_v[carry_sm].tolist())  # folded, nothing lost


def test_the_fold_allocates_per_carried_sample_not_per_declared_thread_and_counter():
    """A header declaring 200,000 threads, 256 counter types in use, and 70,000 samples carried in one open burst
    of thread 0 (the attacker's case, smaller): the fold allocates ~ the samples. Before: a slot x counter table of
    (open bursts + waiting entries + threads) x counter types x 8 B = 410 MB."""
    n_threads, n_codes, n = 200_000, 256, bursts.FOLD_CARRIED_SAMPLES + 4_464
    sm_th = np.zeros(n, np.int64)
    sm_t = np.arange(n, dtype=np.int64)
    sm_c = np.arange(n, dtype=np.int64) % n_codes
    sm_v = np.ones(n, np.int64)
    open_b = np.zeros(n, np.int64)
    cdest = np.full(n, -3, np.int64)
    horizon = np.full(n_threads, bursts.NEVER - 1, np.int64)
    none = np.empty(0, np.int64)
    args = (np.arange(n, dtype=np.int64), open_b, cdest, sm_th, sm_t, sm_c, sm_v, horizon, 1, n_codes, n_threads,
            none, none, bursts.FOLD_CARRIED_SAMPLES)
    bursts._folded_carry(*args)  # compiled (or loaded) before the count
    tracemalloc.start()
    try:
        rows, values = bursts._folded_carry(*args)[:2]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert rows.tolist() == list(range(n - n_codes, n))  # each counter's latest sample holds its sum
    assert values.tolist() == [n // n_codes + (r % n_codes < n % n_codes) for r in range(n - n_codes, n)]
    # what the kernel allocates: a few words per carried sample and per declared thread, not their product
    assert peak < 64 * n + 16 * n_threads, peak
