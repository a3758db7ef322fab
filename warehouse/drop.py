"""The drop folder cluster jobs write traces into: what is new, what is still being written, and where broken
traces are set aside.

A trace appears in the drop folder long before it is complete. Extrae's merger (``mpi2prv``, run at the end of the
job or as a job step of its own) writes the ``.prv`` sequentially (header first), then the ``.pcf`` and the ``.row``;
a ``.prv.gz`` grows the same way; a copy (``cp``, ``scp``, a stage-out) grows each file in turn. Score-P writes an
OTF2 archive's event files and its ``.def`` during the run and the anchor ``.otf2`` at the archive's close (an
archive without its anchor is not found as a trace); without ``SCOREP_EXPERIMENT_DIRECTORY`` it writes into
``scorep-measurement-tmp/`` and renames that folder to ``scorep-<time>`` after a successful measurement, so a trace
under such a folder waits (a measurement still running, or one that crashed). No writer says when it is done, so
the night does what
drop-folder ingesters do: a trace is taken only when every file of it (``.prv`` with ``.pcf``/``.row``, or the
anchor, ``.def`` and every file of the archive folder) has kept its size and modification time for a settle time
(:data:`DEFAULT_SETTLE_S`), and again unchanged when its ingest starts; otherwise it waits for the next night. A
trace still changing is never quarantined: a cut record in a file being written is not a broken trace.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import stat
import time
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

from synthtrace.tracelib.atomic_file import lies_in, write_atomically
from synthtrace.tracelib.errors import BadInputError, TraceUnreadableError
from synthtrace.tracelib.printable import is_utf8
from synthtrace.tracelib.formats.source import find_traces, is_trace_name, trace_stem, tree_entries
from synthtrace.tracelib.printable import clipped
from synthtrace.warehouse.errors import WarehouseError
from synthtrace.warehouse.ingest import ContentId, RunStoreError, content_id, experiment_names, stat_digest
from synthtrace.warehouse.layout import Warehouse, warehouse_holding
from synthtrace.warehouse.names import file_name
from synthtrace.warehouse.night_lock import file_kind, lock_holders, take, unlocked

QUARANTINE = ".quarantine"
REASON_FILE = "reason.txt"
#: the hidden list, in a quarantine folder, of the files still to move into it (each source path, NUL-ended, after a
#: "m" to move or "c" to copy): written before the first move, removed after the last, so that a night killed
#: between two moves (kill -9, the OOM killer) is finished by the next (attack 26 A2)
MOVES_FILE = ".moves"
#: seconds every file of a trace must have kept its size and modification time before a night takes it: longer
#: than the pause between a writer's files (mpi2prv's .prv, then .pcf/.row) and than NFS attribute caching (3-60 s)
DEFAULT_SETTLE_S = 60.0
#: how long a trace cut mid-record waits for its writer before it is quarantined (s): a writer that holds it open
#: and stalls (mpi2prv on a busy parallel file system) leaves exactly such a file, and quarantining it moved the
#: file the writer then finished into (attack 7 A18); no writer stalls for a day
CUT_GRACE_S = 24 * 3600.0
#: the note of a trace left for the next night because it is still being written
STILL_WRITTEN = "still being written"
#: the folder Score-P measures into before renaming it (no SCOREP_EXPERIMENT_DIRECTORY set)
SCOREP_TMP = "scorep-measurement-tmp"
#: bytes of a trace's name kept in its quarantine folder's name (a file system allows 255 per name)
_NAME_BYTES = 200
#: errors of the machine, not of the trace: the trace stays in the drop folder for the next night
_MACHINE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.ENOMEM}


#: the file a night locks in a drop folder it can write (a regular file: NFS forwards its ``flock`` to the server)
DROP_LOCK = ".synthtrace-night.lock"


@contextlib.contextmanager
def drop_lock(drop: Path) -> Iterator[None]:
    """Hold the drop folder for a night's block; raise :class:`~synthtrace.warehouse.errors.NightRunningError` at
    once, nothing done, naming the night that holds it (two nights into different warehouses from one drop folder
    both ingested, and quarantined, the same traces; the warehouse's own night lock keeps only nights into one
    warehouse apart). The lock is a ``flock`` of :data:`DROP_LOCK` in the folder: on NFS (v3 through the lock
    manager, v4 natively) the server holds it, so nights on two hosts exclude each other too, where a ``flock`` of
    the folder itself stays on one client (attack 11 E4: Linux's NFS directories have no lock operation). A drop
    folder's lock file another account made is opened read-only when it cannot be opened for writing (``flock``
    needs no write access; attack 12 F5: the folder lock it fell back to never met the file's, so two accounts'
    nights both ran); only a drop without the file that this process cannot write (a read-only drop: nothing in it
    is moved, nothing to keep apart but the ingest) is locked by its own descriptor, and so is a read-only drop
    holding the file where the file system locks only a file open for writing (NFS; attack 14 F2: refused every
    night as "another account's lock file"); the kernel releases either with a killed night. A file system that
    refuses locks (Lustre without ``-o flock``) is said once, and the night goes on unlocked."""
    fd, read_only = _open_lock(drop)
    try:
        def held_by() -> str:
            return (f"another night ({_lock_holder(fd)}) is taking the traces of the drop folder {drop}; this one did "
                    "nothing: let it finish (or stop it), or run the nights further apart")

        refused = take(fd, held_by)
        if refused is not None and refused.errno == errno.EBADF and \
                fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY:
            # attack 13 F2: NFS emulates flock by a byte-range lock, which an exclusive one needs written to
            if not read_only:
                raise BadInputError(f"{drop / DROP_LOCK}: {_whose(fd)} lock file, which this account may only read, "
                                    "and the drop folder's file system (NFS) locks only a file open for writing: "
                                    "this night did nothing (it would run beside the other account's); make the file "
                                    "group-writable (chmod g+w) or remove it") from None
            # attack 14 F2: a read-only drop (nothing in it is moved): locked by its folder, as one without the file
            os.close(fd)
            fd = os.open(drop, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            refused = take(fd, held_by)
        if refused is not None:
            unlocked(drop, "drop", refused, "two nights from it at once (on two hosts) would both take its traces")
        yield
    finally:
        os.close(fd)


def _whose(fd: int) -> str:
    """Whose the open file ``fd`` is, as the lock's one-line errors say it: this account's own (a mode that keeps
    it from writing it) or another account's."""
    return "this account's read-only" if os.fstat(fd).st_uid == os.geteuid() else "another account's"


