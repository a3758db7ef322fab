"""The reader interface (:class:`TraceSource`: a trace read as streamed :class:`TablePart` items and a returned
:class:`ReadSummary`), and which reader opens a path: Paraver ``.prv`` files and OTF2 archives (their ``.otf2``
anchor file)."""
from __future__ import annotations

import abc
import contextlib
import errno
import gzip
import os  # [helper security]
import warnings
import zlib
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import BinaryIO, Literal, Protocol

import polars as pl

from synthtrace.tracelib.domain.counter_sanity import ANOMALY_SCHEMA, AnomalyTally
from synthtrace.tracelib.formats.call_store import CallStore
from synthtrace.tracelib.formats.gzip_name import gzip_named, without_gzip
from synthtrace.tracelib.errors import RecordsOutOfOrderError, TraceFormatError, TraceUnreadableError
from synthtrace.tracelib.schema import EVENT_SCHEMA, THREAD_KEYS, UNCORE_SCHEMA


Table = Literal["bursts", "uncore", "events"]
#: who belongs to each communicator a trace declares: one row per (appl, comm, task); ``comm`` is the id the trace's
#: calls name it by (a per-run handle), ``task`` 1-based (NULL: MPI_COMM_SELF as OTF2 declares it, one id for all)
COMMUNICATOR_SCHEMA: dict[str, pl.DataType] = {"appl": pl.Int32(), "comm": pl.Int64(), "task": pl.Int32()}


@dataclass(frozen=True)
class TablePart:
    """One streamed piece of a trace's tables: ``bursts`` (BURST_SCHEMA plus one column per counter; final rows,
    in file order), ``uncore`` (UNCORE_SCHEMA: memory-controller samples, which belong to no burst) or ``events``
    (EVENT_SCHEMA: the events that became neither bursts, calls nor counters)."""

    table: Table
    frame: pl.DataFrame


@dataclass(frozen=True)
class ReadSummary:
    """What reading a trace produced beyond the streamed parts, returned once the read is over."""

    calls: pl.LazyFrame  # every MPI call, point-to-point messages attached (MPI_CALL_SCHEMA), in read order
    messages: pl.DataFrame  # MESSAGE_SCHEMA: the point-to-point messages (their physical times when known)
    #: per row of ``messages``: s_call_seq, s_comm, r_call_seq, r_comm of the calls holding its two ends (NULL: none;
    #: :func:`~synthtrace.tracelib.formats.bursts.message_ends`); None when the reader did not place them
    message_ends: pl.DataFrame | None
    thread_nodes: pl.DataFrame  # THREAD_NODE_SCHEMA: the node of every thread (NULL without resource information)
    counters: tuple[str, ...]  # counter columns of the bursts, sorted
    n_bursts: int
    n_calls: int
    n_uncore: int
    n_events: int  # rows of the ``events`` parts
    n_records: Mapping[int, int]  # records read per kind (Paraver record type; OTF2: region/metric/p2p/collective)
    last_time_ns: int  # the last record time (ns)
    warnings: tuple[str, ...]
    #: hex content hash of the bytes the reader parsed (:class:`ContentHasher`); None when the format's library
    #: reads the files itself (OTF2)
    content_hash: str | None = None
    #: the uncore samples and the events, filled only by :meth:`TraceReader.read_tables` (a streamed read yields
    #: them as parts)
    uncore: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=UNCORE_SCHEMA))
    events: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=EVENT_SCHEMA))
    #: impossible counter values of the bursts and calls, per counter and rule (ANOMALY_SCHEMA)
    anomalies: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=ANOMALY_SCHEMA))
    #: the members of the communicators the trace declares (COMMUNICATOR_SCHEMA; empty: it declares none)
    communicators: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=COMMUNICATOR_SCHEMA))


