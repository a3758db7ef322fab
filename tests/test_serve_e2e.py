"""End to end: a real Prefect server on 127.0.0.1, the nightly deployment served on a schedule, one run triggered."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from synthtrace.warehouse import Warehouse
from synthtrace.warehouse.sql import query
from testing.traces import PRIME, copy_trace

pytestmark = [pytest.mark.real_traces, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, timeout: float, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"process exited early: {proc.stdout.read() if proc.stdout else ''}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"{url} did not answer in {timeout} s")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_served_deployment_runs_the_night(tmp_path):
    prefect = shutil.which("prefect", path=os.path.dirname(sys.executable)) or shutil.which("prefect")
    assert prefect, "the prefect command is installed with the package"
    port = _free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect-home"), "PREFECT_API_URL": api,
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_UI_ENABLED": "false"}
    drop, wh = tmp_path / "drop", tmp_path / "wh"
    copy_trace(PRIME, drop / "prime")

    server = subprocess.Popen([prefect, "server", "start", "--host", "127.0.0.1", "--port", str(port)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    served = None
    try:
        _wait_http(f"{api}/health", 180, server)
        served = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys; from synthtrace.pipelines.cli import main; sys.exit(main(sys.argv[1:]))",
                "serve",
                "--drop",
                str(drop),
                "--warehouse",
                str(wh),
                "--cron",
                "0 3 * * *",
                "--timezone",
                "Europe/Madrid",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        trigger = (
            "import sys, time\n"
            "from prefect.deployments import run_deployment\n"
            "from prefect.client.orchestration import get_client\n"
            "deadline = time.monotonic() + 120\n"
            "while True:\n"
            "    try:\n"
            "        with get_client(sync_client=True) as c:\n"
            "            dep = c.read_deployment_by_name('synthtrace-nightly/nightly')\n"
            "        break\n"
            "    except Exception:\n"
            "        if time.monotonic() > deadline: raise\n"
            "        time.sleep(1)\n"
            "assert dep.schedules and dep.schedules[0].schedule.cron == '0 3 * * *', dep.schedules\n"
            "assert dep.schedules[0].schedule.timezone == 'Europe/Madrid'\n"
            "run = run_deployment('synthtrace-nightly/nightly', timeout=240)\n"
            "print(run.state.type.value, run.state.message)\n"
            "sys.exit(0 if run.state.is_completed() else 1)\n")
        done = subprocess.run([sys.executable, "-c", trigger], env=env, capture_output=True, text=True, timeout=400)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "COMPLETED" in done.stdout and "1 runs ingested" in done.stdout
        assert query(Warehouse(wh), "SELECT count(*) FROM runs").column(0)[0].as_py() == 1
    finally:
        if served is not None:
            _stop(served)
        _stop(server)
