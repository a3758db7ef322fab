"""The MPI call catalogue: every reader and the writer ask it what an MPI call is.

One entry per MPI function: its kind (``point_to_point`` | ``collective`` | ``other``, the values of the
``mpi_kind`` column), whether it blocks, its role, and Extrae's Paraver value where Extrae traces it.

Kinds follow the MPI-4.0 standard: every operation of the point-to-point chapters (3, blocking and
nonblocking sends and receives, probes, the wait/test families, persistent requests, cancellation; 4,
partitioned communication) is ``point_to_point``; every collective operation of chapter 6 and the neighbourhood
collectives of chapter 8, blocking (``MPI_Allreduce``), nonblocking (``MPI_Iallreduce``) and persistent
(``MPI_Allreduce_init``), including the scans and reduce-scatters, is ``collective``. Everything else
(start-up, communicators, groups, topologies, datatypes, one-sided, I/O, and the local helpers ``MPI_Get_count``,
``MPI_Buffer_attach``, ``MPI_Op_create``, ``MPI_Reduce_local``) is ``other``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal


MpiKind = Literal["point_to_point", "collective", "other"]
MPI_KINDS: tuple[MpiKind, ...] = ("point_to_point", "collective", "other")


@dataclass(frozen=True)
class MpiCall:
    """One MPI function.

    ``role``: for point-to-point calls ``send``, ``recv``, ``sendrecv``, ``probe``, ``wait``, ``test``, ``init``
    (creates a persistent or partitioned request), ``start``, ``ready`` (marks a partition), ``cancel`` or
    ``free``; for collectives ``barrier``, ``one_to_all``, ``all_to_one``, ``all_to_all``, ``scan`` or
    ``neighbor``; None for other calls. ``blocking``: the call returns only when its operation completed (or,
    for a probe, matched); False for nonblocking, persistent-init and local calls.
    """

    name: str
    kind: MpiKind
    blocking: bool = False
    role: str | None = None
    extrae_value: int | None = None


#: Extrae's Paraver values of MPI calls (``MPI_EventEncoding.h``, value = position in this tuple + 1): the value
#: of the entry event, under event types 50000001-50000005.
EXTRAE_ORDER: tuple[str, ...] = (
    "Send", "Recv", "Isend", "Irecv", "Wait", "Waitall", "Bcast", "Barrier", "Reduce", "Allreduce",  # 1-10
    "Alltoall", "Alltoallv", "Gather", "Gatherv", "Scatter", "Scatterv", "Allgather", "Allgatherv", "Comm_rank",
    "Comm_size", "Comm_create", "Comm_dup", "Comm_split", "Comm_group", "Comm_free", "Comm_remote_group",  # -26
    "Comm_remote_size", "Comm_test_inter", "Comm_compare", "Scan", "Init", "Finalize", "Bsend", "Ssend", "Rsend",
    "Ibsend", "Issend", "Irsend", "Test", "Cancel", "Sendrecv", "Sendrecv_replace", "Cart_create", "Cart_shift",
    "Cart_coords", "Cart_get", "Cart_map", "Cart_rank", "Cart_sub", "Cartdim_get", "Dims_create", "Graph_get",
    "Graph_map", "Graph_create", "Graph_neighbors", "Graphdims_get", "Graph_neighbors_count", "Topo_test",  # -58
    "Waitany", "Waitsome", "Probe", "Iprobe", "Win_create", "Win_free", "Put", "Get", "Accumulate", "Win_fence",
    "Win_start", "Win_complete", "Win_post", "Win_wait", "Win_test", "Win_lock", "Win_unlock", "Pack", "Unpack",
    "Op_create", "Op_free", "Reduce_scatter", "Attr_delete", "Attr_get", "Attr_put", "Group_difference",  # -84
    "Group_excl", "Group_free", "Group_incl", "Group_intersection", "Group_rank", "Group_range_excl",
    "Group_range_incl", "Group_size", "Group_translate_ranks", "Group_union", "Group_compare", "Intercomm_create",
    "Intercomm_merge", "Keyval_free", "Keyval_create", "Abort", "Error_class", "Errhandler_create",  # -102
    "Errhandler_free", "Errhandler_get", "Error_string", "Errhandler_set", "Get_processor_name", "Initialized",
    "Wtick", "Wtime", "Address", "Bsend_init", "Buffer_attach", "Buffer_detach", "Request_free", "Recv_init",
    "Send_init", "Get_count", "Get_elements", "Pack_size", "Rsend_init", "Ssend_init", "Start", "Startall",  # -124
    "Testall", "Testany", "Test_cancelled", "Testsome", "Type_commit", "Type_contiguous", "Type_extent",
    "Type_free", "Type_hindexed", "Type_hvector", "Type_indexed", "Type_lb", "Type_size", "Type_struct", "Type_ub",
    "Type_vector", "File_open", "File_close", "File_read", "File_read_all", "File_write", "File_write_all",  # -146
    "File_read_at", "File_read_at_all", "File_write_at", "File_write_at_all", "Comm_spawn", "Comm_spawn_multiple",
    "Request_get_status", "Ireduce", "Iallreduce", "Ibarrier", "Ibcast", "Ialltoall", "Ialltoallv", "Iallgather",
    "Iallgatherv", "Igather", "Igatherv", "Iscatter", "Iscatterv", "Ireduce_scatter", "Iscan",  # -167
    "Reduce_scatter_block", "Ireduce_scatter_block", "Alltoallw", "Ialltoallw", "Get_accumulate",  # -172
)

#: point-to-point functions of MPI-4.0 chapters 3 and 4: name -> (role, blocking)
_POINT_TO_POINT: dict[str, tuple[str, bool]] = {
    **dict.fromkeys(("Send", "Bsend", "Ssend", "Rsend"), ("send", True)),
    **dict.fromkeys(("Isend", "Ibsend", "Issend", "Irsend"), ("send", False)),
    "Recv": ("recv", True), "Mrecv": ("recv", True), "Irecv": ("recv", False), "Imrecv": ("recv", False),
    "Sendrecv": ("sendrecv", True), "Sendrecv_replace": ("sendrecv", True),
    "Isendrecv": ("sendrecv", False), "Isendrecv_replace": ("sendrecv", False),
    "Probe": ("probe", True), "Mprobe": ("probe", True), "Iprobe": ("probe", False), "Improbe": ("probe", False),
    **dict.fromkeys(("Wait", "Waitall", "Waitany", "Waitsome"), ("wait", True)),
    **dict.fromkeys(("Test", "Testall", "Testany", "Testsome", "Request_get_status",
                     "Parrived"), ("test", False)),
    **dict.fromkeys(("Send_init", "Bsend_init", "Ssend_init", "Rsend_init", "Recv_init", "Psend_init",
                     "Precv_init"), ("init", False)),
    "Start": ("start", False), "Startall": ("start", False),
    **dict.fromkeys(("Pready", "Pready_range", "Pready_list"), ("ready", False)),
    "Cancel": ("cancel", False), "Test_cancelled": ("cancel", False), "Request_free": ("free", False),
}

#: collective operations of MPI-4.0 chapters 6 and 8 (blocking form) -> role; each also exists nonblocking
#: (``MPI_I...``) and persistent (``..._init``)
_COLLECTIVE: dict[str, str] = {
    "Barrier": "barrier", "Bcast": "one_to_all", "Scatter": "one_to_all", "Scatterv": "one_to_all",
    "Gather": "all_to_one", "Gatherv": "all_to_one", "Reduce": "all_to_one",
    **dict.fromkeys(("Allgather", "Allgatherv", "Alltoall", "Alltoallv", "Alltoallw", "Allreduce",
                     "Reduce_scatter_block", "Reduce_scatter"), "all_to_all"),
    "Scan": "scan", "Exscan": "scan",
    **dict.fromkeys(("Neighbor_allgather", "Neighbor_allgatherv", "Neighbor_alltoall", "Neighbor_alltoallv",
                     "Neighbor_alltoallw"), "neighbor"),
}


def _build() -> dict[str, MpiCall]:
    value = {f"MPI_{n}": i + 1 for i, n in enumerate(EXTRAE_ORDER)}
    calls = {name: MpiCall(name, "other", extrae_value=v) for name, v in value.items()}
    for short, (role, blocking) in _POINT_TO_POINT.items():
        name = f"MPI_{short}"
        calls[name] = MpiCall(name, "point_to_point", blocking, role, value.get(name))
    for short, role in _COLLECTIVE.items():
        for name, blocking in ((f"MPI_{short}", True), (f"MPI_I{short.lower()}", False), (f"MPI_{short}_init", False)):
            calls[name] = MpiCall(name, "collective", blocking, role, value.get(name))
    return calls


#: the catalogue: MPI function name (``MPI_Allreduce``) -> its entry
MPI_CALLS: dict[str, MpiCall] = _build()
_BY_LOWER: dict[str, MpiCall] = {name.lower(): c for name, c in MPI_CALLS.items()}
#: Extrae's Paraver value -> call name
EXTRAE_NAMES: dict[int, str] = {c.extrae_value: name for name, c in MPI_CALLS.items() if c.extrae_value is not None}


def mpi_call(name: str) -> MpiCall | None:
    """The catalogue entry of an MPI function, its name matched without case (``MPI_ALLREDUCE``, ``mpi_allreduce``
    as Fortran tools write it); None for a name the catalogue does not know."""
    return _BY_LOWER.get(name.lower())


#: the name a reader gives a call its trace does not name (a Paraver value without a .pcf label)
PLACEHOLDER = re.compile(r"MPI_call_(\d+)")


def mpi_kind(name: str) -> MpiKind | None:
    """``point_to_point`` | ``collective`` | ``other`` of an MPI function; None for a name the catalogue does not
    list (the caller then has its format's own hint: the Paraver event type, the OTF2 region role)."""
    call = mpi_call(name)
    return call.kind if call is not None else None


def mpi_kind_of(name: str) -> MpiKind:
    """The kind of an MPI function, ``other`` for a name the catalogue does not know."""
    return mpi_kind(name) or "other"


def calls_with(*, roles: tuple[str, ...], blocking: bool | None = None) -> tuple[str, ...]:
    """Names of the catalogue's calls of the given roles (and blocking mode, when given), sorted."""
    return tuple(sorted(n for n, c in MPI_CALLS.items()
                        if c.role in roles and (blocking is None or c.blocking == blocking)))
