"""The first line of a ``.prv`` file: date, duration, resource model, applications, communicators.

``#Paraver (dd/mm/yyyy at hh:mm):END[_ns|_us]:NODES(cpus,...):N_APPL:NTASKS(threads:node,...)...[,N_COMM]``.
The resource part is ``0`` (or ``0()``, as Extrae writes it) when the tracer did not record nodes, and a bare
``N`` for N nodes of one cpu each (paraver-kernel ``resourcemodel.cpp``). The duration's unit is ``_ns``, ``_us`` or
``_ms``; without one, and with any other suffix, Paraver reads microseconds (``traceheader.h``), and so does this
parser. All times are converted to nanoseconds.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from synthtrace.tracelib.errors import TraceFormatError
from synthtrace.tracelib.printable import clipped

_HEADER = re.compile(r"^#Paraver \((?P<date>[^)]*)\):(?P<rest>.*)$")
# Every number of the header is ASCII digits only, as Paraver's C++ stream reads it: Python's int() and \d would
# also take Arabic-Indic and other Unicode digits, '+', blanks inside and '_' digit grouping (1_871_482_775_ns was
# read as 1 us with the unit "_871_482_775_ns")
_NUMBER = re.compile(r"[0-9]+")
_SIGNED = re.compile(r"-?[0-9]+")
_DURATION = re.compile(r"^(?P<value>[0-9]+)(?P<unit>_[^0-9]*)?$")
_COUNTED = re.compile(r"^(?P<n>[0-9]+)(?:\((?P<items>[^)]*)\))?$")
#: ns per trace unit of each suffix Paraver knows (traceheader.h); any other suffix, or none, is microseconds
_UNIT_NS = {"_ns": 1, "_ms": 1_000_000}
PARAVER_UNITS = frozenset({"_ns", "_us", "_ms", ""})
MAX_DIGITS = 30  # no header number is longer (a 64-bit integer has 20 digits)
_LONG_NUMBER = re.compile(rf"[0-9]{{{MAX_DIGITS + 1},}}")
INT32_MAX = 2**31 - 1
ID_BITS = 21  # appl, task and thread numbers are kept in 21 bits each (one sortable 64-bit key)
MAX_ID = (1 << ID_BITS) - 1
INT64_MAX = 2**63 - 1
_BOM = "\ufeff"  # a UTF-8 byte order mark, decoded


@dataclass(frozen=True)
class ParaverHeader:
    """Resource model of a Paraver trace. Times in ns; tasks and threads 1-based as in the trace."""

    started_at: datetime | None
    duration_ns: int
    time_scale: int  # ns per trace time unit
    cpus_per_node: tuple[int, ...]  # empty when the trace carries no resource information
    threads_per_task: tuple[tuple[int, ...], ...]  # [appl-1][task-1] -> number of threads
    node_of_task: tuple[tuple[int, ...], ...]  # [appl-1][task-1] -> 1-based node
    n_communicators: int = 0
    raw: str = field(default="", repr=False)
    unit: str = "_ns"  # the duration's unit suffix as written ("" for none)
    warnings: tuple[str, ...] = ()  # what the header holds that is read anyway (an invalid date), one line each

    @property
    def n_cpus(self) -> int:
        return sum(self.cpus_per_node)

    @property
    def n_appl(self) -> int:
        return len(self.threads_per_task)


def _split_top_level(text: str, sep: str) -> list[str]:
    """Split at ``sep`` outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _number(text: str) -> int:
    """A header number: ASCII digits, blanks around them allowed (Paraver reads with ``>>``), a minus sign kept for
    the range checks to name; else ValueError."""
    if not _SIGNED.fullmatch(text := text.strip()):
        raise ValueError(text)
    return int(text)


def _short(text: str, limit: int = 40) -> str:
    """``text`` for an error line: at most ``limit`` characters (a header can be megabytes long)."""
    return text if len(text) <= limit else f"{text[:limit]}..."


