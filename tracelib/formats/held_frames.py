"""Frames held in memory a chunk at a time, the small ones joined a few dozen at a time.

A read keeps small frames until it can write or attach them (an OTF2 archive's calls, point-to-point records and
one-location parts). Each Polars frame costs its columns' buffers and objects beyond its rows (~7 KB for one row
of the call schema's 19 columns): an archive of 20,000 locations of 6 events each held ~66 KB a location, 1.6 GB in
all (attack25 A1). :class:`HeldFrames` joins the small frames appended into one every :data:`JOIN_EVERY`, so that
the frames held are about 1/JOIN_EVERY of the small chunks, each copied once more (never the whole list again)."""
from __future__ import annotations

import polars as pl

#: small frames appended one by one before they are joined into one (20,000 one-row frames of the call schema:
#: 135 MB held as they came, 12 MB joined every 64, 13 MB every 16)
JOIN_EVERY = 64
#: a frame of this many bytes or more is held as appended: its columns' own cost is small beside its rows, and
#: joining it would copy it (a read holds up to 256 MB of calls before it spills them)
SMALL_BYTES = 1 << 20


class HeldFrames(list):
    """A list of frames in the order appended, whose small frames (under :data:`SMALL_BYTES`) are joined into one
    every :data:`JOIN_EVERY` appended: columns missing from some are NULL there, as in
    ``pl.concat(how="diagonal_relaxed")``."""

    def __init__(self) -> None:
        super().__init__()
        self._joined = 0  # frames from this index on are small ones not joined yet

    def append(self, frame: pl.DataFrame) -> None:
        if frame.estimated_size() >= SMALL_BYTES:
            self._join_small()
            super().append(frame)
            self._joined = len(self)
            return
        super().append(frame)
        if len(self) - self._joined >= JOIN_EVERY:
            self._join_small()

    def _join_small(self) -> None:
        """Join the small frames appended since the last join into one frame, in place."""
        if len(self) - self._joined > 1:
            self[self._joined:] = [pl.concat(self[self._joined:], how="diagonal_relaxed", rechunk=True)]
        self._joined = len(self)

    def clear(self) -> None:
        super().clear()
        self._joined = 0
