"""Row orders of frames computed with NumPy, for the big frames of an ingest's end (issue 23: memory)."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl


def stable_order(frame: pl.DataFrame, by: Sequence[str]) -> np.ndarray:
    """The rows of ``frame`` (int64 indices) sorted by the columns ``by``, the first the most significant, NULLs
    last in each, equal rows in their order: Polars' ``arg_sort_by(*by, nulls_last=True, maintain_order=True)``,
    as one stable ``np.lexsort`` of the columns' values and, for a column holding NULLs, its null mask. It holds
    ~9 bytes a row per column where Polars' multi-column sort held ~70-80 (its keys row-encoded: 460-525 MB more
    at a 2 GB OTF2 archive's 6.45 M messages)."""
    keys: list[np.ndarray] = []
    for c in reversed(by):  # lexsort sorts by its last key first
        s = frame.get_column(c)
        keys.append(s.fill_null(0).to_numpy())
        if s.null_count():
            keys.append(s.is_null().to_numpy())  # after its values: a NULL sorts after every value
    return np.lexsort(keys) if keys else np.arange(frame.height)
