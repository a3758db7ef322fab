"""One night at a time per warehouse (issue 23): two nights at once (cron starting one while the last still runs, two
``serve`` processes, ``nightly`` beside ``serve``) discovered the same traces, so both could ingest or quarantine
one, or one quarantine a trace the other was ingesting.

A night holds ``WAREHOUSE/.locks/night.lock`` locked (``flock``, as the writers' leases of
:meth:`~synthtrace.warehouse.layout.Warehouse.lease`) from before it discovers anything until it ends. The lock
is the kernel's: a night that is killed releases it with its process, on any host that shares the file system's
locks, so no pid is judged alive or dead. ``night.holder.json`` beside it says who holds it (drop folder, pid,
host, since when), for the one line the other night stops with
(:class:`~synthtrace.warehouse.errors.NightRunningError`); the lock file itself is never written (attack 16 F1), but
a night of an older version wrote its record there, and it is read there too. A record is believed only of a night
that holds the lock (on this host: a live pid among the lock's holders); else the holder is said unknown (one that
has not written its record yet). The file stays: a removed lock file would let a third night lock a new one beside
a holder of the old.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import stat
import warnings
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from synthtrace.tracelib.printable import clipped
from synthtrace.warehouse.errors import NightRunningError, WarehouseError
from synthtrace.warehouse.layout import Warehouse, pid_alive, read_record

#: the file a night holds locked, under the warehouse's ``.locks/``
NIGHT_LOCK = "night.lock"
#: who holds it (drop folder, pid, host, since when), beside it: the lock file itself is never written
NIGHT_RECORD = "night.holder.json"


@contextlib.contextmanager
def night_lock(wh: Warehouse, drop: str | Path) -> Iterator[None]:
    """Hold the night lock of ``wh`` (made with its layout) for the block, for a night over ``drop``; raise
    :class:`NightRunningError` at once, nothing done, when another night holds it. Only a read-only warehouse
    (a read-only mount, or one this account may not write: no night can write it either) is not locked; anything
    else that keeps the lock file from being opened for writing (a socket, a link or a folder planted there,
    another account's or an immutable file) is a :class:`WarehouseError`, nothing done (attack 14 F1: each ran
    the night unlocked, beside another). A file system that refuses locks is said (:func:`unlocked`), and the night
    goes on."""
    path = wh.ensure().journal_dir / NIGHT_LOCK
    if (fd := _open_night_lock(wh, path)) is None:
        yield  # read-only: unlocked
        return
    record = path.with_name(NIGHT_RECORD)
    try:
        if (refused := take(fd, lambda: _held_by(fd, record, path))) is not None:
            unlocked(wh.root, "warehouse", refused, "two nights into it at once would both ingest and quarantine "
                     "the same traces")
        else:
            _clear_unrenamed(record)
            _write_record(record, {"drop": str(Path(drop).absolute()), "pid": os.getpid(),
                                   "host": socket.gethostname(),
                                   "since": datetime.now(UTC).isoformat(timespec="seconds")})
        yield
    finally:
        os.close(fd)  # releases the lock


def _open_night_lock(wh: Warehouse, path: Path) -> int | None:
    """The night lock file ``path`` of ``wh`` open (:func:`open_lock`), or None for a read-only warehouse (EROFS,
    or EACCES where the warehouse folder itself may not be written); anything else a :class:`WarehouseError`
    naming what is there."""
    try:
        wh.journal_dir.mkdir(exist_ok=True)
        return open_lock(path, "the night lock", "this night did nothing")
    except OSError as exc:
        if exc.errno == errno.EROFS or (exc.errno == errno.EACCES and not os.access(wh.root, os.W_OK)):
            return None
        where = Path(os.fsdecode(exc.filename)) if exc.filename else path
        why = " (another account's file, or an immutable one)" if exc.errno in (errno.EACCES, errno.EPERM) else ""
        raise WarehouseError(f"{where}: the night lock cannot be opened for writing ({exc.strerror}{why}): this "
                             "night did nothing (unlocked, it could run beside another night); move it away (a "
                             "night makes a new one)") from None


#: how a lock file is opened: made if missing, never truncated, a link never followed, a FIFO never waited on
_LOCK_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def open_lock(path: Path, what: str, undone: str) -> int:
    """``path``, the lock file of ``what`` ("the night lock"), open to ``flock`` (made if missing, never truncated
    nor written). Anything there but a regular file of this one name (a link, a FIFO, a socket, a folder, a second
    name of another file: attack 14 F1, attack 16 F1/F4) is a :class:`WarehouseError` naming it and ``undone``
    ("nothing was written"); another failure to open it is the ``OSError``."""
    try:
        fd = os.open(path, _LOCK_FLAGS, 0o644)
    except OSError:
        try:
            st = os.lstat(path)
        except OSError:
            st = None
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise _not_a_lock(path, st, what, undone) from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        raise _not_a_lock(path, st, what, undone)
    return fd


def _not_a_lock(path: Path, st: os.stat_result, what: str, undone: str) -> WarehouseError:
    kind = (file_kind(st.st_mode) if not stat.S_ISREG(st.st_mode) else
            f"a file of {st.st_nlink} names (a hard link: its other name may be anyone's file)")
    return WarehouseError(f"{path}: {kind} where {what} belongs (a regular file of one name), not used as the "
                          f"lock: {undone}; move it away")


def _write_record(record: Path, holder: dict[str, object]) -> None:
    """Say who holds the night lock in ``record``: written into a file this process makes (``O_EXCL``) and renamed
    over the last night's, so no byte of another file is ever written (attack 16 F1: a hard link as the lock file
    had its target, a run's file, truncated and rewritten). The lock holds without it: a failure is ignored."""
    tmp = record.with_name(f".{record.name}.{os.getpid()}.new")
    with contextlib.suppress(OSError):
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, json.dumps(holder).encode())
        finally:
            os.close(fd)
        os.rename(tmp, record)
    with contextlib.suppress(OSError):
        tmp.unlink(missing_ok=True)