class TableStream:
    """One read of a trace: iterating yields its :class:`TablePart` items as they are assembled (bounded memory);
    once the iteration is over, :attr:`summary` holds the returned :class:`ReadSummary`."""

    def __init__(self, parts: Generator[TablePart, None, ReadSummary]):
        self._parts = parts
        self._summary: ReadSummary | None = None

    def __iter__(self) -> Iterator[TablePart]:
        self._summary = yield from self._parts

    @property
    def summary(self) -> ReadSummary:
        if self._summary is None:
            raise RuntimeError("the summary of a read exists once its parts have all been taken")
        return self._summary


class TraceSource(Protocol):
    """What every format reader offers the warehouse: identity, resource model and streamed tables."""

    path: Path
    format: str
    warnings: list[str]

    @property
    def started_at(self) -> datetime | None: ...
    @property
    def resources(self) -> dict[str, int]: ...  # n_appl, n_tasks, n_threads, n_nodes, duration_ns
    def content_files(self) -> list[Path]: ...  # the files whose bytes identify the run
    def read(self, run_id: str, *, progress: Callable[[int], None] | None = None,
             spill: Path | None = None) -> TableStream: ...
    def read_tables(self, run_id: str = "") -> tuple[pl.DataFrame, pl.DataFrame, ReadSummary]: ...
    def time_sorted(self, cause: RecordsOutOfOrderError) -> TraceSource: ...


class TraceReader(abc.ABC):
    """The part of :class:`TraceSource` every reader shares: :meth:`read` over the reader's own
    :meth:`_parts`, and :meth:`read_tables` in memory."""

    def read(self, run_id: str, *, progress: Callable[[int], None] | None = None,
             spill: Path | None = None) -> TableStream:
        """Read the trace: bursts, uncore and events parts stream out as they are assembled (``progress`` gets
        bytes consumed); the MPI calls, which wait for the messages of the whole trace, come with the summary. They
        are kept in memory, or, with ``spill`` (a folder, created), written there as Parquet parts and scanned back.
        Impossible counter values of bursts and calls are counted on the way (the summary's ``anomalies``, one
        warning per counter)."""
        tally = AnomalyTally()
        return TableStream(self._judged(self._parts(run_id, progress, CallStore(spill, on_add=tally.add)), tally,
                                        run_id))

    def _judged(self, parts: Generator[TablePart, None, ReadSummary], tally: AnomalyTally,
                run_id: str) -> Generator[TablePart, None, ReadSummary]:
        """``parts`` with their bursts judged by ``tally``, and its findings added to the summary."""
        try:
            while True:
                try:
                    part = next(parts)
                except StopIteration as done:
                    summary: ReadSummary = done.value
                    break
                if part.table == "bursts":
                    tally.add(part.frame, "burst")
                elif part.table == "uncore":
                    tally.add_samples(part.frame)
                yield part
        finally:
            parts.close()
        said = tally.warnings(str(self.path))
        for line in said:
            warnings.warn(line, UserWarning, stacklevel=2)
        return replace(summary, anomalies=tally.frame(run_id), warnings=(*summary.warnings, *said))

    @abc.abstractmethod
    def _parts(self, run_id: str, progress: Callable[[int], None] | None,
               calls: CallStore) -> Generator[TablePart, None, ReadSummary]:
        """The reader's parts in file order; every MPI call goes to ``calls``; returns the summary."""

    def time_sorted(self, cause: RecordsOutOfOrderError) -> TraceSource:
        """The trace read with its records put in time order, where the format allows it (a reader that streams
        records out of order raises ``cause``, which this default re-raises: the trace is broken)."""
        raise cause

    def read_tables(self, run_id: str = "") -> tuple[pl.DataFrame, pl.DataFrame, ReadSummary]:
        """The whole trace in memory: (bursts, mpi_calls, summary), sorted by thread and sequence; the summary's
        ``uncore`` and ``events`` hold the uncore samples and the events. Records out of time order are sorted
        first (:meth:`time_sorted`).
        For small traces and tests."""
        stream = self.read(run_id)
        parts: dict[str, list[pl.DataFrame]] = {"bursts": [], "uncore": [], "events": []}
        try:
            for part in stream:
                parts[part.table].append(part.frame)
        except RecordsOutOfOrderError as exc:
            return self.time_sorted(exc).read_tables(run_id)
        summary = stream.summary
        bursts = pl.concat(parts["bursts"], how="diagonal_relaxed") if parts["bursts"] else pl.DataFrame()
        calls = summary.calls.collect()
        uncore = pl.concat([summary.uncore, *parts["uncore"]])
        events = pl.concat([summary.events, *parts["events"]])
        return (bursts.sort([*THREAD_KEYS, "burst_seq"]) if bursts.height else bursts,
                calls.sort([*THREAD_KEYS, "call_seq"]) if calls.height else calls,
                replace(summary, uncore=uncore, events=events))


