"""Every table an ingest stores is the same as another checkout's (issue 27: speed work must not change output).

Ingests each trace with the code of ``--before`` (a checkout or a ``git archive`` export of a commit) and with
this checkout, each in a fresh process into a warehouse of its own, then compares the two warehouses run by
run: every file byte for byte, and where bytes differ the frames (all parts of a table concatenated), which must
be equal; ``run.parquet`` is compared without ``ingested_at`` and ``source_path`` (a time and where the trace
was). A trace that one side refuses must be refused by the other with the same one-line error.

    python benchmarks/bench_ingest_equal.py --before /tmp/base TRACE... [--work DIR]

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


def compare_runs(before: Path, after: Path) -> list[str]:
    """What differs between the runs of two warehouses (empty: the same tables)."""
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
        if fa != fb:
            problems.append(f"{run}: files differ: {sorted(set(map(str, fa)) ^ set(map(str, fb)))}")
            continue
        tables = {_table_of(f) for f in fa if (ra / f).read_bytes() != (rb / f).read_bytes()}
        for t in sorted(tables):
            if t.suffix == ".json":  # a document beside the tables (program.json): equal as JSON, or it differs
                if json.loads((ra / t).read_text()) != json.loads((rb / t).read_text()):
                    problems.append(f"{run} {t}: the documents differ")
                continue
            x, y = _table(ra, t), _table(rb, t)
            if t.name == "run.parquet":
                x, y = (f.drop("ingested_at", "source_path") for f in (x, y))
            try:
                assert_frame_equal(x, y)
            except AssertionError as exc:
                problems.append(f"{run} {t}: {str(exc).splitlines()[0][:300]}")
        print(f"  {run}: {sum(1 for f in fa if _table_of(f) not in tables)}/{len(fa)} files byte-equal, "
              f"{len(tables)} tables frame-compared", file=sys.stderr)
    return problems


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="*", type=Path, help="traces to ingest (default: the real traces)")
    ap.add_argument("--before", type=Path, required=True, help="the checkout (or export) to compare with")
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
        problems += compare_runs(sides["before"][1], sides["after"][1])
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print("\n".join(problems) if problems else f"every table equal ({len(traces)} traces)")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
