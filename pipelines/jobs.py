"""The work behind the commands and the night's stages: the one layer that loads from the warehouse, computes with
the pure functions of tracelib and models, and commits the result (DESIGN §2, §9). The CLI commands (which only
parse options and print) and the nightly flow both call it; everything here takes a
:class:`~synthtrace.warehouse.Warehouse` (or an experiment opened from one), never a bare folder.

The night's stages are the rows of :data:`JOBS`, each described once: its name (``--skip NAME``), its scope (once
per experiment whose runs changed, or once per warehouse), what it runs, and which stages redoing it makes stale.
The flow loops over that table; a new stage is a function here and one row in it (see docs/ARCHITECTURE.md, "Adding a
stage"). Every stage returns a JSON-friendly summary (None: nothing to do).

Each function imports the layers it needs when called, so a command that needs none of them stays quick.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from synthtrace.tracelib.errors import BadInputError
from synthtrace.tracelib.printable import utf8_path
from synthtrace.warehouse.stale_stages import MERGE_INVALIDATES

if TYPE_CHECKING:
    import polars as pl

    from synthtrace.models.analysis import AnalysisResult
    from synthtrace.models.archetypes import Thresholds
    from synthtrace.models.registry import TrainedModel
    from synthtrace.warehouse.analysis_store import AnalysisInput
    from synthtrace.tracelib.domain.machine import Machine
    from synthtrace.tracelib.merge.merge_runs import MergeOptions, MergeResult
    from synthtrace.warehouse.experiment import Experiment, ExperimentTrace
    from synthtrace.warehouse.ingest import IngestResult
    from synthtrace.warehouse.layout import Warehouse

#: a progress callback: told the description of each step done
OnStep = Callable[[str], None]


@dataclass(frozen=True)
class NightSettings:
    """What the night's stages share from the command line: ``machine`` is ``--machine`` (preset or TOML file;
    None: each experiment's own profile)."""

    machine: str | None = None


# ---------------------------------------------------------------------------------------------- ingest
def ingest(wh: Warehouse, path: str | Path, **options: Any) -> IngestResult:
    """Read one trace and commit it as a run (:func:`synthtrace.warehouse.ingest.ingest_trace`, whose options
    ``experiment``, ``app``, ``date``, ``salvage``, ``progress``, ``default_experiment`` and ``known`` it takes):
    reading and storing a run is one step, streamed part by part, so the warehouse layer holds it whole."""
    from synthtrace.warehouse.ingest import ingest_trace

    return ingest_trace(wh, path, **options)


# ---------------------------------------------------------------------------------------------- merge
def merge_experiment(exp: Experiment, options: MergeOptions | None = None,
                     on_step: Callable[[str, int], None] | None = None) -> MergeResult:
    """Load, merge and commit one experiment (with its record: reference run and options). On any error the
    warehouse is left as it was. ``on_step(what, total)`` is called as each step ends: reading the runs, each step
    of :func:`~synthtrace.tracelib.merge.merge_runs.merge_runs`, writing the result."""
    from synthtrace.tracelib.merge.merge_runs import MergeOptions
    from synthtrace.warehouse.merged import merge_stored  # [helper merge-scale] whole, or a group of tasks at a time

    return merge_stored(exp, options or MergeOptions(), on_step)


