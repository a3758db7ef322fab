"""Every table an ingest stores is the same as another checkout's (issue 27: speed work must not change output).

Ingests each trace with the code of ``--before`` (a checkout or a ``git archive`` export of a commit) and with
this checkout, each in a fresh process into a warehouse of its own, then compares the two warehouses run by
run. By default (byte mode) every file must be byte for byte the same: a Parquet table whose bytes differ is named
(with whether its frame still equals the other's). ``--frames`` (frame mode, for a change of how tables are
written: Parquet encodings, statistics, page or row-group sizes, the writer) asks less of the bytes and more of
the rest: every table (all parts of a folder concatenated) must have the same rows in the same order, the same
columns and dtypes and the same values, and the warehouse's disk must stay within ``--disk-ratio`` (1.3) of the
other's. In both modes ``run.parquet`` is compared as a frame without ``ingested_at`` and ``source_path`` (a time
and where the trace was), the JSON documents beside the tables as JSON, and the disk of both sides is printed.
A trace that one side refuses must be refused by the other with the same one-line error.

    python benchmarks/bench_ingest_equal.py --before /tmp/base [--frames] [--disk-ratio 1.3] TRACE... [--work DIR]

Without traces: every real trace of ``../shared/traces``. Exit status 1 when anything differs.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REAL_TRACES = ROOT.parent / "shared" / "traces"

CHILD = """
import sys, warnings
warnings.simplefilter("ignore")
from synthtrace.tracelib.errors import BadInputError
from synthtrace.warehouse import Warehouse
from synthtrace.warehouse.ingest import ingest_trace
try:
    ingest_trace(Warehouse(sys.argv[2]), sys.argv[1])
except BadInputError as exc:
    print("REFUSED", exc)
