"""The model registry: train, record, load safely, and apply burst performance predictors (DESIGN §8).

Every trained version is kept, with a ``status``: a model not clearly better than the training mean on unseen programs
(R² < 0.3, or MAPE not 20 % below the mean predictor's, :func:`model_status`) is ``rejected`` and only used when asked
for by id (``models`` view; storage in :mod:`synthtrace.warehouse.model_store`) with what it saw (experiments,
applications, run ids, row count and a SHA-256 of its feature matrix and target), its features, its cross-validated and
in-sample metrics, its parameters and the versions of the libraries that built it.

Loading is safe by construction: the artifact's SHA-256 must match the record, and the skops file may only hold
types from :data:`TRUSTED_TYPES` (beyond skops' own defaults) — nothing is unpickled.

Reproducibility: the same seed and the same data give the same model. skops archives name their members after
object ids, so the artifact bytes differ between two saves of the same model; the record therefore also keeps a
``fingerprint``: the SHA-256 of the model's predictions on its own training matrix, identical for identical models.
"""
from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version

import numpy as np
import polars as pl
import skops.io as sio
from threadpoolctl import threadpool_limits

from synthtrace.tracelib.errors import BadInputError
from synthtrace.models.features import (MIN_INSTRUCTIONS, FeatureTable, NoTrainingDataError, build_features,
                                        check_target)
from synthtrace.models.predictors import cross_validate, drop_uninformative, fit, scores
from synthtrace.warehouse.layout import Warehouse
from synthtrace.warehouse.model_store import ArtifactIntegrityError, model_record, read_artifact


class NothingToPredictFromError(BadInputError):
    """No burst has any of the measured features a model reads (its counters were not recorded)."""


#: the only types beyond skops' defaults that a model artifact may contain (what hgb, rf and linear need)
TRUSTED_TYPES: tuple[str, ...] = (
    "synthtrace.models.predictors.bounded_exp",  # the inverse of every model's log-target (our own function)
    "synthtrace.models.predictors.BoostingPredictor",  # our estimator classes (their inner models are sklearn's)
    "synthtrace.models.predictors.ForestPredictor",
    "synthtrace.models.predictors.RidgePredictor",
    "numpy.clip",  # the linear baseline bounds its standardised features
    "numpy.dtype",
    "sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",
    "sklearn.tree._tree.Tree",
)
LIBRARIES: tuple[str, ...] = ("scikit-learn", "numpy", "scipy", "skops", "polars", "synthtrace")


@dataclass
class TrainedModel:
    """A fitted estimator with its registry record."""

    estimator: object
    record: dict

    @property
    def model_id(self) -> str:
        return self.record["model_id"]

    @property
    def features(self) -> list[str]:
        return list(self.record["features"])


def library_versions() -> dict[str, str]:
    out = {}
    for lib in LIBRARIES:
        try:
            out[lib] = version(lib)
        except PackageNotFoundError:
            out[lib] = "unknown"
    return out


def data_hash(table: FeatureTable) -> str:
    """SHA-256 of the feature names, feature matrix and target (row order as given)."""
    h = hashlib.sha256()
    h.update(json.dumps([table.target, table.features]).encode())
    h.update(np.ascontiguousarray(table.X, dtype=np.float64).tobytes())
    h.update(np.ascontiguousarray(table.y, dtype=np.float64).tobytes())
    return h.hexdigest()


def fingerprint(estimator, X: np.ndarray) -> str:
    """SHA-256 of the model's predictions on ``X`` (identical models give identical fingerprints)."""
    with threadpool_limits(1):
        return hashlib.sha256(np.ascontiguousarray(estimator.predict(X), dtype=np.float64).tobytes()).hexdigest()


#: a model must explain this share of the variance on unseen programs ...
MIN_UNSEEN_R2 = 0.3
#: ... and cut the training mean's MAPE on them by this fraction, else it is ``rejected``
MIN_MAPE_CUT = 0.2


