"""`synthtrace demo`, the README's first command: a simulated campaign through the whole nightly flow."""
from __future__ import annotations

import pytest

from synthtrace.warehouse.sql import query

pytestmark = pytest.mark.slow


def test_demo_runs_the_night_and_finds_the_injected_regression(prefect_harness, tmp_path, run_cli):
    out = tmp_path / "demo"
    code, stdout, err = run_cli("demo", "--out", out, "--nights", "8")
    assert code == 0, err
    wh = out / "warehouse"
    assert "runs ingested" in stdout and "experiments merged   16" in stdout
    assert "alerts               1 " in stdout and "stencil at residual" in stdout
    assert (wh / "report.html").stat().st_size > 10_000
    n_runs = query(wh, "SELECT count(*) FROM runs").column(0)[0].as_py()
    assert n_runs == len(list((out / "drop").rglob("*.prv")))
    merged = query(wh, "SELECT count(DISTINCT experiment) FROM merged_bursts").column(0)[0].as_py()
    assert merged == 16
    alerts = query(wh, "SELECT app, night, magnitude, explained_by FROM regressions").to_pylist()
    assert [(a["app"], a["night"]) for a in alerts] == [("stencil", 4)]
    assert 0.2 < alerts[0]["magnitude"] < 0.4  # 30 % more work injected in the main kernel
    assert "instructions" in alerts[0]["explained_by"]


def test_demo_refuses_to_wipe_a_folder_it_did_not_make(tmp_path, run_cli):
    (tmp_path / "precious.txt").write_text("keep me")
    code, _, err = run_cli("demo", "--out", tmp_path)
    assert code == 2 and "not a synthtrace demo folder" in err
    assert (tmp_path / "precious.txt").read_text() == "keep me"
