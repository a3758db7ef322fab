"""OTF2 reader: the real Score-P ping-pong runs against a naive reading, a trace written here with the ``otf2``
writer read back exactly, chunking that changes nothing, and broken archives that give a clear error."""
from __future__ import annotations

import json
import shutil
from collections import defaultdict
from pathlib import Path

import otf2
import polars as pl
import pytest
from otf2.enums import (Base, CollectiveOp, GroupType, LocationGroupType, LocationType, MetricMode,
                        MetricOccurrence, MetricType, Paradigm, RecorderKind, RegionRole, Type)
from polars.testing import assert_frame_equal

from testing.traces import TRACES
from synthtrace.tracelib.errors import BadInputError, TraceFormatError, TruncatedTraceError
from synthtrace.tracelib.formats.source import open_trace
from synthtrace.tracelib.formats.otf2 import Otf2Trace
from synthtrace.tracelib.formats.otf2.definitions import region_kind as mpi_kind

OTF2_DIR = TRACES / "otf2"
PING = OTF2_DIR / "ping-pong-otf2" / "traces.otf2"
PING_PAPI = OTF2_DIR / "ping-pong-otf2-papi" / "traces.otf2"
PAPI = ["PAPI_BR_MSP", "PAPI_L2_TCM", "PAPI_TOT_CYC"]
real = pytest.mark.skipif(not PING.is_file(), reason=f"real OTF2 traces not found under {OTF2_DIR}")


# ---------------------------------------------------------------------------------------------- naive reading
def naive_read(anchor: Path) -> dict:
    """An independent, deliberately simple reading with the otf2 wheel's own event objects.

    Per location: bursts between MPI regions (counter = last reading inside the burst minus the last reading at
    or before its start, 0 before the first reading), and the bytes of the send / receive records.
    """
    with otf2.reader.open(str(anchor)) as tr:
        clock = tr.definitions.clock_properties
        events = defaultdict(list)
        for loc, ev in tr.events:
            events[loc._ref].append(ev)
        names = [m.name for m in tr.definitions.metric_members]
    to_ns = lambda t: (t - clock.global_offset) * 10**9 // clock.timer_resolution  # noqa: E731
    out = {"bursts": {}, "sent": 0, "recv": 0}
    for ref, evs in events.items():
        bursts, depth, start, reading = [], 0, to_ns(evs[0].time), dict.fromkeys(names, 0)
        at_start = dict(reading)
        for ev in evs:
            kind = type(ev).__name__
            if kind == "Metric":
                reading.update(zip([m.name for m in ev.metric.members], ev.values))
            elif kind in ("MpiSend", "MpiIsend"):
                out["sent"] += ev.msg_length
            elif kind in ("MpiRecv", "MpiIrecv"):
                out["recv"] += ev.msg_length
            elif kind == "Enter" and ev.region.paradigm == Paradigm.MPI:
                if depth == 0:
                    bursts.append((start, to_ns(ev.time), ev.region.name, {n: reading[n] - at_start[n] for n in names}))
                depth += 1
            elif kind == "Leave" and ev.region.paradigm == Paradigm.MPI:
                depth -= 1
                if depth == 0:
                    start, at_start = to_ns(ev.time), dict(reading)
        bursts.append((start, to_ns(evs[-1].time), None, {n: reading[n] - at_start[n] for n in names}))
        out["bursts"][ref] = bursts
    return out


@real
@pytest.mark.parametrize("anchor", [PING, PING_PAPI], ids=["plain", "papi"])
def test_real_ping_pong_matches_naive_reading(anchor):
    trace = open_trace(anchor)
    assert isinstance(trace, Otf2Trace) and trace.format == "otf2"
    bursts, calls, summary = trace.read_tables("run")
    naive = naive_read(anchor)
    assert trace.resources["n_tasks"] == 2 and trace.resources["n_threads"] == 2
    assert bursts.height == sum(len(b) for b in naive["bursts"].values()) == 42
    assert calls.height == 40 and summary.n_bursts == 42 and summary.n_calls == 40
    for task, ref in ((1, 0), (2, 1)):
        mine = bursts.filter(pl.col("task") == task).sort("burst_seq")
        expected = naive["bursts"][ref]
        assert mine["start_ns"].to_list() == [b[0] for b in expected]
        assert mine["end_ns"].to_list() == [b[1] for b in expected]
        assert mine["mpi_call"].to_list() == [b[2] for b in expected]
        for counter in summary.counters:
            assert mine[counter].to_list() == [b[3][counter] for b in expected]
    # every burst of the run, summed, equals the naive sums
    if anchor == PING_PAPI:
        assert list(summary.counters) == PAPI
        assert sum(bursts[c].null_count() for c in PAPI) == 0
        for c in PAPI:
            assert bursts[c].sum() == sum(b[3][c] for bs in naive["bursts"].values() for b in bs)
        assert bursts.filter(pl.col("task") == 1)["PAPI_TOT_CYC"].head(2).to_list() == [122765, 88017448 - 87997941]
    else:
        assert list(summary.counters) == []
    # ping-pong: 8 message sizes 16 KiB .. 2 MiB each way, 16 messages in all
    assert summary.messages.height == 16
    assert (
        calls["bytes_sent"].sum() == calls["bytes_recv"].sum() == naive["sent"] == naive["recv"] == 2 * (2**22 - 2**14)
    )
    sends = calls.filter(pl.col("mpi_call") == "MPI_Send")
    assert sends.height == 16 and set(sends["peer"]) == {1, 2} and set(sends["tag"]) == {10, 20}
    assert (sends["peer"] != sends["task"]).all() and (sends["n_messages"] == 1).all()
    assert sorted(sends.filter(pl.col("task") == 1)["bytes_sent"]) == [2**k for k in range(14, 22)]
    assert set(calls["mpi_kind"]) == {"point_to_point", "other"}
    assert calls["call_site"].str.starts_with("int main(int, char**) (ping-pong.c:5)").all()


@real
def test_real_runs_share_their_structure():
    """The two runs are the same program: the same MPI call sequence and message sizes per rank."""
    a, ca, _ = Otf2Trace(PING).read_tables()
    b, cb, _ = Otf2Trace(PING_PAPI).read_tables()
    cols = ["task", "call_seq", "mpi_call", "peer", "bytes_sent", "bytes_recv", "tag"]
    assert_frame_equal(ca.select(cols), cb.select(cols))
    assert a["mpi_call"].to_list() == b["mpi_call"].to_list()


