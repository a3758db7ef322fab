"""Peak memory of a night (issue 23, attack26 N1): ``synthtrace nightly`` over drops of 2-4 large simulated traces
plus the real Paraver and OTF2 traces, under ``/usr/bin/time -v`` (max RSS), with the night's memory budget at its
default and switched off (a budget no night reaches), on 2 cores and on 1 (``taskset -c 0``), each night on a fresh
warehouse. The night runs in a child process that samples its own RSS every 0.2 s with the stage in progress, so
the table says which stage peaked.

    nice -n 10 python benchmarks/bench_night_memory.py /tmp/nm27 --large 2 4 --ranks 64 --iterations 250

The large traces are ``synthtrace simulate --pattern halo --runs 4`` (written once into ``WORK/sim``); a drop of N
takes the first N of them (hard links) and copies of the real traces of ``../shared/traces``.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.machine import machine_description  # noqa: E402
from benchmarks.results_io import emit  # noqa: E402

REAL = Path(os.environ.get("SYNTHTRACE_REAL_TRACES", ROOT.parent / "shared" / "traces"))
#: the budget of a night "without" one: more than any night here holds (MB)
NO_BUDGET_MB = 1_000_000
SAMPLE_S = 0.2


def _rss_mb() -> float:
    """This process's resident set size now (MB)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def child(drop: Path, wh: Path, out: Path, threads: int | None) -> None:
    """Run one night in this process, sampling RSS by stage; write the figures as JSON into ``out``. ``threads``: the
    night's task threads, as on a node of that many cores (None: this process's cores)."""
    from synthtrace.pipelines.memory_budget import bound_heap_arenas

    bound_heap_arenas()  # as the console script does (pipelines.entry), before any thread allocates
    from synthtrace.pipelines import nightly
    from synthtrace.pipelines.nightly import run_night
    from synthtrace.warehouse import Warehouse

    if threads:
        nightly.cores = lambda: threads

    stage = ["start"]
    peaks: dict[str, float] = {}
    done = threading.Event()

    def sample() -> None:
        while not done.wait(SAMPLE_S):
            peaks[stage[0]] = max(peaks.get(stage[0], 0.0), _rss_mb())

    def progress(name: str, n: int, total: int) -> None:
        stage[0] = name

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.perf_counter()
    summary = run_night(drop, Warehouse(wh), settle_s=0, progress=progress)
    wall = time.perf_counter() - start
    done.set()
    sampler.join()
    out.write_text(json.dumps({"wall_s": round(wall, 1), "peaks_mb": {k: round(v) for k, v in peaks.items()},
                               "ru_maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
                               "message": summary.message(), "errors": summary.errors}))


def build(work: Path, ranks: int, iterations: int, largest: int) -> list[Path]:
    """The large traces (simulated once), sorted."""
    sim = work / "sim"
    if not sim.is_dir():  # the console script's code (``python -m`` of its module would only import it)
        subprocess.run([sys.executable, "-c", "import sys; from synthtrace.pipelines.entry import main; "
                        "sys.exit(main())", "simulate", str(sim), "--pattern", "halo", "--ranks", str(ranks),
                        "--iterations", str(iterations), "--runs", str(largest), "--seed", "3"], check=True,
                       stdout=subprocess.DEVNULL)
    traces = sorted((sim / "halo").glob("*.prv"))
    if len(traces) < largest:
        raise SystemExit(f"{sim}: {len(traces)} simulated traces, {largest} wanted")
    return traces


def make_drop(work: Path, traces: list[Path], real: bool) -> Path:
    """A drop of ``traces`` (hard links, with their .pcf/.row) and, with ``real``, copies of the real traces."""
    drop = work / f"drop{len(traces)}{'r' if real else ''}"
    if drop.is_dir():
        return drop
    (drop / "big").mkdir(parents=True)
    for prv in traces:
        for f in prv.parent.glob(prv.stem + ".*"):
            os.link(f, drop / "big" / f.name)
    if real:
        shutil.copytree(REAL / "paraver", drop / "paraver", ignore=shutil.ignore_patterns("LICENSE*"))
        for name in ("ping-pong-otf2", "ping-pong-otf2-papi"):
            shutil.copytree(REAL / "otf2" / name, drop / "otf2" / name)
    return drop


