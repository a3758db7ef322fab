"""Block builder: the program of every rank of one run over a block of iterations, vectorised over (iterations, ranks).

A pattern describes one iteration as *segments*, each ending with a collective on the world communicator. Inside
a segment every time is relative to the segment's base (the global exit time of the previous collective), so all
iterations of a block are computed at once on ``(B, P)`` arrays; :meth:`BlockBuilder.finish` turns relative times
into absolute ones with a cumulative sum of the segment durations. Each *pair* is one computation burst followed by
the MPI call that closes it (``call = NO_CALL``: the burst ends the thread). Units: ns, counts, bytes.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from synthtrace.simulator.counter_model import COUNTERS, CounterModel
from synthtrace.simulator.kernels import kid
from synthtrace.simulator.network import Network
from synthtrace.simulator.variation import Variation

#: MPI calls the simulated applications make (index = call id inside the simulator)
CALLS: tuple[str, ...] = ("MPI_Init", "MPI_Comm_rank", "MPI_Comm_size", "MPI_Barrier", "MPI_Finalize",
                          "MPI_Isend", "MPI_Irecv", "MPI_Testall", "MPI_Waitall", "MPI_Allreduce", "MPI_Send",
                          "MPI_Recv", "MPI_Iprobe", "MPI_Bcast", "MPI_Alltoall")
CALL: dict[str, int] = {name: i for i, name in enumerate(CALLS)}
NO_CALL = -1
#: not an MPI call: an I/O write (Extrae's I/O instrumentation: event 40000005, state I/O) inside a compute phase
IO_WRITE = -2
#: what a burst is in the program: its own work, one iteration of a polling loop, an occasional housekeeping
#: call (present in some runs only), the start-up before the iterations, the shut-down after them
ROLES: tuple[str, ...] = ("work", "poll", "housekeeping", "prologue", "epilogue")
WORK, POLL, HOUSEKEEPING, PROLOGUE, EPILOGUE = range(5)
MAX_POLLS = 255  # a polling loop records at most this many failed tests as separate bursts
MIN_BURST_NS, MIN_CALL_NS = 20.0, 60.0
POLL_KERNEL = kid("poll")

_INT_FIELDS = ("task", "it", "seg", "slot", "sub", "role", "kernel", "call", "site", "coll_send", "coll_recv", "root",
               "comm", "bytes_sent", "bytes_recv", "peer", "tag", "n_msgs")
_FLOAT_FIELDS = ("ins", "b_start", "b_end", "c_exit")
MSG_FIELDS = ("s_task", "r_task", "s_l", "s_p", "r_l", "r_p", "size", "tag")


def logical_id(iteration: np.ndarray, task: np.ndarray, slot: np.ndarray, sub: np.ndarray) -> np.ndarray:
    """Identity of a burst across runs: (iteration + 1) << 32 | task << 20 | slot << 8 | sub (task 1-based)."""
    return ((iteration.astype(np.int64) + 1) << 32) | (task.astype(np.int64) << 20) | (slot.astype(np.int64) << 8) | sub


@dataclass
class RunContext:
    """What one run brings to the builder: its counter model, network, variation knobs, run index."""

    run: int
    model: CounterModel
    net: Network
    variation: Variation


@dataclass
class Work:
    """The computation bursts of one program step: counters ``(B, P, C)``, duration (ns), OS-noise outliers."""

    kernel: np.ndarray
    ins: np.ndarray
    counters: np.ndarray
    dur: np.ndarray
    outlier: np.ndarray

    def plus(self, other: Work) -> Work:
        """Two pieces of work done back to back in one burst (kernel of the first)."""
        return Work(self.kernel, self.ins + other.ins, self.counters + other.counters, self.dur + other.dur,
                    self.outlier | other.outlier)

    def where(self, mask: np.ndarray, other: Work) -> Work:
        """This work where ``mask`` holds, ``other`` elsewhere."""
        return Work(np.where(mask, self.kernel, other.kernel), np.where(mask, self.ins, other.ins),
                    np.where(mask[..., None], self.counters, other.counters), np.where(mask, self.dur, other.dur),
                    np.where(mask, self.outlier, other.outlier))


@dataclass
class PairBlock:
    """Finished pairs of one block of one run, absolute times (ns, int64), sorted by (task, start).

    ``counters``: one column per :data:`~synthtrace.simulator.counter_model.COUNTERS` (the burst's counts).
    ``messages``: logical and physical send/receive times.
    """

    cols: dict[str, np.ndarray]
    counters: np.ndarray
    messages: dict[str, np.ndarray]
    outlier: np.ndarray
    world: np.ndarray
    n_polls: int = 0

    @property
    def n(self) -> int:
        return int(self.cols["task"].size)


@dataclass
class BlockBuilder:
    """Collects the pairs and messages of iterations ``it0 .. it0 + n_it - 1`` of one run (see module docstring).

    ``start``: each task's start (ns) relative to ``t0`` for the first iteration (the carry of the previous block).
    """

    it0: int
    n_it: int
    n_tasks: int
    ctx: RunContext
    rng: np.random.Generator  # this run's noise for this block
    t0: float
    start: np.ndarray
    _pairs: list[dict[str, np.ndarray]] = field(default_factory=list)
    _msgs: list[dict[str, np.ndarray]] = field(default_factory=list)
    _d: list[np.ndarray] = field(default_factory=list)
    _pending: np.ndarray | None = None
    seg: int = 0
    n_polls: int = 0

    def __post_init__(self) -> None:
        self.shape = (self.n_it, self.n_tasks)
        self.task = np.broadcast_to(np.arange(self.n_tasks)[None, :], self.shape)
        self.it = np.broadcast_to(np.arange(self.n_it)[:, None], self.shape)
        # the start of every iteration's first segment: the carry, then the exit skew of the previous iteration
        skew = self._skew((self.n_it + 1, self.n_tasks))
        skew[0] = self.start
        self.first_starts = skew[:-1]
        self._carry_skew = skew[-1]

    # ------------------------------------------------------------------ primitives
    def _skew(self, shape: tuple[int, ...]) -> np.ndarray:
        return np.abs(self.rng.standard_normal(shape)) * self.ctx.variation.exit_skew_ns

    def full(self, value: float | int) -> np.ndarray:
        return np.full(self.shape, value)

    def work(self, kernel: int | np.ndarray, ins: np.ndarray | float) -> Work:
        """Counters and durations of one burst per (iteration, rank): ``ins`` noise-free instructions."""
        k = np.broadcast_to(np.asarray(kernel, dtype=np.int64), self.shape)
        ins = np.broadcast_to(np.asarray(ins, dtype=np.float64), self.shape)
        v = self.ctx.variation
        if v.work_sigma:
            ins = ins * np.exp(v.work_sigma * self.rng.standard_normal(self.shape))
        counters, dur = self.ctx.model.counts(k.reshape(-1), ins.reshape(-1), self.rng)
        dur = np.maximum(dur.astype(np.float64), MIN_BURST_NS)
        outlier = (dur > 20_000) & (self.rng.random(dur.size) < v.os_noise_p)
        stretch = self.rng.uniform(*v.os_noise_stretch, size=dur.size)
        dur = np.where(outlier, dur * stretch, dur)
        return Work(k, ins, counters.reshape(*self.shape, len(COUNTERS)), dur.reshape(self.shape),
                    outlier.reshape(self.shape))

    def pair(self, work: Work, start: np.ndarray, *, call: int, exit: np.ndarray | None = None,
             call_ns: np.ndarray | float | None = None, slot: int | np.ndarray, sub: int | np.ndarray = 0,
             role: int = WORK, site: int | np.ndarray = 0, mask: np.ndarray | None = None,
             coll: tuple | None = None, p2p: tuple | None = None, world: bool = False) -> np.ndarray:
        """Register burst ``work`` starting at ``start`` and the call closing it; returns the call's exit.

        ``exit``: the call's exit time, else entry + ``call_ns`` (default: the network's call overhead).
        ``coll``: (send bytes, recv bytes, root task or -1, communicator) of a collective; ``p2p``: (bytes sent,
        bytes received, peer task index or -1, tag, messages) the reader will attach to this call.
        """
        entry = start + work.dur
        if exit is None:
            ns = self.ctx.net.call_ns if call_ns is None else call_ns
            exit = entry + np.maximum(np.broadcast_to(ns, self.shape), MIN_CALL_NS)
        exit = np.maximum(exit, entry + MIN_CALL_NS) if call != NO_CALL else entry
        m = np.ones(self.shape, dtype=bool) if mask is None else mask
        b = lambda v: np.broadcast_to(np.asarray(v), self.shape)[m]  # noqa: E731
        neg = -1
        cs, cr, root, comm = coll if coll is not None else (neg, neg, neg, neg)
        sent, recv, peer, tag, nm = p2p if p2p is not None else (0, 0, neg, neg, 0)
        self._pairs.append({
            "task": self.task[m], "it": self.it[m], "seg": np.full(int(m.sum()), self.seg), "slot": b(slot),
            "sub": b(sub), "role": b(role), "kernel": work.kernel[m], "call": b(call), "site": b(site),
            "coll_send": b(cs), "coll_recv": b(cr), "root": b(root), "comm": b(comm), "bytes_sent": b(sent),
            "bytes_recv": b(recv), "peer": b(peer), "tag": b(tag), "n_msgs": b(nm), "ins": work.ins[m],
            "b_start": start[m], "b_end": entry[m], "c_exit": exit[m], "counters": work.counters[m],
            "outlier": work.outlier[m], "world": np.full(int(m.sum()), world),
        })
        return np.where(m, exit, start)

    def message(self, src: np.ndarray, dst: np.ndarray, s_l: np.ndarray, s_p: np.ndarray, r_l: np.ndarray,
                r_p: np.ndarray, size: np.ndarray, tag: np.ndarray | int, mask: np.ndarray | None = None) -> None:
        """Register point-to-point messages (times relative to the current segment; tasks 0-based)."""
        m = np.ones(self.shape, dtype=bool) if mask is None else mask
        b = lambda v: np.broadcast_to(np.asarray(v), self.shape)[m]  # noqa: E731
        self._msgs.append({"s_task": b(src), "r_task": b(dst), "s_l": b(s_l), "s_p": b(s_p), "r_l": b(r_l),
                           "r_p": b(r_p), "size": b(size), "tag": b(tag), "it": self.it[m],
                           "seg": np.full(int(m.sum()), self.seg)})

    def close(self, entry: np.ndarray, cost: np.ndarray | float, *, last: bool = False) -> np.ndarray:
        """Exit times of a world collective entered at ``entry`` (everyone leaves ``cost`` after the last one
        enters, plus a small skew). Register its pair, then call :meth:`advance`."""
        d = entry.max(axis=1) + np.broadcast_to(cost, (self.n_it,))
        if last:
            skew = np.vstack([self.first_starts[1:], self._carry_skew[None, :]])
        else:
            skew = self._skew(self.shape)
        self._pending = d
        return d[:, None] + skew

    def advance(self, exit: np.ndarray) -> np.ndarray:
        """Start the next segment; returns the exits of the closing collective relative to its base."""
        d = self._pending
        self._d.append(d)
        self._pending = None
        self.seg += 1
        return exit - d[:, None]

    # ------------------------------------------------------------------ helpers for common program shapes
    def poll_loop(self, entry: np.ndarray, ready: np.ndarray, *, call: int, slot: int | np.ndarray, site: int = 0,
                  mask: np.ndarray | None = None, poll_ins: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """A ``while (!done) { test(); small work }`` loop entered at ``entry``; done at ``ready``.

        Registers the loop's extra bursts (role poll, sub = 1..n-1); returns (exit of the first test, exit of the
        last one). The caller registers the burst that ends at the first test with the first exit. ``poll_ins``:
        instructions of the loop body (default: the variation's).
        """
        test = self.ctx.net.test_ns
        ins = self.ctx.variation.poll_ins if poll_ins is None else poll_ins
        period = test + ins * 0.55  # ns per loop iteration at IPC ~2 and ~2-3 GHz
        m = np.ones(self.shape, dtype=bool) if mask is None else mask
        wait = np.where(m, np.maximum(ready - (entry + test), 0.0), 0.0)
        n = np.minimum(1 + np.ceil(wait / period).astype(np.int64), MAX_POLLS + 1)
        first = np.where(n > 1, entry + test, np.maximum(entry + test, ready))
        extra = n - 1
        total = int(extra.sum())
        self.n_polls += total
        if total == 0:
            return first, first
        flat = np.flatnonzero(extra.reshape(-1))
        reps = extra.reshape(-1)[flat]
        owner = np.repeat(flat, reps)
        k = np.arange(total) - np.repeat(np.cumsum(reps) - reps, reps) + 1  # 1..n-1 within each loop
        counters, dur = self.ctx.model.counts(np.full(total, POLL_KERNEL), np.full(total, ins), self.rng)
        dur = np.maximum(dur.astype(np.float64), MIN_BURST_NS)
        step = dur + test
        csum = np.cumsum(step)
        within = csum - np.repeat(csum[np.cumsum(reps) - reps] - step[np.cumsum(reps) - reps], reps)
        base = first.reshape(-1)[owner]
        exits = base + within
        b_start = exits - step
        last = np.cumsum(reps) - 1
        exits[last] = np.maximum(exits[last], ready.reshape(-1)[owner[last]])
        final = first.reshape(-1).copy()
        final[flat] = exits[last]
        t = self.task.reshape(-1)[owner]
        self._pairs.append({
            "task": t, "it": self.it.reshape(-1)[owner], "seg": np.full(total, self.seg),
            "slot": np.broadcast_to(np.asarray(slot), self.shape).reshape(-1)[owner],
            "sub": k, "role": np.full(total, POLL), "kernel": np.full(total, POLL_KERNEL), "call": np.full(total, call),
            "site": np.full(total, site), "coll_send": np.full(total, -1), "coll_recv": np.full(total, -1),
            "root": np.full(total, -1), "comm": np.full(total, -1), "bytes_sent": np.zeros(total, np.int64),
            "bytes_recv": np.zeros(total, np.int64), "peer": np.full(total, -1), "tag": np.full(total, -1),
            "n_msgs": np.zeros(total, np.int64), "ins": np.full(total, ins),
            "b_start": b_start, "b_end": b_start + dur, "c_exit": exits, "counters": counters,
            "outlier": np.zeros(total, bool), "world": np.zeros(total, bool),
        })
        return first, final.reshape(self.shape)

    def housekeeping(self, start: np.ndarray, *, slot: int, site: int = 0) -> np.ndarray:
        """Now and then (per run) an extra ``MPI_Iprobe`` for control messages; returns the new start times."""
        mask = self.rng.random(self.shape) < self.ctx.variation.housekeeping_p
        w = self.work(POLL_KERNEL, 3 * self.ctx.variation.poll_ins)
        return self.pair(w, start, call=CALL["MPI_Iprobe"], call_ns=self.ctx.net.test_ns, slot=slot,
                         role=HOUSEKEEPING, site=site, mask=mask)

    # ------------------------------------------------------------------ result
    def finish(self) -> tuple[PairBlock, float, np.ndarray]:
        """Absolute times; returns (pairs sorted by task and time, next block's t0, its start per task)."""
        n_seg = len(self._d)
        d = np.stack(self._d, axis=1) if n_seg else np.zeros((self.n_it, 0))  # (B, S)
        flat = d.reshape(-1)
        bases = self.t0 + np.concatenate([[0.0], np.cumsum(flat)])
        # base[it, s]: start of segment s of iteration it; column S (after the last close) = next iteration's start
        base = np.empty((self.n_it, n_seg + 1))
        base[:, :n_seg] = bases[:-1].reshape(self.n_it, n_seg)
        base[:, n_seg] = np.append(base[1:, 0], bases[-1]) if n_seg else self.t0
        t_end = float(bases[-1])
        p = {k: np.concatenate([x[k] for x in self._pairs]) for k in self._pairs[0]}
        off = base[p["it"], p["seg"]]
        for c in _FLOAT_FIELDS[1:]:
            p[c] = np.rint(p[c] + off).astype(np.int64)
        order = np.lexsort((p["b_start"], p["task"]))
        p = {k: v[order] for k, v in p.items()}
        cols = {k: p[k].astype(np.int64) for k in _INT_FIELDS}
        cols.update({k: p[k] for k in _FLOAT_FIELDS})
        cols["it"] = cols["it"] + self.it0
        msgs: dict[str, np.ndarray] = {}
        if self._msgs:
            q = {k: np.concatenate([x[k] for x in self._msgs]) for k in self._msgs[0]}
            moff = base[q["it"], q["seg"]]
            msgs = {
                k: (
                    np.rint(q[k] + moff).astype(np.int64)
                    if k in ("s_l", "s_p", "r_l", "r_p")
                    else q[k].astype(np.int64)
                )
                for k in MSG_FIELDS
            }
        block = PairBlock(cols, p["counters"], msgs, p["outlier"], p["world"], self.n_polls)
        return block, t_end, self._carry_skew
