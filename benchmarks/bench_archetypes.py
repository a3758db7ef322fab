"""Archetype benchmark (DESIGN §7, issue 6): accuracy on simulated campaigns and a plausibility run on real traces.

    python benchmarks/bench_archetypes.py [--out benchmarks/results/archetypes.md] [--quick]

1. **Simulated campaign** (needs ``synthtrace.simulator``): for each application the simulator writes several runs
   with different counter sets plus ground truth (archetype of every burst, MPI call and phase of the reference
   run). We ingest, merge (``synthtrace.tracelib.merge.merge_runs``, when present) and classify; macro-F1 over the 13
   archetypes is
   computed for (a) the merged trace, (b) the simulator's full ground-truth counters, (c) each single run's own
   counter set — a burst the counters cannot decide counts as wrong (``insufficient_counters`` is not an
   archetype). Discovery: Cohen's kappa against the rules and bootstrap ARI on the full counters.
2. **Real traces** (``../shared/traces/paraver``): archetype mix and the roofline / Ridgeline / timeline plots
   (PNGs in ``benchmarks/results/figures/``) for a plausibility review.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from synthtrace.models.analysis import mix  # noqa: E402
from synthtrace.pipelines.jobs import analyse as analyse_experiment  # noqa: E402
from synthtrace.models.archetypes import INSUFFICIENT  # noqa: E402
from synthtrace.tracelib.domain.machine import load_machine  # noqa: E402

TRACES = ROOT.parent / "shared" / "traces" / "paraver"
REAL = {
    "lulesh": "lulesh_4+4_with_uncores_sockets1+2.chop_5it.prv",
    "lulesh71": "lulesh_7+1_with_uncores_sockets1+2.chop8.prv",
    "prime": "prime_v0.prv",
    "jacobi": "jacobi-2d-imper_v0.prv",
}



# ------------------------------------------------------------------------------------------------ simulated
def pipeline_section(quick: bool) -> list[str]:
    """End to end: simulated Paraver traces -> ingest -> merge -> classify, scored against the ground truth."""
    try:
        from testing.archetype_campaigns import f1_13, pipeline_campaign
    except ImportError as exc:
        return ["## Simulated campaigns, end to end", "", f"Not run: {exc}.", ""]
    lines = [
        "## Simulated campaigns, end to end (simulate -> ingest -> merge -> classify)",
        "",
        "Five applications (halo, cg, master_worker, wavefront, transpose), 8 ranks, 5 runs each with the "
        "simulator's PMU constraint (3 fixed + 4 programmable counters per run), the simulator labelling its "
        "ground truth with these rules on each run's complete counters. Macro-F1 over the 13 archetypes present in "
        "the truth, over every burst, MPI call and phase of the reference run (`merged`, `full`: the reference "
        "run's complete counters from the ground truth) or of run k (`run k`: its own counters only); "
        "`insufficient_counters` and missing units count as errors.",
        "",
        "| seed | iterations | units | archetypes in truth | merged | full | single runs (min-max) | best single |",
        "|---|---|---|---|---|---|---|---|",
    ]
    t0 = time.perf_counter()
    per_unit = None
    for seed in ([1] if quick else [1, 2]):
        with tempfile.TemporaryDirectory() as tmp:
            r = pipeline_campaign(tmp, iterations=3 if quick else 6, seed=seed)
        sc = {k: f1_13(p) for k, p in r["pairs"].items()}
        singles = [v for k, v in sc.items() if k.startswith("run ")]
        merged = r["pairs"]["merged"]
        n_arch = len(set(merged["truth"].drop_nulls()) - {"balanced"})
        lines.append(
            f"| {seed} | {3 if quick else 6} | {merged.height} | {n_arch} | {sc['merged']:.4f} | {sc['full']:.4f} | "
            f"{min(singles):.3f}-{max(singles):.3f} | {max(singles):.3f} |"
        )
        if per_unit is None:
            per_unit = {k: {u: f1_13(p.filter(pl.col("unit") == u)) for u in ("burst", "mpi", "phase")}
                        for k, p in r["pairs"].items()}
    lines += [
        "",
        "Per unit (first seed):",
        "",
        "| counter set | bursts (9) | MPI calls (2) | phases (2) |",
        "|---|---|---|---|",
    ]
    lines += [f"| {k} | {v['burst']:.3f} | {v['mpi']:.3f} | {v['phase']:.3f} |" for k, v in per_unit.items()]
    lines += ["", f"Wall time {time.perf_counter() - t0:.1f} s.", ""]
    return lines


def simulated_section(quick: bool) -> list[str]:
    try:
        from testing.archetype_campaigns import run_campaign
    except ImportError as exc:
        return ["## Simulated campaigns", "", f"Not run: the simulator is not available here ({exc}).", ""]
    t0 = time.perf_counter()
    rows, disc = run_campaign(quick=quick)
    lines = [
        "## Simulated kernel campaigns (counter model only)",
        "",
        "Campaigns of `testing/archetype_campaigns.py`: every kernel of the simulated applications as bursts of "
        "2e3-3e7 instructions, each executed in 5 runs (simulator counter model, run-to-run noise), each run "
        "recording the 3 fixed counters + 4 programmable ones (simulator PMU constraint). Macro-F1 over the "
        "burst archetypes of the ground truth (rules on noise-free counters); a burst the counters cannot "
        "decide (`insufficient_counters`) counts as an error. `merged` takes every counter from the run that "
        "recorded it (ideal matching: run-to-run noise only).",
        "",
        "| app | units | merged | full counters | "
        + " | ".join(f"run {i}" for i in range(max(len(r["single"]) for r in rows)))
        + " |",
        "|---|---|---|---|" + "---|" * max(len(r["single"]) for r in rows),
    ]
    for r in rows:
        lines.append(f"| {r['app']} | {r['units']} | {r['merged']:.3f} | {r['full']:.3f} | "
                     + " | ".join(f"{v:.3f}" for v in r["single"]) + " |")
    lines += ["", f"Discovery on the full counters: Cohen's kappa vs rules **{disc['kappa']:.3f}** "
              f"({disc['n_compared']} bursts), bootstrap ARI **{disc['stability_ari']:.3f}** "
              f"(raw cluster ids {disc['stability_ari_clusters']:.3f}), {disc['n_clusters']} clusters.",
              "", f"Wall time {time.perf_counter() - t0:.1f} s.", ""]
    return lines


def agreement_section(quick: bool) -> list[str]:
    """Evidence-scored rules vs the first-match cascade, against the simulator's intended archetypes (issue 15)."""
    from testing.archetype_campaigns import agreement
    t0 = time.perf_counter()
    a = agreement(n_per_kernel=100 if quick else 200, seeds=(0,) if quick else (0, 1, 2))
    s = (a.group_by("counter_set", "classifier", maintain_order=True)
         .agg(pl.col(c).mean() for c in ("accuracy_time", "accuracy", "macro_f1", "insufficient", "branchy")))
    lines = ["## Agreement with the simulator's truth by counter set (issue 15)", "",
             "Kernel campaigns of `testing/archetype_campaigns.py` (every kernel, bursts of 2e3-3e7 instructions, "
             f"{a['seed'].n_unique()} seed(s)); truth = the archetype each kernel is built to show (`intent`), "
             "`fine_grain` for bursts under 10 µs or 1e4 instructions, independent of the rules. Counter sets: "
             "`full` (every counter), `IPC + caches + branches` (TOT_INS, TOT_CYC, L1/L2 DCM, L3 TCM, BR_INS, "
             "BR_MSP: the prime trace's set), `cycles + LLC only` (TOT_INS, TOT_CYC, L3 TCM: the LULESH traces' "
             "set). `evidence`: the scored rules; `cascade`: the first-match cascade they replace (same rules and "
             "thresholds, the first rule that holds wins, insufficient_counters when an earlier rule is undecided). "
             "Accuracy by burst time and per burst, macro-F1 over the intended classes, share of burst time "
             "`insufficient_counters`, and the share of the mispredicting kernel's bursts labelled bad_speculation.",
             "", "| counter set | classifier | accuracy (time) | accuracy (bursts) | macro-F1 | insufficient | "
             "branchy -> bad_speculation |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['counter_set']} | {r['classifier']} | {r['accuracy_time']:.3f} | {r['accuracy']:.3f} | "
              f"{r['macro_f1']:.3f} | {r['insufficient']:.1%} | {r['branchy']:.0%} |" for r in s.iter_rows(named=True)]
    lines += ["", f"Wall time {time.perf_counter() - t0:.1f} s.", ""]
    return lines


