"""A killed ingest leaves no partial run; the next ingest completes it. Readers never see half a run."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from synthtrace.pipelines.jobs import JOBS
from synthtrace.warehouse import Warehouse
from testing.prefect_server import server_env
from testing.processes import server_alive
from testing.traces import LULESH_A

pytestmark = [pytest.mark.real_traces, pytest.mark.slow]


def _ingest_cmd(prv: Path, wh: Path) -> list[str]:
    return [sys.executable, "-c", "import sys; from synthtrace.pipelines.cli import main; sys.exit(main(sys.argv[1:]))",
            "ingest", str(prv), "--warehouse", str(wh)]


def test_killed_ingest_leaves_no_partial_run(tmp_path, big_lulesh):
    wh = tmp_path / "wh"
    proc = subprocess.Popen(_ingest_cmd(big_lulesh, wh), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
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
    assert query(Warehouse(wh), "SELECT count(*) AS n FROM bursts").column("n")[0].as_py() == 0

    done = subprocess.run(_ingest_cmd(big_lulesh, wh), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "ingested as lulesh.big" in done.stdout
    assert not list((wh / ".staging").iterdir()), "the next ingest clears what the killed one left"
    n = query(Warehouse(wh), "SELECT count(*) AS n FROM bursts").column("n")[0].as_py()
    assert n == 2140 * 150


def test_reader_during_ingest_never_sees_half_a_run(tmp_path, big_lulesh):
    wh = tmp_path / "wh"
    from synthtrace.warehouse.sql import query
    proc = subprocess.Popen(_ingest_cmd(big_lulesh, wh), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seen = set()
    while proc.poll() is None:
        if (wh / "runs").exists():
            n = query(Warehouse(wh), "SELECT count(*) AS n FROM bursts").column("n")[0].as_py()
            seen.add(n)
        time.sleep(0.05)
    assert proc.returncode == 0
    assert seen <= {0, 2140 * 150}
    assert (wh / "runs").is_dir() and len(list((wh / "runs").iterdir())) == 1


# ------------------------------------------------------------------------------------------------ nights
def _night_cmd(drop: Path, wh: Path) -> list[str]:
    return [sys.executable, "-c", "import sys; from synthtrace.pipelines.cli import main; sys.exit(main(sys.argv[1:]))",
            "nightly", "--drop", str(drop), "--warehouse", str(wh), "--skip", "retrain",
            "--settle", "0"]  # [helper drop] traces copied just before: complete


def _experiments_with(wh: Path, name: str) -> set[str]:
    return {p.parent.name for p in (wh / "experiments").glob(f"*/{name}")} if (wh / "experiments").is_dir() else set()


#: moments to kill a night at: a condition on the warehouse seen while the night runs
KILL_POINTS = {
    "mid-ingest": lambda wh: len(list(wh.glob("runs/*/run.parquet"))) >= 1,
    "after-ingest": lambda wh: len(list(wh.glob("runs/*/run.parquet"))) == 3,  # merging, mostly
    "after-merge": lambda wh: "lulesh" in _experiments_with(wh, "merged_bursts.parquet"),
    "mid-analysis": lambda wh: len(_experiments_with(wh, "archetypes.parquet")) >= 1,
    "global-stages": lambda wh: _experiments_with(wh, "archetypes.parquet") == {"lulesh", "prime"},
}


def test_a_night_killed_at_each_moment_in_turn_is_finished_by_the_next(tmp_path, prefect_api):
    """kill -9 a night (its whole process group) at one moment; the next night resumes from what the killed one
    left and is itself killed at the next moment, and so on through every moment of KILL_POINTS (each night
    recovers from its predecessors' leftovers, not only from a clean kill). The night after the last kill ends with
    every run ingested, every experiment merged and analysed, and the report written; one more night has nothing
    to do. The nights talk to the session's Prefect server (tests/test_nightly_flow.py kills a night with its
    ephemeral server). One chain rather than a fresh warehouse per moment: five full nights fewer in CI."""
    from synthtrace.warehouse.sql import query
    from testing.traces import LULESH_B, PRIME, copy_trace

    drop, wh = tmp_path / "drop", tmp_path / "wh"
    copy_trace(LULESH_A, drop / "lulesh", "lulesh.4x2")  # one app (stem up to its first dot): one experiment
    copy_trace(LULESH_B, drop / "lulesh", "lulesh.7x1")
    copy_trace(PRIME, drop / "prime")
    env = server_env(tmp_path / "prefect", prefect_api)
    killed = []
    for point, reached in KILL_POINTS.items():
        if reached(wh):  # an earlier night was killed past this moment: nothing left to interrupt here
            continue
        proc = subprocess.Popen(_night_cmd(drop, wh), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline and proc.poll() is None and not reached(wh):
            time.sleep(0.01)
        assert proc.poll() is None, f"the night ended before {point}: {proc.stderr.read().decode()[-2000:]}"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        killed.append(point)
    assert len(killed) >= 4, f"only {killed} were interrupted: the nights ran past the others between two polls"

    done = subprocess.run(_night_cmd(drop, wh), env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr
    assert query(Warehouse(wh), "SELECT count(*) FROM runs").column(0)[0].as_py() == 3
    assert _experiments_with(wh, "merged_bursts.parquet") == {"lulesh"}  # prime has one run: nothing to merge
    assert _experiments_with(wh, "archetypes.parquet") == {"lulesh", "prime"}
    assert (wh / "report.html").is_file()
    for exp in ("lulesh", "prime"):
        record = json.loads((wh / "experiments" / exp / "night.json").read_text())
        assert set(record["stages"]) == {job.name for job in JOBS if job.scope == "experiment"}
    assert not (drop / ".quarantine").exists()

    again = subprocess.run(_night_cmd(drop, wh), env=env, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr
    up_to_date = ", ".join(job.name for job in JOBS if job.name != "retrain")  # retrain is not due: not run
    assert f"nothing new for: {up_to_date}" in again.stdout


# ------------------------------------------------------------------- the window between a swap's two renames
_SWAP_KILLED = """
import os, signal, sys
from pathlib import Path
from synthtrace.warehouse import layout

