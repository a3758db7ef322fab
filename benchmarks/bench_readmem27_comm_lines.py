"""Peak memory of ``synthtrace ingest`` of a trace with one long ``c:`` line (note26 Open 3): prime_v0 (16 tasks)
with one more communicator line after its header, MIB MiB of DIGITS-digit numbers (the tasks 1..16 zero-padded).
A line of 63 MiB stays under the reader's 64 MiB header cap; a longer one is cut at the cap (the read then stops at
the line's rest, read as a record).

    python benchmarks/bench_readmem27_comm_lines.py 63x1 63x19 63x39 256x19 --before /tmp/base

Each ingest runs in a fresh process under ``/usr/bin/time -v`` (max RSS), with this checkout's code and, with
``--before TREE`` (a ``git archive`` export of another commit), with that tree's (as bench_otfmem26's)."""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.append(str(REPO))
from benchmarks.bench_otfmem26_many_locations import ingest_peak, linked_tree  # noqa: E402
from benchmarks.machine import machine_description  # noqa: E402

PRIME = REPO / ".." / "shared" / "traces" / "paraver" / "prime_v0"
NUMBERS_AT_ONCE = 16 * 4096


def write_trace(folder: Path, mib: int, digits: int) -> Path:
    """prime_v0 with a ``c:1:100:N`` line of ``mib`` MiB of ``digits``-digit numbers after its header, in
    ``folder``; returns the ``.prv``."""
    folder.mkdir(parents=True, exist_ok=True)
    for suffix in (".pcf", ".row"):
        shutil.copy(PRIME.with_suffix(suffix), folder / ("prime" + suffix))
    head, rest = PRIME.with_suffix(".prv").read_bytes().split(b"\n", 1)
    count = (mib << 20) // (digits + 1)
    unit = b":".join(b"%0*d" % (digits, 1 + k % 16) for k in range(NUMBERS_AT_ONCE))
    prv = folder / "prime.prv"
    with prv.open("wb") as out:
        out.write(head + b"\n" + b"c:1:100:%d" % count)
        for written in range(0, count, NUMBERS_AT_ONCE):
            out.write(b":" + unit[:min(NUMBERS_AT_ONCE, count - written) * (digits + 1) - 1])
        out.write(b"\n" + rest)
    return prv


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sizes", nargs="+", help="MIBxDIGITS")
    ap.add_argument("--before", type=Path, help="a tree of another commit (git archive) to measure as well")
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench_readmem27"))
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    print(machine_description(), flush=True)
    codes = [("before", linked_tree(a.before.resolve(), a.work))] if a.before else []
    codes.append(("after", None))
    print("| line | code | max RSS | wall | exit |\n|---|---|---:|---:|---:|")
    for size in a.sizes:
        mib, digits = (int(x) for x in size.split("x"))
        trace = write_trace(a.work / f"comm-{size}", mib, digits)
        for name, path in codes:
            rss, wall, rc = ingest_peak(trace, a.work, path)
            print(f"| {mib} MiB of {digits}-digit numbers | {name} | {rss / 1024:,.0f} MB | {wall} | {rc} |",
                  flush=True)
        shutil.rmtree(trace.parent)


if __name__ == "__main__":
    main()
