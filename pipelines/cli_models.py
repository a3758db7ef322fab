"""``synthtrace train``, ``models``, ``predict`` and ``detect``: performance predictors and regression alerts
(DESIGN §8, §10). Also the nightly flow's two stages of this part, as plain functions:

- :func:`detect_step` (warehouse) -> list of new alerts (dicts), after rewriting the ``regressions`` view;
- :func:`retrain_step` (warehouse) -> summary dict of the model trained, or None when no retraining was due.
"""
from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import polars as pl
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from synthtrace.pipelines.cli import DEFAULT_WAREHOUSE, WarehouseOption, console, err_console
from synthtrace.warehouse.names import name_option
from synthtrace.tracelib.errors import BadInputError

TargetOption = Annotated[str, typer.Option("--target", help="What to predict: ipc (instructions per cycle) or tpi "
                                           "(time per instruction, ns).")]


class StepProgress:
    """A rich progress bar on stderr that appears once work has run ``delay_s`` seconds (short commands stay
    quiet). Use as a context manager; call it with a step's description to advance one step."""

    def __init__(self, total: int, description: str, delay_s: float = 2.0):
        self.total, self.description, self.delay_s = total, description, delay_s
        self.t0 = time.monotonic()
        self.done = 0
        self.bar: Progress | None = None

    def __enter__(self) -> StepProgress:
        return self

    def __call__(self, step: str) -> None:
        self.done += 1
        if self.bar is None and time.monotonic() - self.t0 >= self.delay_s:
            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), console=err_console, transient=True)
            self.bar.start()
            self.task = self.bar.add_task(self.description, total=self.total)
        if self.bar is not None:
            self.bar.update(self.task, completed=min(self.done, self.total), description=f"{self.description}: {step}")

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


def print_wide(table: Table, width: int = 170) -> None:
    """Print a table at least ``width`` columns wide (ids and names stay whole when stdout is not a terminal)."""
    Console(width=max(console.width, width), highlight=False).print(table)


def _fmt(v: Any, spec: str = ".3f") -> str:
    return "" if v is None or (isinstance(v, float) and v != v) else format(v, spec)