"""


def real_traces() -> list[Path]:
    """The Paraver traces and OTF2 anchors of ``../shared/traces``."""
    return sorted(REAL_TRACES.rglob("*.prv")) + sorted(REAL_TRACES.rglob("traces.otf2"))


def ingest(root: Path, trace: Path, warehouse: Path) -> str:
    """Ingest ``trace`` into ``warehouse`` with the code under ``root``; its stdout (a refusal's line, else empty)."""
    out = subprocess.run([sys.executable, "-c", CHILD, str(trace), str(warehouse)], capture_output=True, text=True,
                         cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
    if out.returncode:
        raise SystemExit(f"{root}: ingest of {trace} failed:\n{out.stderr[-2000:]}")
    return out.stdout.strip()


def _table(run: Path, name: Path):
    """A stored table of ``run`` as one frame: a file, or every part of a folder in order."""
    import polars as pl

    files = sorted((run / name).glob("*.parquet")) if (run / name).is_dir() else [run / name]
    return pl.concat([pl.read_parquet(f) for f in files], how="diagonal_relaxed") if files else pl.DataFrame()


def _table_of(file: Path) -> Path:
    """The table a stored file belongs to: its folder for a part, else the file itself."""
    return file.parent if file.parent != Path(".") else file


def disk_bytes(warehouse: Path) -> dict[str, int]:
    """Bytes on disk of each run of ``warehouse`` (every file under its folder, checksums.json included)."""
    runs = warehouse / "runs"
    return {p.name: sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
            for p in sorted(runs.iterdir()) if p.is_dir() and not p.name.startswith(".")}


def compare_disk(before: Path, after: Path, ratio: float | None) -> list[str]:
    """The disk of both warehouses' runs, printed; a problem when ``after`` holds more than ``ratio`` times
    ``before`` over all runs (None: only printed)."""
    a, b = disk_bytes(before), disk_bytes(after)
    for run in sorted(a.keys() & b.keys()):
        print(f"  {run}: disk {a[run] / 1e6:.2f} MB before, {b[run] / 1e6:.2f} MB after "
              f"(x{b[run] / max(a[run], 1):.3f})", file=sys.stderr)
    total_a, total_b = sum(a.values()), sum(b.values())
    print(f"disk: {total_a / 1e6:.2f} MB before, {total_b / 1e6:.2f} MB after (x{total_b / max(total_a, 1):.3f})",
          file=sys.stderr)
    if ratio is not None and total_b > ratio * total_a:
        return [f"disk: {total_b / 1e6:.2f} MB after, more than {ratio} x the {total_a / 1e6:.2f} MB before"]
    return []


def compare_runs(before: Path, after: Path, frames: bool = False) -> list[str]:
    """What differs between the runs of two warehouses (empty: the same tables). Byte mode (``frames`` False): a
    Parquet file whose bytes differ is a difference. Frame mode: every table must be frame-equal (rows in order,
    columns, dtypes, exact values), whatever its bytes."""
    from polars.testing import assert_frame_equal

    problems = []
    runs_a = {p.name for p in (before / "runs").iterdir() if not p.name.startswith(".")}
    runs_b = {p.name for p in (after / "runs").iterdir() if not p.name.startswith(".")}
    if runs_a != runs_b:
        problems.append(f"runs differ: only before {sorted(runs_a - runs_b)}, only after {sorted(runs_b - runs_a)}")
    for run in sorted(runs_a & runs_b):
        ra, rb = before / "runs" / run, after / "runs" / run
        # [helper integrity] checksums.json holds the files' mtimes (and is new in issue 23): never equal
        fa = sorted(p.relative_to(ra) for p in ra.rglob("*") if p.is_file() and p.name != "checksums.json")
        fb = sorted(p.relative_to(rb) for p in rb.rglob("*") if p.is_file() and p.name != "checksums.json")
        if {_table_of(f) for f in fa} != {_table_of(f) for f in fb} or (not frames and fa != fb):
            problems.append(f"{run}: files differ: {sorted(set(map(str, fa)) ^ set(map(str, fb)))}")
            continue
        shared = set(fa) & set(fb)
        tables = {_table_of(f) for f in set(fa) ^ set(fb)} | {
            _table_of(f) for f in shared if (ra / f).read_bytes() != (rb / f).read_bytes()}
        for t in sorted(tables):
            if t.suffix == ".json":  # a document beside the tables (program.json): equal as JSON, or it differs
                if json.loads((ra / t).read_text()) != json.loads((rb / t).read_text()):
                    problems.append(f"{run} {t}: the documents differ")
                continue
            x, y = _table(ra, t), _table(rb, t)
            if t.name == "run.parquet":
                x, y = (f.drop("ingested_at", "source_path") for f in (x, y))
            try:
                assert_frame_equal(x, y, check_exact=True)
            except AssertionError as exc:
                problems.append(f"{run} {t}: {str(exc).splitlines()[0][:300]}")
                continue
            if not frames and t.name != "run.parquet":
                problems.append(f"{run} {t}: the bytes differ (the frames are equal: --frames accepts it)")
        print(f"  {run}: {sum(1 for f in fa if _table_of(f) not in tables)}/{len(fa)} files byte-equal, "
              f"{len(tables)} tables frame-compared", file=sys.stderr)
    return problems


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="*", type=Path, help="traces to ingest (default: the real traces)")
    ap.add_argument("--before", type=Path, required=True, help="the checkout (or export) to compare with")
    ap.add_argument("--frames", action="store_true",
                    help="frame mode: tables may differ in bytes, not in rows, columns, dtypes or values")
    ap.add_argument("--disk-ratio", type=float, default=1.3,
                    help="with --frames: the most disk the runs may take, as a multiple of the other side's")
    ap.add_argument("--work", type=Path, help="where the two warehouses go (default: a temp dir, removed)")
    args = ap.parse_args()
    traces = args.traces or real_traces()
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-ingest-equal-"))
    problems = []
    try:
        sides = {"before": (args.before.resolve(), work / "before"), "after": (ROOT, work / "after")}
        for _, wh in sides.values():
            shutil.rmtree(wh, ignore_errors=True)
        for trace in traces:
            said = {name: ingest(root, trace, wh) for name, (root, wh) in sides.items()}
            print(f"{trace.name}: {said['after'] or 'ingested'}", file=sys.stderr)
            if said["before"] != said["after"]:
                problems.append(f"{trace}: before said {said['before']!r}, after {said['after']!r}")
        problems += compare_runs(sides["before"][1], sides["after"][1], frames=args.frames)
        problems += compare_disk(sides["before"][1], sides["after"][1], args.disk_ratio if args.frames else None)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print("\n".join(problems) if problems else f"every table equal ({len(traces)} traces)")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
