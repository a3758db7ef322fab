"""Regression detection benchmark: synthtrace's multi-signal detector vs Apache Otava and a windowed t-test on time.

Simulated nightly histories (``testing/model_campaigns.py``: several apps, each night two runs recorded with different
counter sets, realistic noise — machine speed from night to night, OS-noise bursts, now and then a disturbed night
with network contention or stretched bursts) with one regression injected into one kernel of most apps, of every
kind (more instructions, lost vectorisation, worse locality, more MPI bytes, new imbalance, network slowdown),
of known size and night. A series is one (app, call site); the other call sites of an app are series with no change.

All detectors read the same per-visit time series from the warehouse
(:func:`synthtrace.models.site_signals.site_history`):

- **synthtrace**: :func:`synthtrace.models.regression.detect` (change points on time confirmed by explaining signals);
- **Otava**: ``otava.analysis.compute_change_points`` on time alone (its defaults: window 50, p <= 0.001; and a
  looser variant), change points where the mean rises;
- **t-test**: Perfherder style on time alone — Welch t of the next ``fore`` nights against the previous 12–24,
  alert at the peak of each run of t above the threshold (defaults fore 12, t >= 7; and a shorter variant).

Scoring: an alert on an injected series within ``--tolerance`` nights of the injected night is a true positive
(once per series); every other alert is a false positive. Detection delay: nights after the change until the
detector, run on the history up to that night, reports it (online).

Run::

    pip install --no-deps --target otava-lib "apache-otava~=0.8.0"
    PYTHONPATH=otava-lib:. python benchmarks/bench_regression.py --seeds 2026,31 \\
        --sim-seeds 3,4,5,n6 --out benchmarks/results/regression.md

(``--no-deps``: apache-otava 0.8 pins numpy 2.2 / scipy < 1.17 for its command-line tool; its change-point module
needs only numpy and scipy and runs with the project's versions.)
"""
from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import machine_description
from benchmarks.results_io import emit

from synthtrace.models.regression import DetectorParams, detect, detect_series, label_archetypes
from testing.model_campaigns import regression_campaign
from synthtrace.models.site_signals import site_history
from synthtrace.warehouse import Warehouse

KEYS = ["app", "call_site"]


# ----------------------------------------------------------------------------------------------- baselines
def ttest_alerts(x: np.ndarray, *, back_min: int = 12, back_max: int = 24, fore: int = 12,
                 threshold: float = 7.0) -> list[int]:
    """Perfherder-style windowed t-test on one series: nights where time rises (start of the fore window)."""
    n = x.size
    t = np.zeros(n)
    for i in range(back_min, n - fore + 1):
        b, f = x[max(0, i - back_max):i], x[i:i + fore]
        se = math.sqrt(b.var(ddof=1) / b.size + f.var(ddof=1) / f.size)
        t[i] = (f.mean() - b.mean()) / se if se > 0 else 0.0
    above = t > threshold
    alerts, i = [], 0
    while i < n:  # one alert per run of nights above the threshold, at its peak
        if above[i]:
            j = i
            while j < n and above[j]:
                j += 1
            alerts.append(int(i + np.argmax(t[i:j])))
            i = j
        else:
            i += 1
    return alerts


def otava_alerts(
    x: np.ndarray, *, window: int = 50, max_pvalue: float = 0.001, min_magnitude: float = 0.0
) -> list[int]:
    """Apache Otava's change points on one series where the mean rises."""
    from otava.analysis import compute_change_points
    cps, _ = compute_change_points(list(map(float, x)), window_len=window, max_pvalue=max_pvalue,
                                   min_magnitude=min_magnitude)
    return [int(c.index) for c in cps if c.stats.forward_rel_change() > 0]


