"""MPI calls of many counter types (issue 23): mpi_calls.parquet is written in row groups of a bounded number of
cells, so that the sink's memory follows the row group and not calls x counter types (1 M calls each sampling one
of 4,096 counter types peaked at 1,550 MB in ingest, ~900 MB of it Polars' 82,000-row groups x 4,115 columns)."""
from __future__ import annotations

import polars as pl
import pyarrow.parquet as pq

from benchmarks.bench_calls_memory import write_calls_trace
from synthtrace.warehouse import ingest


def _stored_calls(wh):
    (f,) = wh.glob("runs/*/mpi_calls.parquet")
    return f


def test_a_wide_calls_table_is_written_in_bounded_row_groups_with_the_same_values(tmp_path, run_cli, monkeypatch):
    (tmp_path / "t").mkdir()
    prv = write_calls_trace(tmp_path / "t" / "calls.prv", 2_000, types=300)
    code, _, err = run_cli("ingest", prv, "-w", tmp_path / "whole")
    assert code == 0, err
    monkeypatch.setattr(ingest, "CALL_ROW_GROUP_CELLS", 100_000)
    code, _, err = run_cli("ingest", prv, "-w", tmp_path / "bounded")
    assert code == 0, err
    meta = pq.ParquetFile(_stored_calls(tmp_path / "bounded")).metadata
    assert meta.num_columns > 256 and meta.num_row_groups > 1
    assert all(meta.row_group(i).num_rows * meta.num_columns <= 100_000 for i in range(meta.num_row_groups))
    whole, bounded = (pl.read_parquet(_stored_calls(tmp_path / w)) for w in ("whole", "bounded"))
    assert bounded.columns == whole.columns and bounded.equals(whole, null_equal=True)
