"""MPI calls held while a trace is read: their point-to-point messages are known only at the end of the read
(a communication record may come after the calls it belongs to), so the calls wait here, then come out with
their messages attached."""
from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import polars as pl

from synthtrace.tracelib.formats.heap import release_free_heap
from synthtrace.tracelib.formats.held_frames import HeldFrames
from synthtrace.tracelib.formats.part_source import lazy_parts
from synthtrace.tracelib.formats.bursts import (_MAX_I64, columns_of_messages, message_ends, message_ends_in_parts,
                                                message_rows, packed_thread_keys, placed_rows, placed_rows_in_parts,
                                                with_message_columns, writable)
from synthtrace.tracelib.schema import MPI_CALL_SCHEMA, THREAD_KEYS, counter_columns


#: with a spill folder, calls are still held in memory up to this many bytes (most traces: no spill written and
#: read back, issue 27); beyond it every call held so far and after goes to the folder
HOLD_BYTES = 256 * 1024 * 1024
#: once a trace has spilled, the calls added since are written as a part when they hold this many bytes
SPILL_PART_BYTES = 8 * 1024 * 1024


class CallStore:
    """Calls kept in memory, or, with ``folder``, in memory up to :data:`HOLD_BYTES` and then written there as
    uncompressed Parquet parts (read back once, streamed: memory stays bounded by a part of calls on big traces).
    ``on_add(calls, "MPI call")`` sees every chunk of calls added."""

    def __init__(self, folder: Path | None = None, on_add: Callable[[pl.DataFrame, str], None] | None = None):
        self.folder = folder
        self._on_add = on_add
        self.n_calls = 0
        self._frames = HeldFrames()  # one frame per chunk added, the small ones joined a few dozen at a time
        self._held_bytes = 0
        self._files: list[Path] = []
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
        if self.folder is not None and self._held_bytes > (SPILL_PART_BYTES if self._files else HOLD_BYTES):
            self._spill()

    def _spill(self) -> None:
        """Write the calls held in memory to the folder, in parts of about :data:`SPILL_PART_BYTES` (from then on
        every call goes there)."""
        group: list[pl.DataFrame] = []
        size = 0
        for i, frame in enumerate(self._frames):
            group.append(frame)
            size += frame.estimated_size()
            if size > SPILL_PART_BYTES or i == len(self._frames) - 1:
                self._files.append(self.folder / f"part-{next(self._names):08d}.parquet")
                pl.concat(group, how="diagonal").write_parquet(self._files[-1], compression="uncompressed",
                                                               statistics=False)
                group, size = [], 0
        self._frames, self._held_bytes = HeldFrames(), 0

    def _parts(self, columns: list[str] | None = None) -> Iterator[pl.DataFrame]:
        """The calls kept, in the order added, part by part (spilled parts, else the frames held); only ``columns``
        (of MPI_CALL_SCHEMA: every part has them) when given."""
        if self._files:
            yield from (pl.read_parquet(f, columns=columns, glob=False) for f in self._files)
        else:
            yield from (f.select(columns) if columns is not None else f for f in self._frames)

    def _span_parts(self) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """The packed thread keys, starts and ends (ns) of the calls kept, part by part in the order added."""
        for part in self._parts([*THREAD_KEYS, "start_ns", "end_ns"]):
            yield (packed_thread_keys(part), writable(part.get_column("start_ns")),
                   writable(part.get_column("end_ns")))

    def _spans(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The packed thread keys, starts and ends (ns) of every call kept, as int64 arrays in the order added,
        filled part by part (no frame of every call's spans is built)."""
        keys, starts, ends = (np.empty(self.n_calls, dtype=np.int64) for _ in range(3))
        at = 0
        for k, s, e in self._span_parts():
            end = at + k.size
            keys[at:end], starts[at:end], ends[at:end] = k, s, e
            at = end
        return keys, starts, ends

    def _placed(self, messages: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:func:`~synthtrace.tracelib.formats.bursts.message_rows` of the calls kept: spilled calls in (thread,
        start) order (an OTF2 archive's, read location by location) are placed a part at a time
        (:func:`~synthtrace.tracelib.formats.bursts.placed_rows_in_parts`), others with every call's span at once."""
        rows = placed_rows_in_parts(self._span_parts, messages) if self._files else None
        return rows if rows is not None else placed_rows(*self._spans(), messages)

    def with_messages(self, messages: pl.DataFrame, source: str | Path = "<records>",
                      each_pass: Callable[[], Callable[[pl.DataFrame], pl.DataFrame]] | None = None
                      ) -> pl.LazyFrame:
        """Every call kept, in the order added, with bytes, peer, tag and message counts from ``messages``, and one
        column per counter measured inside calls (sorted by name; NULL where a call has no sample). Sets
        :attr:`message_ends` (the messages placed in their calls once, for both). The trace at ``source`` is refused
        here (:class:`~synthtrace.tracelib.errors.TraceFormatError` naming it) when the bytes of the messages one call
        sends or receives pass int64, before any call is stored (the stream would refuse them naming no file).

        The calls come from a lazy source that attaches the messages part by part, so that a sink streams them
        (issue 27: a 2 GB trace's 8 M calls are never one frame). ``each_pass()``, called as each pass over them
        starts, gives a function that sees every part (same rows and columns) in the order added, before the
        messages are attached."""
        schema = {**MPI_CALL_SCHEMA, **{c: pl.Int64 for c in sorted(self._counters)}}
        if not self.n_calls:
            self.message_ends = message_ends(pl.DataFrame(schema={"call_seq": pl.Int64, "comm": pl.Int64}),
                                             message_rows(pl.DataFrame(), messages))
            return pl.LazyFrame(schema=schema)
        if self._files:  # the calls still held go too: the messages are placed with less in memory
            self._spill()
            release_free_heap()  # what streaming freed, before the placing allocates (a big trace: it spilled)
        rows = self._placed(messages)
        self._refuse_wrapped_message_bytes(source, messages, rows)
        if self._files:
            release_free_heap()  # what placing them freed
        self.message_ends = (message_ends_in_parts(lambda: self._parts(["call_seq", "comm"]), rows) if self._files
                             else message_ends(pl.concat(self._parts(["call_seq", "comm"])), rows))
        placed = _PlacedMessages(messages, rows[0], rows[1])
        del rows
        if self._files:
            release_free_heap()

        def parts() -> Iterator[pl.DataFrame]:
            at, edit = 0, each_pass() if each_pass is not None else None
            for part in self._parts():
                part = part.select(pl.col(c) if c in part.columns else pl.lit(None, t).alias(c)
                                   for c, t in schema.items())
                part = edit(part) if edit is not None else part
                part, at = with_message_columns(part, placed.columns(at, part.height)), at + part.height
                yield part

        return lazy_parts(parts, schema)

    def _refuse_wrapped_message_bytes(self, source: str | Path, messages: pl.DataFrame,
                                      rows: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
        """Refuse the trace at ``source`` when the bytes of the messages one call sends or receives pass int64
        (``rows``: the calls holding each message's two ends, :func:`message_rows`). No sum can pass when the
        messages' count times their largest size does not (any real trace: one reduction)."""
        size = messages.get_column("size")
        lo, hi = size.min(), size.max()
        if lo is None or max(-lo, hi) * messages.height <= _MAX_I64:
            return
        columns_of_messages(self.n_calls, messages, rows[0], messages, rows[1], source)


class _PlacedMessages:
    """The messages of a trace with the rows of the calls holding their two ends (:func:`message_rows`), indexed so
    that the point-to-point columns of any run of consecutive calls are computed from its messages alone."""

    def __init__(self, messages: pl.DataFrame, row_s: np.ndarray, row_r: np.ndarray):
        self.messages = messages
        self.by_s, self.by_r = np.argsort(row_s, kind="stable"), np.argsort(row_r, kind="stable")
        self.row_s, self.row_r = row_s[self.by_s], row_r[self.by_r]

    def columns(self, first: int, n: int) -> pl.DataFrame:
        """:func:`~synthtrace.tracelib.formats.bursts.message_columns` of the calls ``first`` .. ``first + n - 1``."""
        (s0, s1), (r0, r1) = (np.searchsorted(rows, [first, first + n]) for rows in (self.row_s, self.row_r))
        return columns_of_messages(n, self.messages[self.by_s[s0:s1]], self.row_s[s0:s1] - first,
                                   self.messages[self.by_r[r0:r1]], self.row_r[r0:r1] - first)
