"""The nightly flow: quarantine, idempotence, crash safety, SQL during a night, and the Dask runner."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import LULESH_A, LULESH_B, PRIME, copy_trace
from synthtrace.tracelib.paraver.tile import tile_trace
from synthtrace.warehouse.sql import query

pytestmark = [pytest.mark.real_traces]


def _count(wh: Path, sql: str) -> int:
    return query(wh, sql).column(0)[0].as_py()


@pytest.fixture
def drop(tmp_path) -> Path:
    d = tmp_path / "drop"
    copy_trace(PRIME, d / "prime")
    copy_trace(LULESH_B, d / "lulesh")
    (d / "lulesh" / "broken.prv").write_text("#Paraver (01/01/20 at 10:00):100_ns:1(1):1:1(1:1),0\n1:1:1:5:1:0:10:1\n")
    return d


def test_night_ingests_quarantines_and_is_idempotent(prefect_harness, tmp_path, drop):
    from synthtrace.pipelines.nightly import run_night
    wh = tmp_path / "wh"
    s = run_night(drop, wh)
    assert {r["run_name"] for r in s.ingested} == {"prime_v0", LULESH_B.stem}
    assert len(s.quarantined) == 1 and "task 5" in s.quarantined[0]["reason"]
    reason = drop / ".quarantine" / "broken.prv.reason.txt"
    assert reason.is_file() and "outside the header's resource model" in reason.read_text()
    assert not (drop / "lulesh" / "broken.prv").exists()
    assert _count(wh, "SELECT count(*) FROM runs") == 2

    # a second night over the same folder, with a renamed copy re-dropped, ingests nothing
    copy_trace(PRIME, drop / "again", "prime_renamed")
    s2 = run_night(drop, wh)
    assert s2.ingested == [] and s2.quarantined == []
    assert _count(wh, "SELECT count(*) FROM runs") == 2


def test_flow_final_state_says_what_happened(prefect_harness, tmp_path, drop):
    from synthtrace.pipelines.nightly import nightly_flow
    state = nightly_flow(drop=str(drop), warehouse=str(tmp_path / "wh"), return_state=True)
    assert state.is_completed()
    assert state.message.startswith("2 runs ingested, 1 quarantined")


def test_dask_runner_on_a_local_cluster(prefect_harness, tmp_path, drop):
    distributed = pytest.importorskip("distributed")
    from synthtrace.pipelines.nightly import run_night
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        s = run_night(drop, tmp_path / "wh", runner="dask", dask_address=cluster.scheduler_address)
    assert len(s.ingested) == 2 and len(s.quarantined) == 1


def _night_cmd(drop: Path, wh: Path) -> list[str]:
    """The night as a separate process, ingest only: these tests are about ingest and readers, not analysis."""
    skip = [a for s in ("merge", "archetypes", "detect", "retrain", "report") for a in ("--skip", s)]
    return [sys.executable, "-c", "import sys; from synthtrace.pipelines.cli import main; sys.exit(main(sys.argv[1:]))",
            "nightly", "--drop", str(drop), "--warehouse", str(wh), *skip]


@pytest.fixture(scope="module")
def big_drop(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("bigdrop")
    tile_trace(LULESH_A, d / "exp" / "lulesh.big.prv", 150)
    return d


@pytest.mark.slow
def test_killed_night_leaves_no_partial_run_and_next_night_completes(tmp_path, big_drop):
    drop = tmp_path / "drop"
    shutil.copytree(big_drop, drop)
    wh = tmp_path / "wh"
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect")}
    # its own session, so the kill takes the flow's ephemeral Prefect server (a child process) with it
    proc = subprocess.Popen(_night_cmd(drop, wh), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        if (wh / ".staging").exists() and list((wh / ".staging").glob("*/bursts/part-*")):
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the night ended before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert _count(wh, "SELECT count(*) FROM runs") == 0
    done = subprocess.run(_night_cmd(drop, wh), env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert _count(wh, "SELECT count(*) FROM runs") == 1
    assert _count(wh, "SELECT count(*) FROM bursts") == 2140 * 150


@pytest.mark.slow
def test_sql_answers_while_a_night_is_running(tmp_path, big_drop, run_cli):
    drop = tmp_path / "drop"
    shutil.copytree(big_drop, drop)
    copy_trace(PRIME, drop / "small")
    wh = tmp_path / "wh"
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect")}
    proc = subprocess.Popen(_night_cmd(drop, wh), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    answers = []
    while proc.poll() is None:
        if (wh / "runs").exists():
            code, out, err = run_cli("sql", "SELECT count(*) FROM runs", "-w", wh, "-f", "csv")
            assert code == 0, err
            answers.append(int(out.splitlines()[1]))
        time.sleep(0.3)
    assert proc.returncode == 0
    assert answers, "no query ran during the night"
    assert set(answers) <= {0, 1, 2}
