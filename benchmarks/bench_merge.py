"""Accuracy and speed of the multi-run merge against two baselines, measured in the same run (DESIGN §6, issue 4).

    python benchmarks/bench_merge.py                # everything, writes benchmarks/results/merge.md
    python benchmarks/bench_merge.py --quick        # smaller speed sizes

Methods compared, on the same runs and the same bursts:

- ``merge``: :func:`synthtrace.tracelib.merge.merge_runs.merge_runs` (structure + timing alignment), with and without
rescaling;
- ``positional``: the i-th burst of a thread gets the counters of the i-th burst of the same thread in the
  source run (raw values);
- ``cluster-mean``: bursts of both runs clustered on log10(instructions) x IPC with DBSCAN (the BSC Clustering
  tool's features, normalised to [0, 1]); every reference burst gets the mean of each counter over the source-run
  bursts of its cluster (nearest source burst's cluster for noise points); ``cluster-mean per ins``: the cluster's
  mean per-instruction rate times the burst's own instructions;
- ``oracle``: the true logical matching (synthetic data only), raw values — the error floor of any aligner.

Errors are relative, |estimate - truth| / truth, over reference bursts of at least 10 us with truth > 0; a burst
without an estimate counts as not covered (and is left out of the error). Synthetic campaigns come from
``testing/merge_campaigns.py`` (4 runs, 8 tasks, polling loops, ANY_SOURCE order, missing and extra bursts); simulated
experiments from ``synthtrace simulate`` (every pattern, three seeds, scored against the ground truth's logical
burst ids and the acceptance thresholds of issue 4); real data from the two LULESH runs; speed on 8 synthetic
runs of up to 1M bursts each.
"""
from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.results_io import emit  # noqa: E402

from testing.merge_campaigns import make_runs, true_matches  # noqa: E402
from synthtrace.tracelib.merge.merge_runs import MergeOptions, RunTables, merge_runs  # noqa: E402

KEYS = ["appl", "task", "thread", "burst_seq"]
MIN_NS = 10_000
PARAVER = ROOT.parent / "shared" / "traces" / "paraver"
LULESH_A = PARAVER / "lulesh_4+4_with_uncores_sockets1+2.chop_5it.prv"
LULESH_B = PARAVER / "lulesh_7+1_with_uncores_sockets1+2.chop8.prv"


# ----------------------------------------------------------------------------------------------- baselines
def positional(ref: pl.DataFrame, src: pl.DataFrame, counter: str) -> pl.Series:
    """i-th burst of a thread <- i-th burst of the same thread in the source run."""
    return (
        ref.select(KEYS)
        .join(src.select(*KEYS, counter), on=KEYS, how="left", maintain_order="left")
        .get_column(counter)
    )


