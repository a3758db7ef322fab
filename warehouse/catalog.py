"""The DuckDB catalog: stable views over the warehouse's Parquet files (DESIGN §5).

Each reader gets its own in-memory DuckDB connection whose views scan the Parquet files with
``union_by_name`` (experiments differ in counters). Nothing holds a database lock, so the nightly writer
and any number of readers never block each other; since runs appear by directory rename, a query sees a run
whole or not at all.
"""
from __future__ import annotations

from pathlib import Path

import duckdb
import polars as pl

from synthtrace.tracelib.schema import BURST_SCHEMA, MPI_CALL_SCHEMA, RUN_SCHEMA
from synthtrace.warehouse.layout import Warehouse

#: view name -> file pattern below the warehouse root. Views of later stages appear once their files exist.
VIEW_FILES: dict[str, str] = {
    "runs": "runs/*/run.parquet",
    "bursts": "runs/*/bursts/*.parquet",
    "mpi_calls": "runs/*/mpi_calls.parquet",
    "uncore_samples": "runs/*/uncore/*.parquet",
    "merged_bursts": "experiments/*/merged_bursts.parquet",
    "merge_quality": "experiments/*/merge_quality.parquet",
    "merge_matches": "experiments/*/merge_matches.parquet",
    "burst_metrics": "experiments/*/burst_metrics.parquet",
    "mpi_metrics": "experiments/*/mpi_metrics.parquet",
    "phase_metrics": "experiments/*/phase_metrics.parquet",
    "archetypes": "experiments/*/archetypes.parquet",
    "models": "models/*/model.parquet",
    "predictions": "predictions/*/*.parquet",
    "regressions": "regressions/*.parquet",
}
#: views that exist (empty, typed) even before anything is ingested
EMPTY_SCHEMAS: dict[str, dict[str, pl.DataType]] = {"runs": RUN_SCHEMA, "bursts": BURST_SCHEMA, "mpi_calls": MPI_CALL_SCHEMA}


def _sql_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _empty_view_sql(schema: dict[str, pl.DataType]) -> str:
    empty = duckdb.from_arrow(pl.DataFrame(schema=schema).to_arrow())
    cols = ", ".join(f'CAST(NULL AS {t}) AS "{n}"' for n, t in zip(empty.columns, empty.types))
    return f"SELECT {cols} WHERE false"


def connect(root: str | Path) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with one view per warehouse table."""
    wh = Warehouse(root)
    con = duckdb.connect(":memory:", config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    for view, pattern in VIEW_FILES.items():
        if any(wh.root.glob(pattern)):
            source = f"read_parquet({_sql_literal(str(wh.root / pattern))}, union_by_name = true)"
            con.execute(f'CREATE VIEW "{view}" AS SELECT * FROM {source}')
        elif view in EMPTY_SCHEMAS:
            con.execute(f'CREATE VIEW "{view}" AS {_empty_view_sql(EMPTY_SCHEMAS[view])}')
    return con
