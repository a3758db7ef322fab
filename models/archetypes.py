"""The 13 performance archetypes of DESIGN §7 as ordered rules with configurable thresholds.

Bursts (rules 1–9), MPI calls (10–11) and phases (12–13) are classified from the metric frames of
:mod:`synthtrace.tracelib.metrics`. Rules are evaluated in order with three-valued logic: a rule whose inputs are NULL is
*undecided*; a unit whose first non-false rule is undecided is ``insufficient_counters`` and
``missing_counters`` names the counters that would decide it (what merging runs fixes). A unit where no rule
fires gets the nearest archetype (largest margin) with a confidence below 0.5; a phase where neither phase rule
fires is ``balanced``.

Confidence of a firing rule: 0.5 + 0.5 x min(1, margin), where the margin is how far (in octaves, log2 of the
ratio to the threshold) the weakest deciding condition clears its threshold.

>>> rules = ArchetypeRules(machine=load_machine(), thresholds=Thresholds())
>>> labelled = rules.fit(burst_metrics_frame).classify_bursts(burst_metrics_frame)
"""
from __future__ import annotations

import math
from collections.abc import Callable
import tomllib
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING
from pathlib import Path

import polars as pl

from synthtrace.tracelib.counters import PREFERRED, CounterMap
from synthtrace.tracelib.errors import BadInputError
from synthtrace.tracelib.machine import Machine, load_machine

if TYPE_CHECKING:
    from synthtrace.tracelib.simulator.engine import Labeller

BURST_ARCHETYPES: tuple[str, ...] = ("fine_grain", "compute_vector", "compute_scalar", "core_bound", "cache_bound",
                                     "dram_bandwidth", "dram_latency", "frontend_bound", "bad_speculation")
MPI_ARCHETYPES: tuple[str, ...] = ("comm_latency", "comm_bandwidth")
PHASE_ARCHETYPES: tuple[str, ...] = ("load_imbalance", "serialization")
ARCHETYPES: tuple[str, ...] = BURST_ARCHETYPES + MPI_ARCHETYPES + PHASE_ARCHETYPES
INSUFFICIENT = "insufficient_counters"
BALANCED = "balanced"

#: how to name a missing role to the user (``flops``/``dram`` can come from several counters)
ROLE_LABELS: dict[str, str] = {**PREFERRED, "flops": "PAPI_DP_OPS (or PAPI_FP_INS+PAPI_VEC_INS)",
                               "dram": "PAPI_L3_TCM (or UNC_M_CAS_COUNT)"}


class ThresholdsError(BadInputError):
    """A thresholds file cannot be read or names an unknown threshold."""


@dataclass
class Thresholds:
    """Rule thresholds (DESIGN §7 starting values). Units in the field names; shares are fractions."""

    fine_grain_max_us: float = 10.0  # µs
    fine_grain_min_instructions: float = 1e4
    vector_min_fp_share: float = 0.2  # FP instructions / instructions
    vector_min_vec_share: float = 0.6  # vector / FP instructions
    vector_min_oi_over_ridge: float = 1.0  # operational intensity / ridge point
    ridge_flop_per_byte: float | None = None  # None: the machine's DRAM ridge for the rank's bandwidth share
    scalar_min_ipc: float = 1.5
    scalar_max_vec_share: float = 0.3
    integer_max_fp_share: float = 0.05  # below this FP share a burst counts as integer code
    core_max_ipc: float = 1.0
    core_max_l1_mpki: float = 10.0
    core_max_l3_mpki: float = 0.5
    core_max_br_mpki: float = 2.0
    cache_min_l1_mpki: float = 20.0
    cache_min_l2_mpki: float = 5.0
    cache_max_l3_mpki: float = 1.0
    dram_min_l3_mpki: float = 1.0
    dram_bw_min_share: float = 0.5  # of the rank's share of socket DRAM bandwidth
    dram_lat_max_share: float = 0.3
    frontend_min_mpki: float = 5.0  # i-cache or iTLB misses per 1000 instructions
    badspec_min_rate: float = 0.05  # mispredicted / branches
    badspec_min_mpki: float = 5.0
    latency_max_message_bytes: float = 16 * 1024
    latency_max_link_fraction: float = 0.2
    bandwidth_min_message_bytes: float = 64 * 1024
    bandwidth_min_link_fraction: float = 0.5
    imbalance_max_load_balance: float = 0.85
    serial_max_comm_efficiency: float = 0.8
    serial_max_serialization_efficiency: float = 0.8
    mpi_min_bytes: float = 1.0  # point-to-point calls moving fewer bytes (waits, tests) are not MPI units

    @classmethod
    def from_toml(cls, path: str | Path) -> Thresholds:
        """Read thresholds from a TOML file (flat keys, or under ``[thresholds]``); unknown keys are an error."""
        try:
            with open(path, "rb") as fh:
                data = tomllib.load(fh)
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ThresholdsError(f"{path}: cannot read thresholds ({exc})") from None
        data = data.get("thresholds", data)
        return cls.from_dict(data, str(path))

    @classmethod
    def from_dict(cls, data: dict, where: str = "thresholds") -> Thresholds:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ThresholdsError(f"{where}: unknown threshold(s) {', '.join(unknown)}")
        for k, v in data.items():
            if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool)):
                raise ThresholdsError(f"{where}: {k} must be a number")
        return cls(**data)

    def as_dict(self) -> dict:
        return asdict(self)


