"""MPI calls held while a trace is read: their point-to-point messages are known only at the end of the read
(a communication record may come after the calls it belongs to), so the calls wait here, then come out with
their messages attached."""
from __future__ import annotations

import itertools
from pathlib import Path

import polars as pl

from synthtrace.tracelib.formats.bursts import attach_messages
from synthtrace.tracelib.schema import MPI_CALL_SCHEMA


class CallStore:
    """Calls kept in memory, or, with ``folder``, written there as uncompressed Parquet parts (read back once,
    streamed: memory stays bounded by a chunk of calls on big traces)."""

    def __init__(self, folder: Path | None = None):
        self.folder = folder
        self.n_calls = 0
        self._frames: list[pl.DataFrame] = []
        self._names = itertools.count()
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)

    def add(self, calls: pl.DataFrame) -> None:
        """Keep a chunk of calls (MPI_CALL_SCHEMA, messages not yet attached)."""
        if not calls.height:
            return
        self.n_calls += calls.height
        if self.folder is None:
            self._frames.append(calls)
        else:
            calls.write_parquet(self.folder / f"part-{next(self._names):08d}.parquet", compression="uncompressed",
                                statistics=False)

    def with_messages(self, messages: pl.DataFrame) -> pl.LazyFrame:
        """Every call kept, in the order added, with bytes, peer, tag and message counts from ``messages``."""
        if not self.n_calls:
            return pl.LazyFrame(schema=MPI_CALL_SCHEMA)
        calls = pl.concat(self._frames).lazy() if self.folder is None else pl.scan_parquet(self.folder / "*.parquet")
        return attach_messages(calls, messages)
