"""The 13 performance archetypes of DESIGN §7 as scored rules with configurable thresholds.

Bursts (rules 1–9), MPI calls (10–11) and phases (12–13) are classified from the metric frames of
:mod:`synthtrace.tracelib.domain.metrics`. Every rule is evaluated on every unit; the strongest *measured* evidence
wins,
so a rule whose counters were not recorded never hides the rules that can be decided.

Scoring (scale-free). A condition ``metric op threshold`` has a margin in octaves, log2(value / threshold) for
``>=`` and its negative for ``<`` (clipped to ±8): how far it clears its threshold. A rule's score is the
weakest margin of its measured conditions (``All``) or the strongest (``Any``). Each condition is a *key*
(it defines the archetype: IPC >= 1.5 for compute_scalar, branch mispredictions for bad_speculation) or a
*guard* (it only rules out a neighbour: L1 MPKI < 10 for core_bound, L3 MPKI < 1 for cache_bound, scalar code
for compute_scalar, OI >= ridge for compute_vector).

- A rule has **measured evidence** when its key conditions are measured and pass and no measured guard fails.
  The label is the rule with the highest score among those; confidence 0.5 + 0.5 x min(1, score).
- **could_also_be** lists the rules that are undecided (NULL under Kleene logic: a counter is missing) and could
  still beat the winner: their *potential* (score with every unmeasured condition at the cap) reaches the
  winner's score. ``missing_counters`` names the counters that would decide them (and the winner's unmeasured
  guards). The label is **provisional** then (``provisional`` repeats it; confidence 0.5 + 0.25 x min(1, score)).
- Without evidence, **insufficient_counters** when an undecided rule is supported by a measured key condition
  (e.g. FP share 0.5 but no vector counter: only the vector counter can say ``compute_vector``), or when no
  rule is decided at all (no counters); ``provisional`` is then the best-supported undecided rule.
- Otherwise every measured rule failed: the nearest one (largest, negative, score) with confidence below 0.5
  (phases: ``balanced``), provisional when undecided rules remain.

Memory rules: why their conditions and thresholds are what they are.

- Misses are not memory-boundness. Yasin's top-down method (ISPASS 2014) splits a core's issue slots into
  frontend bound, bad speculation, retiring and backend bound, backend into core and memory bound, and memory into
  L1/L2/L3/DRAM bound *by the cycles the core stalls* while a load misses at that level: a miss the out-of-order
  window or a prefetcher overlaps costs nothing. So ``dram_latency`` and ``cache_bound`` need the core **stalled**
  as well as the misses.
- Stalled: not retiring-dominated, IPC < ``memory_max_ipc`` (1.5: on a 4-issue core, Haswell to Skylake, Zen,
  A64FX, that is < ~40 % of the slots retiring, about 1.1 micro-ops an instruction; top-down flags a node from 20 %
  of the slots), **and** misses that can account for the lost cycles: each level's misses per instruction x its
  load-to-use latency, with no overlap (an upper bound of the stall), reach ``memory_min_miss_share`` (half) of
  the burst's cycles. A burst retiring >= 1.5 instructions a cycle is not memory-bound whatever its misses: real
  LULESH at IPC 2.7 with 3.5 L3 misses per kilo-instruction at 5 % of the bandwidth overlaps them. Where a stall
  counter is recorded (RESOURCE_STALLS, PAPI_RES_STL) its share of the cycles must reach
  ``memory_min_stall_share`` too: a core at IPC 0.3 whose back end is stalled 20 % of the cycles loses them in
  front of it (bad speculation, front end), not on its misses. ``core_bound`` is the complement at IPC < 1: the
  misses cannot account for half the cycles even without overlap, so the core itself (latency chains, a divider,
  ports) holds it.
- Which level the stalls come from: top-down measures it (CYCLE_ACTIVITY.STALLS_L*_MISS); from miss counts it is
  estimated as misses per instruction at each level x that level's load-to-use latency (L2 hit ~14 cycles, L3 hit
  ~40-70, DRAM ~80-100 ns = 200-300 cycles on Skylake-SP / Ice Lake: Intel's optimisation manual and published
  measurements). Memory-level parallelism divides every level alike to first order, so DRAM's *share* of those
  cycles is robust where the absolute stall is not: DRAM-bound needs >= ``dram_min_cost_share`` of them; below,
  the misses are served by the caches (``cache_bound``: e.g. 2mm at 114 L2 but 1.5 L3 misses per kilo-instruction
  spends ~94 % of its miss cycles on L3 hits). Without L1/L2 miss counts the share is unknown: the label stays
  provisional and names the counter.
- Bandwidth or latency: the roofline (Williams et al. 2009) and the cache-aware roofline (Ilic et al. 2014) put
  a burst on the bandwidth roof when its DRAM traffic reaches the attainable bandwidth; loaded-latency curves
  (Intel MLC) stay flat to ~60-70 % of the STREAM bandwidth and climb steeply beyond. From ``dram_bw_min_share``
  (0.6) of the rank's STREAM share the queue is the bottleneck: ``dram_bandwidth``, whose evidence is the
  measured traffic at the roof (no stall condition: Little's law makes a core at the roof wait). Below it, a
  stalled core with DRAM misses waits on latency: ``dram_latency``.
- Off the CPU: cycles / duration below ``off_cpu_max_clock_share`` of the nominal clock (under the lowest
  P-state of server parts, ~0.4 of nominal) means the thread was descheduled or blocked for most of the burst:
  its counters describe a fraction of its time, so it is not labelled from its rates as if it computed
  (``insufficient_counters``, its evidence says so and what the on-CPU part looks like).

>>> rules = ArchetypeRules(machine=load_machine(), thresholds=Thresholds())
>>> labelled = rules.fit(burst_metrics_frame).classify_bursts(burst_metrics_frame)
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, ClassVar
from pathlib import Path

import polars as pl
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from synthtrace.tracelib.domain.counters import PREFERRED, CounterMap
from synthtrace.tracelib.errors import BadInputError
from synthtrace.tracelib.domain.machine import Machine, load_machine
from synthtrace.tracelib.toml_file import read_toml

if TYPE_CHECKING:
    from synthtrace.simulator.engine import Labeller

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
    """Rule thresholds (DESIGN §7 starting values; the memory rules re-derived, see *Memory rules* in the module
    docstring). Units in the field names; shares are fractions."""

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
    core_max_br_mpki: float = 2.0
    cache_min_l1_mpki: float = 20.0
    cache_min_l2_mpki: float = 5.0
    cache_max_l3_mpki: float = 1.0  # with no L1/L2 misses measured: an L3 miss rate this low leaves the caches
    dram_min_l3_mpki: float = 1.0
    dram_bw_min_share: float = 0.6  # of the rank's share of socket DRAM bandwidth: near the bandwidth roof
    dram_lat_max_share: float = 0.6  # below the roof, a stalled core with DRAM misses waits on latency
    memory_max_ipc: float = 1.5  # not retiring-dominated: fewer instructions a cycle than this
    memory_min_miss_share: float = 0.5  # misses at full latency account for this share of the cycles or more
    memory_min_stall_share: float = 0.3  # stalled, where a stall counter is recorded: its share of the cycles
    dram_min_cost_share: float = 0.5  # DRAM's share of the estimated cycles lost to data-cache misses
    l2_hit_cycles: float = 14.0  # load-to-use latency of an L1 miss that hits L2 (core cycles)
    l3_hit_cycles: float = 50.0  # ... of an L2 miss that hits L3
    dram_cycles: float = 250.0  # ... of an L3 miss served by DRAM (~90 ns at 2.8 GHz)
    off_cpu_max_clock_share: float = 0.25  # cycles / duration below this share of the nominal clock: off the CPU
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
        data = read_toml(Path(path), ThresholdsError, "thresholds file")
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
            # every threshold is a duration, a count, a share, a rate or a size: finite and not negative
            if v is not None and not 0 <= v < math.inf:  # NaN compares false: refused too
                raise ThresholdsError(f"{where}: {k} = {v!r} must be a finite number, 0 or more")
        return cls(**data)

    def as_dict(self) -> dict:
        return asdict(self)


# ============================================================================ rule algebra
_MARGIN_CAP = 8.0  # octaves
_NONE = -1e9  # sentinel score of a rule that is not a candidate


class Node:
    """A condition tree over metric columns, evaluated with Kleene logic (NULL = undecided)."""

    def holds(self) -> pl.Expr: ...
    def holds_keys(self) -> pl.Expr: ...  # as holds(), an unmeasured guard counting as passed
    def key_support(self) -> pl.Expr: ...  # some measured key condition of the tree holds
    def score(self) -> pl.Expr: ...  # margin (octaves) over the measured conditions; NULL if none is measured
    def potential(self) -> pl.Expr: ...  # the highest margin the rule could reach once everything is measured
    def evidence(self) -> list[pl.Expr]: ...
    def roles(self) -> list[str]: ...
    def conds(self) -> list[Cond]: ...  # the leaf conditions


@dataclass
class Cond(Node):
    """``metric op threshold`` with op ``<`` or ``>=``; ``needs`` are the counter roles the metric comes from.

    A ``key`` condition is what defines the archetype (it must be measured for the rule to have evidence); a
    guard (``key=False``) only excludes another archetype: unmeasured, it leaves the label provisional.
    """

    metric: str
    op: str
    threshold: float
    needs: tuple[str, ...] = ()
    scale: float = 1.0  # metric is shown and compared as metric x scale (e.g. seconds -> µs)
    key: bool = True
    expr: pl.Expr | None = None  # how the metric is computed from the frame's columns (None: the column ``metric``)

    def _x(self) -> pl.Expr:
        return (pl.col(self.metric) if self.expr is None else self.expr).cast(pl.Float64) * self.scale

    def holds(self) -> pl.Expr:
        return self._x() < self.threshold if self.op == "<" else self._x() >= self.threshold

    def holds_keys(self) -> pl.Expr:
        return self.holds() if self.key else self.holds().fill_null(True)

    def key_support(self) -> pl.Expr:
        return self.holds().fill_null(False) if self.key else pl.lit(False)

    def score(self) -> pl.Expr:
        x, t = self._x(), self.threshold
        if t <= 0:
            return pl.when(x.is_not_null()).then(pl.when(self.holds()).then(_MARGIN_CAP).otherwise(-_MARGIN_CAP))
        ratio = pl.when(x > 0).then((x / t).log(2)).otherwise(pl.when(x.is_not_null()).then(-_MARGIN_CAP))
        m = ratio if self.op == ">=" else -ratio
        return m.clip(-_MARGIN_CAP, _MARGIN_CAP)

    def potential(self) -> pl.Expr:
        return self.score().fill_null(_MARGIN_CAP)

    def evidence(self) -> list[pl.Expr]:
        value = self._x().round_sig_figs(3).cast(pl.String).fill_null("NA")
        return [pl.concat_str([pl.lit(f"{self.metric}="), value, pl.lit(f" ({self.op} {self.threshold:g})")])]

    def roles(self) -> list[str]:
        return list(self.needs)

    def conds(self) -> list[Cond]:
        return [self]


@dataclass
class IfMeasured(Node):
    """A condition that counts only where its counters were recorded: unmeasured, it passes and is not asked for
    (a stall counter confirms what IPC says; its absence leaves IPC to decide)."""

    part: Cond

    def holds(self) -> pl.Expr:
        return self.part.holds().fill_null(True)

    def holds_keys(self) -> pl.Expr:
        return self.holds()

    def key_support(self) -> pl.Expr:
        return pl.lit(False)

    def score(self) -> pl.Expr:
        return self.part.score()

    def potential(self) -> pl.Expr:
        return self.part.score()

    def evidence(self) -> list[pl.Expr]:
        return [pl.concat_str([e, pl.lit(" if measured")]) for e in self.part.evidence()]

    def roles(self) -> list[str]:
        return []

    def conds(self) -> list[Cond]:
        return [self.part]


@dataclass
class All(Node):
    """Every part holds; the score is the weakest part's."""

    parts: tuple[Node, ...]
    combine: ClassVar[Callable[..., pl.Expr]] = staticmethod(pl.all_horizontal)  # of the parts' truth values
    pick: ClassVar[Callable[..., pl.Expr]] = staticmethod(pl.min_horizontal)  # of their margins; NULLs skipped

    def holds(self) -> pl.Expr:
        return self.combine(*[p.holds() for p in self.parts])

    def holds_keys(self) -> pl.Expr:
        return self.combine(*[p.holds_keys() for p in self.parts])

    def key_support(self) -> pl.Expr:
        return pl.any_horizontal(*[p.key_support() for p in self.parts])

    def score(self) -> pl.Expr:
        return self.pick(*[p.score() for p in self.parts])  # NULLs (unmeasured) are skipped

    def potential(self) -> pl.Expr:
        return self.pick(*[p.potential() for p in self.parts])

    def evidence(self) -> list[pl.Expr]:
        return [e for p in self.parts for e in p.evidence()]

    def roles(self) -> list[str]:
        return list(dict.fromkeys(r for p in self.parts for r in p.roles()))

    def conds(self) -> list[Cond]:
        return [c for p in self.parts for c in p.conds()]


