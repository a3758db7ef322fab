"""CLI start-up (issue 16): wall time, CPU time and peak RSS of ``synthtrace --help``, ``runs``,
``sql "SELECT 1"`` and ``ingest`` of a trace already stored (its arguments read without typer, issue 27), each in
a fresh interpreter, this checkout against the package of an earlier commit (``--baseline``, extracted with git
archive), in the same run, the two alternating; and, as the floor no command can go below, the bare interpreter and
the work the commands cannot avoid (DuckDB's import and one connection, rich's console and table), beside typer with
the pydantic it coerces parameters with (what the fast path skips).

Ingests every real Paraver trace (``../shared/traces/paraver/``) into a temporary warehouse first.

    python benchmarks/bench_cli_startup.py [--repeat 11] [--baseline 2dc5e0b] [--out benchmarks/results/cli_startup.md]

Reports the median and the fastest of ``--repeat`` runs (the least disturbed by other load) and the median CPU time
(user + system, what the command costs on a quiet machine), with the load average, since the machine may be shared.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.baseline import baseline_tree
from benchmarks.machine import machine_description
from benchmarks.results_io import emit

ROOT = Path(__file__).resolve().parents[1]
PARAVER = ROOT.parent / "shared" / "traces" / "paraver"
_RSS = ("import atexit, resource, sys; atexit.register(lambda: sys.stderr.write("
        "f'\\nRSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}\\n')); ")
CLI = "from synthtrace.pipelines.cli import main; import sys; sys.exit(main(sys.argv[1:]))"
#: what every command pays before its own work: the interpreter, and the imports a command cannot avoid
FLOOR = {"python (bare interpreter)": "pass",
         "DuckDB's engine (_duckdb), one connection; import rich.console, rich.table":
         "import _duckdb, rich.console, rich.table; _duckdb.connect(':memory:')",
         "import duckdb (the whole package), one connection; rich (before this session's change)":
         "import duckdb, rich.console, rich.table; duckdb.connect(':memory:')",
         "import typer + pydantic (skipped by the fast path)": "import typer, pydantic"}


def run_once(code: str, args: list[str], cwd: Path, pythonpath: Path | None = None) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, peak RSS MiB) of one fresh interpreter running ``code`` with ``args``."""
    env = {**os.environ, **({"PYTHONPATH": str(pythonpath)} if pythonpath else {})}
    before = os.times()
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", _RSS + code, *args], capture_output=True, text=True, cwd=cwd, env=env,
                       check=False)
    wall = time.perf_counter() - t0
    after = os.times()
    if p.returncode != 0:
        raise SystemExit(f"{args}: exit {p.returncode}: {p.stderr.strip()[-300:]}")
    rss_kib = int(p.stderr.rsplit("RSS ", 1)[1].split()[0])
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return wall, cpu, rss_kib / 1024


def row(label: str, variant: str, runs: list[tuple[float, float, float]]) -> str:
    walls = [w for w, _, _ in runs]
    return (f"| {label} | {variant} | {statistics.median(walls):.3f} | {min(walls):.3f} "
            f"| {statistics.median(c for _, c, _ in runs):.3f} | {max(r for _, _, r in runs):.0f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=11)
    ap.add_argument("--baseline", default="2dc5e0b", help="commit before the fast path (typer for runs and sql)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "cli_startup.md")
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        here = Path(tmp)  # never the checkout: its synthtrace/ folder would shadow the installed package
        old = baseline_tree(opts.baseline, here / "baseline")
        wh = here / "wh"
        subprocess.run([sys.executable, "-c", CLI, "ingest", str(PARAVER), "-w", str(wh)], check=True,
                       capture_output=True, cwd=here)
        commands = {"--help": ["--help"], "runs": ["runs", "-w", str(wh)],
                    'sql "SELECT 1"': ["sql", "SELECT 1", "-w", str(wh)],
                    "ingest TRACE (already stored)": ["ingest", str(PARAVER / "prime_v0.prv"), "-w", str(wh)]}
        load = os.getloadavg()
        rows = []
        for label, args in commands.items():
            variants = {"this checkout": None, f"baseline ({opts.baseline})": old}
            runs = {name: [] for name in variants}
            for _ in range(opts.repeat):  # alternating, so that both see the same load
                for name, path in variants.items():
                    runs[name].append(run_once(CLI, args, here, path))
            rows += [row(f"`synthtrace {label}`", name, r) for name, r in runs.items()]
        floor = [row(label, "floor", [run_once(code, [], here) for _ in range(opts.repeat)])
                 for label, code in FLOOR.items()]
        load_after = os.getloadavg()
    text = "\n".join([
        "# CLI start-up",
        "",
        f"Machine: {machine_description()}; load average {load[0]:.2f} before, {load_after[0]:.2f} after "
        f"(other engineers' jobs share the cores). Each command in a fresh interpreter, {opts.repeat} runs; "
        "`python benchmarks/bench_cli_startup.py`; the warehouse holds every trace of `../shared/traces/paraver/`.",
        "",
        "| command | code | median wall s | fastest wall s | median CPU s (user+sys) | peak RSS MiB |",
        "|---|---|---|---|---|---|",
        *rows,
        *floor,
        "",
        "this checkout: `synthtrace`, `--help` and `--version` are answered from `cli.COMMANDS` without importing "
        "typer or rich; `runs`, `sql` and `ingest` with the options they take are read without typer's parse "
        "(`pipelines/cli_read.py`), importing DuckDB's engine (`_duckdb`, not the package's Python layer: "
        "`warehouse/engine.py`) and rich only, and the query's connection gets only the views it names. "
        "Baseline: typer (and pydantic) for runs and sql, the whole `duckdb` package, and every view created (its "
        "files listed and their schemas read) before each query. Floor rows: what a command of that kind cannot "
        "avoid. Peak RSS: the interpreter's own getrusage maximum at exit.",
        "",
    ])
    emit(text, opts.out)


if __name__ == "__main__":
    main()
