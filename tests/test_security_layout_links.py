"""A warehouse whose layout folders (runs/, experiments/, .staging/, .locks/) are symbolic links or files is refused
by every writer with one line, and nothing is written or deleted where the link points (attack 6, F2 and F3:
``.staging -> /elsewhere`` made the next ingest's stale-staging cleanup delete every subfolder of /elsewhere, and
``experiments -> /elsewhere`` made ``merge`` write there and exit 0)."""
from __future__ import annotations

import shutil

import pytest

from testing.traces import JACOBI, PRIME, copy_trace, tree_digest


@pytest.mark.real_traces
@pytest.mark.parametrize("folder", ["runs", "experiments", ".staging", ".locks", "models", "predictions",
                                    "regressions", "pop", ".index", ".cache"])
def test_a_layout_folder_that_is_a_link_is_refused_and_nothing_where_it_points_changes(tmp_path, run_cli, folder):
    drop = copy_trace(PRIME, tmp_path / "drop").parent
    wh = tmp_path / "wh"
    assert run_cli("ingest", drop, "-w", wh)[0] == 0
    victim = tmp_path / "victim"
    for sub in ("sub", "d.123", "q.1.999999999"):  # names the stale-staging cleanup took for a dead writer's
        (victim / sub).mkdir(parents=True)
        (victim / sub / "kept.txt").write_text("keep\n")
    (victim / "important.txt").write_text("keep\n")
    before = tree_digest(victim)
    link = wh / folder
    if link.exists():
        shutil.rmtree(link)
    link.symlink_to(victim, target_is_directory=True)
    code, _, err = run_cli("ingest", copy_trace(JACOBI, tmp_path / "drop2"), "-w", wh)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and str(link) in lines[0] and "symbolic link" in lines[0], err
    assert tree_digest(victim) == before and link.is_symlink()


@pytest.mark.real_traces
def test_an_experiment_folder_that_is_a_link_is_read_by_no_command_and_no_writer_replaces_it(
        merged_lulesh, tmp_path, run_cli):
    """attack 17 F6: ``experiments/<name> -> /elsewhere`` (a merged experiment moved out and linked back) was read by
    ``report`` and ``export`` as the experiment's merge, and ``pop``/``archetypes`` replaced the link with a folder
    built from the outside files. Now it is read nowhere (as a linked ``runs/<id>`` is not), ``runs`` says so, and
    every writer refuses it in one line naming it; nothing where it points changes."""
    wh, outside, out = tmp_path / "wh", tmp_path / "outside", tmp_path / "out"
    shutil.copytree(merged_lulesh, wh, symlinks=True)
    out.mkdir()
    link = wh / "experiments" / "lulesh-8r"
    shutil.move(link, outside)
    link.symlink_to(outside, target_is_directory=True)
    before = tree_digest(outside)

    code, _, err = run_cli("export", "lulesh-8r", "--format", "pipit", "--output", out / "e.csv", "-w", wh)
    assert code == 2 and "no merged trace" in err and not (out / "e.csv").exists(), err
    code, _, err = run_cli("sql", "SELECT count(*) AS n FROM merged_bursts", "-w", wh, "--format", "csv")
    assert code == 2 and "no experiment has been merged" in err, err
    code, text, err = run_cli("runs", "-w", wh)
    assert code == 0 and str(link) in err and "symbolic link" in err, err
    for command in (("pop",), ("archetypes", "lulesh-8r"), ("merge", "lulesh-8r")):
        code, _, err = run_cli(*command, "-w", wh)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and str(link) in lines[0] and "symbolic link" in lines[0], (command, err)
        assert link.is_symlink() and tree_digest(outside) == before, command


@pytest.mark.real_traces
def test_a_top_folder_that_is_a_link_is_read_by_no_command(merged_lulesh, tmp_path, run_cli):
    """attack 18 F3: ``experiments -> /elsewhere`` (the whole folder moved out and linked back) was refused by every
    writer but read by ``report``/``export`` as the warehouse's experiments; ``runs -> /elsewhere`` gave an empty
    ``runs`` table without a word. Now a linked top folder is read nowhere and ``runs`` names it."""
    wh, out = tmp_path / "wh", tmp_path / "out"
    shutil.copytree(merged_lulesh, wh, symlinks=True)
    out.mkdir()
    for top in ("experiments", "runs"):
        link, outside = wh / top, tmp_path / f"outside-{top}"
        shutil.move(link, outside)
        link.symlink_to(outside, target_is_directory=True)
        before = tree_digest(outside)
        if top == "experiments":  # the merged trace lives there
            code, _, err = run_cli("export", "lulesh-8r", "--format", "pipit", "--output", out / "e.csv", "-w", wh)
            assert code == 2 and "no merged trace" in err and not (out / "e.csv").exists(), err
        code, _, err = run_cli("runs", "-w", wh)
        assert code == 0 and f"{link}: not read" in err and "symbolic link" in err, (top, err)
        assert tree_digest(outside) == before
        link.unlink()
        shutil.move(outside, link)


@pytest.mark.real_traces
def test_a_trace_whose_run_folder_is_a_link_is_not_already_ingested(tmp_path, run_cli):
    """attack 18 F5: with ``runs/<id>`` moved out and linked back (no reader reads it), ingest of its trace said
    "already ingested" (exit 0) and every night skipped it: the trace was reported stored and read nowhere. Now the
    ingest refuses in one line naming the link, which it leaves alone."""
    drop = copy_trace(PRIME, tmp_path / "drop").parent
    wh, outside = tmp_path / "wh", tmp_path / "outside"
    assert run_cli("ingest", drop, "-w", wh)[0] == 0
    (run,) = (wh / "runs").iterdir()
    shutil.move(run, outside)
    run.symlink_to(outside, target_is_directory=True)
    before = tree_digest(outside)
    code, out, err = run_cli("ingest", drop, "-w", wh)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and str(run) in lines[0] and "remove the link" in lines[0], (out, err)
    assert "already ingested" not in out + err and run.is_symlink() and tree_digest(outside) == before
