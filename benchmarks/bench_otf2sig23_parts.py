"""Ingest of an OTF2 archive of many locations (attack 22 F7): wall time, peak RSS, part files stored, and how long a
Ctrl-C sent ``--at`` s into it takes to end it, for each interpreter given (one per checkout).

    python benchmarks/bench_otf2sig23_parts.py [--archive A/traces.otf2 | --ranks 3000] \\
        --python before=/work/venv/bin/python@/tmp/old-checkout --python after=.venv/bin/python [--at 40]

Without ``--archive`` an archive of ``--ranks`` single-threaded ranks is written (testing/otf2_variants.py's
``many_ranks`` with ``barrier``). Prints one line per interpreter. Each child runs in the folder after ``@`` (a
checkout, e.g. ``git archive REV | tar -x -C DIR``), else in a temporary one: ``python -c`` puts its working folder
first on ``sys.path``, so the ``synthtrace`` package there is the one imported.
"""
from __future__ import annotations

import argparse
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLI = "import sys; from synthtrace.pipelines.cli import main; sys.exit(main(sys.argv[1:]))"


def _ingest(python: str, archive: Path, wh: Path, cwd: Path) -> tuple[float, int, int]:
    """Wall s, peak RSS (KB) and part files stored of one ingest of ``archive`` into the fresh warehouse ``wh``."""
    t = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-v", python, "-c", CLI, "ingest", str(archive), "-w", str(wh)],
                       capture_output=True, text=True, check=True, cwd=cwd)
    wall = time.perf_counter() - t
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1))
    return wall, rss, sum(1 for _ in (wh / "runs").glob("*/*/part-*.parquet"))


def _interrupted(python: str, archive: Path, wh: Path, cwd: Path, after_s: float) -> tuple[float, int]:
    """Seconds from a SIGINT sent ``after_s`` into an ingest to its end, and its exit code (0: it had ended)."""
    p = subprocess.Popen([python, "-c", CLI, "ingest", str(archive), "-w", str(wh)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, cwd=cwd)
    time.sleep(after_s)
    t = time.perf_counter()
    p.send_signal(signal.SIGINT)
    code = p.wait()
    return time.perf_counter() - t, code


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--archive", type=Path)
    ap.add_argument("--ranks", type=int, default=3000)
    ap.add_argument("--python", action="append", required=True, help="LABEL=INTERPRETER[@CHECKOUT]")
    ap.add_argument("--at", type=float, default=40.0, help="the Ctrl-C, s after the interrupted ingest starts")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-otf2sig23-"))
    try:
        archive = args.archive
        if archive is None:
            sys.path.insert(0, str(ROOT))
            from testing.otf2_variants import many_ranks

            archive = many_ranks(work / "archive", args.ranks, barrier=True)
        for label, python in (spec.split("=", 1) for spec in args.python):
            python, _, checkout = python.partition("@")
            cwd = Path(checkout) if checkout else work
            wall, rss, files = _ingest(python, archive, work / f"{label}-wh", cwd)
            end, code = _interrupted(python, archive, work / f"{label}-int", cwd, args.at)
            print(f"{label}: ingest {wall:.1f} s, max RSS {rss / 1024:.0f} MB, {files} part files; Ctrl-C at "
                  f"{args.at:.0f} s ended it in {end:.2f} s (exit {code})", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
