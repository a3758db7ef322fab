"""The global definitions of an OTF2 archive in plain Python / numpy form: locations as (task, thread), regions
with their MPI kind and call-site label, metric members and how their values become counts, communicators; and
the checks of the archive's files before the C library sees them."""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from synthtrace.tracelib.errors import TraceFormatError
from synthtrace.tracelib.file_kind import not_a_file
from synthtrace.tracelib.domain.mpi_calls import MpiKind, mpi_kind
from synthtrace.tracelib.formats.counter_columns import MAX_COUNTERS, CounterColumns
from synthtrace.tracelib.formats.otf2.evt_file import FILE_MAGIC, EventsEnd, definitions_damage, events_end
from synthtrace.tracelib.formats.source import COMMUNICATOR_SCHEMA
from synthtrace.tracelib.formats.paraver.header import MAX_ID
from synthtrace.tracelib.printable import EscapedNames, escaped
from synthtrace.tracelib.schema import is_reserved_column, unreserved_column

_UNDEFINED_U64 = 0xFFFFFFFFFFFFFFFF
# how a metric member's values become counts: running total with 0 at the start / reading to difference /
# count since the previous reading / count until the next reading / an absolute value (a gauge: no count)
_CUM_ZERO, _CUM, _DELTA_LAST, _DELTA_NEXT, _GAUGE = 0, 1, 2, 3, 4
_COLLECTIVE_ROLES = {15, 16, 23, 24, 25, 26}  # BARRIER, IMPLICIT_BARRIER, COLL_ONE2ALL/ALL2ONE/ALL2ALL/OTHER
_P2P_ROLE = 28


def region_kind(name: str, role: int | None) -> MpiKind:
    """The kind of an MPI region: the catalogue's for a name it knows, else from the region's OTF2 role."""
    if (kind := mpi_kind(name)) is not None:
        return kind
    if role in _COLLECTIVE_ROLES:
        return "collective"
    return "point_to_point" if role == _P2P_ROLE else "other"


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
    region_is_measurement: np.ndarray  # bool per region ref: the tracer's own time (buffer flush, recording off)
    member_names: list[str]  # one entry per metric member id
    member_mode: np.ndarray  # _CUM_ZERO / _CUM / _DELTA_LAST / _DELTA_NEXT / _GAUGE per member id
    member_type: np.ndarray  # 0 signed, 1 unsigned, 2 floating point per member id
    metric_members: np.ndarray  # member ids (int64) of every metric, each metric's as a run from metric_base
    metric_base: dict[int, int]  # metric ref -> where its member ids start in metric_members
    metric_count: dict[int, int]  # metric ref -> number of members
    comm_ranks: pl.DataFrame  # comm, rank, task, thread: who is rank r of communicator c
    self_comms: set[int]
    warnings: list[str] = field(default_factory=list)
    anchor: Path = Path("traces.otf2")  # the archive's anchor file, for error lines
    program: str | None = None  # the executable's file name, where the archive records it (:func:`_program`)

    def to_ns(self, ticks: np.ndarray) -> np.ndarray:
        """Timer ticks (uint64) -> int64 ns from the global offset (floor). A time more than 2^63 ticks or ns
        from the offset (a timestamp >= 2^63 ticks, a corrupt offset) is a TraceFormatError, never a wrapped
        number or an OverflowError."""
        t, off = np.asarray(ticks).astype(np.uint64), np.uint64(self.offset)
        after = t >= off
        with np.errstate(over="ignore"):
            magnitude = np.where(after, t - off, off - t)  # no wrap on the branch np.where keeps
        if magnitude.size and magnitude.max() > np.uint64(_INT64_MAX):
            raise self._out_of_range(int(t[np.argmax(magnitude)]))
        d = np.where(after, magnitude.astype(np.int64), -magnitude.astype(np.int64))
        res = self.resolution
        if res == 1_000_000_000:
            return d
        if magnitude.size and int(magnitude.max()) // res > _INT64_MAX // 1_000_000_000:
            raise self._out_of_range(int(t[np.argmax(magnitude)]))
        if res <= 9_000_000_000:  # exact integer arithmetic without overflow
            q, r = np.divmod(d, np.int64(res))
            return q * np.int64(1_000_000_000) + (r * np.int64(1_000_000_000)) // np.int64(res)
        return np.floor(d.astype(np.float64) * (1e9 / res)).astype(np.int64)

    def _out_of_range(self, tick: int) -> TraceFormatError:
        return TraceFormatError(self.anchor, None, f"timestamp {tick} lies more than 2^63 ticks or ns from the "
                                f"clock's offset {self.offset} ({self.resolution} ticks/s): a corrupt record or "
                                "clock definition")

    def scalar_ns(self, ticks: int) -> int:
        return int(self.to_ns(np.array([ticks], dtype=np.uint64))[0])


