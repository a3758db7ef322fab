"""A lazy frame over frames made part by part, so that a sink streams them instead of holding them all."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import polars as pl
from polars.io.plugins import register_io_source


def lazy_parts(parts: Callable[[], Iterable[pl.DataFrame]], schema: dict[str, pl.DataType]) -> pl.LazyFrame:
    """The concatenation of the frames ``parts()`` yields (each with ``schema``'s columns, in order), as a lazy
    source: the query's columns, filter and row limit are applied to each part as it comes, and no part after
    the limit is made."""

    def source(with_columns: list[str] | None, predicate: pl.Expr | None, n_rows: int | None,
               _batch_size: int | None) -> Iterator[pl.DataFrame]:
        left = n_rows
        for part in parts():
            part = part.select(with_columns) if with_columns is not None else part
            part = part.filter(predicate) if predicate is not None else part
            if left is not None:
                part, left = part.head(left), left - min(left, part.height)
            yield part
            if left == 0:
                return

    return register_io_source(source, schema=schema)
