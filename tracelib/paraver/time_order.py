"""Putting a Paraver body in time order, as Paraver's loader does for a trace whose records are not.

Extrae's merger writes records sorted by time, but traces edited by hand or by other converters may not be, and
Paraver (paraver-kernel's v1 body reader declares itself unordered and sorts on load) reads them all the same.
"""
from __future__ import annotations

from pathlib import Path

import polars as pl

#: the 0-based ``:``-field holding a record's time (a state's begin, an event's time, a send's logical time)
TIME_FIELD = 5


def sort_body_by_time(body: Path, out: Path) -> Path:
    """Write the record lines of ``body`` (a ``.prv`` body, no header) to ``out`` in time order and return
    ``out``. The sort is stable, so records of one time keep their order; a line whose time is not a number
    (a broken record) sorts first, where the reader then reports it. Out of core: Polars' streaming engine
    sorts bodies larger than memory."""
    (pl.scan_csv(body, has_header=False, separator="\x1f", quote_char=None, schema={"line": pl.String})
     .with_columns(pl.col("line").str.split(":").list.get(TIME_FIELD, null_on_oob=True)
                   .cast(pl.Int64, strict=False).alias("time"))
     .sort("time", maintain_order=True)
     .select("line")
     .sink_csv(out, include_header=False, quote_style="never"))
    return out
