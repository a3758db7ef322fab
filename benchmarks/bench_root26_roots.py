"""Cost of deriving collective roots from Extrae's flags (root26): writes a trace of ``--tasks`` tasks each calling
``--calls`` collectives (Bcast and Reduce rooted at a moving rank, Allreduce), then reads it and prints the read's
seconds and the roots found. Run the read under ``/usr/bin/time -v`` with each tree's python for max RSS:

    python benchmarks/bench_root26_roots.py write --tasks 256 --calls 2000 --out /tmp/r26/big
    /usr/bin/time -v python benchmarks/bench_root26_roots.py read --out /tmp/r26/big
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import polars as pl

_CALLS = np.array(["MPI_Bcast", "MPI_Reduce", "MPI_Allreduce"])


def write(tasks: int, calls: int, out: Path) -> Path:
    """The trace's tables, built column-wise, written with the project's writer."""
    from synthtrace.tracelib.formats.paraver.writer import TraceMeta, write_paraver

    task = np.repeat(np.arange(1, tasks + 1), calls)
    seq = np.tile(np.arange(calls), tasks)
    start = 1_000 * (seq + 1) + task
    name = _CALLS[seq % 3]
    root = np.where(name == "MPI_Allreduce", -1, (seq * 7) % tasks)
    c = pl.DataFrame({"appl": 1, "task": task, "thread": 1, "call_seq": seq, "cpu": task, "mpi_call": name,
                      "mpi_kind": "collective", "start_ns": start, "end_ns": start + 100, "duration_ns": 100,
                      "bytes_sent": 8, "bytes_recv": 8, "n_messages": 0, "comm": 1,
                      "root": pl.Series(root).replace(-1, None)})
    b = pl.DataFrame({"appl": 1, "task": task, "thread": 1, "burst_seq": seq, "cpu": task,
                      "start_ns": start - 800, "end_ns": start, "mpi_call": name, "PAPI_TOT_INS": 800})
    out.parent.mkdir(parents=True, exist_ok=True)
    return write_paraver(out, b, c, TraceMeta.simple(tasks), counters=["PAPI_TOT_INS"])


def read(out: Path) -> None:
    from synthtrace.tracelib.formats.paraver.reader import ParaverTrace

    t = time.perf_counter()
    _, calls, summary = ParaverTrace(out.with_suffix(".prv")).read_tables("x")
    secs = time.perf_counter() - t
    roots = calls.filter(pl.col("root").is_not_null()).height
    print(f"read {calls.height} calls in {secs:.2f} s; {roots} calls with a root; {len(summary.warnings)} warnings")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["write", "read"])
    ap.add_argument("--tasks", type=int, default=256)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    if a.what == "write":
        print(write(a.tasks, a.calls, a.out))
    else:
        read(a.out)