def model_status(cv_r2: float | None, cv_mape: float | None = None, mean_mape: float | None = None) -> str:
    """``rejected`` when the model is not clearly better than predicting the training mean on unseen programs:
    R² below :data:`MIN_UNSEEN_R2`, or a MAPE not :data:`MIN_MAPE_CUT` below the mean predictor's under the same
    folds; ``unevaluated`` without such an evaluation, else ``ok`` (see
    :data:`synthtrace.warehouse.model_store.STATUSES`)."""
    if cv_r2 is None or not np.isfinite(cv_r2):
        return "unevaluated"
    if cv_r2 < MIN_UNSEEN_R2:
        return "rejected"
    if cv_mape is not None and mean_mape is not None and np.isfinite(cv_mape) and np.isfinite(mean_mape) \
            and cv_mape > (1.0 - MIN_MAPE_CUT) * mean_mape:
        return "rejected"
    return "ok"


def rejection_reason(record: dict) -> str:
    """Why :func:`model_status` rejected a registered model (its record), in words, with its figures on unseen
    programs; empty for a model that is not rejected."""
    if record.get("status") != "rejected":
        return ""
    r2 = record.get("cv_r2")
    if r2 is not None and np.isfinite(r2) and r2 < MIN_UNSEEN_R2:
        return f"R² {r2:.3f} on unseen programs, below {MIN_UNSEEN_R2}"
    mean = json.loads(record.get("metrics") or "{}").get("cv", {}).get("mean_mape")
    mape = record.get("cv_mape")
    against = f" (the training mean's: {mean:.1%})" if mean is not None else ""
    return (f"MAPE {mape:.1%} on unseen programs{against}, not {MIN_MAPE_CUT:.0%} below the training mean's"
            if mape is not None else "not better than the training mean on unseen programs")


def _sorted_rows(frame: pl.DataFrame) -> pl.DataFrame:
    keys = [c for c in ("experiment", "run_id", "appl", "task", "thread", "burst_seq") if c in frame.columns]
    return frame.sort(keys) if keys else frame


def check_request(target: str, kind: str, seed: int = 0) -> None:
    """Raise :class:`~synthtrace.models.features.UnknownTargetError` or
    :class:`~synthtrace.models.predictors.UnknownModelKindError` before any data is read."""
    check_target(target)
    from synthtrace.models.predictors import make_estimator
    make_estimator(kind, seed)


def train(frame: pl.DataFrame, info: dict, target: str = "ipc", kind: str = "hgb", *, seed: int = 0,
          n_splits: int = 5, evaluate: bool = True, now: datetime | None = None,
          on_step: Callable[[str], None] | None = None) -> tuple[TrainedModel, bytes]:
    """Train a ``kind`` predictor of ``target`` on the bursts of ``frame`` (with ``info``, what
    :func:`~synthtrace.models.training_data.load_bursts` says they came from): the fitted model with its registry
    record, and its skops artifact (:func:`synthtrace.pipelines.jobs.train` reads and commits).

    ``on_step`` is told each step done (features, fit, every evaluation fold): a progress bar.
    Raises :class:`~synthtrace.models.features.NoTrainingDataError`.
    """
    check_request(target, kind, seed)
    step = on_step or (lambda _: None)
    if frame.height == 0:
        raise NoTrainingDataError(f"no bursts to learn from in {info.get('warehouse', 'the warehouse')}"
                                  + (f" (experiments {', '.join(info['experiments'])})" if info["experiments"] else
                                     " (ingest and merge traces first)"))
    frame = _sorted_rows(frame)
    table = drop_uninformative(build_features(frame, target).trainable())
    step("features")
    if table.X.shape[0] == 0:
        raise NoTrainingDataError(f"no burst of {', '.join(info['experiments'])} has what target {target!r} needs "
                                  f"({'instructions and cycles' if target == 'ipc' else 'instructions and time'}, "
                                  ">= 1e4 instructions)")
    with threadpool_limits(1):
        est = fit(table, kind, seed)
        step("fitted")
        pred = est.predict(table.X)
        cv = None
        if evaluate and len(set(table.groups.tolist())) >= 2:
            cv = cross_validate(table, kind, seed, n_splits, on_fold=step)
    insample = scores(table.y, pred)
    metrics = {"train": insample}
    if cv is not None:
        metrics["cv"] = cv.scores
        metrics["cv_per_app"] = cv.per_group().to_dicts()
    else:
        metrics["cv"] = {"skipped": "evaluation on unseen workloads needs two programs or more"}
    created = now or datetime.now(UTC)
    model_id = f"{target}-{kind}-{created:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
    artifact = sio.dumps(est)
    record = {
        "model_id": model_id, "target": target, "kind": kind, "seed": seed, "created_at": created,
        "experiments": info["experiments"], "apps": sorted(set(table.groups.tolist())), "run_ids": info["run_ids"],
        "n_rows": int(table.X.shape[0]), "data_hash": data_hash(table), "features": table.features,
        "counters": sorted({*table.counters, *info.get("unread", ())}),  # what the bursts recorded, read or not
        "cv_r2": cv.scores["r2"] if cv else None, "cv_mape": cv.scores["mape"] if cv else None,
        "cv_folds": cv.n_splits if cv else None, "train_r2": insample["r2"], "train_mape": insample["mape"],
        "metrics": json.dumps(metrics, default=float), "params": json.dumps(est.get_params(deep=True), default=repr),
        "library_versions": json.dumps(library_versions()), "fingerprint": fingerprint(est, table.X),
        "status": model_status(*((cv.scores["r2"], cv.scores["mape"], cv.scores.get("mean_mape")) if cv else (None,))),
    }
    return TrainedModel(est, record), artifact