def merge(wh: Warehouse, experiment: str, settings: NightSettings = NightSettings()) -> dict[str, Any] | None:
    """The night's merge stage: merge ``experiment`` if it has two runs or more, else do nothing.

    Returns a summary (experiment, reference run, bursts, counters with their coverage, verdict) or None when
    there was nothing to merge. Bad input raises as on the command line. A stopped night
    (:func:`~synthtrace.tracelib.read_stop.stop_reads`) ends it at its next step (a run read, aligned,
    a group, a counter) with :class:`~synthtrace.tracelib.errors.ReadStopped`, nothing committed; a stop after
    the commit lets the stage end with its summary.
    """
    from synthtrace.tracelib.read_stop import stoppable
    from synthtrace.tracelib.merge.checks import worst

    exp = wh.experiment(experiment)
    if exp.require_runs().runs.height < 2:
        return None
    with stoppable(exp.dir, None) as check:  # review 23 (6b): a night's merge was waited for 5 s, then cut
        # a stop once "written" is reported would raise over a merge already stored (review24 F10)
        result = merge_experiment(exp, recorded_options(exp), lambda what, total: what == "written" or check())
    return {"experiment": experiment, "reference_run": result.reference_run, "n_bursts": result.merged.height,
            "coverage": dict(zip(result.quality["counter"].to_list(), result.quality["coverage"].to_list())),
            "verdict": worst(result.quality.get_column("verdict"))}


def recorded_options(exp: Experiment) -> MergeOptions:
    """The options of ``exp``'s last merge (a user's ``--reference``, ``--estimate-unmatched``, ...: its record),
    its reference kept only while that run is one of the experiment's; the defaults when it was never merged. Attack
    11 E2: the first night on a warehouse re-merged an experiment merged by hand with the default reference."""
    from dataclasses import fields

    from synthtrace.tracelib.merge.align import AlignConfig
    from synthtrace.tracelib.merge.merge_runs import MergeOptions

    record = exp.record()
    saved = record.get("merge_options")
    if not isinstance(saved, dict):
        return MergeOptions()

    def known(cls: type, values: dict) -> dict:
        return {f.name: values[f.name] for f in fields(cls) if f.name in values}
    options = known(MergeOptions, saved)
    if isinstance(options.get("align"), dict):
        options["align"] = AlignConfig(**known(AlignConfig, options["align"]))
    else:
        options.pop("align", None)
    ref = record.get("reference_run_id")
    options["reference"] = ref if ref in exp.run_ids else None
    return MergeOptions(**options)  # only the fields this version has (a record of another version's options)


# ---------------------------------------------------------------------------------------------- archetypes
@dataclass(frozen=True)
class Analysis:
    """One experiment's analysis: the machine profile used, the trace it read, the result."""

    machine: Machine
    trace: ExperimentTrace | AnalysisInput
    result: AnalysisResult


def analyse(exp: Experiment, *, machine: str | Machine | None = None, thresholds: Thresholds | None = None,
            discover: bool = True, store: bool = True, on_step: OnStep | None = None) -> Analysis:
    """Metrics and archetypes of one experiment, committed (``store``) beside its merge with the machine profile
    used (``machine.json``) and the discovery figures. ``machine``: a profile, or ``--machine`` (a preset or TOML
    file; None: the ``machine.toml`` beside the experiment's traces, else the default preset). ``on_step`` is told
    each of its three steps (read, analysed, stored)."""
    from dataclasses import replace

    from synthtrace.models.analysis import analyse_stored
    from synthtrace.tracelib.domain.machine import Machine
    from synthtrace.warehouse.analysis_store import AnalysisParts, load_experiment_windows
    from synthtrace.warehouse.errors import RunsChangedError
    from synthtrace.warehouse.parts import scan_parts

    step = on_step or (lambda _: None)
    profile = machine if isinstance(machine, Machine) else exp.machine(machine)
    # issue 23: read, measured and classified a window at a time, the frames written as parts and committed from
    # them: the peak no longer grows with the trace
    merge = exp.merge_stamp()  # before reading: a merge committed after it may not be the one read (attack 12 F6)
    trace = load_experiment_windows(exp.wh, exp)
    step(f"{exp.name} read")
    with exp.wh.scratch(exp.dir, "analysis") as folder:  # beside the commit, cleared after a kill (attack 9 C7)
        try:
            result = analyse_stored(trace, AnalysisParts(folder), machine=profile, thresholds=thresholds,
                                    discover=discover)
        except Exception as exc:
            if vanished(exc, exp.dir):
                raise RunsChangedError(f"experiment {exp.name!r}: its stored files changed while it was analysed "
                                       "(a run removed or moved); nothing was committed: run the command again"
                                       ) from None
            raise
        step(f"{exp.name} analysed")
        if store:
            exp.commit(result.frames(), {"archetype_discovery": result.discovery,
                                         "machine": {**profile.as_dict(), "source": profile.source}},
                       what="it was analysed", read=trace.run_names, merge=merge, again="archetypes")
            # what the caller reads (the mix, the labels) is what was committed, scanned
            result = replace(result, **{n: scan_parts([exp.dir / f"{n}.parquet"]) for n in result.frames()})
        else:
            result = replace(result, **{n: f.lazy().collect() for n, f in result.frames().items()})
    step(f"{exp.name} stored")
    return Analysis(profile, trace, result)


