"""Predictor benchmark: what the merged counter set buys over each single-run counter set (DESIGN §8, issue 7).

For every campaign the same bursts are predicted by grouped cross-validation (group = application, so each
application is predicted by a model that never saw it), once with the merged counter set and once with each
single-run counter set (the counters one run of the campaign recorded), for targets ``ipc`` and ``tpi``.

Campaigns:

1. **random workloads** (``testing/model_campaigns.py``): applications made of kernels with random, physically
   ordered behaviour (miss rates per level, branches, FP and vector shares); every experiment recorded in three
   runs of two programmable counters each (+ instructions and cycles), merged by synthtrace's merge;
2. **the project's simulator** (``synthtrace simulate --pattern all``): its five communication patterns, each an
   application with its own kernels, recorded with the simulator's PMU plan (five runs), merged by synthtrace;
   leaving one application out leaves its pattern's kernels out: the hard case;
3. **the project's simulator with several applications per pattern** (``--apps-per-pattern K``, default kernel
   spread, see :mod:`synthtrace.simulator.variants`): 5K applications that share their pattern's code structure and
   whose kernels differ as inputs, compilers and data layouts make them differ; same path (simulate, ingest,
   merge), folds by application; for the largest K also folds by pattern (unseen code structure);
4. **real traces** (``../shared/traces/paraver``): the two LULESH runs (one application) and prime; each trace
   recorded all its counters in one run, so single-run sets are emulated by splitting its programmable counters
   the way a PMU with few slots would (fixed instructions and cycles in every set). Two applications only, so
   "unseen workload" means training on one and predicting the other; a second table folds by MPI rank instead.

Run (about 13 minutes on the 2-core sandbox, 7 of them for the 40-application campaign)::

    python benchmarks/bench_predictors.py --apps 16 --apps-per-pattern 4,8 --pattern-fold-models hgb \
        --models hgb,rf,linear --out benchmarks/results/predictors.md
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

import numpy as np
import polars as pl
from threadpoolctl import threadpool_limits

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.machine import machine_description  # noqa: E402
from benchmarks.results_io import emit  # noqa: E402

from synthtrace.models.features import counter_sets  # noqa: E402
from synthtrace.models.predictors import compare_counter_sets  # noqa: E402
from testing.model_campaigns import predictor_campaign  # noqa: E402
from synthtrace.warehouse.runs import runs_table  # noqa: E402
from synthtrace.warehouse.layout import Warehouse  # noqa: E402
from synthtrace.models.training_data import load_bursts  # noqa: E402

TRACES = Path(os.environ.get("SYNTHTRACE_TRACES", ROOT.parent / "shared" / "traces")) / "paraver"
TARGETS = ("ipc", "tpi")
#: iterations per run of the variant campaigns (what matters there is how many applications share a kernel, not
#: how many bursts each has; 3 keeps the benchmark short)
VARIANT_ITERATIONS = 3


def machine() -> str:
    """The shared machine line plus the libraries that matter here."""
    return (machine_description() + " (shared with other jobs)"
            f"; scikit-learn {version('scikit-learn')}, numpy {np.__version__}, polars {pl.__version__}; "
            "estimators single-threaded")


def cli(*args: str) -> None:
    from synthtrace.pipelines.cli import main
    code = main([str(a) for a in args])
    if code != 0:
        raise SystemExit(f"synthtrace {' '.join(map(str, args))} failed with exit code {code}")


def merged_frame(root: Path) -> tuple[pl.DataFrame, dict]:
    frame, info = load_bursts(Warehouse(root))
    return frame.filter(pl.col("experiment").is_in(info["merged"])), info


def run_table(frame: pl.DataFrame, sets: dict, kinds: tuple[str, ...], folds: int, campaign: str) -> pl.DataFrame:
    parts = []
    for target in TARGETS:
        t = compare_counter_sets(frame, target, sets, kinds=kinds, n_splits=folds)
        parts.append(t.with_columns(pl.lit(campaign).alias("campaign"), pl.lit(target).alias("target")))
    return pl.concat(parts)


def random_workloads(tmp: Path, n_apps: int, kinds: tuple[str, ...]) -> pl.DataFrame:
    root = tmp / "random"
    predictor_campaign(root, n_apps=n_apps, n_kernels=6, n_iters=5, seed=11, merge="real")
    frame, _ = merged_frame(root)
    return run_table(frame, counter_sets(runs_table(Warehouse(root)), per_experiment=True), kinds, 5,
                     f"random workloads ({n_apps} apps)")


def simulated(tmp: Path, name: str, *options: str) -> tuple[pl.DataFrame, dict, Path]:
    """``synthtrace simulate`` (8 ranks, seed 1, ``options``) -> ingest -> merge every experiment; returns the merged
    bursts, the single-run counter sets and the ground-truth folder."""
    sim, root = tmp / name, tmp / f"{name}wh"
    cli("simulate", sim, "--pattern", "all", "--ranks", "8", "--seed", "1", *options)
    cli("ingest", sim, "-w", root)
    for exp in sorted(runs_table(Warehouse(root))["experiment"].unique().to_list()):
        cli("merge", exp, "-w", root)
    frame, _ = merged_frame(root)
    return frame, counter_sets(runs_table(Warehouse(root)), per_experiment=True), sim / "ground_truth"


def simulator(tmp: Path, kinds: tuple[str, ...]) -> pl.DataFrame:
    frame, sets, _ = simulated(tmp, "sim", "--iterations", "10")
    return run_table(frame, sets, kinds, 5, "project simulator (5 patterns)")


def simulator_variants(tmp: Path, per_pattern: int, kinds: tuple[str, ...],
                       pattern_kinds: tuple[str, ...]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``per_pattern`` applications per pattern (kernel variants, :mod:`synthtrace.simulator.variants`): folds by
    application, and (models ``pattern_kinds``) folds by pattern."""
    frame, sets, truth = simulated(tmp, f"simvar{per_pattern}", "--iterations", str(VARIANT_ITERATIONS),
                                   "--apps-per-pattern", str(per_pattern))
    name = f"project simulator ({per_pattern} apps per pattern, {5 * per_pattern} apps)"
    by_app = run_table(frame, sets, kinds, 5, f"{name}, folds by application")
    if not pattern_kinds:
        return by_app, pl.DataFrame()
    pattern = pl.read_parquet(truth / "experiments.parquet").select("app", "pattern").unique()
    by_pattern = (frame.join(pattern, on="app", how="left", maintain_order="left")
                  .with_columns(pl.col("pattern").alias("app")).drop("pattern"))
    return by_app, run_table(by_pattern, sets, pattern_kinds, 5, f"{name}, folds by pattern")


