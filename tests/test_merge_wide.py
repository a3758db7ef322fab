"""A merge of runs whose bursts each sample one of many counter types holds a bounded number of cells whatever the
number of types (issue 23, attack 18 F2: two such runs of 10,000 bursts and 4,096 types, 0.85 MB of trace each,
took 2.2 GB to merge, every run read whole as bursts x counter types Int64 cells), and merges as the whole tables
do."""
from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import polars as pl
import pytest

import synthtrace
from synthtrace.tracelib.merge import blocks
from synthtrace.tracelib.merge.merge_runs import MergeOptions, merge_runs
from synthtrace.warehouse import merged as merged_module
from synthtrace.warehouse import parts as parts_module
from synthtrace.warehouse import runs as runs_module
from synthtrace.warehouse.errors import RunsChangedError
from synthtrace.warehouse.layout import Warehouse
from testing.stored_runs import whole_run_tables

BURSTS = 600
#: columns of a burst besides its counters (keys, times, call, site, cpu) and a margin
NARROW = 16


def wide_pair(folder: Path, n: int, types: int, gap: int = 0) -> Path:
    """Two one-thread runs of ``n`` bursts of one program, burst i of run r sampling counter type 42000000 +
    r * types / 2 + i % ``types`` (half the types in common), with values that differ between the runs; with
    ``gap``, every ``gap``-th burst of run 1 is left out (its time idle): run 0's has no match there."""
    folder.mkdir()
    for r in (0, 1):
        with (folder / f"a.run{r}.prv").open("wb") as f:
            f.write(b"#Paraver (01/01/26 at 00:00):%d_ns:1(1):1:1(1:1)\n" % (10 * n + 10))
            for i in range(n):
                if r and gap and i % gap == gap // 2:
                    continue
                f.write(b"1:1:1:1:1:%d:%d:1\n2:1:1:1:1:%d:%d:%d\n1:1:1:1:1:%d:%d:0\n"
                        % (10 * i, 10 * i + 5, 10 * i + 2, 42000000 + r * (types // 2) + i % types,
                           (i + 1) * (r + 1) + i % 7, 10 * i + 5, 10 * i + 10))
    return folder


@pytest.mark.parametrize(("types", "estimate"), [(64, False), (64, True),
                                                  pytest.param(512, False, marks=pytest.mark.slow)])
def test_wide_runs_merge_in_blocks_of_bounded_cells(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   types: int, estimate: bool) -> None:
    """Every frame the merge reads from the runs' scans holds at most a block of cells beyond a few columns per
    burst, with 64 counter types as with 512 (the whole runs: 600 bursts x ~520 columns), and with the unmatched
    bursts estimated (``--estimate-unmatched``: bursts of run 0 without a match); the committed merge is the merge
    of the whole tables."""
    traces = wide_pair(tmp_path / "w", BURSTS, types, gap=40 if estimate else 0)
    synthtrace.ingest(str(tmp_path / "wh"), str(traces), experiment="w")
    exp = Warehouse(tmp_path / "wh").experiment("w")
    options = MergeOptions(estimate_unmatched=estimate)
    monkeypatch.setattr(blocks, "BLOCK_CELLS", 20_000)
    seen: list[tuple[int, int]] = []
    collect, merging = pl.LazyFrame.collect, [False]

    def spy_collect(self, *args, **kwargs):
        got = collect(self, *args, **kwargs)
        if merging[0]:
            seen.append(got.shape)
        return got

    def spy_merge(*args, **kwargs):
        merging[0] = True
        try:
            return merge_runs(*args, **kwargs)
        finally:
            merging[0] = False

    monkeypatch.setattr(pl.LazyFrame, "collect", spy_collect)
    monkeypatch.setattr(merged_module, "merge_runs", spy_merge)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        merged_module.merge_stored(exp, options)
        monkeypatch.undo()
        whole = merge_runs(whole_run_tables(exp), options, experiment=exp.name)
    assert whole.merged.get_column("estimated").any() == estimate
    assert seen
    assert max(h * w for h, w in seen) <= 20_000 + BURSTS * NARROW, max(seen, key=lambda s: s[0] * s[1])
    assert whole.merged.width > types  # a column per counter of either run
    for name, frame in (("merged_bursts", whole.merged), ("merge_matches", whole.matches),
                        ("merge_quality", whole.quality)):
        committed = pl.read_parquet(exp.dir / f"{name}.parquet")
        assert committed.schema == frame.schema, name
        assert committed.sort(committed.columns, nulls_last=True).equals(frame.sort(frame.columns, nulls_last=True))


def test_gathered_rows_are_the_rows_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows of a scan read a window at a time are the rows asked for, in order, NULL for a NULL row number."""
    frame = pl.DataFrame({"a": range(100), "b": [str(i) for i in range(100)]})
    rows = pl.Series([5, None, 99, 0, 5, 42, 43, None, 7], dtype=pl.Int64)
    for cells in (1, 10, 1_000):
        monkeypatch.setattr(blocks, "BLOCK_CELLS", cells)
        got = blocks.gathered(frame.lazy(), rows, ["b", "a"])
        assert got.equals(frame.select("b", "a")[[5, 0, 99, 0, 5, 42, 43, 0, 7]].with_columns(
            pl.when(rows.is_null()).then(None).otherwise(pl.all()).name.keep())), cells


def test_a_wide_runs_copy_holds_a_block_of_cells_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The merge's copy of a stored run (``runs.run_bursts_to``) reads its parts a block of at most
    ``BLOCK_CELLS`` cells at a time and writes row groups sized for its width (``blocks.group_rows``), not by
    Polars' sink of the union of its parts (issue 23: 2.7 GB for a run of 150,000 bursts of 4,096 counter types),
    and the copy is the run's bursts."""
    import pyarrow.parquet as pq

    synthtrace.ingest(str(tmp_path / "wh"), str(wide_pair(tmp_path / "w", BURSTS, 64)), experiment="w")
    exp = Warehouse(tmp_path / "wh").experiment("w")
    monkeypatch.setattr(blocks, "BLOCK_CELLS", 2_000)
    read: list[tuple[int, int]] = []
    written: list[tuple[int, int]] = []
    batches, write = pq.ParquetFile.iter_batches, pq.ParquetWriter.write_table

    def spy_batches(self, *args, **kwargs):
        for b in batches(self, *args, **kwargs):
            read.append((b.num_rows, b.num_columns))
            yield b

    def spy_write(self, table, *args, **kwargs):
        written.append((table.num_rows, table.num_columns))
        return write(self, table, *args, **kwargs)

    def no_sink(*args, **kwargs):
        raise AssertionError("a wide run copied by Polars' sink of its parts' union")

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy_batches)
    monkeypatch.setattr(pq.ParquetWriter, "write_table", spy_write)
    monkeypatch.setattr(pl.LazyFrame, "sink_parquet", no_sink)
    out, spill = tmp_path / "copy.parquet", tmp_path / "spill"
    spill.mkdir()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        merged_module.merge_inputs(exp, spill)  # the copy of each run into an empty folder
        assert runs_module.run_bursts_to(exp.wh, exp.run_ids[0], out)
    width = len(pl.read_parquet_schema(out))
    rows = blocks.group_rows(BURSTS, width)
    monkeypatch.undo()
    assert read and written
    assert max(r * c for r, c in read) <= 2_000, max(read, key=lambda t: t[0] * t[1])
    assert max(r for r, _ in written) <= rows < BURSTS, (written, rows)
    stored = exp.bursts(exp.run_ids[0]).drop("run_id")
    assert stored.width > 64
    assert pl.read_parquet(out).equals(stored)


