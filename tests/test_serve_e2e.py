"""End to end: a real Prefect server on 127.0.0.1 (the session's), the nightly deployment served on a schedule, one run
triggered."""
from __future__ import annotations

import subprocess
import sys
import time

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
                "--settle",  # [helper drop] the trace was copied just before: complete
                "0",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        # the run triggered from this process (the session's harness talks to the same server): one interpreter
        # start-up fewer than a trigger process of its own
        from prefect.client.orchestration import get_client
        from prefect.deployments import run_deployment

        deadline = time.monotonic() + 120
        while True:
            try:
                with get_client(sync_client=True) as client:
                    dep = client.read_deployment_by_name("synthtrace-nightly/nightly")
                break
            except Exception:
                assert served.poll() is None, served.stdout.read()
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
        assert dep.schedules and dep.schedules[0].schedule.cron == "0 3 * * *", dep.schedules
        assert dep.schedules[0].schedule.timezone == "Europe/Madrid"
        run = run_deployment("synthtrace-nightly/nightly", timeout=240)
        assert run.state.is_completed(), (run.state, served.stdout.read() if served.poll() is not None else "")
        assert "1 runs ingested" in run.state.message
        assert query(Warehouse(wh), "SELECT count(*) FROM runs").column(0)[0].as_py() == 1
    finally:
        if served is not None:
            stop(served)
