"""Peak memory of ``merge`` and ``merge --export-prv`` (issue 23, attack 7 A21): maximum resident set size
(``/usr/bin/time -v``) and CPU time on the two real LULESH runs (4+4 and 7+1, ../shared/traces) each tiled in time to
each size and ingested as one experiment, for this checkout and, with ``--before REV``, the tree of commit REV on a
copy of the same warehouse. The committed merge (``merged_bursts``, ``merge_matches``, ``merge_quality``: rows
sorted, every column) and the exported ``.prv``/``.pcf``/``.row`` of both are compared byte for byte.

    python benchmarks/bench_merge_memory.py --mb 260 520 --before 5996006 --out benchmarks/results/merge_memory.md
    python benchmarks/bench_merge_memory.py --mb 520 --before 3de7f8b --merge-only --tmp /tmp/x   # `merge` alone

Needs GNU time at /usr/bin/time and ~6x the largest size of disk (two runs, their warehouse, two exports).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_memory import _digest, exported, measure  # noqa: E402
from benchmarks.machine import machine_description  # noqa: E402
from benchmarks.results_io import emit  # noqa: E402

PARAVER = ROOT.parent / "shared" / "traces" / "paraver"
SOURCES = [PARAVER / "lulesh_4+4_with_uncores_sockets1+2.chop_5it.prv",
           PARAVER / "lulesh_7+1_with_uncores_sockets1+2.chop8.prv"]
EXPERIMENT = "pair"
TABLES = ("merged_bursts", "merge_matches", "merge_quality")


def committed(wh: Path) -> dict[str, object]:
    """The committed merge's tables, rows sorted, to compare between trees."""
    import polars as pl

    out = {}
    for name in TABLES:
        frame = pl.read_parquet(wh / "experiments" / EXPERIMENT / f"{name}.parquet")
        out[name] = frame.sort(frame.columns, nulls_last=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag, kind, what in (("--mb", int, "size of each tiled run (MB), one or more"),
                             ("--before", str, "a commit whose tree is measured on a copy of the same warehouse"),
                             ("--tmp", Path, "folder for the tiles, warehouses and exports (default: temporary)"),
                             ("--out", Path, "also write the markdown table to this file")):
        ap.add_argument(flag, type=kind, help=what, **({"nargs": "+", "default": [260, 520]} if flag == "--mb" else {}))
    ap.add_argument("--merge-only", action="store_true", help="measure `merge` alone, not `merge --export-prv`")
    a = ap.parse_args()
    from testing.paraver_tile import tile_trace

    work = Path(tempfile.mkdtemp(prefix="bench-merge-memory-", dir=a.tmp))
    trees = {"this checkout": ROOT, **({a.before: exported(a.before, work / "before")} if a.before else {})}
    rows = []
    try:
        for mb in a.mb:
            wh = work / f"wh{mb}"
            traces = []
            for src in SOURCES:
                copies = max(1, round(mb * 1e6 / src.stat().st_size))
                short = src.stem.split("_with")[0]  # the run's name: lulesh_4+4, lulesh_7+1
                traces.append(tile_trace(src, work / f"t{mb}" / short / f"{short}.prv", copies))
            size = sum(t.stat().st_size for t in traces) / 1e6 / len(traces)
            for trace in traces:
                r = measure(ROOT, ["ingest", str(trace), "--experiment", EXPERIMENT, "-w", str(wh)])
                rows.append((f"{size:.0f}", f"ingest {trace.stem}", "this checkout", r, ""))
            for export in (False,) if a.merge_only else (False, True):
                seen: dict[str, tuple] = {}
                for label, root in trees.items():
                    copy = work / f"wh{mb}-{label.replace(' ', '_')}"
                    shutil.copytree(wh, copy)
                    out = work / f"out-{label.replace(' ', '_')}" / "merged"
                    args = ["merge", EXPERIMENT, "-w", str(copy)] + (["--export-prv", str(out)] if export else [])
                    r = measure(root, args)
                    files = tuple(_digest(out.with_suffix(s)) for s in (".prv", ".pcf", ".row")) if export else ()
                    seen[label] = (committed(copy), files)
                    same = ""
                    if len(seen) == 2:
                        (t0, f0), (t1, f1) = seen.values()
                        tables = all(t0[n].equals(t1[n]) for n in TABLES)
                        same = ("same tables" if tables else "DIFFERENT tables") + (
                            ("; same .prv/.pcf/.row" if f0 == f1 else "; DIFFERENT files") if export else "")
                    rows.append((f"{size:.0f}", "merge --export-prv" if export else "merge", label, r, same))
                    print(rows[-1], file=sys.stderr)
                    shutil.rmtree(copy, ignore_errors=True)
                    shutil.rmtree(out.parent, ignore_errors=True)
            shutil.rmtree(work / f"t{mb}", ignore_errors=True)
            shutil.rmtree(wh, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    emit(table(rows, list(trees)), a.out)


def table(rows: list[tuple], trees: list[str]) -> str:
    """One markdown row per size and command: each tree's peak RSS and CPU side by side, and the comparison."""
    def cell(r: dict) -> str:
        return f"{r['rss_mb']:,.0f}" + ("" if r["code"] == 0 else f" (exit {r['code']}: {r['error'][:60]})")

    by: dict[tuple[str, str], dict[str, tuple[dict, str]]] = {}
    for size, name, label, r, same in rows:
        by.setdefault((size, name), {})[label] = (r, same)
    head = " | ".join(f"{t} peak RSS MB" for t in trees)
    out = [f"Machine: {machine_description()}; load average {os.getloadavg()[0]:.1f} at the end.", "",
           f"| run MB (each of 2) | command | {head} | CPU s ({' / '.join(trees)}) | output |",
           "|---|---|" + "---|" * len(trees) + "---|---|"]
    for (size, name), got in by.items():
        cells = " | ".join(cell(got[t][0]) if t in got else "" for t in trees)
        cpu = " / ".join(f"{got[t][0]['cpu_s']:.1f}" for t in trees if t in got)
        out.append(f"| {size} | {name} | {cells} | {cpu} | {' '.join(v[1] for v in got.values() if v[1])} |")
    return "\n".join(out) + "\n"

if __name__ == "__main__":
    main()
