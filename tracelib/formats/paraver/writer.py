"""Writes Paraver traces (``.prv`` + ``.pcf`` + ``.row``) the way Extrae does, streaming the records.

Conventions (as in the real Extrae traces under ``../shared/traces/paraver``):

- header ``#Paraver (dd/mm/yyyy at hh:mm):END_ns:NODES(cpus):N_APPL:TASKS(threads:node,...),N_COMM`` then one
  ``c:appl:comm:n:task...`` line per communicator;
- a state record ``1:cpu:appl:task:thread:begin:end:state`` per Running interval (state 1) and per MPI call
  (Extrae's MPI states: 10 Immediate Send, 11 Immediate Receive, 8 Wait/WaitAll, 13 Group Communication, ...);
- the MPI entry event ``50000001..3:<call id>`` carries, on the same record, the collective's 501000xx sizes, root
  flag (``50100003:1`` on the root's own call only, :mod:`.collective_roots`) and communicator, the counter
  deltas of the burst that the call closes and the caller events
  ``70000001:<function>:80000001:<line>``; the exit ``50000001..3:0`` is its own record at the exit time, and the
  counters measured inside the call ("exit counters") follow on a separate record at the same time;
- communication records ``3:`` with logical send = the sender's call entry, physical send = its exit, logical
  receive = the receiving call's exit (Irecv/Recv), physical receive = the exit of the call that completed it;
- records sorted by time (ties: appl, task, thread, state before events before communications), communication
  records placed at their physical send time.

Two entry points: :func:`write_paraver` writes a trace from tidy tables (``bursts`` with one column per counter and
``mpi_calls`` as :class:`~synthtrace.tracelib.formats.paraver.reader.ParaverTrace` returns them, plus a
:class:`TraceMeta`), and
:class:`ParaverWriter` takes pre-formatted record blocks in time order (what the simulator streams). Both keep
memory bounded by one time window of records.
"""
from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import numpy as np
import polars as pl

from synthtrace.tracelib.formats.bursts import MESSAGE_SCHEMA, message_columns
from synthtrace.tracelib.errors import BadInputError, SynthtraceError
from synthtrace.tracelib.formats.paraver.counter_types import CounterInfo, catalogue
from synthtrace.tracelib.formats.paraver.collective_roots import member_ranks, root_flags
from synthtrace.tracelib.formats.paraver.header import ParaverHeader, format_header
from synthtrace.tracelib.formats.paraver.pcf import is_counter_type
from synthtrace.tracelib.domain.mpi_calls import PLACEHOLDER, calls_with, mpi_call, mpi_kind_of
from synthtrace.tracelib.formats.paraver.reader import ParaverTrace
from synthtrace.tracelib.formats.paraver.event_types import (
    APPL_EVENT, CALLER_LINE_TYPE, CALLER_TYPE, COLLECTIVE_INFO_TYPES,
                                                    COUNTER_SET_EVENT, MPI_TYPE_KINDS)
from synthtrace.tracelib.formats.paraver.records import STATE_RUNNING
from synthtrace.tracelib.formats.paraver.row import format_row
from synthtrace.tracelib.formats.program import paraver_symbols
from synthtrace.tracelib.formats.source import COMMUNICATOR_SCHEMA, stem_program, trace_stem
from synthtrace.tracelib.schema import BURST_SCHEMA, EVENT_SCHEMA, MPI_CALL_SCHEMA, THREAD_KEYS, counter_columns

# ----------------------------------------------------------------------------------------------- MPI calls
#: the event type a call of each kind is written under (``other``: 50000003, the first of Extrae's "other" types)
MPI_TYPES: dict[str, int] = {kind: etype for etype, kind in reversed(MPI_TYPE_KINDS.items())}
MPI_TYPE_LABELS: dict[int, str] = {50_000_001: "MPI Point-to-point", 50_000_002: "MPI Collective Comm",
                                   50_000_003: "MPI Other"}
#: Extrae's thread state inside a call (Paraver state ids of the .pcf STATES table), by the call's role and
#: whether it blocks; collectives other than a blocking barrier are Group Communication (13)
_STATE_OF_ROLE: dict[tuple[str | None, bool], int] = {
    ("send", True): 4, ("recv", True): 3, ("probe", True): 3, ("barrier", True): 5, ("test", False): 6,
    ("probe", False): 6, ("wait", True): 8, ("send", False): 10, ("recv", False): 11, ("sendrecv", True): 16,
}
STATE_OTHERS, STATE_NOT_CREATED = 15, 2
#: calls that complete a nonblocking receive (their exit is the physical receive time): the wait and test
#: families and the blocking receives
COMPLETING_CALLS = (*calls_with(roles=("wait", "test")), *calls_with(roles=("recv", "sendrecv"), blocking=True))

#: record order at equal (time, appl, task, thread)
ORDER_STATE, ORDER_ENTRY, ORDER_EXIT, ORDER_COMM, ORDER_EXIT_COUNTERS, ORDER_EVENTS = 0, 1, 2, 3, 4, 5

STATE_NAMES: tuple[str, ...] = (
    "Idle", "Running", "Not created", "Waiting a message", "Blocking Send", "Synchronization", "Test/Probe",
    "Scheduling and Fork/Join", "Wait/WaitAll", "Blocked", "Immediate Send", "Immediate Receive", "I/O",
    "Group Communication", "Tracing Disabled", "Others", "Send Receive", "Memory transfer", "Profiling",
    "On-line analysis", "Remote memory access", "Atomic memory operation", "Memory ordering operation",
    "Distributed locking", "Overhead", "One-sided op", "Startup latency", "Waiting links", "Data copy", "RTT",
    "Allocating memory", "Freeing memory")
STATE_COLORS: tuple[str, ...] = (
    "{117,195,255}", "{0,0,255}", "{255,255,255}", "{255,0,0}", "{255,0,174}", "{179,0,0}", "{0,255,0}",
    "{255,255,0}", "{235,0,0}", "{0,162,0}", "{255,0,255}", "{100,100,177}", "{172,174,41}", "{255,144,26}",
    "{2,255,177}", "{192,224,0}", "{66,66,66}", "{255,0,96}", "{169,169,169}", "{169,0,0}", "{0,109,255}",
    "{200,61,68}", "{200,66,0}", "{0,41,0}", "{139,121,177}", "{116,116,116}", "{200,50,89}", "{255,171,98}",
    "{0,68,189}", "{52,43,0}", "{255,46,0}", "{100,216,32}")


