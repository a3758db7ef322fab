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


def ctrl_c_when_busy(p: subprocess.Popen, cpu_s: float, timeout_s: float = 300, wall_s: float = 60) -> tuple[str, str]:
    """Send SIGINT to ``p`` once it has used ``cpu_s`` seconds of CPU (its imports done, its work under way, however
    loaded the machine), or at the latest after ``wall_s`` seconds (session 18: in three loaded whole-suite runs the
    CPU of `sql`'s query child was not seen, the query ran to its end, 110 s, and the test saw exit 0; cause not
    found), and return its (stdout, stderr) once it ends."""
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
