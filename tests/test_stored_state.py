"""The warehouse's state is what its commits wrote (issue 23, attack 8 B1-B4, B6, B10): files no commit wrote are not
read, a file a commit wrote that is missing is one line, a run removed while a merge reads it is one line, racing
ingests refuse as they do one after the other, a damaged run can still be removed, and a read-only warehouse is
refused as such. Cases on the two LULESH runs (the session's ``merged_lulesh``), copied per case."""
from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from testing.traces import tree_digest

PRIME = Path(__file__).resolve().parents[1] / "../shared/traces/paraver/prime_v0.prv"


def _copy(merged_lulesh: Path, tmp_path: Path) -> Path:
    wh = tmp_path / "wh"
    shutil.copytree(merged_lulesh, wh, symlinks=True)
    return wh


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err[-3000:]
    return lines[0]


# ---------------------------------------------------------------------------------------------------- B10
@pytest.mark.real_traces
def test_a_read_only_warehouse_is_refused_by_writers_as_read_only(merged_lulesh, tmp_path, run_cli, monkeypatch):
    """Attack 8 B10: every writer said "cannot create the warehouse (Read-only file system)" of a warehouse that is
    there. As root (the CI's containers) a chmod does not stop a write, so the read-only mount is simulated: every
    write below the warehouse fails with EROFS, as on a ``ro`` bind mount (not root: the folder is chmod'ed)."""
    wh = _copy(merged_lulesh, tmp_path)
    before = tree_digest(wh)
    if os.geteuid() == 0:
        real_open, real_mkdir, real_utime = os.open, os.mkdir, os.utime
        inside = str(wh.resolve())

        def refuse(path) -> bool:
            return os.path.abspath(os.fspath(path)).startswith(inside)

        def ro_open(path, flags, *args, **kw):
            if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) and refuse(path):
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
            return real_open(path, flags, *args, **kw)

        def ro_mkdir(path, *args, **kw):
            if refuse(path):
                raise (FileExistsError(errno.EEXIST, "File exists", str(path)) if os.path.exists(path)
                       else OSError(errno.EROFS, os.strerror(errno.EROFS), str(path)))
            return real_mkdir(path, *args, **kw)

        def ro_utime(path, *args, **kw):
            if refuse(path):
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
            return real_utime(path, *args, **kw)

        monkeypatch.setattr(os, "open", ro_open)
        monkeypatch.setattr(os, "mkdir", ro_mkdir)
        monkeypatch.setattr(os, "utime", ro_utime)
    else:
        for d in [wh, *(p for p in wh.rglob("*") if p.is_dir())]:
            d.chmod(0o555)
    try:
        for args in (["ingest", PRIME, "--experiment", "x"], ["runs", "rm", "d12d9ce89c673a43"],
                     ["merge", "lulesh-8r"]):
            code, _, err = run_cli(*args, "-w", wh)
            line = _one_error_line(err)
            assert code == 2 and "read-only" in line and "cannot create" not in line, (args, err)
    finally:
        monkeypatch.undo()
        for d in [wh, *(p for p in wh.rglob("*") if p.is_dir())]:
            d.chmod(0o755)
    assert tree_digest(wh) == before


# ---------------------------------------------------------------------------------------------------- B4
@pytest.mark.real_traces
def test_an_ingest_losing_the_race_to_another_experiment_is_refused_as_one_after_the_other(tmp_path, run_cli,
                                                                                           monkeypatch):
    """Attack 8 B4: two ingests of one trace into different experiments at once both exited 0 (the loser said
    "already ingested ... experiment C"), though one after the other the second is refused (exit 2, how to move it).
    The race is made deterministic: while the ingest into A writes its stage, an ingest into C commits the run."""
    from synthtrace.warehouse import ingest as ing
    from synthtrace.warehouse.layout import Warehouse

    wh = tmp_path / "wh"
    real = ing._write_run

    def another_commits_first(*args, **kwargs):
        monkeypatch.setattr(ing, "_write_run", real)
        assert ing.ingest_trace(Warehouse(wh), PRIME, experiment="C", app="other").status == "ingested"
        return real(*args, **kwargs)

    monkeypatch.setattr(ing, "_write_run", another_commits_first)
    code, out, err = run_cli("ingest", PRIME, "--experiment", "A", "-w", wh)
    monkeypatch.undo()
    raced = _one_error_line(err)
    code_after, _, err_after = run_cli("ingest", PRIME, "--experiment", "A", "-w", wh)
    assert code == code_after == 2, (out, err)
    assert raced == _one_error_line(err_after) and "synthtrace runs move" in raced, (raced, err_after)
    code, out, _ = run_cli("sql", "SELECT experiment FROM runs", "-w", wh, "-f", "csv")
    assert code == 0 and out.replace('"', "").split() == ["experiment", "C"]


