"""A Ctrl-C or SIGTERM that comes while an OTF2 archive's global definitions are read stops the command (attack 22
F5): "aborted", exit 130 (143), never "not a readable OTF2 archive (KeyboardInterrupt)", exit 2 (a sound trace
called unreadable, and the nightly flow would set it aside as a bad trace).

The otf2 wheel reads the global definitions through its own ctypes callbacks, which catch every exception with a
bare ``except:`` and print its traceback; the signal is sent here from inside one of them (the wheel's constructor
of a Region definition, called by its callback), as a real one arrives: between two definitions."""
from __future__ import annotations

import pytest

from tests.test_lead22_otf2_signals import PING, STOPPED, assert_stopped, ingest_signalled


@pytest.mark.skipif(not PING.exists(), reason="needs ../shared/traces")
@pytest.mark.parametrize(("signum", "code", "line"), STOPPED)
def test_a_signal_inside_the_global_definitions_stops_the_ingest(tmp_path, signum, code, line):
    """The reader gets ``signum`` at its 3rd global Region definition."""
    p = ingest_signalled(f"""
        import os, sys
        from otf2 import definitions
        construct, seen = definitions.Region._construct, [0]
        def signalled(cls, *args):
            seen[0] += 1
            if seen[0] == 3:
                os.kill(os.getpid(), {int(signum)})
            return construct(*args)
        definitions.Region._construct = classmethod(signalled)
    """, tmp_path)
    assert_stopped(p, tmp_path, code, line)


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
