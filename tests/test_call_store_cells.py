"""Issue 23: MPI calls of many counter types, each call sampling a few (the reader's parts of calls are bounded
since attack 17 F3) were joined into spilled parts of every row x every counter seen and widened whole to every
counter before the sink: 1,000,000 calls each with one sample of one of 4,096 types took 1.5 GB to ingest. The
calls the store spills and hands to the sink now hold at most ``MAX_PART_CELLS`` cells (rows x counter columns,
NULL or not) whatever the counter types, and are the calls of an in-memory read."""
from __future__ import annotations

from pathlib import Path

import polars as pl

from synthtrace.tracelib.formats import bursts, call_store
from synthtrace.tracelib.formats.paraver.reader import ParaverTrace
from synthtrace.tracelib.schema import counter_columns

CELLS = 20_000


def _calls(tmp_path: Path, n_calls: int, n_types: int) -> Path:
    """One thread, ``n_calls`` MPI_Allreduce (5 ns, running 5 ns after), call i with one sample of counter type
    42000000 + i % ``n_types`` (value i + 1) at its exit."""
    body = b"".join(b"2:1:1:1:1:%d:50000002:10\n2:1:1:1:1:%d:50000002:0:%d:%d\n1:1:1:1:1:%d:%d:1\n"
                    % (10 * i, 10 * i + 5, 42000000 + i % n_types, i + 1, 10 * i + 5, 10 * i + 10)
                    for i in range(n_calls))
    prv = tmp_path / "calls.prv"
    prv.write_bytes(b"#Paraver (01/01/26 at 00:00):%d_ns:1(1):1:1(1:1)\n" % (10 * n_calls + 10) + body)
    return prv


def _cells(frame: pl.DataFrame) -> int:
    return frame.height * len(counter_columns(frame))


def test_calls_of_many_counter_types_are_spilled_and_sunk_in_bounded_parts(tmp_path, monkeypatch):
    """3,000 calls, each one sample of one of 512 counter types, spilled from the first call: the calls held were
    joined into one part of 3,000 x 512 cells and every part widened whole to the 512 counters before the sink."""
    prv = _calls(tmp_path, 3000, 512)
    memory = ParaverTrace(prv).read("r")
    for _ in memory:
        pass
    expected = memory.summary.calls.collect()

    sunk: list[pl.DataFrame] = []
    attach = call_store.with_message_columns

    def spy(frame, columns):
        sunk.append(frame)
        return attach(frame, columns)

    monkeypatch.setattr(bursts, "MAX_PART_CELLS", CELLS)
    monkeypatch.setattr(call_store, "MAX_PART_CELLS", CELLS, raising=False)
    monkeypatch.setattr(call_store, "HOLD_BYTES", 0)
    monkeypatch.setattr(call_store, "with_message_columns", spy)
    spill = tmp_path / "_calls"
    stream = ParaverTrace(prv).read("r", spill=spill)
    for _ in stream:
        pass
    calls = stream.summary.calls.collect()

    spilled = [pl.read_parquet(f) for f in sorted(spill.iterdir())]
    assert len(spilled) > 1 and max(map(_cells, spilled)) <= CELLS, [f.shape for f in spilled]
    assert len(sunk) > 1 and max(map(_cells, sunk)) <= CELLS, [f.shape for f in sunk]
    assert sum(f.height for f in sunk) == 3000
    names = counter_columns(calls)
    assert len(names) == 512 and names == sorted(names) and calls.columns == expected.columns
    assert calls.equals(expected)
    assert calls.select(pl.sum_horizontal(names)).to_series().to_list() == list(range(1, 3001))


def test_many_counter_types_are_stored_without_holding_their_nulls(tmp_path, monkeypatch, run_cli):
    """The same calls ingested: mpi_calls.parquet is written in row groups that hold each part's sampled columns
    only (polars' sink held every row x every counter of its row group), and is the file polars' sink writes:
    same columns in the same order, same types, same values."""
    from synthtrace.warehouse import ingest

    prv = _calls(tmp_path, 3000, 512)
    held: list[int] = []
    group = ingest._row_group

    def spy(parts, schema):
        held.append(sum(p.num_rows * p.num_columns for p in parts))
        return group(parts, schema)

    monkeypatch.setattr(bursts, "MAX_PART_CELLS", CELLS)
    monkeypatch.setattr(call_store, "MAX_PART_CELLS", CELLS, raising=False)
    monkeypatch.setattr(ingest, "CALL_ROW_GROUP_ROWS", 1000)
    monkeypatch.setattr(ingest, "_row_group", spy, raising=False)
    stored = {}
    for side, most in (("sparse", 64), ("sink", 10**6)):
        monkeypatch.setattr(ingest, "SPARSE_CALL_COUNTERS", most)
        code, _, err = run_cli("ingest", prv, "-w", tmp_path / side)
        assert code == 0, err
        stored[side] = pl.read_parquet(next((tmp_path / side).rglob("mpi_calls.parquet")))
    assert len(held) == 3 and max(held) <= 1040 * (19 + 40), held  # rows x (fixed + counters of a part)
    sparse, sink = stored["sparse"], stored["sink"]
    assert sparse.height == 3000 and sparse.width == 19 + 512
    assert sparse.schema == sink.schema and sparse.equals(sink)