#: emulated PMU plans of the real traces: fixed instructions + cycles, two programmable counters per run
REAL_PLANS = {
    "lulesh": [["PAPI_REF_CYC"], ["LONGEST_LAT_CACHE:MISS"]],
    "prime": [["PAPI_L1_DCM", "PAPI_L2_DCM"], ["PAPI_L3_TCM", "PAPI_BR_MSP"], ["PAPI_BR_INS", "RESOURCE_STALLS"]],
}


def real_traces(tmp: Path, kinds: tuple[str, ...]) -> tuple[pl.DataFrame, pl.DataFrame]:
    root = tmp / "realwh"
    cli(
        "ingest",
        TRACES / "lulesh_4+4_with_uncores_sockets1+2.chop_5it.prv",
        TRACES / "lulesh_7+1_with_uncores_sockets1+2.chop8.prv",
        "--app",
        "lulesh",
        "--experiment",
        "lulesh",
        "-w",
        root,
    )
    cli("ingest", TRACES / "prime_v0.prv", "--app", "prime", "--experiment", "prime", "-w", root)
    frame, _ = load_bursts(Warehouse(root))  # unmerged: each trace has every counter it recorded
    fixed = ["PAPI_TOT_INS", "PAPI_TOT_CYC"]
    n_sets = max(len(p) for p in REAL_PLANS.values())
    sets = {f"pmu set {k}": {app: fixed + plan[k % len(plan)] for app, plan in REAL_PLANS.items()}
            for k in range(n_sets)}
    by_app = run_table(frame, sets, kinds, 2, "real: LULESH x2 + prime, folds by application")
    rows = []
    for app in REAL_PLANS:  # within one application: folds by MPI rank
        f = frame.filter(pl.col("app") == app).with_columns(pl.col("task").cast(pl.String).alias("app"))
        s = {f"pmu set {k}": {app: fixed + plan} for k, plan in enumerate(REAL_PLANS[app])}
        rows.append(run_table(f, s, kinds, 4, f"real: {app}, folds by MPI rank"))
    return by_app, pl.concat(rows)