# ---------------------------------------------------------------------------------------------------- B1
RUN_A, RUN_B = "d12d9ce89c673a43", "113698729df2a852"  # 2,140 and 848 bursts
COUNTS = "SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM bursts), (SELECT count(*) FROM merged_bursts)"


def _csv_row(run_cli, wh: Path, query: str) -> list[str]:
    code, out, err = run_cli("sql", query, "-w", wh, "-f", "csv")
    assert code == 0, err
    return [cell.strip('"') for cell in out.splitlines()[1].split(",")]


def _runs_listing(wh: Path) -> tuple[list[str], list[tuple], list[str]]:
    """What ``synthtrace runs`` lists, and its warning lines (pipelines/cli_read.py's ``list_runs`` is to print
    them: :func:`~synthtrace.warehouse.sql.runs_rows`)."""
    from synthtrace.pipelines.cli_read import RUNS_QUERY
    from synthtrace.warehouse.layout import Warehouse
    from synthtrace.warehouse.sql import runs_rows

    return runs_rows(Warehouse(wh), RUNS_QUERY)


def _unnamed(wh: Path) -> None:
    """The manifests as a commit before they named their folder wrote them (the readers then judge a folder by
    its own stored table)."""
    import json

    for m in wh.rglob("checksums.json"):
        doc = json.loads(m.read_text())
        doc.pop("folder", None)
        m.write_text(json.dumps(doc))


@pytest.mark.real_traces
@pytest.mark.parametrize("manifests", ["named", "before-named", "read-by-path"])
def test_files_and_folders_no_commit_wrote_are_not_read(merged_lulesh, tmp_path, run_cli, manifests, monkeypatch):
    """Attack 8 B1: a copied part beside the parts doubled the run's bursts in ``sql`` and in the merge, a copied
    run folder (``<id>.bak``) was one more run, a copied experiment folder doubled ``merged_bursts``; all exit 0.
    ``read-by-path``: as a reader who cannot write the warehouse's .staging binds the files (catalog.view_files)."""
    from synthtrace.warehouse import snapshot

    wh = _copy(merged_lulesh, tmp_path)
    if manifests == "before-named":
        _unnamed(wh)
    if manifests == "read-by-path":
        monkeypatch.setattr(snapshot, "_links_folder", lambda *_: None)
    run = wh / "runs" / RUN_A
    shutil.copy2(run / "bursts" / "part-00000.parquet", run / "bursts" / "part-00000 (copy).parquet")
    shutil.copytree(run, wh / "runs" / f"{RUN_A}.bak")
    shutil.copytree(wh / "experiments" / "lulesh-8r", wh / "experiments" / "lulesh-8r.old")
    assert _csv_row(run_cli, wh, COUNTS) == ["2", "2988", "2140"]
    assert _csv_row(run_cli, wh, f"SELECT count(*) FROM bursts WHERE run_id = '{RUN_A}'") == ["2140"]
    columns, rows, warned = _runs_listing(wh)
    assert sorted(r[columns.index("run_id")] for r in rows) == sorted([RUN_A, RUN_B]), rows
    assert len(warned) == 2 and f"{RUN_A}.bak" in warned[0] and "lulesh-8r.old" in warned[1], warned
    code, out, err = run_cli("runs", "-w", wh)  # what the user sees of it
    said = [line for line in err.splitlines() if line.startswith("warning:")]
    assert code == 0 and len(said) == 2 and f"{RUN_A}.bak" in said[0] and "lulesh-8r.old" in said[1], err
    code, out, err = run_cli("merge", "lulesh-8r", "-w", wh)
    assert code == 0 and "merged 2140 bursts" in out, (out, err)
    assert _csv_row(run_cli, wh, "SELECT count(*), count(DISTINCT (task, thread, burst_seq)) FROM merged_bursts "
                                 "WHERE experiment = 'lulesh-8r'") == ["2140", "2140"]


