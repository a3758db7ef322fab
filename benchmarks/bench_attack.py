"""The attacker's and fault injector's families of issue 23, rerun against the code as it is: escaping exceptions,
data losses and peak memory.

Families (each counted; the run fails loudly if one case breaks its invariant):

1. **Paraver**: ``--paraver N`` structure-aware cases (:mod:`testing.attack_cases`: semantic defects of short real
   traces, floods, gzip) plus the gzip bomb, each ``synthtrace ingest``-ed by one long-lived worker process
   (a fresh process per case costs seconds of imports on a loaded machine). Invariant: exit 0, or exit 2 with one
   ``error:`` line; no traceback; a refused trace leaves no run, no staging and no new warehouse.
2. **OTF2**: ``--otf2 N`` archives with one semantic defect each (:mod:`testing.hostile_otf2`), same invariant.
   The worker's peak RSS over both families is the memory figure (every input went through it).
3. **Kills**: ``--kills N`` writer processes (forked) that swap an experiment folder again and again
   (``Warehouse.staged(replace=True)``) and are SIGKILLed at a random moment; a third of them have no atomic
   exchange and kill themselves exactly between the two renames. After each kill the next writer's
   ``ensure()`` must leave the folder whole, old or new (never missing, never mixed), and ``.staging`` empty.
4. **Queries**: ``--queries N`` queries from two threads while a forked writer adds and removes a second run
   (``staged`` / ``remove``): every answer must be a consistent state ((1 run, n bursts) or (2 runs, 2n)) and no
   query may fail.

    nice -n 19 python benchmarks/bench_attack.py [--paraver 2000] [--otf2 400] [--kills 100] [--queries 4000]

Writes benchmarks/results/attack.md (``--out``).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.machine import machine_description  # noqa: E402

MEMORY_CAP_MB = 1536

_WORKER = """
import contextlib, io, json, resource, sys, traceback
from synthtrace.pipelines.cli import main
for line in sys.stdin:
    case = json.loads(line)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(["ingest", *case["paths"], "-w", case["warehouse"]])
        except BaseException:
            code = -1
            err.write(traceback.format_exc())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10
    print(json.dumps({"code": code, "stderr": err.getvalue(), "peak_mb": peak}), flush=True)
