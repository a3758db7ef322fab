"""Each message end lands in the call of its thread that holds its time (issue 27: the search was rewritten to
gallop within a thread's calls; the answer must stay that of a search among every call)."""
from __future__ import annotations

import numpy as np
import polars as pl

from synthtrace.tracelib.formats.bursts import _containing_call, message_rows


def _reference(ck: np.ndarray, cs: np.ndarray, ce: np.ndarray, mk: np.ndarray, mt: np.ndarray) -> np.ndarray:
    """The call of thread ``mk`` that started last at or before ``mt`` and ends at or after it, by brute force."""
    out = np.full(mk.size, -1, dtype=np.int64)
    for i in range(mk.size):
        started = np.flatnonzero((ck == mk[i]) & (cs <= mt[i]))
        if started.size and mt[i] <= ce[started[-1]]:
            out[i] = started[-1]
    return out


def test_each_time_finds_the_call_holding_it_in_any_order_of_times():
    rng = np.random.default_rng(27)
    for trial in range(400):
        n, n_keys = int(rng.integers(0, 60)), int(rng.integers(1, 5))
        ck = np.sort(rng.integers(0, n_keys, n)).astype(np.int64)
        cs, ce = np.empty(n, np.int64), np.empty(n, np.int64)
        for k in np.unique(ck):  # calls of a thread by start, equal starts and overlaps included
            rows = np.flatnonzero(ck == k)
            starts = np.sort(rng.integers(0, 50, rows.size))
            cs[rows], ce[rows] = starts, starts + rng.integers(0, 8, rows.size)
        m = int(rng.integers(0, 80))
        mk, mt = rng.integers(-1, n_keys + 1, m).astype(np.int64), rng.integers(-3, 60, m).astype(np.int64)
        if trial % 2:  # as placed a part at a time: by thread, then time
            order = np.lexsort((mt, mk))
            mk, mt = mk[order], mt[order]
        assert (_containing_call(ck, cs, ce, mk, mt) == _reference(ck, cs, ce, mk, mt)).all(), trial


def test_messages_of_a_ring_land_in_the_calls_holding_their_times():
    # two threads, each with calls [0, 10], [10, 20], [30, 40]; messages interleaved across the threads
    calls = pl.DataFrame({"appl": [1] * 6, "task": [1, 1, 1, 2, 2, 2], "thread": [1] * 6,
                          "start_ns": [0, 10, 30, 0, 10, 30], "end_ns": [10, 20, 40, 10, 20, 40]})
    messages = pl.DataFrame({
        "s_appl": [1, 1, 1, 1], "s_task": [1, 2, 1, 2], "s_thread": [1, 1, 1, 1], "s_time_ns": [5, 10, 25, 35],
        "r_appl": [1, 1, 1, 1], "r_task": [2, 1, 2, 1], "r_thread": [1, 1, 1, 1], "r_time_ns": [15, 31, 3, 40],
        "size": [8] * 4, "tag": [0] * 4})
    sent, received, _ = message_rows(calls, messages)
    # a time at a boundary belongs to the call starting there; 25 falls between calls
    assert sent.tolist() == [0, 4, -1, 5]
    assert received.tolist() == [4, 2, 3, 2]