# ============================================================================ rule algebra
_MARGIN_CAP = 8.0  # octaves


class Node:
    """A condition tree over metric columns, evaluated with Kleene logic (NULL = undecided)."""

    def holds(self) -> pl.Expr: ...
    def support(self) -> pl.Expr: ...  # some measured condition of the tree holds
    def margin(self) -> pl.Expr: ...
    def evidence(self) -> list[pl.Expr]: ...
    def roles(self) -> list[str]: ...


@dataclass
class Cond(Node):
    """``metric op threshold`` with op ``<`` or ``>=``; ``needs`` are the counter roles the metric comes from."""

    metric: str
    op: str
    threshold: float
    needs: tuple[str, ...] = ()
    scale: float = 1.0  # metric is shown and compared as metric x scale (e.g. seconds -> µs)

    def _x(self) -> pl.Expr:
        return pl.col(self.metric).cast(pl.Float64) * self.scale

    def holds(self) -> pl.Expr:
        return self._x() < self.threshold if self.op == "<" else self._x() >= self.threshold

    def support(self) -> pl.Expr:
        return self.holds().fill_null(False)

    def margin(self) -> pl.Expr:
        x, t = self._x(), self.threshold
        if t <= 0:
            return pl.when(x.is_not_null()).then(pl.when(self.holds()).then(_MARGIN_CAP).otherwise(-_MARGIN_CAP))
        ratio = pl.when(x > 0).then((x / t).log(2)).otherwise(pl.when(x.is_not_null()).then(-_MARGIN_CAP))
        m = ratio if self.op == ">=" else -ratio
        return m.clip(-_MARGIN_CAP, _MARGIN_CAP)

    def evidence(self) -> list[pl.Expr]:
        value = self._x().round_sig_figs(3).cast(pl.String).fill_null("NA")
        return [pl.concat_str([pl.lit(f"{self.metric}="), value, pl.lit(f" ({self.op} {self.threshold:g})")])]

    def roles(self) -> list[str]:
        return list(self.needs)


@dataclass
class All(Node):
    parts: tuple[Node, ...]

    def holds(self) -> pl.Expr:
        return pl.all_horizontal(*[p.holds() for p in self.parts])

    def support(self) -> pl.Expr:
        return pl.any_horizontal(*[p.support() for p in self.parts])

    def margin(self) -> pl.Expr:
        return pl.min_horizontal(*[p.margin() for p in self.parts])

    def evidence(self) -> list[pl.Expr]:
        return [e for p in self.parts for e in p.evidence()]

    def roles(self) -> list[str]:
        return list(dict.fromkeys(r for p in self.parts for r in p.roles()))


