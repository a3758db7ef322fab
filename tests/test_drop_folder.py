"""The drop folder as cluster jobs fill it (attack 7, A6-A9): a trace still being written waits for a later night and
is never quarantined; a trace gone between discovery and ingest, a name that is not UTF-8, a stage removed under the
night's writer are each a note, never a quarantine, and the rest of the night goes on."""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from synthtrace.warehouse import Warehouse
from synthtrace.warehouse.drop import QUARANTINE, discover, quarantine
from synthtrace.warehouse.sql import query
from testing.traces import JACOBI, LULESH_B, PRIME, TRACES, copy_trace

pytestmark = [pytest.mark.real_traces]
OTF2 = TRACES / "otf2" / "ping-pong-otf2"
INGEST_ONLY = ["merge", "archetypes", "pop", "detect", "retrain", "report"]


def _age(folder: Path, seconds: float) -> None:
    """Every file under ``folder`` last changed ``seconds`` ago (as a trace written that long ago)."""
    then = time.time() - seconds
    for p in [folder, *folder.rglob("*")]:
        os.utime(p, (then, then))


def _runs(wh: Path) -> list[tuple[str, int]]:
    return [tuple(r.values()) for r in query(Warehouse(wh), "SELECT run_name, n_bursts FROM runs").to_pylist()]


def test_discovery_takes_a_trace_only_once_all_its_files_are_settled(tmp_path):
    """mpi2prv writes the .prv, then the .pcf/.row; Score-P the OTF2 anchor last; a copy grows each file in turn.
    A trace any of whose files changed within the settle time waits (not even hashed), a time stamp in the future
    (a file server whose clock runs ahead) too; settle 0 takes it at once."""
    drop, wh = tmp_path / "drop", Warehouse(tmp_path / "wh")
    copy_trace(PRIME, drop / "prime")
    copy_trace(LULESH_B, drop / "lulesh")
    archive = shutil.copytree(OTF2, drop / "otf" / "run")
    shutil.copytree(OTF2, drop / "scorep-measurement-tmp")  # Score-P has not renamed its measurement folder yet
    _age(drop, 600)
    os.utime(drop / "prime" / "prime_v0.pcf")  # the .pcf just written: the .prv alone is not the trace yet
    evt = next(p for p in (archive / "traces").rglob("*") if p.is_file())
    os.utime(evt, (time.time() + 3600,) * 2)  # an event file stamped an hour ahead
    found = discover(drop, wh, settle_s=60)
    assert [d.path.name for d in found.new] == [LULESH_B.name]
    assert sorted(Path(w.path).name for w in found.waiting) == ["prime_v0.prv", "traces.otf2", "traces.otf2"]
    assert all("still being written" in w.reason for w in found.waiting) and found.skipped == []
    assert {d.path.name for d in discover(drop, wh, settle_s=0).new} == {LULESH_B.name, "prime_v0.prv", "traces.otf2"}
    assert [Path(w.path).parent.name for w in discover(drop, wh, settle_s=0).waiting] == ["scorep-measurement-tmp"]


@pytest.mark.parametrize("settle", ["-1", "nan", "inf"])
def test_a_settle_time_that_is_no_duration_is_refused(tmp_path, run_cli, settle):
    """--settle inf made every trace wait for ever, silently; a negative or NaN one means nothing."""
    (tmp_path / "drop").mkdir()
    code, out, err = run_cli("nightly", "--drop", tmp_path / "drop", "-w", tmp_path / "wh", f"--settle={settle}")
    assert code == 2 and "--settle" in err and len(err.strip().splitlines()) == 1, (code, out, err)
    assert not (tmp_path / "wh").exists()


def test_quarantine_of_a_trace_already_gone_leaves_nothing(tmp_path):
    """A7: another night moved the broken trace first: no empty folder with a reason saying 'no such file'."""
    drop = tmp_path / "drop"
    prv = copy_trace(PRIME, drop / "broken")
    for f in prv.parent.iterdir():
        f.unlink()
    assert quarantine(drop, prv, "cut off mid-record") is None
    assert not (drop / QUARANTINE).exists() or list((drop / QUARANTINE).iterdir()) == []


