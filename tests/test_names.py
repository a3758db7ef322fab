"""Experiment and run names: one rule, refused in one line, never a path outside the warehouse (DESIGN §11)."""
from __future__ import annotations

import re

import subprocess
import sys
import textwrap
from pathlib import Path

import polars as pl
import pytest

from testing.traces import LULESH_A, LULESH_B, copy_trace, tree_digest
from synthtrace.warehouse import Warehouse
from synthtrace.warehouse.names import InvalidNameError, check_name, name_option

BAD = ["", ".", "..", "../../../victim", "a/b", "/abs", "a\\b", "x" * 300, "é" * 121, "a\nb", "a\x00b", "a\tb",
       ".hidden", " lead", "trail ", "glob*", "what?", "[set]", "{a,b}"]
GOOD = ["lulesh-16r", "lulesh 16 ranks", "mpi_ü", "a.b", "x" * 120, "run..2", "v1.0"]


@pytest.mark.parametrize("name", BAD)
def test_bad_names_are_refused_in_one_line(name):
    with pytest.raises(InvalidNameError) as err:
        check_name(name)
    assert "\n" not in str(err.value) and len(str(err.value)) < 160
    assert err.value.exit_code == 2
    with pytest.raises(InvalidNameError):
        Warehouse("/tmp/wh").experiment_dir(name)
    with pytest.raises(InvalidNameError):
        name_option(name)


@pytest.mark.parametrize(("name", "says"), [
    ("caf\udce9\udcff", "is not UTF-8 text (at character 4)"),  # Latin-1 bytes on a UTF-8 command line
    ("x" * 300, "is too long (300 characters, 300 bytes; at most 120 and 240)"),
    ("é" * 121, "is too long (121 characters, 242 bytes; at most 120 and 240)"),
    ("a\tb", "holds a control character (U+0009) at character 2"),
    # a no-break space was "a control character" (attack 6 note): it is refused, but called what it is
    ("run\u00a01", "holds a non-printing character (U+00A0 NO-BREAK SPACE) at character 4"),
    ("a\u2028b", "holds a non-printing character (U+2028 LINE SEPARATOR) at character 2"),
])
def test_a_bad_name_says_what_is_wrong_with_it(name, says):
    with pytest.raises(InvalidNameError, match=re.escape(says)):
        check_name(name)


@pytest.mark.parametrize("name", GOOD)
def test_good_names_pass_and_stay_inside(name, tmp_path):
    assert check_name(name) == name and name_option(name) == name
    wh = Warehouse(tmp_path / "wh")
    target = wh.experiment_dir(name)
    assert target.parent == wh.experiments_dir and target.name == name
    assert name_option(None) is None


@pytest.mark.real_traces
@pytest.mark.slow
@pytest.mark.parametrize("name", ["../../../victim", "..", "a/b", "."])
def test_merge_of_an_escaping_experiment_name_touches_nothing(tmp_path, run_cli, name):
    """A name stored by an earlier ingest can never make merge write outside experiments/ (issue 13 item 6)."""
    from synthtrace.warehouse.ingest import ingest_trace

    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    wh_root = tmp_path / "deep" / "er" / "wh"
    wh = Warehouse(wh_root)
    for prv in (LULESH_A, LULESH_B):  # stored under a good name, then renamed as an older release could have
        res = ingest_trace(wh, copy_trace(prv, tmp_path / "traces"), experiment="stored")
        run_file = wh.run_dir(res.run_id) / "run.parquet"
        pl.read_parquet(run_file).with_columns(experiment=pl.lit(name)).write_parquet(run_file)
        (run_file.parent / "checksums.json").unlink()  # [helper integrity] an older release wrote no checksums
    before, before_victim = tree_digest(wh_root), tree_digest(victim)
    code, out, err = run_cli("merge", name, "-w", wh_root)
    assert code == 2, out
    assert len(err.strip().splitlines()) == 1 and "experiment name" in err, err
    assert tree_digest(wh_root) == before and tree_digest(victim) == before_victim
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deep", "traces", "victim"]


