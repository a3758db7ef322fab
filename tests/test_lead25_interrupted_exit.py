"""bench25 H1: a Ctrl-C of `synthtrace ingest` could leave the process hanging for ever after its "aborted" line.

The KeyboardInterrupt can reach the main thread while it holds Numba's global compiler lock (a read compiling or
loading a kernel), and the lock is never released; the Paraver reader's warm-up thread (not a daemon: attack 7 A5)
then waits on it for ever, and so did the interpreter's exit. The console script's end
(:func:`synthtrace.pipelines.interrupts.end_process`) no longer waits for a thread whose work nothing stores.
"""
from __future__ import annotations

import subprocess
import sys

CHILD = """
from numba.core.compiler_lock import global_compiler_lock
from synthtrace.pipelines.interrupts import end_process
from synthtrace.tracelib.formats.paraver.reader import start_warm_up
global_compiler_lock.acquire()  # as a KeyboardInterrupt inside a compile leaves it
start_warm_up()
print("aborted", flush=True)
end_process(130)
"""


def test_an_aborted_command_ends_though_the_warm_up_waits_on_a_lock_it_will_never_get():
    try:
        done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired as exc:  # a hang guard, not a timing assertion: the child never ends
        raise AssertionError("the process did not end: the exit waited for the warm-up thread") from exc
    assert done.returncode == 130, done.stderr
    assert done.stdout == "aborted\n"
