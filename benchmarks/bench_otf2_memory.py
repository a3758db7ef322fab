"""Peak memory of an OTF2 ingest's end (issue 23): what grows with an archive once its events are read.

Writing a 2 GB OTF2 archive with the ``otf2`` writer takes ~35 min of CPU (``bench_otf2.write_trace``: 20 M events,
319 MB), so this measures the part of an ingest that grows with the archive on its own, at any scale: a reader
(:class:`EndPhase`) whose ``_parts`` feeds the shape of ``bench_otf2.write_trace``'s archive, location by location,
to the same :class:`~synthtrace.tracelib.formats.call_store.CallStore` and
:class:`~synthtrace.tracelib.formats.otf2.messages.P2pRecords` as :class:`Otf2Trace` (ranks in a ring: per step an
``MPI_Isend``, an ``MPI_Irecv`` and an ``MPI_Waitall`` holding the send's ``MpiIsend``, the receive's
``MpiIrecvRequest`` and ``MpiIrecv``; an ``MPI_Allreduce`` every 10 steps; 3 counters per call), then pairs the
records, places the messages and writes the run's calls and message tables with ingest's own ``_write_run``. No
bursts: the burst assembly streams (bounded by the chunk), it is the calls and messages that wait for the end. Each
scale runs in a fresh process (its peak RSS is its own), with this checkout's code and, with ``--before TREE`` (a
checkout or ``git archive`` export), with that tree's.

    python benchmarks/bench_otf2_memory.py --calls 3.16e6 20e6 [--before /tmp/base] [--phases]

``--calls`` 3.16 M is the 319 MB archive's count (1.02 M messages); 20 M calls (6.5 M messages) is a 2 GB
archive of the same shape (OTF2 packs ~10 k calls per MB here). ``--shape gather``: the same calls, but every rank
sends to rank 0, which posts and completes one Irecv per sender each step (one task receiving every message:
attack 14's gather written with point-to-point).

    python benchmarks/bench_otf2_memory.py --calls 3.16e6 --shape gather --before /tmp/base

``--keep DIR`` leaves each run's tables in ``DIR/<code>-<calls>`` (to compare the two trees' tables).
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
import contextlib, json, os, resource, sys, tempfile, threading, time, traceback


def sample_phases(every_s=0.02):
    """Sample the resident size with the main thread's innermost synthtrace frames; at exit, print the peak of
    each (frames -> MB, largest first) on stderr."""
    main, peaks = threading.get_ident(), {}

    def rss_mb():
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmRSS"))

    def sample():
        while True:
            frame = sys._current_frames().get(main)
            stack = [f"{os.path.basename(f.filename)}:{f.name}" for f in traceback.extract_stack(frame)
                     if "synthtrace" in f.filename or "/tracelib/" in f.filename or "/warehouse/" in f.filename]
            key = " > ".join(stack[-3:]) or "-"
            peaks[key] = max(peaks.get(key, 0), rss_mb())
            time.sleep(every_s)

    threading.Thread(target=sample, daemon=True).start()
    import atexit
    atexit.register(lambda: [print(f"{mb:7,d} MB  {key}", file=sys.stderr)
                             for key, mb in sorted(peaks.items(), key=lambda kv: -kv[1])[:15]])


if os.environ.get("BENCH_PHASES"):
    sample_phases()
from pathlib import Path
import numpy as np
import polars as pl
from synthtrace.tracelib.formats.call_store import CallStore
from synthtrace.tracelib.formats.otf2.events import _IRECV, _IRECV_REQ, _ISEND
from synthtrace.tracelib.formats.otf2.messages import P2pRecords, _P2P_SCHEMA
from synthtrace.tracelib.formats.source import ReadSummary, TraceReader
from synthtrace.tracelib.schema import MPI_CALL_SCHEMA, THREAD_NODE_SCHEMA
from synthtrace.warehouse.ingest import _write_run

N_CALLS, SHAPE, RANKS, CHUNK_STEPS = int(float(sys.argv[1])), sys.argv[2], 16, 20_000
COUNTERS = ("PAPI_BR_MSP", "PAPI_L2_TCM", "PAPI_TOT_CYC")
STEP_NS = 30_000


def calls_of(task, s0, s1):
    """The calls of steps s0..s1 of a rank: Isend, Irecv, Waitall each step, an Allreduce every 10 steps."""
    steps = np.arange(s0, s1, dtype=np.int64)
    base = 1_000_000 + steps * STEP_NS
    per = [("MPI_Isend", "point_to_point", base + 26_000, 300), ("MPI_Irecv", "point_to_point", base + 26_400, 200),
           ("MPI_Waitall", "point_to_point", base + 26_700, 800)]
    ar = steps % 10 == 9
    parts = [(name, kind, t, np.full(t.size, d)) for name, kind, t, d in per]
    parts.append(("MPI_Allreduce", "collective", base[ar] + 28_000, np.full(int(ar.sum()), 1_500)))
    start = np.concatenate([p[2] for p in parts])
    order = np.argsort(start, kind="stable")
    start = start[order]
    dur = np.concatenate([p[3] for p in parts])[order]
    name = np.concatenate([np.full(p[2].size, p[0], dtype=object) for p in parts])[order]
    kind = np.concatenate([np.full(p[2].size, p[1], dtype=object) for p in parts])[order]
    n = start.size
    coll = kind == "collective"
    frame = pl.DataFrame({
        "run_id": ["end"] * n, "appl": np.ones(n, np.int32), "task": np.full(n, task, np.int32),
        "thread": np.ones(n, np.int32), "call_seq": np.zeros(n, np.int64), "cpu": [None] * n,
        "mpi_call": name.tolist(), "mpi_kind": kind.tolist(), "start_ns": start, "end_ns": start + dur,
        "duration_ns": dur, "bytes_sent": np.where(coll, 8, -1), "bytes_recv": np.where(coll, 8, -1),
        "peer": [None] * n, "n_messages": [None] * n, "comm": np.zeros(n, np.int64),
        "root": [None] * n, "tag": [None] * n, "call_site": ["main (bench.c:1)"] * n,
        **{c: (start // (97 * (i + 1))).astype(np.int64) for i, c in enumerate(COUNTERS)},
    }).with_columns(pl.col(c).replace(-1, None) for c in ("bytes_sent", "bytes_recv"))
    return frame.select(*[pl.col(k).cast(v) for k, v in MPI_CALL_SCHEMA.items()], *COUNTERS)


def records_of(task, s0, s1):
    """The Isend, Irecv request and Irecv records of steps s0..s1 of a rank: in a ring, to the right and from the
    left; in a gather, every other rank to rank 0 (task 1), which posts and completes a receive per sender."""
    steps = np.arange(s0, s1, dtype=np.int64)
    base = 1_000_000 + steps * STEP_NS
    rank = task - 1
    if SHAPE == "ring":
        sends, receives = [(rank + 1) % RANKS], [(rank - 1) % RANKS]
    else:
        sends, receives = ([], list(range(1, RANKS))) if rank == 0 else ([0], [])
    kinds = [(_ISEND, base + 26_010, peer, steps) for peer in sends]
    for peer in receives:  # a request id per step (and sender)
        req = 10**9 + (steps if SHAPE == "ring" else steps * RANKS + peer)
        kinds += [(_IRECV_REQ, base + 26_410, 0, req), (_IRECV, base + 26_900, peer, req)]
    n = steps.size
    frames = [pl.DataFrame({"task": np.full(n, task, np.int32), "thread": np.ones(n, np.int32),
                            "kind": np.full(n, k, np.int8), "time_ns": t, "pos": (t - 1_000_000) // 10,
                            "peer": np.full(n, peer, np.int64), "comm": np.zeros(n, np.int64),
                            "tag": steps % 1000, "size": np.full(n, 8192), "req": req.astype(np.uint64)},
                           schema=_P2P_SCHEMA) for k, t, peer, req in kinds]
    return pl.concat(frames)


class EndPhase(TraceReader):
    path = Path("end-phase.otf2")

    def _parts(self, run_id, progress, calls):
        comm_ranks = pl.DataFrame({"comm": [0] * RANKS, "rank": list(range(RANKS)),
                                   "task": list(range(1, RANKS + 1)), "thread": [1] * RANKS},
                                  schema={"comm": pl.Int64, "rank": pl.Int64, "task": pl.Int32, "thread": pl.Int32})
        p2p = P2pRecords(comm_ranks, set(), self.path, calls.folder / "p2p")
        steps = int(N_CALLS / RANKS / 3.1)
        for task in range(1, RANKS + 1):
            seq = 0
            for s0 in range(0, steps, CHUNK_STEPS):
                s1 = min(steps, s0 + CHUNK_STEPS)
                c = calls_of(task, s0, s1)
                calls.add(c.with_columns(pl.int_range(seq, seq + c.height, dtype=pl.Int64).alias("call_seq")))
                seq += c.height
                p2p.add(records_of(task, s0, s1))
        yield from ()
        matched = p2p.matched()
        return ReadSummary(calls=calls.with_messages(matched), messages=matched, message_ends=calls.message_ends,
                           thread_nodes=pl.DataFrame(schema=THREAD_NODE_SCHEMA), counters=COUNTERS, n_bursts=0,
                           n_calls=calls.n_calls, n_uncore=0, n_events=0, n_records={}, last_time_ns=0, warnings=())


t = time.process_time()
keep = os.environ.get("BENCH_KEEP")  # a folder to write the run's tables to (kept), else a temporary one
if keep:
    Path(keep).mkdir(parents=True)
with (contextlib.nullcontext(keep) if keep else tempfile.TemporaryDirectory()) as tmp:
    summary = _write_run(EndPhase(), "end", Path(tmp), None)
    stored = pl.scan_parquet(Path(tmp) / "mpi_calls.parquet").select(pl.len(), pl.col("bytes_sent").sum()).collect()
    out = {"calls": summary.n_calls, "messages": summary.messages.height, "stored_calls": stored.item(0, 0),
           "bytes_sent": stored.item(0, 1)}
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({**out, "peak_rss_mb": usage.ru_maxrss / 1024, "cpu_s": usage.ru_utime + usage.ru_stime}))
'''


def run(tree: Path, n_calls: float, phases: bool = False, shape: str = "ring", keep: Path | None = None) -> dict:
    """One scale in a fresh process importing ``tree``'s code (as ``bench_ingest_equal`` does); ``phases``: print
    the peak resident size of each phase (innermost frames) on stderr; ``keep``: a new folder the run's tables are
    written to and left in (to compare two trees' tables), else a temporary one."""
    env = {**os.environ, "PYTHONPATH": str(tree), **({"BENCH_PHASES": "1"} if phases else {}),
           **({"BENCH_KEEP": str(keep)} if keep else {})}
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", CHILD, str(n_calls), shape], cwd=tree,
                         capture_output=True, text=True, env=env)
    if out.returncode:
        raise SystemExit(f"{tree}: {out.stderr[-2000:]}")
    if phases:
        print(out.stderr, file=sys.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=float, nargs="+", default=[3.16e6, 20e6], help="MPI calls of each scale")
    ap.add_argument("--before", type=Path, help="another checkout or export, measured the same way")
    ap.add_argument("--phases", action="store_true", help="also the peak of each phase (RSS sampled every 20 ms)")
    ap.add_argument("--shape", choices=["ring", "gather"], default="ring",
                    help="ring: each rank to the next; gather: every rank to rank 0 (one big receiver)")
    ap.add_argument("--keep", type=Path, help="write each run's tables to KEEP/<code>-<calls> (a new folder)")
    args = ap.parse_args()
    trees = [("now", ROOT)] + ([("before", args.before)] if args.before else [])
    print("| calls | messages | code | peak RSS MB | CPU s |\n|---|---|---|---|---|")
    for n in args.calls:
        for name, tree in trees:
            r = run(tree, n, args.phases, args.shape, args.keep / f"{name}-{n:g}" if args.keep else None)
            print(f"| {r['calls']:,} | {r['messages']:,} | {name} | {r['peak_rss_mb']:,.0f} | {r['cpu_s']:.1f} |",
                  flush=True)


if __name__ == "__main__":
    main()
