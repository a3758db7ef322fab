"""Attack 22 F6: Ctrl-C of `nightly` while a worker thread of the night reads an OTF2 archive. Signals reach the main
thread only: the night ended the process under the worker, which went on writing (its stage left in the warehouse's
``.staging``), and the one "aborted" line went into the stream the worker's OTF2 reader had put in place of
``sys.stderr`` (exit 130, nothing said). The night now asks its jobs to stop, waits for them to remove what they were
writing, and says once how it ended on the real standard error."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from testing.prefect_server import server_env
from testing.traces import copy_archive

pytestmark = [pytest.mark.real_traces, pytest.mark.slow]  # nights with Prefect

#: Python run in the night's process before the CLI: ``signalled`` sends SIGINT from a thread other than the main one
#: the first time the night's worker calls it (discovery, in the main thread, reads the archive too), then returns
_SIGNAL_FROM_WORKER = """
    import os, signal, threading
    sent = []
    def signalled():
        if threading.current_thread() is not threading.main_thread() and not sent:
            sent.append(1)
            os.kill(os.getpid(), signal.SIGINT)
"""

#: where the worker is when the signal comes: inside the archive's global definitions (the wheel's callback that
#: constructs a Region, while the reader holds sys.stderr), or reading a location's events (its run staged)
_HOOKS = {
    "definitions": """
        from otf2 import definitions
        construct = definitions.Region._construct
        def hooked(cls, *args):
            signalled()
            return construct(*args)
        definitions.Region._construct = classmethod(hooked)
    """,
    "events": """
        from synthtrace.tracelib.formats.otf2 import trace
        read = trace._read_local_events
        def hooked(*args):
            signalled()
            return read(*args)
        trace._read_local_events = hooked
    """,
}


def _night_interrupted(where: str, drop: Path, wh: Path, env: dict) -> subprocess.CompletedProcess:
    script = "\n".join(textwrap.dedent(part) for part in (_SIGNAL_FROM_WORKER, _HOOKS[where], """
        import sys
        from synthtrace.pipelines.cli import main
        sys.exit(main(sys.argv[1:]))
    """))
    return subprocess.run([sys.executable, "-c", script, "nightly", "--drop", str(drop), "-w", str(wh), "--settle",
                           "0"], capture_output=True, text=True, timeout=600, env=env, check=False)


@pytest.mark.parametrize("where", ["definitions", "events"])
def test_ctrl_c_while_a_worker_reads_an_otf2_archive_is_said_once_and_leaves_no_stage(tmp_path, prefect_api, where):
    drop, wh = tmp_path / "drop", tmp_path / "wh"
    copy_archive("ping-pong-otf2", drop / "pp")
    p = _night_interrupted(where, drop, wh, server_env(tmp_path / "prefect", prefect_api))
    assert p.returncode == 130, (p.returncode, p.stderr[-3000:])
    said = [line for line in p.stderr.splitlines() if line.startswith("aborted")]
    assert said == ["aborted; the next night finishes what this one left"], p.stderr[-3000:]
    assert "Traceback" not in p.stderr and "Crash detected" not in p.stderr, p.stderr[-3000:]
    assert not any((wh / "runs").iterdir())  # the read was stopped: nothing stored
    assert list((wh / ".staging").iterdir()) == []  # and what the night was writing went with it
    assert (drop / "pp" / "traces.otf2").is_file() and not (drop / ".quarantine").exists()  # the trace is sound
