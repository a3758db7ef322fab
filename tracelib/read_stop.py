"""Stopping reads and merges from another thread (attack 22 F6/F7): OTF2 and Paraver reads and a night's merge
take ``stop=`` / :func:`stoppable`. A Ctrl-C or SIGTERM reaches the main thread only, where it stops a read as a
KeyboardInterrupt (:func:`~synthtrace.tracelib.formats.otf2.library.callback_interrupts`); a worker thread reading
an archive (the nightly flow's) read on to its end meanwhile. :func:`stop_reads` tells every read running in the
process to stop; a read also stops when the ``stop`` event its caller gave is set. Either way the read raises
:class:`~synthtrace.tracelib.errors.ReadStopped` at its next location, local definitions reader or chunk of events;
the global definitions, which the ``otf2`` wheel reads in one call, are read to their end first."""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from synthtrace.tracelib.errors import ReadStopped

_running: set[threading.Event] = set()  # what stop_reads sets: one event per read running now
_lock = threading.RLock()  # stop_reads runs in a signal handler, maybe while its own thread holds it


def stop_reads() -> int:
    """Stop every read running in this process, in any thread (reads started later are not stopped); returns
    how many were told (count)."""
    with _lock:
        running = list(_running)
    for told in running:
        told.set()
    return len(running)


@contextlib.contextmanager
def stoppable(path: Path, stop: threading.Event | None) -> Iterator[Callable[[], None]]:
    """While a read of the archive at ``path`` runs: a check that raises ReadStopped once :func:`stop_reads` was
    called or ``stop`` (the caller's, None: none) is set."""
    told = threading.Event()

    def check() -> None:
        if told.is_set() or (stop is not None and stop.is_set()):
            raise ReadStopped(path)

    with _lock:
        _running.add(told)
    try:
        yield check
    finally:
        with _lock:
            _running.discard(told)