def mpi_state_of(name: str) -> int:
    """Extrae's thread state inside an MPI call (15 = Others for calls without a dedicated state)."""
    call = mpi_call(name)
    if call is None:
        return STATE_OTHERS
    if call.kind == "collective" and (call.role, call.blocking) != ("barrier", True):
        return 13
    return _STATE_OF_ROLE.get((call.role, call.blocking), STATE_OTHERS)


class WriterError(SynthtraceError):
    """The tables given to the writer cannot be written as a Paraver trace."""


# ----------------------------------------------------------------------------------------------- metadata
@dataclass(frozen=True)
class Communicator:
    """One ``c:`` line: communicator ``comm_id`` of application ``appl`` made of ``tasks`` (1-based)."""

    appl: int
    comm_id: int
    tasks: tuple[int, ...]

    def line(self) -> str:
        return f"c:{self.appl}:{self.comm_id}:{len(self.tasks)}:" + ":".join(map(str, self.tasks))


def parse_communicator(line: str) -> Communicator:
    """Parse a ``c:appl:comm:n:task...`` header line."""
    parts = line.strip().split(":")
    try:
        appl, comm, n = int(parts[1]), int(parts[2]), int(parts[3])
        tasks = tuple(int(p) for p in parts[4:4 + n])
    except (IndexError, ValueError):
        raise BadInputError(f"communicator line {line.strip()!r} is not c:appl:comm:n:tasks") from None
    return Communicator(appl, comm, tasks)


@dataclass
class TraceMeta:
    """What a trace needs beyond its tables: resources, date, communicators, names.

    ``threads_per_task[a][t]`` / ``node_of_task[a][t]`` describe task ``t+1`` of application ``a+1``;
    ``cpus_per_node`` lists the cpus of every node. ``row`` holds ``.row`` names per level (CPU, NODE, THREAD);
    missing levels get default names. ``counter_types`` pins counter names to Extrae event types (e.g. the ones
    the source trace used); ``counter_labels`` gives their descriptions. Times in ns.
    """

    cpus_per_node: tuple[int, ...]
    threads_per_task: tuple[tuple[int, ...], ...]
    node_of_task: tuple[tuple[int, ...], ...]
    started_at: datetime | None = None
    communicators: tuple[Communicator, ...] = ()
    row: dict[str, list[str]] = field(default_factory=dict)
    counter_types: dict[str, int] = field(default_factory=dict)
    counter_labels: dict[str, str] = field(default_factory=dict)
    duration_ns: int = 0
    binary: str = "app"
    node_names: tuple[str, ...] = ()

    @classmethod
    def from_trace(cls, trace: ParaverTrace) -> TraceMeta:
        """The metadata of a trace read from disk (header, ``c:`` lines, ``.row`` names, counter types, and the binary
        its ``.pcf``'s caller lines name, ``LINE (FILE, BINARY)``: else its file stem up to the first dot)."""
        h = trace.header
        comms: list[Communicator] = []
        with open(trace.path, "rb") as fh:
            fh.readline()
            for raw in fh:
                if raw.startswith(b"c:"):
                    comms.append(parse_communicator(raw.decode("utf-8", "replace")))
                elif not raw.startswith(b"#"):
                    break
        types: dict[str, int] = {}
        labels: dict[str, str] = {}
        for etype, label in trace.pcf.event_labels.items():
            if is_counter_type(etype) and etype // 1_000_000 % 2 == 0:  # relative counters only
                name = trace.pcf.counter_name(etype)
                types.setdefault(name, etype)
                desc = label.strip().replace(name, "", 1).strip().strip("()[] ")
                labels.setdefault(name, desc)
        return cls(cpus_per_node=h.cpus_per_node, threads_per_task=h.threads_per_task, node_of_task=h.node_of_task,
                   started_at=h.started_at, communicators=tuple(comms),
                   row={k: list(v) for k, v in trace.row.levels.items()}, counter_types=types,
                   counter_labels=labels, duration_ns=h.duration_ns,
                   binary=paraver_symbols(trace.pcf.event_values).binary
                   or stem_program(trace_stem(trace.path)))

    @classmethod
    def simple(cls, n_tasks: int, *, cpus_per_node: Sequence[int] | None = None,
               node_of_task: Sequence[int] | None = None, started_at: datetime | None = None,
               world_comm: int = 1, binary: str = "app") -> TraceMeta:
        """One application of ``n_tasks`` single-threaded tasks, one cpu each on one node unless told."""
        cpus = tuple(cpus_per_node) if cpus_per_node else (n_tasks,)
        nodes = tuple(node_of_task) if node_of_task else tuple([1] * n_tasks)
        return cls(cpus_per_node=cpus, threads_per_task=(tuple([1] * n_tasks),), node_of_task=(nodes,),
                   started_at=started_at, communicators=(Communicator(1, world_comm, tuple(range(1, n_tasks + 1))),),
                   binary=binary)

    def header(self, duration_ns: int) -> ParaverHeader:
        return ParaverHeader(started_at=self.started_at, duration_ns=int(duration_ns), time_scale=1,
                             cpus_per_node=tuple(self.cpus_per_node), threads_per_task=tuple(self.threads_per_task),
                             node_of_task=tuple(self.node_of_task), n_communicators=len(self.communicators))

    def row_levels(self) -> dict[str, list[str]]:
        """``.row`` names: the given ones where their count matches the resources, else defaults."""
        nodes = list(self.node_names) or [f"node{n}" for n in range(1, len(self.cpus_per_node) + 1)]
        cpus = [f"{c}.{nodes[n]}" for n, k in enumerate(self.cpus_per_node) for c in range(1, k + 1)]
        threads = [f"THREAD {a + 1}.{t + 1}.{th + 1}" for a, tasks in enumerate(self.threads_per_task)
                   for t, n in enumerate(tasks) for th in range(n)]
        out = {}
        for level, default in (("CPU", cpus), ("NODE", nodes), ("THREAD", threads)):
            given = self.row.get(level)
            if not default and not given:
                continue
            out[level] = list(given) if given is not None and len(given) == len(default) else default
        return out


# ----------------------------------------------------------------------------------------------- .pcf
@dataclass
class PcfSpec:
    """The names a ``.pcf`` declares: MPI call values per type, counters, caller functions and lines."""

    mpi_values: dict[int, dict[int, str]] = field(default_factory=dict)
    counters: list[CounterInfo] = field(default_factory=list)
    callers: dict[int, str] = field(default_factory=dict)  # 70000001 value -> function label
    caller_lines: dict[int, str] = field(default_factory=dict)  # 80000001 value -> "line (file, binary)"
    application_events: bool = False  # 40000001 Application begin/end (written by the simulator)
    #: other event types written (the ``events`` table): type -> (label, value -> name)
    other_events: dict[int, tuple[str, dict[int, str]]] = field(default_factory=dict)


