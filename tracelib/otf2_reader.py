"""Reads a Score-P OTF2 archive into the same tidy burst and MPI-call tables as the Paraver reader (DESIGN §4).

Model of an OTF2 run (``Otf2Trace``):

- ``appl`` is 1; ``task`` is the MPI rank + 1 (rank from the MPI ``COMM_LOCATIONS`` group, else the order of the
  process location groups); ``thread`` numbers the CPU-thread locations of a rank from 1 in definition order.
  Other locations (GPU streams, metric recorders) are skipped with a warning.
- **computation burst**: per location, the time outside MPI regions: from the location's first event (its
  ``ProgramBegin``) to the ``Enter`` of the first MPI region, between the ``Leave`` of one outermost MPI region and
  the ``Enter`` of the next, and from the last ``Leave`` to the location's last event. A region is MPI when its
  paradigm is MPI or its name starts with ``MPI_``; MPI regions nested in MPI regions belong to the outer call.
- **counters**: Metric records (Score-P attaches them to Enter/Leave). Per metric member, ``ACCUMULATED_START``
  values are running totals from the start of the measurement (baseline 0), other accumulated and absolute values
  are readings that get differenced, ``*_LAST`` / ``RELATIVE_POINT`` values already count the interval since the
  previous reading and ``*_NEXT`` values the interval up to the next one. Every value becomes a count at the time
  that closes its interval; a burst's counter is the sum of the counts inside it (start < t <= end).
- **MPI calls**: outermost MPI regions, with name, kind (Extrae's classes: point-to-point incl. waits and tests,
  collective, other), collective sizes / root / communicator from ``MpiCollectiveEnd``, the communicator of
  point-to-point records, and ``call_site`` = the innermost enclosing non-MPI region (``name (file:line)``).
- **messages**: ``MpiSend``/``MpiIsend`` matched with ``MpiRecv``/``MpiIrecv`` per (sender rank, receiver rank,
  communicator, tag) in order (MPI's non-overtaking rule); an ``MpiIrecv`` counts at the time of its
  ``MpiIrecvRequest`` (the logical receive, as Extrae records it). Unmatched halves are kept with one side NULL.

Times are integer ns from the trace's global offset (clock properties: resolution in ticks/s). Records of a
location are taken in (timestamp, record order). Events are read per location through the OTF2 C library with
thin ctypes callbacks registered directly on its event reader (the ``otf2`` wheel's own event objects make a bare
loop over the events ~3x slower than this whole reader, see benchmarks/results/otf2.md), ``chunk_events`` at a
time, and handed to the :class:`~synthtrace.tracelib.bursts.BurstAssembler` chunk by chunk, so the tables' memory is bounded
by the chunk size; only the point-to-point records wait for the end (message halves live on two locations).
"""
from __future__ import annotations

import contextlib
import ctypes
import io
import os
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import polars as pl

from synthtrace.tracelib.bursts import (INTERVAL_SCHEMA, MESSAGE_SCHEMA, MPI_EVENT_SCHEMA, SAMPLE_SCHEMA, BurstAssembler,
                             ReadSummary, RecordBatch)
from synthtrace.tracelib.errors import TraceFormatError, TruncatedTraceError
from synthtrace.tracelib.paraver.header import MAX_ID
from synthtrace.tracelib.paraver.reader import ParaverTrace

DEFAULT_CHUNK_EVENTS = 200_000
_NEVER = 2**62  # a horizon beyond any trace (same meaning as in tracelib.bursts)
_UNDEFINED_U32 = 0xFFFFFFFF
_UNDEFINED_U64 = 0xFFFFFFFFFFFFFFFF
_ROOT_SPECIAL = 0xFFFFFFFD  # collective roots from here up are OTF2's THIS_GROUP / SELF / NONE, not ranks
_FILE_MAGIC = b"\x03"  # first byte of every OTF2 file (anchor, definitions, events)

# region record kinds
_ENTER, _LEAVE, _BEGIN, _END = 0, 1, 2, 3
# point-to-point record kinds
_SEND, _ISEND, _RECV, _IRECV, _IRECV_REQ = 0, 1, 2, 3, 4
# how a metric member's values become counts: running total with 0 at the start / reading to difference /
# count since the previous reading / count until the next reading
_CUM_ZERO, _CUM, _DELTA_LAST, _DELTA_NEXT = 0, 1, 2, 3

_COLLECTIVE_ROLES = {15, 16, 23, 24, 25, 26}  # BARRIER, IMPLICIT_BARRIER, COLL_ONE2ALL/ALL2ONE/ALL2ALL/OTHER
_P2P_ROLE = 28
_COLLECTIVE_NAMES = {
    "barrier", "bcast", "reduce", "allreduce", "alltoall", "alltoallv", "alltoallw", "gather", "gatherv",
    "scatter", "scatterv", "allgather", "allgatherv", "reduce_scatter", "reduce_scatter_block", "scan", "exscan",
    "neighbor_allgather", "neighbor_allgatherv", "neighbor_alltoall", "neighbor_alltoallv", "neighbor_alltoallw",
}
_P2P_PREFIXES = ("send", "bsend", "ssend", "rsend", "isend", "ibsend", "issend", "irsend", "recv", "irecv",
                 "mrecv", "imrecv", "sendrecv", "wait", "test", "probe", "iprobe", "mprobe", "improbe", "start",
                 "request_", "cancel")


def mpi_kind(name: str, role: int | None) -> str:
    """Extrae's class of an MPI call: ``point_to_point`` (sends, receives, waits, tests), ``collective`` or ``other``."""
    short = name[4:].lower() if name.upper().startswith("MPI_") else name.lower()
    base = short[1:] if short.startswith("i") and short[1:] in _COLLECTIVE_NAMES else short
    if role in _COLLECTIVE_ROLES or base in _COLLECTIVE_NAMES:
        return "collective"
    if role == _P2P_ROLE or short.startswith(_P2P_PREFIXES):
        return "point_to_point"
    return "other"


# ---------------------------------------------------------------------------------------------------- errors
_ERROR_CB = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint64, ctypes.c_char_p,
                             ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)


@contextlib.contextmanager
def _captured_otf2_errors() -> Iterator[list[str]]:
    """Collect the OTF2 C library's error messages instead of letting it print them to stderr."""
    from _otf2.Config import conf  # noqa: PLC0415 - the C library, loaded with the otf2 wheel

    messages: list[str] = []

    def on_error(_user, _file, _line, function, _code, fmt, _va):  # noqa: ANN001 - ctypes callback
        text = (fmt or b"").decode("utf-8", "replace").replace("%s", "?").strip()
        if text:
            messages.append(text)
        return _code

    callback = _ERROR_CB(on_error)
    register = conf.lib["OTF2_Error_RegisterCallback"]
    register.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    register.restype = ctypes.c_void_p
    previous = register(ctypes.cast(callback, ctypes.c_void_p), None)
    try:
        yield messages
    finally:
        register(previous, None)


@contextlib.contextmanager
def _python_callback_errors(messages: list[str]) -> Iterator[None]:
    """The otf2 wheel's definition callbacks write the traceback of an exception they meet (an undecodable
    name, a duplicate definition in a damaged archive) to stderr: capture it, keep its last line as a reason."""
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            yield
    finally:
        lines = [ln.strip() for ln in captured.getvalue().splitlines() if ln.strip()]
        if lines:
            messages.append(lines[-1][:200])


