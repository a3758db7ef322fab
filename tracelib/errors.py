"""Exception types of synthtrace, defined once and caught once at the CLI edge.

Every error a user can cause derives from :class:`SynthtraceError`; the CLI turns it into one line
and an exit code (2 for bad input). Layers above tracelib subclass these, never ``Exception``.
"""
from __future__ import annotations

from pathlib import Path


class SynthtraceError(Exception):
    """Base of every error synthtrace reports to a user."""

    exit_code: int = 1


class BadInputError(SynthtraceError):
    """The user gave input that cannot be used (exit code 2)."""

    exit_code = 2


class TraceFormatError(BadInputError):
    """A trace file breaks its format: names the file, the 1-based line and the reason."""

    def __init__(self, path: str | Path, line: int | None, reason: str):
        self.path = str(path)
        self.line = line
        self.reason = reason
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {reason}")


class TraceUnreadableError(TraceFormatError):
    """A trace's file could not be read for a reason of the machine, not of its bytes (an I/O error, a stale NFS
    handle, a time-out, no memory): the trace may well be sound, so a night leaves it where it is."""


class TruncatedTraceError(TraceFormatError):
    """The trace ends mid-record (a killed job); ``--salvage`` keeps its complete records."""


class RecordsOutOfOrderError(TraceFormatError):
    """A thread's records are not in time order. Paraver sorts such a trace when it loads it; so does ingest
    (:meth:`~synthtrace.tracelib.formats.paraver.reader.ParaverTrace.time_sorted`)."""


class TraceChangedError(TraceFormatError):
    """The trace's files changed while they were read (a job still writing, a copy in progress): nothing stored."""


class OutputClosed(BaseException):
    """The reader of the command's output closed it (``synthtrace merge ... | head -1``, a pager quit): no error,
    the reader's choice. The command ends at once and quietly with :attr:`exit_code`, 128 + SIGPIPE, as a shell
    reports a program a closed pipe ended (``seq 1 1000000 | head -1``). A BaseException, so that no handler of a
    command's errors takes it for one (the CLI edge alone catches it)."""

    exit_code = 141


class MissingCompanionWarning(UserWarning):
    """A ``.pcf`` or ``.row`` file is missing; the trace is still usable."""


class ReadStopped(SynthtraceError):
    """A trace's read stopped because its caller asked, from another thread (a Ctrl-C or SIGTERM reaches the main
    thread only; a worker reading a trace is told through the reader, :func:`~synthtrace.tracelib.formats.otf2.
    stop_reads`). The trace is not at fault (no :class:`BadInputError`); nothing of it is stored. Exit code 130, a
    Ctrl-C's."""

    exit_code = 130

    def __init__(self, path: str | Path):
        self.path = str(path)
        super().__init__(f"{self.path}: read stopped (its caller asked)")
