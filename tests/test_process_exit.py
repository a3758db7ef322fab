"""A command that finished exits with its own code, whatever its background threads were doing (attack 7 A5).

Python's finalisation ends a daemon thread where it next takes the GIL; one inside LLVM (the reader's Numba
warm-up) is unwound through C++ ``catch (...)`` and glibc aborts: exit 134 after an ingest had committed its run,
about one short ingest in six on a loaded machine. Every thread synthtrace starts that runs native code is
therefore joined before the interpreter finalises: none may be a daemon.
"""
from __future__ import annotations

import threading

import pytest


@pytest.mark.real_traces
def test_no_thread_left_by_an_ingest_is_a_daemon(tmp_path, run_cli):
    from synthtrace.tracelib.formats.paraver import reader

    code, _, err = run_cli("ingest", "../shared/traces/paraver/jacobi-2d-imper_v0.prv", "-w", tmp_path / "wh")
    assert code == 0, err
    started = [reader._warm_up_thread, *(t for t in threading.enumerate() if t.name.startswith("synthtrace-"))]
    assert started[0] is not None  # the read started the warm-up
    assert [t.name for t in started if t is not None and t.daemon] == []
