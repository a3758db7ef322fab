"""Errors of the storage layer."""
from synthtrace.tracelib.errors import BadInputError


class WarehouseError(BadInputError):
    """The warehouse folder cannot be used (not a warehouse, not writable, ...)."""


class QueryError(BadInputError):
    """A query given to ``synthtrace sql`` does not parse or fails."""


class ReadOnlyQueryError(QueryError):
    """A query given to ``synthtrace sql`` would modify the warehouse or the machine."""


class UnknownExperimentError(BadInputError):
    """An experiment, run or model named by the user is not in the warehouse."""