def cluster_mean(ref: pl.DataFrame, src: pl.DataFrame, counter: str, eps: float = 0.015,
                 min_samples: int = 4, per_instruction: bool = False) -> pl.Series:
    """Cluster-mean extrapolation on (log10 instructions, IPC), as the BSC Clustering tool groups bursts.

    ``per_instruction``: the cluster's mean of counter / instructions times the burst's own instructions (a
    kinder variant of the baseline) instead of the cluster's plain mean of the counter.
    """
    from sklearn.cluster import DBSCAN
    from sklearn.neighbors import NearestNeighbors

    def feats(df: pl.DataFrame) -> np.ndarray:
        ins = df.get_column("PAPI_TOT_INS").cast(pl.Float64).fill_null(1).to_numpy()
        cyc = df.get_column("PAPI_TOT_CYC").cast(pl.Float64).fill_null(1).to_numpy()
        return np.c_[np.log10(np.maximum(ins, 1)), ins / np.maximum(cyc, 1)]

    fs, fr = feats(src), feats(ref)
    both = np.r_[fs, fr]
    lo, hi = both.min(axis=0), both.max(axis=0)
    scale = np.where(hi > lo, hi - lo, 1)
    ns, nr = (fs - lo) / scale, (fr - lo) / scale
    labels = DBSCAN(eps=eps, min_samples=min_samples).fit_predict(ns)
    vals = src.get_column(counter).cast(pl.Float64).to_numpy()
    if per_instruction:
        vals = vals / np.maximum(src.get_column("PAPI_TOT_INS").cast(pl.Float64).to_numpy(), 1)
    ok = labels >= 0
    if not ok.any():
        return pl.Series(counter, np.full(ref.height, np.nanmean(vals)))
    means = pl.DataFrame({"l": labels[ok], "v": vals[ok]}).group_by("l").agg(pl.col("v").mean())
    lut = dict(zip(means["l"].to_list(), means["v"].to_list()))
    nn = NearestNeighbors(n_neighbors=1).fit(ns[ok])
    _, idx = nn.kneighbors(nr)
    lab = labels[ok][idx[:, 0]]
    out = np.array([lut[x] for x in lab], dtype=np.float64)
    if per_instruction:
        out = out * ref.get_column("PAPI_TOT_INS").cast(pl.Float64).to_numpy()
    return pl.Series(counter, out, pl.Float64)


def errors(est: pl.Series, truth: pl.Series, dur: pl.Series) -> dict[str, float]:
    """Coverage (share of long bursts with an estimate) and median / p95 relative error of the estimates."""
    df = pl.DataFrame({"e": est.cast(pl.Float64), "t": truth.cast(pl.Float64), "d": dur}).filter(
        (pl.col("d") >= MIN_NS) & (pl.col("t") > 0))
    cov = df.get_column("e").is_not_null().mean() if df.height else float("nan")
    r = df.drop_nulls().select(((pl.col("e") - pl.col("t")).abs() / pl.col("t")).alias("r")).get_column("r")
    return {"coverage": float(cov), "median": float(r.median()) if r.len() else float("nan"),
            "p95": float(r.quantile(0.95)) if r.len() else float("nan")}


# ----------------------------------------------------------------------------------------------- synthetic accuracy
SCENARIOS = {
    "no variation": dict(max_polls=0, p_swap=0.0, p_missing=0.0, p_extra=0.0),
    "polling loops differ": dict(max_polls=8, p_swap=0.0, p_missing=0.0, p_extra=0.0),
    "ANY_SOURCE order differs": dict(max_polls=0, p_swap=0.5, p_missing=0.0, p_extra=0.0),
    "missing + extra bursts": dict(max_polls=0, p_swap=0.0, p_missing=0.1, p_extra=0.02),
    "all of the above": dict(max_polls=8, p_swap=0.5, p_missing=0.05, p_extra=0.02),
}


