"""The work behind the commands and the night's stages, as plain functions over a
:class:`~synthtrace.warehouse.Warehouse`: the CLI commands (which only parse options and print) and the nightly
flow both call them.

The night's stages, imported directly by the flow (a missing or renamed function is an ImportError at start-up,
never a stage silently skipped), each returning a JSON-friendly summary:

- per experiment: :func:`merge` ``(wh, experiment)``, :func:`archetypes` ``(wh, experiment, machine)``;
- per warehouse: :func:`detect` ``(wh)``, :func:`retrain` ``(wh)``, :func:`report` ``(wh, machine=...)``.

Each function imports the layers it needs when called, so a command that needs none of them stays quick.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from synthtrace.tracelib.errors import BadInputError

if TYPE_CHECKING:
    import polars as pl

    from synthtrace.models.analysis import AnalysisResult
    from synthtrace.models.archetypes import Thresholds
    from synthtrace.tracelib.domain.machine import Machine
    from synthtrace.warehouse.analysis_store import ExperimentInput
    from synthtrace.warehouse.layout import Warehouse

#: a progress callback: told the description of each step done
OnStep = Callable[[str], None]


# ---------------------------------------------------------------------------------------------- merge
def merge(wh: Warehouse, experiment: str) -> dict[str, Any] | None:
    """The night's merge stage: merge ``experiment`` if it has two runs or more, else do nothing.

    Returns a summary (experiment, reference run, bursts, counters with their coverage, verdict) or None when
    there was nothing to merge. Bad input raises as on the command line.
    """
    from synthtrace.tracelib.merge.checks import worst
    from synthtrace.warehouse.merged import experiment_runs, merge_experiment

    if experiment_runs(wh, experiment).height < 2:
        return None
    result = merge_experiment(wh, experiment)
    return {"experiment": experiment, "reference_run": result.reference_run, "n_bursts": result.merged.height,
            "coverage": dict(zip(result.quality["counter"].to_list(), result.quality["coverage"].to_list())),
            "verdict": worst(result.quality.get_column("verdict"))}


# ---------------------------------------------------------------------------------------------- archetypes
def analyse(wh: Warehouse, experiment: str, *, machine: str | None = None, thresholds: Thresholds | None = None,
            discover: bool = True, on_step: OnStep | None = None) -> tuple[Machine, ExperimentInput, AnalysisResult]:
    """Metrics and archetypes of one experiment, stored in the warehouse; ``machine`` is ``--machine`` (a preset or
    TOML file; None: the ``machine.toml`` beside the experiment's traces, else the default preset). Returns the
    machine profile used, what was read, and the analysis. ``on_step`` is told each of its three steps."""
    from synthtrace.models.analysis import analyse_experiment, machine_profile

    profile = machine_profile(str(wh.root), experiment, machine)
    inp, res = analyse_experiment(str(wh.root), experiment, machine=profile, thresholds=thresholds,
                                  discover=discover, on_step=on_step)
    return profile, inp, res


def archetypes(wh: Warehouse, experiment: str, machine: str | None = None) -> dict[str, float]:
    """The night's archetypes stage: analyse and store one experiment; returns archetype -> share of burst time."""
    import polars as pl

    from synthtrace.models.analysis import mix

    _, _, res = analyse(wh, experiment, machine=machine)
    m = mix(res.archetypes).filter(pl.col("unit") == "burst")
    return dict(zip(m["archetype"].to_list(), m["time_share"].to_list()))


# ---------------------------------------------------------------------------------------------- regressions
@dataclass(frozen=True)
class Detection:
    """What one detection found: the alerts, the applications looked at and the nights of history of each (its
    longest series)."""

    alerts: pl.DataFrame
    apps: list[str]
    nights: dict[str, int]


#: the steps of :func:`detection`, as its ``on_step`` is told them
DETECTION_STEPS = ("loading the detector", "reading the nightly history", "detecting change points",
                   "writing the alerts")


def detection(wh: Warehouse, app: str | None = None, now: datetime | None = None,
              on_step: OnStep | None = None) -> Detection:
    """Detect regressions in the history of ``app`` (default: every app; a prefix names every app it starts, see
    :func:`synthtrace.warehouse.history.match_apps`) and rewrite their alerts in the ``regressions`` view.
    ``on_step`` is told each of :data:`DETECTION_STEPS` as it ends (the first, importing the models, takes seconds)."""
    import polars as pl

    from synthtrace.warehouse.alert_store import write_alerts
    from synthtrace.warehouse.history import apps, match_apps

    step = on_step or (lambda _: None)
    names = match_apps(wh.root, app) if app is not None else apps(wh.root)
    if not names:
        raise BadInputError(f"{wh.root}: no runs to look at (ingest traces first)")
    from synthtrace.models.regression import REGRESSION_SCHEMA
    from synthtrace.models.regression import detect as detect_alerts
    from synthtrace.models.site_signals import site_history

    step(DETECTION_STEPS[0])
    history = site_history(wh.root, names)
    step(DETECTION_STEPS[1])
    alerts = detect_alerts(history, now=now) if history.height else pl.DataFrame(schema=REGRESSION_SCHEMA)
    step(DETECTION_STEPS[2])
    for name in names:
        write_alerts(wh, name, alerts.filter(pl.col("app") == name))
    step(DETECTION_STEPS[3])
    return Detection(alerts, names, _history_nights(history, names))


def _history_nights(history: pl.DataFrame, names: list[str]) -> dict[str, int]:
    """Nights (points) in the longest series of each app (0 without history)."""
    import polars as pl

    if history.height == 0:
        return dict.fromkeys(names, 0)
    n = (history.group_by("app", "config", "call_site").agg(pl.col("point").n_unique().alias("n"))
         .group_by("app").agg(pl.col("n").max()))
    return {a: dict(n.iter_rows()).get(a, 0) for a in names}


def detect(wh: Warehouse) -> list[dict[str, Any]]:
    """The night's detection stage: rewrite the regressions view; return the alerts that are new.

    New = not among the alerts stored before (same app, configuration, call site and change date). Each alert
    is a JSON-friendly dict (dates as ISO strings). Returns [] when nothing is ingested.
    """
    from synthtrace.warehouse.history import apps
    from synthtrace.warehouse.alert_store import read_alerts

    if not apps(wh.root):
        return []
    before = read_alerts(wh)
    seen = set(before.select("app", "config", "call_site", "changed_at").iter_rows()) if before.height else set()
    new = [r for r in detection(wh).alerts.iter_rows(named=True)
           if (r["app"], r["config"], r["call_site"], r["changed_at"]) not in seen]
    return [{k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in r.items()} for r in new]


# ---------------------------------------------------------------------------------------------- models
def retrain(wh: Warehouse, target: str = "ipc", kind: str = "hgb", seed: int = 0) -> dict[str, Any] | None:
    """The night's retraining stage: train a new ``target`` model when experiments appeared since the newest.

    Returns a summary (model_id, target, kind, n_rows, cv_r2, cv_mape, new experiments) or None when no
    retraining was due or there is nothing to learn from.
    """
    import polars as pl

    from synthtrace.models.features import NoTrainingDataError
    from synthtrace.models.registry import train as train_model
    from synthtrace.warehouse.model_store import experiment_apps, read_models

    available = set(experiment_apps(wh))
    if not available:
        return None
    ms = read_models(wh).filter((pl.col("target") == target) & (pl.col("kind") == kind))
    seen = set(ms["experiments"][-1]) if ms.height else set()
    fresh = sorted(available - seen)
    if ms.height and not fresh:
        return None
    try:
        m = train_model(wh.root, target, kind, seed=seed)
    except NoTrainingDataError:
        return None
    r = m.record
    return {"model_id": r["model_id"], "target": target, "kind": kind, "n_rows": r["n_rows"], "cv_r2": r["cv_r2"],
            "cv_mape": r["cv_mape"], "new_experiments": fresh}


# ---------------------------------------------------------------------------------------------- report
def report(wh: Warehouse, out: str | Path | None = None, machine: str | None = None, *,
           experiment: str | None = None, thresholds: Thresholds | None = None, plot_dir: Path | None = None,
           on_step: OnStep | None = None) -> str:
    """The HTML report of the warehouse (default ``WAREHOUSE/report.html``; the night's report stage); returns its
    path. ``machine`` (``--machine``) overrides each experiment's own profile (its ``machine.toml``)."""
    from synthtrace.pipelines.report import build_report

    out = Path(out) if out else wh.root / "report.html"
    return str(build_report(wh, out, experiment=experiment, machine=machine, thresholds=thresholds,
                            plot_dir=plot_dir, on_step=on_step))


#: per-experiment stages of the night, in order
EXPERIMENT_STAGES = {"merge": merge, "archetypes": archetypes}
#: warehouse-wide stages of the night, in order
WAREHOUSE_STAGES = {"detect": detect, "retrain": retrain, "report": report}
STAGES = (*EXPERIMENT_STAGES, *WAREHOUSE_STAGES)
