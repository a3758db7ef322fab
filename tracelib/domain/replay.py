"""Replay of an MPI trace on another network (Dimemas' method): what the run would have taken had its messages
travelled on an ideal network (zero latency, infinite bandwidth) or on a given one.

Each thread keeps its computation as recorded: the time between the end of one MPI call and the start of the next
(and from the start of the trace to its first call, and from its last call to the end of its activity) is replayed
as it is. MPI calls take no time of their own; they wait only for what MPI makes them wait for:

- **point-to-point**: a message's send is posted by the call that holds its logical send time, its receive by the
  call that holds its logical receive time (Extrae writes the post of an ``MPI_Irecv`` there). A blocking receive
  completes in its own call, as does a receive recorded in a wait or test call (OTF2 records it where it
  completed); a non-blocking one in the first wait or test call (``MPI_Testall`` polling) after its post that ends
  once the message was sent. The data arrive ``latency + bytes / bandwidth`` after the send is posted (eager), or
  after both ends are posted for a blocking send, which is a rendezvous (as Dimemas replays ``MPI_Send``, which
  ``prv2dim`` writes synchronous); the sender of a rendezvous waits for the transfer; non-blocking sends never wait.
- **collectives** (blocking ones, and ``MPI_Init``, on which ``prv2dim`` puts a barrier): the k-th collective of
  every thread on one communicator is one operation; everybody leaves it when the last one arrived, plus the
  network's collective cost (``ceil(log2 P)`` stages of ``latency + bytes / bandwidth`` for the fan-in and/or
  fan-out, Dimemas' logarithmic model).

Messages do not contend for links (Dimemas with as many links per node as messages in flight; checked against it
in tests/test_pop_oracles.py): on a network slow enough for a node's messages to queue, the prediction is a lower
bound.

The event loop is one Numba kernel, each call visited once plus once per wake-up (> 1 M MPI calls/s,
benchmarks/results/pop.md). Dependencies a trace cut short leaves without their partner (a collective some
threads never reach, a receive whose send lies outside the trace) are released at the waiting thread's own time
and counted in :attr:`ReplayResult.n_released`, never left to hang.

Times are integer ns from the start of the trace; a :class:`Network` gives latency in ns and bandwidth in bytes/ns
(= GB/s).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import polars as pl

from synthtrace.tracelib.domain.mpi_calls import MPI_CALLS, calls_with
from synthtrace.tracelib.errors import BadInputError
from synthtrace.tracelib.jit import cached_njit
from synthtrace.tracelib.thread_key import packed, unpacked

#: the blocking collective roles and how many stages of the logarithmic model each has (fan-in, fan-out)
_STAGES = {"barrier": (1, 1), "one_to_all": (0, 1), "all_to_one": (1, 0), "all_to_all": (1, 1), "scan": (1, 0),
           "neighbor": (1, 0)}
_COLLECTIVES = {n: c.role for n, c in MPI_CALLS.items() if c.kind == "collective" and c.blocking}
_BLOCKING_RECV = calls_with(roles=("recv", "sendrecv"), blocking=True)
_RENDEZVOUS_SEND = calls_with(roles=("send",), blocking=True)
#: calls that complete requests: waits, and tests (a polling loop: the test that found the data completes it)
_COMPLETIONS = calls_with(roles=("wait", "test"))
#: MPI_Init: prv2dim puts a barrier at its end (Dimemas' default)
_INIT = "MPI_Init"


class ReplayInputError(BadInputError):
    """The calls or messages given to the replay lack the columns it needs."""


#: the networks a what-if may name: a latency up to a second (us), a bandwidth from a kB/s to a PB/s (GB/s);
#: beyond them a replay's nanosecond times overflow int64 (NaN compares false: refused too)
MAX_LATENCY_US = 1e6
MIN_BANDWIDTH_GBS, MAX_BANDWIDTH_GBS = 1e-6, 1e6


@dataclass(frozen=True)
class Network:
    """A network to replay on: ``latency_ns`` per message (ns) and ``bandwidth`` (bytes/ns, i.e. GB/s; inf: no
    transfer time). ``Network.ideal()`` is Dimemas' ideal network."""

    latency_ns: float = 0.0
    bandwidth: float = math.inf

    @classmethod
    def ideal(cls) -> Network:
        return cls(0.0, math.inf)

    @classmethod
    def of(cls, latency_us: float, bandwidth_gbs: float) -> Network:
        """From a machine profile's figures: latency in us, bandwidth in GB/s (1 GB/s = 1 byte/ns)."""
        # [helper security] attack 6 F20: NaN passed both comparisons, and an infinite figure is no network;
        # attack 7 A23: 1e308 us or 1e-308 GB/s overflowed the replay's int64 ns times into a negative runtime
        if not (0 <= latency_us <= MAX_LATENCY_US and MIN_BANDWIDTH_GBS <= bandwidth_gbs <= MAX_BANDWIDTH_GBS):
            raise BadInputError(f"network: latency must be 0 to {MAX_LATENCY_US:g} us and bandwidth "
                                f"{MIN_BANDWIDTH_GBS:g} to {MAX_BANDWIDTH_GBS:g} GB/s, got {latency_us} us, "
                                f"{bandwidth_gbs} GB/s")
        return cls(latency_us * 1e3, bandwidth_gbs)

    @property
    def ns_per_byte(self) -> float:
        return 0.0 if math.isinf(self.bandwidth) else 1.0 / self.bandwidth


