"""B1 (bench21, issue 23 item 11): a query bound by path whose run is removed while the query checks that run's
files against their checksums (the manifest found, the file gone a moment later) is answered again as one state
of the warehouse, never a bare FileNotFoundError."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from testing.stored_runs import warehouse_with_runs

pytestmark = pytest.mark.real_traces

COUNTS = "SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM bursts)"


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> Path:
    """A warehouse of two stored runs of the real jacobi trace (one ingested, one copy under another id)."""
    return warehouse_with_runs(tmp_path_factory.mktemp("two") / "wh", 2).root


def _bound_by_path(src: Path, tmp_path: Path):
    """A copy of ``src`` whose queries find no room for links in `.staging` (as without write access to it)."""
    from synthtrace.warehouse.layout import Warehouse

    wh = Warehouse(tmp_path / "wh")
    shutil.copytree(src, wh.root)
    return wh


def _removed_after_its_checksums_are_read(monkeypatch, victim: Path, trash: Path) -> None:
    """In the query's child: the moment the checksums of ``victim``'s run.parquet have been looked up, and before
    the file itself is looked at, ``victim`` is removed as ``Warehouse.remove`` does (renamed away, then deleted)."""
    from synthtrace.warehouse import checksums

    real = checksums.recorded

    def recorded(place):
        found = real(place)
        if os.fspath(place) == str(victim / "run.parquet") and victim.exists():
            os.rename(victim, trash)
            shutil.rmtree(trash)
        return found

    monkeypatch.setattr(checksums, "recorded", recorded)


def test_a_run_removed_while_its_files_are_checked_is_answered_again(two_runs, tmp_path, monkeypatch):
    from synthtrace.warehouse import snapshot
    from synthtrace.warehouse.sql import query_rows

    wh = _bound_by_path(two_runs, tmp_path)
    monkeypatch.setattr(snapshot, "_links_folder", lambda *_: None)
    one = query_rows(wh, COUNTS)[1][0]
    victim = sorted(wh.runs_dir.iterdir())[-1]
    _removed_after_its_checksums_are_read(monkeypatch, victim, tmp_path / "removed")
    got = query_rows(wh, COUNTS)[1][0]
    assert not victim.exists()  # the writer acted inside the check
    assert got == (1, one[1] // 2)  # read again: the warehouse without the run


def test_the_cli_answers_a_query_whose_run_is_removed_while_its_files_are_checked(two_runs, tmp_path, monkeypatch,
                                                                                   run_cli):
    from synthtrace.warehouse import snapshot

    wh = _bound_by_path(two_runs, tmp_path)
    monkeypatch.setattr(snapshot, "_links_folder", lambda *_: None)
    victim = sorted(wh.runs_dir.iterdir())[-1]
    _removed_after_its_checksums_are_read(monkeypatch, victim, tmp_path / "removed")
    code, out, err = run_cli("sql", "-w", wh.root, "SELECT count(*) AS n FROM runs", "--format", "csv")
    assert (code, out.split()[-1]) == (0, "1"), (out, err)
