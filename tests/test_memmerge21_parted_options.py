"""The commit of a merged table of many counter types (issue 23) with the options its caller gives."""
from __future__ import annotations

from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from synthtrace.tracelib.merge.merge_runs import PartedTable


def _wide_parts(folder: Path, columns: int = 300) -> PartedTable:
    """Two parts of a table wider than WIDE_COLUMNS (``columns`` Int64 columns, 50 rows each)."""
    folder.mkdir()
    parts = []
    for k in range(2):
        parts.append(folder / f"part-{k}.parquet")
        pl.DataFrame({f"c{i}": range(k * 50, k * 50 + 50) for i in range(columns)}).write_parquet(parts[-1])
    return PartedTable(parts)


def test_a_wide_parted_table_is_written_with_the_options_given(tmp_path: Path) -> None:
    """A wide table's parts written as one file take the caller's Polars options (statistics, compression) as
    pyarrow's, not the writer's defaults; the values are the parts'."""
    table = _wide_parts(tmp_path / "parts")
    out = tmp_path / "out.parquet"
    table.write_parquet(out, statistics=False, compression="uncompressed")
    meta = pq.ParquetFile(out).metadata
    chunk = meta.row_group(0).column(0)
    assert not chunk.is_stats_set
    assert chunk.compression == "UNCOMPRESSED"
    assert pl.read_parquet(out).equals(table.collect())
    table.write_parquet(out, statistics=True)
    assert pq.ParquetFile(out).metadata.row_group(0).column(0).is_stats_set


def test_a_wide_parted_table_refuses_an_option_it_cannot_pass(tmp_path: Path) -> None:
    """An option the wide writer has no pyarrow name for is refused, not silently dropped."""
    table = _wide_parts(tmp_path / "parts")
    with pytest.raises(TypeError, match="row_group_size"):
        table.write_parquet(tmp_path / "out.parquet", row_group_size=10)
    assert not (tmp_path / "out.parquet").exists()
