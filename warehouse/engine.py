"""DuckDB's engine without its Python layer: connections, statements, the tokenizer and the exceptions.

The ``duckdb`` package is the ``_duckdb`` extension module plus a pure-Python layer (the relation API of
``con.sql(...)``, a version lookup through ``importlib.metadata``) that costs 0.12-0.15 s to import, a third of an
interactive ``synthtrace sql`` or ``runs`` (issue 16: start in <= 0.4 s). What those commands need, a connection
that executes, fetches rows and says its column names, is the extension's own: the names below *are* the
``duckdb`` package's objects (``duckdb.connect is _duckdb.connect``), so mixing them with code that imports
``duckdb`` is safe. Where DuckDB names its extension otherwise, the public package serves.

The relation API (``con.sql``, ``to_arrow_table``) appears on these connections once ``duckdb`` is imported:
:func:`relation_api` does that, for the paths that import pyarrow anyway.
"""
from __future__ import annotations

from types import ModuleType

try:
    import _duckdb as _engine
except ImportError:  # pragma: no cover - a DuckDB without the separate extension module
    import duckdb as _engine

DuckDBPyConnection = _engine.DuckDBPyConnection
StatementType = _engine.StatementType
connect = _engine.connect
extract_statements = _engine.extract_statements
token_type = _engine.token_type
tokenize = _engine.tokenize

Error = _engine.Error
BinderException = _engine.BinderException
CatalogException = _engine.CatalogException
IOException = _engine.IOException
InterruptException = _engine.InterruptException
PermissionException = _engine.PermissionException
OutOfMemoryException = _engine.OutOfMemoryException
ParserException = _engine.ParserException


def relation_api() -> ModuleType:
    """The whole ``duckdb`` package (``con.sql``, relations, ``from_arrow``), imported on first use."""
    import duckdb

    return duckdb