"""


def _violation(case: dict, res: dict) -> str | None:
    """What is wrong with the outcome of one ingest, or None."""
    lines = [ln for ln in res["stderr"].splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error:")]
    if res["code"] not in (0, 2) or "Traceback" in res["stderr"]:
        return f"escaped: exit {res['code']}"
    if [ln for ln in lines if not ln.startswith(("error:", "warning:", "note:"))]:
        return "stray stderr"
    if (res["code"] == 2) != bool(errors) or len(errors) > 1:
        return "not one error line"
    wh = Path(case["warehouse"])
    if errors and wh.exists():
        return "a refused ingest left a warehouse"
    if not errors and len(list(wh.glob("runs/*/run.parquet"))) != 1:
        return "an accepted trace stored no run"
    if wh.exists() and list((wh / ".staging").iterdir()):
        return "staging left behind"
    return None


def ingest_family(cases: list[dict], timeout_s: float) -> dict:
    """Feed ``cases`` to one worker; counts, violations, peak MB."""
    proc = subprocess.Popen([sys.executable, "-c", _WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    out = {"cases": 0, "exit0": 0, "exit2": 0, "violations": [], "peak_mb": 0, "by_defect": {}}
    timer = threading.Timer(timeout_s, proc.kill)
    timer.start()
    try:
        for case in cases:
            proc.stdin.write(json.dumps(case) + "\n")
            proc.stdin.flush()
            line = proc.stdout.readline()
            if not line:
                out["violations"].append((case["defect"], "worker died or timed out", case["paths"]))
                break
            res = json.loads(line)
            out["cases"] += 1
            out["peak_mb"] = max(out["peak_mb"], res["peak_mb"])
            out["exit0" if res["code"] == 0 else "exit2"] += res["code"] in (0, 2)
            d = out["by_defect"].setdefault(case["defect"], [0, 0])
            d[0 if res["code"] == 0 else 1] += 1
            if (why := _violation(case, res)) is not None:
                out["violations"].append((case["defect"], why, case["paths"], res["stderr"][-500:]))
            if out["cases"] % 100 == 0:  # progress, and the figures so far should the run be cut short
                print(json.dumps({k: v for k, v in out.items() if k != "by_defect"} | {"violations": len(
                    out["violations"])}), flush=True)
            shutil.rmtree(Path(case["paths"][0]).parent, ignore_errors=True)
            shutil.rmtree(case["warehouse"], ignore_errors=True)
    finally:
        timer.cancel()
        proc.stdin.close()
        proc.wait()
    return out


# ------------------------------------------------------------------------------------------------------- kills
def _swapper(root: Path, window: bool, seed: int) -> None:
    """In a forked child: swap ``experiments/x`` forever (each version: files a, b, c holding its number); with
    ``window``, no exchange, and SIGKILL itself between the two renames of its first swap after a few."""
    from synthtrace.warehouse import layout

    wh = layout.Warehouse(root)
    rnd = random.Random(seed)
    if window:
        layout._exchange = lambda a, b: False
        real, left = os.rename, rnd.randint(0, 3)

        def rename(src, dst):
            nonlocal left
            real(src, dst)
            if ".old." in str(dst):
                if left == 0:
                    os.kill(os.getpid(), signal.SIGKILL)
                left -= 1
        os.rename = rename
    version = int((wh.experiment_dir("x") / "a").read_text())
    while True:
        version += 1
        with wh.staged(wh.experiment_dir("x"), replace=True) as stage:
            for name in "abc":
                (stage / name).write_text(str(version))


def kill_family(base: Path, n: int, rnd: random.Random) -> dict:
    from synthtrace.warehouse.layout import Warehouse

    out = {"kills": 0, "window_kills": 0, "recovered_new": 0, "violations": []}
    for k in range(n):
        root = base / f"k{k}"
        wh = Warehouse(root).ensure()
        target = wh.experiment_dir("x")
        target.mkdir()
        for name in "abc":
            (target / name).write_text("0")
        window = k % 3 == 0
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            try:
                _swapper(root, window, k)
            finally:
                os._exit(1)
        if not window:
            time.sleep(rnd.uniform(0.0, 0.05))
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        out["kills"] += 1
        out["window_kills"] += window and os.WTERMSIG(status) == signal.SIGKILL
        in_window = not target.exists()
        Warehouse(root).ensure()  # the next writer recovers
        if not target.is_dir():
            out["violations"].append((k, "the folder is gone"))
        else:
            versions = {(target / name).read_text() for name in "abc" if (target / name).is_file()}
            if len(versions) != 1 or len(list(target.iterdir())) != 3:
                out["violations"].append((k, f"mixed or partial folder {versions}"))
        if list(wh.staging_dir.iterdir()):
            out["violations"].append((k, "staging left behind"))
        out["recovered_new"] += in_window
        shutil.rmtree(root)
    return out


# ----------------------------------------------------------------------------------------------------- queries
def _run_churn(root: Path, stop_after_s: float) -> None:
    """In a forked child: add a copy of the warehouse's run under a second id, then remove it, again and again."""
    from synthtrace.warehouse.layout import Warehouse

    wh = Warehouse(root)
    src = next(wh.runs_dir.iterdir())
    end, rnd = time.monotonic() + stop_after_s, random.Random(1)
    while time.monotonic() < end:
        with wh.staged(wh.run_dir("copy0000deadbeef")) as stage:
            shutil.copytree(src, stage, dirs_exist_ok=True)
        time.sleep(rnd.uniform(0.0, 0.05))  # the second run stays a moment
        wh.remove(wh.run_dir("copy0000deadbeef"))
        time.sleep(rnd.uniform(0.0, 0.05))


