"""Storage: Parquet layout, atomic commits, DuckDB catalog and views (DESIGN §5).

Parquet files are the source of truth; every run is one directory that appears whole (written to a staging
directory, then renamed) and can be removed whole. Readers open an in-memory DuckDB connection whose views
scan those files, so a writer never blocks a reader and a reader never sees half a run.
"""
from synthtrace.warehouse.layout import Warehouse

__all__ = ["Warehouse"]
