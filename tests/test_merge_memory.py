"""The whole-run merge reads only the columns it uses (issue 23: ``merge`` held both runs' MPI calls with their
counters, kind, cpu, root, duration and run id, and the bursts' run id, ~1 kB per burst of the pair at its peak):
the runs it is handed carry the calls' :data:`CALL_COLUMNS` alone, and its merge (merged bursts, matches, quality,
warnings) is the merge of the whole tables, on the real LULESH and OTF2 pairs."""
from __future__ import annotations

import warnings
from pathlib import Path

import polars as pl
import pytest

import synthtrace
from synthtrace.tracelib.merge.merge_runs import CALL_COLUMNS, MergeOptions, MergeResult, RunTables, merge_runs
from synthtrace.warehouse import merged as merged_module
from synthtrace.warehouse.layout import Warehouse
from testing.kernels import OTF2_PAIR
from testing.traces import LULESH_A, LULESH_B


def _sorted(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.sort(frame.columns, nulls_last=True)


def _assert_slim_merge_is_the_whole_merge(tmp: Path, traces: list[Path], options: MergeOptions,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    for t in traces:
        synthtrace.ingest(str(tmp / "wh"), str(t), experiment="pair")
    exp = Warehouse(tmp / "wh").experiment("pair")
    seen: list[list[RunTables]] = []

    def spy(runs, *args, **kwargs):
        seen.append(list(runs))
        return merge_runs(runs, *args, **kwargs)

    monkeypatch.setattr(merged_module, "merge_runs", spy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = merged_module.merge_stored(exp, options)
        whole: MergeResult = merge_runs(exp.run_tables(), options, experiment=exp.name)
    (runs,) = seen
    for r in runs:  # what the merge holds: the calls' columns it reads, no run id
        assert r.mpi_calls.columns == [c for c in CALL_COLUMNS if c in r.mpi_calls.columns]
        assert "run_id" not in r.bursts.columns
        assert r.mpi_calls.height > 0
    committed = {n: pl.read_parquet(exp.dir / f"{n}.parquet") for n in ("merged_bursts", "merge_matches",
                                                                           "merge_quality")}
    for name, frame in (("merged_bursts", whole.merged), ("merge_matches", whole.matches),
                        ("merge_quality", whole.quality)):
        assert committed[name].schema == frame.schema
        assert _sorted(committed[name]).equals(_sorted(frame)), name
    assert got.warnings == whole.warnings


def test_otf2_merge_of_the_columns_it_reads_is_the_whole_merge(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The real OTF2 ping-pong pair (no common counter: matched by structure and timing)."""
    _assert_slim_merge_is_the_whole_merge(tmp_path, OTF2_PAIR, MergeOptions(allow_timing_only=True), monkeypatch)


@pytest.mark.slow
def test_lulesh_merge_of_the_columns_it_reads_is_the_whole_merge(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The real LULESH pair (uncore readers: DRAM_CAS apportioned; unmatched bursts estimated, which aligns each
    run's calls again)."""
    _assert_slim_merge_is_the_whole_merge(tmp_path, [LULESH_A, LULESH_B], MergeOptions(estimate_unmatched=True),
                                          monkeypatch)
