"""Unsupervised discovery of burst archetypes, mapped to the names of the rules (DESIGN §7).

Bursts are clustered with duration-weighted k-means on *scale-free* features (IPC, log-MPKI per level,
branch misprediction, FP and vector shares, operational intensity relative to the ridge, DRAM bandwidth share)
— never on sizes, so a long and a short burst of the same kernel land together. Each cluster is named by
applying the rules to its duration-weighted median burst (not by a vote of the per-burst rule labels), so the
agreement with the rules (Cohen's kappa) is a real cross-check. Stability: the clustering is refitted on
bootstrap resamples and compared with the reference by the adjusted Rand index (ARI), on the mapped archetypes
and on the raw cluster ids.

``fine_grain`` is a size criterion, not a behaviour: those bursts are left out of the clustering (and out of
kappa); they keep their rule label.
"""
from __future__ import annotations

import numpy as np
import polars as pl
from sklearn.base import BaseEstimator
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score, cohen_kappa_score
from sklearn.utils.validation import check_is_fitted

from synthtrace.tracelib.errors import BadInputError
from synthtrace.tracelib.domain.machine import Machine, load_machine
from synthtrace.models.archetypes import INSUFFICIENT, Thresholds, apply_rules, burst_rules, ridge_point

#: feature name -> expression over burst-metric columns (all dimensionless)
def _features(ridge: float) -> dict[str, pl.Expr]:
    lg = lambda c: (pl.col(c) + 1.0).log10()  # noqa: E731
    return {
        "ipc": pl.col("ipc"),
        "log_l1_mpki": lg("l1_mpki"),
        "log_l2_mpki": lg("l2_mpki"),
        "log_l3_mpki": lg("l3_mpki"),
        "log_icache_mpki": lg("icache_mpki"),
        "log_itlb_mpki": lg("itlb_mpki"),
        "log_br_mpki": lg("br_mpki"),
        "br_misp_rate": pl.col("br_misp_rate").clip(0.0, 0.5) * 10.0,
        "fp_share": pl.col("fp_share").clip(0.0, 1.0),
        "vec_share": pl.col("vec_share").clip(0.0, 1.0),
        "log_oi_over_ridge": pl.when(pl.col("oi_dram") > 0).then((pl.col("oi_dram") / ridge).log10().clip(-4.0, 3.0)),
        "dram_bw_share": pl.col("dram_bw_share").clip(0.0, 2.0),
    }


#: metric columns summarised per cluster (weighted median) to name it by the rules
_RULE_METRICS = ("duration_s", "instructions", "ipc", "l1_mpki", "l2_mpki", "l3_mpki", "icache_mpki", "itlb_mpki",
                 "br_mpki", "br_misp_rate", "fp_share", "vec_share", "oi_dram", "dram_bw_share", "stall_share")


class DiscoveryError(BadInputError):
    """Too few usable bursts or features to cluster."""


def _weighted_medians(df: pl.DataFrame, by: str, cols: list[str], weight: str) -> pl.DataFrame:
    """Per group of ``by``: the weighted median of each column (NULLs ignored)."""
    out = df.select(by).unique().sort(by)
    for c in cols:
        m = (df.select(by, c, weight).drop_nulls(c).sort(by, c)
             .with_columns((pl.col(weight).cum_sum().over(by) / pl.col(weight).sum().over(by)).alias("_q"))
             .group_by(by).agg(pl.col(c).filter(pl.col("_q") >= 0.5).first()))
        out = out.join(m, on=by, how="left")
    return out