@real
def test_ingest_and_merge_the_real_ping_pong_pair(tmp_path, run_cli):
    wh = tmp_path / "wh"
    code, out, err = run_cli("ingest", PING, PING_PAPI, "-w", wh, "--experiment", "pingpong")
    assert code == 0, err
    assert out.count("ingested as") == 2 and "42 bursts, 40 MPI calls" in out
    code, out, err = run_cli(
        "sql", "SELECT format, n_tasks, counters FROM runs ORDER BY run_name", "-w", wh, "-f", "json"
    )
    assert code == 0 and json.loads(out) == [{"format": "otf2", "n_tasks": 2, "counters": []},
                                             {"format": "otf2", "n_tasks": 2, "counters": PAPI}]
    code, out, err = run_cli("sql", "SELECT sum(bytes_sent) AS s FROM mpi_calls", "-w", wh, "-f", "csv")
    assert out.splitlines()[1] == str(2 * 2 * (2**22 - 2**14))
    # the plain run has no counter in common with the PAPI run: match on MPI structure and timing
    code, out, err = run_cli("merge", "pingpong", "-w", wh, "--allow-timing-only")
    assert code == 0, err
    code, out, err = run_cli("sql", "SELECT count(*) AS n, count(PAPI_TOT_CYC) AS cyc FROM merged_bursts "
                             "WHERE experiment = 'pingpong'", "-w", wh, "-f", "json")
    assert json.loads(out) == [{"n": 42, "cyc": 42}]


# ---------------------------------------------------------------------------------------------- a written trace
RES = 2_000_000_000  # timer ticks per second: 2 ticks per ns
T0 = 4_000  # ticks of the first event (the global offset)
WORLD_TAG = "MPI_COMM_WORLD"


class _Timeline:
    """Writes one location's events from a script and remembers what the reader must find.

    ``compute(ns, ins, cyc, dcm, nxt)`` advances the clock while counters grow; ``read()`` writes the Metric
    records (cumulative PAPI_TOT_INS / PAPI_TOT_CYC / FP_ENERGY as doubles, PAPI_L1_DCM as a delta since the last
    reading, NEXT_CNT as the count up to the next reading, planned ahead); MPI calls are entered and left with
    readings, as Score-P does.
    """

    def __init__(self, writer, regions, metrics, comm):
        self.w, self.regions, self.metrics, self.comm = writer, regions, metrics, comm
        self.t = T0
        self.total = {"PAPI_TOT_INS": 0, "PAPI_TOT_CYC": 0, "FP_ENERGY": 0}
        self.dcm_since_read = 0
        self.script: list[tuple] = []

    # script building (two passes so NEXT_CNT can look ahead)
    def compute(self, ns, ins, dcm=0, nxt=0):
        self.script.append(("compute", ns, ins, dcm, nxt))

    def op(self, *args):
        self.script.append(args)

    def write(self):
        next_amounts = []  # NEXT_CNT of each reading: what is computed until the following reading
        acc = 0
        for step in reversed(self.script):
            if step[0] == "compute":
                acc += step[4]
            elif step[0] in ("enter", "leave", "read"):
                next_amounts.append(acc)
                acc = 0
        next_amounts.reverse()
        reading = 0
        cls_a, cls_b = self.metrics
        for step in self.script:
            kind = step[0]
            if kind == "compute":
                _, ns, ins, dcm, _ = step
                self.t += 2 * ns
                self.total["PAPI_TOT_INS"] += ins
                self.total["PAPI_TOT_CYC"] += 2 * ins
                self.total["FP_ENERGY"] += 3 * ins
                self.dcm_since_read += dcm
                continue
            if kind in ("enter", "leave", "read"):
                t = self.t
                self.w.metric(
                    t, cls_a, [self.total["PAPI_TOT_INS"], self.total["PAPI_TOT_CYC"], float(self.total["FP_ENERGY"])]
                )
                self.w.metric(t, cls_b, [self.dcm_since_read, next_amounts[reading]])
                self.dcm_since_read = 0
                reading += 1
                if kind != "read":
                    getattr(self.w, kind)(t, self.regions[step[1]])
            elif kind == "begin":
                self.w.program_begin(self.t, "synthetic", [])
            elif kind == "end":
                self.w.program_end(self.t, 0)
            elif kind == "send":
                self.w.mpi_send(self.t + 2, step[1], self.comm, step[2], step[3])
            elif kind == "recv":
                self.w.mpi_recv(self.t + 2, step[1], self.comm, step[2], step[3])
            elif kind == "isend":
                self.w.mpi_isend(self.t + 2, step[1], self.comm, step[2], step[3], step[4])
            elif kind == "irecv_request":
                self.w.mpi_irecv_request(self.t + 2, step[1])
            elif kind == "irecv":
                self.w.mpi_irecv(self.t + 2, step[1], self.comm, step[2], step[3], step[4])
            elif kind == "coll":
                _, op, root, sent, recv = step
                self.w.mpi_collective_begin(self.t + 1)
                self.w.mpi_collective_end(self.t + 2, op, self.comm, root, sent, recv)


