"""The merge on the run-to-run mechanisms of issue 22 (simulator/mechanisms.py), scored against the true logical burst.

    python benchmarks/bench_merge_mechanisms.py --label before          # ~10 min on a quiet 2-core machine
    python benchmarks/bench_merge_mechanisms.py --label after --quick   # 1-2 min: 1 seed per mechanism, 20 plain
    python benchmarks/bench_merge_mechanisms.py --label after --scale-time      # 10k vs 1k iterations, time/burst
    python benchmarks/bench_merge_mechanisms.py --label after --scale-memory    # 256 ranks x 2,000 its, peak RSS
    python benchmarks/bench_merge_mechanisms.py --label after --mechanisms plain --plain-from 50 --plain 25  # a chunk
    python benchmarks/bench_merge_mechanisms.py --label after --mechanisms all --part 2/4  # a quarter of the rest
    python benchmarks/bench_merge_mechanisms.py --label after --from-log /tmp/merge_mechanisms.after.jsonl  # rescue

A run in parts (``--mechanisms`` lists, ``all`` (every mechanism but plain), ``--part K/N``, plain seeds by
``--plain-from``/``--plain``) adds its rows to its label's (a row replaces the label's row of the same mechanism and
seed); the store is re-read and written under a lock, so parts may run one after the other or at once. Every
campaign's row is also appended to ``--log`` (JSON lines) as soon as it is scored: a part that was stopped keeps its
finished campaigns, and ``--from-log`` adds them to the label.

Every campaign is simulated (Paraver traces and truth in a temporary folder), read back with the reader and merged
with the library's merge at default options (``merge_runs``, what ``synthtrace merge`` runs), then scored
(``testing/simulator_campaigns.py``): ``right`` is, over the non-reference runs, the smallest share of reference
bursts >= 10 us matched to their true logical burst (or left unmatched when that run has none); ``right (span)``
counts a burst of an undecidable span (an inserted, missing or repeated iteration among identical ones) right when
matched to an interchangeable burst of that span; ``verdict`` is the gravest of the merge's verdicts (``refused``:
the merge refused the campaign); ``accepted``: issue 22's rule (>= 99.5 % right, or the span marked, verdict not
``ok`` and >= 99.5 % right with the span's interchangeable bursts); ``silent``: verdict ``ok`` below 99 % right.

Results of each ``--label`` are kept in ``benchmarks/results/merge_mechanisms.json``; the Markdown table
(``benchmarks/results/merge_mechanisms.md``) puts every label side by side (``before``: the merge at the split
commit of issue 26, run first; later labels: the merge of issue 22).
"""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.bench_merge import machine  # noqa: E402
from benchmarks.results_io import emit  # noqa: E402
from synthtrace.simulator.mechanisms import MECHANISMS, campaign, simulate  # noqa: E402
from testing.simulator_campaigns import (MechanismOutcome, plain_size, read_campaign, run_mechanism,  # noqa: E402
                                        simulated)

RESULTS = ROOT / "benchmarks" / "results"
STORE = RESULTS / "merge_mechanisms.json"
OUT = RESULTS / "merge_mechanisms.md"


def _row(o: MechanismOutcome) -> dict:
    return {"mechanism": o.mechanism, "seed": o.seed, "ranks": o.ranks, "iterations": o.iterations, "runs": o.runs,
            "right": o.right, "right_span": o.right_span, "scored": o.scored, "in_span": o.in_span,
            "verdict": o.verdict, "span_marked": o.span_marked, "moved": o.moved, "accepted": o.accepted,
            "silent": not o.honest,
            "message": o.message, "sim_s": round(o.sim_s, 2), "merge_s": round(o.merge_s, 2)}


