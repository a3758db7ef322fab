"""A burst's or an MPI call's counter sum is an int64 (attack 17 F1, tracelib/formats/bursts.py `_counter_sums`,
`_folded_carry`): each sample fits, the reader checks that, but the sum of many may not. Numba's adds wrapped
silently and the wrapped number was stored as the count; now the trace is refused in one line naming the file,
the counter, the thread and the time of the sample that passed int64, and nothing is stored."""
from __future__ import annotations

from pathlib import Path

import pytest

from synthtrace.tracelib.errors import TraceFormatError
from synthtrace.tracelib.formats import bursts
from synthtrace.tracelib.formats.paraver.reader import ParaverTrace

HEADER = b"#Paraver (01/01/26 at 00:00):1000000000_ns:1(1):1:1(1:1)\n"
PAPI_TOT_INS = 42000050


def _write(tmp_path: Path, body: bytes) -> Path:
    prv = tmp_path / "summed.prv"
    prv.write_bytes(HEADER + body)
    (tmp_path / "summed.pcf").write_text(
        "EVENT_TYPE\n7  42000050  PAPI_TOT_INS [Instr completed]\n\n"
        "EVENT_TYPE\n9  50000002  MPI Collective Comm\nVALUES\n0  Outside MPI\n9  MPI_Reduce\n")
    return prv


def _samples(n: int, t0: int, value: int) -> bytes:
    """``n`` sample lines of PAPI_TOT_INS, each ``value``, at t0, t0 + 1, ... (ns)."""
    return b"".join(b"2:1:1:1:1:%d:%d:%d\n" % (t0 + i, PAPI_TOT_INS, value) for i in range(n))


def test_a_burst_sum_beyond_int64_is_refused_in_one_line(tmp_path, run_cli):
    """Three samples of 2^62 in one burst: stored as -2^62, blamed on a counter 'read lower than before'."""
    prv = _write(tmp_path, b"1:1:1:1:1:0:10000:1\n" + _samples(3, 100, 2**62) + b"1:1:1:1:1:10000:20000:0\n")
    wh = tmp_path / "wh"
    code, out, err = run_cli("ingest", prv, "-w", wh)
    lines = [x for x in err.strip().splitlines() if not x.startswith("warning:")]
    assert code == 2 and len(lines) == 1, err
    assert all(w in lines[0] for w in (str(prv), "PAPI_TOT_INS", "thread 1:1:1", "at 101 ns", "int64")), err
    assert not wh.exists()


def test_a_call_sum_beyond_int64_is_refused(tmp_path):
    """The same inside an MPI call (the calls' sums)."""
    prv = _write(tmp_path, b"1:1:1:1:1:0:100:1\n2:1:1:1:1:100:50000002:9\n" + _samples(3, 200, 2**62)
                 + b"2:1:1:1:1:1000:50000002:0\n1:1:1:1:1:1000:2000:1\n")
    with pytest.raises(TraceFormatError, match=r"PAPI_TOT_INS of thread 1:1:1: .* passes int64 .* at 201 ns"):
        ParaverTrace(prv).read_tables("r")


def test_a_folded_carry_beyond_int64_is_refused(tmp_path, monkeypatch):
    """A long burst sampled across chunks: its carried samples are folded into their sum (attack 16 F3), which
    passed int64 there first (unchecked, the fold's wrapped sums would come back to 0 and be stored)."""
    monkeypatch.setattr(bursts, "FOLD_CARRIED_SAMPLES", 8)
    prv = _write(tmp_path, b"1:1:1:1:1:0:100000000:1\n" + _samples(16, 100, 2**60)
                 + b"1:1:1:1:1:100000000:100000001:0\n")  # folded unchecked: 16 x 2^60 wraps to 0
    with pytest.raises(TraceFormatError, match=r"PAPI_TOT_INS of thread 1:1:1: .* passes int64 .* at 1\d\d ns"):
        ParaverTrace(prv, chunk_bytes=256).read_tables("r")


def test_sums_within_int64_are_kept(tmp_path):
    """Up to int64's largest value exactly, and a negative delta that comes back: kept as summed."""
    body = (b"1:1:1:1:1:0:10000:1\n" + _samples(1, 100, 2**62) + _samples(1, 101, 2**62 - 1) + _samples(1, 102, -5)
            + _samples(1, 103, 5) + b"1:1:1:1:1:10000:20000:0\n")
    b, _, _ = ParaverTrace(_write(tmp_path, body)).read_tables("r")
    assert b.get_column("PAPI_TOT_INS").to_list()[0] == 2**63 - 1