def synthetic_accuracy(seed: int = 11) -> pl.DataFrame:
    rows = []
    for name, kw in SCENARIOS.items():
        runs = make_runs(n_tasks=8, n_iters=40, n_runs=4, seed=seed, **kw)
        tables = [RunTables(r.run_id, r.run_name, r.bursts, r.mpi_calls) for r in runs]
        ref = runs[0]
        t0 = time.perf_counter()
        res_off = merge_runs(tables, MergeOptions(rescale=False))
        t_merge = time.perf_counter() - t0
        res_on = merge_runs(tables, MergeOptions(rescale=True))
        ref_b = ref.bursts.sort(KEYS)
        truth = ref.truth.sort(KEYS)
        dur = truth.get_column("duration_ns")
        by_id = {r.run_id: r for r in runs}
        # alignment accuracy: long bursts that have a true counterpart, matched to it
        correct = []
        pos_correct = []
        for other in runs[1:]:
            tm = true_matches(ref, other).sort(KEYS)
            m = res_off.matches.filter(pl.col("other_run_id") == other.run_id).sort(KEYS)
            j = tm.with_columns(m.get_column("other_burst_seq").alias("other_seq")).filter(
                (pl.col("duration_ns") >= MIN_NS) & pl.col("true_seq").is_not_null()
            )
            correct.append((j.get_column("other_seq") == j.get_column("true_seq")).fill_null(False).to_numpy())
            pos_correct.append((j.get_column("burst_seq") == j.get_column("true_seq")).to_numpy())
        acc = float(np.concatenate(correct).mean())
        pacc = float(np.concatenate(pos_correct).mean())
        per_method: dict[str, list[dict]] = {k: [] for k in ("merge", "merge --rescale", "positional",
                                                             "cluster-mean", "cluster-mean per ins", "oracle")}
        for q in res_off.quality.filter(pl.col("method") != "recorded").iter_rows(named=True):
            c = q["counter"]
            src = by_id[q["source_run_id"]]
            src_b = src.bursts.sort(KEYS)
            true_c = truth.get_column(c)
            oracle = true_matches(ref, src).sort(KEYS).join(
                src_b.select("appl", "task", "thread", pl.col("burst_seq").alias("true_seq"), pl.col(c).alias("_o")),
                on=["appl", "task", "thread", "true_seq"], how="left", maintain_order="left").get_column("_o")
            per_method["merge"].append(errors(res_off.merged.sort(KEYS).get_column(c), true_c, dur))
            per_method["merge --rescale"].append(errors(res_on.merged.sort(KEYS).get_column(c), true_c, dur))
            per_method["positional"].append(errors(positional(ref_b, src_b, c), true_c, dur))
            per_method["cluster-mean"].append(errors(cluster_mean(ref_b, src_b, c), true_c, dur))
            per_method["cluster-mean per ins"].append(errors(cluster_mean(ref_b, src_b, c, per_instruction=True),
                                                             true_c, dur))
            per_method["oracle"].append(errors(oracle, true_c, dur))
        orc = per_method["oracle"]
        for method, errs in per_method.items():
            ratio_m = [e["median"] / max(o["median"], 1e-9) for e, o in zip(errs, orc)]
            ratio_p = [e["p95"] / max(o["p95"], 1e-9) for e, o in zip(errs, orc)]
            rows.append({
                "scenario": name, "method": method,
                "matched right": acc if method.startswith("merge") else (pacc if method == "positional" else
                                                                           (1.0 if method == "oracle" else None)),
                "coverage": float(np.mean([e["coverage"] for e in errs])),
                "median err": float(np.median([e["median"] for e in errs])),
                "p95 err": float(np.median([e["p95"] for e in errs])),
                "worst median / oracle": float(np.max(ratio_m)), "worst p95 / oracle": float(np.max(ratio_p)),
                "bursts/run": ref.bursts.height, "merge s": t_merge if method == "merge" else None})
    return pl.DataFrame(rows)


# ----------------------------------------------------------------------------------------------- real data
def lulesh_accuracy() -> pl.DataFrame | None:
    if not LULESH_A.is_file():
        return None
    from synthtrace.tracelib.formats.paraver.reader import ParaverTrace
    dropped = ["PAPI_REF_CYC", "LONGEST_LAT_CACHE:MISS"]
    a = ParaverTrace(LULESH_A).read_tables("A")
    b = ParaverTrace(LULESH_B).read_tables("B")
    full_b = b[0].sort(KEYS)
    ra = RunTables("A", LULESH_A.stem, a[0], a[1])
    rb = RunTables("B", LULESH_B.stem, full_b.drop(dropped), b[1])
    rows = []
    dur = full_b.get_column("duration_ns")
    res = {}
    for resc in (True, False):
        res[resc] = merge_runs([ra, rb], MergeOptions(reference=LULESH_B.stem, rescale=resc), experiment="lulesh")
    q = {r["counter"]: r for r in res[True].quality.iter_rows(named=True)}
    src_b = a[0].sort(KEYS)
    for c in dropped:
        truth = full_b.get_column(c)
        for method, est in (("merge", res[False].merged.get_column(c)),
                            ("merge --rescale", res[True].merged.get_column(c)),
                            ("positional", positional(full_b, src_b, c)),
                            ("cluster-mean", cluster_mean(full_b, src_b, c)),
                            ("cluster-mean per ins", cluster_mean(full_b, src_b, c, per_instruction=True))):
            e = errors(est, truth, dur)
            rows.append({"counter": c, "method": method, **e,
                         "estimated (LOO)": q[c]["estimated_error"] if method == "merge --rescale" else None,
                         "rescaled by": q[c]["rescaled_by"] if method == "merge --rescale" else None})
    for c in ("PAPI_TOT_INS", "PAPI_TOT_CYC"):
        rows.append({"counter": c, "method": "cross-run difference (matched bursts)", "coverage": None,
                     "median": q[c]["cross_run_diff"], "p95": None, "estimated (LOO)": None, "rescaled by": None})
    return pl.DataFrame(rows)


