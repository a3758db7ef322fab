"""Ingest throughput and peak memory (issue 2), against a straightforward line-by-line Python parser.

Inputs are a real trace (LULESH, Extrae + PAPI + uncore) tiled in time to the requested sizes, so the record
mix stays real. Each measurement runs in a fresh subprocess, so its peak RSS is its own.

    python benchmarks/bench_ingest.py [--sizes-mb 250 500 1000] [--memory-mb 2000] [--baseline-mb 100]

Writes benchmarks/results/ingest.md.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.machine import machine_description  # noqa: E402

SOURCE = ROOT.parent / "shared" / "traces" / "paraver" / "lulesh_4+4_with_uncores_sockets1+2.chop_5it.prv"

CHILD_INGEST = """
import json, resource, sys, time
from warehouse import Warehouse
from warehouse.ingest import ingest_trace
t = time.perf_counter()
res = ingest_trace(Warehouse(sys.argv[2]), sys.argv[1])
dt = time.perf_counter() - t
print(json.dumps({"seconds": dt, "bursts": res.n_bursts, "calls": res.n_mpi_calls,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

# The baseline: what one writes first — read each line, split it, keep Running intervals, sum counter values
# into the burst that ends at their time, pair MPI entries with exits. Pure Python, one pass.
CHILD_BASELINE = """
import json, resource, sys, time
t = time.perf_counter()
bursts, calls = {}, {}
open_burst, open_call, pending = {}, {}, {}
with open(sys.argv[1]) as fh:
    fh.readline()
    for line in fh:
        if line[0] in "#c":
            continue
        f = line.rstrip("\\n").split(":")
        key = (int(f[2]), int(f[3]), int(f[4]))
        if f[0] == "1":
            if f[7] == "1":
                open_burst[key] = [int(f[5]), int(f[6]), {}]
                bursts.setdefault(key, []).append(open_burst[key])
        elif f[0] == "2":
            t_ev = int(f[5])
            b = open_burst.get(key)
            for i in range(6, len(f), 2):
                typ, val = int(f[i]), int(f[i + 1])
                if 42000000 <= typ < 48000000 and b is not None and b[0] < t_ev <= b[1]:
                    b[2][typ] = b[2].get(typ, 0) + val
                elif 50000001 <= typ <= 50000005:
                    if val:
                        open_call[key] = [typ, val, t_ev]
                    elif key in open_call:
                        c = open_call.pop(key)
                        calls.setdefault(key, []).append((c[1], c[2], t_ev))
dt = time.perf_counter() - t
print(json.dumps({"seconds": dt, "bursts": sum(map(len, bursts.values())), "calls": sum(map(len, calls.values())),
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _run(code: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _tiled(tmp: Path, mb: int) -> Path:
    from tracelib.paraver.tile import tile_trace
    copies = max(1, round(mb * 1e6 / SOURCE.stat().st_size))
    return tile_trace(SOURCE, tmp / f"lulesh.x{copies}.prv", copies)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes-mb", type=int, nargs="+", default=[250, 500, 1000])
    ap.add_argument("--memory-mb", type=int, default=2000, help="size of the trace for the peak-memory run (0: skip)")
    ap.add_argument("--baseline-mb", type=int, default=100)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "ingest.md")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp:
        tmp = Path(tmp)
        base_trace = _tiled(tmp, args.baseline_mb)
        mb = base_trace.stat().st_size / 1e6
        ours = _run(CHILD_INGEST, str(base_trace), str(tmp / "wh-base"))
        base = _run(CHILD_BASELINE, str(base_trace))
        assert ours["bursts"] == base["bursts"], (ours, base)
        speedup = base["seconds"] / ours["seconds"]
        print(f"baseline {mb:.0f} MB: ours {mb / ours['seconds']:.1f} MB/s, line-by-line {mb / base['seconds']:.1f} MB/s, x{speedup:.1f}")
        base_trace.unlink()
        for size in sorted(set(args.sizes_mb + ([args.memory_mb] if args.memory_mb else []))):
            trace = _tiled(tmp, size)
            mb = trace.stat().st_size / 1e6
            r = _run(CHILD_INGEST, str(trace), str(tmp / f"wh-{size}"))
            rows.append((mb, r))
            print(f"{mb:.0f} MB: {r['seconds']:.1f} s, {mb / r['seconds']:.1f} MB/s, peak RSS {r['peak_rss_mb']:.0f} MB")
            trace.unlink()
    lines = [
        "## Ingest (issue 2)", "",
        f"Machine: {machine_description()}. Command: `python benchmarks/bench_ingest.py`. Input: the real LULESH trace",
        "(Extrae, 8 ranks + 12 uncore readers) tiled in time; end-to-end = hash, parse, bursts and MPI calls,",
        "Parquet commit into a fresh warehouse, each run in its own process.", "",
        "| trace size | time | throughput | peak RSS | bursts | MPI calls |", "|---|---|---|---|---|---|",
        *[f"| {mb:.0f} MB | {r['seconds']:.1f} s | {mb / r['seconds']:.1f} MB/s | {r['peak_rss_mb']:.0f} MB | {r['bursts']:,} | {r['calls']:,} |"
          for mb, r in rows],
        "", f"Against a line-by-line pure-Python parser on the same {args.baseline_mb} MB trace, same run:",
        "", "| parser | throughput | ratio |", "|---|---|---|",
        f"| synthtrace (vectorised, end-to-end incl. Parquet) | {args.baseline_mb / ours['seconds']:.1f} MB/s | x{speedup:.1f} |",
        f"| line-by-line Python (parse only, no output) | {args.baseline_mb / base['seconds']:.1f} MB/s | x1.0 |", "",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
