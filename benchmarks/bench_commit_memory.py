"""Where the memory of a wide merged table's commit goes (issue 23): the 150,000-burst wide merge peaks in
``PartedTable.write_parquet``, which reads the merge's parts (Parquet files of ``block_rows`` rows x 6,155 columns)
and writes them as one Parquet file in row groups of ``group_rows`` rows with pyarrow's ``ParquetWriter``. Two
things are held: the writer's state per column chunk (row groups x columns) until the footer, and the parts of the
row group being gathered. Each measure runs in a fresh process; figures are resident bytes (RSS) of that process.

    python benchmarks/bench_commit_memory.py chunks          # writer state per column chunk, by writer option
    python benchmarks/bench_commit_memory.py cells 40000     # resident bytes per cell of parts read, by reader
    python benchmarks/bench_commit_memory.py commit 40000    # the whole commit, by part format and group_rows' fit

``chunks``: 60 row groups of 10 rows x 6,155 Int64 columns (mostly NULL), RSS growth per column chunk while the
writer is open and after ``close()``, and the footer's bytes per chunk in the file, for the writer options the
commit could take. ``cells N``: the first nine parts of the wide pair's merged table of N bursts
(``bench_merge_memory_wide.merged_parts``: one row group of 2,666 rows at 40,000 bursts) read and held, RSS growth
per cell (the values are 8 B a cell and a validity bit), by Polars, by pyarrow (threads or not), and by pyarrow from
the same parts written as Arrow IPC files (uncompressed, LZ4). ``commit N``: every part of that table written as
one file by :func:`synthtrace.tracelib.merge.blocks.written` in row groups of ``group_rows`` rows (as
``PartedTable.write_parquet`` does), the parts read as Parquet by Polars or as LZ4 Arrow IPC by pyarrow, with
``CELL_BYTES`` and ``FOOTER_BYTES`` as now or re-fitted: peak RSS of a fresh process (``/usr/bin/time``).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.machine import machine_description  # noqa: E402

COLUMNS = 6_155
CHUNK_OPTIONS = {
    "defaults (zstd, dictionaries, statistics)": "dict(compression='zstd')",
    "no statistics": "dict(compression='zstd', write_statistics=False)",
    "statistics of 12 columns": "dict(compression='zstd', write_statistics=names[:12])",
    "no dictionaries": "dict(compression='zstd', use_dictionary=False)",
    "none of them, uncompressed": "dict(compression='none', write_statistics=False, use_dictionary=False)",
}
RSS = ("import os\n"
       "def rss(): return int(open('/proc/self/statm').read().split()[1]) * os.sysconf('SC_PAGE_SIZE')\n")

CHUNKS = RSS + """
import pyarrow as pa, pyarrow.parquet as pq
names, groups = [f"c{{i}}" for i in range({columns})], 60
table = pa.table({{n: pa.array([None] * 8 + [1, 2], pa.int64()) for n in names}})
w = pq.ParquetWriter({path!r}, table.schema, **{options})
w.write_table(table); r0 = rss()
for _ in range(groups - 1): w.write_table(table)
r1 = rss(); w.close(); r2 = rss(); chunks = (groups - 1) * len(names)
print((r1 - r0) / chunks, (r2 - r0) / chunks, os.path.getsize({path!r}) / (groups * len(names)))
"""

CELLS = RSS + """
import glob, pyarrow as pa, pyarrow.parquet as pq, polars as pl
parts = sorted(glob.glob({folder!r} + "/merged-?????.{ext}"))[:9]
r0 = rss()
held = [{read} for p in parts]
cells = sum(h.num_rows * h.num_columns if isinstance(h, pa.Table) else h.height * h.width for h in held)
print((rss() - r0) / cells)
"""
READERS = {
    "Polars (pl.read_parquet)": ("parquet", "pl.read_parquet(p)"),
    "pyarrow, threads (pq.read_table)": ("parquet", "pq.read_table(p)"),
    "pyarrow, one thread": ("parquet", "pq.read_table(p, use_threads=False)"),
    "pyarrow, Arrow IPC parts": ("arrow", "pa.ipc.open_file(p).read_all()"),
    "pyarrow, LZ4-compressed Arrow IPC parts": ("lz4.arrow", "pa.ipc.open_file(p).read_all()"),
}


def run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.strip()


def chunks(tmp: Path) -> None:
    print(f"{'writer options':44s} {'held B/chunk':>13s} {'after close':>12s} {'in file':>8s}")
    for label, options in CHUNK_OPTIONS.items():
        held, closed, in_file = map(float, run(CHUNKS.format(columns=COLUMNS, path=str(tmp / "c.parquet"),
                                                             options=options)).split())
        print(f"{label:44s} {held:13,.0f} {closed:12,.0f} {in_file:8,.0f}", flush=True)


def cells(tmp: Path, n: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from benchmarks.bench_merge_memory_wide import merged_parts

    parts = merged_parts(tmp / "parts", n)
    for p in parts[:9]:  # the same parts as Arrow IPC files, uncompressed and LZ4-compressed
        table = pq.read_table(p)
        for suffix, compression in ((".arrow", None), (".lz4.arrow", "lz4")):
            with pa.ipc.new_file(p.with_suffix(suffix), table.schema,
                                 options=pa.ipc.IpcWriteOptions(compression=compression)) as f:
                f.write_table(table)
    for label, (ext, read) in READERS.items():
        per_cell = float(run(CELLS.format(folder=str(tmp / "parts"), ext=ext, read=read)))
        print(f"{label:40s} {per_cell:6.1f} B resident a cell", flush=True)


COMMIT = """
import sys
sys.path.insert(0, {root!r})
from pathlib import Path
import polars as pl, pyarrow as pa
from synthtrace.tracelib.merge import blocks
blocks.CELL_BYTES, blocks.FOOTER_BYTES = {cell}, {footer}
parts = sorted(Path({folder!r}).glob("*{ext}"))
stored = sorted(Path({folder!r}).glob("*.parquet"))
height = sum(pl.scan_parquet(p).select(pl.len()).collect().item() for p in stored)
width = pl.scan_parquet(stored[0]).collect_schema().len()
def read(p):
    return pl.read_parquet(p) if {ext!r} == ".parquet" else pa.ipc.open_file(pa.OSFile(str(p))).read_all()
