"""Campaigns of valid runs that differ between runs the way real ones do (issue 22 item 8), with ground truth.

Each campaign is one SPMD application (or a master-worker farm) run ``runs`` times under :mod:`.mpi_exec`, so that
completion calls complete what has arrived, polling loops test as often as the timing makes them, an
``MPI_ANY_SOURCE`` receive takes whichever message came first and a master serves whichever worker answered. Runs
are written as Paraver traces (``<out>/<name>/<app>.run<k>.prv``, Extrae's records via the project's writer) and
the truth as Parquet (``<out>/<name>/truth.parquet``): one row per computation burst of every run, keyed as the
reader numbers them (run_name, task, burst_seq from 0 per task in time order), with

- ``logical_id``: the same for the same logical burst in every run; a burst whose id another run lacks has no
  counterpart there (an extra iteration, a checkpoint, polls and housekeeping calls the other run did not make).
  A burst that a message's arrival opened (the master's processing of a result, the unpacking after ``Waitany``)
  takes the identity of that message: (communicator, sender, receiver, tag, k), k its order among the sender's
  messages to that receiver on that communicator and tag (MPI's non-overtaking rule);
- ``span``: for an inserted, missing or repeated iteration whose place the data cannot decide (its iterations are
  identical), the number of the outer iteration whose bursts form that span (NULL elsewhere); ``span_class``: the
  logical id with the inner-iteration (or repeat) part cleared: two bursts of one span with the same class are
  interchangeable;
- ``role`` (work | poll | housekeeping | checkpoint | prologue | epilogue), ``iteration``, ``inner``, ``duration_ns``
  and every modelled counter's true value in that run.

Mechanisms (:data:`MECHANISMS`), each a real cause of run-to-run difference; every campaign also has the
simulator's usual differences (placement, clock, counter noise, OS noise, exit skew of collectives):

``completion``      halo on a random neighbour graph, the interior computed in chunks with an ``MPI_Testsome``
                    after each (completing 0-3 receives, by arrival), then ``MPI_Waitany`` per remaining receive
                    (unpacking the face that came) and ``MPI_Waitall`` on the sends; receives recorded at their
                    post, as Extrae does (``completion_at_wait``: in the call that completed them, as Score-P
                    records them)
``polling``         a gather to rank 0 each iteration: rank 0 polls ``MPI_Iprobe(ANY_SOURCE)`` (hundreds of
                    polls) and receives from whoever is there
``extra_inner`` / ``missing_inner``   one run's inner solver needs one more / one fewer iteration in one outer
                    iteration (identical inner iterations: the place is undecidable, the span is marked)
``repeated``        one run repeats one outer iteration (a rejected time step redone: undecidable, span marked)
``extra_varying``   one run's inner solver needs one more iteration, inner iterations differ in work and rates
                    (decidable)
``checkpoint``      one run writes a checkpoint (Gather to rank 0, a write, a Barrier) in one iteration
``ring`` / ``torus`` rotation-symmetric topologies (every rank the same messages), ranks differ a little by their
                    work only (the ring's receives recorded at completion)
``no_callers``      no caller events (no 70000001/80000001 types)
``one_site``        every MPI call from one call site (a wrapper library)
``master_worker``   a dynamic task farm over 40+ iterations: ``MPI_Recv(ANY_SOURCE)`` of a result, the next
                    task to that worker
``pairs8`` / ``single10``   8 runs recording two counters each / 10 runs recording one counter each (receives
                    recorded at completion, as in ``completion_at_wait``; so is ``checkpoint``)
``placement``       random placement, one slow node per run (5-25 % slower), network jitter (sigma 0.3)
``varying_rates``   kernels whose per-instruction rates change from one iteration to the next
``waitsome``        ``MPI_Testany`` after each interior chunk (one face at most), then ``MPI_Waitsome`` until every
                    face came, unpacking what came together (that burst takes its first face's identity)
``sendrecv``        compute, then a blocking ``MPI_Sendrecv`` (``_replace`` where both faces have one size) per
                    neighbour
``persistent``      ``MPI_Send_init``/``MPI_Recv_init`` once, ``MPI_Startall`` every exchange (one call posts every
                    send and receive), Testsome
``nb_collective``   ``MPI_Iallreduce`` posted before each exchange, ``MPI_Wait`` after it, no blocking collective
``sub_comms``       row and column communicators (``MPI_Comm_split``): an Allreduce per row every iteration, per
                    column every second one, none on the world
``amr``             message bytes and work follow each rank's refinement (a random walk), the neighbour graph is
                    redrawn every 10 iterations
``amr_stages``      as amr without regrid, 2 Runge-Kutta stages (an exchange each) per step, no collective
``clock_offsets``   every node's clock off by tens of us and drifting by ppm (receives can precede their sends)
``layout``          16 ranks on one node in run 0, 4 per node in run 1 (shared memory against the network)
``flush`` / ``flush_all``   the tracer flushes its buffer (Extrae event 40000003, 0.2-2 ms) every ~40 calls of a
                    rank in run 1 / in every run at other calls: a burst cut in two, its first piece has no
                    counterpart (``NO_MATCH_BIT``)
``hybrid`` / ``hybrid_locks``   MPI + OpenMP, 4 threads per rank: each interior chunk is a parallel region, a burst
                    on every thread (worker ids: the region's with the thread in bits 58-61); with locks the
                    workers' bursts are cut by 0-2 lock waits a region, as the timing falls
``inner_counts``    run 1's inner solver needs +1, -1, +1 iterations at three outer iterations (decidable)
``tail``            run 1 makes 2 more outer iterations at the end, run 2 (with ``runs=3``) 2 fewer
``renumbered`` / ``renumbered_torus``   run 1's MPI ranks numbered by a random permutation (``MPI_Cart_create``
                    with reorder) on an irregular graph / a symmetric torus (only the ranks' work tells them apart)
``rotated_ring`` / ``rotated_torus`` / ``rotated_torus_alike``   run 1 numbers logical rank r as r + 1 (roles
                    from a split key or the placement): on a symmetric ring (one of its symmetries), a 4x4 torus
                    (relabelled), ranks 1-3 % apart / alike (``CampaignSpec.renumber_shift``)
``version_reduce``  run 1 is another binary version: a second ``MPI_Allreduce`` after every outer one (not the
                    same program: the merge must flag or refuse it)
``irecv_any``       halo receives posted as ``MPI_Irecv(MPI_ANY_SOURCE)``: which face each takes follows arrival
``noisy``           OS noise on 5 % of the bursts, one rank of run 1 launched 30 ms late
``late_trace``      run 1's trace of its last rank starts at outer iteration 2 (tracing turned on late on it): its
                    events before, and every communication record with an end there, are missing (Extrae's merger
                    leaves unmatched communications out); its partners' calls that posted them stay
``rendezvous``      messages above a 64 KiB eager limit wait for their receive to be posted before their data
                    travels (the MPI libraries' rendezvous protocol): Send, Sendrecv and the sender's Wait last
                    as long as the receiver takes to post its receive
``any_tag``         master-worker with ``MPI_ANY_TAG`` receives: the master takes a result or a progress report,
                    whichever came, and handles it by its tag
``mixed``           a random valid application per seed drawing several of the later mechanisms at once
``plain``           a random valid application per seed (topology, completion style, collectives, sizes, where
                    receives are recorded)

The calls carry the bytes of their messages (a tracer's sizes; a collective's own sizes on 50100001/2).
"""
from __future__ import annotations

import functools
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import polars as pl

from synthtrace.simulator.counter_model import COUNTERS, PROGRAMMABLE_COUNTERS, CounterModel, \
    draw_noise_sizes
from synthtrace.simulator.kernels import KERNELS, Kernel, kid
from synthtrace.simulator.mpi_exec import ANY, NO_MATCH_BIT, WORLD, Call, Executor, Timing
from synthtrace.simulator.network import INTRA_BW_FACTOR, INTRA_LATENCY_NS
from synthtrace.simulator.pmu import assign_counter_sets
from synthtrace.simulator.variation import place, run_clock
from synthtrace.tracelib.domain.machine import Machine, load_machine
from synthtrace.tracelib.errors import BadInputError
from synthtrace.tracelib.formats.bursts import MESSAGE_SCHEMA, message_columns
from synthtrace.tracelib.formats.paraver.writer import Communicator, TraceMeta, write_paraver
from synthtrace.tracelib.schema import EVENT_SCHEMA

ROLES = ("work", "poll", "housekeeping", "checkpoint", "prologue", "epilogue")
WORK, POLL, HOUSEKEEPING, CHECKPOINT, PROLOGUE, EPILOGUE = range(len(ROLES))
#: tags
TAG_HALO, TAG_GATHER, TAG_TASK, TAG_RESULT, TAG_STOP, TAG_LOG = 100, 300, 1000, 5000, 9000, 7000
TASK_BYTES, RESULT_BYTES, STOP_BYTES, LOG_BYTES = 4096, 49152, 8, 256
MAX_POLLS = 2000

#: kernel variants whose per-instruction rates differ (for ``varying_rates``): the stencil's, with cache misses,
#: vectorisation and branch behaviour changed; appended after the simulator's kernels (their ids follow)
_BASE = KERNELS[kid("stencil_interior")]
VARIANTS: tuple[Kernel, ...] = tuple(
    Kernel(f"stencil_v{i}", "dram_bandwidth", ld=_BASE.ld * f, sr=_BASE.sr, br=_BASE.br * g, fp=_BASE.fp / f,
           vec=min(0.95, _BASE.vec * g), fma=_BASE.fma, l1_mpki=_BASE.l1_mpki * m, l2_mpki=_BASE.l2_mpki * m,
           l3_mpki=_BASE.l3_mpki * m, br_misp=_BASE.br_misp * g, cpi_base=_BASE.cpi_base * f, mlp=_BASE.mlp,
           stream_eff=_BASE.stream_eff)
    for i, (f, g, m) in enumerate([(1.0, 1.0, 0.15), (1.2, 0.6, 0.05), (0.8, 1.4, 0.4), (1.1, 0.8, 0.02),
                                   (0.9, 1.2, 0.25), (1.3, 0.5, 0.1)]))
ALL_KERNELS = KERNELS + VARIANTS
V0 = len(KERNELS)


def lid(task: int, it: int, inner: int, pos: int, sub: int = 0) -> int:
    """Logical burst id: (it + 2) << 44 | inner << 34 | task << 18 | pos << 9 | sub (task 0-based; it -1 for the
    start-up; inner >= 512 marks a repeated outer iteration's second pass)."""
    return ((it + 2) << 44) | (inner << 34) | (task << 18) | (pos << 9) | min(sub, 511)


INNER_MASK = ~(((1 << 10) - 1) << 34)
ITER_MASK = (1 << 14) - 1  # bits 44-57: iteration + 2; 58-61: OpenMP thread; 62: first piece of a flushed burst
#: Extrae's event type of its buffer flushes (value 1 at the start, 0 at the end)
EXTRAE_FLUSH = 40_000_003
#: Extrae's OpenMP event types: parallel region (3 open, 0 close), outlined function executed (id, 0 end),
#: barrier (1 begin, 0 end)
OMP_PARALLEL, OMP_FUNCTION, OMP_BARRIER = 60_000_001, 60_000_018, 60_000_005
OMP_MASTER, OMP_FIRST, OMP_LAST = 1, 2, 4  # a region's burst on its master thread / a worker's first / last piece


@dataclass(frozen=True)
class Shape:
    """The logical application (the same in every run). ``topology``: ring | torus | graph | none;
    ``completion``: testsome | waitany | waitall | wait_each | test_poll; ``inner``: inner solver iterations per
    outer iteration (an Allreduce each when ``inner_reduce``); ``coll_every``: an outer Allreduce every k
    iterations (0: never); ``gather``: rank 0 collects a result from every rank by ANY_SOURCE polling each
    iteration; ``varying``: per-iteration kernel variants; ``symmetric``: every rank exchanges the same sizes;
    ``sites``: normal | none | one."""

    topology: str = "torus"
    completion: str = "testsome"
    chunks: int = 4
    inner: int = 1
    inner_reduce: bool = False
    inner_varying: bool = False
    coll_every: int = 1
    gather: bool = False
    varying: bool = False
    symmetric: bool = False
    sites: str = "normal"
    face_bytes: int = 64 * 1024
    interior_ins: float = 2.0e6
    housekeeping_p: float = 0.02
    farm: bool = False
    tasks_per_worker: int = 3
    rank_sigma: float = 0.12  # spread of the ranks' work (their subdomains): behaviour that tells ranks apart
    exchange: str = "isend"  # isend | sendrecv (MPI_Sendrecv(_replace) per neighbour) | persistent (Startall)
    nb_reduce: bool = False  # an MPI_Iallreduce posted before each exchange, MPI_Wait after it
    sub_comms: bool = False  # row and column communicators (Comm_split): Allreduce per row, every 2nd per column
    size_sigma: float = 0.0  # per-iteration spread of each rank's refinement (message bytes and work, AMR-like)
    regrid_every: int = 0  # the neighbour graph is redrawn every this many iterations (0: never)
    threads: int = 1  # threads per rank (OpenMP): each parallel region is a burst on every thread
    locks: bool = False  # worker threads wait for a lock 0-2 times per region (when: timing), cutting their burst
    recv_any: bool = False  # halo receives posted as MPI_Irecv(MPI_ANY_SOURCE): which face each takes follows arrival
    #: the halo also exchanged on a duplicate of the world (MPI_Comm_dup, :func:`dup_communicator`) with the same
    #: tag, completed by an MPI_Waitall of its own: its receives posted before the world's, its sends after them
    dup_comm: bool = False
    any_tag: bool = False  # farm: MPI_ANY_TAG receives; workers also report progress (a small message, its own tag)