@dataclass
class Any(Node):
    parts: tuple[Node, ...]

    def holds(self) -> pl.Expr:
        return pl.any_horizontal(*[p.holds() for p in self.parts])

    def support(self) -> pl.Expr:
        return pl.any_horizontal(*[p.support() for p in self.parts])

    def margin(self) -> pl.Expr:
        return pl.max_horizontal(*[p.margin() for p in self.parts])

    def evidence(self) -> list[pl.Expr]:
        return [e for p in self.parts for e in p.evidence()]

    def roles(self) -> list[str]:
        return list(dict.fromkeys(r for p in self.parts for r in p.roles()))


@dataclass
class Rule:
    number: int
    archetype: str
    condition: Node


def burst_rules(t: Thresholds, ridge: float) -> list[Rule]:
    """Rules 1–9 over :func:`synthtrace.tracelib.metrics.burst_metrics` columns, in evaluation order."""
    ipc = ("ins", "cyc")
    return [
        Rule(1, "fine_grain", Any((Cond("duration_s", "<", t.fine_grain_max_us, (), 1e6),
                                   Cond("instructions", "<", t.fine_grain_min_instructions, ("ins",))))),
        Rule(2, "compute_vector", All((Cond("fp_share", ">=", t.vector_min_fp_share, ("ins", "fp_ins")),
                                       Cond("vec_share", ">=", t.vector_min_vec_share, ("fp_ins", "vec_ins")),
                                       Cond("oi_dram", ">=", t.vector_min_oi_over_ridge, ("flops", "dram"), 1.0 / ridge)))),
        Rule(3, "compute_scalar", All((Cond("ipc", ">=", t.scalar_min_ipc, ipc),
                                       Any((Cond("vec_share", "<", t.scalar_max_vec_share, ("fp_ins", "vec_ins")),
                                            Cond("fp_share", "<", t.integer_max_fp_share, ("ins", "fp_ins"))))))),
        Rule(4, "core_bound", All((Cond("ipc", "<", t.core_max_ipc, ipc),
                                   Cond("l1_mpki", "<", t.core_max_l1_mpki, ("ins", "l1_dcm")),
                                   Cond("l3_mpki", "<", t.core_max_l3_mpki, ("ins", "l3_tcm")),
                                   Cond("br_mpki", "<", t.core_max_br_mpki, ("ins", "br_msp"))))),
        Rule(5, "cache_bound", All((Any((Cond("l1_mpki", ">=", t.cache_min_l1_mpki, ("ins", "l1_dcm")),
                                         Cond("l2_mpki", ">=", t.cache_min_l2_mpki, ("ins", "l2_dcm")))),
                                    Cond("l3_mpki", "<", t.cache_max_l3_mpki, ("ins", "l3_tcm"))))),
        Rule(6, "dram_bandwidth", All((Cond("l3_mpki", ">=", t.dram_min_l3_mpki, ("ins", "l3_tcm")),
                                       Cond("dram_bw_share", ">=", t.dram_bw_min_share, ("dram",))))),
        Rule(7, "dram_latency", All((Cond("l3_mpki", ">=", t.dram_min_l3_mpki, ("ins", "l3_tcm")),
                                     Cond("dram_bw_share", "<", t.dram_lat_max_share, ("dram",))))),
        Rule(8, "frontend_bound", Any((Cond("icache_mpki", ">=", t.frontend_min_mpki, ("ins", "l1_icm")),
                                       Cond("itlb_mpki", ">=", t.frontend_min_mpki, ("ins", "itlb_miss"))))),
        Rule(9, "bad_speculation", Any((Cond("br_misp_rate", ">=", t.badspec_min_rate, ("br_ins", "br_msp")),
                                        Cond("br_mpki", ">=", t.badspec_min_mpki, ("ins", "br_msp"))))),
    ]


def mpi_rules(t: Thresholds) -> list[Rule]:
    """Rules 10–11 over :func:`synthtrace.tracelib.metrics.mpi_metrics` columns."""
    return [
        Rule(10, "comm_latency", All((Cond("mean_message_bytes", "<", t.latency_max_message_bytes),
                                      Cond("link_fraction", "<", t.latency_max_link_fraction)))),
        Rule(11, "comm_bandwidth", All((Cond("mean_message_bytes", ">=", t.bandwidth_min_message_bytes),
                                        Cond("link_fraction", ">=", t.bandwidth_min_link_fraction)))),
    ]