def test_a_trace_being_written_waits_and_is_ingested_whole_once_finished(prefect_harness, tmp_path):
    """A8: a .prv cut mid-record while its writer still appends was quarantined (the writer then finished into the
    quarantined file: the run lost); cut at a line end it was ingested half, then again whole (two runs)."""
    from synthtrace.pipelines.nightly import run_night

    drop, wh = tmp_path / "drop", tmp_path / "wh"
    prv = copy_trace(PRIME, drop / "prime")
    whole = prv.read_bytes()
    _age(drop, 600)
    prv.write_bytes(whole[:150_007])  # the writer is half-way, mid-record
    first = run_night(drop, Warehouse(wh), skip=INGEST_ONLY, settle_s=60)
    assert first.ingested == [] and first.quarantined == [], first
    assert [w["path"] for w in first.waiting] == [str(prv)] and "still being written" in first.waiting[0]["reason"]
    assert "1 waiting (still being written)" in first.message()
    with prv.open("ab") as out:  # the writer finishes into the same file
        out.write(whole[150_007:])
    _age(drop, 120)
    second = run_night(drop, Warehouse(wh), skip=INGEST_ONLY, settle_s=60)
    assert [r["run_name"] for r in second.ingested] == ["prime_v0"] and second.waiting == []
    assert _runs(wh) == [("prime_v0", 704)]
    assert not (drop / QUARANTINE).exists()


def test_a_trace_cut_mid_record_waits_a_day_for_its_writer(prefect_harness, tmp_path):
    """A18: a writer that holds its .prv open and stalls past the settle time (mpi2prv on a busy parallel file
    system) left a file cut mid-record that the night quarantined; the writer then finished into the quarantined
    file, and the run was lost. Cut mid-record and changed within a day, it waits; a day later it is quarantined."""
    from synthtrace.pipelines.nightly import run_night

    drop, wh = tmp_path / "drop", tmp_path / "wh"
    prv = copy_trace(PRIME, drop / "prime")
    prv.write_bytes(prv.read_bytes()[:150_007])
    _age(drop, 600)  # settled for the night's 60 s, yet cut mid-record
    night = run_night(drop, Warehouse(wh), skip=INGEST_ONLY, settle_s=60)
    assert night.quarantined == [] and [w["path"] for w in night.waiting] == [str(prv)], night
    assert "cut off mid-record" in night.waiting[0]["reason"] and prv.exists()
    _age(drop, 2 * 24 * 3600)  # two days on: no writer is still at it
    night = run_night(drop, Warehouse(wh), skip=INGEST_ONLY, settle_s=60)
    assert night.waiting == [] and len(night.quarantined) == 1 and not prv.exists()


def test_what_says_nothing_about_a_trace_never_quarantines_it(prefect_harness, tmp_path, monkeypatch):
    """Between discovery and ingest one trace is taken by another night (A7), one grows (a writer appending a cut
    record: A8, even with settle 0), and the stage of a third is removed under its writer (A6: another writer's
    clean-up); a fourth has a name that is not UTF-8 (A9: the night died of a JSON traceback, every night). None is
    quarantined; each is a note; the good trace is ingested."""
    from synthtrace.pipelines import nightly
    from synthtrace.warehouse import ingest as ingest_mod

    drop, wh = tmp_path / "drop", tmp_path / "wh"
    copy_trace(PRIME, drop / "good")
    taken = copy_trace(JACOBI, drop / "taken", "taken")
    growing = copy_trace(PRIME, drop / "growing", "growing")
    growing.write_bytes(growing.read_bytes() + b"\n")  # other bytes than good's: a run of its own
    staged = copy_trace(LULESH_B, drop / "staged", "staged")
    latin = os.fsencode(drop / "latin") + b"/run\xe9"
    os.makedirs(os.fsencode(drop / "latin"))
    for suffix in (".prv", ".pcf", ".row"):
        shutil.copyfile(PRIME.with_suffix(suffix), latin + suffix.encode())
    with open(latin + b".prv", "ab") as out:
        out.write(b"\n\n")  # a run of its own
    real_discovered, real_write = nightly.discovered, ingest_mod._write_run

    def then_others_act(*args, **kwargs):
        found = real_discovered(*args, **kwargs)
        shutil.move(taken.parent, tmp_path / "elsewhere")  # another night took it
        with growing.open("a") as out:
            out.write("2:0:1:1:1:12")  # its writer goes on
        return found

    def stage_removed(source, run_id, stage, *args, **kwargs):
        if Path(source.path).stem == "staged":
            shutil.rmtree(stage)
        return real_write(source, run_id, stage, *args, **kwargs)

    monkeypatch.setattr(nightly, "discovered", then_others_act)
    monkeypatch.setattr(ingest_mod, "_write_run", stage_removed)
    s = nightly.run_night(drop, Warehouse(wh), skip=INGEST_ONLY, settle_s=0)
    assert [r["run_name"] for r in s.ingested] == ["prime_v0"]
    assert s.quarantined == [] and not (drop / QUARANTINE).exists(), s.quarantined
    assert [(w["path"], "still being written" in w["reason"]) for w in s.waiting] == [(str(growing), True)]
    assert {Path(k["path"]).name: k["reason"].split(" (")[0] for k in s.skipped} == {
        "taken.prv": "gone since it was found", "run\\xe9.prv": "its path is not UTF-8"}
    assert [(e["stage"], e["args"]) for e in s.errors] == [("ingest", [str(staged)])]
    assert ".staging" in s.errors[0]["error"] or "No such file" in s.errors[0]["error"], s.errors
    assert staged.is_file() and growing.is_file() and os.path.exists(latin + b".prv")


