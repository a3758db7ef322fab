"""The address space each command needs at least (attack 18 F4, attack 20 F9): the smallest ``prlimit --as`` under
which the command still ends with exit 0, found by bisection, and what it does one step below (a one-line refusal,
an out-of-memory line, an abort, a traceback).

Each command runs as the console script does (``synthtrace.pipelines.cli.main``) in a fresh interpreter, on the real
traces of ``../shared/traces``: ``ingest`` of a Paraver trace into a fresh warehouse; ``runs``, ``sql``, ``report``
on a warehouse holding it; ``merge`` of the two LULESH runs (a copy of the warehouse each time); ``demo`` into a
fresh folder (slow: minutes a run; ``--commands`` to leave it out).

    python benchmarks/bench_address_floors.py [--commands version,help,runs,sql,ingest,merge,report,demo,helps]
        [--low 64] [--high 4096] [--step 8] [--scan 640,800,1024]

``helps`` bisects ``synthtrace COMMAND --help`` for every command (what importing a command's module needs: a
floor no use of the command goes below). ``--scan`` also runs each command at those limits (MB) and says the outcome
of each. Limits are in MB (10^6 bytes, as ``prlimit --as`` and the attack's 640000000 count), ``--step`` the
resolution of the bisection.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.machine import machine_description

ROOT = Path(__file__).resolve().parents[1]
PARAVER = ROOT.parent / "shared" / "traces" / "paraver"
CLI = "import sys; from synthtrace.pipelines.cli import main; sys.exit(main(sys.argv[1:]))"
MB = 10**6


def outcome(args: list[str], limit_mb: int, prepare: Callable[[], None] | None = None) -> tuple[int, str]:
    """(exit code, what the command's end looked like) of one run of ``synthtrace args`` under ``limit_mb``."""
    if prepare is not None:
        prepare()
    p = subprocess.run(["prlimit", f"--as={limit_mb * MB}", sys.executable, "-c", CLI, *args],
                       capture_output=True, text=True, check=False, timeout=1800)
    err = p.stderr.strip().splitlines()
    if p.returncode == 0:
        kind = "ok"
    elif p.returncode < 0 or p.returncode == 134:
        kind = f"abort (signal {-p.returncode if p.returncode < 0 else 6}): {err[-1][:120] if err else ''}"
    elif any(line.startswith("Traceback") for line in err):
        kind = f"traceback: {err[-1][:120]}"
    else:
        kind = f"rc {p.returncode}: {err[-1][:160] if err else ''}"
    return p.returncode, kind


def floor(args: list[str], low: int, high: int, step: int, prepare: Callable[[], None] | None
          ) -> tuple[int, str]:
    """The smallest limit (MB, within ``step``) in [low, high] at which the command ends with exit 0 (assuming what
    passes at a limit passes above it), and the outcome one step below it."""
    rc, kind = outcome(args, high, prepare)
    if rc != 0:
        raise SystemExit(f"{args} fails at the highest limit, {high} MB: {kind}")
    below = "(passes at the lowest limit)"
    while high - low > step:
        mid = (low + high) // 2
        rc, kind = outcome(args, mid, prepare)
        if rc == 0:
            high = mid
        else:
            low, below = mid, kind
    return high, below


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--commands", default="version,help,runs,sql,ingest,merge,report,demo")
    ap.add_argument("--low", type=int, default=64)
    ap.add_argument("--high", type=int, default=4096)
    ap.add_argument("--step", type=int, default=8)
    ap.add_argument("--scan", default="")
    opts = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="address-floors-"))
    try:
        stored = tmp / "stored"
        subprocess.run([sys.executable, "-c", CLI, "ingest", str(PARAVER / "prime_v0.prv"), "-w", str(stored)],
                       check=True, capture_output=True)
        lulesh = tmp / "lulesh"
        lulesh.mkdir()
        for f in PARAVER.glob("lulesh_*"):
            shutil.copy(f, lulesh)
        pair = tmp / "pair"
        subprocess.run([sys.executable, "-c", CLI, "ingest", str(lulesh), "--experiment", "lulesh-8r", "-w",
                        str(pair)], check=True, capture_output=True)

        def fresh(path: Path, source: Path | None = None) -> Callable[[], None]:
            def prepare() -> None:
                shutil.rmtree(path, ignore_errors=True)
                if source is not None:
                    shutil.copytree(source, path)
            return prepare

        commands: dict[str, tuple[list[str], Callable[[], None] | None]] = {
            "version": (["--version"], None),
            "help": (["--help"], None),
            "runs": (["runs", "-w", str(stored)], None),
            "sql": (["sql", "select count(*) from bursts", "-w", str(stored)], None),
            "ingest": (["ingest", str(PARAVER / "prime_v0.prv"), "-w", str(tmp / "w")], fresh(tmp / "w")),
            "merge": (["merge", "lulesh-8r", "-w", str(tmp / "m")], fresh(tmp / "m", pair)),
            "report": (["report", "-w", str(stored), "-o", str(tmp / "r.html")], None),
            "demo": (["demo", "--out", str(tmp / "d")], fresh(tmp / "d")),
        }
        from synthtrace.pipelines.cli import COMMANDS

        commands.update({f"{name} --help": ([name, "--help"], None) for name in COMMANDS})
        print(f"machine: {machine_description()}")
        print(f"python: {sys.executable}")
        print("| command | floor (MB, prlimit --as) | one step below |\n|---|---|---|")
        for name in (c.strip() for c in opts.commands.split(",")):
            if name == "helps":  # every command's --help
                names = [n for n in commands if n.endswith(" --help")]
            else:
                names = [name]
            for name in names:
                args, prepare = commands[name]
                mb, below = floor(args, opts.low, opts.high, opts.step, prepare)
                print(f"| {name} | {mb} | {below} |", flush=True)
                for limit in (int(x) for x in opts.scan.split(",") if x):
                    print(f"|   at {limit} MB | | {outcome(args, limit, prepare)[1]} |", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