_INT64_MAX = 2**63 - 1


def _metric_semantics(mode_value: int) -> int:
    """How a member's values become counts, from its ``OTF2_MetricMode``: the value kind in the low nibble
    (ACCUMULATED 0, ABSOLUTE 1, RELATIVE 2), the timing in the high one (START, POINT, LAST, NEXT)."""
    value, timing = mode_value & 0x0F, mode_value & 0xF0
    if value == 1:  # ABSOLUTE_*: a level (power in W, temperature, memory in use), not something that adds up
        return _GAUGE
    if value == 0 and timing == 0x00:  # ACCUMULATED_START
        return _CUM_ZERO
    if timing == 0x30 and value != 1:  # ACCUMULATED_NEXT, RELATIVE_NEXT
        return _DELTA_NEXT
    if (value == 0 and timing == 0x20) or value == 2:  # ACCUMULATED_LAST, RELATIVE_POINT/LAST
        return _DELTA_LAST
    return _CUM  # ACCUMULATED_POINT


def _read_definitions(reader, anchor: Path) -> _Definitions:
    """Turn the otf2 wheel's definition registry into :class:`_Definitions` (raises TraceFormatError)."""
    defs = reader.definitions
    clock = defs.clock_properties
    if clock is None or not clock.timer_resolution:
        raise TraceFormatError(anchor, None, "OTF2 archive without clock properties (timer resolution)")
    warns: list[str] = []
    escapes = EscapedNames()  # security (attack 8 B7): names with control characters are stored escaped
    locations, loc_key, n_tasks, n_nodes = _locations(defs, anchor, warns, escapes)
    names, is_mpi, kinds, sites, is_measurement = _regions(defs, escapes)
    member_names, member_mode, member_type, metric_members, metric_base, metric_count = _metric_members(
        defs, anchor, warns, escapes)
    if (note := escapes.note()) is not None:  # said on the terminal by the reader, with every warning here
        warns.append(f"{anchor.with_suffix('.def')}: {note}, the first the {escapes.first}")
    comm_ranks, self_comms = _communicators(defs, loc_key)
    realtime = clock.realtime_timestamp
    return _Definitions(
        resolution=int(clock.timer_resolution), offset=int(clock.global_offset),
        trace_length=int(clock.trace_length),
        realtime_ns=int(realtime) if realtime is not None and int(realtime) != _UNDEFINED_U64 else None,
        locations=locations, n_tasks=n_tasks, n_nodes=n_nodes,
        region_names=names, region_is_mpi=is_mpi, region_kind=kinds, region_site=sites,
        region_is_measurement=is_measurement,
        member_names=member_names, member_mode=np.array(member_mode, dtype=np.int8),
        member_type=np.array(member_type, dtype=np.int8), metric_members=metric_members, metric_base=metric_base,
        metric_count=metric_count,
        comm_ranks=comm_ranks, self_comms=self_comms, warnings=warns, anchor=anchor, program=_program(defs, escapes))


