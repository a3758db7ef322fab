"""Issue 23 (session 18, the recursive walks beside the drop folder's, attack 16 F11): a chain of folders ~1,000
deep planted in a warehouse folder stopped the commands that copy, check or remove that folder with a RecursionError
(Python 3.11's ``shutil.copytree``, ``os.walk`` and ``shutil.rmtree`` recurse once per level). ``runs rm`` left the
folder renamed aside in ``.staging``, half removed, and every writer after it stopped clearing it."""
from __future__ import annotations

import os

import polars as pl
import pytest

from synthtrace.tracelib.folder_tree import remove_tree
from synthtrace.warehouse import Warehouse
from tests.test_drop_folder import _deep_chain
from testing.traces import JACOBI, PRIME, copy_trace

DEPTH = 1200


@pytest.fixture
def wh_path(tmp_path):
    """The warehouse's path; removed without recursion after the test (pytest's clean-up recurses per level)."""
    yield tmp_path / "wh"
    remove_tree(tmp_path, ignore_errors=True)


def test_a_folder_holding_a_deep_chain_is_updated_with_the_chain_kept(wh_path):
    """``update_dir`` (every analysis stage's write into an experiment folder) copies the folder's sub-folders
    into its stage, writes their checksums and syncs them: each walked the chain recursively."""
    wh = Warehouse(wh_path).ensure()
    target = wh.experiments_dir / "e"
    wh.update_dir(target, {"a": pl.DataFrame({"x": [1]})})
    (target / "junk").mkdir()
    _deep_chain(target / "junk", DEPTH)
    wh.update_dir(target, {"b": pl.DataFrame({"x": [2]})})
    assert pl.read_parquet(target / "a.parquet")["x"].to_list() == [1]
    assert pl.read_parquet(target / "b.parquet")["x"].to_list() == [2]
    assert (target / "junk").joinpath(*["a"] * DEPTH).is_dir()


def test_runs_rm_of_a_run_holding_a_deep_chain_removes_it_and_the_next_writer_works(wh_path, tmp_path, run_cli):
    traces = tmp_path / "traces"
    copy_trace(PRIME, traces)
    code, _, err = run_cli("ingest", traces / PRIME.name, "-w", wh_path)
    assert code == 0, err
    wh = Warehouse(wh_path)
    (run,) = [p for p in wh.runs_dir.iterdir() if p.is_dir()]
    _deep_chain(run, DEPTH)
    code, out, err = run_cli("runs", "rm", run.name, "-w", wh_path)
    assert code == 0 and "Traceback" not in err, (out, err)
    assert not run.exists() and os.listdir(wh.staging_dir) == []
    code, _, err = run_cli("ingest", traces / PRIME.name, "-w", wh_path)
    assert code == 0 and "ingested" in err + _, err


def test_a_removed_folder_s_links_are_removed_never_followed(tmp_path):
    """What replaced ``shutil.rmtree`` keeps its guard: a link in the folder (to a folder, to a file) goes, and what
    it leads to stays; a link given as the folder itself is an error, nothing removed."""
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "sub" / "f").write_text("kept")
    folder = tmp_path / "folder"
    (folder / "a" / "b").mkdir(parents=True)
    (folder / "a" / "b" / "to_folder").symlink_to(outside)
    (folder / "a" / "to_file").symlink_to(outside / "sub" / "f")
    os.mkfifo(folder / "a" / "fifo")
    (tmp_path / "link").symlink_to(outside)
    with pytest.raises(OSError):
        remove_tree(tmp_path / "link")
    remove_tree(folder)
    assert not folder.exists() and (outside / "sub" / "f").read_text() == "kept"
    assert (tmp_path / "link").is_symlink()


def test_the_report_of_an_experiment_whose_folder_holds_a_deep_chain_is_written(wh_path, tmp_path, run_cli):
    """The report keys each experiment's cached section by the files of its folder, found by ``rglob``."""
    traces = tmp_path / "traces"
    copy_trace(PRIME, traces)
    assert run_cli("ingest", traces / PRIME.name, "-w", wh_path)[0] == 0
    code, _, err = run_cli("archetypes", "traces", "-w", wh_path)
    assert code == 0, err
    junk = Warehouse(wh_path).experiment_dir("traces") / "junk"
    junk.mkdir()
    _deep_chain(junk, DEPTH)
    code, out, err = run_cli("report", "-w", wh_path, "--out", tmp_path / "r.html")
    assert code == 0 and (tmp_path / "r.html").is_file(), (out, err)


