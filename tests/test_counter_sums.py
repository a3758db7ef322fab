"""A burst's or an MPI call's counter sum is an int64 (attack 17 F1, tracelib/formats/bursts.py `_counter_sums`,
`_folded_carry`): each sample fits, the reader checks that, but the sum of many may not. Numba's adds wrapped
silently and the wrapped number was stored as the count; now the trace is refused in one line naming the file,
the counter, the thread and the time of the sample that passed int64, and nothing is stored."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from synthtrace.tracelib.errors import TraceFormatError
from synthtrace.tracelib.formats import bursts
from synthtrace.tracelib.formats.paraver.reader import ParaverTrace
from synthtrace.tracelib.schema import counter_columns
from testing.traces import written_trace

HEADER = b"#Paraver (01/01/26 at 00:00):1000000000_ns:1(1):1:1(1:1)\n"
PAPI_TOT_INS = 42000050


def _write(tmp_path: Path, body: bytes) -> Path:
    return written_trace(tmp_path / "summed.prv", HEADER, body)


def _samples(n: int, t0: int, value: int) -> bytes:
    """``n`` sample lines of PAPI_TOT_INS, each ``value``, at t0, t0 + 1, ... (ns)."""
    return b"".join(b"2:1:1:1:1:%d:%d:%d\n" % (t0 + i, PAPI_TOT_INS, value) for i in range(n))


def _assert_ingest_refuses(prv: Path, run_cli, *words: str) -> None:
    """``synthtrace ingest prv`` exits 2 with one error line naming the file and ``words``, and stores nothing."""
    wh = prv.parent / "wh"
    code, out, err = run_cli("ingest", prv, "-w", wh)
    lines = [x for x in err.strip().splitlines() if not x.startswith("warning:")]
    assert code == 2 and len(lines) == 1, err
    assert all(w in lines[0] for w in (str(prv), *words)), err
    assert not wh.exists()


def test_a_burst_sum_beyond_int64_is_refused_in_one_line(tmp_path, run_cli):
    """Three samples of 2^62 in one burst: stored as -2^62, blamed on a counter 'read lower than before'."""
    prv = _write(tmp_path, b"1:1:1:1:1:0:10000:1\n" + _samples(3, 100, 2**62) + b"1:1:1:1:1:10000:20000:0\n")
    _assert_ingest_refuses(prv, run_cli, "PAPI_TOT_INS", "thread 1:1:1", "at 101 ns", "int64")


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


# ------------------------------------------------------------------------- attack 17 F3: wide, sparse counters
def _wide(tmp_path: Path, n_bursts: int, n_types: int) -> Path:
    """The attacker's file: ``n_bursts`` bursts (running 5 ns, idle 5 ns), each with one sample of counter type
    42000000 + i % ``n_types``, of value i + 1."""
    body = b"".join(b"1:1:1:1:1:%d:%d:1\n2:1:1:1:1:%d:%d:%d\n1:1:1:1:1:%d:%d:0\n"
                    % (10 * i, 10 * i + 5, 10 * i + 2, 42000000 + i % n_types, i + 1, 10 * i + 5, 10 * i + 10)
                    for i in range(n_bursts))
    prv = tmp_path / "wide.prv"
    prv.write_bytes(HEADER + body)
    return prv


def test_sums_cost_per_sample_not_per_counter_and_row():
    """50,000 rows, 4,096 counters, one sample each: the sums were a dense 4,096 x 50,000 matrix (1.8 GB)."""
    n, n_codes = 50_000, 4096
    rows = np.arange(n, dtype=np.int64)
    codes = (rows % n_codes).astype(np.int32)
    out = bursts._counter_sums(n_codes, codes, rows + 1, rows[::-1].copy())
    assert out[-1] == -1 and sum(a.size for a in out[:4]) <= 3 * n + n_codes + 1
    used, off, row, total = out[:4]
    k = 7  # counter 7: samples 7, 4103, ... at rows n - 1 - i, ascending
    assert used[k] == k and row[off[k]:off[k + 1]].tolist() == sorted(n - 1 - i for i in range(k, n, n_codes))
    assert total[off[k]:off[k + 1]].tolist() == [i + 1 for i in sorted(range(k, n, n_codes), reverse=True)]


def test_a_chunk_of_many_sparse_counters_streams_in_bounded_parts(tmp_path, monkeypatch):
    """3,000 bursts, each one sample of one of 512 counters, in one chunk: one part of 3,000 x 512 cells was built
    (the attacker's 60,000 x 4,096: 2.3 GB). Now each part holds at most MAX_PART_CELLS cells (rows x counter
    columns present), and the run's bursts are the same."""
    monkeypatch.setattr(bursts, "MAX_PART_CELLS", 20_000, raising=False)
    prv = _wide(tmp_path, 3000, 512)
    stream = ParaverTrace(prv).read("r")
    parts = [p.frame for p in stream if p.table == "bursts"]
    cells = [p.height * len(counter_columns(p)) for p in parts]
    assert len(parts) > 1 and max(cells) <= 20_000, cells
    whole = pl.concat(parts, how="diagonal_relaxed").sort("burst_seq")
    assert whole.height == 3000 and whole.get_column("burst_seq").to_list() == list(range(3000))
    for i in (0, 511, 512, 1777, 2999):
        row = whole.row(i, named=True)
        name = f"{42000000 + i % 512}"
        held = {c: v for c, v in row.items() if c in counter_columns(whole) and v is not None}
        assert len(held) == 1 and next(iter(held.values())) == i + 1 and next(iter(held)).endswith(name), held


