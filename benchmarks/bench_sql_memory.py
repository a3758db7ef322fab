"""Peak memory of the process tree of ``synthtrace sql "select * from bursts"`` over a wide run (issue 23, attack 19
F13: each burst samples one of 4,096 counter types, so the bursts view has ~4,100 mostly-NULL columns; the result
of 40,000 bursts is ~1.3 GB as Arrow). The command runs its query in a capped child; its parent gathered the
child's result batches up to the 1 GiB cap beside the child's own ~0.5 GB (a 1.75 GB tree).

Each case runs in a fresh process at nice 10; the RSS of the command (parent) and of its query process (child) is
sampled every 0.05 s from /proc, and the tree's peak is the largest sum of one sample.

    python benchmarks/bench_sql_memory.py                        # 40,000 bursts, made and ingested in /tmp
    python benchmarks/bench_sql_memory.py --warehouse /tmp/wh40  # an existing wide warehouse

With ``--caps WH`` (attack 21 F2, session 21): over a warehouse of the two LULESH runs, the cross product of the
bursts view streamed to files at the default cap (written before only when the cap counted memory used, not the
arena pyarrow's allocator reserves), and the queries the cap exists for (a ``string_agg`` past DuckDB's accounting,
one huge scalar, the cross product kept for the terminal), each to be refused in one line.

    python benchmarks/bench_sql_memory.py --caps /tmp/wh-lulesh
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.bench_wide_runs import wide_trace  # noqa: E402
from benchmarks.machine import machine_description  # noqa: E402

QUERY = "select * from bursts"
#: (name, extra arguments; {out} is the output file's folder)
CASES = [
    ("csv -o", ("-f", "csv", "-o", "{out}/r.csv")),
    ("parquet -o", ("-f", "parquet", "-o", "{out}/r.parquet")),
    ("csv.gz -o", ("-o", "{out}/r.csv.gz")),
    ("csv to stdout", ("-f", "csv")),
    ("table to stdout", ()),
]
#: with --caps: (name, query, extra arguments; {out} is the output file's folder)
CROSS = "SELECT a.* FROM bursts a, bursts b"
CAP_CASES = [
    ("F2 cross product -o parquet", CROSS, ("-o", "{out}/r.parquet")),
    ("F2 cross product -o csv", CROSS, ("-o", "{out}/r.csv")),
    ("F2 cross product, csv to stdout", CROSS, ("-f", "csv")),
    ("string_agg of 2 GB", "SELECT length(string_agg(repeat('x', 100000), ',')) AS n FROM range(20000)",
     ("-f", "csv")),
    ("string_agg of 2 GB -o parquet", "SELECT length(string_agg(repeat('x', 100000), ',')) AS n FROM range(20000)",
     ("-o", "{out}/r.parquet")),
    ("one 2 GB scalar", "SELECT length(repeat('x', 2000000000)) AS n", ("-f", "csv")),
    ("one 2 GB scalar -o parquet", "SELECT length(repeat('x', 2000000000)) AS n", ("-o", "{out}/r.parquet")),
]
#: with --all: the formats rendered from Python rows (a JSON file of 40,000 wide bursts is ~3 GB of nulls)
ROW_CASES = [
    ("tsv -o", ("-o", "{out}/r.tsv")),
    ("json -o", ("-f", "json", "-o", "{out}/r.json")),
]


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next((int(ln.split()[1]) for ln in f if ln.startswith("VmRSS:")), 0)
    except OSError:
        return 0


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return out


def watched(args: list[str], out: Path) -> dict[str, float | int | str]:
    """Run ``synthtrace ARGS`` at nice 10 with stdout into ``out``: exit code, peaks (MB) of the tree, the parent
    and its children, wall s, and the last stderr line."""
    cmd = [sys.executable, "-m", "synthtrace.pipelines.cli", *args]
    start = time.monotonic()
    with out.open("wb") as stdout:
        proc = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.PIPE, preexec_fn=lambda: os.nice(10))
        tree = parent = child = 0
        while proc.poll() is None:
            p = _rss_kb(proc.pid)
            c = sum(_rss_kb(k) for k in _children(proc.pid))
            tree, parent, child = max(tree, p + c), max(parent, p), max(child, c)
            time.sleep(0.05)
        err = proc.stderr.read().decode(errors="replace").strip().splitlines() if proc.stderr else []
    return {"rc": proc.returncode, "tree": tree / 1024, "parent": parent / 1024, "child": child / 1024,
            "wall": time.monotonic() - start, "said": err[-1][:90] if err else ""}


def table(runs: list[tuple[str, list[str]]], work: Path) -> None:
    """One markdown row per (case name, ``synthtrace`` arguments; ``{out}`` is ``work``), run one after another."""
    print(machine_description(), f"; load {os.getloadavg()[0]:.1f}")
    print("| case | rc | tree peak (MB) | parent (MB) | child (MB) | wall (s) | output (MB) | said |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for name, args in runs:
        r = watched([a.format(out=work) for a in args], work / "stdout")
        written = sum(p.stat().st_size for p in work.glob("r.*")) + (work / "stdout").stat().st_size
        print(f"| {name} | {r['rc']} | {r['tree']:,.0f} | {r['parent']:,.0f} | {r['child']:,.0f} | "
              f"{r['wall']:.0f} | {written / 1e6:,.0f} | {r['said']} |", flush=True)
        for p in [*work.glob("r.*"), work / "stdout"]:
            p.unlink(missing_ok=True)
    print(f"load after: {os.getloadavg()[0]:.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bursts", type=int, default=40_000)
    ap.add_argument("--warehouse", type=Path, help="an existing wide warehouse (default: made in /tmp)")
    ap.add_argument("--memory-limit", default=None, help="--memory-limit of each query (default: sql's own)")
    ap.add_argument("--all", action="store_true", help="also the text formats rendered from Python rows (slow)")
    ap.add_argument("--caps", type=Path, metavar="WH", help="the cap cases over WH (the two LULESH runs) instead")
    opts = ap.parse_args()
    limit = ["--memory-limit", opts.memory_limit] if opts.memory_limit else []
    work = Path(tempfile.mkdtemp(prefix="sqlmem-"))
    try:
        if opts.caps is not None:
            table([(name, ["sql", query, "-w", str(opts.caps), *extra, *limit]) for name, query, extra in CAP_CASES],
                  work)
            return
        wh = opts.warehouse
        if wh is None:
            (work / "w").mkdir()
            wide_trace(work / "w" / "w.prv", opts.bursts)
            wh = work / "wh"
            subprocess.run([sys.executable, "-m", "synthtrace.pipelines.cli", "ingest", str(work / "w"), "-w",
                            str(wh)], check=True, stdout=subprocess.DEVNULL)
        table([(name, ["sql", QUERY, "-w", str(wh), *extra, *limit])
               for name, extra in CASES + (ROW_CASES if opts.all else [])], work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