# ----------------------------------------------------------------------------------------------- scoring
def score(alerts: dict[tuple, list[int]], labels: pl.DataFrame, tolerance: int) -> dict:
    """Precision, recall, F1 and no-alarm rate of per-series alerts against the labels."""
    tp = fp = 0
    detected = set()
    quiet = 0
    unchanged = 0
    for row in labels.iter_rows(named=True):
        key = (row["app"], row["call_site"])
        nights = alerts.get(key, [])
        if row["kind"] is None:
            unchanged += 1
            quiet += not nights
            fp += len(nights)
            continue
        hit = [a for a in nights if abs(a - row["night"]) <= tolerance]
        if hit:
            tp += 1
            detected.add(key)
        fp += len(nights) - (1 if hit else 0)
    pos = labels.filter(pl.col("kind").is_not_null()).height
    p = tp / (tp + fp) if tp + fp else 0.0
    r = tp / pos if pos else 0.0
    return {"alerts": tp + fp, "tp": tp, "fp": fp, "precision": p, "recall": r,
            "f1": 2 * p * r / (p + r) if p + r else 0.0, "no_alarm": quiet / unchanged if unchanged else float("nan"),
            "detected": detected}


def delays(series: dict[tuple, pl.DataFrame], labels: pl.DataFrame, run: Callable[[pl.DataFrame], list[int]],
           tolerance: int, max_delay: int) -> dict[tuple, int | None]:
    """Online detection delay (nights) of every injected series: run on the history up to each night."""
    out = {}
    for row in labels.filter(pl.col("kind").is_not_null()).iter_rows(named=True):
        key = (row["app"], row["call_site"])
        s = series[key]
        out[key] = None
        for d in range(max_delay + 1):
            end = row["night"] + d + 1
            if end > s.height:
                break
            if any(abs(a - row["night"]) <= tolerance for a in run(s.head(end))):
                out[key] = d
                break
    return out


def machine() -> str:
    """The shared machine line plus the libraries that matter here."""
    return (
        machine_description() + " (shared with other jobs)"
        f"; numpy {np.__version__}, polars {pl.__version__}, ruptures {version('ruptures')}, scipy {version('scipy')}, "
        f"apache-otava {_otava_version()}"
    )


def _otava_version() -> str:
    try:
        return version("apache-otava")
    except Exception:
        try:
            import otava  # noqa: F401
            return "0.8 (--target install)"
        except ImportError:
            return "not installed"


NOTES = """
## Reading the results

- The baselines see only time per visit. Their false alarms are disturbed nights (network contention, stretched
  bursts) and small shifts of the machine's speed; their misses are small regressions (3-12 %) within
  night-to-night noise. synthtrace asks time to rise *and* something to explain it (more instructions, lower IPC,
  more misses, a lost vector share, more bytes, slower communication, a worse load balance, an archetype shift),
  so a disturbance that moves no explaining signal is not reported and a small change in time is localised and
  confirmed by a precise counter (instructions vary 0.2 %, time 2-3 %).
- Delays: synthtrace needs 3 nights after a change (``min_after``) to report it and checks that time stays up;
  Otava reports as soon as a point looks different (delay 0 counts alerts up to the tolerance early, and comes
  with its false alarms); the Perfherder-style t-test needs its full forward window (12 or 6 nights).
- synthtrace's misses are mostly new imbalance (its true effect is smaller than the nominal one once the ranks'
  own variation is counted), network slowdown and more MPI bytes with true effects of 3-6 % on
  communication-dominated sites. In the project's simulator, more MPI bytes on non-blocking sends often changes
  the time of the completing wait by well under 2 % (the smallest rise reported): not found, by design.
- Honesty: the detector's thresholds were set while developing on smaller campaigns of seeds 1-7 of the same
  generator, which its author also wrote; seeds 2026 and 31 were not looked at before these runs. The project's
  simulator (issue 3, written independently) is the check against fitting one's own noise model.
- Every series here has one configuration and one regression at most; a second change in the same series is
  handled (each change point is tested on its own window) but not scored.
"""


