"""Files written as one set (``merge --export-prv``'s ``.pcf``, ``.row``, ``.prv``: pipelines/cli_base.write_outputs)
are never seen mixed under the name of the set's last file: a process killed between the renames (fault-injected:
killed right after the first file is in place) leaves the old set or no ``.prv``, never the old ``.prv`` beside a new
``.pcf``; the next write into the folder removes the killed one's part folder and says so (issue 23, attack 9)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

_WRITE = """
import os, signal, sys
from pathlib import Path
from synthtrace.pipelines import cli_base

folder, fault = Path(sys.argv[1]), sys.argv[2]
paths = [folder / "t.pcf", folder / "t.row", folder / "t.prv"]
place = cli_base.place_file

def placed_then(src, dest):
    out = place(src, dest)
    if fault == "kill":  # the process dies between the first rename and the others
        os.kill(os.getpid(), signal.SIGKILL)
    return out

def refused(src, dest):
    raise OSError(28, "No space left on device", str(dest))

cli_base.place_file = {"kill": placed_then, "fail": refused, "none": place}[fault]

def write(stage):
    for p in paths:
        (stage / p.name).write_text("new " + p.suffix)

cli_base.write_outputs(paths, write, "--export-prv")
"""


def _write(folder: Path, fault: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _WRITE, str(folder), fault], capture_output=True, text=True,
                          timeout=120, check=False)


def _state(folder: Path) -> dict[str, str | None]:
    files = {s: folder / f"t{s}" for s in (".pcf", ".row", ".prv")}
    return {s: f.read_text() if f.exists() else None for s, f in files.items()}


@pytest.fixture
def old_set(tmp_path: Path) -> Path:
    folder = tmp_path / "out"
    folder.mkdir()
    for s in (".pcf", ".row", ".prv"):
        (folder / f"t{s}").write_text("old " + s)
    return folder


def test_a_kill_between_the_renames_leaves_no_mixed_set(old_set):
    r = _write(old_set, "kill")
    assert r.returncode == -signal.SIGKILL, r.stderr
    state = _state(old_set)
    assert state[".pcf"] == "new .pcf"  # the fault hit after the first file was in place
    assert state[".prv"] is None, state  # no .prv rather than the old one beside the new .pcf (it was)
    r = _write(old_set, "none")  # the next export into the folder
    assert r.returncode == 0, r.stderr
    assert _state(old_set) == {".pcf": "new .pcf", ".row": "new .row", ".prv": "new .prv"}
    assert "was removed" in r.stderr and "killed" in r.stderr
    assert sorted(os.listdir(old_set)) == ["t.pcf", "t.prv", "t.row"]  # the killed one's part folder is gone


def test_a_failure_before_anything_is_placed_keeps_the_old_set(old_set):
    r = _write(old_set, "fail")
    assert r.returncode != 0
    assert _state(old_set) == {".pcf": "old .pcf", ".row": "old .row", ".prv": "old .prv"}
    assert sorted(os.listdir(old_set)) == ["t.pcf", "t.prv", "t.row"]


def test_a_live_writers_part_folder_is_left_alone(old_set):
    """A part folder someone holds (a write in progress) is not another writer's to remove."""
    import fcntl

    live = old_set / ".t.pcf.0123abcd.part"
    live.mkdir()
    fd = os.open(live, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        r = _write(old_set, "none")
        assert r.returncode == 0, r.stderr
        assert live.is_dir() and "was removed" not in r.stderr
    finally:
        os.close(fd)
    assert _state(old_set) == {".pcf": "new .pcf", ".row": "new .row", ".prv": "new .prv"}