@pytest.mark.real_traces
def test_copied_folders_without_their_manifest_are_not_read(merged_lulesh, tmp_path, run_cli):
    """Attack 9 C1: a run folder copied under another run-id-like name with its checksums.json removed was a third
    run (its bursts twice), and parquet files copied into a new experiment folder doubled merged_bursts: a folder
    without a manifest was trusted by its name alone."""
    wh = _copy(merged_lulesh, tmp_path)
    shutil.copytree(wh / "runs" / RUN_A, wh / "runs" / "0123456789abcdef")
    (wh / "runs" / "0123456789abcdef" / "checksums.json").unlink()
    (wh / "experiments" / "old").mkdir()
    for f in (wh / "experiments" / "lulesh-8r").glob("*.parquet"):
        shutil.copy2(f, wh / "experiments" / "old" / f.name)
    assert _csv_row(run_cli, wh, COUNTS) == ["2", "2988", "2140"]
    code, out, err = run_cli("runs", "-w", wh)
    said = [line for line in err.splitlines() if line.startswith("warning:")]
    assert code == 0 and len(said) == 2, err
    assert "0123456789abcdef" in said[0] and "experiments/old" in said[1], said


@pytest.mark.real_traces
def test_a_rewrite_of_a_folder_does_not_make_a_file_no_commit_wrote_stored(merged_lulesh, tmp_path, run_cli):
    """A writer that rewrites a folder keeping its files (``runs move``: Warehouse.update_dir) kept the copy put
    beside the parts too, and its new manifest listed it: from then on it was stored data, read by every view."""
    import json

    wh = _copy(merged_lulesh, tmp_path)
    run = wh / "runs" / RUN_A
    shutil.copy2(run / "bursts" / "part-00000.parquet", run / "bursts" / "part-00000 (copy).parquet")
    code, _, err = run_cli("runs", "move", RUN_A, "-e", "other", "-w", wh)
    assert code == 0, err
    assert "bursts/part-00000 (copy).parquet" not in json.loads((run / "checksums.json").read_text())["files"]
    assert _csv_row(run_cli, wh, f"SELECT count(*), any_value(r.experiment) FROM bursts b JOIN runs r USING (run_id) "
                                 f"WHERE run_id = '{RUN_A}'") == ["2140", "other"]


# ---------------------------------------------------------------------------------------------------- B2
@pytest.mark.real_traces
@pytest.mark.parametrize("command", ["sql", "merge", "runs-rm"])
def test_a_listed_file_that_is_missing_is_one_line_naming_it(merged_lulesh, tmp_path, run_cli, command):
    """Attack 8 B2: with a run's mpi_calls.parquet and bursts part gone (a copy cut short), ``sql`` answered
    without them (exit 0) and ``merge`` ended in a Polars ColumnNotFoundError traceback."""
    wh = _copy(merged_lulesh, tmp_path)
    run = wh / "runs" / RUN_A
    (run / "mpi_calls.parquet").unlink()
    (run / "bursts" / "part-00000.parquet").unlink()
    columns, rows, warned = _runs_listing(wh)  # the run is listed (its record is sound), and named
    assert len(rows) == 2 and len(warned) == 1 and str(run) in warned[0] and "missing" in warned[0], warned
    if command == "runs-rm":  # the remedy the line gives works
        code, _, err = run_cli("runs", "rm", RUN_A, "-w", wh)
        assert code == 0 and not run.exists(), err
        assert _csv_row(run_cli, wh, "SELECT count(*) FROM bursts") == ["848"]
        return
    before = tree_digest(wh)
    args = (["sql", "SELECT (SELECT count(*) FROM bursts), (SELECT count(*) FROM mpi_calls)"] if command == "sql"
            else ["merge", "lulesh-8r"])
    code, _, err = run_cli(*args, "-w", wh)
    line = _one_error_line(err)
    assert code == 2 and str(run) in line and "missing" in line and f"runs rm {RUN_A}" in line, err
    assert tree_digest(wh) == before


