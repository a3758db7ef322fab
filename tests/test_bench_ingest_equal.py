"""`benchmarks/bench_ingest_equal.py` (issue 27: speed work must not change what an ingest stores) compares every
stored file of two warehouses, the JSON documents beside the tables included."""
from __future__ import annotations

import json

import polars as pl

from benchmarks.bench_ingest_equal import compare_disk, compare_runs


def _run(root, program: dict) -> None:
    """A run folder in warehouse ``root`` with one table and its program.json."""
    run = root / "runs" / "0123456789abcdef"
    run.mkdir(parents=True)
    pl.DataFrame({"x": [1, 2]}).write_parquet(run / "bursts.parquet")
    (run / "program.json").write_text(json.dumps(program))


def test_a_document_that_differs_is_named_not_read_as_parquet(tmp_path):
    """An OTF2 run's program.json changed on main (its key and binary named) and the comparison ended in Polars'
    'File out of specification' traceback: it read every file whose bytes differ as Parquet. A JSON document is
    compared as JSON: a different one is named, the same one in other bytes is equal."""
    _run(tmp_path / "a", {"key": None, "binary": None, "symbols": []})
    _run(tmp_path / "b", {"key": "ping-pong.otf2", "binary": "ping-pong.otf2", "symbols": []})
    _run(tmp_path / "c", {"binary": None, "key": None, "symbols": []})
    assert compare_runs(tmp_path / "a", tmp_path / "b") == ["0123456789abcdef program.json: the documents differ"]
    assert compare_runs(tmp_path / "a", tmp_path / "c") == []


def _table_run(root, frame: pl.DataFrame, **options) -> None:
    """A run folder in warehouse ``root`` whose bursts are ``frame``, written with Parquet ``options``."""
    run = root / "runs" / "0123456789abcdef"
    run.mkdir(parents=True)
    frame.write_parquet(run / "bursts.parquet", **options)


def test_byte_mode_names_a_table_written_otherwise_and_frame_mode_accepts_it(tmp_path):
    """Issue 27 (ingest 12): a change of how tables are written (encodings, statistics, compression) keeps what
    they hold. Byte mode names such a table (before, a table whose bytes differed but whose frame was equal passed
    silently, so 'byte-equal' was never checked); frame mode accepts it."""
    frame = pl.DataFrame({"start_ns": list(range(1000)), "mpi_call": ["MPI_Send", None] * 500})
    _table_run(tmp_path / "a", frame, compression="zstd", compression_level=1, statistics=True)
    _table_run(tmp_path / "b", frame, compression="uncompressed", statistics=False)
    assert compare_runs(tmp_path / "a", tmp_path / "b") == [
        "0123456789abcdef bursts.parquet: the bytes differ (the frames are equal: --frames accepts it)"]
    assert compare_runs(tmp_path / "a", tmp_path / "b", frames=True) == []


def test_frame_mode_names_another_dtype_or_row_order(tmp_path):
    """Frame-equal means the same rows in the same order, the same columns and dtypes and the same values."""
    frame = pl.DataFrame({"start_ns": [3, 1, 2]})
    _table_run(tmp_path / "a", frame)
    _table_run(tmp_path / "b", frame.cast({"start_ns": pl.Int32}))
    _table_run(tmp_path / "c", frame.sort("start_ns"))
    for other in ("b", "c"):
        problems = compare_runs(tmp_path / "a", tmp_path / other, frames=True)
        assert len(problems) == 1 and problems[0].startswith("0123456789abcdef bursts.parquet: ")


def test_frame_mode_holds_the_disk_within_the_ratio(tmp_path):
    """A cheaper encoding that stores the tables much bigger is named (the issue allows 1.3x the disk)."""
    frame = pl.DataFrame({"start_ns": [i * 1000 for i in range(50_000)]})
    _table_run(tmp_path / "a", frame, compression="zstd")
    _table_run(tmp_path / "b", frame, compression="uncompressed")
    assert compare_disk(tmp_path / "a", tmp_path / "a", 1.3) == []
    problems = compare_disk(tmp_path / "a", tmp_path / "b", 1.3)
    assert len(problems) == 1 and problems[0].startswith("disk: ")