def load(wh: Warehouse, model_id: str | None = None, target: str | None = None) -> TrainedModel:
    """A registered model (``model_id``, else the newest, of ``target`` if given), loaded safely.

    Raises :class:`~synthtrace.warehouse.model_store.UnknownModelError` and
    :class:`~synthtrace.warehouse.model_store.ArtifactIntegrityError` (hash mismatch, or a type outside the trusted
    list).
    """
    record = model_record(wh, model_id, target)
    data = read_artifact(wh, record)
    try:
        untrusted = sio.get_untrusted_types(data=data)
    except Exception as exc:
        raise ArtifactIntegrityError(f"model {record['model_id']}: artifact is not a skops file ({exc})") from None
    extra = sorted(set(untrusted) - set(TRUSTED_TYPES))
    if extra:
        raise ArtifactIntegrityError(f"model {record['model_id']}: artifact holds untrusted types "
                                     f"{', '.join(extra)}; refusing to load it")
    try:  # security (issue 23 item 13): a tampered archive (an object-dtype .npy, a cut member) is an integrity error
        estimator = sio.loads(data, trusted=list(untrusted))
    except Exception as exc:
        raise ArtifactIntegrityError(f"model {record['model_id']}: artifact cannot be loaded ({exc}); it was altered "
                                     "or written by another skops") from None
    return TrainedModel(estimator, record)


def measured_features(features: list[str]) -> list[str]:
    """The features of ``features`` made from hardware counters (not the MPI call family, not the archetype drawn
    from the same counters)."""
    return [f for f in features if not f.startswith(("mpi_", "arch_"))]


def predict_frame(model: TrainedModel, frame: pl.DataFrame, *, some_measured: bool = True,
                  unread: list[str] = ()) -> pl.DataFrame:
    """Predictions of ``model`` for every burst of a bursts-like frame: keys, predicted, actual (NULL if unknown).

    A burst with none of the model's measured features (:func:`measured_features`: the counters were not recorded)
    is predicted NULL, not from the model's default branches; when no burst has any,
    :class:`NothingToPredictFromError` (attack 7 A12: a model of PAPI_TOT_INS rates stored 42 'predictions' for an
    experiment that recorded no instructions; ``some_measured=False``: a window of a larger frame, whose bursts may
    all be NULL; ``unread``: counters the bursts recorded that were not read, named in that error too)."""
    table = build_features(frame, model.record["target"])
    X = table.select(model.features)
    measured = [i for i, f in enumerate(model.features) if f in measured_features(model.features)]
    supported = np.isfinite(X[:, measured]).any(axis=1) if measured else np.ones(X.shape[0], bool)
    if some_measured and X.shape[0] and not supported.any():
        raise NothingToPredictFromError(
            f"model {model.model_id} reads {', '.join(measured_features(model.features))}; no burst has any of "
            f"them (their counters: {', '.join(model.record.get('counters') or []) or 'none recorded'}; the bursts "
            f"have {', '.join(sorted({*table.counters, *unread})) or 'no counter'})")
    with threadpool_limits(1):
        pred = model.estimator.predict(X) if X.shape[0] else np.empty(0)
    keys = table.keys
    out = keys.with_columns(pl.Series("predicted", np.where(supported, pred, np.nan), dtype=pl.Float64).fill_nan(None),
                            pl.Series("actual", table.y, dtype=pl.Float64).fill_nan(None),
                            pl.Series("learnable", table.trainable_mask(), dtype=pl.Boolean))
    return out


