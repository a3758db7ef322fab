"""A stored folder's listed member that is a symbolic link, met by a WRITER (attack 20 F6): ``runs move`` (and every
other ``Warehouse.update_dir`` writer) rebuilt the folder without it, its new manifest no longer listing it: rc 0,
the run's bursts gone for good and ``runs`` silent. Readers refuse such a folder since attack 19 F3; a writer now
refuses it in the same one line, nothing changed."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import polars as pl
import pytest

from synthtrace.warehouse import Warehouse
from synthtrace.warehouse.errors import DamagedPartError
from testing.traces import tree_digest

RUN_A = "d12d9ce89c673a43"  # 2,140 bursts of the two LULESH runs of merged_lulesh


def _one_line_naming(code: int, err: str, link: Path) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, err
    assert str(link) in lines[0] and "symbolic link" in lines[0] and "never a link" in lines[0], err


def _stored(wh: Path) -> dict[str, str]:
    """What the warehouse ``wh`` stores (its writers' lock files aside)."""
    return {rel: digest for rel, digest in tree_digest(wh).items() if not rel.startswith(".locks/")}


@pytest.mark.real_traces
@pytest.mark.parametrize("member", [f"runs/{RUN_A}/bursts", f"runs/{RUN_A}/bursts/part-00000.parquet"],
                         ids=["bursts-folder", "part-file"])
def test_runs_move_of_a_run_with_a_linked_member_is_refused_and_changes_nothing(merged_lulesh, tmp_path, run_cli,
                                                                               member):
    wh = tmp_path / "wh"
    shutil.copytree(merged_lulesh, wh, symlinks=True)
    link, outside = wh / member, tmp_path / "outside" / Path(member).name
    outside.parent.mkdir()
    shutil.move(link, outside)
    os.symlink(outside, link)
    before, before_outside = _stored(wh), tree_digest(outside.parent)
    code, out, err = run_cli("runs", "move", RUN_A, "-e", "other", "-w", wh)
    _one_line_naming(code, err, link)  # was rc 0 "moved run ...", the link left out of the new manifest
    assert _stored(wh) == before and tree_digest(outside.parent) == before_outside
    assert link.is_symlink() and (wh / "experiments" / "lulesh-8r").is_dir()  # its merge was not invalidated


def _folder_with(tmp_path: Path) -> tuple[Warehouse, Path, Path]:
    """An experiment folder of two tables written by ``update_dir``, its ``kept.parquet`` then moved outside and
    replaced by a link to it: (warehouse, folder, link)."""
    wh = Warehouse(tmp_path / "wh")
    target = wh.experiment_dir("exp")
    wh.update_dir(target, {"kept": pl.DataFrame({"a": [1]}), "old": pl.DataFrame({"b": [2]})})
    outside = tmp_path / "kept.parquet"
    shutil.move(target / "kept.parquet", outside)
    os.symlink(outside, target / "kept.parquet")
    return wh, target, target / "kept.parquet"


def test_any_update_of_a_folder_with_a_linked_listed_member_is_refused(tmp_path):
    wh, target, link = _folder_with(tmp_path)
    before = tree_digest(target)
    with pytest.raises(DamagedPartError) as caught:
        wh.update_dir(target, {"old": pl.DataFrame({"b": [3]})})  # was: done, kept.parquet dropped from the folder
    _one_line_naming(2, str(caught.value), link)
    assert tree_digest(target) == before and link.is_symlink()
    assert not list(wh.staging_dir.iterdir())


def test_an_update_that_replaces_or_drops_the_linked_member_goes_on(tmp_path):
    """The member the update writes anew (or drops) is not left out silently: the update says what it becomes."""
    wh, target, link = _folder_with(tmp_path)
    wh.update_dir(target, {"kept": pl.DataFrame({"a": [5]})})
    assert not link.is_symlink() and pl.read_parquet(link)["a"].to_list() == [5]
    assert pl.read_parquet(tmp_path / "kept.parquet")["a"].to_list() == [1]  # the link's target untouched
    wh, target, link = _folder_with(tmp_path / "again")
    wh.update_dir(target, {"old": pl.DataFrame({"b": [3]})}, drop=["kept.parquet"])
    assert not os.path.lexists(link) and (target / "old.parquet").is_file()