@dataclass
class Any(All):
    """Some part holds; the score is the best part's."""

    combine: ClassVar[Callable[..., pl.Expr]] = staticmethod(pl.any_horizontal)
    pick: ClassVar[Callable[..., pl.Expr]] = staticmethod(pl.max_horizontal)


@dataclass
class Rule:
    number: int
    archetype: str
    condition: Node
    decisive: bool = False  # wins whenever it has evidence (a unit too small for its rates to mean anything)


def burst_rules(t: Thresholds, ridge: float) -> list[Rule]:
    """Rules 1–9 over :func:`synthtrace.tracelib.domain.metrics.burst_metrics` columns (``key=False``: guards)."""
    ipc = ("ins", "cyc")
    # memory rules need a stalled core (module docstring, *Memory rules*): IPC, and a stall counter where recorded
    shares = MissCycles(t)
    stalled = (Cond("ipc", "<", t.memory_max_ipc, ipc),
               Cond("miss_share", ">=", t.memory_min_miss_share, ("ins", "cyc", "l1_dcm", "l2_dcm", "l3_tcm"),
                    expr=shares.enough),
               IfMeasured(Cond("stall_share", ">=", t.memory_min_stall_share, ("stall_cyc", "cyc"))))
    dram_cost = shares.dram_share
    return [
        Rule(
            1,
            "fine_grain",
            Any(
                (
                    Cond("duration_s", "<", t.fine_grain_max_us, (), 1e6),
                    Cond("instructions", "<", t.fine_grain_min_instructions, ("ins",)),
                )
            ),
            decisive=True,
        ),
        Rule(
            2,
            "compute_vector",
            All(
                (
                    Cond("fp_share", ">=", t.vector_min_fp_share, ("ins", "fp_ins")),
                    Cond("vec_share", ">=", t.vector_min_vec_share, ("fp_ins", "vec_ins")),
                    Cond("oi_dram", ">=", t.vector_min_oi_over_ridge, ("flops", "dram"), 1.0 / ridge, key=False),
                )
            ),
        ),
        Rule(
            3,
            "compute_scalar",
            All(
                (
                    Cond("ipc", ">=", t.scalar_min_ipc, ipc),
                    # at the DRAM roof the bandwidth sets the pace, however many instructions retire a cycle
                    Cond("dram_bw_share", "<", t.dram_bw_min_share, ("dram",), key=False),
                    Any(
                        (
                            Cond("vec_share", "<", t.scalar_max_vec_share, ("fp_ins", "vec_ins"), key=False),
                            Cond("fp_share", "<", t.integer_max_fp_share, ("ins", "fp_ins"), key=False),
                        )
                    ),
                )
            ),
        ),
        Rule(
            4,
            "core_bound",
            All(
                (
                    Cond("ipc", "<", t.core_max_ipc, ipc),
                    # the misses cannot account for the lost cycles, even without any overlap
                    Cond("miss_share", "<", t.memory_min_miss_share, ("ins", "cyc", "l3_tcm"), expr=shares.dram_known),
                    Cond("cache_miss_share", "<", t.memory_min_miss_share, ("ins", "cyc", "l1_dcm", "l2_dcm"),
                         key=False, expr=shares.caches),
                    Cond("br_mpki", "<", t.core_max_br_mpki, ("ins", "br_msp"), key=False),
                )
            ),
        ),
        Rule(
            5,
            "cache_bound",
            All(
                (
                    Any(
                        (
                            Cond("l1_mpki", ">=", t.cache_min_l1_mpki, ("ins", "l1_dcm")),
                            Cond("l2_mpki", ">=", t.cache_min_l2_mpki, ("ins", "l2_dcm")),
                        )
                    ),
                    *stalled,
                    Any(
                        (
                            Cond("l3_mpki", "<", t.cache_max_l3_mpki, ("ins", "l3_tcm"), key=False),
                            Cond("dram_cost_share", "<", t.dram_min_cost_share, ("ins", "l3_tcm", "l2_dcm"),
                                 key=False, expr=dram_cost),
                        )
                    ),
                )
            ),
        ),
        Rule(
            6,
            "dram_bandwidth",
            All(
                (
                    Cond("l3_mpki", ">=", t.dram_min_l3_mpki, ("ins", "l3_tcm")),
                    Cond("dram_bw_share", ">=", t.dram_bw_min_share, ("dram",)),
                )
            ),
        ),
        Rule(
            7,
            "dram_latency",
            All(
                (
                    Cond("l3_mpki", ">=", t.dram_min_l3_mpki, ("ins", "l3_tcm")),
                    *stalled,
                    Cond("dram_bw_share", "<", t.dram_lat_max_share, ("dram",), key=False),
                    Cond("dram_cost_share", ">=", t.dram_min_cost_share, ("ins", "l3_tcm", "l2_dcm"), key=False,
                         expr=dram_cost),
                )
            ),
        ),
        Rule(
            8,
            "frontend_bound",
            Any(
                (
                    Cond("icache_mpki", ">=", t.frontend_min_mpki, ("ins", "l1_icm")),
                    Cond("itlb_mpki", ">=", t.frontend_min_mpki, ("ins", "itlb_miss")),
                )
            ),
        ),
        Rule(
            9,
            "bad_speculation",
            Any(
                (
                    Cond("br_misp_rate", ">=", t.badspec_min_rate, ("br_ins", "br_msp")),
                    Cond("br_mpki", ">=", t.badspec_min_mpki, ("ins", "br_msp")),
                )
            ),
        ),
    ]


