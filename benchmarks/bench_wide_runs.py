"""The commands that read a stored run whose bursts sample many counter types (issue 23, attack 18 F2: one of
4,096 types per burst, each a mostly-NULL column; 40,000 bursts, 3.4 MB of trace, passed 3 GB to classify or
export): peak RSS and wall time of ``archetypes``, ``report`` (analysed, and not analysed: it analyses without
discovery), ``export`` in each format (to /dev/null) and ``pop``, each in a fresh process (``/usr/bin/time``).

    python benchmarks/bench_wide_runs.py [N ...]                 # default 10000 40000; bursts, in /tmp
    python benchmarks/bench_wide_runs.py 10000 --tree /other/checkout   # the same with another tree's code

The trace: one thread, bursts of 5 ns each with ONE sample of counter type 42000000 + i % 4096, no .pcf.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.machine import machine_description  # noqa: E402

TYPES = 4096


def wide_trace(path: Path, n: int, types: int = TYPES) -> Path:
    """A one-thread Paraver trace of ``n`` bursts, burst i sampling counter type 42000000 + i % ``types``."""
    with path.open("wb") as f:
        f.write(b"#Paraver (01/01/26 at 00:00):%d_ns:1(1):1:1(1:1)\n" % (10 * n + 10))
        for i in range(n):
            f.write(b"1:1:1:1:1:%d:%d:1\n2:1:1:1:1:%d:%d:%d\n1:1:1:1:1:%d:%d:0\n"
                    % (10 * i, 10 * i + 5, 10 * i + 2, 42000000 + i % types, i + 1, 10 * i + 5, 10 * i + 10))
    return path


def measure(tree: Path, *args: str) -> tuple[int, float, float]:
    """(exit code, peak RSS in MB, wall s) of ``synthtrace ARGS`` run with ``tree``'s code, stdout discarded."""
    code = f"import sys; sys.path.insert(0, {str(tree.parent)!r}); from synthtrace.pipelines.cli import main; " \
           "sys.exit(main(sys.argv[1:]))"
    with tempfile.NamedTemporaryFile("r") as t:
        rc = subprocess.run(["/usr/bin/time", "-f", "%M %e", "-o", t.name, sys.executable, "-c", code, *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
        kb, wall = t.read().split()[-2:]
    return rc, int(kb) / 1024, float(wall)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sizes", nargs="*", type=int, default=[10_000, 40_000])
    ap.add_argument("--tree", type=Path, default=ROOT, help="checkout whose code runs (default: this one)")
    opts = ap.parse_args()
    tree = opts.tree.resolve()
    if tree.name != "synthtrace":  # the package is the checkout itself: import it through a link named so
        link = Path(tempfile.mkdtemp(prefix="wide-tree-")) / "synthtrace"
        os.symlink(tree, link)
        tree = link
    print(machine_description())
    print("| bursts | command | rc | peak RSS (MB) | wall (s) |\n|---|---|---|---|---|")
    for n in opts.sizes:
        work = Path(tempfile.mkdtemp(prefix=f"wide{n}-"))
        try:
            (work / "w").mkdir()
            wide_trace(work / "w" / "w.prv", n)
            wh, plain = str(work / "wh"), str(work / "plain")
            for w in (wh, plain):
                measure(tree, "ingest", str(work / "w"), "-w", w)
            runs = [("report (not analysed)", ("report", "-w", plain, "-o", str(work / "r0.html"))),
                    ("archetypes", ("archetypes", "w", "-w", wh)),
                    ("report", ("report", "-w", wh, "-o", str(work / "r.html"))),
                    *[(f"export {f}", ("export", "w", "-w", wh, "-f", f, "-o", "-"))
                      for f in ("csv", "perfetto", "pipit")],
                    ("pop", ("pop", "-w", wh))]
            for what, args in runs:
                rc, mb, wall = measure(tree, *args)
                print(f"| {n:,} | {what} | {rc} | {mb:,.0f} | {wall:.0f} |", flush=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
