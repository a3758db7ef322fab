"""[helper edges] Issue 23: one night at a time per warehouse, and a night's configured Prefect server checked even
when the night has nothing to do.

Two nights at once (cron starting one while the last still runs, two `serve` processes) discovered the same traces
and could both ingest or quarantine one. A night now holds the warehouse's night lock (a flock'd file in .locks/,
released by the kernel with its process: no pid judged alive or dead); another stops at once with one line."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from synthtrace.warehouse import Warehouse
from synthtrace.warehouse.errors import NightRunningError
from synthtrace.warehouse.night_lock import NIGHT_LOCK, NIGHT_RECORD, night_lock
from testing.traces import JACOBI, PRIME, copy_trace

#: a night taking nothing from the drop folder: its traces were just written (the default settle time is 60 s)
_HOLD = """
import sys, time
from synthtrace.warehouse import Warehouse
from synthtrace.warehouse.night_lock import night_lock
with night_lock(Warehouse(sys.argv[1]), sys.argv[2]):
    print("held", flush=True)
    time.sleep(600)
"""


def _synthtrace(*args: str | Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "synthtrace.pipelines.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=300, env={**os.environ, **(env or {})}, check=False)


def test_a_second_night_stops_at_once_and_touches_nothing(tmp_path, run_cli):
    """While a night holds the warehouse (here another process, killed -9 afterwards), `nightly` says which night
    in one line, exit 75 (EX_TEMPFAIL: try again later), and neither ingests nor quarantines anything; the killed
    holder's lock is gone with it (its record left in the file does not hold anyone)."""
    from synthtrace.pipelines.nightly import night

    drop, wh = tmp_path / "drop", tmp_path / "wh"
    prv = copy_trace(PRIME, drop)
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(wh), str(drop)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        code, out, err = run_cli("nightly", "--drop", drop, "-w", wh, "--settle", "0")
        assert code == 75 and out == "", err
        assert err.splitlines() == [err.splitlines()[0]] and err.startswith(
            f"error: another night is running on {drop} since "), err
        assert f", pid {holder.pid} on {socket.gethostname()} (it holds {wh / '.locks' / NIGHT_LOCK})" in err
        with pytest.raises(NightRunningError):  # the served flow's night too
            night(str(drop), str(wh), settle_s=0)
        assert prv.is_file() and not any((wh / "runs").iterdir()) and not (drop / ".quarantine").exists()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert "pid" in (wh / ".locks" / NIGHT_RECORD).read_text()  # the dead night's record stays: it holds nobody
    with night_lock(Warehouse(wh), drop):
        pass


def test_a_night_holds_the_lock_until_it_ends(tmp_path):
    drop, wh = tmp_path / "drop", tmp_path / "wh"
    drop.mkdir()
    with night_lock(Warehouse(wh), drop):
        with pytest.raises(NightRunningError, match=f"pid {os.getpid()} "):
            with night_lock(Warehouse(wh), drop):
                pass
    with night_lock(Warehouse(wh), drop):
        pass


def test_a_night_whose_traces_all_wait_starts_no_prefect(tmp_path, monkeypatch):
    """Every trace still being written, on a warehouse that holds no run yet: nothing to ingest, nothing for any
    stage, so no Prefect server is started (tens of seconds on a busy node); the waiting trace is in the summary."""
    from synthtrace.pipelines import nightly

    drop = tmp_path / "drop"
    prv = copy_trace(PRIME, drop)
    monkeypatch.setattr(nightly, "start_prefect", lambda: pytest.fail("Prefect started for a night with no work"))
    summary = nightly.run_night(drop, Warehouse(tmp_path / "wh"))
    assert [w["path"] for w in summary.waiting] == [str(prv)] and "1 waiting" in summary.message()
    assert summary.ingested == [] and summary.errors == []


def test_a_night_with_nothing_to_do_checks_the_configured_server(tmp_path):
    """A26: `PREFECT_API_URL=http://256.1.1.1/api synthtrace nightly --drop EMPTYDIR` exited 0 without checking the
    address (only a night with work checked it): a server that is wrong or down is the same one line every night."""
    drop = tmp_path / "drop"
    drop.mkdir()
    with socket.socket() as s:  # a port nobody listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        for url in ("http://256.1.1.1/api", f"http://127.0.0.1:{s.getsockname()[1]}/api"):
            p = _synthtrace("nightly", "--drop", drop, "-w", tmp_path / "wh", env={"PREFECT_API_URL": url})
            assert p.returncode == 1 and p.stdout == "", p.stderr
            assert len(p.stderr.splitlines()) == 1 and p.stderr.startswith(
                f"error: cannot reach the Prefect server at {url} (PREFECT_API_URL): "), p.stderr


