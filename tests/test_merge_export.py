"""The merged trace written back as Paraver a window of time at a time (issue 23: ``merge --export-prv`` held the
merged bursts, the reference run's calls and its events whole): the files read from lazy Parquet scans in windows
smaller than the trace are byte for byte those written from the whole tables in one window, on the real LULESH and
OTF2 pairs and on a generated campaign."""
from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest

import synthtrace
from synthtrace.tracelib.formats.paraver import writer
from synthtrace.tracelib.merge.merge_runs import MergeOptions
from synthtrace.tracelib.merge.partitioned import PartedTable
from synthtrace.warehouse.layout import Warehouse
from synthtrace.warehouse.merged import export_merged, merge_stored
from testing.simulator_campaigns import simulated
from testing.kernels import OTF2_PAIR
from testing.traces import LULESH_A, LULESH_B

SUFFIXES = (".prv", ".pcf", ".row")


def _merged(tmp: Path, traces: list[Path]) -> tuple[Warehouse, str]:
    """The traces ingested as one experiment and merged (committed)."""
    for t in traces:
        synthtrace.ingest(str(tmp / "wh"), str(t), experiment="pair")
    wh = Warehouse(tmp / "wh")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        merge_stored(wh.experiment("pair"), MergeOptions())
    return wh, "pair"


def _export(wh: Warehouse, name: str, out: Path, monkeypatch: pytest.MonkeyPatch,
            tables: Callable[[pl.DataFrame | pl.LazyFrame | None], object], rows_per_window: int) -> bytes:
    """``export_merged`` of the committed merge with the writer's tables passed through ``tables`` and windows of
    ``rows_per_window`` records; the three files' bytes."""
    real = writer.write_paraver

    def write(stem, bursts, calls, meta, **kw):
        return real(stem, tables(bursts), tables(calls), meta,
                    **{**kw, "events": tables(kw.get("events")), "rows_per_window": rows_per_window})

    monkeypatch.setattr(writer, "write_paraver", write)
    exp = wh.experiment(name)
    quality = pl.read_parquet(exp.dir / "merge_quality.parquet")
    from synthtrace.tracelib.merge.merge_runs import MergeResult
    result = MergeResult(name, exp.reference_run_id(), "", PartedTable([exp.dir / "merged_bursts.parquet"]),
                         quality, pl.DataFrame())
    prv = export_merged(exp, result, out)
    monkeypatch.setattr(writer, "write_paraver", real)
    return b"".join(prv.with_suffix(s).read_bytes() for s in SUFFIXES)


def _whole(t):
    return t.collect() if isinstance(t, pl.LazyFrame) else t


def _lazy(t):
    return t.lazy() if t is not None else None


def _assert_windowed_export_is_whole(wh: Warehouse, name: str, tmp: Path, monkeypatch: pytest.MonkeyPatch,
                                     window: int, states: bool = True) -> None:
    bursts = pl.scan_parquet(wh.experiment(name).dir / "merged_bursts.parquet").select(pl.len()).collect().item()
    assert window < bursts  # several windows
    whole = _export(wh, name, tmp / "whole" / "m", monkeypatch, _whole, 10**12)
    windowed = _export(wh, name, tmp / "windowed" / "m", monkeypatch, _lazy, window)
    assert windowed == whole
    if states:  # a state record per burst at least
        assert whole.count(b"\n1:") >= bursts


@pytest.mark.slow
def test_lulesh_export_in_windows_from_scans_is_the_whole_export(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The real LULESH pair (MPI calls, caller and counter events, uncore readers): in windows of 300 records
    from scans, the same .prv/.pcf/.row as from the whole tables."""
    wh, name = _merged(tmp_path, [LULESH_A, LULESH_B])
    _assert_windowed_export_is_whole(wh, name, tmp_path, monkeypatch, 300)


def test_otf2_export_in_windows_from_scans_is_the_whole_export(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The real OTF2 ping-pong pair (resources from the bursts' layout, no Paraver source): the same files.
    (Its bursts have no cpu, so the writer leaves out their state records, before as now.)"""
    wh, name = _merged(tmp_path, OTF2_PAIR)
    _assert_windowed_export_is_whole(wh, name, tmp_path, monkeypatch, 10, states=False)


@pytest.mark.slow
def test_generated_campaign_export_in_windows_is_the_whole_export(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A simulated campaign (the mechanisms generator: completion order differs between runs) merged and
    exported in windows: the same files."""
    c = simulated("completion", 0, tmp_path / "sim", ranks=4, iterations=6)
    wh, name = _merged(tmp_path, list(c.traces))
    _assert_windowed_export_is_whole(wh, name, tmp_path, monkeypatch, 200)