def _locations(defs, anchor: Path, warns: list[str],
               escapes: EscapedNames) -> tuple[list[_Location], dict[int, tuple[int, int]], int, int]:
    """The CPU locations as (task, thread) in that order, each location's key, the number of ranks and nodes. A
    rank is the location's place in the MPI COMM_LOCATIONS group (one location per rank, in rank order), else
    the order of its process group. Names are kept by ``escapes``."""
    from otf2.enums import GroupType, LocationType, Paradigm

    evt_dir = anchor.with_suffix("")
    group_rank: dict[int, int] = {}
    for g in defs.groups:
        if g.group_type == GroupType.COMM_LOCATIONS and g.paradigm == Paradigm.MPI:
            for rank, loc in enumerate(g.members):
                group_rank.setdefault(loc.group._ref, rank)
            break
    cpu_locs = [loc for loc in defs.locations if loc.type in (LocationType.CPU_THREAD, LocationType.UNKNOWN)]
    skipped = [loc for loc in defs.locations if loc not in cpu_locs]
    if skipped:
        kinds = ", ".join(sorted({str(loc.type).split(".")[-1] for loc in skipped}))
        warns.append(f"{anchor}: skipped {len(skipped)} non-CPU locations ({kinds}: GPU streams, metric recorders)")
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
        name = escapes.kept(str(loc.name), f"name of location {loc._ref}")
        locations.append(_Location(loc._ref, name, task, thread, int(loc.number_of_events or 0),
                                   evt_dir / f"{loc._ref}.evt", evt_dir / f"{loc._ref}.def"))
    locations.sort(key=lambda x: (x.task, x.thread))
    if locations and max(max(x.task, x.thread) for x in locations) > MAX_ID:
        raise TraceFormatError(anchor.with_suffix(".def"), None,
                               f"more than {MAX_ID} ranks or threads per rank: beyond what synthtrace can key")
    nodes = {loc.group.system_tree_parent._ref for loc in cpu_locs if loc.group.system_tree_parent is not None}
    return locations, loc_key, len(process_groups), len(nodes)


#: the regions Score-P enters for its own work (canonical names): writing its buffer out, and the time recording
#: was switched off (SCOREP_RECORDING_OFF); neither is the program's. Only these: another artificial region of the
#: measurement system (the whole program's, whatever its name) taken as a gap would drop every burst it encloses
MEASUREMENT_REGIONS = ("TRACE BUFFER FLUSH", "MEASUREMENT OFF")
#: of those, the one the program's work goes on unrecorded in (the bursts around it are not one: mergeattack23 P4)
RECORDING_OFF_REGION = MEASUREMENT_REGIONS[1]


def _is_measurement(r) -> bool:
    """Whether region ``r`` is the measurement system's own time inside a run: an artificial region named as one of
    :data:`MEASUREMENT_REGIONS`."""
    from otf2.enums import RegionRole

    return r.region_role == RegionRole.ARTIFICIAL and str(r.canonical_name or r.name or "") in MEASUREMENT_REGIONS


def _is_program(r) -> bool:
    """Whether region ``r`` is the whole program's (canonically the executable's path, named by its file name)."""
    path = str(r.canonical_name or "")
    return path.startswith("/") and bool(r.name) and os.path.basename(path) == str(r.name)


def _regions(defs, escapes: EscapedNames
             ) -> tuple[list[str], np.ndarray, list[MpiKind], list[str | None], np.ndarray]:
    """Per region ref: its name, whether it is an MPI region (paradigm MPI or an ``MPI_`` name), its MPI kind and,
    for the other regions, its call-site label (``name (file:line)``); names and files kept by ``escapes``; and
    whether it is the measurement system's own time (:func:`_is_measurement`: no burst holds it)."""
    from otf2.enums import Paradigm

    regions = list(defs.regions)
    n_reg = max((r._ref for r in regions), default=-1) + 1
    names = [f"region_{i}" for i in range(n_reg)]
    is_mpi = np.zeros(max(n_reg, 1), dtype=bool)
    is_measurement = np.zeros(max(n_reg, 1), dtype=bool)
    kinds: list[MpiKind] = ["other"] * n_reg
    sites: list[str | None] = [None] * n_reg
    for r in regions:
        name = escapes.kept(str(r.name or r.canonical_name or f"region_{r._ref}"), f"name of region {r._ref}")
        names[r._ref] = name
        role = r.region_role.value if r.region_role is not None else None
        mpi = r.paradigm == Paradigm.MPI or name.upper().startswith("MPI_")
        is_mpi[r._ref] = mpi
        is_measurement[r._ref] = not mpi and _is_measurement(r)
        if mpi:
            kinds[r._ref] = region_kind(name, role)
        else:
            src = r.source_file
            src = src and escapes.kept(os.path.basename(str(src)), f"source file of region {r._ref}")
            sites[r._ref] = f"{name} ({src}:{r.begin_line_number})" if src else name
    return names, is_mpi, kinds, sites, is_measurement


