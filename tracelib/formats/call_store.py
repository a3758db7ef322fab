"""MPI calls held while a trace is read: their point-to-point messages are known only at the end of the read
(a communication record may come after the calls it belongs to), so the calls wait here, then come out with
their messages attached."""
from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import polars as pl

from synthtrace.tracelib.formats.bursts import message_columns, message_ends, message_rows, with_message_columns
from synthtrace.tracelib.schema import MPI_CALL_SCHEMA, THREAD_KEYS, counter_columns


#: with a spill folder, calls are still held in memory up to this many bytes (most traces: no spill written and
#: read back, issue 27); beyond it every call held so far and after goes to the folder
HOLD_BYTES = 256 * 1024 * 1024


class CallStore:
    """Calls kept in memory, or, with ``folder``, in memory up to :data:`HOLD_BYTES` and then written there as
    uncompressed Parquet parts (read back once, streamed: memory stays bounded by a chunk of calls on big traces).
    ``on_add(calls, "MPI call")`` sees every chunk of calls added."""

    def __init__(self, folder: Path | None = None, on_add: Callable[[pl.DataFrame, str], None] | None = None):
        self.folder = folder
        self._on_add = on_add
        self.n_calls = 0
        self._frames: list[pl.DataFrame] = []
        self._held_bytes = 0
        self._spilled = False
        self._names = itertools.count()
        self._counters: dict[str, None] = {}  # counter columns seen, in order of first appearance
        #: after :meth:`with_messages`: per message, the call_seq and comm of the calls holding its two ends
        #: (:func:`~synthtrace.tracelib.formats.bursts.message_ends`)
        self.message_ends: pl.DataFrame | None = None
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
        self._held_bytes += calls.estimated_size()
        self._frames.append(calls)
        if self.folder is not None and self._held_bytes > HOLD_BYTES:
            self._spill()

    def _spill(self) -> None:
        """Write the calls held in memory to the folder (from then on every call goes there)."""
        for frame in self._frames:
            frame.write_parquet(self.folder / f"part-{next(self._names):08d}.parquet", compression="uncompressed",
                                statistics=False)
        self._frames, self._held_bytes, self._spilled = [], 0, True

    def with_messages(self, messages: pl.DataFrame) -> pl.LazyFrame:
        """Every call kept, in the order added, with bytes, peer, tag and message counts from ``messages``, and one
        column per counter measured inside calls (sorted by name; NULL where a call has no sample). Sets
        :attr:`message_ends` (the messages placed in their calls once, for both)."""
        schema = {**MPI_CALL_SCHEMA, **{c: pl.Int64 for c in sorted(self._counters)}}
        if not self.n_calls:
            self.message_ends = message_ends(pl.DataFrame(schema={"call_seq": pl.Int64, "comm": pl.Int64}),
                                             message_rows(pl.DataFrame(), messages))
            return pl.LazyFrame(schema=schema)
        if self._spilled:  # the calls still held go too: the messages are placed with less in memory
            self._spill()
        held = [f.lazy() for f in self._frames]
        if self._spilled:  # parts hold the counters seen by their time: the others are NULL
            held.insert(0, pl.scan_parquet(self.folder / "*.parquet", schema=schema, missing_columns="insert"))
        calls = pl.concat(held, how="diagonal")
        calls = calls.select(schema.keys())
        spans = calls.select(*THREAD_KEYS, "start_ns", "end_ns").collect()
        rows = message_rows(spans, messages)
        columns = message_columns(spans, messages, rows)
        del spans  # the spans go before the ends' columns come: one call table in memory at a time (issue 27)
        self.message_ends = message_ends(calls.select("call_seq", "comm").collect(), rows)
        return with_message_columns(calls, columns)