def write_synthetic(root: Path) -> Path:
    """A 2-rank trace (rank 0 with a second thread) with known bursts, counters, calls and messages."""
    with otf2.writer.open(str(root), timer_resolution=RES) as w:
        d = w.definitions
        node = d.system_tree_node("node0")
        # rank 1 defined first: ranks come from the MPI COMM_LOCATIONS group, not from definition order
        groups = [d.location_group(f"MPI Rank {r}", location_group_type=LocationGroupType.PROCESS,
                                   system_tree_parent=node) for r in (1, 0)][::-1]
        masters = [d.location("Master thread", type=LocationType.CPU_THREAD, group=g) for g in groups[::-1]][::-1]
        worker = d.location("OMP thread 1", type=LocationType.CPU_THREAD, group=groups[0])
        d.group("", group_type=GroupType.COMM_LOCATIONS, paradigm=Paradigm.MPI, members=masters)
        world = d.comm(WORLD_TAG, d.group("", group_type=GroupType.COMM_GROUP, paradigm=Paradigm.MPI, members=[0, 1]))
        regions = {"main": d.region("main", region_role=RegionRole.FUNCTION, paradigm=Paradigm.COMPILER,
                                    source_file="src/synthetic.c", begin_line_number=10),
                   "exchange": d.region("exchange", region_role=RegionRole.FUNCTION, paradigm=Paradigm.COMPILER,
                                        source_file="src/synthetic.c", begin_line_number=42),
                   "omp_work": d.region("omp_work", region_role=RegionRole.FUNCTION, paradigm=Paradigm.OPENMP)}
        for name, role in (("MPI_Init", RegionRole.FUNCTION), ("MPI_Send", RegionRole.POINT2POINT),
                           ("MPI_Recv", RegionRole.POINT2POINT), ("MPI_Isend", RegionRole.POINT2POINT),
                           ("MPI_Irecv", RegionRole.POINT2POINT), ("MPI_Wait", RegionRole.POINT2POINT),
                           ("MPI_Allreduce", RegionRole.COLL_ALL2ALL), ("MPI_Bcast", RegionRole.COLL_ONE2ALL),
                           ("MPI_Barrier", RegionRole.BARRIER), ("MPI_Finalize", RegionRole.FUNCTION)):
            regions[name] = d.region(name, region_role=role, paradigm=Paradigm.MPI)
        member = lambda name, mode, vtype: d.metric_member(name, "", MetricType.PAPI, mode, vtype, Base.DECIMAL, 0, "#")  # noqa: E731
        cls_a = d.metric_class([member("PAPI_TOT_INS", MetricMode.ACCUMULATED_START, Type.UINT64),
                                member("PAPI_TOT_CYC", MetricMode.ACCUMULATED_START, Type.UINT64),
                                member("FP_ENERGY", MetricMode.ACCUMULATED_START, Type.DOUBLE)],
                               MetricOccurrence.SYNCHRONOUS_STRICT, RecorderKind.CPU)
        cls_b = d.metric_class([member("PAPI_L1_DCM", MetricMode.ACCUMULATED_LAST, Type.INT64),
                                member("NEXT_CNT", MetricMode.ACCUMULATED_NEXT, Type.UINT64)],
                               MetricOccurrence.SYNCHRONOUS_STRICT, RecorderKind.CPU)
        for rank in (0, 1):
            tl = _Timeline(w.event_writer_from_location(masters[rank]), regions, (cls_a, cls_b), world)
            peer = 1 - rank
            tl.op("begin")
            tl.compute(5, 50, dcm=1, nxt=0)
            tl.op("enter", "main")
            for k, (call, records) in enumerate(_CALLS[rank]):
                b = _BURSTS[rank][k]
                if call == "MPI_Allreduce":  # called from inside exchange(): a different call site
                    tl.compute(b[0] // 2, b[1] // 2, dcm=b[2] // 2, nxt=b[3] // 2)
                    tl.op("enter", "exchange")
                    tl.compute(b[0] - b[0] // 2, b[1] - b[1] // 2, dcm=b[2] - b[2] // 2, nxt=b[3] - b[3] // 2)
                else:
                    tl.compute(b[0], b[1], dcm=b[2], nxt=b[3])
                tl.op("enter", call)
                for rec in records:
                    tl.op(*[peer if isinstance(x, str) and x == "PEER" else x for x in rec])
                if call == "MPI_Finalize":  # an MPI call inside an MPI call is part of the outer one
                    tl.compute(10, 7, dcm=3, nxt=2)
                    tl.op("enter", "MPI_Barrier")
                    tl.compute(5, 1)
                    tl.op("leave", "MPI_Barrier")
                tl.compute(40, 7, dcm=3, nxt=2)
                tl.op("leave", call)
                if call == "MPI_Allreduce":
                    tl.compute(4, 4, dcm=0, nxt=1)  # still outside MPI: part of the next burst
                    tl.op("leave", "exchange")
            b = _BURSTS[rank][-1]
            tl.compute(b[0], b[1], dcm=b[2], nxt=b[3])
            tl.op("leave", "main")
            tl.compute(6, 0)
            tl.op("end")
            tl.write()
        # rank 0's worker thread: no MPI, one burst from its first to its last event
        tl = _Timeline(w.event_writer_from_location(worker), regions, (cls_a, cls_b), world)
        tl.t = T0 + 2 * 300
        tl.op("enter", "omp_work")
        tl.compute(250, 900, dcm=9, nxt=4)
        tl.op("leave", "omp_work")
        tl.write()
    return root / "traces.otf2"


# bursts per rank: (ns, instructions, L1 misses, NEXT_CNT count), the last one after MPI_Finalize
_BURSTS = {
    0: [(100, 1000, 10, 5), (200, 2000, 20, 6), (300, 3000, 30, 7), (400, 4000, 40, 8), (500, 5000, 50, 9),
        (600, 6000, 60, 10), (700, 7000, 70, 11), (80, 800, 8, 12)],
    1: [(110, 1100, 11, 1), (220, 2200, 22, 2), (330, 3300, 33, 3), (440, 4400, 44, 4), (550, 5500, 55, 5),
        (660, 6600, 66, 6), (770, 7700, 77, 7), (90, 900, 9, 8)],
}
# MPI calls per rank with the records inside them ("PEER" = the other rank)
_CALLS = {
    0: [
        ("MPI_Init", []),
        ("MPI_Send", [("send", "PEER", 5, 1024)]),
        ("MPI_Isend", [("isend", "PEER", 6, 2048, 1)]),
        ("MPI_Wait", []),
        ("MPI_Allreduce", [("coll", CollectiveOp.ALLREDUCE, 0xFFFFFFFF, 8, 8)]),
        ("MPI_Bcast", [("coll", CollectiveOp.BCAST, 0, 64, 0)]),
        ("MPI_Finalize", []),
    ],
    1: [
        ("MPI_Init", []),
        ("MPI_Recv", [("recv", "PEER", 5, 1024)]),
        ("MPI_Irecv", [("irecv_request", 7)]),
        ("MPI_Wait", [("irecv", "PEER", 6, 2048, 7)]),
        ("MPI_Allreduce", [("coll", CollectiveOp.ALLREDUCE, 0xFFFFFFFF, 8, 8)]),
        ("MPI_Bcast", [("coll", CollectiveOp.BCAST, 0, 0, 64)]),
        ("MPI_Finalize", []),
    ],
}


def expected_bursts() -> pl.DataFrame:
    """The bursts the script above describes, derived by hand from its durations and counts."""
    rows = []
    for rank in (0, 1):
        t = 0  # ns from the global offset; both ranks start at T0
        calls = [c for c, _ in _CALLS[rank]] + [None]
        for k, (ns, ins, dcm, nxt) in enumerate(_BURSTS[rank]):
            first, last = k == 0, k == len(_BURSTS[rank]) - 1
            start = t
            dur = ns + (5 if first else 0) + (4 if calls[k] == "MPI_Bcast" else 0)
            extra_ins = 50 if first else 4 if calls[k] == "MPI_Bcast" else 0
            end = t + dur + (6 if last else 0)  # the last burst runs to ProgramEnd, 6 ns after the last reading
            rows.append(
                {
                    "task": rank + 1,
                    "thread": 1,
                    "burst_seq": k,
                    "start_ns": start,
                    "end_ns": end,
                    "duration_ns": end - start,
                    "mpi_call": calls[k],
                    "call_site": None
                    if last
                    else "exchange (synthetic.c:42)"
                    if calls[k] == "MPI_Allreduce"
                    else "main (synthetic.c:10)",
                    "PAPI_TOT_INS": ins + extra_ins,
                    "PAPI_TOT_CYC": 2 * (ins + extra_ins),
                    "FP_ENERGY": 3 * (ins + extra_ins),
                    "PAPI_L1_DCM": dcm + (1 if first else 0),
                    # NEXT_CNT: the count after the burst's first reading; the first burst starts before any reading
                    "NEXT_CNT": nxt + (1 if calls[k] == "MPI_Bcast" else 0),
                }
            )
            t = end + (40 + (15 if calls[k] == "MPI_Finalize" else 0) if not last else 0)
    rows.append({"task": 1, "thread": 2, "burst_seq": 0, "start_ns": 300, "end_ns": 550, "duration_ns": 250,
                 "mpi_call": None, "call_site": None, "PAPI_TOT_INS": 900, "PAPI_TOT_CYC": 1800, "FP_ENERGY": 2700,
                 "PAPI_L1_DCM": 9, "NEXT_CNT": 4})
    return pl.DataFrame(rows).with_columns(pl.col("task", "thread").cast(pl.Int32))


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> Path:
    return write_synthetic(tmp_path_factory.mktemp("otf2") / "synthetic")


def test_written_trace_bursts_read_back_exactly(synthetic):
    trace = Otf2Trace(synthetic)
    bursts, calls, summary = trace.read_tables("run")
    exp = expected_bursts()
    assert trace.resources == {"n_appl": 1, "n_tasks": 2, "n_threads": 3, "n_nodes": 1,
                               "duration_ns": exp["end_ns"].max()}  # from the first to the last event
    assert trace.started_at is not None  # the otf2 writer records the wall-clock start
    assert list(summary.counters) == sorted(["PAPI_TOT_INS", "PAPI_TOT_CYC", "FP_ENERGY", "PAPI_L1_DCM", "NEXT_CNT"])
    got = bursts.select(exp.columns).sort("task", "thread", "burst_seq")
    exp = exp.sort("task", "thread", "burst_seq")
    assert_frame_equal(got, exp, check_dtypes=False)
    assert (bursts["run_id"] == "run").all() and bursts["cpu"].is_null().all()


def test_written_trace_calls_and_messages_read_back_exactly(synthetic):
    _, calls, summary = Otf2Trace(synthetic).read_tables("run")
    cols = [
        "task",
        "call_seq",
        "mpi_call",
        "mpi_kind",
        "bytes_sent",
        "bytes_recv",
        "peer",
        "n_messages",
        "comm",
        "root",
        "tag",
    ]
    got = calls.select(cols).rows()
    world = 0
    assert got == [
        (1, 0, "MPI_Init", "other", 0, 0, None, 0, None, None, None),
        (1, 1, "MPI_Send", "point_to_point", 1024, 0, 2, 1, world, None, 5),
        (1, 2, "MPI_Isend", "point_to_point", 2048, 0, 2, 1, world, None, 6),
        (1, 3, "MPI_Wait", "point_to_point", 0, 0, None, 0, None, None, None),
        (1, 4, "MPI_Allreduce", "collective", 8, 8, None, 0, world, None, None),
        (1, 5, "MPI_Bcast", "collective", 64, 0, None, 0, world, 0, None),
        (1, 6, "MPI_Finalize", "other", 0, 0, None, 0, None, None, None),
        (2, 0, "MPI_Init", "other", 0, 0, None, 0, None, None, None),
        (2, 1, "MPI_Recv", "point_to_point", 0, 1024, 1, 1, world, None, 5),
        (2, 2, "MPI_Irecv", "point_to_point", 0, 2048, 1, 1, None, None, 6),  # the logical receive
        (2, 3, "MPI_Wait", "point_to_point", 0, 0, None, 0, world, None, None),
        (2, 4, "MPI_Allreduce", "collective", 8, 8, None, 0, world, None, None),
        (2, 5, "MPI_Bcast", "collective", 0, 64, None, 0, world, 0, None),
        (2, 6, "MPI_Finalize", "other", 0, 0, None, 0, None, None, None),
    ]
    assert calls.filter(pl.col("mpi_call") == "MPI_Finalize")["duration_ns"].to_list() == [55, 55]
    assert (calls["duration_ns"].filter(calls["mpi_call"] != "MPI_Finalize") == 40).all()
    assert summary.messages.select("s_task", "r_task", "size", "tag").rows() == [(1, 2, 1024, 5), (1, 2, 2048, 6)]
    assert summary.n_records[3] == 5 and summary.n_records[4] == 4


def test_an_irecv_s_completion_is_the_call_that_completed_it(synthetic):
    """Rank 2's ``MPI_Irecv`` (call 2) posts the tag-6 receive, its ``MPI_Wait`` (call 3) holds the ``MpiIrecv``
    event that completed it: the message is received at the Irecv and completed by the Wait (the merge ties the
    burst after the completing call to the message). Before (otf2done18) the reader's messages had no completion
    time, and the Irecv was named the completing call too."""
    from synthtrace.tracelib.merge.messages import logical_messages

    _, calls, summary = Otf2Trace(synthetic).read_tables("run")
    wait = calls.filter((pl.col("task") == 2) & (pl.col("call_seq") == 3)).row(0, named=True)
    got = logical_messages(calls, summary.messages).sort("tag").select("tag", "r_call_seq", "c_call_seq").rows()
    assert got == [(5, 1, 1), (6, 2, 3)]  # the blocking MPI_Recv completes itself
    ends = summary.message_ends.select("r_call_seq", "c_call_seq").rows()  # as ingest stores them
    assert ends == [(1, 1), (2, 3)]
    recv, irecv = summary.messages.sort("tag").select("r_time_ns", "r_phys_ns").rows()
    assert recv[1] == recv[0] and irecv[0] < wait["start_ns"] < irecv[1] < wait["end_ns"]  # the MpiIrecv's time


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 8, 13])
def test_chunk_size_changes_nothing(synthetic, chunk):
    ref_b, ref_c, ref_s = Otf2Trace(synthetic).read_tables("r")
    b, c, s = Otf2Trace(synthetic, chunk_events=chunk).read_tables("r")
    assert_frame_equal(b.select(ref_b.columns), ref_b)
    assert_frame_equal(c, ref_c)
    assert_frame_equal(s.messages, ref_s.messages)