def test_parts_and_whole_frames_agree(tmp_path, monkeypatch):
    """`feed` (one frame) is the parts of `feed_parts` put together, counter columns sorted by name."""
    monkeypatch.setattr(bursts, "MAX_PART_CELLS", 500, raising=False)
    b, _, _ = ParaverTrace(_wide(tmp_path, 400, 40)).read_tables("r")
    names = counter_columns(b)
    assert names == sorted(names) and len(names) == 40 and b.height == 400
    assert b.select(pl.sum_horizontal(names)).to_series().to_list() == list(range(1, 401))


# ------------------------------------------------------------------ a call's message bytes (attack 17, left by F1)
TWO_TASKS = b"#Paraver (01/01/26 at 00:00):1000000000_ns:1(2):1:2(1:1,1:1)\n"


def _messages(tmp_path: Path, sizes: tuple[int, int], two_sends: bool = False) -> Path:
    """Task 1 sends two messages of ``sizes`` bytes (at 150 and 160 ns) from one call (MPI_Reduce at 100-200 ns;
    ``two_sends``: the second from another call, 160-170 ns) to task 2, which receives both in one call
    (300-500 ns, at 400 and 410 ns)."""
    send = (b"2:1:1:1:1:100:50000002:9\n3:1:1:1:1:150:150:2:1:2:1:400:400:%d:1\n" % sizes[0]
            + (b"2:1:1:1:1:155:50000002:0\n1:1:1:1:1:155:160:1\n2:1:1:1:1:160:50000002:9\n" if two_sends else b"")
            + b"3:1:1:1:1:160:160:2:1:2:1:410:410:%d:1\n" % sizes[1]
            + (b"2:1:1:1:1:170:50000002:0\n1:1:1:1:1:170:1000:1\n" if two_sends
               else b"2:1:1:1:1:200:50000002:0\n1:1:1:1:1:200:1000:1\n"))
    body = (b"1:1:1:1:1:0:100:1\n1:2:1:2:1:0:300:1\n" + send
            + b"2:2:1:2:1:300:50000002:9\n2:2:1:2:1:500:50000002:0\n1:2:1:2:1:500:1000:1\n")
    return written_trace(tmp_path / "messages.prv", TWO_TASKS, body)


def test_a_call_s_sent_bytes_beyond_int64_are_refused_in_one_line(tmp_path, run_cli):
    """Two messages of 2^62 bytes sent by one call: its bytes_sent was stored as -2^63 (the per-call add of the
    messages' sizes wrapped unchecked)."""
    _assert_ingest_refuses(_messages(tmp_path, (2**62, 2**62)), run_cli, "thread 1:1:1", "sent", "at 160 ns", "int64")


def test_a_call_s_received_bytes_beyond_int64_are_refused(tmp_path):
    """The same messages sent by two calls, received by one: the receiving call's bytes_recv."""
    prv = _messages(tmp_path, (2**62, 2**62), two_sends=True)
    with pytest.raises(TraceFormatError, match=r"one MPI call of thread 1:2:1 received pass int64 .* at 410 ns"):
        ParaverTrace(prv).read_tables("r")


def test_an_otf2_call_s_message_bytes_beyond_int64_are_refused_naming_the_archive(tmp_path, run_cli):
    """The same in an OTF2 archive (two messages of 2^62 bytes in one MPI_Send and one MPI_Recv): refused before any
    call is stored, in one line naming the archive (it said ``<records>``)."""
    from testing import hostile_otf2

    anchor = hostile_otf2.write(tmp_path / "wrap", "msg_bytes_wrap")
    code, _, err = run_cli("ingest", anchor, "-w", tmp_path / "wh")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert str(anchor) in err and "int64" in err and "<records>" not in err, err
    assert not (tmp_path / "wh").exists()


def test_message_bytes_within_int64_are_kept(tmp_path):
    """Up to int64's largest value exactly: kept as summed, on both sides."""
    _, calls, _ = ParaverTrace(_messages(tmp_path, (2**62, 2**62 - 1))).read_tables("r")
    assert calls.get_column("bytes_sent").to_list() == [2**63 - 1, 0]
    assert calls.get_column("bytes_recv").to_list() == [0, 2**63 - 1]