@pytest.mark.real_traces
def test_the_runs_listing_looks_at_each_listed_file_once(merged_lulesh, tmp_path, monkeypatch):
    """The listing's check of the runs' listed files (a link among them, one missing) ``lstat``-ed every file twice
    (once for links, once more for missing ones): a ``stat`` per listed file, as its docstring says."""
    from collections import Counter

    from synthtrace.warehouse.stored import incomplete_runs

    wh = _copy(merged_lulesh, tmp_path)
    run = wh / "runs" / RUN_A
    (run / "bursts" / "part-00000.parquet").unlink()
    looked, real = Counter(), os.lstat

    def counting(path, *args, **kw):
        looked[os.fspath(path)] += 1
        return real(path, *args, **kw)

    monkeypatch.setattr(os, "lstat", counting)
    lines = incomplete_runs(wh)
    monkeypatch.undo()
    assert list(lines) == [RUN_A] and "part-00000.parquet" in lines[RUN_A] and "missing" in lines[RUN_A], lines
    inside = [f"{wh / 'runs' / run_id}{os.sep}" for run_id in (RUN_A, RUN_B)]  # the runs' members
    listed = {p: n for p, n in looked.items() if p.startswith(tuple(inside)) and not p.endswith("checksums.json")}
    assert len(listed) > 10 and max(listed.values()) == 1, Counter(listed).most_common(3)


# ---------------------------------------------------------------------------------------------------- B3
@pytest.mark.real_traces
def test_a_run_removed_while_the_merge_reads_it_is_one_line(merged_lulesh, tmp_path, run_cli, monkeypatch):
    """Attack 8 B3: ``runs rm`` of a run while ``merge`` read the runs gave the ColumnNotFoundError traceback of B2
    (the vanished folder read as an empty table). Deterministic: the run is removed just before the merge reads
    its bursts."""
    from synthtrace.warehouse import experiment as exp_module
    from synthtrace.warehouse.layout import Warehouse
    from synthtrace.warehouse.run_admin import remove_runs

    wh = _copy(merged_lulesh, tmp_path)
    shutil.rmtree(wh / "experiments" / "lulesh-8r")  # the merge does the whole work
    real = exp_module.run_bursts

    def removed_first(w, run_id, **kw):
        if run_id == RUN_B and (w.run_dir(run_id)).exists():
            remove_runs(Warehouse(wh), [RUN_B])
        return real(w, run_id, **kw)

    monkeypatch.setattr(exp_module, "run_bursts", removed_first)
    code, _, err = run_cli("merge", "lulesh-8r", "-w", wh)
    line = _one_error_line(err)
    assert code == 1 and RUN_B in line and "removed" in line and "run the command again" in line, err
    assert not (wh / "experiments" / "lulesh-8r").exists()


