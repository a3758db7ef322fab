"""An MPI program executor: ranks run Python generator programs, messages complete by their arrival time.

Where :mod:`.builder` computes whole iterations at once from a fixed program shape, this executor runs each rank's
program call by call in global time order (a discrete-event simulation), so what a completion call completes, how
many times a polling loop tests, which message an ``MPI_ANY_SOURCE`` receive takes and which worker a master
serves next all follow from when messages arrive, as in a real run. Nothing here knows what a merge looks for.

A program is a generator per rank that yields :class:`Call` objects (the computation burst before the call, then the
call) and receives the call's outcome: a ``Recv``/``Iprobe`` from ``ANY`` gets the source task index (``None`` when
an ``Iprobe`` found nothing; a ``Recv`` with tag ``ANY``, MPI_ANY_TAG, gets (source, bytes, tag)), ``Waitany`` the
request completed (with ``Call.status``, as MPI_Status tells it: (request, source, bytes, the sending call's
``lid``)), ``Test``/``Testsome`` the requests completed (a tuple, maybe empty), ``Isend``/``Irecv`` their
request id. A program ends with ``Call("END", ...)`` (the last burst, no call). Rules (MPI's): messages between two
ranks on one (communicator, tag) are received in the order they were sent (non-overtaking: a later one never arrives
earlier); a receive from a given source takes that channel's next message in the order the receives were posted; a
receive from ``ANY`` takes the message that arrived first among the channels' next messages; a collective on the
world communicator ends for everyone ``cost`` after the last rank entered it. Sends up to ``Timing.eager_limit``
bytes are eager (buffered: an ``Isend`` request is complete at once, an ``MPI_Send`` returns after the copy); larger
ones use the **rendezvous** protocol, as MPI libraries do: the envelope travels first, the data only once the
matching receive is posted (a reply travels back), so an ``MPI_Send`` blocks, and an ``Isend`` request stays
pending, until the receiver has posted its receive: how long a send takes, and which call of the sender waits,
follow the receiver's timing.

Time: ns. The result (:class:`Execution`) holds per burst its rank, times, kernel, instructions, logical id, the
call that closes it (name, exit, site, collective bytes/root); per message both ends' logical and physical times,
size, tag and its logical identity ``k`` (its order on its channel).
"""
from __future__ import annotations

import heapq
from collections.abc import Callable, Generator
from dataclasses import dataclass, field, replace

import numpy as np

ANY = -1
WORLD = 1
INF = float("inf")
#: logical-id bit of a piece of a burst with no counterpart in another run (the first piece of a burst that a
#: tracer's flush cut in two, a thread's piece before a lock wait)
NO_MATCH_BIT = 1 << 62

#: call kinds the executor knows
P2P_SEND = ("MPI_Send", "MPI_Isend")
P2P_RECV = ("MPI_Recv", "MPI_Irecv")
COLLECTIVES = ("MPI_Allreduce", "MPI_Barrier", "MPI_Bcast", "MPI_Reduce", "MPI_Gather", "MPI_Alltoall")
#: nonblocking collectives: the call posts, a Wait/Test on its request completes it
NB_COLLECTIVES = ("MPI_Iallreduce", "MPI_Ibarrier", "MPI_Ibcast", "MPI_Ireduce")
#: calls that post several point-to-point operations at once (``Call.posts``): Sendrecv blocks until both are done,
#: Start/Startall (persistent requests) return their requests
SENDRECV = ("MPI_Sendrecv", "MPI_Sendrecv_replace")
STARTS = ("MPI_Start", "MPI_Startall")