blocks.written((read(p) for p in parts), Path({out!r}), blocks.group_rows(height, width), compression="zstd",
               write_statistics=True)
print(blocks.group_rows(height, width))
"""
#: part format (suffix), CELL_BYTES, FOOTER_BYTES
COMMITS = ((".parquet", 9, 1_600), (".parquet", 19, 1_000), (".lz4.arrow", 14, 1_000), (".lz4.arrow", 9, 1_600),
           (".lz4.arrow", 28, 1_000))


def commit(tmp: Path, n: int) -> None:
    import polars as pl

    from benchmarks.bench_merge_memory_wide import merged_parts

    for p in merged_parts(tmp / "parts", n):
        pl.read_parquet(p).write_ipc(p.with_suffix(".lz4.arrow"), compression="lz4")
    for ext, cell, footer in COMMITS:
        code = COMMIT.format(root=str(ROOT), cell=cell, footer=footer, folder=str(tmp / "parts"), ext=ext,
                             out=str(tmp / "out.parquet"))
        with tempfile.NamedTemporaryFile("r") as t:
            rows = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", t.name, sys.executable, "-c", code], check=True,
                                  capture_output=True, text=True).stdout.strip()
            peak = int(Path(t.name).read_text().split()[-1]) // 1024
        print(f"parts {ext:11s} CELL_BYTES {cell:3d} FOOTER_BYTES {footer:5,d}: row groups of {rows} rows, "
              f"peak {peak:,} MB", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["chunks", "cells", "commit"])
    ap.add_argument("bursts", nargs="?", type=int, default=40_000, help="bursts of the merged table (cells)")
    a = ap.parse_args()
    print(machine_description())
    with tempfile.TemporaryDirectory() as tmp:
        {"chunks": lambda: chunks(Path(tmp)), "cells": lambda: cells(Path(tmp), a.bursts),
         "commit": lambda: commit(Path(tmp), a.bursts)}[a.what]()


if __name__ == "__main__":
    main()
