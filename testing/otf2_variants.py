"""OTF2 archives laid out as Score-P writes them, written with the ``otf2`` wheel, each with what a reader must find.

What real Score-P output holds that the two ping-pong traces in ``../shared/traces/otf2`` do not (facts from the
OTF2 3.x specification and Score-P's measurement code):

- location ids ``(thread << 32) | rank`` (``SCOREP_Location_GetGlobalId``): a rank's OpenMP threads are locations of
  its process group 2^32 apart, and the event files are named by that id;
- OpenMP: ``ThreadFork``/``ThreadJoin`` on the master, ``ThreadTeamBegin``/``ThreadTeamEnd`` on every team member,
  regions of paradigm OPENMP (roles PARALLEL, LOOP, IMPLICIT_BARRIER); a worker thread has events only inside the
  parallel regions it runs;
- CUDA streams: locations of type GPU (in the rank's group, or in an ACCELERATOR group created by it) with no MPI
  rank; asynchronous per-process metrics (metric plugins): a METRIC location recording a ``MetricInstance``;
- metrics: several metric classes at one Enter, ``ACCUMULATED_START`` PAPI counters, free-running readings
  (``ACCUMULATED_POINT``) above 2^63, double values (energy in J), gauges (``ABSOLUTE_POINT`` power in W), deltas
  (``RELATIVE_LAST``);
- MPI: sub-communicators whose ranks are not world ranks (a point-to-point peer and a collective root are ranks of
  the record's communicator), ``MpiIsend``/``MpiIrecvRequest`` completed by one ``MPI_Waitall`` (``MpiIsendComplete``,
  ``MpiIrecv``), persistent requests (``MPI_Start``), a cancelled receive, ``MPI_Probe``, RMA records;
- events a reader of bursts does not need (calling-context samples, parameters, RMA, thread events): skipped;
- timers other than 1 GHz and a large global offset (a TSC after days of uptime).

Each writer returns a :class:`Variant`: the anchor and the truth, derived from the script here, never from a reader.
Times in the truth are ns from the first event (the writer's global offset).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import otf2
from otf2.enums import (Base, CollectiveOp, GroupType, LocationGroupType, LocationType, MetricMode,
                        MetricOccurrence, MetricType, Paradigm, ParameterType, RecorderKind, RegionRole, Type)


def scorep_location_id(rank: int, thread: int) -> int:
    """Score-P's global location id: the thread's local id in the high 32 bits, the rank in the low ones."""
    return (thread << 32) | rank


@dataclass
class Variant:
    """A written archive and what it holds: bursts and calls per (task, thread), messages, skipped locations."""

    anchor: Path
    #: (task, thread, start_ns, end_ns, mpi_call or None) -> {counter: count}
    bursts: dict[tuple[int, int, int, int, str | None], dict[str, int]] = field(default_factory=dict)
    #: (task, thread, call, start_ns, end_ns, comm, root, bytes_sent, bytes_recv)
    calls: list[tuple] = field(default_factory=list)
    #: (sender task, receiver task, size, tag)
    messages: list[tuple[int, int, int, int]] = field(default_factory=list)
    n_tasks: int = 0
    n_threads: int = 0
    skipped_locations: int = 0


class _Archive:
    """A Score-P-like archive being written: one node, process groups per rank, Score-P location ids, the MPI
    COMM_LOCATIONS group of the master threads and MPI_COMM_WORLD."""

    def __init__(self, root: Path, ranks: int, threads: int, *, resolution: int = 10**9, offset: int = 0,
                 chunk_bytes: int | None = None):
        """``chunk_bytes``: the events chunk size (bytes; the wheel's default when None)."""
        self.root, self.resolution, self.offset = root, resolution, offset
        chunking = {} if chunk_bytes is None else {"chunk_size_events": chunk_bytes}
        self.writer = otf2.writer.open(str(root), timer_resolution=resolution, **chunking)
        self.w = self.writer.__enter__()
        d = self.d = self.w.definitions
        node = d.system_tree_node("node0")
        self.groups = [d.location_group(f"MPI Rank {r}", location_group_type=LocationGroupType.PROCESS,
                                        system_tree_parent=node) for r in range(ranks)]
        self.locs: dict[tuple[int, int], otf2.definitions.Location] = {}
        for t in range(threads):  # Score-P defines thread t of every rank with id (t << 32) | rank
            for r in range(ranks):
                name = "Master thread" if t == 0 else f"OMP thread {t}"
                self.locs[(r, t)] = self.location(name, LocationType.CPU_THREAD, self.groups[r],
                                                  scorep_location_id(r, t))
        masters = [self.locs[(r, 0)] for r in range(ranks)]
        d.group("MPI_COMM_WORLD locations", group_type=GroupType.COMM_LOCATIONS, paradigm=Paradigm.MPI,
                members=masters)
        self.world = d.comm("MPI_COMM_WORLD", d.group("world", group_type=GroupType.COMM_GROUP,
                                                      paradigm=Paradigm.MPI, members=list(range(ranks))))
        self.regions: dict[str, otf2.definitions.Region] = {}
        self.region("main", RegionRole.FUNCTION, Paradigm.COMPILER, "app.c", 3)
        papi = [self.member("PAPI_TOT_INS", MetricMode.ACCUMULATED_START, Type.UINT64)]
        self.papi = d.metric_class(papi, MetricOccurrence.SYNCHRONOUS_STRICT, RecorderKind.CPU)

    def location(self, name: str, kind: LocationType, group, ref: int):
        """A location with the given id (the wheel numbers them 0, 1, ... otherwise)."""
        self.d._locations._ref = ref - 1
        return self.d.location(name, type=kind, group=group)

    def region(self, name: str, role: RegionRole, paradigm: Paradigm, src: str | None = None, line: int = 0):
        kw = {"source_file": src, "begin_line_number": line} if src else {}
        self.regions[name] = self.d.region(name, region_role=role, paradigm=paradigm, **kw)
        return self.regions[name]

    def mpi(self, *names: str) -> None:
        for name in names:
            self.region(name, RegionRole.POINT2POINT if "send" in name.lower() or "recv" in name.lower()
                        else RegionRole.FUNCTION, Paradigm.MPI)

    def member(self, name: str, mode: MetricMode, vtype: Type, unit: str = "#", exponent: int = 0):
        return self.d.metric_member(name, "", MetricType.PAPI if name.startswith("PAPI") else MetricType.OTHER,
                                    mode, vtype, Base.DECIMAL, exponent, unit)

    def ticks(self, ns: int) -> int:
        """Timer ticks of ``ns`` after the first event (exact for the resolutions used here)."""
        return self.offset + ns * self.resolution // 10**9

    def events(self, rank: int, thread: int = 0) -> _Events:
        return _Events(self, self.w.event_writer_from_location(self.locs[(rank, thread)]))

    def close(self) -> Path:
        self.writer.__exit__(None, None, None)
        return self.root / "traces.otf2"


class _Events:
    """One location's event writer with times in ns and a PAPI_TOT_INS reading at every Enter/Leave."""

    def __init__(self, archive: _Archive, writer):
        self.a, self.ev = archive, writer
        self.ins = 0  # instructions so far (the PAPI_TOT_INS reading)

    def __getattr__(self, name: str):  # any other event of the wheel's writer, times in ns
        method = getattr(self.ev, name)
        return lambda ns, *args: method(self.a.ticks(ns), *args)

    def enter(self, ns: int, region: str, ins: int = 0) -> None:
        self.ins += ins
        self.ev.metric(self.a.ticks(ns), self.a.papi, [self.ins])
        self.ev.enter(self.a.ticks(ns), self.a.regions[region])

    def leave(self, ns: int, region: str, ins: int = 0) -> None:
        self.ins += ins
        self.ev.metric(self.a.ticks(ns), self.a.papi, [self.ins])
        self.ev.leave(self.a.ticks(ns), self.a.regions[region])


# ---------------------------------------------------------------------------------------------- hybrid MPI+OpenMP+CUDA
def hybrid(root: Path) -> Variant:
    """2 ranks x 2 OpenMP threads with Score-P location ids, a CUDA stream per rank (one in the rank's process
    group, one in an ACCELERATOR group, as Score-P 8 writes it), a METRIC location of a per-process power plugin,
    thread fork/join/team events, calling-context samples, parameters and RMA records between the regions.

    A worker thread outside every thread team waits in the OpenMP runtime (Score-P records nothing there): that
    time is no burst, as Paraver's Idle state is none. Each master: ``ProgramBegin`` 0, main, MPI_Init [10, 20],
    a parallel region [100, 400] (fork 100, team 100..390, implicit barrier [350, 390]), MPI_Send (rank 0) /
    MPI_Recv (rank 1) [500, 520] with 4 KiB tag 9, MPI_Put [600, 610] (RMA records inside), MPI_Finalize
    [700, 720], ``ProgramEnd`` 800. Each worker: two parallel regions [110, 390] and [900, 950]. PAPI_TOT_INS
    grows by the ``ins`` of each reading below.
    """
    a = _Archive(root, ranks=2, threads=2)
    d = a.d
    a.mpi("MPI_Init", "MPI_Send", "MPI_Recv", "MPI_Put", "MPI_Finalize")
    a.region("!$omp parallel @app.c:20", RegionRole.PARALLEL, Paradigm.OPENMP, "app.c", 20)
    a.region("!$omp implicit barrier @app.c:30", RegionRole.IMPLICIT_BARRIER, Paradigm.OPENMP, "app.c", 30)
    kernel = a.region("saxpy_kernel", RegionRole.FUNCTION, Paradigm.CUDA)
    par, bar = "!$omp parallel @app.c:20", "!$omp implicit barrier @app.c:30"
    d.group("OpenMP threads", group_type=GroupType.COMM_LOCATIONS, paradigm=Paradigm.OPENMP,
            members=[a.locs[(r, t)] for r in range(2) for t in range(2)])
    team = [d.comm(f"team {r}", d.group(f"team {r}", group_type=GroupType.COMM_GROUP, paradigm=Paradigm.OPENMP,
                                       members=[2 * r, 2 * r + 1])) for r in range(2)]
    sample_ctx = d.calling_context(a.regions["main"], None, None)
    interrupts = d.interrupt_generator("PAPI_TOT_CYC@1000000", period=1_000_000)
    param = d.parameter("iterations", ParameterType.INT64)
    win = d.rma_win("win", a.world)
    # accelerator and metric locations: no MPI rank, no bursts
    acc_group = d.location_group("CUDA[0:0]", location_group_type=LocationGroupType.ACCELERATOR,
                                 system_tree_parent=a.groups[1].system_tree_parent,
                                 creating_location_group=a.groups[1])
    streams = [a.location("CUDA[0:0]", LocationType.GPU, a.groups[0], scorep_location_id(0, 2)),
               a.location("CUDA[0:0]", LocationType.GPU, acc_group, scorep_location_id(1, 2))]
    recorder = a.location("power plugin", LocationType.METRIC, a.groups[0], scorep_location_id(0, 3))
    power = d.metric_class([a.member("power", MetricMode.ABSOLUTE_POINT, Type.DOUBLE, unit="W")],
                           MetricOccurrence.ASYNCHRONOUS, RecorderKind.ABSTRACT)
    power_instance = d.metric_instance(power, recorder, scope=a.groups[0])
    v = Variant(anchor=root / "traces.otf2", n_tasks=2, n_threads=4, skipped_locations=3)
    for r in range(2):
        m = a.events(r, 0)
        m.program_begin(0, "app", [])
        m.enter(5, "main", ins=500)
        m.enter(10, "MPI_Init", ins=500)
        m.leave(20, "MPI_Init", ins=100)
        m.thread_fork(100, Paradigm.OPENMP, 2)
        m.enter(100, par, ins=8000)
        m.thread_team_begin(100, team[r])
        m.parameter_int(150, param, 42)
        m.calling_context_sample(200, sample_ctx, 1, interrupts)
        m.enter(350, bar, ins=25_000)
        m.leave(390, bar, ins=400)
        m.thread_team_end(390, team[r])
        m.leave(400, par, ins=100)
        m.thread_join(400, Paradigm.OPENMP)
        m.enter(500, "MPI_Send" if r == 0 else "MPI_Recv", ins=10_000)
        if r == 0:
            m.mpi_send(505, 1, a.world, 9, 4096)
        else:
            m.mpi_recv(515, 0, a.world, 9, 4096)
        m.leave(520, "MPI_Send" if r == 0 else "MPI_Recv", ins=200)
        m.enter(600, "MPI_Put", ins=8000)
        m.rma_put(602, win, 1 - r, 64, 7)
        m.rma_op_complete_blocking(608, win, 7)
        m.leave(610, "MPI_Put", ins=100)
        m.enter(700, "MPI_Finalize", ins=9000)
        m.leave(720, "MPI_Finalize", ins=100)
        m.leave(790, "main", ins=7000)
        m.program_end(800, 0)
        t = r + 1
        v.bursts.update({(t, 1, 0, 10, "MPI_Init"): {"PAPI_TOT_INS": 1000},
                         (t, 1, 20, 500, "MPI_Send" if r == 0 else "MPI_Recv"): {"PAPI_TOT_INS": 43_500},
                         (t, 1, 520, 600, "MPI_Put"): {"PAPI_TOT_INS": 8000},
                         (t, 1, 610, 700, "MPI_Finalize"): {"PAPI_TOT_INS": 9000},
                         (t, 1, 720, 800, None): {"PAPI_TOT_INS": 7000}})
        v.calls += [(t, 1, "MPI_Init", 10, 20, None, None, 0, 0),
                    (t, 1, "MPI_Send" if r == 0 else "MPI_Recv", 500, 520, 0, None, 4096 * (r == 0), 4096 * (r == 1)),
                    (t, 1, "MPI_Put", 600, 610, None, None, 0, 0),
                    (t, 1, "MPI_Finalize", 700, 720, None, None, 0, 0)]
        w = a.events(r, 1)
        for begin, end, ins in ((110, 390, 30_000), (900, 950, 5000)):
            w.thread_team_begin(begin, team[r])
            w.enter(begin, par)
            w.enter(end - 20, bar, ins=ins)
            w.leave(end, bar)
            w.leave(end, par)
            w.thread_team_end(end, team[r])
        # idle in the runtime between the two teams (390 to 900): no burst there
        v.bursts.update({(t, 2, 110, 390, None): {"PAPI_TOT_INS": 30_000},
                         (t, 2, 900, 950, None): {"PAPI_TOT_INS": 5000}})
        gpu = a.w.event_writer_from_location(streams[r])
        gpu.enter(a.ticks(300), kernel)
        gpu.leave(a.ticks(340), kernel)
    rec = a.w.event_writer_from_location(recorder)
    for ns, watts in ((0, 95.5), (400, 180.25), (800, 101.0)):
        rec.metric(a.ticks(ns), power_instance, [watts])
    v.messages = [(1, 2, 4096, 9)]
    a.close()
    return v


# ---------------------------------------------------------------------------------------------- metrics
METRIC_READINGS = {  # per reading (at the Enter/Leave at 100, 200, 300, 400 ns): value of each member
    "PAPI_TOT_INS": [1000, 1500, 3500, 6000],  # ACCUMULATED_START uint64
    "TSC": [2**64 - 1000, 2**64 - 500, 250, 900],  # ACCUMULATED_POINT uint64 above 2^63, wrapping at 2^64
    "energy": [2.0, 3.25, 15.75, 16.0],  # ACCUMULATED_START double (J)
    "ru_utime": [40, 80, 90, 70],  # RELATIVE_LAST int64 (us since the previous reading)
    "power": [100.0, 200.0, 150.0, 120.0],  # ABSOLUTE_POINT double (W): a level, not a count
    "PAPI_L3_TCM": [40, 60, 100, 130],  # ACCUMULATED_START of a MetricInstance of process scope
}


def metrics(root: Path) -> Variant:
    """One rank, three metric classes and a per-process metric instance read together at every Enter/Leave of
    MPI_Barrier calls at 100 and 300 ns (leaving at 200 and 400); bursts [0, 100], [200, 300] and [400, 500]
    (``ProgramEnd``)."""
    a = _Archive(root, ranks=1, threads=1)
    a.mpi("MPI_Barrier")
    cls_b = a.d.metric_class([a.member("TSC", MetricMode.ACCUMULATED_POINT, Type.UINT64),
                              a.member("energy", MetricMode.ACCUMULATED_START, Type.DOUBLE, unit="J")],
                             MetricOccurrence.SYNCHRONOUS_STRICT, RecorderKind.CPU)
    cls_c = a.d.metric_class([a.member("ru_utime", MetricMode.RELATIVE_LAST, Type.INT64, unit="s", exponent=-6),
                              a.member("power", MetricMode.ABSOLUTE_POINT, Type.DOUBLE, unit="W")],
                             MetricOccurrence.SYNCHRONOUS_STRICT, RecorderKind.CPU)
    # a per-process PAPI counter (SCOREP_METRIC_PAPI_PER_PROCESS): recorded by the master for its whole process
    l3 = a.d.metric_class([a.member("PAPI_L3_TCM", MetricMode.ACCUMULATED_START, Type.UINT64)],
                          MetricOccurrence.SYNCHRONOUS, RecorderKind.CPU)
    per_process = a.d.metric_instance(l3, a.locs[(0, 0)], scope=a.groups[0])
    ev = a.w.event_writer_from_location(a.locs[(0, 0)])
    ev.program_begin(a.ticks(0), "metrics", [])
    ev.enter(a.ticks(0), a.regions["main"])
    r = METRIC_READINGS
    for k, (ns, kind) in enumerate(((0, "read"), (100, "enter"), (200, "leave"), (300, "enter"), (400, "leave"))):
        if kind == "read":
            continue
        i = k - 1
        ev.metric(a.ticks(ns), a.papi, [r["PAPI_TOT_INS"][i]])
        ev.metric(a.ticks(ns), cls_b, [r["TSC"][i], r["energy"][i]])
        ev.metric(a.ticks(ns), cls_c, [r["ru_utime"][i], r["power"][i]])
        ev.metric(a.ticks(ns), per_process, [r["PAPI_L3_TCM"][i]])
        getattr(ev, kind)(a.ticks(ns), a.regions["MPI_Barrier"])
    ev.leave(a.ticks(500), a.regions["main"])
    ev.program_end(a.ticks(500), 0)
    v = Variant(anchor=a.close(), n_tasks=1, n_threads=1)
    # counts per burst: the first reading (at the Enter at 100) closes [0, 100]; readings at 200 open, at 300 close
    # doubles are counted in whole units: differences of the rounded running totals (they add up to the total)
    v.bursts = {(1, 1, 0, 100, "MPI_Barrier"): {"PAPI_TOT_INS": 1000, "energy": 2, "ru_utime": 40,
                                                "PAPI_L3_TCM": 40},
                (1, 1, 200, 300, "MPI_Barrier"): {"PAPI_TOT_INS": 2000, "TSC": 750, "energy": 16 - 3,
                                                  "ru_utime": 90, "PAPI_L3_TCM": 40},
                (1, 1, 400, 500, None): {}}  # no reading after 400: unknown
    return v


# ---------------------------------------------------------------------------------------------- MPI
def mpi(root: Path) -> Variant:
    """4 ranks; ``sub`` is a split of MPI_COMM_WORLD holding world ranks [3, 1] (sub rank 0 is world rank 3).

    - [100, 150] rank 0 MPI_Isend x2 to world 1 (tags 1, 2; 100 and 200 B), rank 1 MPI_Irecv x2 from 0; both
      complete in MPI_Waitall [200, 260] (rank 0: two MpiIsendComplete; rank 1: two MpiIrecv);
    - [300, 320] on ``sub``: rank 3 (sub rank 0) MPI_Send to sub rank 1 (= world 1), 512 B tag 5; rank 1 MPI_Probe
      [300, 305] then MPI_Recv [305, 320] from sub rank 0;
    - [400, 420] MPI_Bcast on ``sub`` with root = sub rank 0 (world rank 3), 64 B;
    - [500, 510] rank 2 persistent MPI_Send_init, MPI_Start [520, 530] (an MpiIsend to world 0, 32 B, tag 4),
      MPI_Wait [540, 550]; rank 0 MPI_Recv [520, 550] of it;
    - [600, 610] rank 2 MPI_Irecv that MPI_Cancel [620, 630] cancels: no message;
    - [672, 690] rank 2 MPI_Mprobe (MpiProbe: world rank 3, tag 6, message 61), MPI_Mrecv (MpiMrecv of message 61,
      48 B) of rank 3's MPI_Send [672, 680] (OTF2 3.1 matched probe);
    - [640, 650] ranks 0 and 1 MPI_Iallreduce (NonBlockingCollectiveRequest), completed in MPI_Wait [660, 670]
      (NonBlockingCollectiveComplete: MPI_COMM_WORLD, 8 B each way): the sizes go to the call that completes it,
      where OTF2 records them.
    """
    a = _Archive(root, ranks=4, threads=1)
    a.mpi("MPI_Isend", "MPI_Irecv", "MPI_Waitall", "MPI_Send", "MPI_Recv", "MPI_Probe", "MPI_Send_init",
          "MPI_Start", "MPI_Wait", "MPI_Cancel", "MPI_Mprobe", "MPI_Mrecv", "MPI_Finalize")
    a.region("MPI_Bcast", RegionRole.COLL_ONE2ALL, Paradigm.MPI)
    a.region("MPI_Iallreduce", RegionRole.COLL_ALL2ALL, Paradigm.MPI)
    d = a.d
    sub = d.comm("MPI_COMM_WORLD.split", d.group("split", group_type=GroupType.COMM_GROUP, paradigm=Paradigm.MPI,
                                                 members=[3, 1]), parent=a.world)
    ev = [a.events(r) for r in range(4)]
    v = Variant(anchor=root / "traces.otf2", n_tasks=4, n_threads=4)
    for e in ev:
        e.program_begin(0, "mpi", [])
    e0, e1, e2, e3 = ev
    e0.enter(100, "MPI_Isend"); e0.mpi_isend(101, 1, a.world, 1, 100, 11); e0.leave(110, "MPI_Isend")  # noqa: E702
    e0.enter(120, "MPI_Isend"); e0.mpi_isend(121, 1, a.world, 2, 200, 12); e0.leave(150, "MPI_Isend")  # noqa: E702
    e1.enter(100, "MPI_Irecv"); e1.mpi_irecv_request(101, 21); e1.leave(110, "MPI_Irecv")  # noqa: E702
    e1.enter(120, "MPI_Irecv"); e1.mpi_irecv_request(121, 22); e1.leave(150, "MPI_Irecv")  # noqa: E702
    e0.enter(200, "MPI_Waitall")
    e0.mpi_isend_complete(250, 11)
    e0.mpi_isend_complete(251, 12)
    e0.leave(260, "MPI_Waitall")
    e1.enter(200, "MPI_Waitall")
    e1.mpi_irecv(250, 0, a.world, 2, 200, 22)  # completions in any order: the request ids pair them
    e1.mpi_irecv(251, 0, a.world, 1, 100, 21)
    e1.leave(260, "MPI_Waitall")
    e3.enter(300, "MPI_Send"); e3.mpi_send(301, 1, sub, 5, 512); e3.leave(320, "MPI_Send")  # noqa: E702
    e1.enter(300, "MPI_Probe"); e1.leave(305, "MPI_Probe")  # noqa: E702
    e1.enter(305, "MPI_Recv"); e1.mpi_recv(319, 0, sub, 5, 512); e1.leave(320, "MPI_Recv")  # noqa: E702
    for e, sent, recv in ((e3, 64, 0), (e1, 0, 64)):
        e.enter(400, "MPI_Bcast")
        e.mpi_collective_begin(401)
        e.mpi_collective_end(419, CollectiveOp.BCAST, sub, 0, sent, recv)
        e.leave(420, "MPI_Bcast")
    e2.enter(500, "MPI_Send_init"); e2.leave(510, "MPI_Send_init")  # noqa: E702
    e2.enter(520, "MPI_Start"); e2.mpi_isend(521, 0, a.world, 4, 32, 31); e2.leave(530, "MPI_Start")  # noqa: E702
    e2.enter(540, "MPI_Wait"); e2.mpi_isend_complete(545, 31); e2.leave(550, "MPI_Wait")  # noqa: E702
    e0.enter(520, "MPI_Recv"); e0.mpi_recv(549, 2, a.world, 4, 32); e0.leave(550, "MPI_Recv")  # noqa: E702
    e2.enter(600, "MPI_Irecv"); e2.mpi_irecv_request(601, 41); e2.leave(610, "MPI_Irecv")  # noqa: E702
    e2.enter(620, "MPI_Cancel"); e2.mpi_request_cancelled(625, 41); e2.leave(630, "MPI_Cancel")  # noqa: E702
    e2.enter(672, "MPI_Mprobe"); e2.mpi_probe(674, 3, a.world, 6, 61); e2.leave(675, "MPI_Mprobe")  # noqa: E702
    e2.enter(676, "MPI_Mrecv"); e2.mpi_mrecv(689, 61, 48); e2.leave(690, "MPI_Mrecv")  # noqa: E702
    e3.enter(672, "MPI_Send"); e3.mpi_send(673, 2, a.world, 6, 48); e3.leave(680, "MPI_Send")  # noqa: E702
    for e in (e0, e1):  # a non-blocking collective: its record is in the call that completes it
        e.enter(640, "MPI_Iallreduce")
        e.non_blocking_collective_request(641, 51)
        e.leave(650, "MPI_Iallreduce")
        e.enter(660, "MPI_Wait")
        e.non_blocking_collective_complete(665, CollectiveOp.ALLREDUCE, a.world, 0xFFFFFFFF, 8, 8, 51)
        e.leave(670, "MPI_Wait")
    for e in ev:
        e.enter(700, "MPI_Finalize")
        e.leave(710, "MPI_Finalize")
        e.program_end(800, 0)
    a.close()
    v.messages = sorted([(1, 2, 100, 1), (1, 2, 200, 2), (4, 2, 512, 5), (3, 1, 32, 4), (4, 3, 48, 6)])
    sub_id = sub._ref
    # (task, call, start, end, comm, root, sent, recv) for the calls whose values the spec fixes
    v.calls = [(1, "MPI_Isend", 100, 110, 0, None, 100, 0), (1, "MPI_Isend", 120, 150, 0, None, 200, 0),
               (4, "MPI_Send", 300, 320, sub_id, None, 512, 0), (2, "MPI_Recv", 305, 320, sub_id, None, 0, 512),
               (4, "MPI_Bcast", 400, 420, sub_id, 0, 64, 0), (2, "MPI_Bcast", 400, 420, sub_id, 0, 0, 64),
               (3, "MPI_Start", 520, 530, 0, None, 32, 0), (1, "MPI_Recv", 520, 550, 0, None, 0, 32),
               (1, "MPI_Iallreduce", 640, 650, None, None, 0, 0), (2, "MPI_Wait", 660, 670, 0, None, 8, 8),
               (3, "MPI_Mprobe", 672, 675, 0, None, 0, 0), (3, "MPI_Mrecv", 676, 690, None, None, 0, 48)]
    return v


# ---------------------------------------------------------------------------------------------- timers
def clock(root: Path, resolution: int, offset: int) -> Variant:
    """One rank, MPI_Barrier [1000, 3000] ns, ``ProgramEnd`` at 5000 ns, on a timer of ``resolution`` ticks/s
    whose first event is at tick ``offset``."""
    a = _Archive(root, ranks=1, threads=1, resolution=resolution, offset=offset)
    a.mpi("MPI_Barrier")
    e = a.events(0)
    e.program_begin(0, "clock", [])
    e.enter(1000, "MPI_Barrier", ins=700)
    e.leave(3000, "MPI_Barrier", ins=10)
    e.program_end(5000, 0)
    v = Variant(anchor=a.close(), n_tasks=1, n_threads=1)
    v.bursts = {(1, 1, 0, 1000, "MPI_Barrier"): {"PAPI_TOT_INS": 700}, (1, 1, 3000, 5000, None): {}}
    v.calls = [(1, 1, "MPI_Barrier", 1000, 3000, None, None, 0, 0)]
    return v


def clock_offsets(root: Path) -> Variant:
    """2 ranks, MPI_Barrier [1000, 3000] ns on each local clock, ``ProgramEnd`` at 5000; rank 1's local definitions
    hold the ClockOffset pair Score-P writes at measurement begin and end (700 ticks at 0, 1700 at 5000 ns): OTF2
    corrects its times by the offset interpolated linearly between them (t + 700 + 1000 t / 5000)."""
    import _otf2

    a = _Archive(root, ranks=2, threads=1)
    a.mpi("MPI_Barrier")
    for r in range(2):
        e = a.events(r)
        e.program_begin(0, "offsets", [])
        e.enter(1000, "MPI_Barrier", ins=5)
        e.leave(3000, "MPI_Barrier")
        e.program_end(5000, 0)
    local = _otf2.Archive_GetDefWriter(a.w._handle, a.locs[(1, 0)]._ref)
    _otf2.DefWriter_WriteClockOffset(local, a.ticks(0), 700, 0.0)
    _otf2.DefWriter_WriteClockOffset(local, a.ticks(5000), 1700, 0.0)
    v = Variant(anchor=a.close(), n_tasks=2, n_threads=2)
    v.bursts = {(1, 1, 0, 1000, "MPI_Barrier"): {"PAPI_TOT_INS": 5}, (1, 1, 3000, 5000, None): {},
                (2, 1, 700, 1900, "MPI_Barrier"): {"PAPI_TOT_INS": 5}, (2, 1, 4300, 6700, None): {}}
    v.calls = [(1, 1, "MPI_Barrier", 1000, 3000, None, None, 0, 0), (2, 1, "MPI_Barrier", 1900, 4300, None, None, 0, 0)]
    return v


def measurement(root: Path) -> Variant:
    """Score-P's own time inside a run: one rank whose tracer flushes its buffer (region ``TRACE BUFFER FLUSH``,
    paradigm MEASUREMENT_SYSTEM, role ARTIFICIAL, as in the real ping-pong archives' definitions) in the middle of
    a computation [300, 800] and once inside an MPI call [1020, 1080], and whose recording is switched off
    (``MEASUREMENT OFF``, paradigm USER, role ARTIFICIAL) over [1200, 5000]. Metrics are read at every Enter/Leave,
    the flush's and the switch's too. Their time and counts belong to no burst: the computation around a flush is
    two bursts (as Extrae's flush state cuts Paraver's Running state), the first closed by no call. The whole run
    lies inside another artificial region of the measurement system, the program's, named as a program without a
    path (review23: taken as the tracer's own time, it dropped every burst). The trace begins inside a flush (its
    Leave at 1 ns, no Enter: attack 23 F1, it kept every later flush of the chunk from cutting a burst)."""
    a = _Archive(root, ranks=1, threads=1)
    a.mpi("MPI_Barrier", "MPI_Finalize")
    flush, off, program = "TRACE BUFFER FLUSH", "MEASUREMENT OFF", "measurement"
    a.region(flush, RegionRole.ARTIFICIAL, Paradigm.MEASUREMENT_SYSTEM)
    a.region(off, RegionRole.ARTIFICIAL, Paradigm.USER)
    a.region(program, RegionRole.ARTIFICIAL, Paradigm.MEASUREMENT_SYSTEM)
    e = a.events(0)
    e.program_begin(0, "measurement", [])
    e.leave(1, flush)  # the trace begins inside a flush: a Leave with no Enter (attack 23 F1)
    e.enter(1, program)
    e.enter(5, "main", ins=500)
    e.enter(100, "MPI_Barrier", ins=1000)
    e.leave(200, "MPI_Barrier", ins=50)
    e.enter(300, flush, ins=2000)
    e.leave(800, flush, ins=60_000)  # the tracer's I/O code
    e.enter(1000, "MPI_Barrier", ins=3000)
    e.enter(1020, flush, ins=10)
    e.leave(1080, flush, ins=7000)
    e.leave(1100, "MPI_Barrier", ins=20)
    e.enter(1200, off, ins=400)
    e.leave(5000, off, ins=90_000)  # what ran while nothing was recorded
    e.enter(5100, "MPI_Finalize", ins=700)
    e.leave(5200, "MPI_Finalize", ins=10)
    e.leave(5300, "main", ins=300)
    e.leave(5390, program)
    e.program_end(5400, 0)
    v = Variant(anchor=a.close(), n_tasks=1, n_threads=1)
    v.bursts = {(1, 1, 0, 100, "MPI_Barrier"): {"PAPI_TOT_INS": 1500},
                (1, 1, 200, 300, None): {"PAPI_TOT_INS": 2000},  # cut by the flush: no call closes it
                (1, 1, 800, 1000, "MPI_Barrier"): {"PAPI_TOT_INS": 3000},
                (1, 1, 1100, 1200, None): {"PAPI_TOT_INS": 400},  # cut by the recording switched off
                (1, 1, 5000, 5100, "MPI_Finalize"): {"PAPI_TOT_INS": 700},
                (1, 1, 5200, 5400, None): {"PAPI_TOT_INS": 300}}
    v.calls = [(1, 1, "MPI_Barrier", 100, 200, None, None, 0, 0), (1, 1, "MPI_Barrier", 1000, 1100, None, None, 0, 0),
               (1, 1, "MPI_Finalize", 5100, 5200, None, None, 0, 0)]
    return v


def unwinding(root: Path) -> Variant:
    """Score-P with unwinding (``SCOREP_ENABLE_UNWINDING``): regions are entered and left as calling contexts
    (``CallingContextEnter/Leave``), not Enter/Leave. One rank: main [10, 90] calls MPI_Barrier [20, 30] and
    MPI_Allreduce [60, 70]; ``ProgramEnd`` at 100. The OTF2 library hands such events to the Enter/Leave callbacks
    with the calling context's region when no calling-context callback is set."""
    a = _Archive(root, ranks=1, threads=1)
    a.mpi("MPI_Barrier", "MPI_Allreduce")
    d = a.d
    main = d.calling_context(a.regions["main"], d.source_code_location("app.c", 3), None)
    calls = {name: d.calling_context(a.regions[name], None, main) for name in ("MPI_Barrier", "MPI_Allreduce")}
    e = a.w.event_writer_from_location(a.locs[(0, 0)])
    e.program_begin(a.ticks(0), "unwinding", [])
    e.calling_context_enter(a.ticks(10), main, 1)
    for name, t in (("MPI_Barrier", 20), ("MPI_Allreduce", 60)):
        e.calling_context_enter(a.ticks(t), calls[name], 1)
        e.calling_context_leave(a.ticks(t + 10), calls[name])
    e.calling_context_leave(a.ticks(90), main)
    e.program_end(a.ticks(100), 0)
    v = Variant(anchor=a.close(), n_tasks=1, n_threads=1)
    v.bursts = {(1, 1, 0, 20, "MPI_Barrier"): {}, (1, 1, 30, 60, "MPI_Allreduce"): {}, (1, 1, 70, 100, None): {}}
    v.calls = [(1, 1, "MPI_Barrier", 20, 30, None, None, 0, 0), (1, 1, "MPI_Allreduce", 60, 70, None, None, 0, 0)]
    return v


def scorep_archive(root: Path, binary: str, functions: tuple[str, ...]) -> Path:
    """A 4-rank Score-P-like archive whose program region records the executable ``/home/u/<folder>/<binary>``,
    with the program's own ``functions``: its anchor."""
    a = _Archive(root, ranks=4, threads=1)
    a.d.region(binary, canonical_name=f"/home/u/{functions[0]}/{binary}", region_role=RegionRole.ARTIFICIAL,
               paradigm=Paradigm.MEASUREMENT_SYSTEM)
    for f in functions:
        a.region(f, RegionRole.FUNCTION, Paradigm.COMPILER, f"{f}.c", 10)
    a.mpi("MPI_Finalize")
    events = [a.events(r) for r in range(4)]
    for e in events:
        e.program_begin(0, binary, [])
    for i in range(10):
        for r, e in enumerate(events):
            base = 1000 + i * 10000
            e.enter(base, functions[0], 0)
            e.leave(base + 5000, functions[0], 100000 * (r + 1))
    for e in events:
        e.enter(900000, "MPI_Finalize")
        e.leave(900100, "MPI_Finalize")
        e.program_end(1000000, 0)
    return a.close()


def region_steps(root: Path, steps: int, chunk_bytes: int) -> Path:
    """One rank entering and leaving one region ``steps`` times (an Enter at 1000 + 10 i ticks, its Leave 5 ticks
    later; 10^9 ticks per second), its events written in chunks of ``chunk_bytes``: an events file of several chunks
    at OTF2's smallest chunk (256 KiB). Returns ``root``."""
    with otf2.writer.open(str(root), timer_resolution=10**9, chunk_size_events=chunk_bytes) as w:
        d = w.definitions
        group = d.location_group("rank 0", location_group_type=LocationGroupType.PROCESS,
                                 system_tree_parent=d.system_tree_node("node"))
        region = d.region("main", region_role=RegionRole.FUNCTION, paradigm=Paradigm.COMPILER)
        events = w.event_writer_from_location(d.location("Master thread", type=LocationType.CPU_THREAD,
                                                         group=group))
        for i in range(steps):
            events.enter(1000 + 10 * i, region)
            events.leave(1005 + 10 * i, region)
    return root


def many_ranks(root: Path, ranks: int, barrier: bool = False) -> Path:
    """``ranks`` processes of one thread (an events file and a local definitions file each: an archive of 2 x ranks
    + 2 files, as Score-P writes a run of that many ranks), each entering and leaving ``main`` once, rank r at 1000 + r
    ticks for 1000 ticks (10^9 ticks per second); with ``barrier``, rank r enters main at 1000, calls MPI_Barrier
    from 5000 + r to 6000 + r and leaves main at 10000 + r (two bursts per rank). Returns the anchor."""
    with otf2.writer.open(str(root), timer_resolution=10**9) as w:
        d = w.definitions
        node = d.system_tree_node("node")
        main = d.region("main", region_role=RegionRole.FUNCTION, paradigm=Paradigm.COMPILER)
        mpi = d.region("MPI_Barrier", region_role=RegionRole.BARRIER, paradigm=Paradigm.MPI) if barrier else None
        for r in range(ranks):
            group = d.location_group(f"MPI Rank {r}", location_group_type=LocationGroupType.PROCESS,
                                     system_tree_parent=node)
            events = w.event_writer_from_location(d.location("Master thread", type=LocationType.CPU_THREAD,
                                                             group=group))
            if mpi is None:
                events.enter(1000 + r, main)
                events.leave(2000 + r, main)
                continue
            events.enter(1000, main)
            events.enter(5000 + r, mpi)
            events.leave(6000 + r, mpi)
            events.leave(10000 + r, main)
    return root / "traces.otf2"


def wide_definitions(root: Path, regions: int, chunk_bytes: int) -> Path:
    """One rank entering and leaving each of ``regions`` regions (names of 40 characters and more), its
    definitions written in chunks of ``chunk_bytes``: a global definitions file over OTF2's smallest chunk (256
    KiB) from about 4,000 regions. Returns ``root``."""
    with otf2.writer.open(str(root), timer_resolution=10**9, chunk_size_definitions=chunk_bytes) as w:
        d = w.definitions
        group = d.location_group("rank 0", location_group_type=LocationGroupType.PROCESS,
                                 system_tree_parent=d.system_tree_node("node"))
        events = w.event_writer_from_location(d.location("Master thread", type=LocationType.CPU_THREAD,
                                                         group=group))
        for i in range(regions):
            region = d.region(f"solver_kernel_{i:06d}_with_a_long_generated_name", region_role=RegionRole.FUNCTION,
                              paradigm=Paradigm.COMPILER, source_file=f"src/generated/kernel_{i:06d}.c",
                              begin_line_number=i + 1)
            events.enter(1000 + 10 * i, region)
            events.leave(1005 + 10 * i, region)
    return root


def shared_member(root: Path, recorder: str) -> Variant:
    """One rank whose cycle counter ``CYC`` (ACCUMULATED_START) is a member of two metrics: a class of it alone,
    read at the Enter and Leave of MPI_Barrier calls at 100 / 200, 400 / 500 and 600 / 700 ns, and ``recorder``
    (``class``: a class ``[L2, CYC]``, whose members are not contiguous in definition order; ``instance``: a metric
    instance of that class recorded by the rank for itself) read at 300 and 500 ns. The writer defines ``CYC`` once
    (identical definitions share one reference): one counter sampled by both metrics."""
    a = _Archive(root, ranks=1, threads=1)
    a.mpi("MPI_Barrier")
    cyc = a.member("CYC", MetricMode.ACCUMULATED_START, Type.UINT64)
    l2 = a.member("L2", MetricMode.ACCUMULATED_START, Type.UINT64)
    alone = a.d.metric_class([cyc], MetricOccurrence.SYNCHRONOUS_STRICT, RecorderKind.CPU)
    other = a.d.metric_class([l2, cyc], MetricOccurrence.SYNCHRONOUS_STRICT, RecorderKind.CPU)
    if recorder == "instance":
        other = a.d.metric_instance(other, a.locs[(0, 0)], scope=a.locs[(0, 0)])
    ev = a.w.event_writer_from_location(a.locs[(0, 0)])
    ev.program_begin(a.ticks(0), "shared", [])
    ev.enter(a.ticks(0), a.regions["main"])
    for ns, metric, values, kind in ((100, alone, [100], "enter"), (200, alone, [150], "leave"),
                                     (300, other, [7, 250], None), (400, alone, [300], "enter"),
                                     (500, other, [9, 330], "leave"), (600, alone, [400], "enter"),
                                     (700, None, None, "leave")):
        if metric is not None:
            ev.metric(a.ticks(ns), metric, values)
        if kind is not None:
            getattr(ev, kind)(a.ticks(ns), a.regions["MPI_Barrier"])
    ev.leave(a.ticks(800), a.regions["main"])
    ev.program_end(a.ticks(800), 0)
    v = Variant(anchor=a.close(), n_tasks=1, n_threads=1)
    # CYC counts from 0 at the start: 100 by 100 ns; 300 - 150 over [200, 400]; 400 - 330 over [500, 600]. L2 is
    # read at 300 and 500 alone: its first reading counts from 0 (7, in [200, 400]), its second is inside a call
    v.bursts = {(1, 1, 0, 100, "MPI_Barrier"): {"CYC": 100}, (1, 1, 200, 400, "MPI_Barrier"): {"CYC": 150, "L2": 7},
                (1, 1, 500, 600, "MPI_Barrier"): {"CYC": 70}, (1, 1, 700, 800, None): {}}
    return v
