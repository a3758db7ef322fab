"""Ingest cost does not grow with the runs already stored (issue 26 item 6): ingesting a trace reads the stored
rows of its own run only, never every run of the warehouse; a trace ingested before its ``.pcf`` is still replaced
by the ingest that has it, in a new warehouse and in one written before that lookup was indexed."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import polars as pl
import pytest

from synthtrace.warehouse import Warehouse
from synthtrace.warehouse.ingest import WITHOUT_PCF_INDEX, ingest_trace
from synthtrace.warehouse.programs import PROGRAM_INDEX, run_programs
from synthtrace.warehouse.runs import runs_table
from testing.stored_runs import another_run_of, warehouse_with_runs
from testing.traces import JACOBI, LULESH_A, LULESH_B, PRIME, TRACES, copy_trace


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


_opened: list[str] | None = None


def _audit(event: str, args: tuple) -> None:
    if _opened is not None and event == "open" and isinstance(args[0], (str, bytes, Path)):
        _opened.append(str(args[0]))


sys.addaudithook(_audit)


def _stored_files_read(monkeypatch, wh: Warehouse, prv: Path) -> tuple[int, str]:
    """How many files of other stored runs the ingest of ``prv`` opens (from Python or as Parquet), and its app."""
    global _opened
    read = pl.read_parquet
    with monkeypatch.context() as m:
        m.setattr(pl, "read_parquet", lambda source, *a, **k: (_opened.append(str(source)), read(source, *a, **k))[1])
        _opened = []
        try:
            res = ingest_trace(wh, prv)
        finally:
            opened, _opened = _opened, None
    assert res.status == "ingested"
    runs = str(wh.runs_dir) + "/"
    own = str(wh.run_dir(res.run_id)) + "/"
    return sum(f.startswith(runs) and not f.startswith(own) for f in opened), runs_table(wh).filter(
        pl.col("run_id") == res.run_id)["app"][0]


def test_matching_a_program_by_its_symbols_reads_as_much_with_1_or_40_runs_stored(tmp_path, monkeypatch):
    """jacobi's .pcf names no binary but its own symbols: its program is matched against the stored ones (fails on
    the scan of every stored run's program.json: 2 files read with 1 run stored, 80 with 40)."""
    prv = another_run_of(JACOBI, tmp_path / "drop", 1)
    few, few_app = _stored_files_read(monkeypatch, warehouse_with_runs(tmp_path / "one", 1), prv)
    many, many_app = _stored_files_read(monkeypatch, warehouse_with_runs(tmp_path / "forty", 40), prv)
    assert many == few, f"ingest read {few} files of stored runs with 1 run stored, {many} with 40"
    assert few_app == many_app == "jacobi-2d-imper_v0"


@pytest.mark.parametrize("indexed", [True, False], ids=["new-warehouse", "warehouse-before-the-index"])
def test_runs_of_one_program_stay_one_program_when_its_first_run_is_removed(tmp_path, indexed):
    """Runs matched by their symbols get the first run's program key and app, with or without an index written
    before, and still after that first run is removed (its index entry is then stale)."""
    wh = Warehouse(tmp_path / "wh")
    first = ingest_trace(wh, another_run_of(JACOBI, tmp_path / "a", 1), app="stencils")
    second = ingest_trace(wh, another_run_of(JACOBI, tmp_path / "b", 2))
    if not indexed:
        shutil.rmtree(wh.root / PROGRAM_INDEX)
    wh.remove(wh.run_dir(first.run_id))
    third = ingest_trace(wh, another_run_of(JACOBI, tmp_path / "c", 3))
    programs = run_programs(wh)
    apps = dict(zip(*runs_table(wh).select("run_id", "app")))
    assert programs[second.run_id] == programs[third.run_id] and programs[third.run_id].startswith("symbols:")
    assert apps[second.run_id] == apps[third.run_id] == "stencils"
    other = ingest_trace(wh, copy_trace(LULESH_B, tmp_path / "d"))  # another program (it names its binary)
    assert run_programs(wh)[other.run_id] != programs[third.run_id]


@pytest.mark.parametrize("trace", [LULESH_A, TRACES / "otf2" / "ping-pong-otf2" / "traces.otf2"], ids=["prv", "otf2"])
def test_stored_logical_messages_are_those_of_the_stored_calls(tmp_path, trace):
    """Ingest places each message in its calls once (for the calls' message columns and for mpi_messages): the
    stored mpi_messages, read as the merge reads them (``logical_messages`` over the stored table: each channel
    numbered from the run's start, ``messages.lost_at_start``), equal logical_messages computed afresh from the
    stored calls and communication records, the call that completed each receive included."""
    from synthtrace.tracelib.merge.messages import CALL_COLUMNS, logical_messages

    wh = Warehouse(tmp_path / "wh")
    run = wh.run_dir(ingest_trace(wh, trace).run_id)
    calls = pl.read_parquet(run / "mpi_calls.parquet", columns=list(CALL_COLUMNS))
    stored = pl.read_parquet(run / "mpi_messages.parquet").drop("run_id")
    fresh = logical_messages(calls, pl.read_parquet(run / "messages.parquet"))
    assert stored.height and stored["c_call_seq"].null_count() < stored.height
    assert logical_messages(calls, stored).equals(fresh)