# ----------------------------------------------------------------------------------------------- simulator
SIM_SEEDS = (7, 8, 9)
SIM_SIZE = {"ranks": 8, "iterations": 15, "runs": 4}
#: acceptance of issue 4 on simulated experiments
ACCEPT = {"matched right": 0.995, "coverage": 0.99, "median / oracle": 1.1, "p95 / oracle": 1.5}
SIM_METHODS = ("merge", "positional", "cluster-mean", "cluster-mean per ins")


def simulator_accuracy(out: Path, seeds: tuple[int, ...] = SIM_SEEDS, ranks: int = SIM_SIZE["ranks"],
                       iterations: int = SIM_SIZE["iterations"], runs: int = SIM_SIZE["runs"]) -> pl.DataFrame | None:
    """``synthtrace simulate`` experiments (every pattern, each seed), merged from their Paraver traces, against the
    ground truth, beside the two baselines on the same bursts.

    Scored: reference bursts >= 10 us that have a counterpart (same logical id) in the other run. ``matched right``:
    share of them matched to it (positional: the i-th burst of the thread is it), pooled over runs and seeds, and
    the lowest over seeds. Per transferred counter (source run: the merge's choice, for every method): coverage,
    median and p95 relative error against the reference run's true value, each divided by the oracle's (the source
    run's own value of the same logical burst, from ``--truth-counters all``); ``worst``: the largest over counters
    and seeds.
    """
    from synthtrace.pipelines.cli import main as cli
    from synthtrace.tracelib.formats.paraver.reader import ParaverTrace
    match_rows = []  # per seed, experiment, other run, method: bursts scored and matched right
    rows = []  # per seed, experiment, transferred counter, method: coverage and errors relative to the oracle
    for seed in seeds:
        d = out / f"seed{seed}"
        if cli(["simulate", str(d), "--ranks", str(ranks), "--iterations", str(iterations), "--runs", str(runs),
                "--seed", str(seed), "--no-labels", "--truth-counters", "all"]) != 0:
            return None
        for exp_dir in sorted(p for p in d.iterdir() if p.is_dir() and p.name != "ground_truth"):
            exp = exp_dir.name
            truth = pl.read_parquet(d / "ground_truth" / "bursts" / f"{exp}.parquet")
            tables = []
            for prv in sorted(exp_dir.glob("*.prv")):
                b, c, _ = ParaverTrace(prv).read_tables(prv.stem)
                tables.append(RunTables(prv.stem, prv.stem, b.sort(KEYS), c))
            res = merge_runs(tables, experiment=exp)
            ref = tables[0]
            ids = truth.select("run_name", *KEYS, "logical_id")
            ref_truth = truth.filter(pl.col("run_name") == ref.run_name)
            long_ref = ref_truth.filter(pl.col("duration_ns") >= MIN_NS).select(*KEYS, "logical_id")
            for o in tables[1:]:
                oid = ids.filter(pl.col("run_name") == o.run_name).drop("run_name")
                scored = long_ref.join(oid.select("logical_id"), on="logical_id", how="semi")
                m = (
                    scored.join(
                        res.matches.filter(pl.col("other_run") == o.run_name).select(
                            *KEYS, pl.col("other_burst_seq").alias("other_seq")
                        ),
                        on=KEYS,
                        how="left",
                    )
                    .join(
                        oid.rename({"burst_seq": "other_seq", "logical_id": "_merge"}),
                        on=["appl", "task", "thread", "other_seq"],
                        how="left",
                    )
                    .join(oid.rename({"logical_id": "_positional"}), on=KEYS, how="left")
                )
                for method in ("merge", "positional"):
                    ok = int((m.get_column(f"_{method}") == m.get_column("logical_id")).fill_null(False).sum())
                    match_rows.append({"experiment": exp, "method": method, "seed": seed, "right": ok, "n": m.height})
            ref_b = ref.bursts
            by_name = {t.run_name: t for t in tables}
            for q in res.quality.filter(pl.col("method") != "recorded").iter_rows(named=True):
                c = q["counter"]
                src_b = by_name[q["source_run"]].bursts
                oracle = (ids.filter(pl.col("run_name") == q["source_run"]).drop("run_name")
                          .join(src_b.select(*KEYS, pl.col(c).alias("_oracle")), on=KEYS).drop(KEYS))
                base = (long_ref.join(ref_truth.select(*KEYS, pl.col(c).alias("_true")), on=KEYS)
                        .join(oracle, on="logical_id")  # inner: bursts with a counterpart in the source run
                        .filter((pl.col("_true") > 0) & (pl.col("_oracle") > 0)))
                if base.height == 0:
                    continue
                est = {"merge": res.merged.select(*KEYS, pl.col(c).alias("_est")),
                       "positional": ref_b.select(KEYS).with_columns(positional(ref_b, src_b, c).alias("_est")),
                       "cluster-mean": ref_b.select(KEYS).with_columns(cluster_mean(ref_b, src_b, c).alias("_est")),
                       "cluster-mean per ins": ref_b.select(KEYS).with_columns(
                           cluster_mean(ref_b, src_b, c, per_instruction=True).alias("_est"))}
                rel = ((pl.col("_est").cast(pl.Float64) - pl.col("_true")).abs() / pl.col("_true"))
                o_rel = ((pl.col("_oracle").cast(pl.Float64) - pl.col("_true")).abs() / pl.col("_true"))
                o = base.select(o_rel.median().alias("m"), o_rel.quantile(0.95).alias("p")).row(0, named=True)
                for method, frame in est.items():
                    j = base.join(frame, on=KEYS, how="left")
                    e = j.drop_nulls("_est").select(rel.median().alias("m"), rel.quantile(0.95).alias("p")).row(
                        0, named=True)
                    rows.append({"experiment": exp, "method": method, "seed": seed, "counter": c,
                                 "coverage": j.get_column("_est").is_not_null().mean(),
                                 "median / oracle": (e["m"] / o["m"]) if o["m"] and e["m"] is not None else None,
                                 "p95 / oracle": (e["p"] / o["p"]) if o["p"] and e["p"] is not None else None})
    per_counter = pl.DataFrame(rows)
    right = (pl.DataFrame(match_rows).group_by("experiment", "method", "seed").agg(pl.col("right", "n").sum())
             .group_by("experiment", "method").agg((pl.col("right").sum() / pl.col("n").sum()).alias("matched right"),
                                                   (pl.col("right") / pl.col("n")).min().alias("lowest seed")))
    table = (per_counter.group_by("experiment", "method", maintain_order=True).agg(
        pl.col("counter").n_unique().alias("counters"),
        pl.col("coverage").min().alias("min coverage"),
        pl.col("median / oracle").median().alias("median / oracle (median over counters)"),
        pl.col("median / oracle").max().alias("worst median / oracle"),
        pl.col("p95 / oracle").max().alias("worst p95 / oracle"))
        .join(right, on=["experiment", "method"], how="left"))
    meets = ((pl.col("matched right") >= ACCEPT["matched right"]) & (pl.col("lowest seed") >= ACCEPT["matched right"])
             & (pl.col("min coverage") >= ACCEPT["coverage"])
             & (pl.col("worst median / oracle") <= ACCEPT["median / oracle"])
             & (pl.col("worst p95 / oracle") <= ACCEPT["p95 / oracle"]))
    order = {m: i for i, m in enumerate(SIM_METHODS)}
    return (table.with_columns(pl.when(pl.col("method") == "merge").then(meets.fill_null(False))
                               .otherwise(None).alias("meets acceptance"),
                               pl.col("method").replace_strict(order).alias("_o"))
            .sort("experiment", "_o").drop("_o")
            .select("experiment", "method", "matched right", pl.col("lowest seed").alias("matched right, lowest seed"),
                    "counters", "min coverage", "median / oracle (median over counters)", "worst median / oracle",
                    "worst p95 / oracle", "meets acceptance"))