@dataclass(frozen=True)
class ReplayResult:
    """The replayed run: ``runtime_ns`` (the last thread's end), per thread (appl, task, thread, ``end_ns``) and per
    call (the calls' keys, ``start_ns``/``end_ns`` replayed); ``n_released``: dependencies without a partner in the
    trace released at the waiting thread's time; ``n_messages``/``n_collectives``: what was replayed."""

    runtime_ns: int
    threads: pl.DataFrame
    calls: pl.DataFrame | None
    n_messages: int
    n_collectives: int
    n_released: int


# ============================================================================ the kernel
@cached_njit
def _wake(w, stack, top, queued, done):  # pragma: no cover - compiled
    """Queue thread ``w`` to be advanced (once: a queued or finished thread is not queued again); the new top."""
    if queued[w] or done[w]:
        return top
    stack[top] = w
    queued[w] = True
    return top + 1


@cached_njit
def _release(c, when, release, member_ptr, members, stack, top, queued, done):  # pragma: no cover - compiled
    """Release collective operation ``c`` at ``when`` and queue its members; the new top."""
    release[c] = when
    for k in range(member_ptr[c], member_ptr[c + 1]):
        top = _wake(members[k], stack, top, queued, done)
    return top


@cached_njit
def _replay_kernel(op_ptr, pre_ns, tail_ns, coll_of, coll_need, coll_cost, member_ptr, members,
                   post_ptr, posts, wait_ptr, waits, msg_cost, msg_rendezvous, msg_sender, msg_receiver, timed):
    """Advance every thread as far as its dependencies allow, waking a message's partner when one end is posted
    and a collective's members when it is released.

    ``posts``/``waits`` hold ``message * 2 + side`` (side 0: the send end, 1: the receive end). Returns (thread end
    times, per-op entry and exit times (empty unless ``timed``), number of dependencies released for want of a
    partner)."""
    n_threads = op_ptr.size - 1
    n_ops = pre_ns.size
    n_msg = msg_cost.size
    n_coll = coll_need.size
    pc = op_ptr[:-1].copy()
    t = np.zeros(n_threads, np.float64)
    entered = np.zeros(n_threads, np.bool_)  # the current op's computation and posts are done
    done = np.zeros(n_threads, np.bool_)
    queued = np.zeros(n_threads, np.bool_)
    spost = np.full(n_msg, -1.0)
    rpost = np.full(n_msg, -1.0)
    arrived = np.zeros(n_coll, np.int64)
    cmax = np.zeros(n_coll, np.float64)
    release = np.full(n_coll, -1.0)
    op_in = np.zeros(n_ops if timed else 0, np.float64)
    op_out = np.zeros(n_ops if timed else 0, np.float64)
    stack = np.empty(n_threads, np.int64)
    top = 0
    for th in range(n_threads - 1, -1, -1):
        top = _wake(th, stack, top, queued, done)
    remaining = n_threads
    n_released = 0
    while remaining > 0:
        if top == 0:
            # nothing can move: release what the earliest blocked thread waits for, at its own time
            best = -1
            for th in range(n_threads):
                if not done[th] and (best < 0 or t[th] < t[best]):
                    best = th
            i = pc[best]
            c = coll_of[i]
            if c >= 0 and release[c] < 0:
                top = _release(c, cmax[c] + coll_cost[c], release, member_ptr, members, stack, top, queued, done)
            for k in range(wait_ptr[i], wait_ptr[i + 1]):
                m = waits[k] >> 1
                if spost[m] < 0:
                    spost[m] = t[best]
                if rpost[m] < 0:
                    rpost[m] = t[best]
            n_released += 1
            top = _wake(best, stack, top, queued, done)
        top -= 1
        th = stack[top]
        queued[th] = False
        while not done[th]:
            i = pc[th]
            if i == op_ptr[th + 1]:
                t[th] += tail_ns[th]
                done[th] = True
                remaining -= 1
                break
            if not entered[th]:
                t[th] += pre_ns[i]
                if timed:
                    op_in[i] = t[th]
                entered[th] = True
                for k in range(post_ptr[i], post_ptr[i + 1]):
                    m = posts[k] >> 1
                    if posts[k] & 1:
                        rpost[m] = t[th]
                        w = msg_sender[m]
                    else:
                        spost[m] = t[th]
                        w = msg_receiver[m]
                    if w != th:
                        top = _wake(w, stack, top, queued, done)
                c = coll_of[i]
                if c >= 0:
                    arrived[c] += 1
                    if t[th] > cmax[c]:
                        cmax[c] = t[th]
                    if arrived[c] >= coll_need[c] and release[c] < 0:
                        queued[th] = True  # running: not queued again by its own release
                        top = _release(c, cmax[c] + coll_cost[c], release, member_ptr, members, stack, top, queued,
                                       done)
                        queued[th] = False
            ready = t[th]
            blocked = False
            c = coll_of[i]
            if c >= 0:
                if release[c] < 0:
                    blocked = True
                elif release[c] > ready:
                    ready = release[c]
            if not blocked:
                for k in range(wait_ptr[i], wait_ptr[i + 1]):
                    m = waits[k] >> 1
                    if spost[m] < 0 or (msg_rendezvous[m] and rpost[m] < 0):
                        blocked = True
                        break
                    start = spost[m]
                    if msg_rendezvous[m] and rpost[m] > start:
                        start = rpost[m]
                    if start + msg_cost[m] > ready:
                        ready = start + msg_cost[m]
            if blocked:
                break
            t[th] = ready  # a call takes no time of its own
            if timed:
                op_out[i] = t[th]
            entered[th] = False
            pc[th] = i + 1
    return t, op_in, op_out, n_released