def _split(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    out = [x.strip() for v in values for x in v.split(",") if x.strip()]
    return out or None


def train(
    target: TargetOption = "ipc",
    model: Annotated[str, typer.Option("--model", help="Estimator: hgb (gradient boosting), rf (random forest), "
                                       "linear (ridge baseline).")] = "hgb",
    experiments: Annotated[list[str] | None, typer.Option("--experiments", "--experiment", help="Experiments to learn "
                                                          "from (repeatable or comma-separated; default: all).")] = None,
    seed: Annotated[int, typer.Option(help="Random seed (same seed and data give the same model).")] = 0,
    folds: Annotated[int, typer.Option(help="Folds of the evaluation grouped by application.")] = 5,
    compare: Annotated[bool, typer.Option(help="Also compare the merged counter set with each single-run set.")] = False,
    warehouse: WarehouseOption = DEFAULT_WAREHOUSE,
) -> None:
    """Train a burst performance predictor, evaluate it on unseen applications and register it."""
    from synthtrace.models.registry import train as train_model
    if folds < 2:
        raise BadInputError("--folds must be at least 2")
    with StepProgress(3 + folds, f"training a {model} predictor of {target}") as step:
        m = train_model(warehouse, target, model, experiments=_split(experiments), seed=seed, n_splits=folds,
                        on_step=step)
    r = m.record
    t = Table(title=f"model {r['model_id']}")
    t.add_column("field")
    t.add_column("value", overflow="fold")
    metrics = json.loads(r["metrics"])
    cv = metrics.get("cv", {})
    for k, v in [("target", r["target"]), ("estimator", r["kind"]), ("seed", str(r["seed"])),
                 ("applications", ", ".join(r["apps"])), ("experiments", str(len(r["experiments"]))),
                 ("bursts", str(r["n_rows"])), ("features", str(len(r["features"]))),
                 ("R² (unseen apps)", _fmt(r["cv_r2"]) or cv.get("skipped", "")),
                 ("MAPE (unseen apps)", _fmt(r["cv_mape"], ".1%")),
                 ("R² / MAPE (training data)", f"{_fmt(r['train_r2'])} / {_fmt(r['train_mape'], '.1%')}"),
                 ("status", r["status"]),
                 ("data hash", r["data_hash"][:16]), ("artifact sha256", r["artifact_sha256"][:16])]:
        t.add_row(k, v)
    console.print(t)
    if r["status"] == "rejected":
        err_console.print(f"warning: {r['model_id']} predicts unseen applications worse than their mean "
                          f"(R² {r['cv_r2']:.3f}); registered as rejected: predict uses it only with --model "
                          f"{r['model_id']}", highlight=False, soft_wrap=True)
    if compare:
        _print_comparison(warehouse, target, model, _split(experiments), seed, folds)


def _print_comparison(warehouse: Path, target: str, kind: str, experiments: list[str] | None, seed: int,
                      folds: int) -> None:
    from synthtrace.models.predictors import compare_counter_sets
    from synthtrace.models.training_data import comparison_plan, load_bursts
    from synthtrace.warehouse.layout import Warehouse
    from synthtrace.warehouse.runs import runs_table
    wh = Warehouse(warehouse)
    plan = comparison_plan(*load_bursts(wh, experiments), runs_table(wh))
    if plan is None:
        err_console.print("comparison skipped: the experiments were recorded with one counter set", highlight=False)
        return
    if plan.note:
        err_console.print(plan.note, highlight=False, style="dim")
    with StepProgress(1 + len(plan.sets), "comparing counter sets") as step:
        table = compare_counter_sets(plan.frame, target, plan.sets, rows=plan.rows, kinds=(kind,), seed=seed,
                                     n_splits=folds, on_step=step)
    t = Table(title=f"{target}: merged counter set vs single-run sets (grouped by application)")
    for c in ("counter set", "features", "R²", "MAPE", "MAPE cut vs best single"):
        t.add_column(c)
    for r in table.iter_rows(named=True):
        t.add_row(r["counter_set"], str(r["n_features"]), _fmt(r["r2"]), _fmt(r["mape"], ".1%"),
                  _fmt(r["mape_cut_vs_best_single"], ".0%"))
    console.print(t)


def models(
    target: Annotated[str | None, typer.Option("--target", help="Only models of this target.")] = None,
    warehouse: WarehouseOption = DEFAULT_WAREHOUSE,
) -> None:
    """List every registered model version, oldest first."""
    from synthtrace.warehouse.layout import Warehouse
    from synthtrace.warehouse.model_store import read_models
    ms = read_models(Warehouse(warehouse))
    if target is not None:
        ms = ms.filter(pl.col("target") == target)
    if ms.height == 0:
        console.print(f"no models in {warehouse} (train one with `synthtrace train`)", highlight=False)
        return
    t = Table(title=f"models in {warehouse}")
    for c in ("model id", "target", "estimator", "created (UTC)", "applications", "bursts", "R² unseen", "MAPE unseen",
              "status"):
        t.add_column(c, overflow="fold")
    for r in ms.iter_rows(named=True):
        t.add_row(r["model_id"], r["target"], r["kind"], f"{r['created_at']:%Y-%m-%d %H:%M:%S}",
                  str(len(r["apps"] or [])), str(r["n_rows"]), _fmt(r["cv_r2"]), _fmt(r["cv_mape"], ".1%"),
                  r["status"] or "")
    print_wide(t)


def predict(
    experiment: Annotated[str, typer.Option("--experiment", help="Experiment whose bursts to predict.",
                                                           callback=name_option)],
    model: Annotated[str | None, typer.Option("--model", help="Model id (default: the newest model).")] = None,
    target: Annotated[str | None, typer.Option("--target", help="With no --model: the newest model of this target.")] = None,
    warehouse: WarehouseOption = DEFAULT_WAREHOUSE,
) -> None:
    """Predict every burst of an experiment with a registered model; writes the predictions view."""
    from synthtrace.models.features import check_target
    from synthtrace.models.predictors import scores
    from synthtrace.models.registry import predict as predict_experiment
    from synthtrace.warehouse.layout import Warehouse
    from synthtrace.warehouse.model_store import predictions_dir
    if target is not None:
        check_target(target)
    m, out = predict_experiment(warehouse, experiment, model, target=target)
    if m.record.get("status") == "rejected":
        err_console.print(f"warning: {m.model_id} is rejected (R² {m.record['cv_r2']:.3f} on unseen applications): "
                          "its predictions are worse than a constant", highlight=False, soft_wrap=True)
    known = out.filter(pl.col("actual").is_not_null() & pl.col("predicted").is_not_null())
    s = scores(known["actual"].to_numpy(), known["predicted"].to_numpy()) if known.height else None
    path = predictions_dir(Warehouse(warehouse)) / m.model_id
    msg = f"predicted {m.record['target']} of {out.height} bursts of {experiment} with {m.model_id} -> {path}"
    console.print(msg, highlight=False, soft_wrap=True)
    if s is not None and s["n"] >= 2:
        console.print(f"error against the measured {m.record['target']}: R² {_fmt(s['r2'])}, MAPE "
                      f"{_fmt(s['mape'], '.1%')} on {s['n']} bursts", highlight=False, soft_wrap=True)
    else:
        console.print(f"no measured {m.record['target']} in {experiment} to compare with", highlight=False)


def run_detection(warehouse: str | Path, app: str | None = None, now: datetime | None = None) -> pl.DataFrame:
    """Detect regressions in the history of ``app`` (default: every app; a prefix names every app it starts, see
    :func:`synthtrace.warehouse.history.match_apps`); rewrite their alerts; return them."""
    return _detection(warehouse, app, now)[0]


def _detection(warehouse: str | Path, app: str | None, now: datetime | None = None
               ) -> tuple[pl.DataFrame, list[str], dict[str, int]]:
    """(alerts, the apps looked at, nights of history per app)."""
    from synthtrace.models.regression import REGRESSION_SCHEMA, detect as detect_alerts
    from synthtrace.models.site_signals import site_history
    from synthtrace.warehouse.history import apps, match_apps
    from synthtrace.warehouse.layout import Warehouse
    from synthtrace.warehouse.alert_store import write_alerts
    names = match_apps(warehouse, app) if app is not None else apps(warehouse)
    if not names:
        raise BadInputError(f"{warehouse}: no runs to look at (ingest traces first)")
    history = site_history(warehouse, names)
    alerts = detect_alerts(history, now=now) if history.height else pl.DataFrame(schema=REGRESSION_SCHEMA)
    wh = Warehouse(warehouse)
    for name in names:
        write_alerts(wh, name, alerts.filter(pl.col("app") == name))
    return alerts, names, history_nights(history, names)


def history_nights(history: pl.DataFrame, names: list[str]) -> dict[str, int]:
    """Nights (points) in the longest series of each app (0 without history)."""
    if history.height == 0:
        return dict.fromkeys(names, 0)
    n = history.group_by("app", "config", "call_site").agg(pl.col("point").n_unique().alias("n")).group_by("app").agg(
        pl.col("n").max())
    return {a: dict(n.iter_rows()).get(a, 0) for a in names}


def detect(
    app: Annotated[str | None, typer.Option("--app", help="Only this application, or every application whose name "
                                            "starts with it (e.g. lulesh; default: every application).")] = None,
    warehouse: WarehouseOption = DEFAULT_WAREHOUSE,
) -> None:
    """Find performance regressions in the nightly history of each application; writes the regressions view."""
    from synthtrace.models.regression import DetectorParams
    with err_console.status("detecting regressions"):
        alerts, names, nights = _detection(warehouse, app)
    p = DetectorParams()
    need = p.min_before + p.min_after
    short = [a for a in names if nights[a] < need]
    for a in short:
        console.print(f"{a}: {nights[a]} night(s) of history; detecting a regression needs at least {need} "
                      f"({p.min_before} before a change and {p.min_after} after it)", highlight=False, soft_wrap=True)
    if alerts.height == 0:
        if len(short) < len(names):
            looked = [a for a in names if a not in short]
            console.print(f"no regressions found in {', '.join(looked)} "
                          f"({min(nights[a] for a in looked)}+ nights each)", highlight=False, soft_wrap=True)
        return
    t = Table(title=f"{alerts.height} regression(s)")
    for c in ("app", "call site", "changed at", "time", "app time", "explained by", "archetype", "score"):
        t.add_column(c, overflow="fold")
    for r in alerts.sort("score", descending=True).iter_rows(named=True):
        arch = r["archetype_before"] or ""
        if r["archetype_after"] and r["archetype_after"] != r["archetype_before"]:
            arch = f"{arch} -> {r['archetype_after']}"
        moved = {s["name"]: s for s in r["signals"]}
        why = ", ".join(_describe(n, moved.get(n)) for n in r["explained_by"])
        total = moved.get("app_time_ns")
        t.add_row(r["app"], r["call_site"], f"{r['changed_at']:%Y-%m-%d %H:%M}", f"+{r['magnitude']:.1%}",
                  f"{total['after'] / total['before'] - 1:+.1%}" if total and total["before"] else "", why, arch,
                  f"{r['score']:.2f}")
    console.print(t)


def _describe(name: str, s: dict | None) -> str:
    if s is None or not s.get("before"):
        return name
    return f"{name} {s['after'] / s['before'] - 1:+.0%}"


def detect_step(warehouse: str | Path) -> list[dict]:
    """The nightly flow's detection stage: rewrite the regressions view; return the alerts that are new.

    New = not among the alerts stored before this run (same app, configuration, call site and change date).
    Each alert is a JSON-friendly dict (dates as ISO strings). Returns [] when nothing is ingested.
    """
    from synthtrace.warehouse.history import apps
    from synthtrace.warehouse.layout import Warehouse
    from synthtrace.warehouse.alert_store import read_alerts
    if not apps(warehouse):
        return []
    before = read_alerts(Warehouse(warehouse))
    seen = set()
    if before.height:
        seen = set(before.select("app", "config", "call_site", "changed_at").iter_rows())
    alerts = run_detection(warehouse)
    new = [r for r in alerts.iter_rows(named=True)
           if (r["app"], r["config"], r["call_site"], r["changed_at"]) not in seen]
    return [{k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in r.items()} for r in new]


def retrain_step(warehouse: str | Path, target: str = "ipc", kind: str = "hgb",
                 seed: int = 0) -> dict | None:
    """The nightly flow's retraining stage: train a new ``target`` model when experiments appeared since the newest.

    Returns a summary (model_id, target, kind, n_rows, cv_r2, cv_mape, new experiments) or None when no
    retraining was due or there is nothing to learn from.
    """
    from synthtrace.models.features import NoTrainingDataError
    from synthtrace.models.registry import train as train_model
    from synthtrace.warehouse.layout import Warehouse
    from synthtrace.warehouse.model_store import experiment_apps, read_models
    wh = Warehouse(warehouse)
    available = set(experiment_apps(wh))
    if not available:
        return None
    ms = read_models(wh).filter((pl.col("target") == target) & (pl.col("kind") == kind))
    seen = set(ms["experiments"][-1]) if ms.height else set()
    fresh = sorted(available - seen)
    if ms.height and not fresh:
        return None
    try:
        m = train_model(warehouse, target, kind, seed=seed)
    except NoTrainingDataError:
        return None
    r = m.record
    return {"model_id": r["model_id"], "target": target, "kind": kind, "n_rows": r["n_rows"], "cv_r2": r["cv_r2"],
            "cv_mape": r["cv_mape"], "new_experiments": fresh}


def register(app: typer.Typer) -> None:
    app.command()(train)
    app.command()(models)
    app.command()(predict)
    app.command()(detect)
