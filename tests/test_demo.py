"""`synthtrace demo`, the README's first command: a simulated campaign through the whole nightly flow."""
from __future__ import annotations

import shlex

import pytest

from synthtrace.warehouse import Warehouse
from synthtrace.warehouse.sql import query

pytestmark = pytest.mark.slow


def test_demo_runs_the_night_and_finds_the_injected_regression(prefect_harness, tmp_path, run_cli):
    """Run in a folder a killed demo left (say, Prefect did not start): its marker and a drop folder with a
    half-written trace, no warehouse. The demo replaces it instead of refusing it, runs the night and finds the
    regression it injected; the commands it suggests run as printed; and a demo over the finished one replaces
    that too. (The rerun over a killed demo's folder was a test of its own, with two one-night demos of its own.)"""
    out = tmp_path / "demo"
    (out / "drop" / "stencil").mkdir(parents=True)
    (out / "drop" / "stencil" / "half.prv").write_text("#Paraver (01/01/20 at 10:00):100_ns:1(1):1:1(1:1),0\n")
    (out / ".synthtrace-demo").write_text("made by synthtrace demo\n")
    code, stdout, err = run_cli("demo", "--out", out, "--nights", "8")
    assert code == 0, err
    assert not (out / "drop" / "stencil" / "half.prv").exists()
    wh = out / "warehouse"
    assert "runs ingested" in stdout and "experiments merged   16" in stdout
    assert "alerts               1 " in stdout and "stencil at residual" in stdout
    assert (wh / "report.html").stat().st_size > 10_000
    n_runs = query(Warehouse(wh), "SELECT count(*) FROM runs").column(0)[0].as_py()
    assert n_runs == len(list((out / "drop").rglob("*.prv"))) == len(list(out.rglob("*.prv")))
    merged = query(Warehouse(wh), "SELECT count(DISTINCT experiment) FROM merged_bursts").column(0)[0].as_py()
    assert merged == 16
    alerts = query(Warehouse(wh), "SELECT app, night, magnitude, explained_by FROM regressions").to_pylist()
    assert [(a["app"], a["night"]) for a in alerts] == [("stencil", 4)]
    assert 0.2 < alerts[0]["magnitude"] < 0.4  # 30 % more work injected in the main kernel
    assert "instructions" in alerts[0]["explained_by"]
    # the commands it suggests: each on one line of its own (never wrapped into a box), and each runs as printed
    tries = stdout.split("try:\n", 1)[1].splitlines()
    assert len(tries) == 4 and all(t.startswith("  synthtrace ") for t in tries)
    for line in tries:
        code, _, err = run_cli(*shlex.split(line)[1:])
        assert code == 0, (line, err)
    code, stdout, err = run_cli("demo", "--out", out, "--nights", "1")  # and again, over the finished demo
    assert code == 0, err
    assert query(Warehouse(wh), "SELECT count(*) FROM runs").column(0)[0].as_py() == len(list(out.rglob("*.prv")))


def test_demo_refuses_to_wipe_a_folder_it_did_not_make(tmp_path, run_cli):
    (tmp_path / "precious.txt").write_text("keep me")
    code, _, err = run_cli("demo", "--out", tmp_path)
    assert code == 2 and "not a synthtrace demo folder" in err
    assert (tmp_path / "precious.txt").read_text() == "keep me"