PARAVER_SUFFIX = ".prv"  # gzip-compressed traces (.prv.gz, any case) are read as Paraver reads them
OTF2_SUFFIX = ".otf2"


def is_paraver(path: Path) -> bool:
    """Whether ``path`` names a Paraver trace (``.prv``, or ``.prv.gz`` with ``.gz`` in any case:
    :func:`~synthtrace.tracelib.formats.gzip_name.gzip_named`)."""
    return _paraver_name(path.name)


def _paraver_name(name: str) -> bool:
    return without_gzip(name).endswith(PARAVER_SUFFIX)


def is_trace_name(name: str) -> bool:
    """Whether the file name ``name`` names a trace file synthtrace reads (a Paraver trace or an OTF2 anchor; no
    path object made: a folder's listing is judged name by name)."""
    return _paraver_name(name) or name.endswith(OTF2_SUFFIX)


def trace_stem(path: Path) -> str:
    """The name of a trace file without its format suffix (``lulesh.run0.prv.gz`` -> ``lulesh.run0``)."""
    name = without_gzip(path.name) if is_paraver(path) else path.name
    for suffix in (PARAVER_SUFFIX, OTF2_SUFFIX):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def stem_program(stem: str) -> str:
    """The program a trace's stem (:func:`trace_stem`) names: up to its first dot (``lulesh.run0`` -> ``lulesh``),
    dots that lead or stand alone aside (``.x`` -> ``x``, not blank); the stem itself if it is nothing else."""
    return next((part for part in stem.split(".") if part.strip()), stem)


def open_bytes(path: Path) -> BinaryIO:
    """The bytes of a trace file as a reader sees them: decompressed when it is gzip-compressed (``.gz``), with a
    bound on how far it may inflate (security, issue 23 item 4: :mod:`~synthtrace.tracelib.formats.bounded_gzip`)."""
    from synthtrace.tracelib.formats.bounded_gzip import open_gzip

    return open_gzip(path) if gzip_named(path) else open(path, "rb")


#: What reading a trace file can raise besides format errors: I/O errors, a damaged or cut gzip stream.
READ_ERRORS = (OSError, EOFError, zlib.error)
#: errors of reading a file that say nothing of its bytes (a disk or a network file system failing, perhaps for a
#: moment): :class:`TraceUnreadableError`, never taken for a broken trace (attack 13: a sound trace on an NFS drop
#: that met ESTALE was quarantined)
MACHINE_READ_ERRNOS = frozenset({errno.EIO, errno.ESTALE, errno.ETIMEDOUT, errno.EAGAIN, errno.EINTR, errno.ENOMEM,
                                 errno.ENOLINK, errno.ECONNRESET, errno.ECONNABORTED, errno.ENOTCONN,
                                 errno.EHOSTDOWN, errno.EHOSTUNREACH, errno.ENETDOWN, errno.ENETUNREACH})


