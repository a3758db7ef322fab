"""MPI calls of many counter types (issue 23): a wide mpi_calls.parquet is written by pyarrow's writer in row
groups of about sqrt(CALL_GROUP_ROWS_PER_CALL x calls) rows, so that what the writer holds (the row group's cells
plus footer state per column chunk) stays bounded: 1 M calls each sampling one of 4,096 counter types peaked at
1,575 MB in ingest, most of it Polars' sink keeping ~4 KB per column chunk of 62 row groups x 4,115 columns)."""
from __future__ import annotations

import math

import polars as pl
import pyarrow.parquet as pq

from benchmarks.bench_calls_memory import write_calls_trace
from synthtrace.warehouse import ingest


def _stored_calls(wh):
    (f,) = wh.glob("runs/*/mpi_calls.parquet")
    return f


def _groups(path):
    meta = pq.ParquetFile(path).metadata
    return meta, [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]


def test_a_wide_calls_table_has_row_groups_sized_from_the_calls_with_the_same_values(tmp_path, run_cli, monkeypatch):
    (tmp_path / "t").mkdir()
    prv = write_calls_trace(tmp_path / "t" / "calls.prv", 2_000, types=300)
    code, _, err = run_cli("ingest", prv, "-w", tmp_path / "wide")
    assert code == 0, err
    meta, rows = _groups(_stored_calls(tmp_path / "wide"))
    assert meta.num_columns > ingest.WIDE_CALLS_COLUMNS and len(rows) > 1
    group = math.isqrt(ingest.CALL_GROUP_ROWS_PER_CALL * 2_000)  # 505 rows (the old code: one group of 2,000)
    assert rows == [group] * (2_000 // group) + [2_000 % group]
    # the stored options are the run's tables' own (zstd, statistics), as Polars' sink writes them
    chunks = [meta.row_group(g).column(c) for g in range(meta.num_row_groups) for c in range(meta.num_columns)]
    assert {c.compression for c in chunks} == {"ZSTD"}
    assert all(c.statistics is not None and c.statistics.has_null_count for c in chunks)
    # the same table as Polars' sink stores (every column, in order, every value)
    monkeypatch.setattr(ingest, "WIDE_CALLS_COLUMNS", 10_000)
    code, _, err = run_cli("ingest", prv, "-w", tmp_path / "sunk")
    assert code == 0, err
    assert _groups(_stored_calls(tmp_path / "sunk"))[1] == [2_000]
    wide, sunk = (pl.read_parquet(_stored_calls(tmp_path / w)) for w in ("wide", "sunk"))
    assert wide.columns == sunk.columns and wide.schema == sunk.schema
    assert wide.equals(sunk, null_equal=True)


def test_a_narrow_calls_table_keeps_polars_row_groups(tmp_path, run_cli):
    (tmp_path / "t").mkdir()
    prv = write_calls_trace(tmp_path / "t" / "calls.prv", 2_000, types=8)
    code, _, err = run_cli("ingest", prv, "-w", tmp_path / "w")
    assert code == 0, err
    meta, rows = _groups(_stored_calls(tmp_path / "w"))
    assert meta.num_columns < ingest.WIDE_CALLS_COLUMNS and rows == [2_000]
