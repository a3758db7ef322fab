"""What the message graph (tracelib/merge/message_graph.py, issue 12 item 1) adds to the merge, with it on and off.

    python benchmarks/bench_merge_messages.py     # writes benchmarks/results/merge_messages.md (about 3 minutes)

Conditions: every stress condition of ``testing/merge_campaigns.py`` (seed 1; the independent generator), the
"late, periodic rank" condition (4 ranks x 300 iterations, no collective; rank 3 does the same work every
iteration and starts one iteration later in the second run, ``late_start`` / ``periodic_rank``; seeds 1-6), and
the real LULESH pair both ways (PAPI_REF_CYC and LONGEST_LAT_CACHE:MISS dropped from the reference, merged
in). Per condition: the worst share of reference bursts >= 10 us matched to their true logical burst over the
ranks, the verdict, ``msg_agreement`` (share of checked messages matched end to end) and the merge time, with
``AlignConfig(message_graph=True)`` (default) and ``False``. Speed: 4 ranks x 1,000 and 10,000 iterations, no
collective, 2 runs, best of two merges after a warm-up, per burst.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.bench_merge import machine, md_table  # noqa: E402
from benchmarks.results_io import emit  # noqa: E402

from synthtrace.tracelib.merge.align import AlignConfig  # noqa: E402
from synthtrace.tracelib.merge.merge_runs import MergeOptions, RunTables, merge_runs  # noqa: E402
from synthtrace.tracelib.formats.paraver.reader import ParaverTrace  # noqa: E402
from testing.merge_campaigns import (CONDITIONS, late_start, make_condition, make_runs, periodic_rank,  # noqa: E402
                                     true_matches)
from testing.traces import LULESH_A, LULESH_B  # noqa: E402


LULESH_DROPPED = ["PAPI_REF_CYC", "LONGEST_LAT_CACHE:MISS"]


def _tables(runs) -> list[RunTables]:
    return [RunTables(r.run_id, r.run_name, r.bursts, r.mpi_calls) for r in runs]


def _worst_rank(runs, matches: pl.DataFrame) -> float:
    """The lowest share, over ranks, of reference bursts >= 10 us matched to their true logical burst."""
    ref = runs[0]
    worst = 1.0
    for other in runs[1:]:
        t = true_matches(ref, other).filter(pl.col("duration_ns") >= 10_000).join(
            matches.filter(pl.col("other_run_id") == other.run_id).select("task", "burst_seq", "other_burst_seq"),
            on=["task", "burst_seq"], how="left")
        ok = (pl.col("true_seq") == pl.col("other_burst_seq")) | (pl.col("true_seq").is_null()
                                                                  & pl.col("other_burst_seq").is_null())
        worst = min(worst, t.group_by("task").agg(ok.fill_null(False).mean()).get_column("true_seq").min())
    return worst


def _row(name: str, tables: list[RunTables], mg: bool, runs=None) -> dict:
    t = time.perf_counter()
    res = merge_runs(tables, MergeOptions(align=AlignConfig(message_graph=mg)))
    dt = time.perf_counter() - t
    q = res.quality.filter(pl.col("method") != "recorded")
    return {"condition": name, "message graph": "on" if mg else "off",
            "matched right (worst rank)": _worst_rank(runs, res.matches) if runs else None,
            "verdict": ", ".join(sorted(set(q.get_column("verdict")))),
            "msg_agreement": q.get_column("msg_agreement").min(), "merge s": dt}


def _speed() -> list[dict]:
    rows = []
    for n_iters in (1_000, 10_000):
        runs = make_runs(n_tasks=4, n_iters=n_iters, n_runs=2, seed=3, coll_every=0, drift=0.02)
        tables = _tables(runs)
        merge_runs(tables)
        best = min(_timed(tables) for _ in range(2))
        n = sum(r.bursts.height for r in runs)
        rows.append({"iterations": n_iters, "bursts (2 runs)": n, "best merge s": best, "us per burst": best / n * 1e6})
    return rows


def _timed(tables: list[RunTables]) -> float:
    t = time.perf_counter()
    merge_runs(tables)
    return time.perf_counter() - t


def main() -> None:
    load = os.getloadavg()[0]
    rows = []
    for name, opts in CONDITIONS.items():
        runs = make_condition(seed=1, **opts)
        rows += [_row(name, _tables(runs), mg, runs) for mg in (True, False)]
    for seed in range(1, 7):
        runs = make_runs(n_tasks=4, n_iters=300, n_runs=2, seed=seed, coll_every=0)
        runs = [periodic_rank(r, 3) for r in runs]
        runs[1] = late_start(runs[1], 3)
        rows += [_row(f"late, periodic rank (seed {seed})", _tables(runs), mg, runs) for mg in (True, False)]
    for a, b in ((LULESH_A, LULESH_B), (LULESH_B, LULESH_A)):
        tables = [RunTables(f"r{k}", p.stem, *ParaverTrace(p).read_tables(f"r{k}")[:2]) for k, p in enumerate((a, b))]
        tables[0] = RunTables(tables[0].run_id, tables[0].run_name, tables[0].bursts.drop(LULESH_DROPPED),
                              tables[0].mpi_calls)  # merged in from the other run
        for mg in (True, False):
            t = time.perf_counter()
            res = merge_runs(tables, MergeOptions(reference=a.stem, align=AlignConfig(message_graph=mg)))
            q = res.quality.filter(pl.col("method") != "recorded")
            rows.append({"condition": f"LULESH, reference {a.stem[:11]}", "message graph": "on" if mg else "off",
                         "matched right (worst rank)": None, "verdict": ", ".join(sorted(set(q["verdict"]))),
                         "msg_agreement": q.get_column("msg_agreement").min(), "merge s": time.perf_counter() - t})
    speed = _speed()
    text = "\n".join([
        "# The message graph in the merge (issue 12 item 1)", "",
        f"Machine: {machine()}; load average at start {load:.1f} (2 cores shared with other engineers).", "",
        "`python benchmarks/bench_merge_messages.py`; see the script's docstring for the conditions.", "",
        md_table(pl.DataFrame(rows)), "",
        "## Speed (message graph on), 4 ranks, no collective, 2 runs", "",
        md_table(pl.DataFrame(speed)), ""])
    emit(text, ROOT / "benchmarks" / "results" / "merge_messages.md")


if __name__ == "__main__":
    main()
