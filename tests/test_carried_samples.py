"""Counter samples waiting for their burst or call to end are folded as they are read (attack 16 F3,
tracelib/formats/bursts.py `_folded_carry`): what the assembler carries from chunk to chunk stays bounded by the
bursts and calls still open, not by the samples they hold, and no stored value changes."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from synthtrace.tracelib.formats import bursts
from synthtrace.tracelib.formats.paraver.reader import ParaverTrace

from testing.traces import ALL_PARAVER, written_trace

HEADER = b"#Paraver (01/01/26 at 00:00):1000000000000_ns:1(2):1:2(1:1,1:1)\n"
PAPI_TOT_INS = 42000050
N_SAMPLES = 200_000


def _write(tmp_path: Path, body: bytes) -> Path:
    return written_trace(tmp_path / "sampled.prv", HEADER, body)


def _samples(task: int, n: int, t0: int, step: int) -> bytes:
    """``n`` sample lines of task ``task``, one counter each, at t0, t0 + step, ... (ns); values 1..n."""
    return b"".join(b"2:%d:1:%d:1:%d:%d:%d\n" % (task, task, t0 + i * step, PAPI_TOT_INS, i + 1) for i in range(n))


def _most_carried(prv: Path, monkeypatch) -> tuple[int, pl.DataFrame, pl.DataFrame]:
    """The most samples the assembler carried between two chunks, and the run's bursts and calls."""
    seen = [0]
    close = bursts.BurstAssembler._close_bursts

    def watched(self, *args):
        out = close(self, *args)
        seen[0] = max(seen[0], self._samples.thread.size)
        return out

    monkeypatch.setattr(bursts.BurstAssembler, "_close_bursts", watched)
    b, c, _ = ParaverTrace(prv, chunk_bytes=1 << 20).read_tables("r")
    return seen[0], b, c


def test_a_long_sampled_burst_carries_its_sum_not_its_samples(tmp_path, monkeypatch):
    """Task 1 runs for 1,000 s sampled 200,000 times (a sampling Extrae run of a long computation); task 2 too, its
    samples inside one long MPI_Reduce. Before: every sample was carried until the burst or call ended."""
    body = (b"1:1:1:1:1:0:1000000000000:1\n1:2:1:2:1:0:500:1\n2:2:1:2:1:500:50000002:9\n"
            + b"".join(a + b for a, b in zip(_samples(1, N_SAMPLES, 1_000, 7).splitlines(keepends=True),
                                             _samples(2, N_SAMPLES, 1_001, 7).splitlines(keepends=True)))
            + b"2:2:1:2:1:999999999999:50000002:0\n")
    most, b, c = _most_carried(_write(tmp_path, body), monkeypatch)
    assert most < 2 * bursts.FOLD_CARRIED_SAMPLES, most
    total = N_SAMPLES * (N_SAMPLES + 1) // 2
    assert b.filter(pl.col("task") == 1).get_column("PAPI_TOT_INS").to_list() == [total]
    assert c.filter(pl.col("task") == 2).get_column("PAPI_TOT_INS").to_list() == [total]


def test_a_record_repeating_one_counter_is_carried_folded(tmp_path, monkeypatch):
    """Records of 10,000 values of one counter each, inside an open burst: carried as their sums."""
    line = b"".join(b":%d:%d" % (PAPI_TOT_INS, v) for v in range(1, 10_001))
    body = (b"1:1:1:1:1:0:1000000000000:1\n1:2:1:2:1:0:1000000000000:1\n"
            + b"".join(b"2:%d:1:%d:1:%d" % (k, k, 1_000 + i) + line + b"\n" for i in range(60) for k in (1, 2)))
    most, b, _ = _most_carried(_write(tmp_path, body), monkeypatch)
    assert most < 2 * bursts.FOLD_CARRIED_SAMPLES, most
    assert b.get_column("PAPI_TOT_INS").to_list() == [60 * 10_000 * 10_001 // 2] * 2


@pytest.mark.parametrize("prv", ALL_PARAVER, ids=lambda p: p.stem[:12])
def test_folding_every_carry_changes_nothing_read(prv, monkeypatch):
    """Every carry folded (threshold 0) in small chunks, so that bursts and calls stay open across many of them:
    the same bursts, calls (with their counters) and events as without the fold."""
    if not prv.is_file():
        pytest.skip("real traces not found")
    monkeypatch.setattr(bursts, "FOLD_CARRIED_SAMPLES", np.iinfo(np.int64).max)
    b0, c0, s0 = ParaverTrace(prv, chunk_bytes=64 << 10).read_tables("r")
    monkeypatch.setattr(bursts, "FOLD_CARRIED_SAMPLES", 0)
    b1, c1, s1 = ParaverTrace(prv, chunk_bytes=64 << 10).read_tables("r")
    assert b0.equals(b1) and c0.equals(c1)
    assert s0.events.equals(s1.events)