def _open_lock(drop: Path) -> tuple[int, bool]:
    """A descriptor to ``flock`` for the drop folder ``drop``, and whether the drop is on a read-only file system
    (EROFS). The descriptor is of its :data:`DROP_LOCK` file, made if missing (readable by all, writable by whom
    the folder lets write: another account's night into a shared drop opens it for writing too), opened read-only
    when it cannot be opened for writing (another account's file, a read-only mount), refused when it cannot be
    opened at all; the folder itself only when there is no such file and it cannot be made. Anything but a regular
    file under the name (a symbolic link, a folder, a FIFO, a device) is refused (:func:`_refuse_planted`)."""
    path = drop / DROP_LOCK
    refused = (errno.EACCES, errno.EROFS, errno.EPERM)
    read_only = False
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        pass
    except OSError as exc:
        if exc.errno not in refused:
            raise
        read_only = exc.errno == errno.EROFS
    else:
        with contextlib.suppress(OSError):  # the umask took the group's write away; a root-squashed NFS may refuse
            os.fchmod(fd, 0o644 | (os.stat(drop).st_mode & 0o022))
        return fd, False
    for flags in (os.O_RDWR, os.O_RDONLY):
        try:
            _refuse_planted(path, os.lstat(path).st_mode)
            # O_NONBLOCK: a FIFO put there since, opened for reading alone, would wait for a writer (attack 13 F1)
            fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
        except FileNotFoundError:
            break
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EISDIR):  # put there since the look
                _refuse_planted(path, stat.S_IFLNK if exc.errno == errno.ELOOP else stat.S_IFDIR)
            if exc.errno not in refused:
                raise
            read_only = read_only or exc.errno == errno.EROFS
            if flags == os.O_RDONLY:  # attack 13: another account's 0600 file; the folder's lock never meets it
                own = os.lstat(path).st_uid == os.geteuid()
                raise BadInputError(f"{path}: {'this account' if own else 'another account'}'s lock file, which "
                                    "this account cannot open: this night did nothing (it would run beside the nights "
                                    "that hold it); make the file readable (chmod a+r; group-writable on NFS) "
                                    "or remove it") from None
        else:
            try:
                _refuse_planted(path, os.fstat(fd).st_mode)
            except BadInputError:
                os.close(fd)
                raise
            return fd, read_only
    return os.open(drop, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), read_only


