"""The ideal-network replay (issue 25 item 3): MPI semantics on hand-made timelines, and on the real traces."""
from __future__ import annotations

import polars as pl
import pytest

from synthtrace.tracelib.domain.replay import Network, ReplayInputError, replay
from testing.traces import LULESH_A, LULESH_B, PRIME

CALL_SCHEMA = {"appl": pl.Int32, "task": pl.Int32, "thread": pl.Int32, "call_seq": pl.Int64, "mpi_call": pl.String,
               "start_ns": pl.Int64, "end_ns": pl.Int64, "comm": pl.Int64, "bytes_sent": pl.Int64,
               "bytes_recv": pl.Int64}
MSG_SCHEMA = {"s_appl": pl.Int32, "s_task": pl.Int32, "s_thread": pl.Int32, "s_time_ns": pl.Int64,
              "r_appl": pl.Int32, "r_task": pl.Int32, "r_thread": pl.Int32, "r_time_ns": pl.Int64, "size": pl.Int64}


def calls(*rows: tuple) -> pl.DataFrame:
    """(task, call, start, end[, bytes]) rows of appl 1 thread 1; call_seq in order per task."""
    out = []
    for task, call, start, end, *rest in rows:
        seq = sum(1 for r in out if r["task"] == task)
        out.append({"appl": 1, "task": task, "thread": 1, "call_seq": seq, "mpi_call": call, "start_ns": start,
                    "end_ns": end, "comm": 1, "bytes_sent": rest[0] if rest else 0, "bytes_recv": 0})
    return pl.DataFrame(out, schema=CALL_SCHEMA)


def message(s_task: int, s_time: int, r_task: int, r_time: int, size: int = 0) -> dict:
    return {"s_appl": 1, "s_task": s_task, "s_thread": 1, "s_time_ns": s_time, "r_appl": 1, "r_task": r_task,
            "r_thread": 1, "r_time_ns": r_time, "size": size}


def ends(**task_end: int) -> pl.DataFrame:
    return pl.DataFrame([{"appl": 1, "task": int(k[1:]), "thread": 1, "end_ns": v} for k, v in task_end.items()],
                        schema={"appl": pl.Int32, "task": pl.Int32, "thread": pl.Int32, "end_ns": pl.Int64})


def thread_end(res, task: int) -> int:
    return res.threads.filter(pl.col("task") == task)["end_ns"].item()


def test_a_receive_waits_for_its_send_and_nothing_else_waits():
    # rank 1 computes 1000 ns then sends; rank 2 posts its receive at 100 and waited 900 ns in the trace for it
    c = calls((1, "MPI_Isend", 1000, 1010), (2, "MPI_Recv", 100, 1050))
    m = pl.DataFrame([message(1, 1005, 2, 100, 8)], schema=MSG_SCHEMA)
    res = replay(c, m, ends(t1=1200, t2=1300))
    # rank 2 leaves its receive when the data are sent (1000: calls cost nothing), then computes its 250 ns tail
    assert thread_end(res, 2) == 1000 + 250
    # the sender never waits: its computation is replayed as recorded, its MPI time disappears
    assert thread_end(res, 1) == 1000 + 190
    assert res.runtime_ns == 1250 and res.n_released == 0


def test_a_blocking_send_is_a_rendezvous_and_an_isend_is_not():
    # rank 1 sends at 100; rank 2 posts the receive only at 1000
    for call, sender_leaves in (("MPI_Send", 1000), ("MPI_Isend", 100)):
        c = calls((1, call, 100, 110), (2, "MPI_Recv", 1000, 1010))
        m = pl.DataFrame([message(1, 105, 2, 1005)], schema=MSG_SCHEMA)
        res = replay(c, m, ends(t1=110, t2=1010))
        assert res.calls.filter(pl.col("task") == 1)["end_ns"].item() == sender_leaves, call


def test_a_nonblocking_receive_completes_at_the_wait_after_it():
    # rank 2 posts an Irecv at 10, computes until 500, waits; the send happens at 800
    c = calls((1, "MPI_Isend", 800, 805), (2, "MPI_Irecv", 10, 12), (2, "MPI_Wait", 500, 900))
    m = pl.DataFrame([message(1, 802, 2, 11)], schema=MSG_SCHEMA)
    res = replay(c, m, ends(t1=805, t2=950))
    wait = res.calls.filter((pl.col("task") == 2) & (pl.col("mpi_call") == "MPI_Wait"))
    assert wait["start_ns"].item() == 10 + 488  # the Irecv costs nothing, the computation before the wait stays
    assert wait["end_ns"].item() == 800  # the data are there when sent
    assert thread_end(res, 2) == 850


def test_a_collective_ends_when_the_last_rank_arrives():
    c = calls((1, "MPI_Allreduce", 300, 900), (2, "MPI_Allreduce", 800, 905), (3, "MPI_Allreduce", 100, 910))
    res = replay(c, None, ends(t1=1000, t2=1000, t3=1000))
    assert res.calls["end_ns"].to_list() == [800, 800, 800]
    assert res.n_collectives == 1
    # on a network: ceil(log2 3) = 2 stages of fan-in and fan-out, each one latency (no bytes)
    net = replay(c, None, ends(t1=1000, t2=1000, t3=1000), Network.of(latency_us=1.0, bandwidth_gbs=10.0))
    assert net.calls["end_ns"].to_list() == [800 + 4 * 1000] * 3


