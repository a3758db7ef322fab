"""A ``--runner dask`` night's workers report to the night's Prefect server: none starts a server of its own
(attack 16 F2: each worker process ran a second ~220 MB Prefect server, outside the night's watch, that a SIGKILL of
the night left running for good, and an external cluster's workers kept one as long as they ran)."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testing.processes import descendants
from testing.traces import PRIME, copy_trace

pytestmark = [pytest.mark.real_traces, pytest.mark.slow]  # a Dask cluster of processes and a night


#: a night of ``--runner dask`` on a temporary cluster of one worker process, as ``synthtrace nightly`` runs it
_DASK_NIGHT = """
import sys
from synthtrace.pipelines import nightly
from synthtrace.pipelines.cli import main
nightly.cores = lambda: 1
sys.exit(main(["nightly", "--drop", sys.argv[1], "-w", sys.argv[2], "--settle", "0", "--runner", "dask",
               *[a for s in ("merge", "archetypes", "pop", "detect", "retrain", "report") for a in ("--skip", s)]]))
"""


def _servers_below(pid: int) -> set[int]:
    """The Prefect servers (uvicorn processes) among the descendants of ``pid`` now (Linux /proc)."""
    found = set()
    for p in descendants(pid):
        with contextlib.suppress(OSError):
            if b"prefect.server.api.server" in Path(f"/proc/{p}/cmdline").read_bytes():
                found.add(p)
    return found


def test_the_workers_of_a_temporary_cluster_start_no_prefect_server_of_their_own(tmp_path):
    """The night on its own ephemeral server (no PREFECT_API_URL), as a user without a server runs it: one Prefect
    server below the night's process, the night's; before, its worker process started a second one."""
    pytest.importorskip("distributed")
    drop = tmp_path / "drop"
    copy_trace(PRIME, drop / "prime")
    (drop / "prime" / "broken.prv").write_text("#Paraver (01/01/20 at 10:00):100_ns:1(1):1:1(1:1),0\n"
                                               "1:1:1:5:1:0:10:1\n")
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(PREFECT_HOME=str(tmp_path / "prefect"), PREFECT_LOGGING_LEVEL="WARNING")
    seen: set[int] = set()
    with (tmp_path / "night.out").open("w+") as out:  # a file: a server left running would hold a pipe open
        night = subprocess.Popen([sys.executable, "-c", _DASK_NIGHT, str(drop), str(tmp_path / "wh")], stdout=out,
                                 stderr=subprocess.STDOUT, env=env)
        try:
            while night.poll() is None:
                seen |= _servers_below(night.pid)
                time.sleep(0.1)
        finally:
            night.kill()
            night.wait()
        out.seek(0)
        text = out.read()
    assert night.returncode == 0 and "1 runs ingested, 1 quarantined" in text, text
    assert len(seen) == 1, f"Prefect servers of the night: {sorted(seen)}"


def test_external_workers_without_a_prefect_server_are_warned_about(prefect_harness, capsys, monkeypatch):
    """An external cluster's workers cannot be given the night's server: the night says which have none, and what
    they need, in one line."""
    pytest.importorskip("distributed")
    from distributed import LocalCluster

    from synthtrace.pipelines import nightly

    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        nightly.warn_workers_without_server(cluster.scheduler_address, "http://127.0.0.1:9/api")
        worker = next(iter(cluster.scheduler_info["workers"]))
    said = [line for line in capsys.readouterr().err.splitlines() if "PREFECT_API_URL" in line]  # not Dask's log
    assert said == [f"warning: Dask worker {worker} has no PREFECT_API_URL: each starts a Prefect server of its own "
                   "(~220 MB, as long as it runs) and records the night's task runs there; start them with "
                   "PREFECT_API_URL=http://127.0.0.1:9/api"], said
