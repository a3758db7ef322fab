"""A drop folder holding many files that are no traces (issue 23, attack 17 low finding: 500,000 of them made a
nothing-new night take 23 s and 418 MB): wall time and peak RSS of the night's discovery and of the whole
``synthtrace nightly`` command with nothing to do, each in a fresh process (``/usr/bin/time``).

    python benchmarks/bench_drop_walk.py [N ...]      # default 100000 500000; files of 0 bytes, in /tmp

The drop holds one folder of N files (``f<i>.txt``: one listing of N entries, the attack's case), two small
folders of traces' neighbours, and a FIFO named as a trace (what the night lists as no trace file).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.machine import machine_description  # noqa: E402

DISCOVER = """
import sys
from pathlib import Path
from synthtrace.warehouse import Warehouse
from synthtrace.warehouse.drop import discover
found = discover(Path(sys.argv[1]), Warehouse(sys.argv[2]).ensure(), settle_s=0)
print(len(found.new), len(found.skipped))
"""


def _drop(folder: Path, n: int) -> None:
    """``folder`` with ``n`` empty non-trace files in one sub-folder, and a FIFO named as a trace."""
    many = folder / "many"
    many.mkdir(parents=True)
    fd = os.open(many, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i in range(n):
            os.close(os.open(f"f{i}.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    finally:
        os.close(fd)
    for sub in ("a", "b"):
        (folder / sub).mkdir()
        (folder / sub / "notes.txt").write_text("x")
    os.mkfifo(folder / "a" / "x.prv")


def _timed(args: list[str]) -> tuple[float, float]:
    """(wall s, peak RSS MB) of ``args`` run to its end in a fresh process."""
    out = subprocess.run(["/usr/bin/time", "-f", "%e %M", *args], capture_output=True, text=True, cwd=ROOT)
    if out.returncode:
        raise SystemExit(out.stderr[-3000:])
    wall, kb = out.stderr.strip().splitlines()[-1].split()
    return float(wall), int(kb) / 1024


def main(sizes: list[int]) -> None:
    print(machine_description())
    print("| files | discover() s | discover() peak MB | `synthtrace nightly` (nothing to do) s | peak MB |")
    print("|---:|---:|---:|---:|---:|")
    for n in sizes:
        tmp = Path(tempfile.mkdtemp(prefix="bench_drop_walk."))
        try:
            drop, wh = tmp / "drop", tmp / "wh"
            _drop(drop, n)
            d_wall, d_mb = _timed([sys.executable, "-c", DISCOVER, str(drop), str(wh)])
            n_wall, n_mb = _timed([sys.executable, "-m", "synthtrace.pipelines.cli", "nightly", "--drop", str(drop),
                                   "-w", str(wh), "--settle", "0"])
            print(f"| {n:,} | {d_wall:.1f} | {d_mb:.0f} | {n_wall:.1f} | {n_mb:.0f} |", flush=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [100_000, 500_000])
