"""No server a night starts outlives the night, however the night ends (attack 13 F4, attack 14 F3 and F10).

A night killed by a signal it cannot handle (SIGKILL: the OOM killer, ``timeout -s KILL``, a scheduler's kill of a
night that hangs; SIGABRT from a failed allocation in Polars' Rust) runs no exit handler, so the ephemeral Prefect
server it started (~130-210 MB) ran on for good. A small watcher process (the standard library only) started
*before* the server waits on pidfds (no polling) until the night ends, then stops every server the night handed it
(:func:`watch`, as soon as the server's process exists) and every process started with the night's mark in its
environment (:func:`marked`: a server whose pid the night had no time to hand over). One watcher per process,
however many nights and servers it runs; it ends with the process. Where pidfds are missing (Linux before 5.3)
nothing is watched.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import IO

#: the environment variable that marks the processes a night starts for the watcher to stop (:func:`marked`)
MARK = "SYNTHTRACE_NIGHT_SERVER"
#: seconds a server has to end on SIGTERM before the watcher sends SIGKILL
GRACE_S = 5

#: the watcher: argv (night's pid, mark); stdin, the pids of the night's servers, one a line. It leaves its
#: starter's process tree at once (a second fork, its own session: a kill of the night's process group spares it)
_WATCHER = """
import os, select, signal, sys, time
night, mark = os.pidfd_open(int(sys.argv[1])), ("\\0%s=%s\\0" % tuple(sys.argv[2:4])).encode()
if os.fork():
    os._exit(0)
os.setsid()
servers, inbox, text = [], [0], b""
while not select.select([night], [], [], 0)[0]:
    ready = select.select([night, *inbox, *servers], [], [])[0]
    servers = [fd for fd in servers if fd not in ready]  # a server that ended (stopped by its night)
    if 0 in ready:
        read = os.read(0, 4096)
        inbox = inbox if read else []
        *pids, text = (text + read).split(b"\\n")
        for pid in pids:
            try:
                servers.append(os.pidfd_open(int(pid)))
            except (OSError, ValueError):
                pass
def marked():
    found = []
    for p in os.listdir("/proc"):
        try:
            if p.isdigit() and mark in b"\\0" + open("/proc/%s/environ" % p, "rb").read():
                found.append(os.pidfd_open(int(p)))
        except OSError:
            pass
    return found
for attempt in (0, 1):  # twice: a server forked as the night died may exec its mark a moment later
    servers += marked()
    for fd in servers:
        try:
            signal.pidfd_send_signal(fd, signal.SIGTERM)
        except OSError:
            pass
    time.sleep(0.5)
deadline = time.monotonic() + %(grace)s
for fd in servers:
    if not select.select([fd], [], [], max(deadline - time.monotonic(), 0))[0]:
        try:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        except OSError:
            pass
""".replace("%(grace)s", str(GRACE_S))

#: this process's watcher: its pid (the process started it in), the pipe to its stdin, the pids handed to it
_watcher: tuple[int, IO[bytes]] | None = None
_handed: set[int] = set()
_token = os.urandom(6).hex()


def mark() -> str:
    """The value of :data:`MARK` for the servers this process starts (unique to the process)."""
    return f"{os.getpid()}.{_token}"


def _start() -> IO[bytes] | None:
    """Start this process's watcher; the pipe to it, None where pidfds are missing or it could not start."""
    global _watcher
    if not hasattr(os, "pidfd_open"):
        return None
    _handed.clear()
    try:
        first = subprocess.Popen([sys.executable, "-I", "-S", "-c", _WATCHER, str(os.getpid()), MARK, mark()],
                                 stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 env={})  # no mark (never its own victim), nothing of the night's (PREFECT_HOME)
    except OSError:
        return None
    try:
        first.wait(timeout=60)  # the first process ends once the watcher, its child, watches the night
    except subprocess.TimeoutExpired:
        first.kill()
        first.wait()
        return None
    if first.returncode != 0 or first.stdin is None:
        return None
    _watcher = (os.getpid(), first.stdin)
    atexit.register(first.stdin.close)  # the watcher goes on watching this process until it ends
    return first.stdin


def watching() -> bool:
    """Start this process's watcher unless it runs; whether one watches this process."""
    if _watcher is not None and _watcher[0] == os.getpid():
        return True
    return _start() is not None


def watch(pid: int) -> None:
    """Have the watcher stop the server ``pid`` once this process ends (nothing when it already watches it)."""
    if pid in _handed or not watching():
        return
    assert _watcher is not None
    try:
        _watcher[1].write(f"{pid}\n".encode())
        _watcher[1].flush()
    except OSError:  # the watcher is gone (killed): a new one
        if (pipe := _start()) is None:
            return
        with contextlib.suppress(OSError):
            pipe.write(f"{pid}\n".encode())
            pipe.flush()
    _handed.add(pid)


@contextlib.contextmanager
def marking() -> Iterator[None]:
    """While the block runs, the processes this process starts carry its mark (:data:`MARK`): the watcher (started
    first) stops them too if the night ends before it hands their pids over."""
    watching()
    before = os.environ.get(MARK)
    os.environ[MARK] = mark()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(MARK, None)
        else:
            os.environ[MARK] = before

