"""Names derived from folders and file names (attack 14 F4, F5, F7, F9): one spelling (Unicode NFC) whoever made the
folder or file, a 64-bit hash that a birthday search does not match, a valid experiment for a trace whose file name
names its program's experiment, and a warehouse made by the older naming that keeps placing its folders' runs."""
from __future__ import annotations

import hashlib
import re
import unicodedata
from pathlib import Path

import pytest

from synthtrace.warehouse import Warehouse
from synthtrace.warehouse.names import file_name, name_from_folder, name_problem
from synthtrace.warehouse.sql import query
from testing.traces import JACOBI, LULESH_A, LULESH_B, PRIME, copy_trace

NFC, NFD = "caf\u00e9", "cafe\u0301"


def _placed(wh: Path) -> dict[str, str]:
    return {r["run_name"]: r["experiment"] for r in
            query(Warehouse(wh), "SELECT run_name, experiment FROM runs").to_pylist()}


# ------------------------------------------------------------------------------------------- F4, F5: names
def test_a_folder_name_in_nfc_or_nfd_gives_one_name():
    """F4: ``café[1]`` made on a Mac (NFD) and typed (NFC) printed alike but hashed apart: two experiments."""
    assert name_from_folder(f"{NFD}[1]") == name_from_folder(f"{NFC}[1]") == name_from_folder(f"{NFC}[1]")
    assert name_from_folder(f"{NFC}[1]").startswith(f"{NFC}_1_~")
    assert name_from_folder(NFD) == NFC  # a valid name too: the folder index keys it so


def test_derived_names_carry_64_bits_and_never_meet_a_folder_named_like_them():
    """F5: the hash was 32 bits (``run[[[[[*?]{}`` and ``run[[[[]{?][*`` both gave ``run__________~f992b393``, found
    in 11,488 tries), and a folder literally named ``run_3_~<hash>`` joined ``run[3]``'s experiment."""
    a, b = name_from_folder("run[[[[[*?]{}"), name_from_folder("run[[[[]{?][*")
    assert a != b and re.fullmatch(r"run_{10}~[0-9a-f]{16}", a), (a, b)
    derived = name_from_folder("run[3]")
    assert name_problem(derived) is None
    look_alike = name_from_folder(derived)  # a folder named like the derived name
    assert look_alike != derived and name_problem(look_alike) is None
    assert name_from_folder("run_3_~f992b393") != "run_3_~f992b393"  # as older code derived it
    assert name_from_folder("run~3") == "run~3" and name_from_folder("v~deadbeef0") == "v~deadbeef0"
    # file names for experiments and apps share the step: 8 bytes of blake2b after the kept characters
    assert file_name("solver a") == "solver_a~" + hashlib.blake2b(b"solver a", digest_size=8).hexdigest()


@pytest.mark.real_traces
def test_job_array_folders_in_two_unicode_forms_are_one_experiment(tmp_path, run_cli):
    nfc = copy_trace(LULESH_A, tmp_path / "A" / unicodedata.normalize("NFC", f"{NFC}[1]"))
    nfd = copy_trace(LULESH_B, tmp_path / "B" / unicodedata.normalize("NFD", f"{NFC}[1]"))
    wh = tmp_path / "wh"
    code, out, err = run_cli("ingest", nfc, nfd, "-w", wh)
    assert code == 0, err
    assert set(_placed(wh).values()) == {name_from_folder(f"{NFC}[1]")}, _placed(wh)


@pytest.mark.real_traces
def test_a_folder_named_like_a_derived_name_is_its_own_experiment(tmp_path, run_cli):
    first = copy_trace(LULESH_A, tmp_path / "a" / "run[3]")
    wh = tmp_path / "wh"
    assert run_cli("ingest", first, "-w", wh)[0] == 0
    derived = _placed(wh)[first.stem]
    second = copy_trace(LULESH_B, tmp_path / "b" / derived)
    assert run_cli("ingest", second, "-w", wh)[0] == 0
    assert _placed(wh)[second.stem] != derived, _placed(wh)


def _old_name_from_folder(folder: str) -> str:
    """The naming before attack 14 F4/F5 (as it was: the folder's name as it came, a 32-bit hash)."""
    if name_problem(folder) is None:
        return folder
    text = folder.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    kept = "".join("_" if c in set("/\\*?[]{}") or not c.isprintable() else c for c in text).strip().lstrip(".")
    kept = kept[:100]
    while len(kept.encode("utf-8")) > 224:
        kept = kept[:-1]
    return f"{kept.rstrip()}~{hashlib.blake2b(folder.encode('utf-8', 'surrogateescape'), digest_size=4).hexdigest()}"


