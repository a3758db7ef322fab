"""Putting a Paraver body in time order, as Paraver's loader does for a trace whose records are not.

Extrae's merger writes records sorted by time, but traces edited by hand or by other converters may not be, and
Paraver (paraver-kernel's v1 body reader declares itself unordered and sorts on load) reads them all the same.
"""
from __future__ import annotations

from pathlib import Path

import polars as pl

#: the 0-based ``:``-field holding a record's time (a state's begin, an event's time, a send's logical time)
TIME_FIELD = 5


class TimeSortedBody:
    """The record lines of a ``.prv`` body (no header) in time order, written to ``folder``: ``path`` is the sorted
    body and :meth:`original_line` maps its line numbers back to the body's. The sort is stable (records of one
    time keep their order) and out of core (Polars' streaming engine); a line whose time is not a number (a
    broken record) sorts first, where the reader then reports it. A last line without its newline (a trace cut
    mid-record) stays last, still without it, so that the reader sees the truncation as it is."""

    def __init__(self, body: Path, folder: Path):
        self.path = folder / "sorted.prv"
        self._order = folder / "order.parquet"
        tail = _cut_partial_last_line(body)
        (pl.scan_csv(body, has_header=False, separator="\x1f", quote_char=None, schema={"line": pl.String}, glob=False)
         .with_row_index("body_line")
         .with_columns(pl.col("line").str.split(":").list.get(TIME_FIELD, null_on_oob=True)
                       .cast(pl.Int64, strict=False).alias("time"))
         .sort("time", maintain_order=True)
         .select("line", "body_line")
         .sink_parquet(self._order))
        (pl.scan_parquet(self._order, glob=False).select("line")
         .sink_csv(self.path, include_header=False, quote_style="never"))
        if tail:
            with self.path.open("ab") as fh:
                fh.write(tail)

    def original_line(self, sorted_line: int) -> int:
        """The 0-based line of the body that stands at 0-based line ``sorted_line`` of the sorted body."""
        rows = pl.scan_parquet(self._order, glob=False).slice(sorted_line, 1).select("body_line").collect()
        return int(rows.item()) if rows.height else sorted_line


def _cut_partial_last_line(body: Path) -> bytes:
    """Remove and return the bytes after the last newline of ``body`` (empty when it ends with one)."""
    size = body.stat().st_size
    with body.open("r+b") as fh:
        end, step = size, 1 << 16
        while end > 0:
            start = max(0, end - step)
            fh.seek(start)
            cut = fh.read(end - start).rfind(b"\n")
            if cut >= 0:
                keep = start + cut + 1
                break
            end = start
        else:
            keep = 0
        fh.seek(keep)
        tail = fh.read()
        fh.truncate(keep)
    return tail
