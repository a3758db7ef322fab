"""A Ctrl-C or SIGTERM that comes while an OTF2 archive's global definitions are read stops the command (attack 22
F5): "aborted", exit 130 (143), never "not a readable OTF2 archive (KeyboardInterrupt)", exit 2 (a sound trace
called unreadable, and the nightly flow would set it aside as a bad trace).

The otf2 wheel reads the global definitions through its own ctypes callbacks, which catch every exception with a
bare ``except:`` and print its traceback; the signal is sent here from inside one of them (the wheel's constructor
of a Region definition, called by its callback), as a real one arrives: between two definitions."""
from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

from testing.traces import TRACES

PING = TRACES / "otf2" / "ping-pong-otf2" / "traces.otf2"


def _ingest_signalled_at_region(signum: int, tmp_path) -> subprocess.CompletedProcess:
    """``synthtrace ingest PING`` in a fresh interpreter that gets ``signum`` at its 3rd global Region definition."""
    script = textwrap.dedent(f"""
        import os, sys
        from otf2 import definitions
        construct, seen = definitions.Region._construct, [0]
        def signalled(cls, *args):
            seen[0] += 1
            if seen[0] == 3:
                os.kill(os.getpid(), {int(signum)})
            return construct(*args)
        definitions.Region._construct = classmethod(signalled)
        from synthtrace.pipelines.cli import main
        sys.exit(main(sys.argv[1:]))
    """)
    return subprocess.run([sys.executable, "-c", script, "ingest", str(PING), "-w", str(tmp_path / "wh")],
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.skipif(not PING.exists(), reason="needs ../shared/traces")
@pytest.mark.parametrize(("signum", "code", "line"), [
    (signal.SIGINT, 130, "aborted"),
    (signal.SIGTERM, 143, "terminated (SIGTERM): nothing was stored"),
])
def test_a_signal_inside_the_global_definitions_stops_the_ingest(tmp_path, signum, code, line):
    p = _ingest_signalled_at_region(signum, tmp_path)
    assert p.returncode == code and p.stderr.splitlines() == [line], (p.returncode, p.stderr)
    assert not (tmp_path / "wh" / "runs").exists() or not any((tmp_path / "wh" / "runs").iterdir())


@pytest.mark.skipif(not PING.exists(), reason="needs ../shared/traces")
def test_an_interrupt_the_wheel_caught_reaches_the_caller(monkeypatch):
    """In process: the KeyboardInterrupt the signal handler raises inside a definition callback (the SIGTERM
    handler's, named after its signal) is the one the opening raises, not a TraceFormatError; the wheel's printed
    traceback reaches no terminal."""
    from otf2 import definitions

    from synthtrace.tracelib.formats.otf2.trace import Otf2Trace

    def interrupted(cls, *args):
        raise KeyboardInterrupt("SIGTERM")

    monkeypatch.setattr(definitions.Region, "_construct", classmethod(interrupted))
    with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
        Otf2Trace(PING)