class MissCycles:
    """The cycles a burst's data-cache misses would cost at full latency (no overlap: an upper bound of the stall),
    each level's misses per instruction x its load-to-use latency (module docstring, *Memory rules*): L3 misses x
    DRAM latency, L2 misses that hit L3 x L3 latency, L1 misses that hit L2 x L2 latency. Shares are of the
    burst's cycles (x IPC / 1000) or of each other."""

    def __init__(self, t: Thresholds):
        l1, l2, l3 = (pl.col(c).cast(pl.Float64) for c in ("l1_mpki", "l2_mpki", "l3_mpki"))
        ipc = pl.col("ipc").cast(pl.Float64)
        self.dram = l3 * t.dram_cycles
        l3_hits = (l2 - l3).clip(lower_bound=0.0) * t.l3_hit_cycles
        l2_hits = (l1 - pl.coalesce(l2, l3)).clip(lower_bound=0.0) * t.l2_hit_cycles
        any_level = l1.is_not_null() | l2.is_not_null() | l3.is_not_null()
        #: cycles of the cache levels (L2 and L3 hits) per 1000 instructions; NULL without L1 and L2 misses
        self.cache = pl.when(l2.is_not_null() | l1.is_not_null()).then(pl.sum_horizontal(l3_hits, l2_hits))
        total = pl.when(any_level).then(pl.sum_horizontal(self.dram, l3_hits, l2_hits))
        #: share of the cycles the measured misses would take (a lower bound where a level is not measured)
        self.measured = total * ipc / 1000.0
        complete = l1.is_not_null() & l2.is_not_null() & l3.is_not_null()
        #: misses account for enough of the cycles: decided when every level is measured or the measured ones
        #: already suffice; NULL (undecided) while an unmeasured level could still tip it
        self.enough = pl.when(complete | (self.measured >= t.memory_min_miss_share)).then(self.measured)
        #: as :attr:`measured`, NULL without L3 misses (the costliest level must be known to rule misses out)
        self.dram_known = pl.when(l3.is_not_null()).then(self.measured)
        #: share of the cycles the L2 and L3 hits would take; NULL unless both L1 and L2 misses are measured
        self.caches = pl.when(l1.is_not_null() & l2.is_not_null()).then(self.cache * ipc / 1000.0)
        #: DRAM's share of the miss cycles; NULL without L3 misses, or without both L1 and L2 misses
        self.dram_share = pl.when(self.dram + self.cache > 0).then(self.dram / (self.dram + self.cache))


