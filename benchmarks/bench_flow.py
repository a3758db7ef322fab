"""Overhead of the nightly Prefect flow against calling the same library functions directly (issue 5).

A small and a large simulated night are processed twice each, in fresh processes and fresh warehouses: once by
``run_night`` (ephemeral Prefect, mapped tasks) and once by a plain loop over the same stage functions. The
difference is the flow's overhead: fixed (the small night) and relative to the work (the large night).

    python benchmarks/bench_flow.py
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.machine import machine_description  # noqa: E402

DIRECT = """
import json, sys, time
from pathlib import Path
t0 = time.perf_counter()
from synthtrace.pipelines import jobs
from synthtrace.warehouse import Warehouse
from synthtrace.warehouse.drop import discover
from synthtrace.warehouse.ingest import ingest_trace
drop, wh = Path(sys.argv[1]), Warehouse(sys.argv[2])
found = discover(drop, wh.ensure(), settle_s=0).new  # [helper drop] the traces were copied just before
exps = sorted({ingest_trace(wh, d.path, default_experiment=d.experiment).experiment for d in found})
for job in jobs.JOBS:
    for args in ([[e] for e in exps] if job.scope == "experiment" else [[]]):
        job.run(wh, *args, jobs.NightSettings())
print(json.dumps({"seconds": time.perf_counter() - t0, "runs": len(found), "experiments": len(exps)}))
"""

FLOW = """
import json, sys, time
from pathlib import Path  # [helper drop] was missing: the flow's run died of a NameError
t0 = time.perf_counter()
from synthtrace.pipelines.nightly import run_night
from synthtrace.warehouse import Warehouse
s = run_night(Path(sys.argv[1]), Warehouse(sys.argv[2]), settle_s=0)  # [helper drop] copied just before
print(json.dumps({"seconds": time.perf_counter() - t0, "runs": len(s.ingested), "experiments": len(s.merged)}))
"""

NIGHTS = {
    "small": ["--pattern", "halo", "--ranks", "4", "--iterations", "4"],
    "large": ["--pattern", "all", "--ranks", "16", "--iterations", "40"],
}


def _run(code: str, *args: str, env: dict) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT, env=env)
    if out.returncode:
        raise SystemExit(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-flow-") as tmp:
        tmp = Path(tmp)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PREFECT_HOME": str(tmp / "prefect"),
               "PREFECT_LOGGING_LEVEL": "WARNING", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
        for name, opts in NIGHTS.items():
            drop = tmp / f"drop-{name}"
            subprocess.run(
                [sys.executable, "-m", "synthtrace.pipelines.cli", "simulate", str(drop), "--seed", "3", *opts],
                check=True,
                capture_output=True,
                cwd=ROOT,
                env=env,
            )
            mb = sum(f.stat().st_size for f in drop.rglob("*.prv")) / 1e6
            direct = _run(DIRECT, str(drop), str(tmp / f"wh-direct-{name}"), env=env)
            flow = _run(FLOW, str(drop), str(tmp / f"wh-flow-{name}"), env=env)
            rows.append((name, mb, direct, flow))
            print(name, f"{mb:.0f} MB", direct, flow)
    lines = [
        "## Nightly flow overhead (issue 5)",
        "",
        f"Machine: {machine_description()}. Command: `python benchmarks/bench_flow.py`. Each night is processed in",
        "a fresh process and warehouse, by the Prefect flow (`run_night`, ephemeral server, mapped tasks) and by a",
        "plain loop over the same stage functions (ingest, merge, archetypes, detect, retrain, report).",
        "",
        "| night | traces | MB | direct | flow | overhead | overhead / work |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, mb, d, f in rows:
        over = f["seconds"] - d["seconds"]
        lines.append(
            f"| {name} | {d['runs']} | {mb:.0f} | {d['seconds']:.1f} s | {f['seconds']:.1f} s | {over:+.1f} s | "
            f"{over / d['seconds']:+.0%} |"
        )
    (_, _, ds, fs), (_, _, dl, fl) = rows[0], rows[-1]
    fixed = fs["seconds"] - ds["seconds"]
    variable = (fl["seconds"] - dl["seconds"]) - fixed
    lines += [
        "",
        f"Fixed overhead (the small night, where the work is negligible): {fixed:.1f} s (target <= 15 s).",
        f"Overhead beyond the fixed part on the large night: {variable:+.1f} s = "
        f"{variable / dl['seconds']:+.0%} of its "
        "work (target <= 10 %); a negative value means the mapped tasks' parallel ingest gained more than the",
        "orchestration cost. Prefect's fixed cost is the ephemeral server's start and the task-run bookkeeping.",
        "",
    ]
    (ROOT / "benchmarks" / "results" / "flow.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