@dataclass(frozen=True)
class PredictionError:
    """How far a model's predictions are from the measured target on the bursts of the kind it learned from
    (:meth:`~synthtrace.models.features.FeatureTable.trainable_mask`: at least ``min_instructions`` instructions):
    ``scores`` (:func:`~synthtrace.models.predictors.scores`: n, r2, mape; None when fewer than two such bursts were
    predicted) and ``n_shorter``: the measured bursts left out for being shorter."""

    scores: dict | None
    n_shorter: int
    min_instructions: float = MIN_INSTRUCTIONS


def prediction_error(out: pl.DataFrame) -> PredictionError:
    """The :class:`PredictionError` of :func:`predictions`' rows (attack 12: scoring every burst gave R² -1.12 on
    LULESH for a model of training R² 0.998, the short bursts it never learned from being noise)."""
    measured = out.filter(pl.col("actual").is_not_null() & pl.col("predicted").is_not_null())
    known = measured.filter(pl.col("learnable"))
    s = scores(known["actual"].to_numpy(), known["predicted"].to_numpy()) if known.height >= 2 else None
    return PredictionError(s, measured.height - known.height)


def predictions(model: TrainedModel, frame: pl.DataFrame, experiment: str, *,
                now: datetime | None = None, some_measured: bool = True) -> pl.DataFrame:
    """The rows of the predictions view for one experiment's bursts: :func:`predict_frame` with the model, target,
    experiment, time of prediction and the burst keys (NULL where the bursts lack them)."""
    out = predict_frame(model, _sorted_rows(frame), some_measured=some_measured)
    out = out.with_columns(
        pl.lit(model.model_id).alias("model_id"),
        pl.lit(model.record["target"]).alias("target"),
        pl.lit(experiment).alias("experiment"),
        pl.lit(now or datetime.now(UTC)).alias("predicted_at"),
    )
    for c, t in (("run_id", pl.String), ("appl", pl.Int32), ("task", pl.Int32), ("thread", pl.Int32),
                 ("burst_seq", pl.Int64)):
        if c not in out.columns:
            out = out.with_columns(pl.lit(None, t).alias(c))
    return out


def window_predictions(model: TrainedModel, windows: Iterable[pl.DataFrame], experiment: str, *,
                       now: datetime | None = None, unread: list[str] = ()) -> pl.DataFrame:
    """:func:`predictions` of an experiment read a window of bursts at a time (each window's features and rows
    only; attack 12 F7: ``predict`` over the 4.7 M bursts of a 2 GB run aborted under a 4 GB limit): the same rows,
    and the same refusal when no burst of any window has the model's measured features (``unread``: the counters
    recorded that were not read, :func:`predict_frame`)."""
    now = now or datetime.now(UTC)
    parts, first = [], None
    for window in windows:
        if window.height:
            first = window if first is None else first
            parts.append(predictions(model, window, experiment, now=now, some_measured=False))
    if not parts:
        raise NoTrainingDataError(f"experiment {experiment!r} has no bursts to predict")
    out = _sorted_rows(pl.concat(parts))
    if out.get_column("predicted").null_count() == out.height:
        predict_frame(model, first, unread=unread)  # no window had a measured feature: NothingToPredictFromError
    return out