wh, when = layout.Warehouse(sys.argv[1]), sys.argv[2]
layout._exchange = lambda a, b: False  # the file system has no atomic exchange: two renames
real_rename = os.rename

def rename(src, dst):
    if when == "before" and ".old." in str(dst):
        os.kill(os.getpid(), signal.SIGKILL)
    real_rename(src, dst)
    if when == "between" and ".old." in str(dst):
        os.kill(os.getpid(), signal.SIGKILL)

os.rename = rename
with wh.staged(wh.experiment_dir("lulesh"), replace=True) as stage:
    (stage / "merged_bursts.parquet").write_text("new")
"""


@pytest.mark.parametrize("when", ["before", "between"])
def test_a_swap_killed_between_its_renames_is_recovered(tmp_path, when):
    """Issue 23 item 3: killed between `target -> .staging/*.old.*` and `stage -> target`, both copies waited in
    .staging and the next writer's cleanup deleted both. Recovery finishes the swap (the new copy is whole: it was
    synced before the first rename) or keeps the old one; the only copy is never deleted."""
    wh = Warehouse(tmp_path / "wh").ensure()
    target = wh.experiment_dir("lulesh")
    with wh.staged(target) as stage:  # a commit's folder (a writer replaces no folder no commit wrote)
        (stage / "merged_bursts.parquet").write_text("old")
    proc = subprocess.run([sys.executable, "-c", _SWAP_KILLED, str(wh.root), when], capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    if when == "between":
        assert not target.exists()  # the kill hit the window
    Warehouse(wh.root).ensure()  # the next writer
    expected = "new" if when == "between" else "old"
    assert (target / "merged_bursts.parquet").read_text() == expected
    assert list(wh.staging_dir.iterdir()) == []


def test_a_swap_replaces_in_one_step(tmp_path):
    """Where the file system can exchange two directories, the swap has no window at all: nothing is left
    beside the new directory."""
    wh = Warehouse(tmp_path / "wh").ensure()
    target = wh.experiment_dir("lulesh")
    for content in ("old", "new"):
        with wh.staged(target, replace=True) as stage:
            (stage / "merged_bursts.parquet").write_text(content)
    assert (target / "merged_bursts.parquet").read_text() == "new"
    assert list(wh.staging_dir.iterdir()) == []


def test_a_live_writers_stage_survives_another_writers_cleanup_whatever_its_pid(tmp_path, monkeypatch):
    """Attack 7 A6: every writer's start removed the `.staging` folders whose writer's pid was not alive here; a
    writer on another host or in another PID namespace (Dask workers sharing the warehouse, a container) looks dead
    by pid, and its stage was deleted under it (a good trace quarantined for "No such file"). Seen from there every
    pid looks dead (pid_alive says so below): a stage is now judged by its writer's lease, held while it writes."""
    from synthtrace.warehouse import layout

    wh = layout.Warehouse(tmp_path / "wh").ensure()
    monkeypatch.setattr(layout, "pid_alive", lambda pid: False)
    target = wh.run_dir("0123456789abcdef")
    with wh.staged(target) as stage:
        (stage / "run.json").write_text("{}")
        layout.Warehouse(wh.root).ensure()  # another writer starts meanwhile and clears what it takes for stale
        assert stage.is_dir()
    assert (target / "run.json").read_text() == "{}"
    assert not list(wh.staging_dir.iterdir()) and not list((wh.root / ".locks").glob("*.lease"))