def _library_reason(exc: BaseException, messages: list[str]) -> str:
    """A one-line reason from the otf2 library's exception and the C library's messages."""
    parts = [m for m in messages[-3:] if m]
    text = "; ".join(dict.fromkeys(parts)) or str(exc) or type(exc).__name__
    return f"not a readable OTF2 archive ({text})"


# ---------------------------------------------------------------------------------------------------- definitions
@dataclass
class _Location:
    ref: int
    name: str
    task: int
    thread: int
    n_events: int
    evt_file: Path
    def_file: Path


@dataclass
class _Definitions:
    """What the reader needs from the global definitions, in plain Python / numpy form."""

    resolution: int  # timer ticks per second
    offset: int  # ticks at time 0
    trace_length: int  # ticks
    realtime_ns: int | None  # ns since the epoch at ``offset``
    locations: list[_Location]
    n_tasks: int
    n_nodes: int
    region_names: list[str]
    region_is_mpi: np.ndarray  # bool per region ref
    region_kind: list[str]  # MPI kind per region ref
    region_site: list[str | None]  # call-site label per region ref (non-MPI regions)
    member_names: list[str]  # one entry per metric member id
    member_mode: np.ndarray  # _CUM_ZERO / _CUM / _DELTA_LAST / _DELTA_NEXT per member id
    member_type: np.ndarray  # 0 signed, 1 unsigned, 2 floating point per member id
    metric_base: dict[int, int]  # metric ref -> first member id
    metric_count: dict[int, int]  # metric ref -> number of members
    comm_ranks: pl.DataFrame  # comm, rank, task, thread: who is rank r of communicator c
    self_comms: set[int]
    warnings: list[str] = field(default_factory=list)

    def to_ns(self, ticks: np.ndarray) -> np.ndarray:
        """Timer ticks (uint64) -> int64 ns from the global offset (floor)."""
        d = ticks.astype(np.int64) - np.int64(self.offset)
        res = self.resolution
        if res == 1_000_000_000:
            return d
        if res <= 9_000_000_000:  # exact integer arithmetic without overflow
            q, r = np.divmod(d, np.int64(res))
            return q * np.int64(1_000_000_000) + (r * np.int64(1_000_000_000)) // np.int64(res)
        return np.floor(d.astype(np.float64) * (1e9 / res)).astype(np.int64)

    def scalar_ns(self, ticks: int) -> int:
        return int(self.to_ns(np.array([ticks], dtype=np.uint64))[0])


def _metric_semantics(mode_value: int) -> int:
    value, timing = mode_value & 0x0F, mode_value & 0xF0
    if value == 0 and timing == 0x00:  # ACCUMULATED_START
        return _CUM_ZERO
    if timing == 0x30 and value != 1:  # ACCUMULATED_NEXT, RELATIVE_NEXT
        return _DELTA_NEXT
    if (value == 0 and timing == 0x20) or value == 2:  # ACCUMULATED_LAST, RELATIVE_POINT/LAST
        return _DELTA_LAST
    return _CUM  # ACCUMULATED_POINT and the ABSOLUTE_* readings


def _read_definitions(reader, anchor: Path) -> _Definitions:  # noqa: ANN001 - otf2.reader.Reader
    """Turn the otf2 wheel's definition registry into :class:`_Definitions` (raises TraceFormatError)."""
    from otf2.enums import GroupType, LocationType, Paradigm  # noqa: PLC0415 - with the wheel, like the reader

    defs = reader.definitions
    clock = defs.clock_properties
    if clock is None or not clock.timer_resolution:
        raise TraceFormatError(anchor, None, "OTF2 archive without clock properties (timer resolution)")
    warns: list[str] = []
    evt_dir = anchor.with_suffix("")

    # ranks: the MPI COMM_LOCATIONS group lists one location per rank, in rank order
    group_rank: dict[int, int] = {}
    for g in defs.groups:
        if g.group_type == GroupType.COMM_LOCATIONS and g.paradigm == Paradigm.MPI:
            for rank, loc in enumerate(g.members):
                group_rank.setdefault(loc.group._ref, rank)
            break
    cpu_locs = [loc for loc in defs.locations if loc.type in (LocationType.CPU_THREAD, LocationType.UNKNOWN)]
    skipped = len(list(defs.locations)) - len(cpu_locs)
    if skipped:
        warns.append(f"{anchor}: skipped {skipped} non-CPU locations (GPU streams, metric recorders)")
    process_groups = sorted({loc.group._ref for loc in cpu_locs})
    next_rank = max(group_rank.values(), default=-1) + 1
    for ref in process_groups:
        if ref not in group_rank:
            group_rank[ref] = next_rank
            next_rank += 1
    threads_seen: dict[int, int] = {}
    locations: list[_Location] = []
    loc_key: dict[int, tuple[int, int]] = {}
    for loc in sorted(cpu_locs, key=lambda x: x._ref):
        g = loc.group._ref
        threads_seen[g] = threads_seen.get(g, 0) + 1
        task, thread = group_rank[g] + 1, threads_seen[g]
        loc_key[loc._ref] = (task, thread)
        locations.append(_Location(loc._ref, str(loc.name), task, thread, int(loc.number_of_events or 0),
                                   evt_dir / f"{loc._ref}.evt", evt_dir / f"{loc._ref}.def"))
    locations.sort(key=lambda x: (x.task, x.thread))
    if locations and max(max(x.task, x.thread) for x in locations) > MAX_ID:
        raise TraceFormatError(anchor.with_suffix(".def"), None,
                               f"more than {MAX_ID} ranks or threads per rank: beyond what synthtrace can key")
    nodes = {loc.group.system_tree_parent._ref for loc in cpu_locs if loc.group.system_tree_parent is not None}

    regions = list(defs.regions)
    n_reg = max((r._ref for r in regions), default=-1) + 1
    names = [f"region_{i}" for i in range(n_reg)]
    is_mpi = np.zeros(max(n_reg, 1), dtype=bool)
    kinds = ["other"] * n_reg
    sites: list[str | None] = [None] * n_reg
    for r in regions:
        name = str(r.name or r.canonical_name or f"region_{r._ref}")
        names[r._ref] = name
        role = r.region_role.value if r.region_role is not None else None
        mpi = r.paradigm == Paradigm.MPI or name.upper().startswith("MPI_")
        is_mpi[r._ref] = mpi
        if mpi:
            kinds[r._ref] = mpi_kind(name, role)
        else:
            src = r.source_file
            sites[r._ref] = f"{name} ({os.path.basename(str(src))}:{r.begin_line_number})" if src else name

    member_names: list[str] = []
    member_mode: list[int] = []
    member_type: list[int] = []
    member_id: dict[int, int] = {}
    for m in defs.metric_members:
        member_id[m._ref] = len(member_names)
        member_names.append(str(m.name))
        member_mode.append(_metric_semantics(m.metric_mode.value))
        vt = m.value_type.value
        member_type.append(2 if vt in (9, 10) else 1 if vt in (1, 2, 3, 4) else 0)
        if (m.metric_mode.value & 0x0F) == 1:
            warns.append(f"{anchor}: metric {m.name} is an absolute value ({m.metric_mode.name}); "
                         "its per-burst counts are differences of readings")
    # a metric (class or instance) -> its members as a contiguous run of ids
    metric_base: dict[int, int] = {}
    metric_count: dict[int, int] = {}
    for metric in defs.metrics:
        cls = getattr(metric, "metric_class", None) or metric
        ids = [member_id[m._ref] for m in cls.members]
        if ids and ids == list(range(ids[0], ids[0] + len(ids))):
            metric_base[metric._ref], metric_count[metric._ref] = ids[0], len(ids)
        else:  # members not contiguous in definition order: append a private copy
            metric_base[metric._ref], metric_count[metric._ref] = len(member_names), len(ids)
            for i in ids:
                member_names.append(member_names[i])
                member_mode.append(member_mode[i])
                member_type.append(member_type[i])

    rows: list[tuple[int, int, int, int]] = []
    self_comms: set[int] = set()
    for comm in defs.comms:
        group = comm.group
        if group is None:
            continue
        if group.group_type == GroupType.COMM_SELF:
            self_comms.add(comm._ref)
            continue
        for rank, member in enumerate(group.members):
            ref = getattr(member, "_ref", None)
            if ref in loc_key:
                rows.append((comm._ref, rank, *loc_key[ref]))
    comm_ranks = pl.DataFrame(rows, schema={"comm": pl.Int64, "rank": pl.Int64, "task": pl.Int32,
                                            "thread": pl.Int32}, orient="row")
    realtime = clock.realtime_timestamp
    return _Definitions(
        resolution=int(clock.timer_resolution), offset=int(clock.global_offset),
        trace_length=int(clock.trace_length),
        realtime_ns=int(realtime) if realtime is not None and int(realtime) != _UNDEFINED_U64 else None,
        locations=locations, n_tasks=len(process_groups), n_nodes=len(nodes),
        region_names=names, region_is_mpi=is_mpi, region_kind=kinds, region_site=sites,
        member_names=member_names, member_mode=np.array(member_mode, dtype=np.int8),
        member_type=np.array(member_type, dtype=np.int8), metric_base=metric_base, metric_count=metric_count,
        comm_ranks=comm_ranks, self_comms=self_comms, warnings=warns)