def format_pcf(spec: PcfSpec) -> str:
    """Text of a ``.pcf`` file in Extrae's layout (labels ``42000050 PAPI_TOT_INS [Instr completed]``)."""
    out = ["DEFAULT_OPTIONS", "", "LEVEL               THREAD", "UNITS               NANOSEC",
           "LOOK_BACK           100", "SPEED               1", "FLAG_ICONS          ENABLED",
           "NUM_OF_STATE_COLORS 1000", "YMAX_SCALE          37", "", "", "DEFAULT_SEMANTIC", "",
           "THREAD_FUNC          State As Is", "", "", "STATES"]
    out += [f"{i}    {name}" for i, name in enumerate(STATE_NAMES)]
    out += ["", "", "STATES_COLOR"]
    out += [f"{i}    {color}" for i, color in enumerate(STATE_COLORS)]
    out += ["", ""]
    for etype in sorted(spec.mpi_values):
        out += ["EVENT_TYPE", f"9   {etype}    {MPI_TYPE_LABELS.get(etype, 'MPI')}", "VALUES"]
        out += [f"{v}   {name}" for v, name in sorted(spec.mpi_values[etype].items(), key=lambda kv: -kv[0])]
        out += ["0   Outside MPI", "", ""]
    out += ["EVENT_TYPE", f"1    {COLLECTIVE_INFO_TYPES[0]}    Send Size in MPI Global OP",
            f"1    {COLLECTIVE_INFO_TYPES[1]}    Recv Size in MPI Global OP",
            f"1    {COLLECTIVE_INFO_TYPES[2]}    Root in MPI Global OP",
            f"1    {COLLECTIVE_INFO_TYPES[3]}    Communicator in MPI Global OP", "", ""]
    if spec.application_events:
        out += ["EVENT_TYPE", f"6    {APPL_EVENT}    Application", "VALUES", "0      End", "1      Begin", "", ""]
    counter_types = {c.event_type for c in spec.counters}
    more_counters = {t: label for t, (label, _) in spec.other_events.items()
                     if is_counter_type(t) and t not in counter_types}
    if spec.counters or more_counters:
        out += ["EVENT_TYPE"]
        out += [f"7  {c.event_type} {c.name} [{c.description}]" for c in spec.counters]
        out += [f"7  {t} {label}" for t, label in sorted(more_counters.items())]
        out += [f"7  {COUNTER_SET_EVENT} Active hardware counter set", ""]
    for etype, (label, values) in sorted(spec.other_events.items()):
        if is_counter_type(etype):
            continue
        out += ["EVENT_TYPE", f"0    {etype}    {label}"]
        if values:
            out += ["VALUES"] + [f"{v}   {name}" for v, name in sorted(values.items())]
        out += ["", ""]
    out += ["GRADIENT_COLOR"] + [f"{i}    {{0,{255 - 12 * i},{2 + 12 * i}}}" for i in range(15)] + [""]
    out += ["GRADIENT_NAMES", "0    Gradient 0", "1    Grad. 1/MPI Events", "2    Grad. 2/OMP Events",
            "3    Grad. 3/OMP locks", "4    Grad. 4/User func", "5    Grad. 5/User Events",
            "6    Grad. 6/General Events", "7    Grad. 7/Hardware Counters"]
    out += [f"{i}    Gradient {i}" for i in range(8, 15)] + ["", ""]
    if spec.callers:
        out += ["EVENT_TYPE", f"0    {CALLER_TYPE}    Caller at level 1", "VALUES", "0   End"]
        out += [f"{v} {label}" for v, label in sorted(spec.callers.items())] + ["", ""]
    if spec.caller_lines:
        out += ["EVENT_TYPE", f"0    {CALLER_LINE_TYPE}    Caller line at level 1", "VALUES", "0   End"]
        out += [f"{v} {label}" for v, label in sorted(spec.caller_lines.items())] + ["", ""]
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------------------------- record text
def state_line(cpu: pl.Expr, appl: pl.Expr, task: pl.Expr, thread: pl.Expr, begin: pl.Expr, end: pl.Expr,
               state: pl.Expr) -> pl.Expr:
    """``1:cpu:appl:task:thread:begin:end:state`` from integer expressions."""
    return pl.concat_str([pl.lit("1"), cpu, appl, task, thread, begin, end, state], separator=":")


def event_line(cpu: pl.Expr, appl: pl.Expr, task: pl.Expr, thread: pl.Expr, time: pl.Expr,
               pairs: Iterable[tuple[int | pl.Expr, pl.Expr]]) -> pl.Expr:
    """``2:cpu:appl:task:thread:time:type:value[:type:value]*``; pairs whose value is NULL are left out.

    The result is NULL where every value is NULL (no record to write).
    """
    pieces = []
    for etype, value in pairs:
        t = pl.lit(str(etype)) if isinstance(etype, int) else etype.cast(pl.String)
        pieces.append(pl.when(value.is_not_null()).then(pl.concat_str([t, value.cast(pl.String)], separator=":")))
    body = pl.concat_str(pieces, separator=":", ignore_nulls=True)
    head = pl.concat_str([pl.lit("2"), cpu, appl, task, thread, time], separator=":")
    return pl.when(pl.any_horizontal([p.is_not_null() for p in pieces])).then(
        pl.concat_str([head, body], separator=":"))


def comm_line(s: Sequence[pl.Expr], r: Sequence[pl.Expr], size: pl.Expr, tag: pl.Expr) -> pl.Expr:
    """``3:`` record from sender (cpu, appl, task, thread, logical, physical), receiver likewise, size, tag."""
    return pl.concat_str([pl.lit("3"), *s, *r, size, tag], separator=":")


#: columns of a record block: sort keys then the text of the record
BLOCK_SCHEMA: dict[str, pl.DataType] = {"t": pl.Int64(), "a": pl.Int32(), "k": pl.Int32(), "h": pl.Int32(),
                                        "o": pl.Int8(), "line": pl.String()}
SORT_KEYS = ["t", "a", "k", "h", "o"]


