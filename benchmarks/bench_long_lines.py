"""Peak memory of the attacker's long-line traces (issue 23, attack 14 F6) and the reader's CPU time, before and
after the body line cap, in one run.

Cases (built from ``prime_v0`` as the attacker built them, a long line mid-body): ``longrec`` one event record of
``--longrec-mb`` MB of ``:42000050:1`` pairs; ``cr`` ``--cr-mb`` MB of ``\\r`` then a newline; ``cr_gz`` a
``.prv.gz`` holding 1.2 M event records of random values (60 MB) and ``--cr-gz-mb`` MB of ``\\r``, which stays
under the gzip ratio cap. Each is ``synthtrace ingest``-ed in a fresh process by the code of ``--before-rev``
(exported with ``git archive``) and by this checkout: exit code, first error line, peak RSS, CPU seconds.
``--big-mb N`` adds a record line of N MB read by this checkout only (the old code took 17.7 GB for 2,000).

Then the reader's CPU time (parse, bursts and calls; lowest of ``--repeat`` runs, before and after interleaved) on
the LULESH trace tiled to ``--cpu-mb`` MB, as ``.prv`` and ``.prv.gz``.

    python benchmarks/bench_long_lines.py --before-rev main~1 [--longrec-mb 100] [--cr-mb 2000] [--cr-gz-mb 1024]
                                          [--big-mb 2000] [--cpu-mb 200] [--repeat 3]
"""
from __future__ import annotations

import argparse
import gzip
import random
import shutil
import sys
import tempfile
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.bench_ingest import CHILD_READ, SMALL, _USAGE, _run, _tiled, exported  # noqa: E402
from benchmarks.machine import machine_description  # noqa: E402

CHILD_CLI_INGEST = """
import contextlib, io, json, sys, time, warnings
warnings.simplefilter("ignore")
from synthtrace.pipelines.cli import main
""" + _USAGE + """
t0 = time.perf_counter()
err = io.StringIO()
with contextlib.redirect_stderr(err):
    code = main(["ingest", sys.argv[1], "-w", sys.argv[2]])
said = [line.replace(sys.argv[1], "TRACE") for line in err.getvalue().splitlines() if line.startswith("error")]
print(json.dumps({**usage(t0), "code": code, "error": said[0][:110] if said else ""}))
"""


def _body() -> tuple[bytes, list[bytes]]:
    """prime_v0's header lines and record lines, split in the middle: (head, [first half, second half])."""
    lines = SMALL.read_bytes().split(b"\n")
    head, rest = lines[:3], lines[3:]
    mid = len(rest) // 2
    return b"\n".join(head) + b"\n", [b"\n".join(rest[:mid]) + b"\n", b"\n".join(rest[mid:])]


def _companions(prv: Path) -> None:
    for suffix in (".pcf", ".row"):
        prv.with_name(prv.name.split(".")[0] + suffix).write_bytes(SMALL.with_suffix(suffix).read_bytes())


