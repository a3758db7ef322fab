"""MPI events of a parsed chunk grouped with what describes them: each MPI entry with the collective sizes, root,
communicator and caller its thread records at the same time (:func:`mpi_rows`), and a hash factorization of value
pairs (:func:`factorize_pairs`) to name calls and call sites once per distinct pair."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from synthtrace.tracelib.errors import TraceFormatError
from synthtrace.tracelib.formats.collectives import first_bad_size, size_reason
from synthtrace.tracelib.jit import cached_njit
from synthtrace.tracelib.formats.paraver.event_types import (
    CALLER_LINE_TYPE, CALLER_TYPE, COLLECTIVE_INFO_TYPES, INFO_TYPES,
                                                    MPI_EVENT_TYPES)

_MPI_MIN, _MPI_MAX = MPI_EVENT_TYPES[0], MPI_EVENT_TYPES[-1]
_SIZES_MIN, _SIZES_MAX = COLLECTIVE_INFO_TYPES[0], COLLECTIVE_INFO_TYPES[-1]
_N_INFO = len(INFO_TYPES)  # info columns: the collective types in order, then the caller and its line


@cached_njit
def _flush_group(head: int, nxt: np.ndarray, g_info: np.ndarray, g_has: int, tid: int, info: np.ndarray,
                 has: np.ndarray) -> None:
    r = head
    while r >= 0:
        for c in range(info.shape[1]):
            info[r, c] = g_info[tid, c]
        has[r] = g_has
        r = nxt[r]


@cached_njit
def mpi_rows(th: np.ndarray, t: np.ndarray, ty: np.ndarray, val: np.ndarray, n_threads: int):
    """MPI call events among the kept events (file order) and what the same thread says at the same time.

    Returns ``(rows, info, has)``: indices of the MPI call events (types 50000001-50000005), the first value of
    each :data:`~synthtrace.tracelib.formats.paraver.event_types.INFO_TYPES` type among the events of the same thread
    and
    time in this block (int64 [n, 6]),
    and a bit mask of the info columns present (uint8 [n]).
    """
    n = th.shape[0]
    # every MPI row is written by the flush of its group: none of these needs filling first
    rows = np.empty(n, dtype=np.int64)
    info = np.empty((n, _N_INFO), dtype=np.int64)
    has = np.empty(n, dtype=np.uint8)
    nxt = np.empty(n, dtype=np.int64)  # next MPI row of the same group, -1 after its last
    cur_t = np.full(n_threads, -1, dtype=np.int64)  # time of each thread's current group
    head = np.full(n_threads, -1, dtype=np.int64)
    tail = np.full(n_threads, -1, dtype=np.int64)
    g_info = np.zeros((n_threads, _N_INFO), dtype=np.int64)
    g_has = np.zeros(n_threads, dtype=np.int64)
    m = 0
    for i in range(n):
        k = th[i]
        if t[i] != cur_t[k]:
            _flush_group(head[k], nxt, g_info, g_has[k], k, info, has)
            cur_t[k] = t[i]
            head[k] = -1
            tail[k] = -1
            g_has[k] = 0
        typ = ty[i]
        if _MPI_MIN <= typ <= _MPI_MAX:
            rows[m] = i
            nxt[m] = -1
            if tail[k] >= 0:
                nxt[tail[k]] = m
            else:
                head[k] = m
            tail[k] = m
            m += 1
        else:
            c = -1
            if _SIZES_MIN <= typ <= _SIZES_MAX:
                c = typ - _SIZES_MIN
            elif typ == CALLER_TYPE:
                c = _N_INFO - 2
            elif typ == CALLER_LINE_TYPE:
                c = _N_INFO - 1
            if c >= 0 and not (g_has[k] >> c) & 1:
                g_info[k, c] = val[i]
                g_has[k] |= 1 << c
    for k in range(n_threads):
        _flush_group(head[k], nxt, g_info, g_has[k], k, info, has)
    return rows[:m], info[:m], has[:m]


@cached_njit
def describes_calls(ty: np.ndarray) -> np.ndarray:
    """Whether each event type is an MPI call or one of the :data:`INFO_TYPES` that describe its entry (the
    events the MPI-call table holds)."""
    out = np.empty(ty.shape[0], dtype=np.bool_)
    for i in range(ty.shape[0]):
        t = ty[i]
        out[i] = (_MPI_MIN <= t <= _MPI_MAX) or (_SIZES_MIN <= t <= _SIZES_MAX) or t == CALLER_TYPE \
            or t == CALLER_LINE_TYPE
    return out


@cached_njit
def factorize_pairs(a: np.ndarray, b: np.ndarray):
    """Distinct (a, b) pairs in order of first appearance: (code of each row, first row of each pair)."""
    n = a.shape[0]
    cap = 64
    while cap < 2 * n:
        cap *= 2
    mask = cap - 1
    ka = np.empty(cap, dtype=np.int64)
    kb = np.empty(cap, dtype=np.int64)
    kc = np.empty(cap, dtype=np.int64)
    for i in range(cap):
        kc[i] = -1
    codes = np.empty(n, dtype=np.int64)
    first = np.empty(n, dtype=np.int64)
    m = 0
    for i in range(n):
        x = a[i]
        y = b[i]
        h = ((x * 2654435761) ^ (y * 40503)) & mask
        while kc[h] >= 0 and (ka[h] != x or kb[h] != y):
            h = (h + 1) & mask
        if kc[h] < 0:
            ka[h] = x
            kb[h] = y
            kc[h] = m
            first[m] = i
            m += 1
        codes[i] = kc[h]
    return codes, first[:m]


def check_collectives(info: np.ndarray, has: np.ndarray, time_ns: np.ndarray, line: np.ndarray,
                      path: str | Path) -> None:
    """Refuse an MPI entry (:func:`mpi_rows`' ``info``/``has``; its ``time_ns`` and file ``line``) whose collective
    size (bytes, events 50100001/50100002) is negative (an unsigned 2^64 - 1 reads -1), as a message of negative
    size is refused. The root (50100003) is not judged here: Extrae writes it as a flag on the root task's own
    record (prime_v0: value 1 on rank 0's 38 rooted calls, on no other task), read by :mod:`.collective_roots`."""
    for c in (0, 1):
        sized = np.flatnonzero(has & (1 << c) > 0)
        bad = first_bad_size(info[sized, c])
        if bad >= 0:
            i = sized[bad]
            raise TraceFormatError(path, int(line[i]), size_reason("a collective", int(info[i, c]), int(time_ns[i])))