@pytest.mark.real_traces
@pytest.mark.parametrize("folder", ["run[3]", unicodedata.normalize("NFD", f"{NFC}[1]"), NFD])
def test_a_folder_ingested_by_the_older_naming_keeps_going_to_its_experiment(tmp_path, monkeypatch, folder):
    """A warehouse whose runs were placed by the older naming (``run_3_~055fea9d``, the NFD spelling's hash): the
    next trace of the same program from the same folder joins them, through the folder index and, for a warehouse
    written before the index, its runs table."""
    from synthtrace.warehouse import folder_index, ingest
    from synthtrace.warehouse.ingest import experiment_names, ingest_trace

    wh = Warehouse(tmp_path / "wh")
    with monkeypatch.context() as m:
        m.setattr(ingest, "name_from_folder", _old_name_from_folder)
        old = ingest_trace(wh, copy_trace(LULESH_A, tmp_path / folder))
    assert old.experiment == unicodedata.normalize("NFC", _old_name_from_folder(folder))
    new = copy_trace(LULESH_B, tmp_path / folder)
    assert experiment_names([new], wh)[0] == {new: old.experiment}
    (wh.root / folder_index.FOLDER_INDEX / folder_index.COMPLETE).unlink()  # a warehouse written before the index
    assert experiment_names([new], wh)[0] == {new: old.experiment}
    (wh.root / folder_index.FOLDER_INDEX / folder_index.COMPLETE).touch()
    assert ingest_trace(wh, new).experiment == old.experiment  # decided again at the commit: the same


@pytest.mark.real_traces
@pytest.mark.parametrize(("stored", "now"), [("NFD", "NFC"), ("NFC", "NFD")])
@pytest.mark.parametrize("name", [f"{NFC}[1]", NFC])
def test_a_folder_ingested_by_the_older_naming_is_joined_by_its_other_spelling(tmp_path, monkeypatch, stored, now,
                                                                               name):
    """Attack 16 F9: older code stored a Mac's NFD folder ``café[1]`` as ``café_1_~a7bd35ce``; the same folder
    copied or typed in NFC started a new experiment (only the legacy name of the spelling at hand was looked up),
    while the NFD spelling joined. Both spellings are one folder: each joins the experiment of the other's runs."""
    from synthtrace.warehouse import ingest
    from synthtrace.warehouse.ingest import ingest_trace

    wh = Warehouse(tmp_path / "wh")
    with monkeypatch.context() as m:
        m.setattr(ingest, "name_from_folder", _old_name_from_folder)
        old = ingest_trace(wh, copy_trace(LULESH_A, tmp_path / "old" / unicodedata.normalize(stored, name)))
    new = ingest_trace(wh, copy_trace(LULESH_B, tmp_path / "new" / unicodedata.normalize(now, name)))
    assert new.experiment == old.experiment, (new.experiment, old.experiment)


# ------------------------------------------------------------------ F7: experiments named by a trace's stem
@pytest.mark.real_traces
@pytest.mark.parametrize("stem", ["job[3]", "c" * 130])
def test_a_trace_named_by_its_stem_in_a_folder_of_two_programs_is_ingested(tmp_path, run_cli, stem):
    """F7: in a folder of two programs each trace's experiment is its program's name, the stem's app when the trace
    records no binary: ``job[3]`` or a 130-character stem refused a sound trace (the night quarantined it)."""
    drop = tmp_path / "drop"
    job, jacobi = copy_trace(PRIME, drop, stem), copy_trace(JACOBI, drop, "jacobi")
    wh = tmp_path / "wh"
    code, out, err = run_cli("ingest", job, jacobi, "-w", wh)
    assert code == 0, (out, err)
    assert _placed(wh) == {stem: name_from_folder(stem), "jacobi": "jacobi"}, _placed(wh)


@pytest.mark.real_traces
def test_a_trace_placed_apart_at_its_commit_gets_a_valid_name(tmp_path):
    """The same, decided at the commit (:class:`_Placement`): the folder's stored runs are another program's."""
    from synthtrace.warehouse.ingest import ingest_trace

    wh = Warehouse(tmp_path / "wh")
    ingest_trace(wh, copy_trace(JACOBI, tmp_path / "drop", "jacobi"))
    result = ingest_trace(wh, copy_trace(PRIME, tmp_path / "drop", "job[3]"))
    assert result.experiment == name_from_folder("job[3]") and result.notes, result


# -------------------------------------------------------------------------------- F9: run names and apps
@pytest.mark.real_traces
def test_run_names_and_apps_from_a_file_name_are_nfc(tmp_path, run_cli):
    """F9: a trace a Mac named ``café.run1`` (NFD) was stored so: ``runs rm café.run1`` typed did not find it, and one
    program was two apps (``café``, ``café``) that printed alike."""
    folder = tmp_path / "nf"
    copy_trace(PRIME, folder, f"{NFC}.run0")
    copy_trace(JACOBI, folder, f"{NFD}.run1")
    wh = tmp_path / "wh"
    code, out, err = run_cli("ingest", folder, "-w", wh)
    assert code == 0, err
    rows = query(Warehouse(wh), "SELECT run_name, app FROM runs ORDER BY run_name").to_pylist()
    assert rows == [{"run_name": f"{NFC}.run0", "app": NFC}, {"run_name": f"{NFC}.run1", "app": NFC}], rows
    code, out, err = run_cli("runs", "rm", f"{NFC}.run1", "-w", wh)
    assert code == 0, err
    assert list(_placed(wh)) == [f"{NFC}.run0"]