def phase_rules(t: Thresholds) -> list[Rule]:
    """Rules 12–13 over :func:`synthtrace.tracelib.metrics.phase_metrics` columns."""
    return [
        Rule(12, "load_imbalance", Cond("load_balance", "<", t.imbalance_max_load_balance)),
        Rule(13, "serialization", All((Cond("load_balance", ">=", t.imbalance_max_load_balance),
                                       Cond("comm_efficiency", "<", t.serial_max_comm_efficiency),
                                       Cond("serialization_efficiency", "<", t.serial_max_serialization_efficiency)))),
    ]


def _evidence(rule: Rule, prefix: str = "") -> pl.Expr:
    return pl.concat_str([pl.lit(f"{prefix}rule {rule.number} {rule.archetype}: "),
                          pl.concat_str(rule.condition.evidence(), separator="; ")])


def apply_rules(frame: pl.DataFrame, rules: list[Rule], *, fallback: str | None = None,
                role_labels: dict[str, str] | None = None) -> pl.DataFrame:
    """Evaluate ordered ``rules`` on ``frame``; adds archetype, confidence, evidence, missing_counters, provisional.

    ``fallback``: label when every rule is decided false (None: the rule with the largest margin).
    ``frame`` needs ``missing_roles`` (List[str]) to name missing counters; without it none are named.
    """
    labels = role_labels or ROLE_LABELS
    holds = [r.condition.holds() for r in rules]
    margins = [r.condition.margin() for r in rules]
    has_missing = "missing_roles" in frame.columns
    # decided label (first true rule, unless an earlier rule is undecided)
    label = pl.when(pl.lit(False)).then(pl.lit(None, pl.String))
    conf = pl.when(pl.lit(False)).then(pl.lit(None, pl.Float64))
    evid = pl.when(pl.lit(False)).then(pl.lit(None, pl.String))
    for r, h, m in zip(rules, holds, margins):
        label = label.when(h.is_null()).then(pl.lit(INSUFFICIENT)).when(h).then(pl.lit(r.archetype))
        conf = conf.when(h.is_null()).then(pl.lit(0.0)).when(h).then(0.5 + 0.5 * m.clip(0.0, 1.0))
        evid = evid.when(h.is_null()).then(pl.lit(None, pl.String)).when(h).then(_evidence(r))
    # nearest rule by margin: used as fallback and as the provisional label of undecided bursts
    marg = pl.concat_list([m.fill_null(-2 * _MARGIN_CAP) for m in margins])
    nearest_idx = marg.list.arg_max()
    names = pl.lit([r.archetype for r in rules], dtype=pl.List(pl.String))
    nearest = names.list.get(nearest_idx)
    best_margin = marg.list.max()
    nearest_ev = pl.lit(None, pl.String)
    for i, r in enumerate(rules):
        nearest_ev = pl.when(nearest_idx == i).then(_evidence(r, "no rule fired; nearest ")).otherwise(nearest_ev)
    if fallback is None:
        label = label.otherwise(nearest)
        conf = conf.otherwise(0.5 * (1.0 + best_margin.clip(-1.0, 0.0)) * 0.8)
        evid = evid.otherwise(nearest_ev)
    else:
        label = label.otherwise(pl.lit(fallback))
        conf = conf.otherwise(0.5 + 0.5 * (-best_margin).clip(0.0, 1.0))
        evid = evid.otherwise(pl.concat_str([pl.lit(f"{fallback}: "), nearest_ev]))
    # provisional: first rule not ruled out by what is measured and backed by at least one measured condition
    # (what an undecided unit most likely is; a rule with nothing measured is skipped)
    prov = pl.when(pl.lit(False)).then(pl.lit(None, pl.String))
    for r, h in zip(rules, holds):
        prov = prov.when(h.fill_null(True) & r.condition.support()).then(pl.lit(r.archetype))
    prov = prov.otherwise(nearest if fallback is None else pl.lit(fallback))
    # counters that would decide: missing roles of every undecided rule before the first true one
    if has_missing:
        parts = []
        no_true_yet = pl.lit(True)
        for r, h in zip(rules, holds):
            need = pl.lit(r.condition.roles(), dtype=pl.List(pl.String))
            parts.append(pl.when(no_true_yet & h.is_null()).then(pl.col("missing_roles").list.set_intersection(need))
                         .otherwise(pl.lit([], dtype=pl.List(pl.String))))
            no_true_yet = no_true_yet & ~h.fill_null(False)
        missing = pl.concat_list(parts).list.unique(maintain_order=True)
        # FLOPs follow from FP and vector instruction counts: when those are asked for, do not also ask for FLOPs
        both = pl.lit(["fp_ins", "vec_ins"], dtype=pl.List(pl.String))
        missing = pl.when(missing.list.set_intersection(both).list.len() >= 1).then(
            missing.list.set_difference(pl.lit(["flops"], dtype=pl.List(pl.String)))).otherwise(missing)
    else:
        missing = pl.lit([], dtype=pl.List(pl.String))
    out = frame.with_columns(label.alias("archetype"), conf.alias("confidence"), evid.alias("_ev"),
                             prov.alias("provisional"), missing.alias("_missing_roles"))
    # role -> counter name (vectorised via replace on the exploded list)
    mapping = {k: v for k, v in labels.items()}
    out = out.with_columns(pl.col("_missing_roles").list.eval(pl.element().replace(mapping)).list.unique(maintain_order=True)
                           .alias("missing_counters"))
    return out.with_columns(
        pl.when(pl.col("archetype") == INSUFFICIENT).then(pl.concat_str([
            pl.lit("needs "), pl.col("missing_counters").list.join(", "),
            pl.lit("; provisionally "), pl.col("provisional")])).otherwise(pl.col("_ev")).alias("evidence"),
    ).drop("_ev", "_missing_roles")


