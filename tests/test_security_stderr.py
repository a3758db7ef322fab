"""Issue 23, attack reruns 4 and 5: an ingest exited 2 with nothing on its stderr. Numba coloured its error
messages with colorama, whose ``init``/``deinit`` replace ``sys.stderr`` process-wide each time Numba builds a
message (saving the stream current at ``init``, putting it back at ``deinit``); it builds some when its modules are
imported, which the reader's kernel warm-up does in a background thread. A command that set its stream in between
(a caller capturing it, the next command of a long-lived process) had it put back to the old one, and its error
line went there."""
from __future__ import annotations

import subprocess
import sys

_SCRIPT = """
import sys, threading, types

replaced = []

class _Watched(types.ModuleType):  # every assignment of sys.stderr, and from which thread
    def __setattr__(self, name, value):
        if name == "stderr":
            replaced.append(threading.current_thread().name)
        super().__setattr__(name, value)

sys.__class__ = _Watched
import synthtrace.tracelib.jit  # what a command imports before any kernel runs


def warm_up():  # as the reader's warm-up: Numba builds error messages while its modules are imported
    from numba.core import errors
    errors.TypingError("Cannot mutate a literal list")

t = threading.Thread(target=warm_up, name="warm-up")
t.start()
t.join()
print(len(replaced))
"""


def test_numba_never_replaces_the_stderr_a_command_writes_its_error_to():
    out = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0"], "sys.stderr was replaced from the warm-up thread"