@pytest.mark.real_traces
def test_a_run_name_is_found_however_it_is_typed_in_unicode(tmp_path, run_cli):
    """F9, the other side: a run stored NFC (or NFD, by older code) is found by ``runs rm`` / ``runs move`` when its
    name is typed in the other spelling (a name pasted from a Mac's file name is NFD): the names are compared NFC."""
    folder = tmp_path / "nf"
    copy_trace(PRIME, folder, f"{NFC}.run0")
    copy_trace(JACOBI, folder, "other.run0")
    wh = tmp_path / "wh"
    code, out, err = run_cli("ingest", folder, "-w", wh)
    assert code == 0, err
    code, out, err = run_cli("runs", "rm", f"{NFD}.run0", "-w", wh)
    assert code == 0, err
    assert list(_placed(wh)) == ["other.run0"]

def test_an_app_named_by_its_binary_or_typed_is_one_spelling(tmp_path, run_cli, monkeypatch):
    """Session 15's note: a binary a Mac named ``café`` (NFD, as Score-P records the executable) and the same
    binary's name elsewhere (NFC) were two programs and two apps printing alike; ``detect --app café`` and ``pop
    café`` typed NFD found no application ``café`` stored NFC. A binary's name is NFC where it names the program
    (programs.choose_program, program_keys); typed and stored apps are compared NFC (an app stored NFD by older code
    is found too)."""
    from synthtrace.warehouse import programs
    from synthtrace.warehouse.programs import run_programs
    from testing.otf2_variants import scorep_archive

    functions = ("solve_a", "assemble_a", "precond_a", "smooth_a")
    scorep_archive(tmp_path / "mac" / "scorep-20261201_0200_1", NFD, functions)
    scorep_archive(tmp_path / "linux" / "scorep-20261202_0200_2", NFC, functions)
    wh = tmp_path / "wh"
    code, _, err = run_cli("ingest", tmp_path / "mac", tmp_path / "linux", "-w", wh)
    assert code == 0, err
    assert query(Warehouse(wh), "SELECT DISTINCT app FROM runs").to_pylist() == [{"app": NFC}]
    assert set(run_programs(Warehouse(wh)).values()) == {NFC}
    code, out, err = run_cli("detect", "--app", NFD, "-w", wh)
    assert code == 0 and out.startswith(f"{NFC}: 2 night(s) of history"), out + err
    code, out, err = run_cli("pop", NFD, "-w", wh)
    assert code == 0 and "scorep-20261201_0200_1" in out and "scorep-20261202_0200_2" in out, err
    with monkeypatch.context() as m:  # an app stored NFD by older code
        m.setattr(programs, "one_spelling", lambda text: text)
        scorep_archive(tmp_path / "old" / "scorep-20261130_0200_0", NFD, (*functions, "norm_a"))
        assert run_cli("ingest", tmp_path / "old", "-w", wh)[0] == 0
    assert query(Warehouse(wh), "SELECT DISTINCT app FROM runs ORDER BY app").to_pylist() == [{"app": a}
                                                                                            for a in sorted((NFC, NFD))]
    code, out, err = run_cli("pop", NFC, "-w", wh)
    assert code == 0 and "scorep-20261130_0200_0" in out and "scorep-20261201_0200_1" in out, err
    code, out, err = run_cli("detect", "--app", NFC, "-w", wh)
    assert code == 0 and out.count("night(s) of history") == 2, out + err  # café in both spellings


@pytest.mark.real_traces
def test_runs_of_a_file_name_spelled_nfd_by_older_code_stay_one_program(tmp_path, monkeypatch):
    """A folder of traces that record no program, named ``café.runN`` on a Mac and ingested by older code (its
    program identity the stem's app as spelled, NFD): the next such trace is NFC, yet the same program, and goes to
    the folder's experiment without a note of two applications."""
    from synthtrace.warehouse import ingest, programs
    from synthtrace.warehouse.ingest import experiment_names, ingest_trace

    wh = Warehouse(tmp_path / "wh")
    with monkeypatch.context() as m:  # the older code: no NFC for run names and apps
        m.setattr(ingest, "one_spelling", lambda text: text)
        m.setattr(programs, "one_spelling", lambda text: text)
        old = ingest_trace(wh, copy_trace(PRIME, tmp_path / "exp", f"{NFD}.run0"))
    assert old.experiment == "exp" and old.run_name == f"{NFD}.run0"
    new = copy_trace(PRIME, tmp_path / "exp", f"{NFD}.run1")
    new.with_suffix(".pcf").write_text(new.with_suffix(".pcf").read_text() + "\n")  # another run's content
    assert experiment_names([new], wh) == ({new: "exp"}, [])
    result = ingest_trace(wh, new)
    assert (result.experiment, result.notes) == ("exp", []), result
