"""Attack 14 F12, F14: a drop folder no night may take traces from is refused in one line, nothing done (one inside a
warehouse, or the warehouse itself; one whose ``.quarantine`` is not a real folder), and the quarantine never
follows a link: broken traces were moved wherever a planted ``.quarantine`` link led, the warehouse included."""
from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

from synthtrace.warehouse import Warehouse
from synthtrace.warehouse.drop import DROP_LOCK, QUARANTINE, REASON_FILE, quarantine


def _broken(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "b.prv.gz"
    path.write_bytes(gzip.compress(b"garbage"))
    return path


@pytest.fixture
def no_night(monkeypatch):
    """A night that got as far as starting Prefect fails the test at once (a refused one never does)."""
    def never() -> None:
        raise AssertionError("the night started where it should have been refused")
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setattr("synthtrace.pipelines.nightly.start_prefect", never)


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("planted", ["link", "dangling_link", "file", "fifo"])
def test_a_quarantine_that_is_not_a_real_folder_is_never_followed(tmp_path, planted):
    """The trace stays where it is, the link's target gets nothing: an OSError saying what is there (the night
    reports the trace as not quarantined)."""
    drop, elsewhere = tmp_path / "drop", tmp_path / "elsewhere"
    elsewhere.mkdir()
    trace = _broken(drop / "e")
    q = drop / QUARANTINE
    if planted == "link":
        q.symlink_to(elsewhere)
    elif planted == "dangling_link":
        q.symlink_to(tmp_path / "nowhere")
    elif planted == "file":
        q.write_text("")
    else:
        os.mkfifo(q)
    with pytest.raises(OSError, match="where a quarantine folder belongs, not followed"):
        quarantine(drop, trace, "broken")
    assert trace.is_file() and list(elsewhere.iterdir()) == [] and not (tmp_path / "nowhere").exists()


def test_a_quarantined_trace_moves_whole_into_its_own_folder(tmp_path):
    """A Paraver trace with its .pcf/.row, and an OTF2 archive (anchor, .def and its folder), each into a folder of
    its own with the reason."""
    drop = tmp_path / "drop"
    prv = _broken(drop / "e")
    for ext in (".pcf", ".row"):
        (drop / "e" / f"b{ext}").write_text(ext)
    (drop / "o" / "run" / "traces").mkdir(parents=True)
    (drop / "o" / "run" / "traces" / "0.evt").write_bytes(b"evt")
    anchor = drop / "o" / "run.otf2"
    anchor.write_bytes(b"anchor")
    (drop / "o" / "run.def").write_bytes(b"def")
    to = quarantine(drop, prv, "broken")
    assert to is not None and to.parent == drop / QUARANTINE
    assert sorted(p.name for p in to.iterdir()) == ["b.pcf", "b.prv.gz", "b.row", REASON_FILE]
    assert (to / REASON_FILE).read_text().splitlines()[1:] == [str(prv), "broken"]
    to = quarantine(drop, anchor, "broken too")
    assert to is not None and _tree(to) == ["reason.txt", "run", "run.def", "run.otf2", "run/traces",
                                            "run/traces/0.evt"]
    assert _tree(drop / "e") == [] and _tree(drop / "o") == []


def test_a_night_over_a_drop_with_a_planted_quarantine_does_nothing(tmp_path, run_cli, no_night):
    drop, wh = tmp_path / "drop", tmp_path / "wh"
    _broken(drop / "e")
    Warehouse(wh).ensure()
    (drop / QUARANTINE).symlink_to(wh / "runs")
    before = _tree(tmp_path)
    code, out, err = run_cli("nightly", "--drop", drop, "-w", wh, "--settle", "0")
    assert code == 2 and "a symbolic link where the drop folder's quarantine folder belongs" in err, (out, err)
    assert len(err.strip().splitlines()) == 1
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("where", ["runs", "root", "same_as_new_warehouse", "runs_sub"])
def test_a_drop_folder_inside_a_warehouse_is_refused_and_nothing_written(tmp_path, run_cli, no_night, where):
    """`--drop WH/runs` or `--drop WH` wrote the night's lock file and quarantine (and traces' folders) into the
    warehouse; `--drop X -w X` would make the drop folder a warehouse."""
    wh = tmp_path / "wh"
    if where == "same_as_new_warehouse":
        drop = wh
    else:
        Warehouse(wh).ensure()
        drop = {"runs": wh / "runs", "root": wh, "runs_sub": wh / "runs" / "e"}[where]
    _broken(drop / "e")
    before = _tree(tmp_path)
    code, out, err = run_cli("nightly", "--drop", drop, "-w", wh, "--settle", "0")
    assert code == 2 and "lies inside the warehouse" in err and "nothing done" in err, (out, err)
    assert len(err.strip().splitlines()) == 1
    assert _tree(tmp_path) == before
    assert not (drop / DROP_LOCK).exists() and not (drop / QUARANTINE).exists()


def test_serve_refuses_a_drop_folder_inside_its_warehouse(tmp_path, run_cli, monkeypatch):
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setattr("prefect.serve", _never_served)
    Warehouse(tmp_path / "wh").ensure()
    code, _, err = run_cli("serve", "--drop", tmp_path / "wh" / "runs", "-w", tmp_path / "wh")
    assert code == 2 and "lies inside the warehouse" in err and len(err.strip().splitlines()) == 1


def _never_served(*args: object, **kwargs: object) -> None:
    raise AssertionError("served a drop folder that should have been refused")
