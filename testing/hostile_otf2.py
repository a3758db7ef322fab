"""Small OTF2 archives (2 ranks, a send/receive and a barrier) with one semantic defect each, written with the
``otf2`` wheel: what an attacker or a broken measurement plugin writes and a reader must refuse or rename.

``DEFECTS``: ``none`` (a valid archive), ``nan_metric`` / ``inf_metric`` (a double metric reading NaN / inf),
``huge_metric`` (a double reading beyond 2^63), ``peer_outside`` (a send to rank 99 of a world of 2),
``timestamp_2_63`` (an event at tick >= 2^63 on a clock whose offset is 0), ``key_metric`` (a metric named
``task``), ``high_offset`` (a valid archive whose clock offset is beyond 2^63 ticks: a TSC after long uptime).
Written on request only: ``msg_bytes_wrap`` (two messages of 2^62 bytes sent by one call and received by one call).
"""
from __future__ import annotations

import random
import shutil
from pathlib import Path

from otf2.enums import MetricMode, MetricOccurrence, Paradigm, RecorderKind, RegionRole, Type

from testing.otf2_variants import _Archive

DEFECTS = ("none", "nan_metric", "inf_metric", "huge_metric", "peer_outside", "timestamp_2_63", "key_metric",
           "high_offset")
#: defects added by the second attack rerun (fresh mutations: not drawn by the suite's fuzz test until they hold)
FRESH_DEFECTS = ("leave_unmatched", "unclosed", "recv_peer_outside", "msg_len_huge",
                 "metric_int64_min", "many_metrics", "empty_location", "deep_nesting", "metric_name_dup",
                 "region_name_control", "resolution_one", "resolution_huge", "tag_huge", "self_message")
#: defects the reader must refuse (the others are read: renamed, or valid)
REFUSED = frozenset({"nan_metric", "inf_metric", "huge_metric", "peer_outside", "timestamp_2_63"})
_READINGS = {"nan_metric": float("nan"), "inf_metric": float("inf"), "huge_metric": 1e30, "key_metric": 5}


def write(root: Path, defect: str, *, peer: int = 99, reading: float | None = None) -> Path:
    """The archive with ``defect`` under ``root``; returns its anchor (``traces.otf2``)."""
    resolution = {"resolution_one": 1, "resolution_huge": 2**62}.get(defect, 10**9)
    a = _Archive(root, ranks=2, threads=1, offset=2**63 + 10 if defect == "high_offset" else 0, resolution=resolution)
    a.mpi("MPI_Send", "MPI_Recv", "MPI_Barrier")
    if defect == "region_name_control":
        a.region("evil\nerror: forged\x1b[31m", RegionRole.FUNCTION, Paradigm.COMPILER, "x.c", 1)
    extra = None
    if defect in _READINGS:
        name, vtype = ("task", Type.UINT64) if defect == "key_metric" else ("energy", Type.DOUBLE)
        extra = a.d.metric_class([a.member(name, MetricMode.ACCUMULATED_START, vtype)],
                                 MetricOccurrence.SYNCHRONOUS_STRICT, RecorderKind.CPU)
    elif defect in ("metric_int64_min", "many_metrics", "metric_name_dup"):
        n = {"many_metrics": 400, "metric_name_dup": 2}.get(defect, 1)
        names = ["PAPI_TOT_INS"] * 2 if defect == "metric_name_dup" else [f"m{k}" for k in range(n)]
        extra = a.d.metric_class([a.member(nm, MetricMode.ABSOLUTE_POINT, Type.INT64) for nm in names],
                                 MetricOccurrence.SYNCHRONOUS_STRICT, RecorderKind.CPU)
    for rank in range(2):
        e = a.events(rank)
        if defect == "empty_location" and rank == 1:
            continue
        e.program_begin(0, "hostile", [])
        e.enter(0, "main")
        if defect == "region_name_control":
            e.enter(10, "evil\nerror: forged\x1b[31m")
            e.leave(20, "evil\nerror: forged\x1b[31m")
        if extra is not None and defect in _READINGS:
            e.ev.metric(a.ticks(0), extra, [0 if defect == "key_metric" else 0.0])
        elif extra is not None:
            e.ev.metric(a.ticks(0), extra, [-(2**63) if defect == "metric_int64_min" else k
                                            for k in range(len(extra.members))])
        call = "MPI_Send" if rank == 0 else "MPI_Recv"
        e.enter(100, call, ins=100)
        length = {"msg_len_huge": 2**64 - 1, "msg_bytes_wrap": 2**62}.get(defect, 64)
        tag = 2**32 - 1 if defect == "tag_huge" else 7
        for at in (110, 120) if defect == "msg_bytes_wrap" else (110,):
            if rank == 0:
                e.mpi_send(at, peer if defect == "peer_outside" else 0 if defect == "self_message" else 1, a.world,
                           tag, length)
            else:
                e.mpi_recv(at, 99 if defect == "recv_peer_outside" else 0, a.world, tag, length)
        e.leave(200, call, ins=5)
        if extra is not None and defect in _READINGS:
            value = reading if reading is not None and defect != "key_metric" else _READINGS[defect]
            e.ev.metric(a.ticks(250), extra, [value])
        if defect == "leave_unmatched":
            e.leave(260, "MPI_Barrier")
        e.enter(300, "MPI_Barrier", ins=50)
        if defect == "timestamp_2_63" and rank == 1:  # the location's last records, at tick 2^63 + 5
            e.ev.leave(2**63 + 5, a.regions["MPI_Barrier"])
            e.ev.leave(2**63 + 5, a.regions["main"])
            e.ev.program_end(2**63 + 5, 0)
            continue
        e.leave(400, "MPI_Barrier", ins=5)
        if defect == "unclosed":
            continue
        if defect == "deep_nesting":  # 3,000 nested regions (as a recursive code or a broken plugin writes)
            for k in range(3000):
                e.ev.enter(a.ticks(410 + k), a.regions["main"])
            for k in range(3000):
                e.ev.leave(a.ticks(3500 + k), a.regions["main"])
        end = 7000 if defect == "deep_nesting" else 500
        e.leave(end, "main")
        e.program_end(end, 0)
    return a.close()