class ArchetypeDiscovery(BaseEstimator):
    """Duration-weighted k-means on scale-free burst features, clusters named by the archetype rules.

    Parameters: ``n_clusters`` (k; more clusters than archetypes is fine, several map to one name),
    ``machine``/``thresholds``/``ranks_per_socket`` as for :class:`~synthtrace.models.archetypes.ArchetypeRules`,
    ``n_bootstrap`` resamples for stability, ``max_fit_rows`` (bursts sampled, by duration, to fit),
    ``min_feature_coverage`` (a feature is used when non-NULL on at least this share of bursts),
    ``random_state``.

    Fitted attributes: ``features_``, ``cluster_archetypes_`` (cluster -> name), ``kappa_`` /
    ``kappa_weighted_`` (agreement with the rule labels, per burst / per second), ``stability_ari_`` (mean ARI of
    the mapped archetypes over bootstraps), ``stability_ari_clusters_`` (raw cluster ids), ``n_clustered_``.
    """

    def __init__(self, n_clusters: int = 16, machine: Machine | None = None, thresholds: Thresholds | None = None,
                 ranks_per_socket: float | None = None, n_bootstrap: int = 10, max_fit_rows: int = 50_000,
                 min_feature_coverage: float = 0.9, random_state: int = 0):
        self.n_clusters = n_clusters
        self.machine = machine
        self.thresholds = thresholds
        self.ranks_per_socket = ranks_per_socket
        self.n_bootstrap = n_bootstrap
        self.max_fit_rows = max_fit_rows
        self.min_feature_coverage = min_feature_coverage
        self.random_state = random_state

    # ------------------------------------------------------------------ internals
    def _rules(self) -> list:
        return burst_rules(self.thresholds_, self.ridge_)

    def _candidates(self, metrics: pl.DataFrame) -> pl.DataFrame:
        """Bursts that are not fine-grained by size, with their features (rows keep ``_row``)."""
        t = self.thresholds_
        fine = (pl.col("duration_s") * 1e6 < t.fine_grain_max_us) | (
            pl.col("instructions") < t.fine_grain_min_instructions
        )
        feats = _features(self.ridge_)
        return (metrics.with_row_index("_row")
                .with_columns(fine.fill_null(False).alias("_fine"), *[e.alias(f"f_{k}") for k, e in feats.items()]))

    def _matrix(self, cand: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """Standardised feature matrix of the clusterable rows, and their row indices."""
        cols = [f"f_{f}" for f in self.features_]
        usable = cand.filter(
            ~pl.col("_fine") & pl.all_horizontal(pl.col(c).is_not_null() & pl.col(c).is_finite() for c in cols)
        )
        x = usable.select(cols).to_numpy().astype(float)
        return (x - self.center_) / self.scale_, usable["_row"].to_numpy()

    def _name_clusters(self, metrics: pl.DataFrame, rows: np.ndarray, clusters: np.ndarray) -> dict[int, str]:
        frame = metrics[rows].with_columns(
            pl.Series("_cluster", clusters), pl.col("duration_s").clip(lower_bound=1e-9).alias("_w")
        )
        cols = [c for c in _RULE_METRICS if c in frame.columns]
        med = _weighted_medians(frame, "_cluster", cols, "_w")
        named = apply_rules(
            med.with_columns(pl.lit([], dtype=pl.List(pl.String)).alias("missing_roles")), self._rules()
        )
        # a cluster the rules cannot decide keeps the provisional (best decidable) name
        named = named.with_columns(pl.when(pl.col("archetype") == INSUFFICIENT).then(pl.col("provisional"))
                                   .otherwise(pl.col("archetype")).alias("_name"))
        return dict(zip(named["_cluster"].to_list(), named["_name"].to_list()))

    def _fit_kmeans(self, x: np.ndarray, w: np.ndarray, seed: int) -> KMeans:
        k = max(1, min(self.n_clusters, len(x)))
        return KMeans(n_clusters=k, n_init=3, random_state=seed).fit(x, sample_weight=w)

    def _sample(self, n: int, w: np.ndarray, rng: np.random.Generator, replace: bool) -> np.ndarray:
        size = min(n, self.max_fit_rows) if not replace else min(n, self.max_fit_rows)
        if not replace and n <= self.max_fit_rows:
            return np.arange(n)
        return rng.choice(n, size=size, replace=replace)

    # ------------------------------------------------------------------ API
    def fit(self, metrics: pl.DataFrame, y: pl.Series | None = None) -> ArchetypeDiscovery:
        """Cluster the bursts of a burst-metrics frame; ``y`` (optional) are rule labels for kappa
        (computed with :func:`~synthtrace.models.archetypes.apply_rules` when not given)."""
        self.machine_ = self.machine or load_machine()
        self.thresholds_ = self.thresholds or Thresholds()
        self.ridge_ = self.thresholds_.ridge_flop_per_byte or ridge_point(self.machine_, self.ranks_per_socket)
        cand = self._candidates(metrics)
        behav = cand.filter(~pl.col("_fine"))
        if behav.height < 2:
            raise DiscoveryError(f"only {behav.height} bursts that are not fine-grained: nothing to cluster")
        cover = behav.select(pl.col(f"f_{f}").is_not_null().mean().alias(f) for f in _features(self.ridge_))
        self.features_ = [f for f in cover.columns if (cover[f][0] or 0.0) >= self.min_feature_coverage]
        if not self.features_:
            raise DiscoveryError("no burst feature is measured on enough bursts to cluster")
        raw = behav.select([f"f_{f}" for f in self.features_]).drop_nulls()
        raw_np = raw.to_numpy().astype(float)
        raw_np = raw_np[np.isfinite(raw_np).all(axis=1)]
        self.center_ = np.median(raw_np, axis=0)
        # features are already in comparable natural units (IPC, log10 MPKI, shares); standardise by the spread,
        # floored so a nearly constant feature is not blown up into noise
        self.scale_ = np.maximum(raw_np.std(axis=0), 0.1)
        x, rows = self._matrix(cand)
        if len(rows) < 2:
            raise DiscoveryError("fewer than 2 bursts have every clustering feature")
        w = np.clip(metrics["duration_s"].to_numpy()[rows].astype(float), 1e-9, None)
        rng = np.random.default_rng(self.random_state)
        fit_idx = self._sample(len(rows), w, rng, replace=False)
        self.kmeans_ = self._fit_kmeans(x[fit_idx], w[fit_idx], self.random_state)
        clusters = self.kmeans_.predict(x)
        self.cluster_archetypes_ = self._name_clusters(metrics, rows, clusters)
        mapped = np.array([self.cluster_archetypes_[c] for c in clusters], dtype=object)
        self.n_clustered_ = int(len(rows))
        # agreement with the per-burst rules, where the rules decide
        if y is None:
            y = apply_rules(metrics, self._rules())["archetype"]
        y_np = np.asarray(y.to_list(), dtype=object)[rows]
        ok = y_np != INSUFFICIENT
        self.n_compared_ = int(ok.sum())
        if ok.sum() and len(set(y_np[ok]) | set(mapped[ok])) > 1:
            self.kappa_ = float(cohen_kappa_score(y_np[ok], mapped[ok]))
            self.kappa_weighted_ = float(cohen_kappa_score(y_np[ok], mapped[ok], sample_weight=w[ok]))
        else:
            self.kappa_ = self.kappa_weighted_ = float("nan") if not ok.sum() else 1.0
        self.agreement_ = float((y_np[ok] == mapped[ok]).mean()) if ok.sum() else float("nan")
        # bootstrap stability
        aris, aris_raw = [], []
        for b in range(self.n_bootstrap):
            idx = rng.choice(len(rows), size=min(len(rows), self.max_fit_rows), replace=True)
            km = self._fit_kmeans(x[idx], w[idx], self.random_state + 1 + b)
            cb = km.predict(x)
            names = self._name_clusters(metrics, rows, cb)
            mb = np.array([names[c] for c in cb], dtype=object)
            aris.append(adjusted_rand_score(mapped, mb))
            aris_raw.append(adjusted_rand_score(clusters, cb))
        self.stability_ari_ = float(np.mean(aris)) if aris else float("nan")
        self.stability_ari_clusters_ = float(np.mean(aris_raw)) if aris_raw else float("nan")
        return self

    def predict_cluster(self, metrics: pl.DataFrame) -> pl.Series:
        """Cluster id per burst (NULL for fine-grained bursts and bursts lacking a feature)."""
        check_is_fitted(self)
        cand = self._candidates(metrics)
        x, rows = self._matrix(cand)
        out = np.full(metrics.height, -1, dtype=np.int64)
        if len(rows):
            out[rows] = self.kmeans_.predict(x)
        s = pl.Series("cluster", out)
        return pl.select(pl.when(s >= 0).then(s)).to_series().alias("cluster")

    def predict(self, metrics: pl.DataFrame) -> pl.Series:
        """Archetype name per burst from its cluster (``fine_grain`` by size; NULL where not clusterable)."""
        cl = self.predict_cluster(metrics)
        fine = self._candidates(metrics)["_fine"]
        mapping = {int(k): v for k, v in self.cluster_archetypes_.items()}
        named = cl.replace_strict(mapping, default=None, return_dtype=pl.String)
        return (
            pl.select(pl.when(fine).then(pl.lit("fine_grain")).otherwise(named)).to_series().alias("cluster_archetype")
        )

    def summary(self) -> dict:
        """Fitted figures as a plain dict (for reports and benchmarks)."""
        check_is_fitted(self)
        return {"n_clusters": int(self.kmeans_.n_clusters), "features": list(self.features_),
                "n_clustered": self.n_clustered_, "n_compared": self.n_compared_, "kappa": self.kappa_,
                "kappa_weighted": self.kappa_weighted_, "agreement": self.agreement_,
                "stability_ari": self.stability_ari_, "stability_ari_clusters": self.stability_ari_clusters_,
                "cluster_archetypes": {int(k): v for k, v in self.cluster_archetypes_.items()}}