@dataclass(frozen=True)
class RunPlan:
    """What one run does differently from the logical program: ``inner_delta`` (+1 / -1 inner iterations at outer
    iteration ``at``), ``repeat`` (outer iteration ``at`` done twice), ``checkpoint`` (at ``at``), ``more_inner``
    ((outer iteration, +/- inner iterations) at several places), ``tail`` (outer iterations more (+) or fewer (-)
    at the end: a solver that converged later, a run stopped by its time budget)."""

    inner_delta: int = 0
    repeat: bool = False
    more_inner: tuple[tuple[int, int], ...] = ()
    tail: int = 0
    checkpoint: bool = False
    at: int = -1
    extra_reduce: bool = False  # [plan22] another binary version: a second Allreduce after every outer one
    #: [torus24] the trace's rank of each logical rank when this run is the renumbered one (empty: as drawn by the
    #: campaign): what follows the placement rather than the role (the MPI library's glue) follows these
    trace_ranks: tuple[int, ...] = ()


@dataclass(frozen=True)
class CampaignSpec:
    """One campaign: ``mechanism`` (a key of :data:`MECHANISMS`), size, seed; the rest is set by the mechanism."""

    mechanism: str
    ranks: int = 8
    iterations: int = 20
    runs: int = 2
    seed: int = 0
    shape: Shape = field(default_factory=Shape)
    plans: tuple[RunPlan, ...] = ()
    counter_sets: tuple[tuple[str, ...], ...] = ()
    slow_node: bool = False
    jitter: float = 0.05
    machine: str | None = None
    app: str = "mech"
    recv_at_completion: bool = False  # logical receive time inside the completing call (as OTF2 records it)
    clock_offset_ns: float = 0.0  # sigma of each node's clock offset in a run (clocks not synchronised)
    clock_drift_ppm: float = 0.0  # sigma of each node's clock drift in a run (parts per million)
    ranks_per_node: tuple[int, ...] = ()  # per run (default: 4 with a slow node, else up to 16)
    flush_run: int = -1  # this run's tracer flushes its buffer (-2: every run's, each at its own calls)
    flush_every: int = 40  # calls between flushes of a rank in the flushing run
    renumber_run: int = -1  # this run's ranks are numbered by a random permutation (MPI_Cart_create reorder)
    os_noise_p: float = 0.004  # share of bursts > 20 us the OS stretches (1.3-4 x)
    late_start_ns: float = 0.0  # run 1's last rank starts this much later (a slow launch on its node)
    eager_limit: int = 0  # bytes: larger messages use the rendezvous protocol (0: every message eager)
    #: (run, rank from 0, outer iteration), repeated for more ranks: that run's trace of that rank starts at that
    #: iteration (tracing turned on late on it); its events before, and every communication record with an end
    #: there, are missing
    late_trace: tuple[int, ...] = ()
    #: the traces' format: "prv" (Paraver, as Extrae writes it) or "otf2" (an archive per run, as Score-P writes
    #: it: see :mod:`.otf2_out`)
    trace_format: str = "prv"
    #: [ranks22] the renumbered run numbers logical rank r as (r + shift) % ranks (a rotation: roles from a split key
    #: or the placement) instead of a random permutation (0: random)
    renumber_shift: int = 0
    #: this run's tracer gives the communicators other than the world other ids (:func:`shifted_comm_ids`)
    comm_ids_run: int = -1

    @property
    def name(self) -> str:
        return f"{self.mechanism}_s{self.seed}"

    def plan(self, run: int) -> RunPlan:
        return self.plans[run] if run < len(self.plans) else RunPlan()


def _rng(*parts: int | str) -> np.random.Generator:
    return np.random.default_rng([p if isinstance(p, int) else zlib.crc32(p.encode()) for p in parts])


# ---------------------------------------------------------------------------------------------------- topology
def grid(P: int) -> tuple[int, int]:
    """(columns, rows) of the most square process grid of ``P`` ranks (the torus's)."""
    py = int(np.floor(np.sqrt(P)))
    while P % py:
        py -= 1
    return P // py, py