def vanished(exc: Exception, folder: Path) -> bool:
    """Whether ``exc`` is a stored file below ``folder`` gone while it was read (Python's or a library's "os error
    2"; attack 9 C5: ``runs rm`` during ``archetypes`` printed Polars' raw message; attack 10 D5: during ``export``,
    Arrow's)."""
    import errno

    from synthtrace.warehouse.layout import os_error_within

    if isinstance(exc, FileNotFoundError):  # Polars' carries no errno
        return True
    os_error = os_error_within(exc, folder)
    return os_error is not None and os_error.errno == errno.ENOENT


def archetypes(wh: Warehouse, experiment: str, settings: NightSettings = NightSettings()) -> dict[str, float]:
    """The night's archetypes stage: analyse and store one experiment; returns archetype -> share of burst time."""
    import polars as pl

    from synthtrace.models.analysis import mix

    m = mix(analyse(wh.experiment(experiment), machine=settings.machine).result.archetypes)
    m = m.filter(pl.col("unit") == "burst")
    return dict(zip(m["archetype"].to_list(), m["time_share"].to_list()))


# ---------------------------------------------------------------------------------------------- regressions
@dataclass(frozen=True)
class Detection:
    """What one detection found: the alerts, the applications looked at and the nights of history of each (its
    longest series)."""

    alerts: pl.DataFrame
    apps: list[str]
    nights: dict[str, int]
    withdrawn: pl.DataFrame | None = None  # stored alerts tonight's longer history contradicts (issue 28)


#: the steps of :func:`detection`, as its ``on_step`` is told them
DETECTION_STEPS = ("loading the detector", "reading the nightly history", "detecting change points",
                   "writing the alerts")


def detection(wh: Warehouse, app: str | None = None, now: datetime | None = None,
              on_step: OnStep | None = None) -> Detection:
    """Detect regressions in the history of ``app`` (default: every app; a prefix names every app it starts, see
    :func:`synthtrace.warehouse.history.match_apps`) and rewrite their alerts in the ``regressions`` view.
    ``on_step`` is told each of :data:`DETECTION_STEPS` as it ends (the first, importing the models, takes seconds)."""
    import polars as pl

    from synthtrace.warehouse.alert_store import write_all_alerts
    from synthtrace.warehouse.history import app_nights, apps, match_apps, site_rank_table

    step = on_step or (lambda _: None)
    names = match_apps(wh, app) if app is not None else apps(wh)
    if not names:
        raise BadInputError(f"{wh.root}: no runs to look at (ingest traces first)")
    from synthtrace.models.regression import REGRESSION_SCHEMA, DetectorParams
    from synthtrace.models.regression import detect as detect_alerts
    from synthtrace.models.site_signals import site_signals

    step(DETECTION_STEPS[0])
    # attack 11 E7: an app with fewer nights than a detection needs is not read (its history table of every burst
    # took 2.6 GB to say so over one 2 GB run)
    p = DetectorParams()
    upper = app_nights(wh, names)
    deep = [a for a in names if upper[a] >= p.min_before + p.min_after]
    history = site_signals(site_rank_table(wh, deep)) if deep else pl.DataFrame()
    step(DETECTION_STEPS[1])
    alerts = detect_alerts(history, now=now) if history.height else pl.DataFrame(schema=REGRESSION_SCHEMA)
    # issue 28 (models helper): alerts keep their identity and change date night by night; contradicted ones go
    from synthtrace.models.regression import reconcile
    from synthtrace.warehouse.alert_store import read_alerts
    before = read_alerts(wh)
    kept = reconcile(before.filter(pl.col("app").is_in(names)) if "app" in before.columns else before, alerts)
    alerts = kept.alerts
    step(DETECTION_STEPS[2])
    write_all_alerts(wh, {name: alerts.filter(pl.col("app") == name) for name in names})  # [helper security] one swap
    step(DETECTION_STEPS[3])
    return Detection(alerts, names, {**upper, **_history_nights(history, deep)}, kept.withdrawn)


