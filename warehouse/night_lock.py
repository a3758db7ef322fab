"""One night at a time per warehouse (issue 23): two nights at once (cron starting one while the last still runs, two
``serve`` processes, ``nightly`` beside ``serve``) discovered the same traces, so both could ingest or quarantine
one, or one quarantine a trace the other was ingesting.

A night holds ``WAREHOUSE/.locks/night.lock`` locked (``flock``, as the writers' leases of
:meth:`~synthtrace.warehouse.layout.Warehouse.lease`) from before it discovers anything until it ends. The lock
is the kernel's: a night that is killed releases it with its process, on any host that shares the file system's
locks, so no pid is judged alive or dead. The file says who holds it (drop folder, pid, host, since when), for the
one line the other night stops with (:class:`~synthtrace.warehouse.errors.NightRunningError`). The file stays: a
removed lock file would let a third night lock a new one beside a holder of the old.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import stat
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from synthtrace.warehouse.errors import NightRunningError, WarehouseError
from synthtrace.warehouse.layout import MAX_RECORD_BYTES, Warehouse

#: the file a night holds locked, under the warehouse's ``.locks/``
NIGHT_LOCK = "night.lock"


@contextlib.contextmanager
def night_lock(wh: Warehouse, drop: str | Path) -> Iterator[None]:
    """Hold the night lock of ``wh`` (made with its layout) for the block, for a night over ``drop``; raise
    :class:`NightRunningError` at once, nothing done, when another night holds it. A warehouse where the lock
    cannot be written (read-only: no night can write it either) is not locked."""
    path = wh.ensure().journal_dir / NIGHT_LOCK
    try:
        wh.journal_dir.mkdir(exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EISDIR):  # a link or a folder planted there
            raise WarehouseError(f"{path}: is not a lock file (a night's lock is a regular file); move it away"
                                 ) from None
        yield  # read-only: unlocked
        return
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise WarehouseError(f"{path}: is not a lock file (a night's lock is a regular file); move it away")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                yield  # a file system without locks: as before
                return
            raise NightRunningError(_held_by(fd, path, drop)) from None
        holder = {"drop": str(Path(drop).absolute()), "pid": os.getpid(), "host": socket.gethostname(),
                  "since": datetime.now(UTC).isoformat(timespec="seconds")}
        with contextlib.suppress(OSError):  # who holds it is said to the next night; the lock holds without it
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(holder).encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def _held_by(fd: int, path: Path, drop: str | Path) -> str:
    """The line a night stops with when the night of the record in the lock file ``fd`` holds it."""
    try:
        holder = json.loads(os.pread(fd, MAX_RECORD_BYTES, 0) or b"{}")
    except (OSError, ValueError):
        holder = {}
    if not isinstance(holder, dict):
        holder = {}
    other = holder.get("drop")
    since = holder.get("since", "a moment ago (still starting)")
    who = f"pid {holder['pid']} on {holder.get('host', 'an unknown host')}" if "pid" in holder else "pid not said yet"
    return (f"another night is running on {other or drop} since {since}, {who} (it holds {path}); this one did "
            "nothing: let it finish (or stop it), or run the nights further apart")
