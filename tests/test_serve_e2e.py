"""End to end: a real Prefect server on 127.0.0.1 (the session's), the nightly deployment served on a schedule, one run
triggered."""
from __future__ import annotations

import subprocess
import sys

import pytest

from synthtrace.warehouse import Warehouse
from synthtrace.warehouse.sql import query
from testing.prefect_server import server_env, stop
from testing.traces import PRIME, copy_trace

pytestmark = [pytest.mark.real_traces, pytest.mark.slow]


def test_served_deployment_runs_the_night(tmp_path, prefect_api):
    env = server_env(tmp_path / "prefect-home", prefect_api)
    drop, wh = tmp_path / "drop", tmp_path / "wh"
    copy_trace(PRIME, drop / "prime")
    served = None
    try:
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
            stop(served)
