"""Peak memory of the merge against the number of ranks: whole runs vs a group of tasks at a time (issue 22).

    nice -n 10 python benchmarks/bench_merge_scale.py --sizes 16x250,64x500,128x1000,256x2000 --keep /tmp/scale

Each size is a 2-run campaign of the simulator's halo stencil (vectorised engine: 2-D process grid, one exchange
with Testall polling per iteration, no world collective; ~25 bursts per rank and iteration), simulated once into
``--keep``, each trace ingested into a warehouse in its own process. Then ``synthtrace``'s merge, as the CLI runs
it (:func:`synthtrace.warehouse.merged.merge_stored`: load, merge, commit), in a process of its own per variant:

- ``whole``: the runs read whole (:func:`~synthtrace.tracelib.merge.merge_runs.merge_runs`), only up to
  ``--whole-up-to`` bursts (its memory grows with the bursts);
- ``groups``: a group of tasks at a time (:mod:`synthtrace.tracelib.merge.partitioned`, ``GROUP_BURSTS`` loaded at
  once): what ``merge`` does above ``PARTITION_BURSTS``.

Reported: the process's peak resident memory (``ru_maxrss``), the merge's wall time (load, merge, commit), the groups,
and whether the committed ``merged_bursts`` and ``merge_matches`` of the two variants are the same rows and values
(a hash of every row, summed; exact). Results go to ``benchmarks/results/merge_scale.md`` (``--out``), appended as a
labelled run.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.bench_merge import machine  # noqa: E402
from benchmarks.bench_merge_mechanisms import _INGEST, simulate_scale  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "merge_scale.md"

_MERGE = """
import resource, sys, time, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, {root!r})
from synthtrace.tracelib.merge.merge_runs import MergeOptions
from synthtrace.warehouse.layout import Warehouse
from synthtrace.warehouse.merged import merge_stored
steps = []
t0 = time.perf_counter()
merge_stored(Warehouse({wh!r}).experiment("scale"), MergeOptions(), lambda what, n: steps.append(what),
             partition_bursts={partition})
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.perf_counter() - t0,
      sum(s.startswith("group ") for s in steps))
"""
_DIGEST = """
import sys
import polars as pl
for name in ("merged_bursts", "merge_matches"):
    f = pl.scan_parquet(sys.argv[1] + "/" + name + ".parquet")
    print(f.select(pl.len(), pl.struct(pl.all()).hash(7).cast(pl.Decimal(38, 0)).sum()).collect().row(0))
"""


def _run(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=False)


def prepare(keep: Path, ranks: int, iterations: int) -> tuple[Path, int]:
    """The campaign's warehouse (simulated and ingested once into ``keep``) and its bursts."""
    folder = keep / f"scale_{ranks}x{iterations}"
    traces, n_bursts, _ = simulate_scale(folder, ranks, iterations)
    wh = folder / "wh"
    done = wh / "ingested"
    if not done.is_file():
        shutil.rmtree(wh, ignore_errors=True)
        for trace in traces:
            out = _run(_INGEST.format(root=str(ROOT), wh=str(wh), trace=str(trace)))
            if out.returncode:
                raise RuntimeError(f"ingest of {trace} failed: {out.stderr.strip().splitlines()[-1][:300]}")
        done.write_text("1")
    return wh, n_bursts


def measure(wh: Path, partition: int) -> dict:
    """One merge in its own process: peak RSS (GB), seconds, groups, digest of the committed tables."""
    out = _run(_MERGE.format(root=str(ROOT), wh=str(wh), partition=partition))
    if out.returncode:
        return {"error": out.stderr.strip().splitlines()[-1][:300]}
    peak_kb, seconds, groups = out.stdout.split()[-3:]
    exp_dir = wh / "experiments" / "scale"
    digest = _run(_DIGEST, str(exp_dir)).stdout.strip()
    return {"peak": int(peak_kb) / 2**20, "seconds": float(seconds), "groups": int(groups), "digest": digest}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="16x250,64x500", help="comma-separated RANKSxITERATIONS")
    ap.add_argument("--keep", type=Path, required=True, help="folder keeping the simulated and ingested campaigns")
    ap.add_argument("--whole-up-to", type=int, default=7_000_000, help="merge whole only up to this many bursts")
    ap.add_argument("--label", default="", help="what code ran (printed with the results)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    rows = []
    for size in args.sizes.split(","):
        ranks, iterations = (int(x) for x in size.split("x"))
        wh, n_bursts = prepare(args.keep, ranks, iterations)
        row = {"ranks": ranks, "iterations": iterations, "bursts (2 runs)": n_bursts}
        groups = measure(wh, 0)
        whole = measure(wh, 10**12) if n_bursts <= args.whole_up_to else None
        row |= {"groups: peak GB": _f(groups.get("peak")), "groups: s": _f(groups.get("seconds"), 1),
                "groups": groups.get("groups", groups.get("error"))}
        row |= ({"whole: peak GB": _f(whole.get("peak")), "whole: s": _f(whole.get("seconds"), 1),
                 "same result": whole.get("digest") == groups.get("digest") if "digest" in whole else whole["error"]}
                if whole else {"whole: peak GB": "not run", "whole: s": "", "same result": ""})
        rows.append(row)
        print(row, file=sys.stderr, flush=True)
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()
    head = list(rows[0])
    table = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    table += ["| " + " | ".join(str(r.get(k, "")) for k in head) + " |" for r in rows]
    label = f", {args.label}" if args.label else ""
    text = (f"\n## {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, commit {commit}{label}"
            f"\n\n`{' '.join(['python benchmarks/bench_merge_scale.py', *sys.argv[1:]])}`; load average at the end "
            f"{os.getloadavg()[0]:.1f}; {machine()}\n\n" + "\n".join(table) + "\n")
    if not args.out.is_file():
        args.out.write_text("# Merge memory against the number of ranks (issue 22)\n\nScript: "
                            "`benchmarks/bench_merge_scale.py` (see its docstring for what is measured).\n")
    with args.out.open("a") as f:
        f.write(text)
    print(text)


def _f(v: float | None, digits: int = 2) -> str:
    return "" if v is None else f"{v:.{digits}f}"


if __name__ == "__main__":
    main()
