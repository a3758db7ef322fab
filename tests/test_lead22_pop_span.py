"""A Paraver trace whose records lie past the end its header gives (Paraver loads them; the reader keeps them and
says so): POP's runtime is the run's span, the header's duration or the end of the last burst or MPI call,
whichever is later. It was the header's alone, and the efficiencies went past 100 % (edges21)."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from testing.traces import TRACES

PRIME = TRACES / "paraver" / "prime_v0.prv"


def _header_shortened(src: Path, folder: Path, factor: float) -> Path:
    """A copy of the trace (.prv, .pcf, .row) whose header gives ``factor`` x its duration."""
    folder.mkdir()
    for suffix in (".pcf", ".row"):
        shutil.copy(src.with_suffix(suffix), folder / src.with_suffix(suffix).name)
    data = src.read_bytes()
    head, rest = data.split(b"\n", 1)
    duration = int(re.search(rb"\):(\d+)_ns:", head).group(1))
    head = head.replace(b"):%d_ns:" % duration, b"):%d_ns:" % int(duration * factor), 1)
    (folder / src.name).write_bytes(head + b"\n" + rest)
    return folder / src.name


def _pop(run_cli, trace: Path, wh: Path) -> dict:
    code, _, err = run_cli("ingest", trace, "-w", wh)
    assert code == 0, err
    code, _, err = run_cli("pop", "-w", wh)
    assert code == 0, err
    code, out, err = run_cli("sql", "SELECT * FROM pop_metrics", "-w", wh, "--format", "json")
    assert code == 0, err
    (row,) = json.loads(out)
    return row


@pytest.mark.skipif(not PRIME.exists(), reason="needs ../shared/traces")
def test_records_past_the_headers_end_lengthen_the_runtime(run_cli, tmp_path):
    whole = _pop(run_cli, PRIME, tmp_path / "wh_whole")
    short = _pop(run_cli, _header_shortened(PRIME, tmp_path / "short", 0.5), tmp_path / "wh_short")
    assert short["runtime_ns"] > 0.5 * whole["runtime_ns"]  # the span the records reach, not the header's half
    assert short["runtime_ns"] <= whole["runtime_ns"]  # never past the run as recorded
    for c in ("parallel_efficiency", "communication_efficiency", "load_balance"):
        assert 0 < short[c] <= 1, (c, short[c])
        assert short[c] >= whole[c] - 1e-9  # the span is at most the header's: efficiencies at least as high