def test_a_trace_refused_for_the_warehouses_state_waits_in_the_drop(prefect_harness, tmp_path, merged_lulesh):
    """Attack 12 F13: a drop subfolder named like a user's copy in ``experiments/`` had its sound trace quarantined
    (the ingest into that name is refused: no commit wrote the copy), and after the copy was moved away no night took
    it. The trace stays in the drop, the refusal is the night's error, and the night after the copy is gone
    ingests it."""
    from synthtrace.pipelines import nightly

    wh = Warehouse(tmp_path / "wh")
    shutil.copytree(merged_lulesh, wh.root)
    shutil.copytree(wh.root / "experiments" / "lulesh-8r", wh.root / "experiments" / "lulesh-8r.old")
    drop = tmp_path / "drop"
    trace = copy_trace(PRIME, drop / "lulesh-8r.old")
    s = nightly.run_night(drop, wh, skip=INGEST_ONLY, settle_s=0)
    assert s.quarantined == [] and not (drop / QUARANTINE).exists(), s.quarantined
    assert s.ingested == [] and trace.is_file() and trace.with_suffix(".pcf").is_file()
    assert [(e["stage"], e["args"]) for e in s.errors] == [("ingest", [str(trace)])]
    assert "lulesh-8r.old" in s.errors[0]["error"] and "no commit" in s.errors[0]["error"], s.errors
    shutil.move(wh.root / "experiments" / "lulesh-8r.old", tmp_path / "kept-copy")
    s = nightly.run_night(drop, wh, skip=INGEST_ONLY, settle_s=0)
    assert [(r["run_name"], r["experiment"]) for r in s.ingested] == [("prime_v0", "lulesh-8r.old")], s.errors


def test_a_drop_subfolder_named_as_no_experiment_can_be_gives_its_traces_a_valid_experiment(prefect_harness,
                                                                                             tmp_path, run_cli):
    """Attack 13 F6: a job-array folder's name (``run[3]``, `` run2``: glob characters, a blank at an end) is no
    valid experiment name, so every trace in it was refused, and the night quarantined the sound traces. The
    folder's name gives a valid one (its forbidden characters as ``_`` and a hash of the whole name: two such
    folders never share an experiment); the traces are ingested, the same by hand as by the night."""
    from synthtrace.pipelines import nightly
    from synthtrace.warehouse.names import name_problem

    drop = tmp_path / "drop"
    copy_trace(PRIME, drop / "lulesh[8r]")
    copy_trace(JACOBI, drop / " run2")
    s = nightly.run_night(drop, Warehouse(tmp_path / "wh"), skip=INGEST_ONLY, settle_s=0)
    assert s.quarantined == [] and not (drop / QUARANTINE).exists() and s.errors == [], (s.quarantined, s.errors)
    got = {r["run_name"]: r["experiment"] for r in s.ingested}
    assert set(got) == {"prime_v0", "jacobi-2d-imper_v0"}, got
    assert got["prime_v0"].startswith("lulesh_8r_~") and got["jacobi-2d-imper_v0"].startswith("run2~"), got
    assert all(name_problem(e) is None for e in got.values())
    code, out, err = run_cli("ingest", drop / "lulesh[8r]" / PRIME.name, "-w", tmp_path / "by-hand")
    assert code == 0 and f"experiment {got['prime_v0']})" in out, (out, err)


