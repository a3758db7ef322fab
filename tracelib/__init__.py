"""Traces: formats (Paraver, OTF2), bursts, alignment, merge, counter catalogue, metrics.

tracelib knows nothing of DuckDB or Prefect: it reads and writes files and returns Polars frames.
"""