# ----------------------------------------------------------------------------------------------- speed
def speed(sizes: list[int], n_runs: int = 8, n_tasks: int = 64, repeat: int = 2) -> pl.DataFrame:
    """``merge_runs`` time (s) on ``n_runs`` synthetic runs of each size: the best of ``repeat`` (the machine is
    shared), with every repetition's time, the CPU time of the process (all threads; what the work costs whatever
    the load) and the highest 1-minute load average seen before them."""
    rows = []
    for target in sizes:
        n_iters = max(1, round(target / n_tasks / 13.0))
        runs = make_runs(n_tasks=n_tasks, n_iters=n_iters, n_runs=n_runs, seed=5, max_polls=6, p_swap=0.5,
                         p_missing=0.05, p_extra=0.01)
        tables = [RunTables(r.run_id, r.run_name, r.bursts, r.mpi_calls) for r in runs]
        del runs
        merge_runs([RunTables(t.run_id, t.run_name, t.bursts.head(2000), t.mpi_calls.head(2000)) for t in tables[:2]])
        times, cpu, loads = [], [], []
        for _ in range(repeat):
            loads.append(os.getloadavg()[0])
            t0, c0 = time.perf_counter(), time.process_time()
            res = merge_runs(tables)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        dt = min(times)
        n = sum(t.bursts.height for t in tables)
        q = res.quality.filter(pl.col("counter") == "PAPI_L3_TCM")
        rows.append(
            {
                "runs": n_runs,
                "bursts/run": n // n_runs,
                "total bursts": n,
                "seconds": dt,
                "us/burst": dt / n * 1e6,
                "seconds, each run": " / ".join(f"{x:.2f}" for x in times),
                "CPU s (all threads)": min(cpu),
                "load avg": max(loads),
                "coverage (all bursts)": q["coverage"].item(),
                "coverage (>= 10 us)": q["coverage_long"].item(),
            }
        )
    return pl.DataFrame(rows)