def night(drop: Path, work: Path, label: str, budget_mb: int | None, cpus: str, threads: int | None = None) -> dict:
    """One night over ``drop`` on a fresh warehouse: max RSS (GNU time), wall time and the child's stage peaks."""
    wh = work / f"wh-{label}"
    shutil.rmtree(wh, ignore_errors=True)
    out = work / f"{label}.json"
    env = {**os.environ, "DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("SYNTHTRACE_NIGHT_MEMORY_MB", None)
    if budget_mb is not None:
        env["SYNTHTRACE_NIGHT_MEMORY_MB"] = str(budget_mb)
    cmd = ["/usr/bin/time", "-v", "taskset", "-c", cpus, sys.executable, __file__, str(work),
           "--child", str(drop), str(wh), str(out), *(["--child-threads", str(threads)] if threads else [])]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    rss = next((int(ln.split(":")[1]) // 1024 for ln in p.stderr.splitlines() if "Maximum resident" in ln), -1)
    got = json.loads(out.read_text()) if p.returncode == 0 and out.is_file() else {"error": p.stderr[-800:]}
    shutil.rmtree(wh, ignore_errors=True)
    return {"label": label, "max_rss_mb": rss, **got}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("work", type=Path)
    parser.add_argument("--large", type=int, nargs="*", default=[2, 4], help="large traces per drop")
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--iterations", type=int, default=250)
    parser.add_argument("--one-core", type=int, nargs="*", default=[4], help="drops also run on 1 core (no budget)")
    parser.add_argument("--small", action="store_true", help="also the real traces alone (wall time)")
    parser.add_argument("--threads", type=int, nargs="*", default=[],
                        help="also run the large drops with this many task threads, as on a node of that many cores")
    parser.add_argument("--only", nargs="*", help="run only the nights of these labels (e.g. 4big-on-4t)")
    parser.add_argument("--child", nargs=3, type=Path, metavar=("DROP", "WH", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--child-threads", "--threads-child", dest="child_threads", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.child:
        child(*args.child, args.child_threads)
        return
    args.work.mkdir(parents=True, exist_ok=True)
    traces = build(args.work, args.ranks, args.iterations, max(args.large))
    plan: list[tuple[Path, str, int | None, str, int | None]] = []  # drop, label, budget, cpus, threads
    if args.small:
        small = make_drop(args.work, [], real=True)
        plan += [(small, "small-off-2c", NO_BUDGET_MB, "0,1", None), (small, "small-on-2c", None, "0,1", None)]
    for n in args.large:
        drop = make_drop(args.work, traces[:n], real=True)
        plan += [(drop, f"{n}big-off-2c", NO_BUDGET_MB, "0,1", None), (drop, f"{n}big-on-2c", None, "0,1", None)]
        plan += [p for t in args.threads for p in ((drop, f"{n}big-off-{t}t", NO_BUDGET_MB, "0,1", t),
                                                   (drop, f"{n}big-on-{t}t", None, "0,1", t))]
        if n in args.one_core:
            plan.append((drop, f"{n}big-off-1c", NO_BUDGET_MB, "0", None))
    runs = []
    for drop, label, budget_mb, cpus, threads in plan:
        if args.only is None or label in args.only:
            runs.append(night(drop, args.work, label, budget_mb, cpus, threads))
            print(json.dumps(runs[-1]), flush=True)
    size = traces[0].stat().st_size / 1e6 if traces else 0
    lines = [f"Machine: {machine_description()}; large trace: halo, {args.ranks} ranks, {args.iterations} "
             f"iterations, {size:.0f} MB .prv; off: the budget {NO_BUDGET_MB:,} MB (never binds), on: the default; "
             "Nc: N cores (taskset); Nt: N task threads on 2 cores, as on an N-core node", "",
             "| night | max RSS (MB) | wall (s) | peak by stage (MB) | result |", "|---|---|---|---|---|"]
    for r in runs:
        peaks = ", ".join(f"{k} {v}" for k, v in r.get("peaks_mb", {}).items())
        lines.append(f"| {r['label']} | {r['max_rss_mb']:,} | {r.get('wall_s', '-')} | {peaks} | "
                     f"{r.get('message', r.get('error', ''))[:200]} |")
    emit("\n".join(lines), args.out)


if __name__ == "__main__":
    main()