@pytest.fixture(scope="module")
def mpi_variant(tmp_path_factory) -> Path:
    from testing.otf2_variants import mpi

    return mpi(tmp_path_factory.mktemp("otf2_mpi")).anchor


@pytest.mark.parametrize("which", ["ping-pong-otf2", "ping-pong-otf2-papi", "mpi variant", "synthetic"])
def test_messages_paired_a_group_of_receiving_tasks_at_a_time_are_the_whole_runs(which, mpi_variant, synthetic,
                                                                                  monkeypatch, tmp_path):
    """issue 23: the records are kept in buckets of receiving tasks, spilled to disk, and paired a group of
    receiving tasks at a time (a 319 MB archive held and paired all its 3 M records at once: 1.2 GB); one receiving
    task per group, or the records spilled at every chunk into 3 buckets (sub-communicators, probes and Mrecv,
    persistent sends, Irecv requests completed out of order), gives the whole run's messages and calls."""
    from synthtrace.tracelib.formats.otf2 import messages

    anchor = {"mpi variant": mpi_variant, "synthetic": synthetic}.get(which) or TRACES / "otf2" / which / "traces.otf2"
    ref_b, ref_c, ref_s = Otf2Trace(anchor).read_tables("r")
    assert ref_s.messages.height > 0
    monkeypatch.setattr(messages, "MATCH_ROWS", 1)
    b, c, s = Otf2Trace(anchor).read_tables("r")
    assert_frame_equal(s.messages, ref_s.messages)
    assert_frame_equal(c, ref_c)
    assert_frame_equal(b, ref_b)
    # the records kept in 3 buckets of receiving tasks, written to the spill folder at every chunk of 5 events
    monkeypatch.setattr(messages, "P2P_BUCKETS", 3)
    monkeypatch.setattr(messages, "P2P_HOLD_BYTES", 1)
    spill, spilled_to = tmp_path / "spill", []  # each spill's folder (the files are deleted once read back)
    spill_records = messages._Parts._spill
    monkeypatch.setattr(messages._Parts, "_spill", lambda parts: spilled_to.append(parts.folder)
                        or spill_records(parts))
    stream = Otf2Trace(anchor, chunk_events=5).read("r", spill=spill)
    bursts = pl.concat([p.frame for p in stream if p.table == "bursts"], how="diagonal_relaxed")
    assert len(spilled_to) >= 2 and set(spilled_to) == {spill / "p2p"}
    assert_frame_equal(stream.summary.messages, ref_s.messages)
    assert_frame_equal(stream.summary.calls.collect(), ref_c)
    assert_frame_equal(bursts.select(ref_b.columns), ref_b)