def block(t: pl.Expr, a: pl.Expr, k: pl.Expr, h: pl.Expr, o: int, line: pl.Expr) -> list[pl.Expr]:
    """Select list that turns a frame into a record block (see :data:`BLOCK_SCHEMA`)."""
    return [t.cast(pl.Int64).alias("t"), a.cast(pl.Int32).alias("a"), k.cast(pl.Int32).alias("k"),
            h.cast(pl.Int32).alias("h"), pl.lit(o, pl.Int8).alias("o"), line.alias("line")]


# ----------------------------------------------------------------------------------------------- streaming file
def _copy_rest(src, dst) -> None:
    """Append the rest of file ``src`` to ``dst`` (in the kernel when the OS allows)."""
    dst.flush()
    try:
        size = os.fstat(src.fileno()).st_size
        off = src.tell()
        while off < size:
            n = os.copy_file_range(src.fileno(), dst.fileno(), size - off, off)
            if n == 0:
                break
            off += n
        if off >= size:
            return
        src.seek(off)
    except (AttributeError, OSError):
        src.seek(0)
    shutil.copyfileobj(src, dst, 16 << 20)


class ParaverWriter:
    """Streams one ``.prv`` (plus its ``.pcf``/``.row`` at :meth:`close`).

    ``add(block, watermark_ns)`` takes a record block (:data:`BLOCK_SCHEMA`); records earlier than the watermark
    are sorted and written, later ones wait for the next call (the caller promises every future record is at or
    after the watermark). When the duration is not known up front the body goes to a temporary file and the
    header is written in front of it at :meth:`close`. The ``.prv`` appears (by rename) only when complete, after
    its ``.pcf`` and ``.row``: a folder watcher never picks up half a trace.
    """

    def __init__(self, stem: str | Path, meta: TraceMeta, *, duration_ns: int | None = None):
        self.stem = Path(stem)
        self.prv = self.stem if self.stem.suffix == ".prv" else self.stem.with_name(self.stem.name + ".prv")
        self.meta = meta
        self.prv.parent.mkdir(parents=True, exist_ok=True)
        self._known_duration = duration_ns
        self._part = self.prv.with_name(self.prv.name + ".part")
        self._body_path = self.prv.with_name(self.prv.name + ".body.part") if duration_ns is None else self._part
        self._fh = open(self._body_path, "wb")
        if duration_ns is not None:
            self._fh.write(self._head(duration_ns))
        self._pending: list[pl.DataFrame] = []
        self.last_time_ns = 0
        self.bytes_written = 0
        self.closed = False

    def _head(self, duration_ns: int) -> bytes:
        lines = [format_header(self.meta.header(duration_ns))] + [c.line() for c in self.meta.communicators]
        return ("\n".join(lines) + "\n").encode()

    def add(self, records: pl.DataFrame, watermark_ns: int | None = None) -> None:
        """Queue a record block; write every queued record with time < ``watermark_ns`` (all if None)."""
        if records.height:
            self._pending.append(records.select(BLOCK_SCHEMA.keys()))
        self._flush(watermark_ns)

    def _flush(self, watermark_ns: int | None) -> None:
        if not self._pending:
            return
        df = pl.concat(self._pending) if len(self._pending) > 1 else self._pending[0]
        if watermark_ns is not None:
            later = df.filter(pl.col("t") >= watermark_ns)
            df = df.filter(pl.col("t") < watermark_ns)
            self._pending = [later] if later.height else []
        else:
            self._pending = []
        if not df.height:
            return
        df = df.sort(SORT_KEYS, maintain_order=True)
        first = int(df.item(0, "t"))
        if first < self.last_time_ns:
            raise WriterError(f"{self.prv}: record at {first} ns written after one at {self.last_time_ns} ns "
                              "(a block came in earlier than the previous watermark promised)")
        self.last_time_ns = int(df.item(df.height - 1, "t"))
        before = self._fh.tell()
        df.select("line").write_csv(self._fh, include_header=False, quote_style="never")
        self.bytes_written += self._fh.tell() - before

    def close(self, pcf: PcfSpec, duration_ns: int | None = None) -> Path:
        """Write what is left, the header (if deferred), the ``.pcf`` and ``.row``; returns the ``.prv`` path."""
        self._flush(None)
        self._fh.close()
        end = max(duration_ns or 0, self.last_time_ns, self.meta.duration_ns)
        if self._known_duration is None:
            with open(self._part, "wb") as out, open(self._body_path, "rb") as body:
                out.write(self._head(end))
                _copy_rest(body, out)
            os.unlink(self._body_path)
        elif end > self._known_duration:
            self.abort()
            raise WriterError(
                f"{self.prv}: records reach {end} ns, beyond the declared duration {self._known_duration} ns"
            )
        self.prv.with_suffix(".pcf").write_text(format_pcf(pcf))
        self.prv.with_suffix(".row").write_text(format_row(self.meta.row_levels()))
        os.replace(self._part, self.prv)
        self.closed = True
        return self.prv

    def abort(self) -> None:
        """Close and remove the partial output."""
        self._fh.close()
        for p in {self._body_path, self._part}:
            if p.exists():
                p.unlink()


# ----------------------------------------------------------------------------------------------- call sites
#: a call site as the readers render a resolved one, "func (file:line)" (the Paraver writer and the simulator's OTF2
#: writer parse it back)
SITE_FULL = re.compile(r"^(?P<func>.+) \((?P<file>[^,)]+):(?P<line>\d+)\)$")
_SITE_RAW = re.compile(r"^(?P<func>.+) \(line (?P<value>\d+)\)$")