def _history_nights(history: pl.DataFrame, names: list[str]) -> dict[str, int]:
    """Nights (points) in the longest series of each app (0 without history)."""
    import polars as pl

    if history.height == 0:
        return dict.fromkeys(names, 0)
    n = (history.group_by("app", "config", "call_site").agg(pl.col("point").n_unique().alias("n"))
         .group_by("app").agg(pl.col("n").max()))
    return {a: dict(n.iter_rows()).get(a, 0) for a in names}


def detect(wh: Warehouse, settings: NightSettings = NightSettings()) -> list[dict[str, Any]]:
    """The night's detection stage: rewrite the regressions view; return the alerts that are new.

    New = not among the alerts stored before (same app, configuration, call site and change date). Each alert
    is a JSON-friendly dict (dates as ISO strings). Returns [] when nothing is ingested.
    """
    from synthtrace.warehouse.alert_store import read_alerts
    from synthtrace.warehouse.history import apps

    if not apps(wh):
        return []
    before = read_alerts(wh)
    seen = set(before.select("app", "config", "call_site", "changed_at").iter_rows()) if before.height else set()
    found = detection(wh)
    new = [r for r in found.alerts.iter_rows(named=True)
           if (r["app"], r["config"], r["call_site"], r["changed_at"]) not in seen]
    # issue 28 (models helper): the summary also says which stored alerts later nights withdrew
    gone = [{**r, "status": "withdrawn"} for r in found.withdrawn.iter_rows(named=True)] \
        if found.withdrawn is not None else []
    return [{k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in r.items()} for r in new + gone]


# ---------------------------------------------------------------------------------------------- models
def train(wh: Warehouse, target: str = "ipc", kind: str = "hgb", *, experiments: list[str] | None = None,
          seed: int = 0, n_splits: int = 5, evaluate: bool = True, now: datetime | None = None,
          on_step: OnStep | None = None) -> TrainedModel:
    """Train a ``kind`` predictor of ``target`` on the warehouse's bursts (of ``experiments``, default all) and
    register it as a new version (:func:`synthtrace.models.registry.train`). ``on_step`` is told each step done
    (reading, features, fit, every evaluation fold).

    Raises :class:`~synthtrace.models.features.UnknownTargetError`,
    :class:`~synthtrace.models.predictors.UnknownModelKindError`,
    :class:`~synthtrace.warehouse.errors.UnknownExperimentError` and
    :class:`~synthtrace.models.features.NoTrainingDataError`.
    """
    from synthtrace.models.registry import TrainedModel, check_request
    from synthtrace.models.registry import train as fit_model
    from synthtrace.models.features import feature_columns
    from synthtrace.models.training_data import TRAIN_BURSTS_PER_EXPERIMENT, load_bursts
    from synthtrace.warehouse.model_store import model_record, write_model

    check_request(target, kind, seed)
    frame, info = load_bursts(wh, experiments, TRAIN_BURSTS_PER_EXPERIMENT, columns=feature_columns(target))
    if on_step:
        on_step("bursts read")
    model, artifact = fit_model(frame, {**info, "warehouse": str(wh.root)}, target, kind, seed=seed,
                                n_splits=n_splits, evaluate=evaluate, now=now, on_step=on_step)
    write_model(wh, model.record, artifact)
    return TrainedModel(model.estimator, model_record(wh, model.model_id))


