"""Assembles computation bursts and MPI calls from a format's records, chunk by chunk (DESIGN §3).

Format readers (Paraver, OTF2) turn their records into four generic frames per chunk and feed them to a
:class:`BurstAssembler`, which keeps only the unfinished tail of every thread between chunks so memory stays
bounded:

- ``intervals``: appl, task, thread, cpu, start_ns, end_ns — Running intervals (adjacent ones are merged);
- ``samples``: appl, task, thread, time_ns, counter, value — counter deltas (counts) at a time;
  a sample at time t belongs to the burst with start < t <= end (Extrae emits them at the burst's end);
- ``mpi``: appl, task, thread, cpu, time_ns, kind, call (NULL at exit), bytes_sent, bytes_recv, root, comm,
  call_site — MPI entries and exits; collective sizes ride on the entry row;
- ``messages``: s_appl, s_task, s_thread, s_time_ns, r_appl, r_task, r_thread, r_time_ns, size, tag.

A reader that already holds its records as arrays (the Paraver tokenizer) may hand intervals and samples over
as :class:`IntervalArrays` / :class:`SampleArrays` in an :class:`ArrayBatch`, with thread ids of the assembler
and counter codes from :meth:`BurstAssembler.counter_code`; both kinds of batch give the same tables. Merging
intervals into bursts and summing samples into them runs in one Numba kernel per chunk.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import ClassVar, TypeVar

import numpy as np
import polars as pl

from synthtrace.tracelib.jit import cached_njit
from synthtrace.tracelib.domain.mpi_calls import MPI_KINDS, mpi_kind
from synthtrace.tracelib.errors import TraceFormatError
from synthtrace.tracelib.schema import MPI_CALL_SCHEMA, THREAD_KEYS, counter_columns
from synthtrace.tracelib.thread_key import MASK, packed, thread_key, unpacked

INTERVAL_SCHEMA = {"appl": pl.Int32, "task": pl.Int32, "thread": pl.Int32, "cpu": pl.Int32,
                   "start_ns": pl.Int64, "end_ns": pl.Int64}
SAMPLE_SCHEMA = {"appl": pl.Int32, "task": pl.Int32, "thread": pl.Int32, "time_ns": pl.Int64,
                 "counter": pl.String, "value": pl.Int64}
MPI_EVENT_SCHEMA = {"appl": pl.Int32, "task": pl.Int32, "thread": pl.Int32, "cpu": pl.Int32, "time_ns": pl.Int64,
                    "kind": pl.String, "call": pl.String, "bytes_sent": pl.Int64, "bytes_recv": pl.Int64,
                    "root": pl.Int32, "comm": pl.Int64, "call_site": pl.String}
MESSAGE_SCHEMA = {"s_appl": pl.Int32, "s_task": pl.Int32, "s_thread": pl.Int32, "s_time_ns": pl.Int64,
                  "r_appl": pl.Int32, "r_task": pl.Int32, "r_thread": pl.Int32, "r_time_ns": pl.Int64,
                  "size": pl.Int64, "tag": pl.Int64}
HORIZON_SCHEMA = {"appl": pl.Int32, "task": pl.Int32, "thread": pl.Int32, "time_ns": pl.Int64}
NEVER = 2**63 - 1  # the horizon of a trace read to its end: everything is final, whatever its times (int64 ns)
_MIN_I64, _MAX_I64 = -(2**63), 2**63 - 1
_NULL_CPU = -(2**31)  # an interval without cpu (OTF2) in IntervalArrays.cpu
#: the MPI event columns :class:`MpiArrays` holds besides its codes, bit ``k`` of ``known`` for the k-th of them
MPI_VALUE_COLUMNS = ("bytes_sent", "bytes_recv", "root", "comm")
_KIND_NAMES = pl.Series("mpi_kind", MPI_KINDS, pl.String)  # MpiArrays.kind -> the calls' mpi_kind


@dataclass
class RecordBatch:
    """The generic records of one chunk (see module docstring for the columns)."""

    intervals: pl.DataFrame
    samples: pl.DataFrame
    mpi: pl.DataFrame
    messages: pl.DataFrame


_Cols = TypeVar("_Cols", bound="_Columns")


class _Columns:
    """Equal-length numpy columns (the dataclass fields, in order) with row selection and concatenation."""

    _DTYPES: ClassVar[tuple[type, ...]] = ()

    @classmethod
    def empty(cls: type[_Cols]) -> _Cols:
        return cls(*(np.empty(0, dt) for dt in cls._DTYPES))

    def _columns(self) -> list[np.ndarray]:
        return [getattr(self, f.name) for f in fields(self)]

    def take(self: _Cols, idx: np.ndarray) -> _Cols:
        return type(self)(*(c[idx] for c in self._columns()))

    def concat(self: _Cols, other: _Cols) -> _Cols:
        if not self._columns()[0].size:
            return other
        return type(self)(*(np.concatenate([a, b]) for a, b in zip(self._columns(), other._columns())))


@dataclass
class IntervalArrays(_Columns):
    """Running intervals: thread id (int32), cpu (int32, ``-2**31`` for none), start and end (int64 ns)."""

    thread: np.ndarray
    cpu: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    _DTYPES: ClassVar[tuple[type, ...]] = (np.int32, np.int32, np.int64, np.int64)


@dataclass
class SampleArrays(_Columns):
    """Counter samples: thread id (int32), time (int64 ns), counter code (int32), value (int64 count)."""

    thread: np.ndarray
    time_ns: np.ndarray
    counter: np.ndarray
    value: np.ndarray
    _DTYPES: ClassVar[tuple[type, ...]] = (np.int32, np.int64, np.int32, np.int64)


@dataclass
class MpiArrays(_Columns):
    """MPI entries and exits over the assembler's thread ids: thread id (int32), cpu (int32, ``-2**31`` for none),
    time (int64 ns), kind (int8: index in :data:`MPI_KINDS`, the format's hint where the catalogue does not name the
    call), call (int32: :meth:`BurstAssembler.call_code`, -1 at an exit), call site (int32:
    :meth:`BurstAssembler.site_code`, -1 for none), bytes sent, bytes received, root and communicator (int64) and
    which of these four are known (uint8, bit k for the k-th of :data:`MPI_VALUE_COLUMNS`)."""

    thread: np.ndarray
    cpu: np.ndarray
    time_ns: np.ndarray
    kind: np.ndarray
    call: np.ndarray
    site: np.ndarray
    bytes_sent: np.ndarray
    bytes_recv: np.ndarray
    root: np.ndarray
    comm: np.ndarray
    known: np.ndarray
    _DTYPES: ClassVar[tuple[type, ...]] = (np.int32, np.int32, np.int64, np.int8, np.int32, np.int32, np.int64,
                                           np.int64, np.int64, np.int64, np.uint8)


@dataclass
class ArrayBatch:
    """A chunk whose records are arrays over the assembler's thread ids, counter, call and call-site codes."""

    intervals: IntervalArrays
    samples: SampleArrays
    mpi: MpiArrays
    messages: pl.DataFrame  # MESSAGE_SCHEMA