@cached_njit
def _locate_kernel(op_ptr, op_start, tids, times):  # pragma: no cover - compiled
    """Per point: the last op of its thread starting at or before its time (the thread's first op if none; -1 for
    a thread without ops)."""
    out = np.full(tids.size, -1, np.int64)
    for j in range(tids.size):
        lo, hi = op_ptr[tids[j]], op_ptr[tids[j] + 1]
        if lo == hi:
            continue
        k = lo + np.searchsorted(op_start[lo:hi], times[j], side="right") - 1
        out[j] = k if k >= lo else lo
    return out


@cached_njit
def _completion_kernel(op_ptr, op_end, is_wait, tids, post_op, due):  # pragma: no cover - compiled
    """Per non-blocking receive: the first completion op (wait, test) after its post that ends at or after ``due``
    (the post itself when there is none)."""
    out = post_op.copy()
    for j in range(tids.size):
        for i in range(post_op[j] + 1, op_ptr[tids[j] + 1]):
            if is_wait[i] and op_end[i] >= due[j]:
                out[j] = i
                break
    return out


# ============================================================================ building the replay's arrays
THREAD = ["appl", "task", "thread"]
_CALL_COLUMNS = [*THREAD, "call_seq", "mpi_call", "start_ns", "end_ns"]
#: what the replay reads of a call besides :data:`_CALL_COLUMNS`, when known (the collectives' communicator and
#: sizes)
CALL_EXTRA_COLUMNS = ["comm", "bytes_sent", "bytes_recv"]
MESSAGE_COLUMNS = ["s_appl", "s_task", "s_thread", "s_time_ns", "r_appl", "r_task", "r_thread", "r_time_ns", "size"]


