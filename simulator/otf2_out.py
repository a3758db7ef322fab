"""A simulated run written as an OTF2 archive laid out as Score-P writes one (issue 22, mergeacc18).

Score-P writes each location's events from its own start: per MPI call a user region named by its call site
around the MPI region (the call site a reader finds), PAPI counters read at every Enter and Leave
(``ACCUMULATED_START``), and no message records: a send is an ``MpiSend``/``MpiIsend`` event in the sender's call,
a receive an ``MpiRecv`` event, or an ``MpiIrecvRequest`` in the ``MPI_Irecv`` and an ``MpiIrecv`` in the call that
completed it, paired by request id. A reader matches the halves of a message from both locations' events. A
location whose trace started late (tracing turned on late, its first events lost) has no events before that time,
while its partners' halves of the messages it exchanged before are there.

Only what the merge's campaigns use is written: one thread per rank, ``MPI_COMM_WORLD`` and duplicates of it
(point-to-point messages only), blocking collectives.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from synthtrace.simulator.mpi_exec import WORLD
from synthtrace.tracelib.domain.mpi_calls import MPI_CALLS
from synthtrace.tracelib.errors import BadInputError
from synthtrace.tracelib.formats.paraver.writer import SITE_FULL



def write_otf2(root: Path, bursts: pl.DataFrame, calls: pl.DataFrame, msgs: pl.DataFrame, counters: list[str],
               traced_from: dict[int, int] | None = None) -> Path:
    """Write one run (the simulator's tables: ``bursts`` with ``counters``, ``calls``, ``msgs`` with logical and
    physical times and communicator) as an OTF2 archive in ``root``; returns its anchor (``root/traces.otf2``).
    ``traced_from``: task (1-based) -> the time (ns) its trace starts: its bursts and calls must already start
    there, and its halves of the messages before are left out (its partners' halves stay)."""
    import otf2
    from otf2.enums import (Base, CollectiveOp, GroupType, LocationGroupType, LocationType, MetricMode,
                            MetricOccurrence, MetricType, Paradigm, RecorderKind, RegionRole, Type)

    if bursts.get_column("thread").max() != 1:
        raise BadInputError("the OTF2 output writes one thread per rank")
    ranks = int(bursts.get_column("task").max())
    starts = traced_from or {}
    # blocking collectives the archive can record: the catalogue's whose name OTF2 has an operation for
    collectives = {n: getattr(CollectiveOp, n[4:].upper()) for n, c in MPI_CALLS.items()
                   if c.kind == "collective" and c.blocking and hasattr(CollectiveOp, n[4:].upper())}
    root = Path(root)
    with otf2.writer.open(str(root), timer_resolution=10**9) as w:
        d = w.definitions
        node = d.system_tree_node("node0")
        groups = [d.location_group(f"MPI Rank {r}", location_group_type=LocationGroupType.PROCESS,
                                   system_tree_parent=node) for r in range(ranks)]
        locs = [d.location("Master thread", type=LocationType.CPU_THREAD, group=g) for g in groups]
        d.group("MPI_COMM_WORLD locations", group_type=GroupType.COMM_LOCATIONS, paradigm=Paradigm.MPI,
                members=locs)
        world = d.comm("MPI_COMM_WORLD", d.group("world", group_type=GroupType.COMM_GROUP, paradigm=Paradigm.MPI,
                                                 members=list(range(ranks))))
        # duplicates of the world (MPI_Comm_dup) the messages name, by the simulator's communicator id
        comm_of = {WORLD: world} | {c: d.comm(f"MPI_COMM_WORLD dup {c}", world.group, parent=world)
                                    for c in sorted(set(msgs.get_column("comm").to_list()) - {WORLD})}
        regions: dict[str, object] = {}

        def region(name: str, mpi: bool) -> object:
            if name not in regions:
                if mpi:
                    role = (RegionRole.COLL_ALL2ALL if name in collectives else RegionRole.POINT2POINT
                            if "send" in name.lower() or "recv" in name.lower() else RegionRole.FUNCTION)
                    regions[name] = d.region(name, region_role=role, paradigm=Paradigm.MPI)
                else:
                    m = SITE_FULL.match(name)
                    kw = {"source_file": m["file"], "begin_line_number": int(m["line"])} if m else {}
                    regions[name] = d.region(m["func"] if m else name, region_role=RegionRole.FUNCTION,
                                             paradigm=Paradigm.COMPILER, **kw)
            return regions[name]

        members = [d.metric_member(c, "", MetricType.PAPI, MetricMode.ACCUMULATED_START, Type.UINT64, Base.DECIMAL,
                                   0, "#") for c in counters]
        papi = d.metric_class(members, MetricOccurrence.SYNCHRONOUS_STRICT, RecorderKind.CPU)
        ends = _message_events(calls, msgs, starts)
        for task in range(1, ranks + 1):
            ev = w.event_writer_from_location(locs[task - 1])
            b = bursts.filter(pl.col("task") == task).sort("start_ns")
            c = calls.filter(pl.col("task") == task).sort("start_ns")
            e = ends.filter(pl.col("task") == task).sort("call", "time_ns")
            counts = np.cumsum(b.select(counters).to_numpy().astype(np.int64), axis=0)
            by_call: dict[int, list[tuple]] = {}
            for row in e.iter_rows(named=True):
                by_call.setdefault(row["call"], []).append(row)
            t0 = int(b.get_column("start_ns").min())
            ev.program_begin(t0, "sim", [])
            ev.metric(t0, papi, [0] * len(counters))
            for i, call in enumerate(c.iter_rows(named=True)):
                s, x = int(call["start_ns"]), int(call["end_ns"])
                reading = counts[i].tolist()  # after burst i, which the call closes
                site = call["call_site"] or call["mpi_call"]
                ev.enter(s, region(site, False))
                ev.metric(s, papi, reading)
                ev.enter(s, region(call["mpi_call"], True))
                op = collectives.get(call["mpi_call"])
                if op is not None:
                    ev.mpi_collective_begin(s)
                for m in by_call.get(i, []):
                    t = min(max(int(m["time_ns"]), s), x)
                    peer, tag, size, req, kind = m["peer"] - 1, m["tag"], m["size"], m["req"], m["kind"]
                    comm = comm_of[m["comm"]]
                    if kind == "irecv_request":
                        ev.mpi_irecv_request(t, req)
                    elif kind in ("isend", "irecv"):
                        (ev.mpi_isend if kind == "isend" else ev.mpi_irecv)(t, peer, comm, tag, size, req)
                    else:
                        (ev.mpi_send if kind == "send" else ev.mpi_recv)(t, peer, comm, tag, size)
                if op is not None:
                    ev.mpi_collective_end(x, op, world,
                                          call["root"] if call["root"] is not None else 0xFFFFFFFF,
                                          int(call["bytes_sent"] or 0), int(call["bytes_recv"] or 0))
                ev.metric(x, papi, reading)
                ev.leave(x, region(call["mpi_call"], True))
                ev.leave(x, region(site, False))
            end = int(b.get_column("end_ns").max())
            ev.metric(end, papi, counts[-1].tolist())
            ev.program_end(end, 0)
    return root / "traces.otf2"


def _message_events(calls: pl.DataFrame, msgs: pl.DataFrame, starts: dict[int, int]) -> pl.DataFrame:
    """Per message half traced, its events: task, ``call`` (index among the task's calls by start), time_ns, kind
    (send, isend, recv, irecv_request, irecv), peer task, tag, size, request id, communicator. A half on a task whose
    trace starts after it (or in a call before that) is left out."""
    c = (calls.sort("task", "start_ns")
         .select(pl.col("task").cast(pl.Int32), "start_ns", "end_ns", "mpi_call",
                 pl.int_range(pl.len()).over("task").alias("call")))
    m = msgs.with_row_index("req").with_columns(pl.col("req").cast(pl.Int64))

    first = pl.col("task").replace_strict(starts, default=None, return_dtype=pl.Int64)

    def at(task: str, time: str, peer: str) -> pl.DataFrame:
        """The halves of ``m`` ended at ``time`` on ``task``, each in the call of its task holding that time."""
        return (m.select(pl.col(task).cast(pl.Int32).alias("task"), pl.col(time).cast(pl.Int64).alias("time_ns"),
                         pl.col(peer).cast(pl.Int32).alias("peer"), "tag", "size", "req", "comm")
                .sort("time_ns")
                .join_asof(c.sort("start_ns"), left_on="time_ns", right_on="start_ns", by="task",
                           strategy="backward", check_sortedness=False))

    def traced(e: pl.DataFrame) -> pl.DataFrame:
        """The halves of ``e`` traced: a late task's half outside its first traced call (a completion at the exit
        of the call before its trace began, e.g. a Waitall ending where its first burst starts) is lost."""
        if starts:
            e = e.filter(first.is_null() | ((pl.col("time_ns") >= first) & pl.col("call").is_not_null()))
        if e.filter(pl.col("call").is_null() | (pl.col("time_ns") > pl.col("end_ns"))).height:
            raise BadInputError("a message end outside any MPI call: not written as OTF2")
        return e

    send = traced(at("s_task", "s_time_ns", "r_task")).with_columns(
        pl.when(pl.col("mpi_call").is_in(["MPI_Isend", "MPI_Start"])).then(pl.lit("isend"))
        .otherwise(pl.lit("send")).alias("kind"))
    posted = at("r_task", "r_time_ns", "s_task")
    nonblocking = posted.filter(pl.col("mpi_call") == "MPI_Irecv").get_column("req").implode()
    req = traced(posted).filter(pl.col("req").is_in(nonblocking)).with_columns(pl.lit("irecv_request").alias("kind"))
    done = traced(at("r_task", "r_phys_ns", "s_task")).with_columns(
        pl.when(pl.col("req").is_in(nonblocking)).then(pl.lit("irecv")).otherwise(pl.lit("recv")).alias("kind"))
    cols = ["task", "call", "time_ns", "kind", "peer", "tag", "size", "req", "comm"]
    return pl.concat([x.select(cols) for x in (send, req, done)])