# ------------------------------------------------------------------------- one drop folder, one night (issue 23)
#: a night holding a drop folder (into its own warehouse), as run_night holds it (warehouse/drop.drop_lock)
_HOLD_DROP = """
import sys, time
from pathlib import Path
from synthtrace.warehouse.drop import drop_lock
with drop_lock(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(600)
"""
#: a night on another host as the NFS server sees it: a lock of the drop's lock file by another open file
_HOLD_LOCK_FILE = """
import fcntl, os, sys, time
fd = os.open(os.path.join(sys.argv[1], ".synthtrace-night.lock"), os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(600)
"""


def test_two_nights_from_one_drop_folder_into_two_warehouses_are_kept_apart(tmp_path, run_cli):
    """Each warehouse's night lock let a night into another warehouse take the same drop folder: both ingested,
    and quarantined, the same traces. The drop folder itself is locked now (flock on its descriptor: no write
    needed); the second night is one line naming the first (its pid and command line), exit 75, nothing done."""
    from synthtrace.pipelines.nightly import night

    drop, other = tmp_path / "drop", tmp_path / "other-wh"
    prv = copy_trace(PRIME, drop)
    holder = subprocess.Popen([sys.executable, "-c", _HOLD_DROP, str(drop)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        code, out, err = run_cli("nightly", "--drop", drop, "-w", other, "--settle", "0")
        assert code == 75 and out == "", err
        assert len(err.splitlines()) == 1 and err.startswith(f"error: another night (pid {holder.pid}: "), err
        assert f"is taking the traces of the drop folder {drop}; this one did nothing" in err
        with pytest.raises(NightRunningError, match=f"pid {holder.pid}"):  # the served flow's night too
            night(str(drop), str(other), settle_s=0)
        assert prv.is_file() and not (drop / ".quarantine").exists()
        assert not (other / "runs").exists() or not any((other / "runs").iterdir())
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    from synthtrace.warehouse.drop import drop_lock

    with drop_lock(drop):  # the killed night's lock went with it
        pass


def test_the_drop_folder_is_locked_by_a_file_the_server_holds_and_a_read_only_one_by_itself(tmp_path, run_cli,
                                                                                          monkeypatch):
    """Attack 11 E4: the drop lock was a ``flock`` of the folder's own descriptor, which Linux's NFS client keeps
    local (its directories have no lock operation): nights on two hosts sharing an NFS drop both took its traces.
    The lock is a regular file in the drop (NFS forwards its ``flock`` to the server); a read-only drop folder is
    still locked by itself; a file system that refuses locks is said, the night goes on."""
    import errno
    import fcntl

    from synthtrace.warehouse import drop as drop_mod
    from testing.read_only import read_only

    drop = tmp_path / "drop"
    prv = copy_trace(PRIME, drop)
    holder = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK_FILE, str(drop)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        code, out, err = run_cli("nightly", "--drop", drop, "-w", tmp_path / "wh", "--settle", "0")
        assert code == 75 and "is taking the traces of the drop folder" in err and prv.is_file(), err
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    ro = tmp_path / "ro"
    ro.mkdir()
    with monkeypatch.context() as m:
        read_only(ro, m.setattr)
        with drop_mod.drop_lock(ro):
            with pytest.raises(NightRunningError):
                with drop_mod.drop_lock(ro):
                    pass
    assert not (ro / drop_mod.DROP_LOCK).exists()
    real = fcntl.flock

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))
    monkeypatch.setattr(drop_mod.fcntl, "flock", no_locks)
    with pytest.warns(UserWarning, match="refuses locks"):
        with drop_mod.drop_lock(drop):
            pass
    monkeypatch.setattr(drop_mod.fcntl, "flock", real)


def _as_another_account() -> list[str]:
    """The command prefix under which a file this test made 0444 cannot be opened for writing, as another account's
    lock file cannot: nothing for a plain user; for root (CI's containers) its DAC override dropped (``setpriv``)."""
    if os.geteuid() != 0:
        return []
    import shutil
    if shutil.which("setpriv") is None:
        pytest.skip("root without setpriv: a 0444 file stays writable")
    caps = "-dac_override,-dac_read_search"
    return ["setpriv", f"--inh-caps={caps}", f"--bounding-set={caps}"]