# ----------------------------------------------------------------------------------------------- report
def sim_note(sim: pl.DataFrame | None) -> str:
    """What the per-instruction cluster mean shows on the simulated experiments (numbers from ``sim``)."""
    if sim is None:
        return ""
    c = sim.filter(pl.col("method") == "cluster-mean per ins")
    m = c.get_column("median / oracle (median over counters)")
    return ("- `cluster-mean per ins` has typical errors below the oracle's on some patterns (median over counters "
            f"{m.min():.2f}-{m.max():.2f} of the oracle): averaging a counter's per-instruction rate over a cluster "
            "removes the source run's own noise, which the oracle (one run's value) carries, when the bursts of a "
            "cluster share their rate; where they do not, it is far off (worst counter "
            f"{c.get_column('worst median / oracle').max():.1f}x the oracle in median, worst p95 "
            f"{c.get_column('worst p95 / oracle').max():.0f}x), while the merge stays at the oracle for every "
            "counter. Shrinking the matched value towards such an average is a possible refinement, not done here.")


def machine() -> str:
    cpu = "?"
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        cpu = next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Model name")), "?")
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    import numba
    return (f"{cpu}, {os.cpu_count()} cores, {mem:.0f} GiB RAM, {platform.system()} {platform.release()}; "
            f"Python {platform.python_version()}, Polars {pl.__version__}, NumPy {np.__version__}, "
            f"Numba {numba.__version__}")


