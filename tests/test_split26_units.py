"""Runs whose bursts are cut in pieces (a tracer's buffer flush inside a burst: units of several pieces,
:mod:`synthtrace.tracelib.merge.pieces`) merge a block of counter cells at a time, as unsplit runs do, and their
merged values are those of the whole runs' merge (issue 23, mem25: a split wide run's group held every counter
column of every burst, 944 MB for 2,000 steps of 6,144 counter types against 507 MB unsplit)."""
from __future__ import annotations

import re
import warnings
from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from synthtrace.simulator import mechanisms
from synthtrace.simulator.counter_model import FIXED_COUNTERS, PROGRAMMABLE_COUNTERS
from synthtrace.tracelib.merge import blocks, partitioned
from synthtrace.tracelib.merge.merge_runs import MergeOptions, merge_runs
from synthtrace.warehouse import merged as merged_module
from synthtrace.warehouse.layout import Warehouse
from testing.frames_read import frames_read
from testing.simulator_campaigns import ingested
from testing.stored_runs import whole_run_tables

CELLS = 2_000
#: the counters the alignment compares and the pairs' checks read whole (narrow): work and cycles
NARROW = ("PAPI_TOT_INS", "PAPI_TOT_CYC")
HALF = len(PROGRAMMABLE_COUNTERS) // 2


def _flush_campaign(root: Path, flushing: int) -> Warehouse:
    """The simulator's ``flush`` campaign (4 ranks, 12 iterations), run ``flushing``'s tracer flushing its buffer
    inside bursts, each run recording the fixed counters and half the programmable ones, ingested."""
    spec = mechanisms.campaign("flush", 3, ranks=4, iterations=12)
    sets = tuple((*FIXED_COUNTERS, *PROGRAMMABLE_COUNTERS[r * HALF:(r + 1) * HALF]) for r in range(2))
    c = mechanisms.simulate(root / "sim", replace(spec, flush_run=flushing, counter_sets=sets))
    return Warehouse(ingested(c.traces, root, "flush"))


def _wide_cells(shape_and_columns: tuple[int, list[str]], wide: set[str]) -> int:
    """Cells of a frame (its height, its column names) in columns of the counters not read whole (a part's
    ``_s{j}_`` / ``_r{j}_`` copies of them too)."""
    height, columns = shape_and_columns
    return height * sum(1 for c in columns if re.sub(r"^_[rs]\d+_", "", c) in wide)


@pytest.mark.parametrize(("flushing", "partition_bursts"), [(1, 0), (0, 0), (0, None)])
def test_split_units_merge_a_block_of_counter_cells_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             flushing: int, partition_bursts: int | None) -> None:
    """The merge of runs one of which flushes inside bursts (flushing=1: the other run's units of two pieces
    matched whole; 0: the reference's pieces apportioned the other's unit), partitioned (``partition_bursts=0``:
    a group of tasks at a time) or not (the runs read one at a time, spilled), reads no frame holding more than a
    block of cells of the counters not compared (beyond one column of a run's bursts: a batch of one counter)
    (its copies of the runs included: mergeblk27, a run of several parts was read whole), and commits the whole
    runs' merge (values, quality, provenance)."""
    exp = _flush_campaign(tmp_path, flushing).experiment("flush")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        whole = merge_runs(whole_run_tables(exp), MergeOptions(), experiment=exp.name)
    wide = {c for c in whole.merged.columns if c in (*FIXED_COUNTERS, *PROGRAMMABLE_COUNTERS)} - set(NARROW)
    monkeypatch.setattr(blocks, "BLOCK_CELLS", CELLS)
    seen = frames_read(monkeypatch)
    merging: list[int] = []  # where the frames the merge read (its copies of the runs included) start and end

    def measured(merge):
        def call(*args, **kwargs):
            merging.append(len(seen))
            try:
                return merge(*args, **kwargs)
            finally:
                merging.append(len(seen))
        return call

    monkeypatch.setattr(merged_module, "merge_inputs", measured(merged_module.merge_inputs))
    monkeypatch.setattr(merged_module, "merge_runs", measured(merged_module.merge_runs))
    monkeypatch.setattr(partitioned, "merge_partitioned", measured(partitioned.merge_partitioned))
    steps: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        merged_module.merge_stored(exp, MergeOptions(), lambda what, n: steps.append(what),
                                   partition_bursts=partition_bursts)
    monkeypatch.undo()
    assert any(s.startswith("group 1/") for s in steps) == (partition_bursts == 0)  # the partitioned merge
    assert len(wide) >= 2 * HALF
    worst = max(seen[merging[0]:merging[-1]], key=lambda s: _wide_cells(s, wide) - s[0])
    assert _wide_cells(worst, wide) <= CELLS + worst[0], (worst[0], [c for c in worst[1] if c in wide])
    matches = pl.read_parquet(exp.dir / "merge_matches.parquet")
    assert matches.get_column("other_burst_seq").is_not_null().mean() > 0.9  # the runs paired
    for name, frame in (("merged_bursts", whole.merged), ("merge_matches", whole.matches),
                        ("merge_quality", whole.quality)):
        committed = pl.read_parquet(exp.dir / f"{name}.parquet")
        assert_frame_equal(committed, frame.collect() if isinstance(frame, pl.LazyFrame) else frame,
                           check_exact=False, rel_tol=1e-9)