def predict(wh: Warehouse, experiment: str, model_id: str | None = None, *, target: str | None = None,
            store: bool = True, now: datetime | None = None) -> tuple[TrainedModel, pl.DataFrame]:
    """Apply a registered model (``model_id``, else the newest, of ``target`` if given) to one experiment's bursts
    and (``store``) write them to the predictions view; :class:`~synthtrace.warehouse.errors.RunsChangedError`,
    nothing written, when a run left or joined the experiment while it was predicted (``runs rm|move``)."""
    from synthtrace.models.features import prediction_columns
    from synthtrace.models.registry import load, window_predictions
    from synthtrace.models.training_data import prediction_input
    from synthtrace.warehouse.model_store import write_predictions
    from synthtrace.warehouse.runs import check_runs_still_in, run_folders

    model = load(wh, model_id, target)
    folders = run_folders(wh)  # before the runs are read: a run written since is one that may have joined
    bursts = prediction_input(wh, experiment, columns=prediction_columns(model.features))
    had = bursts.run_ids
    out = window_predictions(model, bursts.windows, experiment, now=now, unread=bursts.unread)
    if store:  # attack 20 F7: a run removed or moved meanwhile (its rows, or a merge of it) is never committed
        write_predictions(wh, model.model_id, experiment, out, check=lambda: check_runs_still_in(
            wh, experiment, had, "it was predicted", had=had, folders=folders))
    return model, out


def retrain(wh: Warehouse, settings: NightSettings = NightSettings(), target: str = "ipc", kind: str = "hgb",
            seed: int = 0) -> dict[str, Any] | None:
    """The night's retraining stage: train a new ``target`` model when experiments appeared since the newest.

    Returns a summary (model_id, target, kind, n_rows, cv_r2, cv_mape, new experiments) or None when no
    retraining was due or there is nothing to learn from.
    """
    import polars as pl

    from synthtrace.models.features import NoTrainingDataError
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
        m = train(wh, target, kind, seed=seed)
    except NoTrainingDataError:
        return None
    r = m.record
    return {"model_id": r["model_id"], "target": target, "kind": kind, "n_rows": r["n_rows"], "cv_r2": r["cv_r2"],
            "cv_mape": r["cv_mape"], "new_experiments": fresh}


