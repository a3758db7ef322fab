"""Attack 16 F6: the first night into a NEW warehouse that is a parent of its drop folder built the warehouse around
the drop (its lock file and quarantine inside the warehouse), and every later night was refused; and any command made
a warehouse in any non-empty folder (the user's files beside ``runs/``), under which every output was then refused.
A drop under the ``-w`` folder is refused whether the warehouse exists yet or not, and a new warehouse is made only in
a missing or empty folder."""
from __future__ import annotations

import pytest

from synthtrace.warehouse import Warehouse
from synthtrace.warehouse.errors import WarehouseError
from synthtrace.warehouse.layout import MARKER
from testing.traces import PRIME, copy_trace


def test_a_drop_under_a_warehouse_not_made_yet_is_refused(tmp_path, run_cli):
    site = tmp_path / "site"
    copy_trace(PRIME, site / "drop" / "e")
    code, out, err = run_cli("nightly", "--drop", site / "drop", "-w", site, "--settle", "0", "--skip", "report",
                             "--skip", "retrain")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "lies inside the warehouse" in err, err
    assert sorted(p.name for p in site.iterdir()) == ["drop"]
    assert sorted(p.name for p in (site / "drop").iterdir()) == ["e"]


def test_a_warehouse_is_made_only_in_a_missing_or_empty_folder(tmp_path, run_cli):
    home = tmp_path / "home"
    (home / "docs").mkdir(parents=True)
    (home / "notes.txt").write_text("mine\n")
    code, out, err = run_cli("ingest", "-w", home, copy_trace(PRIME, tmp_path / "t"))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{home}: not a synthtrace warehouse" in err and "'docs', 'notes.txt'" in err and "nothing was made" in err
    assert sorted(p.name for p in home.iterdir()) == ["docs", "notes.txt"]
    with pytest.raises(WarehouseError, match="not empty"):
        Warehouse(home).ensure()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert (Warehouse(empty).ensure().root / MARKER).is_file()
    assert (Warehouse(tmp_path / "new" / "wh").ensure().root / MARKER).is_file()


def test_a_warehouse_being_made_or_without_its_marker_is_taken_as_it_is(tmp_path):
    """Another writer making it at this moment (runs/ made, no marker yet); an older warehouse whose marker went."""
    (tmp_path / "making" / "runs").mkdir(parents=True)
    Warehouse(tmp_path / "making").ensure()
    old = Warehouse(tmp_path / "old").ensure()
    (old.root / MARKER).unlink()
    (old.root / "report.html").write_text("")
    Warehouse(old.root).ensure()
