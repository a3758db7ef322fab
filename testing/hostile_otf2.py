"""Small OTF2 archives (2 ranks, a send/receive and a barrier) with one semantic defect each, written with the
``otf2`` wheel: what an attacker or a broken measurement plugin writes and a reader must refuse or rename.

``DEFECTS``: ``none`` (a valid archive), ``nan_metric`` / ``inf_metric`` (a double metric reading NaN / inf),
``huge_metric`` (a double reading beyond 2^63), ``peer_outside`` (a send to rank 99 of a world of 2),
``timestamp_2_63`` (an event at tick >= 2^63 on a clock whose offset is 0), ``key_metric`` (a metric named
``task``), ``high_offset`` (a valid archive whose clock offset is beyond 2^63 ticks: a TSC after long uptime).
"""
from __future__ import annotations

from pathlib import Path

from otf2.enums import MetricMode, MetricOccurrence, RecorderKind, Type

from testing.otf2_variants import _Archive

DEFECTS = ("none", "nan_metric", "inf_metric", "huge_metric", "peer_outside", "timestamp_2_63", "key_metric",
           "high_offset")
#: defects the reader must refuse (the others are read: renamed, or valid)
REFUSED = frozenset({"nan_metric", "inf_metric", "huge_metric", "peer_outside", "timestamp_2_63"})
_READINGS = {"nan_metric": float("nan"), "inf_metric": float("inf"), "huge_metric": 1e30, "key_metric": 5}


def write(root: Path, defect: str, *, peer: int = 99, reading: float | None = None) -> Path:
    """The archive with ``defect`` under ``root``; returns its anchor (``traces.otf2``)."""
    a = _Archive(root, ranks=2, threads=1, offset=2**63 + 10 if defect == "high_offset" else 0)
    a.mpi("MPI_Send", "MPI_Recv", "MPI_Barrier")
    extra = None
    if defect in _READINGS:
        name, vtype = ("task", Type.UINT64) if defect == "key_metric" else ("energy", Type.DOUBLE)
        extra = a.d.metric_class([a.member(name, MetricMode.ACCUMULATED_START, vtype)],
                                 MetricOccurrence.SYNCHRONOUS_STRICT, RecorderKind.CPU)
    for rank in range(2):
        e = a.events(rank)
        e.program_begin(0, "hostile", [])
        e.enter(0, "main")
        if extra is not None:
            e.ev.metric(a.ticks(0), extra, [0 if defect == "key_metric" else 0.0])
        call = "MPI_Send" if rank == 0 else "MPI_Recv"
        e.enter(100, call, ins=100)
        if rank == 0:
            e.mpi_send(110, peer if defect == "peer_outside" else 1, a.world, 7, 64)
        else:
            e.mpi_recv(110, 0, a.world, 7, 64)
        e.leave(200, call, ins=5)
        if extra is not None:
            value = reading if reading is not None and defect != "key_metric" else _READINGS[defect]
            e.ev.metric(a.ticks(250), extra, [value])
        e.enter(300, "MPI_Barrier", ins=50)
        if defect == "timestamp_2_63" and rank == 1:  # the location's last records, at tick 2^63 + 5
            e.ev.leave(2**63 + 5, a.regions["MPI_Barrier"])
            e.ev.leave(2**63 + 5, a.regions["main"])
            e.ev.program_end(2**63 + 5, 0)
            continue
        e.leave(400, "MPI_Barrier", ins=5)
        e.leave(500, "main")
        e.program_end(500, 0)
    return a.close()
