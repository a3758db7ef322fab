"""What a failed ``synthtrace sql`` query should have said: the names that do exist (issue 24 item 6).

DuckDB's binder names a missing column with candidates from every table in scope, and its catalog knows only the
views that have files: a view that is empty because nothing produced it yet (no merge, no analysis) reads as if
it did not exist. :func:`explain` turns both into one line naming what the warehouse holds and what to run.
"""
from __future__ import annotations

import os
import re

from synthtrace.tracelib.domain.counters import closest
from synthtrace.warehouse import engine
from synthtrace.warehouse.catalog import VIEW_FILES

#: views that hold one column per counter (bursts-like rows)
COUNTER_VIEWS = ("bursts", "merged_bursts", "mpi_calls")
#: the command that fills a view the warehouse has no file of yet
FILLED_BY = {
    "merged_bursts": "no experiment has been merged yet: run `synthtrace merge` (experiments: `synthtrace runs`)",
    "merge_quality": "no experiment has been merged yet: run `synthtrace merge` (experiments: `synthtrace runs`)",
    "merge_matches": "no experiment has been merged yet: run `synthtrace merge` (experiments: `synthtrace runs`)",
    "burst_metrics": "no experiment has been analysed yet: run `synthtrace archetypes`",
    "mpi_metrics": "no experiment has been analysed yet: run `synthtrace archetypes`",
    "phase_metrics": "no experiment has been analysed yet: run `synthtrace archetypes`",
    "archetypes": "no experiment has been analysed yet: run `synthtrace archetypes`",
    "models": "no model has been trained yet: run `synthtrace train`",
    "predictions": "nothing has been predicted yet: run `synthtrace predict`",
    "regressions": "no regression detection has run yet: run `synthtrace detect`",
    "uncore_samples": "no run holds uncore samples (Extrae's uncore readers)",
    "pop_metrics": "no POP table has been computed yet: run `synthtrace pop`",
    "pop_scaling": "no POP table has been computed yet: run `synthtrace pop`",
}
_MISSING_COLUMN = re.compile(r'Referenced column "?(.+?)"? not found', re.I)
_MISSING_TABLE = re.compile(r"Table with name (\S+) does not exist", re.I)
_NUMERIC = {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT",
            "UHUGEINT", "FLOAT", "DOUBLE"}


def explain(con: engine.DuckDBPyConnection, error: engine.Error, views: set[str],
            root: str | os.PathLike | None = None) -> str | None:
    """One line for ``error`` naming what exists, or None when DuckDB's own first line says it best. ``views``:
    the warehouse views the query names; ``root``: the warehouse (a view's top folder that is a link is named)."""
    text = str(error)
    if isinstance(error, engine.CatalogException) and (m := _MISSING_TABLE.search(text)):
        return _missing_view(con, m.group(1).strip('"').lower(), root)
    if isinstance(error, engine.BinderException) and (m := _MISSING_COLUMN.search(text)):
        return _missing_column(con, m.group(1), views)
    return None


def _existing_views(con: engine.DuckDBPyConnection) -> list[str]:
    names = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    return [v for v in VIEW_FILES if v in names]


def _columns(con: engine.DuckDBPyConnection, view: str) -> list[tuple[str, str]]:
    """(name, DuckDB type) of every column of ``view``."""
    return [(r[0], r[1]) for r in con.execute(f'DESCRIBE "{view}"').fetchall()]


def _missing_view(con: engine.DuckDBPyConnection, name: str, root: str | os.PathLike | None = None) -> str:
    if name in VIEW_FILES:
        from synthtrace.warehouse.stored import top_link_line

        top = VIEW_FILES[name].split("/")[0]
        if root is not None and (line := top_link_line(root, top)) is not None:  # attack 19 F12: not "no model
            return f"{name}: {line}"  # has been trained yet" when models/ is a link
        why = FILLED_BY.get(name, "nothing has been stored in it yet")
        return f"{name}: {why}"
    views = list(VIEW_FILES)
    hint = closest(name, views)
    mean = f"did you mean {hint[0]}? " if hint else ""
    return f"no view named {name}: {mean}the views are {', '.join(views)}"


def counter_columns_of(columns: list[tuple[str, str]]) -> list[str]:
    """The counter columns among a counter view's (name, DuckDB type) ``columns``, in table order: numeric ones
    that are no key, time, call or merge column (the rule of :func:`synthtrace.tracelib.schema.counter_columns`)."""
    from synthtrace.tracelib.schema import MPI_CALL_SCHEMA, NON_COUNTER_COLUMNS

    fixed = NON_COUNTER_COLUMNS | set(MPI_CALL_SCHEMA)
    return [c for c, kind in columns if c not in fixed and not c.startswith("_") and kind.upper() in _NUMERIC]


def _missing_column(con: engine.DuckDBPyConnection, column: str, views: set[str]) -> str:
    """The missing column, then per view the query reads: its counter columns (counter views) or its columns."""
    parts = []
    existing = set(_existing_views(con))
    read = [v for v in VIEW_FILES if v in views and v in existing]
    for view in sorted(read, key=lambda v: v not in COUNTER_VIEWS):  # counter views first
        cols = _columns(con, view)
        if view in COUNTER_VIEWS:
            counters = counter_columns_of(cols)
            parts.append(f"the counter columns of {view}: {', '.join(counters) if counters else '(none recorded)'}")
        else:
            parts.append(f"the columns of {view}: {', '.join(c for c, _ in cols)}")
    every = [c for view in existing if view in views for c, _ in _columns(con, view)]
    hint = closest(column, sorted(set(every)))
    mean = f" (did you mean {hint[0]}?)" if hint else ""
    quote = "; quote names with colons or dashes, as \"LONGEST_LAT_CACHE:MISS\"" if any(
        ":" in c or "-" in c for c in every) else ""
    where = "; ".join(parts) if parts else "the query reads no warehouse view"
    return f"no column {column}{mean}: {where}{quote}"