@dataclass(slots=True)
class Call:
    """The burst of ``ins`` instructions of ``kernel`` (kernel id, see :mod:`.kernels`) labelled ``lid``, then MPI
    call ``name`` at ``site`` (an index into the program's call sites; -1: no caller).

    ``peer``/``tag``/``size``: point-to-point partner (task index, or :data:`ANY`), tag, bytes; ``reqs``: request
    ids of a completion call; ``size``/``root`` of a collective: bytes each rank sends, root task index (-1 none).
    """

    name: str
    kernel: int
    ins: float
    lid: int
    site: int = -1
    peer: int = -1
    tag: int = 0
    size: int = 0
    reqs: tuple[int, ...] = ()
    root: int = -1
    cost_ns: float = 0.0  # extra time inside the call (a collective's algorithm, an I/O write)
    role: int = 0  # what the burst is in the program (the caller's code: work, poll, ...)
    posts: tuple[tuple[str, int, int, int], ...] = ()  # Sendrecv/Start(all): ("send" | "recv", peer, tag, bytes)
    comm: int = 1  # the communicator of a collective (see ``Executor(comms=)``)
    whole_ins: float = 0.0  # a burst a flush cut in two: the whole burst's instructions (0: ``ins``)
    #: Waitany: the outcome names the message it completed (MPI_Status: a receive posted for ANY_SOURCE holds
    #: whichever message came), (request, source, bytes, the sending call's ``lid``); source None for a send;
    #: a Waitall over ANY_SOURCE receives: the source of each of its requests (None for a send)
    status: bool = False


Program = Generator[Call, object, None]


@dataclass
class Timing:
    """Per-run timing model: a burst's duration from its kernel and instructions, message transfer times, call
    overheads. ``speed[task]`` divides the durations of one rank (a slow node), ``jitter`` is the sigma of a
    lognormal factor on every message's transfer time (network noise)."""

    ns_per_ins: np.ndarray  # per kernel id: ns per instruction at this run's clock
    burst_sigma: float  # lognormal sigma of a burst's duration (run-to-run noise)
    latency_ns: Callable[[int, int], float]
    bw_bytes_per_ns: Callable[[int, int], float]
    speed: np.ndarray
    jitter: float = 0.0
    os_noise_p: float = 0.004
    call_ns: float = 600.0
    test_ns: float = 250.0
    skew_ns: float = 400.0
    flush_every: int = 0  # the tracer flushes its buffer every this many calls of a rank (0: never)
    eager_limit: float = float("inf")  # bytes: a larger message uses the rendezvous protocol
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))

    def __post_init__(self) -> None:
        self._pool = np.empty(0)
        self._at = 0

    def normal(self) -> float:
        if self._at >= self._pool.size:
            self._pool = self.rng.standard_normal(65536)
            self._at = 0
        self._at += 1
        return float(self._pool[self._at - 1])

    def burst_ns(self, task: int, kernel: int, ins: float) -> tuple[float, float]:
        """Duration (ns) of a burst and the factor by which the OS stretched it (1: not; its counts unchanged)."""
        base = max(20.0, ins * self.ns_per_ins[kernel] / self.speed[task] * np.exp(self.burst_sigma * self.normal()))
        if base > 20_000 and self.os_noise_p and self.rng.random() < self.os_noise_p:
            f = float(self.rng.uniform(1.3, 4.0))
            return base * f, f
        return base, 1.0

    def flush_ns(self) -> float:
        """How long a tracer's buffer flush stops the rank (ns): writing some MB to a parallel file system."""
        return float(self.rng.uniform(2.0e5, 2.0e6))

    def transfer_ns(self, src: int, dst: int, size: int) -> float:
        t = self.latency_ns(src, dst) + size / self.bw_bytes_per_ns(src, dst)
        return t * float(np.exp(self.jitter * self.normal())) if self.jitter else t


@dataclass
class _Msg:
    src: int
    dst: int
    tag: int
    k: int
    size: int
    s_l: float
    s_p: float
    arrival: float
    r_l: float = -1.0  # logical receive: the receive was posted (Irecv's exit, Recv's entry)
    r_p: float = -1.0  # physical receive: exit of the call that completed it
    r_c: float = -1.0  # entry of the call that completed it
    ready: float = -1.0  # when the receiver can match it: its arrival (eager), its envelope's (rendezvous)
    xfer: float = 0.0  # rendezvous: the data's transfer time once the receive is posted (0: eager)
    sent_by: int = 0  # the ``lid`` of the sending call (the program's name of the send)


@dataclass
class _Req:
    kind: str  # "send" | "recv" | "coll" (a nonblocking collective)
    src: int  # recv: source (ANY allowed only for blocking receives)
    dst: int
    tag: int
    posted: float
    msg: _Msg | None = None
    chan_index: int = -1  # recv from a given source: the channel message it takes
    done: bool = False
    coll: _NbColl | None = None


@dataclass
class _NbColl:
    """One nonblocking collective (the k-th on its communicator): complete ``cost`` after its last member posted."""

    members: int
    entries: list[float] = field(default_factory=list)
    cost: float = 0.0
    done_at: float | None = None
    waiters: list[int] = field(default_factory=list)


