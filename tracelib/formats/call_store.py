"""MPI calls held while a trace is read: their point-to-point messages are known only at the end of the read
(a communication record may come after the calls it belongs to), so the calls wait here, then come out with
their messages attached."""
from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import polars as pl

from synthtrace.tracelib.formats.bursts import attach_messages
from synthtrace.tracelib.schema import MPI_CALL_SCHEMA, counter_columns


class CallStore:
    """Calls kept in memory, or, with ``folder``, written there as uncompressed Parquet parts (read back once,
    streamed: memory stays bounded by a chunk of calls on big traces). ``on_add(calls, "MPI call")`` sees every
    chunk of calls added."""

    def __init__(self, folder: Path | None = None, on_add: Callable[[pl.DataFrame, str], None] | None = None):
        self.folder = folder
        self._on_add = on_add
        self.n_calls = 0
        self._frames: list[pl.DataFrame] = []
        self._names = itertools.count()
        self._counters: dict[str, None] = {}  # counter columns seen, in order of first appearance
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)

    def add(self, calls: pl.DataFrame) -> None:
        """Keep a chunk of calls (MPI_CALL_SCHEMA, messages not yet attached)."""
        if not calls.height:
            return
        self.n_calls += calls.height
        if self._on_add is not None:
            self._on_add(calls, "MPI call")
        self._counters.update((c, None) for c in counter_columns(calls))
        if self.folder is None:
            self._frames.append(calls)
        else:
            calls.write_parquet(self.folder / f"part-{next(self._names):08d}.parquet", compression="uncompressed",
                                statistics=False)

    def with_messages(self, messages: pl.DataFrame) -> pl.LazyFrame:
        """Every call kept, in the order added, with bytes, peer, tag and message counts from ``messages``, and one
        column per counter measured inside calls (sorted by name; NULL where a call has no sample)."""
        schema = {**MPI_CALL_SCHEMA, **{c: pl.Int64 for c in sorted(self._counters)}}
        if not self.n_calls:
            return pl.LazyFrame(schema=schema)
        if self.folder is None:
            calls = pl.concat(self._frames, how="diagonal").lazy()
        else:  # parts hold the counters seen by their time: the others are NULL
            calls = pl.scan_parquet(self.folder / "*.parquet", schema=schema, missing_columns="insert")
        return attach_messages(calls.select(schema.keys()), messages)
