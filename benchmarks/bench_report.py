"""HTML report build time and size (issue 16): ``build_report`` of this checkout against the baseline report module
of an earlier commit (``--baseline``, default the commit before the fix), same warehouse, same run.

    python benchmarks/bench_report.py --warehouse WH [--baseline 17d4cbb] [--out benchmarks/results/report.md]

WH is any analysed or unanalysed warehouse (e.g. the one the README's Everyday use block leaves: the LULESH pair
plus the simulated campaign of ``synthtrace simulate sim/ --pattern all --runs 4``). Each build runs in a fresh
interpreter.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.machine import machine_description  # noqa: E402
from benchmarks.results_io import emit  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BUILD = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("report_under_test", sys.argv[1])
mod = importlib.util.module_from_spec(spec); sys.modules[spec.name] = mod; spec.loader.exec_module(mod)
mod.build_report(sys.argv[2], sys.argv[3])
"""


def build(module: Path, warehouse: Path, out: Path) -> tuple[float, int, int]:
    """(seconds, bytes, sections) of one report build in a fresh interpreter."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", BUILD, str(module), str(warehouse), str(out)], check=True,
                   capture_output=True, cwd=ROOT)
    text = out.read_text(encoding="utf-8")
    return time.perf_counter() - t0, out.stat().st_size, text.count("<h2>Experiment ")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--warehouse", type=Path, required=True)
    ap.add_argument("--baseline", default="17d4cbb")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "report.md")
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "report_baseline.py"
        old.write_text(subprocess.run(["git", "show", f"{opts.baseline}:pipelines/report.py"], cwd=ROOT, check=True,
                                      capture_output=True, text=True).stdout)
        load = os.getloadavg()
        rows = []
        for label, module in ((f"baseline ({opts.baseline})", old), ("this checkout", ROOT / "pipelines" / "report.py")):
            secs, size, sections = build(module, opts.warehouse, Path(tmp) / "r.html")
            rows.append(f"| {label} | {secs:.1f} | {size / 1e6:.2f} | {sections} |")
        load_after = os.getloadavg()
    text = "\n".join([
        "# HTML report",
        "",
        f"Machine: {machine_description()}; load average {load[0]:.2f} before, {load_after[0]:.2f} after (shared "
        f"cores). Warehouse: {opts.warehouse.name} with "
        f"{sum(1 for _ in (opts.warehouse / 'runs').glob('*/run.parquet'))} runs. "
        "`python benchmarks/bench_report.py --warehouse WH`.",
        "",
        "| report module | build s | MB | experiment sections |",
        "|---|---|---|---|",
        *rows,
        "",
        "The baseline drew three plots per run of every experiment and one section per (application, experiment) "
        "pair; this checkout draws one run's plots per experiment and one section per experiment.",
        "",
    ])
    emit(text, opts.out)


if __name__ == "__main__":
    main()