def md_table(df: pl.DataFrame, floats: str = "{:.3g}") -> str:
    """``df`` as a Markdown table; shares of bursts matched right as percentages with two decimals."""
    def fmt(v, col: str):
        if v is None:
            return ""
        if isinstance(v, float):
            if v != v:
                return ""
            return f"{100 * v:.2f} %" if col.startswith("matched right") else floats.format(v)
        return str(v)
    lines = ["| " + " | ".join(df.columns) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(fmt(v, c) for v, c in zip(row, df.columns)) + " |" for row in df.iter_rows()]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="speed at 8 x 50k/100k/200k bursts only")
    ap.add_argument("--sizes", type=int, nargs="*", help="bursts per run of the speed runs")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "merge.md")
    args = ap.parse_args()
    sizes = args.sizes or ([50_000, 100_000, 200_000] if args.quick else [250_000, 500_000, 1_000_000])
    t_all = time.perf_counter()
    syn = synthetic_accuracy()
    print(syn)
    lul = lulesh_accuracy()
    print(lul)
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        sim = simulator_accuracy(Path(tmp) / "sim")
    print(sim)
    spd = speed(sizes)
    print(spd)
    text = [
        "# Merge: accuracy against baselines, real LULESH data, speed",
        "",
        f"Reproduce: `python benchmarks/bench_merge.py` ({time.perf_counter() - t_all:.0f} s in all).",
        f"Machine: {machine()}.",
        "",
        "## Synthetic campaigns (4 runs x 8 tasks x 40 iterations, ground truth known)",
        "",
        "`matched right`: share of reference bursts >= 10 us that have a true counterpart in the other run and are "
        "matched to it (positional: the i-th burst is the true one). Errors: median over the transferred counters of "
        "each counter's median / p95 relative error on bursts >= 10 us; `worst ... / oracle`: the largest ratio to "
        "the oracle (true matching, raw values) over the transferred counters.",
        "",
        md_table(syn),
        "",
        "## Real data: LULESH 7+1 run without PAPI_REF_CYC and LONGEST_LAT_CACHE:MISS, merged from the 4+4 run",
        "",
        "Errors against what the 7+1 run really recorded (bursts >= 10 us); beside them the median cross-run "
        "difference of counters both runs recorded, on the merge's matched bursts.",
        "",
        md_table(lul) if lul is not None else "(real traces not found)",
        "",
        f"## Simulated experiments (`synthtrace simulate --ranks {SIM_SIZE['ranks']} --iterations "
        f"{SIM_SIZE['iterations']} --runs {SIM_SIZE['runs']} --seed S`, S = {', '.join(map(str, SIM_SEEDS))})",
        "",
        "The simulator's five patterns (halo: Testall polling; cg: three Allreduces per iteration; master_worker: "
        "Iprobe polling and MPI_ANY_SOURCE receives; wavefront; transpose) with its default run-to-run variation "
        "(polling loops of different lengths, arrival order, housekeeping bursts present in some runs only, OS "
        "noise), merged from their Paraver traces and scored against the ground truth's logical burst ids, beside "
        "the baselines on the same bursts. Scored: reference bursts >= 10 us that have a counterpart in the other "
        "run; `matched right` pooled over the non-reference runs and seeds, and the lowest seed. Per transferred "
        "counter (source run: the merge's choice, for every method): coverage and median / p95 relative error "
        "divided by the oracle's (the source run's own value of the same logical burst); median over counters, "
        "worst over counters and seeds. `meets acceptance` (issue 4): matched right >= "
        f"{ACCEPT['matched right']:.1%} pooled and in every seed, coverage >= {ACCEPT['coverage']:.0%}, every "
        f"counter's median error <= {ACCEPT['median / oracle']}x and p95 <= {ACCEPT['p95 / oracle']}x the oracle's.",
        "",
        md_table(sim) if sim is not None else "(simulator not available in this installation)",
        "",
        f"## Speed: {spd['runs'][0]} runs merged (alignment + transfer + quality), 2 cores",
        "",
        "Synthetic runs of 64 tasks with every kind of variation; `seconds` is `merge_runs` alone (tables in "
        "memory, Numba kernels already compiled and cached), the best of the repetitions listed beside it (the "
        "machine is shared: `load avg` is the highest 1-minute load average seen before them; `CPU s` is the "
        "process's CPU time over all threads, which the load does not inflate). Coverage of a "
        "transferred counter: over all reference bursts (the reference's surplus polling iterations have no "
        "counterpart) and over bursts >= 10 us.",
        "",
        md_table(spd),
        "",
        "## Reading the tables",
        "",
        "- Where runs have the same structure (`no variation`, and `ANY_SOURCE order differs` here, where the "
        "logical burst is the compute before the i-th receive whatever message arrives) positional matching is "
        "already the oracle, and the merge equals it. As soon as polling loops, housekeeping calls or missing "
        "bursts shift the sequences, positional matching pairs the wrong bursts (a few % right) and its errors "
        "explode, while the merge stays at the oracle (worst per-counter ratio to the oracle printed in the table).",
        "- Cluster-mean extrapolation does not depend on the alignment but cannot know what distinguishes bursts of "
        "similar instructions and IPC; its errors are orders of magnitude above the merge's on the synthetic "
        "campaigns and 1.6-2.2x the merge's median errors on LULESH.",
        "- master_worker: the master processes each result right after receiving it from MPI_ANY_SOURCE, so the "
        "last result of a round is processed before the round's MPI_Bcast in one run and before the next "
        "MPI_Iprobe in another. The aligner pairs such bursts by the message they start with (a substitution "
        "between different closing calls, allowed when the opening message agrees and the reference counters and "
        "duration agree closely, and only where it lowers the total cost). With closing calls required to agree, "
        "master_worker had 98.9 % matched right on seed 7 (previous version of this file); the other patterns "
        "were already at 100 % and stay there.",
        sim_note(sim),
        "- Coverage below 1 in `missing + extra bursts` is the share of long reference bursts that have a "
        "counterpart at all (the oracle's coverage is the same): the merge leaves the others NULL (or gives a "
        "flagged estimate with `--estimate-unmatched`) instead of pairing them with a neighbour.",
        "- Rescaling: `merge` rows are measured with rescaling forced off and `merge --rescale` with it forced on. "
        "Since issue 12 the default is neither: each counter's transfer (as recorded, per instruction, or rescaled by a"
        " co-varying reference counter) is chosen by the leave-one-out estimate, and rescaling is taken only for strong"
        " co-variation with slope <= 1. On LULESH that choice gives PAPI_REF_CYC median 0.029 / 0.028 in the two "
        "directions (tests/test_merge_stress.py; benchmarks/results/merge_stress.md); on the simulated campaigns the "
        "exact transfer is already at the oracle where the matching is right, and forced rescaling makes some counters "
        "several times worse.",
        "",
    ]
    emit("\n".join(text), args.out)


if __name__ == "__main__":
    main()
