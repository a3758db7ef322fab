"""The warehouse's state is what its commits wrote (issue 23, attack 8 B1-B4, B6, B10): files no commit wrote are not
read, a file a commit wrote that is missing is one line, a run removed while a merge reads it is one line, racing
ingests refuse as they do one after the other, a damaged run can still be removed, and a read-only warehouse is
refused as such. Cases on the two LULESH runs (the session's ``merged_lulesh``), copied per case."""
from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from testing.traces import tree_digest

PRIME = Path(__file__).resolve().parents[1] / "../shared/traces/paraver/prime_v0.prv"


def _copy(merged_lulesh: Path, tmp_path: Path) -> Path:
    wh = tmp_path / "wh"
    shutil.copytree(merged_lulesh, wh, symlinks=True)
    return wh


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err[-3000:]
    return lines[0]


# ---------------------------------------------------------------------------------------------------- B10
@pytest.mark.real_traces
def test_a_read_only_warehouse_is_refused_by_writers_as_read_only(merged_lulesh, tmp_path, run_cli, monkeypatch):
    """Attack 8 B10: every writer said "cannot create the warehouse (Read-only file system)" of a warehouse that is
    there. As root (the CI's containers) a chmod does not stop a write, so the read-only mount is simulated: every
    write below the warehouse fails with EROFS, as on a ``ro`` bind mount (not root: the folder is chmod'ed)."""
    wh = _copy(merged_lulesh, tmp_path)
    before = tree_digest(wh)
    if os.geteuid() == 0:
        real_open, real_mkdir, real_utime = os.open, os.mkdir, os.utime
        inside = str(wh.resolve())

        def refuse(path) -> bool:
            return os.path.abspath(os.fspath(path)).startswith(inside)

        def ro_open(path, flags, *args, **kw):
            if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) and refuse(path):
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
            return real_open(path, flags, *args, **kw)

        def ro_mkdir(path, *args, **kw):
            if refuse(path):
                raise (FileExistsError(errno.EEXIST, "File exists", str(path)) if os.path.exists(path)
                       else OSError(errno.EROFS, os.strerror(errno.EROFS), str(path)))
            return real_mkdir(path, *args, **kw)

        def ro_utime(path, *args, **kw):
            if refuse(path):
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
            return real_utime(path, *args, **kw)

        monkeypatch.setattr(os, "open", ro_open)
        monkeypatch.setattr(os, "mkdir", ro_mkdir)
        monkeypatch.setattr(os, "utime", ro_utime)
    else:
        for d in [wh, *(p for p in wh.rglob("*") if p.is_dir())]:
            d.chmod(0o555)
    try:
        for args in (["ingest", PRIME, "--experiment", "x"], ["runs", "rm", "d12d9ce89c673a43"],
                     ["merge", "lulesh-8r"]):
            code, _, err = run_cli(*args, "-w", wh)
            line = _one_error_line(err)
            assert code == 2 and "read-only" in line and "cannot create" not in line, (args, err)
    finally:
        monkeypatch.undo()
        for d in [wh, *(p for p in wh.rglob("*") if p.is_dir())]:
            d.chmod(0o755)
    assert tree_digest(wh) == before


# ---------------------------------------------------------------------------------------------------- B4
@pytest.mark.real_traces
def test_an_ingest_losing_the_race_to_another_experiment_is_refused_as_one_after_the_other(tmp_path, run_cli,
                                                                                           monkeypatch):
    """Attack 8 B4: two ingests of one trace into different experiments at once both exited 0 (the loser said
    "already ingested ... experiment C"), though one after the other the second is refused (exit 2, how to move it).
    The race is made deterministic: while the ingest into A writes its stage, an ingest into C commits the run."""
    from synthtrace.warehouse import ingest as ing
    from synthtrace.warehouse.layout import Warehouse

    wh = tmp_path / "wh"
    real = ing._write_run

    def another_commits_first(*args, **kwargs):
        monkeypatch.setattr(ing, "_write_run", real)
        assert ing.ingest_trace(Warehouse(wh), PRIME, experiment="C", app="other").status == "ingested"
        return real(*args, **kwargs)

    monkeypatch.setattr(ing, "_write_run", another_commits_first)
    code, out, err = run_cli("ingest", PRIME, "--experiment", "A", "-w", wh)
    monkeypatch.undo()
    raced = _one_error_line(err)
    code_after, _, err_after = run_cli("ingest", PRIME, "--experiment", "A", "-w", wh)
    assert code == code_after == 2, (out, err)
    assert raced == _one_error_line(err_after) and "synthtrace runs move" in raced, (raced, err_after)
    code, out, _ = run_cli("sql", "SELECT experiment FROM runs", "-w", wh, "-f", "csv")
    assert code == 0 and out.replace('"', "").split() == ["experiment", "C"]
