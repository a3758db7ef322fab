"""Features and targets for burst performance predictors (DESIGN §8).

A predictor learns a burst's **target** (``ipc``: instructions per cycle; ``tpi``: time per instruction in ns)
from **features** that are counter rates per instruction, FP and vector shares, misses per 1000 instructions
(MPKI), the burst's size, a target-blind archetype and its MPI context. A feature never contains the target:
every target names the quantities it is made of (its *ingredients*: cycles and time for both targets, since
time per instruction = cycles per instruction / frequency), and no feature uses an ingredient. Counters that
are not in the catalogue of :mod:`synthtrace.tracelib.domain.counters` become generic ``rate:<counter>`` features
(events per
instruction) unless their name says they count cycles or time.

Features are computed from any bursts-like frame (one run's ``bursts`` or an experiment's ``merged_bursts``);
``counters=`` restricts them to a counter set (what one run of a multi-run campaign recorded), which is how the
merged counter set is compared with each single-run set. Missing counters give NaN features (the estimators
handle them: gradient boosting and random forests natively, the linear baseline by imputation + indicators).

>>> table = build_features(merged_bursts, "ipc")
>>> table.X.shape, table.y.shape
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from synthtrace.models.archetypes import BURST_ARCHETYPES
from synthtrace.tracelib.domain.counters import ROLES, canonical, resolve
from synthtrace.tracelib.domain.mpi_calls import MPI_CALLS, calls_with
from synthtrace.tracelib.errors import BadInputError
from synthtrace.tracelib.domain.counter_sanity import without_anomalies
from synthtrace.tracelib.schema import counter_columns

#: counter roles made of cycles or of time: ingredients of both targets
CYCLE_ROLES: frozenset[str] = frozenset({"cyc", "ref_cyc", "stall_cyc"})
#: a non-catalogue counter whose name matches this counts cycles or time (never a feature)
_CYCLE_NAME = re.compile(r"CYC|CLK|CYCLE|STALL|TIME|TSC", re.IGNORECASE)

#: target name -> (description with unit, ingredient roles). Both targets exclude cycles and time.
TARGETS: dict[str, tuple[str, frozenset[str]]] = {
    "ipc": ("instructions per cycle (PAPI_TOT_INS / PAPI_TOT_CYC)", CYCLE_ROLES),
    "tpi": ("time per instruction in ns (duration_ns / PAPI_TOT_INS)", CYCLE_ROLES),
}

#: per-instruction features of catalogued roles: name -> (numerator role, denominator role | None = ins, scale)
ROLE_FEATURES: dict[str, tuple[str, str | None, float]] = {
    "l1_mpki": ("l1_dcm", None, 1000.0),
    "l2_mpki": ("l2_dcm", None, 1000.0),
    "l3_mpki": ("l3_tcm", None, 1000.0),
    "icache_mpki": ("l1_icm", None, 1000.0),
    "itlb_mpki": ("itlb_miss", None, 1000.0),
    "dtlb_mpki": ("dtlb_miss", None, 1000.0),
    "br_per_ins": ("br_ins", None, 1.0),
    "br_mpki": ("br_msp", None, 1000.0),
    "br_misp_rate": ("br_msp", "br_ins", 1.0),
    "ld_per_ins": ("ld_ins", None, 1.0),
    "sr_per_ins": ("sr_ins", None, 1.0),
    "fp_share": ("fp_ins", None, 1.0),
    "vec_share": ("vec_ins", "fp_ins", 1.0),
    "flops_per_ins": ("fp_ops", None, 1.0),
    "dram_bytes_per_ins": ("dram_cas", None, 64.0),
}

#: MPI context: the closing call's family (one-hot, fixed vocabulary so train and predict agree)
#: (from the MPI call catalogue, :mod:`synthtrace.tracelib.domain.mpi_calls`; arch, issue 26 item 7)
MPI_FAMILIES: dict[str, tuple[str, ...]] = {
    "collective": tuple(sorted(n for n, c in MPI_CALLS.items() if c.kind == "collective" and c.blocking)),
    "blocking_p2p": calls_with(roles=("send", "recv", "sendrecv", "probe"), blocking=True),
    "nonblocking_p2p": calls_with(roles=("send", "recv", "sendrecv"), blocking=False),
    "completion": calls_with(roles=("wait", "test")) + calls_with(roles=("probe",), blocking=False),
}
#: archetype one-hot vocabulary (target-blind rules; see :func:`blind_archetypes`): the burst archetypes
ARCHETYPE_VOCAB: tuple[str, ...] = BURST_ARCHETYPES
#: bursts with fewer instructions are left out of training and evaluation (their rates are noise)
MIN_INSTRUCTIONS: float = 1e4
#: a counter no role knows feeds a feature only when it has values on at least this share of the bursts of its
#: trace that a predictor learns from (:func:`feature_columns`): every counter a run records on each of its bursts
#: does, and one of k counter sets rotated per burst does up to k = 100
MIN_GENERIC_SHARE: float = 0.01


class UnknownTargetError(BadInputError):
    """A target that is not one of :data:`TARGETS`."""


class NoTrainingDataError(BadInputError):
    """No burst has what the target needs (instructions and cycles or time), or no usable feature."""


@dataclass
class FeatureTable:
    """Features, target and bookkeeping of a set of bursts.

    ``X``: float64 matrix (rows = bursts, columns = ``features``, NaN where a counter is missing);
    ``y``: the target per burst (NaN when its ingredients are missing; :meth:`trainable` drops those);
    ``keys``: identity of every row (experiment, run_id, appl, task, thread, burst_seq where present);
    ``groups``: the application of every row (for folds that keep a workload out of training).
    """

    target: str
    features: list[str]
    X: np.ndarray
    y: np.ndarray
    keys: pl.DataFrame
    groups: np.ndarray
    counters: list[str] = field(default_factory=list)

    def trainable_mask(self, min_instructions: float = MIN_INSTRUCTIONS) -> np.ndarray:
        """Rows with a finite positive target and at least ``min_instructions`` instructions."""
        ok = np.isfinite(self.y) & (self.y > 0)
        if "log10_ins" in self.features:
            li = self.X[:, self.features.index("log10_ins")]
            ok &= np.nan_to_num(li, nan=-1.0) >= np.log10(min_instructions)
        return ok

    def trainable(self, min_instructions: float = MIN_INSTRUCTIONS) -> FeatureTable:
        """The rows of :meth:`trainable_mask`."""
        return self.subset(self.trainable_mask(min_instructions))

    def subset(self, mask: np.ndarray) -> FeatureTable:
        idx = np.flatnonzero(mask)
        return FeatureTable(self.target, list(self.features), self.X[idx], self.y[idx],
                            self.keys[idx], self.groups[idx], list(self.counters))

    def select(self, features: list[str]) -> np.ndarray:
        """The matrix of ``features`` in that order (absent features are NaN columns)."""
        cols = [self.X[:, self.features.index(f)] if f in self.features else np.full(self.X.shape[0], np.nan)
                for f in features]
        return np.column_stack(cols) if cols else np.empty((self.X.shape[0], 0))


def check_target(target: str) -> None:
    """Raise :class:`UnknownTargetError` unless ``target`` is one of :data:`TARGETS`."""
    if target not in TARGETS:
        raise UnknownTargetError(f"unknown target {target!r} (known: {', '.join(TARGETS)})")


def is_cycle_counter(counter: str) -> bool:
    """True if ``counter`` counts cycles or time (an ingredient of every target)."""
    role = canonical(counter)
    if role is not None:
        return role in CYCLE_ROLES
    return bool(_CYCLE_NAME.search(counter))


def role_counters(counters: list[str]) -> set[str]:
    """The counters of ``counters`` a role of the catalogue knows (every alias of it: :func:`unify_aliases` coalesces
    them) or an FP_ARITH class: the ones role features, archetypes and targets are made of."""
    return {c for c in counters if canonical(c) is not None} | set(resolve(counters).fp_arith)


def generic_counters(counters: list[str]) -> list[str]:
    """The counters of ``counters`` that make generic ``rate:<counter>`` features (events per instruction): no role
    knows them and their name does not say they count cycles or time; in their order."""
    known = role_counters(counters)
    return [c for c in counters if c not in known and not is_cycle_counter(c)]


def model_columns(schema: Mapping[str, pl.DataType], generic: Iterable[str] = ()) -> list[str]:
    """The columns of a bursts-like frame with ``schema`` that features and targets read, in its order: every
    column that is not a counter (keys, times, the closing MPI call), the counters of :func:`role_counters`, and
    the counters of ``generic`` (issue 23: a run sampling thousands of counter types no role knows is read as
    these few, not as bursts x counter types)."""
    counters = counter_columns(pl.DataFrame(schema=schema))
    keep = role_counters(counters) | set(generic)
    known = set(counters)
    return [c for c in schema if c not in known or c in keep]


def feature_columns(target: str | None = None) -> Callable[[pl.LazyFrame], list[str]]:
    """What computing features reads of one stored trace's bursts (a lazy ``scan`` given to the returned
    function): :func:`model_columns` with the generic counters that give a ``rate:<counter>`` feature values.

    Without ``target``: those with a value on a burst that counted instructions (any other's feature is NULL on
    every burst: :func:`build_features` drops it). With a ``target``: those with values on two bursts or more
    that a predictor of it learns from (at least :data:`MIN_INSTRUCTIONS` instructions and the target's other
    ingredient: cycles, or the duration): any other's feature has fewer than two values there, and training drops
    it as uninformative. Either way a counter on fewer than :data:`MIN_GENERIC_SHARE` of those bursts of the trace
    is left out too (a run sampling one of 4,096 counter types per burst: 4,096 features missing on 99.98 % of the
    bursts, bursts x 4,096 values to hold). Only the instructions, that ingredient and the generic counters are
    read (streamed); nothing when the scan has no instructions column.
    """
    def choose(scan: pl.LazyFrame) -> list[str]:
        schema = scan.collect_schema()
        counters = counter_columns(pl.DataFrame(schema=schema))
        candidates = generic_counters(counters)
        rows = _rows_with_rates(counters, schema, target)
        if rows is None or not candidates:
            return model_columns(schema)
        *found, n = scan.select([(pl.col(c).is_not_null() & rows).sum() for c in candidates] + [rows.sum()]).collect(
            engine="streaming").row(0)
        least = max(1 if target is None else 2, math.ceil(MIN_GENERIC_SHARE * n))
        return model_columns(schema, [c for c, k in zip(candidates, found) if k >= least])

    return choose


def _rows_with_rates(counters: list[str], schema: Mapping[str, pl.DataType], target: str | None) -> pl.Expr | None:
    """True on every burst where :func:`feature_columns` looks for generic counter values (raw values: a superset
    of the bursts left after aliases are coalesced and impossible values dropped); None when no burst can be one."""
    def above(role: str, floor: float) -> pl.Expr | None:
        cols = [c for c in counters if canonical(c) == role]
        return pl.any_horizontal([(pl.col(c) > floor).fill_null(False) for c in cols]) if cols else None

    if target is None:
        return above("ins", 0)
    check_target(target)
    ins = above("ins", MIN_INSTRUCTIONS * (1 - 1e-9))  # below the 1e4 that trainable_mask's log10 keeps
    other = above("cyc", 0) if target == "ipc" else (
        (pl.col("duration_ns") > 0).fill_null(False) if "duration_ns" in schema else None)
    return None if ins is None or other is None else ins & other


def prediction_columns(features: list[str]) -> Callable[[pl.LazyFrame], list[str]]:
    """What a model of ``features`` reads of a bursts scan: :func:`model_columns` with the generic counters of
    its ``rate:<counter>`` features."""
    generic = [f.removeprefix("rate:") for f in features if f.startswith("rate:")]
    return lambda scan: model_columns(scan.collect_schema(), generic)


def unify_aliases(frame: pl.DataFrame, counters: list[str]) -> tuple[pl.DataFrame, list[str]]:
    """One column per hardware quantity: where several aliases of a role are among ``counters`` (experiments that
    recorded ``PAPI_L3_TCM`` and others ``LONGEST_LAT_CACHE:MISS``, read together), the preferred alias becomes
    their coalesce and the others are dropped. Summed roles (uncore CAS of several controllers) are left alone.
    Returns the frame and the remaining counters."""
    drop: list[str] = []
    exprs: list[pl.Expr] = []
    for role in ROLES.values():
        if role.summed:
            continue
        hits = [a for a in role.aliases if a in counters]
        if len(hits) > 1:
            exprs.append(pl.coalesce([pl.col(h).cast(pl.Float64) for h in hits]).alias(hits[0]))
            drop += hits[1:]
    if not exprs:
        return frame, counters
    return frame.with_columns(exprs).drop(drop), [c for c in counters if c not in drop]


def _safe_ratio(num: pl.Expr, den: pl.Expr, scale: float = 1.0) -> pl.Expr:
    return pl.when(den > 0).then(num * scale / den).otherwise(None)


def _target_expr(target: str, cmap) -> pl.Expr:
    ins = cmap.expr("ins")
    if target == "ipc":
        return _safe_ratio(ins, cmap.expr("cyc")) if cmap.has("cyc") else pl.lit(None, pl.Float64)
    return _safe_ratio(pl.col("duration_ns").cast(pl.Float64), ins)


def _mpi_family_exprs(frame: pl.DataFrame) -> list[pl.Expr]:
    if "mpi_call" not in frame.columns:
        return [pl.lit(np.nan).alias(f"mpi_{fam}") for fam in (*MPI_FAMILIES, "other", "none")]
    call = pl.col("mpi_call")
    out = [call.is_in(list(names)).cast(pl.Float64).alias(f"mpi_{fam}") for fam, names in MPI_FAMILIES.items()]
    known = [n for names in MPI_FAMILIES.values() for n in names]
    out.append((call.is_not_null() & ~call.is_in(known)).cast(pl.Float64).alias("mpi_other"))
    out.append(call.is_null().cast(pl.Float64).alias("mpi_none"))
    return out


def blind_archetypes(frame: pl.DataFrame, counters: list[str]) -> pl.Series:
    """Rule archetype of every burst computed without cycles or time (so it cannot carry either target).

    Cycle counters are dropped and each burst's duration is replaced by a nominal 1 ns per instruction; rules
    that need IPC or a real duration are then undecided, and such bursts get the rules' provisional label.
    """
    from synthtrace.models.archetypes import ArchetypeRules
    from synthtrace.tracelib.domain.machine import load_machine
    from synthtrace.tracelib.domain.metrics import burst_metrics

    keep = [c for c in counters if not is_cycle_counter(c)]
    cmap = resolve(keep)
    if not cmap.has("ins") or frame.height == 0:
        return pl.Series("archetype", [None] * frame.height, dtype=pl.String)
    ins = cmap.expr("ins")
    blind = frame.select(*keep).with_columns(
        pl.when(ins > 0).then(ins).otherwise(1.0).round().cast(pl.Int64).alias("duration_ns"))
    machine = load_machine()
    bm = burst_metrics(blind, machine, cmap=cmap)
    labelled = ArchetypeRules(machine, counter_map=cmap).fit().classify_bursts(bm)
    return labelled.select(pl.when(pl.col("archetype") == "insufficient_counters").then(pl.col("provisional"))
                           .otherwise(pl.col("archetype")).alias("archetype")).to_series()


def build_features(frame: pl.DataFrame, target: str, *, counters: list[str] | None = None,
                   groups: str = "program", archetype: bool = True) -> FeatureTable:
    """Features and target of every burst of a bursts-like ``frame``.

    ``counters``: only these counters may feed features (default: every counter column); the target is always computed
    from the frame's own instructions/cycles/time. ``groups``: column holding the workload of each row (the program,
    :mod:`synthtrace.warehouse.programs`; falls back to ``app``, ``experiment``, then one group). Raises
    :class:`UnknownTargetError`.
    """
    check_target(target)
    frame = without_anomalies(frame)  # reader (issue 24.2): impossible counter values are missing values
    all_counters = counter_columns(frame)
    use = [c for c in (all_counters if counters is None else counters) if c in all_counters]
    fframe, allowed = unify_aliases(frame, [c for c in use if not is_cycle_counter(c)])
    cmap = resolve(allowed)
    ins = cmap.expr("ins")
    exprs: list[pl.Expr] = [
        pl.when(ins > 0).then(ins.log10()).otherwise(None).alias("log10_ins") if cmap.has("ins")
        else pl.lit(None, pl.Float64).alias("log10_ins")]
    for name, (num, den, scale) in ROLE_FEATURES.items():
        if cmap.has(num) and (den is None and cmap.has("ins") or den is not None and cmap.has(den)):
            denom = ins if den is None else cmap.expr(den)
            exprs.append(_safe_ratio(cmap.expr(num), denom, scale).alias(name))
        else:
            exprs.append(pl.lit(None, pl.Float64).alias(name))
    for c in sorted(generic_counters(allowed)):
        exprs.append(_safe_ratio(pl.col(c).cast(pl.Float64), ins).alias(f"rate:{c}") if cmap.has("ins")
                     else pl.lit(None, pl.Float64).alias(f"rate:{c}"))
    exprs += _mpi_family_exprs(frame)
    feats = fframe.select(exprs)
    if archetype:
        arch = blind_archetypes(fframe, allowed)
        feats = feats.with_columns([(arch == a).cast(pl.Float64).fill_null(np.nan).alias(f"arch_{a}")
                                    for a in ARCHETYPE_VOCAB])
    # a feature that no row has is dropped (it would only carry NaN)
    names = [c for c in feats.columns if feats[c].is_not_null().any() and not feats[c].is_nan().all()]
    X = feats.select(names).cast(pl.Float64).to_numpy() if names else np.empty((frame.height, 0))
    tframe, tcounters = unify_aliases(frame, all_counters)
    # with_columns: a target without its counters is a literal NULL, one per burst (a select gave one value)
    y = (
        tframe.with_columns(_target_expr(target, resolve(tcounters)).alias("_target"))
        .get_column("_target")
        .cast(pl.Float64)
        .fill_null(np.nan)
        .to_numpy()
    )
    key_cols = [c for c in ("experiment", "run_id", "appl", "task", "thread", "burst_seq") if c in frame.columns]
    keys = frame.select(key_cols)
    gcol = next((c for c in (groups, "program", "app", "experiment") if c in frame.columns), None)
    g = frame[gcol].cast(pl.String).fill_null("?").to_numpy() if gcol else np.full(frame.height, "all", dtype=object)
    return FeatureTable(target, names, np.asarray(X, dtype=np.float64), y, keys, g, use)


def counter_sets(runs: pl.DataFrame, *, per_experiment: bool = False) -> dict[str, list[str] | dict[str, list[str]]]:
    """Single-run counter sets of a campaign: ``run<k>`` -> counters of the k-th run (by name) of the experiments.

    ``runs`` is the runs view (experiment, run_name, counters). With ``per_experiment`` each set maps experiment
    -> counters of that experiment's k-th run (campaigns whose experiments split the counters differently);
    otherwise the k-th run's set is taken from the first experiment that has a k-th run (campaigns that repeat
    their counter plan). Returns an empty dict when no run has counters.
    """
    if runs.height == 0 or "counters" not in runs.columns:
        return {}
    ranked = runs.sort("experiment", "run_name").with_columns(
        pl.int_range(pl.len()).over("experiment").alias("_k"))
    out: dict = {}
    for exp, k, cnt in ranked.select("experiment", "_k", "counters").iter_rows():
        if per_experiment:
            out.setdefault(f"run{k}", {})[exp] = list(cnt or [])
        else:
            out.setdefault(f"run{k}", list(cnt or []))
    return dict(sorted(out.items()))
