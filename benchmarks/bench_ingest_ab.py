"""CPU of one ingest with two versions of the code, interleaved (issue 27: a change of a few per cent on a loaded
machine).

Each round ingests TRACE once with every tree given (this checkout, and each ``--before`` tree: a checkout or a
``git archive`` export holding the ``synthtrace/`` folder), each in a fresh process, the order rotated every round so
that neither side always runs first. The kernels of each tree are loaded once, unmeasured, before the rounds (an
export has an empty Numba cache: its first run would compile them). Per tree: user + system CPU of the ingest (all
threads, from after the imports), its wall, system time, minor page faults and peak RSS; minimum and median over the
rounds, and the load average seen.

    python benchmarks/bench_ingest_ab.py TRACE --before /tmp/base [--before ...] [--rounds 8]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SMALL = ROOT.parent / "shared" / "traces" / "paraver" / "prime_v0.prv"

CHILD = r'''
import json, os, resource, shutil, sys, tempfile, time, warnings
warnings.simplefilter("ignore")
from pathlib import Path
import synthtrace.tracelib as layer
if not Path(layer.__file__).resolve().is_relative_to(Path.cwd().resolve()):
    sys.exit(f"imported {layer.__file__}, not the code of {Path.cwd()}")
from synthtrace.warehouse import Warehouse
from synthtrace.warehouse.ingest import ingest_trace
r0, w0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
tmp = Path(tempfile.mkdtemp(prefix="bench-ingest-ab-"))
try:
    ingest_trace(Warehouse(tmp / "wh"), sys.argv[1])
    w1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
finally:
    shutil.rmtree(tmp, ignore_errors=True)
print(json.dumps({"wall": w1 - w0, "cpu": r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime,
                  "sys": r1.ru_stime - r0.ru_stime, "faults": r1.ru_minflt - r0.ru_minflt,
                  "rss_mb": r1.ru_maxrss / 1024, "load": os.getloadavg()[0]}))
'''


def _run(tree: Path, trace: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(trace)], cwd=tree, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{tree}: {out.stderr.strip().splitlines()[-1] if out.stderr.strip() else out.returncode}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--before", type=Path, action="append", required=True, help="another tree to compare")
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args()
    trees = [ROOT, *args.before]
    for tree in trees:  # kernels compiled or loaded into each tree's cache, unmeasured
        _run(tree, SMALL if SMALL.is_file() else args.trace)
    runs: dict[Path, list[dict]] = {t: [] for t in trees}
    for k in range(args.rounds):
        for tree in trees[k % len(trees):] + trees[: k % len(trees)]:
            runs[tree].append(_run(tree, args.trace))
        print(f"round {k + 1}: " + ", ".join(f"{t.name} {runs[t][-1]['cpu']:.3f} s" for t in trees), file=sys.stderr)
    print(f"{args.trace.name}, {args.rounds} rounds; CPU and wall from after the imports")
    print("| tree | CPU min | CPU median | wall min | wall median | system (median) | minor faults (median) | "
          "peak RSS (median) | load |")
    print("|---|---|---|---|---|---|---|---|---|")
    for tree, rs in runs.items():
        def med(key: str, rs: list[dict] = rs) -> float:
            return statistics.median(r[key] for r in rs)
        loads = [r["load"] for r in rs]
        print(f"| {tree} | {min(r['cpu'] for r in rs):.3f} s | {med('cpu'):.3f} s | {min(r['wall'] for r in rs):.2f} s "
              f"| {med('wall'):.2f} s | {med('sys'):.3f} s | {med('faults'):,.0f} | {med('rss_mb'):.0f} MB "
              f"| {min(loads):.1f}-{max(loads):.1f} |")


if __name__ == "__main__":
    main()