def neighbours(topology: str, p: int, rng: np.random.Generator) -> list[list[int]]:
    """Neighbour task indices per task (symmetric relation)."""
    if p == 1 or topology == "none":
        return [[] for _ in range(p)]
    if topology == "ring":
        return [sorted({(r - 1) % p, (r + 1) % p} - {r}) for r in range(p)]
    if topology == "torus":
        px, py = grid(p)
        out = []
        for r in range(p):
            x, y = r % px, r // px
            s = {((x - 1) % px) + y * px, ((x + 1) % px) + y * px, x + ((y - 1) % py) * px, x + ((y + 1) % py) * px}
            out.append(sorted(s - {r}))
        return out
    # graph: a ring plus random chords (2-4 neighbours each)
    adj = [set() for _ in range(p)]
    for r in range(p):
        adj[r].add((r + 1) % p)
        adj[(r + 1) % p].add(r)
    for _ in range(p // 2):
        a, b = rng.integers(0, p, 2)
        if a != b and len(adj[a]) < 4 and len(adj[b]) < 4:
            adj[a].add(int(b))
            adj[b].add(int(a))
    return [sorted(s - {r}) for r, s in enumerate(adj)]


# ---------------------------------------------------------------------------------------------------- programs
@dataclass
class Logic:
    """The logical program's sizes (drawn once per campaign from its seed): work factors per rank, per iteration
    and per position, message sizes per (sender, receiver), kernel of every outer/inner iteration."""

    spec: CampaignSpec
    nb: list[list[int]]
    rank_work: np.ndarray
    iter_work: np.ndarray
    inner_work: np.ndarray
    face: dict[tuple[int, int], int]
    kernel_of: np.ndarray  # (iterations, inner + 2) kernel id of the interior
    n_inner: np.ndarray  # per outer iteration: inner iterations in the logical program
    task_ins: np.ndarray  # farm: (iterations, tasks) instructions of each task
    epochs: list[list[list[int]]]  # neighbours per regrid epoch (epoch 0 = ``nb``)
    refine: np.ndarray  # (iterations + 1, ranks) refinement factor of each rank's bytes and work (1: none)

    @functools.cached_property
    def dup(self) -> int | None:
        """The id of the world's duplicate communicator (:func:`dup_communicator`), once per campaign."""
        return dup_communicator(self.spec)

    def nb_at(self, it: int) -> list[list[int]]:
        """Neighbours per task in outer iteration ``it``."""
        every = self.spec.shape.regrid_every
        return self.epochs[min(it // every, len(self.epochs) - 1)] if every else self.nb

    def bytes(self, src: int, dst: int, it: int) -> int:
        """Bytes of the face ``src`` sends ``dst`` in iteration ``it`` (a multiple of 8)."""
        return max(8, int(self.face[(src, dst)] * self.refine[min(it, self.refine.shape[0] - 1), src]) // 8 * 8)

    @classmethod
    def draw(cls, spec: CampaignSpec) -> Logic:
        s, P, n = spec.shape, spec.ranks, spec.iterations
        rng = _rng(spec.seed, spec.mechanism, "logic")
        nb = neighbours(s.topology, P, rng)
        rank_work = np.exp(s.rank_sigma * rng.standard_normal(P))
        iter_work = np.exp(0.05 * rng.standard_normal(n + 1))
        inner_max = s.inner + 2
        inner_work = (np.exp(0.25 * rng.standard_normal((n + 1, inner_max))) if s.inner_varying
                      else np.ones((n + 1, inner_max)))
        face = {}
        for a in range(P):
            for b in nb[a]:
                face[(a, b)] = s.face_bytes if s.symmetric else int(s.face_bytes * rng.choice([0.5, 1, 1, 2]))
        if s.varying or s.inner_varying:
            # neighbouring iterations (outer and inner) never share a kernel: a shifted match reads other rates
            step = rng.integers(1, len(VARIANTS), n + 1)
            first = np.cumsum(step) % len(VARIANTS)
            kernel_of = V0 + (first[:, None] + np.arange(inner_max)[None, :]) % len(VARIANTS)
        else:
            kernel_of = np.full((n + 1, inner_max), kid("stencil_interior"))
        n_inner = np.full(n + 1, s.inner)
        n_tasks = max(1, (P - 1) * s.tasks_per_worker)
        task_ins = 1.5e6 * np.exp(0.5 * rng.standard_normal((n + 1, n_tasks)))
        # later mechanisms draw from their own streams: the earlier mechanisms' campaigns stay as they were
        epochs = [nb]
        if s.regrid_every:
            for e in range(1, n // s.regrid_every + 1):
                epochs.append(neighbours(s.topology, P, _rng(spec.seed, spec.mechanism, "regrid", e)))
        for g in epochs[1:]:
            r2 = _rng(spec.seed, spec.mechanism, "faces", len(face))
            for a in range(P):
                for b in g[a]:
                    face.setdefault((a, b), s.face_bytes if s.symmetric else int(s.face_bytes * r2.choice([0.5, 1, 2])))
        refine = np.ones((n + 1, P))
        if s.size_sigma:
            walk = _rng(spec.seed, spec.mechanism, "refine").standard_normal((n + 1, P)) * s.size_sigma / 3
            refine = np.exp(np.clip(np.cumsum(walk, axis=0), -3 * s.size_sigma, 3 * s.size_sigma))
        return cls(spec, nb, rank_work, iter_work, inner_work, face, kernel_of, n_inner, task_ins, epochs, refine)


class Sites:
    """Call sites of the application (index into :attr:`names`), or none / one for every call."""

    NAMES = ("main (main.c:21)", "main (main.c:23)", "main (main.c:24)", "setup (main.c:48)",
             "exchange (halo.c:88)", "exchange (halo.c:97)", "overlap (halo.c:120)", "overlap (halo.c:131)",
             "exchange (halo.c:140)", "solve (solver.c:57)", "step (main.c:90)", "collect (gather.c:30)",
             "collect (gather.c:33)", "report (gather.c:12)", "control (control.c:41)", "checkpoint (io.c:70)",
             "checkpoint (io.c:81)", "distribute (farm.c:64)", "collect (farm.c:88)", "worker (farm.c:140)",
             "worker (farm.c:152)", "main (main.c:97)", "inner (solver.c:77)")

    def __init__(self, mode: str):
        self.mode = mode
        self.index = {n.split(" (")[1].rstrip(")"): i for i, n in enumerate(self.NAMES)}

    def __call__(self, where: str) -> int:
        if self.mode == "none":
            return -1
        if self.mode == "one":
            return len(self.NAMES)
        return self.index[where]

    def names(self) -> list[str]:
        return [*self.NAMES, "mpi_wrapper (pmpi_wrap.c:12)"]


POLL_INS = 2500.0


def _prologue(task: int, sites: Sites, P: int) -> Iterator[Call]:
    su = kid("startup")
    yield Call("MPI_Init", su, 2.0e7, lid(task, -1, 0, 1), sites("main.c:21"), cost_ns=3.0e5, role=PROLOGUE)
    yield Call("MPI_Comm_rank", su, 4000.0, lid(task, -1, 0, 2), sites("main.c:23"), role=PROLOGUE)
    yield Call("MPI_Comm_size", su, 3000.0, lid(task, -1, 0, 3), sites("main.c:24"), role=PROLOGUE)
    yield Call("MPI_Barrier", su, 4.0e6, lid(task, -1, 0, 4), sites("main.c:48"),
               cost_ns=2000.0 * np.log2(P + 1), role=PROLOGUE)


def _epilogue(task: int, iterations: int, sites: Sites) -> Iterator[Call]:
    fin = kid("finalize")
    yield Call("MPI_Finalize", fin, 1.5e6, lid(task, iterations, 0, 1), sites("main.c:97"), cost_ns=1e5, role=EPILOGUE)
    yield Call("END", fin, 3.0e5, lid(task, iterations, 0, 2), role=EPILOGUE)


def sub_communicators(spec: CampaignSpec) -> dict[int, tuple[int, ...]]:
    """Communicator id -> member task indices of the row and column communicators (``Shape.sub_comms``; ids 2..
    after the world's 1): rows first, then columns of :func:`grid`."""
    if not spec.shape.sub_comms:
        return {}
    px, py = grid(spec.ranks)
    rows = {2 + y: tuple(range(y * px, (y + 1) * px)) for y in range(py)}
    cols = {2 + py + x: tuple(range(x, spec.ranks, px)) for x in range(px)}
    return rows | cols


#: the executor matches point-to-point messages by tag: a message on the duplicate communicator has its tag plus this
#: (MPI matches within a communicator), the trace's tag is the program's
DUP_TAG = 1 << 20


def dup_communicator(spec: CampaignSpec) -> int | None:
    """The id of the world's duplicate (``Shape.dup_comm``; after the row and column communicators), else None."""
    return max(sub_communicators(spec), default=WORLD) + 1 if spec.shape.dup_comm else None


def comm_of(comms: dict[int, tuple[int, ...]], task: int, kind: str) -> int:
    """The id of ``task``'s row (``kind`` "row") or column communicator."""
    ids = sorted(c for c, m in comms.items() if task in m)
    return ids[0] if kind == "row" else ids[-1]


def spmd(task: int, lg: Logic, plan: RunPlan, run_rng: np.random.Generator):
    """The program of one rank of the SPMD application (a generator of :class:`Call`)."""
    spec, s = lg.spec, lg.spec.shape
    P = spec.ranks
    sites = Sites(s.sites)
    yield from _prologue(task, sites, P)
    su = kid("startup")
    if s.exchange == "persistent":  # the requests, made once, started every exchange
        for d in range(len(lg.nb[task])):
            yield Call("MPI_Recv_init", su, 3000.0, lid(task, -1, 0, 10 + d), sites("halo.c:88"), role=PROLOGUE)
            yield Call("MPI_Send_init", su, 3000.0, lid(task, -1, 0, 20 + d), sites("halo.c:97"), role=PROLOGUE)
    comms = sub_communicators(spec)
    row, col = (comm_of(comms, task, k) for k in ("row", "col")) if s.sub_comms else (WORLD, WORLD)
    if s.sub_comms:
        for k in range(2):
            yield Call("MPI_Comm_split", su, 2.0e4, lid(task, -1, 0, 30 + k), sites("main.c:48"),
                       cost_ns=5000.0, role=PROLOGUE)
    role_hk = run_rng.random((spec.iterations + 2, 64)) < s.housekeeping_p
    dot = kid("dot")
    deltas = dict(plan.more_inner)
    results_of: dict[int, int] = {}  # the gather's results received per source (rank 0, this run)
    for it in range(spec.iterations + plan.tail):
        nb = lg.nb_at(it)[task]
        passes = 2 if (plan.repeat and plan.at == it) else 1
        for ps in range(passes):
            if plan.checkpoint and plan.at == it and ps == 0:
                yield from _checkpoint(task, it, P, sites)
            li = min(it, spec.iterations)  # the logical arrays' row (tail iterations past the end share the last)
            n_in = int(lg.n_inner[li]) + (plan.inner_delta if plan.at == it else 0) + deltas.get(it, 0)
            for j in range(n_in):
                inner = j + 512 * ps
                w = lg.rank_work[task] * lg.iter_work[li] * lg.inner_work[li, min(j, lg.inner_work.shape[1] - 1)]
                w *= lg.refine[li, task]
                kern = int(lg.kernel_of[li, min(j, lg.kernel_of.shape[1] - 1)])
                if s.nb_reduce:  # the previous residual's reduction overlaps the exchange
                    req = yield Call("MPI_Iallreduce", dot, 6000.0 * w, lid(task, it, inner, 5), sites("solver.c:77"),
                                     size=8, cost_ns=1500.0 * np.log2(P + 1))
                yield from _exchange(task, it, inner, nb, lg, w, kern, sites, role_hk[it, j % 64] and ps == 0)
                if s.nb_reduce:
                    yield Call("MPI_Wait", dot, 1.0e4 * w, lid(task, it, inner, 76), sites("solver.c:77"), reqs=(req,))
                if s.inner_reduce:
                    yield Call("MPI_Allreduce", dot, 6000.0 * w, lid(task, it, inner, 60), sites("solver.c:77"),
                               size=8, cost_ns=1500.0 * np.log2(P + 1))
            if s.gather:
                yield from _gather(task, it, 512 * ps, P, lg, sites, results_of)
            if s.sub_comms:  # a reduction along the row every iteration, along the column every second one
                yield Call("MPI_Allreduce", dot, 1.5e4 * lg.rank_work[task], lid(task, it, 512 * ps, 72),
                           sites("solver.c:57"), size=8, cost_ns=1500.0 * np.log2(P + 1), comm=row)
                if it % 2:
                    yield Call("MPI_Allreduce", dot, 1.0e4 * lg.rank_work[task], lid(task, it, 512 * ps, 73),
                               sites("solver.c:77"), size=16, cost_ns=1500.0 * np.log2(P + 1), comm=col)
            if s.coll_every and it % s.coll_every == s.coll_every - 1:
                yield Call("MPI_Allreduce", dot, 2.0e4 * lg.rank_work[task], lid(task, it, 512 * ps, 70),
                           sites("solver.c:57"), size=8, cost_ns=1500.0 * np.log2(P + 1))
                if plan.extra_reduce:
                    yield Call("MPI_Allreduce", dot, 3.0e4 * lg.rank_work[task], lid(task, it, 512 * ps, 71),
                               sites("solver.c:77"), size=8, cost_ns=1500.0 * np.log2(P + 1))
    yield from _epilogue(task, spec.iterations, sites)


def _exchange(task: int, it: int, inner: int, nb: list[int], lg: Logic, w: float, kern: int, sites: Sites,
              housekeeping: bool):
    """One halo exchange overlapped with the interior computation (``Shape.exchange``: nonblocking sends and
    receives, persistent requests started together, or a blocking Sendrecv per neighbour)."""
    s = lg.spec.shape
    pack, poll = kid("pack_halo"), kid("poll")
    boundary = kid("stencil_boundary")
    size_in = {src: lg.bytes(src, task, it) for src in nb}
    size_out = {dst: lg.bytes(task, dst, it) for dst in nb}
    if s.exchange == "sendrecv":
        yield from _sendrecv_exchange(task, it, inner, nb, w, kern, sites, size_in, size_out,
                                      s.interior_ins * w)
        return
    recv, sends = [], []
    if s.exchange == "persistent" and nb:
        posts = (*[("recv", src, TAG_HALO, size_in[src]) for src in nb],
                 *[("send", dst, TAG_HALO, size_out[dst]) for dst in nb])
        ins = 3.0e5 * w + sum(4000.0 + size_out[dst] / 16 for dst in nb)
        ids = yield Call("MPI_Startall", boundary, ins, lid(task, it, inner, 20), sites("halo.c:97"), posts=posts)
        recv, sends = list(ids[:len(nb)]), list(ids[len(nb):])
    if s.dup_comm:  # the duplicate's receives before the world's, its sends after them (MPI orders per communicator)
        dup, dup_reqs = lg.dup, []
        for d, src in enumerate(nb):
            dup_reqs.append((yield Call("MPI_Irecv", poll, 500.0, lid(task, it, inner, 110 + d), sites("halo.c:88"),
                                        peer=ANY if s.recv_any else src, tag=TAG_HALO + DUP_TAG, size=size_in[src],
                                        comm=dup)))
    for d, src in enumerate(nb if s.exchange != "persistent" else []):
        recv.append((yield Call("MPI_Irecv", pack if d == 0 else poll, 6000.0 if d == 0 else 500.0,
                                lid(task, it, inner, 10 + d), sites("halo.c:88"), peer=ANY if s.recv_any else src,
                                tag=TAG_HALO, size=size_in[src])))
    for d, dst in enumerate(nb if s.exchange != "persistent" else []):
        ins = 3.0e5 * w if d == 0 else 4000.0 + size_out[dst] / 16
        sends.append((yield Call("MPI_Isend", boundary if d == 0 else pack, ins, lid(task, it, inner, 20 + d),
                                 sites("halo.c:97"), peer=dst, tag=TAG_HALO, size=size_out[dst])))
    if s.dup_comm:
        for d, dst in enumerate(nb):
            dup_reqs.append((yield Call("MPI_Isend", pack, 4000.0 + size_out[dst] / 16, lid(task, it, inner, 120 + d),
                                        sites("halo.c:97"), peer=dst, tag=TAG_HALO + DUP_TAG, size=size_out[dst],
                                        comm=dup)))
    if housekeeping:
        yield Call("MPI_Iprobe", poll, 3 * POLL_INS, lid(task, it, inner, 30) | 1 << 8, sites("control.c:41"),
                   peer=ANY, tag=TAG_STOP, role=HOUSEKEEPING)
    interior = s.interior_ins * w
    pending = list(recv)
    mode = s.completion if nb else "waitall"
    if mode in ("testsome", "testany"):  # Testany: one request at most per test, the first face that came
        test, mode = ("MPI_Testsome", "waitany") if mode == "testsome" else ("MPI_Testany", "waitsome")
        for c in range(s.chunks):
            done = yield Call(test, kern, interior / s.chunks, lid(task, it, inner, 40 + c),
                              sites("halo.c:120"), reqs=tuple(pending))
            pending = [r for r in pending if r not in done]
        interior = 0.0
    if mode == "waitsome":  # unpack whatever came, together: the burst after takes its first face's identity
        prev: tuple[int, ...] = ()
        while pending:
            first = min((recv.index(r) for r in prev), default=-1)
            ins = interior if first < 0 else 2.0e4 + sum(size_in[nb[recv.index(r)]] for r in prev) / 8
            prev = yield Call("MPI_Waitsome", kern if first < 0 else pack, max(ins, 3000.0),
                              lid(task, it, inner, 50 if first < 0 else 80 + first), sites("halo.c:131"),
                              reqs=tuple(pending))
            pending = [r for r in pending if r not in prev]
        first = min((recv.index(r) for r in prev), default=-1)
        ins = interior if first < 0 else 2.0e4 + sum(size_in[nb[recv.index(r)]] for r in prev) / 8
        yield Call("MPI_Waitall", kern if first < 0 else pack, max(ins, 3000.0),
                   lid(task, it, inner, 50 if first < 0 else 80 + first), sites("halo.c:140"), reqs=tuple(sends))
    elif mode == "waitany":
        ins, name, work = interior, lid(task, it, inner, 50), kern  # the interior's rest, then each face's unpacking
        for _ in range(len(pending)):
            got = yield Call("MPI_Waitany", work, max(ins, 3000.0), name, sites("halo.c:131"), reqs=tuple(pending),
                             status=s.recv_any)
            prev = got[0] if s.recv_any else got
            pending.remove(prev)
            ins, name = _unpacking(task, it, inner, lg, got if s.recv_any else (prev, nb[recv.index(prev)], None, 0),
                                   recv, size_in)
            work = pack
        yield Call("MPI_Waitall", work, max(ins, 3000.0), name, sites("halo.c:140"), reqs=tuple(sends))
    elif mode == "waitall":
        yield Call("MPI_Waitall", kern, interior, lid(task, it, inner, 50), sites("halo.c:131"),
                   reqs=tuple(recv + sends))
    elif mode == "wait_each":
        for d, r in enumerate(recv):
            yield Call("MPI_Wait", kern if d == 0 else pack, interior if d == 0 else 2.0e4,
                       lid(task, it, inner, 50 + d), sites("halo.c:131"), reqs=(r,))
        yield Call("MPI_Waitall", pack, 2.0e4, lid(task, it, inner, 50 + len(recv)), sites("halo.c:140"),
                   reqs=tuple(sends))
    elif mode == "test_poll":
        sub, ins, kk = 0, interior, kern
        while pending:
            done = yield Call("MPI_Testall", kk, ins, lid(task, it, inner, 50, sub), sites("halo.c:131"),
                              reqs=tuple(pending), role=POLL if sub else WORK)
            pending = [r for r in pending if r not in done]
            sub, ins, kk = min(sub + 1, MAX_POLLS), POLL_INS, poll
        yield Call("MPI_Waitall", pack, 2.0e4, lid(task, it, inner, 51), sites("halo.c:140"), reqs=tuple(sends))
    if s.dup_comm and nb:
        yield Call("MPI_Waitall", pack, 2.0e4, lid(task, it, inner, 130), sites("halo.c:140"), reqs=tuple(dup_reqs))


def _unpacking(task: int, it: int, inner: int, lg: Logic, status: tuple, recv: list[int],
               size_in: dict[int, int]) -> tuple[float, int]:
    """(instructions, logical id) of the burst unpacking the face a ``MPI_Waitany`` completed: ``status`` is
    (request, source, bytes or None, the sending call's lid or 0). The work follows the face that came (its bytes),
    and so does the identity: a receive posted for ``MPI_ANY_SOURCE`` holds whichever message arrived, so the code
    after it learns the source from the status and unpacks that neighbour's face; the burst is the message's
    (sender, and the sender's exchange that sent it, which a fast neighbour may have sent for the next exchange),
    not the request's (its place among the receives says nothing about what came into it)."""
    _, src, size, sent_by = status
    if not sent_by:  # a receive naming its source: the request is the face
        return 2.0e4 + size_in[src] / 8, lid(task, it, inner, 80 + recv.index(status[0]))
    s_it, s_inner = ((sent_by >> 44) & ITER_MASK) - 2, (sent_by >> 34) & 1023
    return 2.0e4 + size / 8, lid(task, s_it, s_inner, 80 + lg.nb_at(s_it)[task].index(src))


def _sendrecv_exchange(task: int, it: int, inner: int, nb: list[int], w: float, kern: int, sites: Sites,
                       size_in: dict[int, int], size_out: dict[int, int], interior: float):
    """Compute, then one blocking MPI_Sendrecv per neighbour (MPI_Sendrecv_replace where both faces have the
    same size: one buffer)."""
    pack = kid("pack_halo")
    for d, peer in enumerate(nb):
        ins = 3.0e5 * w + interior if d == 0 else 4000.0 + size_out[peer] / 16
        name = "MPI_Sendrecv_replace" if size_in[peer] == size_out[peer] and d % 2 else "MPI_Sendrecv"
        yield Call(name, kern if d == 0 else pack, ins, lid(task, it, inner, 20 + d), sites("halo.c:97"),
                   peer=peer, tag=TAG_HALO, size=size_out[peer],
                   posts=(("send", peer, TAG_HALO, size_out[peer]), ("recv", peer, TAG_HALO, size_in[peer])))


def _gather(task: int, it: int, inner: int, P: int, lg: Logic, sites: Sites, results_of: dict[int, int]):
    """Every rank sends rank 0 a result; rank 0 polls ``MPI_Iprobe(ANY_SOURCE)`` and receives whoever is there,
    processing each result in the burst after its receive (that burst follows the message's identity: the k-th
    result of its source, which a fast source may have sent for the next round). ``results_of``: rank 0's results
    received so far per source in this run (the messages' k), owned by the run's rank-0 program."""
    red, poll = kid("reduce_results"), kid("poll")
    if task != 0:
        yield Call("MPI_Send", red, 3.0e6 * lg.rank_work[task] * lg.iter_work[it], lid(task, it, inner, 100),
                   sites("gather.c:12"), peer=0, tag=TAG_GATHER, size=4096 + 512 * task)
        return
    ins, kern, pos, sub = 5.0e4, red, 101, 0
    pit = it
    for _ in range(P - 1):
        while True:
            found = yield Call("MPI_Iprobe", kern, ins, lid(task, pit, inner, pos, sub), sites("gather.c:30"),
                               peer=ANY, tag=TAG_GATHER, role=POLL if sub else WORK)
            if found is not None:
                break
            ins, kern, sub = POLL_INS, poll, sub + 1
        src, _size = yield Call("MPI_Recv", poll, 800.0, lid(task, it, inner, 200 + found), sites("gather.c:33"),
                                peer=found, tag=TAG_GATHER, size=4096 + 512 * found)
        # the result's processing: its work depends on the sender, its identity is the message's (src -> 0, it)
        ins, kern, pos, sub = 1.0e5 * (1 + src % 3), red, 300 + src, 0
        # the message's identity is (src -> 0, k): k = results of src received so far (a fast rank's next result
        # can arrive within this round), not this round's number
        pit = results_of.get(src, 0)
        results_of[src] = pit + 1
    yield Call("MPI_Comm_rank", kern, ins, lid(task, pit, inner, pos, sub), sites("gather.c:12"))


def _checkpoint(task: int, it: int, P: int, sites: Sites):
    io = kid("pack_transpose")
    yield Call("MPI_Gather", io, 4.0e5, lid(task, it, 0, 400), sites("io.c:70"), size=1 << 16, root=0,
               cost_ns=2e4 * np.log2(P + 1), role=CHECKPOINT)
    if task == 0:
        yield Call("MPI_File_write", io, 2.0e6, lid(task, it, 0, 401), sites("io.c:81"), cost_ns=3.0e6,
                   role=CHECKPOINT)
    yield Call("MPI_Barrier", io, 5.0e4, lid(task, it, 0, 402), sites("io.c:81"), cost_ns=1500.0 * np.log2(P + 1),
               role=CHECKPOINT)


def farm(task: int, lg: Logic, plan: RunPlan, run_rng: np.random.Generator):
    """Dynamic master-worker: per iteration the master hands out ``tasks_per_worker`` x workers tasks (tag
    ``TAG_TASK + it``), one to each worker first, then the next one to whichever worker returned a result
    (``MPI_Recv(ANY_SOURCE)``), then a stop message (8 bytes) to each; a Bcast starts every iteration and a
    Barrier ends it. A worker's burst of its k-th task of an iteration and the master's processing of the k-th
    result from that worker are identified by those messages ((0 -> worker, k), (worker -> 0, k)); what a task
    holds (its work) depends on which worker was free."""
    spec = lg.spec
    P, s = spec.ranks, spec.shape
    sites = Sites(s.sites)
    yield from _prologue(task, sites, P)
    interp, red, poll = kid("interpret"), kid("reduce_results"), kid("poll")
    n_tasks = (P - 1) * s.tasks_per_worker
    for it in range(spec.iterations):
        yield Call("MPI_Bcast", red if task == 0 else poll, 5.0e4 if task == 0 else 2000.0, lid(task, it, 0, 1),
                   sites("main.c:90"), size=64, root=0, cost_ns=1500.0 * np.log2(P + 1))
        tag_t, tag_r = TAG_TASK + it, TAG_RESULT + it
        if task == 0:
            nxt = 0
            for w in range(1, P):
                yield Call("MPI_Send", poll, 2500.0, lid(0, it, 0, 2, w), sites("farm.c:64"), peer=w, tag=tag_t,
                           size=TASK_BYTES + 8 * nxt)
                nxt += 1
            got = np.zeros(P, np.int64)
            logs = np.zeros(P, np.int64)
            ins, b = 3000.0, lid(0, it, 0, 3)
            results = 0
            while results < n_tasks:
                src, _size, *tag = yield Call("MPI_Recv", red, ins, b, sites("farm.c:88"), peer=ANY,
                                              tag=ANY if s.any_tag else tag_r, size=RESULT_BYTES)
                if tag and tag[0] == TAG_LOG + it:  # a progress report: its own short processing
                    ins, b = 2.0e4, lid(0, it, int(logs[src]) + 1, 14, src)
                    logs[src] += 1
                    continue
                results += 1
                k = int(got[src])
                got[src] += 1
                # processing the result: identity (src -> 0, tag_r, k); its work depends on the sender
                ins, b = 1.0e5 * (1 + 0.3 * (src % 4)) * lg.rank_work[0], lid(0, it, k + 1, 10, src)
                if nxt < n_tasks:
                    yield Call("MPI_Send", red, ins, b, sites("farm.c:64"), peer=src, tag=tag_t,
                               size=TASK_BYTES + 8 * nxt)
                    nxt += 1
                    ins, b = 2000.0, lid(0, it, k + 1, 11, src)
            for w in range(1, P):
                yield Call("MPI_Send", red if w == 1 else poll, ins if w == 1 else 1500.0,
                           b if w == 1 else lid(0, it, 0, 12, w), sites("farm.c:64"), peer=w,
                           tag=TAG_STOP if s.any_tag else tag_t, size=STOP_BYTES)
        else:
            k = 0
            while True:
                _src, size, *tag = yield Call("MPI_Recv", poll, 1500.0, lid(task, it, 0, 20, k), sites("farm.c:140"),
                                              peer=0, tag=ANY if s.any_tag else tag_t, size=TASK_BYTES)
                if (tag[0] == TAG_STOP) if tag else size == STOP_BYTES:
                    break
                work = lg.task_ins[it, (size - TASK_BYTES) // 8] * lg.rank_work[task]
                if s.any_tag and k % 2 == 0:  # a progress report half-way through every second task
                    yield Call("MPI_Send", interp, work / 2, lid(task, it, 0, 21, k), sites("farm.c:152"), peer=0,
                               tag=TAG_LOG + it, size=LOG_BYTES)
                    work /= 2
                yield Call("MPI_Send", interp, work, lid(task, it, 0, 22, k), sites("farm.c:152"), peer=0,
                           tag=tag_r, size=RESULT_BYTES)
                k += 1
        yield Call("MPI_Barrier", poll, 2000.0, lid(task, it, 0, 13), sites("main.c:90"),
                   cost_ns=1500.0 * np.log2(P + 1))
    yield from _epilogue(task, spec.iterations, sites)


# ---------------------------------------------------------------------------------------------------- campaigns
def _pairs(n: int) -> tuple[tuple[str, ...], ...]:
    """``n`` runs recording two counters each: instructions and one programmable counter."""
    return tuple(("PAPI_TOT_INS", PROGRAMMABLE_COUNTERS[r % len(PROGRAMMABLE_COUNTERS)]) for r in range(n))


def _singles(n: int) -> tuple[tuple[str, ...], ...]:
    """``n`` runs recording one counter each (run 0 instructions; no counter common to all runs)."""
    return tuple((("PAPI_TOT_INS",) if r == 0 else (PROGRAMMABLE_COUNTERS[(r - 1) % len(PROGRAMMABLE_COUNTERS)],))
                 for r in range(n))


def _mid(n: int) -> int:
    return max(1, n // 2)


#: mechanism -> (description, builder of the spec from (seed, ranks, iterations))
MECHANISMS: dict[str, tuple[str, object]] = {}


def mechanism(name: str, description: str, ranks: int, iterations: int):
    def deco(fn):
        MECHANISMS[name] = (description, fn, ranks, iterations)
        return fn
    return deco


@mechanism("completion", "Testsome between interior chunks, Waitany per face, Allreduce every 5th", 8, 30)
def _completion(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, jitter=0.2, shape=Shape(topology="graph", completion="testsome", chunks=6, coll_every=5))


@mechanism("completion_at_wait", "as completion, receives recorded in the call that completed them", 8, 30)
def _completion_at_wait(spec: CampaignSpec) -> CampaignSpec:
    return replace(_completion(spec), recv_at_completion=True)


@mechanism("polling", "gather to rank 0 by Iprobe(ANY_SOURCE) polling (hundreds of polls)", 8, 20)
def _polling(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, shape=Shape(topology="ring", completion="waitall", gather=True, coll_every=0))


@mechanism("extra_inner", "one more inner-solver iteration in run 1 (identical iterations: undecidable)", 8, 30)
def _extra_inner(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, shape=Shape(inner=4, inner_reduce=True, completion="waitall", coll_every=1),
                   plans=(RunPlan(), RunPlan(inner_delta=1, at=_mid(spec.iterations))))


@mechanism("missing_inner", "one fewer inner-solver iteration in run 1 (undecidable)", 8, 30)
def _missing_inner(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, shape=Shape(inner=4, inner_reduce=True, completion="waitall", coll_every=1),
                   plans=(RunPlan(), RunPlan(inner_delta=-1, at=_mid(spec.iterations))))


@mechanism("repeated", "run 1 repeats one outer iteration (identical: undecidable)", 8, 30)
def _repeated(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, shape=Shape(completion="testsome", coll_every=1),
                   plans=(RunPlan(), RunPlan(repeat=True, at=_mid(spec.iterations))))


@mechanism("extra_varying", "one more inner iteration in run 1, inner iterations differ (decidable)", 8, 30)
def _extra_varying(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, shape=Shape(inner=4, inner_reduce=False, inner_varying=True, completion="testsome",
                                     coll_every=1),
                   plans=(RunPlan(), RunPlan(inner_delta=1, at=_mid(spec.iterations))))


@mechanism("inner_counts", "run 1's inner solver needs +1, -1, +1 iterations at three outer iterations (inner "
           "iterations differ: decidable)", 8, 30)
def _inner_counts(spec: CampaignSpec) -> CampaignSpec:
    n = spec.iterations
    return replace(spec, shape=Shape(inner=4, inner_varying=True, completion="waitall", coll_every=1),
                   plans=(RunPlan(), RunPlan(more_inner=((n // 4, 1), (n // 2, -1), (3 * n // 4, 1)))))


@mechanism("tail", "run 1 makes 2 more outer iterations at the end (converged later), run 2 (if any) 2 fewer",
           8, 30)
def _tail(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, shape=Shape(topology="graph", completion="testsome", coll_every=2),
                   plans=(RunPlan(), RunPlan(tail=2), RunPlan(tail=-2)))


@mechanism("checkpoint", "run 1 writes a checkpoint (Gather, write, Barrier) in one iteration; receives recorded "
           "at completion", 8, 30)
def _checkpoint_mech(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, recv_at_completion=True, shape=Shape(completion="testsome", coll_every=3),
                   plans=(RunPlan(), RunPlan(checkpoint=True, at=_mid(spec.iterations))))


@mechanism("ring", "rotation-symmetric 4-rank ring (Testsome, receives at completion), ranks alike", 4, 40)
def _ring(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, recv_at_completion=True, shape=Shape(topology="ring", symmetric=True, completion="testsome",
                                                              coll_every=0, rank_sigma=0.01))


@mechanism("torus", "rotation-symmetric 4x4 torus, ranks differ by work only", 16, 20)
def _torus(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, shape=Shape(topology="torus", symmetric=True, completion="waitany", coll_every=0,
                                                 rank_sigma=0.03))


@mechanism("no_callers", "no caller events, no collectives", 8, 30)
def _no_callers(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, shape=Shape(sites="none", completion="testsome", coll_every=0))


@mechanism("one_site", "one call site for every MPI call, no collectives", 8, 30)
def _one_site(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, shape=Shape(sites="one", completion="testsome", coll_every=0))


@mechanism("master_worker", "dynamic farm, Recv(ANY_SOURCE), next task to whoever answered", 6, 40)
def _master_worker(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, shape=Shape(farm=True, topology="none", tasks_per_worker=3))


@mechanism("pairs8", "8 runs, each recording instructions and one other counter; receives recorded at completion",
           8, 20)
def _pairs8(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, runs=8, recv_at_completion=True, counter_sets=_pairs(8),
                   shape=Shape(completion="testsome", coll_every=5))


@mechanism("single10", "10 runs, each recording a single counter; receives recorded at completion", 8, 20)
def _single10(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, runs=10, recv_at_completion=True, counter_sets=_singles(10),
                   shape=Shape(completion="testsome", coll_every=5))


@mechanism("placement", "random placement, one slow node per run, network jitter", 16, 30)
def _placement(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, slow_node=True, jitter=0.3, shape=Shape(topology="graph", completion="testsome",
                                                                 coll_every=4))


@mechanism("varying_rates", "kernel rates change from iteration to iteration, no collectives", 8, 30)
def _varying(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, shape=Shape(varying=True, completion="testsome", coll_every=0))


@mechanism("waitsome", "Testany between interior chunks, then Waitsome until every face came (unpacking what came "
           "together)", 8, 30)
def _waitsome(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, jitter=0.2, shape=Shape(topology="graph", completion="testany", chunks=4, coll_every=5))


@mechanism("sendrecv", "blocking MPI_Sendrecv / Sendrecv_replace per neighbour after the compute", 9, 30)
def _sendrecv(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, shape=Shape(topology="torus", exchange="sendrecv", coll_every=5))


@mechanism("persistent", "persistent requests (Send_init/Recv_init once, MPI_Startall every exchange), Testsome",
           8, 30)
def _persistent(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, jitter=0.2, shape=Shape(topology="graph", exchange="persistent", completion="testsome",
                                                 coll_every=4))


@mechanism("nb_collective", "MPI_Iallreduce posted before each exchange, MPI_Wait after it; no blocking collective",
           8, 30)
def _nb_collective(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, shape=Shape(topology="torus", completion="waitall", nb_reduce=True, coll_every=0))


@mechanism("sub_comms", "row and column communicators (Comm_split): Allreduce per row every iteration, per column "
           "every second; no world collective", 16, 20)
def _sub_comms(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, shape=Shape(topology="torus", completion="waitall", sub_comms=True, coll_every=0))


@mechanism("amr", "message bytes and work change every iteration (refinement), neighbours redrawn every 10 "
           "iterations", 8, 30)
def _amr(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, shape=Shape(topology="graph", completion="waitall", size_sigma=0.5, regrid_every=10,
                                     coll_every=5))


@mechanism("amr_stages", "refinement changes bytes and work every iteration, 2 Runge-Kutta stages per step (a "
           "halo exchange each), no collective", 8, 30)
def _amr_stages(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, shape=Shape(topology="graph", completion="waitall", size_sigma=0.5, inner=2, coll_every=0))


@mechanism("clock_offsets", "node clocks off by tens of us and drifting by ppm (receives can precede sends), "
           "4 ranks per node", 16, 30)
def _clock_offsets(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, clock_offset_ns=30_000.0, clock_drift_ppm=5.0, ranks_per_node=(4,) * spec.runs,
                   shape=Shape(topology="graph", completion="testsome", coll_every=5))


@mechanism("layout", "16 ranks on one node in run 0, 4 per node in run 1 (shared memory vs network)", 16, 30)
def _layout(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, ranks_per_node=tuple(16 if r % 2 == 0 else 4 for r in range(spec.runs)),
                   shape=Shape(topology="graph", completion="testsome", coll_every=5))


@mechanism("flush", "run 1's tracer flushes its buffer every 40 calls of a rank (0.2-2 ms, bursts cut in two)",
           8, 30)
def _flush(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, flush_run=1, shape=Shape(topology="graph", completion="testsome", coll_every=5))


@mechanism("flush_all", "every run's tracer flushes its buffer, each at other calls (every 40 / 43 / .. calls)", 8, 30)
def _flush_all(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, flush_run=-2, shape=Shape(topology="graph", completion="waitall", coll_every=5))


@mechanism("hybrid", "MPI + OpenMP, 4 threads per rank: every interior chunk a parallel region on each thread",
           8, 30)
def _hybrid(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, shape=Shape(topology="torus", completion="testsome", chunks=3, coll_every=5, threads=4))


@mechanism("hybrid_locks", "as hybrid, worker threads wait for a lock 0-2 times per parallel region (when: timing)",
           8, 30)
def _hybrid_locks(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, shape=Shape(topology="torus", completion="waitall", chunks=3, coll_every=5, threads=4,
                                     locks=True))


@mechanism("renumbered", "run 1's MPI ranks numbered by a random permutation (Cart_create with reorder), "
           "irregular neighbour graph", 8, 30)
def _renumbered_mech(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, renumber_run=1, shape=Shape(topology="graph", completion="waitall", coll_every=5))


@mechanism("renumbered_torus", "run 1's ranks renumbered by a random permutation on a symmetric 4x4 torus (only "
           "the ranks' work tells them apart)", 16, 20)
def _renumbered_torus(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, renumber_run=1, shape=Shape(topology="torus", symmetric=True, completion="waitall",
                                                     coll_every=0))


@mechanism("irecv_any", "halo receives posted as Irecv(ANY_SOURCE): which neighbour's face each receive takes "
           "follows arrival (Waitall)", 8, 30)
def _irecv_any(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, jitter=0.3, shape=Shape(topology="graph", completion="waitall", recv_any=True,
                                                 coll_every=5))


@mechanism("noisy", "OS noise on 5 % of bursts (1.3-4 x longer), one rank of run 1 launched 30 ms late", 8, 30)
def _noisy(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, os_noise_p=0.05, late_start_ns=3.0e7,
                   shape=Shape(topology="graph", completion="waitall", coll_every=5))


@mechanism("late_trace", "run 1's trace of its last rank starts at outer iteration 2 (tracing turned on late on one "
           "rank): its events before and the communication records with an end there are missing (Extrae's merger "
           "leaves unmatched communications out), so its channels' records start 2 iterations in; Testsome "
           "between interior chunks, Waitany per face, no collective", 8, 30)
def _late_trace(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, jitter=0.2, late_trace=(1, spec.ranks - 1, 2),
                   shape=Shape(topology="graph", completion="testsome", chunks=4, coll_every=0))


@mechanism("mixed", "a random valid application per seed with several later mechanisms at once (exchange style, "
           "completion calls, Iallreduce, row/column collectives, refinement, clocks, layout, flushes, threads, "
           "ANY_SOURCE receives, renumbering)", 12, 30)
def _mixed(spec: CampaignSpec) -> CampaignSpec:
    rng = _rng(spec.seed, "mixed")
    topology = str(rng.choice(["ring", "torus", "graph"]))
    exchange = str(rng.choice(["isend", "isend", "sendrecv", "persistent"]))
    recv_any = exchange == "isend" and rng.random() < 0.3
    completion = ("waitall" if recv_any else
                  str(rng.choice(["testsome", "waitany", "waitall", "wait_each", "test_poll", "waitsome", "testany"])))
    shape = Shape(topology=topology, exchange=exchange, completion=completion, recv_any=recv_any,
                  chunks=int(rng.integers(2, 6)), inner=int(rng.choice([1, 1, 2])),
                  inner_reduce=bool(rng.random() < 0.3), nb_reduce=bool(rng.random() < 0.3),
                  sub_comms=bool(topology == "torus" and rng.random() < 0.5),
                  coll_every=int(rng.choice([1, 5, 0])), size_sigma=float(rng.choice([0.0, 0.0, 0.3])),
                  threads=int(rng.choice([1, 1, 2, 4])), face_bytes=int(rng.choice([8192, 65536, 262144])),
                  interior_ins=float(rng.uniform(5e5, 4e6)))
    runs = spec.runs
    return replace(spec, shape=shape, recv_at_completion=bool(rng.random() < 0.5),
                   jitter=float(rng.choice([0.05, 0.2, 0.3])),
                   clock_offset_ns=float(rng.choice([0.0, 0.0, 20_000.0])), clock_drift_ppm=float(rng.choice([0, 2])),
                   ranks_per_node=tuple(int(rng.choice([4, 8, 16])) for _ in range(runs)),
                   flush_run=int(rng.choice([-1, -1, 1, -2])), renumber_run=int(rng.choice([-1, -1, -1, 1])),
                   os_noise_p=float(rng.choice([0.004, 0.02])))


@mechanism("rendezvous", "messages above the eager limit (64 KiB) use the rendezvous protocol: a send waits for its "
           "receive to be posted, so how long a Send, an Isend's Wait or a Sendrecv takes and which call of the "
           "sender waits follow the receiver's timing (faces of 32-512 KiB: some eager, some not)", 8, 30)
def _rendezvous(spec: CampaignSpec) -> CampaignSpec:
    rng = _rng(spec.seed, "rendezvous")
    exchange = str(rng.choice(["isend", "isend", "sendrecv", "persistent"]))
    shape = Shape(topology=str(rng.choice(["ring", "torus", "graph"])), exchange=exchange,
                  completion=str(rng.choice(["testsome", "waitany", "waitall", "wait_each", "test_poll"])),
                  chunks=int(rng.integers(2, 6)), coll_every=int(rng.choice([1, 5, 0])),
                  face_bytes=int(rng.choice([65536, 131072, 262144])), interior_ins=float(rng.uniform(5e5, 4e6)))
    return replace(spec, shape=shape, eager_limit=65536, jitter=0.2, recv_at_completion=bool(rng.random() < 0.5))


@mechanism("any_tag", "master-worker over 40 iterations with MPI_ANY_TAG receives: workers send a progress report "
           "(its own tag) half-way through every second task, the master receives Recv(ANY_SOURCE, ANY_TAG) and "
           "handles a report or a result by its tag; workers receive a task or a stop by tag", 6, 40)
def _any_tag(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, jitter=0.2, shape=Shape(topology="none", farm=True, coll_every=0, any_tag=True))


@mechanism("plain", "a random valid application per seed", 8, 30)
def _plain(spec: CampaignSpec) -> CampaignSpec:
    rng = _rng(spec.seed, "plain")
    shape = Shape(topology=str(rng.choice(["ring", "torus", "graph"])),
                  completion=str(rng.choice(["testsome", "waitany", "waitall", "wait_each", "test_poll"])),
                  chunks=int(rng.integers(2, 6)), inner=int(rng.choice([1, 1, 2])),
                  inner_reduce=bool(rng.random() < 0.5), coll_every=int(rng.choice([1, 1, 5, 0])),
                  gather=bool(rng.random() < 0.2), face_bytes=int(rng.choice([8192, 65536, 262144])),
                  interior_ins=float(rng.uniform(5e5, 4e6)))
    # tracers record a non-blocking receive at its post (Extrae) or in the call that completed it (Score-P)
    return replace(spec, shape=shape, recv_at_completion=bool(rng.random() < 0.5),
                   jitter=float(rng.choice([0.05, 0.2])))


def campaign(name: str, seed: int = 0, *, ranks: int | None = None, iterations: int | None = None,
             runs: int = 2) -> CampaignSpec:
    """The spec of mechanism ``name`` (sizes default to the mechanism's own)."""
    if name not in MECHANISMS:
        raise BadInputError(f"unknown mechanism {name!r} (known: {', '.join(MECHANISMS)})")
    _, build, r0, i0 = MECHANISMS[name]
    return build(CampaignSpec(name, ranks=ranks or r0, iterations=iterations or i0, runs=runs, seed=seed))


@dataclass
class Campaign:
    """What :func:`simulate` wrote: the traces (run 0 first) and the truth (see module docstring)."""

    spec: CampaignSpec
    traces: list[Path]
    truth: pl.DataFrame
    counters: list[list[str]]


def _timing(spec: CampaignSpec, machine: Machine, run: int, node_of_task: np.ndarray, model: CounterModel,
            rng: np.random.Generator) -> Timing:
    P = spec.ranks
    probe, dur = model.counts(np.arange(len(ALL_KERNELS)), np.full(len(ALL_KERNELS), 1.0e6), None)
    ns_per_ins = dur.astype(np.float64) / 1.0e6
    speed = np.ones(P)
    if spec.slow_node:
        slow = int(rng.integers(0, int(node_of_task.max()) + 1))
        speed[node_of_task == slow] = 1.0 / (1.0 + rng.uniform(0.05, 0.25))
    lat, bw = machine.network_latency_us * 1e3, machine.link_bw() * 1e-9

    def latency(a: int, b: int) -> float:
        return INTRA_LATENCY_NS if node_of_task[a] == node_of_task[b] else lat

    def bandwidth(a: int, b: int) -> float:
        return INTRA_BW_FACTOR * bw if node_of_task[a] == node_of_task[b] else bw

    return Timing(ns_per_ins, 0.02, latency, bandwidth, speed, jitter=spec.jitter, rng=rng, os_noise_p=spec.os_noise_p,
                  flush_every=spec.flush_every + 3 * run if spec.flush_run in (run, -2) else 0,
                  eager_limit=spec.eager_limit or float("inf"))


def simulate(out_dir: str | Path, spec: CampaignSpec) -> Campaign:
    """Run every run of ``spec``, write ``out_dir/<spec.name>/<app>.run<k>.prv/.pcf/.row`` and return the truth."""
    machine = load_machine(spec.machine)
    P = spec.ranks
    if P < 2 or spec.iterations < 2:
        raise BadInputError("a campaign needs at least 2 ranks and 2 iterations")
    if spec.trace_format == "otf2" and (0 <= spec.renumber_run < spec.runs or spec.shape.threads > 1):
        raise BadInputError("the OTF2 output writes neither renumbered runs nor threads")
    exp_rng = _rng(spec.seed, spec.mechanism, "experiment")
    sigma = draw_noise_sizes(exp_rng)
    sets = [list(c) for c in spec.counter_sets] or assign_counter_sets(spec.runs, 4, exp_rng)
    lg = Logic.draw(spec)
    T = spec.shape.threads
    comms = sub_communicators(spec)
    dup = dup_communicator(spec)
    d = Path(out_dir) / spec.name
    d.mkdir(parents=True, exist_ok=True)
    traces, truths = [], []
    for r in range(spec.runs):
        rng = _rng(spec.seed, spec.mechanism, r, "run")
        rpn = spec.ranks_per_node[r] if spec.ranks_per_node else 4 if spec.slow_node else min(P, 16)
        placement = place(P, rpn, machine.cores_per_node // T, rng)
        freq = run_clock(machine.frequency_ghz * 1e9, 0.004, rng)
        model = CounterModel(machine, machine.dram_share(float(min(P, rpn) * T)), freq, sigma, ALL_KERNELS)
        timing = _timing(spec, machine, r, placement.node_of_task, model, rng)
        program = PROGRAMS.get(spec.mechanism) or (farm if spec.shape.farm else spmd)
        programs = [program(t, lg, spec.plan(r), _rng(spec.seed, spec.mechanism, r, t, "prog")) for t in range(P)]
        start = rng.uniform(5_000, 80_000, P)
        if r == 1:
            start[-1] += spec.late_start_ns
        ex = Executor(programs, timing, start, comms).run()
        name = f"{spec.app}.run{r}"
        bursts, calls, msgs, events, truth = _tables(ex, spec, model, timing, placement, machine.cores_per_node,
                                                     sets[r], name, rng, r)
        halves = msgs  # OTF2 keeps each traced half of a message (a reader pairs them)
        traced_from = {rank + 1: _trace_start(rank + 1, iteration, truth)
                       for run, rank, iteration in zip(*[iter(spec.late_trace)] * 3) if run == r}
        if traced_from:
            bursts, calls, msgs, events, truth = _traced_from(traced_from, bursts, calls, msgs, events, truth)
        run_comms = {WORLD: tuple(range(P)), **comms, **({dup: tuple(range(P))} if dup else {})}
        if r == spec.renumber_run:
            perm = (np.array(spec.plan(r).trace_ranks) if spec.plan(r).trace_ranks
                    else (np.arange(P) + spec.renumber_shift) % P if spec.renumber_shift
                    else _rng(spec.seed, spec.mechanism, "perm").permutation(P))
            bursts, calls, msgs, events, truth = _renumbered(perm, run_comms, bursts, calls, msgs, events, truth)
            placement = replace(placement, node_of_task=placement.node_of_task[np.argsort(perm)])
            run_comms = {c: tuple(sorted(int(perm[t]) for t in m)) for c, m in run_comms.items()}  # as its tracer
        if r == spec.comm_ids_run:
            run_comms, calls, msgs, halves = shifted_comm_ids(run_comms, calls, msgs, halves)
        meta = TraceMeta(cpus_per_node=(machine.cores_per_node,) * len(placement.node_names),
                         threads_per_task=(tuple([T] * P),),
                         node_of_task=(tuple(int(n) + 1 for n in placement.node_of_task),),
                         communicators=tuple(Communicator(1, c, tuple(int(t) + 1 for t in m))
                                             for c, m in run_comms.items()),
                         node_names=placement.node_names, binary=spec.app)
        if spec.trace_format == "otf2":
            from synthtrace.simulator.otf2_out import write_otf2
            traces.append(write_otf2(d / name, bursts, calls, halves, sets[r], traced_from))
        else:
            traces.append(write_paraver(d / name, bursts, calls, meta, messages=msgs, counters=sets[r],
                                        events=events))
        truths.append(truth)
    truth = _spans(pl.concat(truths), spec)
    truth.write_parquet(d / "truth.parquet")
    return Campaign(spec, traces, truth, sets)


def _trace_start(task: int, iteration: int, truth: pl.DataFrame) -> int:
    """The time (ns) the trace of ``task`` (1-based) starts when it starts at outer ``iteration``: its first burst's
    there."""
    return int(truth.filter((pl.col("task") == task) & (pl.col("iteration") >= iteration)).get_column("start_ns").min())


def _traced_from(starts: dict[int, int], bursts: pl.DataFrame, calls: pl.DataFrame, msgs: pl.DataFrame,
                 events: pl.DataFrame, truth: pl.DataFrame) -> tuple[pl.DataFrame, ...]:
    """The tables of a run whose traces of the tasks of ``starts`` (1-based task -> the time (ns) its trace starts:
    :func:`_trace_start`) start late: their bursts, calls, events and truth rows before that time are gone (their
    truth renumbered from 0, as the reader numbers), and so is every communication record with an end on such a
    task before it. A Paraver record holds both ends; Extrae's merger writes one only when it pairs a traced send
    with a traced receive (the others are counted as unmatched and left out), and OTF2 pairs the halves of a
    message the same way. The partners' calls that sent or received the missing messages stay, with neither peer
    nor bytes (a Paraver trace carries them in the records only)."""
    def t0(task: str) -> pl.Expr:  # the trace start of the row's task (NULL: traced from its start)
        return pl.col(task).replace_strict(starts, default=None, return_dtype=pl.Int64)

    before = (pl.col("start_ns") < t0("task")).fill_null(False)
    gone = truth.filter(before).group_by("task").len()
    truth = (truth.filter(~before).join(gone, on="task", how="left", maintain_order="left")
             .with_columns(pl.col("burst_seq") - pl.col("len").fill_null(0)).drop("len"))
    lost = ((pl.col("s_time_ns") < t0("s_task")) | (pl.col("r_time_ns") < t0("r_task"))).fill_null(False)
    return (bursts.filter(~before), calls.filter(~before), msgs.filter(~lost),
            events.filter(~(pl.col("time_ns") < t0("task")).fill_null(False)), truth)


def _renumbered(perm: np.ndarray, comms: dict[int, tuple[int, ...]], *frames: pl.DataFrame
                ) -> tuple[pl.DataFrame, ...]:
    """``frames`` with task ``t + 1`` renumbered ``perm[t] + 1`` in every task column (the run's MPI ranks
    reordered: the program's logical rank t is MPI rank perm[t] in this run), and a collective's ``root`` (its rank
    in ``comm``, a key of ``comms``: id -> program ranks in rank order) the same task's rank in that communicator
    as this run's tracer lists it (members in the order of their new numbers): on the world, perm[root]."""
    new = {i + 1: int(v) + 1 for i, v in enumerate(perm)}
    old_rank, new_rank, comm_ids = [], [], []
    for comm, members in comms.items():
        renumbered = perm[np.asarray(members, np.int64)]
        old_rank.append(np.arange(len(members)))
        new_rank.append(np.argsort(np.argsort(renumbered)))  # its place among the members' new numbers
        comm_ids.append(np.full(len(members), comm))
    roots = pl.DataFrame({"_comm": np.concatenate(comm_ids), "root": np.concatenate(old_rank),
                          "_root": np.concatenate(new_rank)}, schema={"_comm": pl.Int64, "root": pl.Int64,
                                                                       "_root": pl.Int64})
    out = []
    for f in frames:
        cols = [c for c in ("task", "s_task", "r_task") if c in f.columns]
        f = f.with_columns(pl.col(c).replace_strict(new, return_dtype=f.schema[c]) for c in cols)
        if "root" in f.columns:
            keys = f.select(pl.col("comm").cast(pl.Int64).fill_null(WORLD).alias("_comm"),
                            pl.col("root").cast(pl.Int64))
            moved = keys.join(roots, on=["_comm", "root"], how="left", maintain_order="left").get_column("_root")
            f = f.with_columns(moved.cast(f.schema["root"]).alias("root"))
        out.append(f)
    return tuple(out)


def _tables(ex, spec: CampaignSpec, model: CounterModel, timing: Timing, placement, cores_per_node: int,
            counters: list[str], run_name: str, rng: np.random.Generator, run: int):
    """Bursts, MPI calls, messages and other events (the tracer's flushes) as the writer takes them, and the truth
    rows of one run."""
    b = {k: np.asarray(v) for k, v in ex.bursts.items()}
    b["thread"] = np.zeros(b["task"].size, np.int64)
    b["omp"] = np.zeros(b["task"].size, np.int64)  # OMP_* flags of a parallel region's bursts
    if spec.shape.threads > 1:
        b = _omp_workers(b, spec.shape.threads, _rng(spec.seed, spec.mechanism, run, "omp"), spec.shape.locks)
    order = np.lexsort((b["start"], b["thread"], b["task"]))
    b = {k: v[order] for k, v in b.items()}
    b["call"] = b["call"].astype(str)
    n = b["task"].size
    clock = _node_clocks(spec, placement.node_of_task, run)
    start, end, exit = (clock(b[k], b["task"]) for k in ("start", "end", "exit"))
    counts, _ = model.counts(b["kernel"].astype(np.int64), b["ins"].astype(np.float64), rng)
    # cycles follow the time the burst ran (its own noise, slow node), not the time the OS took it away
    ran = (np.rint(b["end"]) - np.rint(b["start"])) / b["stretched"]
    cyc_old = np.maximum(counts[:, COUNTERS.index("PAPI_TOT_CYC")].astype(np.float64), 1.0)
    cyc = np.maximum(np.rint(ran * model.freq_hz * 1e-9 * timing.speed[b["task"]]), 1.0)
    ratio = cyc / cyc_old
    for c in ("PAPI_TOT_CYC", "PAPI_REF_CYC", "PAPI_RES_STL", "CYCLE_ACTIVITY:STALLS_L3_MISS"):
        counts[:, COUNTERS.index(c)] = np.rint(counts[:, COUNTERS.index(c)] * ratio).astype(np.int64)
    task1 = (b["task"] + 1).astype(np.int32)
    thread1 = (b["thread"] + 1).astype(np.int32)
    first = np.r_[True, (b["task"][1:] != b["task"][:-1]) | (b["thread"][1:] != b["thread"][:-1])]
    idx = np.arange(n)
    seq = idx - np.maximum.accumulate(np.where(first, idx, 0))
    site_names = Sites(spec.shape.sites).names()
    site = pl.Series([*site_names, None], dtype=pl.String).gather(np.where(b["site"] >= 0, b["site"], len(site_names)))
    has_call = ~np.isin(b["call"], ("END", "FLUSH", ""))
    call = pl.Series(np.where(has_call, b["call"], "")).replace("", None)
    # a thread's cpu: its rank's cores are consecutive on the rank's node (thread 1's: cpu_task)
    node = placement.node_of_task
    cpu_task = node * cores_per_node + (placement.cpu_of_task - 1 - node * placement.cores_per_node) \
        * spec.shape.threads + 1
    cpu = (cpu_task[b["task"]] + b["thread"]).astype(np.int32)
    bursts = pl.DataFrame({"appl": np.ones(n, np.int32), "task": task1, "thread": thread1, "cpu": cpu,
                           "start_ns": start, "end_ns": end, "mpi_call": call,
                           "call_site": site.scatter(np.flatnonzero(~has_call), None)})
    bursts = bursts.with_columns(pl.Series(c, counts[:, COUNTERS.index(c)]) for c in counters)
    coll = b["csend"] >= 0
    calls = pl.DataFrame({"appl": np.ones(n, np.int32), "task": task1, "thread": thread1, "cpu": cpu,
                          "mpi_call": call, "start_ns": end, "end_ns": exit, "call_site": site,
                          "bytes_sent": np.where(coll, b["csend"], 0), "bytes_recv": np.where(coll, b["crecv"], 0),
                          "comm": pl.Series(np.where(coll | (b["comm"] != WORLD), b["comm"], 0)).replace(0, None),
                          "root": pl.Series(np.where(coll & (b["root"] >= 0), b["root"], -1)).replace(-1, None)
                          .cast(pl.Int32)}).filter(pl.Series(has_call))
    flush = b["call"] == "FLUSH"
    omp = b["omp"]
    # Extrae's events: buffer flushes; OpenMP regions (master), outlined functions and barriers (workers)
    events = pl.concat([_events(run_name, task1[w], thread1[w], t[w], etype, value, names)
                        for w, t, etype, value, names in (
                            (flush, end, EXTRAE_FLUSH, 1, ("Flushing Traces", "Start")),
                            (flush, exit, EXTRAE_FLUSH, 0, ("Flushing Traces", "End")),
                            (omp & OMP_MASTER > 0, start, OMP_PARALLEL, 3, ("Parallel (OMP)", "REGION (open)")),
                            (omp & OMP_MASTER > 0, end, OMP_PARALLEL, 0, ("Parallel (OMP)", "close")),
                            (omp & OMP_FIRST > 0, start, OMP_FUNCTION, 3,
                             ("Executed OpenMP parallel function", "interior._omp_fn.0")),
                            (omp & OMP_LAST > 0, end, OMP_FUNCTION, 0, ("Executed OpenMP parallel function", "End")),
                            (omp & OMP_LAST > 0, end, OMP_BARRIER, 1, ("OpenMP barrier", "Begin")))])
    m = ex.messages
    fields = ("src", "dst", "s_l", "s_p", "r_c" if spec.recv_at_completion else "r_l", "r_p", "size", "tag")
    v = {f: np.array([getattr(x, f) for x in m], np.float64).reshape(-1) for f in fields}
    r_l = v["r_c" if spec.recv_at_completion else "r_l"]
    one = np.ones(len(m), np.int32)
    src, dst = v["src"].astype(np.int64), v["dst"].astype(np.int64)
    cpu_s, cpu_d = cpu_task[src].astype(np.int32), cpu_task[dst].astype(np.int32)
    received = r_l >= 0
    msgs = pl.DataFrame({
        "s_appl": one, "s_task": (src + 1).astype(np.int32), "s_thread": one, "s_cpu": cpu_s,
        "s_time_ns": clock(v["s_l"], src), "s_phys_ns": clock(v["s_p"], src),
        "r_appl": one, "r_task": (dst + 1).astype(np.int32), "r_thread": one, "r_cpu": cpu_d,
        "r_time_ns": clock(np.where(received, r_l, 0.0), dst), "r_phys_ns": clock(np.maximum(v["r_p"], 0.0), dst),
        "size": v["size"].astype(np.int64), "tag": v["tag"].astype(np.int64) % DUP_TAG,
        "comm": np.where(v["tag"] >= DUP_TAG, dup_communicator(spec) or WORLD, WORLD).astype(np.int64)}
    ).filter(pl.Series(v["r_p"] >= 0))
    # the calls' bytes as a tracer records them: a collective's own sizes plus the messages each call sent and
    # received (the writer keeps only the collective part for its 50100001/2 events)
    added = message_columns(calls.select("appl", "task", "thread", "start_ns", "end_ns"), msgs.select(*MESSAGE_SCHEMA))
    calls = calls.with_columns(pl.col("bytes_sent") + added["_add_sent"], pl.col("bytes_recv") + added["_add_recv"])
    lids = b["lid"].astype(np.int64)
    truth = pl.DataFrame({
        "run_name": [run_name] * n, "task": task1, "thread": thread1, "burst_seq": seq.astype(np.int64),
        "logical_id": lids, "role": pl.Series(ROLES).gather(b["role"].astype(np.int64)),
        "iteration": ((lids >> 44) & ITER_MASK) - 2, "inner": (lids >> 34) & 1023, "start_ns": start,
        "duration_ns": end - start, "mpi_call": call, "os_noise": b["stretched"] > 1.0,
    }).with_columns(pl.Series(c, counts[:, COUNTERS.index(c)]) for c in COUNTERS)
    return bursts, calls, msgs, events, truth


def _lock_waits(w: dict[str, np.ndarray], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Cut each worker burst of ``w`` into 1-3 pieces (lock waits of 1-5 us between them)."""
    k = rng.choice([1, 1, 2, 3], w["start"].size)
    at = np.repeat(np.arange(k.size), k)
    piece = np.arange(at.size) - np.repeat(np.cumsum(k) - k, k)
    kk = k[at]
    start, end = w["start"][at], w["end"][at]
    span = end - start
    lo = start + span * piece / kk + np.where(piece > 0, rng.uniform(1000.0, 5000.0, at.size), 0.0)
    hi = np.maximum(start + span * (piece + 1) / kk, lo + 50.0)
    out = {key: v[at] for key, v in w.items()}
    out |= {"start": lo, "end": hi, "exit": hi, "ins": w["ins"][at] * (hi - lo) / np.maximum(span, 1.0),
            "lid": out["lid"] | np.where(piece < kk - 1, NO_MATCH_BIT | (piece + 1), 0),
            "omp": np.where(piece == 0, OMP_FIRST, 0) | np.where(piece == kk - 1, OMP_LAST, 0)}
    return out


def _events(run_name: str, task: np.ndarray, thread: np.ndarray, time: np.ndarray, etype: int, value: int,
            names: tuple[str, str]) -> pl.DataFrame:
    """Event records (EVENT_SCHEMA) of one type and value at ``time`` on (task, thread)."""
    n = time.size
    return pl.DataFrame({"run_id": [run_name] * n, "appl": np.ones(n, np.int32), "task": task, "thread": thread,
                         "time_ns": time, "type": np.full(n, etype, np.int64), "value": np.full(n, value, np.int64),
                         "type_name": [names[0]] * n, "value_name": [names[1]] * n}, schema=EVENT_SCHEMA)


def _node_clocks(spec: CampaignSpec, node_of_task: np.ndarray, run: int):
    """``clock(times_ns, task_index) -> int64 ns``: the times as each node's clock reads them (an offset and a
    drift per node and run, ``clock_offset_ns`` / ``clock_drift_ppm``; the identity when both are 0)."""
    n_nodes = int(node_of_task.max()) + 1
    g = _rng(spec.seed, spec.mechanism, run, "clock")
    offset = g.normal(0.0, spec.clock_offset_ns, n_nodes) if spec.clock_offset_ns else np.zeros(n_nodes)
    offset -= offset.min()  # the earliest clock reads the true time (a trace's times are never negative)
    drift = g.normal(0.0, spec.clock_drift_ppm * 1e-6, n_nodes) if spec.clock_drift_ppm else np.zeros(n_nodes)
    base = 1.0e6  # clocks agree at the start (MPI_Init's synchronisation), offsets are what remains

    def clock(t: np.ndarray, task: np.ndarray) -> np.ndarray:
        node = node_of_task[np.asarray(task, np.int64)]
        return np.rint(t + offset[node] + drift[node] * (t - base)).astype(np.int64)
    return clock


def _omp_workers(b: dict[str, np.ndarray], threads: int, rng: np.random.Generator,
                 locks: bool = False) -> dict[str, np.ndarray]:
    """Add the OpenMP worker threads' bursts: every interior burst of a rank (a parallel region: an interior
    kernel, >= 1e5 instructions) runs on ``threads`` threads; worker ``th`` starts after the fork (0.5-3 us),
    does a share of the work that dynamic scheduling makes differ from run to run (80-100 % of the master's)
    and ends before the join; its logical id is the region's with ``th`` in bits 58-61. ``locks``: a worker
    waits for a lock 0, 1 or 2 times in a region (as the timing falls), each wait (1-5 us, not Running) cutting
    its burst; the pieces before the last have no counterpart in another run (:data:`NO_MATCH_BIT`)."""
    interior = np.isin(b["kernel"], [kid("stencil_interior"), *range(V0, len(ALL_KERNELS))])
    # a region is the program's (its whole instructions): a flush on the master does not remove it
    region = np.flatnonzero(interior & (b["whole"] >= 1.0e5) & (b["call"] != "FLUSH"))
    k, w = region.size, threads - 1
    rows = np.repeat(region, w)
    th = np.tile(np.arange(1, threads), k)
    share = rng.uniform(0.8, 1.0, rows.size)
    fork = rng.uniform(500.0, 3000.0, rows.size)
    start = b["start"][rows] + fork
    end = start + np.maximum(b["end"][rows] - start, 100.0) * share
    b["omp"] = np.where(np.isin(np.arange(b["start"].size), region), OMP_MASTER, 0)
    extra = {key: v[rows] for key, v in b.items()}
    extra |= {"start": start, "end": end, "exit": end, "ins": b["ins"][rows] * share, "thread": th,
              "omp": np.full(rows.size, OMP_FIRST | OMP_LAST),
              "lid": b["lid"][rows] | (th.astype(np.int64) << 58), "call": np.full(rows.size, "", dtype=object),
              "site": np.full(rows.size, -1), "csend": np.full(rows.size, -1), "crecv": np.full(rows.size, -1),
              "root": np.full(rows.size, -1), "stretched": np.ones(rows.size)}
    if locks:
        extra = _lock_waits(extra, rng)
    return {key: np.concatenate([v.astype(object) if key == "call" else v, extra[key]]) for key, v in b.items()}


def _spans(truth: pl.DataFrame, spec: CampaignSpec) -> pl.DataFrame:
    """Mark the bursts of an inserted, missing or repeated iteration whose place cannot be decided (identical
    iterations): the outer iteration's inner loop (``span``) and the id without its inner part (``span_class``)."""
    plans = [p for p in spec.plans if p.at >= 0 and (p.repeat or p.inner_delta)]
    undecidable = [p for p in plans if not spec.shape.inner_varying]
    at = {p.at for p in undecidable}
    pos = (pl.col("logical_id") // 512) % 512
    in_loop = pos < 70 if not any(p.repeat for p in undecidable) else pl.lit(True)
    span = pl.col("iteration").is_in(sorted(at)) & in_loop & pl.col("role").is_in(["work", "poll", "housekeeping"])
    return truth.with_columns(
        pl.when(span).then(pl.col("iteration")).otherwise(None).cast(pl.Int64).alias("span"),
        pl.when(span).then(pl.col("logical_id").and_(INNER_MASK)).otherwise(None).alias("span_class"))


@mechanism("version_reduce", "[plan22] another binary version in run 1: a second MPI_Allreduce (after a small "
           "compute) follows every outer one, every other call alike (not the same program: flag or refuse)", 8, 20)
def _version_reduce(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, shape=Shape(topology="ring", exchange="persistent"),
                   plans=(RunPlan(), RunPlan(extra_reduce=True)))


# ------------------------------------------------------------------------------------------ order22 (mergeattack21)
def reports(task: int, lg: Logic, plan: RunPlan, run_rng: np.random.Generator):
    """Halo exchange whose receives are posted for ``MPI_ANY_SOURCE`` and completed by one ``MPI_Waitall``, then, per
    request in request order, the unpacking of the face it took (its source from the status: its work and identity
    the sender's) and an ``MPI_Send`` reporting it to rank 0; rank 0 (receives naming their sources) unpacks both
    faces at once, then takes the reports with ``MPI_Recv(ANY_SOURCE)`` and processes each (work and identity the
    message's: (source -> 0, k)); the last report's processing runs on into the update before the ``MPI_Allreduce``
    (no MPI call between: one burst, an identity of its own). Which face a request holds and which report comes last
    follow arrival (mergeattack21 M5, M6)."""
    spec = lg.spec
    P, sites = spec.ranks, Sites(spec.shape.sites)
    yield from _prologue(task, sites, P)
    pack, poll, red, dot = kid("pack_halo"), kid("poll"), kid("reduce_results"), kid("dot")
    boundary, interior = kid("stencil_boundary"), kid("stencil_interior")
    for it in range(spec.iterations):
        nb = lg.nb_at(it)[task]
        w = lg.rank_work[task] * lg.iter_work[it]
        recv, sends = [], []
        for d, src in enumerate(nb):
            recv.append((yield Call("MPI_Irecv", pack if d == 0 else poll, 6000.0 if d == 0 else 500.0,
                                    lid(task, it, 0, 10 + d), sites("halo.c:88"), peer=src if task == 0 else ANY,
                                    tag=TAG_HALO, size=lg.bytes(src, task, it))))
        for d, dst in enumerate(nb):
            sends.append((yield Call("MPI_Isend", boundary if d == 0 else pack, 3.0e5 * w if d == 0 else 4000.0,
                                     lid(task, it, 0, 20 + d), sites("halo.c:97"), peer=dst, tag=TAG_HALO,
                                     size=lg.bytes(task, dst, it))))
        got = yield Call("MPI_Waitall", interior, lg.spec.shape.interior_ins * w, lid(task, it, 0, 50),
                         sites("halo.c:131"), reqs=tuple(recv + sends), status=task != 0)
        if task != 0:
            for src in got[:len(recv)]:  # request i: the face it took (its work follows its bytes)
                unpack = 1.5e5 * lg.bytes(src, task, it) / spec.shape.face_bytes
                yield Call("MPI_Send", pack, unpack, lid(task, it, 0, 80 + nb.index(src)),
                           sites("gather.c:12"), peer=0, tag=TAG_GATHER, size=64)
            ins, name = 4.0e5 * w, lid(task, it, 0, 60)
        else:
            ins, name = 1.5e5 * sum(lg.bytes(src, 0, it) for src in nb) / spec.shape.face_bytes, lid(0, it, 0, 80)
            taken: dict[int, int] = {}
            for _ in range(sum(len(lg.nb_at(it)[r]) for r in range(1, P))):
                src, _size = yield Call("MPI_Recv", red, ins, name, sites("gather.c:33"), peer=ANY, tag=TAG_GATHER,
                                        size=64)
                k = taken.get(src, 0)
                taken[src] = k + 1
                ins, name = 1.0e5 * (1 + src), lid(0, it, k, 300 + src)  # work that tells the sources apart
            ins, name = ins + 4.0e5 * w, lid(0, it, k, 300 + src, 1)  # the last report's processing and the update
        yield Call("MPI_Allreduce", dot, ins, name, sites("solver.c:57"), size=8, cost_ns=1500.0 * np.log2(P + 1))
    yield from _epilogue(task, spec.iterations, sites)


#: mechanism -> its program, for the mechanisms whose program is neither :func:`spmd` nor :func:`farm`
PROGRAMS = {}


@mechanism("reports_any", "ring exchange by Irecv(ANY_SOURCE) + Waitall, each face unpacked in request order and "
           "reported to rank 0 (MPI_Send), which takes the reports by Recv(ANY_SOURCE); the last report's processing "
           "runs into the update (mergeattack21 M5, M6)", 8, 12)
def _reports_any(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, jitter=0.3, shape=Shape(topology="ring", rank_sigma=0.02, coll_every=1))


PROGRAMS["reports_any"] = reports


def shifted_comm_ids(comms: dict[int, tuple[int, ...]], *frames: pl.DataFrame
                     ) -> tuple[dict[int, tuple[int, ...]], ...]:
    """The communicators of a run whose tracer numbered the ones after the world :data:`COMM_ID_SHIFT` further
    (Extrae numbers communicators per run as it sees them created: a library that made its own first shifts the
    program's), and ``frames`` (calls, messages) with their ``comm`` column so numbered: the same communicators, with
    the same members, under ids another run gives other communicators."""
    moved = {c: c + COMM_ID_SHIFT if c != WORLD else c for c in comms}
    renamed = tuple(f.with_columns(pl.col("comm").replace(list(moved), list(moved.values())))
                    if "comm" in f.columns else f for f in frames)
    return ({moved[c]: m for c, m in comms.items()}, *renamed)


#: how far :func:`shifted_comm_ids` moves the ids: a 4x4 grid's row communicators take its columns' ids
COMM_ID_SHIFT = 4


@mechanism("sub_comms_ids", "sub_comms with a duplicate of the world, run 1's tracer numbering the communicators "
           "after the world 4 further (its rows under the reference's column ids)", 16, 20)
def _sub_comms_ids(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, comm_ids_run=1, shape=Shape(topology="torus", completion="waitall", sub_comms=True,
                                                     coll_every=0, dup_comm=True))


# ---------------------------------------------------------------------------------------------------- ranks22
@mechanism("rotated_ring", "run 1 numbers logical rank r as r + 1 on a symmetric 8-rank ring (a rotation: the "
           "message graph maps onto itself), ranks nearly alike (work 1 % apart)", 8, 20)
def _rotated_ring(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, renumber_run=1, renumber_shift=1,
                   shape=Shape(topology="ring", symmetric=True, completion="waitall", coll_every=1, rank_sigma=0.01))


@mechanism("rotated_torus", "run 1 numbers logical rank r as r + 1 on a symmetric 4x4 torus (the torus relabelled, "
           "not one of its symmetries), ranks nearly alike (work 3 % apart)", 16, 12)
def _rotated_torus(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, renumber_run=1, renumber_shift=1,
                   shape=Shape(topology="torus", symmetric=True, completion="waitall", coll_every=1, rank_sigma=0.03))


@mechanism("rotated_torus_alike", "as rotated_torus with ranks alike (the same work): only the messages tell "
           "which task is which, up to the torus's symmetries", 16, 12)
def _rotated_torus_alike(spec: CampaignSpec) -> CampaignSpec:
    return replace(_rotated_torus(spec), shape=replace(_rotated_torus(spec).shape, rank_sigma=0.0))


# ------------------------------------------------------------------------------------------------------- verdict23
@mechanism("reports_alike", "reports_any on a ring whose faces are alike (the same bytes): the unpacking of each "
           "request's face is the same work whichever neighbour's it is, so the work cannot tell position from "
           "message (review22 item 3)", 8, 12)
def _reports_alike(spec: CampaignSpec) -> CampaignSpec:
    base = _reports_any(spec)
    return replace(base, shape=replace(base.shape, symmetric=True))


PROGRAMS["reports_alike"] = reports


def sends_first(task: int, lg: Logic, plan: RunPlan, run_rng: np.random.Generator):
    """Halo exchange that packs and sends each face first (the burst before each ``MPI_Isend`` packs its face: work
    by its bytes), then posts the receives for ``MPI_ANY_SOURCE`` and completes everything by one ``MPI_Waitall``
    after the interior computation. The bursts after the Waitall are the next iteration's packing and sends: no
    work on the requests' messages, whichever arrived first (review22 item 6)."""
    spec = lg.spec
    P, sites = spec.ranks, Sites(spec.shape.sites)
    yield from _prologue(task, sites, P)
    pack, poll, interior = kid("pack_halo"), kid("poll"), kid("stencil_interior")
    for it in range(spec.iterations):
        nb = lg.nb_at(it)[task]
        w = lg.rank_work[task] * lg.iter_work[it]
        sends, recv = [], []
        for d, dst in enumerate(nb):
            size = lg.bytes(task, dst, it)
            sends.append((yield Call("MPI_Isend", pack, 1.0e5 * size / spec.shape.face_bytes, lid(task, it, 0, 20 + d),
                                     sites("halo.c:97"), peer=dst, tag=TAG_HALO, size=size)))
        for d, src in enumerate(nb):
            recv.append((yield Call("MPI_Irecv", poll, 500.0, lid(task, it, 0, 10 + d), sites("halo.c:88"), peer=ANY,
                                    tag=TAG_HALO, size=lg.bytes(src, task, it))))
        yield Call("MPI_Waitall", interior, spec.shape.interior_ins * w, lid(task, it, 0, 50), sites("halo.c:131"),
                   reqs=tuple(recv + sends))
    yield from _epilogue(task, spec.iterations, sites)


@mechanism("sends_first", "ring whose iteration packs and sends each face (MPI_Isend) before posting the receives "
           "as Irecv(ANY_SOURCE) and one Waitall after the interior: the bursts after the Waitall are the next "
           "iteration's packing, faces alike (review22 item 6)", 8, 12)
def _sends_first(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, jitter=0.3, shape=Shape(topology="ring", symmetric=True, rank_sigma=0.02, coll_every=0))


PROGRAMS["sends_first"] = sends_first


# ------------------------------------------------------------------------------------ verdict24 (mergeattack23 P2)
@dataclass(frozen=True)
class SharedNodePlan(RunPlan):
    """A run whose ``tasks`` (indices) share their node with another, memory-hungry job: their kernels run as
    :data:`CONTENDED` says, the same instructions with more misses and cycles per instruction."""

    tasks: tuple[int, ...] = ()


#: kernels as they run beside another job's memory traffic: the same instructions at more cycles and misses per
#: instruction (the interior stencil at axpy's rates, ~x1.13; the boundary stencil at spmv's, ~x2.2, the packing at
#: the boundary stencil's, ~x1.27): ~x1.2 the cycles per instruction of a task's long bursts
CONTENDED = {kid("stencil_interior"): kid("axpy"), kid("stencil_boundary"): kid("spmv"),
             kid("pack_halo"): kid("stencil_boundary")}


def shared_node(task: int, lg: Logic, plan: RunPlan, run_rng: np.random.Generator):
    """:func:`spmd`, its kernels contended (:data:`CONTENDED`) on the tasks a :class:`SharedNodePlan` names."""
    program = spmd(task, lg, plan, run_rng)
    if not (isinstance(plan, SharedNodePlan) and task in plan.tasks):
        return (yield from program)
    reply = None
    while True:
        try:
            call = program.send(reply)
        except StopIteration as stop:
            return stop.value
        reply = yield replace(call, kernel=CONTENDED.get(call.kernel, call.kernel))


@mechanism("shared_node", "run 1's tasks 0-3 (of 16, 4 per node) share their node with another job: their "
           "kernels run at ~x1.13-2.2 the cycles and misses per instruction, ~x1.2 per task (mergeattack23 P2)", 16,
           30)
def _shared_node(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, ranks_per_node=(4,) * spec.runs, plans=(RunPlan(), SharedNodePlan(tasks=(0, 1, 2, 3))),
                   shape=Shape(topology="torus", completion="waitall", coll_every=5))


PROGRAMS["shared_node"] = shared_node


# ------------------------------------------------------------------------------------------------------- torus24
def translated(P: int) -> tuple[int, ...]:
    """The trace rank of each logical rank on the periodic torus of ``P`` ranks moved one step along x (a
    translation: an automorphism of the torus, so the message graph is the same under both numberings)."""
    px, _ = grid(P)
    return tuple((r // px) * px + (r % px + 1) % px for r in range(P))


def subdomains(task: int, lg: Logic, plan: RunPlan, run_rng: np.random.Generator):
    """Halo exchange on a periodic torus whose ranks do the same work on average, each rank's kernels varying per
    iteration with its subdomain (+-3 %, the same in every run): Irecv and Isend per neighbour, the boundary packed
    before each Isend, the interior before the Waitall, a dot product before the Allreduce. The glue before each
    Irecv and Waitall is the MPI library's (shared-memory or network paths to the rank's peers): it follows the
    rank's place (``RunPlan.trace_ranks``), not its role (mergeattack23 P9)."""
    spec = lg.spec
    P, sites = spec.ranks, Sites(spec.shape.sites)
    work = np.exp(0.03 * _rng(spec.seed, spec.mechanism, "subdomain").standard_normal((spec.iterations, P)))
    place = plan.trace_ranks[task] if plan.trace_ranks else task
    glue = 600.0 * np.exp(0.3 * _rng(spec.seed, spec.mechanism, "glue").standard_normal((P, 8)))[place]
    yield from _prologue(task, sites, P)
    pack, poll, interior = kid("pack_halo"), kid("poll"), kid("stencil_interior")
    for it in range(spec.iterations):
        nb = lg.nb_at(it)[task]
        w = work[it, task]
        reqs = []
        for d, src in enumerate(nb):
            reqs.append((yield Call("MPI_Irecv", poll, glue[d % 4], lid(task, it, 0, 10 + d), sites("halo.c:88"),
                                    peer=src, tag=TAG_HALO, size=lg.bytes(src, task, it))))
        for d, dst in enumerate(nb):
            reqs.append((yield Call("MPI_Isend", pack, 2.0e5 * w, lid(task, it, 0, 20 + d), sites("halo.c:97"),
                                    peer=dst, tag=TAG_HALO, size=lg.bytes(task, dst, it))))
        yield Call("MPI_Waitall", poll, glue[4], lid(task, it, 0, 50), sites("halo.c:131"), reqs=tuple(reqs))
        yield Call("MPI_Allreduce", interior, spec.shape.interior_ins * w, lid(task, it, 0, 70), sites("solver.c:57"),
                   size=8, cost_ns=1500.0 * np.log2(P + 1))
    yield from _epilogue(task, spec.iterations, sites)


@mechanism("translated_torus", "run 1's roles moved one rank along x on a periodic 4x4 torus (a translation: the "
           "message graph maps onto itself), ranks alike on average and told apart only by their work per iteration "
           "(+-3 %); the glue between MPI calls follows the rank's place (mergeattack23 P9)", 16, 12)
def _translated_torus(spec: CampaignSpec) -> CampaignSpec:
    return replace(spec, renumber_run=1, plans=(RunPlan(), RunPlan(trace_ranks=translated(spec.ranks))),
                   shape=Shape(topology="torus", symmetric=True, completion="waitall", coll_every=1, rank_sigma=0.0))


PROGRAMS["translated_torus"] = subdomains
