"""Read-only SQL over the warehouse: only SELECT (and EXPLAIN of one) reaches DuckDB."""
from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa

from synthtrace.warehouse.catalog import connect
from synthtrace.warehouse.errors import QueryError, ReadOnlyQueryError

ALLOWED = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}


def check_read_only(query: str) -> None:
    """Raise :class:`ReadOnlyQueryError` unless every statement of ``query`` only reads."""
    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as exc:
        raise QueryError(f"SQL does not parse: {str(exc).splitlines()[0]}") from None
    if not statements:
        raise ReadOnlyQueryError("empty query")
    for st in statements:
        if st.type not in ALLOWED:
            kind = st.type.name.replace("_", " ")
            raise ReadOnlyQueryError(f"refused: {kind} statements are not allowed; synthtrace sql is read-only (SELECT only)")


def query(root: str | Path, sql: str) -> pa.Table:
    """Run a read-only query against the warehouse views; returns an Arrow table."""
    check_read_only(sql)
    con = connect(root)
    try:
        return con.sql(sql).to_arrow_table()
    except duckdb.Error as exc:
        raise QueryError(f"query failed: {str(exc).splitlines()[0]}") from None
    finally:
        con.close()
