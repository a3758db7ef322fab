"""The MPI call catalogue (synthtrace.tracelib.domain.mpi_calls): kinds per the MPI-4.0 standard, and the Paraver and
OTF2 readers agreeing on the kind of the same call."""
from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from synthtrace.tracelib.domain.mpi_calls import MPI_CALLS, mpi_call, mpi_kind, mpi_kind_of
from synthtrace.tracelib.formats.otf2 import Otf2Trace
from synthtrace.tracelib.formats.paraver.reader import ParaverTrace
from testing.traces import JACOBI, LULESH_A, LULESH_B, PRIME, TRACES

PING = TRACES / "otf2" / "ping-pong-otf2" / "traces.otf2"

# MPI-4.0, written out from the standard's chapters (not from the catalogue's tables).
# Chapter 3, point-to-point communication
P2P_BLOCKING = ["MPI_Send", "MPI_Bsend", "MPI_Ssend", "MPI_Rsend", "MPI_Recv", "MPI_Sendrecv",
                "MPI_Sendrecv_replace", "MPI_Probe", "MPI_Mprobe", "MPI_Mrecv", "MPI_Wait", "MPI_Waitany",
                "MPI_Waitall", "MPI_Waitsome"]
P2P_NONBLOCKING = ["MPI_Isend", "MPI_Ibsend", "MPI_Issend", "MPI_Irsend", "MPI_Irecv", "MPI_Isendrecv",
                   "MPI_Isendrecv_replace", "MPI_Iprobe", "MPI_Improbe", "MPI_Imrecv", "MPI_Test", "MPI_Testany",
                   "MPI_Testall", "MPI_Testsome", "MPI_Request_get_status", "MPI_Request_free", "MPI_Cancel",
                   "MPI_Test_cancelled", "MPI_Send_init", "MPI_Bsend_init", "MPI_Ssend_init", "MPI_Rsend_init",
                   "MPI_Recv_init", "MPI_Start", "MPI_Startall",
                   # chapter 4, partitioned point-to-point communication
                   "MPI_Psend_init", "MPI_Precv_init", "MPI_Pready", "MPI_Pready_range", "MPI_Pready_list",
                   "MPI_Parrived"]
# Chapter 6, collective communication, and chapter 8's neighbourhood collectives: each blocking, nonblocking
# and (MPI-4.0) persistent
COLLECTIVES = ["Barrier", "Bcast", "Gather", "Gatherv", "Scatter", "Scatterv", "Allgather", "Allgatherv",
               "Alltoall", "Alltoallv", "Alltoallw", "Reduce", "Allreduce", "Reduce_scatter_block", "Reduce_scatter",
               "Scan", "Exscan", "Neighbor_allgather", "Neighbor_allgatherv", "Neighbor_alltoall",
               "Neighbor_alltoallv", "Neighbor_alltoallw"]
COLL_BLOCKING = [f"MPI_{c}" for c in COLLECTIVES]
COLL_NONBLOCKING = [f"MPI_I{c.lower()}" for c in COLLECTIVES] + [f"MPI_{c}_init" for c in COLLECTIVES]
# not communication: environment, communicators, topologies' constructors, one-sided, I/O, local helpers
OTHER = ["MPI_Init", "MPI_Finalize", "MPI_Comm_rank", "MPI_Comm_split", "MPI_Comm_dup", "MPI_Cart_create",
         "MPI_Dist_graph_create", "MPI_Win_fence", "MPI_Put", "MPI_File_read_all", "MPI_Get_count",
         "MPI_Buffer_attach", "MPI_Op_create", "MPI_Reduce_local", "MPI_Wtime"]


@pytest.mark.parametrize(("names", "kind", "blocking"), [
    (P2P_BLOCKING, "point_to_point", True), (P2P_NONBLOCKING, "point_to_point", False),
    (COLL_BLOCKING, "collective", True), (COLL_NONBLOCKING, "collective", False)])
def test_every_communication_call_of_mpi_4_is_classified_per_the_standard(names, kind, blocking):
    wrong = {n: (c.kind, c.blocking) if (c := mpi_call(n)) else None for n in names}
    assert {n: v for n, v in wrong.items() if v != (kind, blocking)} == {}


def test_calls_that_do_not_communicate_are_other():
    assert {n: mpi_kind_of(n) for n in OTHER} == dict.fromkeys(OTHER, "other")