def _program(defs, escapes: EscapedNames) -> str | None:
    """The executable's file name as Score-P records it: the measurement system's artificial region of the whole
    program, canonically the executable's path and named by its file name (``/g/.../ping-pong.otf2``,
    ``ping-pong.otf2``: what the archive's ProgramBegin event refers to). None when no region is one."""
    from otf2.enums import Paradigm, RegionRole

    for r in defs.regions:
        if r.paradigm == Paradigm.MEASUREMENT_SYSTEM and r.region_role == RegionRole.ARTIFICIAL and _is_program(r):
            return escapes.kept(str(r.name), f"name of region {r._ref}")
    return None


def _metric_members(defs, anchor: Path, warns: list[str], escapes: EscapedNames
                    ) -> tuple[list[str], list[int], list[int], np.ndarray, dict[int, int], dict[int, int]]:
    """Per metric member id: name, how its values become counts (_CUM_ZERO / _CUM / _DELTA_LAST / _DELTA_NEXT;
    _GAUGE: not kept, with a warning) and value type (0 signed, 1 unsigned, 2 floating point); the member ids of
    every metric (class or instance) in one array, and per metric ref where its run starts and its count. A member
    has one id whatever metrics record it: one counter sampled by each (session 21: the members of a metric not
    contiguous in definition order were copied to new ids, one copy per metric, and a member recorded by two
    metrics (the writer gives identical definitions one reference) was two counters of one name, each counting
    from its own readings). Names are kept by ``escapes``; one named like a key column, or like an earlier member
    but for letter case, is renamed ``<name>_metric<ref>`` with a warning; so is one named exactly like an earlier
    member, and a new name some member already holds is renamed again (attack 16 F7/F7b).
    More than MAX_COUNTERS members: refused."""
    from otf2.enums import LocationType, MetricScope

    if len(defs.metric_members) > MAX_COUNTERS:  # each a counter summed per burst and call (attack 17 F4)
        raise TraceFormatError(anchor, None, f"{len(defs.metric_members)} metric members defined: at most "
                                             f"{MAX_COUNTERS} counters per trace (as Paraver's counter types)")
    member_names: list[str] = []
    member_mode: list[int] = []
    member_type: list[int] = []
    member_id: dict[int, int] = {}
    columns = CounterColumns()
    for m in defs.metric_members:
        member_id[m._ref] = len(member_names)
        name, whose = escapes.kept(str(m.name), f"name of metric member {m._ref}"), f"metric member {m._ref}"
        fallback = unreserved_column(name, f"metric{m._ref}")
        if is_reserved_column(name):  # a metric never takes a key column's name (issue 23 item 7)
            column = columns.claim(fallback, fallback, whose)
            warns.append(f"{anchor}: metric {name!r} is named like a column of every burst: read as {column!r}"
                         f"{columns.clash_note(fallback, column)}")
            name = column
        elif (owner := columns.owner(name)) is not None:  # attack 14 F17, 16 F7b: SQL reads both as one column
            column = columns.claim(name, fallback, whose)
            given = (f"metric {name!r} is the name of {owner[1]} too" if owner[0] == name else
                     f"metrics {owner[0]!r} and {name!r} differ only in letter case, one column to SQL")
            warns.append(f"{anchor}: {given}: the second read as {column!r}{columns.clash_note(fallback, column)}")
            name = column
        else:
            columns.claim(name, name, whose)
        member_names.append(name)
        member_mode.append(_metric_semantics(m.metric_mode.value))
        vt = m.value_type.value
        member_type.append(2 if vt in (9, 10) else 1 if vt in (1, 2, 3, 4) else 0)
        if member_mode[-1] == _GAUGE:
            warns.append(f"{anchor}: metric {name} ({escaped(str(m.unit or 'no unit'))}) is an absolute value "
                         f"({str(m.metric_mode).split('.')[-1]}), a level and not a count: not kept")
    for metric in defs.metrics:  # metric instances: recorded by one location for a wider scope (Score-P plugins)
        recorder, scope = getattr(metric, "recorder", None), getattr(metric, "metric_scope", None)
        if recorder is None:
            continue
        names = escaped(", ".join(m.name for m in metric.metric_class.members))
        scope_name = str(scope).split(".")[-1]
        if recorder.type not in (LocationType.CPU_THREAD, LocationType.UNKNOWN):
            warns.append(f"{anchor}: metric {names} ({scope_name} scope) is recorded on {recorder.name!r}, a "
                         f"{str(recorder.type).split('.')[-1]} location: not read")
        elif scope != MetricScope.LOCATION:
            warns.append(f"{anchor}: metric {names} counts a whole {scope_name}; it is read as a counter of the "
                         f"thread that records it ({recorder.name!r})")
    metric_ids: list[int] = []
    metric_base: dict[int, int] = {}
    metric_count: dict[int, int] = {}
    for metric in defs.metrics:
        cls = getattr(metric, "metric_class", None) or metric
        metric_base[metric._ref], metric_count[metric._ref] = len(metric_ids), len(cls.members)
        metric_ids.extend(member_id[m._ref] for m in cls.members)
    return (member_names, member_mode, member_type, np.array(metric_ids, dtype=np.int64), metric_base,
            metric_count)


