"""One-pass Numba tokenizer for the record lines of a ``.prv`` chunk.

:func:`tokenize` walks the bytes of a block of whole lines once and fills numpy arrays with what the reader
keeps: Running state intervals, counter samples (absolute counters already turned into deltas), every other event
(MPI calls, collective sizes, callers and the rest; with their line number) and communication records. On the way it
checks every line (digits only, no empty field, field counts, record type, times within the header's duration, the
resource model, time order per thread); blank lines and comments are skipped and stops at the first bad line with an
error code that :func:`synthtrace.tracelib.formats.paraver.records.error_reason` turns into the one-line reason.

A record line that repeats, field for field, a line of its thread at the same time (a state or event record of the
same thread and time, a communication record of the same sender and logical send time) is one record written twice,
not two records (attack 9 C6): it is dropped and counted (``n_records[5:10]``), so that its counter samples are not
summed twice and a communication is not two messages. A line is looked for by a 64-bit hash of its parsed fields
(one multiply per field) among the last :data:`REPEAT_WINDOW` lines of its thread at that time, and a line whose
hash matches is compared with that line field by field (:func:`_same_fields`; attack 12: the hash alone let a crafted
line of other values, of the same thread and time, be dropped as a twin). A line whose twin lies in an earlier
block (no longer in memory) is still recognised by the hash alone.

State that spans chunks (last time per thread, the counter-type table, the last reading of absolute counters)
lives in a :class:`TokenizerState` and is updated in place.

The kernels are compiled with ``cache=True`` (:func:`synthtrace.tracelib.jit.cached_njit`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from synthtrace.tracelib.jit import cached_njit
from synthtrace.tracelib.formats.counter_columns import MAX_COUNTERS
from synthtrace.tracelib.formats.paraver.event_types import COUNTER_TYPE_MAX, COUNTER_TYPE_MIN

# ---------------------------------------------------------------------------------------------- error codes
E_NONE = 0
E_RECORD_TYPE = 2
E_FIELD_EMPTY = 3
E_NOT_DIGIT = 4
E_NOT_64BIT = 5
E_SHORT = 6
E_LONG = 7
E_ODD = 8
E_STATE_BACK = 11
E_CPU = 12
E_THREAD = 13
E_NOT_INT64 = 14
E_CPU_INT32 = 15
E_ORDER = 16
E_TOO_MANY_TYPES = 17
E_STATE_OVERLAP = 18


MAX_SLOTS = MAX_COUNTERS  # distinct counter types per trace
SLOT_TABLE = 2 * MAX_SLOTS  # open-addressing table of counter types (a power of two, half full at most)
MAX_ABSOLUTE = 64  # distinct absolute (cumulative) counter types per trace
REPEAT_WINDOW = 8  # lines per thread and time remembered to recognise a line written twice
N_COUNTS = 10  # Tokens.n_records: see there

_HASH_MUL = np.int64(-7046029254386353131)  # 0x9E3779B97F4A7C15 as int64: odd, so each step is a bijection

_INT64_MAX = np.int64(2**63 - 1)
_INT64_MIN = np.int64(-(2**63))
_INT32_MAX = 2**31 - 1
_U64_TENTH = np.uint64(1844674407370955161)  # (2**64 - 1) // 10
_U64_TEN = np.uint64(10)
_U64_INT64_MAX = np.uint64(2**63 - 1)


# ---------------------------------------------------------------------------------------------- state
@dataclass
class TokenizerState:
    """What the tokenizer carries from one chunk to the next (arrays updated in place).

    ``appl_first_task[a]`` / ``task_first_thread[j]`` map 1-based (appl, task, thread) to a dense thread id in
    (appl, task, thread) order; ``last_time`` is the last time (ns) seen per thread id (-1: none yet).
    Counter types get a slot in order of first appearance (``slot_type``); absolute ones also an index into
    ``abs_last`` (last reading per thread and absolute counter, -1: none).
    """

    time_scale: int
    max_raw_time: int  # largest time (trace units) within the header's duration
    n_cpus: int
    appl_first_task: np.ndarray  # int64 [n_appl + 1]
    task_first_thread: np.ndarray  # int64 [n_tasks + 1]
    last_time: np.ndarray = field(init=False)  # int64 [n_threads]
    state_end: np.ndarray = field(init=False)  # int64 [n_threads]: end (ns) of its last state record, -1: none
    slot_keys: np.ndarray = field(init=False)  # int64 [SLOT_TABLE]: counter type, -1 empty
    slot_index: np.ndarray = field(init=False)  # int32 [SLOT_TABLE]: its slot
    slot_type: np.ndarray = field(init=False)  # int64 [MAX_SLOTS]: counter type of each slot
    slot_abs: np.ndarray = field(init=False)  # int32 [MAX_SLOTS]: index into abs_last or -1
    counts: np.ndarray = field(init=False)  # int64 [4]: slots used, absolute counters used, spare, blocks read
    abs_last: np.ndarray = field(init=False)  # int64 [n_threads, MAX_ABSOLUTE], allocated on first need
    seen: SeenLines = field(init=False)  # the lines of each thread at its last time (records written twice)

    def __post_init__(self) -> None:
        n_threads = int(self.task_first_thread[-1])
        self.last_time = np.full(n_threads, -1, dtype=np.int64)
        self.state_end = np.full(n_threads, -1, dtype=np.int64)
        self.slot_keys = np.full(SLOT_TABLE, -1, dtype=np.int64)
        self.slot_index = np.zeros(SLOT_TABLE, dtype=np.int32)
        self.slot_type = np.zeros(MAX_SLOTS, dtype=np.int64)
        self.slot_abs = np.full(MAX_SLOTS, -1, dtype=np.int32)
        self.counts = np.zeros(4, dtype=np.int64)
        self.abs_last = np.full((0, MAX_ABSOLUTE), -1, dtype=np.int64)
        self.seen = SeenLines(np.zeros((n_threads, REPEAT_WINDOW), np.int64), np.zeros(n_threads, np.int64),
                              np.full(n_threads, -1, np.int64), np.zeros((n_threads, REPEAT_WINDOW), np.int64),
                              np.zeros(n_threads, np.int64), np.full((n_threads, REPEAT_WINDOW), -1, np.int64),
                              np.full((n_threads, REPEAT_WINDOW), -1, np.int64))

    @property
    def n_slots(self) -> int:
        return int(self.counts[0])


@dataclass
class Tokens:
    """The arrays of one chunk (views of the kernel's buffers, trimmed to their fill)."""

    st_thread: np.ndarray  # int32 thread id of Running intervals
    st_cpu: np.ndarray  # int32
    st_start: np.ndarray  # int64 ns
    st_end: np.ndarray  # int64 ns
    cn_thread: np.ndarray  # int32 thread id of counter samples
    cn_time: np.ndarray  # int64 ns
    cn_slot: np.ndarray  # int32 counter slot (TokenizerState.slot_type)
    cn_value: np.ndarray  # int64 count (delta for absolute counters)
    ev_thread: np.ndarray  # int32 thread id of the other events (not counters)
    ev_cpu: np.ndarray  # int32
    ev_time: np.ndarray  # int64 ns
    ev_type: np.ndarray  # int64
    ev_value: np.ndarray  # int64
    ev_line: np.ndarray  # int64 1-based line
    comms: np.ndarray  # int64 [n, 15]: 14 fields (times in ns) and the line
    n_records: np.ndarray  # int64 [N_COUNTS]: [1..4] records of type 1..4; [0]: records with a time beyond the
    # header's end; [5..7]: lines of type 1..3 dropped as a line written twice, [8] their counter samples, [9] their
    # other events
    n_lines: int
    error: np.ndarray  # int64 [5]: code, line, field (1-based), line start offset, previous time (order errors)


# ---------------------------------------------------------------------------------------------- kernel arguments
class Resources(NamedTuple):
    """The header's model as the kernel checks it: ns per trace time unit, the largest time (trace units), cpus
    (0: no limit) and the dense thread numbering (see :class:`TokenizerState`)."""

    scale: int
    max_raw_time: int
    n_cpus: int
    appl_first_task: np.ndarray
    task_first_thread: np.ndarray


class CounterSlots(NamedTuple):
    """The open-addressing table of counter types (see :class:`TokenizerState`): type per bucket (-1 empty), slot
    per bucket, type per slot, absolute-counter index per slot (-1: not absolute), counts (slots, absolute)."""

    keys: np.ndarray
    index: np.ndarray
    type: np.ndarray
    absolute: np.ndarray
    counts: np.ndarray


class StateColumns(NamedTuple):
    """Running intervals: thread id, cpu, start and end (ns)."""

    thread: np.ndarray
    cpu: np.ndarray
    start: np.ndarray
    end: np.ndarray


class SampleColumns(NamedTuple):
    """Counter samples: thread id, time (ns), counter slot, value."""

    thread: np.ndarray
    time: np.ndarray
    slot: np.ndarray
    value: np.ndarray


class EventColumns(NamedTuple):
    """Events other than counters: thread id, cpu, time (ns), type, value, 1-based line."""

    thread: np.ndarray
    cpu: np.ndarray
    time: np.ndarray
    type: np.ndarray
    value: np.ndarray
    line: np.ndarray


class SeenLines(NamedTuple):
    """Per thread id, hashes of the record lines read at its last time (states and events: ``line``, their number in
    ``n_line``, a ring of :data:`REPEAT_WINDOW`) and of the communications it sent at the logical send time
    ``comm_time`` (``comm``, ``n_comm``); where each of those lines is (``line_at``, ``comm_at``: its block number
    << :data:`_BLOCK_SHIFT` | its offset in that block), to compare a line whose hash matches field by field."""

    line: np.ndarray
    n_line: np.ndarray
    comm_time: np.ndarray
    comm: np.ndarray
    n_comm: np.ndarray
    line_at: np.ndarray
    comm_at: np.ndarray


#: a seen line's place: its block number shifted by this many bits, or'ed with its byte offset in the block
_BLOCK_SHIFT = 40
_OFFSET_MASK = (1 << _BLOCK_SHIFT) - 1


@cached_njit(inline="always")
def _seen_before(hashes: np.ndarray, at: np.ndarray, row: int, n: int, h: int, buf: np.ndarray, ls: int,
                 block: int) -> bool:
    """Whether the line at ``buf[ls]`` (hash ``h``) repeats one of the first ``min(n, REPEAT_WINDOW)`` lines of
    ``hashes[row]`` (places ``at[row]``): the same hash, and the same fields (:func:`_same_fields`) when that line
    is in this block (``block``: its number << :data:`_BLOCK_SHIFT`); one of an earlier block, no longer in memory,
    by its hash alone. Indexed in place: a view of the row would cost a reference count per line."""
    for k in range(min(n, hashes.shape[1])):
        if hashes[row, k] == h:
            where = at[row, k]
            if where - (where & _OFFSET_MASK) != block or _same_fields(buf, where & _OFFSET_MASK, ls):
                return True
    return False


@cached_njit(inline="always")
def _is_digit(c: int) -> bool:
    return 48 <= c <= 57


@cached_njit
def _same_fields(buf: np.ndarray, a: int, b: int) -> bool:
    """Whether the record lines starting at ``buf[a]`` and ``buf[b]`` (both read without error) hold the same
    fields: the same record type, then field for field the same sign and digits (leading zeros aside); blanks and
    a CR before the line end aside."""
    if buf[a] != buf[b]:
        return False
    a += 1
    b += 1
    while True:
        more_a = buf[a] == 58
        if more_a != (buf[b] == 58):
            return False  # one line has more fields
        if not more_a:
            return True
        a += 1
        b += 1
        if (buf[a] == 45) != (buf[b] == 45):
            return False
        if buf[a] == 45:
            a += 1
            b += 1
        while buf[a] == 48 and _is_digit(buf[a + 1]):
            a += 1
        while buf[b] == 48 and _is_digit(buf[b + 1]):
            b += 1
        while _is_digit(buf[a]) and _is_digit(buf[b]):
            if buf[a] != buf[b]:
                return False
            a += 1
            b += 1
        if _is_digit(buf[a]) or _is_digit(buf[b]):
            return False


class Outputs(NamedTuple):
    """The kernel's output arrays; ``comms``: int64 [n, 15], the 14 fields of a communication and its line."""

    states: StateColumns
    samples: SampleColumns
    events: EventColumns
    comms: np.ndarray


class Progress(NamedTuple):
    """Where a block's tokenizing stands: cursor (byte offset, lines done), fill count of each output, records
    per type, error (code, line, field, line offset, previous time)."""

    cursor: np.ndarray
    fill: np.ndarray
    n_records: np.ndarray
    error: np.ndarray


# ---------------------------------------------------------------------------------------------- kernels
@cached_njit(inline="always")
def _thread_id(appl: int, task: int, thread: int, appl_first_task: np.ndarray, task_first_thread: np.ndarray) -> int:
    """Dense id of a 1-based (appl, task, thread), -1 when the header's resource model has no such thread."""
    if appl < 1 or appl >= appl_first_task.shape[0]:
        return -1
    if task < 1 or task > appl_first_task[appl] - appl_first_task[appl - 1]:
        return -1
    j = appl_first_task[appl - 1] + task - 1
    if thread < 1 or thread > task_first_thread[j + 1] - task_first_thread[j]:
        return -1
    return task_first_thread[j] + thread - 1


@cached_njit
def _slot_of(ctype: int, slots: CounterSlots) -> int:
    """Slot of a counter type, creating it on first sight; -1 when the tables are full."""
    mask = slots.keys.shape[0] - 1
    h = (ctype * 2654435761) & mask
    while True:
        k = slots.keys[h]
        if k == ctype:
            return slots.index[h]
        if k == -1:
            break
        h = (h + 1) & mask
    counts = slots.counts
    n = counts[0]
    if n >= slots.type.shape[0]:
        return -1
    absolute = (ctype // 1_000_000) % 2 == 1
    if absolute:
        if counts[1] >= MAX_ABSOLUTE:
            return -1
        slots.absolute[n] = counts[1]
        counts[1] += 1
    else:
        slots.absolute[n] = -1
    slots.keys[h] = ctype
    slots.index[h] = n
    slots.type[n] = ctype
    counts[0] = n + 1
    return n


@cached_njit
def _parse_u64(buf: np.ndarray, a: int, b: int) -> tuple[np.uint64, bool]:
    """The digits ``buf[a:b]`` as an unsigned 64-bit integer, and whether they overflow it."""
    u = np.uint64(0)
    for i in range(a, b):
        d = np.uint64(buf[i] - 48)
        if u > _U64_TENTH or (u == _U64_TENTH and d > np.uint64(5)):
            return u, True
        u = u * _U64_TEN + d
    return u, False


_DONE, _ERROR = 0, -1  # other statuses: bit mask of full outputs (1 states, 2 samples, 4 events, 8 comms)


@cached_njit(inline="always")
def _fail(err: np.ndarray, code: int, line: int, field: int, line_start: int) -> int:
    """Record a bad line in ``err`` (code, 1-based line and field, offset of the line's start); returns ``_ERROR``."""
    err[0] = code
    err[1] = line
    err[2] = field
    err[3] = line_start
    return _ERROR


@cached_njit
def _tokenize(buf: np.ndarray, n_bytes: int, res: Resources, last_time: np.ndarray, state_end: np.ndarray,
              slots: CounterSlots, seen: SeenLines, out: Outputs, at: Progress) -> int:
    """Tokenize ``buf[at.cursor[0]:n_bytes]`` (whole lines; ``at.cursor[1]``: number of the line before;
    ``at.cursor[2]``: the block's number, for the places of the lines it remembers).

    The arguments are named tuples (:class:`Resources`, :class:`CounterSlots`, :class:`SeenLines`,
    :class:`Outputs`, :class:`Progress`), read into local variables once: the loop body stays one function, as
    splitting it into inline steps cost 31% of the kernel's CPU time (benchmarks/results/tokenizer.md).

    Appends to the output arrays from ``at.fill`` (their fill counts) on; returns ``_DONE``, ``_ERROR``
    (``at.error`` filled) or, when output arrays cannot take the next line, the bit mask of those arrays (1 states,
    2 counter samples, 4 other events, 8 comms): ``cursor`` and ``fill`` then point at that line's start, so the
    call can resume with bigger arrays.
    """
    # the named arguments as local variables: the hot loop reads arrays, not tuple members
    scale, max_raw_time, n_cpus, appl_first_task, task_first_thread = res
    slot_keys, slot_index = slots.keys, slots.index
    st_th, st_cpu, st_t0, st_t1 = out.states
    cn_th, cn_t, cn_sl, cn_v = out.samples
    ev_th, ev_cpu, ev_t, ev_ty, ev_v, ev_ln = out.events
    cm = out.comms
    cursor, fill, n_rec, err = at
    seen_line, seen_n, comm_time, seen_comm, seen_n_comm, line_at, comm_at = seen
    block = cursor[2] << _BLOCK_SHIFT  # this block's number, as a seen line's place holds it
    n_st, n_cn, n_ev, n_cm = fill[0], fill[1], fill[2], fill[3]
    fv = np.zeros(16, dtype=np.int64)
    slot_mask = slot_keys.shape[0] - 1
    max_time = _INT64_MAX // scale  # the largest time (trace units) whose ns fit int64
    pos = cursor[0]
    line = cursor[1]
    status = _DONE
    while pos < n_bytes:
        line += 1
        ls = pos
        n_cn0 = n_cn
        n_ev0 = n_ev
        c = buf[pos]
        # ---- record type; blank lines (spaces, tabs, CR) and comments are skipped, as Paraver skips them
        if c == 10 or c == 13 or c == 32 or c == 9:
            q = pos
            while buf[q] == 32 or buf[q] == 9 or buf[q] == 13:
                q += 1
            if buf[q] == 10:
                pos = q + 1
                continue
        if c == 35:  # '#': comment
            while buf[pos] != 10:
                pos += 1
            pos += 1
            continue
        nxt = buf[pos + 1]
        if c < 49 or c > 52 or not (nxt == 58 or nxt == 10 or (nxt == 13 and buf[pos + 2] == 10)):
            status = _fail(err, E_RECORD_TYPE, line, 1, ls)
            break
        rtype = c - 48
        pos += 1
        if buf[pos] == 13:
            pos += 1
        nf = 1
        bad = 0  # first syntax error code
        bad_k = 0
        later = 0  # first value too large for int64 (reported after the other checks)
        later_k = 0
        tid = 0
        t_ns = 0
        bigmask = 0
        ptype = 0
        ptype_big = False
        full = 0
        hsh = np.int64(rtype)  # hash of the line's parsed fields (records written twice)
        # ---- fields
        while buf[pos] == 58:  # ':'
            pos += 1
            u = np.uint64(0)
            neg = False
            if buf[pos] == 45:  # a negative event value: Paraver's values are signed 64 bits, as its tools write
                neg = rtype == 2 and nf >= 7 and nf % 2 == 1
                if neg:
                    pos += 1
            fs = pos
            while True:
                d = np.int64(buf[pos]) - 48
                if 0 <= d <= 9:
                    u = u * _U64_TEN + np.uint64(d)  # wraps past 19 digits: redone exactly below
                    pos += 1
                else:
                    break
            nd = pos - fs
            c = buf[pos]
            if c == 32 or c == 9:  # blanks at the end of the line, which Paraver skips
                q = pos
                while buf[q] == 32 or buf[q] == 9:
                    q += 1
                if buf[q] == 10 or (buf[q] == 13 and buf[q + 1] == 10):
                    pos = q
                    c = buf[q]
            if c == 13 and buf[pos + 1] == 10:
                pos += 1  # CR of a CRLF line end
            elif c != 58 and c != 10:
                bad = E_NOT_DIGIT
                bad_k = nf + 1
                break
            if nd == 0:
                bad = E_FIELD_EMPTY
                bad_k = nf + 1
                break
            if nd >= 20:
                u, over = _parse_u64(buf, fs, fs + nd)
                if over:
                    bad = E_NOT_64BIT
                    bad_k = nf + 1
                    break
            big = u > _U64_INT64_MAX
            if neg:
                big = u > _U64_INT64_MAX + np.uint64(1)
                v = _INT64_MIN if u > _U64_INT64_MAX else -np.int64(u)
            elif not big:
                v = np.int64(u)
            elif rtype == 2 and nf >= 7 and nf % 2 == 1:
                # an event value: Extrae prints counters as unsigned 64 bits, so a negative delta d reads as
                # 2**64 - d; Paraver keeps values as signed 64 bits, and so does this
                big = False
                v = np.int64(u - _U64_INT64_MAX - np.uint64(1)) + _INT64_MIN
            else:
                v = _INT64_MAX
            hsh = (hsh ^ v) * _HASH_MUL
            if nf < 16:
                fv[nf] = v
                if big:
                    bigmask |= 1 << nf
            if rtype == 2 and nf >= 5:
                if nf == 5:
                    t_ns = v * scale
                    tid = _thread_id(fv[2], fv[3], fv[4], appl_first_task, task_first_thread)
                elif nf % 2 == 0:
                    ptype = v
                    ptype_big = big
                elif not ptype_big and tid >= 0 and full == 0:
                    if COUNTER_TYPE_MIN <= ptype < COUNTER_TYPE_MAX:
                        if big:
                            if later == 0:
                                later = E_NOT_INT64
                                later_k = nf + 1
                        else:
                            h = (ptype * 2654435761) & slot_mask
                            while slot_keys[h] != ptype and slot_keys[h] != -1:
                                h = (h + 1) & slot_mask
                            if slot_keys[h] == ptype:
                                sl = slot_index[h]
                            else:
                                sl = _slot_of(ptype, slots)
                            if sl < 0:
                                if later == 0:
                                    later = E_TOO_MANY_TYPES
                                    later_k = nf
                            elif n_cn == cn_th.shape[0]:
                                full = 2
                            else:
                                cn_th[n_cn] = tid
                                cn_t[n_cn] = t_ns
                                cn_sl[n_cn] = sl
                                cn_v[n_cn] = v
                                n_cn += 1
                    else:  # every other event: MPI calls and what describes them, and the rest (``events``)
                        if big:
                            if later == 0:
                                later = E_NOT_INT64
                                later_k = nf + 1
                        elif n_ev == ev_th.shape[0]:
                            full = 4
                        else:
                            ev_th[n_ev] = tid
                            ev_cpu[n_ev] = fv[1]
                            ev_t[n_ev] = t_ns
                            ev_ty[n_ev] = ptype
                            ev_v[n_ev] = v
                            ev_ln[n_ev] = line
                            n_ev += 1
            nf += 1
        if bad != 0:
            status = _fail(err, bad, line, bad_k, ls)
            break
        # pos is at the '\n'
        pos += 1
        # ---- field counts
        code = E_NONE
        if rtype == 1:
            if nf < 8:
                code = E_SHORT
            elif nf > 8:
                code = E_LONG
        elif rtype == 2:
            if nf < 8:
                code = E_SHORT
            elif (nf - 6) % 2 == 1:
                code = E_ODD
        elif rtype == 3:
            if nf < 15:
                code = E_SHORT
            elif nf > 15:
                code = E_LONG
        if code != E_NONE:
            status = _fail(err, code, line, nf, ls)
            break
        if rtype == 4:
            n_rec[4] += 1
            continue
        # ---- times, resource model
        k = 0
        if rtype == 1 and fv[6] < fv[5]:
            code = E_STATE_BACK
        elif rtype <= 2 and (bigmask & (1 << 5) or fv[5] > max_time):
            code = E_NOT_INT64
            k = 6
        elif rtype == 1 and (bigmask & (1 << 6) or fv[6] > max_time):
            code = E_NOT_INT64
            k = 7
        # a time beyond the header's end: kept (Paraver loads it), counted and said once
        late = rtype <= 2 and (fv[5] > max_raw_time or (rtype == 1 and fv[6] > max_raw_time))
        if code == E_NONE:
            for side in range(2 if rtype == 3 else 1):
                base = 6 * side
                cpu = fv[base + 1]
                if n_cpus > 0 and cpu > n_cpus:
                    code = E_CPU
                elif n_cpus == 0 and cpu > _INT32_MAX:
                    code = E_CPU_INT32
                else:
                    # an event line's thread was found at its time field already, from the same fields
                    t_id = tid if rtype == 2 else _thread_id(fv[base + 2], fv[base + 3], fv[base + 4],
                                                              appl_first_task, task_first_thread)
                    if t_id < 0:
                        code = E_THREAD
                    elif side == 0:
                        tid = t_id
                if code != E_NONE:
                    k = side + 1
                    break
        if code == E_NONE and rtype == 3:
            for f in (5, 6, 11, 12):
                if bigmask & (1 << f) or fv[f] > max_time:
                    code = E_NOT_INT64
                    k = f + 1
                    break
                late = late or fv[f] > max_raw_time
            if code == E_NONE:
                for f in (13, 14):
                    if bigmask & (1 << f):
                        code = E_NOT_INT64
                        k = f + 1
                        break
        if code == E_NONE and later != 0:
            code = later
            k = later_k
        if code != E_NONE:
            status = _fail(err, code, line, k, ls)
            break
        t_ns = fv[5] * scale
        if rtype <= 2 and t_ns < last_time[tid]:
            status = _fail(err, E_ORDER, line, 0, ls)
            err[4] = last_time[tid]
            break
        # ---- a line written twice: the same fields as a line of its thread at the same time
        hsh = (hsh ^ nf) * _HASH_MUL
        # (a line whose outputs did not fit is decided once they do: its counts are then whole)
        if full == 0 and (_seen_before(seen_line, line_at, tid, seen_n[tid], hsh, buf, ls, block)
                          if rtype <= 2 and t_ns == last_time[tid]
                          else rtype == 3 and comm_time[tid] == t_ns
                          and _seen_before(seen_comm, comm_at, tid, seen_n_comm[tid], hsh, buf, ls, block)):
            n_rec[4 + rtype] += 1
            n_rec[8] += n_cn - n_cn0
            n_rec[9] += n_ev - n_ev0
            n_cn = n_cn0
            n_ev = n_ev0
            continue
        # ---- a thread's states are one timeline: paraver-kernel draws each from its begin to the next one's begin,
        # so a state beginning inside the previous one has no one reading (two Running ones counted the overlap twice)
        if rtype == 1 and t_ns < state_end[tid]:
            status = _fail(err, E_STATE_OVERLAP, line, 0, ls)
            err[4] = state_end[tid]
            break
        # ---- room for this line's outputs, else suspend before it
        running = rtype == 1 and fv[7] == 1
        if running and n_st == st_th.shape[0]:
            full |= 1
        if rtype == 3 and n_cm == cm.shape[0]:
            full |= 8
        if full:
            n_cn = n_cn0
            n_ev = n_ev0
            pos = ls
            line -= 1
            status = full
            break
        n_rec[rtype] += 1
        if late:
            n_rec[0] += 1
        if rtype <= 2:
            if t_ns != last_time[tid]:
                seen_n[tid] = 0
            w = seen_n[tid] & (REPEAT_WINDOW - 1)  # a ring of REPEAT_WINDOW (a power of two) lines
            seen_line[tid, w] = hsh
            line_at[tid, w] = block | ls
            seen_n[tid] += 1
            last_time[tid] = t_ns
            if rtype == 1:
                state_end[tid] = fv[6] * scale
        elif rtype == 3:
            if t_ns != comm_time[tid]:
                comm_time[tid] = t_ns
                seen_n_comm[tid] = 0
            w = seen_n_comm[tid] & (REPEAT_WINDOW - 1)
            seen_comm[tid, w] = hsh
            comm_at[tid, w] = block | ls
            seen_n_comm[tid] += 1
        if running:
            st_th[n_st] = tid
            st_cpu[n_st] = fv[1]
            st_t0[n_st] = t_ns
            st_t1[n_st] = fv[6] * scale
            n_st += 1
        elif rtype == 3:
            for f in range(14):
                cm[n_cm, f] = fv[f + 1]
            for f in (4, 5, 10, 11):
                cm[n_cm, f] *= scale
            cm[n_cm, 14] = line
            n_cm += 1
    fill[0] = n_st
    fill[1] = n_cn
    fill[2] = n_ev
    fill[3] = n_cm
    cursor[0] = pos
    cursor[1] = line
    return status


@cached_njit
def _absolute_deltas(th, sl, val, t, slot_abs, abs_last) -> int:
    """Turn readings of absolute counters into deltas since the previous reading of the same thread and counter,
    dropping the first reading; compacts the samples in place and returns their new number."""
    m = 0
    for i in range(th.shape[0]):
        ai = slot_abs[sl[i]]
        keep = True
        v = val[i]
        if ai >= 0:
            prev = abs_last[th[i], ai]
            abs_last[th[i], ai] = v
            if prev < 0:
                keep = False
            else:
                v = v - prev
        if keep:
            th[m] = th[i]
            sl[m] = sl[i]
            val[m] = v
            t[m] = t[i]
            m += 1
    return m


def _grown(a: np.ndarray, n: int) -> np.ndarray:
    """A copy of ``a[:n]`` in an array twice as long."""
    b = np.empty((max(2 * a.shape[0], 64),) + a.shape[1:], dtype=a.dtype)
    b[:n] = a[:n]
    return b


def tokenize(buf: np.ndarray, first_line: int, state: TokenizerState, capacity: tuple[int, int, int, int]) -> Tokens:
    """Tokenize a block of whole lines (uint8 array ending with a newline) whose first line is ``first_line``.

    ``capacity`` is the initial size of the (state, counter sample, other event, comm) arrays; they grow as
    needed.
    On a bad line ``Tokens.error[0]`` is non-zero and the other arrays are incomplete.
    """
    s = state
    cap_st, cap_cn, cap_ev, cap_cm = (max(int(c), 64) for c in capacity)
    out = Outputs(
        StateColumns(np.empty(cap_st, np.int32), np.empty(cap_st, np.int32), np.empty(cap_st, np.int64),
                     np.empty(cap_st, np.int64)),
        SampleColumns(np.empty(cap_cn, np.int32), np.empty(cap_cn, np.int64), np.empty(cap_cn, np.int32),
                      np.empty(cap_cn, np.int64)),
        EventColumns(np.empty(cap_ev, np.int32), np.empty(cap_ev, np.int32), np.empty(cap_ev, np.int64),
                     np.empty(cap_ev, np.int64), np.empty(cap_ev, np.int64), np.empty(cap_ev, np.int64)),
        np.empty((cap_cm, 15), np.int64))
    s.counts[3] += 1  # this block's number (a seen line's place: _seen_before compares lines of one block)
    at = Progress(np.array([0, first_line - 1, s.counts[3]], np.int64), np.zeros(4, np.int64),
                  np.zeros(N_COUNTS, np.int64), np.zeros(5, np.int64))
    res = Resources(s.time_scale, s.max_raw_time, s.n_cpus, s.appl_first_task, s.task_first_thread)
    slots = CounterSlots(s.slot_keys, s.slot_index, s.slot_type, s.slot_abs, s.counts)
    while True:
        status = _tokenize(buf, buf.shape[0], res, s.last_time, s.state_end, slots, s.seen, out, at)
        if status <= 0:
            break
        n_st, n_cn, n_ev, n_cm = (int(x) for x in at.fill)
        out = Outputs(StateColumns(*(_grown(a, n_st) for a in out.states)) if status & 1 else out.states,
                      SampleColumns(*(_grown(a, n_cn) for a in out.samples)) if status & 2 else out.samples,
                      EventColumns(*(_grown(a, n_ev) for a in out.events)) if status & 4 else out.events,
                      _grown(out.comms, n_cm) if status & 8 else out.comms)
    n_st, n_cn, n_ev, n_cm = (int(x) for x in at.fill)
    sm = out.samples
    if status == _DONE and s.counts[1]:
        if s.abs_last.shape[0] < s.last_time.shape[0]:
            s.abs_last = np.full((s.last_time.shape[0], MAX_ABSOLUTE), -1, dtype=np.int64)
        n_cn = _absolute_deltas(sm.thread[:n_cn], sm.slot[:n_cn], sm.value[:n_cn], sm.time[:n_cn], s.slot_abs,
                                s.abs_last)
    return Tokens(*(a[:n_st] for a in out.states), *(a[:n_cn] for a in sm), *(a[:n_ev] for a in out.events),
                  out.comms[:n_cm], at.n_records, int(at.cursor[1]) - first_line + 1, at.error)
