"""One night at a time per warehouse (issue 23): two nights at once (cron starting one while the last still runs, two
``serve`` processes, ``nightly`` beside ``serve``) discovered the same traces, so both could ingest or quarantine
one, or one quarantine a trace the other was ingesting.

A night holds ``WAREHOUSE/.locks/night.lock`` locked (``flock``, as the writers' leases of
:meth:`~synthtrace.warehouse.layout.Warehouse.lease`) from before it discovers anything until it ends. The lock
is the kernel's: a night that is killed releases it with its process, on any host that shares the file system's
locks, so no pid is judged alive or dead. ``night.holder.json`` beside it says who holds it (drop folder, pid,
host, since when), for the one line the other night stops with
(:class:`~synthtrace.warehouse.errors.NightRunningError`); the lock file itself is never written (attack 16 F1). The
file stays: a removed lock file would let a third night lock a new one beside a holder of the old.
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

from synthtrace.warehouse.errors import NightRunningError, WarehouseError
from synthtrace.warehouse.layout import MAX_RECORD_BYTES, Warehouse

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
        if (refused := take(fd, lambda: _held_by(record, path, drop))) is not None:
            unlocked(wh.root, "warehouse", refused, "two nights into it at once would both ingest and quarantine "
                     "the same traces")
        else:
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


def _held_by(record: Path, path: Path, drop: str | Path) -> str:
    """The line a night stops with when the night of the holder ``record`` holds the lock file ``path``."""
    try:  # never a link followed nor a FIFO waited on: only a regular file is read
        fd = os.open(record, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            data = os.pread(fd, MAX_RECORD_BYTES, 0) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
        finally:
            os.close(fd)
        holder = json.loads(data or b"{}")
    except (OSError, ValueError):
        holder = {}
    if not isinstance(holder, dict):
        holder = {}
    other = holder.get("drop")
    since = holder.get("since", "a moment ago (still starting)")
    who = f"pid {holder['pid']} on {holder.get('host', 'an unknown host')}" if "pid" in holder else "pid not said yet"
    return (f"another night is running on {other or drop} since {since}, {who} (it holds {path}); this one did "
            "nothing: let it finish (or stop it), or run the nights further apart")