def mpi_rules(t: Thresholds) -> list[Rule]:
    """Rules 10–11 over :func:`synthtrace.tracelib.domain.metrics.mpi_metrics` columns."""
    return [
        Rule(10, "comm_latency", All((Cond("mean_message_bytes", "<", t.latency_max_message_bytes),
                                      Cond("link_fraction", "<", t.latency_max_link_fraction)))),
        Rule(11, "comm_bandwidth", All((Cond("mean_message_bytes", ">=", t.bandwidth_min_message_bytes),
                                        Cond("link_fraction", ">=", t.bandwidth_min_link_fraction)))),
    ]


def phase_rules(t: Thresholds) -> list[Rule]:
    """Rules 12–13 over :func:`synthtrace.tracelib.domain.metrics.phase_metrics` columns."""
    return [
        Rule(12, "load_imbalance", Cond("load_balance", "<", t.imbalance_max_load_balance)),
        Rule(13, "serialization", All((Cond("load_balance", ">=", t.imbalance_max_load_balance),
                                       Cond("comm_efficiency", "<", t.serial_max_comm_efficiency),
                                       Cond("serialization_efficiency", "<", t.serial_max_serialization_efficiency)))),
    ]


def _evidence(rule: Rule, prefix: str = "") -> pl.Expr:
    return pl.concat_str([pl.lit(f"{prefix}rule {rule.number} {rule.archetype}: "),
                          pl.concat_str(rule.condition.evidence(), separator="; ")])


