"""Whether two trees merge the same (issue 23: a change to what the merge holds, and when, must not move one row).

Merges, as ``synthtrace merge`` does (``warehouse.merged.merge_stored`` on a copy of the warehouse: its whole-run
path; the tables compared are the committed ones), the real LULESH pair, the real OTF2 pair (``allow_timing_only``)
and one campaign of every mechanism of ``simulator/mechanisms.py`` (seed 0; 8 ranks for pairs8, master_worker and
mixed, else 4; 6 iterations), each with and without ``estimate_unmatched``, and either saves the outcome
(``merged_bursts``, ``merge_matches``, ``merge_quality`` with rows sorted, every column; the warnings; or the
error's type and message) or compares it, case by case, with a saved one:

    python benchmarks/check_merge_same.py --tree /tmp/before --save /tmp/same-before   # a tree exported by git archive
    python benchmarks/check_merge_same.py --against /tmp/same-before                     # this checkout

``--cache DIR`` keeps the simulated campaigns and their warehouses between the two invocations (the traces do not
depend on the tree's merge).
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TABLES = ("merged", "matches", "quality")
FILES = ("merged_bursts", "merge_matches", "merge_quality")  # the committed files of TABLES
BIG = {"pairs8", "master_worker", "mixed"}  # mechanisms simulated with 8 ranks (the others: 4)


def _cases(cache: Path) -> list[tuple[str, Path, dict]]:
    """(case name, warehouse with experiment ``x``, merge options) of every case, ingested into ``cache`` once."""
    import synthtrace
    from synthtrace.simulator.mechanisms import MECHANISMS
    from testing.kernels import OTF2_PAIR
    from testing.simulator_campaigns import simulated
    from testing.traces import LULESH_A, LULESH_B

    sources: list[tuple[str, list[Path], dict]] = [("lulesh", [LULESH_A, LULESH_B], {}),
                                                   ("otf2", list(OTF2_PAIR), {"allow_timing_only": True})]
    for name in MECHANISMS:
        c = simulated(name, 0, cache / "sim", cache / "sim", ranks=8 if name in BIG else 4, iterations=6)
        sources.append((name, list(c.traces), {}))
    out = []
    for name, traces, opts in sources:
        wh = cache / "wh" / name
        if not (wh / "experiments" / "x").is_dir():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for t in traces:
                    synthtrace.ingest(str(wh), str(t), experiment="x")
        out += [(f"{name}{'+estimate' if est else ''}", wh, {**opts, "estimate_unmatched": est})
                for est in (False, True)]
    return out


def outcome(wh: Path, opts: dict) -> tuple[dict, dict]:
    """The merge of experiment ``x`` of ``wh`` (committed in a copy): its tables (rows sorted) and {"warnings":
    [...]} or {"error": ...}."""
    import polars as pl

    from synthtrace.tracelib.merge.merge_runs import MergeOptions
    from synthtrace.warehouse.layout import Warehouse
    from synthtrace.warehouse.merged import merge_stored

    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "wh"
        shutil.copytree(wh, copy)
        exp = Warehouse(copy).experiment("x")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                r = merge_stored(exp, MergeOptions(**opts))
        except Exception as e:  # the error is the outcome compared
            return {}, {"error": f"{type(e).__name__}: {e}"}
        tables = {n: pl.read_parquet(exp.dir / f"{f}.parquet") for n, f in zip(TABLES, FILES)}
    return {n: f.sort(f.columns, nulls_last=True) for n, f in tables.items()}, {"warnings": list(r.warnings)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", type=Path, help="merge with the code of this tree (default: this checkout)")
    ap.add_argument("--save", type=Path, help="save every case's outcome in this folder")
    ap.add_argument("--against", type=Path, help="compare every case's outcome with the one saved in this folder")
    ap.add_argument("--cache", type=Path, help="campaigns and warehouses kept here (default: temporary)")
    ap.add_argument("--only", nargs="+", help="only the cases whose name starts with one of these")
    a = ap.parse_args()
    sys.path.insert(0, str(a.tree or ROOT))
    import polars as pl

    with tempfile.TemporaryDirectory() as tmp:
        cache = a.cache or Path(tmp)
        same = differ = 0
        for name, wh, opts in _cases(cache):
            if a.only and not any(name.startswith(p) for p in a.only):
                continue
            tables, said = outcome(wh, opts)
            if a.save:
                d = a.save / name
                d.mkdir(parents=True, exist_ok=True)
                for n, f in tables.items():
                    f.write_parquet(d / f"{n}.parquet")
                (d / "said.json").write_text(json.dumps(said, indent=1))
            if a.against:
                d = a.against / name
                was = json.loads((d / "said.json").read_text())
                bad = [n for n in TABLES if (d / f"{n}.parquet").is_file() != (n in tables)
                       or (n in tables and not pl.read_parquet(d / f"{n}.parquet").equals(tables[n]))]
                bad += ["warnings/error"] if was != said else []
                same, differ = same + (not bad), differ + bool(bad)
                print(f"{name:28s} {'same' if not bad else 'DIFFERENT: ' + ', '.join(bad)}"
                      f"{'  (' + said['error'][:70] + ')' if 'error' in said else ''}", flush=True)
            else:
                print(f"{name:28s} {said.get('error', 'merged')[:80]}", flush=True)
        if a.against:
            print(f"{same} of {same + differ} cases the same")
            sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
