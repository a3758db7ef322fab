"""Issue 23 (fixlock16's edges): who holds the warehouse's night lock, as the night it refuses says it. The holder
record (``.locks/night.holder.json``) is written after the lock is taken, into a file of the night's own renamed
into place: a night killed between the write and the rename left its ``.new`` file for good; a refusal in that
moment named the night before (dead, or a ``serve`` process alive but holding nothing); and a night of an older
version, which wrote its record into ``night.lock`` itself, was said as "pid not said yet"."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from synthtrace.warehouse import Warehouse
from synthtrace.warehouse import night_lock as night_lock_module
from synthtrace.warehouse.errors import NightRunningError
from synthtrace.warehouse.night_lock import NIGHT_LOCK, NIGHT_RECORD, night_lock

#: a night killed (SIGKILL) between writing its holder record and renaming it into place
_KILLED_BEFORE_THE_RENAME = """
import os, signal, sys
from synthtrace.warehouse import Warehouse
from synthtrace.warehouse.night_lock import night_lock
os.rename = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
with night_lock(Warehouse(sys.argv[1]), sys.argv[2]):
    pass
"""
#: a night that took the lock and has not said who it is yet; with an argument, a night of an older version, which
#: wrote its record into the lock file itself
_HOLDS_THE_LOCK = """
import fcntl, json, os, socket, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
if len(sys.argv) > 2:
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps({"drop": sys.argv[2], "pid": os.getpid(), "host": socket.gethostname(),
                              "since": "2026-12-01T02:00:00+00:00"}).encode(), 0)
print("held", flush=True)
sys.stdin.read()
"""


def _holding(lock, *legacy_drop) -> subprocess.Popen:
    holder = subprocess.Popen([sys.executable, "-c", _HOLDS_THE_LOCK, str(lock), *map(str, legacy_drop)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def _refusal(wh, drop) -> str:
    with pytest.raises(NightRunningError) as refused:
        with night_lock(Warehouse(wh), drop):
            pytest.fail("two nights held the lock")
    return str(refused.value)


def test_a_night_killed_before_renaming_its_record_leaves_nothing_once_the_lock_is_next_taken(tmp_path):
    wh, drop = tmp_path / "wh", tmp_path / "drop"
    drop.mkdir()
    killed = subprocess.Popen([sys.executable, "-c", _KILLED_BEFORE_THE_RENAME, str(wh), str(drop)])
    assert killed.wait(timeout=120) == -signal.SIGKILL
    left = wh / ".locks" / f".{NIGHT_RECORD}.{killed.pid}.new"
    assert left.is_file()
    with night_lock(Warehouse(wh), drop):
        assert not left.exists()
        assert json.loads((wh / ".locks" / NIGHT_RECORD).read_text())["pid"] == os.getpid()
    assert {p.name for p in (wh / ".locks").iterdir()} == {NIGHT_LOCK, NIGHT_RECORD}


@pytest.mark.parametrize(("before", "lock_table"), [("a dead night", True), ("a live process's ended night", True),
                                                     ("a dead night", False)])
def test_a_refusal_never_names_a_night_that_holds_nothing(tmp_path, monkeypatch, before, lock_table):
    """The record left by the night before (its process dead, or alive and holding nothing: a `serve` between
    nights) while another night holds the lock and has not written its own: the holder is said unknown. Without
    the kernel's lock table (not Linux), a dead night's record is known by its pid."""
    wh, drop = tmp_path / "wh", tmp_path / "drop"
    drop.mkdir()
    if not lock_table:
        monkeypatch.setattr(night_lock_module, "lock_holders", lambda fd: None)
    if before == "a dead night":
        subprocess.run([sys.executable, "-c", "import sys\nfrom synthtrace.warehouse import Warehouse\nfrom "
                        "synthtrace.warehouse.night_lock import night_lock\nwith night_lock(Warehouse(sys.argv[1]), "
                        "sys.argv[2]):\n    pass", str(wh), str(tmp_path / "old-drop")], timeout=120, check=True)
    else:
        with night_lock(Warehouse(wh), tmp_path / "old-drop"):
            pass
    assert "old-drop" in (wh / ".locks" / NIGHT_RECORD).read_text()
    holder = _holding(wh / ".locks" / NIGHT_LOCK)
    try:
        said = _refusal(wh, drop)
    finally:
        holder.kill()
        holder.wait()
    assert "old-drop" not in said and "pid" not in said, said
    assert said.startswith("another night is running, which one is not known yet "), said
    assert f"(it holds {wh / '.locks' / NIGHT_LOCK} " in said


def test_a_night_of_an_older_version_is_named_from_the_record_in_its_lock_file(tmp_path):
    wh, drop = tmp_path / "wh", tmp_path / "drop"
    drop.mkdir()
    with night_lock(Warehouse(wh), tmp_path / "old-drop"):  # a record of this version, of a night that ended
        pass
    holder = _holding(wh / ".locks" / NIGHT_LOCK, tmp_path / "older-drop")
    try:
        said = _refusal(wh, drop)
    finally:
        holder.kill()
        holder.wait()
    assert said.startswith(f"another night is running on {tmp_path / 'older-drop'} since 2026-12-01T02:00:00+00:00, "
                           f"pid {holder.pid} on {socket.gethostname()} (it holds "), said


def test_a_refusal_is_one_line_whatever_the_holders_drop_folder_is_named(tmp_path):
    """A drop folder whose name holds a line break (a user's folder) made the refusal two lines, the second starting
    with what followed the break: its record's values are shown escaped."""
    wh, drop = tmp_path / "wh", tmp_path / "drop"
    drop.mkdir()
    with night_lock(Warehouse(wh), tmp_path / "drop\nerror: forged"):
        said = _refusal(wh, drop)
    assert len(said.splitlines()) == 1 and f"running on {tmp_path}/drop\\nerror: forged since " in said, said