NOTES = """## Reading the results

- **Random workloads** (many applications drawn from one physical counter model): the merged set lets every
  estimator learn how misses at each level, mispredictions and the FP/vector mix combine into IPC; each single
  run sees only part of that and its error stays 3-4x higher on unseen applications. 16 groups, so "unseen
  workload" is meaningful; the >= 30 % target is met with every model.
- **Project simulator, one application per pattern**: five patterns, each with kernels of its own. Leaving one
  application out leaves its pattern's kernels out: no counter set generalises (R² near or below 0) and the
  difference between sets is noise around an extrapolation error. Kept as the hard case.
- **Project simulator, several applications per pattern**: every application of a pattern runs its own variants
  of the pattern's kernels (``--apps-per-pattern``, :mod:`synthtrace.simulator.variants`, default spread 0.5: miss
  rates, local miss ratios and misprediction rates log- or logit-normal with sigma 0.5, i.e. one sigma is a factor
  1.65 and 95 % of applications lie within a factor 2.7 of the base kernel, the range different inputs and data
  layouts give the same code; instruction mix and memory-level parallelism sigma 0.25, what compilers change;
  base CPI sigma 0.1, as no counter reveals it). MPI's and the runtime's code (polls, start-up, shut-down) is the
  same in every application. 3 iterations per run.
  - **8 applications per pattern (40 apps): target met.** The merged set cuts MAPE by 35-62 % for ipc and 44-59 %
    for tpi, every model, with R² 0.72-0.86 (best single sets: R² 0.41-0.55 for the trees, 0.11 or less for
    the linear model). Exploratory runs of the same campaign with 5 iterations (seed 1; seed 2 with hgb only) gave
    37-65 %.
  - **4 applications per pattern (20 apps): target not met by the tree models** (ipc 28 % for hgb and rf; tpi
    23 % for hgb and -6 % for rf; the linear model 52 % and 48 %). Measured on the same campaign with hgb: (1) each
    held-out kernel has at most three variants in training, fewer when GroupKFold's size-balanced assignment puts
    equally sized applications of one pattern in the same test fold (three of the four wavefront applications are
    predicted by a model that saw one), so the trees recognise kernels instead of learning how misses make
    cycles; (2) two kernels are counter twins: ``precond`` (core-bound) and ``sweep_chunk`` (compute-scalar) have
    about the same instruction mix and miss rates and differ in their base CPI (1.6 vs 0.38), which no counter
    shows; with few variants the merged set's extra dimensions give the trees more ways to take one for the other
    (precond's IPC error 153 % merged vs 64 % for the best single set; sweep_chunk's tpi error about 105 % for
    every set); (3) ``spmv``, the only latency-bound kernel, whose time depends on the hidden memory-level
    parallelism, is off by 44-76 % with every set. Not the cause: the spread of the hidden parameters between
    applications (base CPI, memory-level parallelism) is 3 % of the variance of log CPI over the campaign's
    kernels (a floor near 7 % MAPE on work kernels); polls, start-up and shut-down are 67 % of the scored bursts
    and every set predicts them within 1.4-2.4 %, which dilutes MAPE, but the cut on work kernels alone is about
    the same (27 % ipc, 23 % tpi). Exploratory runs with 5 and 10 iterations gave tree cuts of 22-29 % (one -45 %).
  - **Folds by pattern** (8 per pattern, hgb): R² -1.0 (ipc) and -0.25 (tpi), MAPE 37-41 %: no counter set
    predicts an unseen code structure; the large "cut" only says the single-run sets fail worse.
- **Real traces, folds by application**: two applications only (LULESH, prime) with different counters; training
  on one and predicting the other is extrapolation, and the errors (>= 100 %) show it. Reported because the issue
  asks for the comparison, not as evidence either way.
- **Real traces, folds by MPI rank**: within one application. LULESH recorded a single non-cycle counter (the LLC
  misses; REF_CYC counts cycles and is never a feature); its merged set adds the memory controllers' CAS counts
  (uncore samples apportioned to bursts by LLC-miss rate, so nearly the LLC misses again) and does 3-14 % worse
  than the best single set. prime's merged set (L1, L2, L3 misses and branches; its stall-cycle counter is never
  a feature) cuts the IPC error of its best single-run set by 16 % (hgb) and 42 % (linear), ties with rf, and
  helps little for tpi (1-11 %).
"""


def markdown(table: pl.DataFrame) -> list[str]:
    lines = ["| campaign | target | model | counter set | features | R² | MAPE | MAPE cut vs best single |",
             "|---|---|---|---|---|---|---|---|"]
    for r in table.iter_rows(named=True):
        cut = "" if r["mape_cut_vs_best_single"] is None else f"**{r['mape_cut_vs_best_single']:+.0%}**"
        lines.append(f"| {r['campaign']} | {r['target']} | {r['model']} | {r['counter_set']} | {r['n_features']} | "
                     f"{r['r2']:.3f} | {r['mape']:.1%} | {cut} |")
    return lines