def _refuse_planted(path: Path, mode: int) -> None:
    """Raise the one line when what is at ``path`` (its ``st_mode``) is not a regular file: a symbolic link, a
    folder, a FIFO, a socket or a device where the drop's lock file belongs is never locked (attacks 12 and 13: a
    link's target opened, a FIFO that blocked every night)."""
    if stat.S_ISREG(mode):
        return
    raise BadInputError(f"{path}: {file_kind(mode)} where the nights' lock file belongs, not used as the lock: no "
                        "night takes the drop folder's traces until it is removed")


def _not_quarantine(drop: Path) -> str | None:
    """Why ``drop/.quarantine`` cannot take broken traces (something other than a real folder there: a link would
    move them wherever it leads, the warehouse included; attack 14 F12), or None (a folder, or nothing yet)."""
    path = drop / QUARANTINE
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISDIR(mode):
        return None
    return (f"{path}: {file_kind(mode)} where the drop folder's quarantine folder belongs (a link is never "
            "followed): no night takes the drop folder's traces until it is removed")


def check_drop(drop: Path, warehouse: Path | None = None) -> None:
    """Refuse, in one line, nothing done, a drop folder no night may take traces from: one that is not a folder,
    one inside a warehouse or inside the ``warehouse`` folder, made yet or not (a night writes its lock file and
    quarantines into its drop folder, and no command's output may land inside a warehouse: issue 23 item 2, attack
    14 F14, attack 16 F6),
    or one whose ``.quarantine`` is not a real folder (:func:`_not_quarantine`)."""
    if not drop.is_dir():
        what = "is not a folder" if drop.exists() else "does not exist"
        raise BadInputError(f"--drop {drop}: {what} (create the drop folder first)")
    home = warehouse_holding(drop)
    if home is None and warehouse is not None and lies_in(drop, warehouse):  # attack 16 F6: made by this night
        home = warehouse
    if home is not None:
        raise BadInputError(f"--drop {drop}: lies inside the warehouse {home} (a night writes its lock file and "
                            "quarantine into its drop folder): nothing done; give a drop folder outside it")
    if (why := _not_quarantine(drop)) is not None:
        raise BadInputError(why)


def _lock_holder(fd: int) -> str:
    """Who holds the ``flock`` of the open file ``fd``: ``pid P: its command line`` from the kernel's lock table
    (:func:`~synthtrace.warehouse.night_lock.lock_holders`), or that it is not known (another host)."""
    if not (pids := lock_holders(fd)):
        return "on another host, or its process not known here"
    try:
        with open(f"/proc/{pids[0]}/cmdline", "rb") as fh:
            command = fh.read(4096).rstrip(b"\0").replace(b"\0", b" ").decode(errors="backslashreplace")
    except OSError:
        command = ""
    return f"pid {pids[0]}" + (f": {clipped(command, 300)}" if command else "")


@dataclass(frozen=True)
class DroppedTrace:
    """A trace in the drop folder that is not in the warehouse yet."""

    path: Path
    run_id: str | None  # None when the file could not even be opened (it will be quarantined)
    experiment: str  # where its run goes (:func:`~synthtrace.warehouse.ingest.experiment_names`)
    known: ContentId | None = None  # its id with the files' stat when hashed: the ingest need not hash it again
    files: FilesState | None = None  # :func:`files_state` when discovered


@dataclass(frozen=True)
class LeftTrace:
    """A trace the night leaves where it is, and why (shown to the user: its name escaped, see :func:`shown`)."""

    path: str
    reason: str


@dataclass(frozen=True)
class Discovery:
    """What a look at the drop folder found: new traces to ingest, traces still being written (they wait for a
    later night) and traces no night can take as they are (a name that is not UTF-8)."""

    new: list[DroppedTrace]
    waiting: list[LeftTrace]
    skipped: list[LeftTrace]