def _communicators(defs, loc_key: dict[int, tuple[int, int]]) -> tuple[pl.DataFrame, set[int]]:
    """Who is rank r of communicator c (comm, rank, task, thread), and the MPI_COMM_SELF communicators."""
    from otf2.enums import GroupType

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
    return comm_ranks, self_comms


def communicator_members(comm_ranks: pl.DataFrame, self_comms: set[int]) -> pl.DataFrame:
    """The members of every communicator (COMMUNICATOR_SCHEMA, appl 1 as the reader numbers OTF2's tasks; a thread's
    task once): OTF2 defines each communicator by a group of locations, and its id is a per-archive definition
    reference. MPI_COMM_SELF, defined once for every process, is one row with a NULL task."""
    members = comm_ranks.select(pl.lit(1, pl.Int32).alias("appl"), "comm", "task").unique(maintain_order=True)
    own = pl.DataFrame({"appl": [1] * len(self_comms), "comm": sorted(self_comms), "task": [None] * len(self_comms)},
                       schema=COMMUNICATOR_SCHEMA)
    return pl.concat([members.cast(COMMUNICATOR_SCHEMA), own])  # type: ignore[arg-type]


def _validate_archive(anchor: Path) -> Path:
    """Check the files of an OTF2 archive before the C library sees them (the global definitions' records:
    :func:`_check_global_definitions`, once the anchor's chunk size is known); returns the anchor path."""
    if anchor.is_dir():
        anchors = sorted(anchor.glob("*.otf2"))
        if len(anchors) != 1:
            raise TraceFormatError(anchor, None, "folder holds no single OTF2 anchor file (*.otf2)")
        anchor = anchors[0]
    if not anchor.is_file():
        raise TraceFormatError(anchor, None, "no such file")
    with open(anchor, "rb") as fh:
        head = fh.read(16)
    if len(head) < 8 or head[:1] != FILE_MAGIC or head[2:6] != b"OTF2":
        raise TraceFormatError(anchor, None, "not an OTF2 anchor file (bad magic)")
    global_defs = anchor.with_suffix(".def")
    if not global_defs.is_file():
        raise TraceFormatError(global_defs, None, "missing global definitions file of the OTF2 archive")
    if not anchor.with_suffix("").is_dir():
        raise TraceFormatError(anchor.with_suffix(""), None, "missing event folder of the OTF2 archive")
    return anchor


