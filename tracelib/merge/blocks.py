"""Rows of a run's stored bursts read a block at a time, so that what the merge holds of a run's counter columns
is bounded in cells whatever its number of counter types (issue 23, attack 18 F2: a run whose bursts each sample
one of 4,096 counter types is 4,096 mostly-NULL Int64 columns; held whole, 10,000 bursts took 2.2 GB to merge).

A block holds at most ``BLOCK_CELLS`` cells (rows x columns): ~36 MB of Int64 values with their validity."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import polars as pl

#: cells (rows x columns) of a block of a wide table read or written at once
BLOCK_CELLS = 4_000_000
#: a table of more columns is written a block at a time (:func:`written`), not by Polars' sink
WIDE_COLUMNS = 256


def block_rows(columns: int) -> int:
    """Rows of a block of ``columns`` columns (at least one)."""
    return max(1, BLOCK_CELLS // max(columns, 1))


def frame_of(frame: pl.DataFrame | pl.LazyFrame, columns: Sequence[str]) -> pl.DataFrame:
    """The ``columns`` of ``frame`` as a frame (read now from a lazy scan, which holds them alone)."""
    got = frame.select(columns)
    return got.collect() if isinstance(got, pl.LazyFrame) else got


def gathered(scan: pl.LazyFrame, rows: pl.Series | np.ndarray, columns: Sequence[str]) -> pl.DataFrame:
    """The ``columns`` of the rows ``rows`` of ``scan`` (in that order; a NULL row number gives a NULL row), read a
    window of the scan at a time: a window spans at most :func:`block_rows` rows of these columns beyond the rows
    asked for (the result holds ``len(rows)`` rows)."""
    at = pl.Series("r", rows, pl.Int64)
    schema = scan.select(columns).collect_schema()
    wanted = at.drop_nulls().unique().sort().to_numpy()
    if not len(wanted) or not columns:
        return pl.DataFrame({c: pl.Series(c, [None] * at.len(), schema[c]) for c in columns})
    # the wanted rows of each block of block_rows(...) rows of the scan: a window read spans at most one block
    parts = []
    for rows_in in np.split(wanted, np.flatnonzero(np.diff(wanted // block_rows(len(columns)))) + 1):
        lo, hi = int(rows_in[0]), int(rows_in[-1])
        window = scan.select(columns).slice(lo, hi - lo + 1).collect()
        parts.append(window[rows_in - lo])
    got = pl.concat(parts) if len(parts) > 1 else parts[0]
    # each asked row's place among the distinct rows read (NULL stays NULL)
    place = pl.Series(np.searchsorted(wanted, at.fill_null(0).to_numpy()), dtype=pl.Int64)
    place = place.scatter(np.flatnonzero(at.is_null().to_numpy()), None) if at.null_count() else place
    return got.select(pl.all().gather(place))


def written(blocks: Iterable[pl.DataFrame], path: Path) -> pl.LazyFrame:
    """The frames ``blocks`` (of one schema, produced one at a time) written to ``path`` as the row groups of one
    Parquet file, and a lazy scan of it (a column of it is read in one go, whatever its number of blocks)."""
    import pyarrow.parquet as pq

    writer = None
    try:
        for b in blocks:
            t = b.to_arrow()
            if writer is None:
                writer = pq.ParquetWriter(path, t.schema, compression="zstd")
            writer.write_table(t)
    finally:
        if writer is not None:
            writer.close()
    return pl.scan_parquet(path)