@dataclass
class CallSites:
    """Caller ids for call-site strings as the reader renders them: ``func (file:line)``, ``func (line N)`` or
    ``func``."""

    binary: str = "app"
    functions: dict[str, int] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)
    line_labels: dict[int, str] = field(default_factory=dict)

    def add(self, sites: Iterable[str]) -> None:
        parsed = [(s, SITE_FULL.match(s), _SITE_RAW.match(s)) for s in sorted(set(sites))]
        raw_values = {int(raw["value"]) for _, full, raw in parsed if raw and not full}
        nxt = max([2, *raw_values, *self.line_labels]) + 1
        for s, full, raw in parsed:
            func = full["func"] if full else raw["func"] if raw else s
            if func not in self.functions:
                self.functions[func] = {"Unresolved": 1, "_NOT_Found": 2}.get(func) or (3 + len(
                    [f for f in self.functions if f not in ("Unresolved", "_NOT_Found")]))
            if full:
                key = f"{full['line']} ({full['file']}, {self.binary})"
                if key not in self.lines:
                    self.lines[key] = nxt
                    self.line_labels[nxt] = key
                    nxt += 1
            elif raw:
                v = int(raw["value"])
                self.line_labels.setdefault(v, f"{v} unresolved")

    def ids(self, site: str | None) -> tuple[int | None, int | None]:
        """(70000001 value, 80000001 value) of a call-site string."""
        if site is None:
            return None, None
        full, raw = SITE_FULL.match(site), _SITE_RAW.match(site)
        func = full["func"] if full else raw["func"] if raw else site
        if full:
            return self.functions[func], self.lines[f"{full['line']} ({full['file']}, {self.binary})"]
        return self.functions[func], (int(raw["value"]) if raw else None)

    def frame(self, sites: Iterable[str | None]) -> pl.DataFrame:
        """call_site -> _func, _line lookup table."""
        rows = [(s, *self.ids(s)) for s in sorted({s for s in sites if s is not None})]
        return pl.DataFrame(rows, schema={"call_site": pl.String, "_func": pl.Int64, "_line": pl.Int64}, orient="row")

    def pcf_labels(self) -> tuple[dict[int, str], dict[int, str]]:
        funcs = {v: f for f, v in self.functions.items()}
        return funcs, dict(self.line_labels)


def mpi_call_ids(calls: Iterable[tuple[str, str]]) -> dict[tuple[str, str], tuple[int, int]]:
    """(kind, name) -> (event type, value): Extrae's ids where known, new ids from 1000 in name order otherwise."""
    out: dict[tuple[str, str], tuple[int, int]] = {}
    taken: dict[int, set[int]] = {}
    pairs = sorted(set(calls))
    for kind, name in pairs:
        etype = MPI_TYPES.get(kind, MPI_TYPES[mpi_kind_of(name)])
        value = (call := mpi_call(name)) and call.extrae_value
        if value:
            out[(kind, name)] = (etype, value)
            taken.setdefault(etype, set()).add(value)
    for kind, name in pairs:
        if (kind, name) in out:
            continue
        etype = MPI_TYPES.get(kind, MPI_TYPES[mpi_kind_of(name)])
        m = PLACEHOLDER.fullmatch(name)
        v = int(m[1]) if m and int(m[1]) not in taken.get(etype, set()) else 1000
        while v in taken.get(etype, set()):
            v += 1
        taken.setdefault(etype, set()).add(v)
        out[(kind, name)] = (etype, v)
    return out


# ----------------------------------------------------------------------------------------------- from tables
#: a table the writer takes: in memory, or lazy (a Parquet scan) and then read one time window at a time
Table = pl.DataFrame | pl.LazyFrame


def _with_defaults(df: pl.LazyFrame, schema: Mapping[str, pl.DataType]) -> pl.LazyFrame:
    """``df`` with every column of ``schema`` (missing ones NULL) cast to the schema's types."""
    names = df.collect_schema().names()
    exprs = [pl.col(c).cast(dtype) if c in names else pl.lit(None, dtype).alias(c) for c, dtype in schema.items()]
    return df.with_columns(exprs)


def _counter_columns(bursts: pl.LazyFrame, counters: Sequence[str] | None) -> list[str]:
    schema = bursts.collect_schema()
    if counters is not None:
        missing = [c for c in counters if c not in schema]
        if missing:
            raise WriterError(f"counter column(s) not in the bursts table: {', '.join(missing)}")
        return list(counters)
    return [c for c in counter_columns(bursts) if schema[c].is_integer()]  # Paraver counts are integers


def _as_counts(df: pl.LazyFrame, cols: Sequence[str], what: str) -> pl.LazyFrame:
    """Counter columns as Int64 counts (floats rounded); negative counts cannot be written (checked in one pass)."""
    schema = df.collect_schema()
    df = df.with_columns((pl.col(c).round(0) if schema[c].is_float() else pl.col(c)).cast(pl.Int64).alias(c)
                         for c in cols)
    negative = df.select((pl.col(c) < 0).any() for c in cols).collect().row(0) if cols else ()
    for c, neg in zip(cols, negative):
        if neg:
            raise WriterError(f"{what}: counter {c!r} has negative values; Paraver counters are unsigned counts")
    return df


def _distinct(df: pl.LazyFrame, col: str) -> list:
    """The distinct non-NULL values of column ``col``."""
    return df.select(pl.col(col).drop_nulls().unique()).collect().get_column(col).to_list()


def _maximum(df: pl.LazyFrame, col: str) -> int | None:
    return df.select(pl.col(col).max()).collect().item()


def messages_from_calls(calls: pl.DataFrame) -> pl.DataFrame:
    """Reconstruct point-to-point messages from MPI calls that carry bytes, peer and tag (no message table).

    The k-th send from task A to task B with tag T is matched with the k-th receive on B from A with tag T
    (MPI's non-overtaking order). Logical send = the send call's entry; logical receive = the receive call's exit.
    Calls that both send and receive (Sendrecv) are treated as a send to ``peer``; their receive side is lost.
    """
    p2p = calls.filter((pl.col("mpi_kind") == "point_to_point") & pl.col("peer").is_not_null())
    key = ["appl", "src", "dst", "tag"]
    sends = (p2p.filter(pl.col("bytes_sent") > 0)
             .select("appl", pl.col("task").alias("src"), pl.col("peer").alias("dst"), pl.col("tag").fill_null(0),
                     pl.col("thread").alias("s_thread"), pl.col("start_ns").alias("s_time_ns"),
                     pl.col("bytes_sent").alias("size"))
             .sort("s_time_ns").with_columns(pl.int_range(pl.len()).over(key).alias("_k")))
    recvs = (p2p.filter((pl.col("bytes_recv") > 0) & (pl.col("bytes_sent").fill_null(0) == 0))
             .select("appl", pl.col("peer").alias("src"), pl.col("task").alias("dst"), pl.col("tag").fill_null(0),
                     pl.col("thread").alias("r_thread"), pl.col("end_ns").alias("r_time_ns"))
             .sort("r_time_ns").with_columns(pl.int_range(pl.len()).over(key).alias("_k")))
    m = sends.join(recvs, on=[*key, "_k"], how="inner")
    return m.select(pl.col("appl").alias("s_appl"), pl.col("src").alias("s_task"), "s_thread", "s_time_ns",
                    pl.col("appl").alias("r_appl"), pl.col("dst").alias("r_task"), "r_thread", "r_time_ns",
                    "size", "tag").cast(MESSAGE_SCHEMA)