def test_a_run_removed_while_it_is_copied_is_said_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run removed (``runs rm``) after the merge's copy listed its parts is RunsChangedError, the one line that
    says to merge again, not a file-not-found error of Polars or pyarrow."""
    synthtrace.ingest(str(tmp_path / "wh"), str(wide_pair(tmp_path / "w", 50, 8)), experiment="w")
    exp = Warehouse(tmp_path / "wh").experiment("w")
    check = parts_module.check_parts

    def check_then_remove(paths, *args, **kwargs):
        check(paths, *args, **kwargs)
        shutil.rmtree(exp.wh.run_dir(exp.run_ids[0]))

    monkeypatch.setattr(parts_module, "check_parts", check_then_remove)
    (tmp_path / "spill").mkdir()
    with pytest.raises(RunsChangedError, match="removed while it was read"):
        merged_module.merge_inputs(exp, tmp_path / "spill")


def test_the_reference_is_read_narrow_once_and_no_folder_is_made_unused(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A blockwise merge reads the reference's narrow columns from its wide scan once, not again after each other
    run's alignment and for the merged rows; a merge that writes no choice sample of a run (its runs given as
    frames, read whole) makes no folder for it."""
    from synthtrace.tracelib.merge import merge_runs as merge_module

    synthtrace.ingest(str(tmp_path / "wh"), str(wide_pair(tmp_path / "w", 200, 16)), experiment="w")
    exp = Warehouse(tmp_path / "wh").experiment("w")
    reads: list[str] = []
    narrow_read = merge_module.narrow_read

    def spy(run, *args, **kwargs):
        reads.append(run.run_id)
        return narrow_read(run, *args, **kwargs)

    monkeypatch.setattr(merge_module, "narrow_read", spy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = merged_module.merge_stored(exp, MergeOptions())
        assert reads.count(result.reference_run_id) == 1, reads
        spill = tmp_path / "spill"
        spill.mkdir()
        merge_runs(whole_run_tables(exp), MergeOptions(), experiment=exp.name, spill=spill)
    assert not [p.name for p in spill.iterdir() if p.is_dir()]


def test_a_wide_runs_counters_are_counted_a_few_columns_a_pass(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Which counters a run's copy recorded, and how many values each (the reference's), are streamed at most
    ``WIDE_COLUMNS`` columns a pass (issue 23: one pass over the 4,106 columns of a run of 150,000 bursts decoded
    several of its row groups of 5,152 rows x 4,106 columns at once, 1.1 GB), and are what the whole table says;
    so are the partitioned merge's counters of the stored run (:meth:`StoredRun.counters`, over its parts)."""
    from synthtrace.tracelib.merge import merge_runs as merge_module

    synthtrace.ingest(str(tmp_path / "wh"), str(wide_pair(tmp_path / "w", 200, 64)), experiment="w")
    exp = Warehouse(tmp_path / "wh").experiment("w")
    spill = tmp_path / "spill"
    spill.mkdir()
    run = merged_module.merge_inputs(exp, spill)[0]
    whole = merge_module.RunTables(run.run_id, run.run_name, run.bursts.collect(), run.mpi_calls)
    monkeypatch.setattr(merge_module, "WIDE_COLUMNS", 16)
    widths: list[int] = []
    collect = pl.LazyFrame.collect

    def spy(self, *args, **kwargs):
        got = collect(self, *args, **kwargs)
        widths.append(got.width)
        return got

    monkeypatch.setattr(pl.LazyFrame, "collect", spy)
    counters = run.counters
    recorded = merge_module.Recorded.scanned(run.bursts, counters, 0)
    stored = merged_module.StoredRun(exp.wh, run.run_id, run.run_name).counters()
    monkeypatch.undo()
    assert len(counters) == 64 and widths and max(widths) <= 16, widths
    assert counters == whole.counters == stored
    assert recorded == merge_module.Recorded.of(whole.bursts, counters, pl.repeat(True, 200, eager=True))