def _parse_date(text: str) -> datetime | None:
    for fmt in ("%d/%m/%y at %H:%M", "%d/%m/%Y at %H:%M", "%d/%m/%y at %H:%M:%S", "%d/%m/%Y at %H:%M:%S"):
        try:
            return datetime.strptime(text.strip(), fmt)
        except ValueError:
            continue
    return None


def parse_header(line: str, path: str = "<trace>") -> ParaverHeader:
    """Parse the header line of a ``.prv`` file; raises :class:`TraceFormatError` naming line 1."""

    def bad(reason: str) -> TraceFormatError:
        return TraceFormatError(path, 1, f"broken Paraver header: {reason}")

    m = _HEADER.match(line.rstrip())
    if not m:
        # attack25 N3: paramedir loads a file only when its first word is "#Paraver" (LocalKernel::isTraceFile),
        # so a byte order mark before it is refused there too; said, since an editor adds it unseen
        bom = line.startswith(_BOM)
        raise TraceFormatError(path, 1, "no Paraver header (the file must start with '#Paraver ('" + (
            "; it starts with a UTF-8 byte order mark, bytes EF BB BF, which Paraver does not read either: remove "
            "them" if bom else "") + ")")
    if (long := _LONG_NUMBER.search(m["rest"])) is not None:
        raise bad(f"number {_short(long[0])} has more than {MAX_DIGITS} digits")
    tokens = [t.strip() for t in _split_top_level(m["rest"], ":")]  # Paraver reads numbers with >>: blanks pass
    if len(tokens) < 4:
        raise bad("expected END:RESOURCES:N_APPL:APPLICATIONS")
    dur = _DURATION.match(tokens[0])
    if not dur:
        raise bad(f"duration {_short(tokens[0])!r} is not an integer with an optional _ns/_us/_ms unit")
    scale = _UNIT_NS.get(dur["unit"], 1_000)
    if int(dur["value"]) * scale > INT64_MAX:
        raise bad(f"duration {_short(dur['value'])} does not fit in a signed 64-bit integer of ns")

    res = _COUNTED.match(tokens[1])
    if not res:
        raise bad(f"resource model {_short(tokens[1])!r} is not NODES(cpus,...)")
    cpus: tuple[int, ...] = ()  # "0", or "0()" as Extrae writes it without nodes: no resource information
    n_nodes = int(res["n"])
    if n_nodes and res["items"] is None:  # "N": N nodes of one cpu each (paraver-kernel resourcemodel.cpp)
        if n_nodes > MAX_ID:
            raise bad(f"{_short(res['n'])} nodes declared (expected at most {MAX_ID})")
        cpus = (1,) * n_nodes
    elif n_nodes:
        try:
            cpus = tuple(_number(x) for x in res["items"].split(","))
        except ValueError:
            raise bad(f"cpu counts {_short(res['items'])!r} are not integers") from None
        if len(cpus) != int(res["n"]):
            raise bad(f"{_short(res['n'])} nodes declared but {len(cpus)} cpu counts given")
        if (odd := next((c for c in cpus if not 0 <= c <= INT32_MAX), None)) is not None:
            raise bad(f"node {cpus.index(odd) + 1} declares {_short(str(odd))} cpus (expected 0 to {INT32_MAX})")
        if sum(cpus) > INT32_MAX:
            raise bad(f"{_short(str(sum(cpus)))} cpus do not fit in a 32-bit integer")

    if not _NUMBER.fullmatch(tokens[2]):
        raise bad(f"number of applications {_short(tokens[2])!r} is not an integer")
    n_appl = int(tokens[2])
    if not 1 <= n_appl <= MAX_ID:
        raise bad(f"{_short(tokens[2])} applications declared (expected 1 to {MAX_ID})")
    # Applications are separated by ':' (Paraver's specification) or ',' (what Extrae writes); a trailing
    # bare integer is the number of communicator ('c:') lines that follow the header.
    appl_tokens = [t.strip() for tok in tokens[3:] for t in _split_top_level(tok, ",")]
    n_comm = 0
    if len(appl_tokens) == n_appl + 1 and "(" not in appl_tokens[-1]:  # in the count's place, no application
        if not _NUMBER.fullmatch(appl_tokens[-1]):  # attack25 N2: "-1" was "1 applications declared but 2 described"
            raise bad(f"communicator count {_short(appl_tokens[-1])!r} is not a non-negative integer")
        n_comm = int(appl_tokens.pop())
        if n_comm > INT32_MAX:
            raise bad(f"{_short(str(n_comm))} communicators declared (expected at most {INT32_MAX})")
    if len(appl_tokens) != n_appl:
        raise bad(f"{_short(tokens[2])} applications declared but {len(appl_tokens)} described")
    started_at = _parse_date(m["date"])
    said = () if started_at is not None else (
        f"{path}:1: header date {clipped(m['date'])!r} is no date (dd/mm/yyyy at hh:mm): the run has no start time",)
    threads, nodes = [], []
    for k, tok in enumerate(appl_tokens, start=1):
        am = _COUNTED.match(tok)
        if not am or am["items"] is None:
            raise bad(f"application {k} {_short(tok)!r} is not NTASKS(threads:node,...)")
        pairs = am["items"].split(",")
        if not 1 <= int(am["n"]) <= MAX_ID:
            raise bad(f"application {k} declares {_short(am['n'])} tasks (expected 1 to {MAX_ID})")
        if len(pairs) != int(am["n"]):
            raise bad(f"application {k} declares {_short(am['n'])} tasks but describes {len(pairs)}")
        try:
            tn = [tuple(_number(v) for v in p.split(":")) for p in pairs]
        except ValueError:
            raise bad(f"application {k} task list {_short(am['items'])!r} is not threads:node pairs") from None
        if any(len(p) != 2 for p in tn):
            raise bad(f"application {k} task list {_short(am['items'])!r} is not threads:node pairs")
        for task, (n_threads, node) in enumerate(tn, start=1):
            if not 1 <= n_threads <= MAX_ID:
                raise bad(f"application {k} task {task} declares {_short(str(n_threads))} threads "
                          f"(expected 1 to {MAX_ID})")
            if cpus and not 1 <= node <= len(cpus):
                raise bad(f"application {k} task {task} runs on node {_short(str(node))} "
                          f"but the header declares {len(cpus)} nodes")
            if node > INT32_MAX:
                raise bad(f"application {k} task {task} node {_short(str(node))} does not fit in a 32-bit integer")
        threads.append(tuple(p[0] for p in tn))
        nodes.append(tuple(p[1] for p in tn))
    return ParaverHeader(
        started_at=started_at,
        duration_ns=int(dur["value"]) * scale,
        time_scale=scale,
        cpus_per_node=cpus,
        threads_per_task=tuple(threads),
        node_of_task=tuple(nodes),
        n_communicators=n_comm,
        raw=line.rstrip("\r\n"),
        unit=dur["unit"] or "",
        warnings=said,
    )


def format_header(header: ParaverHeader) -> str:
    """The header line for ``header`` (times written in ns), dated as Extrae and Paraver write it: four-digit
    year, ``dd/mm/yyyy at hh:mm`` (paraver-kernel parses ``%d/%m/%Y``; a two-digit year is not among its formats)."""
    date = header.started_at.strftime("%d/%m/%Y at %H:%M") if header.started_at else "01/01/1970 at 00:00"
    res = f"{len(header.cpus_per_node)}({','.join(map(str, header.cpus_per_node))})" if header.cpus_per_node else "0"
    appls = ",".join(
        f"{len(t)}({','.join(f'{n}:{node}' for n, node in zip(t, nd))})"
        for t, nd in zip(header.threads_per_task, header.node_of_task)
    )
    comm = f",{header.n_communicators}"
    return f"#Paraver ({date}):{header.duration_ns}_ns:{res}:{header.n_appl}:{appls}{comm}"