@contextlib.contextmanager
def reading(path: Path) -> Iterator[None]:
    """Turn a failure to read ``path`` (unreadable, damaged or truncated compression) into one clear line."""
    try:
        yield
    except READ_ERRORS as exc:
        if isinstance(exc, EOFError | zlib.error | gzip.BadGzipFile):
            reason = f"damaged or truncated gzip data ({exc})"
        else:
            reason = exc.strerror or str(exc)
        machine = isinstance(exc, OSError) and exc.errno in MACHINE_READ_ERRNOS
        raise (TraceUnreadableError if machine else TraceFormatError)(path, None, f"cannot be read: {reason}") from None


class ContentHasher:
    """The content hash of a run: xxh3-128 over the bytes of its files, in :meth:`TraceSource.content_files` order
    (a compressed file counts with its decompressed bytes). A reader feeds it the bytes it parses, so the id of
    what was stored can be checked against the id computed before the read.

    xxh3-128 rather than SHA-256: the id keeps 64 bits, where a cryptographic hash buys no safety, and xxh3
    hashes at memory speed (0.09 s per GB against 0.6 s for SHA-256 on the benchmark machine).
    """

    BLOCK = 8 * 1024 * 1024  # bytes read per update

    def __init__(self) -> None:
        import xxhash

        self._h = xxhash.xxh3_128()

    def update(self, data: bytes | bytearray | memoryview) -> None:
        self._h.update(data)

    def hexdigest(self) -> str:
        return self._h.hexdigest()

    def update_files(self, files: list[Path]) -> None:
        """Add ``files``' bytes, read in blocks of :attr:`BLOCK` (never a whole file in memory)."""
        buf = bytearray(self.BLOCK)
        view = memoryview(buf)
        for f in files:
            with reading(f), open_bytes(f) as fh:
                while n := fh.readinto(buf):
                    self.update(view[:n])

    @classmethod
    def of_files(cls, files: list[Path]) -> str:
        """The hex digest of ``files``' bytes, read in blocks of :attr:`BLOCK`."""
        h = cls()
        h.update_files(files)
        return h.hexdigest()


def open_trace(path: str | Path, *, salvage: bool = False) -> TraceSource:
    """Open a trace file with the reader for its format."""
    path = Path(path)
    if is_paraver(path):
        from synthtrace.tracelib.formats.paraver.reader import ParaverTrace
        return ParaverTrace(path, salvage=salvage)
    if path.suffix == ".otf2":
        from synthtrace.tracelib.formats.otf2 import Otf2Trace
        return Otf2Trace(path, salvage=salvage)
    raise TraceFormatError(path, None, f"unknown trace format {path.suffix!r} "
                                       "(expected .prv, .prv.gz or an OTF2 .otf2 anchor)")


def tree_entries(folder: Path) -> Iterator[Path]:
    """Every entry under ``folder`` (files, folders, links), in no set order, walked with a stack and not by
    recursion: a chain of folders thousands deep is walked as any other (attack 16 F11: Python 3.11's
    ``Path.rglob`` recurses once per level, so a drop folder holding a chain ~1,000 deep stopped every night with a
    RecursionError). Links to folders are listed, never entered. A folder that cannot be listed is skipped, as
    ``rglob`` skips it; said in a warning unless for want of permission (as before)."""
    return (Path(entry.path) for entry in _walked(folder))


def files_under(folder: Path) -> Iterator[os.DirEntry]:
    """The files under ``folder`` (links to files included, as :meth:`Path.is_file` counts them), walked as
    :func:`tree_entries` walks: as listing entries, whose ``stat()`` the listing caches (no path stat'ed twice)."""
    for entry in _walked(folder):
        with contextlib.suppress(OSError):
            if entry.is_file():
                yield entry


def named_as_traces(folder: Path) -> Iterator[os.DirEntry]:
    """The entries under ``folder`` whose name is a trace's (:func:`is_trace_name`), files or not, walked once as
    :func:`tree_entries` walks; every other entry is passed by its name alone (issue 23: a drop folder holding
    500,000 other files made a path object of each, twice a night)."""
    return (entry for entry in _walked(folder) if is_trace_name(entry.name))