def query_family(base: Path, n: int) -> dict:
    from synthtrace.pipelines.cli import main
    from synthtrace.warehouse.layout import Warehouse
    from synthtrace.warehouse.sql import query_rows
    from testing.traces import PRIME

    root = base / "wh-queries"
    assert main(["ingest", str(PRIME), "-w", str(root)]) == 0
    wh = Warehouse(root)
    n_bursts = query_rows(wh, "SELECT count(*) FROM bursts")[1][0][0]
    out = {"queries": 0, "two_runs_seen": 0, "violations": [], "n_bursts": n_bursts}
    lock = threading.Lock()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            _run_churn(root, 3600)
        finally:
            os._exit(0)

    def reader(count: int) -> None:
        for _ in range(count):
            try:
                runs, bursts = query_rows(wh, "SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM bursts)")[1][0]
                bad = (runs, bursts) not in ((1, n_bursts), (2, 2 * n_bursts))
                why = f"inconsistent state: {runs} runs, {bursts} bursts" if bad else None
            except Exception as exc:
                runs, why = 0, f"{type(exc).__name__}: {exc}"
            with lock:
                out["queries"] += 1
                out["two_runs_seen"] += runs == 2
                if why:
                    out["violations"].append(why)

    try:
        threads = [threading.Thread(target=reader, args=(n // 2,)) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    return out


# -------------------------------------------------------------------------------------------------------- main
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--paraver", type=int, default=2000)
    ap.add_argument("--otf2", type=int, default=400)
    ap.add_argument("--kills", type=int, default=100)
    ap.add_argument("--queries", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=20261202)
    ap.add_argument("--timeout-s", type=float, default=3600.0, help="of each ingest family")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "attack.md")
    args = ap.parse_args()
    from testing.attack_cases import gzip_bomb, otf2_case, paraver_case

    rnd = random.Random(args.seed)
    base = Path(tempfile.mkdtemp(prefix="synthtrace-attack-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    report: dict[str, dict] = {}
    t_all = time.monotonic()
    try:
        if args.paraver:
            t0 = time.monotonic()
            cases = [{"paths": [str(gzip_bomb(base / "bomb"))], "warehouse": str(base / "bomb-wh"),
                      "defect": "gzip_bomb"}]
            for k in range(args.paraver):
                prv, defect = paraver_case(base / f"p{k}", rnd)
                cases.append({"paths": [str(prv)], "warehouse": str(base / f"p{k}-wh"), "defect": defect})
            report["paraver"] = ingest_family(cases, args.timeout_s) | {"seconds": time.monotonic() - t0}
            write_report(args, report, time.monotonic() - t_all)
        if args.otf2:
            t0 = time.monotonic()
            cases = []
            for k in range(args.otf2):
                anchor, defect = otf2_case(base / f"o{k}" / "archive", rnd)
                cases.append({"paths": [str(anchor)], "warehouse": str(base / f"o{k}-wh"), "defect": defect})
            report["otf2"] = ingest_family(cases, args.timeout_s) | {"seconds": time.monotonic() - t0}
            write_report(args, report, time.monotonic() - t_all)
        if args.kills:
            t0 = time.monotonic()
            report["kills"] = kill_family(base, args.kills, rnd) | {"seconds": time.monotonic() - t0}
            write_report(args, report, time.monotonic() - t_all)
        if args.queries:
            t0 = time.monotonic()
            report["queries"] = query_family(base, args.queries) | {"seconds": time.monotonic() - t0}
    finally:
        shutil.rmtree(base, ignore_errors=True)
    write_report(args, report, time.monotonic() - t_all)
    bad = sum(len(r["violations"]) for r in report.values())
    peak = max((report[f]["peak_mb"] for f in ("paraver", "otf2") if f in report), default=0)
    print(f"{bad} violations, peak {peak} MB; {args.out}")
    return 1 if bad or peak > MEMORY_CAP_MB else 0


def write_report(args: argparse.Namespace, r: dict[str, dict], total_s: float) -> None:
    """The figures of the families run so far, as markdown in ``args.out`` (rewritten after each family)."""
    load = os.getloadavg()[0]
    lines = [
        "# Attack rerun (issue 23)", "",
        f"`nice -n 19 python benchmarks/bench_attack.py --paraver {args.paraver} --otf2 {args.otf2} "
        f"--kills {args.kills} --queries {args.queries} --seed {args.seed}`; {total_s:.0f} s so far.", "",
        f"Machine: {machine_description()}; 1-minute load average {load:.1f} (shared by other sessions).",
        "",
        "| family | cases | exit 0 | exit 2 | escaping exceptions / violations | peak RSS | seconds |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    names = {"paraver": "Paraver (structure-aware + gzip bomb)", "otf2": "OTF2 (semantic defects)"}
    for fam in ("paraver", "otf2"):
        if (f := r.get(fam)) is not None:
            lines.append(f"| {names[fam]} | {f['cases']} | {f['exit0']} | {f['exit2']} | {len(f['violations'])} | "
                         f"{f['peak_mb']} MB | {f['seconds']:.0f} |")
    if (k := r.get("kills")) is not None:
        lines.append(f"| kill -9 of swapping writers | {k['kills']} ({k['window_kills']} between the two renames, "
                     f"{k['recovered_new']} found mid-swap) | | | {len(k['violations'])} data losses | | "
                     f"{k['seconds']:.0f} |")
    if (q := r.get("queries")) is not None:
        lines.append(f"| concurrent queries during runs add/rm | {q['queries']} ({q['two_runs_seen']} saw the added "
                     f"run) | | | {len(q['violations'])} | | {q['seconds']:.0f} |")
    lines += ["", f"Memory cap judged: {MEMORY_CAP_MB} MB for every input (the worker's peak over all its cases).", ""]
    for fam in ("paraver", "otf2"):
        if (f := r.get(fam)) is not None:
            lines += [f"Outcomes per {names[fam]} defect (exit 0 / exit 2):", "",
                      ", ".join(f"{d} {a}/{b}" for d, (a, b) in sorted(f["by_defect"].items())), ""]
    violations = [v for f in r.values() for v in f["violations"]]
    if violations:
        lines += ["Violations:", ""] + [f"- {v}" for v in violations[:50]] + [""]
    args.out.write_text("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
