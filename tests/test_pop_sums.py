"""Attack 19 F2, F8, F11: sums past int64 that 0df8f17 (tracelib/domain/sums.py) did not reach. A thread's sent
bytes, or its overlapping bursts, were summed per thread in Int64 and wrapped before the totals' checks saw them
(phase_metrics.network_bytes -4.6e18, pop's parallel efficiency -100 %); a run's useful time past int64, stored
NULL, emptied the ratios divided by it (coverage, useful instructions, global efficiency) and pop blamed the
counters. Every level is a float sum now, ratios are of the float sums, stored Int64 values exact or NULL."""
from __future__ import annotations

import json

import polars as pl
import pytest

from synthtrace.tracelib.domain.machine import load_machine
from synthtrace.tracelib.domain.metrics import mpi_metrics
from synthtrace.tracelib.domain.pop import POP_METRICS_SCHEMA, pop_scaling
from testing.traces import written_trace

T = 2**62


def _sql(run_cli, wh, query: str) -> list[dict]:
    code, out, err = run_cli("sql", query, "-w", wh, "-f", "json")
    assert code == 0, err
    return json.loads(out)


def _ingest(run_cli, folder, wh) -> None:
    code, _, err = run_cli("ingest", folder, "-w", wh)
    assert code == 0, err


def test_a_thread_s_sent_bytes_past_int64_are_summed_not_wrapped(tmp_path, run_cli):
    """F2: task 1 sends three messages of 2^62 bytes (three MPI_Send, each within int64) in one phase: the
    phase's network_bytes was -4.6e18 (Int64 sum per thread, cast after it wrapped)."""
    n = 3
    lines = [b"1:1:1:1:1:0:100:1\n", b"1:2:1:2:1:0:10000:1\n"]
    t, r = 100, 10000
    for _ in range(n):
        lines += [b"2:1:1:1:1:%d:50000001:1\n" % t,
                  b"3:1:1:1:1:%d:%d:2:1:2:1:%d:%d:%d:1\n" % (t + 5, t + 5, r + 5, r + 5, T),
                  b"2:1:1:1:1:%d:50000001:0\n" % (t + 20), b"1:1:1:1:1:%d:%d:1\n" % (t + 20, t + 30),
                  b"2:2:1:2:1:%d:50000001:2\n" % r, b"2:2:1:2:1:%d:50000001:0\n" % (r + 20),
                  b"1:2:1:2:1:%d:%d:1\n" % (r + 20, r + 100)]
        t, r = t + 30, r + 100
    lines += [b"1:1:1:1:1:%d:1000000:1\n" % t, b"1:2:1:2:1:%d:1000000:1\n" % r]
    body = b"".join(sorted(lines, key=lambda x: int(x.split(b":")[5])))
    (tmp_path / "p").mkdir()
    written_trace(tmp_path / "p" / "sends.prv", b"#Paraver (01/01/26 at 00:00):1000000_ns:1(2):1:2(1:1,1:1)\n", body)
    wh = tmp_path / "wh"
    _ingest(run_cli, tmp_path / "p", wh)
    code, _, err = run_cli("archetypes", "-w", wh, "p", "--no-discover")
    assert code == 0, err
    rows = _sql(run_cli, wh, "SELECT network_bytes, transfer_max_s FROM phase_metrics")
    assert [r["network_bytes"] for r in rows] == [pytest.approx(n * T)], rows
    assert all(r["transfer_max_s"] >= 0 for r in rows), rows


def test_overlapping_bursts_of_one_thread_never_give_a_negative_time(tmp_path, run_cli):
    """F11: one thread with three overlapping running states of ~2^62 ns: its useful time wrapped in the per-thread
    sum and pop said parallel efficiency -100 % (then, summed as floats, 300 %). A thread's states are one timeline:
    the reader refuses the second state, which begins inside the first (session 21, edges21), so no such thread
    reaches pop; sums past int64 across threads are test_a_useful_time_past_int64_keeps_its_ratios_and_a_true_reason."""
    (tmp_path / "olap").mkdir()
    written_trace(tmp_path / "olap" / "o.prv", b"#Paraver (01/01/26 at 00:00):%d_ns:1(1):1:1(1:1)\n" % (T + 10),
                  b"".join(b"1:1:1:1:1:%d:%d:1\n" % (i, T) for i in range(3)))
    code, _, err = run_cli("ingest", tmp_path / "olap", "-w", tmp_path / "wh")
    assert code == 2 and f"{tmp_path / 'olap' / 'o.prv'}:3: state record of appl 1 task 1 thread 1 begins at 1 ns, " \
        f"before the thread's previous state ends at {T} ns" in err, err


