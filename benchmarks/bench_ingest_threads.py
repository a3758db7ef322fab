"""Which thread of one ingest spends the CPU, and when (issue 27: can both cores be busy for the whole ingest?).

One ``ingest_trace`` in a fresh process, with a sampler thread reading every thread's user + system CPU from
``/proc/self/task/*/stat`` every ``--every`` seconds (the kernel counts in ticks of 10 ms). Python threads are
named by their ``threading`` name, the others by the kernel's (Polars' pool, Numba's): per thread the CPU of the
whole ingest, then a timeline of the CPU each thread group took per slice of wall time.

What it tells on a loaded machine, where the wall time is stretched: the CPU of the thread that must run every
step in order (the caller's: assembling, Polars frames, the commit) bounds the wall time on idle cores from below
whatever the number of cores; the CPU of all threads over 2 bounds it too.

    python benchmarks/bench_ingest_threads.py TRACE [--rounds N] [--every S] [--slice S]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r'''
import json, os, resource, shutil, sys, tempfile, threading, time, warnings
warnings.simplefilter("ignore")
every = float(sys.argv[2])
tick = os.sysconf("SC_CLK_TCK")
samples = []  # (wall s, {tid: cpu s})
stop = threading.Event()
comm = {}

def read_tasks():
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                s = f.read()
        except OSError:
            continue
        head, rest = s.rsplit(")", 1)
        f = rest.split()
        out[int(tid)] = (int(f[11]) + int(f[12])) / tick
        comm.setdefault(int(tid), head.split("(", 1)[1])
    return out

names = {}
def sample():
    me = threading.get_native_id()
    while not stop.is_set():
        for t in threading.enumerate():
            if t.native_id is not None and t.native_id != me:
                names.setdefault(t.native_id, t.name)
        samples.append((time.perf_counter(), read_tasks()))
        stop.wait(every)

t_start = time.perf_counter()
sampler = threading.Thread(target=sample, name="sampler", daemon=True)
sampler.start()
import polars as pl
from synthtrace.warehouse import Warehouse
from synthtrace.warehouse import ingest
t_imports = time.perf_counter()
wh = tempfile.mkdtemp(prefix="bench-threads-")
try:
    ingest.ingest_trace(Warehouse(wh), sys.argv[1])
finally:
    t_end = time.perf_counter()
    stop.set()
    sampler.join()
    samples.append((time.perf_counter(), read_tasks()))
    shutil.rmtree(wh, ignore_errors=True)
sampler_tid = sampler.native_id
r = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({
    "samples": [(t - t_start, {str(k): v for k, v in d.items() if k != sampler_tid}) for t, d in samples],
    "names": {str(k): names.get(k, "main" if k == os.getpid() else comm.get(k, "?")) for k in comm},
    "imports_end": t_imports - t_start, "end": t_end - t_start, "cpu": r.ru_utime + r.ru_stime,
    "load": os.getloadavg()[0]}))
'''


def group(name: str) -> str:
    """The group a thread's name belongs to (Polars' and Numba's pools have one name per worker)."""
    for prefix, g in (("polars", "polars pool"), ("numba", "numba"),
                      ("synthtrace-read-ahead", "read-ahead (tokenizer)"),
                      ("synthtrace-numba-warm-up", "warm-up (kernels loaded)"), ("main", "main (caller)"),
                      ("MainThread", "main (caller)")):
        if name.startswith(prefix):
            return g
    return name


def run_once(trace: Path, every: float) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(trace), str(every)], capture_output=True, text=True,
                         check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return json.loads(out.stdout.strip().splitlines()[-1])