def test_a_network_adds_latency_and_bytes_over_bandwidth():
    c = calls((1, "MPI_Isend", 0, 5), (2, "MPI_Recv", 0, 5000))
    m = pl.DataFrame([message(1, 2, 2, 1, 10_000)], schema=MSG_SCHEMA)
    res = replay(c, m, ends(t1=5, t2=5000), Network.of(latency_us=2.0, bandwidth_gbs=5.0))
    assert thread_end(res, 2) == 2000 + 10_000 / 5


def test_a_collective_only_some_ranks_reach_in_a_cut_trace_waits_for_those_only():
    # the trace ends before rank 2's second Barrier: the one rank 1 reaches waits for nobody
    c = calls((1, "MPI_Barrier", 100, 200), (1, "MPI_Barrier", 300, 400), (2, "MPI_Barrier", 150, 200))
    res = replay(c, None, ends(t1=400, t2=200))
    assert res.calls["end_ns"].to_list() == [150, 250, 150]
    assert res.runtime_ns == 250 and res.n_released == 0


def test_head_to_head_blocking_sends_are_released_not_hung():
    # both ranks MPI_Send first (the real run got through: the library sent eagerly); as rendezvous they deadlock
    c = calls((1, "MPI_Send", 100, 110), (1, "MPI_Recv", 120, 130), (2, "MPI_Send", 200, 210),
              (2, "MPI_Recv", 220, 230))
    m = pl.DataFrame([message(1, 105, 2, 225), message(2, 205, 1, 125)], schema=MSG_SCHEMA)
    res = replay(c, m, ends(t1=130, t2=230))
    assert res.n_released >= 1
    assert res.runtime_ns >= 200


def test_calls_without_their_columns_are_refused():
    with pytest.raises(ReplayInputError, match="start_ns"):
        replay(calls((1, "MPI_Barrier", 1, 2)).drop("start_ns"), None, ends(t1=3))


@pytest.fixture(scope="module")
def real_runs():
    from synthtrace.tracelib.formats.source import open_trace

    out = {}
    for prv in (LULESH_A, LULESH_B, PRIME):
        stem = prv.stem
        src = open_trace(prv)
        bursts, mpi, summary = src.read_tables("r")
        out[stem] = (src.resources["duration_ns"], bursts, mpi, summary.messages)
    return out


def _thread_ends(bursts: pl.DataFrame, mpi: pl.DataFrame) -> pl.DataFrame:
    return (pl.concat([bursts.select("appl", "task", "thread", "end_ns"), mpi.select("appl", "task", "thread",
                                                                                     "end_ns")])
            .group_by("appl", "task", "thread").agg(pl.col("end_ns").max()))


@pytest.mark.real_traces
def test_the_ideal_replay_of_real_traces_lies_between_the_useful_time_and_the_runtime(real_runs):
    for stem, (runtime, bursts, mpi, messages) in real_runs.items():
        res = replay(mpi, messages, _thread_ends(bursts, mpi))
        useful_max = bursts.group_by("task", "thread").agg(pl.col("duration_ns").sum())["duration_ns"].max()
        assert useful_max <= res.runtime_ns <= runtime, stem
        assert res.n_released == 0, stem
        assert res.n_messages == messages.height, stem  # every communication record was paired to its calls


@pytest.mark.real_traces
def test_replayed_on_the_recorded_network_the_runtime_is_the_traced_one_within_10_percent(real_runs):
    # one Skylake-SP node (LULESH: shared-memory MPI, ~0.5 us, ~10 GB/s); FinisTerrae II (prime): InfiniBand FDR
    networks = {"lulesh": Network.of(0.5, 10.0), "prime": Network.of(1.5, 6.0)}
    for stem, (runtime, bursts, mpi, messages) in real_runs.items():
        res = replay(mpi, messages, _thread_ends(bursts, mpi), networks[stem.split("_")[0]])
        assert abs(res.runtime_ns - runtime) / runtime < 0.10, (stem, res.runtime_ns, runtime)


def test_a_receive_recorded_at_the_wait_that_completed_it_completes_there():
    # OTF2-style: the receive's record is in the MPI_Wait that completed it, not at the MPI_Irecv
    c = calls((1, "MPI_Isend", 800, 805), (2, "MPI_Irecv", 10, 12), (2, "MPI_Wait", 500, 900),
              (2, "MPI_Wait", 1000, 1010))
    m = pl.DataFrame([message(1, 802, 2, 899)], schema=MSG_SCHEMA)
    res = replay(c, m, ends(t1=805, t2=1100))
    waits = res.calls.filter((pl.col("task") == 2) & (pl.col("mpi_call") == "MPI_Wait"))
    assert waits["end_ns"].to_list() == [800, 900]  # the first wait waits for the data, the second for nothing


def test_a_receive_polled_with_testall_completes_at_the_first_test_after_the_send():
    # the simulator's halo: Irecv, then a loop of MPI_Testall polls until the data are there
    c = calls((1, "MPI_Isend", 395, 397), (2, "MPI_Irecv", 10, 12), (2, "MPI_Testall", 100, 102),
              (2, "MPI_Testall", 200, 202), (2, "MPI_Testall", 300, 302), (2, "MPI_Testall", 400, 402))
    m = pl.DataFrame([message(1, 396, 2, 11)], schema=MSG_SCHEMA)
    res = replay(c, m, ends(t1=397, t2=500))
    assert res.n_released == 0
    tests = res.calls.filter(pl.col("mpi_call") == "MPI_Testall")
    # the computation between polls is replayed as recorded (98 ns each, the polls cost nothing); the poll that
    # found the data (the first ending after the send) waits for it, the Irecv itself does not
    assert tests["end_ns"].to_list() == [98, 196, 294, 395]
