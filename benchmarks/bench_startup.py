"""CLI start-up (issue 16): wall time and peak RSS of ``synthtrace --help``, ``runs`` and ``sql "SELECT 1"``, each in
a fresh interpreter, with the commands loaded lazily (what ships) against the baseline of importing every command
module up front (what the CLI did before: ``eager``), in the same run.

Ingests the real prime trace (``../shared/traces/paraver/prime_v0.prv``) into a temporary warehouse first.

    python benchmarks/bench_startup.py [--repeat 7] [--out benchmarks/results/startup.md]

Reports the fastest of ``--repeat`` runs (the least disturbed by other load) and the median, with the load
average, since the machine may be shared.
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
from benchmarks.machine import machine_description  # noqa: E402
from benchmarks.results_io import emit  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PRIME = ROOT.parent / "shared" / "traces" / "paraver" / "prime_v0.prv"
_RSS = ("import atexit, resource, sys; atexit.register(lambda: sys.stderr.write("
        "f'\\nRSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}\\n')); ")
LAZY = _RSS + "from synthtrace.pipelines.cli import main; import sys; sys.exit(main(sys.argv[1:]))"
# the baseline: every command module imported before the command line is parsed
EAGER = (_RSS + "import importlib, sys; from synthtrace.pipelines.cli import COMMANDS, main; "
         "[importlib.import_module('synthtrace.pipelines.' + m) for m, _ in COMMANDS.values()]; "
         "sys.exit(main(sys.argv[1:]))")


def run_once(code: str, args: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS MiB) of one fresh interpreter running ``code`` with ``args``."""
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{args}: exit {p.returncode}: {p.stderr.strip()[-300:]}")
    rss_kib = int(p.stderr.rsplit("RSS ", 1)[1].split()[0])
    return wall, rss_kib / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "startup.md")
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        wh = Path(tmp) / "wh"
        subprocess.run([sys.executable, "-c", LAZY, "ingest", str(PRIME), "-w", str(wh)], check=True,
                       capture_output=True)
        commands = {"--help": ["--help"], "runs": ["runs", "-w", str(wh)],
                    'sql "SELECT 1"': ["sql", "SELECT 1", "-w", str(wh)]}
        load = os.getloadavg()
        rows = []
        for label, args in commands.items():
            for variant, code in (("lazy (shipped)", LAZY), ("eager (baseline)", EAGER)):
                runs = [run_once(code, args) for _ in range(opts.repeat)]
                walls = [w for w, _ in runs]
                rows.append(f"| `synthtrace {label}` | {variant} | {min(walls):.3f} | {statistics.median(walls):.3f} "
                            f"| {max(r for _, r in runs):.0f} |")
        load_after = os.getloadavg()
    text = "\n".join([
        "# CLI start-up",
        "",
        f"Machine: {machine_description()}; load average {load[0]:.2f} before, {load_after[0]:.2f} after "
        f"(other engineers' jobs share the cores). Each command in a fresh interpreter, {opts.repeat} runs; "
        "`python benchmarks/bench_startup.py`.",
        "",
        "| command | commands loaded | fastest s | median s | peak RSS MiB |",
        "|---|---|---|---|---|",
        *rows,
        "",
        "lazy: `pipelines/cli.py` imports only the module of the command being run (the `--help` listing comes from "
        "`cli.COMMANDS`); eager: every `pipelines/cli_*.py` imported first, as before. Peak RSS: the "
        "interpreter's own getrusage maximum at exit.",
        "",
    ])
    emit(text, opts.out)


if __name__ == "__main__":
    main()