@pytest.mark.parametrize("when", ["discovered", "ingested"])
def test_a_trace_that_meets_a_failing_file_system_waits_in_the_drop(prefect_harness, tmp_path, monkeypatch, when):
    """Attack 13: every error met while reading a trace became "cannot be read: ..." as a broken trace's, so a
    sound trace on an NFS drop that met a stale handle (ESTALE) or an I/O error for a moment was quarantined. Such
    an error says nothing of the trace: it stays in the drop for the next night; a trace this account may not read
    (EACCES) is still judged as before."""
    import errno

    from synthtrace.pipelines import nightly
    from synthtrace.tracelib.formats import source
    from synthtrace.warehouse import ingest

    def failing(path, *args, **kwargs):
        with source.reading(path):
            raise OSError(errno.ESTALE, os.strerror(errno.ESTALE))

    drop = tmp_path / "drop"
    trace = copy_trace(PRIME, drop / "prime")
    monkeypatch.setattr(ingest, "open_trace", failing)
    if when == "discovered":
        monkeypatch.setattr(source, "open_trace", failing)
    s = nightly.run_night(drop, Warehouse(tmp_path / "wh"), skip=INGEST_ONLY, settle_s=0)
    assert s.quarantined == [] and not (drop / QUARANTINE).exists() and trace.is_file(), s.quarantined
    said = ([(w["path"], w["reason"]) for w in s.waiting] if when == "discovered" else
            [(e["args"][0], e["error"]) for e in s.errors])
    assert len(said) == 1 and said[0][0] == str(trace) and os.strerror(errno.ESTALE) in said[0][1], (s.waiting,
                                                                                                     s.errors)
    monkeypatch.undo()
    s = nightly.run_night(drop, Warehouse(tmp_path / "wh"), skip=INGEST_ONLY, settle_s=0)
    assert [r["run_name"] for r in s.ingested] == ["prime_v0"], s.errors


def test_a_link_out_of_the_drop_folder_is_not_read(tmp_path):
    """The night runs as a service account over a folder users' jobs write: a .pcf linked to a file the dropping
    user cannot read (a password file) was read by the night, its first line quoted in a warning and its labels
    stored as columns every query user sees; a linked trace had its fields quoted in the quarantine's reason
    (attack 7 A25). A trace with a file that a link takes out of the drop folder is skipped unread; a link that
    stays inside it is a file like any other."""
    drop, wh, elsewhere = tmp_path / "drop", Warehouse(tmp_path / "wh"), tmp_path / "private"
    elsewhere.mkdir()
    secret = elsewhere / "secret.pcf"
    secret.write_text("root:$6$SECRETHASH:19000:0:99999:7:::\nEVENT_TYPE\n7  42000050 SECRET_LABEL\n")
    copy_trace(PRIME, drop / "u")
    (drop / "u" / "prime_v0.pcf").unlink()
    (drop / "u" / "prime_v0.pcf").symlink_to(secret)
    shutil.copy(JACOBI, elsewhere / "j.prv")
    (drop / "v").mkdir()
    (drop / "v" / "j.prv").symlink_to(elsewhere / "j.prv")
    copy_trace(LULESH_B, drop / "w")
    (drop / "w" / "again.prv").symlink_to(drop / "w" / LULESH_B.name)  # inside: read as the file it names
    found = discover(drop, wh, settle_s=0)
    assert {d.path.name for d in found.new} == {LULESH_B.name}
    notes = {Path(s.path).name: s.reason for s in found.skipped}
    assert set(notes) == {"prime_v0.prv", "j.prv"} and all("a link out of the drop folder" in r for r in notes.values())
    assert "SECRET" not in " ".join(notes.values()) and "prime_v0.pcf" in notes["prime_v0.prv"]


