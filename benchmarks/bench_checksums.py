"""What the stored files' checksums (warehouse/checksums.py, issue 23) cost: hashing at the commit, a Polars read
that hashes the file it reads, and a query's check of the files of its views (stat only while unchanged).

    nice -n 10 python benchmarks/bench_checksums.py [--mb 200] [--runs 200]

1. One Parquet file of about ``--mb`` MB (random int64 columns, zstd, as a large bursts part), in the page cache:
   xxh3-128 of the file alone, ``pl.read_parquet`` alone, and ``parts.read_part`` (hash + read): the overhead of
   hashing on a whole read.
2. A warehouse of ``--runs`` runs (the real jacobi trace, testing/stored_runs.py): the check a query makes before
   it runs (``Snapshot.verify`` over the runs, bursts and mpi_calls views; unchanged files: stat and manifest
   lookup), per file and in all, against the query ``SELECT count(*) FROM bursts`` end to end.
Medians of ``--repeat`` rounds (the two reads of 1. interleaved); prints a Markdown table.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _median(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()

    import numpy as np
    import polars as pl

    from synthtrace.warehouse import snapshot
    from synthtrace.warehouse.checksums import file_digest, write_manifest
    from synthtrace.warehouse.layout import Warehouse
    from synthtrace.warehouse.parts import read_part
    from synthtrace.warehouse.sql import query
    from testing.stored_runs import warehouse_with_runs

    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-checksums-") as tmp:
        tmp = Path(tmp)
        wh = Warehouse(tmp / "big").ensure()
        rng = np.random.default_rng(1)
        n = args.mb * (1 << 20) // 48
        with wh.staged(wh.run_dir("b" * 16)) as stage:
            (stage / "bursts").mkdir()
            pl.DataFrame({f"c{i}": rng.integers(0, 1 << 40, n) for i in range(6)}).write_parquet(
                stage / "bursts" / "part-00000.parquet")
            t0 = time.perf_counter()
            write_manifest(stage)
            manifest_s = time.perf_counter() - t0
        part = wh.run_dir("b" * 16) / "bursts" / "part-00000.parquet"
        size_mb = part.stat().st_size / 1e6
        hash_s = _median(lambda: file_digest(part), args.repeat)
        from synthtrace.warehouse import checksums

        def checked_read():
            checksums._VERIFIED.clear()  # hash every time (a new process would)
            read_part(part)

        plain, checked = [], []
        for _ in range(args.repeat):  # interleaved: the machine's load moves both alike
            plain.append(_median(lambda: pl.read_parquet(part), 1))
            checked.append(_median(checked_read, 1))
        polars_s, checked_s = statistics.median(plain), statistics.median(checked)
        rows += [f"| commit: the manifest of a {size_mb:.0f} MB file (hashed once, inside the stage) | "
                 f"{manifest_s:.3f} s | {size_mb / manifest_s:,.0f} MB/s |",
                 f"| xxh3-128 of the file (page cache) | {hash_s:.3f} s | {size_mb / hash_s:,.0f} MB/s |",
                 f"| `pl.read_parquet` alone | {polars_s:.3f} s | |",
                 f"| `parts.read_part` (hash, then read) | {checked_s:.3f} s | x{checked_s / polars_s:.2f} of "
                 "the read alone |"]

        many = warehouse_with_runs(tmp / "many" / "wh", args.runs)
        views = ["runs", "bursts", "mpi_calls"]

        def verify() -> int:
            with snapshot.pinned(many, views) as snap:
                t0 = time.perf_counter()
                snap.verify()
                verify.s = time.perf_counter() - t0
                return sum(len(f) for f in snap.files.values())

        files = verify()
        checks = []
        for _ in range(args.repeat):
            verify()
            checks.append(verify.s)
        check_s = statistics.median(checks)
        query_s = _median(lambda: query(many, "SELECT count(*) FROM bursts"), args.repeat)
        rows += [f"| a query's check of its views' files, {args.runs} runs ({files} files, unchanged) | "
                 f"{check_s * 1e3:.1f} ms ({check_s / files * 1e6:.0f} us a file) | "
                 f"{100 * check_s / query_s:.1f} % of `SELECT count(*) FROM bursts` ({query_s:.2f} s) |"]
    print("| what | time | rate / share |\n|---|---:|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
