"""Output paths as the user typed them (attack 10's tiny items, issue 23): ``-`` alone is standard output and
``./-`` the file named ``-``; a FILE that ends in ``/`` names a folder; a FOLDER option given ``''`` or ``-`` names
none; an output's folder is never made (``-o /nonexistent/x.json`` made ``/nonexistent``, as root anywhere); and
``simulate --scale`` has an upper bound. Each refusal is one line, exit 2, before any work, nothing written."""
from __future__ import annotations

from pathlib import Path

import pytest

from synthtrace.warehouse.layout import Warehouse

PLAN = ["plan", "--counters", "PAPI_L1_DCM", "--slots", "4", "-f", "json"]


@pytest.fixture
def wh(tmp_path: Path) -> Path:
    return Warehouse(tmp_path / "wh").ensure().root


def _refused(run_cli, *args) -> str:
    code, out, err = run_cli(*args)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, (code, out, err)
    return lines[0]


def test_dot_slash_dash_is_a_file_named_dash(tmp_path, wh, run_cli, monkeypatch):
    """``./-`` is how a user names the file ``-``; pathlib reads it as ``-``, which ``sql`` and ``plan`` wrote to
    standard output (``-`` alone still is: tests/test_cli_edge.py)."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("sql", "SELECT 42 AS answer", "-w", wh, "-f", "csv", "-o", "./-")
    assert code == 0 and (tmp_path / "-").read_text() == '"answer"\n42\n' and "42" not in out, (out, err)
    (tmp_path / "-").unlink()
    code, out, err = run_cli(*PLAN, "-o", "./-")
    assert code == 0 and '"runs"' in (tmp_path / "-").read_text() and '"runs"' not in out, (out, err)


@pytest.mark.parametrize("command", [["sql", "SELECT 1 AS a", "-w", "{wh}", "-o"], [*PLAN, "-o"],
                                     ["report", "-w", "{wh}", "--out"], ["export", "x", "-w", "{wh}", "-o"]])
def test_a_file_that_ends_in_a_slash_is_refused(tmp_path, wh, run_cli, monkeypatch, command):
    """``sql -o a.csv/`` wrote ``a.csv`` (the slash dropped by pathlib), where ``export -o DIR`` says "is a
    folder"."""
    monkeypatch.chdir(tmp_path)
    args = [str(a).replace("{wh}", str(wh)) for a in command]
    line = _refused(run_cli, *args, "a.csv/")
    assert "a.csv/ ends in /: it names a folder" in line and not (tmp_path / "a.csv").exists()


@pytest.mark.parametrize("plots", ["", "-"])
def test_report_plots_that_name_no_folder_are_refused(tmp_path, wh, run_cli, monkeypatch, plots):
    """``--plots ''`` wrote the report's PNGs into the current folder; ``--plots -`` made a folder named ``-``
    (where ``--out -`` is standard output)."""
    monkeypatch.chdir(tmp_path)
    line = _refused(run_cli, "report", "-w", wh, "--plots", plots)
    assert "'--plots'" in line and ("names no folder" if not plots else "- is standard output") in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wh"]


@pytest.mark.parametrize("out_dir", ["", "-"])
def test_simulate_into_no_folder_is_refused(tmp_path, run_cli, monkeypatch, out_dir):
    monkeypatch.chdir(tmp_path)
    line = _refused(run_cli, "simulate", out_dir, "--pattern", "halo", "--runs", "1", "--iterations", "2")
    assert "'out_dir'" in line and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", [["sql", "SELECT 1 AS a", "-w", "{wh}", "-o"], [*PLAN, "-o"],
                                     ["report", "-w", "{wh}", "--out"], ["export", "x", "-w", "{wh}", "-o"]])
def test_an_output_in_a_folder_that_does_not_exist_is_refused(tmp_path, wh, run_cli, command):
    """``export -o /nonexistent/x.json`` made ``/nonexistent`` (parents made; as root that is anywhere), and every
    --output/--out made its folders alike; now the folder must exist, as for ``cp`` or a shell's ``>``."""
    args = [str(a).replace("{wh}", str(wh)) for a in command]
    out = tmp_path / "new" / "dir" / "x.csv"
    line = _refused(run_cli, *args, out)
    assert line.endswith(f"{out}: the folder {out.parent} does not exist (an output's folder is not made); make it "
                         "first"), line
    assert not (tmp_path / "new").exists()


def test_merge_export_prv_still_makes_its_folder(tmp_path):
    """``merge --export-prv merged/lulesh`` (the README's line) names a trace's stem: its folder is made when the
    trace is written, so its check up front lets a missing folder pass."""
    from synthtrace.pipelines.cli_base import output_file

    stem = tmp_path / "merged" / "lulesh.prv"
    assert output_file(stem, "--export-prv", folder_made=True) == stem and not stem.parent.exists()


@pytest.mark.parametrize("scale", ["1e300", "1e7"])
def test_simulate_scale_beyond_the_int64_bound_is_refused(tmp_path, run_cli, scale):
    """``--scale 1e300`` exited 0 after numpy's overflow warnings, its traces holding wrapped (negative) counters
    that ingest then flagged as impossible."""
    line = _refused(run_cli, "simulate", tmp_path / "sim", "--scale", scale, "--pattern", "halo", "--runs", "1")
    assert "--scale must be a positive number at most 1e+06, which keeps every counter and time of a run in a " \
           "signed 64-bit integer" in line
    assert not (tmp_path / "sim").exists()
