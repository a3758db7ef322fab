"""Peak memory of the whole-run merge of runs whose stored bursts are not in thread and ``burst_seq`` order (review26
F8, session 27): two runs of :func:`bench_merge_memory_wide.wide_ring` (two one-thread tasks, ``N`` steps, burst i
sampling one of ``--types`` counter types), ingested in several chunks (a trace over the reader's first 4 MiB
block), so that each chunk's parts hold both tasks. Each is merged by ``synthtrace merge`` (the whole-run path: fewer
than ``PARTITION_BURSTS`` bursts) in a fresh process at ``nice -n 10``, peak RSS from ``/usr/bin/time``, twice: as
it is (the run copied into the merge's spill sorted a block at a time, ``runs._in_order``) and ``before`` (the copy
refused, ``run_bursts_to`` returning False as it did for such runs: the run read whole, sorted and written).
``--copy``: the copies alone (``merged.merge_inputs`` into an empty folder), not the merge.

    python benchmarks/bench_mergeblk27_sorted_copy.py 40000 --types 4096 --copy
    python benchmarks/bench_mergeblk27_sorted_copy.py 25000 --types 512
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.bench_merge_memory_wide import cli, measured, wide_ring  # noqa: E402
from benchmarks.machine import machine_description  # noqa: E402
from synthtrace.warehouse.parts import scan_parts  # noqa: E402

#: the whole read the copy replaced, for the ``before`` figure: ``merge_inputs`` reads the run whole when it is False
BEFORE = "import synthtrace.warehouse.merged as m; m.run_bursts_to = lambda *a, **k: False; "


def merging(wh: Path, experiment: str, before: bool, copy_only: bool) -> list[str]:
    """The command line merging ``experiment`` (or, ``copy_only``, copying its runs into a spill folder)."""
    if not copy_only:
        run = f"from synthtrace.pipelines.cli import main; sys.exit(main(['merge', '-w', {str(wh)!r}, {experiment!r}]))"
    else:
        run = ("import tempfile; from pathlib import Path; from synthtrace.warehouse.layout import Warehouse; "
               f"exp = Warehouse({str(wh)!r}).experiment({experiment!r}); "
               "spill = Path(tempfile.mkdtemp(dir=exp.wh.root)); m.merge_inputs(exp, spill)")
    prefix = BEFORE if before else "import synthtrace.warehouse.merged as m; "
    return [sys.executable, "-c", "import sys; " + prefix + run]


def out_of_order(wh: Path) -> list[str]:
    """Per run: its number of bursts parts and whether they are in thread and burst order."""
    said = []
    for run in sorted((wh / "runs").iterdir()):
        parts = sorted((run / "bursts").glob("*.parquet"))
        keys = scan_parts(parts).select("appl", "task", "thread", "burst_seq").collect()
        said.append(f"{run.name}: {len(parts)} parts, {keys.height:,} bursts, "
                    f"{'in order' if keys.equals(keys.sort(pl.all())) else 'out of order'}")
    return said


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sizes", nargs="*", type=int, default=[25_000], help="steps per run")
    ap.add_argument("--types", type=int, default=512, help="counter types")
    ap.add_argument("--cap", type=int, default=4_000, help="kill a merge past this RSS (MB)")
    ap.add_argument("--tmp", type=Path, help="where the traces and warehouses go (default: a temporary folder)")
    ap.add_argument("--copy", action="store_true", help="the runs' copies alone, not the merge")
    a = ap.parse_args()
    print(machine_description())
    with tempfile.TemporaryDirectory(dir=a.tmp) as tmp:
        for n in a.sizes:
            traces, wh = wide_ring(Path(tmp) / f"m{n}", n, a.types), Path(tmp) / f"wh{n}"
            subprocess.run(cli(ROOT, "ingest", "-w", str(wh), str(traces)), check=True, capture_output=True)
            print(*out_of_order(wh), sep="\n")
            for before in (True, False):
                copy = Path(tmp) / "wh-merge"
                shutil.rmtree(copy, ignore_errors=True)
                shutil.copytree(wh, copy)
                peak, wall, rc, killed, said = measured(merging(copy, f"m{n}", before, a.copy), a.cap)
                print(f"{n:>8,} steps x {a.types} types, {'copies' if a.copy else 'merge'}, "
                      f"{'before (read whole)' if before else 'sorted a block at a time'}: "
                      f"{'killed past ' + str(a.cap) + ' MB' if killed else f'{peak:,} MB'}  rc {rc}  {wall:,.0f} s"
                      f"  {said[:100]}", flush=True)


if __name__ == "__main__":
    main()
