"""Peak memory of ingesting traces of many small locations (attack25 A1, issue 23's 1.5 GB): an OTF2 archive of
N ranks of one MPI_Barrier each, and a Paraver trace of TASKS x THREADS threads of a few records each.

Each ingest runs in a fresh process under ``/usr/bin/time -v`` (max RSS), with this checkout's code and, with
``--before TREE`` (a ``git archive`` export of another commit), with that tree's: the tree is put first on
``PYTHONPATH`` through a folder of links named ``synthtrace`` (as the editable install maps the repository).

    python benchmarks/bench_otfmem26_many_locations.py otf2 1000 8000 20000 --before /tmp/base
    python benchmarks/bench_otfmem26_many_locations.py paraver 4096x4 --before /tmp/base

OTF2 archives are written with the ``otf2`` wheel (~1 ms a rank) under ``--work`` and kept there (writing 20,000
ranks takes minutes); each rank: ProgramBegin, Enter main, Enter/Leave MPI_Barrier, Leave main, ProgramEnd, with a
PAPI_TOT_INS reading at every Enter and Leave (attack25's ``many_locations``).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("models", "pipelines", "simulator", "tracelib", "warehouse")
sys.path.append(str(REPO))
from benchmarks.dense_traces import PCF  # noqa: E402
from benchmarks.machine import machine_description  # noqa: E402


def write_otf2(root: Path, ranks: int) -> Path:
    """An archive of ``ranks`` ranks of one MPI_Barrier each at ``root``; returns its anchor."""
    from testing.otf2_variants import _Archive

    a = _Archive(root, ranks=ranks, threads=1)
    a.mpi("MPI_Barrier")
    for rank in range(ranks):
        e = a.events(rank)
        e.program_begin(0, "many", [])
        e.enter(0, "main")
        e.enter(100, "MPI_Barrier", ins=5)
        e.leave(200, "MPI_Barrier", ins=5)
        e.leave(300, "main")
        e.program_end(300, 0)
    return a.close()


def write_paraver(prv: Path, tasks: int, threads: int) -> Path:
    """A trace of ``tasks`` tasks of ``threads`` threads (one node): every thread runs an OpenMP function from 100 to
    900 ns, the master then an MPI_Allreduce from 1,000 to 2,000 ns (4 records a thread, 2 more on a master)."""
    lines: list[tuple[int, str]] = []
    for t in range(1, tasks + 1):
        for h in range(1, threads + 1):
            cpu = (t - 1) * threads + h
            at = f"{cpu}:1:{t}:{h}"
            lines += [(0, f"1:{at}:0:100:0\n"), (100, f"1:{at}:100:900:1\n"),
                      (100, f"2:{at}:100:60000018:1:42000050:{t * 10}\n"),
                      (900, f"2:{at}:900:60000018:0:42000050:{t * 10 + 800}\n")]
            if h == 1:
                lines += [(1000, f"1:{at}:1000:2000:10\n"),
                          (1000, f"2:{at}:1000:50000002:10:50100001:8:50100002:8:50100004:1:42000050:100\n"),
                          (2000, f"2:{at}:2000:50000002:0:42000050:50\n")]
    lines.sort(key=lambda x: x[0])
    apps = ",".join(f"{threads}:1" for _ in range(tasks))
    with open(prv, "w") as out:
        out.write(f"#Paraver (01/01/2026 at 00:00):3000_ns:1({tasks * threads}):1:{tasks}({apps}),0\n")
        out.writelines(line for _, line in lines)
    prv.with_suffix(".pcf").write_text(PCF)
    return prv


def linked_tree(tree: Path, work: Path) -> Path:
    """A folder holding ``synthtrace`` made of ``tree``'s packages (for PYTHONPATH)."""
    top = work / "before-path"
    shutil.rmtree(top, ignore_errors=True)
    (top / "synthtrace").mkdir(parents=True)
    shutil.copy(tree / "synthtrace" / "__init__.py", top / "synthtrace" / "__init__.py")
    for name in PACKAGES:
        (top / "synthtrace" / name).symlink_to(tree / name)
    return top


def ingest_peak(trace: Path, work: Path, path: Path | None) -> tuple[int, str, int]:
    """(max RSS in kB, wall time, exit status) of ``synthtrace ingest trace`` into a fresh warehouse."""
    wh = work / "warehouse"
    shutil.rmtree(wh, ignore_errors=True)
    env = dict(os.environ)
    if path is not None:
        env["PYTHONPATH"] = str(path)
    cli = Path(sys.executable).with_name("synthtrace")
    done = subprocess.run(["/usr/bin/time", "-v", str(cli), "ingest", str(trace), "--experiment", "many", "--app",
                           "many", "-w", str(wh)], env=env, cwd=work, capture_output=True, text=True)
    shutil.rmtree(wh, ignore_errors=True)
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr).group(1))
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", done.stderr).group(1)
    return rss, wall, done.returncode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("format", choices=("otf2", "paraver"))
    ap.add_argument("sizes", nargs="+", help="otf2: ranks; paraver: TASKSxTHREADS")
    ap.add_argument("--before", type=Path, help="a tree of another commit (git archive) to measure as well")
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench_otfmem26"))
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    print(machine_description(), flush=True)
    codes = [("after", None)] + ([("before", linked_tree(a.before.resolve(), a.work))] if a.before else [])
    for size in a.sizes:
        if a.format == "otf2":
            trace = a.work / f"otf2-{size}" / "traces.otf2"
            if not trace.exists():
                write_otf2(trace.parent, int(size))
        else:
            tasks, threads = (int(x) for x in size.split("x"))
            trace = write_paraver(a.work / f"many-{size}.prv", tasks, threads)
        for name, path in codes:
            rss, wall, rc = ingest_peak(trace, a.work, path)
            print(f"{a.format} {size}: {name}: {rss / 1024:,.0f} MB max RSS, {wall} wall, exit {rc}", flush=True)


if __name__ == "__main__":
    main()