def _physical_times(messages: pl.DataFrame, calls: pl.DataFrame) -> pl.DataFrame:
    """Add ``s_phys_ns`` (exit of the sending call) and ``r_phys_ns`` (exit of the completing call) if absent, and
    the ends' cpus (``s_cpu``, ``r_cpu``); physical times already given (a read trace's) are kept."""
    if {"s_phys_ns", "r_phys_ns", "s_cpu", "r_cpu"} <= set(messages.columns):
        return messages
    # merge-verdict (issue 22): the reader keeps the records' physical times, without cpus: keep them, add the cpus
    given = [c for c in ("s_phys_ns", "r_phys_ns") if c in messages.columns]
    messages = messages.rename({c: f"_given_{c}" for c in given}).drop("s_cpu", "r_cpu", strict=False)
    spans = calls.select(*THREAD_KEYS, "start_ns", "end_ns", "mpi_call", "cpu").sort("start_ns")

    def containing(prefix: str) -> pl.DataFrame:
        m = messages.with_row_index("_i").select(
            "_i", pl.col(f"{prefix}appl").alias("appl"), pl.col(f"{prefix}task").alias("task"),
            pl.col(f"{prefix}thread").alias("thread"), pl.col(f"{prefix}time_ns").alias("_t")).sort("_t")
        hit = m.join_asof(spans, left_on="_t", right_on="start_ns", by=THREAD_KEYS, strategy="backward",
                          check_sortedness=False)
        return hit.with_columns(pl.when(pl.col("_t") <= pl.col("end_ns")).then(pl.col("end_ns")).alias("_end"),
                                pl.when(pl.col("_t") <= pl.col("end_ns")).then(pl.col("mpi_call")).alias("_call"),
                                pl.when(pl.col("_t") <= pl.col("end_ns")).then(pl.col("cpu")).alias("_cpu"))

    snd = containing("s_").select("_i", pl.coalesce("_end", "_t").alias("s_phys_ns"), pl.col("_cpu").alias("s_cpu"))
    rcv = containing("r_")
    # a nonblocking receive completes at the exit of the next completing call on the receiving thread
    done = (calls.filter(pl.col("mpi_call").is_in(COMPLETING_CALLS))
            .select(*THREAD_KEYS, pl.col("start_ns").alias("_cstart"), pl.col("end_ns").alias("_cend")).sort("_cstart"))
    rcv = rcv.sort("_t").join_asof(done, left_on="_t", right_on="_cstart", by=THREAD_KEYS, strategy="forward",
                                   check_sortedness=False)
    completes_itself = pl.col("_call").is_in(COMPLETING_CALLS)
    rcv = rcv.select("_i", pl.when(completes_itself).then(pl.col("_end"))
                     .otherwise(pl.coalesce("_cend", "_end", "_t")).alias("r_phys_ns"), pl.col("_cpu").alias("r_cpu"))
    out = messages.with_row_index("_i").join(snd, on="_i", how="left").join(rcv, on="_i", how="left")
    out = out.with_columns(pl.coalesce(f"_given_{c}", c).alias(c) for c in given).drop(f"_given_{c}" for c in given)
    return out.with_columns(pl.max_horizontal("s_phys_ns", "s_time_ns").alias("s_phys_ns"),
                            pl.max_horizontal("r_phys_ns", "r_time_ns").alias("r_phys_ns")).drop("_i")


def _windows(times: np.ndarray, rows_per_window: int) -> list[int]:
    """Time boundaries splitting ``times`` into windows of about ``rows_per_window`` rows."""
    if times.size == 0:
        return []
    qs = np.sort(times)[::rows_per_window][1:]
    return sorted(set(int(q) for q in qs))


#: the calls' columns the messages, their physical times and the calls' message bytes are computed from
_CALL_CORE = [*THREAD_KEYS, "cpu", "start_ns", "end_ns", "mpi_call", "mpi_kind", "peer", "tag", "bytes_sent",
              "bytes_recv"]


