"""Burst performance predictors: estimators, training, evaluation on unseen workloads (DESIGN §8).

Three estimator kinds, all scikit-learn, all deterministic for a given seed:

- ``hgb`` (default): :class:`~sklearn.ensemble.HistGradientBoostingRegressor` (NaN handled natively);
- ``rf``: :class:`~sklearn.ensemble.RandomForestRegressor` (single-threaded so the seed fixes the result);
- ``linear``: the baseline, ridge regression on standardised arcsinh-compressed features with median imputation +
  missing flags.

Each kind is an estimator class (:data:`ESTIMATORS`) with its hyperparameters in its constructor. Every one
learns the logarithm of the target (targets are positive ratios spanning decades; errors are judged relatively)
through :class:`~sklearn.compose.TransformedTargetRegressor`.

Evaluation keeps workloads out of training: :class:`~sklearn.model_selection.GroupKFold` with the program as group (runs
of one binary at every scale are one group, :mod:`synthtrace.warehouse.programs`), so each fold predicts programs the
model never saw; beside it, the training mean as a predictor under the same folds. Scores: R² and MAPE (mean absolute
percentage error, as a fraction). :func:`compare_counter_sets` puts the merged counter set beside every single-run
counter set and the best single set in one table.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl
from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.compose import TransformedTargetRegressor
from sklearn.ensemble import HistGradientBoostingRegressor, RandomForestRegressor
from sklearn.impute import SimpleImputer
from sklearn.linear_model import Ridge
from sklearn.metrics import mean_absolute_percentage_error, r2_score
from sklearn.model_selection import GroupKFold
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer, StandardScaler
from sklearn.utils.validation import check_is_fitted

from synthtrace.models.features import MIN_INSTRUCTIONS, FeatureTable, NoTrainingDataError, build_features
from synthtrace.tracelib.errors import BadInputError

MODEL_KINDS: dict[str, str] = {
    "hgb": "histogram gradient boosting (scikit-learn HistGradientBoostingRegressor)",
    "rf": "random forest (scikit-learn RandomForestRegressor)",
    "linear": "ridge regression on standardised features (baseline)",
}


class UnknownModelKindError(BadInputError):
    """A model kind that is not one of :data:`MODEL_KINDS`."""


#: predictions of log(target) are bounded to this many e-folds around 0 before exponentiation (IPC and ns per
#: instruction stay within e^-12..e^12); only the linear baseline can reach it, on workloads far from training
LOG_BOUND = 12.0


def bounded_exp(z: np.ndarray) -> np.ndarray:
    """exp of a log-target prediction, bounded (see :data:`LOG_BOUND`)."""
    return np.exp(np.clip(z, -LOG_BOUND, LOG_BOUND))


class LogTargetRegressor(RegressorMixin, BaseEstimator):
    """A regressor that learns log(target) (see the module docstring); subclasses name the inner estimator and
    hold its hyperparameters in their constructor. Fitted: ``model_`` (a
    :class:`~sklearn.compose.TransformedTargetRegressor`)."""

    def _regressor(self) -> RegressorMixin:
        raise NotImplementedError

    def fit(self, X: np.ndarray, y: np.ndarray) -> LogTargetRegressor:
        """Fit on features ``X`` (NaN = not measured) and a positive target ``y``."""
        self.model_ = TransformedTargetRegressor(regressor=self._regressor(), func=np.log, inverse_func=bounded_exp,
                                                 check_inverse=False).fit(X, y)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        check_is_fitted(self)
        return self.model_.predict(X)


class BoostingPredictor(LogTargetRegressor):
    """``hgb``: histogram gradient boosting (NaN handled natively); no early stopping, so the seed fixes the model."""

    def __init__(self, max_iter: int = 300, learning_rate: float = 0.08, max_leaf_nodes: int = 31,
                 min_samples_leaf: int = 20, l2_regularization: float = 1e-3, random_state: int = 0):
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.max_leaf_nodes = max_leaf_nodes
        self.min_samples_leaf = min_samples_leaf
        self.l2_regularization = l2_regularization
        self.random_state = random_state

    def _regressor(self) -> RegressorMixin:
        return HistGradientBoostingRegressor(max_iter=self.max_iter, learning_rate=self.learning_rate,
                                             max_leaf_nodes=self.max_leaf_nodes, min_samples_leaf=self.min_samples_leaf,
                                             l2_regularization=self.l2_regularization, early_stopping=False,
                                             random_state=self.random_state)


class ForestPredictor(LogTargetRegressor):
    """``rf``: random forest, single-threaded so the seed fixes the result."""

    def __init__(self, n_estimators: int = 150, min_samples_leaf: int = 3, max_features: float = 0.6,
                 random_state: int = 0):
        self.n_estimators = n_estimators
        self.min_samples_leaf = min_samples_leaf
        self.max_features = max_features
        self.random_state = random_state

    def _regressor(self) -> RegressorMixin:
        return RandomForestRegressor(n_estimators=self.n_estimators, min_samples_leaf=self.min_samples_leaf,
                                     max_features=self.max_features, n_jobs=1, random_state=self.random_state)


class RidgePredictor(LogTargetRegressor):
    """``linear``: the baseline, ridge on median-imputed (+ missing flags), arcsinh-compressed, standardised
    features bounded to ±``feature_bound`` standard deviations. ``random_state`` is accepted (and unused) so
    every kind is built alike."""

    def __init__(self, alpha: float = 10.0, feature_bound: float = 5.0, random_state: int = 0):
        self.alpha = alpha
        self.feature_bound = feature_bound
        self.random_state = random_state

    def _regressor(self) -> RegressorMixin:
        # rates span decades: compress them (sign-preserving log1p) so a linear model neither ignores small rates
        # nor extrapolates wildly on an unseen workload's large ones
        return Pipeline([("impute", SimpleImputer(strategy="median", add_indicator=True, keep_empty_features=True)),
                         ("compress", FunctionTransformer(np.arcsinh)),
                         ("scale", StandardScaler()),
                         # a feature nearly constant in training can be far off on an unseen workload: bound it
                         ("bound", FunctionTransformer(np.clip, kw_args={"a_min": -self.feature_bound,
                                                                         "a_max": self.feature_bound})),
                         ("ridge", Ridge(alpha=self.alpha))])


#: estimator class of each model kind (hyperparameters: the class's constructor defaults)
ESTIMATORS: dict[str, type[LogTargetRegressor]] = {"hgb": BoostingPredictor, "rf": ForestPredictor,
                                                   "linear": RidgePredictor}


def make_estimator(kind: str = "hgb", seed: int = 0) -> LogTargetRegressor:
    """An unfitted estimator of ``kind`` seeded with ``seed``; raises :class:`UnknownModelKindError`."""
    if kind not in ESTIMATORS:
        raise UnknownModelKindError(f"unknown model kind {kind!r} (known: {', '.join(MODEL_KINDS)})")
    return ESTIMATORS[kind](random_state=seed)


def scores(y_true: np.ndarray, y_pred: np.ndarray) -> dict[str, float]:
    """R² and MAPE (fraction) of predictions; NaN when there are fewer than two rows."""
    if y_true.size < 2:
        return {"r2": float("nan"), "mape": float("nan"), "n": int(y_true.size)}
    return {"r2": float(r2_score(y_true, y_pred)), "mape": float(mean_absolute_percentage_error(y_true, y_pred)),
            "n": int(y_true.size)}


@dataclass
class CrossValidation:
    """Out-of-fold predictions and scores of grouped cross-validation."""

    y_true: np.ndarray
    y_pred: np.ndarray
    groups: np.ndarray
    n_splits: int
    y_mean: np.ndarray | None = None  # the baseline: each fold's training mean of the target

    @property
    def scores(self) -> dict[str, float]:
        """R², MAPE and n out of fold, and the same of the training-mean baseline (``mean_r2``, ``mean_mape``)."""
        ok = np.isfinite(self.y_pred)
        out = {**scores(self.y_true[ok], self.y_pred[ok]), "folds": self.n_splits}
        if self.y_mean is not None:
            base = scores(self.y_true[ok], self.y_mean[ok])
            out.update(mean_r2=base["r2"], mean_mape=base["mape"])
        return out

    def per_group(self) -> pl.DataFrame:
        """Scores per held-out application."""
        rows = []
        for g in sorted(set(self.groups.tolist())):
            m = (self.groups == g) & np.isfinite(self.y_pred)
            rows.append({"group": str(g), **scores(self.y_true[m], self.y_pred[m])})
        return pl.DataFrame(rows)


def informative(X: np.ndarray) -> np.ndarray:
    """Columns with at least two distinct finite values (the others carry nothing, and trip binning)."""
    if X.shape[0] == 0:
        return np.zeros(X.shape[1], dtype=bool)
    lo = np.nanmin(np.where(np.isfinite(X), X, np.nan), axis=0, initial=np.inf, where=np.isfinite(X))
    hi = np.nanmax(np.where(np.isfinite(X), X, np.nan), axis=0, initial=-np.inf, where=np.isfinite(X))
    return np.isfinite(lo) & np.isfinite(hi) & (hi > lo)


def drop_uninformative(table: FeatureTable) -> FeatureTable:
    """``table`` without the columns :func:`informative` rejects."""
    keep = informative(table.X)
    return FeatureTable(table.target, [f for f, k in zip(table.features, keep) if k], table.X[:, keep], table.y,
                        table.keys, table.groups, table.counters)


def cross_validate(table: FeatureTable, kind: str = "hgb", seed: int = 0, n_splits: int = 5,
                   features: list[str] | None = None, on_fold: Callable[[str], None] | None = None) -> CrossValidation:
    """Grouped K-fold (group = application): every row is predicted by a model that never saw its application.

    Needs at least two applications; raises :class:`NoTrainingDataError` otherwise.
    """
    groups = table.groups
    n_groups = len(set(groups.tolist()))
    if n_groups < 2:
        raise NoTrainingDataError(f"evaluation on unseen workloads needs at least two applications, got {n_groups}")
    k = min(n_splits, n_groups)
    X = table.select(features) if features is not None else table.X
    pred = np.full(table.y.shape, np.nan)
    mean = np.full(table.y.shape, np.nan)
    est = make_estimator(kind, seed)
    for i, (train, test) in enumerate(GroupKFold(n_splits=k).split(X, table.y, groups), start=1):
        cols = informative(X[train])
        m = clone(est).fit(X[train][:, cols], table.y[train])
        pred[test] = m.predict(X[test][:, cols])
        mean[test] = float(np.mean(table.y[train]))
        if on_fold is not None:
            on_fold(f"fold {i}/{k}")
    return CrossValidation(table.y, pred, groups, k, mean)


def fit(table: FeatureTable, kind: str = "hgb", seed: int = 0) -> RegressorMixin:
    """An estimator of ``kind`` fitted on every row of ``table`` (filtered with ``trainable`` and
    :func:`drop_uninformative`)."""
    if table.X.shape[0] < 10 or table.X.shape[1] == 0:
        raise NoTrainingDataError(f"too little to train a {table.target} predictor: {table.X.shape[0]} bursts, "
                                  f"{table.X.shape[1]} usable features")
    return make_estimator(kind, seed).fit(table.X, table.y)


def _set_features(frame: pl.DataFrame, target: str, counters: list[str] | dict[str, list[str]]) -> FeatureTable:
    """Features of ``frame`` limited to a counter set: one list, or one list per experiment (``experiment`` column)."""
    if not isinstance(counters, dict):
        return build_features(frame, target, counters=counters)
    idx = frame.with_row_index("_row")
    parts = [(g["_row"].to_numpy(), build_features(g.drop("_row"), target, counters=counters.get(str(exp[0]), [])))
             for exp, g in idx.group_by("experiment", maintain_order=True)]
    names = list(dict.fromkeys(f for _, t in parts for f in t.features))
    X = np.full((frame.height, len(names)), np.nan)
    y = np.full(frame.height, np.nan)
    groups = np.empty(frame.height, dtype=object)
    for rows, t in parts:
        X[rows] = t.select(names)
        y[rows] = t.y
        groups[rows] = t.groups
    keys = [c for c in ("experiment", "run_id", "appl", "task", "thread", "burst_seq") if c in frame.columns]
    used = sorted({c for v in counters.values() for c in v})
    return FeatureTable(target, names, X, y, frame.select(keys), groups, used)


def compare_counter_sets(frame: pl.DataFrame, target: str, sets: dict[str, list[str] | dict[str, list[str]]], *,
                         rows: dict[str, pl.Expr] | None = None, kinds: tuple[str, ...] = ("hgb",), seed: int = 0,
                         n_splits: int = 5, min_instructions: float = MIN_INSTRUCTIONS,
                         on_step: Callable[[str], None] | None = None) -> pl.DataFrame:
    """The merged counter set against each single-run counter set and the best single set, in one table.

    ``frame``: merged bursts with an ``app`` column; ``sets``: name -> counters of that single-run set (one list,
    or experiment -> list when each experiment recorded its k-th run with its own counters). Every
    set is evaluated on the same bursts (those whose target is known) with grouped cross-validation, or, for a
    set named in ``rows``, on those of them its predicate selects (see
    :func:`synthtrace.models.training_data.comparison_plan`). Rows:
    counter_set (``merged``, each set, ``best single (<name>)``), model, n_features, r2, mape, and
    ``mape_cut_vs_best_single`` (1 - merged MAPE / best single MAPE, on the merged rows).
    """
    full = build_features(frame, target)
    mask = full.trainable_mask(min_instructions)
    merged = full.subset(mask)
    out = []
    for kind in kinds:
        step = on_step or (lambda _: None)
        results = {"merged": (merged, cross_validate(merged, kind, seed, n_splits).scores)}
        step(f"{kind} merged")
        for name, counters in sets.items():
            own = (
                mask & frame.select(rows[name].fill_null(False)).to_series().to_numpy()
                if name in (rows or {})
                else mask
            )
            t = _set_features(frame, target, counters).subset(own)
            results[name] = (t, cross_validate(t, kind, seed, n_splits).scores)
            step(f"{kind} {name}")
        singles = {k: v for k, v in results.items() if k != "merged"}
        best = min(singles, key=lambda k: singles[k][1]["mape"]) if singles else None
        for name, (t, s) in results.items():
            out.append({"counter_set": name, "model": kind, "n_features": len(t.features),
                         "r2": s["r2"], "mape": s["mape"], "n": s["n"]})
        if best is not None:
            t, s = singles[best]
            m = results["merged"][1]["mape"]
            out.append({"counter_set": f"best single ({best})", "model": kind, "n_features": len(t.features),
                         "r2": s["r2"], "mape": s["mape"], "n": s["n"]})
            for r in out:
                if r["model"] == kind and r["counter_set"] == "merged":
                    r["mape_cut_vs_best_single"] = 1.0 - m / s["mape"] if s["mape"] > 0 else None
    return pl.DataFrame(out, schema={"counter_set": pl.String, "model": pl.String, "n_features": pl.Int64,
                                      "r2": pl.Float64, "mape": pl.Float64, "n": pl.Int64,
                                      "mape_cut_vs_best_single": pl.Float64})

