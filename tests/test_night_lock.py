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
from synthtrace.warehouse.night_lock import NIGHT_LOCK, night_lock
from testing.traces import PRIME, copy_trace

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
    assert "pid" in (wh / ".locks" / NIGHT_LOCK).read_text()  # the dead night's record stays: it holds nobody
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