def _pick(values: list[pl.Expr], index: pl.Expr) -> pl.Expr:
    """``values[index]`` per row for a row-wise ``index`` expression."""
    out = pl.lit(None, dtype=None)
    for i, v in reversed(list(enumerate(values))):
        out = pl.when(index == i).then(v).otherwise(out)
    return out


#: columns :func:`decide` adds (``_alt_<i>`` per rule besides): the case (0 a rule has measured evidence,
#: 1 ``insufficient_counters``, 2 no rule fired), the rule labelled or guessed, its score (octaves), and whether
#: that rule is itself undecided (an unmeasured guard)
DECISION_COLUMNS = ("_case", "_index", "_score", "_open")


def decide(frame: pl.DataFrame, rules: list[Rule]) -> pl.DataFrame:
    """``frame`` with the evidence-scored decision of ``rules`` (see the module docstring) in
    :data:`DECISION_COLUMNS` and ``_alt_<i>`` (rule i is listed in ``could_also_be``).

    Rules marked ``decisive`` (fine_grain: a burst too short for its rates to mean anything) win whenever
    they have evidence."""
    n = len(rules)
    absent = sorted({c.metric for r in rules for c in r.condition.conds() if c.expr is None} - set(frame.columns))
    frame = frame.with_columns(pl.lit(None, pl.Float64).alias(m) for m in absent)  # not measured at all
    per_rule = []
    for i, r in enumerate(rules):
        per_rule += [r.condition.holds().alias(f"_h{i}"), r.condition.holds_keys().fill_null(False).alias(f"_e{i}"),
                     r.condition.score().alias(f"_s{i}"), r.condition.potential().alias(f"_p{i}"),
                     r.condition.key_support().alias(f"_k{i}")]
    out = frame.with_columns(per_rule)
    h, e, s = ([pl.col(f"_{x}{i}") for i in range(n)] for x in "hes")
    und = [x.is_null() for x in h]
    sup = [u & pl.col(f"_k{i}") for i, u in enumerate(und)]
    boost = [2 * _MARGIN_CAP if r.decisive else 0.0 for r in rules]
    ev_list = pl.concat_list([pl.when(ei).then(si + b).otherwise(_NONE) for ei, si, b in zip(e, s, boost)])
    guess_list = pl.concat_list([pl.when(k).then(si).otherwise(_NONE) for k, si in zip(sup, s)])
    near_list = pl.concat_list([pl.when(hi.is_not_null()).then(si).otherwise(_NONE) for hi, si in zip(h, s)])
    has_ev, any_sup = pl.any_horizontal(e), pl.any_horizontal(sup)
    any_dec = pl.any_horizontal([x.is_not_null() for x in h])
    out = out.with_columns(
        pl.when(has_ev).then(0).when(any_sup | ~any_dec).then(1).otherwise(2).alias("_case"),
        pl.when(has_ev).then(ev_list.list.arg_max()).when(any_sup).then(guess_list.list.arg_max())
        .when(any_dec).then(near_list.list.arg_max()).alias("_index"))
    idx = pl.col("_index")
    out = out.with_columns(_pick(s, idx).alias("_score"), _pick(und, idx).fill_null(False).alias("_open"))
    decisive = _pick([pl.lit(r.decisive) for r in rules], idx).fill_null(False) & (pl.col("_case") == 0)
    alts = [
        u & (idx != i).fill_null(True) & ~decisive & ((pl.col("_case") == 1) | (pl.col(f"_p{i}") >= pl.col("_score")))
        for i, u in enumerate(und)
    ]
    return out.with_columns(a.alias(f"_alt{i}") for i, a in enumerate(alts)).drop(
        *[f"_{x}{i}" for i in range(n) for x in "hespk"], *absent)