def test_a_query_beside_a_deep_chain_planted_as_a_killed_query_s_links_answers(wh_path, tmp_path, run_cli):
    """Whoever may query may write in ``.staging``; each query removes the links folders of killed queries there:
    one planted holding a deep chain stopped every query with a RecursionError."""
    traces = tmp_path / "traces"
    copy_trace(PRIME, traces)
    assert run_cli("ingest", traces / PRIME.name, "-w", wh_path)[0] == 0
    planted = Warehouse(wh_path).staging_dir / "query.abcdef012345.999999.gone"
    planted.mkdir()
    _deep_chain(planted, DEPTH)
    code, out, err = run_cli("sql", "-w", wh_path, "SELECT count(*) AS n FROM runs")
    assert code == 0 and "1" in out, (out, err)
    assert not planted.exists()


def test_an_ingest_that_rebuilds_the_program_index_beside_a_deep_chain_in_it_works(wh_path, tmp_path, run_cli):
    """The program index is rebuilt aside and the old one removed (after a run's removal): a chain planted in it
    stopped that ingest with a RecursionError and left the old index in ``.index`` for good."""
    from synthtrace.warehouse.programs import INDEX_COMPLETE, PROGRAM_INDEX

    traces = tmp_path / "traces"
    copy_trace(PRIME, traces)
    copy_trace(JACOBI, traces)
    assert run_cli("ingest", traces / PRIME.name, "-w", wh_path)[0] == 0
    index = wh_path / PROGRAM_INDEX
    (index / "junk").mkdir()
    _deep_chain(index / "junk", DEPTH)
    (index / INDEX_COMPLETE).unlink()  # as a run's removal leaves it
    code, out, err = run_cli("ingest", traces / JACOBI.name, "-w", wh_path)
    assert code == 0 and "ingested as" in out + err, (out, err)
    assert not [p for p in index.parent.iterdir() if p.name.endswith(".old")]


def test_a_stale_part_folder_beside_an_output_holding_a_deep_chain_is_removed(wh_path, tmp_path):
    """A killed command's part folder beside an output (``.x.csv.<id>.part``, removed by the next write there)
    holding a deep chain: shutil.rmtree's RecursionError escaped its ignore_errors and stopped the write. (wh_path:
    tmp_path removed without recursion after the test, whatever it left.)"""
    from synthtrace.pipelines.cli_base import held_folder

    stale = tmp_path / ".x.csv.0123abcd.part"
    stale.mkdir()
    _deep_chain(stale, DEPTH)
    with held_folder(tmp_path, ".x.csv") as folder:
        assert folder.is_dir() and not stale.exists()
    assert not folder.exists()


PAST_PATH_MAX = 3000  # "a/" per level: 6,000 bytes, past Linux's 4,096-byte PATH_MAX


def test_a_chain_past_path_max_in_an_experiment_folder_is_one_short_line_naming_it(wh_path):
    """Attack 19 F4: archetypes of an experiment holding a folder chain 3,000 deep failed with one 4,124-character
    line of ``d/d/d...`` (the staged copy's path past PATH_MAX) and no advice, every time. Now one short line naming
    the planted folder and what to do; the stored folder unchanged, nothing left in ``.staging``."""
    from synthtrace.warehouse.errors import WarehouseError

    wh = Warehouse(wh_path).ensure()
    target = wh.experiments_dir / "e"
    wh.update_dir(target, {"a": pl.DataFrame({"x": [1]})})
    (target / "junk").mkdir()
    _deep_chain(target / "junk", PAST_PATH_MAX)
    with pytest.raises(WarehouseError) as caught:
        wh.update_dir(target, {"b": pl.DataFrame({"x": [2]})})
    said = str(caught.value)
    assert len(said) < 400 and "\n" not in said, said
    assert said.startswith(f"{target / 'junk'}: ") and "move that folder out of the warehouse" in said, said
    assert not (target / "b.parquet").exists() and list(wh.staging_dir.iterdir()) == []


def test_runs_move_of_a_run_whose_bursts_hold_a_chain_past_path_max_names_it(wh_path, tmp_path, run_cli):
    """Attack 19 F4, in a run's ``bursts/``: `runs move` said the same 4 kB line. The line names ``bursts/a``
    (the first folder on the way that no commit wrote), not the run's own ``bursts``."""
    traces = tmp_path / "traces"
    copy_trace(PRIME, traces)
    assert run_cli("ingest", traces / PRIME.name, "-w", wh_path)[0] == 0
    run = next(Warehouse(wh_path).runs_dir.iterdir())
    _deep_chain(run / "bursts", PAST_PATH_MAX)
    code, out, err = run_cli("runs", "move", run.name, "--experiment", "other", "-w", wh_path)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and len(lines[0]) < 400, err
    assert f"{run / 'bursts' / 'a'}: " in lines[0] and "move that folder out of the warehouse" in lines[0], err
