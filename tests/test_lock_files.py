"""Attack 16 F1, F4: the lock files under a warehouse's ``.locks/`` wrote through what was planted there. Every
writer (ingest, merge, runs rm|move, alerts, pop) opened its lock with ``open(path, "w")``: a link there had its
target emptied (any file the account may write), a FIFO hung the writer for good. The night lock refused every kind
but a regular file, yet a second name (a hard link) of a run's file passed, and the night truncated it and wrote
its holder record in: the run was lost. Both locks now open their file as the night lock does (no link followed, no
FIFO waited on, never truncated), refuse anything but a regular file of one name in one line, nothing done, and the
night's holder record is written beside the lock, into a file of its own."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from synthtrace.warehouse import Warehouse, folder_index
from synthtrace.warehouse.errors import WarehouseError
from synthtrace.warehouse.night_lock import NIGHT_LOCK, NIGHT_RECORD, night_lock
from testing.traces import JACOBI, PRIME, copy_trace


def _index_lock(wh: Path) -> Path:
    """The writers' lock every ingest takes (of the folder index)."""
    target = folder_index.index_root(Warehouse(wh))
    return wh / ".locks" / f"{target.parent.name}.{target.name}.lock"


@pytest.mark.parametrize("planted", ["symlink", "hardlink"])
def test_a_link_as_a_writers_lock_is_refused_and_its_target_kept(tmp_path, run_cli, planted):
    wh, precious = tmp_path / "wh", tmp_path / "elsewhere.txt"
    assert run_cli("ingest", "-w", wh, copy_trace(PRIME, tmp_path / "a"))[0] == 0
    precious.write_text("precious\n")
    lock = _index_lock(wh)
    lock.unlink(missing_ok=True)
    (lock.symlink_to if planted == "symlink" else lock.hardlink_to)(precious)
    code, out, err = run_cli("ingest", "-w", wh, copy_trace(JACOBI, tmp_path / "b"))
    kind = "a symbolic link" if planted == "symlink" else "a file of 2 names"
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"error: {lock}: {kind}") and "where a writers' lock belongs" in err
    assert "nothing was written" in err
    assert precious.read_text() == "precious\n"
    assert len(list((wh / "runs").iterdir())) == 1  # only the first run


_FIFO = """
import os, sys
from pathlib import Path
from synthtrace.warehouse import Warehouse
from synthtrace.warehouse.errors import WarehouseError
wh = Warehouse(Path(sys.argv[1])).ensure()
target = wh.experiment_dir("e")
wh.journal_dir.mkdir(exist_ok=True)
os.mkfifo(wh.journal_dir / f"{target.parent.name}.{target.name}.lock")
try:
    with wh.writers_lock(target):
        print("held")
except WarehouseError as exc:
    print(exc)
"""


def test_a_fifo_as_a_writers_lock_is_refused_at_once(tmp_path):
    """In a process of its own: the old code waited on the FIFO for good."""
    done = subprocess.run([sys.executable, "-c", _FIFO, str(tmp_path / "wh")], capture_output=True, text=True,
                          timeout=120, check=True)
    assert "a FIFO where a writers' lock belongs" in done.stdout, done


def test_a_hard_link_as_the_night_lock_is_refused_and_the_run_kept(tmp_path, run_cli):
    wh, drop = tmp_path / "wh", tmp_path / "drop"
    assert run_cli("ingest", "-w", wh, copy_trace(PRIME, tmp_path / "a"))[0] == 0
    (run,) = (wh / "runs").iterdir()
    stored = (run / "run.parquet").read_bytes()
    lock = wh / ".locks" / NIGHT_LOCK
    lock.unlink(missing_ok=True)
    lock.hardlink_to(run / "run.parquet")
    copy_trace(JACOBI, drop / "e")
    with pytest.raises(WarehouseError, match="a file of 2 names .* where the night lock belongs"):
        with night_lock(Warehouse(wh), drop):
            pytest.fail("the night ran")
    code, out, err = run_cli("nightly", "--drop", drop, "-w", wh, "--settle", "0", "--skip", "report",
                             "--skip", "retrain")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "where the night lock belongs" in err, err
    assert (run / "run.parquet").read_bytes() == stored
    assert len(list((wh / "runs").iterdir())) == 1


def test_the_night_lock_file_is_never_written(tmp_path):
    """A lock file made by an older night holds its record: left as it is; who holds it is said beside it."""
    wh, drop = tmp_path / "wh", tmp_path / "drop"
    drop.mkdir()
    journal = Warehouse(wh).ensure().journal_dir
    journal.mkdir()
    lock = journal / NIGHT_LOCK
    lock.write_text("older bytes")
    with night_lock(Warehouse(wh), drop):
        assert f'"pid": {os.getpid()}' in (lock.parent / NIGHT_RECORD).read_text()
    assert lock.read_text() == "older bytes"
