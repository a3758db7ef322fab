"""No command's output lands inside a warehouse, and an exported trace never replaces a link or a special file
(issue 23 items 1 and 2, as a fresh attacker found them left open for ``merge --export-prv``, ``report --plots``
and ``simulate OUT_DIR``): one line, exit 2, before any work, and nothing written."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from synthtrace.warehouse.layout import Warehouse


@pytest.fixture
def wh(tmp_path: Path) -> Warehouse:
    w = Warehouse(tmp_path / "wh").ensure()
    (w.runs_dir / "r1").mkdir()
    return w


def _refused(run_cli, *args) -> str:
    code, _, err = run_cli(*args)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    return lines[0]


def test_merge_export_into_a_run_folder_is_refused(wh: Warehouse, run_cli) -> None:
    line = _refused(run_cli, "merge", "lulesh", "-w", wh.root, "--export-prv", wh.runs_dir / "r1" / "run")
    assert "lies inside the warehouse" in line
    assert sorted(p.name for p in (wh.runs_dir / "r1").iterdir()) == []


def test_report_plots_inside_the_warehouse_are_refused(wh: Warehouse, tmp_path: Path, run_cli) -> None:
    line = _refused(run_cli, "report", "--out", tmp_path / "r.html", "-w", wh.root, "--plots", wh.runs_dir / "plots")
    assert "lies inside the warehouse" in line and not (wh.runs_dir / "plots").exists()


def test_simulate_into_the_warehouse_is_refused(wh: Warehouse, run_cli) -> None:
    line = _refused(run_cli, "simulate", wh.runs_dir / "sim", "--pattern", "halo", "--runs", "1")
    assert "lies inside the warehouse" in line and not (wh.runs_dir / "sim").exists()


@pytest.mark.parametrize("kind", ["fifo", "symlink"])
def test_merge_export_never_replaces_a_fifo_or_a_link(wh: Warehouse, tmp_path: Path, run_cli, kind: str) -> None:
    out = tmp_path / "ep"
    out.mkdir()
    if kind == "fifo":
        os.mkfifo(out / "m.prv")
    else:
        (tmp_path / "elsewhere.prv").write_text("kept\n")
        (out / "m.prv").symlink_to(tmp_path / "elsewhere.prv")
    line = _refused(run_cli, "merge", "lulesh", "-w", wh.root, "--export-prv", out / "m")
    assert "not replaced" in line
    assert (out / "m.prv").is_fifo() if kind == "fifo" else (out / "m.prv").is_symlink()