def test_a_fifo_in_the_target_never_blocks_the_commit(tmp_path):
    """A FIFO (or socket, device, link) in an experiment folder is left out of the rebuilt folder, never opened."""
    script = textwrap.dedent(f"""
        import os, polars as pl
        from synthtrace.warehouse import Warehouse
        wh = Warehouse({str(tmp_path / 'wh')!r})
        target = wh.experiment_dir("exp")
        wh.update_dir(target, {{"kept": pl.DataFrame({{"a": [1]}})}})
        os.mkfifo(target / "pipe")
        (target / "sub").mkdir()
        os.mkfifo(target / "sub" / "pipe2")
        os.symlink("/etc/passwd", target / "link")
        wh.update_dir(target, {{"new": pl.DataFrame({{"b": [2]}})}})
        print(sorted(p.name for p in target.rglob("*")))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['checksums.json', 'kept.parquet', 'new.parquet', 'sub']"  # [helper integrity]


def test_run_ids_are_names_too(tmp_path):
    with pytest.raises(InvalidNameError):
        Warehouse(tmp_path).run_dir("../x")
    assert Warehouse(tmp_path).run_dir("0123abcd").name == "0123abcd"
    assert not Path(tmp_path / "x").exists()


@pytest.mark.real_traces
@pytest.mark.parametrize("args", [["--experiment", "../x"], ["--experiment", "."], []])
def test_ingest_refuses_a_name_that_could_not_be_a_folder(tmp_path, run_cli, args):
    """``--experiment`` is checked at the CLI edge; a default name (the folder's) that could not be one is made
    valid (attack 13 F6: a job-array folder ``run[3]`` refused every trace in it): ``bad_folder~<hash>``."""
    wh_root = tmp_path / "wh"
    run_cli("ingest", copy_trace(LULESH_A, tmp_path / "good"), "-w", wh_root)
    before = tree_digest(wh_root)
    code, out, err = run_cli("ingest", copy_trace(LULESH_B, tmp_path / "bad*folder"), "-w", wh_root, *args)
    if not args:
        assert code == 0 and re.search(r"experiment bad_folder~[0-9a-f]{16}\)", out), (out, err)
        return
    assert code == 2, (out, err)
    assert "experiment name" in err and len(err.strip().splitlines()) == 1, err
    assert tree_digest(wh_root) == before


@pytest.mark.real_traces
def test_an_app_given_from_python_is_stored_in_nfc(tmp_path):
    """``--app`` is NFC at the CLI edge (check_name); ``ingest_trace(app=...)`` called from Python stored the name as
    it came (a Mac's NFD ``café`` another app than the typed one, tidy16): now NFC too, with the default names."""
    from synthtrace.warehouse.ingest import ingest_trace

    wh = Warehouse(tmp_path / "wh")
    res = ingest_trace(wh, copy_trace(LULESH_A, tmp_path / "t", "cafe\u0301.run1"), app="cafe\u0301")
    row = pl.read_parquet(wh.run_dir(res.run_id) / "run.parquet").row(0, named=True)
    assert (row["app"], row["run_name"]) == ("caf\u00e9", "caf\u00e9.run1")


@pytest.mark.real_traces
@pytest.mark.parametrize("stem", [".", " ", ". ."])
def test_a_trace_named_only_by_dots_or_blanks_is_refused(tmp_path, run_cli, stem):
    """Attack 16: ``..prv`` and `` .prv`` were ingested with a blank app (its experiment a bare hash) and a run named
    ``.`` or `` ``; now one line naming the file, exit 2, nothing stored."""
    prv = copy_trace(LULESH_A, tmp_path / "t", stem)
    code, out, err = run_cli("ingest", prv, "-w", tmp_path / "wh")
    assert code == 2 and err.strip().splitlines() == [f"error: {str(prv)!r}: the trace's name is blank (nothing but "
                                                      "dots and blanks before its suffix); rename the file"]
    assert not (tmp_path / "wh").exists()


@pytest.mark.real_traces
def test_a_name_typed_in_two_unicode_forms_is_one_experiment(tmp_path, run_cli):
    """Attack 12 (tiny): ``--experiment café`` typed (é: U+00E9, NFC) and ``café`` as a Mac names a drop folder (e and
    U+0301, NFD) made two experiments that ``runs`` and ``sql`` printed identically, each merged and analysed alone.
    Names are NFC: one experiment, whichever form arrives (an option, a folder's name)."""
    from testing.traces import JACOBI, PRIME

    nfc, nfd = "caf\u00e9", "cafe\u0301"
    assert check_name(nfd) == check_name(nfc) == nfc and name_option(nfd) == nfc
    wh = tmp_path / "wh"
    assert run_cli("ingest", PRIME, "--experiment", nfc, "-w", wh)[0] == 0
    assert run_cli("ingest", JACOBI, "--experiment", nfd, "-w", wh)[0] == 0
    folder = copy_trace(LULESH_A, tmp_path / nfd).parent
    assert run_cli("ingest", folder, "-w", wh)[0] == 0
    code, out, err = run_cli("sql", "SELECT DISTINCT experiment FROM runs", "-w", wh, "-f", "csv")
    assert code == 0 and [line.strip('"') for line in out.splitlines()[1:]] == [nfc], out
    assert [p.name for p in (wh / "experiments").iterdir()] in ([], [nfc])
