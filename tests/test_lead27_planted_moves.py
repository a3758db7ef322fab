"""Attack 27 A2: a quarantine folder's list of moves planted by any job that can write the drop (as every job can)
still moved what is no broken trace: another user's sound trace (its .prv without its .pcf/.row), a whole folder,
any file, the drop's own lock file (then two nights took the same drop at once). Only a list the night itself wrote
is followed: its first line is the trace's own file, already moved into the folder, and the rest are that trace's
companions; a companion another trace of its folder still reads is copied, never moved."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from synthtrace.warehouse import Warehouse
from synthtrace.warehouse import drop as drop_mod
from synthtrace.warehouse.drop import DROP_LOCK, QUARANTINE, discover
from testing.traces import JACOBI, PRIME, copy_trace

pytestmark = [pytest.mark.real_traces]


def _plant(drop: Path, name: str, listed: list[Path], inside: list[str] = ()) -> Path:
    """A quarantine folder ``name`` with a list of moves of ``listed`` (all ``m``) and files ``inside`` it."""
    folder = drop / QUARANTINE / name
    folder.mkdir(parents=True)
    for f in inside:
        (folder / f).write_bytes(b"planted")
    (folder / drop_mod.MOVES_FILE).write_bytes(b"".join(b"m" + bytes(p) + b"\0" for p in listed))
    return folder


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def test_a_planted_list_takes_no_sound_trace_folder_or_lock_file(tmp_path):
    drop = tmp_path / "drop"
    copy_trace(JACOBI, drop / "userA")
    copy_trace(PRIME, drop / "userB" / "sub")
    (drop / "userB" / "notes.txt").write_text("mine")
    (drop / DROP_LOCK).write_bytes(b"")
    prv = next((drop / "userA").glob("*.prv"))
    before = _files(drop)
    _plant(drop, "a", [prv, prv.with_suffix(".pcf"), prv.with_suffix(".row")])  # a sound trace, still in place
    _plant(drop, "b", [drop / "userB" / "sub", drop / "userB" / "notes.txt"])  # a folder, any file
    _plant(drop, "c", [drop / DROP_LOCK])
    found = discover(drop, Warehouse(tmp_path / "wh"), settle_s=0)
    assert [f for f in _files(drop) if not f.startswith(QUARANTINE)] == before
    said = {Path(t.path).name: t.reason for t in found.skipped}
    assert {prv.name, "sub", "notes.txt", DROP_LOCK} <= set(said)
    assert all("no part of the trace the folder holds" in r for r in said.values())
    assert sorted(Path(t.path).name for t in found.new) == sorted([prv.name, "prime_v0.prv"])  # all still ingested


def test_a_planted_list_with_a_planted_trace_copies_the_companions_a_sound_trace_reads(tmp_path):
    """The folder holds a file named as the listed trace (planted too), the listed trace is gone: the list looks
    like a night's, but the companions it names are read by the sound ``x.prv`` beside: copied, left in place."""
    drop = tmp_path / "drop"
    copy_trace(PRIME, drop / "userA")
    gone = drop / "userA" / "prime_v0.prv.gz"
    pcf, row = drop / "userA" / "prime_v0.pcf", drop / "userA" / "prime_v0.row"
    folder = _plant(drop, "d", [gone, pcf, row], inside=[gone.name])
    discover(drop, Warehouse(tmp_path / "wh"), settle_s=0)
    assert sorted(p.name for p in (drop / "userA").iterdir()) == ["prime_v0.pcf", "prime_v0.prv", "prime_v0.row"]
    assert _files(folder) == sorted([gone.name, pcf.name, row.name])


def test_a_night_killed_before_its_first_move_leaves_the_trace_for_the_next(tmp_path, monkeypatch):
    """review27 L3: killed after the reason and the list were written, before the trace's own file moved: the next
    night removes that folder (its reason would say a trace is quarantined that is not), says nothing of it, and
    takes the trace again. Failed first: every file of the trace refused as 'no part of the trace', the folder kept."""
    drop = tmp_path / "drop"
    prv = copy_trace(PRIME, drop / "bad")

    class Killed(BaseException):
        pass

    def die(src: Path, dfd: int) -> None:
        raise Killed

    monkeypatch.setattr(drop_mod, "_move_into", die)
    try:
        drop_mod.quarantine(drop, prv, "cut short")
    except Killed:
        pass
    monkeypatch.undo()
    [folder] = (drop / QUARANTINE).iterdir()
    found = discover(drop, Warehouse(tmp_path / "wh"), settle_s=0)
    assert not folder.exists() and found.skipped == []
    assert [Path(t.path).name for t in found.new] == [prv.name]
    assert sorted(p.name for p in prv.parent.iterdir()) == ["prime_v0.pcf", "prime_v0.prv", "prime_v0.row"]


def test_a_planted_list_of_a_made_up_otf2_trace_takes_no_folder_and_no_lock_file(tmp_path):
    """attack27 A4: a list naming a made-up ``X.otf2`` (gone: it never was) with a file of that name planted in the
    folder looked like a night's; its "archive folder" ``X`` was any folder of the drop (another user's traces),
    or the drop's lock file (``.synthtrace-night.lock.otf2``). An archive is a folder of .evt/.def files only, a
    ``.def`` a regular file: neither is taken. Failed first: userB/run1 and the lock file moved."""
    drop = tmp_path / "drop"
    copy_trace(PRIME, drop / "userB" / "run1")
    (drop / DROP_LOCK).write_bytes(b"")
    before = _files(drop)
    for name, main in (("x", drop / "userB" / "run1.otf2"), ("y", drop / f"{DROP_LOCK}.otf2")):
        _plant(drop, name, [main, main.with_suffix(".def"), main.with_suffix("")], inside=[main.name])
    discover(drop, Warehouse(tmp_path / "wh"), settle_s=0)
    assert [f for f in _files(drop) if not f.startswith(QUARANTINE)] == before


@pytest.mark.skipif(os.geteuid() != 0, reason="making a folder another account's takes root")
def test_a_list_another_account_wrote_is_not_followed(tmp_path):
    """A quarantine folder and list the night's account did not write (another user's job) are not followed, however
    much they look like a night's (the trace's own file moved in, its companions beside it)."""
    drop = tmp_path / "drop"
    copy_trace(PRIME, drop / "userA")
    prv = drop / "userA" / "prime_v0.prv"
    folder = _plant(drop, "e", [prv, prv.with_suffix(".pcf"), prv.with_suffix(".row")])
    prv.rename(folder / prv.name)
    for f in (folder, folder / drop_mod.MOVES_FILE):
        os.chown(f, 65534, 65534)
    discover(drop, Warehouse(tmp_path / "wh"), settle_s=0)
    assert sorted(p.name for p in (drop / "userA").iterdir()) == ["prime_v0.pcf", "prime_v0.row"]