def _label(rules: list[Rule], fallback: str | None) -> pl.Expr:
    """The label from :func:`decide`'s columns."""
    names = pl.lit([r.archetype for r in rules], dtype=pl.List(pl.String))
    label = names.list.get(pl.col("_index").fill_null(0), null_on_oob=True)
    if fallback is not None:
        label = pl.when(pl.col("_case") == 2).then(pl.lit(fallback)).otherwise(label)
    return pl.when(pl.col("_case") == 1).then(pl.lit(INSUFFICIENT)).otherwise(label)


def _drop_decision(frame: pl.DataFrame, rules: list[Rule]) -> pl.DataFrame:
    return frame.drop(*DECISION_COLUMNS, *[f"_alt{i}" for i in range(len(rules))])


def rule_labels(frame: pl.DataFrame, rules: list[Rule], fallback: str | None = None) -> pl.DataFrame:
    """``frame`` with the label alone in ``archetype`` (no evidence text): what :func:`apply_rules` decides."""
    return _drop_decision(decide(frame, rules).with_columns(_label(rules, fallback).alias("archetype")), rules)


def apply_rules(frame: pl.DataFrame, rules: list[Rule], *, fallback: str | None = None,
                role_labels: dict[str, str] | None = None) -> pl.DataFrame:
    """Evaluate ``rules`` on ``frame`` by measured evidence; adds archetype, confidence, evidence, could_also_be,
    missing_counters, provisional (see the module docstring).

    ``fallback``: label when every rule is decided false (None: the rule with the largest margin).
    ``frame`` needs ``missing_roles`` (List[str]) to name missing counters; without it none are named.
    """
    labels = role_labels or ROLE_LABELS
    names = [r.archetype for r in rules]
    case, idx, score, is_open = (pl.col(c) for c in DECISION_COLUMNS)
    alts = [pl.col(f"_alt{i}") for i in range(len(rules))]
    out = decide(frame, rules).with_columns(
        _label(rules, fallback).alias("archetype"),
        pl.concat_list([pl.when(a).then(pl.lit(n)) for a, n in zip(alts, names)])
        .list.drop_nulls()
        .alias("could_also_be"),
        _pick([_evidence(r) for r in rules], idx).alias("_ev"),
    )
    provisional = (case != 1) & (is_open | (pl.col("could_also_be").list.len() > 0))
    best = score.clip(upper_bound=1.0)
    conf = (pl.when(case == 1).then(0.0).when((case == 0) & ~provisional).then(0.5 + 0.5 * best)
            .when(case == 0).then(0.5 + 0.25 * best)
            .otherwise(0.5 + 0.5 * (-score).clip(0.0, 1.0) if fallback is not None
                       else 0.4 * (1.0 + score.clip(-1.0, 0.0))))
    if "missing_roles" in frame.columns:
        parts = [
            pl.when(a | ((idx == i) & is_open))
            .then(pl.col("missing_roles").list.set_intersection(pl.lit(r.condition.roles(), dtype=pl.List(pl.String))))
            .otherwise(pl.lit([], dtype=pl.List(pl.String)))
            for i, (a, r) in enumerate(zip(alts, rules))
        ]
        missing = pl.concat_list(parts).list.unique(maintain_order=True)
        # FLOPs follow from FP and vector instruction counts, DRAM bytes from LLC misses: when those are asked
        # for, do not also ask for FLOPs or DRAM bytes
        for parts_of, derived in ((["fp_ins", "vec_ins"], "flops"), (["l3_tcm"], "dram")):
            missing = (
                pl.when(missing.list.set_intersection(pl.lit(parts_of, dtype=pl.List(pl.String))).list.len() >= 1)
                .then(missing.list.set_difference(pl.lit([derived], dtype=pl.List(pl.String))))
                .otherwise(missing)
            )
    else:
        missing = pl.lit([], dtype=pl.List(pl.String))
    guess = pl.lit(names, dtype=pl.List(pl.String)).list.get(idx.fill_null(0), null_on_oob=True)
    out = out.with_columns(
        conf.alias("confidence"),
        pl.when(case == 1)
        .then(pl.when(idx.is_not_null()).then(guess))
        .when(provisional)
        .then(pl.col("archetype"))
        .alias("provisional"),
        missing.list.eval(pl.element().replace(labels)).list.unique(maintain_order=True).alias("missing_counters"),
        pl.when(case == 2)
        .then(
            pl.concat_str(
                [pl.lit(f"{fallback}: " if fallback else ""), pl.lit("no rule fired; nearest "), pl.col("_ev")]
            )
        )
        .otherwise(pl.col("_ev"))
        .alias("_ev"),
    )
    needs = pl.concat_str([pl.lit("needs "), pl.col("missing_counters").list.join(", ")])
    return _drop_decision(out.with_columns(
        pl.when(pl.col("archetype") == INSUFFICIENT).then(pl.concat_str([
            needs, pl.lit("; provisionally "), pl.col("provisional").fill_null("unknown")]))
        .when(pl.col("could_also_be").list.len() > 0).then(pl.concat_str([
            pl.col("_ev"), pl.lit("; provisional: could also be "), pl.col("could_also_be").list.join(", "),
            pl.lit(" ("), needs, pl.lit(")")]))
        .when(pl.col("provisional").is_not_null()).then(pl.concat_str([pl.col("_ev"), pl.lit("; provisional ("), needs,
                                                                       pl.lit(")")]))
        .otherwise(pl.col("_ev")).alias("evidence"),
    ).drop("_ev"), rules)