# ---------------------------------------------------------------------------------------------- report
def report(wh: Warehouse, settings: NightSettings = NightSettings(), out: str | Path | None = None, *,
           experiment: str | None = None, thresholds: Thresholds | None = None, plot_dir: Path | None = None,
           on_step: OnStep | None = None) -> str:
    """The HTML report of the warehouse (default ``WAREHOUSE/report.html``; the night's report stage); returns its
    path. ``settings.machine`` (``--machine``) overrides each experiment's own profile (its ``machine.toml``)."""
    from synthtrace.pipelines.report import build_report

    out = Path(out) if out else wh.root / "report.html"
    return str(build_report(wh, out, experiment=experiment, machine=settings.machine, thresholds=thresholds,
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
        source = utf8_path(run["source_path"] or "")
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
    from synthtrace.warehouse.analysis_store import read_analysis

    exp = wh.experiment(experiment).require_runs()
    runs = exp.runs
    labels = runs.select("run_id", "run_name", "app", "experiment")
    what = "its POP table was computed"
    if (stored := read_analysis(wh, experiment, "pop_metrics")) is not None:
        if set(stored["run_id"].to_list()) == set(runs["run_id"].to_list()):
            fresh = stored.drop("run_name", "app", "experiment").join(labels, on="run_id").select(
                list(POP_METRICS_SCHEMA))
            if not fresh.equals(stored.select(list(POP_METRICS_SCHEMA))):
                exp.commit({"pop_metrics": fresh}, what=what)
            return fresh, []
    threads, rows, notes = [], [], []
    for run in runs.iter_rows(named=True):
        res, why = _run_pop(wh, run)
        threads.append(res.threads)
        rows.append({"run_id": run["run_id"], "runtime_ns": res.runtime_ns(run["duration_ns"]),
                     "ideal_runtime_ns": res.ideal_runtime_ns})
        notes += why
    per_run = labels.join(pl.DataFrame(rows, schema={"run_id": pl.String, "runtime_ns": pl.Int64,
                                                     "ideal_runtime_ns": pl.Int64}), on="run_id")
    table = pop_metrics(pl.concat(threads, how="vertical_relaxed"), per_run)
    exp.commit({"pop_metrics": table}, what=what)
    return table, notes


def pop_tables(wh: Warehouse, names: list[str] | None = None, *, scaling: str = "strong",
               network: Any = None) -> PopTables:
    """The POP tables of the applications or experiments ``names`` (default: all), computing what is missing;
    the warehouse's scaling table is rewritten for every application. ``network`` (a
    :class:`~synthtrace.tracelib.domain.replay.Network`) also predicts each run's runtime on it."""
    import polars as pl

    from synthtrace.tracelib.domain.pop import pop_scaling
    from synthtrace.warehouse.names import one_spelling
    from synthtrace.warehouse.pop_store import read_pop_metrics, write_pop_scaling
    from synthtrace.warehouse.runs import runs_table

    runs = runs_table(wh)
    if runs.height == 0:
        raise BadInputError(f"{wh.root}: no runs (ingest traces first)")
    if names:  # stored and typed names compared in one spelling (NFC: a Mac's names are NFD)
        typed = [one_spelling(n) for n in names]
        app, experiment = (pl.col(c).str.normalize("NFC") for c in ("app", "experiment"))
        known = {n for col in runs.select(app, experiment).iter_columns() for n in col.unique().to_list()}
        unknown = [n for n, t in zip(names, typed) if t not in known]
        if unknown:
            raise BadInputError(f"{', '.join(map(repr, unknown))}: neither an application nor an experiment in "
                                f"{wh.root} (applications: {', '.join(sorted(set(runs['app'].to_list())))})")
        runs = runs.filter(app.is_in(typed) | experiment.is_in(typed))
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


def pop(wh: Warehouse, experiment: str, settings: NightSettings = NightSettings()) -> dict[str, Any] | None:
    """The night's POP stage: the POP table of each run of ``experiment``, then the scaling table of every
    application. Returns a summary (runs, parallel efficiency per run name) or None when it has no runs."""
    tables = pop_tables(wh, [experiment])
    if tables.metrics.height == 0:
        return None
    return {"experiment": experiment, "runs": tables.metrics.height,
            "parallel_efficiency": dict(zip(tables.metrics["run_name"].to_list(),
                                            tables.metrics["parallel_efficiency"].to_list())),
            "notes": tables.notes}


# ---------------------------------------------------------------------------------------------- working sets
# What each job of a night adds to its process's memory (MB), for the night's budget
# (:mod:`~synthtrace.pipelines.memory_budget`); measured with benchmarks/bench_night_memory.py (benchmarks/RESULTS.md,
# "session 27, nightmem27"): peak RSS of the job's stage less the night's base.
#: an ingest's working set per MB of trace on disk, its floor, and its ceiling: the readers stream a trace part by
#: part, so a large trace's ingest levels off (a 1 GB and a 2 GB LULESH ~650 MB alike, issue 23 A21)
#: The floor: 40 small-to-mid traces ingested side by side (a 40-core node's night) took ~30 MB more each than
#: 40 MB, the process's heap growing with them (attack27 A6: 1,948 MB at 40 MB, 1,512 MB at 40 MB with the base at
#: 550 MB, 70 MB: see RESULTS.md "session 27, lead")
INGEST_MB_PER_MB = 3.0
INGEST_FLOOR_MB = 70
INGEST_CEILING_MB = 700
#: how many times larger a gzip-compressed trace is once read (Paraver text compresses 5-10 times)
GZIP_RATIO = 6
#: an experiment stage's floor (MB), and its working set per stored burst of the experiment's runs (bytes). The
#: floor: two merges of small experiments at once took ~170 MB each over the night's base (attack26 N1); a merge
#: ~1,700 B a burst (review27 R1: 3 halo runs of 239,944 bursts merged at 663 MB, ~260 MB of it imports and plan),
#: archetypes ~850 B (454 MB on the same experiment)
STAGE_FLOOR_MB = 170
MERGE_BYTES = 1700.0
ARCHETYPES_BYTES = 1000.0
POP_BYTES = 500.0


def ingest_working_mb(path: Path) -> int:
    """The estimated working set of ingesting the trace at ``path`` (MB), from its bytes on disk (a gzip-compressed
    one counted as :data:`GZIP_RATIO` times them); the floor for a trace gone or unreadable."""
    from synthtrace.tracelib.formats.gzip_name import gzip_named
    from synthtrace.tracelib.formats.source import trace_bytes

    try:
        on_disk_mb = trace_bytes(path) / 2**20 * (GZIP_RATIO if gzip_named(path) else 1)
    except OSError:  # gone or unreadable meanwhile: its ingest says so
        on_disk_mb = 0.0
    return int(min(INGEST_CEILING_MB, INGEST_FLOOR_MB + INGEST_MB_PER_MB * on_disk_mb))


def stage_working_mb(wh: Warehouse, job: Job, experiment: str) -> int:
    """The estimated working set of ``job`` on ``experiment`` (MB), from the bursts stored in its runs (their
    ``n_bursts``, read from the runs table, no run's data); the floor for an experiment with no run."""
    runs = wh.experiment(experiment).runs
    bursts = int(runs.get_column("n_bursts").sum() or 0) if runs.height else 0
    return int(STAGE_FLOOR_MB + job.bytes_per_burst * bursts / 2**20)


# ---------------------------------------------------------------------------------------------- the night's jobs
@dataclass(frozen=True)
class Job:
    """One stage of the night, described once.

    ``run`` is ``run(wh, experiment, settings)`` for scope ``experiment`` (run for each experiment whose runs
    changed since the stage last completed on it, or that a stage before it redid tonight), ``run(wh, settings)``
    for scope ``warehouse`` (run when any experiment's runs or completed stages changed). ``invalidates``: the
    stages whose results are stale once this one is redone (run again on that experiment tonight). ``summary``:
    the field of the night's summary its results go to (experiment scope: experiment -> result)."""

    name: str
    scope: Literal["experiment", "warehouse"]
    run: Callable[..., Any]
    invalidates: tuple[str, ...] = ()
    summary: str | None = None
    #: its working set per burst stored in the experiment's runs (bytes; scope ``experiment``), for the night's
    #: memory budget (:func:`stage_working_mb`)
    bytes_per_burst: float = 0.0


#: the night's stages, in order
JOBS: tuple[Job, ...] = (
    Job("merge", "experiment", merge, invalidates=MERGE_INVALIDATES, summary="merged", bytes_per_burst=MERGE_BYTES),
    Job("archetypes", "experiment", archetypes, summary="archetypes", bytes_per_burst=ARCHETYPES_BYTES),
    Job("pop", "experiment", pop, bytes_per_burst=POP_BYTES),
    Job("detect", "warehouse", detect, summary="alerts"),
    Job("retrain", "warehouse", retrain),
    Job("report", "warehouse", report, summary="report"),
)
STAGES: tuple[str, ...] = tuple(j.name for j in JOBS)


def job(name: str) -> Job:
    """The job called ``name`` (a KeyError names an unknown one)."""
    return {j.name: j for j in JOBS}[name]