def _require(df: pl.DataFrame, cols: list[str], what: str) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ReplayInputError(f"replay: the {what} lack column(s) {', '.join(missing)}")


def _csr(owner: np.ndarray, values: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(pointer of length n+1, values ordered by owner) of a one-to-many relation given as pairs."""
    order = np.argsort(owner, kind="stable")
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(owner, minlength=n), out=ptr[1:])
    return ptr, values[order].astype(np.int64)


def _key(df: pl.DataFrame, prefix: str = "") -> np.ndarray:
    return packed(*(df[f"{prefix}{c}"].to_numpy() for c in THREAD))


@dataclass(frozen=True)
class _Ops:
    """The calls in replay order (thread, start, call_seq) as arrays, and that order's frame."""

    frame: pl.DataFrame
    tid: np.ndarray
    ptr: np.ndarray
    start: np.ndarray
    end: np.ndarray
    pre: np.ndarray


def _ops(calls: pl.DataFrame, keys: np.ndarray) -> _Ops:
    tid = np.searchsorted(keys, _key(calls))
    start, seq = calls["start_ns"].to_numpy(), calls["call_seq"].to_numpy()
    d_tid, d_start = np.diff(tid), np.diff(start)
    if np.all((d_tid > 0) | ((d_tid == 0) & (d_start >= 0))):  # as stored: by thread, then time
        frame = calls
    else:
        order = np.lexsort((seq, start, tid))
        frame, tid, start = calls[order], tid[order], start[order]
    end = frame["end_ns"].to_numpy()
    ptr = np.zeros(keys.size + 1, np.int64)
    np.cumsum(np.bincount(tid, minlength=keys.size), out=ptr[1:])
    prev_end = np.empty_like(end)
    prev_end[1:] = end[:-1]
    prev_end[ptr[:-1][ptr[:-1] < ptr[1:]]] = 0  # a thread's first call follows the start of the trace
    return _Ops(frame, tid.astype(np.int64, copy=False), ptr, start, end,
                np.maximum(start - prev_end, 0).astype(np.float64))


def _collectives(ops: _Ops, net: Network) -> tuple[np.ndarray, ...]:
    """Per op its collective operation (-1: none), and per operation its number of participants, cost (ns) and
    members (CSR of thread ids). The k-th collective of a thread on a communicator (MPI_Init: the appl's) is one."""
    name = ops.frame.get_column("mpi_call")
    at = np.flatnonzero((name.is_in(list(_COLLECTIVES)) | (name == _INIT)).to_numpy())
    coll = ops.frame[at].with_columns(pl.Series("_tid", ops.tid[at]), pl.Series("_op", at, pl.Int64))
    for c in ("comm", "bytes_sent", "bytes_recv"):
        if c not in coll.columns:
            coll = coll.with_columns(pl.lit(None, pl.Int64).alias(c))
    coll = coll.with_columns(
        pl.when(pl.col("mpi_call") == _INIT).then(pl.lit(-2, pl.Int64)).otherwise(pl.col("comm").fill_null(-1))
        .alias("_comm"),
        pl.col("mpi_call").cast(pl.String).replace_strict(_COLLECTIVES, default="barrier").alias("_role"))
    coll = coll.with_columns(pl.int_range(pl.len()).over("_tid", "_comm").alias("_k"))
    inst = (coll.group_by("appl", "_comm", "_k", maintain_order=True)
            .agg(pl.len().alias("need"), pl.col("_role").first(),
                 pl.col("bytes_sent").fill_null(0).max().alias("_in"),
                 pl.col("bytes_recv").fill_null(0).max().alias("_out"))
            .with_row_index("_coll"))
    stages = pl.col("need").cast(pl.Float64).log(2).ceil().clip(lower_bound=0)
    fan_in = pl.col("_role").replace_strict({r: s[0] for r, s in _STAGES.items()}, default=1, return_dtype=pl.Float64)
    fan_out = pl.col("_role").replace_strict({r: s[1] for r, s in _STAGES.items()}, default=1,
                                             return_dtype=pl.Float64)
    nspb = net.ns_per_byte
    inst = inst.with_columns((stages * (fan_in * (net.latency_ns + pl.col("_in") * nspb)
                                        + fan_out * (net.latency_ns + pl.col("_out") * nspb))).alias("_cost"))
    coll = coll.join(inst.select("appl", "_comm", "_k", "_coll"), on=["appl", "_comm", "_k"])
    coll_of = np.full(ops.frame.height, -1, np.int64)
    coll_of[coll["_op"].to_numpy()] = coll["_coll"].to_numpy()
    member_ptr, members = _csr(coll["_coll"].to_numpy().astype(np.int64), coll["_tid"].to_numpy(), inst.height)
    return (coll_of, inst["need"].to_numpy().astype(np.int64), inst["_cost"].to_numpy().astype(np.float64),
            member_ptr, members)


@dataclass(frozen=True)
class _Messages:
    """Per message (paired to its calls): sender and receiver thread, the ops posting its ends and completing its
    receive, whether the send is a rendezvous, and its transfer cost (ns)."""

    stid: np.ndarray
    rtid: np.ndarray
    sop: np.ndarray
    rop: np.ndarray
    cop: np.ndarray
    rendezvous: np.ndarray
    cost: np.ndarray

    @property
    def n(self) -> int:
        return int(self.stid.size)


def _messages(ops: _Ops, messages: pl.DataFrame, keys: np.ndarray, net: Network) -> _Messages:
    m = messages.select(MESSAGE_COLUMNS)
    sk, rk = _key(m, "s_"), _key(m, "r_")
    stid = np.minimum(np.searchsorted(keys, sk), keys.size - 1)
    rtid = np.minimum(np.searchsorted(keys, rk), keys.size - 1)
    known = (keys[stid] == sk) & (keys[rtid] == rk)  # both ends on threads being replayed
    stid, rtid = stid[known].astype(np.int64), rtid[known].astype(np.int64)
    s_time, r_time = m["s_time_ns"].to_numpy()[known], m["r_time_ns"].to_numpy()[known]
    sop = _locate_kernel(ops.ptr, ops.start, stid, s_time)
    rop = _locate_kernel(ops.ptr, ops.start, rtid, r_time)
    ok = (sop >= 0) & (rop >= 0)
    stid, rtid, sop, rop, s_time = stid[ok], rtid[ok], sop[ok], rop[ok], s_time[ok]
    name = ops.frame["mpi_call"]
    blocking_recv = name.is_in(list(_BLOCKING_RECV)).to_numpy()
    is_wait = name.is_in(list(_COMPLETIONS)).to_numpy()
    # a non-blocking receive completes in the first wait after its post that ends once the message was sent; a
    # receive recorded in the call that completed it (OTF2 writes it at the wait) completes there
    cop = np.where(blocking_recv[rop] | is_wait[rop], rop,
                   _completion_kernel(ops.ptr, ops.end, is_wait, rtid, rop, np.maximum(ops.end[rop] + 1, s_time)))
    size = m["size"].fill_null(0).to_numpy()[known][ok].astype(np.float64)
    rendezvous = name.is_in(list(_RENDEZVOUS_SEND)).to_numpy()[sop]
    return _Messages(stid, rtid, sop, rop, cop, rendezvous, net.latency_ns + size * net.ns_per_byte)


def replay_calls(calls: pl.LazyFrame) -> pl.DataFrame:
    """What :func:`replay` reads of ``calls`` (:data:`_CALL_COLUMNS`, and :data:`CALL_EXTRA_COLUMNS` when there), in
    the narrowest exact types: the call names as categories, sequence numbers, communicators and sizes as the
    smallest integers holding their values (issue 23: a call took ~110 bytes, now ~45); in the replay's order
    (thread, start, call_seq; ties as given), so that the replay holds no sorted copy."""
    have = calls.collect_schema()
    df = (calls.select([c for c in (*_CALL_COLUMNS, *CALL_EXTRA_COLUMNS) if c in have])
          .with_columns(pl.col("mpi_call").cast(pl.Categorical)).collect())
    order = df.select(pl.arg_sort_by(*THREAD, "start_ns", "call_seq", maintain_order=True)).to_series()
    for c in df.columns:  # a column at a time: one column's copy beside the frame, not the frame's
        column = df.get_column(c).gather(order)
        df = df.with_columns(column.shrink_dtype() if c in ("call_seq", *CALL_EXTRA_COLUMNS) else column)
    return df


def replay(calls: pl.DataFrame, messages: pl.DataFrame | None, thread_ends: pl.DataFrame,
           network: Network | None = None, *, replayed_calls: bool = True) -> ReplayResult:
    """Replay one run (see the module docstring).

    ``calls``: its MPI calls (appl, task, thread, call_seq, mpi_call, start_ns, end_ns; comm, bytes_sent,
    bytes_recv when known); ``messages``: its point-to-point messages with logical times (s_/r_ appl, task,
    thread, time_ns, size; None: none known); ``thread_ends``: every thread (appl, task, thread) with ``end_ns``,
    the end of its activity (a thread without MPI calls keeps its timeline). ``network``: None or
    ``Network.ideal()`` for the ideal network; ``replayed_calls``: give each call's replayed times (else
    :attr:`ReplayResult.calls` is None)."""
    _require(calls, _CALL_COLUMNS, "MPI calls")
    _require(thread_ends, [*THREAD, "end_ns"], "thread ends")
    net = network or Network.ideal()
    keys = np.unique(np.concatenate([_key(thread_ends), _key(calls)]))
    ops = _ops(calls, keys)
    if messages is not None and messages.height and keys.size:
        _require(messages, MESSAGE_COLUMNS, "messages")
        msgs = _messages(ops, messages, keys, net)
    else:
        empty = np.zeros(0, np.int64)
        msgs = _Messages(empty, empty, empty, empty, empty, np.zeros(0, np.bool_), np.zeros(0, np.float64))
    n_ops = ops.frame.height
    # each thread ends at the end of its activity (the later of its thread_ends and its last call)
    ends = np.zeros(keys.size, np.int64)
    np.maximum.at(ends, np.searchsorted(keys, _key(thread_ends)), thread_ends["end_ns"].fill_null(0).to_numpy())
    has_ops = ops.ptr[1:] > ops.ptr[:-1]
    last_end = np.zeros(keys.size, np.int64)
    last_end[has_ops] = ops.end[ops.ptr[1:][has_ops] - 1]
    tail = np.maximum(ends - last_end, 0).astype(np.float64)
    coll_of, need, cost, member_ptr, members = _collectives(ops, net)
    mi = np.arange(msgs.n, dtype=np.int64)
    post_ptr, posts = _csr(np.concatenate([msgs.sop, msgs.rop]), np.concatenate([mi * 2, mi * 2 + 1]), n_ops)
    rdv = np.flatnonzero(msgs.rendezvous)
    wait_ptr, waits = _csr(np.concatenate([msgs.cop, msgs.sop[rdv]]), np.concatenate([mi * 2 + 1, rdv * 2]), n_ops)
    t, op_in, op_out, n_released = _replay_kernel(
        ops.ptr, ops.pre, tail, coll_of, need, cost, member_ptr, members,
        post_ptr, posts, wait_ptr, waits, msgs.cost, msgs.rendezvous, msgs.stid, msgs.rtid, replayed_calls)
    appl, task, thread = unpacked(keys)
    thr = pl.DataFrame({"appl": appl.astype(np.int32), "task": task.astype(np.int32),
                        "thread": thread.astype(np.int32), "end_ns": np.round(t).astype(np.int64)})
    replayed = ops.frame.select(*THREAD, "call_seq", "mpi_call").with_columns(
        pl.Series("start_ns", np.round(op_in).astype(np.int64)), pl.Series("end_ns", np.round(op_out).astype(np.int64))
    ) if replayed_calls else None
    return ReplayResult(int(thr["end_ns"].max() or 0), thr, replayed, msgs.n, int(need.size), int(n_released))