def campaigns(seeds: int, plain: int, only: list[str] | None = None, plain_from: int = 0,
              part: tuple[int, int] = (1, 1)) -> list[tuple[str, int, dict]]:
    """(mechanism, seed, sizes) of mechanisms ``only`` (default: all; ``all`` in it: every mechanism but plain),
    seeds 0..``seeds``-1 each, and of plain campaigns ``plain_from``..``plain_from + plain``-1 when plain is among
    them; with ``part`` (k, n) the k-th of n consecutive slices of that list."""
    every = not only or "all" in only
    names = [n for n in MECHANISMS if n != "plain" and (every or n in only)]
    jobs = [(n, s, {}) for n in names for s in range(seeds)]
    if not only or "plain" in only:
        jobs += [("plain", s, dict(zip(("ranks", "iterations"), plain_size(s))))
                 for s in range(plain_from, plain_from + plain)]
    k, n = part
    return jobs[len(jobs) * (k - 1) // n:len(jobs) * k // n]


def mechanism_rows(jobs: list[tuple[str, int, dict]], cache: Path | None = None, simulate_only: bool = False,
                   log: Path | None = None) -> list[dict]:
    """Rows of the campaigns ``jobs`` (:func:`campaigns`; kept in ``cache``; with ``simulate_only`` only simulated
    into it, no rows), each appended to ``log`` (JSON lines) as soon as it is scored."""
    rows = []
    for name, seed, sizes in jobs:
        if simulate_only:
            simulated(name, seed, cache, cache, **sizes)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            o = run_mechanism(name, seed, Path(tmp), cache=cache, **sizes)
        rows.append(_row(o))
        if log is not None:
            with log.open("a") as f:
                f.write(json.dumps(rows[-1], default=str) + "\n")
        print(f"{name:20s} seed {seed:3d}: right {o.right if o.right is None else round(100 * o.right, 2)} "
              f"{o.verdict} {o.merge_s:.1f} s", file=sys.stderr, flush=True)
    return rows


def logged_rows(logs: list[Path]) -> list[dict]:
    """The rows of ``--log`` files (the last row of a mechanism and seed wins)."""
    rows: dict[tuple[str, int], dict] = {}
    for log in logs:
        for line in log.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                rows[(r["mechanism"], r["seed"])] = r
    return list(rows.values())


# ------------------------------------------------------------------------------------------------ scale
def _merge_seconds(runs) -> tuple[float, float]:
    """Best of two merges of ``runs``: wall seconds, and CPU seconds of this process (all its threads: the work,
    which a machine shared with other jobs stretches much less than the wall time)."""
    from synthtrace.tracelib.merge.merge_runs import merge_runs
    merge_runs(runs)  # compiled kernels warm
    wall = cpu = float("inf")
    for _ in range(2):
        t0, c0 = time.perf_counter(), time.process_time()
        merge_runs(runs)
        wall, cpu = min(wall, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
    return wall, cpu


def scale_time(cache: Path | None = None) -> list[dict]:
    """Merge time per burst at 1,000 and 10,000 iterations (4 ranks, no collective, 2 runs; campaigns kept in
    ``cache`` when given)."""
    rows = []
    for its in (1000, 10_000):
        with tempfile.TemporaryDirectory() as tmp:
            c = (simulated("no_callers", 1, Path(tmp), cache, ranks=4, iterations=its) if cache
                 else simulate(tmp, campaign("no_callers", 1, ranks=4, iterations=its)))
            runs = read_campaign(c)
            dt, cpu = _merge_seconds(runs)
        n = sum(r.bursts.height for r in runs)
        rows.append({"iterations": its, "bursts (2 runs)": n, "merge s": round(dt, 2),
                     "us per burst": round(dt / n * 1e6, 2), "merge CPU s": round(cpu, 2),
                     "CPU us per burst": round(cpu / n * 1e6, 2), "load": round(os.getloadavg()[0], 1)})
    for r in rows[1:]:
        r["x (CPU per burst)"] = round(r["CPU us per burst"] / rows[0]["CPU us per burst"], 2)
    return rows


_INGEST = """
import sys
sys.path.insert(0, {root!r})
import synthtrace
synthtrace.ingest({wh!r}, {trace!r}, experiment="scale")
"""
_MERGE = """
import resource, sys, time
sys.path.insert(0, {root!r})
import synthtrace
t0 = time.perf_counter()
synthtrace.merge({wh!r}, "scale")
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.perf_counter() - t0)
"""


def _child(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)


def simulate_scale(folder: Path, ranks: int, iterations: int) -> tuple[list[Path], int, float]:
    """The scale campaign's traces in ``folder`` (kept there: simulated once), their bursts, simulation seconds."""
    from synthtrace.simulator import ExperimentSpec, TruthStore, simulate_experiment
    traces = sorted((folder / "sim" / "scale").glob("scale.run*.prv"))
    done = folder / "sim" / "bursts.txt"
    if len(traces) == 2 and done.is_file():
        return traces, int(done.read_text()), 0.0
    t0 = time.perf_counter()
    store = TruthStore(folder / "truth")
    res = simulate_experiment(folder / "sim", ExperimentSpec(app="scale", pattern="halo", ranks=ranks,
                                                             iterations=iterations, runs=2, coll_every=0), store)
    store.close()
    done.write_text(str(sum(res.n_bursts)))
    return res.traces, sum(res.n_bursts), time.perf_counter() - t0


def scale_memory(ranks: int = 256, iterations: int = 2000, keep: Path | None = None) -> list[dict]:
    """Peak resident memory of ``synthtrace.merge`` (its own process, reading from the warehouse as the CLI does)
    on a ``ranks`` x ``iterations`` 2-run campaign: the simulator's halo (vectorised engine, one exchange with
    Testall polling per iteration, no world collective), each trace ingested in its own process first.
    ``keep``: a folder that keeps the simulated traces between calls."""
    with tempfile.TemporaryDirectory() as tmp:
        traces, n_bursts, sim = simulate_scale(keep or Path(tmp), ranks, iterations)
        wh = str(Path(tmp) / "wh")
        for trace in traces:
            out = _child(_INGEST.format(root=str(ROOT), wh=wh, trace=str(trace)))
            if out.returncode:
                return [{"ranks": ranks, "iterations": iterations, "outcome": "ingest failed: "
                         + out.stderr.strip().splitlines()[-1][:200]}]
        size = sum(t.stat().st_size for t in traces)
        out = _child(_MERGE.format(root=str(ROOT), wh=wh))
    if out.returncode:
        return [{"ranks": ranks, "iterations": iterations,
                 "outcome": "merge failed: " + out.stderr.strip().splitlines()[-1][:200]}]
    peak_kb, merge_s = out.stdout.split()[-2:]
    return [{"ranks": ranks, "iterations": iterations, "bursts (2 runs)": n_bursts,
             "traces GB": round(size / 2**30, 2), "merge peak RSS GB": round(int(peak_kb) / 2**20, 2),
             "merge s": round(float(merge_s), 1), "simulation s": round(sim, 1)}]


# ------------------------------------------------------------------------------------------------ report
def _pct(v: float | None) -> str:
    return "" if v is None else f"{100 * v:.2f} %"


def md(df: pl.DataFrame) -> str:
    lines = ["| " + " | ".join(df.columns) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join("" if v is None else str(v) for v in row) + " |" for row in df.iter_rows()]
    return "\n".join(lines)


def _cell(rs: list[dict]) -> str:
    """One label's result on one mechanism: worst right (right with the span's interchangeable bursts when it
    differs), verdicts, accepted seeds (and how many said ``ok`` below 99 %)."""
    if not rs:
        return ""
    rights = [r["right"] for r in rs if r["right"] is not None]
    spans = [r["right_span"] for r in rs if r["right_span"] is not None]
    right = _pct(min(rights)) if rights else "refused"
    if spans and rights and abs(min(spans) - min(rights)) > 1e-9:
        right += f" ({_pct(min(spans))} span)"
    silent = sum(r["silent"] for r in rs)
    return (f"{right}, {'/'.join(sorted({r['verdict'] for r in rs}))}, {sum(r['accepted'] for r in rs)}/{len(rs)}"
            + (f" **{silent} silent**" if silent else ""))


def mechanism_table(store: dict) -> str:
    """Mechanisms as rows, one column per label: worst right, verdicts, accepted/seeds."""
    labels = list(store)
    names = [n for n in MECHANISMS if n != "plain"]
    out = []
    for n in names:
        row = {"mechanism": n, "what": MECHANISMS[n][0]}
        for lab in labels:
            row[lab] = _cell([r for r in store[lab]["rows"] if r["mechanism"] == n])
        out.append(row)
    return md(pl.DataFrame(out))


def plain_table(store: dict) -> str:
    out = []
    for lab, res in store.items():
        rs = [r for r in res["rows"] if r["mechanism"] == "plain"]
        if not rs:
            continue
        rights = [r["right"] for r in rs if r["right"] is not None]
        out.append({"label": lab, "campaigns": len(rs), "refused": sum(r["verdict"] == "refused" for r in rs),
                    "below 99.5 %": sum(r["right"] is not None and r["right"] < 0.995 for r in rs),
                    "silent (ok below 99 %)": sum(r["silent"] for r in rs),
                    "min right": _pct(min(rights)) if rights else "",
                    "median right": _pct(float(np.median(rights))) if rights else "",
                    "verdicts": ", ".join(f"{v} {sum(r['verdict'] == v for r in rs)}"
                                          for v in ("ok", "suspect", "bad", "refused")
                                          if any(r["verdict"] == v for r in rs))})
    return md(pl.DataFrame(out)) if out else "(not run)"


def report(store: dict) -> str:
    text = ["# Merge on the run-to-run mechanisms of issue 22", "",
            "Script: `benchmarks/bench_merge_mechanisms.py` (see its docstring for the columns). Campaigns from "
            "`synthtrace.simulator.mechanisms` (an event-driven MPI executor: completion calls complete what has "
            "arrived, polls follow timing, ANY_SOURCE receives and farm assignments follow arrivals), read back "
            "from their Paraver traces and merged with default options.", ""]
    for lab, res in store.items():
        cpu = f" ({res['cpu_s']:.0f} s CPU)" if res.get("cpu_s") else ""
        text.append(f"- `{lab}`: {res['when']}, commit {res['commit']}, `{res['command']}`, {res['seconds']:.0f} s"
                    f"{cpu}, load average at the end {res['load']:.1f}; {res['machine']}"
                    + (f". {res['note']}" if res.get("note") else ""))
        text += [f"  - rerun {r['when']}, commit {r['commit']}: `{r['command']}`, {r['seconds']:.0f} s, load "
                 f"{r['load']:.1f}" for r in res.get("reruns", [])]
    text += ["", "## Per mechanism (default sizes; the worst seed)", "",
             "Each cell: the worst seed's right share (with the undecidable span's interchangeable bursts counted "
             "right, where that differs), the verdicts, accepted seeds / seeds (issue 22's rule); **silent**: "
             "verdict `ok` below 99 % right. Empty: not run with that label (the mechanism came later).", "",
             mechanism_table(store), "",
             "## Plain 2-run campaigns (4-16 ranks, 8-60 iterations, one random valid application per seed)", "",
             plain_table(store), ""]
    for key, title in (("scale_time", "Time per burst, 1,000 vs 10,000 iterations (4 ranks, 2 runs)"),
                       ("scale_memory", "Peak memory, 256 ranks x 2,000 iterations, 2 runs")):
        for lab, res in store.items():
            if res.get(key):
                text += [f"## {title}: `{lab}`", "", md(pl.DataFrame(res[key])), ""]
    failing = {lab: [f"{r['mechanism']} seed {r['seed']}: {r['message']}" for r in res["rows"]
                     if r["verdict"] == "refused"] for lab, res in store.items()}
    for lab, msgs in failing.items():
        if msgs:
            text += [f"Refusals (`{lab}`): " + "; ".join(sorted(set(msgs))[:8]), ""]
    return "\n".join(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--label", required=True, help="name of this code's column (before, after, ...)")
    ap.add_argument("--quick", action="store_true", help="1 seed per mechanism and 20 plain campaigns")
    ap.add_argument("--seeds", type=int, default=None, help="seeds per mechanism (default 2; quick 1)")
    ap.add_argument("--plain", type=int, default=None, help="plain campaigns (default 200; quick 20)")
    ap.add_argument("--plain-from", type=int, default=0,
                    help="first plain seed (with --mechanisms plain: run a chunk of seeds, e.g. 50 from 100)")
    ap.add_argument("--scale-time", action="store_true", help="also time 1k vs 10k iterations")
    ap.add_argument("--scale-memory", action="store_true", help="also the 256-rank x 2,000-iteration peak memory")
    ap.add_argument("--only-scale", action="store_true", help="only the scale checks (keep the label's rows)")
    ap.add_argument("--mechanisms", default="",
                    help="comma-separated: rerun only these (their rows replaced); all: every mechanism but plain")
    ap.add_argument("--part", default="1/1", help="K/N: only the K-th of N slices of the campaigns asked for")
    ap.add_argument("--log", type=Path, default=None,
                    help="JSON lines, one row per campaign as it is scored (default: $TMPDIR/merge_mechanisms."
                         "<label>.jsonl)")
    ap.add_argument("--from-log", type=Path, nargs="+", default=None,
                    help="add the rows of these --log files to the label (a stopped part's finished campaigns)")
    ap.add_argument("--scale-dir", type=Path, default=None, help="keep the scale campaign's traces here")
    ap.add_argument("--note", default="", help="a sentence on what code ran (printed with the label)")
    ap.add_argument("--report-only", action="store_true", help="only rewrite the Markdown from the stored results")
    ap.add_argument("--cache", type=Path, default=None,
                    help="keep simulated campaigns here and reuse them (keyed by the generator's source)")
    ap.add_argument("--simulate-only", action="store_true", help="with --cache: only simulate into it")
    ap.add_argument("--store", type=Path, default=STORE, help="JSON of every label's results")
    ap.add_argument("--out", type=Path, default=OUT, help="the Markdown table")
    args = ap.parse_args()
    seeds = args.seeds if args.seeds is not None else (1 if args.quick else 2)
    plain = args.plain if args.plain is not None else (20 if args.quick else 200)
    if args.report_only:
        emit(report(json.loads(args.store.read_text()) if args.store.is_file() else {}), args.out)
        return
    t0 = time.perf_counter()
    only = [m for m in args.mechanisms.split(",") if m]
    k, n = (int(x) for x in args.part.split("/"))
    part = args.part != "1/1"
    jobs = campaigns(seeds, plain, only, args.plain_from, (k, n))
    if args.simulate_only:
        mechanism_rows(jobs, args.cache, simulate_only=True)
        return
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", args.label)
    log = args.log or Path(tempfile.gettempdir()) / f"merge_mechanisms.{slug}.jsonl"
    new: dict = {}
    if args.from_log:
        new["rows"] = logged_rows(args.from_log)
    elif not args.only_scale:
        new["rows"] = mechanism_rows(jobs, args.cache, log=log)
    if args.scale_time:
        new["scale_time"] = scale_time(args.cache)
    if args.scale_memory:
        new["scale_memory"] = scale_memory(keep=args.scale_dir)
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()
    run = {"when": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "commit": commit,
           "command": "python benchmarks/bench_merge_mechanisms.py " + " ".join(sys.argv[1:]),
           "seconds": time.perf_counter() - t0, "load": os.getloadavg()[0], "machine": machine(),
           "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
           "cpu_s": sum(getattr(resource.getrusage(w), f) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
                        for f in ("ru_utime", "ru_stime")), "note": args.note}
    whole = not (only or part or args.only_scale or args.from_log)
    emit(report(save(args.store, args.label, new, run, whole)), args.out)


def save(path: Path, label: str, new: dict, run: dict, whole: bool) -> dict:
    """Add one run's results to label ``label`` of the store at ``path`` (re-read under a lock, so that parts
    running at once lose nothing) and return the store. ``whole``: the run replaces the label's rows; else its
    rows replace those of the same mechanism and seed, and it is listed as a rerun of the label."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = os.open(path.parent, os.O_RDONLY)  # the store's folder: no lock file left beside the results
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        store = json.loads(path.read_text()) if path.is_file() else {}
        entry = {} if whole else store.get(label, {})
        rows = new.pop("rows", [])
        done = {(r["mechanism"], r["seed"]) for r in rows}
        entry["rows"] = [r for r in entry.get("rows", []) if (r["mechanism"], r["seed"]) not in done] + rows
        entry |= new
        if not whole and "command" in entry:
            entry.setdefault("reruns", []).append(run)  # a part: the label's first run stays its header
        else:
            entry |= run
        store[label] = entry
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(store, indent=1, default=str))
        tmp.replace(path)
    finally:
        os.close(lock)  # closing the descriptor releases the lock
    return store


if __name__ == "__main__":
    main()