def _plain(folder: Path, name: str, start: bytes, piece: bytes, n_bytes: int) -> Path:
    """prime_v0 with ``start`` and ``piece`` repeated to ``n_bytes`` and a newline between its halves."""
    folder.mkdir(parents=True, exist_ok=True)
    prv = folder / f"{name}.prv"
    head, (first, second) = _body()
    with prv.open("wb") as out:
        out.write(head + first + start)
        per = max(1, (1 << 20) // len(piece))
        n_pieces = n_bytes // len(piece)
        for _ in range(n_pieces // per):
            out.write(piece * per)
        out.write(piece * (n_pieces % per))
        out.write(b"\n" + second)
    _companions(prv)
    return prv


def _cr_gz(folder: Path, cr_mb: int) -> Path:
    """The padded ``.prv.gz``: random-valued records (incompressible enough) keep the ratio under the cap."""
    folder.mkdir(parents=True, exist_ok=True)
    prv = folder / "cr_gz.prv.gz"
    head, (first, second) = _body()
    co = zlib.compressobj(6, zlib.DEFLATED, 31)
    rnd = random.Random(1)
    with prv.open("wb") as out:
        out.write(co.compress(head + first))
        for _ in range(24):
            out.write(co.compress(b"".join(b"2:1:1:1:1:900000000:42000050:%d\n" % rnd.getrandbits(60)
                                           for _ in range(50_000))))
        block = b"\r" * (1 << 20)
        for _ in range(cr_mb):
            out.write(co.compress(block))
        out.write(co.compress(b"\n" + second))
        out.write(co.flush())
    _companions(prv)
    return prv


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--before-rev", required=True)
    ap.add_argument("--longrec-mb", type=int, default=100)
    ap.add_argument("--cr-mb", type=int, default=2000)
    ap.add_argument("--cr-gz-mb", type=int, default=1024)
    ap.add_argument("--big-mb", type=int, default=0)
    ap.add_argument("--cpu-mb", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rows, cpu = [], []
    with tempfile.TemporaryDirectory(prefix="bench-long-lines-") as tmp:
        tmp = Path(tmp)
        old = exported(args.before_rev, tmp / "before")
        sides = {args.before_rev: old, "this checkout": ROOT}
        cases = [(f"longrec: one record line of {args.longrec_mb} MB (.prv)",
                  _plain(tmp / "longrec", "longrec", b"2:1:1:1:1:950067", b":42000050:1", args.longrec_mb * 10**6),
                  sides),
                 (f"cr: {args.cr_mb} MB of \\r, then \\n (.prv)",
                  _plain(tmp / "cr", "cr", b"", b"\r", args.cr_mb * 10**6), sides),
                 (f"cr_gz: {args.cr_gz_mb} MiB of \\r and 60 MB of records (.prv.gz)",
                  _cr_gz(tmp / "crgz", args.cr_gz_mb), sides)]
        if args.big_mb:
            cases.append((f"big: one record line of {args.big_mb} MB (.prv)",
                          _plain(tmp / "big", "big", b"2:1:1:1:1:950067", b":42000050:1", args.big_mb * 10**6),
                          {"this checkout": ROOT}))
        for what, trace, who in cases:
            size = trace.stat().st_size / 1e6
            for side, root in who.items():
                r = _run(CHILD_CLI_INGEST, str(trace), str(tmp / "wh"), root=root)
                print(f"{what} [{side}]: rc {r['code']}, {r['peak_rss_mb']:.0f} MB, cpu {r['cpu']:.1f} s, "
                      f"{r['error']}", flush=True)
                rows.append((what, size, side, r))
                shutil.rmtree(tmp / "wh", ignore_errors=True)
            for p in trace.parent.iterdir():
                p.unlink()
        trace = _tiled(tmp, args.cpu_mb)
        gz = trace.with_name(trace.name + ".gz")
        with trace.open("rb") as src, gzip.open(gz, "wb", compresslevel=6) as dst:
            while block := src.read(1 << 24):
                dst.write(block)
        for path in (trace, gz):
            best: dict[str, dict] = {}
            for _ in range(args.repeat):
                for side, root in sides.items():
                    r = _run(CHILD_READ, str(path), root=root)
                    if side not in best or r["cpu"] < best[side]["cpu"]:
                        best[side] = r
            for side, r in best.items():
                print(f"reader {path.name} [{side}]: cpu {r['cpu']:.2f} s, {r['peak_rss_mb']:.0f} MB, "
                      f"bursts {r['bursts']}", flush=True)
                cpu.append((path.name, trace.stat().st_size / 1e6, side, r))
    print(f"\nMachine: {machine_description()}.")
    print("| case | size | code | exit | first error line | peak RSS | CPU |\n|---|---|---|---|---|---|---|")
    for what, size, side, r in rows:
        print(f"| {what} | {size:,.0f} MB | {side} | {r['code']} | {r['error'] or '-'} | "
              f"{r['peak_rss_mb']:,.0f} MB | {r['cpu']:.1f} s |")
    print("\n| reader on | size | code | CPU (lowest of runs) | peak RSS | bursts |\n|---|---|---|---|---|---|")
    for name, size, side, r in cpu:
        print(f"| {name} | {size:,.0f} MB | {side} | {r['cpu']:.2f} s | {r['peak_rss_mb']:,.0f} MB | {r['bursts']} |")


if __name__ == "__main__":
    main()
