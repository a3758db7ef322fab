"""Simulator generation speed and peak memory (issue 3): Paraver traces of three sizes, the largest >= 1 GB.

Each size runs in a fresh subprocess (so its peak RSS is its own) exactly as ``synthtrace simulate`` does it:
Paraver writer, ground truth as Parquet and archetype labels by the project's rules. Output goes to a temporary
folder that is deleted afterwards. Sizes are reached by the number of iterations of a halo-exchange application
(32 ranks, one run: one trace of that size); a last row simulates the five applications with their default
counter-set runs (every counter recorded once: 5 runs each), the usual shape of a campaign.

    python benchmarks/bench_simulate.py [--sizes-mb 100 400 1100] [--mixed-iterations 60]

Writes benchmarks/results/simulate.md.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.bench_ingest import _run  # noqa: E402  (the subprocess runner)
from benchmarks.machine import machine_description  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "simulate.md"

CHILD = """
import json, resource, shutil, sys, time
from pathlib import Path
from synthtrace.models.archetypes import simulator_labeller
from synthtrace.simulator import PATTERNS, ExperimentSpec, TruthStore, simulate_experiment
out, patterns, ranks, iterations, runs = Path(sys.argv[1]), sys.argv[2].split(","), int(sys.argv[3]), int(sys.argv[4]),
sys.argv[5]
truth = TruthStore(out / "ground_truth")
t, cpu = time.perf_counter(), time.process_time()
res = [simulate_experiment(out, ExperimentSpec(app=p, pattern=p, ranks=ranks, iterations=iterations,
                                               runs=None if runs == "auto" else int(runs), seed=1),
                           truth, labeller=simulator_labeller) for p in patterns]
truth.close()
dt, cpu = time.perf_counter() - t, time.process_time() - cpu
traces = [t for r in res for t in r.traces]
gt = sum(f.stat().st_size for f in (out / "ground_truth").rglob("*.parquet"))
print(json.dumps({"seconds": dt, "cpu_seconds": cpu, "bytes": sum(r.bytes for r in res), "largest": max(t.stat().st_size
for t in traces),
                  "traces": len(traces), "bursts": sum(sum(r.n_bursts) for r in res), "truth_bytes": gt,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run_child(patterns: str, ranks: int, iterations: int, runs: str) -> dict:
    """One measurement in a fresh process; adds the machine's 1-minute load average when it started."""
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench_sim_") as tmp:
        return {**_run(CHILD, tmp, patterns, str(ranks), str(iterations), runs), "load": load}


def machine() -> str:
    import numpy
    import polars
    return (f"{machine_description()}, {platform.system()} {platform.release()}; Polars {polars.__version__}, "
            f"NumPy {numpy.__version__}; load average at start {os.getloadavg()[0]:.1f} (the machine is shared)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes-mb", type=float, nargs="+", default=[100, 400, 1100])
    ap.add_argument("--ranks", type=int, default=32)
    ap.add_argument("--mixed-iterations", type=int, default=60)
    args = ap.parse_args()
    desc = machine()
    probe = run_child("halo", args.ranks, 40, "1")
    per_iteration = probe["bytes"] / 40
    rows = []
    for mb in args.sizes_mb:
        it = max(1, round(mb * 1e6 / per_iteration))
        r = run_child("halo", args.ranks, it, "1")
        rows.append((f"halo, {args.ranks} ranks, {it} iterations, 1 run", r))
        print(rows[-1], flush=True)
    r = run_child("halo,cg,master_worker,wavefront,transpose", 16, args.mixed_iterations, "auto")
    rows.append((f"5 apps, 16 ranks, {args.mixed_iterations} iterations, 5 runs each", r))
    print(rows[-1], flush=True)
    lines = [
        "# Simulator: generation speed and memory (issue 3)",
        "",
        "Reproduce: `python benchmarks/bench_simulate.py` (each size in a fresh process, output in a",
        "temporary folder deleted afterwards). What is timed is what `synthtrace simulate` does: Paraver traces",
        "(.prv/.pcf/.row), ground truth as Parquet, archetype labels by the project's rules.",
        "",
        f"Machine: {desc}.",
        "",
        "| configuration | traces | trace MB (largest) | total MB | bursts | ground truth MB | wall s | MB/s | CPU s | "
        "MB per CPU s | peak RSS MB | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in rows:
        lines.append(
            f"| {name} | {r['traces']} | {r['largest'] / 1e6:.0f} | {r['bytes'] / 1e6:.0f} | {r['bursts']:,} | "
            f"{r['truth_bytes'] / 1e6:.0f} | {r['seconds']:.1f} | {r['bytes'] / 1e6 / r['seconds']:.1f} | "
            f"{r['cpu_seconds']:.1f} | {r['bytes'] / 1e6 / r['cpu_seconds']:.1f} | {r['peak_rss_mb']:.0f} | "
            f"{r['load']:.1f} |"
        )
    lines += ["", "MB/s counts trace bytes (.prv) written per second of wall time, ground truth included in the time;",
              "CPU s is the process's CPU time (user + system, all threads), a measure other jobs on the machine",
              "do not inflate; load is the machine's 1-minute load average when the measurement started (2 cores:",
              "above 2, other jobs took CPU time from this one and the wall-clock MB/s understates the generator).",
              "Peak RSS is the child's maximum resident set size; memory is bounded by one block of iterations",
              "(about 40,000 bursts per run) and the batch of ground-truth rows waiting for labels (150,000), not by",
              "the trace size."]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