def shown(path: str | Path) -> str:
    """A path as text any output takes (JSON, a terminal, a Prefect artifact): bytes that are not UTF-8 as
    ``\\xNN`` escapes."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def is_machine_error(exc: BaseException) -> bool:
    """True for failures that say nothing about the trace (disk full, read-only warehouse, out of memory, a run
    that could not be stored): the trace stays for the next night, never quarantined."""
    # attack 7 A6: a run that could not be stored (its stage removed under it, a full disk) says nothing of the trace
    # attack 13: a trace that met a stale NFS handle or an I/O error while read is not a broken trace
    return isinstance(exc, MemoryError | RunStoreError | TraceUnreadableError) or (
        isinstance(exc, OSError) and exc.errno in _MACHINE_ERRNOS)


def is_warehouse_error(exc: BaseException, wh: Warehouse) -> bool:
    """True when ``exc`` (or an exception it was raised from) concerns the warehouse, not the trace: a file of the
    warehouse (e.g. a writer's stage under ``.staging`` gone: another writer's clean-up), or a refusal for the
    warehouse's state (a :class:`WarehouseError`: a user's copy where the trace's experiment folder would go, a
    damaged stored file; attack 12 F13). Such a failure says nothing about the trace, which must never be
    quarantined for it: it stays in the drop for the night after the warehouse is put right."""
    roots = {wh.root, wh.root.absolute(), wh.root.resolve()}
    staging = {str(r / wh.staging_dir.name) for r in roots}
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, WarehouseError):
            return True
        if isinstance(cur, OSError) and cur.filename is not None and \
                any(Path(os.fsdecode(cur.filename)).absolute().is_relative_to(r) for r in roots):
            return True
        if any(s in str(cur) for s in staging):  # Rust/Arrow errors carry the path in their text only
            return True
        cur = cur.__cause__ or cur.__context__
    return False


def _all_files(path: Path) -> list[Path]:
    """Every file of the trace at ``path`` (an OTF2 archive folder's files one by one), sorted."""
    out = []
    for part in trace_files(path):
        if part.is_dir() and not part.is_symlink():
            out += [f for f in tree_entries(part) if not f.is_dir()]  # a deep chain: no recursion (F11)
        else:
            out.append(part)
    return sorted(out)


class FilesState(NamedTuple):
    """The state of every file of a trace (:func:`files_state`): equal states mean unchanged files. A few dozen bytes
    however many files the trace has (a 10k-rank OTF2 archive has 20k): it travels as JSON (a list) in the night's
    task parameters, and a list of every file passed Prefect's limit on them (attack 22 F3)."""

    count: int  # files
    latest_ns: int  # the latest modification time, ns since the epoch (0: no file)
    digest: str  # of every file's name, size and mtime (:func:`~synthtrace.warehouse.ingest.stat_digest`)


def files_state(path: Path) -> FilesState:
    """The :class:`FilesState` of the trace at ``path``: its files (:func:`_all_files`) with their size and
    modification time (a file gone meanwhile is not in it)."""
    entries = []
    for f in _all_files(path):
        try:
            st = f.stat()
        except FileNotFoundError:  # gone meanwhile: it is not in the state
            continue
        entries.append((shown(f), st.st_size, st.st_mtime_ns))
    return FilesState(len(entries), max((e[2] for e in entries), default=0), stat_digest(entries))


def unsettled_for(state: FilesState, settle_s: float, now_s: float | None = None) -> float | None:
    """None when every file of a trace in ``state`` (:func:`files_state`) has been unchanged for ``settle_s``
    seconds; else the seconds since its latest change (negative for a time stamp in the future: a file server
    whose clock runs ahead, taken as a change just now). ``settle_s`` 0 takes every trace at once."""
    if settle_s <= 0 or not state.count:
        return None
    age = (time.time() if now_s is None else now_s) - state.latest_ns / 1e9
    return None if age >= settle_s else age


def discover(drop: Path, wh: Warehouse, settle_s: float = DEFAULT_SETTLE_S) -> Discovery:
    """Traces under ``drop`` (not in its quarantine) whose content is not in the warehouse yet.

    Identity is the content hash, so renamed or re-dropped files are not ingested twice. A trace whose files
    changed less than ``settle_s`` seconds ago waits (it is neither opened nor hashed); a trace whose path is not
    UTF-8 is skipped with a note (no name rule takes it, and its path could not travel as a flow parameter). A
    trace that cannot even be opened, whatever the exception, is returned without a run_id: its ingest fails and
    quarantines it. Each trace's experiment follows the rule of ``synthtrace ingest``, applied to every trace of
    the drop folder (new or not), so that a folder's runs land in the same experiments night after night.
    """
    from synthtrace.tracelib.formats.source import open_trace

    out, seen, waiting = [], set(), []
    skipped = finish_quarantines(drop)  # before the walk: what a killed night left in the drop is taken, not read
    traces = []
    not_files = _NotTraceFiles(drop)
    for p in find_traces([drop], not_files.add):  # one walk of the drop folder for both (issue 23)
        if QUARANTINE in p.relative_to(drop).parts:
            continue
        if is_utf8(p):
            traces.append(p)
        else:
            skipped.append(LeftTrace(shown(p), "its path is not UTF-8 (a Latin-1 or Windows name?); rename it"))
    skipped += not_files.left()
    experiments, _ = experiment_names(traces, wh)  # where the folders' runs went
    inside = os.path.realpath(drop)
    for path in traces:
        if (away := _outside(path, inside)) is not None:
            skipped.append(LeftTrace(shown(path), f"{shown(away)} is a link out of the drop folder: not read (the "
                                                  "night reads only files inside its drop folder); copy the file in"))
            continue
        if SCOREP_TMP in path.relative_to(drop).parts:
            waiting.append(LeftTrace(str(path), f"{STILL_WRITTEN} (Score-P renames {SCOREP_TMP}/ when its measurement "
                                                "ends; a folder left so is a measurement that crashed)"))
            continue
        state = files_state(path)
        if (age := unsettled_for(state, settle_s)) is not None:
            waiting.append(LeftTrace(str(path), f"{STILL_WRITTEN} (changed {max(age, 0):.0f} s ago; taken once its "
                                                f"files are unchanged for {settle_s:g} s)"))
            continue
        try:
            with warnings.catch_warnings():  # the ingest that follows reports them
                warnings.simplefilter("ignore")
                source = open_trace(path, salvage=False)
            known = content_id(source)
            run_id = known.run_id
        except Exception as exc:  # one trace's failure, of whatever kind, must not end the night
            if isinstance(exc, TraceUnreadableError):  # the file system failed, perhaps for a moment: not the trace
                waiting.append(LeftTrace(str(path), f"{exc.reason} (a failure of the file system, not of the trace: "
                                                    "taken by a later night)"))
                continue
            if is_machine_error(exc):
                raise
            out.append(DroppedTrace(path, None, experiments[path], files=state))
            continue
        if run_id in seen or wh.has_run(run_id):
            continue
        seen.add(run_id)
        out.append(DroppedTrace(path, run_id, experiments[path], known, state))
    return Discovery(out, waiting, skipped)


#: entries named as traces that are no trace files a night lists by name, the first by path; the others are counted
#: (issue 23: a drop folder may hold any number, and every one of them was listed, in memory and in the summary)
LISTED_NOT_FILES = 100


class _NotTraceFiles:
    """What under a drop folder (not its quarantine) is named as a trace but is no trace file, each with why it is
    not read: a FIFO, a folder (searched, not read as a trace), a link that leads to no file (dangling, or a loop),
    a socket or a device. The search for traces passes them by (only files are traces); a night said nothing of
    them, while it said a link out of the folder (attack 10). Given by the search's walk (:meth:`add`), they are
    counted and the first :data:`LISTED_NOT_FILES` by path kept: memory bounded however many there are."""

    def __init__(self, drop: Path):
        self.drop = drop
        self.count = 0
        self._first: list[Path] = []

    def add(self, entry: os.DirEntry) -> None:
        """Take ``entry`` (named as a trace, no file: :func:`~synthtrace.tracelib.formats.source.find_traces`)."""
        path = Path(entry.path)
        if QUARANTINE in path.relative_to(self.drop).parts:
            return
        self.count += 1
        self._first.append(path)
        if len(self._first) >= 2 * LISTED_NOT_FILES:
            self._first = sorted(self._first)[:LISTED_NOT_FILES]

    def left(self) -> list[LeftTrace]:
        """The first :data:`LISTED_NOT_FILES` by path with why each is not read, and a line counting the rest."""
        out = []
        for p in sorted(self._first)[:LISTED_NOT_FILES]:
            try:
                mode = p.stat().st_mode
            except OSError:
                why = "is a link that leads to no file (dangling, or a loop of links)"
            else:
                why = ("is a folder (the traces inside it are read)" if stat.S_ISDIR(mode) else
                       "is a FIFO (a named pipe)" if stat.S_ISFIFO(mode) else "is a socket or a device")
            out.append(LeftTrace(shown(p), f"{why}, not a trace file: not read"))
        if (more := self.count - len(out)) > 0:
            out.append(LeftTrace(shown(self.drop), f"{more:,} more entries named as traces that are no trace "
                                                   "files (folders, FIFOs, links that lead to no file), not listed: "
                                                   "not read"))
        return out


def _outside(path: Path, inside: str) -> Path | None:
    """The first file of the trace at ``path`` (:func:`_all_files`) that a link takes out of the folder ``inside``
    (a real path), or None. The night runs as a service account over a folder that users' jobs write: a ``.pcf`` or
    ``.row`` linked to a file the dropping user cannot read was read by the night's account, its lines quoted in
    warnings and its labels stored as columns every query user sees (attack 7 A25); a linked trace had its fields
    quoted in the quarantine's reason. Only links are resolved here (``realpath``): nothing is opened."""
    for f in _all_files(path):
        real = os.path.realpath(f)
        if os.path.commonpath([real, inside]) != inside:
            return f
    return None


def trace_parts(path: Path) -> list[Path]:
    """The paths that make up the trace at ``path``, there or not: a .prv (or .prv.gz) with its .pcf/.row, as
    Paraver finds them, or an OTF2 anchor with its ``.def`` and its archive folder."""
    from synthtrace.tracelib.formats.paraver.reader import companion

    if path.suffix == ".otf2":
        return [path, path.with_suffix(".def"), path.with_suffix("")]
    return [path, companion(path, ".pcf"), companion(path, ".row")]


def trace_files(path: Path) -> list[Path]:
    """The parts of the trace at ``path`` (:func:`trace_parts`) that are there."""
    return [p for p in trace_parts(path) if p.exists() or p.is_symlink()]


def quarantine(drop: Path, path: Path, reason: str) -> Path | None:
    """Move a broken trace, whole, into a folder of its own under ``drop/.quarantine`` with a ``reason.txt``. A
    companion another trace of its folder reads too (``x.pcf`` of a broken ``x.prv.gz`` beside a sound ``x.prv``:
    :func:`shared_companions`) is copied, not moved, and the reason says so (attack 20 F13: the next night ingested
    the sound trace without its .pcf and .row).

    The folder is new for every trace (time stamp, trace name, random suffix), so two broken traces of one
    name never overwrite each other; the reason says where the trace came from. Returns that folder, or None when
    the trace is gone (another night took it, its owner moved it): then no folder is left behind. No link is
    followed on the way: ``.quarantine`` and the trace's folder are opened without following one and the files
    moved into the folder so opened (attack 14 F12: a link planted as ``.quarantine`` moved broken traces into the
    warehouse); what is not a real folder there is an :class:`OSError` saying so (the trace stays where it is).
    """
    stamp = datetime.now(UTC)
    name = shown(path.name)
    short = name if len(name.encode("utf-8")) <= _NAME_BYTES else file_name(name)
    folder = f"{stamp:%Y%m%dT%H%M%S}-{short}-{uuid.uuid4().hex[:8]}"
    with contextlib.ExitStack() as opened:
        qfd = _open_folder(drop / QUARANTINE, made=True)
        opened.callback(os.close, qfd)
        os.mkdir(folder, dir_fd=qfd)
        dfd = _open_folder(drop / QUARANTINE / folder, dir_fd=qfd)
        opened.callback(os.close, dfd)
        main, *companions = trace_files(path) or [path]
        shared = shared_companions(main, companions)
        here = Path(f"/proc/self/fd/{dfd}")
        # the reason and the list of moves first: a night killed between two moves leaves a folder that says why
        # and where from, and the next night finishes it (attack 26 A2: the trace's .pcf/.row stayed in the drop)
        write_atomically(here / REASON_FILE, lambda tmp: tmp.write_text(
            f"{stamp.isoformat()}\n{shown(path)}\n{reason}\n"
            + "".join(f"{shown(f.name)}: copied, left in place for {', '.join(shown(u.name) for u in users)}\n"
                      for f, users in shared.items()), encoding="utf-8"))
        write_atomically(here / MOVES_FILE, lambda tmp: tmp.write_bytes(b"".join(
            (b"c" if f in shared else b"m") + os.fsencode(os.path.abspath(f)) + b"\0" for f in [main, *companions])))
        try:  # the trace's own file first: once it is moved, no other night sees the trace
            _move_into(main, dfd)
        except OSError as exc:  # nothing moved: no folder left behind (a later night would try its moves again)
            for name in (REASON_FILE, MOVES_FILE):
                os.unlink(name, dir_fd=dfd)
            os.rmdir(folder, dir_fd=qfd)
            if isinstance(exc, FileNotFoundError):
                return None
            raise
        _finish_moves(dfd, drop)
    return drop / QUARANTINE / folder


def _finish_moves(dfd: int, drop: Path) -> tuple[list[Path], list[Path]] | None:
    """Move (or copy) into the quarantine folder open as ``dfd`` every file its :data:`MOVES_FILE` lists that is
    still where it was, then remove that list. Returns the files so taken and those refused: only the companions of
    the trace the folder already holds are taken (:func:`_trusted_moves`), whoever wrote the list (review26 of
    attack26 A2, attack27 A2: the drop is writable by every job, so a planted list would move any file the night
    can: the user's data, another user's sound trace, the drop's own lock file). None for a folder whose move never
    began (its list's first file still in place, nothing but the reason and the list in it): the caller removes it,
    the trace stays where it is for the next night."""
    try:
        fd = os.open(MOVES_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
    except FileNotFoundError:
        return [], []
    with open(fd, "rb") as fh:
        records = [r for r in fh.read().split(b"\0") if r]
        # attack27 A4: another account's job can plant a folder and a list; the night's own are its account's
        ours = os.fstat(fh.fileno()).st_uid == os.fstat(dfd).st_uid == os.geteuid()
    if records[:1] and records[0][:1] == b"m" and os.path.lexists(os.fsdecode(records[0][1:])) and \
            set(os.listdir(dfd)) == {REASON_FILE, MOVES_FILE}:
        return None  # review27 L3: a night killed before its first move (or a list planted alone): nothing to finish
    taken, refused = [], []
    trusted = _trusted_moves(dfd, drop, records) if ours else {}
    for record in records:
        src = Path(os.fsdecode(record[1:]))
        if src not in trusted:
            refused.append(src)
            continue
        with contextlib.suppress(FileNotFoundError):  # moved already, or by another night meanwhile
            if record[:1] == b"c" or trusted[src]:
                if not os.path.lexists(os.path.join(f"/proc/self/fd/{dfd}", src.name)):
                    _copy_into(src, dfd)
                    taken.append(src)
            else:
                _move_into(src, dfd)
                taken.append(src)
    os.unlink(MOVES_FILE, dir_fd=dfd)
    return taken, refused


def _trusted_moves(dfd: int, drop: Path, records: list[bytes]) -> dict[Path, bool]:
    """The files of a list of moves (``records``: ``m``/``c`` and a path) the quarantine folder open as ``dfd`` may
    take, each with whether it is copied rather than moved. A list :func:`quarantine` wrote names the trace's own
    file first and moves it before any other, so a list is trusted only when that file, a trace in ``drop`` outside
    its quarantine, is gone from where it was and its name is in the folder; then only the trace's own companions
    (:func:`trace_parts`) are taken, and one another trace of their folder still reads is copied, never moved."""
    if not records or records[0][:1] != b"m":
        return {}
    main = Path(os.fsdecode(records[0][1:]))
    if (not is_trace_name(main.name) or not lies_in(main.parent, drop) or lies_in(main.parent, drop / QUARANTINE)
            or os.path.lexists(main) or not os.path.lexists(os.path.join(f"/proc/self/fd/{dfd}", main.name))):
        return {}
    parts = trace_parts(main)[1:]  # an OTF2 anchor's: its .def and its archive folder, last
    companions = [c for i, c in enumerate(parts) if _shaped_as_part(c, main.suffix == ".otf2" and i == len(parts) - 1)]
    shared = shared_companions(main, companions)
    return {main: False} | {c: c in shared for c in companions}


#: the files an OTF2 archive folder holds (its locations' events and definitions; SIONlib containers)
OTF2_ARCHIVE_FILES = (".evt", ".def", ".sion")


def _shaped_as_part(path: Path, archive: bool) -> bool:
    """Whether ``path`` (a companion of :func:`trace_parts`) is what such a part is, links not followed: a regular
    file (``.pcf``, ``.row``, ``.def``), or, an ``archive``, an OTF2 archive folder holding only
    :data:`OTF2_ARCHIVE_FILES` and folders of them, no link (attack27 A4: a planted list naming a made-up ``X.otf2``
    took any folder ``X`` of the drop, or the drop's lock file as ``.synthtrace-night.lock.otf2``'s archive)."""
    try:
        mode = os.lstat(path).st_mode
        if not archive:
            return stat.S_ISREG(mode)
        if not stat.S_ISDIR(mode):
            return False
        for at, folders, files in os.walk(path, onerror=_raised):  # links listed, never followed
            if any(os.path.islink(os.path.join(at, f)) for f in folders + files) or not all(
                    f.endswith(OTF2_ARCHIVE_FILES) for f in files):
                return False
        return True
    except OSError:
        return False


def _raised(exc: OSError) -> None:
    raise exc


def finish_quarantines(drop: Path) -> list[LeftTrace]:
    """Finish the moves of every quarantine folder of ``drop`` a killed night left half done (its
    :data:`MOVES_FILE` still there): one note per file so moved, naming it and the folder. A folder that cannot be
    finished (a read-only drop) is a note too; the next night tries again."""
    notes = []
    try:
        qfd = _open_folder(drop / QUARANTINE)
    except OSError:  # no quarantine yet (or not a real folder: check_drop refuses the night before this)
        return notes
    try:
        with os.scandir(qfd) as entries:
            folders = sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
        for name in folders:
            folder = drop / QUARANTINE / name
            try:
                dfd = _open_folder(folder, dir_fd=qfd)
                try:
                    finished = _finish_moves(dfd, drop)
                    if finished is None:
                        for left in (REASON_FILE, MOVES_FILE):
                            os.unlink(left, dir_fd=dfd)
                finally:
                    os.close(dfd)
                if finished is None:
                    os.rmdir(name, dir_fd=qfd)
                    continue
                taken, refused = finished
            except OSError as exc:
                notes.append(LeftTrace(shown(folder), f"a quarantine a killed night left half done, not finished "
                                                      f"(tried again next night): {exc}"))
                continue
            notes += [LeftTrace(shown(src), f"moved into {shown(folder)}, the quarantine a killed night left half "
                                            "done") for src in taken]
            notes += [LeftTrace(shown(src), f"not moved into {shown(folder)}: its list of moves names a file that is "
                                            "no part of the trace the folder holds") for src in refused]
    finally:
        os.close(qfd)
    return notes


def shared_companions(path: Path, companions: list[Path]) -> dict[Path, list[Path]]:
    """Each of ``companions`` (files of the trace at ``path``: :func:`trace_files`) that another trace of the same
    folder is read with too (``x.prv`` and ``x.prv.gz`` share ``x.pcf`` and ``x.row``), with those traces. Only
    names of the trace's stem are looked at: one listing of its folder, no file opened."""
    stem = trace_stem(path)
    try:
        with os.scandir(path.parent) as entries:
            others = [path.parent / e.name for e in entries
                      if e.name != path.name and is_trace_name(e.name) and trace_stem(Path(e.name)) == stem]
    except OSError:
        return {}
    users = {o: set(trace_files(o)[1:]) for o in sorted(others)}
    return {f: used for f in companions if (used := [o for o, files in users.items() if f in files])}


def _copy_into(src: Path, dfd: int) -> None:
    """Copy the file ``src`` into the folder open as ``dfd``, under its own name; a link is copied as a link (never
    followed: what it leads to is not read)."""
    if src.is_symlink():
        os.symlink(os.readlink(src), src.name, dir_fd=dfd)
        return
    fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with open(fd, "rb") as source:
        if not stat.S_ISREG(os.fstat(source.fileno()).st_mode):
            raise OSError(errno.EINVAL, f"{shown(src)}: not a regular file, not copied into the quarantine")
        out = os.open(src.name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                      dir_fd=dfd)
        with open(out, "wb") as target:
            shutil.copyfileobj(source, target)


def _open_folder(path: Path, *, made: bool = False, dir_fd: int | None = None) -> int:
    """A descriptor of the real folder at ``path`` (made first when ``made``; with ``dir_fd``, its name is taken in
    that folder), never through a link: anything else there is an :class:`OSError` naming what it is."""
    if made:
        with contextlib.suppress(FileExistsError):  # mkdir never follows a link at the name
            os.mkdir(path)
    name = path.name if dir_fd is not None else path
    try:
        return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
            raise
        mode = os.lstat(name, dir_fd=dir_fd).st_mode
        raise OSError(exc.errno, f"{path}: {file_kind(mode)} where a quarantine folder belongs, not followed") from None


def _move_into(src: Path, dfd: int) -> None:
    """Move ``src`` (a file, or an OTF2 archive's folder) into the folder open as ``dfd``, under its own name."""
    try:
        os.rename(src, src.name, dst_dir_fd=dfd)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        shutil.move(src, f"/proc/self/fd/{dfd}/{src.name}")  # another file system: copied into that same folder