class ArchetypeRules:
    """Rule-based archetype classifier (scikit-learn style: parameters in the constructor, fit/predict).

    ``machine``: roofs for the ridge point and the rank's DRAM share (default: the MareNostrum5 GPP preset);
    ``thresholds``: :class:`Thresholds`; ``ranks_per_socket``: ranks sharing a socket's DRAM bandwidth
    (None: one per core); ``counter_map``: names missing counters after the trace's own counters.
    """

    def __init__(self, machine: Machine | None = None, thresholds: Thresholds | None = None,
                 ranks_per_socket: float | None = None, counter_map: CounterMap | None = None):
        self.machine = machine
        self.thresholds = thresholds
        self.ranks_per_socket = ranks_per_socket
        self.counter_map = counter_map

    # sklearn protocol ---------------------------------------------------------
    def get_params(self, deep: bool = True) -> dict:
        return {"machine": self.machine, "thresholds": self.thresholds, "ranks_per_socket": self.ranks_per_socket,
                "counter_map": self.counter_map}

    def set_params(self, **params: object) -> ArchetypeRules:
        for k, v in params.items():
            setattr(self, k, v)
        return self

    def fit(self, X: pl.DataFrame | None = None, y: object = None) -> ArchetypeRules:
        """Rules need no training; resolves the machine, thresholds and ridge point (FLOP/byte)."""
        self.machine_ = self.machine or load_machine()
        self.thresholds_ = self.thresholds or Thresholds()
        share = self.machine_.dram_share(self.ranks_per_socket)
        self.ridge_ = self.thresholds_.ridge_flop_per_byte or self.machine_.ridge(share)
        labels = dict(ROLE_LABELS)
        if self.counter_map is not None:
            labels.update({r: self.counter_map.name(r) for r in self.counter_map.columns})
            if self.counter_map.has("dram_cas") or self.counter_map.has("l3_tcm"):
                labels["dram"] = self.counter_map.name("dram_cas" if self.counter_map.has("dram_cas") else "l3_tcm")
        self.role_labels_ = labels
        return self

    def _fitted(self) -> None:
        if not hasattr(self, "thresholds_"):
            self.fit()

    def predict(self, X: pl.DataFrame) -> pl.Series:
        """Archetype per burst of a burst-metrics frame."""
        return self.classify_bursts(X)["archetype"]

    # the three units ---------------------------------------------------------------------
    def classify_bursts(self, metrics: pl.DataFrame) -> pl.DataFrame:
        """Rules 1–9 on :func:`synthtrace.tracelib.metrics.burst_metrics` output."""
        self._fitted()
        return apply_rules(metrics, burst_rules(self.thresholds_, self.ridge_), role_labels=self.role_labels_)

    def classify_mpi(self, metrics: pl.DataFrame) -> pl.DataFrame:
        """Rules 10–11 on :func:`synthtrace.tracelib.metrics.mpi_metrics` output (calls that move data, and collectives)."""
        self._fitted()
        t = self.thresholds_
        units = metrics.filter((pl.col("bytes") >= t.mpi_min_bytes) | (pl.col("mpi_kind") == "collective"))
        return apply_rules(units, mpi_rules(t))

    def classify_phases(self, metrics: pl.DataFrame) -> pl.DataFrame:
        """Rules 12–13 on :func:`synthtrace.tracelib.metrics.phase_metrics` output; other phases are ``balanced``."""
        self._fitted()
        return apply_rules(metrics, phase_rules(self.thresholds_), fallback=BALANCED)


