"""Talking to the session's Prefect server from the processes a test starts.

A night run without ``PREFECT_API_URL`` starts Prefect's ephemeral server in its own process: about 18-25 s of
CPU on this project's 2-core machines, against 2-3 s for a night that talks to a running server. Tests that start
nights or a served deployment as processes point them at the server of the session's Prefect test harness
(``prefect_api`` in tests/conftest.py); the killed night of tests/test_nightly_flow.py keeps the ephemeral server,
as a user without a server meets it (its second night runs to the end on one), and so does .ci/run's demo.
"""
from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM the process group of ``proc``, SIGKILL after 20 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def server_env(home: Path, api: str) -> dict[str, str]:
    """The environment of a process that talks to the Prefect server at ``api`` (its own PREFECT_HOME)."""
    return {**os.environ, "PREFECT_HOME": str(home), "PREFECT_API_URL": api,
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_UI_ENABLED": "false", "DO_NOT_TRACK": "1"}
