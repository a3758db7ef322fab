"""Refusals that name their cause (issue 23, attack 9's tiny findings): a trace name holding a byte that is not
UTF-8 is said to hold that byte, not "a control character"; a run folder on another file system than the
warehouse's ``.staging`` is said to be one, not "Invalid cross-device link"."""
from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from testing.traces import PRIME, tree_digest

pytestmark = pytest.mark.real_traces


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err[-3000:]
    return lines[0]


def _stored(wh: Path) -> dict[str, str]:
    """The warehouse's files but its writers' lock files (taking a lock creates one)."""
    return {k: v for k, v in tree_digest(wh).items() if not k.startswith(".locks/")}


def test_a_byte_of_a_trace_name_that_is_not_utf8_is_called_so(tmp_path, run_cli):
    """``pr\\xffime.prv`` was refused as holding "a control character (U+DCFF)": the lone surrogate Python holds
    such a byte as."""
    folder = tmp_path / "t"
    folder.mkdir()
    prv = Path(os.fsdecode(bytes(folder) + b"/pr\xffime.prv"))
    shutil.copyfile(PRIME, prv)
    code, _, err = run_cli("ingest", prv, "-w", tmp_path / "wh")
    line = _one_error_line("\n".join(x for x in err.splitlines() if not x.startswith("warning: ")))
    assert code == 2 and "holds a byte that is not UTF-8 (0xFF) at character 3" in line, err
    assert "control character" not in line


@pytest.mark.parametrize("command", ["ingest", "runs-rm"])
def test_a_run_folder_on_another_file_system_is_said_to_be_one(tmp_path, run_cli, monkeypatch, command):
    """With ``runs/`` mounted apart (a bind mount, another disk), every rename between it and ``.staging`` fails
    with EXDEV, and writers said "[Errno 18] Invalid cross-device link". Simulated: os.rename fails so for any path
    below ``runs/`` (mounting needs privileges a test does not have)."""
    wh = tmp_path / "wh"
    code, _, err = run_cli("ingest", PRIME, "--experiment", "p", "-w", wh)
    assert code == 0, err
    (run_id,) = [p.name for p in (wh / "runs").iterdir()]
    if command == "ingest":
        shutil.rmtree(wh / "runs" / run_id)
    before = _stored(wh)
    real_rename, runs = os.rename, str(wh / "runs") + os.sep

    def apart(src, dst, *args, **kwargs):
        if (os.fspath(src).startswith(runs)) != (os.fspath(dst).startswith(runs)):
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), os.fspath(src), None, os.fspath(dst))
        return real_rename(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "rename", apart)
    args = ["ingest", PRIME, "--experiment", "p"] if command == "ingest" else ["runs", "rm", run_id]
    code, _, err = run_cli(*args, "-w", wh)
    monkeypatch.undo()
    line = _one_error_line("\n".join(x for x in err.splitlines() if not x.startswith("warning: ")))
    assert code == 2 and "on another file system" in line and str(wh / ".staging") in line, err
    assert "cross-device" not in line
    assert _stored(wh) == before
