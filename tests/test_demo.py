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


@pytest.mark.parametrize("layout", ["nightly", "empty_warehouse", "linked_marker"])
def test_demo_never_replaces_a_folder_without_its_marker(tmp_path, run_cli, monkeypatch, layout):
    """Attack 14 F16: a folder with a ``warehouse/`` (a user's ``drop/`` + ``warehouse/``, the nightly layout) was
    taken for a demo made before the marker and deleted whole. Only the demo's own marker file (a regular file, not
    a link to one) makes a folder the demo's; anything else is refused in one line, nothing deleted."""
    site = tmp_path / "site"
    (site / "drop" / "e").mkdir(parents=True)
    (site / "warehouse").mkdir()
    (site / "drop" / "e" / "mine.txt").write_text("a user's file")
    if layout == "nightly":
        (site / "warehouse" / "runs").mkdir()
        (site / "NOTES.txt").write_text("my notes")
    elif layout == "linked_marker":
        (tmp_path / "marker").write_text("made by synthtrace demo\n")
        (site / ".synthtrace-demo").symlink_to(tmp_path / "marker")
    before = sorted(p.relative_to(site) for p in site.rglob("*"))
    monkeypatch.setattr("synthtrace.simulator.simulate_campaign", _never)  # refused before any work
    code, stdout, err = run_cli("demo", "--out", site, "--nights", "1")
    assert code == 2 and "not a synthtrace demo folder" in err and "nothing was deleted" in err
    assert len(err.strip().splitlines()) == 1 and not stdout
    assert sorted(p.relative_to(site) for p in site.rglob("*")) == before
    assert (site / "drop" / "e" / "mine.txt").read_text() == "a user's file"


@pytest.mark.parametrize("inside", ["runs/demo", "runs", ""])
def test_demo_writes_nothing_inside_a_warehouse(tmp_path, run_cli, monkeypatch, inside):
    """Issue 23 item 2: no command's output lands inside a warehouse: a new or empty folder in one was taken."""
    from synthtrace.warehouse import Warehouse

    wh = Warehouse(tmp_path / "wh").ensure().root
    monkeypatch.setattr("synthtrace.simulator.simulate_campaign", _never)
    before = sorted(p.relative_to(wh) for p in wh.rglob("*"))
    code, _, err = run_cli("demo", "--out", wh / inside, "--nights", "1")
    assert code == 2 and "lies inside the warehouse" in err and len(err.strip().splitlines()) == 1, err
    assert sorted(p.relative_to(wh) for p in wh.rglob("*")) == before


def test_demo_refuses_a_link_as_its_folder(tmp_path, run_cli, monkeypatch):
    """A link to a demo's folder is not followed (rmtree of a link fails half-way): one line, nothing deleted."""
    real = tmp_path / "real"
    real.mkdir()
    (real / ".synthtrace-demo").write_text("made by synthtrace demo\n")
    (tmp_path / "link").symlink_to(real)
    monkeypatch.setattr("synthtrace.simulator.simulate_campaign", _never)
    code, _, err = run_cli("demo", "--out", tmp_path / "link", "--nights", "1")
    assert code == 2 and "a link is not followed" in err and len(err.strip().splitlines()) == 1
    assert (real / ".synthtrace-demo").is_file()


def _never(*args: object, **kwargs: object) -> None:
    raise AssertionError("the demo began its work in a folder it should have refused")