def write_paraver(stem: str | Path, bursts: Table, mpi_calls: Table, meta: TraceMeta, *,
                  messages: pl.DataFrame | None = None, counters: Sequence[str] | None = None,
                  exit_counters: Sequence[str] | None = None, events: Table | None = None,
                  rows_per_window: int = 500_000) -> Path:
    """Write ``stem.prv/.pcf/.row`` from tidy tables; returns the ``.prv`` path.

    ``bursts``: one row per computation burst (appl, task, thread, cpu, start_ns, end_ns, counter columns; extra
    columns are ignored). ``counters``: the counter columns to write (default: every integer column that is not
    a fixed burst column; float columns such as rescaled merged counters must be named and are rounded).
    ``mpi_calls``: the reader's MPI-call table; its counter columns (counts measured inside each call, or those
    ``exit_counters`` names) are written on a record at the call's exit, as Extrae writes them. ``messages``:
    point-to-point messages with logical times as the reader's
    ``ReadSummary.messages`` (optional ``s_phys_ns``/``r_phys_ns``); without it they are rebuilt from the calls'
    peer, tag and bytes (:func:`messages_from_calls`). ``events``: the run's other events (EVENT_SCHEMA, the
    ``events`` view), written back each on a record of its own, their names into the ``.pcf``. Times in ns;
    counters in counts.

    ``bursts``, ``mpi_calls`` and ``events`` may be lazy (Parquet scans): they are then read one window of about
    ``rows_per_window`` records at a time (a scan sorted lazily is sorted per window: its sort key must order
    every row), and only a few columns of the calls (:data:`_CALL_CORE`) and the messages are held whole, so the
    memory does not grow with the bursts, the events or the calls' other columns. The file is the same whatever
    the window.
    """
    bursts = _with_defaults(bursts.lazy(), dict(BURST_SCHEMA.items()))
    calls = _with_defaults(mpi_calls.lazy(), MPI_CALL_SCHEMA)
    if exit_counters is None:
        exit_counters = counter_columns(calls)
    cols = _counter_columns(bursts, counters)
    bursts = _as_counts(bursts, cols, "bursts")
    calls = _as_counts(calls, list(exit_counters), "mpi_calls")
    infos = catalogue([*cols, *[c for c in exit_counters if c not in cols]], meta.counter_types, meta.counter_labels)
    ctype = {c.name: c.event_type for c in infos}

    # MPI call ids, states and caller ids
    names = set(_distinct(calls, "mpi_call")) | set(_distinct(bursts, "mpi_call"))
    kind_of = {n: mpi_kind_of(n) for n in names}
    calls = calls.with_columns(
        pl.col("mpi_kind").fill_null(pl.col("mpi_call").replace_strict(kind_of, default=None, return_dtype=pl.String))
    )
    kinds = calls.select("mpi_kind", "mpi_call").unique().collect().rows()
    burst_calls = _distinct(bursts, "mpi_call")
    ids = mpi_call_ids([*kinds, *[(mpi_kind_of(n), n) for n in burst_calls]])
    id_frame = pl.DataFrame([(k, n, t, v, mpi_state_of(n)) for (k, n), (t, v) in ids.items()],
                            schema={"mpi_kind": pl.String, "mpi_call": pl.String, "_type": pl.Int64,
                                    "_value": pl.Int64, "_state": pl.Int64}, orient="row")
    sites = CallSites(binary=meta.binary)
    all_sites = [*_distinct(calls, "call_site"), *_distinct(bursts, "call_site")]
    sites.add(all_sites)
    site_frame = sites.frame(all_sites)

    # messages and the collective part of the calls' bytes (the rest comes from the messages), from the calls'
    # columns that place them
    core = calls.select(_CALL_CORE).collect()
    if messages is None:
        messages = messages_from_calls(core)
    messages = _physical_times(messages, core)
    placed = message_columns(core.select(*THREAD_KEYS, "start_ns", "end_ns"), messages.select(MESSAGE_SCHEMA.keys()))
    via_msgs = pl.concat([core.select(*THREAD_KEYS, "start_ns"), placed.select(
        pl.col("_add_sent").cast(MPI_CALL_SCHEMA["bytes_sent"]).alias("_msent"),
        pl.col("_add_recv").cast(MPI_CALL_SCHEMA["bytes_recv"]).alias("_mrecv"))], how="horizontal")
    via_msgs = via_msgs.unique(subset=[*THREAD_KEYS, "start_ns"])

    # entries named only by a burst (an MPI call entered but never left before the trace ends)
    known = core.select(*THREAD_KEYS, pl.col("start_ns").alias("end_ns")).unique()
    dangling = (
        bursts.filter(pl.col("mpi_call").is_not_null())
        .select(*THREAD_KEYS, "cpu", "mpi_call", "call_site", "end_ns")
        .join(known.lazy(), on=[*THREAD_KEYS, "end_ns"], how="anti")
        .select(*THREAD_KEYS, "cpu", "mpi_call", "call_site", pl.col("end_ns").alias("start_ns"))
        .with_columns(
            pl.col("mpi_call").replace_strict(kind_of, default=None, return_dtype=pl.String).alias("mpi_kind")
        )
        .collect()
        .join(id_frame, on=["mpi_kind", "mpi_call"], how="left")
        .join(site_frame, on="call_site", how="left")
    )

    ranks = member_ranks(pl.DataFrame(
        [(c.appl, c.comm_id, t) for c in meta.communicators for t in c.tasks], schema=COMMUNICATOR_SCHEMA,
        orient="row"))
    thread_cpu = bursts.group_by(THREAD_KEYS).agg(pl.col("cpu").first().alias("_tcpu")).collect()
    events = events.lazy() if events is not None else pl.LazyFrame(schema=EVENT_SCHEMA)
    messages = (messages.join(thread_cpu.rename({"appl": "s_appl", "task": "s_task", "thread": "s_thread"}),
                              on=["s_appl", "s_task", "s_thread"], how="left")
                .with_columns(pl.coalesce("s_cpu", "_tcpu", pl.lit(1)).alias("s_cpu")).drop("_tcpu")
                .join(thread_cpu.rename({"appl": "r_appl", "task": "r_task", "thread": "r_thread"}),
                      on=["r_appl", "r_task", "r_thread"], how="left")
                .with_columns(pl.coalesce("r_cpu", "_tcpu", pl.lit(1)).alias("r_cpu")).drop("_tcpu"))

    end = max([meta.duration_ns] + [int(v) for v in (
        _maximum(bursts, "end_ns"), core.get_column("end_ns").max(), _maximum(events, "time_ns"),
        messages.get_column("r_phys_ns").max()) if v is not None])
    used = [*THREAD_KEYS, "cpu", "start_ns", "end_ns", *cols]
    writer = ParaverWriter(stem, meta, duration_ns=end)
    try:
        starts = np.concatenate([bursts.select("start_ns").collect().get_column("start_ns").to_numpy(),
                                 core.get_column("start_ns").to_numpy(),
                                 events.select("time_ns").collect().get_column("time_ns").to_numpy()])
        del core
        bounds = _windows(starts, rows_per_window)
        edges = [None, *bounds, None]
        for lo, hi in zip(edges[:-1], edges[1:]):
            def window(col: str, lo=lo, hi=hi) -> pl.Expr:
                m = pl.lit(True)
                if lo is not None:
                    m = m & (pl.col(col) >= lo)
                if hi is not None:
                    m = m & (pl.col(col) < hi)
                return m

            recs = _table_records(bursts.filter(window("start_ns")).select(used).collect(),
                                  bursts.filter(window("end_ns")).select(used).collect(),
                                  _calls_of(calls.filter(window("start_ns")).collect(), via_msgs, id_frame,
                                            site_frame, ranks),
                                  dangling.filter(window("start_ns")), messages.filter(window("s_time_ns")),
                                  _events_of(events.filter(window("time_ns")).select(
                                      *THREAD_KEYS, "time_ns", "type", "value").collect(), thread_cpu), cols,
                                  list(exit_counters), ctype)
            writer.add(recs, hi)
    except BaseException:
        writer.abort()
        raise
    funcs, lines = sites.pcf_labels()
    mpi_values: dict[int, dict[int, str]] = {}
    for (_, name), (etype, value) in ids.items():
        mpi_values.setdefault(etype, {})[value] = name
    return writer.close(PcfSpec(mpi_values=mpi_values, counters=infos, callers=funcs, caller_lines=lines,
                                other_events=_event_names(events)), end)


def _events_of(events: pl.DataFrame, thread_cpu: pl.DataFrame) -> pl.DataFrame:
    """Events on the cpu of their thread's first burst (0: a thread without bursts), in their own order."""
    return events.join(thread_cpu, on=THREAD_KEYS, how="left").with_columns(
        pl.col("_tcpu").fill_null(0).alias("cpu"))