# ---------------------------------------------------------------------------------------------------- B6
@pytest.mark.real_traces
@pytest.mark.parametrize("damage", ["record", "checksums"])
def test_a_run_with_a_damaged_record_is_listed_apart_and_can_be_removed(merged_lulesh, tmp_path, run_cli, damage):
    """Attack 8 B6: with a byte of a run's run.parquet damaged, or its checksums.json cut short, ``runs rm`` of it
    was refused (the remedy the errors give) and ``runs`` failed for the whole warehouse."""
    from synthtrace.warehouse.stored import damaged_runs

    wh = _copy(merged_lulesh, tmp_path)
    run = wh / "runs" / RUN_A
    if damage == "record":
        data = bytearray((run / "run.parquet").read_bytes())
        data[len(data) // 3] ^= 0xFF
        (run / "run.parquet").write_bytes(bytes(data))
    else:
        (run / "checksums.json").write_bytes((run / "checksums.json").read_bytes()[:100])
    columns, rows, warned = _runs_listing(wh)
    assert [r[columns.index("run_id")] for r in rows] == [RUN_B]
    assert len(warned) == 1 and str(run) in warned[0] and f"synthtrace runs rm {RUN_A}" in warned[0], warned
    assert list(damaged_runs(wh)) == [RUN_A]
    before = tree_digest(wh)
    code, _, err = run_cli("runs", "move", RUN_A, "-e", "other", "-w", wh)
    assert code == 2 and "cannot be moved" in _one_error_line(err) and tree_digest(wh) == before, err
    code, out, err = run_cli("runs", "rm", RUN_A[:6], "-w", wh)
    assert code == 0 and f"removed run {RUN_A}" in out and not run.exists(), (out, err)
    assert "experiment lulesh-8r: merged data and analysis removed" in out  # its experiment's merge listed it
    assert not (wh / "experiments" / "lulesh-8r").exists()
    assert _csv_row(run_cli, wh, "SELECT count(*) FROM runs") == ["1"]
    code, _, err = run_cli("runs", "move", RUN_B, "-e", "other", "-w", wh)
    assert code == 0, err


@pytest.mark.real_traces
def test_a_planted_run_folder_whose_record_is_a_fifo_blocks_no_reader(merged_lulesh, tmp_path, run_cli):
    """A run folder not named like a run id is judged by its record's run_id (B1, a folder stored before manifests
    named theirs); a record that is a FIFO must not be opened (it would block the query, ``runs`` and ``runs rm``
    for good). With a time limit, a blocked query would be refused, not answered."""
    wh = _copy(merged_lulesh, tmp_path)
    (wh / "runs" / "planted").mkdir()
    os.mkfifo(wh / "runs" / "planted" / "run.parquet")
    code, out, err = run_cli("sql", "SELECT count(*) FROM runs", "-w", wh, "-f", "csv", "--timeout", "60")
    assert code == 0 and out.splitlines()[1] == "2", err
    columns, rows, _ = _runs_listing(wh)
    assert len(rows) == 2
    code, _, err = run_cli("runs", "rm", RUN_B, "-w", wh)
    assert code == 0, err


@pytest.mark.real_traces
def test_copies_beside_the_parts_are_not_exported(merged_lulesh, tmp_path, run_cli):
    """Attack 9 C2, C3: ``merge --export-prv`` found the reference run's events (and the merge its calls) by listing
    the folder, and ``export`` of a one-run experiment its bursts: a copy beside the parts was written twice."""
    wh = _copy(merged_lulesh, tmp_path)
    code, _, err = run_cli("ingest", PRIME, "--experiment", "single", "-w", wh)
    assert code == 0, err

    def exported(tag: str) -> tuple[bytes, bytes]:
        code, _, err = run_cli("merge", "lulesh-8r", "--export-prv", tmp_path / tag / "m", "-w", wh)
        assert code == 0, err
        code, _, err = run_cli("export", "single", "-f", "csv", "-o", tmp_path / tag / "single.csv", "-w", wh)
        assert code == 0, err
        return (tmp_path / tag / "m.prv").read_bytes(), (tmp_path / tag / "single.csv").read_bytes()

    before = exported("before")
    planted = 0
    for part in [*wh.glob("runs/*/events/*.parquet"), *wh.glob("runs/*/bursts/*.parquet"),
                 *wh.glob("runs/*/mpi_calls.parquet")]:
        shutil.copy2(part, part.with_name(f"{part.stem} (copy){part.suffix}"))
        planted += 1
    assert planted >= 5 and any(wh.glob("runs/*/events/* (copy).parquet"))
    assert exported("after") == before


@pytest.mark.real_traces
def test_a_merge_removed_while_archetypes_reads_it_is_one_line(merged_lulesh, tmp_path, run_cli, monkeypatch):
    """Attack 9 C5: ``runs rm`` while the windowed analysis read the merged bursts printed Polars' raw "No such file
    or directory (os error 2)"; it is the runs-changed line, exit 1, nothing committed and no scratch left.
    Deterministic: the merged file goes after the analysis planned its reads, before it reads them."""
    from synthtrace.warehouse import analysis_store

    wh = _copy(merged_lulesh, tmp_path)
    merged = next(wh.glob("experiments/lulesh-8r/merged_bursts.parquet"))
    plan = analysis_store.load_experiment_windows

    def then_removed(*args, **kw):
        windows = plan(*args, **kw)
        merged.unlink()
        return windows

    monkeypatch.setattr(analysis_store, "load_experiment_windows", then_removed)
    code, _, err = run_cli("archetypes", "lulesh-8r", "-w", wh)
    line = _one_error_line(err)
    assert code == 1 and "changed while it was analysed" in line and "run the command again" in line, err
    assert not (merged.parent / "archetypes.parquet").exists() and not any((wh / ".staging").iterdir())


@pytest.mark.real_traces
@pytest.mark.parametrize("when", ["counting", "writing"])
def test_a_merge_removed_while_export_reads_it_is_one_line(merged_lulesh, tmp_path, run_cli, monkeypatch, when):
    """Attack 10 D5: ``runs rm`` while ``export`` read the merged trace gave Arrow's raw "Failed to open local file"
    (exit 2) or blamed --output ("cannot write it"); it is the runs-changed line, exit 1, and no output file.
    Deterministic: the merged file goes after the export planned its scans (``counting``) or opened its output."""
    from synthtrace.warehouse import export_views

    wh = _copy(merged_lulesh, tmp_path)
    merged = next(wh.glob("experiments/lulesh-8r/merged_bursts.parquet"))
    scans, write = export_views.export_scans, export_views.write_csv

    def scans_then_removed(*args, **kw):
        planned = scans(*args, **kw)
        merged.unlink()
        return planned

    def removed_then_written(*args, **kw):
        merged.unlink()
        return write(*args, **kw)

    if when == "counting":
        monkeypatch.setattr(export_views, "export_scans", scans_then_removed)
    else:
        monkeypatch.setattr(export_views, "write_csv", removed_then_written)
    out = tmp_path / "out.csv"
    code, _, err = run_cli("export", "lulesh-8r", "-f", "csv", "-o", out, "-w", wh)
    line = _one_error_line(err)
    assert code == 1 and "changed while it was exported" in line and "run the command again" in line, err
    assert not out.exists()


@pytest.mark.real_traces
def test_pop_reads_what_the_commits_wrote(merged_lulesh, tmp_path, run_cli):
    """Attack 8 B1 (the readers integrity 8 listed): POP read a run's bursts, calls and messages by listing its
    folder, and every experiment's POP table by globbing: a copy beside the parts counted twice."""
    clean = _copy(merged_lulesh, tmp_path / "clean")
    code, before, err = run_cli("pop", "lulesh-8r", "-w", clean)
    assert code == 0, err
    wh = _copy(merged_lulesh, tmp_path)
    for part in [*wh.glob("runs/*/bursts/*.parquet"), *wh.glob("runs/*/mpi_calls.parquet")]:
        shutil.copy2(part, part.with_name(f"{part.stem} (copy){part.suffix}"))
    code, after, err = run_cli("pop", "lulesh-8r", "-w", wh)
    before, after = before.replace(str(clean), str(wh)), after
    assert code == 0 and after == before, (before, after, err)


@pytest.mark.real_traces
@pytest.mark.parametrize("table, how", [("experiments/lulesh-8r/pop_metrics.parquet", "missing"),
                                        ("experiments/lulesh-8r/pop_metrics.parquet", "linked"),
                                        ("pop/pop_scaling.parquet", "linked")])
def test_the_pop_tables_are_read_as_their_commits_wrote_them(merged_lulesh, tmp_path, run_cli, table, how):
    """pop_store read the POP tables by hand where the other stores ask ``stored_file``: an experiment's
    pop_metrics.parquet that its manifest lists and that is missing was skipped (the report said "No POP table
    yet", exit 0), and a pop_scaling.parquet replaced by a link to an outside copy was read through. Both are one
    line naming the file, as any stored file's (a linked pop_metrics.parquet already was)."""
    wh = _copy(merged_lulesh, tmp_path)
    code, _, err = run_cli("pop", "lulesh-8r", "-w", wh)
    assert code == 0, err
    stored = wh / table
    if how == "linked":
        outside = tmp_path / "outside" / stored.name
        outside.parent.mkdir()
        shutil.move(stored, outside)
        os.symlink(outside, stored)
    else:
        stored.unlink()
    code, _, err = run_cli("report", "-w", wh, "-o", tmp_path / "report.html")
    line = _one_error_line(err)
    assert code == 2 and str(stored) in line, err
    assert ("symbolic link" in line and "not read" in line) if how == "linked" else "missing" in line, line


@pytest.mark.slow
@pytest.mark.real_traces
def test_a_copied_experiment_folder_is_neither_analysed_nor_trained_on(merged_lulesh, tmp_path, run_cli):
    """Attack 10 D1/D2: ``archetypes`` (every experiment) listed ``experiments/`` by its folders, analysed the copy
    ``lulesh-8r.old`` and committed into it (its manifest then named it, so every reader took it: merged_bursts and
    archetypes doubled, exit 0), and ``train`` took the copy for one more application (its bursts leaked into the
    held-out evaluation). The experiments a stage lists are those the commits wrote."""
    from synthtrace.warehouse.layout import Warehouse
    from synthtrace.warehouse.model_store import experiment_apps, merged_bursts_file

    wh = _copy(merged_lulesh, tmp_path)
    copy = wh / "experiments" / "lulesh-8r.old"
    shutil.copytree(wh / "experiments" / "lulesh-8r", copy)
    before = tree_digest(copy)
    assert set(experiment_apps(Warehouse(wh))) == {"lulesh-8r"}
    assert merged_bursts_file(Warehouse(wh).experiment_dir("lulesh-8r.old")) is None
    code, out, err = run_cli("archetypes", "-w", wh)
    assert code == 0 and "lulesh-8r.old" not in out + err.replace(f"{copy}: not read", ""), (out, err)
    assert tree_digest(copy) == before  # nothing written into the copy
    assert _csv_row(run_cli, wh, "SELECT (SELECT count(*) FROM merged_bursts), (SELECT count(DISTINCT experiment) "
                                 "FROM archetypes)") == ["2140", "1"]
    code, out, err = run_cli("archetypes", "lulesh-8r.old", "-w", wh)
    assert code != 0 and tree_digest(copy) == before, (out, err)


@pytest.mark.slow
@pytest.mark.real_traces
def test_runs_ingested_under_a_copied_folders_name_are_refused_and_the_copy_kept(merged_lulesh, tmp_path, run_cli):
    """Attack 11 E1: ``ingest --experiment lulesh-8r.old`` (the name of a user's copy of an experiment folder) was
    accepted, and the next ``archetypes lulesh-8r.old`` committed into the copy: its manifest then named the folder,
    so the copy's LULESH merge became stored data (merged_bursts 4,280 rows, 2,140 twice). No writer commits into,
    or replaces, a folder no commit wrote."""
    from synthtrace.warehouse.errors import ForeignFolderError
    from synthtrace.warehouse.layout import Warehouse

    wh = _copy(merged_lulesh, tmp_path)
    copy = wh / "experiments" / "lulesh-8r.old"
    shutil.copytree(wh / "experiments" / "lulesh-8r", copy)
    before, stored = tree_digest(copy), tree_digest(wh / "runs")
    code, out, err = run_cli("ingest", PRIME, "--experiment", "lulesh-8r.old", "-w", wh)
    line = _one_error_line(err)
    assert code == 2 and "lulesh-8r.old" in line and "copy" in line, (out, err)
    assert tree_digest(copy) == before and tree_digest(wh / "runs") == stored  # nothing ingested
    # a writer reaching the copy another way (every commit of a stage updates its folder so) is refused the same
    with pytest.raises(ForeignFolderError, match="copy no commit wrote"):
        Warehouse(wh).update_dir(copy, {}, {"night": {"stages": []}})
    assert tree_digest(copy) == before
    assert _csv_row(run_cli, wh, "SELECT count(*) FROM merged_bursts") == ["2140"]


@pytest.mark.slow
@pytest.mark.real_traces
def test_a_merge_again_drops_the_analysis_of_the_bursts_it_replaces(merged_lulesh, tmp_path, run_cli):
    """Attack 11 E2: ``merge --reference <the other run>`` replaced merged_bursts (848 bursts of that run) but kept
    the archetypes, burst/mpi/phase metrics of the earlier merge (2,140 bursts of the first run), exit 0, and
    ``export`` labelled each new burst with the old run's burst of the same number. A merge's commit takes the
    analysis of the bursts it replaces with it, and the night record no longer counts that stage done."""
    import json

    wh = _copy(merged_lulesh, tmp_path)
    exp = wh / "experiments" / "lulesh-8r"
    assert run_cli("archetypes", "lulesh-8r", "-w", wh)[0] == 0
    (exp / "night.json").write_text(json.dumps({"run_ids": sorted([RUN_A, RUN_B]), "stages": ["archetypes", "merge"]}))
    assert (exp / "archetypes.parquet").is_file() and (exp / "archetype_discovery.json").is_file()
    code, out, err = run_cli("merge", "lulesh-8r", "--reference", RUN_B, "-w", wh)
    assert code == 0, err
    assert not any((exp / f).exists() for f in ("archetypes.parquet", "burst_metrics.parquet", "mpi_metrics.parquet",
                                                "phase_metrics.parquet", "archetype_discovery.json"))
    assert json.loads((exp / "night.json").read_text())["stages"] == ["merge"]
    assert _csv_row(run_cli, wh, "SELECT count(*), min(run_id) FROM merged_bursts") == ["848", RUN_B]
    code, out, err = run_cli("export", "lulesh-8r", "--format", "csv", "-o", tmp_path / "x.csv", "-w", wh)
    assert code == 0, err
    header, *rows = (tmp_path / "x.csv").read_text().splitlines()
    assert len(rows) == 848 and "archetype" not in header.split(",") or all(
        r.split(",")[header.split(",").index("archetype")] in ("", '""') for r in rows), header


@pytest.mark.slow
@pytest.mark.real_traces
def test_the_nights_merge_keeps_the_options_of_a_merge_by_hand(merged_lulesh, tmp_path, run_cli):
    """Attack 11 E2: on a warehouse no night had seen, the night's merge stage re-merged an experiment merged by hand
    with ``--reference <the other run>`` with the default reference, silently. It keeps the recorded options, the
    reference while that run is one of the experiment's."""
    from synthtrace.pipelines.jobs import merge, recorded_options
    from synthtrace.warehouse.layout import Warehouse

    wh = _copy(merged_lulesh, tmp_path)
    assert run_cli("merge", "lulesh-8r", "--reference", RUN_B, "--estimate-unmatched", "-w", wh)[0] == 0
    options = recorded_options(Warehouse(wh).experiment("lulesh-8r"))
    assert options.reference == RUN_B and options.estimate_unmatched
    assert merge(Warehouse(wh), "lulesh-8r")["reference_run"] == Warehouse(wh).experiment("lulesh-8r").run_names[RUN_B]
    assert _csv_row(run_cli, wh, "SELECT count(*), min(run_id) FROM merged_bursts") == ["848", RUN_B]


@pytest.mark.real_traces
def test_a_copy_of_an_unmerged_analysis_under_an_old_manifest_is_not_read(merged_lulesh, tmp_path, run_cli):
    """Attack 12 F1: an experiment analysed without a merge has no experiment.json, and a manifest written before
    manifests named their folder (12-02 23:54 to 12-03 06:36) says nothing of its name: a copy ``p.old`` of it was
    read (``sql`` counted its archetypes twice) and adopted by ``ingest``/``archetypes``. Such a folder is judged by
    the experiment its tables hold: the copy is refused, the warehouse's own folder under the same old manifest is
    read as before. Also a copy with no manifest whose experiment.json lost its ``experiment`` key."""
    import json

    wh = _copy(merged_lulesh, tmp_path)
    assert run_cli("ingest", PRIME, "--experiment", "p", "-w", wh)[0] == 0
    assert run_cli("archetypes", "p", "-w", wh)[0] == 0
    _unnamed(wh)
    exp = wh / "experiments"
    shutil.copytree(exp / "p", exp / "p.old")
    shutil.copytree(exp / "lulesh-8r", exp / "x")
    (exp / "x" / "checksums.json").unlink()
    record = json.loads((exp / "x" / "experiment.json").read_text())
    del record["experiment"]
    (exp / "x" / "experiment.json").write_text(json.dumps(record))
    per_experiment = "SELECT count(*), count(DISTINCT experiment) FROM archetypes"
    held = _csv_row(run_cli, wh, per_experiment)
    assert _csv_row(run_cli, wh, "SELECT count(*) FROM merged_bursts") == ["2140"]
    columns, rows, warned = _runs_listing(wh)
    assert any("p.old" in w and "holds the rows of experiment 'p'" in w for w in warned), warned
    assert any("experiments/x" in w for w in warned), warned
    for name in ("p.old", "x"):
        code, out, err = run_cli("ingest", PRIME.parent / "jacobi-2d-imper_v0.prv", "--experiment", name, "-w", wh)
        assert code != 0 and "not a folder of the warehouse" in _one_error_line(err), (name, out, err)
        code, out, err = run_cli("archetypes", name, "-w", wh)
        assert code != 0 and f"no experiment {name!r}" in _one_error_line(err), (name, out, err)
    assert run_cli("archetypes", "p", "-w", wh)[0] == 0  # its own folder, manifest as old: still written
    assert _csv_row(run_cli, wh, per_experiment) == held and int(held[0]) > 0 and held[1] == "1", held