def test_names_match_without_case_and_unknown_names_are_unknown():
    assert mpi_kind("MPI_IALLREDUCE") == mpi_kind("mpi_iallreduce") == "collective"
    assert mpi_kind("MPI_Foo") is None


def test_extrae_values_are_extraes():
    """Values of Extrae's MPI_EventEncoding.h, as real .pcf files list them."""
    values = {n: c.extrae_value for n, c in MPI_CALLS.items() if c.extrae_value is not None}
    assert len(set(values.values())) == len(values)  # one call per value
    assert {n: values[n] for n in ("MPI_Send", "MPI_Barrier", "MPI_Reduce", "MPI_Allreduce", "MPI_Init",
                                   "MPI_Testall", "MPI_Iallreduce", "MPI_Ibarrier", "MPI_Alltoallw")} == {
        "MPI_Send": 1, "MPI_Barrier": 8, "MPI_Reduce": 9, "MPI_Allreduce": 10, "MPI_Init": 31, "MPI_Testall": 125,
        "MPI_Iallreduce": 155, "MPI_Ibarrier": 156, "MPI_Alltoallw": 170}


@pytest.mark.parametrize("prv", [LULESH_A, LULESH_B, PRIME, JACOBI])
def test_real_paraver_calls_get_the_catalogue_kind(prv):
    _, calls, _ = ParaverTrace(prv).read_tables("r")
    if not calls.height:
        pytest.skip("no MPI calls in this trace")
    kinds = dict(calls.select("mpi_call", "mpi_kind").unique().iter_rows())
    assert kinds == {n: mpi_kind(n) for n in kinds}


def _one_thread_trace(folder: Path, names: list[str], etype: int) -> Path:
    """A Paraver trace of one thread calling each of ``names`` once, every call under event type ``etype`` (a
    tool grouping its calls differently from Extrae: the kind must come from the call, not the type)."""
    lines = [f"#Paraver (01/01/20 at 00:00):{100 * (len(names) + 1)}_ns:1(1):1:1(1:1),0"]
    for i in range(len(names)):
        t = 100 * i
        lines += [f"1:1:1:1:1:{t}:{t + 50}:1", f"2:1:1:1:1:{t + 50}:{etype}:{i + 1}",
                  f"2:1:1:1:1:{t + 90}:{etype}:0"]
    prv = folder / "calls.prv"
    prv.write_text("\n".join(lines) + "\n")
    values = "\n".join(f"{i + 1}   {n}" for i, n in enumerate(names))
    (folder / "calls.pcf").write_text(f"EVENT_TYPE\n9   {etype}    MPI Other\nVALUES\n0   End\n{values}\n\n")
    return prv


def test_paraver_and_otf2_readers_agree_on_every_mpi_region_of_a_real_archive(tmp_path):
    """Score-P defines 200+ MPI regions in a real archive; for every one the catalogue lists (every communication
    call), the OTF2 reader classifies it by name (its region role is a fallback for unlisted names), and so does the
    Paraver reader, whatever event type the call comes under (the type is its fallback)."""
    defs = Otf2Trace(PING).defs
    otf2_kinds = {defs.region_names[i]: defs.region_kind[i] for i in range(len(defs.region_names))
                  if defs.region_is_mpi[i]}
    assert len(otf2_kinds) > 200
    otf2_kinds = {n: k for n, k in otf2_kinds.items() if mpi_call(n) is not None}
    assert len(otf2_kinds) > 150
    names = sorted(otf2_kinds)
    for etype in (50_000_001, 50_000_003):
        folder = tmp_path / str(etype)
        folder.mkdir()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # no .row beside the trace
            _, calls, _ = ParaverTrace(_one_thread_trace(folder, names, etype)).read_tables("r")
        paraver_kinds = dict(calls.select("mpi_call", "mpi_kind").iter_rows())
        assert paraver_kinds == otf2_kinds
    assert {otf2_kinds[n] for n in ("MPI_Iallreduce", "MPI_Exscan", "MPI_Ibarrier", "MPI_Ineighbor_alltoall")} == {
        "collective"}
    assert {otf2_kinds[n] for n in ("MPI_Waitall", "MPI_Testsome", "MPI_Start", "MPI_Mrecv")} == {"point_to_point"}
