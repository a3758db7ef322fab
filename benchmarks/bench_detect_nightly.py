"""Detection night by night (issue 28 item 5): synthtrace's detector, Apache Otava and a windowed t-test, each run
after every night on the history up to that night, as the nightly runs it — not only once on the final history.

Histories: the project's simulator (``synthtrace simulate --nights N --ranks 4 --iterations 6 --seed S``: five
apps, one per communication pattern, five runs a night with the simulator's PMU plan), ingested with ``synthtrace
ingest``, read with :func:`synthtrace.models.site_signals.site_history` (one series per app and call site, plus the
application total) and labelled with archetypes once (a night's labels depend on that night only):

- **quiet**: ``--inject none``;
- **steps**: the same seed with one step change per app (the simulator's injections: more instructions 10 %,
  worse locality, more MPI bytes, a new imbalance, a slower network), at nights 12-18;
- **drift**: the same seed with every app's main kernel needing 2 % more instructions each night for 10 nights
  (ten stacked ``more_instructions`` injections: +21.9 % in all);
- **campaign**: ``testing/model_campaigns.regression_campaign`` (bench_regression's generator), 16 apps x 4 call
  sites, half of the apps with one step change (any kind, true effect 3-50 %) in their second half, and 5 % of
  nights disturbed on every app (network contention 1.3-2.5x or every burst stretched 5-30 %): the quiet apps'
  disturbed nights are where transient false alarms come from.

Each detector after each night k (from night 6 on) reports change nights per series. Alerts are followed from
night to night with one rule for every detector: tonight's change of a series within ``window / 2`` (6) nights of
an alert open last night is that alert (nearest first) — **re-dated** if its night moved; a change with no such
alert is **raised**; an open alert tonight's detection does not report is **withdrawn**. synthtrace's own
bookkeeping (:func:`synthtrace.models.regression.replay_nights`, which the nightly uses: an alert keeps its first
change date) is one row; its raw detection followed by the common rule is another, so what the bookkeeping hides is
visible. Per injected change (simulator labels: app and night): the alerts raised for it (alerts of the app dated
from ``--tolerance`` nights before it to ``--tolerance`` nights after its last night: a drift spans 10), the series
they are on, nights from the change to the first of them, and the date error of the alerts open at the end. Every
other alert raised is a false alarm.

Run::

    pip install --no-deps --target otava-lib "apache-otava~=0.8.0"
    PYTHONPATH=otava-lib:. nice python benchmarks/bench_detect_nightly.py --cache /tmp/detect-nightly \\
        --out benchmarks/results/detect_nightly.md
"""
from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_regression import _detectors, machine
from benchmarks.results_io import emit

from synthtrace.models.regression import SERIES_KEYS, DetectorParams, label_archetypes, replay_nights
from synthtrace.models.site_signals import site_history
from synthtrace.warehouse import Warehouse
from testing.model_campaigns import regression_campaign

STEPS = ("more_instructions:halo:15:0.1", "worse_locality:cg:12:0.6", "more_mpi_bytes:transpose:18:1.0",
         "new_imbalance:wavefront:14:0.4", "network_slowdown:master_worker:16:1.0")
DRIFT_START, DRIFT_NIGHTS, DRIFT_STEP = 12, 10, 0.02
CAMPAIGN_APPS = 16
APPS = ("halo", "cg", "transpose", "wavefront", "master_worker")
FIRST = 6  # detection starts after this night (0-based; fewer nights cannot hold a change)


def injections(history: str) -> list[str]:
    """The simulator's ``--inject`` arguments of a history."""
    if history == "steps":
        return list(STEPS)
    if history == "drift":
        return [f"more_instructions:{a}:{n}:{DRIFT_STEP}" for a in APPS
                for n in range(DRIFT_START, DRIFT_START + DRIFT_NIGHTS)]
    return ["none"]


