"""How an ingest cuts a run's streamed tables into files (issue 27: every file of a run costs its commit an fsync)."""
from __future__ import annotations

import polars as pl

from synthtrace.tracelib.formats.paraver.reader import ParaverTrace
from synthtrace.tracelib.schema import THREAD_KEYS
from synthtrace.warehouse import ingest
from synthtrace.warehouse.layout import Warehouse
from testing.traces import LULESH_A, PRIME


def _stored(wh: Warehouse, run_id: str, table: str) -> tuple[list, pl.DataFrame]:
    files = sorted((wh.run_dir(run_id) / table).glob("*.parquet"))
    return files, pl.concat([pl.read_parquet(f) for f in files], how="diagonal_relaxed")


def test_a_trace_read_in_many_chunks_is_stored_in_few_files_with_its_rows_in_order(tmp_path, monkeypatch):
    """A trace read in 4 kB chunks (hundreds of parts per table) is stored as one file per table (two for the
    bursts: those that end their thread carry no counter columns), each table's rows as the reader gives them, in
    their order. Before, each part was a file of its own, and the commit flushed them to disk one by one."""
    monkeypatch.setattr(ingest, "open_trace",
                        lambda path, salvage=False: ParaverTrace(path, salvage=salvage, chunk_bytes=4096))
    wh = Warehouse(tmp_path / "wh")
    run_id = ingest.ingest_trace(wh, LULESH_A).run_id
    bursts, _, read = ParaverTrace(LULESH_A, chunk_bytes=4096).read_tables(run_id)

    files, events = _stored(wh, run_id, "events")
    assert len(files) == 1 and events.height > 10_000
    assert events.equals(read.events)
    files, uncore = _stored(wh, run_id, "uncore")
    assert len(files) == 1 and uncore.equals(read.uncore)
    files, stored = _stored(wh, run_id, "bursts")
    assert len(files) <= 2
    assert stored.sort([*THREAD_KEYS, "burst_seq"]).select(bursts.columns).equals(bursts)


def test_parts_of_other_columns_keep_their_rows(tmp_path):
    """Bursts that end their thread (no counter columns) come after the others, in a file of their own: every
    burst of the trace is stored."""
    wh = Warehouse(tmp_path / "wh")
    run_id = ingest.ingest_trace(wh, PRIME).run_id
    bursts, _, _ = ParaverTrace(PRIME).read_tables(run_id)
    files, stored = _stored(wh, run_id, "bursts")
    assert len(files) == 2
    assert stored.sort([*THREAD_KEYS, "burst_seq"]).select(bursts.columns).equals(bursts)
