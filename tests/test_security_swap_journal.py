"""A swap journal in ``.staging`` (written by a writer between the two renames of a directory swap) is acted on only
where the warehouse's own writers put its folders: ``.staging`` is writable by whoever may query (the snapshots'
links), so a planted journal must not make the next writer move a folder from, or to, anywhere else (issue 23)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from synthtrace.warehouse.layout import Warehouse


def _plant(wh: Warehouse, doc: dict, folder: Path | None = None) -> Path:
    """A journal of a writer that is gone (pid 999999) in the writers' journal folder (``.locks``: a writer killed
    between its renames left it), or in ``folder``."""
    journal = (folder or wh.journal_dir) / "x.abcd1234.999999.swap.json"
    journal.parent.mkdir(exist_ok=True)
    journal.write_text(json.dumps(doc))
    return journal


@pytest.mark.parametrize("doc", [
    {"target": "{out}/stolen", "old": "{out}/victim", "new": "x"},                 # absolute paths
    {"target": "runs/stolen", "old": "../victim", "new": ".staging/none"},          # old outside the warehouse
    {"target": "../stolen", "old": ".staging/none", "new": "../victim"},            # target and new outside
    {"target": "runs/stolen", "old": ".staging/../../victim", "new": ".staging/x"},  # dot-dot inside a name
], ids=["absolute", "old-outside", "target-outside", "dot-dot"])
def test_a_planted_journal_moves_nothing_outside_the_warehouse(tmp_path: Path, doc: dict) -> None:
    wh = Warehouse(tmp_path / "wh").ensure()
    victim = tmp_path / "victim"
    (victim / "data").mkdir(parents=True)
    journal = _plant(wh, {k: v.format(out=tmp_path) for k, v in doc.items()})
    wh.ensure()  # what every writer does first
    assert (victim / "data").is_dir(), "a folder outside the warehouse was moved"
    assert not (tmp_path / "stolen").exists() and not (wh.runs_dir / "stolen").exists()
    assert not journal.exists()


def test_a_journal_of_a_swap_killed_between_its_renames_is_still_finished(tmp_path: Path) -> None:
    """The journal _swap writes (paths relative to the warehouse): the new directory is put in place."""
    wh = Warehouse(tmp_path / "wh").ensure()
    new = wh.staging_dir / "r1.abcd1234.999999"
    (new / "bursts").mkdir(parents=True)
    old = wh.staging_dir / "r1.old.abcd1234.999999"
    old.mkdir()
    _plant(wh, {"target": "runs/r1", "old": os.path.relpath(old, wh.root), "new": os.path.relpath(new, wh.root)})
    wh.ensure()
    assert (wh.runs_dir / "r1" / "bursts").is_dir()


def test_a_fifo_or_a_link_to_dev_zero_planted_as_a_record_neither_hangs_nor_fills_memory(tmp_path: Path) -> None:
    """Attack 6 F14: a FIFO planted as ``.staging/*.swap.json`` hung every writer (ensure() read it), a link to
    /dev/zero grew one to 2.7 GB; an experiment.json FIFO hung any reader of the record. Records are read only from
    regular files of at most MAX_RECORD_BYTES reached through no link: these are left out (a journal removed)."""
    import subprocess
    import sys

    wh = Warehouse(tmp_path / "wh").ensure()
    wh.journal_dir.mkdir(exist_ok=True)
    os.mkfifo(wh.journal_dir / "x.abcd1234.999999.swap.json")
    (wh.journal_dir / "y.abcd1234.999999.swap.json").symlink_to("/dev/zero")
    (wh.experiments_dir / "e").mkdir()
    os.mkfifo(wh.experiments_dir / "e" / "experiment.json")
    probe = "\n".join([
        "import resource, sys",
        "resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))  # the old code's read of /dev/zero: MemoryError",
        "from synthtrace.warehouse.layout import Warehouse",
        "wh = Warehouse(sys.argv[1]).ensure()  # what every writer does first: finish or drop the journals",
        "print(wh.experiment('e').record())",
        "from pathlib import Path; from synthtrace.warehouse.programs import _indexed",
        "print(_indexed(Path(sys.argv[2])))  # the program index of ingest, a FIFO planted in it",
    ])
    index = tmp_path / "index"
    index.mkdir()
    os.mkfifo(index / "p.json")
    proc = subprocess.run([sys.executable, "-c", probe, str(wh.root), str(index)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and proc.stdout.split() == ["{}", "[]"], proc.stderr[-2000:]
    assert not any(wh.journal_dir.glob("*.swap.json"))


def test_a_journal_planted_in_staging_commits_nothing_and_blocks_no_writer(tmp_path: Path) -> None:
    """Attack 6 F17/F18: whoever may query may write ``.staging``: a journal planted there naming a planted folder
    made the next writer commit it as a run (a forged run in the views), and a FOLDER named like a journal there
    refused every writer for good ("Is a directory"). Writers journal in ``.locks``; what is in ``.staging`` under
    a journal's name is removed, never acted on."""
    wh = Warehouse(tmp_path / "wh").ensure()
    planted = wh.staging_dir / "planted"
    (planted / "bursts").mkdir(parents=True)
    (planted / "run.parquet").write_bytes(b"forged")
    journal = _plant(wh, {"target": "runs/forged", "old": ".staging/nothing", "new": ".staging/planted"},
                     wh.staging_dir)
    (wh.staging_dir / "d.999999.swap.json").mkdir()
    wh.ensure()  # what every writer does first
    with wh.staged(wh.runs_dir / "r1") as stage:  # a writer is not refused
        (stage / "x").write_text("x")
    assert sorted(p.name for p in wh.runs_dir.iterdir()) == ["r1"]
    assert not journal.exists() and not (wh.staging_dir / "d.999999.swap.json").exists()
