"""Attack 14 F11: `runs rm` removes a folder's last index entry and then the emptied folders; an ingest that had just
made them (``remember``: mkdir, then touch of its run's entry) met a missing folder and failed, a sound trace
refused for another run's removal. The window (microseconds) is widened here: the removal runs exactly between the
ingest's mkdir and its touch."""
from __future__ import annotations

import os
from pathlib import Path

from synthtrace.warehouse import Warehouse
from synthtrace.warehouse import folder_index
from synthtrace.warehouse.folder_index import folder_runs, forget_runs, remember


def test_remember_survives_a_runs_rm_that_removes_its_emptied_folder(tmp_path, monkeypatch):
    wh = Warehouse(tmp_path / "wh")
    remember(wh, "F", "prog", "run_a")
    real_open = os.open
    raced = []

    def create(path, *args, **kw):
        if not raced and Path(path).name == "run_b":  # a `runs rm run_a` in between the mkdir and the file's create
            raced.append(True)
            forget_runs(wh, ["run_a"])
            assert not (folder_index.index_root(wh) / "F").exists()
        return real_open(path, *args, **kw)

    monkeypatch.setattr(os, "open", create)
    remember(wh, "F", "prog", "run_b")
    assert raced == [True]
    assert folder_runs(wh, "F") == {"prog": ["run_b"]}