def test_a_killed_writers_stage_is_still_cleared(tmp_path):
    """What a writer killed mid-stage leaves (its lease no longer held: the lock went with the process) is removed
    by the next writer's start, whatever names it: a lease left behind, none, a pid that has ended."""
    from synthtrace.warehouse import layout

    wh = layout.Warehouse(tmp_path / "wh").ensure()
    left = []
    with wh.lease() as owner:
        lease = wh.root / ".locks" / f"{owner}.lease"
        left.append(wh.staging_dir / f"r1.0badc0de.{owner}")
    lease.write_text("")  # a lease file nobody holds (its writer was killed before removing it)
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    left += [wh.staging_dir / "r2.0badc0de.L0123456789abcdef", wh.staging_dir / f"r3.0badc0de.{proc.pid}"]
    for d in left:
        d.mkdir()
    wh.ensure()
    assert not list(wh.staging_dir.iterdir()) and not lease.exists()


_KILLED_WITH_ITS_SERVER = """
import os, signal
from synthtrace.pipelines import nightly
nightly.start_prefect()
print(nightly._server.server_process.pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="no pidfds (Linux before 5.3)")
def test_a_night_killed_by_a_signal_it_cannot_handle_takes_its_prefect_server_along(tmp_path):
    """Attack 13 F4: a night ended by SIGKILL (the OOM killer) or SIGABRT (an allocation failure in Polars' Rust)
    left the ephemeral Prefect server it started running for good, 130-190 MB each, one more every such night. The
    server is stopped once its night is gone, however the night ended."""
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(PREFECT_HOME=str(tmp_path / "prefect"), DO_NOT_TRACK="1", PREFECT_SERVER_ANALYTICS_ENABLED="false")
    out = tmp_path / "night.out"
    with out.open("w") as fh:  # a file, not a pipe: a server left running would hold a pipe open
        p = subprocess.run([sys.executable, "-c", _KILLED_WITH_ITS_SERVER], stdout=fh, stderr=subprocess.STDOUT,
                           env=env, timeout=600, check=False)
    assert p.returncode == -signal.SIGKILL, out.read_text()
    server = next(int(line) for line in out.read_text().splitlines() if line.strip().isdigit())
    deadline = time.monotonic() + 60
    while server_alive(server) and time.monotonic() < deadline:
        time.sleep(0.2)
    if alive := server_alive(server):
        os.kill(server, signal.SIGKILL)
    assert not alive, "the night's Prefect server outlived it"
