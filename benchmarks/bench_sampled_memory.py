"""Peak memory of traces whose bursts or calls hold many counter samples (issue 23, attack 16 F3), by the code of
``--before-rev`` and by this checkout, in one run.

Cases, each ``--mb`` MB (.prv), ingested with ``synthtrace ingest`` in a fresh process:
- ``records``: prime_v0 with records of ~1 MB each repeating one counter (``:42000050:<value>``), 16 tasks in turn,
  times rising, after its body line 1,500 (the attacker's file);
- ``burst``: one thread running for 1,000 s, sampled at distinct times (one counter a line);
- ``call``: the same inside one MPI call;
- ``wide-N`` (attack 17 F3, ``--wide N,...``): one thread, N bursts (running 5 ns, idle 5 ns), each with one sample of
  counter type 42000000 + i % 4,096; by the code of ``--before-rev`` only up to ``--before-wide-max`` bursts (it
  needed 2.3 GB for 60,000).

    python benchmarks/bench_sampled_memory.py --before-rev 166fd2a [--mb 300] [--wide 60000,150000,600000]
    python benchmarks/bench_sampled_memory.py --before-rev c31a993 --only-wide --wide 20000,60000,600000
"""
from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.bench_ingest import SMALL, _run, exported  # noqa: E402
from benchmarks.bench_long_lines import CHILD_CLI_INGEST  # noqa: E402
from benchmarks.machine import machine_description  # noqa: E402

ONE_THREAD = b"#Paraver (01/01/26 at 00:00):1000000000000_ns:1(1):1:1(1:1)\n"
LINE = 30  # bytes of a one-counter sample line, about


def _records(folder: Path, mb: int) -> Path:
    lines = SMALL.read_bytes().split(b"\n")
    at = 1500
    t = int(lines[at].split(b":")[5])
    rnd = random.Random(1)
    pairs = b"".join(b":42000050:%d" % rnd.randrange(10**9) for _ in range(52_000))  # ~1 MB, under the line cap
    prv = folder / "records.prv"
    with prv.open("wb") as out:
        out.write(b"\n".join(lines[:at + 1]) + b"\n")
        for i in range(mb):
            k = i % 16 + 1
            out.write(b"2:%d:1:%d:1:%d" % (k, k, t + i // 16) + pairs + b"\n")
        out.write(b"\n".join(lines[at + 1:]))
    for suffix in (".pcf", ".row"):
        shutil.copy(SMALL.with_suffix(suffix), prv.with_suffix(suffix))
    return prv


def _sampled(folder: Path, name: str, mb: int, before: bytes, after: bytes) -> Path:
    prv = folder / f"{name}.prv"
    n = mb * 10**6 // LINE
    rnd = random.Random(1)
    with prv.open("wb") as out:
        out.write(ONE_THREAD + before)
        for s in range(0, n, 100_000):
            out.write(b"".join(b"2:1:1:1:1:%d:42000050:%d\n" % (1_000 + i * 7, rnd.randrange(10**6))
                               for i in range(s, min(n, s + 100_000))))
        out.write(after)
    shutil.copy(SMALL.with_suffix(".pcf"), prv.with_suffix(".pcf"))
    return prv


def _wide(folder: Path, n: int, types: int = 4096) -> Path:
    prv = folder / f"wide-{n}.prv"
    with prv.open("wb") as out:
        out.write(b"#Paraver (01/01/2020 at 00:00):%d_ns:1(1):1:1(1:1)\n" % (n * 10 + 100))
        for s in range(0, n, 100_000):
            out.write(b"".join(b"1:1:1:1:1:%d:%d:1\n2:1:1:1:1:%d:%d:1\n1:1:1:1:1:%d:%d:0\n"
                               % (10 * i, 10 * i + 5, 10 * i + 2, 42000000 + i % types, 10 * i + 5, 10 * i + 10)
                               for i in range(s, min(n, s + 100_000))))
    return prv


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--before-rev", required=True)
    ap.add_argument("--mb", type=int, default=300)
    ap.add_argument("--wide", default="", help="bursts of the wide cases, comma-separated")
    ap.add_argument("--before-wide-max", type=int, default=60_000)
    ap.add_argument("--only-wide", action="store_true", help="skip the records, burst and call cases")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-sampled-") as tmp:
        tmp = Path(tmp)
        sides = {args.before_rev: exported(args.before_rev, tmp / "before"), "this checkout": ROOT}
        cases = {"records": lambda f: _records(f, args.mb),
                 "burst": lambda f: _sampled(f, "burst", args.mb, b"1:1:1:1:1:0:1000000000000:1\n", b""),
                 "call": lambda f: _sampled(f, "call", args.mb, b"1:1:1:1:1:0:500:1\n2:1:1:1:1:500:50000002:9\n",
                                            b"2:1:1:1:1:999999999999:50000002:0\n")}
        if args.only_wide:
            cases = {}
        for n in (int(x) for x in args.wide.split(",") if x):
            cases[f"wide-{n}"] = lambda f, n=n: _wide(f, n)
        for what, make in cases.items():
            folder = tmp / what
            folder.mkdir()
            trace = make(folder)
            for side, root in sides.items():
                if what.startswith("wide-") and side != "this checkout" and int(what[5:]) > args.before_wide_max:
                    continue
                r = _run(CHILD_CLI_INGEST, str(trace), str(tmp / "wh"), root=root)
                print(f"{what} [{side}]: rc {r['code']}, {r['peak_rss_mb']:.0f} MB, cpu {r['cpu']:.1f} s", flush=True)
                rows.append((what, trace.stat().st_size / 1e6, side, r))
                shutil.rmtree(tmp / "wh", ignore_errors=True)
            shutil.rmtree(folder)
    print_peak_table("case", rows)


def print_peak_table(first: str, rows: list) -> None:
    """The machine and a Markdown table of ``rows`` (case, input MB, code side, :func:`bench_ingest._run` result)."""
    print(f"\nMachine: {machine_description()}.")
    print(f"| {first} | size | code | exit | peak RSS | CPU | load |\n|---|---|---|---|---|---|---|")
    for what, size, side, r in rows:
        print(f"| {what} | {size:,.0f} MB | {side} | {r['code']} | {r['peak_rss_mb']:,.0f} MB | {r['cpu']:.1f} s | "
              f"{r['load'][0]:.1f}-{r['load'][1]:.1f} |")


if __name__ == "__main__":
    main()
