"""Attack 14 F1, F2: the warehouse's night lock ran the night unlocked, silently, whenever its file could not be
opened for writing (a socket planted there, another account's or an immutable file): two nights into one warehouse
ran at once. Only a read-only warehouse runs unlocked now; anything else is one line, nothing done; a file system
that refuses locks is said. And a read-only drop on NFS holding the drop's lock file was refused every night as
"another account's lock file": it is locked by its folder, as a read-only drop without the file."""
from __future__ import annotations

import errno
import fcntl
import os
import socket
from pathlib import Path

import pytest

from synthtrace.tracelib.errors import BadInputError
from synthtrace.warehouse import Warehouse
from synthtrace.warehouse import drop as drop_module
from synthtrace.warehouse.errors import NightRunningError, WarehouseError
from synthtrace.warehouse.night_lock import NIGHT_LOCK, night_lock


def _lock_path(wh: Path) -> Path:
    locks = Warehouse(wh).ensure().journal_dir
    locks.mkdir(exist_ok=True)
    return locks / NIGHT_LOCK


def _failing_open(monkeypatch, path: Path, err: int) -> None:
    """``os.open`` of ``path`` for writing fails with ``err`` (as another account's file, an immutable one, a
    read-only mount; root writes any of them)."""
    real = os.open

    def opener(p, flags, *args, **kw):
        if os.fspath(p) == str(path) and flags & (os.O_RDWR | os.O_WRONLY):
            raise OSError(err, os.strerror(err), str(path))
        return real(p, flags, *args, **kw)
    monkeypatch.setattr(os, "open", opener)


def test_a_socket_as_the_night_lock_is_refused_in_one_line(tmp_path, run_cli):
    wh, drop = tmp_path / "wh", tmp_path / "drop"
    drop.mkdir()
    path = _lock_path(wh)
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(str(path))
        with pytest.raises(WarehouseError, match="a socket where the night lock belongs"):
            with night_lock(Warehouse(wh), drop):
                pytest.fail("the night ran unlocked")
        code, out, err = run_cli("nightly", "--drop", drop, "-w", wh, "--settle", "0")
        assert code == 2 and len(err.strip().splitlines()) == 1 and "a socket where the night lock belongs" in err
    finally:
        s.close()


@pytest.mark.parametrize("err", [errno.EACCES, errno.EPERM])
def test_a_lock_file_that_cannot_be_written_in_a_writable_warehouse_is_refused(tmp_path, monkeypatch, err):
    """Another account's file in a group-writable .locks/ (EACCES), an immutable one (EPERM)."""
    wh = tmp_path / "wh"
    path = _lock_path(wh)
    path.touch()
    _failing_open(monkeypatch, path, err)
    with pytest.raises(WarehouseError, match="the night lock cannot be opened for writing .*this night did nothing"):
        with night_lock(Warehouse(wh), tmp_path):
            pytest.fail("the night ran unlocked")


@pytest.mark.parametrize("err", [errno.EROFS, errno.EACCES])
def test_only_a_read_only_warehouse_runs_unlocked(tmp_path, monkeypatch, err):
    """EROFS, or EACCES where the warehouse folder itself may not be written: no night can write it either."""
    wh = tmp_path / "wh"
    path = _lock_path(wh)
    _failing_open(monkeypatch, path, err)
    if err == errno.EACCES:
        real = os.access
        monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if os.fspath(p) == str(wh) else
                            real(p, mode, **kw))
    ran = []
    with night_lock(Warehouse(wh), tmp_path):
        ran.append(True)
    assert ran == [True]


def test_a_file_system_that_refuses_the_night_lock_is_said(tmp_path, monkeypatch):
    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))
    monkeypatch.setattr(fcntl, "flock", no_locks)
    with pytest.warns(UserWarning, match="warehouse folder's file system refuses locks"):
        with night_lock(Warehouse(tmp_path / "wh"), tmp_path):
            pass


def test_a_read_only_nfs_drop_holding_the_lock_file_is_locked_by_its_folder(tmp_path, monkeypatch):
    """Flock answers as NFS does (EBADF for a descriptor open read-only); the drop is a read-only mount (EROFS) that
    holds the lock file a read-write host's night made: locked by its folder, not refused."""
    from testing.read_only import read_only

    real = fcntl.flock

    def nfs_flock(fd, op):
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY and not os.path.isdir(f"/proc/self/fd/{fd}"):
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
        return real(fd, op)

    drop = tmp_path / "drop"
    drop.mkdir()
    (drop / drop_module.DROP_LOCK).touch()
    monkeypatch.setattr(fcntl, "flock", nfs_flock)
    read_only(drop, monkeypatch.setattr)
    with drop_module.drop_lock(drop):
        with pytest.raises(NightRunningError):
            with drop_module.drop_lock(drop):
                pytest.fail("two nights held the read-only drop")
    monkeypatch.undo()
    (drop / drop_module.DROP_LOCK).touch()  # writable again: another account's file opened read-only is refused
    monkeypatch.setattr(fcntl, "flock", nfs_flock)
    _failing_open(monkeypatch, drop / drop_module.DROP_LOCK, errno.EACCES)
    with pytest.raises(BadInputError, match="this account's read-only lock file, which this account may only read"):
        with drop_module.drop_lock(drop):
            pytest.fail("the night ran unlocked")
