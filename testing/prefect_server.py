"""One real Prefect server on 127.0.0.1 for tests that run nights as separate processes.

A night run without ``PREFECT_API_URL`` starts Prefect's ephemeral server in its own process: about 18-25 s of
CPU on this project's 2-core machines, against 2-3 s for a night that talks to a running server. Tests that start
many nights (the killed-night tests run three each) share one server; the README block and the demo keep the
ephemeral server, as a user meets it.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout_s: float, proc: subprocess.Popen) -> None:
    """Wait until ``url`` answers 200; AssertionError when ``proc`` exits or ``timeout_s`` passes first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"process exited early: {proc.stdout.read() if proc.stdout else ''}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"{url} did not answer in {timeout_s} s")


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
    return {**os.environ, "PREFECT_HOME": str(home), "PREFECT_API_URL": api,
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_UI_ENABLED": "false", "DO_NOT_TRACK": "1"}


@contextmanager
def prefect_server(home: Path, startup_timeout_s: float = 300) -> Iterator[str]:
    """Run ``prefect server start`` on a free port of 127.0.0.1 (its database under ``home``); yields its API
    URL and stops it on exit."""
    prefect = shutil.which("prefect", path=os.path.dirname(sys.executable)) or shutil.which("prefect")
    assert prefect, "the prefect command is installed with the package"
    api = f"http://127.0.0.1:{free_port()}/api"
    port = api.rsplit(":", 1)[1].split("/")[0]
    server = subprocess.Popen([prefect, "server", "start", "--host", "127.0.0.1", "--port", port],
                              env=server_env(home, api), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, start_new_session=True)
    try:
        wait_http(f"{api}/health", startup_timeout_s, server)
        yield api
    finally:
        stop(server)