def _calls_of(calls: pl.DataFrame, via_msgs: pl.DataFrame, id_frame: pl.DataFrame,
              site_frame: pl.DataFrame, ranks: pl.DataFrame) -> pl.DataFrame:
    """Calls as the records need them: with their call ids and states (``id_frame``), caller ids (``site_frame``),
    the bytes their messages do not account for (``_csend``/``_crecv``: the collective part; ``via_msgs``: the
    messages' bytes per call) and ``root`` as Extrae's flag (1 on the root's own call; ``ranks``:
    :func:`~synthtrace.tracelib.formats.paraver.collective_roots.member_ranks` of the trace's communicators)."""
    calls = (root_flags(calls, ranks).join(via_msgs, on=[*THREAD_KEYS, "start_ns"], how="left")
             .join(id_frame, on=["mpi_kind", "mpi_call"], how="left")
             .join(site_frame, on="call_site", how="left")
             .with_columns((pl.col("bytes_sent").fill_null(0) - pl.col("_msent").fill_null(0)).alias("_csend"),
                           (pl.col("bytes_recv").fill_null(0) - pl.col("_mrecv").fill_null(0)).alias("_crecv")))
    is_coll = pl.col("mpi_kind") == "collective"
    return calls.with_columns(
        pl.when(is_coll | (pl.col("_csend") != 0)).then(pl.col("_csend")).alias("_csend"),
        pl.when(is_coll | (pl.col("_crecv") != 0)).then(pl.col("_crecv")).alias("_crecv"))


def _event_names(events: Table) -> dict[int, tuple[str, dict[int, str]]]:
    """Label and value names of each event type of ``events`` (EVENT_SCHEMA), as the .pcf declares them."""
    named = (events.lazy().select("type", "value", "type_name", "value_name").unique(["type", "value"])
             .sort("type", "value").collect())
    out: dict[int, tuple[str, dict[int, str]]] = {}
    for etype, value, label, value_name in named.iter_rows():
        _, values = out.setdefault(etype, (label or f"Event type {etype}", {}))
        if value_name is not None:
            values[value] = value_name
    return out


def _table_records(bursts: pl.DataFrame, ending: pl.DataFrame, calls: pl.DataFrame, dangling: pl.DataFrame,
                   messages: pl.DataFrame, events: pl.DataFrame, counters: list[str], exit_counters: list[str],
                   ctype: dict[str, int]) -> pl.DataFrame:
    """The record block of one time window: ``bursts`` starting in it, ``ending`` bursts ending in it (their
    counters go on the entry record of the call that closes them), calls and messages starting in it."""
    a, k, h, cpu = pl.col("appl"), pl.col("task"), pl.col("thread"), pl.col("cpu")
    parts = [
        bursts.select(block(pl.col("start_ns"), a, k, h, ORDER_STATE,
                            state_line(cpu, a, k, h, pl.col("start_ns"), pl.col("end_ns"), pl.lit(STATE_RUNNING)))),
        calls.select(block(pl.col("start_ns"), a, k, h, ORDER_STATE,
                           state_line(cpu, a, k, h, pl.col("start_ns"), pl.col("end_ns"), pl.col("_state")))),
        calls.select(block(pl.col("end_ns"), a, k, h, ORDER_EXIT,
                           event_line(cpu, a, k, h, pl.col("end_ns"), [(pl.col("_type"), pl.lit(0))]))),
    ]
    if exit_counters:
        parts.append(calls.select(block(pl.col("end_ns"), a, k, h, ORDER_EXIT_COUNTERS, event_line(
            cpu, a, k, h, pl.col("end_ns"), [(ctype[c], pl.col(c)) for c in exit_counters]))))
    if events.height:
        parts.append(events.select(block(pl.col("time_ns"), a, k, h, ORDER_EVENTS, event_line(
            cpu, a, k, h, pl.col("time_ns"), [(pl.col("type"), pl.col("value"))]))))
    # entry records: MPI call, collective info, the closing burst's counters, callers (one record per time)
    entries = pl.concat([
        calls.select(*THREAD_KEYS, "cpu", pl.col("start_ns").alias("_t"), "_type", "_value", "_csend", "_crecv",
                     pl.col("root").cast(pl.Int64), pl.col("comm").cast(pl.Int64), "_func", "_line"),
        dangling.select(*THREAD_KEYS, "cpu", pl.col("start_ns").alias("_t"), "_type", "_value",
                        pl.lit(None, pl.Int64).alias("_csend"), pl.lit(None, pl.Int64).alias("_crecv"),
                        pl.lit(None, pl.Int64).alias("root"), pl.lit(None, pl.Int64).alias("comm"), "_func", "_line"),
    ], how="vertical_relaxed").with_columns(pl.int_range(pl.len()).over([*THREAD_KEYS, "_t"]).alias("_dup"))
    closing = ending.select(*THREAD_KEYS, pl.col("cpu").alias("_bcpu"), pl.col("end_ns").alias("_t"), *counters,
                            pl.lit(0, pl.Int64).alias("_dup"))
    # the counters ride on the first entry at the burst's end (calls entered at the same time get their own record)
    ev = entries.join(closing, on=[*THREAD_KEYS, "_t", "_dup"], how="full", coalesce=True)
    ev = ev.with_columns(pl.coalesce("cpu", "_bcpu").alias("cpu"))
    pairs: list[tuple[int | pl.Expr, pl.Expr]] = [
        (pl.col("_type"), pl.col("_value")),
        (COLLECTIVE_INFO_TYPES[0], pl.col("_csend")), (COLLECTIVE_INFO_TYPES[1], pl.col("_crecv")),
        (COLLECTIVE_INFO_TYPES[2], pl.col("root")), (COLLECTIVE_INFO_TYPES[3], pl.col("comm")),
        *[(ctype[c], pl.col(c)) for c in counters],
        (CALLER_TYPE, pl.col("_func")), (CALLER_LINE_TYPE, pl.col("_line")),
    ]
    parts.append(ev.select(block(pl.col("_t"), a, k, h, ORDER_ENTRY, event_line(cpu, a, k, h, pl.col("_t"), pairs))))
    if messages.height:
        s = [pl.col(c) for c in ("s_cpu", "s_appl", "s_task", "s_thread", "s_time_ns", "s_phys_ns")]
        r = [pl.col(c) for c in ("r_cpu", "r_appl", "r_task", "r_thread", "r_time_ns", "r_phys_ns")]
        parts.append(messages.select(block(pl.col("s_phys_ns"), pl.col("s_appl"), pl.col("s_task"), pl.col("s_thread"),
                                           ORDER_COMM, comm_line(s, r, pl.col("size"), pl.col("tag").fill_null(0)))))
    out = pl.concat(parts, how="vertical_relaxed")
    return out.filter(pl.col("line").is_not_null())

