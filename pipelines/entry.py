"""The console script's entry point (``[project.scripts]`` in pyproject.toml): the first of the program's own code
that runs. Importing it defers Ctrl-C: a SIGINT from then on is only noted, until :func:`synthtrace.pipelines.cli.main`
has entered the block that says "aborted" and exits 130; the command line's own modules are imported after that.
A Ctrl-C in the first second (the modules' imports, the address-space set-up before the guard) ended in a
KeyboardInterrupt traceback and a death by the signal (bench25 M1). Only the console script imports this module:
a library user's or a test's Ctrl-C is left alone. Imports nothing but :mod:`signal`."""
from __future__ import annotations

import signal
from types import FrameType

#: the SIGINTs received before the command line's guard took over (their numbers, in order)
deferred: list[int] = []


def _note(signum: int, frame: FrameType | None) -> None:
    deferred.append(signum)


signal.signal(signal.SIGINT, _note)


def main() -> int:
    """Run the command line (its exit code), a Ctrl-C since this module's import said as one in the command; the
    process's malloc arenas bounded first (:func:`~synthtrace.pipelines.memory_budget.bound_heap_arenas`)."""
    from synthtrace.pipelines.memory_budget import bound_heap_arenas

    bound_heap_arenas()  # before any thread allocates: glibc fixes its arena limit at the first thread's arena
    from synthtrace.pipelines.cli import main as command_line

    return command_line(deferred=deferred)