def build(history: str, nights: int, seed: int, cache: Path) -> tuple[pl.DataFrame, pl.DataFrame, float]:
    """(site history labelled with archetypes, changes: app, night, kind; seconds to simulate and ingest)."""
    from synthtrace.pipelines.cli import main as cli
    out = cache / f"{history}-{nights}n-s{seed}"
    hist_file, truth_file = out / "history.parquet", out / "changes.parquet"
    if hist_file.is_file():
        return pl.read_parquet(hist_file), pl.read_parquet(truth_file), float("nan")
    t0 = time.perf_counter()
    sim, wh = out / "sim", out / "wh"
    if history == "campaign":
        labels = regression_campaign(wh, n_apps=CAMPAIGN_APPS, n_nights=nights, n_kernels=4, seed=seed,
                                     p_regression=0.5)
        truth = labels.filter(pl.col("kind").is_not_null()).select("app", "night", "kind",
                                                                   pl.col("night").alias("last"))
        h = label_archetypes(site_history(Warehouse(wh)))
        h.write_parquet(hist_file)
        truth.write_parquet(truth_file)
        return h, truth, time.perf_counter() - t0
    args = ["simulate", sim, "--nights", nights, "--ranks", 4, "--iterations", 6, "--seed", seed]
    for inj in injections(history):
        args += ["--inject", inj]
    for a in (args, ["ingest", sim, "-w", wh]):
        if cli([str(x) for x in a]) != 0:
            raise SystemExit(f"synthtrace {a[0]} failed")
    h = label_archetypes(site_history(Warehouse(wh)))
    schema = {"app": pl.String, "night": pl.Int64, "kind": pl.String}
    if history == "quiet":
        truth = pl.DataFrame(schema={**schema, "last": pl.Int64})
    else:
        t = pl.read_parquet(sim / "ground_truth" / "regressions.parquet")
        truth = t.group_by("app").agg(pl.col("night").min(), pl.col("kind").first(),
                                      pl.col("night").max().alias("last")).select(*schema, "last")
        if history == "drift":
            truth = truth.with_columns(pl.lit("drift (more_instructions, 10 nights)").alias("kind"))
    h.write_parquet(hist_file)
    truth.write_parquet(truth_file)
    return h, truth, time.perf_counter() - t0


# ------------------------------------------------------------------------------------- following alerts
@dataclass
class Followed:
    """One detector's alerts followed night by night: per alert id its series, change night when raised, night
    raised, change night now, re-datings, withdrawal night (None: open at the end)."""

    alerts: dict[int, dict] = field(default_factory=dict)
    redated: int = 0

    def night(self, k: int, tonight: list[tuple[tuple, int]], within: int) -> None:
        """Tonight's (series key, change night) pairs, matched to the alerts open last night."""
        open_ = [i for i, a in self.alerts.items() if a["withdrawn"] is None]
        used: set[int] = set()
        for key, n in sorted(tonight, key=lambda x: x[1]):
            near = [i for i in open_ if i not in used and self.alerts[i]["key"] == key
                    and abs(self.alerts[i]["now"] - n) <= within]
            if not near:
                i = len(self.alerts)
                self.alerts[i] = {"key": key, "first": n, "raised": k, "now": n, "withdrawn": None}
                used.add(i)
                continue
            i = min(near, key=lambda j: abs(self.alerts[j]["now"] - n))
            used.add(i)
            if self.alerts[i]["now"] != n:
                self.redated += 1
                self.alerts[i]["now"] = n
        for i in open_:
            if i not in used:
                self.alerts[i]["withdrawn"] = k