def evaluate(seed: int, args: argparse.Namespace) -> tuple[list[dict], list[dict], dict]:
    """One simulated campaign scored for every detector: (rows, recall counts per kind/effect, campaign facts)."""
    t0 = time.perf_counter()
    root = (args.warehouse / f"seed{seed}") if args.warehouse else Path(tempfile.mkdtemp(prefix="bench-regression-"))
    labels = regression_campaign(root, n_apps=args.apps, n_nights=args.nights, n_kernels=args.kernels,
                                 seed=seed, p_regression=0.85)
    t_gen = time.perf_counter() - t0
    t1 = time.perf_counter()
    history = site_history(Warehouse(root))
    t_hist = time.perf_counter() - t1
    history = label_archetypes(history)
    series = {(k[0], k[1]): g.sort("started_at") for k, g in history.group_by(KEYS, maintain_order=True)}
    assert {v.height for v in series.values()} == {args.nights}, "every series has one point per night"

    detectors = _detectors()

    rows, per_kind = [], []
    positives = labels.filter(pl.col("kind").is_not_null())
    groups = [(kind, positives.filter(pl.col("kind") == kind)) for kind in sorted(positives["kind"].unique().to_list())]
    for lo, hi in [(0.03, 0.06), (0.06, 0.12), (0.12, 0.25), (0.25, 10.0)]:
        groups.append((f"effect {lo:.0%}-{hi:.0%}" if hi < 1 else f"effect >= {lo:.0%}",
                       positives.filter(pl.col("effect").is_between(lo, hi, closed="left"))))
    for name, run in detectors.items():
        t = time.perf_counter()
        if name.startswith("synthtrace"):
            out = detect(history, DetectorParams())
            alerts: dict[tuple, list[int]] = {}
            for r in out.iter_rows(named=True):
                alerts.setdefault((r["app"], r["call_site"]), []).append(r["night"])
        else:
            alerts = {k: run(s) for k, s in series.items()}
        seconds = time.perf_counter() - t
        sc = score(alerts, labels, args.tolerance)
        d = delays(series, labels, run, args.tolerance, args.max_delay)
        found = [v for v in d.values() if v is not None]
        rows.append({"seed": seed, "detector": name, **{k: v for k, v in sc.items() if k != "detected"},
                     "positives": positives.height, "unchanged": labels.height - positives.height,
                     "quiet": round(sc["no_alarm"] * (labels.height - positives.height)),
                     "delays": found, "seconds": seconds})
        for label, sub in groups:
            keys = [(a, c) for a, c in sub.select(KEYS).iter_rows()]
            per_kind.append({"detector": name, "kind": label, "series": len(keys),
                             "detected": sum(k in sc["detected"] for k in keys)})
        print(f"seed {seed} {name}: F1 {sc['f1']:.3f} P {sc['precision']:.3f} R {sc['recall']:.3f} "
              f"no-alarm {sc['no_alarm']:.3f} ({seconds:.1f} s)", file=sys.stderr)
    facts = {"seed": seed, "series": labels.height, "positives": positives.height, "t_gen": t_gen, "t_hist": t_hist,
             "kinds": dict(positives.group_by("kind").len().sort("kind").iter_rows())}
    return rows, per_kind, facts


