"""The partitioned merge (runs above ``PARTITION_BURSTS``, merged a group of tasks at a time) of runs whose bursts
each sample one of many counter types holds a bounded number of cells whatever the number of types, and merges as
the whole runs' merge does (issue 23: two two-task runs of 10,000 such steps were killed past 3 GB: every group's
bursts were read with every column)."""
from __future__ import annotations

import warnings
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import synthtrace
from benchmarks.bench_merge_memory_wide import wide_ring
from synthtrace.tracelib.merge import blocks
from synthtrace.tracelib.merge.merge_runs import MergeOptions, merge_runs
from synthtrace.warehouse import merged as merged_module
from synthtrace.warehouse.layout import Warehouse
from testing.frames_read import frames_read
from testing.stored_runs import whole_run_tables

STEPS = 300
TYPES = 128
CELLS = 20_000
#: columns of a burst the alignment reads besides its counters (keys, times, call, site, features) and a margin
NARROW = 24


def test_a_wide_partitioned_merge_holds_a_block_of_cells_at_a_time(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Every frame the partitioned merge reads (a lazy scan collected, a spilled part read) holds at most a block
    of cells beyond a few columns per burst of one run (a group here is both tasks: 600 bursts x ~140 columns a
    run), and the committed merge is the whole runs' merge (same merged bursts, quality and provenance)."""
    traces = wide_ring(tmp_path / "ring", STEPS, TYPES)
    synthtrace.ingest(str(tmp_path / "wh"), str(traces), experiment="ring")
    exp = Warehouse(tmp_path / "wh").experiment("ring")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        whole = merge_runs(whole_run_tables(exp), MergeOptions(), experiment=exp.name)
    assert whole.merged.width > TYPES  # a column per counter of either run
    monkeypatch.setattr(blocks, "BLOCK_CELLS", CELLS)
    seen = frames_read(monkeypatch)
    steps: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        merged_module.merge_stored(exp, MergeOptions(), lambda what, n: steps.append(what), partition_bursts=0)
    monkeypatch.undo()
    assert any(s.startswith("group 1/") for s in steps)  # the partitioned merge
    rows = 2 * STEPS  # a run's bursts in a group
    assert max(h * len(cols) for h, cols in seen) <= CELLS + rows * NARROW, max(seen, key=lambda s: s[0] * len(s[1]))
    for name, frame in (("merged_bursts", whole.merged), ("merge_matches", whole.matches),
                        ("merge_quality", whole.quality)):
        committed = pl.read_parquet(exp.dir / f"{name}.parquet")
        assert_frame_equal(committed, frame.collect() if isinstance(frame, pl.LazyFrame) else frame,
                           check_exact=False, rel_tol=1e-9)
