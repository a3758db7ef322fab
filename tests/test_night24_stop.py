"""A night's Ctrl-C (attack 23 F11, F7). F11: a night stopped at once wrote its "aborted after it stored 2 changes"
line, then a worker thread's ingest committed a third run while the server was being stopped. F7: a Ctrl-C while
the ephemeral Prefect server started (file descriptor 2 was the server's pipe) ended the process with exit 130 and
nothing said. Once the stop begins no commit lands, and the one line reaches the stderr the night began with."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from testing.prefect_server import server_env
from testing.traces import copy_archive

pytestmark = [pytest.mark.real_traces, pytest.mark.slow]  # nights as processes


#: the one line of a night stopped before it stored anything
ABORTED = "aborted; the next night finishes what this one left"


def _night(hook: str, tmp_path: Path, env: dict) -> tuple[subprocess.CompletedProcess, Path]:
    """``nightly`` over a drop holding the real ping-pong archive, into the warehouse it returns, in a process that
    runs ``hook`` (Python) before the CLI."""
    drop, wh = tmp_path / "drop", tmp_path / "wh"
    copy_archive("ping-pong-otf2", drop / "pp")
    script = "\n".join(textwrap.dedent(part) for part in (hook, """
        import sys
        from synthtrace.pipelines.cli import main
        sys.exit(main(sys.argv[1:]))
    """))
    return subprocess.run([sys.executable, "-c", script, "nightly", "--drop", str(drop), "-w", str(wh), "--settle",
                           "0"], capture_output=True, text=True, timeout=600, env=env, check=False), wh


#: the first commit of a worker thread (the ingest's run) sends SIGINT, then goes on once the stop has begun (the
#: signal's handler set ``interrupts.received`` in the main thread): a commit racing the stop, in a fixed order
_COMMIT_AFTER_THE_STOP_BEGAN = """
    import os, signal, threading
    from synthtrace.pipelines import interrupts
    from synthtrace.warehouse.layout import Warehouse
    commit = Warehouse._commit
    begun = threading.Event()
    def hooked(self, *args, **kwargs):
        if threading.current_thread() is not threading.main_thread() and not begun.is_set():
            begun.set()
            os.kill(os.getpid(), signal.SIGINT)
            while interrupts.received is None:
                begun.wait(0.01)
        return commit(self, *args, **kwargs)
    Warehouse._commit = hooked
"""


def test_a_commit_racing_a_night_s_stop_is_refused_and_the_line_says_what_is_stored(tmp_path, prefect_api):
    p, wh = _night(_COMMIT_AFTER_THE_STOP_BEGAN, tmp_path, server_env(tmp_path / "prefect", prefect_api))
    said = [line for line in p.stderr.splitlines() if line.startswith("aborted")]
    assert (p.returncode, said) == (130, [ABORTED]), p.stderr[-3000:]
    assert not any((wh / "runs").iterdir())  # the line said nothing was stored: nothing was
    assert list((wh / ".staging").iterdir()) == []  # the refused commit's stage went with it
    assert "Traceback" not in p.stderr, p.stderr[-3000:]


#: SIGINT in the main thread once the ephemeral server's process is started, before it answers (file descriptor 2 is
#: the pipe that forwards the server's stderr); the forwarding thread is slower than the stop (a loaded machine: it
#: forwards nothing before the server is being stopped, when what comes goes to the server's log)
_STOP_AS_THE_SERVER_STARTS = """
    import os, signal, threading
    from prefect.server.api.server import SubprocessASGIServer
    from synthtrace.pipelines.nightly import _ServerStderr
    forward = _ServerStderr._forward
    def late(self, read, own):
        while not self.stopping:
            threading.Event().wait(0.01)
        forward(self, read, own)
    _ServerStderr._forward = late
    run = SubprocessASGIServer._run_uvicorn_command
    def started(self):
        self.server_process = run(self)
        os.kill(os.getpid(), signal.SIGINT)
        return self.server_process
    SubprocessASGIServer._run_uvicorn_command = started
"""


def test_ctrl_c_while_the_night_s_server_starts_is_said_in_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update({"PREFECT_HOME": str(tmp_path / "prefect"), "PREFECT_SERVER_EPHEMERAL_ENABLED": "true"})
    p, wh = _night(_STOP_AS_THE_SERVER_STARTS, tmp_path, env)
    assert (p.returncode, p.stderr.splitlines()) == (130, [ABORTED]), p.stderr[-3000:]
    assert not any((wh / "runs").iterdir())