def test_a_night_meets_another_accounts_lock_file_it_cannot_write(tmp_path):
    """Attack 12 F5: a night that could not open the drop's lock file for writing (another account's night made it
    0644 in a shared, group-writable drop) locked the folder instead, never met the file's lock, and took and
    quarantined the same traces as the night holding it. It opens the file read-only now (``flock`` needs no write
    access): the second night is one line naming the first, exit 75, the trace left. The file a night makes is
    writable by whom the drop lets write."""
    drop = tmp_path / "drop"
    prv = copy_trace(PRIME, drop)
    drop.chmod(0o777)  # a shared drop
    holder = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK_FILE, str(drop)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        (drop / ".synthtrace-night.lock").chmod(0o444)  # as another account's file: readable, not writable
        p = subprocess.run([*_as_another_account(), sys.executable, "-m", "synthtrace.pipelines.cli", "nightly",
                            "--drop", str(drop), "-w", str(tmp_path / "wh"), "--settle", "0"],
                           capture_output=True, text=True, timeout=300, check=False)
        assert p.returncode == 75 and p.stdout == "", (p.stdout, p.stderr)
        assert p.stderr.startswith(f"error: another night (pid {holder.pid}: "), p.stderr
        assert prv.is_file() and not (drop / ".quarantine").exists()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    from synthtrace.warehouse.drop import DROP_LOCK, drop_lock

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    fresh.chmod(0o2775)  # a group's drop
    old = os.umask(0o022)
    try:
        with drop_lock(fresh):
            pass
    finally:
        os.umask(old)
    assert (fresh / DROP_LOCK).stat().st_mode & 0o777 == 0o664


def test_a_link_or_folder_planted_as_the_drop_lock_is_one_line_naming_the_remedy(tmp_path, run_cli):
    """Attack 12: a symbolic link (to another file) or a folder under the lock file's name was refused as "Too many
    levels of symbolic links" / "Is a directory", naming no remedy; the line says what is there and to remove it.
    The link's target is never opened."""
    from synthtrace.warehouse.drop import DROP_LOCK

    drop, victim = tmp_path / "drop", tmp_path / "victim.txt"
    prv = copy_trace(PRIME, drop)
    victim.write_text("kept")
    for planted, what in ((lambda p: p.symlink_to(victim), "a symbolic link"), (Path.mkdir, "a folder")):
        planted(drop / DROP_LOCK)
        code, out, err = run_cli("nightly", "--drop", drop, "-w", tmp_path / "wh", "--settle", "0")
        assert code == 2 and out == "" and len(err.splitlines()) == 1, err
        assert f"{what} where the nights' lock file belongs" in err and "until it is removed" in err, err
        assert victim.read_text() == "kept" and prv.is_file()
        if what == "a folder":
            (drop / DROP_LOCK).rmdir()
        else:
            (drop / DROP_LOCK).unlink()


def test_a_fifo_or_socket_planted_as_the_drop_lock_is_refused_at_once(tmp_path):
    """Attack 13 F1: a FIFO under the lock file's name that this account could not open for writing (another
    account's, or its own made 0444) was opened read-only, which waits for a writer: the night hung, and every
    night after it. Anything but a regular file is one line now, at once (the night runs in a child with a
    timeout: the old code would hang the test run); a socket likewise."""
    from synthtrace.warehouse.drop import DROP_LOCK

    drop = tmp_path / "drop"
    prv = copy_trace(PRIME, drop)
    os.mkfifo(drop / DROP_LOCK, 0o444)
    argv = [*_as_another_account(), sys.executable, "-m", "synthtrace.pipelines.cli", "nightly", "--drop", str(drop),
            "-w", str(tmp_path / "wh"), "--settle", "0"]
    for what in ("a FIFO", "a socket"):
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the night waited on {what} planted as the drop's lock file")
        assert p.returncode == 2 and p.stdout == "" and len(p.stderr.splitlines()) == 1, (p.stdout, p.stderr)
        assert f"{what} where the nights' lock file belongs" in p.stderr, p.stderr
        assert prv.is_file() and not (tmp_path / "wh" / "runs").exists()
        (drop / DROP_LOCK).unlink()
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(drop / DROP_LOCK))


