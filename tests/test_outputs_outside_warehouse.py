"""No command's output lands inside a warehouse, and an exported trace never replaces a link or a special file
(issue 23 items 1 and 2, as a fresh attacker found them left open for ``merge --export-prv``, ``report --plots``
and ``simulate OUT_DIR``): one line, exit 2, before any work, and nothing written."""
from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from synthtrace.warehouse.layout import Warehouse
from testing.fifo_reader import reading


@pytest.fixture
def wh(tmp_path: Path) -> Warehouse:
    w = Warehouse(tmp_path / "wh").ensure()
    (w.runs_dir / "r1").mkdir()
    return w


def _refused(run_cli, *args) -> str:
    code, _, err = run_cli(*args)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    return lines[0]


def test_merge_export_into_a_run_folder_is_refused(wh: Warehouse, run_cli) -> None:
    line = _refused(run_cli, "merge", "lulesh", "-w", wh.root, "--export-prv", wh.runs_dir / "r1" / "run")
    assert "lies inside the warehouse" in line
    assert sorted(p.name for p in (wh.runs_dir / "r1").iterdir()) == []


@pytest.mark.parametrize(("stem", "said"), [
    ("", "names a folder"), (".", "names a folder"), ("/", "names a folder"), ("..", "names a folder"),
    ("{tmp}", "names a folder"), ("{tmp}/.prv", "names a folder"), ("{tmp}/x.prv.gz", "written uncompressed"),
])
def test_an_export_stem_that_names_no_file_is_refused_before_the_merge(wh: Warehouse, tmp_path: Path, run_cli,
                                                                       stem: str, said: str) -> None:
    """`--export-prv ""`, `.` or `/` ended in a ValueError traceback; `..` wrote `...prv` into the working folder,
    an existing folder `out` wrote `out.prv` beside it, `x.prv.gz` an uncompressed `x.prv.gz.prv` (attack 7 A2)."""
    line = _refused(run_cli, "merge", "lulesh", "-w", wh.root, "--export-prv", stem.format(tmp=tmp_path))
    assert line.startswith("error: --export-prv") and said in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wh"]


def test_report_plots_inside_the_warehouse_are_refused(wh: Warehouse, tmp_path: Path, run_cli) -> None:
    line = _refused(run_cli, "report", "--out", tmp_path / "r.html", "-w", wh.root, "--plots", wh.runs_dir / "plots")
    assert "lies inside the warehouse" in line and not (wh.runs_dir / "plots").exists()


def test_simulate_into_the_warehouse_is_refused(wh: Warehouse, run_cli) -> None:
    line = _refused(run_cli, "simulate", wh.runs_dir / "sim", "--pattern", "halo", "--runs", "1")
    assert "lies inside the warehouse" in line and not (wh.runs_dir / "sim").exists()


#: command -> (its arguments, "{out}": the output path under test; the output file a stem names)
OUTPUTS = {
    "sql --output": (["sql", "SELECT 42 AS answer", "-f", "csv", "--output", "{out}"], ""),
    "export --output": (["export", "lulesh-8r", "-f", "csv", "--output", "{out}"], ""),
    "merge --export-prv": (["merge", "lulesh-8r", "--export-prv", "{out}"], ".prv"),
}


@pytest.mark.real_traces
@pytest.mark.parametrize("command", OUTPUTS)
def test_every_output_follows_one_rule_for_links_and_fifos(merged_lulesh: Path, tmp_path: Path, run_cli,
                                                           command: str) -> None:
    """Session 6 item 2: ``--export-prv`` refused a FIFO or a link that ``--output`` wrote into or followed. Now
    every output path: a link is followed (the link stays), a FIFO a process reads is written into (it stays a
    FIFO), an unread FIFO and a link into a warehouse are refused in one line, before or without writing."""
    wh = tmp_path / "wh"
    shutil.copytree(merged_lulesh, wh)
    args, suffix = OUTPUTS[command]
    out = tmp_path / "out" / "result"
    out.parent.mkdir()
    written = out.with_name(out.name + suffix)  # the file at the path (a stem names OUT_STEM.prv)

    def run() -> tuple[int, str]:
        code, _, err = run_cli(*(a.format(out=out) for a in args), "-w", wh)
        return code, err

    real = tmp_path / "elsewhere" / "kept.txt"  # a link is followed: the file it points to is written
    real.parent.mkdir()
    real.write_text("old\n")
    written.symlink_to(real)
    code, err = run()
    assert code == 0, err
    assert written.is_symlink() and real.read_text() not in ("", "old\n")
    written.unlink()

    os.mkfifo(written)  # nobody reads it: refused, still a FIFO
    code, err = run()
    errors = [line for line in err.splitlines() if line.startswith("error:")]  # merge also warns about its runs
    assert code == 2 and errors == [f"error: {args[-2]} {written}: cannot write it (is a FIFO that no process "
                                    "reads)"] and "Traceback" not in err, err
    with reading(written) as got:
        code, err = run()
    assert code == 0, err
    assert stat.S_ISFIFO(os.lstat(written).st_mode) and got.startswith(real.read_bytes()[:8])
    written.unlink()

    inside = next(wh.glob("runs/*/run.parquet"))  # a link into a warehouse: refused, the stored file unchanged
    kept = inside.read_bytes()
    written.symlink_to(inside)
    code, err = run()
    assert code == 2 and "lies inside the warehouse" in err, err
    assert inside.read_bytes() == kept