def _walked(folder: Path) -> Iterator[os.DirEntry]:
    """The listing entries of :func:`tree_entries`, each folder's as its listing gives them (one listing open at a
    time; no folder's entries held in a list: issue 23, one folder of 500,000 files held them all). A folder whose
    listing fails (at its start or part way) is warned about once, what it listed before kept."""
    stack = [folder]
    while stack:
        current = stack.pop()
        try:
            with os.scandir(current) as listing:
                for entry in listing:
                    yield entry
                    with contextlib.suppress(OSError):
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(Path(entry.path))
        except PermissionError:
            continue
        except OSError as exc:
            warnings.warn(f"{current}: not searched for traces ({exc.strerror or exc})", stacklevel=3)
            continue


def usable(path: Path) -> bool:
    """Whether the path ``path`` (as found) can be opened at all; a warning naming it when it cannot: longer than
    the system's limit (PATH_MAX: a folder chain whose names add up past 4,096 bytes on Linux), which no file call
    takes (attack 17 F2: one such trace in a drop folder stopped every night before the traces beside it)."""
    try:
        os.stat(path, follow_symlinks=False)
    except OSError as exc:
        if exc.errno != errno.ENAMETOOLONG:
            return True  # gone meanwhile, or unreadable: the reader says so for this trace alone
        warnings.warn(f"{str(path)[:200]}...: not read (its path is {len(os.fsencode(path)):,} bytes, longer than "
                      "this system takes: move or rename its folders)", stacklevel=3)
        return False
    return True


def find_traces(paths: list[Path], not_files: Callable[[os.DirEntry], object] | None = None) -> list[Path]:
    """Trace files among ``paths``: files as given, folders searched recursively, sorted by path. A trace reached
    twice (through a link beside it) is found once, by its own path where there is one ([helper security] attack 6
    F13: a link in a drop folder was ingested as a second run, its companions looked for beside the link). A link
    stays a link: a night's quarantine moves the link, never a trace outside its drop folder. ``not_files`` is
    handed, from the same walk, every entry of a searched folder named as a trace that is no file (a folder, a
    FIFO, a link that leads to no file): the night lists them without walking its drop folder twice."""
    found: list[Path] = []
    for p in paths:
        if p.is_dir():
            found.extend(_traces_in(p, not_files))
        else:
            found.append(p)
    return _once_each(found)


def _traces_in(folder: Path, not_files: Callable[[os.DirEntry], object] | None) -> list[Path]:
    """The trace files under ``folder`` (links to files included) whose path a file call takes (:func:`usable`),
    sorted by path; the other entries named as traces to ``not_files`` (:func:`find_traces`)."""
    out = []
    for entry in named_as_traces(folder):
        try:
            is_file = entry.is_file()
        except OSError as exc:  # a loop of links is no file; a path too long to take (attack 17 F2) is neither
            if exc.errno != errno.ELOOP:
                continue
            is_file = False
        if is_file:
            if usable(path := Path(entry.path)):
                out.append(path)
        elif not_files is not None:
            not_files(entry)
    return sorted(out)


def _once_each(found: list[Path]) -> list[Path]:
    """``found`` with a file reached twice (through a link) kept once, by its own path where there is one."""
    unique: dict[str, Path] = {}
    for q in found:
        real = os.path.realpath(q)
        if real not in unique or (unique[real].is_symlink() and not q.is_symlink()):
            unique[real] = q
    return list(unique.values())


def trace_bytes(path: Path) -> int:
    """Bytes a reader will go through for the trace at ``path`` (an OTF2 anchor counts its whole archive)."""
    if path.suffix == ".otf2":
        folder, defs = path.with_suffix(""), path.with_suffix(".def")
        events = sum(f.stat().st_size for f in files_under(folder)) if folder.is_dir() else 0
        return path.stat().st_size + (defs.stat().st_size if defs.is_file() else 0) + events
    return path.stat().st_size