def test_a_lock_file_this_account_cannot_open_at_all_is_refused(tmp_path):
    """Attack 13 F2: another account's lock file of mode 0600 could not be opened even read-only, so the night
    locked the folder instead, which never meets the other account's lock on the file: both nights ran. It is one
    line now, nothing done, the trace left."""
    from synthtrace.warehouse.drop import DROP_LOCK

    drop = tmp_path / "drop"
    prv = copy_trace(PRIME, drop)
    (drop / DROP_LOCK).touch()
    (drop / DROP_LOCK).chmod(0)  # as another account's 0600 file, for this account
    p = subprocess.run([*_as_another_account(), sys.executable, "-m", "synthtrace.pipelines.cli", "nightly",
                        "--drop", str(drop), "-w", str(tmp_path / "wh"), "--settle", "0"],
                       capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == 2 and p.stdout == "" and len(p.stderr.splitlines()) == 1, (p.stdout, p.stderr)
    assert "'s lock file, which this account cannot open" in p.stderr, p.stderr  # its owner's (here, this one's)
    assert prv.is_file() and not (tmp_path / "wh" / "runs").exists()


def test_a_read_only_lock_file_on_a_file_system_that_locks_only_writable_files_is_refused(tmp_path, monkeypatch):
    """Attack 13 F2: on NFS (and CIFS) ``flock`` is a byte-range lock, which an exclusive one takes only on a file
    open for writing: another account's lock file, opened read-only, gave EBADF, which the night took for a file
    system without locks, warned, and ran beside the other account's night. It is one line now, nothing done.
    (No NFS here: ``flock`` answers as NFS does for a read-only descriptor.)"""
    import fcntl

    from synthtrace.tracelib.errors import BadInputError
    from synthtrace.warehouse import drop as drop_module

    real = fcntl.flock

    def nfs_flock(fd, op):
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY:
            raise OSError(9, os.strerror(9))
        return real(fd, op)

    drop = tmp_path / "drop"
    drop.mkdir()
    (drop / drop_module.DROP_LOCK).touch()
    monkeypatch.setattr(drop_module.fcntl, "flock", nfs_flock)
    with drop_module.drop_lock(drop):  # a lock file it can write: locked as before
        pass
    opened = drop_module._open_lock
    monkeypatch.setattr(drop_module, "_open_lock",
                        lambda d: (os.close(opened(d)[0]), (os.open(d / drop_module.DROP_LOCK, os.O_RDONLY), False))[1])
    with pytest.raises(BadInputError, match="locks only a file open for writing: this night did nothing"):
        with drop_module.drop_lock(drop):
            pytest.fail("the night ran unlocked")


def test_a_night_holds_the_drop_folder_while_it_discovers(tmp_path, monkeypatch):
    from synthtrace.pipelines import nightly
    from synthtrace.warehouse.drop import drop_lock

    drop = tmp_path / "drop"
    drop.mkdir()
    seen = []

    def discovered(d, wh, settle_s=0):
        with pytest.raises(NightRunningError, match=f"pid {os.getpid()}"):
            with drop_lock(Path(d)):
                pass
        seen.append(d)
        return []

    monkeypatch.setattr(nightly, "discovered", discovered)
    nightly.run_night(drop, Warehouse(tmp_path / "wh"))
    assert seen == [drop]


@pytest.mark.parametrize("holding", ["nothing", "a run"])
def test_a_night_with_nothing_to_do_needs_no_write_access(tmp_path, run_cli, monkeypatch, holding):
    """`nightly` on a read-only warehouse (a reader's mount) with nothing to ingest and no stage to run failed with
    "the warehouse is read-only" (the night lock's layout was written first): it is a quiet night now, exit 0, the
    warehouse unchanged. A night with a trace to ingest there says read-only in one line, the trace left."""
    from testing.read_only import read_only
    from testing.traces import tree_digest

    drop, wh = tmp_path / "drop", tmp_path / "wh"
    drop.mkdir()
    wh.mkdir()
    if holding == "a run":
        assert run_cli("ingest", PRIME, "-w", wh)[0] == 0
    before = tree_digest(wh)
    read_only(wh, monkeypatch.setattr)
    from synthtrace.pipelines.jobs import STAGES

    stages = [] if holding == "nothing" else [a for s in STAGES for a in ("--skip", s)]
    code, out, err = run_cli("nightly", "--drop", drop, "-w", wh, *stages)
    assert code == 0 and "0 runs ingested" in out, err
    prv = copy_trace(JACOBI, drop)  # not in the warehouse
    code, out, err = run_cli("nightly", "--drop", drop, "-w", wh, "--settle", "0", *stages)
    assert code == 2 and len(err.splitlines()) == 1 and "read-only" in err, err
    assert prv.is_file() and not (drop / ".quarantine").exists()
    monkeypatch.undo()
    assert tree_digest(wh) == before
