"""Peak memory of naming a run's messages from its records (``messages.logical_messages``: records placed in their
calls, numbered, each channel counted from the run's start by ``lost_at_start`` and, since mergeacc18,
``repaired_halves``) at millions of messages (issue 23's 1.5 GB line; mergeacc18 item 3).

One run, built as tables (no trace): ``--tasks`` ranks in a ring, each posting ``--messages`` / tasks messages to its
right neighbour (an ``MPI_Isend`` each) and receiving as many from its left one (an ``MPI_Irecv`` each, completed in
the same call: a record's receive time lies in it), one communication record per message (MESSAGE_SCHEMA); the last
rank's trace starts at 1 % of the run (Paraver: its calls before are gone, and every record with an end there), so
``lost_at_start`` has every channel of it to count. ``--otf2``: the records as the OTF2 reader pairs them instead
(the late rank's partners' halves kept, paired from each channel's first: what ``repaired_halves`` pairs again).
Each measurement runs in a fresh process: VmHWM (peak resident set) of the process after the call, and VmRSS
before it (the tables held), for this checkout and, with ``--tree DIR``, a tree exported by ``git archive``.

    python benchmarks/bench_lost_at_start_memory.py --messages 6500000 [--otf2] [--tree /tmp/before]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import gc, json, sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np, polars as pl
from synthtrace.tracelib.merge.messages import logical_messages

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) // 1024

tasks, total, otf2, start = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1", sys.argv[5] == "1"
per = total // tasks
i = np.arange(per, dtype=np.int64)
calls, recs = [], []
late_from = per // 100  # the last rank's trace starts at its message late_from
for t in range(1, tasks + 1):
    base = 10_000 + 50 * t
    s0, r0 = base + 1000 * i, base + 1000 * i + 400  # Isend i, Irecv i of task t (ns)
    keep = i >= (late_from if t == tasks else 0)
    n = int(keep.sum())
    starts = np.stack([s0[keep], r0[keep]], 1).ravel()
    calls.append(pl.DataFrame({
        "appl": np.ones(2 * n, np.int32), "task": np.full(2 * n, t, np.int32), "thread": np.ones(2 * n, np.int32),
        "call_seq": np.arange(2 * n, dtype=np.int64),
        "mpi_call": np.tile(np.array(["MPI_Isend", "MPI_Irecv"]), n),
        "start_ns": starts, "end_ns": starts + 200,
        "call_site": np.tile(np.array(["send (a.c:1)", "recv (a.c:2)"]), n),
        "comm": np.zeros(2 * n, np.int64), "tag": np.ones(2 * n, np.int64), "n_messages": np.ones(2 * n, np.int32),
        "peer": np.tile(np.array([t % tasks + 1, (t - 2) % tasks + 1], np.int32), n),
        "bytes_sent": np.tile(np.array([1024, 0]), n), "bytes_recv": np.tile(np.array([0, 1024]), n)}))
for t in range(1, tasks + 1):  # message i from t to its right neighbour
    dst = t % tasks + 1
    s = 10_000 + 50 * t + 1000 * i + 10
    r = 10_000 + 50 * dst + 1000 * i + 410
    both = (i >= late_from) if tasks in (t, dst) else np.ones(per, bool)
    if otf2 and not both.all():  # the reader pairs the halves traced from each channel's first
        lost = int((~both).sum())
        sk = np.ones(per, bool) if t != tasks else both
        rk = np.ones(per, bool) if dst != tasks else both
        s, r = s[sk], r[rk]
        m = max(s.size, r.size)
        s = np.r_[s, np.full(m - s.size, -1)]
        r = np.r_[r, np.full(m - r.size, -1)]
        both = np.ones(m, bool)
    n = int(both.sum())
    recs.append(pl.DataFrame({
        "s_appl": np.ones(n, np.int32), "s_task": np.full(n, t, np.int32), "s_thread": np.ones(n, np.int32),
        "s_time_ns": s[both], "r_appl": np.ones(n, np.int32), "r_task": np.full(n, dst, np.int32),
        "r_thread": np.ones(n, np.int32), "r_time_ns": r[both], "size": np.full(n, 1024, np.int64),
        "tag": np.ones(n, np.int64)}).with_columns(pl.col("s_time_ns", "r_time_ns").replace(-1, None)))
calls, recs = pl.concat(calls), pl.concat(recs)
del i
gc.collect()
held = status("VmRSS")
t0 = time.process_time()
out = logical_messages(calls, recs, from_run_start=start)
cpu = time.process_time() - t0
named = int(out.get_column("k").is_not_null().sum())
print(json.dumps({"held_mb": held, "peak_mb": status("VmHWM"), "cpu_s": round(cpu, 1), "messages": recs.height,
                  "calls": calls.height, "named": named}))
"""


def measure(tree: Path, tasks: int, messages: int, otf2: bool, start: bool) -> dict:
    """One measurement in a fresh process with ``tree``'s code (``start``: each channel counted from the run's
    start, as the merge reads messages; else as ingest stores them)."""
    out = subprocess.run([sys.executable, "-c", CHILD, str(tree), str(tasks), str(messages), "1" if otf2 else "0",
                          "1" if start else "0"],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, nargs="+", default=[6_500_000])
    ap.add_argument("--tasks", type=int, default=64)
    ap.add_argument("--otf2", action="store_true", help="records as the OTF2 reader pairs them")
    ap.add_argument("--tree", type=Path, help="also measure this tree (git archive of a commit)")
    ap.add_argument("--stored", action="store_true", help="also as ingest stores them (from_run_start=False)")
    a = ap.parse_args()
    trees = {"this checkout": ROOT, **({str(a.tree): a.tree} if a.tree else {})}
    print("| messages | tree | numbered | tables held | peak | CPU | named |\n|---|---|---|---|---|---|---|")
    for n in a.messages:
        for name, tree in trees.items():
            for start in (True, False) if a.stored else (True,):
                r = measure(tree, a.tasks, n, a.otf2, start)
                print(f"| {r['messages']:,} | {name} | {'from the run start' if start else 'as stored'} | "
                      f"{r['held_mb']:,} MB | **{r['peak_mb']:,} MB** | {r['cpu_s']} s | {r['named']:,} |", flush=True)


if __name__ == "__main__":
    main()
