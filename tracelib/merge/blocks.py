"""Rows of a run's stored bursts read a block at a time, so that what the merge holds of a run's counter columns
is bounded in cells whatever its number of counter types (issue 23, attack 18 F2: a run whose bursts each sample
one of 4,096 counter types is 4,096 mostly-NULL Int64 columns; held whole, 10,000 bursts took 2.2 GB to merge).

A block holds at most ``BLOCK_CELLS`` cells (rows x columns): ~36 MB of Int64 values with their validity."""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

#: cells (rows x columns) of a block of a wide table read or written at once
BLOCK_CELLS = 4_000_000
#: a table of more columns is written a block at a time (:func:`written`), not by Polars' sink
WIDE_COLUMNS = 256
#: bytes pyarrow's Parquet writer keeps per column chunk (row group x column) until it closes the file, its footer
#: included (measured: ~0.8 kB held while writing, as much again while the footer is serialised)
FOOTER_BYTES = 1_600
#: bytes a cell of a row group takes while it is written (an Int64 value and its validity bit)
CELL_BYTES = 9


def block_rows(columns: int) -> int:
    """Rows of a block of ``columns`` columns (at least one)."""
    return max(1, BLOCK_CELLS // max(columns, 1))


def group_rows(rows: int, columns: int) -> int:
    """Rows of a row group of a table of ``rows`` x ``columns`` written by :func:`written`: a block
    (:func:`block_rows`), or more when the writer's footer state would outgrow a row group: then
    sqrt(``rows`` x FOOTER_BYTES / CELL_BYTES), where the two are the same size (issue 23: the copy of a run of
    150,000 bursts x 4,106 columns in row groups of a block, 154 of them, held 1.2 GB of footer)."""
    return max(block_rows(columns), math.isqrt(rows * FOOTER_BYTES // CELL_BYTES))


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


@dataclass(frozen=True)
class ScanRows:
    """Rows of a run's stored bursts read a block at a time (:func:`gathered`): per row, its row in ``scan`` (NULL:
    none) and, where its unit's sums stand for its own values (a burst cut in pieces, :mod:`~synthtrace.tracelib.
    merge.pieces`), its unit's row in ``units``, a scan of units' sums of some columns (NULL: its own values)."""

    scan: pl.LazyFrame
    rows: pl.Series
    units: pl.LazyFrame | None = None
    unit_rows: pl.Series | None = None

    def gather(self, at: pl.Series | np.ndarray) -> ScanRows:
        """The rows ``at`` of these (a NULL gives a row of none)."""
        return ScanRows(self.scan, self.rows.gather(at), self.units,
                        None if self.unit_rows is None else self.unit_rows.gather(at))

    def slice(self, start: int, n: int) -> ScanRows:
        """Rows ``start`` .. ``start + n - 1`` of these."""
        return ScanRows(self.scan, self.rows.slice(start, n), self.units,
                        None if self.unit_rows is None else self.unit_rows.slice(start, n))

    @property
    def found(self) -> pl.Series:
        """Per row, NULL where it has no values (neither a row of the scan nor a unit's), not NULL elsewhere."""
        return self.rows if self.unit_rows is None else self.rows.fill_null(self.unit_rows)

    def read(self, columns: Sequence[str]) -> pl.DataFrame:
        """The ``columns`` of these rows, those the units hold their units' where they stand for the row's own."""
        got = gathered(self.scan, self.rows, columns)
        if self.units is None or self.unit_rows is None or not self.unit_rows.is_not_null().any():
            return got
        held = set(self.units.collect_schema().names())
        summed = [c for c in columns if c in held]
        sums, at = gathered(self.units, self.unit_rows, summed), self.unit_rows.is_not_null()
        return got.with_columns(pl.when(at).then(sums.get_column(c)).otherwise(got.get_column(c)).alias(c)
                                for c in summed)


def nulls_shared(table: pa.Table, nulls: dict[pa.DataType, pa.Array]) -> pa.Table:
    """``table`` with each of its fixed-width columns that is NULL throughout made a slice of one NULL array of its
    type (kept in ``nulls``, grown as needed): held, such a column costs nothing, not 8 B a row. Issue 23: a merged
    table has a column per counter of any run and a burst has values in a few: the commit of the 40,000-burst wide
    merge gathers row groups of 2,666 rows x 6,155 columns from parts of 325 rows where ~90 % of the columns are
    NULL (it peaked at 872 MB, 376 MB with the NULLs shared)."""
    columns = []
    for column in table.columns:
        if column.null_count == len(column) and pa.types.is_primitive(column.type) and len(column):
            shared = nulls.get(column.type)
            if shared is None or len(shared) < len(column):
                shared = nulls[column.type] = pa.nulls(len(column), column.type)
            column = shared.slice(0, len(column))
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=table.schema)


def written(blocks: Iterable[pl.DataFrame | pa.Table], path: Path, rows: int | None = None,
            **options: Any) -> pl.LazyFrame:
    """The frames or Arrow tables ``blocks`` (of one schema, at least one, produced one at a time) written to
    ``path`` as one Parquet file, and a lazy scan of it (a column of it is read in one go, whatever its number of
    blocks). Row groups: each block one, or with ``rows``, ``rows`` rows each (the blocks held until they reach it,
    see :func:`group_rows`). ``options``: pyarrow's ``ParquetWriter`` options (default zstd-compressed)."""
    import pyarrow.parquet as pq

    writer, held, n, wrote, nulls = None, [], 0, False, {}
    try:
        for b in blocks:
            t = b if isinstance(b, pa.Table) else b.to_arrow()
            if rows is not None:  # held until its row group is full: its NULL columns take no memory of their own
                t = nulls_shared(t, nulls)
            if writer is None:
                writer = pq.ParquetWriter(path, t.schema, **{"compression": "zstd", **options})
            held.append(t)
            n += t.num_rows
            if rows is None or n >= rows:
                whole, k = pa.concat_tables(held), n if rows is None else n - n % rows
                writer.write_table(whole.slice(0, k), row_group_size=rows)
                held, n, wrote = [whole.slice(k)], n - k, True
        if writer is not None and (n or not wrote):  # the last rows, or the schema of no rows
            writer.write_table(pa.concat_tables(held))
    finally:
        if writer is not None:
            writer.close()
    return pl.scan_parquet(path, glob=False)
