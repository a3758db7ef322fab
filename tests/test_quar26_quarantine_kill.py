"""Attack 26 A2: a night killed inside the quarantine (kill -9, the OOM killer) between the move of a broken trace's
own file and its companions' left the trace in ``.quarantine/<folder>/`` without its reason and its .pcf/.row in the
drop for good, every later night silent. The reason is written first, and the next night finishes the move."""
from __future__ import annotations

from pathlib import Path

import pytest

from synthtrace.warehouse import Warehouse
from synthtrace.warehouse import drop as drop_mod
from synthtrace.warehouse.drop import QUARANTINE, REASON_FILE, discover, quarantine
from testing.traces import PRIME, copy_trace

pytestmark = [pytest.mark.real_traces]


class Killed(BaseException):
    """Stands for a SIGKILL: no handler of the quarantine catches it, nothing after it runs."""


def _cut_prime(folder: Path) -> Path:
    """The real prime_v0 trace with its .prv cut at 5,000 bytes (a broken trace), its .pcf/.row whole."""
    copy_trace(PRIME, folder)
    prv = folder / "prime_v0.prv"
    prv.write_bytes(prv.read_bytes()[:5000])
    return prv


def test_a_night_killed_after_the_first_move_is_finished_by_the_next(tmp_path, monkeypatch):
    drop = tmp_path / "drop"
    prv = _cut_prime(drop / "bad")
    move = drop_mod._move_into

    def move_then_die(src: Path, dfd: int) -> None:
        move(src, dfd)
        raise Killed

    monkeypatch.setattr(drop_mod, "_move_into", move_then_die)
    with pytest.raises(Killed):
        quarantine(drop, prv, "cut short")
    monkeypatch.setattr(drop_mod, "_move_into", move)
    [folder] = (drop / QUARANTINE).iterdir()
    assert (folder / REASON_FILE).read_text().splitlines()[1:] == [str(prv), "cut short"]  # the why, at once
    assert sorted(p.name for p in (drop / "bad").iterdir()) == ["prime_v0.pcf", "prime_v0.row"]

    found = discover(drop, Warehouse(tmp_path / "wh"), settle_s=0)  # the next night
    assert sorted(p.name for p in folder.iterdir()) == ["prime_v0.pcf", "prime_v0.prv", "prime_v0.row", REASON_FILE]
    assert list((drop / "bad").iterdir()) == [] and found.new == []
    assert sorted(Path(t.path).name for t in found.skipped) == ["prime_v0.pcf", "prime_v0.row"]
    assert all(str(folder) in t.reason for t in found.skipped)  # one note each, naming both
    assert discover(drop, Warehouse(tmp_path / "wh"), settle_s=0).skipped == []  # said once


def test_a_trace_gone_before_its_move_leaves_no_folder(tmp_path):
    drop = tmp_path / "drop"
    prv = _cut_prime(drop / "bad")
    for p in list(prv.parent.iterdir()):
        p.unlink()
    assert quarantine(drop, prv, "cut short") is None
    assert list((drop / QUARANTINE).iterdir()) == []


def test_a_planted_list_of_moves_takes_no_file_outside_the_drops_traces(tmp_path):
    """The drop is writable by every job: a quarantine folder's list of moves written by one of them, naming a file
    elsewhere (the user's data, another quarantine's trace), must not make the night move it. Failed first: the
    outside file was moved into the quarantine."""
    drop = tmp_path / "drop"
    (drop / "ok").mkdir(parents=True)
    outside = tmp_path / "data.bin"
    outside.write_bytes(b"the user's data")
    quarantined = drop / QUARANTINE / "earlier" / "x.prv"
    quarantined.parent.mkdir(parents=True)
    quarantined.write_bytes(b"kept")
    planted = drop / QUARANTINE / "planted"
    planted.mkdir()
    (planted / drop_mod.MOVES_FILE).write_bytes(b"".join(b"m" + bytes(p) + b"\0" for p in (outside, quarantined)))
    found = discover(drop, Warehouse(tmp_path / "wh"), settle_s=0)
    assert outside.read_bytes() == b"the user's data" and quarantined.read_bytes() == b"kept"
    assert list(planted.iterdir()) == []
    said = {Path(t.path).name: t.reason for t in found.skipped}
    assert set(said) == {"data.bin", "x.prv"}
    assert all("no part of the trace the folder holds" in r for r in said.values())
