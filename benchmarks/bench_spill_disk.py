"""Peak disk use of the partitioned merge (review23 item 7): the bytes a merge adds to the warehouse while it runs
(its scratch folder: the runs split by task, each group's spilled bursts, the parts; then the committed files),
sampled every 0.2 s, beyond the stored runs. Each campaign is ingested once (by this tree), then merged by
``merge_stored(..., partition_bursts=0)`` with each tree's code in a fresh process at ``nice -n 10``.

    python benchmarks/bench_spill_disk.py --wide 1000 --tree /tmp/before     # (git archive REV | tar -x -C /tmp/before)
    python benchmarks/bench_spill_disk.py --narrow 32x250 --group-bursts 100000 --tree /tmp/before

``--wide N``: ``bench_merge_memory_wide.wide_ring`` (two two-task runs, N steps, each burst sampling one of 4,096
counter types); ``--narrow RxI``: the simulator's halo stencil of R ranks and I iterations (``bench_merge_scale``).
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
from benchmarks.bench_merge_memory_wide import cli, wide_ring  # noqa: E402
from benchmarks.machine import machine_description  # noqa: E402


def tree_bytes(folder: Path) -> int:
    """Bytes of the files under ``folder`` (files vanishing meanwhile not counted)."""
    total = 0
    for root, _, files in os.walk(folder):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_size
            except OSError:
                continue
    return total


def peak_disk(cmd: list[str], folder: Path) -> tuple[int, float, int]:
    """Peak bytes ``cmd`` adds under ``folder`` while it runs, its wall seconds and exit code."""
    base = tree_bytes(folder)
    start, peak = time.monotonic(), 0
    p = subprocess.Popen(["nice", "-n", "10", *cmd], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while p.poll() is None:
        peak = max(peak, tree_bytes(folder) - base)
        time.sleep(0.2)
    return peak, time.monotonic() - start, p.returncode


def partitioned(tree: Path, wh: Path, experiment: str, group_bursts: int | None) -> list[str]:
    """The command line merging ``experiment`` of ``wh`` by the partitioned merge, ``group_bursts`` loaded at once
    (None: ``GROUP_BURSTS``), with the code of ``tree``."""
    return [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(tree)!r}); "
            "from synthtrace.warehouse.layout import Warehouse; "
            "from synthtrace.warehouse.merged import MergeOptions, merge_stored; "
            f"merge_stored(Warehouse({str(wh)!r}).experiment({experiment!r}), MergeOptions(), partition_bursts=0, "
            f"group_bursts={group_bursts!r})"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wide", type=int, action="append", default=[], help="steps of the wide two-task runs")
    ap.add_argument("--narrow", action="append", default=[], help="RANKSxITERATIONS of the halo stencil")
    ap.add_argument("--tree", type=Path, action="append", default=[], help="also merge with this tree's code")
    ap.add_argument("--group-bursts", type=int, help="bursts a group loads (default: GROUP_BURSTS)")
    ap.add_argument("--tmp", type=Path, help="where the traces and warehouses go (default: a temporary folder)")
    a = ap.parse_args()
    print(machine_description())
    with tempfile.TemporaryDirectory(dir=a.tmp) as tmp:
        campaigns = [(f"wide {n} steps", wide_ring(Path(tmp) / f"m{n}", n), f"m{n}") for n in a.wide]
        for size in a.narrow:
            from benchmarks.bench_merge_mechanisms import simulate_scale
            ranks, iterations = map(int, size.split("x"))
            traces, _, _ = simulate_scale(Path(tmp) / f"halo{size}", ranks, iterations)
            campaigns.append((f"halo {size}", traces[0].parent, traces[0].parent.name))
        for label, traces, experiment in campaigns:
            wh = Path(tmp) / f"wh-{experiment}"
            subprocess.run(cli(ROOT, "ingest", "-w", str(wh), str(traces)), check=True, capture_output=True)
            for tree in (ROOT, *a.tree):
                copy = Path(tmp) / "wh-merge"
                shutil.rmtree(copy, ignore_errors=True)
                shutil.copytree(wh, copy)
                stored = tree_bytes(copy)
                peak, wall, rc = peak_disk(partitioned(tree, copy, experiment, a.group_bursts), copy)
                print(f"{label}  {tree}: peak {peak / 2**20:,.0f} MB beyond the stored {stored / 2**20:,.0f} MB"
                      f"  rc {rc}  {wall:,.0f} s", flush=True)


if __name__ == "__main__":
    main()