class ArchetypeRules(BaseEstimator):
    """Rule-based archetype classifier (a scikit-learn estimator: parameters in the constructor, fit/predict).

    ``machine``: roofs for the ridge point and the rank's DRAM share (default: the MareNostrum5 GPP preset);
    ``thresholds``: :class:`Thresholds`; ``ranks_per_socket``: ranks sharing a socket's DRAM bandwidth
    (None: one per core); ``counter_map``: names missing counters after the trace's own counters.
    Classifying before :meth:`fit` raises :class:`~sklearn.exceptions.NotFittedError`.
    """

    def __init__(self, machine: Machine | None = None, thresholds: Thresholds | None = None,
                 ranks_per_socket: float | None = None, counter_map: CounterMap | None = None):
        self.machine = machine
        self.thresholds = thresholds
        self.ranks_per_socket = ranks_per_socket
        self.counter_map = counter_map

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

    def predict(self, X: pl.DataFrame) -> pl.Series:
        """Archetype per burst of a burst-metrics frame."""
        return self.classify_bursts(X)["archetype"]

    # the three units ---------------------------------------------------------------------
    def classify_bursts(self, metrics: pl.DataFrame) -> pl.DataFrame:
        """Rules 1–9 on :func:`synthtrace.tracelib.domain.metrics.burst_metrics` output."""
        check_is_fitted(self)
        labelled = apply_rules(metrics, burst_rules(self.thresholds_, self.ridge_), role_labels=self.role_labels_)
        return self._off_cpu(labelled) if "ghz" in labelled.columns else labelled

    def _off_cpu(self, labelled: pl.DataFrame) -> pl.DataFrame:
        """Bursts mostly off the CPU (cycles / duration under ``off_cpu_max_clock_share`` of the nominal clock) and
        not fine_grain: ``insufficient_counters`` with no guess, the evidence saying so (module docstring)."""
        nominal = self.machine_.frequency_ghz
        share = pl.col("ghz").cast(pl.Float64) / nominal
        off = ((share < self.thresholds_.off_cpu_max_clock_share) & (pl.col("archetype") != "fine_grain")).fill_null(
            False)
        evidence = pl.concat_str([
            pl.lit("off the CPU: cycles / duration "), pl.col("ghz").round_sig_figs(2).cast(pl.String),
            pl.lit(" GHz, "), (share * 100).round_sig_figs(2).cast(pl.String),
            pl.lit(f" % of the nominal {nominal:g} GHz: the thread ran for about that share of the burst, so its "
                   "counter rates do not say where its time went; while on the CPU: "), pl.col("evidence")])
        return labelled.with_columns(
            pl.when(off).then(pl.lit(INSUFFICIENT)).otherwise(pl.col("archetype")).alias("archetype"),
            pl.when(off).then(0.0).otherwise(pl.col("confidence")).alias("confidence"),
            pl.when(off).then(evidence).otherwise(pl.col("evidence")).alias("evidence"),
            pl.when(off).then(pl.lit(None, pl.String)).otherwise(pl.col("provisional")).alias("provisional"),
            pl.when(off).then(pl.lit([], pl.List(pl.String))).otherwise(pl.col("could_also_be")).alias("could_also_be"))

    def classify_mpi(self, metrics: pl.DataFrame) -> pl.DataFrame:
        """Rules 10–11 on :func:`synthtrace.tracelib.domain.metrics.mpi_metrics` output (calls that move data, and
        collectives)."""
        check_is_fitted(self)
        return apply_rules(self.mpi_units(metrics), mpi_rules(self.thresholds_))

    def mpi_units(self, metrics: pl.DataFrame) -> pl.DataFrame:
        """The MPI calls the rules classify: those that move data, and collectives."""
        check_is_fitted(self)
        return metrics.filter(
            (pl.col("bytes") >= self.thresholds_.mpi_min_bytes) | (pl.col("mpi_kind") == "collective")
        )

    def classify_phases(self, metrics: pl.DataFrame) -> pl.DataFrame:
        """Rules 12–13 on :func:`synthtrace.tracelib.domain.metrics.phase_metrics` output; other phases are
        ``balanced``."""
        check_is_fitted(self)
        return apply_rules(metrics, phase_rules(self.thresholds_), fallback=BALANCED)


def ridge_point(machine: Machine, ranks_per_socket: float | None = None) -> float:
    """DRAM ridge point of one rank (FLOP/byte): core peak / the rank's DRAM bandwidth share."""
    return machine.ridge(machine.dram_share(ranks_per_socket))


def simulator_labeller(machine: Machine, ranks_per_socket: float) -> Labeller:
    """These rules as the simulator's ground-truth labeller (a :data:`~synthtrace.simulator.engine.LabellerFactory`:
    ``ranks_per_socket`` is the simulated experiment's; it sets the DRAM share and the ridge point). Labels equal
    :class:`ArchetypeRules`' classifiers (:func:`rule_labels`, without the evidence text)."""
    from synthtrace.simulator.engine import Labeller
    rules = ArchetypeRules(machine=machine, ranks_per_socket=ranks_per_socket).fit()
    t = rules.thresholds_
    bursts, calls, phases = burst_rules(t, rules.ridge_), mpi_rules(t), phase_rules(t)
    return Labeller(bursts=lambda m: rule_labels(m, bursts), calls=lambda m: rule_labels(rules.mpi_units(m), calls),
                    phases=lambda m: rule_labels(m, phases, BALANCED))
