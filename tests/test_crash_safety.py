"""A killed ingest leaves no partial run; the next ingest completes it. Readers never see half a run."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import LULESH_A
from synthtrace.tracelib.paraver.tile import tile_trace

pytestmark = [pytest.mark.real_traces, pytest.mark.slow]


@pytest.fixture(scope="module")
def big_trace(tmp_path_factory) -> Path:
    """A real trace tiled in time to ~130 MB, so an ingest takes a few seconds."""
    return tile_trace(LULESH_A, tmp_path_factory.mktemp("big") / "lulesh.big.prv", 150)


def _ingest_cmd(prv: Path, wh: Path) -> list[str]:
    return [sys.executable, "-c", "import sys; from synthtrace.pipelines.cli import main; sys.exit(main(sys.argv[1:]))",
            "ingest", str(prv), "--warehouse", str(wh)]


def test_killed_ingest_leaves_no_partial_run(tmp_path, big_trace):
    wh = tmp_path / "wh"
    proc = subprocess.Popen(_ingest_cmd(big_trace, wh), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    staged = []
    while time.monotonic() < deadline and proc.poll() is None:
        staged = list((wh / ".staging").glob("*/bursts/part-*.parquet")) if (wh / ".staging").exists() else []
        if staged:
            break
        time.sleep(0.02)
    assert staged, "the ingest finished before it could be killed; make the trace bigger"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not list((wh / "runs").iterdir()), "a killed ingest must not leave a run behind"

    # a reader sees an empty warehouse, not half a run
    from synthtrace.warehouse.sql import query
    assert query(wh, "SELECT count(*) AS n FROM bursts").column("n")[0].as_py() == 0

    done = subprocess.run(_ingest_cmd(big_trace, wh), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "ingested as lulesh.big" in done.stdout
    assert not list((wh / ".staging").iterdir()), "the next ingest clears what the killed one left"
    n = query(wh, "SELECT count(*) AS n FROM bursts").column("n")[0].as_py()
    assert n == 2140 * 150


def test_reader_during_ingest_never_sees_half_a_run(tmp_path, big_trace):
    wh = tmp_path / "wh"
    from synthtrace.warehouse.sql import query
    proc = subprocess.Popen(_ingest_cmd(big_trace, wh), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seen = set()
    while proc.poll() is None:
        if (wh / "runs").exists():
            n = query(wh, "SELECT count(*) AS n FROM bursts").column("n")[0].as_py()
            seen.add(n)
        time.sleep(0.05)
    assert proc.returncode == 0
    assert seen <= {0, 2140 * 150}
    assert (wh / "runs").is_dir() and len(list((wh / "runs").iterdir())) == 1
