"""Errors of the storage layer."""
from synthtrace.tracelib.errors import BadInputError, SynthtraceError


class WarehouseError(BadInputError):
    """The warehouse folder cannot be used (not a warehouse, not writable, ...)."""


class DamagedPartError(WarehouseError):
    """A stored Parquet file of the warehouse cannot be read (damaged, cut short, empty): names the file; raised by
    :mod:`synthtrace.warehouse.parts` only."""


class ForeignFolderError(WarehouseError):
    """A writer's folder (``experiments/<name>``, ``runs/<id>``, ...) is there but no commit of the warehouse wrote
    it (a user's copy: :func:`~synthtrace.warehouse.stored.judge`): nothing is written into it, nor is it replaced."""


class QueryError(BadInputError):
    """A query given to ``synthtrace sql`` does not parse or fails."""


class ReadOnlyQueryError(QueryError):
    """A query given to ``synthtrace sql`` would modify the warehouse or the machine."""


class UnknownExperimentError(BadInputError):
    """An experiment, run or model named by the user is not in the warehouse."""


class RunsChangedError(SynthtraceError):
    """Runs an experiment's merge or analysis was computed from left it (removed or moved) before the result was
    committed; nothing was written (exit code 1: run the command again)."""


class NightRunningError(SynthtraceError):
    """Another night holds the warehouse's night lock (:mod:`synthtrace.warehouse.night_lock`): this one did nothing
    and ends with exit code 75 (EX_TEMPFAIL of sysexits.h: a temporary failure, to be tried again later; what cron
    and batch wrappers read as "not now"), not 1 (the night failed) nor 0 (the night ran)."""

    exit_code = 75


class CommitsClosedError(SynthtraceError):
    """A commit refused because this process is stopping (a night stopped at once,
    :func:`~synthtrace.warehouse.layout.close_commits`): its stage is removed, the warehouse left as it was."""
