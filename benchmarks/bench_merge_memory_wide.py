"""Peak memory of ``synthtrace merge`` of two wide runs (issue 23, attack 18 F2): two one-thread runs of N bursts of
5 ns, burst i of run0 sampling counter type 42000000 + i % 4096, of run1 42002048 + i % 4096 (2,048 types in
common, 2,048 of each its own; values differ), no .pcf. Each size is ingested once (by this tree), then merged by
each tree in a fresh process at ``nice -n 10``: peak RSS from ``/usr/bin/time -f %M``, the process killed when its
RSS passes ``--cap`` MB (sampled every 0.5 s), wall time and exit code.

    python benchmarks/bench_merge_memory_wide.py 40000 150000                      # this checkout
    python benchmarks/bench_merge_memory_wide.py 40000 --tree /tmp/before --tmp /tmp/x   # also a tree of REV
                                                      # (git archive REV | tar -x -C /tmp/before)
    python benchmarks/bench_merge_memory_wide.py 10000 --estimate     # merge --estimate-unmatched
    python benchmarks/bench_merge_memory_wide.py 10000 --partitioned  # the partitioned merge (below)
    python benchmarks/bench_merge_memory_wide.py 150000 --commit      # the merged table's commit alone (below)

``--partitioned``: two-task runs (:func:`wide_ring`: each burst closed by an MPI_Send or MPI_Recv, one message a
step, so that the runs store logical messages) merged by ``merge_stored(..., partition_bursts=0)``: the path
``synthtrace merge`` takes for an experiment of more than ``PARTITION_BURSTS`` bursts whose runs store logical
messages and no uncore samples, without ``--estimate-unmatched``.

``--commit``: the merged table of N bursts alone, as a blockwise merge leaves it (parts of ``block_rows`` rows, its
columns those of the wide pair's merge: the keys and times, 6,144 counters of which two have a value per row, the
score), written as one file by ``PartedTable.write_parquet`` (what the commit does) in a fresh process.
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

import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.machine import machine_description  # noqa: E402

TYPES = 4096


def wide_pair(folder: Path, n: int, types: int = TYPES) -> Path:
    """The two runs' traces in ``folder`` (see the module docstring)."""
    folder.mkdir(parents=True, exist_ok=True)
    for r, shift in ((0, 0), (1, types // 2)):
        with (folder / f"a.run{r}.prv").open("wb") as f:
            f.write(b"#Paraver (01/01/26 at 00:00):%d_ns:1(1):1:1(1:1)\n" % (10 * n + 10))
            for i in range(n):
                f.write(b"1:1:1:1:1:%d:%d:1\n2:1:1:1:1:%d:%d:%d\n1:1:1:1:1:%d:%d:0\n"
                        % (10 * i, 10 * i + 5, 10 * i + 2, 42000000 + shift + i % types, (i + 1) * (r + 1) + i % 7,
                           10 * i + 5, 10 * i + 10))
    return folder


def wide_ring(folder: Path, n: int, types: int = TYPES) -> Path:
    """Two runs of two one-thread tasks, ``n`` steps: task 1's burst closed by an MPI_Send to task 2, whose burst
    is closed by the MPI_Recv; burst i of either task samples the counter type of :func:`wide_pair`'s burst i."""
    folder.mkdir(parents=True, exist_ok=True)
    for r, shift in ((0, 0), (1, types // 2)):
        with (folder / f"a.run{r}.prv").open("wb") as f:
            f.write(b"#Paraver (01/01/26 at 00:00):%d_ns:1(2):1:2(1:1,1:1)\n" % (10 * n + 10))
            for i in range(n):
                t, c = 10 * i, 42000000 + shift + i % types
                for task, call, end in ((1, 1, 7), (2, 2, 8)):
                    f.write(b"1:%d:1:%d:1:%d:%d:1\n2:%d:1:%d:1:%d:50000001:%d:%d:%d\n1:%d:1:%d:1:%d:%d:10\n"
                            b"2:%d:1:%d:1:%d:50000001:0\n"
                            % (task, task, t, t + 5, task, task, t + 5, call, c, (i + 1) * (r + 1) + i % 7 + task,
                               task, task, t + 5, t + end, task, task, t + end))
                f.write(b"3:1:1:1:1:%d:%d:2:1:2:1:%d:%d:8:0\n" % (t + 5, t + 5, t + 5, t + 8))
    return folder


def partitioned(tree: Path, wh: Path, experiment: str) -> list[str]:
    """The command line merging ``experiment`` of ``wh`` by the partitioned merge, with the code of ``tree``."""
    return [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(tree)!r}); "
            "from synthtrace.warehouse.layout import Warehouse; "
            "from synthtrace.warehouse.merged import MergeOptions, merge_stored; "
            f"merge_stored(Warehouse({str(wh)!r}).experiment({experiment!r}), MergeOptions(), partition_bursts=0)"]


def merged_parts(folder: Path, n: int, types: int = TYPES) -> list[Path]:
    """The parts of a merged table of ``n`` bursts of the wide pair (see ``--commit``), written to ``folder``: those
    of the first ``types`` rows made, the others copies of them (as many values a row, the same keys)."""
    from synthtrace.tracelib.merge.blocks import block_rows
    from synthtrace.tracelib.merge.merge_runs import BASE_COLUMNS

    folder.mkdir(parents=True, exist_ok=True)
    counters = [str(42000000 + t) for t in range(types + types // 2)]
    step, parts = block_rows(len(BASE_COLUMNS) + 2 * len(counters)), []
    period = -(-types // step)  # parts of ``types`` rows or more
    for k, a in enumerate(range(0, n, step)):
        parts.append(folder / f"merged-{k:05d}.parquet")
        if k >= period and a + step <= n:  # as the part a period before: two values a row, its keys
            shutil.copyfile(parts[k - period], parts[k])
            continue
        i = pl.int_range(a, min(a + step, n), eager=True)
        base = pl.DataFrame({c: i for c in BASE_COLUMNS})
        own, other = pl.col("i") % types, pl.col("i") % types + types // 2
        values = pl.DataFrame({"i": i}).select(pl.when((own == t) | (other == t)).then(pl.col("i")).alias(c)
                                               for t, c in enumerate(counters))
        pl.concat([base, values, pl.DataFrame({"match_score": i.cast(pl.Float64)})],
                  how="horizontal").write_parquet(parts[-1])
    return parts


def committed(tree: Path, parts: list[Path], out: Path) -> list[str]:
    """The command line writing ``parts`` as one file ``out`` as a merge's commit does, with the code of ``tree``."""
    return [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(tree)!r}); "
            "from synthtrace.tracelib.merge.merge_runs import PartedTable; "
            f"PartedTable({[str(p) for p in parts]!r}).write_parquet({str(out)!r}, statistics=True)"]


def cli(tree: Path, *args: str) -> list[str]:
    """The command line running ``synthtrace ARGS`` with the code of ``tree``."""
    return [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(tree)!r}); "
            "from synthtrace.pipelines.cli import main; sys.exit(main(sys.argv[1:]))", *args]


def measured(cmd: list[str], cap_mb: int) -> tuple[int, float, int, bool, str]:
    """Peak RSS (MB, GNU time's), wall (s), exit code, whether it was killed past ``cap_mb``, its last error line."""
    with tempfile.NamedTemporaryFile("r") as out, tempfile.TemporaryFile("w+") as err:
        start = time.monotonic()
        p = subprocess.Popen(["nice", "-n", "10", "/usr/bin/time", "-f", "%M", "-o", out.name, *cmd],
                             stdout=subprocess.DEVNULL, stderr=err)
        killed = False
        while p.poll() is None:
            for child in _children(p.pid):
                try:
                    rss = int(Path(f"/proc/{child}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
                except (OSError, ValueError):
                    continue
                if rss > cap_mb << 20:
                    os.kill(child, 9)
                    killed = True
            time.sleep(0.5)
        wall = time.monotonic() - start
        text = Path(out.name).read_text().split()
        err.seek(0)
        said = [line for line in err.read().splitlines() if line.strip()]
        return ((int(text[-1]) // 1024 if text and text[-1].isdigit() else 0), wall, p.returncode, killed,
                said[-1] if said and p.returncode else "")


def _children(pid: int) -> list[int]:
    """The processes below ``pid`` (time's child, the merge)."""
    try:
        found = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    return [int(c) for c in found] + [g for c in found for g in _children(int(c))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sizes", nargs="*", type=int, default=[40_000, 150_000],
                    help="bursts per run (more than 2,048: below, the runs share no counter type)")
    ap.add_argument("--tree", type=Path, action="append", default=[], help="also merge with this tree's code")
    ap.add_argument("--cap", type=int, default=3_000, help="kill a merge past this RSS (MB)")
    ap.add_argument("--tmp", type=Path, help="where the traces and warehouses go (default: a temporary folder)")
    ap.add_argument("--estimate", action="store_true", help="merge with --estimate-unmatched")
    ap.add_argument("--partitioned", action="store_true", help="two-task runs merged by the partitioned merge")
    ap.add_argument("--commit", action="store_true", help="the commit of the merged table alone")
    a = ap.parse_args()
    print(machine_description())
    with tempfile.TemporaryDirectory(dir=a.tmp) as tmp:
        for n in a.sizes:
            if a.commit:
                parts = merged_parts(Path(tmp) / f"parts{n}", n)
                for tree in (ROOT, *a.tree):
                    peak, wall, rc, _, said = measured(committed(tree, parts, Path(tmp) / "merged.parquet"), a.cap)
                    print(f"{n:>8,} bursts' commit, {len(parts)} parts  {tree}: {peak:,} MB  rc {rc}  {wall:,.0f} s"
                          f"  {said[:100]}", flush=True)
                continue
            traces, wh = (wide_ring if a.partitioned else wide_pair)(Path(tmp) / f"m{n}", n), Path(tmp) / f"wh{n}"
            subprocess.run(cli(ROOT, "ingest", "-w", str(wh), str(traces)), check=True, capture_output=True)
            for tree in (ROOT, *a.tree):
                copy = Path(tmp) / "wh-merge"
                shutil.rmtree(copy, ignore_errors=True)
                shutil.copytree(wh, copy)
                merge = ["merge", "-w", str(copy), f"m{n}", *(["--estimate-unmatched"] if a.estimate else [])]
                cmd = partitioned(tree, copy, f"m{n}") if a.partitioned else cli(tree, *merge)
                peak, wall, rc, killed, said = measured(cmd, a.cap)
                print(f"{n:>8,} bursts  {tree}: {'killed past ' + str(a.cap) + ' MB' if killed else f'{peak:,} MB'}"
                      f"  rc {rc}  {wall:,.0f} s  {said[:100]}", flush=True)


if __name__ == "__main__":
    main()
