"""CLI start-up (issue 16): wall time, CPU time and peak RSS of ``synthtrace --help``, ``runs`` and
``sql "SELECT 1"``, each in a fresh interpreter, this checkout against the package of an earlier commit
(``--baseline``, extracted with git archive), in the same run; and, as the floor no command can go below, the
bare interpreter and the imports the commands cannot avoid (typer with the pydantic it coerces parameters with,
rich's console, DuckDB).

Ingests the real prime trace (``../shared/traces/paraver/prime_v0.prv``) into a temporary warehouse first.

    python benchmarks/bench_startup.py [--repeat 7] [--baseline 2562d47] [--out benchmarks/results/startup.md]

Reports the fastest of ``--repeat`` runs (the least disturbed by other load), the median and the CPU time
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
PRIME = ROOT.parent / "shared" / "traces" / "paraver" / "prime_v0.prv"
_RSS = ("import atexit, resource, sys; atexit.register(lambda: sys.stderr.write("
        "f'\\nRSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}\\n')); ")
CLI = "from synthtrace.pipelines.cli import main; import sys; sys.exit(main(sys.argv[1:]))"
#: what every command pays before its own work: the interpreter, and the imports a command cannot avoid
FLOOR = {"python (bare interpreter)": "pass", "import typer + pydantic (typer coerces parameters with it)":
         "import typer, pydantic", "import rich.console": "import rich.console", "import duckdb": "import duckdb"}


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
    return (f"| {label} | {variant} | {min(walls):.3f} | {statistics.median(walls):.3f} "
            f"| {min(c for _, c, _ in runs):.3f} | {max(r for _, _, r in runs):.0f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--baseline", default="2562d47", help="commit before the start-up cut")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "startup.md")
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        here = Path(tmp)  # never the checkout: its synthtrace/ folder would shadow the installed package
        old = baseline_tree(opts.baseline, here / "baseline")
        wh = here / "wh"
        subprocess.run([sys.executable, "-c", CLI, "ingest", str(PRIME), "-w", str(wh)], check=True,
                       capture_output=True, cwd=here)
        commands = {"--help": ["--help"], "runs": ["runs", "-w", str(wh)],
                    'sql "SELECT 1"': ["sql", "SELECT 1", "-w", str(wh)]}
        load = os.getloadavg()
        rows = []
        for label, args in commands.items():
            for variant, path in (("this checkout", None), (f"baseline ({opts.baseline})", old)):
                runs = [run_once(CLI, args, here, path) for _ in range(opts.repeat)]
                rows.append(row(f"`synthtrace {label}`", variant, runs))
        floor = [row(label, "floor", [run_once(code, [], here) for _ in range(opts.repeat)])
                 for label, code in FLOOR.items()]
        load_after = os.getloadavg()
    text = "\n".join([
        "# CLI start-up",
        "",
        f"Machine: {machine_description()}; load average {load[0]:.2f} before, {load_after[0]:.2f} after "
        f"(other engineers' jobs share the cores). Each command in a fresh interpreter, {opts.repeat} runs; "
        "`python benchmarks/bench_startup.py`.",
        "",
        "| command | code | fastest wall s | median wall s | CPU s (user+sys, fastest) | peak RSS MiB |",
        "|---|---|---|---|---|---|",
        *rows,
        *floor,
        "",
        "this checkout: `synthtrace`, `--help` and `--version` are answered from `cli.COMMANDS` without importing "
        "typer or rich; `runs` and `sql` import typer (and the pydantic it coerces every parameter with), rich and "
        "DuckDB, but neither polars nor pyarrow (DuckDB's rows are printed directly; the empty views of a "
        "warehouse without runs or MPI calls still import polars for their schema). Floor rows: what every "
        "command of that kind pays before its own work. Peak RSS: the interpreter's own getrusage maximum at exit.",
        "",
    ])
    emit(text, opts.out)


if __name__ == "__main__":
    main()
