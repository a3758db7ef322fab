"""Outputs by the outputs' rule (issue 23 items 1-2), attack 20.

F4: every ``--output``/``--out`` whose folder's name is not UTF-8 was refused as "the warehouse's path holds a byte
that is not UTF-8": only a warehouse's path must be UTF-8 (its Parquet reader and writer), an output's need not."""
from __future__ import annotations

import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from synthtrace.warehouse import Warehouse

LATIN1 = os.fsdecode(b"out\xff")  # a folder name of one Latin-1 byte, not UTF-8


@pytest.fixture
def empty_wh(tmp_path) -> Path:
    Warehouse(tmp_path / "wh").ensure()
    return tmp_path / "wh"


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_an_output_in_a_folder_whose_name_is_not_utf8_is_written(empty_wh, tmp_path, run_cli, fmt):
    folder = tmp_path / LATIN1
    folder.mkdir()
    out = folder / f"r.{fmt}"
    code, _, err = run_cli("sql", "-w", empty_wh, "--format", fmt, "--output", out, "SELECT 7 AS x")
    assert code == 0, err  # was rc 2 "the warehouse's path holds a byte that is not UTF-8"
    if fmt == "parquet":  # pyarrow takes a path as UTF-8 text: the file is opened by Python
        with out.open("rb") as fh:
            assert pq.read_table(fh).column("x").to_pylist() == [7]
    else:
        assert "7" in out.read_text()


def test_a_report_in_a_folder_whose_name_is_not_utf8_is_written(empty_wh, tmp_path, run_cli):
    out = tmp_path / LATIN1 / "r.html"
    out.parent.mkdir()
    code, _, err = run_cli("report", "-w", empty_wh, "--out", out)
    assert code == 0 and out.read_text().startswith("<!DOCTYPE html>"), err


# ------------------------------------------------------------------------------------------------------ F15, F16
# A link at the name of a file a command puts into its output folder (report --plots, simulate OUT_DIR) was
# written through: a link to a stored run's run.parquet replaced the run's record with a PNG or a trace. Each such
# file now follows the outputs' rule: a link into a warehouse is refused in one line before any file is placed
# (nothing of the warehouse changed), a link elsewhere followed (the link stays, its file written) as -o does.

def _stored_victim(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A warehouse holding one stored table (its path returned) and the digest of the warehouse's files."""
    import polars as pl

    from testing.traces import tree_digest

    wh = Warehouse(tmp_path / "wh")
    wh.update_dir(wh.experiment_dir("exp"), {"kept": pl.DataFrame({"a": [1]})})
    return wh.experiment_dir("exp") / "kept.parquet", tree_digest(wh.root)


def _one_error_line(code: int, err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


SIMULATE = ["--app", "s", "--pattern", "cg", "--ranks", "2", "--iterations", "3", "--runs", "1"]


@pytest.mark.parametrize("name", ["s/s.run0.prv", "ground_truth/kernels.parquet", "s"],
                         ids=["trace", "ground-truth", "linked-folder"])
def test_simulate_never_writes_through_a_link_into_a_warehouse(tmp_path, run_cli, name):
    from testing.traces import tree_digest

    victim, before = _stored_victim(tmp_path)
    out = tmp_path / "sim"
    link = out / name
    link.parent.mkdir(parents=True)
    link.symlink_to(victim.parent if name == "s" else victim)
    code, _, err = run_cli("simulate", out, *SIMULATE)
    line = _one_error_line(code, err)  # was rc 0, the stored table replaced by a trace or ground truth
    assert "lies inside the warehouse" in line and str(tmp_path / "wh") in line, line
    assert tree_digest(tmp_path / "wh") == before and link.is_symlink()
    assert not (out / "ground_truth" / "runs.parquet").exists()  # nothing placed


def test_simulate_follows_a_link_to_a_file_outside_every_warehouse(tmp_path, run_cli):
    mine = tmp_path / "mine.prv"
    mine.write_text("old")
    link = tmp_path / "sim" / "s" / "s.run0.prv"
    link.parent.mkdir(parents=True)
    link.symlink_to(mine)
    code, _, err = run_cli("simulate", tmp_path / "sim", *SIMULATE)
    assert code == 0, err
    assert link.is_symlink() and mine.read_text().startswith("#Paraver")  # as -o follows a link


@pytest.mark.real_traces
def test_report_plots_never_write_through_a_link_into_a_warehouse(merged_lulesh, tmp_path, run_cli):
    import shutil

    from testing.traces import tree_digest

    wh = tmp_path / "wh"
    shutil.copytree(merged_lulesh, wh, symlinks=True)
    plots = tmp_path / "plots"
    code, _, err = run_cli("report", "-w", wh, "--out", tmp_path / "first.html", "--plots", plots)
    assert code == 0, err
    png = sorted(plots.glob("*.timeline.png"))[0]
    record = next((wh / "runs").glob("*/run.parquet"))
    png.unlink()
    png.symlink_to(record)
    before = tree_digest(wh)
    code, _, err = run_cli("report", "-w", wh, "--out", tmp_path / "r.html", "--plots", plots)
    line = _one_error_line(code, err)  # was: the run's record replaced by a PNG, then called damaged
    assert "lies inside the warehouse" in line and str(png) in line, line
    after = tree_digest(wh)  # what changed, if anything (the writers' lock files aside)
    assert {k: (before.get(k), after.get(k)) for k in before.keys() | after.keys()
            if before.get(k) != after.get(k) and not k.startswith(".locks/")} == {}
    assert png.is_symlink()
