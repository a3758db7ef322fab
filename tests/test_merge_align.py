"""The alignment on per-message facts (issue 22 items 2 and 3): which call completed a receive, the work on an
arrived message paired by that message, iterations placed by the logical messages a thread sends and receives."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from synthtrace.tracelib.merge.anchors import force_pairs
from synthtrace.tracelib.merge.messages import logical_messages

ROOT = Path(__file__).resolve().parents[1]
LULESH = ROOT.parent / "shared" / "traces" / "paraver" / "lulesh_4+4_with_uncores_sockets1+2.chop_5it.prv"


@pytest.mark.skipif(not LULESH.is_file(), reason="real traces not found")
def test_lulesh_records_name_the_wait_that_completed_each_receive():
    """Extrae records a receive at its MPI_Irecv (logical time) and at the exit of the call that completed it
    (physical time): the logical message keeps both calls. Fails on the old code (no completing call)."""
    from synthtrace.tracelib.formats.paraver.reader import ParaverTrace

    _, calls, summary = ParaverTrace(LULESH).read_tables("a")
    m = logical_messages(calls, summary.messages)
    assert m.get_column("c_call_seq").null_count() == 0
    names = calls.select(pl.col("task").cast(pl.Int32).alias("receiver"), pl.col("thread").cast(pl.Int32),
                         "call_seq", "mpi_call")
    posted = m.join(names, left_on=["receiver", "r_thread", "r_call_seq"], right_on=["receiver", "thread", "call_seq"])
    done = m.join(names, left_on=["receiver", "r_thread", "c_call_seq"], right_on=["receiver", "thread", "call_seq"])
    assert set(posted.get_column("mpi_call")) == {"MPI_Irecv"}
    assert set(done.get_column("mpi_call")) <= {"MPI_Wait", "MPI_Waitall", "MPI_Waitany", "MPI_Waitsome"}
    assert (m.get_column("c_call_seq") > m.get_column("r_call_seq")).all()  # completed after it was posted


def test_logical_messages_without_physical_times_complete_at_the_receiving_call():
    """A trace that records the receive in the call that completed it (OTF2, or no physical time) names that call."""
    calls = pl.DataFrame({
        "appl": [1, 1, 1], "task": [1, 2, 2], "thread": [1, 1, 1], "call_seq": [0, 0, 1],
        "mpi_call": ["MPI_Send", "MPI_Barrier", "MPI_Recv"], "start_ns": [100, 50, 150], "end_ns": [120, 60, 200],
        "bytes_sent": [64, None, None], "bytes_recv": [None, None, 64], "peer": [2, None, 1],
        "n_messages": [1, None, 1], "comm": [None, None, None], "tag": [7, None, 7]})
    records = pl.DataFrame({"s_appl": [1], "s_task": [1], "s_thread": [1], "s_time_ns": [110], "r_appl": [1],
                            "r_task": [2], "r_thread": [1], "r_time_ns": [190], "size": [64], "tag": [7]})
    m = logical_messages(calls, records)
    assert m.select("s_call_seq", "r_call_seq", "c_call_seq").row(0) == (0, 1, 1)


def test_forced_pairs_trade_places_with_what_held_them():
    """Three bursts that worked on messages completed in another order: each takes its message's burst, and the
    bursts it displaced take the freed ones; no other row is matched twice."""
    out = np.array([0, 1, 2, 3, -1, 5])
    got = force_pairs(out, np.array([1, 2, 3]), np.array([2, 3, 1]))
    assert got.tolist() == [0, 2, 3, 1, -1, 5]
    # a pair onto an unmatched row frees the row it held
    got = force_pairs(np.array([0, 1, -1]), np.array([1]), np.array([2]))
    assert got.tolist() == [0, 2, -1]
    assert np.unique(got[got >= 0]).size == (got >= 0).sum()