def _check_global_definitions(anchor: Path, chunk_size: int) -> None:
    """Refuse the archive's global definitions file when it is no OTF2 file or is cut or damaged
    (:func:`~.evt_file.definitions_damage`; ``chunk_size``: the anchor's, bytes), before the library reads it."""
    global_defs = anchor.with_suffix(".def")
    if (damage := definitions_damage(global_defs, chunk_size)) is not None:
        raise TraceFormatError(global_defs, None, damage)


def _check_location_files(loc: _Location, def_chunk_size: int, evt_chunk_size: int) -> EventsEnd | None:
    """How the location's events file ends (:func:`~.evt_file.events_end`: cut, or bytes after its events); None
    for a location that recorded no events and has no event file (OTF2 writes the files of a location only when it
    has events); raises for missing or damaged ones. Its files are in chunks of ``def_chunk_size`` and
    ``evt_chunk_size`` bytes (the anchor's) and each is opened once."""
    if loc.n_events == 0 and not loc.evt_file.exists():
        return None
    for f, what in ((loc.def_file, "local definitions"), (loc.evt_file, "events")):
        if not f.is_file():
            announced = f" ({loc.n_events} events announced)" if what == "events" else ""
            there = not_a_file(f)  # attack25 N1: a folder, a FIFO, a link to /dev/zero was "missing"
            raise TraceFormatError(f, None, f"{'missing ' if there is None else ''}{what} file of location {loc.ref} "
                                   f"(rank {loc.task - 1}, thread {loc.thread}){announced}"
                                   f"{'' if there is None else f' is {there}, no regular file'}; "
                                   "--salvage reads the trace without it")
    if (damage := definitions_damage(loc.def_file, def_chunk_size, "local definitions")) is not None:
        raise TraceFormatError(loc.def_file, None, f"{damage}; --salvage reads the trace without location "
                               f"{loc.ref} (rank {loc.task - 1}, thread {loc.thread})")
    end = events_end(loc.evt_file, evt_chunk_size, loc.n_events)
    if end.not_otf2:
        raise TraceFormatError(loc.evt_file, None, "not an OTF2 events file (empty, truncated or bad magic)")
    return end




def _identical_event_files(locations: list[_Location]) -> str | None:
    """Two locations whose events files hold the same bytes, said for a message (None when there are none). OTF2
    names no location inside its events file; two processes never record the same events at the same clock ticks,
    so one is most likely a copy of the other (``cp 0.evt 1.evt``: rank 1 "sent to itself", every receive unmatched;
    attack 8 B8). Yet a generated trace may hold twins (ranks that only meet in barriers, on clocks set apart by
    their local offsets), so this is evidence for :func:`~synthtrace.tracelib.formats.otf2.messages.check_pairing`,
    not a refusal. Locations without events are left out (their files hold only a header); only files of one size
    are hashed."""
    by_size: dict[int, list[_Location]] = {}
    for loc in locations:
        if loc.n_events:
            by_size.setdefault(loc.evt_file.stat().st_size, []).append(loc)
    for same_size in (group for group in by_size.values() if len(group) > 1):
        seen: dict[bytes, _Location] = {}
        for loc in same_size:
            with open(loc.evt_file, "rb") as fh:
                digest = hashlib.file_digest(fh, "blake2b").digest()
            if (first := seen.setdefault(digest, loc)) is not loc:
                return (f"{loc.evt_file} holds the same bytes as {first.evt_file.name}, the events of rank "
                        f"{first.task - 1} thread {first.thread}")
    return None
