"""The commit of a wide merged table (a column per counter of any run, a burst with values in a few) holds a row
group's values, not 8 B for each of its NULL cells, and writes the same table (issue 23: the 150,000-burst wide
merge's commit peaked at 1.35 GB, its row groups of 5,163 rows x 6,155 columns held whole)."""
from __future__ import annotations

from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from polars.testing import assert_frame_equal

from benchmarks.bench_merge_memory_wide import merged_parts
from synthtrace.tracelib.merge import blocks
from synthtrace.tracelib.merge.merge_runs import PartedTable

BURSTS = 1_200
TYPES = 512
CELLS = 20_000


def test_a_wide_merged_table_s_commit_holds_its_values_not_its_nulls(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Parts of a merged table of 1,200 bursts x ~780 columns (two counters with a value a row, 25-row parts):
    every row group the commit hands the Parquet writer holds less than 2 B a cell (its columns held whole,
    NULLs included, take 8 B a cell and a bit), and the committed file is the parts' rows, in row groups of
    ``group_rows`` rows."""
    monkeypatch.setattr(blocks, "BLOCK_CELLS", CELLS)
    parts = merged_parts(tmp_path / "parts", BURSTS, TYPES)
    table = PartedTable(parts)
    width = table.lazy().collect_schema().len()
    assert width > blocks.WIDE_COLUMNS and len(parts) > 10
    held: list[tuple[int, int]] = []
    write_table = pq.ParquetWriter.write_table

    def spy(self: pq.ParquetWriter, t: pa.Table, *args, **kwargs) -> None:
        held.append((t.get_total_buffer_size(), t.num_rows * t.num_columns))
        write_table(self, t, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetWriter, "write_table", spy)
    table.write_parquet(tmp_path / "merged.parquet", statistics=True)
    assert held and max(size / cells for size, cells in held) < 2.0
    rows = blocks.group_rows(BURSTS, width)
    monkeypatch.undo()
    assert_frame_equal(pl.read_parquet(tmp_path / "merged.parquet"), table.collect())
    meta = pq.ParquetFile(tmp_path / "merged.parquet").metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)][:-1] == [rows] * (BURSTS // rows)
