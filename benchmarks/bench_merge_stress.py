"""The merge under the stress conditions of issue 12, beside positional and cluster-mean matching (same runs).

    python benchmarks/bench_merge_stress.py            # writes benchmarks/results/merge_stress.md
    python benchmarks/bench_merge_stress.py --quick    # without the "anchors off" rows (the slow part)
    python benchmarks/bench_merge_stress.py --simulator-only   # only the simulator's section, replaced in the file

Runs come from ``testing/merge_campaigns.py`` (``CONDITIONS``; written apart from the project's simulator), scored
against their logical burst ids: ``matched right`` is the share of reference bursts >= 10 us matched to their true
logical burst, or left unmatched when the other run has none. Errors are those of the counters the reference run
lacks, per counter the median / p95 relative error over bursts >= 10 us, then the median over counters;
``/ oracle`` is the worst ratio over counters to the true matching with values as recorded (the source run's
pieces of a split burst summed; a reference piece given its share of its burst's instructions). Methods:
``merge`` (default options), ``merge, anchors off`` (the same aligner without the anchors of
``tracelib.merge.anchors``: one dynamic programme per thread, positions over the whole thread), ``positional`` and
``cluster-mean`` (see ``bench_merge.py``). Speed: 4 ranks x 1,000 and x 10,000 iterations, no collective, 2 runs,
best of three merges after a warm-up. Same program or not: what the merge says of a run on another input (30 %
more work in every burst), a run half as long, and a run of another program (its counters shuffled between its
bursts). The simulator's section (``SIM_CONDITIONS``) runs the same methods and scores on runs of
``synthtrace.simulator`` read back from their Paraver traces, against the simulator's ground-truth logical ids.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.bench_merge import cluster_mean, errors, machine, md_table, positional  # noqa: E402
from benchmarks.results_io import emit  # noqa: E402

from testing.simulator_campaigns import (SAME_PROGRAM, SAME_PROGRAM_BASE, SIM_CONDITIONS,  # noqa: E402
                                         simulated_runs)
from testing.merge_campaigns import CONDITIONS, SynthRun, make_condition, make_runs, score  # noqa: E402
from synthtrace.tracelib.merge.align import AlignConfig  # noqa: E402
from synthtrace.tracelib.merge.merge_runs import MergeOptions, NotSameProgramError, RunTables, merge_runs  # noqa: E402

KEYS = ["appl", "task", "thread", "burst_seq"]


def _oracle(ref: SynthRun, src: SynthRun, counter: str) -> pl.Series:
    """Per reference burst (in ``KEYS`` order) the source run's own value of ``counter`` for the same logical
    burst, its pieces summed where that run split it; a reference piece gets the share of its logical burst's
    work it holds (recorded instructions, else running time)."""
    unit = (pl.col("logical") - pl.when(pl.col("logical") % 1000 == 999).then(999).otherwise(0)).alias("u")
    work = "PAPI_TOT_INS" if "PAPI_TOT_INS" in ref.counters else "duration_ns"
    s = (src.truth.select(*KEYS, unit).join(src.bursts.select(*KEYS, counter), on=KEYS)
         .group_by("u").agg(pl.col(counter).sum()))
    r = (ref.truth.select(*KEYS, unit).join(ref.bursts.select(*KEYS, pl.col(work).alias("_w")), on=KEYS)
         .with_columns((pl.col("_w") / pl.col("_w").sum().over("u")).alias("_share")).sort(KEYS))
    return r.join(s, on="u", how="left", maintain_order="left").select(pl.col(counter) * pl.col("_share")).to_series()


def _summary(per_counter: list[dict], oracle: list[dict]) -> dict:
    med = pl.Series([e["median"] for e in per_counter])
    p95 = pl.Series([e["p95"] for e in per_counter])
    return {"coverage": float(pl.Series([e["coverage"] for e in per_counter]).median()),
            "median err": float(med.median()), "p95 err": float(p95.median()),
            "worst median / oracle": max(e["median"] / o["median"] for e, o in zip(per_counter, oracle)),
            "worst p95 / oracle": max(e["p95"] / o["p95"] for e, o in zip(per_counter, oracle))}


def condition_rows(name: str, kw: dict, seed: int, quick: bool = False) -> list[dict]:
    """Rows of one condition of ``tests/merge_synth.py``."""
    return run_rows(name, make_condition(seed=seed, **kw), quick)


def run_rows(name: str, runs: list[SynthRun], quick: bool = False) -> list[dict]:
    """Every method's row on ``runs`` (run 0 the reference, run 1 the source scored)."""
    tables = [RunTables(r.run_id, r.run_name, r.bursts, r.mpi_calls) for r in runs]
    ref, src = runs[0], runs[1]
    ref_b = ref.bursts.sort(KEYS)
    truth = ref.truth.sort(KEYS)
    dur = truth.get_column("duration_ns")
    lacking = [c for c in src.counters if c not in ref.counters]
    oracle = [errors(_oracle(ref, src, c), truth.get_column(c), dur) for c in lacking]
    rows = []
    methods = [("merge", MergeOptions())] + ([] if quick else [("merge, anchors off",
                                                                 MergeOptions(align=AlignConfig(anchors=False)))])
    for label, opts in methods:
        t0 = time.perf_counter()
        res = merge_runs(tables, opts)
        dt = time.perf_counter() - t0
        right, n = score(ref, src, res.matches)
        merged = res.merged.sort(KEYS)
        q = res.quality.filter(pl.col("source_run_id") == src.run_id)
        rows.append({"condition": name, "method": label, "matched right": right, "scored": n,
                     **_summary([errors(merged.get_column(c), truth.get_column(c), dur) for c in lacking], oracle),
                     "verdict": ",".join(sorted(set(q.get_column("verdict")))), "merge s": dt})
    pos = [errors(positional(ref_b, src.bursts, c), truth.get_column(c), dur) for c in lacking]
    rows.append({"condition": name, "method": "positional", **_summary(pos, oracle)})
    cm = [errors(cluster_mean(ref_b, src.bursts, c), truth.get_column(c), dur) for c in lacking]
    rows.append({"condition": name, "method": "cluster-mean", **_summary(cm, oracle)})
    rows.append({"condition": name, "method": "oracle", "matched right": 1.0, **_summary(oracle, oracle)})
    return rows


