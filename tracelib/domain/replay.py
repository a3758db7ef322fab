"""Replay of an MPI trace on another network (Dimemas' method): what the run would have taken had its messages
travelled on an ideal network (zero latency, infinite bandwidth) or on a given one.

Each thread keeps its computation as recorded: the time between the end of one MPI call and the start of the next
(and from the start of the trace to its first call, and from its last call to the end of its activity) is replayed
as it is. MPI calls take no time of their own; they wait only for what MPI makes them wait for:

- **point-to-point**: a message's send is posted by the call that holds its logical send time, its receive by the
  call that holds its logical receive time (Extrae writes the post of an ``MPI_Irecv`` there). A blocking receive
  completes in its own call; a non-blocking one in the first wait-family call after its post that ends once the
  message was sent. The data arrive ``latency + bytes / bandwidth`` after the send is posted (eager), or after both
  ends are posted for a blocking send, which is a rendezvous (as Dimemas replays ``MPI_Send``, which ``prv2dim``
  writes synchronous); the sender of a rendezvous waits for the transfer; non-blocking sends never wait.
- **collectives** (blocking ones, and ``MPI_Init``, on which ``prv2dim`` puts a barrier): the k-th collective of
  every thread on one communicator is one operation; everybody leaves it when the last one arrived, plus the
  network's collective cost (``ceil(log2 P)`` stages of ``latency + bytes / bandwidth`` for the fan-in and/or
  fan-out, Dimemas' logarithmic model).

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

#: the blocking collective roles and how many stages of the logarithmic model each has (fan-in, fan-out)
_STAGES = {"barrier": (1, 1), "one_to_all": (0, 1), "all_to_one": (1, 0), "all_to_all": (1, 1), "scan": (1, 0),
           "neighbor": (1, 0)}
_COLLECTIVES = {n: c.role for n, c in MPI_CALLS.items() if c.kind == "collective" and c.blocking}
_BLOCKING_RECV = calls_with(roles=("recv", "sendrecv"), blocking=True)
_RENDEZVOUS_SEND = calls_with(roles=("send",), blocking=True)
_WAITS = calls_with(roles=("wait",))
#: MPI_Init: prv2dim puts a barrier at its end (Dimemas' default)
_INIT = "MPI_Init"


class ReplayInputError(BadInputError):
    """The calls or messages given to the replay lack the columns it needs."""


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
        if latency_us < 0 or bandwidth_gbs <= 0:
            raise BadInputError(f"network: latency must be >= 0 us and bandwidth > 0 GB/s, got {latency_us} us, "
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
    calls: pl.DataFrame
    n_messages: int
    n_collectives: int
    n_released: int


# ============================================================================ the kernel
@cached_njit
def _replay_kernel(op_ptr, pre_ns, own_ns, tail_ns, coll_of, coll_need, coll_cost, member_ptr, members,
                   post_ptr, posts, wait_ptr, waits, msg_cost, msg_rendezvous, msg_sender, msg_receiver):
    """Advance every thread as far as its dependencies allow, waking a message's partner when one end is posted
    and a collective's members when it is released.

    ``posts``/``waits`` hold ``message * 2 + side`` (side 0: the send end, 1: the receive end). Returns (thread end
    times, per-op entry and exit times, number of dependencies released for want of a partner)."""
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
    op_in = np.zeros(n_ops, np.float64)
    op_out = np.zeros(n_ops, np.float64)
    stack = np.empty(n_threads, np.int64)
    top = 0
    for th in range(n_threads - 1, -1, -1):
        stack[top] = th
        queued[th] = True
        top += 1
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
                release[c] = cmax[c] + coll_cost[c]
                for k in range(member_ptr[c], member_ptr[c + 1]):
                    w = members[k]
                    if not queued[w] and not done[w]:
                        stack[top] = w
                        queued[w] = True
                        top += 1
            for k in range(wait_ptr[i], wait_ptr[i + 1]):
                m = waits[k] >> 1
                if spost[m] < 0:
                    spost[m] = t[best]
                if rpost[m] < 0:
                    rpost[m] = t[best]
            n_released += 1
            if not queued[best]:
                stack[top] = best
                queued[best] = True
                top += 1
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
                    if w != th and not queued[w] and not done[w]:
                        stack[top] = w
                        queued[w] = True
                        top += 1
                c = coll_of[i]
                if c >= 0:
                    arrived[c] += 1
                    if t[th] > cmax[c]:
                        cmax[c] = t[th]
                    if arrived[c] >= coll_need[c] and release[c] < 0:
                        release[c] = cmax[c] + coll_cost[c]
                        for k in range(member_ptr[c], member_ptr[c + 1]):
                            w = members[k]
                            if w != th and not queued[w] and not done[w]:
                                stack[top] = w
                                queued[w] = True
                                top += 1
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
            t[th] = ready + own_ns[i]
            op_out[i] = t[th]
            entered[th] = False
            pc[th] = i + 1
    return t, op_in, op_out, n_released


# ============================================================================ building the replay's arrays
THREAD = ["appl", "task", "thread"]
_CALL_COLUMNS = [*THREAD, "call_seq", "mpi_call", "start_ns", "end_ns"]
_MESSAGE_COLUMNS = ["s_appl", "s_task", "s_thread", "s_time_ns", "r_appl", "r_task", "r_thread", "r_time_ns", "size"]


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


def _ops(calls: pl.DataFrame, threads: pl.DataFrame) -> pl.DataFrame:
    """The calls in replay order (thread, time), with ``_op`` (row), ``_tid`` and the computation before each."""
    ops = (calls.select(*_CALL_COLUMNS, *[c for c in ("comm", "bytes_sent", "bytes_recv") if c in calls.columns])
           .join(threads.select(*THREAD, "_tid"), on=THREAD, how="inner")
           .sort("_tid", "start_ns", "call_seq")
           .with_row_index("_op"))
    prev_end = pl.col("end_ns").shift(1).over("_tid").fill_null(0)
    return ops.with_columns((pl.col("start_ns") - prev_end).clip(lower_bound=0).alias("_pre"))


def _collectives(ops: pl.DataFrame, net: Network) -> tuple[np.ndarray, ...]:
    """Per op its collective operation (-1: none), and per operation its number of participants, cost (ns) and
    members (CSR of thread ids). The k-th collective of a thread on a communicator (MPI_Init: the appl's) is one."""
    coll = ops.filter(pl.col("mpi_call").is_in(list(_COLLECTIVES)) | (pl.col("mpi_call") == _INIT))
    if "comm" not in coll.columns:
        coll = coll.with_columns(pl.lit(None, pl.Int64).alias("comm"))
    if "bytes_sent" not in coll.columns:
        coll = coll.with_columns(pl.lit(0, pl.Int64).alias("bytes_sent"), pl.lit(0, pl.Int64).alias("bytes_recv"))
    coll = coll.with_columns(
        pl.when(pl.col("mpi_call") == _INIT).then(pl.lit(-2, pl.Int64)).otherwise(pl.col("comm").fill_null(-1))
        .alias("_comm"),
        pl.col("mpi_call").replace_strict(_COLLECTIVES, default="barrier").alias("_role"))
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
    coll_of = np.full(ops.height, -1, np.int64)
    coll_of[coll["_op"].to_numpy()] = coll["_coll"].to_numpy()
    member_ptr, members = _csr(coll["_coll"].to_numpy().astype(np.int64), coll["_tid"].to_numpy(), inst.height)
    return (coll_of, inst["need"].to_numpy().astype(np.int64), inst["_cost"].to_numpy().astype(np.float64),
            member_ptr, members)


def _locate(points: pl.DataFrame, ops: pl.DataFrame, time_col: str, out: str,
            strategy: str = "backward") -> pl.DataFrame:
    """The op of each point's thread (``_tid``) that holds (backward: starts at or before) ``time_col``."""
    right = ops.select("_tid", pl.col("start_ns" if strategy == "backward" else "end_ns").alias("_at"),
                       pl.col("_op").alias(out)).sort("_at")
    return points.sort(time_col).join_asof(right, left_on=time_col, right_on="_at", by="_tid", strategy=strategy,
                                           check_sortedness=False).drop("_at")


def _messages(ops: pl.DataFrame, messages: pl.DataFrame, threads: pl.DataFrame, net: Network) -> pl.DataFrame:
    """Per message: sender/receiver thread, the op posting each end, the op completing the receive, whether the
    send is a rendezvous, and its transfer cost (ns)."""
    tid = threads.select(*THREAD, "_tid")
    m = (messages.select(_MESSAGE_COLUMNS).with_row_index("_m")
         .join(tid.rename({c: f"s_{c}" for c in THREAD} | {"_tid": "_stid"}), on=[f"s_{c}" for c in THREAD])
         .join(tid.rename({c: f"r_{c}" for c in THREAD} | {"_tid": "_rtid"}), on=[f"r_{c}" for c in THREAD]))
    m = _locate(m.rename({"_stid": "_tid"}), ops, "s_time_ns", "_sop").rename({"_tid": "_stid"})
    m = _locate(m.rename({"_rtid": "_tid"}), ops, "r_time_ns", "_rop").rename({"_tid": "_rtid"})
    m = m.drop_nulls(["_sop", "_rop"])
    call = ops.select("_op", "mpi_call", "end_ns")
    m = (m.join(call.rename({"_op": "_sop", "mpi_call": "_scall", "end_ns": "_send"}), on="_sop")
         .join(call.rename({"_op": "_rop", "mpi_call": "_rcall", "end_ns": "_rend"}), on="_rop"))
    # a non-blocking receive completes in the first wait after its post that ends once the message was sent
    waits = ops.filter(pl.col("mpi_call").is_in(list(_WAITS)))
    nb = m.filter(~pl.col("_rcall").is_in(list(_BLOCKING_RECV))).with_columns(
        pl.max_horizontal(pl.col("_rend") + 1, "s_time_ns").alias("_due"))
    nb = _locate(nb.rename({"_rtid": "_tid"}), waits, "_due", "_cop", strategy="forward").rename({"_tid": "_rtid"})
    done = pl.concat([m.filter(pl.col("_rcall").is_in(list(_BLOCKING_RECV))).with_columns(
        pl.col("_rop").alias("_cop")), nb.drop("_due")], how="diagonal_relaxed")
    return done.with_columns(
        pl.col("_cop").fill_null(pl.col("_rop")),
        pl.col("_scall").is_in(list(_RENDEZVOUS_SEND)).alias("_rdv"),
        (net.latency_ns + pl.col("size").fill_null(0).cast(pl.Float64) * net.ns_per_byte).alias("_cost"),
    ).sort("_m").with_row_index("_mi")


def replay(calls: pl.DataFrame, messages: pl.DataFrame | None, thread_ends: pl.DataFrame,
           network: Network | None = None) -> ReplayResult:
    """Replay one run (see the module docstring).

    ``calls``: its MPI calls (appl, task, thread, call_seq, mpi_call, start_ns, end_ns; comm, bytes_sent,
    bytes_recv when known); ``messages``: its point-to-point messages with logical times (s_/r_ appl, task,
    thread, time_ns, size; None: none known); ``thread_ends``: every thread (appl, task, thread) with ``end_ns``,
    the end of its activity (a thread without MPI calls keeps its timeline). ``network``: None or
    ``Network.ideal()`` for the ideal network."""
    _require(calls, _CALL_COLUMNS, "MPI calls")
    _require(thread_ends, [*THREAD, "end_ns"], "thread ends")
    net = network or Network.ideal()
    threads = (pl.concat([thread_ends.select(*THREAD, "end_ns"),
                          calls.group_by(THREAD).agg(pl.col("end_ns").max())], how="vertical_relaxed")
               .group_by(THREAD).agg(pl.col("end_ns").max()).sort(THREAD).with_row_index("_tid"))
    ops = _ops(calls, threads)
    if messages is not None and messages.height:
        _require(messages, _MESSAGE_COLUMNS, "messages")
        msgs = _messages(ops, messages, threads, net)
    else:
        msgs = pl.DataFrame(schema={"_mi": pl.UInt32, "_stid": pl.UInt32, "_rtid": pl.UInt32, "_sop": pl.UInt32,
                                    "_rop": pl.UInt32, "_cop": pl.UInt32, "_rdv": pl.Boolean, "_cost": pl.Float64})
    n_ops, n_thr = ops.height, threads.height
    op_ptr = np.zeros(n_thr + 1, np.int64)
    np.cumsum(np.bincount(ops["_tid"].to_numpy().astype(np.int64), minlength=n_thr), out=op_ptr[1:])
    last_end = ops.group_by("_tid").agg(pl.col("end_ns").last())
    tail = (threads.join(last_end.rename({"end_ns": "_last"}), on="_tid", how="left")
            .select((pl.col("end_ns") - pl.col("_last").fill_null(0)).clip(lower_bound=0)).to_series().to_numpy())
    coll_of, need, cost, member_ptr, members = _collectives(ops, net)
    mi = msgs["_mi"].to_numpy().astype(np.int64)
    post_ptr, posts = _csr(np.concatenate([msgs["_sop"].to_numpy(), msgs["_rop"].to_numpy()]).astype(np.int64),
                           np.concatenate([mi * 2, mi * 2 + 1]), n_ops)
    rdv = msgs.filter(pl.col("_rdv"))
    wait_ptr, waits = _csr(np.concatenate([msgs["_cop"].to_numpy(), rdv["_sop"].to_numpy()]).astype(np.int64),
                           np.concatenate([mi * 2 + 1, rdv["_mi"].to_numpy().astype(np.int64) * 2]), n_ops)
    own = np.zeros(n_ops, np.float64)  # MPI calls cost nothing of their own (as in Dimemas)
    t, op_in, op_out, n_released = _replay_kernel(
        op_ptr, ops["_pre"].to_numpy().astype(np.float64), own, tail.astype(np.float64), coll_of, need, cost,
        member_ptr, members, post_ptr, posts, wait_ptr, waits, msgs["_cost"].to_numpy().astype(np.float64),
        msgs["_rdv"].to_numpy().astype(np.bool_), msgs["_stid"].to_numpy().astype(np.int64),
        msgs["_rtid"].to_numpy().astype(np.int64))
    thr = threads.select(*THREAD, pl.Series("end_ns", np.round(t).astype(np.int64)))
    replayed = ops.select(*THREAD, "call_seq", "mpi_call", pl.Series("start_ns", np.round(op_in).astype(np.int64)),
                          pl.Series("end_ns", np.round(op_out).astype(np.int64)))
    return ReplayResult(int(thr["end_ns"].max() or 0), thr, replayed, msgs.height, int(need.size), int(n_released))