def _whole(parts: tuple[Iterator[pl.DataFrame], Iterator[pl.DataFrame]]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The bursts' and the calls' parts of :meth:`BurstAssembler.feed_parts`, each concatenated into one frame (a
    counter absent from a part is NULL in its rows; the counter columns sorted by name, as in each part)."""
    out = []
    for p in parts:
        frame = pl.concat(list(p), how="diagonal")
        counters = counter_columns(frame)
        out.append(frame.select(*(c for c in frame.columns if c not in counters), *sorted(counters)))
    return out[0], out[1]


def _empty(schema: dict) -> pl.DataFrame:
    return pl.DataFrame(schema=schema)


@functools.lru_cache(maxsize=256)
def _seed(name: str, value: object, dtype: pl.DataType) -> pl.Series:
    """A one-row column of ``value``, built once per process (a column built from a Python list costs ~40 us, and
    every chunk's frames asked for the same few; Polars' series are immutable, so one can seed them all)."""
    return pl.Series(name, [value], dtype)


def constant(name: str, value: object, dtype: pl.DataType, n: int) -> pl.Series:
    """A column of ``n`` times ``value`` (a fifth of the CPU of ``pl.repeat`` for a string, issue 27)."""
    return _seed(name, value, dtype).new_from_index(0, n) if n else pl.Series(name, [], dtype)


def gathered(values: pl.Series, idx: np.ndarray) -> pl.Series:
    """``values.gather(idx)`` with the indices passed as a column: Polars turns a numpy index into a literal first,
    ~0.4 ms a call against ~0.15 ms (issue 27: dozens of name columns per chunk)."""
    return values.gather(pl.Series(idx))


def _cpu_series(cpu: np.ndarray) -> pl.Series:
    """cpu column from int32 values where ``_NULL_CPU`` stands for null."""
    return pl.Series("cpu", np.ma.masked_array(cpu, mask=cpu == _NULL_CPU))


def writable(s: pl.Series) -> np.ndarray:
    """``s`` as a writable numpy array: Polars gives a read-only view of a one-chunk column and a writable copy of
    another, and Numba compiles (or loads) a kernel once per such array type; one type keeps it to one."""
    return s.to_numpy(writable=True)


def null_unless(s: pl.Series, keep: np.ndarray, name: str) -> pl.Series:
    """``s`` named ``name`` with nulls where ``keep`` is False."""
    if keep.all():
        return s.alias(name)
    return pl.select(pl.when(pl.Series(keep)).then(s).alias(name)).to_series()


# ---------------------------------------------------------------------------------------------- kernels
@cached_njit
def _filled(n: int, value: int) -> np.ndarray:
    """An int64 array of ``n`` times ``value`` (a loop: slice assignment costs seconds of compile time)."""
    a = np.empty(n, dtype=np.int64)
    for i in range(n):
        a[i] = value
    return a


@cached_njit
def _overflows(a: int, b: int, s: int) -> bool:
    """Whether ``s``, the int64 sum ``a + b`` as the machine wraps it, wrapped: the sign of both terms differs from
    the sign of the result (one compare per add)."""
    return ((a ^ s) & (b ^ s)) < 0


@cached_njit
def _group_by_key(key: np.ndarray, n_keys: int, gate: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Stable counting sort of the rows by ``key`` (in [0, ``n_keys``)), the rows whose ``gate`` is negative left
    out (``gate`` is ``key`` to keep every row of non-negative keys): (the rows in key order, offsets of each key's
    run [n_keys + 1])."""
    off = np.zeros(n_keys + 1, dtype=np.int64)
    for i in range(key.shape[0]):
        if gate[i] >= 0:
            off[key[i] + 1] += 1
    for k in range(n_keys):
        off[k + 1] += off[k]
    nxt = off[:n_keys].copy()
    perm = np.empty(off[n_keys], dtype=np.int64)
    for i in range(key.shape[0]):
        if gate[i] >= 0:
            k = key[i]
            perm[nxt[k]] = i
            nxt[k] += 1
    return perm, off


@cached_njit
def _merge_sort(idx: np.ndarray, key: np.ndarray) -> None:
    """Order the indices ``idx`` by ``key[idx]``, stable (bottom-up merge sort, in place)."""
    n = idx.shape[0]
    src = idx.copy()
    dst = np.empty(n, dtype=idx.dtype)
    width = 1
    while width < n:
        for lo in range(0, n, 2 * width):
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            i, j, k = lo, mid, lo
            while i < mid and j < hi:
                if key[src[j]] < key[src[i]]:
                    dst[k] = src[j]
                    j += 1
                else:
                    dst[k] = src[i]
                    i += 1
                k += 1
            while i < mid:
                dst[k] = src[i]
                i += 1
                k += 1
            while j < hi:
                dst[k] = src[j]
                j += 1
                k += 1
        src, dst = dst, src
        width *= 2
    for i in range(n):
        idx[i] = src[i]


@cached_njit
def _sort_segments(perm: np.ndarray, off: np.ndarray, key: np.ndarray) -> None:
    """Order each thread's segment of ``perm`` by ``key`` (stable), when it is not ordered already."""
    for t in range(off.shape[0] - 1):
        a, b = off[t], off[t + 1]
        for i in range(a + 1, b):
            if key[perm[i]] < key[perm[i - 1]]:
                _merge_sort(perm[a:b], key)
                break


@cached_njit
def _entries_by_time(n_threads, en_th, en_t):
    """MPI entries per thread in time order, one per (thread, time): the first given. Returns (entry rows, their
    times, offsets of each thread's run)."""
    ep, eoff = _group_by_key(en_th, n_threads, en_th)
    _sort_segments(ep, eoff, en_t)
    ek = np.empty(ep.shape[0], dtype=np.int64)
    et = np.empty(ep.shape[0], dtype=np.int64)
    doff = np.zeros(n_threads + 1, dtype=np.int64)
    m = 0
    for t in range(n_threads):
        doff[t] = m
        for i in range(eoff[t], eoff[t + 1]):
            j = ep[i]
            if m > doff[t] and en_t[j] == et[m - 1]:
                continue
            ek[m] = j
            et[m] = en_t[j]
            m += 1
    doff[n_threads] = m
    return ek, et, doff


@cached_njit
def _merged_intervals(n_threads, ip, ioff, iv_cpu, iv_t0, iv_t1, et, doff):
    """Bursts: each thread's Running intervals (in time order, ``ip``/``ioff``) merged where adjacent, unless an MPI
    entry sits at the junction. Returns per burst its thread, cpu, start, end and first interval (``b_first[nb]``:
    the interval count), and offsets of each thread's bursts."""
    n_iv = ip.shape[0]
    b_th = np.empty(n_iv, dtype=np.int32)
    b_cpu = np.empty(n_iv, dtype=np.int32)
    b_t0 = np.empty(n_iv, dtype=np.int64)
    b_t1 = np.empty(n_iv, dtype=np.int64)
    b_first = np.empty(n_iv + 1, dtype=np.int64)
    boff = np.zeros(n_threads + 1, dtype=np.int64)
    nb = 0
    for t in range(n_threads):
        boff[t] = nb
        ecur = doff[t]
        for i in range(ioff[t], ioff[t + 1]):
            j = ip[i]
            s = iv_t0[j]
            while ecur < doff[t + 1] and et[ecur] < s:
                ecur += 1
            at_call = ecur < doff[t + 1] and et[ecur] == s
            if i == ioff[t] or s != iv_t1[ip[i - 1]] or at_call:
                b_th[nb] = t
                b_cpu[nb] = iv_cpu[j]
                b_t0[nb] = s
                b_t1[nb] = iv_t1[j]
                b_first[nb] = i
                nb += 1
            else:
                b_t1[nb - 1] = iv_t1[j]
    boff[n_threads] = nb
    b_first[nb] = n_iv
    return b_th[:nb], b_cpu[:nb], b_t0[:nb], b_t1[:nb], b_first[:nb + 1], boff


@cached_njit
def _final_bursts(thread_order, b_cpu, b_t0, b_t1, boff, final, ek, et, doff, next_seq):
    """The final bursts in output order (threads by key, bursts by start), numbered per thread from ``next_seq``
    (advanced), each with the MPI entry at its end (the call that closes it, -1: none). Returns (output row of
    each burst, -1: not final) and the output columns thread, cpu, start, end, seq, entry."""
    nb = b_t0.shape[0]
    fidx = _filled(nb, -1)
    nf = 0
    for t in thread_order:
        for b in range(boff[t], boff[t + 1]):
            if final[b]:
                fidx[b] = nf
                nf += 1
    o_th = np.empty(nf, dtype=np.int32)
    o_cpu = np.empty(nf, dtype=np.int32)
    o_t0 = np.empty(nf, dtype=np.int64)
    o_t1 = np.empty(nf, dtype=np.int64)
    o_seq = np.empty(nf, dtype=np.int64)
    o_entry = _filled(nf, -1)
    for t in thread_order:
        for b in range(boff[t], boff[t + 1]):
            r = fidx[b]
            if r < 0:
                continue
            o_th[r] = t
            o_cpu[r] = b_cpu[b]
            o_t0[r] = b_t0[b]
            o_t1[r] = b_t1[b]
            o_seq[r] = next_seq[t]
            next_seq[t] += 1
            lo, hi = doff[t], doff[t + 1]
            while lo < hi:  # entry at the burst's end: the call that closes it
                mid = (lo + hi) // 2
                if et[mid] < b_t1[b]:
                    lo = mid + 1
                else:
                    hi = mid
            if lo < doff[t + 1] and et[lo] == b_t1[b]:
                o_entry[r] = ek[lo]
    return fidx, o_th, o_cpu, o_t0, o_t1, o_seq, o_entry


@cached_njit
def _sample_bursts(n_threads, sm_th, sm_t, b_t0, b_t1, boff, final, fidx):
    """Where each sample goes: the first burst of its thread ending at or after it, if that burst starts before it.
    Returns per sample its final burst's output row (-1: none, -2: an open burst, carried) and, for the carried
    ones, that open burst's index (else -1)."""
    bp = np.arange(b_t0.shape[0])
    _sort_segments(bp, boff, b_t1)
    dest = np.empty(sm_th.shape[0], dtype=np.int64)
    open_b = _filled(sm_th.shape[0], -1)
    cur = np.empty(n_threads, dtype=np.int64)
    for t in range(n_threads):
        cur[t] = boff[t]
    last = _filled(n_threads, _MIN_I64)
    for i in range(sm_th.shape[0]):
        dest[i] = -1
        t = sm_th[i]
        x = sm_t[i]
        lo, hi = boff[t], boff[t + 1]
        if lo == hi:
            continue
        if x >= last[t]:
            c = cur[t]
            while c < hi and b_t1[bp[c]] < x:
                c += 1
        else:
            c, h2 = lo, hi
            while c < h2:
                mid = (c + h2) // 2
                if b_t1[bp[mid]] < x:
                    c = mid + 1
                else:
                    h2 = mid
        cur[t] = c
        last[t] = x
        if c == hi:
            continue
        b = bp[c]
        if b_t0[b] < x:
            if final[b]:
                dest[i] = fidx[b]
            else:
                dest[i] = -2
                open_b[i] = b
    return dest, open_b


#: cells (rows x counter columns) of one part of a chunk's bursts or calls at most (:func:`_part_bounds`): 1 Mi,
#: about 9 MB as Int64 with validity; a real trace's chunk (8 MiB of records: some 10,000 bursts of up to 60
#: counters) fits in one. Measured on 600,000 bursts of one of 4,096 counters each: peak RSS of the read 511 MB at
#: 1 Mi cells, 4.3 GB at 2 Mi (parts of ~1,450 x 1,450 cells; not understood, benchmarks/RESULTS.md)
MAX_PART_CELLS = 1 << 20


#: carried samples beyond which those bound for one burst or call are folded into one (a count): below it the
#: fold would cost more than it saves
FOLD_CARRIED_SAMPLES = 1 << 16


@cached_njit
def _folded_carry(carry_sm, open_b, cdest, sm_th, sm_t, sm_c, sm_v, horizon, n_bursts, n_codes, n_threads, w_th, w_t,
                  fold_above):
    """The carried samples (rows ``carry_sm`` of the chunk's), those bound for one destination folded into the
    latest of them holding their sum, when there are more than ``fold_above``: a record repeating a counter
    thousands of times, or a long burst or call sampled often, would otherwise hold memory growing with the file
    until its burst or call ends (attack 16 F3). Returns the kept rows, their values and the first sample (row of
    the chunk's) whose add passed int64 (-1: none; the values are then not to be used). Memory: ~24 B per carried
    sample (the rows sorted by slot and counter), never slots x counter types (attack 17 F5).

    Only samples before their thread's horizon are folded: every record before it has been seen, so
    - a sample in an open burst (``open_b``) stays in it: the burst's start is settled and a record that could end
      it comes after the horizon;
    - a sample waiting for a call (``cdest`` -2) goes to the latest-started of the waiting entries before it
      (``w_th``/``w_t``) that ends first, and each of those ends after the horizon: samples with the same waiting
      entries before them go to one call.
    """
    value = sm_v[carry_sm]
    if carry_sm.shape[0] <= fold_above:
        return carry_sm, value, -1
    key = _filled(n_bursts, -1)  # open burst -> its slot
    n_open = 0
    for j in range(carry_sm.shape[0]):
        b = open_b[carry_sm[j]]
        if b >= 0 and key[b] < 0:
            key[b] = n_open
            n_open += 1
    wp, woff = _group_by_key(w_th, n_threads, w_th)
    _sort_segments(wp, woff, w_t)
    group = _filled(carry_sm.shape[0], -1)  # slot x counter of each row folded, -1: kept as it is
    for j in range(carry_sm.shape[0]):
        i = carry_sm[j]
        t = sm_th[i]
        x = sm_t[i]
        if x >= horizon[t]:
            continue
        if open_b[i] >= 0:
            slot = key[open_b[i]]
        elif cdest[i] == -2:
            lo, hi = woff[t], woff[t + 1]
            while lo < hi:  # the waiting entries of the thread starting before x
                mid = (lo + hi) // 2
                if w_t[wp[mid]] < x:
                    lo = mid + 1
                else:
                    hi = mid
            slot = n_open + woff[t] + t + (lo - woff[t])
        else:
            continue
        group[j] = slot * n_codes + sm_c[i]
    # the rows by group, in row order within one
    order = np.argsort(group, kind="mergesort")
    kept = np.ones(carry_sm.shape[0], dtype=np.bool_)
    wrapped = carry_sm.shape[0]  # the first row (in row order) whose add to its group's sum passed int64
    a = 0
    while a < order.shape[0]:
        g = group[order[a]]
        b = a + 1
        while b < order.shape[0] and group[order[b]] == g:
            b += 1
        if g >= 0:  # the latest row (the last of equal times) holds the group's sum, added in row order
            hold = order[a]
            total = value[hold]
            kept[hold] = False
            for k in range(a + 1, b):
                j = order[k]
                s = total + value[j]
                if _overflows(total, value[j], s):
                    wrapped = min(wrapped, j)
                    break
                total = s
                kept[j] = False
                if sm_t[carry_sm[j]] >= sm_t[carry_sm[hold]]:
                    hold = j
            kept[hold] = True
            value[hold] = total
        a = b
    if wrapped < carry_sm.shape[0]:
        return carry_sm, value, carry_sm[wrapped]
    return carry_sm[kept], value[kept], -1


@cached_njit
def _counter_sums(n_codes, sm_c, sm_v, dest):
    """Per counter present and destination row (``dest`` >= 0, e.g. a final burst or a call), the sum of its samples,
    sparse: cost per sample, not per counter x row (attack 17 F3: 4,096 counter types each in a few of 50,000 bursts
    made a 1.8 GB matrix). The samples are sorted by (counter, row), stable, and each run of them added up in the
    order read. Returns (counter codes present, in code order; offsets of each one's cells; each cell's row,
    ascending within its counter; its sum) and the first sample whose add passed int64 (-1: none; the sums are then
    not to be used)."""
    perm, off = _group_by_key(sm_c, n_codes, dest)
    _sort_segments(perm, off, dest)
    n_used = 0
    for c in range(n_codes):
        if off[c + 1] > off[c]:
            n_used += 1
    m = off[n_codes]
    codes = np.empty(n_used, dtype=np.int64)
    cell_off = np.empty(n_used + 1, dtype=np.int64)
    row = np.empty(m, dtype=np.int64)
    total = np.empty(m, dtype=np.int64)
    k = 0
    n = 0
    for c in range(n_codes):
        if off[c + 1] == off[c]:
            continue
        codes[k] = c
        cell_off[k] = n
        k += 1
        for p in range(off[c], off[c + 1]):
            i = perm[p]
            if n > cell_off[k - 1] and row[n - 1] == dest[i]:
                s = total[n - 1] + sm_v[i]
                if _overflows(total[n - 1], sm_v[i], s):
                    return codes, cell_off, row, total, i
                total[n - 1] = s
            else:
                row[n] = dest[i]
                total[n] = sm_v[i]
                n += 1
    cell_off[n_used] = n
    return codes, cell_off, row[:n], total[:n], -1


@cached_njit
def _part_bounds(n_rows, cell_off, cell_row, max_cells):
    """Where a table of ``n_rows`` rows with the counter cells of :func:`_counter_sums` is cut into parts of
    consecutive rows, each with at most ``max_cells`` cells (rows x the counters present in them; one row at least):
    the first row of each part and ``n_rows`` (a part's dense counter columns are then bounded, whatever the
    trace's counters, attack 17 F3)."""
    n_used = cell_off.shape[0] - 1
    counter_of = np.empty(cell_off[n_used], dtype=np.int64)  # each cell's counter
    for k in range(n_used):
        for j in range(cell_off[k], cell_off[k + 1]):
            counter_of[j] = k
    by_row, per_row = _group_by_key(cell_row, n_rows, cell_row)  # the cells by row (in counter order within one)
    seen = _filled(n_used, -1)  # the last part holding each counter
    bounds = np.empty(n_rows + 2, dtype=np.int64)
    bounds[0] = 0
    n_parts = 0
    start = 0
    present = 0
    for r in range(n_rows):
        new = 0
        for j in range(per_row[r], per_row[r + 1]):
            if seen[counter_of[by_row[j]]] != n_parts:
                new += 1
        if r > start and (r - start + 1) * (present + new) > max_cells:
            n_parts += 1
            bounds[n_parts] = r
            start = r
            present = 0
            new = per_row[r + 1] - per_row[r]
        for j in range(per_row[r], per_row[r + 1]):
            seen[counter_of[by_row[j]]] = n_parts
        present += new
    bounds[n_parts + 1] = n_rows
    return bounds[:n_parts + 2]


@cached_njit
def _sample_calls(n_threads, sm_th, sm_t, dest, c_th, c_t0, c_t1, w_th, w_t):
    """Where the samples no burst holds go: the call of their thread with start < t <= end (Extrae writes the
    counters measured inside a call on its exit), given as the call's row (calls grouped by thread in start
    order); -2 (carried) after the first entry of their thread still waiting for its exit (``w_th``/``w_t``); -1:
    neither (a sample outside bursts and calls). Samples a burst holds or carries get -3."""
    first_wait = _filled(n_threads, _MAX_I64)
    for i in range(w_th.shape[0]):
        if w_t[i] < first_wait[w_th[i]]:
            first_wait[w_th[i]] = w_t[i]
    c_lo = np.zeros(n_threads, dtype=np.int64)  # each thread's calls are one run of rows
    c_hi = np.zeros(n_threads, dtype=np.int64)
    for i in range(c_th.shape[0]):
        if i == 0 or c_th[i] != c_th[i - 1]:
            c_lo[c_th[i]] = i
        c_hi[c_th[i]] = i + 1
    out = np.empty(sm_th.shape[0], dtype=np.int64)
    for i in range(sm_th.shape[0]):
        if dest[i] != -1:
            out[i] = -3
            continue
        t = sm_th[i]
        x = sm_t[i]
        lo, hi = c_lo[t], c_hi[t]
        while lo < hi:  # first call of the thread starting at or after x
            mid = (lo + hi) // 2
            if c_t0[mid] < x:
                lo = mid + 1
            else:
                hi = mid
        j = lo - 1
        if j >= c_lo[t] and x <= c_t1[j]:
            out[i] = j
        elif x > first_wait[t]:
            out[i] = -2
        else:
            out[i] = -1
    return out


@cached_njit
def _carried(n_threads, n_entries, ip, b_th, b_t1, b_first, final, ek, et, doff):
    """What stays for the next chunk: the intervals of open bursts, and the entries at or after the first open
    burst end of their thread (rows of the chunk's intervals and entries)."""
    carry_iv = np.empty(ip.shape[0], dtype=np.int64)
    n_carry_iv = 0
    first_open_end = _filled(n_threads, _MAX_I64)
    for b in range(b_th.shape[0]):
        if not final[b]:
            for i in range(b_first[b], b_first[b + 1]):
                carry_iv[n_carry_iv] = ip[i]
                n_carry_iv += 1
            t = b_th[b]
            if b_t1[b] < first_open_end[t]:
                first_open_end[t] = b_t1[b]
    kept = np.zeros(n_entries, dtype=np.bool_)
    n_keep = 0
    for t in range(n_threads):
        for i in range(doff[t], doff[t + 1]):
            if et[i] >= first_open_end[t]:
                kept[ek[i]] = True
                n_keep += 1
    keep = np.empty(n_keep, dtype=np.int64)
    n_keep = 0
    for i in range(kept.shape[0]):
        if kept[i]:
            keep[n_keep] = i
            n_keep += 1
    return carry_iv[:n_carry_iv], keep


@cached_njit
def _assemble(n_threads, thread_order, iv_th, iv_cpu, iv_t0, iv_t1, sm_th, sm_t, sm_c, sm_v, n_codes, en_th, en_t,
              horizon, next_seq, c_th, c_t0, c_t1, w_th, w_t, fold_above):
    """Merge intervals into bursts, sum samples into the final ones and the other samples into the calls
    (``c_*``, grouped by thread in start order), number the bursts, fold the carried samples (beyond
    ``fold_above`` of them, :func:`_folded_carry`); see BurstAssembler._close_bursts. The last value returned is the
    first sample (row of the chunk's) whose add to a sum passed int64, -1 for none."""
    ip, ioff = _group_by_key(iv_th, n_threads, iv_th)
    _sort_segments(ip, ioff, iv_t0)
    ek, et, doff = _entries_by_time(n_threads, en_th, en_t)
    b_th, b_cpu, b_t0, b_t1, b_first, boff = _merged_intervals(n_threads, ip, ioff, iv_cpu, iv_t0, iv_t1, et, doff)
    final = np.empty(b_th.shape[0], dtype=np.bool_)
    for b in range(b_th.shape[0]):
        # every record at or before its end has been seen (at NEVER: every record of the trace)
        final[b] = b_t1[b] < horizon[b_th[b]] or horizon[b_th[b]] == NEVER
    n_repeated = 0  # final bursts with the start and end of the one before them on their thread
    for b in range(1, b_th.shape[0]):
        if final[b] and b_th[b] == b_th[b - 1] and b_t0[b] == b_t0[b - 1] and b_t1[b] == b_t1[b - 1]:
            n_repeated += 1
    fidx, o_th, o_cpu, o_t0, o_t1, o_seq, o_entry = _final_bursts(thread_order, b_cpu, b_t0, b_t1, boff, final, ek, et,
                                                                  doff, next_seq)
    dest, open_b = _sample_bursts(n_threads, sm_th, sm_t, b_t0, b_t1, boff, final, fidx)
    cells = _counter_sums(n_codes, sm_c, sm_v, dest)
    cdest = _sample_calls(n_threads, sm_th, sm_t, dest, c_th, c_t0, c_t1, w_th, w_t)
    c_cells = _counter_sums(n_codes, sm_c, sm_v, cdest)
    wrapped = cells[4] if cells[4] >= 0 else c_cells[4]
    n_carry = 0
    n_loose = 0
    for i in range(dest.shape[0]):
        if dest[i] == -2 or cdest[i] == -2:
            n_carry += 1
        elif cdest[i] == -1:
            n_loose += 1
    carry_sm = np.empty(n_carry, dtype=np.int64)
    loose_sm = np.empty(n_loose, dtype=np.int64)
    n_carry = 0
    n_loose = 0
    for i in range(dest.shape[0]):
        if dest[i] == -2 or cdest[i] == -2:
            carry_sm[n_carry] = i
            n_carry += 1
        elif cdest[i] == -1:
            loose_sm[n_loose] = i
            n_loose += 1
    carry_sm, carry_value, f_wrapped = _folded_carry(carry_sm, open_b, cdest, sm_th, sm_t, sm_c, sm_v, horizon,
                                                     b_th.shape[0], n_codes, n_threads, w_th, w_t, fold_above)
    if wrapped < 0:
        wrapped = f_wrapped
    carry_iv, keep = _carried(n_threads, en_th.shape[0], ip, b_th, b_t1, b_first, final, ek, et, doff)
    return (o_th, o_cpu, o_t0, o_t1, o_seq, o_entry, cells[:4], c_cells[:4], carry_iv, carry_sm, carry_value,
            loose_sm, keep, n_repeated, wrapped)


@cached_njit
def _same_mpi_event(a, b, kind, call, site, cpu, sent, recv, root, comm, known):
    """Whether MPI events ``a`` and ``b`` (rows of one thread at one time) are alike in every column (a value
    column where ``known`` says it is known): one record line written twice."""
    k = known[a]
    return (kind[a] == kind[b] and call[a] == call[b] and site[a] == site[b] and cpu[a] == cpu[b] and k == known[b]
            and (k & 1 == 0 or sent[a] == sent[b]) and (k & 2 == 0 or recv[a] == recv[b])
            and (k & 4 == 0 or root[a] == root[b]) and (k & 8 == 0 or comm[a] == comm[b]))


@cached_njit
def _pair(n_threads, thread_order, th, t, horizon, never, kind, call, site, cpu, sent, recv, root, comm, known):
    """Pair each MPI entry (``call >= 0``) with the next event of the same kind on its thread (time order, ties in
    row order).

    Only events before their thread's horizon are paired (records at the horizon's time may still come, the
    counters of a call's exit among them). An entry alike in every column to the entry still open before it, at
    the same time, is that record line written twice: it is counted and dropped (it would end its twin as a
    zero-length phantom call). An exit written twice needs nothing: its twin finds no call open. Returns (entry
    rows of the calls, their end times) ordered by thread key and start, the rows still waiting: entries without
    their exit and events at or after the horizon (threads whose horizon is not ``never``), and the number of
    entries dropped as repeated.
    """
    perm, off = _group_by_key(th, n_threads, th)
    _sort_segments(perm, off, t)
    n = th.shape[0]
    slot_row = np.empty(n, dtype=np.int64)
    slot_end = _filled(n, -1)
    waits = np.zeros(n, dtype=np.bool_)
    n_wait = 0
    ns = 0
    pend = _filled(3, -1)
    n_repeated = 0
    for tt in thread_order:
        for k in range(3):
            pend[k] = -1
        for i in range(off[tt], off[tt + 1]):
            j = perm[i]
            if horizon[tt] < never and t[j] >= horizon[tt]:
                waits[j] = True
                n_wait += 1
                continue
            k = kind[j]
            if (call[j] >= 0 and pend[k] >= 0 and t[slot_row[pend[k]]] == t[j]
                    and _same_mpi_event(j, slot_row[pend[k]], kind, call, site, cpu, sent, recv, root, comm, known)):
                n_repeated += 1
                continue
            if pend[k] >= 0:
                slot_end[pend[k]] = t[j]
                pend[k] = -1
            if call[j] >= 0:
                slot_row[ns] = j
                pend[k] = ns
                ns += 1
        if horizon[tt] < never:
            for k in range(3):
                if pend[k] >= 0:
                    waits[slot_row[pend[k]]] = True
                    n_wait += 1
    m = 0
    for i in range(ns):
        if slot_end[i] >= 0:
            slot_row[m] = slot_row[i]
            slot_end[m] = slot_end[i]
            m += 1
    waiting = np.empty(n_wait, dtype=np.int64)
    n_wait = 0
    for i in range(n):
        if waits[i]:
            waiting[n_wait] = i
            n_wait += 1
    return slot_row[:m], slot_end[:m], waiting, n_repeated


# ---------------------------------------------------------------------------------------------- assembler
class BurstAssembler:
    """Turns record batches into finished bursts and MPI calls of one run.

    ``feed(batch, horizon)`` returns ``(bursts, calls)`` that are final: every record at or before their end
    has been seen, which holds for a thread once a later record of it has been read (``horizon``: the last
    time seen per thread, a frame appl, task, thread, time_ns or an array over thread ids with -1 for none).
    ``finish()`` returns the rest. Counter columns are named after the counters.

    ``threads`` registers (appl, task, thread) triples up front: thread id i is the i-th triple (the Paraver
    reader passes the header's threads so that its ids are the assembler's). ``source``: the trace's file, which an
    error names (:class:`~synthtrace.tracelib.errors.TraceFormatError`: a counter's sum beyond int64).
    """

    def __init__(self, run_id: str, threads: Sequence[tuple[int, int, int]] | None = None, *,
                 keep_loose: bool = False, source: str | Path = "<records>"):
        self.run_id = run_id
        self.source = str(source)  # the trace's file, named by the errors
        self.keep_loose = keep_loose
        self._key_to_id: dict[int, int] = {}
        self._appl = np.empty(0, np.int32)
        self._task = np.empty(0, np.int32)
        self._thread = np.empty(0, np.int32)
        self._sorted_keys = np.empty(0, np.int64)  # registered keys in key order ...
        self._sorted_ids = np.empty(0, np.int64)  # ... and their ids
        self._burst_next = np.zeros(0, np.int64)
        self._call_next = np.zeros(0, np.int64)
        self._counters = _Names()  # counter names (SampleArrays.counter)
        self._calls = _Names()  # MPI call names (MpiArrays.call)
        self._sites = _Names()  # call sites (MpiArrays.site)
        self._call_kind = np.empty(0, np.int8)  # call code -> catalogue kind (index in MPI_KINDS), -1: not listed
        self._intervals = IntervalArrays.empty()
        self._samples = SampleArrays.empty()
        self._mpi = MpiArrays.empty()  # MPI events waiting for their pair or the horizon
        self._recent_entries = MpiArrays.empty()  # entries that may still close a burst
        self.counters: list[str] = []
        #: with ``keep_loose``: the counter samples neither a burst nor an MPI call holds (thread ids, counter
        #: codes), in chunks, until :meth:`take_loose`
        self.loose: list[SampleArrays] = []
        #: bursts with the same start and end as the one before them on their thread: impossible in a real trace
        #: (two Running states of one thread would overlap), the sign of records written twice (attack 8 B10)
        self.repeated_bursts = 0
        #: MPI entries alike in every column to the entry open before them at the same time on their thread (one
        #: record line written twice, attack 9 C6): dropped, not paired (the twin would be a zero-length phantom call)
        self.repeated_mpi_entries = 0
        if threads:
            t = np.asarray(threads, dtype=np.int64).reshape(-1, 3)
            self._register(t[:, 0], t[:, 1], t[:, 2])

    # ------------------------------------------------------------------ ids
    @property
    def n_threads(self) -> int:
        return int(self._appl.size)

    def _register(self, appl: np.ndarray, task: np.ndarray, thread: np.ndarray) -> None:
        """Give ids to threads not seen yet, in the order given."""
        new = []
        for key in packed(appl, task, thread).tolist():
            if key not in self._key_to_id:
                self._key_to_id[key] = len(self._key_to_id)
                new.append(key)
        if new:
            parts = unpacked(np.asarray(new, dtype=np.int64))
            self._appl, self._task, self._thread = (np.concatenate([old, p.astype(np.int32)]) for old, p in
                                                    zip((self._appl, self._task, self._thread), parts))
        keys = packed(self._appl, self._task, self._thread)
        order = np.argsort(keys, kind="stable")
        self._sorted_keys, self._sorted_ids = keys[order], order.astype(np.int64)
        grow = self.n_threads - self._burst_next.size
        self._burst_next = np.concatenate([self._burst_next, np.zeros(grow, np.int64)])
        self._call_next = np.concatenate([self._call_next, np.zeros(grow, np.int64)])

    def _thread_order(self) -> np.ndarray:
        """Thread ids in (appl, task, thread) order."""
        return self._sorted_ids

    def thread_ids(self, appl: np.ndarray, task: np.ndarray, thread: np.ndarray) -> np.ndarray:
        """Ids (int32) of (appl, task, thread) rows, registering threads seen for the first time."""
        if appl.size == 0:
            return np.empty(0, np.int32)
        keys = packed(appl, task, thread)
        pos = np.searchsorted(self._sorted_keys, keys)
        pos[pos >= self._sorted_keys.size] = 0
        known = self._sorted_keys[pos] == keys if self._sorted_keys.size else np.zeros(keys.size, bool)
        if not known.all():
            new = np.unique(keys[~known])
            self._register(*unpacked(new))
            return self.thread_ids(appl, task, thread)
        return self._sorted_ids[pos].astype(np.int32)

    def counter_code(self, name: str) -> int:
        """Code of a counter name in :class:`SampleArrays` (registered on first use)."""
        return self._counters.code(name)

    def call_code(self, name: str) -> int:
        """Code of an MPI call name in :class:`MpiArrays` (registered on first use)."""
        return self._calls.code(name)

    def site_code(self, name: str) -> int:
        """Code of a call site in :class:`MpiArrays` (registered on first use)."""
        return self._sites.code(name)

    def _frame_ids(self, df: pl.DataFrame) -> np.ndarray:
        return self.thread_ids(*(df.get_column(c).to_numpy() for c in THREAD_KEYS))

    def _to_arrays(self, batch: RecordBatch) -> ArrayBatch:
        iv = batch.intervals
        intervals = IntervalArrays(
            self._frame_ids(iv),
            writable(iv.get_column("cpu").cast(pl.Int32).fill_null(_NULL_CPU)),
            writable(iv.get_column("start_ns").cast(pl.Int64)),
            writable(iv.get_column("end_ns").cast(pl.Int64)),
        )
        sm = batch.samples
        names = sm.get_column("counter").unique().to_list()
        mapping = {n: self.counter_code(n) for n in names}
        codes = (writable(sm.get_column("counter").replace_strict(mapping, return_dtype=pl.Int32))
                 if sm.height else np.empty(0, np.int32))
        samples = SampleArrays(self._frame_ids(sm), writable(sm.get_column("time_ns").cast(pl.Int64)),
                               codes, writable(sm.get_column("value").cast(pl.Int64)))
        return ArrayBatch(intervals, samples, self._mpi_arrays(batch.mpi), batch.messages)

    def _mpi_arrays(self, mpi: pl.DataFrame) -> MpiArrays:
        """MPI events (MPI_EVENT_SCHEMA) as :class:`MpiArrays`; a kind outside :data:`MPI_KINDS` pairs as ``other``."""
        kinds = {k: i for i, k in enumerate(MPI_KINDS)}

        def codes(column: str, code) -> np.ndarray:
            s = mpi.get_column(column)
            mapping = {n: code(n) for n in s.drop_nulls().unique().to_list()}
            return writable(s.replace_strict(mapping, default=-1, return_dtype=pl.Int32))

        known = np.zeros(mpi.height, np.uint8)
        for k, c in enumerate(MPI_VALUE_COLUMNS):
            known |= mpi.get_column(c).is_not_null().to_numpy().astype(np.uint8) << k
        return MpiArrays(
            self._frame_ids(mpi), writable(mpi.get_column("cpu").cast(pl.Int32).fill_null(_NULL_CPU)),
            writable(mpi.get_column("time_ns").cast(pl.Int64)),
            writable(mpi.get_column("kind").replace_strict(kinds, default=len(MPI_KINDS) - 1, return_dtype=pl.Int8)),
            codes("call", self.call_code), codes("call_site", self.site_code),
            *(writable(mpi.get_column(c).cast(pl.Int64).fill_null(0)) for c in MPI_VALUE_COLUMNS), known)

    def _horizon(self, horizon: pl.DataFrame | np.ndarray) -> np.ndarray:
        if isinstance(horizon, np.ndarray):
            h = np.full(self.n_threads, -1, dtype=np.int64)
            h[: horizon.size] = horizon[: self.n_threads]
            return h
        ids = self._frame_ids(horizon)
        h = np.full(self.n_threads, -1, dtype=np.int64)
        h[ids] = horizon.get_column("time_ns").cast(pl.Int64).to_numpy()
        return h

    # ------------------------------------------------------------------ public
    def feed(
        self, batch: RecordBatch | ArrayBatch, horizon: pl.DataFrame | np.ndarray
    ) -> tuple[pl.DataFrame, pl.DataFrame]:
        """The final bursts and calls of the records so far, each as one frame (see :meth:`feed_parts`)."""
        return _whole(self.feed_parts(batch, horizon))

    def feed_parts(
        self, batch: RecordBatch | ArrayBatch, horizon: pl.DataFrame | np.ndarray
    ) -> tuple[Iterator[pl.DataFrame], Iterator[pl.DataFrame]]:
        """:meth:`feed` in parts of consecutive rows whose cells (rows x the counter columns present in them) are at
        most :data:`MAX_PART_CELLS`, one part at a time, so that a trace of many counters each in few bursts streams
        in bounded pieces (attack 17 F3). The parts are built as they are taken: take them all before the next
        feed (the calls first, then the bursts, or either)."""
        if isinstance(batch, RecordBatch):
            batch = self._to_arrays(batch)
        h = self._horizon(horizon)
        mpi = self._mpi.concat(batch.mpi)
        intervals = self._intervals.concat(batch.intervals)
        samples = self._samples.concat(batch.samples)
        calls, spans, self._mpi = self._pair_calls(mpi, h)
        waiting = self._mpi.take(np.flatnonzero(self._mpi.call >= 0))
        bursts, calls = self._close_bursts(intervals, samples, mpi, h, calls, spans,
                                           (waiting.thread, waiting.time_ns))
        return bursts, calls

    def finish(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        """The bursts and calls still open, each as one frame (see :meth:`finish_parts`)."""
        return _whole(self.finish_parts())

    def finish_parts(self) -> tuple[Iterator[pl.DataFrame], Iterator[pl.DataFrame]]:
        """The bursts and calls still open, in parts as :meth:`feed_parts` gives them."""
        empty = ArrayBatch(
            IntervalArrays.empty(), SampleArrays.empty(), MpiArrays.empty(), _empty(MESSAGE_SCHEMA)
        )
        return self.feed_parts(empty, np.full(self.n_threads, NEVER, dtype=np.int64))

    # ------------------------------------------------------------------ steps
    def _numbered(self, tid: np.ndarray, nxt: np.ndarray) -> np.ndarray:
        """Sequence numbers of rows grouped by thread (in order), continuing each thread's count."""
        n = tid.size
        if n == 0:
            return np.empty(0, np.int64)
        starts = np.flatnonzero(np.concatenate([[True], tid[1:] != tid[:-1]]))
        rank = np.arange(n) - np.repeat(starts, np.diff(np.append(starts, n)))
        seq = nxt[tid] + rank
        nxt[tid[starts]] += np.diff(np.append(starts, n))
        return seq

    def _with_counters(self, table: pl.DataFrame, cells: tuple[np.ndarray, ...]) -> Iterator[pl.DataFrame]:
        """``table`` with one Int64 column per counter present (NULL where no sample; sorted by name) from the
        sparse sums ``cells`` of :func:`_counter_sums`, in the parts :func:`_part_bounds` cuts, each holding the
        columns of the counters present in its rows. The names join :attr:`counters` at once; the parts are built
        as they are taken."""
        codes, cell_off, row, value = cells
        names = sorted((self._counters.names[c], k) for k, c in enumerate(codes.tolist()))
        self.counters = sorted(set(self.counters) | {n for n, _ in names})
        bounds = _part_bounds(table.height, cell_off, row, MAX_PART_CELLS)

        def parts() -> Iterator[pl.DataFrame]:
            # each counter's cells (ascending rows) at every bound: one search per counter, not per part
            at = [cell_off[k] + np.searchsorted(row[cell_off[k]:cell_off[k + 1]], bounds) for _, k in names]
            for p in range(bounds.size - 1):
                a, n = int(bounds[p]), int(bounds[p + 1] - bounds[p])
                columns = []
                for (name, _), pos in zip(names, at):
                    lo, hi = pos[p], pos[p + 1]
                    if lo < hi:
                        dense = np.zeros(n, np.int64)
                        dense[row[lo:hi] - a] = value[lo:hi]
                        absent = np.ones(n, np.bool_)
                        absent[row[lo:hi] - a] = False
                        columns.append(pl.Series(name, np.ma.masked_array(dense, mask=absent)))
                yield table.slice(a, n).with_columns(columns) if columns else table.slice(a, n)

        return parts()

    def _close_bursts(self, intervals: IntervalArrays, samples: SampleArrays, mpi: MpiArrays, h: np.ndarray,
                      calls: pl.DataFrame, spans: tuple[np.ndarray, np.ndarray, np.ndarray],
                      waiting: tuple[np.ndarray, np.ndarray]) -> tuple[Iterator[pl.DataFrame], Iterator[pl.DataFrame]]:
        """The final bursts, and ``calls`` (whose thread ids, starts and ends are ``spans``) with the counters
        measured inside them, in parts (:meth:`_with_counters`); the samples neither holds are kept in
        :attr:`loose`."""
        entries = self._recent_entries.concat(mpi.take(np.flatnonzero(mpi.call >= 0)))
        order = self._thread_order()
        n_codes = max(len(self._counters.names), 1)
        (th, cpu, t0, t1, seq, entry, cells, c_cells, carry_iv, carry_sm, carry_value, loose_sm, keep, n_repeated,
         wrapped) = _assemble(
            self.n_threads, order, intervals.thread, intervals.cpu, intervals.start_ns, intervals.end_ns,
            samples.thread, samples.time_ns, samples.counter, samples.value, n_codes,
            entries.thread, entries.time_ns, h, self._burst_next,
            *spans, *waiting, FOLD_CARRIED_SAMPLES)
        if wrapped >= 0:
            self._refuse_sum(samples, wrapped)
        self.repeated_bursts += n_repeated
        self._intervals = intervals.take(carry_iv)
        self._samples = samples.take(carry_sm)
        self._samples.value = carry_value
        if loose_sm.size and self.keep_loose:
            self.loose.append(samples.take(loose_sm))
        self._recent_entries = entries.take(keep)
        closed = entry >= 0
        pick = np.where(closed, entry, 0)
        closing = [names.series(name, np.where(closed, codes[pick], -1) if codes.size else np.full(entry.size, -1))
                   for codes, names, name in ((entries.call, self._calls, "mpi_call"),
                                              (entries.site, self._sites, "call_site"))]
        bursts = pl.DataFrame([
            constant("run_id", self.run_id, pl.String, th.size),
            pl.Series("appl", self._appl[th]), pl.Series("task", self._task[th]), pl.Series("thread", self._thread[th]),
            pl.Series("burst_seq", seq), _cpu_series(cpu), pl.Series("start_ns", t0), pl.Series("end_ns", t1),
            pl.Series("duration_ns", t1 - t0), *closing,
        ])
        return self._with_counters(bursts, cells), self._with_counters(calls, c_cells)

    def _refuse_sum(self, samples: SampleArrays, row: int) -> None:
        """Refuse the trace: the sum sample ``row`` joins passes int64 (a wrapped number stored as a count would be
        wrong silently, attack 17 F1); each sample fits, the reader checks that, but not the sum of many."""
        t = int(samples.thread[row])
        raise TraceFormatError(self.source, None, (
            f"counter {self._counters.names[int(samples.counter[row])]} of thread {self._appl[t]}:{self._task[t]}:"
            f"{self._thread[t]}: the sum of its samples in one burst or MPI call passes int64 "
            f"({_MAX_I64}) at the sample at {int(samples.time_ns[row])} ns; no real counter gets there"))

    def take_loose(self) -> SampleArrays:
        """The counter samples found so far that neither a burst nor an MPI call holds (emptied)."""
        out = SampleArrays.empty()
        for part in self.loose:
            out = out.concat(part)
        self.loose = []
        return out

    def _pair_calls(self, mpi: MpiArrays,
                    h: np.ndarray) -> tuple[pl.DataFrame, tuple[np.ndarray, np.ndarray, np.ndarray], MpiArrays]:
        """Pair each MPI entry with the next exit of the same kind on its thread: (calls, their thread ids, starts
        and ends, the events still waiting)."""
        rows, end, waiting, n_repeated = _pair(self.n_threads, self._thread_order(), mpi.thread, mpi.time_ns, h,
                                               NEVER, mpi.kind, mpi.call, mpi.site, mpi.cpu, mpi.bytes_sent,
                                               mpi.bytes_recv, mpi.root, mpi.comm, mpi.known)
        self.repeated_mpi_entries += n_repeated
        tid = mpi.thread[rows].astype(np.int64)
        seq = self._numbered(tid, self._call_next)
        g = mpi.take(rows)
        n = rows.size
        start = g.time_ns
        call_kind = self._catalogue_kinds()[g.call]
        kind = np.where(call_kind >= 0, call_kind, g.kind)
        value = {c: pl.Series(c, np.ma.masked_array(getattr(g, c), mask=(g.known >> k) & 1 == 0),
                              pl.Int32 if c == "root" else pl.Int64)
                 for k, c in enumerate(MPI_VALUE_COLUMNS)}
        calls = pl.DataFrame(
            [
                constant("run_id", self.run_id, pl.String, n),
                pl.Series("appl", self._appl[tid]),
                pl.Series("task", self._task[tid]),
                pl.Series("thread", self._thread[tid]),
                pl.Series("call_seq", seq, pl.Int64),
                _cpu_series(g.cpu),
                self._calls.series("mpi_call", g.call),
                gathered(_KIND_NAMES, kind),
                pl.Series("start_ns", start, pl.Int64),
                pl.Series("end_ns", end, pl.Int64),
                pl.Series("duration_ns", end - start, pl.Int64),
                value["bytes_sent"],
                value["bytes_recv"],
                constant("peer", None, pl.Int32, n),
                constant("n_messages", 0, pl.Int32, n),
                value["comm"],
                value["root"],
                constant("tag", None, pl.Int64, n),
                self._sites.series("call_site", g.site),
            ]
        )
        return calls, (tid, start, end), mpi.take(waiting)

    def _catalogue_kinds(self) -> np.ndarray:
        """Per call code, the kind the MPI call catalogue gives its name (index in MPI_KINDS), -1 where it lists
        none (the format's hint stands)."""
        names = self._calls.names
        if len(names) > self._call_kind.size:
            new = [mpi_kind(n) for n in names[self._call_kind.size:]]
            self._call_kind = np.concatenate([self._call_kind, np.asarray(
                [MPI_KINDS.index(k) if k is not None else -1 for k in new], dtype=np.int8)])
        return self._call_kind


class _Names:
    """Strings coded in order of first appearance (appended to while a reader's thread prepares the next chunk)."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self._code: dict[str, int] = {}
        self._column = pl.Series([""], dtype=pl.String)  # the names as a column (``[""]`` for none) ...
        self._column_of = 0  # ... built of this many names

    def code(self, name: str) -> int:
        code = self._code.get(name)
        if code is None:
            code = self._code[name] = len(self.names)
            self.names.append(name)
        return code

    def series(self, name: str, codes: np.ndarray) -> pl.Series:
        """The strings of ``codes`` as a column ``name``, NULL where a code is -1."""
        missing = codes < 0
        idx = pl.Series(np.ma.masked_array(codes, mask=missing) if missing.any() else codes)
        if self._column_of != len(self.names):  # names were added since
            self._column, self._column_of = pl.Series(self.names, dtype=pl.String), len(self.names)
        return self._column.gather(idx).alias(name)


@cached_njit
def _containing_call(ck: np.ndarray, cs: np.ndarray, ce: np.ndarray, mk: np.ndarray, mt: np.ndarray) -> np.ndarray:
    """For each (thread key, time) of ``mk``/``mt``, the index of the call (sorted by thread key, then start) of
    that thread that started last at or before the time and ends at or after it; -1 if none.

    Each thread's calls are one run of rows, found by a search among the runs' keys; within it the search starts
    where the thread's previous time left it and gallops (issue 27: a thread's messages come in about time order,
    so most are a step or two from the one before, instead of a search among every call of the trace)."""
    n = ck.shape[0]
    n_runs = 0
    for i in range(n):
        if i == 0 or ck[i] != ck[i - 1]:
            n_runs += 1
    rk = np.empty(n_runs, dtype=np.int64)  # each run's thread key, its first row, one past its last
    r0 = np.empty(n_runs, dtype=np.int64)
    r1 = np.empty(n_runs, dtype=np.int64)
    r = -1
    for i in range(n):
        if i == 0 or ck[i] != ck[i - 1]:
            r += 1
            rk[r] = ck[i]
            r0[r] = i
        r1[r] = i + 1
    cur = r0.copy()  # per run: the previous answer's first call starting after its time
    out = np.empty(mk.shape[0], dtype=np.int64)
    for i in range(mk.shape[0]):
        k = mk[i]
        t = mt[i]
        lo, hi = 0, n_runs
        while lo < hi:  # the run of thread k
            mid = (lo + hi) // 2
            if rk[mid] < k:
                lo = mid + 1
            else:
                hi = mid
        if lo == n_runs or rk[lo] != k:
            out[i] = -1
            continue
        a, b = r0[lo], r1[lo]
        c = cur[lo]
        if c > a and cs[c - 1] > t:  # before the previous time: search [a, c)
            lo2, hi2 = a, c
        else:  # at or after it: gallop from c to a bound, then search
            step = 1
            lo2 = c
            while lo2 + step <= b and cs[lo2 + step - 1] <= t:
                lo2 += step
                step *= 2
            hi2 = min(lo2 + step, b)
        while lo2 < hi2:  # first call of the run starting after t
            mid = (lo2 + hi2) // 2
            if cs[mid] <= t:
                lo2 = mid + 1
            else:
                hi2 = mid
        cur[lo] = lo2
        j = lo2 - 1
        out[i] = j if j >= a and t <= ce[j] else -1
    return out


@cached_njit
def _add_messages(rows, t, peer_m, tag_m, size_m, mark, add, n_msg, best, peer, tag, side):
    """One side's messages (``mark`` 1 sent, 2 received; sent ones first) into the per-call columns of
    :func:`_message_columns`: a call's first message is its earliest of the first side that has one. Returns the
    first message whose add to its call's bytes passed int64 (-1: none; the sums are then not to be used)."""
    for i in range(rows.shape[0]):
        r = rows[i]
        if r < 0:
            continue
        s = add[r] + size_m[i]
        if _overflows(add[r], size_m[i], s):
            return i
        add[r] = s
        n_msg[r] += 1
        if (side[r] == 0 or side[r] == mark) and t[i] < best[r]:
            best[r] = t[i]
            peer[r] = peer_m[i]
            tag[r] = tag_m[i]
            side[r] = mark
    return -1


@cached_njit
def _message_columns(n_calls, row_s, t_s, peer_s, tag_s, size_s, row_r, t_r, peer_r, tag_r, size_r):
    """Per call: bytes sent and received by its messages, their number, and the peer and tag of its first
    message (the earliest sent one, else the earliest received one; ``side`` 0: no message); and the first sent
    and the first received message whose add passed int64 (-1: none)."""
    add_s = np.zeros(n_calls, dtype=np.int64)
    add_r = np.zeros(n_calls, dtype=np.int64)
    n_msg = np.zeros(n_calls, dtype=np.int32)
    peer = np.zeros(n_calls, dtype=np.int32)
    tag = np.zeros(n_calls, dtype=np.int64)
    side = np.zeros(n_calls, dtype=np.uint8)
    best = np.full(n_calls, _MAX_I64, dtype=np.int64)
    wrapped_s = _add_messages(row_s, t_s, peer_s, tag_s, size_s, 1, add_s, n_msg, best, peer, tag, side)
    wrapped_r = -1 if wrapped_s >= 0 else _add_messages(row_r, t_r, peer_r, tag_r, size_r, 2, add_r, n_msg, best,
                                                         peer, tag, side)
    return add_s, add_r, n_msg, peer, tag, side, wrapped_s, wrapped_r


def packed_thread_keys(frame: pl.DataFrame, prefix: str = "") -> np.ndarray:
    """:func:`~synthtrace.tracelib.thread_key.packed` of the ``{prefix}appl``, ``task`` and ``thread`` columns of
    ``frame`` (NULL as 0), computed by Polars into one writable int64 array: NumPy's packing made three int64 copies
    first (issue 27: 290 MB more at the peak of a 2 GB trace's ingest). Parts outside [0, MASK] are refused as
    ``packed`` refuses them."""
    cols = [pl.col(f"{prefix}{c}").fill_null(0) for c in THREAD_KEYS]
    lo, hi = frame.select(pl.min_horizontal(c.min() for c in cols).alias("lo"),
                          pl.max_horizontal(c.max() for c in cols).alias("hi")).row(0)
    if frame.height and (lo < 0 or hi > MASK):
        raise ValueError(f"appl, task and thread numbers must lie in [0, {MASK}]")
    return writable(frame.select(thread_key(*cols)).to_series())


def message_rows(spans: pl.DataFrame, messages: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row in ``spans`` (MPI calls by their thread keys, start_ns and end_ns) of the call holding each message's send
    side, of the call holding its receive side and of the receiver's call holding its physical receive time
    (``r_phys_ns``: the call that completed the receive, e.g. a wait after an ``MPI_Irecv``; the receive side's when
    the messages have no such column), -1 for none, one row per message in the order of ``messages``.

    A message's send side belongs to the sender's call that contains its logical send time, its receive side
    to the receiver's call that contains its logical receive time (times at call boundaries count as inside;
    among calls starting at the same time, the last one).
    """
    if not spans.height or not messages.height:
        return tuple(np.full(messages.height, -1, dtype=np.int64) for _ in range(3))
    return placed_rows(packed_thread_keys(spans), writable(spans.get_column("start_ns")),
                       writable(spans.get_column("end_ns")), messages)


def placed_rows(ck: np.ndarray, cs: np.ndarray, ce: np.ndarray,
                messages: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`message_rows` of calls given as three int64 arrays in the calls' order: their packed thread keys
    (:func:`~synthtrace.tracelib.thread_key.packed`), starts and ends (ns). The arrays are sorted in place (by
    thread, then start), so that no sorted copy of them is held (issue 27: memory of a 2 GB trace's ingest)."""
    n = ck.shape[0]
    if not n or not messages.height:
        return tuple(np.full(messages.height, -1, dtype=np.int64) for _ in range(3))
    order = np.argsort(ck, kind="stable")  # calls come grouped by thread in start order: runs, cheap
    for a in (ck, cs, ce):
        a[:] = a[order]
    if not in_thread_order(ck, cs):
        resort = np.lexsort((cs, ck))
        order = order[resort]
        for a in (ck, cs, ce):
            a[:] = a[resort]

    def rows(prefix: str, time: str) -> np.ndarray:
        # a half message (its other side unknown: NULL keys) is keyed (0, 0, 0), which no call has
        pos = _containing_call(ck, cs, ce, packed_thread_keys(messages, prefix),
                               writable(messages.get_column(time).fill_null(0)))
        return np.where(pos >= 0, order[np.maximum(pos, 0)], -1)

    received = rows("r_", "r_time_ns")
    completed = rows("r_", "r_phys_ns") if "r_phys_ns" in messages.columns else received
    return rows("s_", "s_time_ns"), received, completed


def in_thread_order(ck: np.ndarray, cs: np.ndarray) -> bool:
    """Whether calls given by packed thread keys ``ck`` and starts ``cs`` (ns) are sorted by (thread, start)."""
    return ck.size <= 1 or bool(np.all((ck[1:] > ck[:-1]) | ((ck[1:] == ck[:-1]) & (cs[1:] >= cs[:-1]))))


def placed_rows_in_parts(parts: Callable[[], Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]],
                         messages: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """:func:`placed_rows` of calls that come in parts (``parts()`` yields each part's packed thread keys, starts
    and ends in ns, in the calls' order, and can be called again), holding one part's calls at a time; None when
    the calls are not in (thread, start) order across the parts, which :func:`placed_rows` needs whole (issue 23: a
    2 GB OTF2 archive's 20 M calls held 40 bytes each to place 6.5 M messages). The messages of each side are
    sorted by (thread key, time), so that those a part can hold are one slice of them: the call holding a time is
    the last one starting at or before it, found in the last part whose first call starts at or before it."""
    firsts: list[tuple[int, int]] = []
    last: tuple[int, int] | None = None
    for ck, cs, _ in parts():
        if not ck.size:
            continue
        if not in_thread_order(ck, cs) or (last is not None and (int(ck[0]), int(cs[0])) < last):
            return None
        firsts.append((int(ck[0]), int(cs[0])))
        last = (int(ck[-1]), int(cs[-1]))
    if not firsts or not messages.height:
        return tuple(np.full(messages.height, -1, dtype=np.int64) for _ in range(3))

    def rows(prefix: str, time: str) -> np.ndarray:
        mk = packed_thread_keys(messages, prefix)  # a half message's NULL keys are (0, 0, 0): before every call
        mt = writable(messages.get_column(time).fill_null(0))
        by = np.lexsort((mt, mk))
        sk, st = mk[by], mt[by]
        del mk, mt

        def first_at(key: int, start: int) -> int:  # the first message at or after (key, start)
            lo, hi = np.searchsorted(sk, key, side="left"), np.searchsorted(sk, key, side="right")
            return int(lo + np.searchsorted(st[lo:hi], start, side="left"))

        bounds = [first_at(k, s) for k, s in firsts] + [sk.size]
        out = np.full(sk.size, -1, dtype=np.int64)
        at, p = 0, 0
        for ck, cs, ce in parts():
            if ck.size:
                a, b = bounds[p], bounds[p + 1]
                pos = _containing_call(ck, cs, ce, sk[a:b], st[a:b])
                out[by[a:b]] = np.where(pos >= 0, pos + at, -1)
                p += 1
            at += ck.size
        return out

    sent, received = rows("s_", "s_time_ns"), rows("r_", "r_time_ns")
    return sent, received, rows("r_", "r_phys_ns") if "r_phys_ns" in messages.columns else received


def message_columns(spans: pl.DataFrame, messages: pl.DataFrame,
                    rows: tuple[np.ndarray, np.ndarray] | None = None) -> pl.DataFrame:
    """Point-to-point columns for MPI calls given by their thread keys, start_ns and end_ns (``spans``), one row
    per call in the order of ``spans``: ``_add_sent``, ``_add_recv`` (bytes), ``peer``, ``tag``, ``n_messages``.

    Each message counts for the calls :func:`message_rows` places it in (``rows``, when already computed).
    Collective sizes already on the calls are kept and added to. Only the calls' thread and time columns are read
    to place the messages; the new columns are added in the calls' row order.
    """
    row_s, row_r = (rows if rows is not None else message_rows(spans, messages))[:2]
    return columns_of_messages(spans.height, messages, row_s, messages, row_r)


def columns_of_messages(n_calls: int, sent: pl.DataFrame, row_s: np.ndarray, received: pl.DataFrame,
                        row_r: np.ndarray, source: str | Path = "<records>") -> pl.DataFrame:
    """:func:`message_columns` of ``n_calls`` calls from the messages ``sent`` by them (MESSAGE_SCHEMA rows, each
    sent by call ``row_s``) and those ``received`` (by call ``row_r``; -1: by none of them). Messages of one call
    count in the order given (the earliest one names its peer and tag; the first of equal times). A call whose
    messages' bytes pass int64 is refused (:class:`TraceFormatError` naming ``source``, the trace's file)."""
    s = {c: writable(sent.get_column(c).cast(pl.Int64)) for c in ("s_time_ns", "r_task", "tag", "size")}
    r = {c: writable(received.get_column(c).cast(pl.Int64)) for c in ("r_time_ns", "s_task", "tag", "size")}
    add_s, add_r, n_msg, peer, tag, side, wrapped_s, wrapped_r = _message_columns(
        n_calls, row_s, s["s_time_ns"], s["r_task"], s["tag"], s["size"],
        row_r, r["r_time_ns"], r["s_task"], r["tag"], r["size"])
    for wrapped, frame, p, what in ((wrapped_s, sent, "s", "sent"), (wrapped_r, received, "r", "received")):
        if wrapped >= 0:
            appl, task, thread, time = (frame.get_column(f"{p}_{c}")[int(wrapped)] for c in (*THREAD_KEYS, "time_ns"))
            raise TraceFormatError(source, None, (
                f"the bytes of the messages one MPI call of thread {appl}:{task}:{thread} {what} pass int64 "
                f"({_MAX_I64}) at the message {what} at {time} ns; no real message gets there"))
    none = side == 0
    return pl.DataFrame({"_add_sent": add_s, "_add_recv": add_r,
                         "peer": np.ma.masked_array(peer, mask=none), "tag": np.ma.masked_array(tag, mask=none),
                         "n_messages": n_msg})


def message_ends(spans: pl.DataFrame, rows: tuple[np.ndarray, np.ndarray, np.ndarray]) -> pl.DataFrame:
    """Per message (the rows of :func:`message_rows`): ``s_call_seq``/``s_comm`` of the call holding its send side,
    ``r_call_seq``/``r_comm`` of the one holding its receive side (NULL: none) and ``c_call_seq`` of the call that
    completed the receive (the receiving call when no call holds the physical receive), from the calls'
    ``call_seq`` and ``comm`` columns in ``spans``."""
    out = {}
    for side, r in zip(("s", "r", "c"), rows):
        held = r >= 0
        pick = pl.Series(np.where(held, r, 0))
        for c in ("call_seq", "comm")[: 1 if side == "c" else 2]:
            values = (spans.get_column(c).cast(pl.Int64).gather(pick) if spans.height
                      else pl.Series(c, [None] * r.size, pl.Int64))
            out[f"{side}_{c}"] = null_unless(values, held, f"{side}_{c}")
    return _ends_frame(out)


def message_ends_in_parts(parts: Callable[[], Iterator[pl.DataFrame]],
                          rows: tuple[np.ndarray, np.ndarray, np.ndarray]) -> pl.DataFrame:
    """:func:`message_ends` of calls that come in parts (``parts()`` yields each part's ``call_seq`` and ``comm``
    columns, in the calls' order, and can be called again), gathering from one part at a time (issue 23: the two
    columns of every call, 16 bytes a call, were held to gather a 2 GB OTF2 archive's message ends). Each side's
    messages are sorted by their call's row, so that those of a part are one slice of them."""
    out: dict[str, pl.Series] = {}
    for side, r in zip(("s", "r", "c"), rows):
        names = ("call_seq", "comm")[: 1 if side == "c" else 2]
        by = np.argsort(r, kind="stable")
        held = r[by]
        none = int(np.searchsorted(held, 0))  # rows -1 (no call) come first
        pieces: dict[str, list[pl.Series]] = {c: [pl.Series(c, [], pl.Int64).extend_constant(None, none)]
                                         for c in names}
        at = 0
        for part in parts():
            a, b = np.searchsorted(held, [at, at + part.height])
            for c in names:
                pieces[c].append(part.get_column(c).cast(pl.Int64).gather(held[a:b] - at))
            at += part.height
        del held
        back = np.empty_like(by)
        back[by] = np.arange(by.size)
        del by
        for c in names:
            out[f"{side}_{c}"] = pl.concat(pieces.pop(c)).gather(back).alias(f"{side}_{c}")
    return _ends_frame(out)


def _ends_frame(out: dict[str, pl.Series]) -> pl.DataFrame:
    """The frame of :func:`message_ends` from its columns (the completing call defaults to the receiving one)."""
    ends = pl.DataFrame(list(out.values()))
    return ends.with_columns(pl.coalesce("c_call_seq", "r_call_seq").alias("c_call_seq"))


def with_message_columns(calls: pl.DataFrame | pl.LazyFrame, columns: pl.DataFrame) -> pl.DataFrame | pl.LazyFrame:
    """``calls`` with the rows of :func:`message_columns` (same row order) applied, in MPI_CALL_SCHEMA. Lazy calls
    stay lazy (and stream: the columns are concatenated side by side, not broadcast as literals)."""
    added = columns.select(pl.all().name.prefix("msg."))  # side by side with the calls' own peer/tag/n_messages
    both = pl.concat([calls, added.lazy() if isinstance(calls, pl.LazyFrame) else added], how="horizontal")
    return both.with_columns(
        (pl.col("bytes_sent").fill_null(0) + pl.col("msg._add_sent")).alias("bytes_sent"),
        (pl.col("bytes_recv").fill_null(0) + pl.col("msg._add_recv")).alias("bytes_recv"),
        pl.col("msg.peer").alias("peer"), pl.col("msg.tag").alias("tag"), pl.col("msg.n_messages").alias("n_messages"),
    ).select(*[pl.col(k).cast(v) for k, v in MPI_CALL_SCHEMA.items()], *counter_columns(calls))



def attach_messages(calls: pl.LazyFrame, messages: pl.DataFrame) -> pl.LazyFrame:
    """Add point-to-point bytes, peer, tag and message counts to MPI calls (see :func:`message_columns`)."""
    spans = calls.select(*THREAD_KEYS, "start_ns", "end_ns").collect()
    return with_message_columns(calls, message_columns(spans, messages))