@dataclass
class _Rank:
    task: int
    program: Program
    clock: float
    version: int = 0
    call: Call | None = None
    entry: float = 0.0
    start: float = 0.0
    wait: str = ""  # what a blocked rank waits for: "msgs" | "any" | "coll" | ""
    reqs: list[_Req] = field(default_factory=list)
    finished: bool = False
    stretched: float = 1.0
    calls: int = 0  # calls made (for the tracer's flushes)


class DeadlockError(RuntimeError):
    """The program blocks every rank (a bug in a simulated program)."""


@dataclass
class Execution:
    """What one run did (see module docstring). Burst arrays are in execution order per rank."""

    bursts: dict[str, list]
    messages: list[_Msg]
    coll_k: dict[int, int]


class Executor:
    """Runs ``programs`` (one per task index) under ``timing``; ``start_ns[task]`` is when each rank begins;
    ``comms``: communicator id -> its member task indices (default: only :data:`WORLD`, every task)."""

    def __init__(self, programs: list[Program], timing: Timing, start_ns: np.ndarray,
                 comms: dict[int, tuple[int, ...]] | None = None):
        self.t = timing
        self.ranks = [_Rank(i, p, float(start_ns[i])) for i, p in enumerate(programs)]
        self.n = len(programs)
        self.comms = {WORLD: tuple(range(self.n)), **(comms or {})}
        self.nb_colls: dict[tuple[int, int], _NbColl] = {}  # (comm, k) -> the k-th nonblocking collective
        self.nb_posted: dict[tuple[int, int], int] = {}  # (comm, task) -> nonblocking collectives it posted
        self.any_posted: dict[tuple[int, int], list[_Req]] = {}  # (dst, tag) -> Irecv(ANY_SOURCE) in post order
        self.any_matched: dict[tuple[int, int], int] = {}  # (dst, tag) -> how many of them took a message
        self.heap: list[tuple[float, int, int, int]] = []
        self.seq = 0
        self.chan: dict[tuple[int, int, int], list[_Msg]] = {}  # (src, dst, tag) -> messages in send order
        self.posted: dict[tuple[int, int, int], int] = {}  # receives posted from a given source per channel
        self.taken: dict[tuple[int, int, int], int] = {}  # messages taken per channel (ANY receives)
        self.waiters: dict[tuple[int, int, int, int], list[int]] = {}  # (src, dst, tag, index) -> blocked ranks
        self.any_waiters: dict[tuple[int, int], list[int]] = {}  # (dst, tag) -> ranks in a Recv(ANY)
        self.coll_in: dict[int, list[tuple[int, float]]] = {}  # comm -> (task, entry) of the ranks inside
        self.b: dict[str, list] = {k: [] for k in ("task", "start", "end", "kernel", "ins", "lid", "call", "exit",
                                                   "site", "csend", "crecv", "root", "role", "stretched", "comm",
                                                   "whole")}
        self.messages: list[_Msg] = []
        self.n_coll = 0
        self.recv_posts: dict[tuple[int, int, int], list[float]] = {}  # channel -> post times of its receives
        self.rdv_waiters: dict[int, list[int]] = {}  # id(message) -> ranks waiting for its rendezvous transfer

    # ------------------------------------------------------------------ scheduling
    def _push(self, r: _Rank, time: float) -> None:
        r.version += 1
        if time < INF:
            self.seq += 1
            heapq.heappush(self.heap, (time, self.seq, r.task, r.version))

    def _next(self, r: _Rank, outcome: object = None) -> None:
        """Take rank ``r``'s next call (its burst starts at ``r.clock``) and schedule its entry."""
        try:
            c = r.program.send(outcome) if r.call is not None else next(r.program)
        except StopIteration:
            r.finished = True
            return
        r.calls += 1
        if self.t.flush_every and c.name != "END" and (r.calls + 7 * r.task) % self.t.flush_every == 0:
            c = self._flush(r, c)
        r.call = c
        r.start = r.clock
        dur, r.stretched = self.t.burst_ns(r.task, c.kernel, c.ins)
        r.entry = r.clock + dur
        r.wait = ""
        if c.name == "END":
            self._record(r, r.entry)
            r.finished = True
            return
        self._push(r, r.entry)

    def _flush(self, r: _Rank, c: Call) -> Call:
        """The tracer flushes its buffer inside the burst before ``c``: a first piece of the burst ends at the
        flush (call ``FLUSH``, logical id with bit :data:`NO_MATCH_BIT`: no counterpart in another run), the rest
        runs after it; returns the call with the rest of the burst."""
        f = 0.2 + 0.6 * float(self.t.rng.random())
        r.call = replace(c, name="FLUSH", ins=c.ins * f, lid=c.lid | NO_MATCH_BIT, whole_ins=c.ins)
        r.start = r.clock
        dur, r.stretched = self.t.burst_ns(r.task, c.kernel, c.ins * f)
        r.entry = r.clock + dur
        exit = r.entry + self.t.flush_ns()
        self._record(r, exit)
        r.clock = exit
        return replace(c, ins=c.ins * (1.0 - f), whole_ins=c.ins)

    def _record(self, r: _Rank, exit: float, csend: int = -1, crecv: int = -1, root: int = -1) -> None:
        c = r.call
        b = self.b
        b["task"].append(r.task)
        b["start"].append(r.start)
        b["end"].append(r.entry)
        b["kernel"].append(c.kernel)
        b["ins"].append(c.ins)
        b["lid"].append(c.lid)
        b["call"].append(c.name)
        b["exit"].append(exit)
        b["site"].append(c.site)
        b["csend"].append(csend)
        b["crecv"].append(crecv)
        b["root"].append(root)
        b["role"].append(c.role)
        b["stretched"].append(r.stretched)
        b["comm"].append(c.comm)
        b["whole"].append(c.whole_ins or c.ins)

    def _finish(self, r: _Rank, exit: float, outcome: object = None, **coll: int) -> None:
        self._record(r, exit, **coll)
        r.clock = exit
        self._next(r, outcome)

    # ------------------------------------------------------------------ messages
    def _send(self, r: _Rank, peer: int, tag: int, size: int, exit: float) -> _Msg:
        key = (r.task, peer, tag)
        q = self.chan.setdefault(key, [])
        transfer = self.t.transfer_ns(r.task, peer, size)
        arrival = r.entry + transfer
        if q and q[-1].arrival < INF:
            arrival = max(arrival, q[-1].arrival + 1.0)  # non-overtaking
        m = _Msg(r.task, peer, tag, len(q), size, r.entry, exit, arrival, ready=arrival, sent_by=r.call.lid)
        if size > self.t.eager_limit:  # rendezvous: the envelope now, the data once the receive is posted
            m.arrival, m.xfer = INF, transfer
            m.ready = r.entry + self.t.latency_ns(r.task, peer)
            posts = self.recv_posts.get(key, [])
            if m.k < len(posts):
                self._rendezvous(m, posts[m.k])
        q.append(m)
        self.messages.append(m)
        for w in self.waiters.pop((*key, m.k), []):
            self._retry(self.ranks[w])
        for w in (*self.any_waiters.get((peer, tag), []), *self.any_waiters.get((peer, ANY), [])):
            self._retry(self.ranks[w])
        return m

    def _post_recv(self, r: _Rank, src: int, tag: int) -> _Req:
        req = _Req("recv", src, r.task, tag, r.entry)
        if src != ANY:
            key = (src, r.task, tag)
            req.chan_index = self.posted.get(key, 0)
            self.posted[key] = req.chan_index + 1
            self.recv_posts.setdefault(key, []).append(r.entry)
            q = self.chan.get(key, [])
            if req.chan_index < len(q) and q[req.chan_index].arrival == INF:
                self._rendezvous(q[req.chan_index], r.entry)
        else:
            self.any_posted.setdefault((r.task, tag), []).append(req)
        return req

    def _match_any(self, dst: int, tag: int, time: float) -> None:
        """Nonblocking ANY_SOURCE receives of ``dst`` on ``tag``, in the order they were posted, take the messages
        that arrived by ``time`` in arrival order (MPI's matching; no other receive competes on that tag)."""
        posted = self.any_posted.get((dst, tag), [])
        i = self.any_matched.get((dst, tag), 0)
        while i < len(posted) and (m := self._any_head(dst, tag, time)) is not None:
            posted[i].msg = m
            self._take(m, max(time, posted[i].posted))
            i += 1
        self.any_matched[(dst, tag)] = i

    def _match_pending(self, r: _Rank, ids, time: float) -> bool:
        """Match ``r``'s pending ANY_SOURCE receives among ``ids`` at ``time``; True when there are such."""
        tags = {r.reqs[i].tag for i in ids if r.reqs[i].src == ANY and r.reqs[i].kind == "recv" and not r.reqs[i].done}
        for tag in tags:
            self._match_any(r.task, tag, time)
        return bool(tags)

    def _msg_of(self, req: _Req) -> _Msg | None:
        """The message a receive from a given source takes (None: not sent yet)."""
        if req.msg is None and req.kind == "recv" and req.src != ANY:
            q = self.chan.get((req.src, req.dst, req.tag), [])
            if req.chan_index < len(q):
                req.msg = q[req.chan_index]
        return req.msg

    def _any_head(self, dst: int, tag: int, before: float, src: int = ANY) -> _Msg | None:
        """The first-arrived next message to ``dst`` on ``tag`` over all sources (arrival <= ``before``); with
        ``tag`` :data:`ANY` (MPI_ANY_TAG), over every tag: from one source (``src``) its earliest-sent unmatched
        message (MPI's non-overtaking order), if it has arrived; from ``ANY``, the first arrived among those."""
        if tag == ANY:
            return self._any_tag_head(dst, before, src)
        best = None
        for src in range(self.n):
            key = (src, dst, tag)
            q = self.chan.get(key)
            if not q:
                continue
            i = max(self.taken.get(key, 0), self.posted.get(key, 0))
            if i < len(q) and q[i].ready <= before and (best is None or q[i].ready < best.ready):
                best = q[i]
        return best

    def _any_tag_head(self, dst: int, before: float, src: int) -> _Msg | None:
        heads: dict[int, _Msg] = {}  # per source, its earliest-sent unmatched message on any tag
        for key, q in self.chan.items():
            if key[1] != dst or (src != ANY and key[0] != src):
                continue
            i = max(self.taken.get(key, 0), self.posted.get(key, 0))
            if i < len(q) and (key[0] not in heads or q[i].s_l < heads[key[0]].s_l):
                heads[key[0]] = q[i]
        ready = [m for m in heads.values() if m.ready <= before]
        return min(ready, key=lambda m: (m.ready, m.src)) if ready else None

    def _take(self, m: _Msg, time: float) -> None:
        """An ANY_SOURCE receive takes ``m`` at ``time`` (a rendezvous message's data starts then)."""
        key = (m.src, m.dst, m.tag)
        self.taken[key] = max(self.taken.get(key, 0), m.k + 1)
        if m.arrival == INF:
            self._rendezvous(m, time)

    def _rendezvous(self, m: _Msg, posted: float) -> None:
        """The receive of rendezvous message ``m`` is posted at ``posted``: the receiver's reply travels back,
        then the data; wake the ranks waiting for it."""
        start = max(m.ready, posted) + self.t.latency_ns(m.dst, m.src)
        m.arrival = start + m.xfer
        for w in self.rdv_waiters.pop(id(m), []):
            self._retry(self.ranks[w])

    def _wait_rendezvous(self, r: _Rank, m: _Msg) -> None:
        ws = self.rdv_waiters.setdefault(id(m), [])
        if r.task not in ws:
            ws.append(r.task)

    # ------------------------------------------------------------------ calls
    def run(self) -> Execution:
        for r in self.ranks:
            self._next(r)
        while self.heap:
            time, _, task, version = heapq.heappop(self.heap)
            r = self.ranks[task]
            if version != r.version:
                continue
            if r.wait:
                self._decide(r, time)
            else:
                self._enter(r)
        stuck = [r.task for r in self.ranks if not r.finished]
        if stuck:
            raise DeadlockError(f"ranks {stuck[:8]} blocked for ever (in {self.ranks[stuck[0]].call})")
        return Execution(self.b, self.messages, {})

    def _enter(self, r: _Rank) -> None:
        c = r.call
        t = self.t
        name = c.name
        if name in P2P_SEND:
            copy = c.size / (4.0 * t.bw_bytes_per_ns(r.task, r.task))
            exit = r.entry + t.call_ns + (copy if name == "MPI_Send" else 0.25 * copy)
            m = self._send(r, c.peer, c.tag, c.size, exit)
            if name == "MPI_Isend":
                r.reqs.append(_Req("send", r.task, c.peer, c.tag, r.entry, m))
                self._finish(r, exit, len(r.reqs) - 1)
            elif m.xfer:  # a rendezvous send returns once its data has gone
                r.reqs.append(_Req("send", r.task, c.peer, c.tag, r.entry, m))
                c.reqs = (len(r.reqs) - 1,)
                r.wait = "msgs"
                self._retry(r)
            else:
                self._finish(r, exit)
        elif name == "MPI_Irecv":
            r.reqs.append(self._post_recv(r, c.peer, c.tag))
            r.reqs[-1].posted = r.entry + t.call_ns  # Extrae's logical receive: the Irecv's exit
            self._finish(r, r.entry + t.call_ns, len(r.reqs) - 1)
        elif name == "MPI_Recv":
            if c.peer == ANY or c.tag == ANY:  # matched by arrival (ANY_TAG: one source's messages in order)
                r.wait = "any"
                self._decide(r, r.entry)
            else:
                r.reqs.append(self._post_recv(r, c.peer, c.tag))
                c.reqs = (len(r.reqs) - 1,)
                r.wait = "msgs"
                self._retry(r)
        elif name in SENDRECV or name in STARTS:
            ids = self._post_all(r, c)
            if name in STARTS:
                for i in ids:
                    if r.reqs[i].kind == "recv":
                        r.reqs[i].posted = r.entry + t.call_ns  # a started receive is posted at the Start's exit
                self._finish(r, r.entry + t.call_ns, tuple(ids))
            else:
                c.reqs = tuple(ids)
                r.wait = "msgs"
                self._retry(r)
        elif name in NB_COLLECTIVES:
            r.reqs.append(self._post_collective(r, c))
            self._finish(r, r.entry + t.call_ns, len(r.reqs) - 1)
        elif name in ("MPI_Wait", "MPI_Waitall"):
            if any(r.reqs[i].src == ANY and r.reqs[i].kind == "recv" and not r.reqs[i].done for i in c.reqs):
                r.wait = "waitall_any"  # which message each receive takes is decided by arrival time
                self._decide(r, r.entry)
                return
            r.wait = "msgs"
            self._retry(r)
        elif name in ("MPI_Waitany", "MPI_Waitsome"):
            r.wait = "waitany"
            self._decide(r, r.entry)
        elif name in ("MPI_Test", "MPI_Testsome", "MPI_Testall", "MPI_Testany"):
            done = self._arrived(r, c.reqs, r.entry)
            if name == "MPI_Testall" and len(done) < sum(1 for i in c.reqs if not r.reqs[i].done):
                done = ()
            if name == "MPI_Testany":  # one request at most: the first that completed
                done = sorted(done, key=lambda i: self._ready_at(r.reqs[i]))[:1]
            exit = r.entry + t.test_ns
            self._complete(r, done, exit)
            self._finish(r, exit, tuple(done))
        elif name == "MPI_Iprobe":
            m = self._any_head(r.task, c.tag, r.entry, c.peer) if ANY in (c.peer, c.tag) else None
            self._finish(r, r.entry + t.test_ns, None if m is None else m.src)
        elif name in COLLECTIVES:
            r.wait = "coll"
            inside = self.coll_in.setdefault(c.comm, [])
            inside.append((r.task, r.entry))
            if len(inside) == len(self.comms[c.comm]):
                self._collective(c.comm)
        else:  # a call that touches no message (Comm_rank, I/O ...): its own cost
            self._finish(r, r.entry + t.call_ns + c.cost_ns)

    def _post_all(self, r: _Rank, c: Call) -> list[int]:
        """Post the sends and receives of a Sendrecv or Start(all) (``c.posts``); their request ids."""
        ids = []
        for kind, peer, tag, size in c.posts:
            if kind == "send":
                m = self._send(r, peer, tag, size, r.entry + self.t.call_ns)
                r.reqs.append(_Req("send", r.task, peer, tag, r.entry, m))
            else:
                r.reqs.append(self._post_recv(r, peer, tag))
            ids.append(len(r.reqs) - 1)
        return ids

    def _post_collective(self, r: _Rank, c: Call) -> _Req:
        """Rank ``r`` posts its next nonblocking collective on ``c.comm``; complete once every member posted."""
        k = self.nb_posted.get((c.comm, r.task), 0)
        self.nb_posted[(c.comm, r.task)] = k + 1
        nb = self.nb_colls.setdefault((c.comm, k), _NbColl(len(self.comms[c.comm])))
        nb.entries.append(r.entry)
        nb.cost = max(nb.cost, c.cost_ns)
        if len(nb.entries) == nb.members:
            nb.done_at = max(nb.entries) + nb.cost
            for w in nb.waiters:
                self._retry(self.ranks[w])
            nb.waiters = []
        return _Req("coll", r.task, -1, c.comm, r.entry, coll=nb)

    def _ready_at(self, q: _Req) -> float:
        """When request ``q`` can complete (INF: not known yet)."""
        if q.kind == "send":
            return q.posted if not q.msg.xfer else q.msg.arrival
        if q.kind == "coll":
            return INF if q.coll.done_at is None else q.coll.done_at
        if q.src == ANY:
            return INF if q.msg is None else q.msg.arrival
        m = self._msg_of(q)
        return INF if m is None else m.arrival

    def _arrived(self, r: _Rank, ids: tuple[int, ...], time: float) -> list[int]:
        self._match_pending(r, ids, time)
        return [i for i in ids if not r.reqs[i].done and self._ready_at(r.reqs[i]) <= time]

    def _complete(self, r: _Rank, ids, exit: float) -> None:
        for i in ids:
            q = r.reqs[i]
            q.done = True
            if q.kind == "recv":
                m = q.msg
                m.r_l, m.r_p, m.r_c = q.posted, exit, r.entry

    def _retry(self, r: _Rank) -> None:
        """A rank in a Wait/Waitall/Recv(source) or Recv(ANY)/Waitany: finish it if it now can."""
        if r.wait == "msgs":
            c = r.call
            latest = r.entry
            for i in c.reqs:
                q = r.reqs[i]
                if q.done or (q.kind == "send" and not q.msg.xfer):
                    continue
                if q.kind == "send":  # rendezvous: done once its data has gone
                    if q.msg.arrival == INF:
                        self._wait_rendezvous(r, q.msg)
                        return
                    latest = max(latest, q.msg.arrival)
                    continue
                if q.kind == "coll":
                    if q.coll.done_at is None:
                        if r.task not in q.coll.waiters:
                            q.coll.waiters.append(r.task)
                        return
                    latest = max(latest, q.coll.done_at)
                    continue
                m = self._msg_of(q)
                if m is None:
                    self._wait_for_send(r, q)
                    return
                latest = max(latest, m.arrival)
            exit = latest + self.t.call_ns + (0.0 if latest == r.entry else 150.0)
            if c.name == "MPI_Send":  # a rendezvous send: its physical send is its exit
                r.reqs[c.reqs[0]].msg.s_p = exit
            self._complete(r, [i for i in c.reqs if not r.reqs[i].done], exit)
            m = r.reqs[c.reqs[0]].msg if c.name == "MPI_Recv" else None
            self._finish(r, exit, None if m is None else (m.src, m.size))
        elif r.wait in ("any", "waitany", "waitall_any"):
            self._push(r, max(r.entry, self._candidate(r)))

    def _wait_for_send(self, r: _Rank, q: _Req) -> None:
        """Wake rank ``r`` when the message its receive ``q`` takes is sent."""
        ws = self.waiters.setdefault((q.src, r.task, q.tag, q.chan_index), [])
        if r.task not in ws:
            ws.append(r.task)

    def _candidate(self, r: _Rank) -> float:
        c = r.call
        if r.wait == "any":
            m = self._any_head(r.task, c.tag, INF, c.peer)
            return INF if m is None else m.ready
        best = INF
        for i in c.reqs:
            q = r.reqs[i]
            if q.done:
                continue
            if q.kind == "send":
                if not q.msg.xfer:
                    return r.entry
                if q.msg.arrival == INF:
                    self._wait_rendezvous(r, q.msg)
                best = min(best, q.msg.arrival)
                continue
            if q.kind == "coll":
                if q.coll.done_at is None:
                    if r.task not in q.coll.waiters:
                        q.coll.waiters.append(r.task)
                else:
                    best = min(best, q.coll.done_at)
                continue
            if q.src == ANY and q.msg is None:
                ws = self.any_waiters.setdefault((r.task, q.tag), [])
                if r.task not in ws:
                    ws.append(r.task)
                head = self._any_head(r.task, q.tag, INF)
                best = min(best, INF if head is None else head.ready)
                continue
            m = self._msg_of(q)
            if m is None:
                self._wait_for_send(r, q)
            else:
                best = min(best, m.arrival)
        return best

    def _decide(self, r: _Rank, time: float) -> None:
        """A time-dependent choice at ``time``: every rank's next event is at or after it, so every message that
        arrives by then is known."""
        c = r.call
        if r.wait == "any":
            m = self._any_head(r.task, c.tag, max(time, r.entry), c.peer)
            if m is None:
                ws = self.any_waiters.setdefault((r.task, c.tag), [])
                if r.task not in ws:
                    ws.append(r.task)
                self._push(r, max(r.entry, self._candidate(r)))
                return
            ws = self.any_waiters.get((r.task, c.tag), [])
            if r.task in ws:
                ws.remove(r.task)
            self._take(m, max(time, r.entry))
            exit = max(r.entry, m.arrival) + self.t.call_ns
            m.r_l, m.r_p, m.r_c = r.entry, exit, r.entry
            self._finish(r, exit, (m.src, m.size, m.tag) if c.tag == ANY else (m.src, m.size))
            return
        # Waitany: the pending request that completed first; Waitsome: every one completed by then
        now = max(time, r.entry)
        pending = [i for i in c.reqs if not r.reqs[i].done]
        self._match_pending(r, pending, now)
        if r.wait == "waitall_any":  # a Wait(all) over ANY_SOURCE receives: done when every one took its message
            ready = [self._ready_at(r.reqs[i]) for i in pending]
            if max(ready, default=r.entry) > now:
                later = [a for a in ready if now < a < INF]
                self._candidate(r)  # registers the rank with the senders it waits for
                heads = [self._any_head(r.task, r.reqs[i].tag, INF) for i in pending
                         if r.reqs[i].src == ANY and r.reqs[i].msg is None]
                later += [m.ready for m in heads if m is not None and m.ready > now]
                self._push(r, min(later, default=INF))
                return
            exit = max([r.entry, *ready]) + self.t.call_ns
            self._complete(r, pending, exit)
            # [order22] with ``status``: each request's source (None for a send), as the MPI_Status array tells it
            self._finish(r, exit, tuple(r.reqs[i].msg.src if r.reqs[i].kind == "recv" and r.reqs[i].msg else None
                                        for i in c.reqs) if c.status else None)
            return
        if not pending:
            raise DeadlockError(f"rank {r.task}: {c.name} with no pending request")
        ready = {i: self._ready_at(r.reqs[i]) for i in pending}
        best = min(pending, key=ready.__getitem__)
        when = ready[best]
        if when > now:
            self._push(r, max(r.entry, self._candidate(r)))
            return
        exit = max(r.entry, when) + self.t.call_ns
        if c.name == "MPI_Waitsome":
            done = tuple(i for i in pending if ready[i] <= max(r.entry, when))
            self._complete(r, done, exit)
            self._finish(r, exit, done)
            return
        self._complete(r, [best], exit)
        m = r.reqs[best].msg if r.reqs[best].kind == "recv" else None
        self._finish(r, exit, best if not c.status else
                     (best, None, None, None) if m is None else (best, m.src, m.size, m.sent_by))

    def _collective(self, comm: int) -> None:
        entries = dict(self.coll_in.pop(comm))
        members = self.comms[comm]
        calls = [self.ranks[i].call for i in members]
        names = {c.name for c in calls}
        if len(names) > 1:
            raise DeadlockError(f"ranks enter different collectives on communicator {comm}: {sorted(names)}")
        base = max(entries.values()) + max(c.cost_ns for c in calls)
        self.n_coll += 1
        n = len(members)
        for i in members:
            r = self.ranks[i]
            c = r.call
            skew = abs(self.t.normal()) * self.t.skew_ns
            recv = c.size * (n if c.name in ("MPI_Gather", "MPI_Alltoall") and (c.root in (-1, i)) else 1)
            self._finish(r, base + skew, None, csend=c.size, crecv=recv if c.name != "MPI_Barrier" else 0,
                         root=c.root)
