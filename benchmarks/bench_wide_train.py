"""Peak RSS of ``train`` and ``predict`` on an experiment holding a run whose bursts sample many counter types
(issue 23: one of 4,096 per burst, each a mostly-NULL column of the stored bursts) beside a narrow run that
training learns from, by the code of ``--before-rev`` and by this checkout, each command in a fresh process
(``/usr/bin/time``, nice 10), killed when its process tree passes ``--kill-mb``.

    python benchmarks/bench_wide_train.py --before-rev bf09749 [N ...]   # default 10000 40000 150000 wide bursts

The experiment: ``wide.prv`` (one thread, burst i with ONE sample of counter type 42000000 + i % 4096, no .pcf:
attack 18 F2's run) and ``narrow.prv`` (2,000 bursts of 1e5-1e6 instructions with cycles, L1 misses, branches and
a native counter, named by its .pcf). ``predict`` applies one model, trained on the smallest case by this
checkout's code and copied into every warehouse.
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.bench_ingest import exported  # noqa: E402
from benchmarks.bench_wide_runs import wide_trace  # noqa: E402
from benchmarks.machine import machine_description  # noqa: E402

NARROW_PCF = ("EVENT_TYPE\n7  42000050 PAPI_TOT_INS [Instr completed]\n7  42000059 PAPI_TOT_CYC [Total cycles]\n"
              "7  42000000 PAPI_L1_DCM [L1D cache misses]\n7  42000055 PAPI_BR_INS [Branches]\n"
              "7  44000001 MY_NATIVE_EVENT [a native]\n")


def narrow_trace(path: Path, n: int = 2_000, seed: int = 1) -> Path:
    """A one-thread trace of ``n`` bursts of 0.9 ms whose IPC follows their L1 misses (with its .pcf)."""
    rnd = random.Random(seed)
    with path.open("w") as f:
        f.write("#Paraver (01/01/26 at 00:00):%d_ns:1(1):1:1(1:1)\n" % (1_000_000 * (n + 1)))
        for i in range(n):
            ins = rnd.randrange(10**5, 10**6)
            l1, br = int(ins * rnd.uniform(0.001, 0.05)), int(ins * rnd.uniform(0.05, 0.2))
            cyc, mine = int(ins / (2.5 - 30 * l1 / ins) * rnd.uniform(0.97, 1.03)), int(ins * rnd.uniform(0, 0.1))
            t = 1_000_000 * i
            f.write(f"1:1:1:1:1:{t}:{t + 900_000}:1\n2:1:1:1:1:{t + 900_000}:42000050:{ins}:42000059:{cyc}:"
                    f"42000000:{l1}:42000055:{br}:44000001:{mine}\n1:1:1:1:1:{t + 900_000}:{t + 1_000_000}:0\n")
    path.with_suffix(".pcf").write_text(NARROW_PCF)
    return path


def _tree_rss_kb(pid: int) -> int:
    """The resident set of ``pid`` and its descendants (kB)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            total += int(next(ln.split()[1] for ln in Path(f"/proc/{p}/status").read_text().splitlines()
                              if ln.startswith("VmRSS")))
            todo += [int(c) for t in Path(f"/proc/{p}/task").iterdir()
                     for c in (t / "children").read_text().split()]
        except (OSError, StopIteration):
            continue
    return total


def measure(tree: Path, kill_mb: int, *args: str) -> tuple[str, float, float]:
    """(exit code or 'killed', peak RSS in MB, wall s) of ``synthtrace ARGS`` run with ``tree``'s code."""
    code = f"import sys; sys.path.insert(0, {str(tree)!r}); from synthtrace.pipelines.cli import main; " \
           "sys.exit(main(sys.argv[1:]))"
    with tempfile.NamedTemporaryFile("r") as t:
        start = time.monotonic()
        proc = subprocess.Popen(["nice", "-n", "10", "/usr/bin/time", "-f", "%M", "-o", t.name, sys.executable, "-c",
                                 code, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        killed = False
        while proc.poll() is None:
            if _tree_rss_kb(proc.pid) > kill_mb * 1024:
                for c in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split():
                    os.kill(int(c), 9)  # nice's child: /usr/bin/time, whose child is the command
                killed = True
            time.sleep(0.2)
        wall = time.monotonic() - start
        peak = [ln for ln in t.read().split() if ln.isdigit()]
    return ("killed" if killed else str(proc.returncode)), int(peak[-1]) / 1024 if peak else kill_mb, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sizes", nargs="*", type=int, default=[10_000, 40_000, 150_000])
    ap.add_argument("--before-rev", required=True)
    ap.add_argument("--kill-mb", type=int, default=3_000)
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-wide-train-") as tmp:
        tmp = Path(tmp)
        trees = {opts.before_rev: exported(opts.before_rev, tmp / "before"), "this checkout": ROOT}
        print(machine_description(), "| load", " ".join(f"{x:.1f}" for x in os.getloadavg()))
        print("| wide bursts | command | code | exit | peak RSS (MB) | wall (s) |\n|---|---|---|---|---|---|")
        model = None
        for n in sorted(opts.sizes):
            (tmp / "w").mkdir()
            wide_trace(tmp / "w" / "wide.prv", n)
            narrow_trace(tmp / "w" / "narrow.prv")
            wh = tmp / f"wh{n}"
            subprocess.run([sys.executable, "-c", "import sys; from synthtrace.pipelines.cli import main; "
                            "sys.exit(main(sys.argv[1:]))", "ingest", str(tmp / "w"), "--experiment", "w",
                            "-w", str(wh)], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                           check=True, capture_output=True)
            shutil.rmtree(tmp / "w")
            if model is None:  # one model for every predict: trained by this checkout on the smallest case
                measure(ROOT, opts.kill_mb, "train", "--target", "ipc", "-w", str(wh))
                trained = next((wh / "models").iterdir())
                model = Path(shutil.copytree(trained, tmp / "model" / trained.name))
            else:
                shutil.copytree(model, wh / "models" / model.name)
            for side, tree in trees.items():
                for what, args in (("train", ("train", "--target", "ipc")),
                                   ("predict", ("predict", "--experiment", "w", "--model", model.name))):
                    rc, mb, wall = measure(tree, opts.kill_mb, *args, "-w", str(wh))
                    print(f"| {n:,} | {what} | {side} | {rc} | {mb:,.0f} | {wall:.0f} |", flush=True)
            shutil.rmtree(wh)
        print("load after", " ".join(f"{x:.1f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
