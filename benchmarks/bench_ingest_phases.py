"""Where the wall and CPU time of one ingest go, phase by phase, in one fresh process (issue 27: what bounds MB/s).

The phases are marked from outside the code (its functions wrapped, nothing else changed), in the order an ingest
runs them: the imports, opening the trace (header, .pcf/.row; the Numba warm-up thread starts), the first chunk
tokenized (the files hashed meanwhile, and the target context and tokenizer kernel loaded from Numba's cache: the
start-up that nothing else can overlap), the first chunk assembled (the assembler's kernels loaded), the stream
(tokenizer, assembler and Parquet writer threads), the messages placed in their calls, ``mpi_calls.parquet``
written (messages tables beside it), the part writer drained (its first close), the run's last small files
and checksums, the flush of every file to disk, and the rest of the commit. Per phase: wall, process CPU (all
threads) and their ratio, the cores the phase kept busy. On two idle cores a phase takes at least max(its serial
part, CPU / 2).

    python benchmarks/bench_ingest_phases.py TRACE [--rounds N]

Prints one table per round (the process is timed from its start, interpreter included).
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
marks = []

def mark(name):
    if threading.current_thread().name != "synthtrace-numba-warm-up" and not any(m[0] == name for m in marks):
        r = resource.getrusage(resource.RUSAGE_SELF)
        marks.append((name, time.perf_counter(), r.ru_utime + r.ru_stime))

with open("/proc/self/stat") as f:
    ticks = int(f.read().rsplit(")", 1)[1].split()[19])
with open("/proc/uptime") as f:
    t0 = time.perf_counter() - (float(f.read().split()[0]) - ticks / os.sysconf("SC_CLK_TCK"))
marks.append(("process start", t0, 0.0))
import polars as pl
from synthtrace.warehouse import Warehouse
from synthtrace.warehouse import ingest
from synthtrace.tracelib.formats import source
from synthtrace.tracelib.formats.bursts import BurstAssembler
from synthtrace.tracelib.formats.paraver import reader, records
mark("imports")

def after(cls, name, label):
    wrapped = getattr(cls, name)
    def call(self, *a, **k):
        out = wrapped(self, *a, **k)
        mark(label)
        return out
    setattr(cls, name, call)

def before(cls, name, label):
    wrapped = getattr(cls, name)
    def call(self, *a, **k):
        mark(label)
        return wrapped(self, *a, **k)
    setattr(cls, name, call)

after(reader.ParaverTrace, "__init__", "trace opened (header, .pcf, .row)")
after(records.RecordParser, "parse", "files hashed, first chunk tokenized (target context, tokenizer loaded)")
after(BurstAssembler, "feed", "first chunk assembled (assembler kernels loaded)")
before(BurstAssembler, "finish", "stream (tokenize, assemble, write parts)")
summary = source.TableStream.summary.fget
source.TableStream.summary = property(lambda self: (mark("messages placed in their calls"), summary(self))[1])
sink = pl.LazyFrame.sink_parquet
def sink_marked(self, path, *a, **k):
    out = sink(self, path, *a, **k)
    if str(path).endswith("mpi_calls.parquet"):
        mark("mpi_calls.parquet written (messages tables beside it)")
    return out
pl.LazyFrame.sink_parquet = sink_marked
after(ingest.PartWriter, "close", "part writer drained (its first close)")
from synthtrace.warehouse import layout
fsync_tree = layout._fsync_tree
def fsync_marked(root):
    mark("run's last files and checksums written")
    fsync_tree(root)
    mark("run's files flushed to disk (fsync, one file at a time)")
layout._fsync_tree = fsync_marked
wh = tempfile.mkdtemp(prefix="bench-phases-")
try:
    ingest.ingest_trace(Warehouse(wh), sys.argv[1])
finally:
    mark("commit")
    shutil.rmtree(wh, ignore_errors=True)
print(json.dumps({"marks": [(n, t - t0, c) for n, t, c in marks], "load": os.getloadavg()[0]}))
'''


def phases(trace: Path) -> dict:
    """The marks of one ingest of ``trace`` in a fresh process: (phase, seconds since process start, CPU seconds)."""
    out = subprocess.run([sys.executable, "-c", CHILD, str(trace)], capture_output=True, text=True, check=True,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return json.loads(out.stdout.strip().splitlines()[-1])


def table(run: dict, size_mb: float) -> str:
    lines = ["| phase | ends at | wall | CPU | cores busy |", "|---|---|---|---|---|"]
    marks = run["marks"]
    for (_, t0, c0), (name, t1, c1) in zip(marks, marks[1:]):
        wall, cpu = t1 - t0, c1 - c0
        lines.append(f"| {name} | {t1:.3f} s | {wall:.3f} s | {cpu:.3f} s | {cpu / wall if wall else 0:.2f} |")
    total = marks[-1]
    lines.append(f"| whole process ({size_mb:.0f} MB, load {run['load']:.1f}) | | {total[1]:.3f} s "
                 f"({size_mb / total[1]:.0f} MB/s) | {total[2]:.3f} s | {total[2] / total[1]:.2f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", type=Path)
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    size = args.trace.stat().st_size / 1e6
    for _ in range(args.rounds):
        print(table(phases(args.trace), size), "\n")


if __name__ == "__main__":
    main()