def simulator_rows(seed: int, quick: bool = False) -> pl.DataFrame:
    """Every method's rows on every one of :data:`SIM_CONDITIONS`."""
    rows = []
    for name, kw in SIM_CONDITIONS.items():
        with tempfile.TemporaryDirectory() as tmp:
            rows += run_rows(name, simulated_runs(kw, seed, Path(tmp)), quick)
    return pl.DataFrame(rows)


def speed(iters: tuple[int, ...] = (1000, 10_000)) -> pl.DataFrame:
    rows = []
    for n in iters:
        runs = make_runs(seed=3, n_tasks=4, n_iters=n, n_runs=2, coll_every=0, drift=0.02)
        tables = [RunTables(r.run_id, r.run_name, r.bursts, r.mpi_calls) for r in runs]
        merge_runs(tables)  # compiled kernels warm
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            merge_runs(tables)
            times.append(time.perf_counter() - t0)
        dt = min(times)
        b = sum(r.bursts.height for r in runs)
        rows.append({"iterations": n, "bursts (2 runs)": b, "merge s": dt, "us per burst": dt / b * 1e6})
    return pl.DataFrame(rows)


def same_program(seed: int) -> pl.DataFrame:
    """What the merge says (refused, warnings, verdicts) of runs that are not the same program on the same input."""
    runs = make_runs(seed=seed, n_tasks=4, n_iters=300, n_runs=2, coll_every=0)
    ref, o = (RunTables(r.run_id, r.run_name, r.bursts, r.mpi_calls) for r in runs)
    b = o.bursts
    cases = {"same program and input": b,
             "another input (30 % more work)": b.with_columns(pl.col(c) * 13 // 10 for c in runs[1].counters),
             "run half as long": b.filter(pl.col("burst_seq") < pl.col("burst_seq").max().over("task") // 2),
             "another program (counters shuffled)": b.with_columns(pl.col(c).shuffle(seed=3).over("task")
                                                                   for c in runs[1].counters)}
    return pl.DataFrame([outcome(name, [ref, RunTables(o.run_id, o.run_name, b, o.mpi_calls)])
                         for name, b in cases.items()])


def outcome(name: str, tables: list[RunTables]) -> dict:
    """What the merge says of ``tables`` with default options: refused (its message), or its verdicts and
    warnings."""
    try:
        res = merge_runs(tables)
    except NotSameProgramError as e:
        return {"runs": name, "outcome": "refused", "message": str(e)[:120]}
    q = res.quality.filter(pl.col("method") != "recorded")
    return {"runs": name, "outcome": "verdict " + ",".join(sorted(set(q.get_column("verdict")))),
            "message": " / ".join(res.warnings)[:160] or "no warning"}


def simulator_same_program(seed: int) -> pl.DataFrame:
    """:func:`outcome` on every one of :data:`SAME_PROGRAM` (run 1 another code version, input or length)."""
    rows = []
    for name, change in SAME_PROGRAM.items():
        with tempfile.TemporaryDirectory() as tmp:
            runs = simulated_runs(SAME_PROGRAM_BASE, seed, Path(tmp), run1=change)
        rows.append(outcome(name, [RunTables(r.run_id, r.run_name, r.bursts, r.mpi_calls) for r in runs]))
    return pl.DataFrame(rows)


SIM_HEADING = "## In the project's simulator"


def simulator_section(seed: int, quick: bool, alone: bool = False) -> str:
    """The simulator's table as a Markdown section (``alone``: run without the rest, say so and how long)."""
    t0 = time.perf_counter()
    table = md_table(simulator_rows(seed, quick))
    same = md_table(simulator_same_program(seed))
    flag = " --quick" if quick else ""
    note = (f"This section alone: `python benchmarks/bench_merge_stress.py --simulator-only{flag}` "
            f"({time.perf_counter() - t0:.0f} s with simulation, reading and the compilation of the merge's kernels, "
            f"load average at the end {os.getloadavg()[0]:.1f}); the tables above are from the last full run. "
            if alone else "")
    return "\n".join([SIM_HEADING, "", note + "`SIM_CONDITIONS` of the script: 4 ranks, 2 runs of "
                      "`synthtrace.simulator.simulate_experiment` (Paraver traces read back with the reader), scored "
                      "against the simulator's ground-truth `logical_id` of every burst of both runs; columns as "
                      "above. ANY_SOURCE, housekeeping calls present in one run only, polling loops of run-dependent "
                      "length, OS noise and the run's clock jitter are in every condition (the simulator's defaults). "
                      "Split bursts: `Variation(io_every_ns=...)`, progress writes at run-dependent points of the "
                      "compute (Extrae's I/O Write event, counters read at its entry, no MPI call), one every 3 ms of "
                      "compute on average in both runs: about 11 % of the bursts >= 10 us split in each run; a piece "
                      "is right when matched as part of its true logical burst (to the other run's whole burst, or to "
                      "its own piece where that run split it too). The halo's `coll_every` changes the MPI structure "
                      "only: the simulator still ends every iteration on one exit time for all ranks, so runs drift by"
                      " their clocks, not by ranks running iterations apart.", "", table, "",
                      "### Same program or not, in the simulator", "",
                      "`SAME_PROGRAM` of `testing/simulator_campaigns.py`: halo, p2p only, 4 ranks x 300 iterations; "
                      "run 1 is run 1 of the same seed's experiment with one change (so the same logical program "
                      "and run-to-run variation otherwise). What the default merge says:", "", same, ""])


def replace_section(text: str, section: str) -> str:
    """``text`` with its simulator section replaced by ``section`` (put before "## Same program or not" if absent)."""
    if SIM_HEADING in text:
        head, tail = text.split(SIM_HEADING, 1)
        tail = tail[tail.find("\n## ") + 1:] if "\n## " in tail else ""
    else:
        anchor = "## Same program or not"
        head, tail = (text.split(anchor, 1)[0], anchor + text.split(anchor, 1)[1]) if anchor in text else (text, "")
    return head + section + "\n" + tail


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "merge_stress.md")
    ap.add_argument("--quick", action="store_true", help="leave out the 'merge, anchors off' rows")
    ap.add_argument("--simulator-only", action="store_true",
                    help="run only the simulator's conditions and replace their section in --out")
    args = ap.parse_args()
    if args.simulator_only:
        old = args.out.read_text() if args.out.is_file() else ""
        emit(replace_section(old, simulator_section(args.seed, args.quick, alone=True)), args.out)
        return
    t0 = time.perf_counter()
    acc = pl.DataFrame([r for name, kw in CONDITIONS.items() for r in condition_rows(name, kw, args.seed, args.quick)])
    sim = simulator_section(args.seed, args.quick)
    same = same_program(args.seed)
    sp = speed()
    text = ["# Merge under the stress conditions of issue 12", "",
            f"Reproduce: `python benchmarks/bench_merge_stress.py{' --quick' if args.quick else ''}` "
            f"({time.perf_counter() - t0:.0f} s in all).",
            f"Machine: {machine()}; load average at the end {os.getloadavg()[0]:.1f} (other engineers' jobs share "
            "the cores: times are upper bounds)", "",
            "Runs from `testing/merge_campaigns.py` `CONDITIONS` (2-3 runs; ANY_SOURCE arrival order swapped at "
            "random in "
            "half the receive pairs, optional calls missing, extra calls, in every condition). See the script's "
            "docstring for the columns.", "", md_table(acc), "", sim,
            "## Same program or not", "", md_table(same), "",
            "## Speed: 4 ranks, no collective, 2 runs", "", md_table(sp), ""]
    emit("\n".join(text), args.out)


if __name__ == "__main__":
    main()
