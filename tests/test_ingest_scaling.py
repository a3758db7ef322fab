"""Ingest cost does not grow with the runs already stored (issue 26 item 6): ingesting a trace reads the stored
rows of its own run only, never every run of the warehouse; a trace ingested before its ``.pcf`` is still replaced
by the ingest that has it, in a new warehouse and in one written before that lookup was indexed."""
from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest

from synthtrace.warehouse import Warehouse
from synthtrace.warehouse.ingest import WITHOUT_PCF_INDEX, ingest_trace
from testing.stored_runs import warehouse_with_runs
from testing.traces import PRIME, copy_trace


def _stored_rows_read(monkeypatch, wh: Warehouse, prv: Path) -> int:
    """How many stored ``run.parquet`` files the ingest of ``prv`` reads."""
    seen: list[str] = []
    read = pl.read_parquet

    def spy(source, *args, **kwargs):
        if Path(str(source)).name == "run.parquet":
            seen.append(str(source))
        return read(source, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(pl, "read_parquet", spy)
        assert ingest_trace(wh, prv).status == "ingested"
    return len(seen)


@pytest.mark.parametrize("with_pcf", [True, False], ids=["with-pcf", "without-pcf"])
def test_ingest_reads_as_many_stored_rows_with_1_or_40_runs_stored(tmp_path, monkeypatch, with_pcf):
    prv = copy_trace(PRIME, tmp_path / "drop")
    if not with_pcf:
        prv.with_suffix(".pcf").unlink()
    few = _stored_rows_read(monkeypatch, warehouse_with_runs(tmp_path / "one", 1), prv)
    many = _stored_rows_read(monkeypatch, warehouse_with_runs(tmp_path / "forty", 40), prv)
    assert many == few, f"ingest read {few} stored run rows with 1 run stored, {many} with 40"


@pytest.mark.parametrize("indexed", [True, False], ids=["new-warehouse", "warehouse-before-the-index"])
def test_trace_ingested_before_its_pcf_is_replaced_among_many_runs(tmp_path, indexed):
    wh = warehouse_with_runs(tmp_path / "wh", 5)
    prv = copy_trace(PRIME, tmp_path / "late")
    prv.with_suffix(".pcf").unlink()
    bare = ingest_trace(wh, prv)
    assert any("no .pcf file" in w for w in bare.warnings)
    if not indexed:
        shutil.rmtree(wh.root / WITHOUT_PCF_INDEX)
    shutil.copyfile(PRIME.with_suffix(".pcf"), prv.with_suffix(".pcf"))
    named = ingest_trace(wh, prv)
    assert named.replaced == [bare.run_id] and not wh.has_run(bare.run_id) and wh.has_run(named.run_id)
    assert len(list(wh.runs_dir.glob("*/run.parquet"))) == 6