def _validate_archive(anchor: Path) -> Path:
    """Check the files of an OTF2 archive before the C library sees them; returns the anchor path."""
    if anchor.is_dir():
        anchors = sorted(anchor.glob("*.otf2"))
        if len(anchors) != 1:
            raise TraceFormatError(anchor, None, "folder holds no single OTF2 anchor file (*.otf2)")
        anchor = anchors[0]
    if not anchor.is_file():
        raise TraceFormatError(anchor, None, "no such file")
    with open(anchor, "rb") as fh:
        head = fh.read(16)
    if len(head) < 8 or head[:1] != _FILE_MAGIC or head[2:6] != b"OTF2":
        raise TraceFormatError(anchor, None, "not an OTF2 anchor file (bad magic)")
    global_defs = anchor.with_suffix(".def")
    if not global_defs.is_file():
        raise TraceFormatError(global_defs, None, "missing global definitions file of the OTF2 archive")
    with open(global_defs, "rb") as fh:
        head = fh.read(16)
    if len(head) < 16 or head[:1] != _FILE_MAGIC:
        raise TraceFormatError(global_defs, None, "not an OTF2 definitions file (empty, truncated or bad magic)")
    if not anchor.with_suffix("").is_dir():
        raise TraceFormatError(anchor.with_suffix(""), None, "missing event folder of the OTF2 archive")
    return anchor


def _check_location_files(loc: _Location) -> None:
    for f, what in ((loc.def_file, "local definitions"), (loc.evt_file, "events")):
        if not f.is_file():
            raise TraceFormatError(f, None, f"missing {what} file of location {loc.ref} (rank {loc.task - 1})")
        with open(f, "rb") as fh:
            head = fh.read(16)
        if len(head) < 16 or head[:1] != _FILE_MAGIC:
            raise TraceFormatError(f, None, f"not an OTF2 {what} file (empty, truncated or bad magic)")


# ---------------------------------------------------------------------------------------------------- raw events
_u64, _u32, _u8, _vp = ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint8, ctypes.c_void_p
_BASE = (_u64, _u64, _u64, _vp, _vp)  # location, time, event position, user data, attribute list
_FP_REGION = ctypes.CFUNCTYPE(ctypes.c_int, *_BASE, _u32)  # Enter / Leave (region)
_FP_BEGIN = ctypes.CFUNCTYPE(ctypes.c_int, *_BASE, _u32, _u32, _vp)  # ProgramBegin
_FP_END = ctypes.CFUNCTYPE(ctypes.c_int, *_BASE, ctypes.c_int64)  # ProgramEnd
_FP_METRIC = ctypes.CFUNCTYPE(ctypes.c_int, *_BASE, _u32, _u8, _vp, ctypes.POINTER(_u64))  # values as raw 64-bit words
_FP_SEND = ctypes.CFUNCTYPE(ctypes.c_int, *_BASE, _u32, _u32, _u32, _u64)  # peer, comm, tag, length
_FP_ISEND = ctypes.CFUNCTYPE(ctypes.c_int, *_BASE, _u32, _u32, _u32, _u64, _u64)  # ... request id
_FP_IRECV_REQ = ctypes.CFUNCTYPE(ctypes.c_int, *_BASE, _u64)
_FP_COLL_END = ctypes.CFUNCTYPE(ctypes.c_int, *_BASE, _u8, _u32, _u32, _u64, _u64)  # op, comm, root, sent, recv


class _EventBuffer:
    """Column arrays filled by ctypes callbacks while the C library reads one location's events."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.r_kind, self.r_time, self.r_ref, self.r_pos = array("B"), array("Q"), array("I"), array("Q")
        self.m_time, self.m_ref, self.m_n, self.m_pos = array("Q"), array("I"), array("B"), array("Q")
        self.m_vals = array("Q")
        self.p_kind, self.p_time, self.p_peer, self.p_comm = array("B"), array("Q"), array("I"), array("I")
        self.p_tag, self.p_len, self.p_req, self.p_pos = array("I"), array("Q"), array("Q"), array("Q")
        self.c_time, self.c_comm, self.c_root, self.c_pos = array("Q"), array("I"), array("I"), array("Q")
        self.c_sent, self.c_recv = array("Q"), array("Q")

    def callbacks(self) -> dict[str, object]:
        """ctypes function pointers per OTF2 event type; keep them referenced while reading."""
        rk, rt, rr, rp = self.r_kind.append, self.r_time.append, self.r_ref.append, self.r_pos.append
        mt, mr, mn, mp, mv = self.m_time.append, self.m_ref.append, self.m_n.append, self.m_pos.append, self.m_vals.extend
        pk, pt, pe, pc = self.p_kind.append, self.p_time.append, self.p_peer.append, self.p_comm.append
        pg, pl_, pq, pp = self.p_tag.append, self.p_len.append, self.p_req.append, self.p_pos.append
        ct, cc, cr, cp = self.c_time.append, self.c_comm.append, self.c_root.append, self.c_pos.append
        cs, cv = self.c_sent.append, self.c_recv.append

        def enter(_l, t, pos, _u, _a, region):  # noqa: ANN001
            rk(_ENTER); rt(t); rr(region); rp(pos)  # noqa: E702
            return 0

        def leave(_l, t, pos, _u, _a, region):  # noqa: ANN001
            rk(_LEAVE); rt(t); rr(region); rp(pos)  # noqa: E702
            return 0

        def begin(_l, t, pos, _u, _a, _name, _n, _args):  # noqa: ANN001
            rk(_BEGIN); rt(t); rr(0); rp(pos)  # noqa: E702
            return 0

        def end(_l, t, pos, _u, _a, _status):  # noqa: ANN001
            rk(_END); rt(t); rr(0); rp(pos)  # noqa: E702
            return 0

        def metric(_l, t, pos, _u, _a, ref, n, _types, values):  # noqa: ANN001
            mt(t); mr(ref); mn(n); mp(pos); mv(values[:n])  # noqa: E702
            return 0

        def p2p(kind: int):
            def cb(_l, t, pos, _u, _a, peer, comm, tag, length, req=_UNDEFINED_U64):  # noqa: ANN001
                pk(kind); pt(t); pe(peer); pc(comm); pg(tag); pl_(length); pq(req); pp(pos)  # noqa: E702
                return 0
            return cb

        def irecv_request(_l, t, pos, _u, _a, req):  # noqa: ANN001
            pk(_IRECV_REQ); pt(t); pe(_UNDEFINED_U32); pc(_UNDEFINED_U32); pg(0); pl_(0); pq(req); pp(pos)  # noqa: E702
            return 0

        def coll_end(_l, t, pos, _u, _a, _op, comm, root, sent, recv):  # noqa: ANN001
            ct(t); cc(comm); cr(root); cs(sent); cv(recv); cp(pos)  # noqa: E702
            return 0

        return {"Enter": _FP_REGION(enter), "Leave": _FP_REGION(leave), "ProgramBegin": _FP_BEGIN(begin),
                "ProgramEnd": _FP_END(end), "Metric": _FP_METRIC(metric), "MpiSend": _FP_SEND(p2p(_SEND)),
                "MpiIsend": _FP_ISEND(p2p(_ISEND)), "MpiRecv": _FP_SEND(p2p(_RECV)),
                "MpiIrecv": _FP_ISEND(p2p(_IRECV)), "MpiIrecvRequest": _FP_IRECV_REQ(irecv_request),
                "MpiCollectiveEnd": _FP_COLL_END(coll_end)}


def _np(a: array, dtype: type) -> np.ndarray:
    return np.frombuffer(a, dtype=dtype) if len(a) else np.zeros(0, dtype=dtype)


def _clear(buf: _EventBuffer) -> None:
    """Empty the buffer's arrays in place (the callbacks hold their bound ``append`` methods)."""
    for name, value in vars(buf).items():
        if isinstance(value, array):
            del value[:]


