"""Issue 23: the night walks its drop folder once (the traces, and what is named as a trace but is no trace file,
from the same walk), a folder's listing is taken as it comes (none held whole), and what the night lists of the
entries that are no trace files is bounded (the first by path, the rest counted)."""
from __future__ import annotations

import errno
import os
import warnings
from pathlib import Path

from synthtrace.tracelib.formats import source
from synthtrace.tracelib.formats.source import find_traces
from synthtrace.warehouse import Warehouse
from synthtrace.warehouse import drop as drop_mod
from synthtrace.warehouse.drop import discover


def _warned(call, *args, **kwargs) -> tuple[object, list[str]]:
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        out = call(*args, **kwargs)
    return out, [str(w.message) for w in said]


def test_a_folder_of_the_drop_that_cannot_be_listed_is_warned_about_once(tmp_path):
    """A folder whose path passes the system's limit (PATH_MAX) cannot be listed, root or not: the night walked
    its drop folder twice (once for the traces, once for what is named as a trace but is no file) and so said it
    twice."""
    drop = tmp_path / "drop"
    drop.mkdir()
    fd = os.open(drop, os.O_RDONLY)
    try:  # built through folder descriptors: no path of the chain is ever passed whole
        depth = 0
        while len(os.fsencode(drop)) + 201 * depth <= 4200:  # the last folder's path passes 4,096 bytes
            os.mkdir("d" * 200, dir_fd=fd)
            inner = os.open("d" * 200, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd, depth = inner, depth + 1
    finally:
        os.close(fd)
    found, said = _warned(discover, drop, Warehouse(tmp_path / "wh"), settle_s=0)
    assert found.new == [] and found.skipped == [], found
    assert len([s for s in said if "not searched for traces (File name too long)" in s]) == 1, said


def test_a_listing_that_fails_part_way_keeps_what_it_listed_and_is_warned_about_once(tmp_path, monkeypatch):
    """A folder's listing is taken as it comes, not held whole: a trace listed before the listing failed (an NFS
    server gone part way) is found, where the whole folder was lost; the failure said once."""
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / "a.prv").write_bytes(b"")
    (folder / "b.prv").write_bytes(b"")
    real = os.scandir

    class _Failing:
        def __init__(self, path: Path):
            self._it = real(path)

        def __enter__(self):
            return self

        def __exit__(self, *exc: object) -> None:
            self._it.close()

        def __iter__(self):
            yield next(e for e in self._it if e.name == "a.prv")
            raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(source.os, "scandir", lambda p: _Failing(p) if Path(p) == folder else real(p))
    found, said = _warned(find_traces, [tmp_path])
    assert found == [folder / "a.prv"]
    assert said == [f"{folder}: not searched for traces ({os.strerror(errno.EIO)})"]


def test_the_night_lists_the_first_entries_named_as_traces_that_are_no_files_and_counts_the_others(tmp_path,
                                                                                                    monkeypatch):
    """Every such entry was listed, in memory and in the night's summary (a drop folder may hold any number): now
    the first by path, and one line counting the rest."""
    monkeypatch.setattr(drop_mod, "LISTED_NOT_FILES", 3, raising=False)
    drop = tmp_path / "drop"
    drop.mkdir()
    for i in (6, 2, 0, 5, 1, 4, 3):
        os.mkfifo(drop / f"x{i}.prv")
    found = discover(drop, Warehouse(tmp_path / "wh"), settle_s=0)
    assert [(Path(s.path).name, s.reason) for s in found.skipped] == [
        *[(f"x{i}.prv", "is a FIFO (a named pipe), not a trace file: not read") for i in range(3)],
        ("drop", "4 more entries named as traces that are no trace files (folders, FIFOs, links that lead to no "
                 "file), not listed: not read")]