# ------------------------------------------------------------------------ damaged chunks of a multi-chunk archive
#: damages of the events or definitions of a two-rank archive whose events files span several chunks (added by
#: session 25's rerun for what landed since session 22: the chunk order and time checks, cut files, ``--salvage``);
#: drawn with the fresh ones by the attack bench only
CHUNK_DEFECTS = ("chunk_copied", "chunks_swapped", "chunk_headers_kept", "evt_cut", "chunk_header_garbled",
                 "evt_byte_flipped", "evt_zero_run", "evt_appended_copy", "evt_empty", "def_cut", "local_def_cut")
CHUNK = 256 * 1024  # OTF2's smallest events chunk (bytes)
_CHUNK_HEADER = 18  # bytes of an events chunk's header (token, first and last event numbers)
_CHUNK_STEPS = 14_000  # messages of rank 0 to rank 1: four chunks or so per events file


def chunked(root: Path) -> Path:
    """Rank 0 sending :data:`_CHUNK_STEPS` messages to rank 1, each rank's events in chunks of :data:`CHUNK`
    bytes; returns the anchor."""
    a = _Archive(root, ranks=2, threads=1, chunk_bytes=CHUNK)
    a.mpi("MPI_Send", "MPI_Recv")
    for rank in range(2):
        e = a.events(rank)
        e.program_begin(0, "chunked", [])
        e.enter(0, "main")
        call = "MPI_Send" if rank == 0 else "MPI_Recv"
        for k in range(_CHUNK_STEPS):
            at = 1000 + 100 * k
            e.enter(at, call, ins=100)
            if rank == 0:
                e.mpi_send(at + 10, 1, a.world, 7, 64)
            else:
                e.mpi_recv(at + 15, 0, a.world, 7, 64)
            e.leave(at + 20, call, ins=5)
        end = 1000 + 100 * _CHUNK_STEPS
        e.leave(end, "main")
        e.program_end(end, 0)
    return a.close()


def chunk_damaged(root: Path, defect: str, rnd: random.Random, source: Path) -> Path:
    """A copy under ``root`` of the archive :func:`chunked` wrote at ``source`` (written there on first use), with
    one :data:`CHUNK_DEFECTS` ``defect`` at a random place of a random rank's files; returns its anchor."""
    if not (source / "traces.otf2").exists():
        chunked(source)
    shutil.copytree(source, root)
    rank = rnd.randrange(2)
    target = root / ("traces.def" if defect == "def_cut" else f"traces/{rank}.def" if defect == "local_def_cut"
                     else f"traces/{rank}.evt")
    data = bytearray(target.read_bytes())
    whole = len(data) // CHUNK  # chunks of full size
    if defect in ("def_cut", "local_def_cut", "evt_cut"):
        data = data[:rnd.randrange(1, len(data))]
    elif defect == "chunk_copied":
        i = rnd.randrange(whole - 1)
        data[(i + 1) * CHUNK:(i + 2) * CHUNK] = data[i * CHUNK:(i + 1) * CHUNK]
    elif defect in ("chunks_swapped", "chunk_headers_kept"):
        i, j = sorted(rnd.sample(range(whole), 2))
        skip = _CHUNK_HEADER if defect == "chunk_headers_kept" else 0  # the headers chain as written
        a, b = bytes(data[i * CHUNK + skip:(i + 1) * CHUNK]), bytes(data[j * CHUNK + skip:(j + 1) * CHUNK])
        data[i * CHUNK + skip:(i + 1) * CHUNK], data[j * CHUNK + skip:(j + 1) * CHUNK] = b, a
    elif defect == "chunk_header_garbled":
        at = rnd.randrange(-(-len(data) // CHUNK)) * CHUNK
        for _ in range(rnd.randint(1, 4)):
            data[at + rnd.randrange(_CHUNK_HEADER)] = rnd.randrange(256)
    elif defect == "evt_byte_flipped":
        data[rnd.randrange(len(data))] ^= 1 << rnd.randrange(8)
    elif defect == "evt_zero_run":
        at, n = rnd.randrange(len(data)), rnd.randint(1, 4096)
        data[at:at + n] = bytes(len(data[at:at + n]))
    elif defect == "evt_appended_copy":
        data = data + data
    else:  # evt_empty
        data = bytearray()
    target.write_bytes(bytes(data))
    return root / "traces.otf2"
