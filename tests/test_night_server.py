"""The ephemeral Prefect server of a night run without PREFECT_API_URL: stopped with its night however the night
ends, watched by one watcher per process, and the night's log records sent before it stops (attack 14 F3, F10, F8).
Each test runs its nights in a process of its own (the server and its watcher are the process's)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testing.processes import server_alive
from testing.traces import PRIME, copy_trace

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="no pidfds (before 5.3)")]

#: kills its own process (SIGKILL) as soon as the ephemeral server's process runs, before it answers
_KILLED_WHILE_ITS_SERVER_STARTS = """
import os, signal, threading, time
from pathlib import Path
from synthtrace.pipelines import nightly

def kill_once_the_server_runs():
    me = str(os.getpid())
    while True:
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                ppid = (proc / "stat").read_text().rsplit(")", 1)[1].split()[1]
                if ppid == me and b"uvicorn" in (proc / "cmdline").read_bytes():
                    print(proc.name, flush=True)
                    os.kill(os.getpid(), signal.SIGKILL)
            except (OSError, IndexError):
                pass
        time.sleep(0.05)

threading.Thread(target=kill_once_the_server_runs, daemon=True).start()
nightly.start_prefect()
print("the server answered before the night was killed", flush=True)
"""

#: two nights by the Python API (a scheduler's loop, a notebook), then one by the console script, in one process
_THREE_NIGHTS = """
import os, sys
from pathlib import Path
from synthtrace.pipelines import nightly
from synthtrace.pipelines.cli import main
from synthtrace.warehouse import Warehouse

def watchers():
    me, found = str(os.getpid()).encode(), 0
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\\0")
        except OSError:
            continue
        found += me in argv and any(b"pidfd_open" in a for a in argv)
    return found

wh, *drops = sys.argv[1:]
skip = ["merge", "archetypes", "pop", "detect", "retrain", "report"]
for drop in drops[:2]:
    s = nightly.run_night(Path(drop), Warehouse(wh), settle_s=0, skip=skip)
    print("night:", s.message(), "watchers:", watchers(), flush=True)
sys.argv = ["synthtrace", "nightly", "--drop", drops[2], "-w", wh, "--settle", "0",
            *[a for s in skip for a in ("--skip", s)]]
main()
"""


def _env(tmp_path: Path) -> dict[str, str]:
    """The environment of a night on its own ephemeral server (no configured one)."""
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(PREFECT_HOME=str(tmp_path / "prefect"), DO_NOT_TRACK="1", PREFECT_SERVER_ANALYTICS_ENABLED="false",
               PREFECT_LOGGING_LEVEL="WARNING")
    return env


def _gone_within(pid: int, seconds: float) -> bool:
    """Whether the server ``pid`` ends within ``seconds``; killed (and False) if not."""
    deadline = time.monotonic() + seconds
    while server_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if alive := server_alive(pid):
        os.kill(pid, signal.SIGKILL)
    return not alive


def test_a_night_killed_while_its_server_starts_takes_the_server_along(tmp_path):
    """Attack 14 F3: the watcher started once the server answered (~13 s on a loaded machine), so a night SIGKILLed
    meanwhile (``timeout -s KILL``, a scheduler's kill of a night hung on start-up) left the server running for good.
    The watcher runs before the server does."""
    out = tmp_path / "night.out"
    with out.open("w") as fh:  # a file, not a pipe: a server left running would hold a pipe open
        p = subprocess.run([sys.executable, "-c", _KILLED_WHILE_ITS_SERVER_STARTS], stdout=fh,
                           stderr=subprocess.STDOUT, env=_env(tmp_path), timeout=600, check=False)
    text = out.read_text()
    assert p.returncode == -signal.SIGKILL and "answered" not in text, text
    server = next(int(line) for line in text.splitlines() if line.strip().isdigit())
    assert _gone_within(server, 60), "the night's Prefect server outlived it"


def test_nights_in_one_process_share_one_watcher_and_end_with_their_summary(tmp_path):
    """Attack 14 F10: each night of a long-lived process started one more watcher of its one server (N nights, N
    watchers of ~9 MB until the process ended). F8: a night that logged a warning (a quarantine) in its last
    seconds ended with "--- Error logging to API --- / All connection attempts failed" under its summary: Prefect
    sent the record after the console script's exit had stopped the server (here every night's records wait for
    its end: in a night that ran on after its warning, Prefect had sent it, a batch every 2 s)."""
    drops = []
    for n in range(3):
        drop = tmp_path / f"drop{n}"
        copy_trace(PRIME, drop / "prime", f"prime.night{n}")
        prv = drop / "prime" / f"prime.night{n}.prv"
        prv.write_bytes(prv.read_bytes() + b"\n" * (n + 1))  # another run each night
        (drop / "prime" / "broken.prv").write_text("#Paraver (01/01/20 at 10:00):100_ns:1(1):1:1(1:1),0\n"
                                                   "1:1:1:5:1:0:10:1\n")
        drops.append(str(drop))
    env = _env(tmp_path)
    env["PREFECT_LOGGING_TO_API_BATCH_INTERVAL"] = "600"  # every record still queued at the end of the night
    p = subprocess.run([sys.executable, "-c", _THREE_NIGHTS, str(tmp_path / "wh"), *drops], capture_output=True,
                       text=True, env=env, timeout=600, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    nights = [line for line in p.stdout.splitlines() if line.startswith("night:")]
    assert len(nights) == 3 and all("1 runs ingested, 1 quarantined" in line for line in nights), p.stdout
    assert [line.rsplit("watchers: ", 1)[-1] for line in nights[:2]] == ["1", "1"], nights
    assert "Error logging to API" not in p.stderr and "connection attempts failed" not in p.stderr, p.stderr
    assert p.stdout.rstrip().endswith("stages not run: merge, archetypes, pop, detect, retrain, report"), p.stdout


def test_a_night_of_many_task_runs_ends_with_its_summary_not_the_servers_shutdown(tmp_path):
    """Attack 16 F10: a night of 60+ traces (80 broken one-line traces, each quarantined by a task of its own) ended
    with the ephemeral server's shutdown under its summary: "task_run_recorder - Error flushing 1 events" and
    CancelledError tracebacks, its services cancelled while they still recorded the night's last task runs. What the
    server writes while it stops goes to its log in PREFECT_HOME."""
    drop = tmp_path / "drop" / "e"
    drop.mkdir(parents=True)
    for n in range(80):
        (drop / f"b{n}.prv").write_text("#Paraver broken\n")
    p = subprocess.run([sys.executable, "-c", "import sys; from synthtrace.pipelines.cli import main; "
                        "sys.exit(main(sys.argv[1:]))", "nightly", "--drop", str(drop.parent), "-w",
                        str(tmp_path / "wh"), "--settle", "0", "--skip", "report", "--skip", "retrain"],
                       capture_output=True, text=True, env=_env(tmp_path), timeout=600, check=False)
    assert p.returncode == 0 and "night: 0 runs ingested, 80 quarantined" in p.stdout, p.stdout + p.stderr
    assert "Traceback" not in p.stderr and "ERROR" not in p.stderr, p.stderr[-3000:]
