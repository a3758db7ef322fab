"""``synthtrace train``, ``models``, ``predict`` and ``detect``: performance predictors and regression alerts
(DESIGN §8, §10). The work is in :mod:`synthtrace.pipelines.jobs` and the models layer; this module parses the
options and prints."""
from __future__ import annotations

import json
from typing import Annotated, Any

import polars as pl
import typer
from rich.table import Table

from synthtrace.pipelines.cli_app import (
    DEFAULT_WAREHOUSE,
    ReadWarehouseOption,
    StepProgress,
    console,
    err_console,
    print_warning,
    print_table,
)
from synthtrace.pipelines.cli_base import print_merge_coverage_notes
from synthtrace.pipelines.cli_examples import epilog
from synthtrace.tracelib.errors import BadInputError
from synthtrace.warehouse import Warehouse
from synthtrace.warehouse.names import name_option

TargetOption = Annotated[str, typer.Option("--target", help="What to predict: ipc (instructions per cycle) or tpi "
                                           "(time per instruction, ns).")]


def _fmt(v: Any, spec: str = ".3f") -> str:
    return "" if v is None or (isinstance(v, float) and v != v) else format(v, spec)


def _split(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    out = [x.strip() for v in values for x in v.split(",") if x.strip()]
    return out or None


def train(
    target: TargetOption = "ipc",
    model: Annotated[
        str,
        typer.Option(
            "--model", help="Estimator: hgb (gradient boosting), rf (random forest), linear (ridge baseline)."
        ),
    ] = "hgb",
    experiments: Annotated[
        list[str] | None,
        typer.Option(
            "--experiments",
            "--experiment",
            help="Experiments to learn from (repeatable or comma-separated; default: all).",
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Random seed (same seed and data give the same model; 0 to 2^32-1, as "
                                           "scikit-learn takes it).", min=0, max=2**32 - 1)] = 0,
    folds: Annotated[int, typer.Option(help="Folds of the evaluation grouped by application.")] = 5,
    compare: Annotated[
        bool, typer.Option(help="Also compare the merged counter set with each single-run set.")
    ] = False,
    warehouse: ReadWarehouseOption = DEFAULT_WAREHOUSE,
) -> None:
    """Train a burst performance predictor, evaluate it on unseen applications and register it."""
    from synthtrace.models.registry import rejection_reason
    from synthtrace.pipelines.jobs import train as train_model
    if folds < 2:
        raise BadInputError("--folds must be at least 2")
    with StepProgress(3 + folds, f"training a {model} predictor of {target}") as step:
        m = train_model(Warehouse(warehouse), target, model, experiments=_split(experiments), seed=seed, n_splits=folds,
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
    print_table(t)
    if r["status"] == "rejected":
        print_warning(f"{r['model_id']} is not clearly better than the training mean ({rejection_reason(r)}); "
                      f"registered as rejected: predict uses it only with --model {r['model_id']}")
    print_merge_coverage_notes(map(Warehouse(warehouse).experiment, r["experiments"]))
    if compare:
        _print_comparison(Warehouse(warehouse), target, model, _split(experiments), seed, folds)


def _print_comparison(wh: Warehouse, target: str, kind: str, experiments: list[str] | None, seed: int,
                      folds: int) -> None:
    from synthtrace.models.features import feature_columns
    from synthtrace.models.predictors import compare_counter_sets
    from synthtrace.models.training_data import comparison_plan, load_bursts
    from synthtrace.warehouse.runs import runs_table
    plan = comparison_plan(*load_bursts(wh, experiments, columns=feature_columns()), runs_table(wh))
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
    print_table(t)


def models(
    target: Annotated[str | None, typer.Option("--target", help="Only models of this target.")] = None,
    warehouse: ReadWarehouseOption = DEFAULT_WAREHOUSE,
) -> None:
    """List every registered model version, oldest first."""
    from synthtrace.warehouse.model_store import read_models

    ms = read_models(Warehouse(warehouse))
    if target is not None:
        ms = ms.filter(pl.col("target") == target)
    if ms.height == 0:
        console.print(f"no models in {warehouse} (train one with `synthtrace train`)")
        return
    t = Table(title=f"models in {warehouse}")
    for c in ("model id", "target", "estimator", "created (UTC)", "applications", "bursts", "R² unseen", "MAPE unseen",
              "status"):
        t.add_column(c, overflow="fold")
    for r in ms.iter_rows(named=True):
        t.add_row(r["model_id"], r["target"], r["kind"], f"{r['created_at']:%Y-%m-%d %H:%M:%S}",
                  str(len(r["apps"] or [])), str(r["n_rows"]), _fmt(r["cv_r2"]), _fmt(r["cv_mape"], ".1%"),
                  r["status"] or "")
    print_table(t)


def predict(
    experiment: Annotated[
        str, typer.Option("--experiment", help="Experiment whose bursts to predict.", callback=name_option)
    ],
    model: Annotated[str | None, typer.Option("--model", help="Model id (default: the newest model).")] = None,
    target: Annotated[
        str | None, typer.Option("--target", help="With no --model: the newest model of this target.")
    ] = None,
    warehouse: ReadWarehouseOption = DEFAULT_WAREHOUSE,
) -> None:
    """Predict every burst of an experiment with a registered model; writes the predictions view."""
    from synthtrace.models.features import check_target
    from synthtrace.models.registry import prediction_error, rejection_reason
    from synthtrace.pipelines.jobs import predict as predict_experiment
    from synthtrace.warehouse.model_store import predictions_dir

    if target is not None:
        check_target(target)
    wh = Warehouse(warehouse)
    m, out = predict_experiment(wh, experiment, model, target=target)
    if m.record.get("status") == "rejected":
        print_warning(f"{m.model_id} is rejected ({rejection_reason(m.record)}): its predictions are not clearly "
                      "better than the training mean's")
    error = prediction_error(out)
    path = predictions_dir(wh) / m.model_id
    msg = f"predicted {m.record['target']} of {out.height} bursts of {experiment} with {m.model_id} -> {path}"
    console.print(msg, soft_wrap=True)
    if n_null := out["predicted"].null_count():  # [lead] attack 7 A12: bursts without the model's counters
        print_warning(f"{n_null} of {out.height} bursts have none of the counters {m.model_id} reads: predicted NULL")
    if (s := error.scores) is not None:
        shorter = f" ({error.n_shorter} shorter not scored)" if error.n_shorter else ""
        console.print(f"error against the measured {m.record['target']}: R² {_fmt(s['r2'])}, MAPE "
                      f"{_fmt(s['mape'], '.1%')} on {s['n']} bursts >= {error.min_instructions:g} instructions"
                      f"{shorter}", soft_wrap=True)
    elif error.n_shorter:
        console.print(f"no burst of {experiment} has the >= {error.min_instructions:g} instructions "
                      f"{m.model_id} learned from ({error.n_shorter} shorter not scored)", soft_wrap=True)
    else:
        console.print(f"no measured {m.record['target']} in {experiment} to compare with")
    print_merge_coverage_notes([wh.experiment(experiment)])


def detect(
    app: Annotated[str | None, typer.Option("--app", help="Only this application, or every application whose name "
                                            "starts with it (e.g. lulesh; default: every application).")] = None,
    warehouse: ReadWarehouseOption = DEFAULT_WAREHOUSE,
) -> None:
    """Find performance regressions in the nightly history of each application; writes the regressions view."""
    from synthtrace.models.regression import DetectorParams
    from synthtrace.pipelines.jobs import DETECTION_STEPS, detection

    with StepProgress(len(DETECTION_STEPS), "detect") as step:
        found = detection(Warehouse(warehouse), app, on_step=step)
    alerts, names, nights = found.alerts, found.apps, found.nights
    p = DetectorParams()
    need = p.min_before + p.min_after
    short = [a for a in names if nights[a] < need]
    for a in short:
        console.print(f"{a}: {nights[a]} night(s) of history; detecting a regression needs at least {need} "
                      f"({p.min_before} before a change and {p.min_after} after it)", soft_wrap=True)
    if alerts.height == 0:
        if len(short) < len(names):
            looked = [a for a in names if a not in short]
            console.print(f"no regressions found in {', '.join(looked)} "
                          f"({min(nights[a] for a in looked)}+ nights each)", soft_wrap=True)
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
    print_table(t)


def _describe(name: str, s: dict | None) -> str:
    if s is None or not s.get("before"):
        return name
    return f"{name} {s['after'] / s['before'] - 1:+.0%}"


def register(app: typer.Typer) -> None:
    app.command(epilog=epilog("train"))(train)
    app.command(epilog=epilog("models"))(models)
    app.command(epilog=epilog("predict"))(predict)
    app.command(epilog=epilog("detect"))(detect)