def test_a_useful_time_past_int64_keeps_its_ratios_and_a_true_reason(tmp_path, run_cli):
    """F8 (a regression of 0df8f17): six threads of one burst of 2^61 ns, each with PAPI_TOT_INS = 2^62: the
    stored useful_sum_ns is NULL (past int64), and coverage, useful instructions and global efficiency were NULL
    too, pop saying 'the runs record no instructions (PAPI_TOT_INS)'. They are computed from the float sums."""
    n, t = 6, 2**61
    header = b"#Paraver (01/01/26 at 00:00):%d_ns:1(%d):1:%d(%s)\n" % (2 * t + 10, n, n, b",".join([b"1:1"] * n))
    body = b"".join(b"1:1:1:%d:1:0:%d:1\n2:1:1:%d:1:5:42000050:%d\n1:1:1:%d:1:%d:%d:0\n" % (k, t, k, T, k, t, 2 * t)
                    for k in range(1, n + 1))
    (tmp_path / "e6").mkdir()
    written_trace(tmp_path / "e6" / "ins6.prv", header, body)
    wh = tmp_path / "wh"
    _ingest(run_cli, tmp_path / "e6", wh)
    code, out, err = run_cli("pop", "-w", wh, "e6")
    assert code == 0, err
    assert "record no instructions" not in err and "useful_instructions" not in err, err
    (row,) = _sql(run_cli, wh, "SELECT useful_sum_ns, useful_instructions, parallel_efficiency FROM pop_metrics")
    assert row == {"useful_sum_ns": None, "useful_instructions": pytest.approx(n * T),
                   "parallel_efficiency": pytest.approx(t / (2 * t + 10))}
    (scal,) = _sql(run_cli, wh, "SELECT computation_scalability, global_efficiency FROM pop_scaling")
    assert scal == {"computation_scalability": 1.0, "global_efficiency": pytest.approx(t / (2 * t + 10))}


def test_computation_scalability_of_a_run_whose_stored_sum_passed_int64():
    """A series whose larger run's useful_sum_ns is NULL (past int64): its computation scalability is the
    reference's sum over its float sum (mean x ranks, one thread per rank), not NULL."""
    base = {c: None for c in POP_METRICS_SCHEMA}
    rows = [{**base, "run_id": "a", "run_name": "a", "app": "x", "n_ranks": 2, "n_threads": 1, "runtime_ns": 100,
             "useful_sum_ns": 4 * 10**18, "useful_mean_ns": 2e18, "parallel_efficiency": 0.5},
            {**base, "run_id": "b", "run_name": "b", "app": "x", "n_ranks": 8, "n_threads": 1, "runtime_ns": 50,
             "useful_sum_ns": None, "useful_mean_ns": 2e18, "parallel_efficiency": 0.5}]
    out = pop_scaling(pl.DataFrame(rows, schema=POP_METRICS_SCHEMA)).sort("run_id")
    assert out["computation_scalability"].to_list() == [1.0, pytest.approx(0.25)]
    assert out["global_efficiency"].to_list() == [0.5, pytest.approx(0.125)]


def test_a_call_s_sent_and_received_bytes_are_added_as_floats():
    """An MPI_Sendrecv of 2^62 bytes each way: each fits int64, their Int64 sum was -2^63 bytes."""
    calls = pl.DataFrame({"start_ns": [0], "duration_ns": [10], "bytes_sent": [T], "bytes_recv": [T],
                          "n_messages": pl.Series([2], dtype=pl.Int32)})
    out = mpi_metrics(calls, load_machine())
    assert out["bytes"].to_list() == [pytest.approx(2.0 * T)] and out["bandwidth"].to_list()[0] > 0
