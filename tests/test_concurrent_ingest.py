"""Several `synthtrace ingest` processes on one warehouse at once (two cron jobs, a user beside the nightly flow):
every trace lands exactly once, every process exits 0 and says truthfully what it did (issue 13, item 11)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from testing.traces import LULESH_B, PRIME, copy_trace


CLI = "import sys; from synthtrace.pipelines.cli import main; sys.exit(main(sys.argv[1:]))"


def _start(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _finish(procs: list[subprocess.Popen]) -> list[tuple[int, str, str]]:
    return [(p.wait(timeout=600), p.stdout.read(), p.stderr.read()) for p in procs]


def _runs(wh: Path) -> list[tuple]:
    from synthtrace.warehouse import Warehouse
    from synthtrace.warehouse.sql import query

    return query(Warehouse(wh), "SELECT run_name, experiment, n_bursts FROM runs ORDER BY run_name").to_pylist()


@pytest.mark.real_traces
@pytest.mark.slow
def test_same_trace_ingested_by_three_processes_at_once_lands_once(tmp_path):
    copy_trace(PRIME, tmp_path / "t")
    wh = tmp_path / "wh"
    done = _finish([_start(["ingest", str(tmp_path / "t" / "prime_v0.prv"), "-w", str(wh)]) for _ in range(3)])
    assert all(code == 0 for code, _, _ in done), [err for _, _, err in done]
    assert not any("Traceback" in err for _, _, err in done)
    said = [out for _, out, _ in done]
    assert sum(": ingested as prime_v0" in s for s in said) == 1, said
    assert sum("already ingested" in s for s in said) == 2, said
    assert [r["run_name"] for r in _runs(wh)] == ["prime_v0"]
    assert len(list((wh / "runs").iterdir())) == 1
    assert not list((wh / ".staging").glob("*")), "no process leaves its staging folder behind"


@pytest.mark.real_traces
@pytest.mark.slow
def test_different_traces_ingested_at_once_all_land(tmp_path):
    """Two processes, two traces, one fresh warehouse that none of them has created yet."""
    wh = tmp_path / "wh"
    traces = [copy_trace(p, tmp_path / p.stem) for p in (LULESH_B, PRIME)]
    done = _finish([_start(["ingest", str(t), "-w", str(wh), "--experiment", "mixed"]) for t in traces])
    assert all(code == 0 for code, _, _ in done), [err for _, _, err in done]
    rows = _runs(wh)
    assert sorted(r["run_name"] for r in rows) == sorted(t.stem for t in traces)
    assert {r["experiment"] for r in rows} == {"mixed"}
    assert all(r["n_bursts"] > 0 for r in rows)


def test_commit_race_lost_to_another_writer_keeps_the_winner(tmp_path, monkeypatch):
    """The window the processes above rarely hit: the same run committed by another process after this one checked
    that the target was free and before its rename. The winner's files stay, the loser's stage goes, no error."""
    import os

    from synthtrace.warehouse import layout
    from synthtrace.warehouse.layout import Warehouse

    wh = Warehouse(tmp_path / "wh")
    target = wh.run_dir("0123456789abcdef")
    real_rename = os.rename

    def rename_after_the_other_writer(src, dst):
        if Path(dst) == target and not target.exists():
            target.mkdir(parents=True)
            (target / "run.parquet").write_text("the winner's")
        return real_rename(src, dst)

    monkeypatch.setattr(layout.os, "rename", rename_after_the_other_writer)
    with wh.staged(target) as stage:
        (stage / "run.parquet").write_text("the loser's")
    assert (target / "run.parquet").read_text() == "the winner's"
    assert not list(wh.staging_dir.iterdir())
