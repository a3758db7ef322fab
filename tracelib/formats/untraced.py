"""Marks the bursts a thread's recording was switched off after (:data:`~synthtrace.tracelib.schema.UNTRACED_AFTER`).

A reader hands over the times it saw a thread's recording switched off (Extrae's event 40000012 value 0, Score-P's
Enter of the MEASUREMENT OFF region) as it reads them, and every bursts part it yields goes through
:meth:`UntracedMarks.marked`: a burst that ends at such a time ends at the gap, not at a call or a flush.
"""
from __future__ import annotations

import polars as pl

from synthtrace.tracelib.schema import THREAD_KEYS, UNTRACED_AFTER

_AT_SCHEMA = {"appl": pl.Int32, "task": pl.Int32, "thread": pl.Int32, "end_ns": pl.Int64}


class UntracedMarks:
    """The switch-off times seen so far, per thread (few: a run switches its recording off a few times at most)."""

    def __init__(self) -> None:
        self._at = pl.DataFrame(schema=_AT_SCHEMA)

    def add(self, at: pl.DataFrame) -> None:
        """Keep the times of ``at`` (appl, task, thread, time_ns: ns) as switch-off times."""
        if at.height:
            new = at.select(*[pl.col(k).cast(pl.Int32) for k in THREAD_KEYS],
                            pl.col("time_ns").cast(pl.Int64).alias("end_ns"))
            self._at = pl.concat([self._at, new]).unique(maintain_order=True)

    def marked(self, bursts: pl.DataFrame) -> pl.DataFrame:
        """``bursts`` (a bursts part: appl, task, thread, end_ns, ...) with :data:`UNTRACED_AFTER`: whether the
        burst ends where its thread's recording was switched off."""
        if not self._at.height:
            return bursts.with_columns(pl.lit(False).alias(UNTRACED_AFTER))
        keys = [*THREAD_KEYS, "end_ns"]
        hit = bursts.select(pl.struct(*keys).is_in(self._at.select(pl.struct(*keys)).to_series().implode())
                            .alias(UNTRACED_AFTER))
        return bursts.with_columns(hit.to_series())