def ridge_point(machine: Machine, ranks_per_socket: float | None = None) -> float:
    """DRAM ridge point of one rank (FLOP/byte): core peak / the rank's DRAM bandwidth share."""
    return machine.ridge(machine.dram_share(ranks_per_socket))


def log2_margin(value: float, threshold: float) -> float:
    """Octaves between a value and a threshold (positive when value > threshold)."""
    if value <= 0 or threshold <= 0:
        return -_MARGIN_CAP if value <= 0 else _MARGIN_CAP
    return max(-_MARGIN_CAP, min(_MARGIN_CAP, math.log2(value / threshold)))


def _first_rule(rules: list[Rule], slow: Callable[[pl.DataFrame], pl.DataFrame]) -> Callable[[pl.DataFrame], pl.DataFrame]:
    """Label = the first rule that holds when every earlier one is decided false (the rules' own conditions, no
    evidence strings); the rows where a rule is undecided or none holds go through the full classifier ``slow``."""

    def classify(metrics: pl.DataFrame) -> pl.DataFrame:
        label = pl.when(pl.lit(False)).then(pl.lit(None, pl.String))
        for r in rules:
            h = r.condition.holds()
            label = label.when(h.is_null()).then(pl.lit(None, pl.String)).when(h).then(pl.lit(r.archetype))
        out = metrics.with_columns(label.otherwise(pl.lit(None, pl.String)).alias("archetype"))
        rest = out.filter(pl.col("archetype").is_null())
        if rest.height == 0:
            return out
        done = slow(rest.drop("archetype")).select("_row", pl.col("archetype").alias("_slow"))
        return out.join(done, on="_row", how="left", maintain_order="left").with_columns(pl.coalesce("archetype", "_slow").alias("archetype")).drop("_slow")

    return classify


def simulator_labeller(machine: Machine, ranks_per_socket: float) -> Labeller:
    """These rules as the simulator's ground-truth labeller (a :data:`~synthtrace.tracelib.simulator.engine.LabellerFactory`:
    ``ranks_per_socket`` is the simulated experiment's; it sets the DRAM share and the ridge point). Labels equal
    :class:`ArchetypeRules`' classifiers, decided per rule on whole columns first."""
    from synthtrace.tracelib.simulator.engine import Labeller  # noqa: PLC0415 - the simulator is heavy; only its users pay
    rules = ArchetypeRules(machine=machine, ranks_per_socket=ranks_per_socket).fit()
    t = rules.thresholds_
    per_burst = _first_rule(burst_rules(t, rules.ridge_), rules.classify_bursts)
    per_call = _first_rule(mpi_rules(t), rules.classify_mpi)

    def calls(metrics: pl.DataFrame) -> pl.DataFrame:
        # the calls ArchetypeRules.classify_mpi takes as units: those moving data, and collectives
        return per_call(metrics.filter((pl.col("bytes") >= t.mpi_min_bytes) | (pl.col("mpi_kind") == "collective")))

    return Labeller(bursts=per_burst, calls=calls, phases=rules.classify_phases)