def report(run: dict, size_mb: float, slice_s: float) -> str:
    samples, names = run["samples"], run["names"]
    last: dict[str, float] = {}  # each thread's CPU at its last sample (a thread that ended is in earlier ones)
    for _, cur in samples:
        last.update(cur)
    at_imports: dict[str, float] = {}  # each thread's CPU at the last sample before the imports ended
    for t, cur in samples:
        if t <= run["imports_end"]:
            at_imports.update(cur)
    per_group: dict[str, float] = {}
    after_imports: dict[str, float] = {}
    for tid, cpu in last.items():
        g = group(names.get(tid, "?"))
        per_group[g] = per_group.get(g, 0.0) + cpu
        after_imports[g] = after_imports.get(g, 0.0) + cpu - at_imports.get(tid, 0.0)
    lines = [f"{size_mb:.0f} MB, load {run['load']:.1f}: wall {run['end']:.2f} s (imports end at "
             f"{run['imports_end']:.2f} s), process CPU {run['cpu']:.2f} s (sampler excluded below)", "",
             "| thread group | CPU | share | CPU after the imports |", "|---|---|---|---|"]
    total = sum(per_group.values())
    for g, c in sorted(per_group.items(), key=lambda x: -x[1]):
        lines.append(f"| {g} | {c:.3f} s | {100 * c / total:.0f} % | {after_imports[g]:.3f} s |")
    groups = sorted(per_group, key=lambda g: -per_group[g])
    lines += ["", "| wall from | " + " | ".join(groups) + " | all (cores busy) |",
              "|---|" + "---|" * (len(groups) + 1)]
    prev_t, prev, seen = 0.0, {}, {}
    edge = slice_s
    for k, (t, cur) in enumerate(samples):
        seen.update(cur)
        if t < edge and k < len(samples) - 1:
            continue
        row = {g: 0.0 for g in groups}
        for tid, cpu in seen.items():
            row[group(names.get(tid, "?"))] += cpu - prev.get(tid, 0.0)
        cur = dict(seen)
        span = t - prev_t
        lines.append(f"| {prev_t:.2f}-{t:.2f} s | " + " | ".join(f"{row[g]:.2f}" for g in groups)
                     + f" | {sum(row.values()):.2f} ({sum(row.values()) / span if span else 0:.2f}) |")
        prev_t, prev = t, cur
        edge = t + slice_s
    lines.append("")
    for span in (slice_s, run["end"]):
        cpu, bound, serial = floor(samples, run["imports_end"], span)
        lines.append(f"After the imports, in slices of {span:.2f} s: CPU {cpu:.2f} s; two idle cores need at least "
                     f"{bound:.2f} s ({size_mb / bound:.0f} MB/s), {serial:.2f} s of it where one thread is the bound")
    return "\n".join(lines)


def floor(samples: list, since: float, span: float) -> tuple[float, float, float]:
    """(CPU, bound, serial) of the samples from ``since`` on, in slices of ``span`` s of wall: bound is the sum over
    slices of max(the busiest thread's CPU, all threads' CPU / 2), the least wall time two idle cores would need if
    each slice's work had to be done before the next one's; serial is the part of it where one thread's CPU
    exceeds half of all. On a loaded machine the scheduler runs a process's threads by turns, so short slices
    overstate the serial part; the slice of the whole ingest gives max(busiest thread, all / 2)."""
    cpu = bound = serial = 0.0
    at: dict[str, float] = {}  # each thread's CPU at the last slice's end
    seen: dict[str, float] = {}  # at its last sample (a thread that ended keeps its last)
    edge = since
    for k, (t, cur) in enumerate(samples):
        seen.update(cur)
        if t < since:
            at = dict(seen)
            continue
        if t < edge and k < len(samples) - 1:
            continue
        d = [c - at.get(tid, 0.0) for tid, c in seen.items()]
        at = dict(seen)
        edge = t + span
        total, one = sum(d), max(d, default=0.0)
        cpu += total
        bound += max(one, total / 2)
        serial += one if one > total / 2 else 0.0
    return cpu, bound, serial


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", type=Path)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--every", type=float, default=0.01, help="sampling period, s")
    ap.add_argument("--slice", type=float, default=0.5, help="timeline slice, s of wall")
    args = ap.parse_args()
    size = args.trace.stat().st_size / 1e6
    for _ in range(args.rounds):
        print(report(run_once(args.trace, args.every), size, args.slice), "\n")


if __name__ == "__main__":
    main()
