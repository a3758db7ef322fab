"""Peak memory of ``synthtrace ingest`` on traces of many MPI calls, each sampling one of 4,096 counter types
(issue 23: memory must follow the samples, not calls x counter types), by the code of ``--before-rev`` and by this
checkout, in one run (alternated, each in a fresh process).

The trace (``calls-N``): one thread, N calls MPI_Allreduce (5 ns each, running 5 ns between), call i holding one
sample of counter type 42000000 + i % 4,096 (value i + 1) on its exit line; the ``.pcf`` declares the 4,096 counters.

    python benchmarks/bench_calls_memory.py --before-rev be8caae --calls 60000,150000,400000,1000000,2000000 \
        [--before-max 1000000]
    python benchmarks/bench_calls_memory.py --write 1000000 --out /tmp/calls.prv   # the trace alone
    python benchmarks/bench_calls_memory.py --footer 100   # what a Parquet writer keeps per row group, alone
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.bench_ingest import _run, exported  # noqa: E402
from benchmarks.bench_long_lines import CHILD_CLI_INGEST  # noqa: E402
from benchmarks.bench_sampled_memory import print_peak_table  # noqa: E402

TYPES = 4096
FIRST_COUNTER = 42000000
PCF_HEAD = b"""DEFAULT_OPTIONS

LEVEL               THREAD
UNITS               NANOSEC

EVENT_TYPE
9   50000002    MPI Collective Comm
VALUES
0   Outside MPI
10   MPI_Allreduce


EVENT_TYPE
"""


def write_calls_trace(prv: Path, n: int, types: int = TYPES) -> Path:
    """``prv`` (and its ``.pcf``): ``n`` MPI calls on one thread, call i with one sample of counter type
    42000000 + i % ``types`` at its exit (10 ns a call and the running burst after it)."""
    with prv.open("wb") as out:
        out.write(b"#Paraver (01/01/2020 at 00:00):%d_ns:1(1):1:1(1:1)\n" % (n * 10 + 100))
        for s in range(0, n, 100_000):
            out.write(b"".join(b"2:1:1:1:1:%d:50000002:10\n2:1:1:1:1:%d:50000002:0:%d:%d\n1:1:1:1:1:%d:%d:1\n"
                               % (10 * i, 10 * i + 5, FIRST_COUNTER + i % types, i + 1, 10 * i + 5, 10 * i + 10)
                               for i in range(s, min(n, s + 100_000))))
    prv.with_suffix(".pcf").write_bytes(PCF_HEAD + b"".join(b"7  %d COUNTER_%04d\n" % (FIRST_COUNTER + k, k)
                                                            for k in range(types)) + b"\n")
    return prv


def footer_growth(writer: str, groups: int, rows: int = 1024, width: int = 4115) -> float:
    """MB of RSS a Parquet writer (``polars``: a lazy sink; ``pyarrow``: ParquetWriter) gains writing ``groups`` row
    groups of ``rows`` x ``width`` Int64 columns, all NULL but the first (zstd 1, statistics): its per-column-chunk
    state kept until the footer. Run each writer in a fresh process."""
    import numpy as np
    import polars as pl
    import pyarrow.parquet as pq

    def rss_mb() -> float:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    frame = pl.DataFrame([pl.Series("c0", np.arange(rows))] +
                         [pl.Series(f"c{i}", [None] * rows, pl.Int64) for i in range(1, width)])
    table = frame.to_arrow()
    with tempfile.TemporaryDirectory(prefix="bench-footer-") as tmp:
        before = rss_mb()
        if writer == "polars":
            pl.concat([frame.lazy()] * groups).sink_parquet(f"{tmp}/f.parquet", row_group_size=rows,
                                                            compression="zstd", compression_level=1, statistics=True)
        else:
            with pq.ParquetWriter(f"{tmp}/f.parquet", table.schema, compression="zstd", compression_level=1,
                                  write_statistics=True) as out:
                for _ in range(groups):
                    out.write_table(table, row_group_size=rows)
        return rss_mb() - before


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--before-rev", help="the code to compare with (a git revision)")
    ap.add_argument("--calls", default="60000,150000,400000,1000000,2000000", help="calls of the cases")
    ap.add_argument("--before-max", type=int, default=1_000_000, help="the before code only up to this many calls")
    ap.add_argument("--write", type=int, help="only write a trace of this many calls to --out")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--footer", type=int, help="only measure each Parquet writer's RSS growth over this many groups")
    ap.add_argument("--writer", choices=("polars", "pyarrow"), help=argparse.SUPPRESS)  # --footer's child
    args = ap.parse_args()
    if args.footer and args.writer:
        print(f"{footer_growth(args.writer, args.footer):.0f}")
        return
    if args.footer:
        for writer in ("polars", "pyarrow"):
            grown = float(subprocess.run([sys.executable, __file__, "--footer", str(args.footer), "--writer", writer],
                                         capture_output=True, text=True, check=True).stdout)
            print(f"{writer}: +{grown:,.0f} MB after {args.footer} row groups of 1,024 rows x 4,115 columns "
                  f"({grown * 2**20 / (args.footer * 4115):,.0f} B per column chunk)")
        return
    if args.write:
        write_calls_trace(args.out, args.write)
        return
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-calls-") as tmp:
        tmp = Path(tmp)
        sides = {"this checkout": ROOT}
        if args.before_rev:
            sides = {args.before_rev: exported(args.before_rev, tmp / "before"), **sides}
        for n in (int(x) for x in args.calls.split(",") if x):
            trace = write_calls_trace(tmp / f"calls-{n}.prv", n)
            for side, root in sides.items():
                if side != "this checkout" and n > args.before_max:
                    continue
                r = _run(CHILD_CLI_INGEST, str(trace), str(tmp / "wh"), root=root)
                print(f"calls-{n} [{side}]: rc {r['code']}, {r['peak_rss_mb']:.0f} MB, cpu {r['cpu']:.1f} s",
                      flush=True)
                rows.append((f"{n:,}", trace.stat().st_size / 1e6, side, r))
                shutil.rmtree(tmp / "wh", ignore_errors=True)
            trace.unlink()
    print_peak_table("calls", rows)


if __name__ == "__main__":
    main()