def simulator_campaign(seed: int, nights: int, inject: bool, tmp: Path, tolerance: int) -> list[dict]:
    """The project's simulator (``synthtrace simulate --nights``, every pattern an app) -> ingest -> every detector.

    Its labels name the app and night of each injected regression (the kernel or "messages"/"network", not a call
    site), so scoring is per app: a change is found when any of the app's call sites alerts within ``tolerance``
    nights of it; alert nights of an app that match no change (alerts within ``tolerance`` of each other counted
    once) are false alarms.
    """
    from synthtrace.pipelines.cli import main as cli
    sim, wh = tmp / f"sim{seed}", tmp / f"simwh{seed}"
    args = ["simulate", sim, "--nights", nights, "--ranks", 4, "--iterations", 6, "--seed", seed]
    if not inject:
        args += ["--inject", "none"]
    for a in (args, ["ingest", sim, "-w", wh]):
        if cli([str(x) for x in a]) != 0:
            raise SystemExit(f"synthtrace {a[0]} failed")
    truth = pl.read_parquet(sim / "ground_truth" / "regressions.parquet") if inject else pl.DataFrame(
        schema={"app": pl.String, "night": pl.Int64, "kind": pl.String})
    history = label_archetypes(site_history(Warehouse(wh)))
    series = {(k[0], k[1]): g.sort("started_at") for k, g in history.group_by(KEYS, maintain_order=True)}
    apps = sorted({k[0] for k in series})
    rows = []
    for name, run in _detectors().items():
        if name.startswith("synthtrace"):
            out = detect(history, DetectorParams())
            nights_of = {a: out.filter(pl.col("app") == a)["night"].to_list() for a in apps}
        else:
            nights_of = {a: [n for k, s in series.items() if k[0] == a for n in run(s)] for a in apps}
        tp = fp = 0
        for a in apps:
            every = truth.filter(pl.col("app") == a)["night"].to_list()
            # a change in the last nights cannot be confirmed yet by anyone: not scored, its alerts ignored
            late = [c for c in every if c > nights - 1 - DetectorParams().min_after]
            changes = [c for c in every if c not in late]
            alerts = sorted(n for n in nights_of[a] if not any(abs(n - c) <= tolerance for c in late))
            tp += sum(any(abs(n - c) <= tolerance for n in alerts) for c in changes)
            stray = [n for n in alerts if not any(abs(n - c) <= tolerance for c in changes)]
            clusters = [n for i, n in enumerate(stray) if i == 0 or n - stray[i - 1] > tolerance]
            fp += len(clusters)
        n_scored = truth.filter(pl.col("night") <= nights - 1 - DetectorParams().min_after).height
        rows.append({"seed": seed, "detector": name, "changes": n_scored, "tp": tp, "fp": fp,
                     "apps": len(apps), "quiet_apps": None})
    return rows


def polling_section(seeds: list[int], tolerance: int = 1) -> list[str]:
    """Issue 15's histories: polling bursts at the kernel's site (``testing.model_campaigns.polling_history``), every
    detector on the kernel's site and on the application's total, synthtrace also without logical regions."""
    from synthtrace.warehouse import history as hist
    from synthtrace.models.site_signals import APP_TOTAL
    from testing.model_campaigns import polling_history
    site = "solve (step.c:120)"
    counts: dict[str, dict[str, int]] = {}
    t0 = time.perf_counter()
    for seed in seeds:
        with tempfile.TemporaryDirectory(prefix="bench-polling-") as d:
            polling_history(d, n_nights=14, change_night=8, seed=seed)
            h = site_history(Warehouse(d))
            saved = hist.POLLING_CALLS
            hist.POLLING_CALLS = ()  # ablation: every burst its own visit
            h_bursts = site_history(Warehouse(d))
            hist.POLLING_CALLS = saved
        def ours(app: str, s: str, h: pl.DataFrame) -> list[int]:
            """Alert nights at ``s``; the app total also counts when folded into a site's alert."""
            return [
                r["night"]
                for r in detect(h.filter(pl.col("app") == app)).iter_rows(named=True)
                if r["call_site"] == s or (s == APP_TOTAL and any(x["name"] == "app_time_ns" for x in r["signals"]))
            ]

        runs: dict[str, Callable[[str, str], list[int]]] = {
            "synthtrace (logical regions, app total)": lambda app, s, h=h: ours(app, s, h),
            "synthtrace, each burst a visit (no logical regions)": lambda app, s, h=h_bursts: ours(app, s, h)}
        for name, run in _detectors().items():
            if not name.startswith("synthtrace"):
                runs[name] = lambda app, s, run=run, h=h: run(
                    h.filter((pl.col("app") == app) & (pl.col("call_site") == s)).sort("started_at"))
        for name, run in runs.items():
            c = counts.setdefault(name, {"site": 0, "total": 0, "control": 0, "extra": 0})
            for s, key in ((site, "site"), (APP_TOTAL, "total")):
                nights = run("stepapp", s)
                hit = any(abs(n - 8) <= tolerance for n in nights)
                c[key] += hit
                c["extra"] += len(nights) - hit
                c["control"] += len(run("control", s))
    n = len(seeds)
    lines = [
        "## Polling at the kernel's site (issue 15)",
        "",
        f"`testing/model_campaigns.polling_history`, {n} seeds: 14 nights, 4 ranks, two runs a night with different "
        "counter sets; per iteration a kernel (3.6M instructions, IPC 2.6) closed by MPI_Test at its site, a "
        "polling loop of 2.5 µs bursts closed by more MPI_Test at the same site (a Poisson number with a new "
        "mean every night), then a second region closed by MPI_Allreduce; 3 % night-to-night speed noise. From "
        "night 8 (0-based) the kernel needs 4.5M instructions at IPC 2.0 (app total +~20 %); a control app is "
        "unchanged. Found: an alert within "
        f"{tolerance} night of the change on the kernel's site / on the application's total time; false alarms: "
        "other alert nights of the changed app plus every alert of the control. Baselines read the same "
        "(logical-region) series, time alone.",
        "",
        "| detector | kernel site found | app total found | false alarms (changed app) | alerts on control |",
        "|---|---|---|---|---|",
    ]
    for name, c in counts.items():
        lines.append(f"| {name} | {c['site']}/{n} | {c['total']}/{n} | {c['extra']} | {c['control']} |")
    lines += ["", "synthtrace folds the app-total alert into the site alert (one alert per change, `app_time_ns` "
              "among its signals): its app-total column counts those. The baselines read the logical-region series "
              f"synthtrace's history builds. Wall time {time.perf_counter() - t0:.0f} s.", ""]
    return lines


