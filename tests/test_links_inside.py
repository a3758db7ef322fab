"""A symbolic link INSIDE a stored run or experiment folder (attack 19 F3): its ``bursts/`` folder, one part file or
an experiment's table replaced by a link to an outside copy. sql dropped those rows silently while export and
archetypes read through the link and ``runs`` said nothing. A stored folder holds the warehouse's own files, never
a link: every reader refuses it in one line naming the link, and ``runs`` names it."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from synthtrace.warehouse import Warehouse
from synthtrace.warehouse.errors import DamagedPartError
from synthtrace.warehouse.runs import run_bursts

RUN_A = "d12d9ce89c673a43"  # 2,140 bursts of the two LULESH runs of merged_lulesh


def _planted(merged_lulesh: Path, tmp_path: Path, member: str) -> tuple[Path, Path]:
    """A copy of the warehouse whose ``member`` (below it) is moved outside and replaced by a link to it."""
    wh = tmp_path / "wh"
    shutil.copytree(merged_lulesh, wh, symlinks=True)
    inside = wh / member
    outside = tmp_path / "outside" / inside.name
    outside.parent.mkdir()
    shutil.move(inside, outside)
    os.symlink(outside, inside)
    return wh, inside


def _one_line_naming(code: int, err: str, link: Path) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, err
    assert str(link) in lines[0] and "symbolic link" in lines[0] and "never a link" in lines[0], err


@pytest.mark.real_traces
@pytest.mark.parametrize("member", [f"runs/{RUN_A}/bursts", f"runs/{RUN_A}/bursts/part-00000.parquet"],
                         ids=["bursts-folder", "part-file"])
def test_a_link_inside_a_run_folder_is_refused_by_every_reader(merged_lulesh, tmp_path, run_cli, member):
    wh, link = _planted(merged_lulesh, tmp_path, member)
    code, out, err = run_cli("sql", "SELECT run_id, count(*) FROM bursts GROUP BY ALL", "-w", wh, "-f", "csv")
    _one_line_naming(code, err, link)  # was rc 0 without that run's rows
    with pytest.raises(DamagedPartError) as caught:  # the Polars readers (export, archetypes of runs unmerged)
        run_bursts(Warehouse(wh), RUN_A)  # read through the link
    _one_line_naming(2, str(caught.value), link)
    code, out, err = run_cli("runs", "-w", wh)
    said = [line for line in err.splitlines() if line.startswith("warning:")]
    assert code == 0 and len(said) == 1 and str(link) in said[0] and "symbolic link" in said[0], err


@pytest.mark.real_traces
def test_a_linked_experiment_table_is_refused_not_called_missing(merged_lulesh, tmp_path, run_cli):
    wh, link = _planted(merged_lulesh, tmp_path, "experiments/lulesh-8r/merged_bursts.parquet")
    code, out, err = run_cli("sql", "SELECT count(*) FROM merged_bursts", "-w", wh)
    _one_line_naming(code, err, link)  # was "no experiment has been merged yet"
    code, out, err = run_cli("export", "lulesh-8r", "-w", wh, "--format", "csv", "--output", tmp_path / "e.csv")
    _one_line_naming(code, err, link)
    code, out, err = run_cli("runs", "-w", wh)  # named where the runs are listed, as a run's linked member
    said = [line for line in err.splitlines() if line.startswith("warning:")]
    assert code == 0 and len(said) == 1 and str(link) in said[0] and "symbolic link" in said[0], err