@pytest.mark.parametrize("which", ["ping-pong-otf2", "ping-pong-otf2-papi", "mpi variant", "synthetic"])
def test_spilled_calls_place_their_messages_a_part_at_a_time(which, mpi_variant, synthetic, monkeypatch, tmp_path):
    """issue 23 (OTF2 ingest memory): the calls of an archive that spilled them (read location by location, so in
    (thread, start) order) get their messages placed, and the calls holding their ends gathered, a part of calls at
    a time: no placement sees every call's span at once, no gathering every call's call_seq and comm (a 2 GB
    archive's 20 M calls held 40 and 16 bytes each for them); the calls, their message columns, the messages and
    their ends are those of an in-memory read."""
    from synthtrace.tracelib.formats import bursts, call_store

    anchor = {"mpi variant": mpi_variant, "synthetic": synthetic}.get(which) or TRACES / "otf2" / which / "traces.otf2"

    def read(spill: Path | None) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
        stream = Otf2Trace(anchor, chunk_events=7).read("r", spill=spill)
        for _ in stream:
            pass
        s = stream.summary
        return s.calls.collect(), s.messages, s.message_ends

    calls, messages, ends = read(None)
    assert messages.height > 0 and ends["s_call_seq"].null_count() < ends.height
    seen: list[int] = []
    containing = bursts._containing_call

    def spy(ck, cs, ce, mk, mt):
        seen.append(ck.shape[0])
        return containing(ck, cs, ce, mk, mt)

    monkeypatch.setattr(call_store, "HOLD_BYTES", 0)
    monkeypatch.setattr(call_store, "SPILL_PART_BYTES", 0)  # a part per chunk of calls: messages cross parts
    monkeypatch.setattr(bursts, "_containing_call", spy)
    gathered: list[int] = []
    ends_of = call_store.message_ends
    monkeypatch.setattr(call_store, "message_ends", lambda spans, rows: gathered.append(spans.height) or ends_of(
        spans, rows))
    spilled = read(tmp_path / "_calls")
    assert len(seen) > 2 and max(seen) < calls.height, seen
    assert max(gathered, default=0) < calls.height, gathered
    for got, want in zip(spilled, (calls, messages, ends)):
        assert_frame_equal(got, want)