# ------------------------------------------------------------------------------------------------ real traces
def real_section(fig_dir: Path, machine_name: str) -> list[str]:
    from synthtrace.pipelines.report import figure_png, plot_ridgeline, plot_roofline, plot_timeline
    from synthtrace.tracelib.domain.metrics import ranks_per_socket
    from synthtrace.warehouse.ingest import ingest_trace
    from synthtrace.warehouse.layout import Warehouse
    machine = load_machine(machine_name)
    fig_dir.mkdir(parents=True, exist_ok=True)
    lines = ["## Real traces", "", f"Machine profile: `{machine_name}` ({machine.name}).", ""]
    with tempfile.TemporaryDirectory() as tmp:
        wh = Warehouse(tmp)
        for exp, f in REAL.items():
            ingest_trace(wh, TRACES / f, experiment=exp)
        for exp in REAL:
            t0 = time.perf_counter()
            done = analyse_experiment(wh.experiment(exp), machine=machine)
            inp, res = done.trace, done.result
            dt = time.perf_counter() - t0
            a = res.archetypes
            m = mix(a)
            lines += [f"### {exp} ({inp.bursts.height} bursts, analysed in {dt:.2f} s)", "",
                      "| unit | archetype | count | time (s) | time share |", "|---|---|---|---|---|"]
            lines += [f"| {r['unit']} | {r['archetype']} | {r['count']} | {r['time_s']:.4g} | {r['time_share']:.1%} |"
                      for r in m.iter_rows(named=True)]
            ins = a.filter(pl.col("archetype") == INSUFFICIENT)
            if ins.height:
                prov = (ins.group_by("provisional").agg((pl.col("duration_ns").sum() * 1e-9).alias("t"))
                        .with_columns(pl.col("t") / pl.col("t").sum()).sort("t", descending=True))
                need = ins.explode("missing_counters").group_by("missing_counters").len().sort("len", descending=True)
                lines += [
                    "",
                    "Undecided bursts, provisional archetype by time: "
                    + ", ".join(f"{p} {t:.0%}" for p, t in prov.iter_rows())
                    + ".",
                    "Counters that would decide them: "
                    + ", ".join(f"{c} ({n})" for c, n in need.iter_rows() if c)
                    + ".",
                ]
            d = res.discovery
            if "kappa" in d:
                lines.append(
                    f"Discovery: {d['n_clusters']} clusters on {', '.join(d['features'])}; bootstrap ARI "
                    f"{d['stability_ari']:.3f}; kappa {d['kappa']:.3f} on {d['n_compared']} rule-decided bursts."
                )
            pm = res.phase_metrics
            lines.append(f"Phases: {pm.height}; load balance median {pm['load_balance'].median():.2f}, "
                         f"communication efficiency median {pm['comm_efficiency'].median():.2f}.")
            bm = res.burst_metrics
            keys = ["run_id", "appl", "task", "thread", "burst_seq"]
            ab = bm.join(a.filter(pl.col("unit") == "burst").select(*keys, "archetype", "provisional"), on=keys)
            pa = pm.join(a.filter(pl.col("unit") == "phase").select("run_id", "appl", "phase", "archetype"),
                         on=["run_id", "appl", "phase"])
            rps = ranks_per_socket(bm, machine)
            for kind, info in (("roofline", plot_roofline(ab, machine, ranks_per_socket=rps)),
                               ("ridgeline", plot_ridgeline(pa, machine, ranks_per_socket=rps)),
                               ("timeline", plot_timeline(a, pa, machine, ranks_per_socket=rps))):
                figure_png(info.figure, fig_dir / f"{exp}.{kind}.png", dpi=80)
            lines += [
                "",
                f"Plots: `figures/{exp}.roofline.png`, `figures/{exp}.ridgeline.png`, `figures/{exp}.timeline.png`.",
                "",
            ]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "archetypes.md")
    ap.add_argument("--machine", default="generic", help="machine profile for the real traces")
    ap.add_argument("--quick", action="store_true", help="smaller simulated campaign")
    ap.add_argument("--skip-sim", action="store_true")
    ap.add_argument("--skip-real", action="store_true")
    ap.add_argument("--agreement-only", action="store_true", help="only the agreement table by counter set")
    args = ap.parse_args()
    body = [
        "# Archetypes benchmark",
        "",
        f"Command: `python benchmarks/bench_archetypes.py{' --quick' if args.quick else ''}`",
        "",
    ]
    body += agreement_section(args.quick)
    if args.agreement_only:
        args.skip_sim = args.skip_real = True
    if not args.skip_sim:
        body += pipeline_section(args.quick)
        body += simulated_section(args.quick)
    if not args.skip_real and TRACES.is_dir():
        body += real_section(args.out.parent / "figures", args.machine)
    text = "\n".join(body)
    print(text)
    raw = ROOT / "benchmarks" / "out" / "archetypes.generated.md"
    raw.parent.mkdir(parents=True, exist_ok=True)
    raw.write_text(text + "\n")
    print(f"\n(written to {raw}; the reviewed results live in {args.out})", file=sys.stderr)


if __name__ == "__main__":
    main()
