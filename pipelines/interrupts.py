"""How a command stopped by a signal ends: Ctrl-C (SIGINT) or SIGTERM (``kill``, ``timeout``, a batch system's
``scancel`` or time limit, which sends SIGKILL after a grace period, typically 30 s).

Both stop the command where it is, as a KeyboardInterrupt: what it was writing (a staging folder, a file beside its
output) is removed on the way out, what it committed before stays whole (a swap is one rename). One line on stderr
says which: ``aborted`` when nothing was stored, else what was (a ``train`` stopped while it prints its table has
registered its model). The exit code is 128 + the signal (130, 143), as a shell reports a command it stopped.

A signal that comes once the command has finished is said too (:func:`end_process`): the console script's
process ends right after its exit handlers, without the interpreter's teardown (0.6-1 s of garbage collection
after a ``train``, during which a Ctrl-C was lost and the process exited 0 saying nothing).

Imports nothing heavy: the CLI arms it before its own imports (a Ctrl-C while they load is "aborted" too).
"""
from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType

#: the signal that stopped the command (None: none yet; a KeyboardInterrupt raised by Python is SIGINT)
received: int | None = None
#: how many commits of this process came before the command (an in-process caller may run several)
_before = 0


def reset() -> None:
    """Forget the previous command's stop and count what is committed from now on (an in-process caller runs
    several commands: a Ctrl-C before :func:`arm` must not say the previous one's commits, review26 F4)."""
    global received, _before
    received, _before = None, len(_all_committed())


def arm() -> Callable[[], None]:
    """Make SIGTERM stop the command as Ctrl-C does, and count what is committed from now on (before the command
    runs); returns what puts the SIGTERM handler back (an in-process caller keeps its own). Outside the main thread
    (where no handler can be set) only the counting."""
    reset()
    try:
        previous = signal.signal(signal.SIGTERM, _stop)
    except ValueError:
        return lambda: None
    return lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def _stop(signum: int, frame: FrameType | None) -> None:
    global received
    received = signum
    raise KeyboardInterrupt(signal.Signals(signum).name)


def exit_code() -> int:
    """The exit code of a command stopped by :data:`received` (Ctrl-C when no handler saw one): 128 + its number."""
    return 128 + (received or signal.SIGINT)


def stopped_line() -> str:
    """The one line that says how the stopped command ended: what it had committed (whole, kept), or "aborted"."""
    how = "terminated (SIGTERM)" if received == signal.SIGTERM else "aborted"
    done = committed()
    if not done:
        return f"{how}: nothing was stored" if received == signal.SIGTERM else how
    return f"{how} after it stored {stored_what(done)}; what it stored is whole and stays"


def stored_what(done: list[Path]) -> str:
    """What a line says of the commits ``done`` (in order, at least one): the one, or how many and the last."""
    return f"{done[-1]}" if len(done) == 1 else f"{len(done)} changes (the last {done[-1]})"

def committed() -> list[Path]:
    """What the command committed to a warehouse (runs, experiment files, models, removals), in order."""
    return _all_committed()[_before:]


def _all_committed() -> list[Path]:
    """What this process committed so far, read without importing the warehouse (a process that never loaded it
    stored nothing)."""
    layout = sys.modules.get("synthtrace.warehouse.layout")
    return list(getattr(layout, "COMMITTED", ()))


def end_process(code: int) -> None:
    """End the console script's process with ``code`` once the command has returned: its exit handlers run (the
    ephemeral Prefect server stopped, logs flushed), its output is flushed, and the process exits without the
    interpreter's teardown, so that a signal is never lost there: one that comes meanwhile is said in one line and
    is the exit code (128 + it). Returns (the interpreter ends as usual) while a thread other than the main one
    and not a daemon runs: its work must finish first, unless nothing it does is stored (the kernels' warm-up:
    :data:`~synthtrace.tracelib.jit.DISPOSABLE_THREADS`)."""
    from synthtrace.tracelib.jit import DISPOSABLE_THREADS

    if any(t.is_alive() and not t.daemon and t is not threading.main_thread() and t not in DISPOSABLE_THREADS
           for t in threading.enumerate()):
        return
    late: list[int] = []
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, lambda signum, frame: late.append(signum))
    atexit._run_exitfuncs()
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})  # from here on: the exit is said
    if late:
        with contextlib.suppress(Exception):
            sys.stderr.write(f"interrupted ({signal.Signals(late[0]).name}) after the command finished; what it "
                             "printed and stored is whole\n")
        code = 128 + late[0]
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    os._exit(code)