def test_placing_messages_a_part_at_a_time_is_placing_them_whole():
    """:func:`placed_rows_in_parts` gives :func:`placed_rows`' rows for calls cut into parts anywhere (also between
    calls that start at the same time, and into empty parts), for sends and receives at call boundaries, outside
    every call, before the first call and without a partner; calls out of (thread, start) order are left to
    :func:`placed_rows` (None)."""
    import numpy as np

    from synthtrace.tracelib.formats.bursts import placed_rows, placed_rows_in_parts
    from synthtrace.tracelib.thread_key import packed

    rng = np.random.default_rng(23)
    spans = []
    for thread in (1, 2, 3):
        starts = np.sort(rng.choice(np.arange(0, 4000, 10), 120, replace=True))  # repeated starts: calls alike
        spans.append((np.full(120, packed(np.array([1]), np.array([thread]), np.array([1]))[0]), starts,
                      starts + rng.integers(0, 15, 120)))
    ck, cs, ce = (np.concatenate(a) for a in zip(*spans))
    n = 300
    times = np.concatenate([cs[rng.integers(0, ck.size, n // 2)], rng.integers(-50, 4100, n - n // 2)])
    side = {"task": rng.integers(1, 4, n).astype(np.int32), "time": times.astype(np.int64)}
    messages = pl.DataFrame({
        "s_appl": np.ones(n, np.int32), "s_task": side["task"], "s_thread": np.ones(n, np.int32),
        "s_time_ns": side["time"], "r_appl": np.ones(n, np.int32), "r_task": rng.permutation(side["task"]),
        "r_thread": np.ones(n, np.int32), "r_time_ns": rng.permutation(side["time"])})
    messages = messages.with_columns(  # a tenth without a sender, another without a receiver
        *[pl.when(pl.int_range(pl.len()) % 10 == 0).then(None).otherwise(pl.col(c)).alias(c)
          for c in ("s_appl", "s_task", "s_thread", "s_time_ns")],
        *[pl.when(pl.int_range(pl.len()) % 10 == 1).then(None).otherwise(pl.col(c)).alias(c)
          for c in ("r_appl", "r_task", "r_thread", "r_time_ns")])
    whole = placed_rows(ck.copy(), cs.copy(), ce.copy(), messages)
    assert (whole[0] >= 0).sum() > n // 4 and (whole[0] < 0).sum() > n // 10
    for cuts in ([], [1], [50, 50, 51], [119, 120, 121, 240], list(range(0, ck.size, 7))):
        edges = [0, *cuts, ck.size]

        def parts(edges=edges):
            return ((ck[a:b].copy(), cs[a:b].copy(), ce[a:b].copy()) for a, b in zip(edges, edges[1:]))

        got = placed_rows_in_parts(parts, messages)
        for g, w in zip(got, whole):
            np.testing.assert_array_equal(g, w)
    swapped = [(ck[120:], cs[120:], ce[120:]), (ck[:120], cs[:120], ce[:120])]  # thread 2 before thread 1
    assert placed_rows_in_parts(lambda: iter(swapped), messages) is None


def test_grouped_pairing_keeps_self_communicators_and_sends_to_no_rank():
    from synthtrace.tracelib.formats.otf2.events import _IRECV, _IRECV_REQ, _ISEND, _RECV, _SEND
    from synthtrace.tracelib.formats.otf2.messages import _P2P_SCHEMA, match_messages

    # task, thread, kind, time, pos, peer rank, comm, tag, size, request; comm 9 is a self communicator
    p2p = pl.DataFrame([(1, 1, _SEND, 100, 1, 1, 0, 7, 64, 0), (2, 1, _RECV, 150, 1, 0, 0, 7, 64, 0),
                        (2, 1, _ISEND, 110, 2, 2, 0, 3, 8, 5), (3, 1, _IRECV_REQ, 90, 1, 0, 0, 0, 0, 44),
                        (3, 1, _IRECV, 170, 2, 1, 0, 3, 8, 44), (3, 1, _SEND, 200, 3, 0, 9, 1, 4, 0),
                        (3, 1, _RECV, 210, 4, 0, 9, 1, 4, 0), (1, 1, _SEND, 300, 2, 7, 0, 1, 2, 0)],
                       schema=_P2P_SCHEMA, orient="row")
    ranks = pl.DataFrame({"comm": [0, 0, 0], "rank": [0, 1, 2], "task": [1, 2, 3], "thread": [1, 1, 1]},
                         schema={"comm": pl.Int64, "rank": pl.Int64, "task": pl.Int32, "thread": pl.Int32})
    whole = match_messages(p2p, ranks, {9}, group_rows=100)
    assert whole.select("s_task", "s_time_ns", "r_task", "r_time_ns").rows() == [
        (1, 100, 2, 150), (1, 300, None, None), (2, 110, 3, 90), (3, 200, 3, 210)]
    assert_frame_equal(match_messages(p2p, ranks, {9}, group_rows=1), whole)


def _gather_records(senders: int = 12, steps: int = 40) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Point-to-point records of ``senders`` ranks sending to rank 0 every step (an Isend and a Send each; rank 0
    posts an Irecv per sender and completes them in reverse, then blocking receives, the last sender's by
    MPI_Mprobe + MPI_Mrecv), and the communicator's ranks."""
    from synthtrace.tracelib.formats.otf2 import messages
    from synthtrace.tracelib.formats.otf2.events import _IRECV, _IRECV_REQ, _ISEND, _MRECV, _PROBE, _RECV, _SEND

    rows = []
    pos = defaultdict(int)

    def record(task, kind, t, peer, tag, req):
        pos[task] += 1
        rows.append((task, 1, kind, t, pos[task], peer, 0, tag, 64, req))

    for k in range(steps):
        base = 10_000 * k
        for i in range(1, senders + 1):  # rank 0 posts a receive per sender, then completes them in reverse
            record(0, _IRECV_REQ, base + i, 0, 0, k * 100 + i)
        for i in range(1, senders + 1):
            record(i, _ISEND, base + 100 + i, 0, 7, 0)
            record(i, _SEND, base + 3000 + i, 0, 9, 0)
        for i in range(senders, 0, -1):
            record(0, _IRECV, base + 2000 + i, i, 7, k * 100 + i)
        for i in range(1, senders + 1):  # blocking receives, and the last sender's by MPI_Mprobe + MPI_Mrecv
            if i < senders:
                record(0, _RECV, base + 4000 + i, i, 9, 0)
            else:
                record(0, _PROBE, base + 4000 + i, i, 9, 10_000 + k)
                record(0, _MRECV, base + 4100 + i, 0, 0, 10_000 + k)
    p2p = pl.DataFrame(rows, schema=messages._P2P_SCHEMA, orient="row")
    ranks = pl.DataFrame({"comm": [0] * (senders + 1), "rank": list(range(senders + 1)),
                          "task": list(range(senders + 1))},
                         schema={"comm": pl.Int64, "rank": pl.Int64, "task": pl.Int32})
    return p2p, ranks


def test_a_task_receiving_from_every_rank_is_paired_a_share_of_its_senders_at_a_time(monkeypatch):
    """Attack 13 F8: the records were paired a group of whole receiving tasks at a time, so a run whose messages all
    go to one rank (master/worker, a gather written with point-to-point, an I/O rank) was paired in one piece: 1.5 GB
    for a 369 MB archive. Such a task's records are paired a group of sending tasks at a time, once its receives
    are resolved (each Irecv's request time, each Mrecv's probe): no piece is far over the group size, and the
    messages are those of the whole pairing (Irecvs completed in reverse order, blocking receives, an Mrecv)."""
    from synthtrace.tracelib.formats.otf2 import messages

    senders, steps = 12, 40
    p2p, ranks = _gather_records(senders, steps)
    whole = messages.match_messages(p2p, ranks, set(), group_rows=p2p.height)
    assert whole.height == 2 * senders * steps and whole["s_time_ns"].null_count() == 0
    assert whole["r_time_ns"].null_count() == 0
    irecvs = whole.filter(pl.col("tag") == 7).select("s_task", "r_time_ns").sort("s_task", "r_time_ns").rows()
    assert irecvs == sorted((i, 10_000 * k + i) for k in range(steps) for i in range(1, senders + 1))  # requests
    pieces: list[int] = []
    pairs = messages._pairs
    monkeypatch.setattr(messages, "_pairs", lambda lf, *a: pieces.append(lf.select(pl.len()).collect().item())
                        or pairs(lf, *a))
    assert_frame_equal(messages.match_messages(p2p, ranks, set(), group_rows=200), whole)
    assert len(pieces) > 1 and max(pieces) <= 2 * 200, pieces  # a group of whole senders: ~200 records


def test_a_big_receiver_s_spilled_records_are_parted_a_frame_at_a_time(monkeypatch, tmp_path):
    """Attack 14 (a gather to rank 0, 64 ranks, 199 MB: 1,022 MB of memory, ~2.4 MB per MB of archive): the records
    of a task receiving more than ``MATCH_ROWS`` were read back whole from the spill, copied, resolved and parted
    in memory. Its bucket is now parted a spilled frame at a time (sends by sending task, receives by request id),
    so neither the pairing nor the receives' look-ups ever see the task's records whole, and the messages are those
    of the whole pairing."""
    from synthtrace.tracelib.formats.otf2 import messages

    p2p, ranks = _gather_records(senders=12, steps=40)
    whole = messages.match_messages(p2p, ranks, set(), group_rows=p2p.height)
    monkeypatch.setattr(messages, "MATCH_ROWS", 200)
    monkeypatch.setattr(messages, "P2P_HOLD_BYTES", 1)  # every chunk spilled
    seen: dict[str, list[int]] = defaultdict(list)
    for name in ("_paired", "_resolved_receives"):
        real = getattr(messages, name)
        monkeypatch.setattr(messages, name, lambda frame, *a, _n=name, _f=real: seen[_n].append(frame.height)
                            or _f(frame, *a))
    pairs = messages._pairs
    monkeypatch.setattr(messages, "_pairs", lambda lf, *a: seen["_pairs"].append(lf.select(pl.len()).collect().item())
                        or pairs(lf, *a))
    records = messages.P2pRecords(ranks, set(), tmp_path / "a.otf2", tmp_path / "p2p")
    for _key, chunk in p2p.group_by("task", (pl.col("pos") - 1) // 50, maintain_order=True):  # as a reader does
        records.add(chunk)
    assert_frame_equal(records.matched(), whole)
    assert not list((tmp_path / "p2p").glob("*.parquet"))  # each spilled file deleted once read: disk stays flat
    to_rank_0 = p2p.filter((pl.col("task") == 0) | (pl.col("peer") == 0)).height
    assert to_rank_0 == p2p.height > 4 * 200
    assert max(seen["_pairs"]) <= 2 * 200 and max(seen["_resolved_receives"]) <= 2 * 200, dict(seen)
    assert not seen["_paired"], dict(seen)  # the big receiver's bucket is never paired whole


def test_streaming_parts_and_progress(synthetic):
    trace = Otf2Trace(synthetic, chunk_events=4)
    seen: list[int] = []
    parts = list(trace.read("r", progress=seen.append))
    assert len(parts) > 3
    evt_bytes = sum(p.stat().st_size for p in synthetic.with_suffix("").glob("*.evt"))
    assert sum(seen) == evt_bytes and all(n >= 0 for n in seen)
    files = trace.content_files()
    assert files[0] == synthetic and files[1] == synthetic.with_suffix(".def") and len(files) == 2 + 6


def test_mpi_kind_classes():
    assert mpi_kind("MPI_Waitall", None) == "point_to_point"
    assert mpi_kind("MPI_Iallreduce", None) == "collective"
    assert mpi_kind("MPI_Comm_split", None) == "other"
    assert mpi_kind("MPI_Foo", 25) == "collective"


# ---------------------------------------------------------------------------------------------- broken archives
def _copy(src: Path, dest: Path) -> Path:
    shutil.copytree(src.parent, dest)
    return dest / src.name


def _break(anchor: Path, how: str) -> Path:
    evt_dir = anchor.with_suffix("")
    if how == "no_def":
        anchor.with_suffix(".def").unlink()
    elif how == "no_folder":
        shutil.rmtree(evt_dir)
    elif how == "no_evt":
        (evt_dir / "1.evt").unlink()
    elif how == "no_local_def":
        (evt_dir / "0.def").unlink()
    elif how == "truncated_evt":
        f = evt_dir / "0.evt"
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    elif how == "truncated_def":
        f = anchor.with_suffix(".def")
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    elif how == "garbage_anchor":
        anchor.write_bytes(b"this is not an OTF2 anchor file\n")
    elif how == "empty_anchor":
        anchor.write_bytes(b"")
    elif how == "garbage_def":
        anchor.with_suffix(".def").write_bytes(b"\x03" + bytes(range(256)) * 4)
    elif how == "empty_evt":
        (evt_dir / "0.evt").write_bytes(b"")
    return anchor


BREAKS = ["no_def", "no_folder", "no_evt", "no_local_def", "truncated_evt", "truncated_def", "garbage_anchor",
          "empty_anchor", "garbage_def", "empty_evt"]


@pytest.mark.parametrize("how", BREAKS)
def test_broken_archive_gives_trace_format_error(synthetic, tmp_path, how):
    anchor = _break(_copy(synthetic, tmp_path / "broken"), how)
    with pytest.raises(TraceFormatError) as err:
        Otf2Trace(anchor).read_tables()
    assert isinstance(err.value, BadInputError) and err.value.exit_code == 2
    assert str(tmp_path / "broken") in str(err.value) and err.value.reason
    if how == "truncated_evt":
        assert isinstance(err.value, TruncatedTraceError) and err.value.path.endswith("0.evt")


def test_missing_anchor_and_folder_without_anchor(tmp_path):
    with pytest.raises(TraceFormatError, match="no such file"):
        Otf2Trace(tmp_path / "nothing.otf2")
    with pytest.raises(TraceFormatError, match="no single OTF2 anchor"):
        Otf2Trace(tmp_path)


def test_folder_is_read_through_its_anchor(synthetic):
    assert Otf2Trace(synthetic.parent).path == synthetic


@pytest.mark.parametrize("how", ["truncated_evt", "garbage_anchor", "no_evt"])
def test_ingest_of_broken_archive_exits_2_and_leaves_warehouse_alone(synthetic, tmp_path, run_cli, how):
    anchor = _break(_copy(synthetic, tmp_path / "broken"), how)
    wh = tmp_path / "wh"
    code, out, err = run_cli("ingest", anchor, "-w", wh)
    assert code == 2
    assert "error" in err and str(tmp_path / "broken") in err.replace("\n", "")
    assert not list((wh / "runs").glob("*")) if (wh / "runs").exists() else True


# ---------------------------------------------------------------------------------------------- units
def test_messages_match_in_order_and_keep_unmatched_halves():
    from synthtrace.tracelib.formats.otf2.events import _RECV, _SEND
    from synthtrace.tracelib.formats.otf2.messages import _P2P_SCHEMA, match_messages

    # task, thread, kind, time, pos, peer rank, comm, tag, size, request
    p2p = pl.DataFrame([(1, 1, _SEND, 100, 5, 1, 0, 7, 64, 0), (1, 1, _SEND, 120, 6, 1, 0, 7, 16, 0),
                        (1, 1, _SEND, 300, 9, 1, 0, 8, 32, 0),
                        (2, 1, _RECV, 150, 3, 0, 0, 7, 64, 0), (2, 1, _RECV, 180, 4, 0, 0, 7, 16, 0),
                        (2, 1, _RECV, 400, 8, 0, 0, 9, 8, 0)], schema=_P2P_SCHEMA, orient="row")
    ranks = pl.DataFrame({"comm": [0, 0], "rank": [0, 1], "task": [1, 2], "thread": [1, 1]},
                         schema={"comm": pl.Int64, "rank": pl.Int64, "task": pl.Int32, "thread": pl.Int32})
    m = match_messages(p2p, ranks, set())
    assert m.select("s_task", "s_time_ns", "r_task", "r_time_ns", "size", "tag").rows() == [
        (1, 100, 2, 150, 64, 7), (1, 120, 2, 180, 16, 7),  # same ranks, comm and tag: in order
        (1, 300, 2, None, 32, 8),  # a send nobody received
        (1, None, 2, 400, 8, 9),  # a receive without its send: the peer is still known
    ]


def test_records_out_of_time_order_are_taken_by_timestamp(tmp_path):
    """The OTF2 writer refuses a timestamp before the previous one, but clock-offset correction at read time can
    produce one: the reader then orders the chunk by (timestamp, record order) and says so."""
    from synthtrace.tracelib.formats.bursts import BurstAssembler
    from synthtrace.tracelib.formats.otf2.convert import _LocationConverter
    from synthtrace.tracelib.formats.otf2.events import _EventBuffer

    with otf2.writer.open(str(tmp_path / "t"), timer_resolution=10**9) as w:
        d = w.definitions
        g = d.location_group("MPI Rank 0", location_group_type=LocationGroupType.PROCESS,
                             system_tree_parent=d.system_tree_node("n"))
        loc = d.location("Master thread", type=LocationType.CPU_THREAD, group=g)
        d.region("main", region_role=RegionRole.FUNCTION, paradigm=Paradigm.USER)
        d.region("MPI_Barrier", region_role=RegionRole.BARRIER, paradigm=Paradigm.MPI)
        mc = d.metric_class([d.metric_member("PAPI_TOT_INS", "", MetricType.PAPI, MetricMode.ACCUMULATED_START,
                                             Type.UINT64, Base.DECIMAL, 0, "#")],
                            MetricOccurrence.SYNCHRONOUS_STRICT, RecorderKind.CPU)
        w.event_writer_from_location(loc).metric(0, mc, [0])
    trace = Otf2Trace(tmp_path / "t" / "traces.otf2")
    conv = _LocationConverter(trace.defs, trace.defs.locations[0], trace.path)
    buf = _EventBuffer()
    for kind, t, ref, pos in ((0, 10, 0, 1), (0, 100, 1, 3), (1, 200, 1, 5), (1, 300, 0, 7)):
        buf.r_kind.append(kind), buf.r_time.append(t), buf.r_ref.append(ref), buf.r_pos.append(pos)
    for t, value, pos in ((100, 100, 2), (200, 150, 4), (150, 120, 6), (300, 400, 8)):  # 150 comes late
        buf.m_time.append(t), buf.m_ref.append(0), buf.m_n.append(1), buf.m_pos.append(pos), buf.m_vals.append(value)
    batch, _, horizon = conv.convert(buf, final=True)
    h = pl.DataFrame({"appl": [1], "task": [1], "thread": [1], "time_ns": [horizon]},
                     schema={"appl": pl.Int32, "task": pl.Int32, "thread": pl.Int32, "time_ns": pl.Int64})
    bursts, calls = BurstAssembler("r").feed(batch, h)
    assert bursts.select("start_ns", "end_ns", "PAPI_TOT_INS").rows() == [(10, 100, 100), (200, 300, 250)]
    assert calls.select("mpi_call", "start_ns", "end_ns").rows() == [("MPI_Barrier", 100, 200)]
    assert conv.n_out_of_order == 1


@pytest.mark.parametrize("seed", range(30))
def test_mutated_archives_read_or_raise_trace_format_error(synthetic, tmp_path, seed):
    """Random byte changes or cuts in any file of the archive: the trace reads, or fails with TraceFormatError."""
    import random

    anchor = _copy(synthetic, tmp_path / "mutated")
    rnd = random.Random(seed)
    files = sorted(p for p in anchor.parent.rglob("*") if p.is_file())
    target = rnd.choice(files)
    data = bytearray(target.read_bytes())
    if rnd.random() < 0.3:
        data = data[: rnd.randrange(len(data))]
    else:
        for _ in range(rnd.randint(1, 6)):
            data[rnd.randrange(len(data))] = rnd.randrange(256)
    target.write_bytes(bytes(data))
    try:
        Otf2Trace(anchor).read_tables()
    except TraceFormatError as exc:
        assert exc.reason


def test_location_ending_inside_an_mpi_call(tmp_path):
    """A killed job: the last call has no Leave. Its burst stays (unnamed), the call is dropped with a warning."""
    with otf2.writer.open(str(tmp_path / "t"), timer_resolution=10**9) as w:
        d = w.definitions
        g = d.location_group("MPI Rank 0", location_group_type=LocationGroupType.PROCESS,
                             system_tree_parent=d.system_tree_node("n"))
        ev = w.event_writer_from_location(d.location("Master thread", type=LocationType.CPU_THREAD, group=g))
        main = d.region("main", region_role=RegionRole.FUNCTION, paradigm=Paradigm.USER)
        barrier = d.region("MPI_Barrier", region_role=RegionRole.BARRIER, paradigm=Paradigm.MPI)
        mc = d.metric_class([d.metric_member("PAPI_TOT_INS", "", MetricType.PAPI, MetricMode.ACCUMULATED_START,
                                             Type.UINT64, Base.DECIMAL, 0, "#")],
                            MetricOccurrence.SYNCHRONOUS_STRICT, RecorderKind.CPU)
        ev.program_begin(100, "killed", [])
        ev.metric(150, mc, [10])
        ev.enter(150, main)
        for t0 in (200, 400):
            ev.metric(t0, mc, [t0])
            ev.enter(t0, barrier)
            if t0 == 200:
                ev.metric(t0 + 50, mc, [t0 + 5])
                ev.leave(t0 + 50, barrier)
    for chunk in (1, 3, 100):
        trace = Otf2Trace(tmp_path / "t" / "traces.otf2", chunk_events=chunk)
        bursts, calls, summary = trace.read_tables()
        assert bursts.select("start_ns", "end_ns", "mpi_call", "PAPI_TOT_INS").rows() == [
            (0, 100, "MPI_Barrier", 200), (150, 300, None, 400 - 205)]
        assert calls.select("mpi_call", "start_ns", "end_ns").rows() == [("MPI_Barrier", 100, 150)]
        assert any("ends inside MPI_Barrier" in w for w in summary.warnings)


def _damaged_definitions(dest: Path, seed: int) -> Path:
    """A copy of the real PAPI ping-pong whose global definitions have bytes flipped (seeded)."""
    import random

    shutil.copytree(PING_PAPI.parent, dest)
    for f in dest.rglob("*"):
        f.chmod(0o755 if f.is_dir() else 0o644)
    rnd = random.Random(seed)
    defs = dest / "traces.def"
    data = bytearray(defs.read_bytes())
    for _ in range(rnd.choice([1, 3, 20])):
        data[rnd.randrange(len(data))] = rnd.randrange(256)
    defs.write_bytes(bytes(data))
    return dest / "traces.otf2"


def test_damaged_definitions_are_one_line_each_without_library_tracebacks(tmp_path, run_cli):
    """Garbage in the definitions makes the otf2 wheel's callbacks raise (undecodable names, duplicate
    definitions); the wheel writes their tracebacks to stderr. Two such archives in one call: one line each."""
    anchors = [_damaged_definitions(tmp_path / f"a{k}", k) for k in (0, 2, 6, 7)]
    code, out, err = run_cli("ingest", *anchors, "-w", tmp_path / "wh", "--experiment", "x")
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and "Traceback" not in err and "unhandled python exception" not in err, err
    assert len(lines) == len(anchors) and all(ln.startswith("error: ") for ln in lines), err
    assert any("UnicodeDecodeError" in ln for ln in lines) and any("Duplicate definition" in ln for ln in lines), err


@real
def test_an_event_file_of_another_run_is_refused_not_read_silently(tmp_path, run_cli):
    """The PAPI run's rank-0 event file copied into the plain run's archive (a re-run into one folder, an rsync of
    the wrong job) was read under this archive's region numbers: exit 0 and rank 0's 20 MPI calls gone, no word
    (attack 7 A14). Its Metric records name a metric this archive does not define: one line naming the file."""
    dest = tmp_path / "mixed"
    shutil.copytree(PING.parent, dest)
    shutil.copy(PING_PAPI.parent / "traces" / "0.evt", dest / "traces" / "0.evt")
    code, out, err = run_cli("ingest", dest, "-w", tmp_path / "wh")
    assert code == 2 and err.strip().splitlines() == [
        f"error: {dest / 'traces' / '0.evt'}: an event (rank 0) names metric 0, which the archive's definitions do "
        "not define: an event file of another run?"], err
    assert not (tmp_path / "wh").exists()