def take(fd: int, held_by: Callable[[], str]) -> OSError | None:
    """Take the exclusive ``flock`` of the open file ``fd`` at once: None when taken; raise
    :class:`NightRunningError` with ``held_by()`` when another holds it; the error of a file system that refuses
    locks (not taken: see :func:`unlocked`)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise NightRunningError(held_by()) from None
        return exc
    return None


def unlocked(place: Path, what: str, refused: OSError, risk: str) -> None:
    """Say once that the night runs unlocked over ``place`` (the ``what`` folder), whose file system refused the
    lock (``refused``): Lustre without ``-o flock``, some FUSE mounts."""
    warnings.warn(f"{place}: the {what} folder's file system refuses locks ({os.strerror(refused.errno or 0)}): "
                  f"{risk}; run one night at a time, or mount it with locks", stacklevel=4)


def file_kind(mode: int) -> str:
    """What the file of ``st_mode`` ``mode`` (of ``lstat``) is, with its article, as the one-line errors name it."""
    return ("a symbolic link" if stat.S_ISLNK(mode) else "a folder" if stat.S_ISDIR(mode) else
            "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else
            "a file" if stat.S_ISREG(mode) else "a device")


def _clear_unrenamed(record: Path) -> None:
    """Remove the holder records (``.<record>.<pid>.new``, :func:`_write_record`) that nights killed between writing
    and renaming one left under ``record``'s folder. Called by the night that has just taken the lock: only a holder
    writes one, so every one there is of a night that has ended (no pid judged)."""
    prefix = f".{record.name}."
    for left in record.parent.glob(f"{prefix}*.new"):
        if left.name.removeprefix(prefix).removesuffix(".new").isdigit():
            with contextlib.suppress(OSError):  # a folder planted under such a name: left as it is
                left.unlink()


def lock_holders(fd: int) -> list[int] | None:
    """The pids holding a ``flock`` of the open file ``fd``, from the kernel's lock table (``/proc/locks``, pids as
    this process sees them: a holder on another host, or in another pid namespace, is not among them); None where
    the table cannot be read (not Linux)."""
    st = os.fstat(fd)
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as fh:
            return [int(f[4]) for f in map(str.split, fh) if len(f) > 5 and f[1] == "FLOCK" and f[5] == key
                    and f[4].isdigit()]
    except OSError:
        return None


def _held_by(fd: int, record: Path, path: Path) -> str:
    """The line a night stops with when another holds the lock file ``path`` (open as ``fd``), naming that night
    from its holder ``record`` or, for a night of an older version, from the record it wrote into ``path``
    itself; the holder is said unknown when neither is of a night that holds the lock (its record not written
    yet, in the moment after it took the lock)."""
    holders = lock_holders(fd)
    for source in (record, path):
        try:
            holder = read_record(source)
        except (OSError, ValueError):
            continue
        if isinstance(holder, dict) and _holds(holder, holders):
            drop, since, host = (clipped(str(holder.get(k, unsaid)), 300) for k, unsaid in (
                ("drop", "a drop folder not said"), ("since", "a time not said"), ("host", "an unknown host")))
            return (f"another night is running on {drop} since {since}, pid {holder['pid']} on {host} (it holds "
                    f"{path}); {_LET_IT_FINISH}")
    return (f"another night is running, which one is not known yet (it holds {path} and has not said who it is); "
            f"{_LET_IT_FINISH}")


_LET_IT_FINISH = "this one did nothing: let it finish (or stop it), or run the nights further apart"


def _holds(holder: dict[str, Any], holders: list[int] | None) -> bool:
    """Whether the night of the holder record ``holder`` holds the lock whose holders' pids, as this process sees
    them, are ``holders`` (None: the kernel's table not readable). A holder seen here must be the record's (of this
    host, its pid); without the table, a record of this host names a live process. A holder not seen here (on
    another host, or in another pid namespace: a container of the same host name) cannot be judged: its record is
    taken at its word."""
    pid = holder.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool):
        return False
    here = holder.get("host") == socket.gethostname()
    if holders:
        return here and pid in holders
    if holders is None and here:
        return pid_alive(pid)
    return True
