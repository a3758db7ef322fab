"""A run whose stored bursts are not in thread and ``burst_seq`` order (a trace ingested in several chunks: each
chunk's parts hold every thread) is copied into the whole-run merge's spill sorted a block at a time, not read whole,
and merges as it did read whole (review26 F8, session 27: ``merge_inputs`` read such a run whole before its spill, so
the whole-run merge's memory bound held only for runs of one thread)."""
from __future__ import annotations

import warnings
from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from synthtrace.simulator import mechanisms
from synthtrace.simulator.counter_model import FIXED_COUNTERS, PROGRAMMABLE_COUNTERS
from synthtrace.tracelib.formats.paraver.reader import ParaverTrace
from synthtrace.tracelib.merge import blocks
from synthtrace.tracelib.merge.merge_runs import MergeOptions
from synthtrace.tracelib.schema import THREAD_KEYS
from synthtrace.warehouse import merged as merged_module
from synthtrace.warehouse import runs as runs_module
from synthtrace.warehouse.experiment import Experiment
from synthtrace.warehouse.layout import Warehouse
from testing.frames_read import frames_read
from testing.simulator_campaigns import ingested

CELLS = 2_000
KEYS = (*THREAD_KEYS, "burst_seq")
MERGED = ("merged_bursts", "merge_matches", "merge_quality")
HALF = len(PROGRAMMABLE_COUNTERS) // 2


def _chunked_campaign(root: Path, monkeypatch: pytest.MonkeyPatch, flushing: int | None) -> Experiment:
    """The simulator's ``flush`` campaign (4 ranks, 12 iterations; run ``flushing``'s tracer flushing inside bursts,
    None: neither), each run recording the fixed counters and half the programmable ones, ingested a block of 8 KiB
    of the trace at a time (as a trace over the reader's 8 MiB block is): each run's bursts stored in ~20 parts of
    every task."""
    spec = mechanisms.campaign("flush", 3, ranks=4, iterations=12)
    sets = tuple((*FIXED_COUNTERS, *PROGRAMMABLE_COUNTERS[r * HALF:(r + 1) * HALF]) for r in range(2))
    c = mechanisms.simulate(root / "sim", replace(spec, flush_run=flushing, counter_sets=sets))
    with monkeypatch.context() as m:
        m.setitem(ParaverTrace.__init__.__kwdefaults__, "chunk_bytes", 8192)
        return Warehouse(ingested(c.traces, root, "flush")).experiment("flush")


def _stored_keys(exp: Experiment, run_id: str) -> pl.DataFrame:
    parts = runs_module.run_parts(exp.wh, run_id, "bursts/*.parquet")
    return pl.scan_parquet(parts, missing_columns="insert").select(KEYS).collect()


def _merged(exp: Experiment) -> dict[str, pl.DataFrame]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        merged_module.merge_stored(exp, MergeOptions())
    return {name: pl.read_parquet(exp.dir / f"{name}.parquet") for name in MERGED}


@pytest.mark.parametrize("flushing", [0, None])
def test_a_run_stored_out_of_order_is_copied_a_block_at_a_time_and_merges_as_read_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flushing: int | None) -> None:
    """Runs of four tasks stored in ~20 parts each, every part holding every task: the whole-run merge's copy of
    each run (``merge_inputs``) holds no frame or block of more than a block of cells beyond the run's four key
    columns, writes the run's bursts sorted, and the merge commits the tables the run read whole gave."""
    exp = _chunked_campaign(tmp_path, monkeypatch, flushing)
    for run_id in exp.run_ids:
        keys = _stored_keys(exp, run_id)
        assert len(runs_module.run_parts(exp.wh, run_id, "bursts/*.parquet")) > 10
        assert not keys.equals(keys.sort(KEYS))  # the stored order is the chunks', not the threads'
    with monkeypatch.context() as m:  # the run read whole (the path before: the copy refused)
        m.setattr(merged_module, "run_bursts_to", lambda *args, **kwargs: False)
        whole = _merged(exp)

    monkeypatch.setattr(blocks, "BLOCK_CELLS", CELLS)
    seen = frames_read(monkeypatch)
    concat, write = pl.concat, runs_module.written
    copied: list[tuple[int, int]] = []  # (rows, columns) of each block the copies wrote

    def spy_concat(*args, **kwargs):
        got = concat(*args, **kwargs)
        if isinstance(got, pl.DataFrame):
            seen.append((got.height, got.columns))
        return got

    def spy_written(blocks_of, *args, **kwargs):
        def each():
            for b in blocks_of:
                copied.append((b.num_rows, b.num_columns))
                yield b
        return write(each(), *args, **kwargs)

    inputs = merged_module.merge_inputs
    window: list[int] = []

    def spy_inputs(*args, **kwargs):
        window.append(len(seen))
        try:
            return inputs(*args, **kwargs)
        finally:
            window.append(len(seen))

    monkeypatch.setattr(pl, "concat", spy_concat)
    monkeypatch.setattr(runs_module, "written", spy_written)
    monkeypatch.setattr(merged_module, "merge_inputs", spy_inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        merged_module.merge_stored(exp, MergeOptions())
    monkeypatch.undo()

    def beyond_keys(shape: tuple[int, list[str]]) -> int:
        return shape[0] * sum(c not in KEYS for c in shape[1])

    worst = max(seen[window[0]:window[1]], key=beyond_keys)
    assert beyond_keys(worst) <= CELLS, (worst[0], len(worst[1]))
    assert copied and max(r * c for r, c in copied) <= CELLS, max(copied, key=lambda t: t[0] * t[1])
    for name in MERGED:
        assert_frame_equal(pl.read_parquet(exp.dir / f"{name}.parquet"), whole[name])

    out = tmp_path / "copy.parquet"
    assert runs_module.run_bursts_to(exp.wh, exp.run_ids[0], out)
    assert_frame_equal(pl.read_parquet(out), exp.bursts(exp.run_ids[0]).drop("run_id"))
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("copy")] == ["copy.parquet"]


def test_the_copys_sorting_files_are_removed_when_it_is_interrupted(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ctrl-C while a run out of order is copied (its rows put in their blocks' files, some of those read back)
    leaves nothing of the copy's sorting beside it, and the next copy writes the run's bursts."""
    exp = _chunked_campaign(tmp_path, monkeypatch, None)
    write = runs_module.written

    def interrupted(blocks_of, *args, **kwargs):
        next(iter(blocks_of))
        raise KeyboardInterrupt

    spill = tmp_path / "spill"
    spill.mkdir()
    monkeypatch.setattr(blocks, "BLOCK_CELLS", CELLS)
    monkeypatch.setattr(runs_module, "written", interrupted)
    with pytest.raises(KeyboardInterrupt):
        runs_module.run_bursts_to(exp.wh, exp.run_ids[0], spill / "bursts.parquet")
    assert list(spill.iterdir()) == []
    monkeypatch.setattr(runs_module, "written", write)
    assert runs_module.run_bursts_to(exp.wh, exp.run_ids[0], spill / "bursts.parquet")
    assert [p.name for p in spill.iterdir()] == ["bursts.parquet"]