def test_what_is_named_as_a_trace_but_is_no_trace_file_is_said(tmp_path):
    """A FIFO ``x.prv``, a link to itself, a dangling link and a folder named ``d.prv`` in the drop were passed by
    in silence (only files are traces), while a link out of the drop folder was said (attack 10): each is a note
    now, and the traces beside them are taken."""
    import os

    drop, wh = tmp_path / "drop", Warehouse(tmp_path / "wh")
    copy_trace(PRIME, drop)
    os.mkfifo(drop / "x.prv")
    (drop / "loop.prv").symlink_to(drop / "loop.prv")
    (drop / "gone.prv").symlink_to(drop / "nothing.prv")
    (drop / "d.prv").mkdir()
    (drop / QUARANTINE).mkdir()
    os.mkfifo(drop / QUARANTINE / "old.prv")  # the quarantine is not the night's to read
    found = discover(drop, wh, settle_s=0)
    assert [d.path.name for d in found.new] == [PRIME.name]
    assert {Path(s.path).name: s.reason for s in found.skipped} == {
        "x.prv": "is a FIFO (a named pipe), not a trace file: not read",
        "loop.prv": "is a link that leads to no file (dangling, or a loop of links), not a trace file: not read",
        "gone.prv": "is a link that leads to no file (dangling, or a loop of links), not a trace file: not read",
        "d.prv": "is a folder (the traces inside it are read), not a trace file: not read"}


def _deep_chain(top: Path, depth: int) -> Path:
    """``top/a/a/.../a``, ``depth`` folders deep (made a level at a time, from inside: no path longer than one name)."""
    here = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("a", dir_fd=here)
            below = os.open("a", os.O_RDONLY | os.O_DIRECTORY, dir_fd=here)
            os.close(here)
            here = below
    finally:
        os.close(here)
    return top.joinpath(*["a"] * depth)


@pytest.mark.real_traces
def test_a_folder_chain_thousands_deep_in_the_drop_is_searched_as_any_folder(tmp_path, run_cli):
    """Attack 16 F11: a chain of folders ~1,000 deep in the drop folder stopped every night with a RecursionError
    (Python 3.11's ``Path.rglob`` recursed once per level), the sound traces beside it never ingested; ``ingest``
    of the folder too. Now the traces beside it and the one at its bottom are found and ingested."""
    drop, wh = tmp_path / "drop", tmp_path / "wh"
    copy_trace(PRIME, drop / "e")
    bottom = _deep_chain(drop, 1200)
    copy_trace(JACOBI, bottom)
    try:
        found = discover(drop, Warehouse(wh), settle_s=0)
        assert sorted(d.path.name for d in found.new) == sorted([PRIME.name, JACOBI.name]), found
        assert found.skipped == [] and found.waiting == []
        code, _, err = run_cli("ingest", drop, "-w", wh)
        assert code == 0, err
        assert sorted(name for name, _ in _runs(wh)) == sorted([PRIME.name[:-4], JACOBI.name[:-4]])
    finally:  # bottom up: 3.11's shutil.rmtree (pytest's clean-up of old temporary folders) recurses per level too
        for f in bottom.iterdir():
            f.unlink()
        for folder in [bottom, *bottom.parents][:1200]:
            folder.rmdir()


def test_a_trace_whose_path_passes_the_system_limit_is_passed_over_and_the_rest_ingested(tmp_path, run_cli):
    """Attack 17 F2: a trace at the bottom of folders whose names add up past PATH_MAX (4,096 bytes on Linux) is a
    path no file call takes: ``ingest`` of the folder and every night stopped at it ("File name too long", exit 2)
    before the sound traces beside it. Now it is passed over with one warning naming it and its length, the others
    ingested; the night's discovery the same."""
    drop, wh = tmp_path / "drop", tmp_path / "wh"
    copy_trace(PRIME, drop / "e")
    fd = os.open(drop, os.O_RDONLY)
    depth = 0
    try:  # built through folder descriptors: no path of the chain is ever passed whole
        while len(os.fsencode(drop)) + 201 * (depth + 1) < 4080:  # the last folder's path stays under 4,096
            os.mkdir("d" * 200, dir_fd=fd)
            inner = os.open("d" * 200, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd, depth = inner, depth + 1
        out = os.open("t" * 240 + ".prv", os.O_WRONLY | os.O_CREAT, dir_fd=fd)  # its own path passes it
        os.write(out, PRIME.read_bytes())
        os.close(out)
    finally:
        os.close(fd)
    with pytest.warns(UserWarning, match=r"not read \(its path is 4,[0-9]{3} bytes, longer than this system takes"):
        found = discover(drop, Warehouse(wh), settle_s=0)
    assert [d.path.name for d in found.new] == [PRIME.name] and found.skipped == [], found
    code, _, err = run_cli("ingest", drop, "-w", wh)
    assert code == 0 and err.count("its path is") == 1, err
    assert [name for name, _ in _runs(wh)] == [PRIME.name[:-4]]