# ---------------------------------------------------------------------------------------------------- conversion
_INF_POS = np.iinfo(np.int64).max


@dataclass
class _OpenCall:
    """An outermost MPI call whose Leave has not been read yet (-1 = unknown)."""

    time_ns: int
    ref: int
    site: int  # region ref of the innermost enclosing non-MPI region
    comm: int = -1
    root: int = -1
    sent: int = -1
    recv: int = -1


@dataclass
class _LocationState:
    """What one location carries from one chunk of events to the next."""

    depth: int = 0  # MPI nesting depth
    stack: list[int] = field(default_factory=list)  # open non-MPI regions (refs), outermost first
    open_start: int | None = None  # ns start of the burst in progress
    open_call: _OpenCall | None = None
    pending: tuple[int, int] | None = None  # (start, end) ns of a burst whose closing call is still open
    closed_until: int = -1  # ns end of the last burst handed to the assembler
    started: bool = False
    last_ns: int = 0
    prev_reading: dict[int, int] = field(default_factory=dict)  # member id -> last cumulative reading
    next_pending: dict[int, int] = field(default_factory=dict)  # member id -> value waiting for the next reading
    carry_samples: pl.DataFrame | None = None


_GROUPS = {"r": ("kind", "time", "ref", "pos"), "m": ("time", "ref", "n", "pos"),
           "p": ("kind", "time", "peer", "comm", "tag", "len", "req", "pos"),
           "c": ("time", "comm", "root", "sent", "recv", "pos")}
_DTYPES = {"kind": np.uint8, "time": np.uint64, "ref": np.uint32, "pos": np.uint64, "n": np.uint8,
           "peer": np.uint32, "comm": np.uint32, "tag": np.uint32, "len": np.uint64, "req": np.uint64,
           "root": np.uint32, "sent": np.uint64, "recv": np.uint64}
_P2P_SCHEMA = {"task": pl.Int32, "thread": pl.Int32, "kind": pl.Int8, "time_ns": pl.Int64, "pos": pl.Int64,
               "peer": pl.Int64, "comm": pl.Int64, "tag": pl.Int64, "size": pl.Int64, "req": pl.UInt64}


def _first_per_slot(slot: np.ndarray, values: np.ndarray, target: np.ndarray) -> None:
    """Set ``target[s]`` to the first of ``values`` of slot s where ``target[s]`` is still -1."""
    if not slot.size:
        return
    uniq, first = np.unique(slot, return_index=True)
    unset = target[uniq] == -1
    target[uniq[unset]] = values[first[unset]]