@pytest.mark.parametrize("command", [["sql", "SELECT 'pwned' AS run_id", "--output"], ["report", "--out"],
                                     ["export", "lulesh", "--output"]])
@pytest.mark.parametrize("bound", ["runs/r1", "runs"])
def test_an_output_into_a_stored_folder_reached_through_another_mount_is_refused(wh: Warehouse, tmp_path: Path,
                                                                                  run_cli, command, bound,
                                                                                  monkeypatch) -> None:
    """Attack 6 F11/F16: a bind mount (a container volume) of ``runs/<id>`` or ``runs/`` has no warehouse marker
    above it: ``sql -o MOUNT/run.parquet`` replaced the run, ``-o MOUNT/new/run.parquet`` added one. A mount point
    that is a stored folder, known by its own files, or holds nothing but stored folders (runs/, experiments/), is a
    warehouse's (bind-mounted where this test may mount, else a copy that the mount table is made to list)."""
    import subprocess

    from synthtrace.warehouse import layout

    run = wh.runs_dir / "r1"
    (run / "bursts").mkdir()
    (run / "run.parquet").write_bytes(b"stored")
    source, mnt = wh.root / bound, tmp_path / "mnt"
    mnt.mkdir()
    if subprocess.run(["mount", "--bind", str(source), str(mnt)], capture_output=True).returncode != 0:
        mnt.rmdir()
        shutil.copytree(source, mnt)
        monkeypatch.setattr(layout, "mount_points", lambda: frozenset({str(mnt.resolve())}))
    out = mnt / ("run.parquet" if bound == "runs/r1" else "r2/run.parquet")
    try:
        line = _refused(run_cli, *command, out, "-w", wh.root)
        assert "lies inside the warehouse" in line and (run / "run.parquet").read_bytes() == b"stored"
        assert sorted(p.name for p in run.iterdir()) == ["bursts", "run.parquet"]
        assert sorted(p.name for p in wh.runs_dir.iterdir()) == ["r1"]
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


def test_a_copy_of_a_stored_folder_beside_the_users_files_blocks_no_output(tmp_path: Path, run_cli) -> None:
    """Attack 12 F2: a folder holding a copy of one run folder (a backup, or the copy an E1 refusal says to move out
    of the warehouse) was taken for a warehouse's runs/, so every output anywhere below it was refused as "inside
    the warehouse". Only a real warehouse, a stored folder, or a folder of nothing but stored folders blocks one."""
    from testing.traces import PRIME

    wh = tmp_path / "wh"
    code, _, err = run_cli("ingest", PRIME, "-w", wh)
    assert code == 0, err
    home = tmp_path / "home"
    shutil.copytree(next((wh / "runs").iterdir()), home / "run-backup")
    (home / "projects" / "out").mkdir(parents=True)
    for out in (home / "projects" / "out" / "y.csv", home / "y.csv"):
        code, _, err = run_cli("sql", "SELECT 1 AS one", "-o", out, "-w", wh)
        assert code == 0 and out.read_text().splitlines() == ['"one"', "1"], (out, err)
    assert run_cli("sql", "SELECT 1 AS one", "-o", home / "run-backup" / "y.csv", "-w", wh)[0] == 0  # F3: the
    # copy is the user's, no mount of a warehouse's folder (test_an_output_into_a_stored_folder_reached_through...)


def test_a_folder_holding_only_a_copied_run_is_no_warehouse(tmp_path: Path, run_cli) -> None:
    """Attack 13 F3: a folder whose only subfolder is a run folder copied out of a warehouse was taken for a
    warehouse's runs/ (a folder of nothing but stored folders, as a bind mount of runs/ is), so every output written
    directly in it, or in the copy, was refused as "inside the warehouse". A copy is no mount point: the user's."""
    from testing.traces import PRIME

    wh = tmp_path / "wh"
    code, _, err = run_cli("ingest", PRIME, "-w", wh)
    assert code == 0, err
    backup = tmp_path / "backup"
    shutil.copytree(next((wh / "runs").iterdir()), backup / "run-copy")
    for out in (backup / "y.csv", backup / "run-copy" / "y.csv", backup / "new" / "y.csv"):
        out.parent.mkdir(exist_ok=True)
        code, _, err = run_cli("sql", "SELECT 1 AS one", "-o", out, "-w", wh)
        assert code == 0 and out.read_text().splitlines() == ['"one"', "1"], (out, err)
    code, _, err = run_cli("report", "--out", backup / "r.html", "-w", wh)
    assert code == 0 and (backup / "r.html").is_file(), err


def test_dev_stdout_on_a_pipe_is_written_into(tmp_path: Path) -> None:
    """`-o /dev/stdout | gzip` is how an export is streamed; on a pipe /dev/stdout resolves to
    /proc/PID/fd/pipe:[N], a name that exists only as a magic link's text, and every command failed creating a part
    file beside it (attack 7 A16)."""
    import subprocess
    import sys

    code = "import sys; from synthtrace.pipelines.cli import main; sys.exit(main(sys.argv[1:]))"
    p = subprocess.run([sys.executable, "-c", code, "plan", "--counters", "PAPI_L1_DCM", "-o", "/dev/stdout"],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False)
    assert p.returncode == 0, p.stderr
    assert "PAPI_L1_DCM" in p.stdout.splitlines()[1], p.stdout
    # the command's own status line is no part of the data it streams (attack 7 A19): it goes to stderr
    assert "written to" not in p.stdout and "1 run(s) written to /dev/stdout" in p.stderr, (p.stdout, p.stderr)
