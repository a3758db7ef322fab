"""`benchmarks/bench_ingest_equal.py` (issue 27: speed work must not change what an ingest stores) compares every
stored file of two warehouses, the JSON documents beside the tables included."""
from __future__ import annotations

import json

import polars as pl

from benchmarks.bench_ingest_equal import compare_runs


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