class _LocationConverter:
    """Turns chunks of one location's raw records into the generic frames of :mod:`synthtrace.tracelib.bursts`."""

    def __init__(self, defs: _Definitions, loc: _Location, path: Path):
        self.defs, self.loc, self.path = defs, loc, path
        self.state = _LocationState()
        self.n_out_of_order = 0
        self.dropped_open_call: str | None = None
        self._names = pl.Series("call", defs.region_names, dtype=pl.String)
        self._kinds = pl.Series("kind", defs.region_kind, dtype=pl.String)
        self._sites = pl.Series("call_site", defs.region_site, dtype=pl.String)
        self._counters = pl.Series("counter", defs.member_names, dtype=pl.String)

    def _with_keys(self, df: pl.DataFrame) -> pl.DataFrame:
        return df.with_columns(pl.lit(1, pl.Int32).alias("appl"), pl.lit(self.loc.task, pl.Int32).alias("task"),
                               pl.lit(self.loc.thread, pl.Int32).alias("thread"), pl.lit(None, pl.Int32).alias("cpu"))

    # -------------------------------------------------------------- ordering
    def _arrays(self, buf: _EventBuffer) -> dict[str, np.ndarray]:
        """Numpy copies of the chunk, each record kind in (timestamp, record order); times also in ns."""
        a: dict[str, np.ndarray] = {}
        for g, cols in _GROUPS.items():
            for c in cols:
                a[f"{g}_{c}"] = _np(getattr(buf, f"{g}_{c}"), _DTYPES[c]).copy()
            a[f"{g}_ns"] = self.defs.to_ns(a[f"{g}_time"])
        a["m_vals"] = _np(buf.m_vals, np.uint64).copy()
        all_ns = np.concatenate([a[f"{g}_ns"] for g in _GROUPS])
        all_pos = np.concatenate([a[f"{g}_pos"] for g in _GROUPS])
        by_pos = np.argsort(all_pos, kind="stable")
        backwards = int(np.sum(np.diff(all_ns[by_pos]) < 0)) if all_ns.size > 1 else 0
        if not backwards:
            return a
        # timestamps that go back in record order: order by (timestamp, record order), renumber record order
        self.n_out_of_order += backwards
        seq = np.empty_like(all_pos)
        seq[np.lexsort((all_pos, all_ns))] = np.arange(all_pos.size, dtype=np.uint64)
        start = 0
        for g, cols in _GROUPS.items():
            n = a[f"{g}_pos"].size
            new_pos = seq[start:start + n]
            start += n
            idx = np.argsort(new_pos, kind="stable")
            if g == "m" and n:
                counts = a["m_n"].astype(np.int64)
                offs = np.concatenate([[0], np.cumsum(counts)[:-1]])
                lens = counts[idx]
                flat = np.repeat(offs[idx] - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens) + np.arange(lens.sum())
                a["m_vals"] = a["m_vals"][flat]
            a[f"{g}_pos"] = new_pos
            for c in (*cols, "ns"):
                a[f"{g}_{c}"] = a[f"{g}_{c}"][idx]
        return a

    # -------------------------------------------------------------- one chunk
    def convert(self, buf: _EventBuffer, final: bool) -> tuple[RecordBatch, pl.DataFrame, int]:
        """One chunk -> (record batch, point-to-point records, assembler horizon in ns)."""
        st = self.state
        a = self._arrays(buf)
        present = [a[f"{g}_ns"] for g in _GROUPS if a[f"{g}_ns"].size]
        if present:
            if not st.started:
                st.started = True
                st.open_start = int(min(int(t.min()) for t in present))
            st.last_ns = max(st.last_ns, max(int(t.max()) for t in present))
        intervals, mpi = self._regions(a, final)
        samples = self._samples(a, final)
        batch = RecordBatch(intervals=intervals, samples=samples, mpi=mpi, messages=pl.DataFrame(schema=MESSAGE_SCHEMA))
        return batch, self._p2p(a), (_NEVER if final else st.closed_until + 1)

    def _call_sites(self, ref: np.ndarray, is_region: np.ndarray, mpi: np.ndarray, kind: np.ndarray,
                    entries: np.ndarray) -> np.ndarray:
        """Region ref of the innermost open non-MPI region at each outer MPI entry (-1: none)."""
        st = self.state
        step = np.where(is_region & ~mpi & (kind == _ENTER), 1, np.where(is_region & ~mpi & (kind == _LEAVE), -1, 0))
        level = len(st.stack) + np.cumsum(step)
        enters = np.flatnonzero(step == 1)
        enter_level = level[enters]
        entry_level = level[entries]
        carried = np.asarray(st.stack, dtype=np.int64)

        def carried_at(lv: np.ndarray) -> np.ndarray:  # the open region carried from earlier chunks at level lv
            inside = (lv >= 1) & (lv <= carried.size)
            return np.where(inside, carried[np.clip(lv - 1, 0, carried.size - 1)] if carried.size else -1, -1)

        # the last enter before each entry at the entry's own level, found by one sorted search over (level,
        # position) keys: whole-array work, so a corrupt trace with deep nesting cannot make it quadratic
        width = np.int64(level.size + 1)
        order = np.argsort(enter_level.astype(np.int64) * width + enters, kind="stable")
        keys = enter_level[order].astype(np.int64) * width + enters[order]
        j = np.searchsorted(keys, entry_level.astype(np.int64) * width + entries) - 1
        jc = np.clip(j, 0, None)
        found = (j >= 0) & (enter_level[order][jc] == entry_level) if enters.size else np.zeros(entries.size, bool)
        sites = np.where(found, ref[enters[order][jc]] if enters.size else -1, carried_at(entry_level)).astype(np.int64)
        # the stack left open at the chunk's end: per level, its last enter in this chunk, else the carried one
        end_level = max(int(level[-1]) if level.size else carried.size, 0)
        stack = carried_at(np.arange(1, end_level + 1))
        if enters.size:
            last_lv, last_at = np.unique(enter_level[::-1], return_index=True)
            keep = (last_lv >= 1) & (last_lv <= end_level)
            stack[last_lv[keep] - 1] = ref[enters[::-1][last_at[keep]]]
        st.stack = stack.tolist()
        return sites

    def _regions(self, a: dict[str, np.ndarray], final: bool) -> tuple[pl.DataFrame, pl.DataFrame]:
        """Enter/Leave records -> burst intervals and outermost MPI calls (entry and exit rows)."""
        d, st = self.defs, self.state
        kind, ref, ns, pos = a["r_kind"], a["r_ref"].astype(np.int64), a["r_ns"], a["r_pos"].astype(np.int64)
        valid = ref < d.region_is_mpi.size
        is_region = (kind <= _LEAVE) & valid
        mpi = is_region & d.region_is_mpi[np.where(valid, ref, 0)]
        depth0 = st.depth
        depth = depth0 + np.cumsum(np.where(mpi & (kind == _ENTER), 1, np.where(mpi & (kind == _LEAVE), -1, 0)))
        if depth.size and depth.min() < 0:
            i = int(np.argmax(depth < 0))
            raise TraceFormatError(self.loc.evt_file, None, f"Leave of {d.region_names[ref[i]]} at {int(ns[i])} ns "
                                   f"(rank {self.loc.task - 1}) without its Enter")
        entries = np.flatnonzero(mpi & (kind == _ENTER) & (depth == 1))
        exits = np.flatnonzero(mpi & (kind == _LEAVE) & (depth == 0))
        sites = self._call_sites(ref, is_region, mpi, kind, entries)
        st.depth = int(depth[-1]) if depth.size else depth0

        # bursts: from the carried start or an outer exit to the next outer entry
        starts = ns[exits]
        if depth0 == 0 and st.open_start is not None:
            starts = np.concatenate([[st.open_start], starts])
        ends = ns[entries]
        st.open_start = int(starts[-1]) if starts.size > ends.size else None
        n = min(starts.size, ends.size)
        starts, ends = starts[:n], ends[:n]
        # a burst goes to the assembler in the same batch as the call that closes it (the assembler names a
        # burst's mpi_call from the entry rows of its batch): hold it back while that call is still open
        if st.pending is not None and exits.size:
            starts, ends = np.concatenate([[st.pending[0]], starts]), np.concatenate([[st.pending[1]], ends])
            st.pending = None
        if st.depth > 0 and entries.size and ends.size:  # the last entry opened the call still open
            st.pending = (int(starts[-1]), int(ends[-1]))
            starts, ends = starts[:-1], ends[:-1]
        if final and st.pending is not None:  # the location ends inside that call: the burst stays, unnamed
            starts, ends = np.append(starts, st.pending[0]), np.append(ends, st.pending[1])
            st.pending = None
        if final and st.open_start is not None:
            starts, ends = np.append(starts, st.open_start), np.append(ends, st.last_ns)
            st.open_start = None
        if ends.size:
            st.closed_until = max(st.closed_until, int(ends.max()))
        iv = pl.DataFrame({"start_ns": starts.astype(np.int64), "end_ns": ends.astype(np.int64)})
        intervals = self._with_keys(iv.filter(pl.col("end_ns") > pl.col("start_ns"))).select(
            [pl.col(k).cast(v) for k, v in INTERVAL_SCHEMA.items()])

        # calls: slot 0 may be the call carried from the previous chunk, then one slot per outer entry
        carried = st.open_call if depth0 > 0 else None
        slot_ns, slot_ref, slot_site = ns[entries], ref[entries], sites
        slot_lo = pos[entries]
        info = np.full((4, entries.size), -1, dtype=np.int64)  # comm, root, sent, recv
        if carried is not None:
            slot_ns = np.concatenate([[carried.time_ns], slot_ns])
            slot_ref = np.concatenate([[carried.ref], slot_ref])
            slot_site = np.concatenate([[carried.site], slot_site])
            slot_lo = np.concatenate([[-1], slot_lo])
            info = np.concatenate([np.array([[carried.comm], [carried.root], [carried.sent], [carried.recv]]), info], axis=1)
        n_slots, n_closed = slot_ns.size, exits.size
        slot_hi = np.full(n_slots, _INF_POS, dtype=np.int64)
        slot_hi[:n_closed] = pos[exits]
        self._attach(a, slot_lo, slot_hi, info)
        st.open_call = None
        if n_slots > n_closed:  # the last call is still open
            k = n_slots - 1
            st.open_call = _OpenCall(int(slot_ns[k]), int(slot_ref[k]), int(slot_site[k]), *map(int, info[:, k]))
        if final and st.open_call is not None:
            self.dropped_open_call = d.region_names[st.open_call.ref]
            st.open_call = None
        return intervals, self._mpi_rows(slot_ns[:n_closed], ns[exits], slot_ref[:n_closed], slot_site[:n_closed],
                                         info[:, :n_closed])

    def _attach(self, a: dict[str, np.ndarray], lo: np.ndarray, hi: np.ndarray, info: np.ndarray) -> None:
        """Fill comm/root/sizes of the call slots from the collective and point-to-point records inside them."""
        def owner(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            p = p.astype(np.int64)
            k = np.searchsorted(lo, p, side="right") - 1
            inside = (k >= 0) & (p <= hi[np.clip(k, 0, None)]) if lo.size else np.zeros(p.size, dtype=bool)
            return k[inside], inside

        k, inside = owner(a["c_pos"])
        if k.size:
            for row, col in ((2, "c_sent"), (3, "c_recv")):
                add = np.zeros(info.shape[1], dtype=np.int64)
                np.add.at(add, k, a[col][inside].astype(np.int64))
                touched = np.zeros(info.shape[1], dtype=bool)
                touched[k] = True
                info[row] = np.where(touched, np.where(info[row] >= 0, info[row], 0) + add, info[row])
            _first_per_slot(k, a["c_comm"][inside].astype(np.int64), info[0])
            root = a["c_root"][inside].astype(np.int64)
            has_root = root < _ROOT_SPECIAL
            _first_per_slot(k[has_root], root[has_root], info[1])
        p2p = a["p_kind"] != _IRECV_REQ
        k, inside = owner(a["p_pos"][p2p])
        _first_per_slot(k, a["p_comm"][p2p][inside].astype(np.int64), info[0])

    def _mpi_rows(self, entry_ns: np.ndarray, exit_ns: np.ndarray, ref: np.ndarray, site: np.ndarray,
                  info: np.ndarray) -> pl.DataFrame:
        if not entry_ns.size:
            return pl.DataFrame(schema=MPI_EVENT_SCHEMA)
        ref_s = pl.Series(ref.astype(np.int64))
        nullable = {name: pl.Series(info[i]).replace(-1, None) for i, name in enumerate(("comm", "root", "bytes_sent", "bytes_recv"))}
        n = entry_ns.size
        entry = pl.DataFrame({
            "time_ns": entry_ns.astype(np.int64), "kind": self._kinds.gather(ref_s), "call": self._names.gather(ref_s),
            **nullable,
            "call_site": self._sites.gather(pl.Series(np.clip(site, 0, None))).zip_with(pl.Series(site >= 0), pl.Series([None] * n, dtype=pl.String)),
            "_i": np.arange(n), "_o": np.zeros(n, dtype=np.int8)})
        exit_ = pl.DataFrame({"time_ns": exit_ns.astype(np.int64), "kind": entry["kind"], "_i": np.arange(n),
                              "_o": np.ones(n, dtype=np.int8)})
        df = pl.concat([entry, exit_], how="diagonal_relaxed").sort("_i", "_o")
        return self._with_keys(df).select([pl.col(k).cast(v) for k, v in MPI_EVENT_SCHEMA.items()])

    # -------------------------------------------------------------- counters
    def _samples(self, a: dict[str, np.ndarray], final: bool) -> pl.DataFrame:
        """Metric records -> counts at the time that closes their interval; keeps back what is not final yet."""
        d, st = self.defs, self.state
        frames: list[pl.DataFrame] = []
        if st.carry_samples is not None:
            frames.append(st.carry_samples)
            st.carry_samples = None
        refs, counts, vals = a["m_ref"].astype(np.int64), a["m_n"].astype(np.int64), a["m_vals"]
        if refs.size:
            frames.append(self._counts(refs, counts, vals, a["m_ns"], a["m_pos"].astype(np.int64)))
        if final and st.next_pending:
            frames.append(pl.DataFrame({"time_ns": [st.last_ns] * len(st.next_pending),
                                        "counter": [d.member_names[m] for m in st.next_pending],
                                        "value": list(st.next_pending.values())},
                                       schema={"time_ns": pl.Int64, "counter": pl.String, "value": pl.Int64}))
            st.next_pending.clear()
        if not frames:
            return pl.DataFrame(schema=SAMPLE_SCHEMA)
        s = pl.concat(frames, how="vertical_relaxed")
        if not final:  # a count after the last closed burst may belong to the burst in progress
            later = pl.col("time_ns") > st.closed_until
            st.carry_samples = s.filter(later)
            s = s.filter(~later)
        return self._with_keys(s).select([pl.col(k).cast(v) for k, v in SAMPLE_SCHEMA.items()])

    def _counts(self, refs: np.ndarray, counts: np.ndarray, vals: np.ndarray, t_ns: np.ndarray,
                pos: np.ndarray) -> pl.DataFrame:
        """Readings (one row per record, ``counts[i]`` values each) -> (time_ns, counter, value) counts."""
        d, st = self.defs, self.state
        rec = np.repeat(np.arange(refs.size), counts)
        within = np.arange(vals.size) - np.repeat(np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
        lut_base = np.array([d.metric_base.get(int(r), -1) for r in range(int(refs.max()) + 1)], dtype=np.int64)
        lut_size = np.array([d.metric_count.get(int(r), 0) for r in range(int(refs.max()) + 1)], dtype=np.int64)
        base, size = lut_base[refs][rec], lut_size[refs][rec]
        ok = (base >= 0) & (within < size)
        member, raw, rec = (base + within)[ok], vals[ok], rec[ok]
        value = raw.view(np.int64).copy()
        fl = d.member_type[member] == 2
        if fl.any():
            value[fl] = np.rint(raw[fl].view(np.float64)).astype(np.int64)
        order = np.lexsort((pos[rec], member))  # per member in record order
        member, value, t = member[order], value[order], t_ns[rec][order]
        mode = d.member_mode[member]
        first = np.ones(member.size, dtype=bool)
        first[1:] = member[1:] != member[:-1]
        last = np.ones(member.size, dtype=bool)
        last[:-1] = member[1:] != member[:-1]
        prev = np.concatenate([[0], value[:-1]]).astype(np.int64)
        has_prev = ~first
        for i in np.flatnonzero(first):
            m = int(member[i])
            if m in st.prev_reading:
                prev[i], has_prev[i] = st.prev_reading[m], True
            elif mode[i] == _CUM_ZERO:
                prev[i], has_prev[i] = 0, True
        cum = mode <= _CUM
        for i in np.flatnonzero(last & cum):
            st.prev_reading[int(member[i])] = int(value[i])
        out_v = np.where(cum, value - prev, value)
        out_t = t.copy()
        keep = np.where(cum, has_prev, True)
        nxt = mode == _DELTA_NEXT
        extra: list[tuple[int, int, int]] = []
        if nxt.any():  # a *_NEXT value counts until the next reading of its member: it closes there
            out_t[:-1] = np.where(nxt[:-1] & ~last[:-1], t[1:], out_t[:-1])
            for i in np.flatnonzero(nxt & first):
                if (m := int(member[i])) in st.next_pending:
                    extra.append((int(t[i]), m, st.next_pending.pop(m)))
            for i in np.flatnonzero(nxt & last):
                st.next_pending[int(member[i])] = int(value[i])
            keep &= ~(nxt & last)
        df = pl.DataFrame({"time_ns": out_t[keep].astype(np.int64), "member": member[keep].astype(np.int64),
                           "value": out_v[keep].astype(np.int64)})
        if extra:
            df = pl.concat([df, pl.DataFrame(extra, schema=df.schema, orient="row")])
        return df.select("time_ns", self._counters.gather(df["member"]).alias("counter"), "value")

    def _p2p(self, a: dict[str, np.ndarray]) -> pl.DataFrame:
        """Point-to-point records of the chunk, for message matching once every location is read."""
        if not a["p_kind"].size:
            return pl.DataFrame(schema=_P2P_SCHEMA)
        return pl.DataFrame({
            "task": np.full(a["p_kind"].size, self.loc.task, dtype=np.int32),
            "thread": np.full(a["p_kind"].size, self.loc.thread, dtype=np.int32),
            "kind": a["p_kind"].astype(np.int8), "time_ns": a["p_ns"], "pos": a["p_pos"].astype(np.int64),
            "peer": a["p_peer"].astype(np.int64), "comm": a["p_comm"].astype(np.int64),
            "tag": a["p_tag"].astype(np.int64), "size": a["p_len"].astype(np.int64), "req": a["p_req"],
        }, schema=_P2P_SCHEMA)


# ---------------------------------------------------------------------------------------------------- messages
def match_messages(p2p: pl.DataFrame, comm_ranks: pl.DataFrame, self_comms: set[int]) -> pl.DataFrame:
    """Pair send and receive records into messages (``MESSAGE_SCHEMA``).

    Sends and receives between the same ranks on the same communicator with the same tag match in order (MPI's
    non-overtaking rule): sends in send order, receives in order of their logical time (an ``MpiIrecv`` counts at
    its ``MpiIrecvRequest``). A half without its partner stays, with the other side's times NULL.
    """
    if p2p.height == 0:
        return pl.DataFrame(schema=MESSAGE_SCHEMA)
    ranks = comm_ranks.lazy().select("comm", pl.col("rank").alias("peer"), pl.col("task").alias("peer_task"))
    self_list = pl.Series(sorted(self_comms), dtype=pl.Int64).implode()
    lf = p2p.lazy()
    requests = (lf.filter(pl.col("kind") == _IRECV_REQ)
                .select("task", "thread", "req", "pos", pl.col("time_ns").alias("req_ns")).sort("pos"))

    def with_peer(kinds: list[int]) -> pl.LazyFrame:
        return (lf.filter(pl.col("kind").is_in(kinds)).drop("req" if _IRECV not in kinds else [])
                .join(ranks, on=["comm", "peer"], how="left")
                .with_columns(pl.when(pl.col("comm").is_in(self_list)).then(pl.col("task"))
                              .otherwise(pl.col("peer_task")).cast(pl.Int32).alias("peer_task")))

    key = ["s_task", "r_task", "comm", "tag"]
    sends = (with_peer([_SEND, _ISEND])
             .select(pl.col("task").alias("s_task"), pl.col("thread").alias("s_thread"),
                     pl.col("peer_task").alias("r_task"), "comm", "tag", pl.col("time_ns").alias("t"), "pos",
                     pl.col("size").alias("s_size"))
             .sort([*key, "t", "pos"]).with_columns(pl.int_range(pl.len()).over(key).alias("_k")))
    recvs = (with_peer([_RECV, _IRECV]).sort("pos")
             .join_asof(requests, on="pos", by=["task", "thread", "req"], strategy="backward", check_sortedness=False)
             .select(pl.col("peer_task").alias("s_task"), pl.col("task").alias("r_task"),
                     pl.col("thread").alias("r_thread"), "comm", "tag",
                     pl.when((pl.col("kind") == _IRECV) & pl.col("req_ns").is_not_null())
                     .then(pl.col("req_ns")).otherwise(pl.col("time_ns")).alias("r_t"),
                     pl.col("pos").alias("r_pos"), pl.col("size").alias("r_size"))
             .sort([*key, "r_t", "r_pos"]).with_columns(pl.int_range(pl.len()).over(key).alias("_k")))
    m = sends.join(recvs, on=[*key, "_k"], how="full", coalesce=True, nulls_equal=False)
    return m.select(
        pl.when(pl.col("s_task").is_not_null()).then(pl.lit(1)).cast(pl.Int32).alias("s_appl"),
        pl.col("s_task").cast(pl.Int32), pl.col("s_thread").cast(pl.Int32), pl.col("t").alias("s_time_ns").cast(pl.Int64),
        pl.when(pl.col("r_task").is_not_null()).then(pl.lit(1)).cast(pl.Int32).alias("r_appl"),
        pl.col("r_task").cast(pl.Int32), pl.col("r_thread").cast(pl.Int32), pl.col("r_t").alias("r_time_ns").cast(pl.Int64),
        pl.coalesce("s_size", "r_size").cast(pl.Int64).alias("size"), pl.col("tag").cast(pl.Int64),
    ).sort("s_task", "s_time_ns", "r_task", "r_time_ns", nulls_last=True).collect(engine="streaming")


# ---------------------------------------------------------------------------------------------------- the trace
def _callback_setter(name: str):  # noqa: ANN202 - a ctypes function
    import _otf2  # noqa: PLC0415
    from _otf2.Config import conf  # noqa: PLC0415

    fp = {"Enter": _FP_REGION, "Leave": _FP_REGION, "ProgramBegin": _FP_BEGIN, "ProgramEnd": _FP_END,
          "Metric": _FP_METRIC, "MpiSend": _FP_SEND, "MpiIsend": _FP_ISEND, "MpiRecv": _FP_SEND,
          "MpiIrecv": _FP_ISEND, "MpiIrecvRequest": _FP_IRECV_REQ, "MpiCollectiveEnd": _FP_COLL_END}[name]
    func = conf.lib[f"OTF2_EvtReaderCallbacks_Set{name}Callback"]
    func.argtypes = [ctypes.POINTER(_otf2.EvtReaderCallbacks), fp]
    func.restype = ctypes.c_int
    return func


class Otf2Trace:
    """One OTF2 archive on disk (its ``.otf2`` anchor file): definitions, resources and a streaming table reader.

    >>> trace = Otf2Trace("ping-pong/traces.otf2")
    >>> for bursts, calls in trace.iter_tables(run_id="abc"): ...
    """

    format = "otf2"

    def __init__(self, path: str | Path, *, chunk_events: int = DEFAULT_CHUNK_EVENTS):
        self.path = _validate_archive(Path(path))
        self.chunk_events = int(chunk_events)
        self.warnings: list[str] = []
        with _captured_otf2_errors() as messages:
            reader = self._open_reader(messages)
            try:
                self.defs = _read_definitions(reader, self.path)
            except (AttributeError, KeyError, IndexError, TypeError, ValueError) as exc:
                raise TraceFormatError(self.path.with_suffix(".def"), None,
                                       f"inconsistent OTF2 definitions ({type(exc).__name__}: {exc})") from None
            finally:
                reader.close()
        if not self.defs.locations:
            raise TraceFormatError(self.path.with_suffix(".def"), None, "OTF2 archive defines no CPU locations")
        for loc in self.defs.locations:
            _check_location_files(loc)
        self.warnings.extend(self.defs.warnings)

    def _open_reader(self, messages: list[str]):  # noqa: ANN202 - otf2.reader.Reader
        import otf2  # noqa: PLC0415 - the wheel with the C library

        try:
            with _python_callback_errors(messages):
                return otf2.reader.Reader(str(self.path))
        except Exception as exc:  # the library raises its own errors (and KeyError etc. on garbage)
            raise TraceFormatError(self.path, None, _library_reason(exc, messages)) from None

    # ------------------------------------------------------------------ identity and resources
    @property
    def started_at(self) -> datetime | None:
        """Wall-clock time of the trace start (naive UTC), when the clock properties record it."""
        ns = self.defs.realtime_ns
        return datetime.fromtimestamp(ns / 1e9, UTC).replace(tzinfo=None) if ns else None

    @property
    def resources(self) -> dict[str, int]:
        d = self.defs
        duration = d.scalar_ns(d.offset + d.trace_length) if d.trace_length else 0
        return {"n_appl": 1, "n_tasks": d.n_tasks, "n_threads": len(d.locations), "n_nodes": d.n_nodes,
                "duration_ns": duration}

    @property
    def n_events(self) -> int:
        """Events of the CPU locations, as the definitions count them."""
        return sum(loc.n_events for loc in self.defs.locations)

    def content_files(self) -> list[Path]:
        """Anchor, global definitions and every file of the event folder (sorted): the run's identity."""
        folder = self.path.with_suffix("")
        return [self.path, self.path.with_suffix(".def"), *sorted(p for p in folder.iterdir() if p.is_file())]

    # ------------------------------------------------------------------ streaming
    def iter_tables(self, run_id: str, progress: Callable[[int], None] | None = None,
                    summary: ReadSummary | None = None) -> Iterator[tuple[pl.DataFrame, pl.DataFrame]]:
        """Yield (bursts, mpi_calls) parts, location by location; ``progress`` gets bytes of event files read.

        MPI calls carry collective sizes; point-to-point bytes come from ``summary.messages`` (filled once the
        iteration is over) through :func:`~synthtrace.tracelib.bursts.attach_messages`, as for Paraver.
        """
        import _otf2  # noqa: PLC0415

        summary = summary if summary is not None else ReadSummary()
        self.warnings = list(self.defs.warnings)  # what reading adds is found again on every read
        assembler = BurstAssembler(run_id)
        p2p_parts: list[pl.DataFrame] = []
        n_records = {1: 0, 2: 0, 3: 0, 4: 0}
        last_ns = 0
        setters = {name: _callback_setter(name) for name in _EventBuffer().callbacks()}
        with _captured_otf2_errors() as messages:
            reader = self._open_reader(messages)
            handle = reader.handle
            try:
                self._read_local_definitions(_otf2, handle, messages)
                for loc in self.defs.locations:
                    buf = _EventBuffer()
                    pointers = buf.callbacks()
                    conv = _LocationConverter(self.defs, loc, self.path)
                    evt_bytes = loc.evt_file.stat().st_size
                    try:
                        evt_reader = _otf2.Reader_GetEvtReader(handle, loc.ref)
                        cbs = _otf2.EvtReaderCallbacks_New()
                        for name, fp in pointers.items():
                            setters[name](cbs, fp)
                        _otf2.Reader_RegisterEvtCallbacks(handle, evt_reader, cbs, None)
                        _otf2.EvtReaderCallbacks_Delete(cbs)
                    except _otf2.Error as exc:
                        raise TraceFormatError(loc.evt_file, None, _library_reason(exc, messages)) from None
                    n_read, reported = 0, 0
                    while True:
                        try:
                            n = _otf2.Reader_ReadLocalEvents(handle, evt_reader, self.chunk_events)
                        except _otf2.Error as exc:
                            raise TruncatedTraceError(loc.evt_file, None, f"event {n_read + len(buf.r_pos)}: "
                                                      + _library_reason(exc, messages)) from None
                        n_read += n
                        final = n < self.chunk_events
                        for k, arr in ((1, buf.r_pos), (2, buf.m_pos), (3, buf.p_pos), (4, buf.c_pos)):
                            n_records[k] += len(arr)
                        batch, p2p, horizon = conv.convert(buf, final)
                        _clear(buf)
                        if p2p.height:
                            p2p_parts.append(p2p)
                        h = pl.DataFrame({"appl": [1], "task": [loc.task], "thread": [loc.thread], "time_ns": [horizon]},
                                         schema={"appl": pl.Int32, "task": pl.Int32, "thread": pl.Int32, "time_ns": pl.Int64})
                        bursts, calls = assembler.feed(batch, h)
                        summary.n_bursts += bursts.height
                        summary.n_calls += calls.height
                        if bursts.height or calls.height:
                            yield bursts, calls
                        if progress:
                            done = evt_bytes if final else min(evt_bytes, evt_bytes * n_read // max(loc.n_events, 1))
                            progress(done - reported)
                            reported = done
                        if final:
                            break
                    _otf2.Reader_CloseEvtReader(handle, evt_reader)
                    if loc.n_events and n_read < loc.n_events:
                        raise TruncatedTraceError(loc.evt_file, None,
                                                  f"{n_read} of the {loc.n_events} events the definitions announce")
                    last_ns = max(last_ns, conv.state.last_ns)
                    self._location_warnings(conv)
            finally:
                with contextlib.suppress(Exception):
                    _otf2.Reader_CloseEvtFiles(handle)
                reader.close()
        bursts, calls = assembler.finish()
        summary.n_bursts += bursts.height
        summary.n_calls += calls.height
        if bursts.height or calls.height:
            yield bursts, calls
        p2p = pl.concat(p2p_parts) if p2p_parts else pl.DataFrame(schema=_P2P_SCHEMA)
        summary.messages = match_messages(p2p, self.defs.comm_ranks, self.defs.self_comms)
        summary.counters = list(assembler.counters)
        summary.n_records = {k: summary.n_records.get(k, 0) + v for k, v in n_records.items()}
        summary.last_time_ns = last_ns
        summary.warnings = self.warnings

    def _read_local_definitions(self, _otf2, handle, messages: list[str]) -> None:  # noqa: ANN001
        """Select every CPU location and read its local definitions (mapping tables, clock offsets)."""
        for loc in self.defs.locations:
            _otf2.Reader_SelectLocation(handle, loc.ref)
        try:
            _otf2.Reader_OpenDefFiles(handle)
            for loc in self.defs.locations:
                def_reader = _otf2.Reader_GetDefReader(handle, loc.ref)
                if def_reader:
                    with _python_callback_errors(messages):
                        _otf2.Reader_ReadAllLocalDefinitions(handle, def_reader)
                    _otf2.Reader_CloseDefReader(handle, def_reader)
            _otf2.Reader_CloseDefFiles(handle)
            _otf2.Reader_OpenEvtFiles(handle)
        except _otf2.Error as exc:
            raise TraceFormatError(self.path.with_suffix(""), None, _library_reason(exc, messages)) from None

    def _location_warnings(self, conv: _LocationConverter) -> None:
        loc = conv.loc
        if conv.n_out_of_order:
            self.warnings.append(f"{loc.evt_file}: {conv.n_out_of_order} records with a timestamp before the previous "
                                 "record's; ordered by (timestamp, record order)")
        if conv.dropped_open_call:
            self.warnings.append(f"{loc.evt_file}: rank {loc.task - 1} ends inside {conv.dropped_open_call}; "
                                 "that call was dropped")

    #: (bursts, mpi_calls with messages attached, summary) in memory, for small traces and tests: the same
    #: assembly of the streamed parts as the Paraver reader's.
    read_tables = ParaverTrace.read_tables