def timed(label: str, log: list[dict], fn, *args):
    """``fn(*args)``, its wall time and the 1-minute load average before and after it appended to ``log``."""
    before, t0 = os.getloadavg()[0], time.perf_counter()
    out = fn(*args)
    log.append({"campaign": label, "seconds": time.perf_counter() - t0, "load": (before, os.getloadavg()[0])})
    print(label, out, file=sys.stderr)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--apps", type=int, default=16, help="applications of the random-workload campaign")
    ap.add_argument("--apps-per-pattern", default="4,8",
                    help="applications per pattern of the project simulator's variant campaigns (comma-separated)")
    ap.add_argument("--pattern-fold-models", default="hgb",
                    help="models evaluated with folds by pattern on the largest variant campaign ('' for none)")
    ap.add_argument("--models", default="hgb,rf,linear")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    kinds = tuple(args.models.split(","))
    per_pattern = [int(x) for x in args.apps_per_pattern.split(",") if x.strip()]
    pattern_kinds = tuple(k for k in args.pattern_fold_models.split(",") if k)
    log: list[dict] = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-predictors-") as d, threadpool_limits(1):
        tmp = Path(d)
        a = timed(f"random workloads ({args.apps} apps)", log, random_workloads, tmp, args.apps, kinds)
        b = timed("project simulator (5 patterns)", log, simulator, tmp, kinds)
        variants, by_pattern = [], pl.DataFrame()
        for k in per_pattern:
            pk = pattern_kinds if k == max(per_pattern) else ()
            v, vp = timed(f"project simulator ({k} apps per pattern)", log, simulator_variants, tmp, k, kinds, pk)
            variants.append(v)
            by_pattern = vp if vp.height else by_pattern
        v = pl.concat(variants) if variants else pl.DataFrame()
        c, c2 = (timed("real traces", log, real_traces, tmp, kinds) if TRACES.is_dir()
                 else (pl.DataFrame(), pl.DataFrame()))
    elapsed = time.perf_counter() - t0
    pattern_models = args.pattern_fold_models or "''"
    summary = pl.concat([x for x in (a, b, v, by_pattern, c) if x.height]).filter(pl.col("counter_set") == "merged")
    lines = ["# Predictor benchmark: merged counter set vs single-run counter sets", "",
             f"Machine: {machine()}.", "",
             "Reproduce:", "", "```",
             f"python benchmarks/bench_predictors.py --apps {args.apps} --apps-per-pattern "
             f"{args.apps_per_pattern} --pattern-fold-models {pattern_models} --models {args.models} "
             "--out benchmarks/results/predictors.md", "```", "",
             f"Every number is out-of-fold: grouped K-fold cross-validation (group = application unless the campaign "
             f"says otherwise, 5 folds or one per group when fewer), on the same bursts (>= 1e4 instructions, target "
             f"known) for every counter set. MAPE cut = 1 - MAPE(merged) / MAPE(best single-run set). Targets: ipc "
             f"(instructions per cycle) and tpi (time per instruction, ns); features never contain cycles or time. "
             f"Total time {elapsed:.0f} s.", "",
             "| campaign | time | 1-min load average before → after |", "|---|---|---|"]
    for r in log:
        lines.append(f"| {r['campaign']} | {r['seconds']:.0f} s | {r['load'][0]:.2f} → {r['load'][1]:.2f} |")
    lines += ["", "## Summary (merged set)", "",
              "| campaign | target | model | R² | MAPE | MAPE cut vs best single |", "|---|---|---|---|---|---|"]
    for r in summary.iter_rows(named=True):
        lines.append(f"| {r['campaign']} | {r['target']} | {r['model']} | {r['r2']:.3f} | {r['mape']:.1%} | "
                     f"{r['mape_cut_vs_best_single']:+.0%} |")
    lines += ["", "Target (issue 7): on simulated campaigns, merged features cut MAPE by >= 30 % against the best "
              "single-run set.", ""]
    for title, t in (("Random workloads", a), ("Project simulator, one application per pattern", b),
                     ("Project simulator, several applications per pattern (kernel variants)", v),
                     ("Project simulator, several applications per pattern, folds by pattern", by_pattern),
                     ("Real traces, folds by application", c),
                     ("Real traces, folds by MPI rank within one application", c2)):
        if t.height:
            lines += [f"## {title}", "", *markdown(t), ""]
    emit("\n".join(lines) + "\n" + NOTES, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
