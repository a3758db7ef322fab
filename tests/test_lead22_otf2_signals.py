"""A Ctrl-C or SIGTERM that comes while libotf2 reads events reaches the command (attack 21 F4, its second part).

The OTF2 reader's events arrive through ctypes callbacks: the signal handler's KeyboardInterrupt was raised inside
one, where ctypes can only print "Exception ignored on calling ctypes callback function" and return, so the read went
on (a SIGTERM from ``timeout`` and a later Ctrl-C were both lost; the process ran until killed -9). The signal is
sent here from inside the reader's Enter callback, as a real one arrives: between two events."""
from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

from testing.traces import TRACES

PING = TRACES / "otf2" / "ping-pong-otf2" / "traces.otf2"


def ingest_signalled(patch: str, tmp_path) -> subprocess.CompletedProcess:
    """``synthtrace ingest PING`` in a fresh interpreter that runs ``patch`` (Python source that makes the reader
    send itself a signal) first."""
    script = textwrap.dedent(patch) + textwrap.dedent("""
        from synthtrace.pipelines.cli import main
        sys.exit(main(sys.argv[1:]))
    """)
    return subprocess.run([sys.executable, "-c", script, "ingest", str(PING), "-w", str(tmp_path / "wh")],
                          capture_output=True, text=True, timeout=300, check=False)


def assert_stopped(p: subprocess.CompletedProcess, tmp_path, code: int, line: str) -> None:
    """The ingest by :func:`ingest_signalled` ended with ``code`` and the one ``line``, nothing stored."""
    assert p.returncode == code and p.stderr.splitlines() == [line], (p.returncode, p.stderr)
    assert not (tmp_path / "wh" / "runs").exists() or not any((tmp_path / "wh" / "runs").iterdir())


#: (signal, exit code, the one line on stderr) of a command stopped before it stored anything
STOPPED = [(signal.SIGINT, 130, "aborted"), (signal.SIGTERM, 143, "terminated (SIGTERM): nothing was stored")]


@pytest.mark.skipif(not PING.exists(), reason="needs ../shared/traces")
@pytest.mark.parametrize(("signum", "code", "line"), STOPPED)
def test_a_signal_inside_the_otf2_event_callbacks_stops_the_ingest(tmp_path, signum, code, line):
    """The reader gets ``signum`` at its 5th region event."""
    p = ingest_signalled(f"""
        import os, sys
        from synthtrace.tracelib.formats.otf2 import events, library
        seen = [0]
        def region(fn):
            def signalled(*args):
                seen[0] += 1
                if seen[0] == 5:
                    os.kill(os.getpid(), {int(signum)})
                return fn(*args)
            return library._FP_REGION(signalled)
        events._FP_REGION = region
    """, tmp_path)
    assert_stopped(p, tmp_path, code, line)