def _detectors() -> dict[str, Callable[[pl.DataFrame], list[int]]]:
    d: dict[str, Callable[[pl.DataFrame], list[int]]] = {
        "synthtrace (multi-signal)": lambda s: [a["night"] for a in detect_series(s, DetectorParams())],
        "Otava, time alone (window 50, p<=0.001)": lambda s: otava_alerts(s["time_ns"].to_numpy()),
        "Otava, time alone (window 30, p<=0.01)": lambda s: otava_alerts(s["time_ns"].to_numpy(), window=30,
                                                                         max_pvalue=0.01),
        "t-test, time alone (12-24 vs 12, t>=7)": lambda s: ttest_alerts(s["time_ns"].to_numpy()),
        "t-test, time alone (12-24 vs 6, t>=5)": lambda s: ttest_alerts(s["time_ns"].to_numpy(), fore=6, threshold=5),
    }
    try:
        import otava  # noqa: F401
    except ImportError:
        d = {k: v for k, v in d.items() if not k.startswith("Otava")}
        print("apache-otava not importable: Otava baselines skipped (see the module docstring)", file=sys.stderr)
    return d


def _row(r: dict, label: str) -> str:
    d = r["delays"]
    med, mean = (float(np.median(d)), float(np.mean(d))) if d else (float("nan"), float("nan"))
    return (f"| {label} | {r['alerts']} | {r['tp']} | {r['fp']} | {r['precision']:.3f} | {r['recall']:.3f} | "
            f"**{r['f1']:.3f}** | {r['no_alarm']:.1%} | {med:.0f} / {mean:.1f} | {len(d)} | {r['seconds']:.1f} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--apps", type=int, default=80)
    ap.add_argument("--kernels", type=int, default=4)
    ap.add_argument("--nights", type=int, default=48)
    ap.add_argument("--seeds", default="2026", help="comma-separated seeds: one campaign each, pooled at the end")
    ap.add_argument("--tolerance", type=int, default=2, help="nights between alert and injected night")
    ap.add_argument("--max-delay", type=int, default=16)
    ap.add_argument("--warehouse", type=Path, default=None, help="keep the simulated warehouses under this folder")
    ap.add_argument("--sim-seeds", default="", help="also: the project's simulator campaigns with these seeds "
                    "(every pattern an app, random injections); a seed prefixed with 'n' injects nothing")
    ap.add_argument("--sim-nights", type=int, default=24)
    ap.add_argument("--polling-seeds", default="0,1,2,3,4,5,6,7", help="seeds of the polling histories (issue 15)")
    ap.add_argument("--polling-only", action="store_true", help="only the polling section")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    polling = polling_section([int(x) for x in args.polling_seeds.split(",")]) if args.polling_seeds else []
    if args.polling_only:
        emit("\n".join([f"Machine: {machine()}.", "", *polling]) + "\n", args.out)
        return 0
    seeds = [int(x) for x in args.seeds.split(",")]
    all_rows, all_kinds, facts = [], [], []
    for seed in seeds:
        rows, kinds, f = evaluate(seed, args)
        all_rows += rows
        all_kinds += kinds
        facts.append(f)
    names = list(dict.fromkeys(r["detector"] for r in all_rows))
    pooled = []
    for name in names:
        rs = [r for r in all_rows if r["detector"] == name]
        tp, fp = sum(r["tp"] for r in rs), sum(r["fp"] for r in rs)
        pos, unch, quiet = sum(r["positives"] for r in rs), sum(r["unchanged"] for r in rs), sum(r["quiet"] for r in rs)
        p, rc = (tp / (tp + fp) if tp + fp else 0.0), tp / pos
        pooled.append({"detector": name, "alerts": tp + fp, "tp": tp, "fp": fp, "precision": p, "recall": rc,
                       "f1": 2 * p * rc / (p + rc) if p + rc else 0.0, "no_alarm": quiet / unch,
                       "delays": [d for r in rs for d in r["delays"]], "seconds": sum(r["seconds"] for r in rs)})
    n_series = sum(f["series"] for f in facts)
    n_pos = sum(f["positives"] for f in facts)
    kinds_total: dict[str, int] = {}
    for f in facts:
        for k, v in f["kinds"].items():
            kinds_total[k] = kinds_total.get(k, 0) + v
    head = ("| detector | alerts | TP | FP | precision | recall | F1 | no alarm on unchanged | "
            "delay median / mean (nights, online) | found online | time (s) |")
    lines = [
        "# Regression detection benchmark",
        "",
        f"Machine: {machine()}.",
        "",
        "Reproduce:",
        "",
        "```",
        'pip install --no-deps --target otava-lib "apache-otava~=0.8.0"',
        f"PYTHONPATH=otava-lib:. python benchmarks/bench_regression.py --apps {args.apps} "
        f"--kernels {args.kernels} --nights {args.nights} --seeds {args.seeds}"
        + (f" --sim-seeds {args.sim_seeds} --sim-nights {args.sim_nights}" if args.sim_seeds else "")
        + " --out benchmarks/results/regression.md",
        "```",
        "",
        f"Data: {len(seeds)} campaign(s) (seeds {args.seeds}) of {args.apps} simulated apps x {args.kernels} "
        "call sites, "
        f"**{n_series} series** of {args.nights} nights in all (2 runs a night, different counter sets); "
        f"**{n_pos} series with an injected regression** "
        f"({', '.join(f'{k}: {v}' for k, v in sorted(kinds_total.items()))}), {n_series - n_pos} unchanged series. "
        "True effect on the site's time per visit 3-50 % (nominal for imbalance, which the ranks' own variation "
        "partly hides). Noise: machine speed 1.5 % per night, instructions 0.2 %, cycles 1.5 %, misses 3 % per "
        "burst, 0.5 % of bursts stretched 1.5-4x by OS noise, 5 % of nights disturbed (network contention "
        "1.3-2.5x or every burst stretched 5-30 %), MPI time 5 %. An alert is a true positive within "
        f"{args.tolerance} nights of the injected night (once per series); any other alert is a false positive. "
        "Delay: nights after the change until the detector, run on the history up to that night, reports it "
        f"(an alert up to {args.tolerance} nights early counts as 0). Simulation "
        f"{sum(f['t_gen'] for f in facts):.0f} s, history query {sum(f['t_hist'] for f in facts):.1f} s.",
        "",
        "## All campaigns pooled",
        "",
        head,
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *[_row(r, r["detector"]) for r in pooled],
    ]
    if len(seeds) > 1:
        lines += ["", "## Per campaign", "", head.replace("| detector |", "| seed: detector |"),
                  "|---|---|---|---|---|---|---|---|---|---|---|",
                  *[_row(r, f"{r['seed']}: {r['detector']}") for r in all_rows]]
    kinds = pl.DataFrame(all_kinds).group_by("detector", "kind", maintain_order=True).agg(
        pl.col("series").sum(), pl.col("detected").sum())
    seen = list(dict.fromkeys(kinds["kind"].to_list()))
    labels_order = sorted(x for x in seen if not x.startswith("effect")) + [x for x in seen if x.startswith("effect")]
    lines += ["", "## Recall per kind and per true effect size (pooled)", "",
              "| detector | " + " | ".join(labels_order) + " |", "|---|" + "---|" * len(labels_order)]
    for name in names:
        k = {r["kind"]: r for r in kinds.filter(pl.col("detector") == name).iter_rows(named=True)}
        cells = [f"{k[x]['detected'] / k[x]['series']:.2f} ({k[x]['series']})" if x in k and k[x]["series"] else ""
                 for x in labels_order]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if args.sim_seeds:
        sim_rows = []
        with tempfile.TemporaryDirectory(prefix="bench-regression-sim-") as d:
            for tok in args.sim_seeds.split(","):
                sim_rows += simulator_campaign(int(tok.lstrip("n")), args.sim_nights, not tok.startswith("n"),
                                               Path(d), args.tolerance)
        lines += [
            "",
            "## The project's simulator",
            "",
            f"`synthtrace simulate OUT --nights {args.sim_nights} --ranks 4 --iterations 6 --seed S` (five apps, one "
            "per communication pattern, five runs a night with the simulator's PMU plan; random injections, one "
            "per app; seeds marked n: `--inject none`), ingested with `synthtrace ingest`, the same detectors on "
            "the same history. Scored per app (its labels name app and night, not a call site): a change is "
            f"found when any call site of the app alerts within {args.tolerance} nights; other alert nights of "
            "an app are false alarms. Changes injected in the last 3 nights (too recent for anyone to confirm) "
            "are not scored and alerts near them are ignored.",
            "",
            "| detector | seeds | changes | found | false alarms | precision | recall | F1 |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for name in names:
            rs = [r for r in sim_rows if r["detector"] == name]
            ch, tp, fp = sum(r["changes"] for r in rs), sum(r["tp"] for r in rs), sum(r["fp"] for r in rs)
            p, rc = (tp / (tp + fp) if tp + fp else 0.0), (tp / ch if ch else 0.0)
            f1 = 2 * p * rc / (p + rc) if p + rc else 0.0
            lines.append(f"| {name} | {args.sim_seeds} | {ch} | {tp} | {fp} | {p:.3f} | {rc:.3f} | **{f1:.3f}** |")
    lines += ["", *polling]
    ours, bases = pooled[0], sorted(pooled[1:], key=lambda r: -r["f1"])
    lines += [
        "",
        "Targets (issue 7): F1 >= 0.9; no alarm on >= 98 % of unchanged series; F1 >= best baseline + 0.1.",
        "",
    ]
    if bases:
        b = bases[0]
        ok = [ours["f1"] >= 0.9, ours["no_alarm"] >= 0.98, ours["f1"] >= b["f1"] + 0.1]
        lines.append(f"Result (pooled): F1 {ours['f1']:.3f} ({'met' if ok[0] else 'MISSED'}); no alarm on "
                     f"{ours['no_alarm']:.1%} of unchanged series ({'met' if ok[1] else 'MISSED'}); best baseline "
                     f"{b['detector']} F1 {b['f1']:.3f}, margin {ours['f1'] - b['f1']:+.3f} "
                     f"({'met' if ok[2] else 'MISSED'}).")
    emit("\n".join(lines) + "\n" + NOTES, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
