"""What a merge reads into memory, for tests of its memory bounds: every frame a lazy scan is collected into or a
Parquet file read into (issue 23)."""
from __future__ import annotations

import polars as pl
import pytest


def frames_read(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, list[str]]]:
    """The (height, column names) of every frame collected from a lazy scan or read by ``pl.read_parquet`` from now
    until ``monkeypatch`` is undone, appended to the list returned as they are read."""
    seen: list[tuple[int, list[str]]] = []
    collect, read = pl.LazyFrame.collect, pl.read_parquet

    def spy_collect(self, *args, **kwargs):
        got = collect(self, *args, **kwargs)
        seen.append((got.height, got.columns))
        return got

    def spy_read(*args, **kwargs):
        got = read(*args, **kwargs)
        seen.append((got.height, got.columns))
        return got

    monkeypatch.setattr(pl.LazyFrame, "collect", spy_collect)
    monkeypatch.setattr(pl, "read_parquet", spy_read)
    return seen
