"""Commands run as processes by tests that interrupt them half-way (Ctrl-C)."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path


def descendants(pid: int) -> list[int]:
    """The live descendants of process ``pid``, each before its own (Linux /proc); none once it has ended. A process
    whose parent ended (re-parented to init) is no longer among them."""
    try:
        children = [int(c) for task in Path(f"/proc/{pid}/task").iterdir()
                    for c in (task / "children").read_text().split()]
    except (FileNotFoundError, ProcessLookupError):  # it ended meanwhile
        return []
    return [d for c in children for d in (c, *descendants(c))]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a live process and its live descendants, in seconds (Linux /proc).
    [helper security, issue 23 F3: `sql` computes in a child process]"""
    return sum(_own_cpu_seconds(p) for p in (pid, *descendants(pid)))


def _own_cpu_seconds(pid: int) -> float:
    """User + system CPU time of the live process ``pid`` alone, in seconds; 0 once it has ended."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _sigint_as_a_terminal_gives_it() -> None:
    """In the child before exec: SIGINT at its default action and not blocked."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def interruptible(args: list[str], **popen_kwargs: object) -> subprocess.Popen:
    """``args`` started as a terminal starts a foreground command, whose Ctrl-C reaches it: SIGINT at its default and
    not blocked, whatever this process inherited. A test run started in the background of a non-interactive shell
    (``cmd &`` in a script, as CI jobs and batch scripts do) has SIGINT ignored, as POSIX has such shells do; a child
    inherits that, and a command then rightly goes on through a Ctrl-C (session 18's whole-suite runs: `sql` ran its
    query to the end and exited 0)."""
    return subprocess.Popen(args, preexec_fn=_sigint_as_a_terminal_gives_it, **popen_kwargs)


def ctrl_c_when_busy(p: subprocess.Popen, cpu_s: float, timeout_s: float = 300, wall_s: float = 60) -> tuple[str, str]:
    """Send SIGINT to ``p`` (started by :func:`interruptible`) once it has used ``cpu_s`` seconds of CPU (its
    imports done, its work under way, however loaded the machine), or at the latest after ``wall_s`` seconds, and
    return its (stdout, stderr) once it ends."""
    end = time.monotonic() + wall_s
    try:
        while p.poll() is None and cpu_seconds(p.pid) < cpu_s and time.monotonic() < end:
            time.sleep(0.05)
        p.send_signal(signal.SIGINT)
        return p.communicate(timeout=timeout_s)
    finally:
        p.kill()


def server_alive(pid: int) -> bool:
    """Whether ``pid`` runs a Prefect server (uvicorn); a zombie or a pid reused by another program is not (a server
    re-parented to init is reaped by it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text(errors="replace").rsplit(")", 1)[1].split()[0]
        return state != "Z" and "uvicorn" in Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
