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


# ---------------------------------------------------------------------------------------------- POP
@dataclass(frozen=True)
class PopTables:
    """The POP tables of some applications: ``metrics`` (one row per run, the pop_metrics view), ``scaling`` (one
    row per run of each series, pop_scaling), ``predicted`` (run_id -> runtime in ns replayed on the what-if
    network, when one was given) and ``notes``: what the user must know (a run replayed with dependencies
    released, a run without its messages)."""

    metrics: pl.DataFrame
    scaling: pl.DataFrame
    predicted: dict[str, int]
    notes: list[str]


def _run_pop(wh: Warehouse, run: dict[str, Any], network: Any = None) -> tuple[Any, list[str]]:
    """The POP figures of one stored run (:class:`~synthtrace.tracelib.domain.pop.RunPop`) and notes about them."""
    from synthtrace.tracelib.domain.pop import pop_of_run
    from synthtrace.warehouse.pop_store import needs_stored_messages, run_pop_inputs

    inputs, notes = run_pop_inputs(wh, run["run_id"]), []
    messages = inputs.messages
    if needs_stored_messages(inputs.calls, messages):
        source = Path(run["source_path"] or "")
        if source.is_file():  # ingested before its messages were kept: read them from the trace
            from synthtrace.tracelib.formats.source import open_trace

            messages = open_trace(source).read_tables(run["run_id"])[2].messages
        else:
            notes.append(f"{run['run_name']}: no ideal runtime (serialization, transfer): ingested before its "
                         f"messages were kept and {source} is gone; remove and ingest the trace again")
            res = pop_of_run(inputs.bursts, None, None)
            return res, notes
    res = pop_of_run(inputs.bursts, inputs.calls, messages, network)
    if res.n_released:
        notes.append(f"{run['run_name']}: {res.n_released} MPI dependencies without their partner in the trace "
                     "(a trace cut short, or sends that only completed eagerly) were released in the replay")
    return res, notes


def pop_experiment(wh: Warehouse, experiment: str) -> tuple[pl.DataFrame, list[str]]:
    """The POP table of every run of ``experiment`` (replayed on the ideal network), committed as its
    ``pop_metrics``; a table already there for the same runs is only relabelled (run names, app). Returns the
    table and notes."""
    import polars as pl

    from synthtrace.tracelib.domain.pop import POP_METRICS_SCHEMA, pop_metrics
    from synthtrace.warehouse.runs import check_runs_still_in, experiment_runs

    runs = experiment_runs(wh, experiment)
    stored_file = wh.experiment_dir(experiment) / "pop_metrics.parquet"
    labels = runs.select("run_id", "run_name", "app", "experiment")
    if stored_file.is_file():
        stored = pl.read_parquet(stored_file)
        if set(stored["run_id"].to_list()) == set(runs["run_id"].to_list()):
            fresh = stored.drop("run_name", "app", "experiment").join(labels, on="run_id").select(
                list(POP_METRICS_SCHEMA))
            if not fresh.equals(stored.select(list(POP_METRICS_SCHEMA))):
                wh.update_dir(wh.experiment_dir(experiment), {"pop_metrics": fresh})
            return fresh, []
    threads, rows, notes = [], [], []
    for run in runs.iter_rows(named=True):
        res, why = _run_pop(wh, run)
        threads.append(res.threads)
        rows.append({"run_id": run["run_id"], "runtime_ns": run["duration_ns"],
                     "ideal_runtime_ns": res.ideal_runtime_ns})
        notes += why
    per_run = labels.join(pl.DataFrame(rows, schema={"run_id": pl.String, "runtime_ns": pl.Int64,
                                                     "ideal_runtime_ns": pl.Int64}), on="run_id")
    table = pop_metrics(pl.concat(threads, how="vertical_relaxed"), per_run)
    wh.update_dir(wh.experiment_dir(experiment), {"pop_metrics": table},
                  check=lambda: check_runs_still_in(wh, experiment, runs["run_id"].to_list(),
                                                    "its POP table was computed"))
    return table, notes


def pop_tables(wh: Warehouse, names: list[str] | None = None, *, scaling: str = "strong",
               network: Any = None) -> PopTables:
    """The POP tables of the applications or experiments ``names`` (default: all), computing what is missing;
    the warehouse's scaling table is rewritten for every application. ``network`` (a
    :class:`~synthtrace.tracelib.domain.replay.Network`) also predicts each run's runtime on it."""
    import polars as pl

    from synthtrace.tracelib.domain.pop import pop_scaling
    from synthtrace.warehouse.pop_store import read_pop_metrics, write_pop_scaling
    from synthtrace.warehouse.runs import runs_table

    runs = runs_table(wh)
    if runs.height == 0:
        raise BadInputError(f"{wh.root}: no runs (ingest traces first)")
    if names:
        unknown = [n for n in names if n not in set(runs["app"].to_list()) | set(runs["experiment"].to_list())]
        if unknown:
            raise BadInputError(f"{', '.join(map(repr, unknown))}: neither an application nor an experiment in "
                                f"{wh.root} (applications: {', '.join(sorted(set(runs['app'].to_list())))})")
        runs = runs.filter(pl.col("app").is_in(names) | pl.col("experiment").is_in(names))
    notes: list[str] = []
    for experiment in sorted(set(runs["experiment"].to_list())):
        notes += pop_experiment(wh, experiment)[1]
    everything = read_pop_metrics(wh)
    series = pop_scaling(everything, scaling)  # type: ignore[arg-type]
    write_pop_scaling(wh, series)
    mine = pl.col("run_id").is_in(runs["run_id"].to_list())
    metrics = everything.filter(mine)
    predicted = {}
    if network is not None:
        for run in runs.iter_rows(named=True):
            res, _ = _run_pop(wh, run, network)
            if res.ideal_runtime_ns is not None:
                predicted[run["run_id"]] = res.ideal_runtime_ns
    return PopTables(metrics, series.filter(mine), predicted, notes)


def pop(wh: Warehouse, experiment: str) -> dict[str, Any] | None:
    """The night's POP stage: the POP table of each run of ``experiment``, then the scaling table of every
    application. Returns a summary (runs, parallel efficiency per run name) or None when it has no runs."""
    tables = pop_tables(wh, [experiment])
    if tables.metrics.height == 0:
        return None
    return {"experiment": experiment, "runs": tables.metrics.height,
            "parallel_efficiency": dict(zip(tables.metrics["run_name"].to_list(),
                                            tables.metrics["parallel_efficiency"].to_list())),
            "notes": tables.notes}


#: per-experiment stages of the night, in order
EXPERIMENT_STAGES = {"merge": merge, "archetypes": archetypes}
#: warehouse-wide stages of the night, in order
WAREHOUSE_STAGES = {"detect": detect, "retrain": retrain, "report": report}
STAGES = (*EXPERIMENT_STAGES, *WAREHOUSE_STAGES)