def follow_synthtrace(history: pl.DataFrame, params: DetectorParams) -> tuple[Followed, Followed, float]:
    """synthtrace's own bookkeeping (replay_nights) and its raw detection under the common rule; seconds."""
    t0 = time.perf_counter()
    nights = replay_nights(history, params, first=FIRST + 1, archetypes=False)
    own, raw = Followed(), Followed()
    ids: dict[str, int] = {}
    for row in nights:
        k = row["night"]
        for a in row["alerts"]:
            key = tuple(a[c] for c in SERIES_KEYS)
            if a["alert_id"] not in ids:
                ids[a["alert_id"]] = len(own.alerts)
                own.alerts[ids[a["alert_id"]]] = {"key": key, "first": a["night"], "raised": k, "now": a["night"],
                                                  "withdrawn": None}
            own.alerts[ids[a["alert_id"]]]["now"] = a["night"]
        for w in row["withdrawn"]:
            own.alerts[ids[w]]["withdrawn"] = k
        own.redated += len(row["redated"])
        raw.night(k, [(tuple(a[c] for c in SERIES_KEYS), a["night"]) for a in row["raw"]], params.window // 2)
    return own, raw, time.perf_counter() - t0


def follow_baseline(history: pl.DataFrame, run: Callable[[pl.DataFrame], list[int]], within: int
                    ) -> tuple[Followed, float]:
    """A time-alone baseline run on every series' history up to each night, followed by the common rule."""
    t0 = time.perf_counter()
    series = {k: g.sort("started_at") for k, g in history.group_by(*SERIES_KEYS, maintain_order=True)}
    n = max(g.height for g in series.values())
    f = Followed()
    for k in range(FIRST, n):
        tonight = [(key, c) for key, g in series.items() if g.height > k for c in run(g.head(k + 1))]
        f.night(k, tonight, within)
    return f, time.perf_counter() - t0


# ------------------------------------------------------------------------------------- scoring
def score(f: Followed, truth: pl.DataFrame, tolerance: int) -> dict:
    """Raised / withdrawn / re-dated / open at the end, false alarms, and per injected change: alerts raised for
    it, series alerted, nights to the first alert, date error of its alerts open at the end."""
    changes = truth.to_dicts()
    per_change = []
    matched: set[int] = set()
    for c in changes:
        mine = [i for i, a in f.alerts.items() if a["key"][0] == c["app"]
                and c["night"] - tolerance <= a["first"] <= c["last"] + tolerance]
        matched.update(mine)
        first = min((f.alerts[i]["raised"] for i in mine), default=None)
        final = [f.alerts[i]["now"] - c["night"] for i in mine if f.alerts[i]["withdrawn"] is None]
        per_change.append({"app": c["app"], "kind": c["kind"], "night": c["night"], "raised": len(mine),
                           "series": len({f.alerts[i]["key"] for i in mine}),
                           "delay": None if first is None else first - c["night"],
                           "date_error": final, "withdrawn": sum(f.alerts[i]["withdrawn"] is not None for i in mine)})
    return {"raised": len(f.alerts), "withdrawn": sum(a["withdrawn"] is not None for a in f.alerts.values()),
            "redated": f.redated, "open": sum(a["withdrawn"] is None for a in f.alerts.values()),
            "false": len(f.alerts) - len(matched), "changes": per_change}


def detectors() -> dict[str, Callable[[pl.DataFrame], list[int]]]:
    """The time-alone baselines of bench_regression (Otava only when importable)."""
    return {k: v for k, v in _detectors().items() if not k.startswith("synthtrace")}


def _delays(changes: list[dict]) -> str:
    return ", ".join(f"{c['app']} {'-' if c['delay'] is None else c['delay']}" for c in changes)


def _dates(changes: list[dict]) -> str:
    return ", ".join(f"{c['app']} {','.join(f'{e:+d}' for e in c['date_error']) or '-'}" for c in changes)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nights", type=int, default=30)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--histories", default="quiet,steps,drift,campaign")
    ap.add_argument("--tolerance", type=int, default=2, help="nights between an alert's date and the change")
    ap.add_argument("--cache", type=Path, required=True, help="folder for the simulated warehouses and histories")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    params = DetectorParams()
    within = params.window // 2
    head = ("| history | detector | raised | false alarms | withdrawn | re-dated | open at the end | "
            "alerts per change (series) | nights to first alert | date error of the open alerts | time (s) |")
    lines = ["# Detection night by night (issue 28)", "", f"Machine: {machine()}.", "", "Reproduce:", "", "```",
             'pip install --no-deps --target otava-lib "apache-otava~=0.8.0"',
             f"PYTHONPATH=otava-lib:. nice python benchmarks/bench_detect_nightly.py --nights {args.nights} "
             f"--seed {args.seed} --histories {args.histories} --cache /tmp/detect-nightly "
             "--out benchmarks/results/detect_nightly.md", "```", ""]
    rows, facts = [], []
    for name in args.histories.split(","):
        history, truth, built = build(name, args.nights, args.seed, args.cache)
        n_series = history.select(*SERIES_KEYS).unique().height
        facts.append(f"{name}: {n_series} series x {args.nights} nights"
                     + (f", built in {built:.0f} s" if built == built else " (cached)"))
        own, raw, secs = follow_synthtrace(history, params)
        results = [("synthtrace (nightly bookkeeping)", own, secs),
                   ("synthtrace raw detection, common rule", raw, secs)]
        for label, run in detectors().items():
            f, s = follow_baseline(history, run, within)
            results.append((label, f, s))
        for label, f, s in results:
            sc = score(f, truth, args.tolerance)
            per = sc["changes"]
            alerts_per = ", ".join(f"{c['app']} {c['raised']} ({c['series']})" for c in per) or "-"
            rows.append(f"| {name} | {label} | {sc['raised']} | {sc['false']} | {sc['withdrawn']} | {sc['redated']} | "
                        f"{sc['open']} | {alerts_per} | {_delays(per) or '-'} | {_dates(per) or '-'} | {s:.1f} |")
            print(rows[-1], file=sys.stderr)
    lines += [
        "Histories (seed " + str(args.seed) + "): " + "; ".join(facts) + ". Injected: steps "
        + ", ".join(STEPS) + f"; drift: +{DRIFT_STEP:.0%} instructions of each app's main kernel per night from night "
        f"{DRIFT_START} for {DRIFT_NIGHTS} nights. Detection after each night from night {FIRST}; an alert "
        f"belongs to a change when dated from {args.tolerance} nights before it to {args.tolerance} nights after "
        "its last night.", "",
        head, "|---|---|---|---|---|---|---|---|---|---|---|", *rows, "",
        "Columns: raised = alerts raised over all nights (every one counts once, whatever happened to it); false "
        "alarms = raised alerts that belong to no injected change; withdrawn = raised, then no longer reported; "
        "re-dated = nights on which an open alert's change date moved; alerts per change = alerts raised for the "
        "change (in how many series); nights to first alert = first night an alert of the change was open minus "
        "the change's night (the simulator's night index); date error = change night of each alert of the change "
        "open at the end minus the true one.", ""]
    emit("\n".join(lines) + "\n", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
