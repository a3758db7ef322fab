"""Ingest cost against the number of runs already stored (issue 26 item 6): the 1st, 10th and 100th run.

A warehouse holds N stored runs (the real jacobi trace ingested once, then its run folder copied under N - 1 other
ids: what N nights leave behind, without N ingests); then another run of jacobi (its header's date changed: new
content, same program) is ingested and removed again, ``--repeat`` times, and the median is kept. jacobi's ``.pcf``
names no binary, so its program is matched by its symbols against the stored programs. Beside it, the baseline: the
two scans an ingest did before the indexes (every stored run's row read, to find a run of the same trace ingested
before its ``.pcf``; every stored run's ``program.json`` read, to match the program), timed on the same warehouses
in the same run. Each ingest's stored-row reads are counted too (what the test asserts).

    nice -n 10 python benchmarks/bench_ingest_scaling.py [--runs 1 10 100] [--repeat 5] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import polars as pl  # noqa: E402

from benchmarks.machine import machine_description  # noqa: E402
from benchmarks.results_io import emit  # noqa: E402
from synthtrace.warehouse import Warehouse  # noqa: E402
from synthtrace.tracelib.formats.program import program_symbols  # noqa: E402
from synthtrace.tracelib.formats.source import open_trace  # noqa: E402
from synthtrace.warehouse.ingest import existing_run, ingest_trace  # noqa: E402
from synthtrace.warehouse.programs import PROGRAM_FILE, SAME_PROGRAM_JACCARD, jaccard  # noqa: E402
from testing.stored_runs import another_run_of, warehouse_with_runs  # noqa: E402
from testing.traces import JACOBI  # noqa: E402


def old_scan(wh: Warehouse, path: Path) -> list[str]:
    """The lookups every Paraver ingest did before the indexes: read every stored run's row (runs of this trace
    without a .pcf) and every stored run's program.json (runs of the same program)."""
    found = []
    for run_file in wh.runs_dir.glob("*/run.parquet"):
        row = existing_run(wh, run_file.parent.name)
        if row and row["source_path"] == str(path.resolve()) and any("no .pcf file" in w
                                                                     for w in row["warnings"] or []):
            found.append(row["run_id"])
    symbols = program_symbols(open_trace(path)).symbols
    for f in sorted(wh.runs_dir.glob(f"*/{PROGRAM_FILE}")):
        stored = json.loads(f.read_text())
        if not stored.get("binary") and jaccard(symbols, frozenset(stored["symbols"])) >= SAME_PROGRAM_JACCARD:
            found.append(f.parent.name)
    return found


def timed_ingest(wh: Warehouse, prv: Path) -> tuple[float, int]:
    """(seconds, stored run rows read) of one ingest of ``prv``; the run is removed afterwards."""
    reads = 0
    read = pl.read_parquet

    def counting(source, *args, **kwargs):
        nonlocal reads
        reads += Path(str(source)).name == "run.parquet"
        return read(source, *args, **kwargs)

    pl.read_parquet = counting
    try:
        t0 = time.perf_counter()
        res = ingest_trace(wh, prv)
        seconds = time.perf_counter() - t0
    finally:
        pl.read_parquet = read
    wh.remove(wh.run_dir(res.run_id))
    return seconds, reads


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, nargs="+", default=[1, 10, 100])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-ingest-scaling-") as tmp:
        prv = another_run_of(JACOBI, Path(tmp) / "drop", 1)
        warm = Warehouse(Path(tmp) / "warm")
        for _ in range(3):  # JIT-compiled kernels, imports and file caches warm before timing
            timed_ingest(warm, prv)
        for n in args.runs:
            wh = warehouse_with_runs(Path(tmp) / f"wh{n}", n)
            timed_ingest(wh, prv)  # builds the index of this warehouse once, as its first ingest does
            ingests = [timed_ingest(wh, prv) for _ in range(args.repeat)]
            scans = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                old_scan(wh, prv)
                scans.append(time.perf_counter() - t0)
            rows.append((n, statistics.median(s for s, _ in ingests), max(r for _, r in ingests),
                         statistics.median(scans)))
    base = rows[0][1]
    lines = ["# Ingest cost against the runs already stored (issue 26 item 6)", "",
             f"Machine: {machine_description()}.", "",
             f"`nice -n 10 python benchmarks/bench_ingest_scaling.py --runs {' '.join(map(str, args.runs))} "
             f"--repeat {args.repeat}`: another run of the real jacobi trace (107 kB .prv, with its .pcf, which names "
             "no binary: the program is matched by its symbols) ingested into a warehouse holding N runs of jacobi "
             "(median of the repeats); baseline, in the same run: the two scans each Paraver ingest did before the "
             "indexes (every stored run's row for `_runs_without_pcf`, every stored run's program.json for "
             "`choose_program`), added to the ingest time they would have cost.", "",
             "| runs stored | ingest (s) | vs 1 run | stored rows read | old scan alone (s) | old ingest (s, est.) |",
             "|---:|---:|---:|---:|---:|---:|"]
    for n, sec, reads, scan in rows:
        lines.append(f"| {n} | {sec:.3f} | {sec / base:.2f}x | {reads} | {scan:.3f} | {sec + scan:.3f} |")
    lines += ["", "The ingest reads its own run's row after its commit, the row of the matched program's first run, "
              "one folder of the .pcf index and the program index (one entry per distinct symbol set); at "
              f"load {os.getloadavg()[0]:.0f} the figures move by tens of percent from run to run; the old scan "
              "grew with every run the warehouse held.", ""]
    emit("\n".join(lines), args.out)


if __name__ == "__main__":
    main()
