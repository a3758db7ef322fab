"""How a counter moves from a source run's matched bursts to the reference run's bursts (DESIGN §6).

A **plan** says how the value of a counter recorded by the source run becomes the value of the reference burst:

- ``verbatim``: the matched burst's value as recorded;
- ``per_ins``: its per-instruction rate times the reference burst's instructions, i.e. the value scaled by the
  work ratio ``work_ref / work_src`` of the pair (work: PAPI_TOT_INS or another instruction counter both runs
  recorded). Where matched bursts did different work (dynamic load balancing, a burst that ran more iterations
  of an inner loop) the rate follows the code and the value follows the work; where they did the same work the
  ratio is 1 and nothing changes;
- ``rescaled``: also the rate of a co-varying reference counter ``r`` (e.g. cycles for reference cycles): the
  value times ``work_ratio ** (1 - b) * r_ratio ** b``, with ``r`` and the exponent ``b`` chosen on the source
  run's own bursts by :func:`rescale_counter` (rates that co-vary at one code position, iteration after
  iteration, co-vary between runs: clock, contention, OS noise). Ratios are clipped to ``RATIO_CLIP``;
- ``per_ns``: for a counter that counts time (cycles, reference cycles: :data:`TIME_ROLES`), its rate per ns times
  the reference burst's duration. Such a counter follows the run's clock and placement (ranks a few percent faster
  or slower in each run), which the reference burst's own duration carries and the other run's value does not.
  Reference cycles tick at the nominal clock, so they follow the duration wherever the core runs; core cycles
  follow it times the core's clock (turbo, DVFS: per node and run), which no duration carries.

**Choice (leave-one-out).** Each counter both runs recorded is transferred as an unknown counter would be, under
each plan, and compared with what the reference run recorded (median relative error over matched bursts of at
least ``min_duration_ns``). ``per_ins`` is used when its error is no worse than ``verbatim``'s; co-variation
rescaling is used where it is no worse than that, never where no common counter can test it (e.g. only
instructions and cycles in common: the source run's own co-variation alone cannot tell a clock from a difference
in code). A count of time goes ``per_ns`` where that, tested on the common counts of time that carry its clock
(core cycles test any; reference cycles only reference cycles), is no worse than the kind chosen for the other
counters; where no common count of time tests it, ``per_ns`` untested (merge_quality: "unverified"). A choice a
test rejected is never replaced by an untested one. Co-variations are measured on bursts of at least
``min_duration_ns``: glue bursts between back-to-back calls run other code than the compute bursts the same call
closes (mergeattack22 N4). ``--rescale`` forces rescaling, ``--no-rescale`` forbids it and ``per_ns``.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from synthtrace.tracelib.domain.counters import canonical
from synthtrace.tracelib.merge.blocks import frame_of
from synthtrace.tracelib.merge.noise import long_pairs, typical

RATIO_CLIP = (0.25, 4.0)
WORK_COUNTERS = ("PAPI_TOT_INS", "INST_RETIRED:ANY", "INST_RETIRED:ANY_P", "INST_RETIRED")  # instructions first
CHOICE_SAMPLE = 100_000  # bursts looked at to choose a rescaling counter
MIN_COVARY_ROWS = 20  # bursts with every counter compared that a co-variation is measured on (else none is)
AUTO_RESCALE = (0.95, 1.0, False)  # (min correlation, max exponent, clip) of rescaling chosen by default
WORK_NOISE = 5.0  # work ratios within this many times the median |log ratio| of the pairs count as noise,
WORK_TOL_MAX = math.log(1.02)  # ... but never beyond 2 %: instruction counts of the same code repeat closer than that
#: the counter roles (tracelib.domain.counters) that count time while a burst runs: transferred per ns
TIME_ROLES = ("cyc", "ref_cyc")
DURATION = "duration_ns"


@dataclass(frozen=True)
class Plan:
    """How one counter is transferred: scaled by the work ratio (``work``), and by ``rescale_by ** exponent``."""

    work: str | None = None
    rescale_by: str | None = None
    exponent: float = 0.0
    work_tol: float = 0.0  # work ratios within exp(+-work_tol) are run-to-run noise of the counter: taken as 1
    per_ns: bool = False  # scaled by the duration ratio instead (a counter that counts time)

    @property
    def method(self) -> str:
        """``transferred``, ``transferred_per_ins``, ``transferred_rescaled`` or ``transferred_per_ns``
        (merge_quality's ``method``)."""
        if self.per_ns:
            return "transferred_per_ns"
        return "transferred_rescaled" if self.rescale_by else "transferred_per_ins" if self.work else "transferred"

    @property
    def reads(self) -> tuple[str, ...]:
        """The columns besides the counter that the plan reads of both runs' bursts."""
        return (DURATION,) if self.per_ns else tuple(c for c in (self.work, self.rescale_by) if c)

    @property
    def label(self) -> str | None:
        """``rescaled_by`` of merge_quality: e.g. ``PAPI_TOT_INS x PAPI_TOT_CYC^0.93``, ``duration_ns``, None for
        verbatim."""
        if self.per_ns:
            return DURATION
        parts = ([f"{self.work}^{1 - self.exponent:.2f}" if self.rescale_by else self.work] if self.work else []) + (
            [f"{self.rescale_by}^{self.exponent:.2f}"] if self.rescale_by else [])
        return " x ".join(parts) or None


def counts_time(counter: str) -> bool:
    """Whether ``counter`` counts time while a burst runs (cycles, reference cycles: :data:`TIME_ROLES`)."""
    return canonical(counter) in TIME_ROLES


def work_counter(common: Sequence[str]) -> str | None:
    """The instruction counter both runs recorded (None when there is none)."""
    return next((c for c in WORK_COUNTERS if c in common), None)


def _best_correlated(bursts: pl.DataFrame, target: str, candidates: Sequence[str]) -> str | None:
    """The candidate counter whose log1p values correlate best with ``target`` in ``bursts`` (None if none)."""
    cands = [c for c in candidates if c != target]
    if not cands:
        return None
    logs = bursts.select(pl.col(target).cast(pl.Float64).log1p().alias("_t"),
                         *[pl.col(c).cast(pl.Float64).log1p().alias(f"_{i}") for i, c in enumerate(cands)]).drop_nulls()
    if logs.height < 3:
        return cands[0]
    cor = logs.select(pl.corr("_t", f"_{i}").fill_nan(None).alias(f"_{i}") for i in range(len(cands))).row(0)
    scored = [(-(v if v is not None else -2.0), i) for i, v in enumerate(cor)]
    return cands[min(scored)[1]]


def rescale_counter(bursts: pl.DataFrame, target: str, candidates: Sequence[str],
                    min_corr: float = 0.5, max_exponent: float = 1.5, clip: bool = True,
                    min_duration_ns: int = 0) -> tuple[str, float] | None:
    """The reference counter to rescale ``target`` by, and the exponent, chosen on the source run's own bursts.

    Bursts closed by the same call on the same thread (the same code position, iteration after iteration) vary
    only by what varies between runs too: clock, contention, OS noise; bursts shorter than ``min_duration_ns`` (glue
    between back-to-back calls: other code at the same position, whose rates differ by code) are left out. Within
    such groups, the per-instruction rates ``log(target / work)`` and ``log(candidate / work)`` (work: instructions
    when recorded by both runs, else the candidate whose log values correlate best with the target) are compared;
    the candidate whose rate
    co-varies best with the target's, if the correlation reaches ``min_corr``, is returned with the regression
    slope (clipped to [0, ``max_exponent``]; with ``clip`` False a slope beyond it gives None: the counter varies
    more than its partner, by a part of its own that rescaling would amplify) as exponent. None when nothing
    co-varies.
    """
    if min_duration_ns and DURATION in bursts.columns:
        bursts = bursts.filter(pl.col(DURATION) >= min_duration_ns)
    if bursts.height > CHOICE_SAMPLE:  # a choice, not an estimate: a regular sample of bursts is plenty
        bursts = bursts.gather_every(bursts.height // CHOICE_SAMPLE + 1)
    if bursts.height < MIN_COVARY_ROWS:  # fewer than the co-variation below needs, whatever the columns: none
        return None  # (a merge's run sample keeps the rows that recorded every common counter: often none)
    work = next((c for c in WORK_COUNTERS if c in candidates and c != target), None) or \
        _best_correlated(bursts, target, candidates)
    rest = [c for c in candidates if c not in (target, work)]
    if work is None or not rest:
        return None
    names = [target, work, *rest]
    group = [c for c in ("appl", "task", "thread", "mpi_call", "call_site") if c in bursts.columns]
    logs = (bursts.select(*group, *[pl.col(c).cast(pl.Float64).log1p().alias(f"_{i}") for i, c in enumerate(names)])
            .drop_nulls(subset=[f"_{i}" for i in range(len(names))])
            .filter(pl.len().over(group) >= 3))
    if logs.height < MIN_COVARY_ROWS:
        return None
    rates = logs.select(*group, *[(pl.col(f"_{i}") - pl.col("_1")).alias(f"r{i}") for i in range(len(names))])
    dev = rates.select([(pl.col(f"r{i}") - pl.col(f"r{i}").mean().over(group)).alias(f"r{i}")
                        for i in range(len(names))]).to_numpy()
    sd = dev.std(axis=0)
    if sd[0] <= 0:
        return None
    best, best_corr, slope = None, min_corr, 0.0
    for k, c in enumerate(rest, start=2):
        if sd[k] <= 0:
            continue
        cov = float((dev[:, 0] * dev[:, k]).mean())
        corr = cov / (sd[0] * sd[k])
        if corr >= best_corr:
            best, best_corr, slope = c, corr, cov / sd[k] ** 2
    if best is None or (not clip and slope > max_exponent):
        return None
    return best, float(min(max(slope, 0.0), max_exponent))


def _ratio(ref_val: pl.Expr, src_val: pl.Expr, exponent: float) -> pl.Expr:
    """(ref / src) ** exponent, the ratio clipped to RATIO_CLIP; 1 where it is not defined."""
    lo, hi = RATIO_CLIP
    r = ref_val.cast(pl.Float64) / src_val.cast(pl.Float64)
    return pl.when(src_val > 0).then(r.clip(lo, hi).pow(exponent)).otherwise(1.0).fill_null(1.0)


def transferred(ref_bursts: pl.DataFrame | pl.LazyFrame, src_bursts: pl.DataFrame | pl.LazyFrame,
                other_row: pl.Series, counter: str, plan: Plan) -> pl.Series:
    """Float64 value of ``counter`` for every reference burst (row order of ``ref_bursts``) under ``plan``, from
    the source burst at ``other_row`` (NULL where NULL: unmatched). Lazy scans are read for the columns used."""
    used = list(dict.fromkeys([counter, *plan.reads]))
    src_bursts = frame_of(src_bursts, used)
    ref_bursts = frame_of(ref_bursts, [c for c in used if c != counter])
    sv = src_bursts.select(pl.col(c).gather(other_row).alias(f"_s_{c}") for c in used).with_columns(
        ref_bursts.select(pl.col(c).alias(f"_r_{c}") for c in used if c != counter))
    val = pl.col(f"_s_{counter}").cast(pl.Float64)
    if plan.per_ns:
        return sv.select((val * _ratio(pl.col(f"_r_{DURATION}"), pl.col(f"_s_{DURATION}"), 1.0)).alias(counter)
                         ).get_column(counter)
    if plan.work:
        w = _ratio(pl.col(f"_r_{plan.work}"), pl.col(f"_s_{plan.work}"), 1.0)
        val = val * pl.when(w.log().abs() <= plan.work_tol).then(1.0).otherwise(w.pow(1.0 - plan.exponent))
    if plan.rescale_by:
        val = val * _ratio(pl.col(f"_r_{plan.rescale_by}"), pl.col(f"_s_{plan.rescale_by}"), plan.exponent)
    return sv.select(val.alias(counter)).get_column(counter)


def relative_errors(pred: pl.Series, true: pl.Series, among: pl.Series) -> pl.Series:
    """|pred - true| / true where ``among`` holds, true > 0 and there is a prediction."""
    f = pl.DataFrame({"p": pred.cast(pl.Float64), "t": true.cast(pl.Float64), "k": among})
    return f.filter(pl.col("k") & (pl.col("t") > 0) & pl.col("p").is_not_null()).select(
        ((pl.col("p") - pl.col("t")).abs() / pl.col("t")).alias("e")).get_column("e")


@dataclass(frozen=True)
class Choice:
    """The plans of one source run: per-instruction transfer or not, rescaling allowed or not, and the
    leave-one-out (median, p95) error of each kind (``verbatim``, ``per_ins``, ``rescaled``, ``per_ns``) per common
    counter it was tested on (``tested``; ``loo``: the worst over them, None: not testable)."""

    work: str | None
    rescale: bool
    tested: dict[str, dict[str, tuple[float, float]]]
    forced: bool = False
    work_tol: float = 0.0
    forbidden: bool = False  # --no-rescale: neither co-variation nor duration rescales anything
    min_duration_ns: int = 0  # bursts shorter than this are left out of co-variations (glue between calls)

    @property
    def kind(self) -> str:
        """The kind chosen for counters that do not count time: ``rescaled``, ``per_ins`` or ``verbatim``."""
        return "rescaled" if self.rescale else "per_ins" if self.work else "verbatim"

    @property
    def loo(self) -> dict[str, tuple[float, float] | None]:
        """Per kind, the (median, p95) error of its worst tested counter (None: no counter tested it)."""
        return {k: _worst(v) for k, v in self.tested.items()}

    def by_duration(self, counter: str) -> dict[str, tuple[float, float]]:
        """The ``per_ns`` errors of the common counts of time that test ``counter`` (a count of time): core cycles
        carry the core's clock and the burst's duration, so they test any; reference cycles only reference cycles
        (they carry no core clock)."""
        role = canonical(counter)
        return {c: e for c, e in self.tested.get("per_ns", {}).items() if canonical(c) in ("cyc", role)}

    def plan(self, src_bursts: pl.DataFrame, counter: str, common: Sequence[str]) -> Plan:
        """The plan for ``counter`` (a counter the reference run lacks). Unless forced, rescaling needs a strong
        co-variation and a slope of at most 1 (``AUTO_RESCALE``): the counter's own run-to-run variation is
        unseen, so only a partner that carries it nearly whole is trusted. A count of time follows the reference
        burst's duration (``per_ns``) unless a test on the common counts of time found the chosen kind better (or
        rescaling is forced or forbidden); a rejected kind is never used."""
        timed = counts_time(counter) and not self.forbidden
        tested = self.by_duration(counter) if timed else {}
        chosen = self.tested[self.kind]
        if not chosen.keys() & tested.keys():  # the chosen kind was not tested on those counts: the kind under it
            chosen = self.tested["per_ins" if self.work else "verbatim"]  # was (review23: else nothing compared)
        by_ns = timed and (not tested or _no_worse(tested, chosen))
        if by_ns and not self.forced:
            return Plan(per_ns=True)
        r = (rescale_counter(src_bursts, counter, common, *(() if self.forced else AUTO_RESCALE),
                             min_duration_ns=self.min_duration_ns) if self.rescale else None)
        if r:
            return Plan(self.work, r[0], r[1], self.work_tol)
        return Plan(per_ns=True) if by_ns else Plan(self.work, work_tol=self.work_tol)

    def error(self, plan: Plan, counter: str) -> tuple[float | None, float | None]:
        """Leave-one-out (median, p95) of the kind of ``plan`` for ``counter`` (None, None: not tested)."""
        if plan.per_ns:
            return _worst(self.by_duration(counter)) or (None, None)
        kind = "rescaled" if plan.rescale_by else "per_ins" if plan.work else "verbatim"
        loo = self.loo
        return loo.get(kind) or loo.get("per_ins" if plan.work else "verbatim") or (None, None)


def choose(ref_bursts: pl.DataFrame, src_bursts: pl.DataFrame, other_row: pl.Series, common: Sequence[str],
           long_ref: pl.Series, rescale: bool | None, src_run: pl.DataFrame | None = None,
           min_duration_ns: int = 0, share: pl.Series | None = None) -> Choice:
    """Leave-one-out over the common counters (see the module docstring); ``rescale`` None: by the estimate.
    ``src_run``: the source run's own bursts (or a regular sample of them) the rescaling counters are chosen on
    (default ``src_bursts``); ``per_ns`` is tested where both samples carry ``duration_ns``, on the pairs of whole
    bursts only (``share``: each reference row's share of its unit, :class:`pieces.Expanded`; a piece's counters
    are its unit's sums, its duration its own: review23)."""
    work = work_counter(common)
    tol = min(WORK_NOISE * typical(long_pairs(ref_bursts, src_bursts, other_row, work, long_ref)),
              WORK_TOL_MAX) if work else 0.0
    timed = all(DURATION in f.collect_schema().names() for f in (ref_bursts, src_bursts))
    errs: dict[str, dict[str, tuple[float, float]]] = {"verbatim": {}, "per_ins": {}, "rescaled": {}, "per_ns": {}}
    whole = long_ref if share is None else long_ref & (share.fill_null(1.0) >= 1.0)
    for c in common:
        others = [x for x in common if x != c]
        plans = {"verbatim": Plan()}
        if work and c != work:
            plans["per_ins"] = Plan(work, work_tol=tol)
        r = rescale_counter(src_bursts if src_run is None else src_run, c, others, min_duration_ns=min_duration_ns)
        if r and c != work:
            plans["rescaled"] = Plan(work, *r, tol) if work else Plan(None, *r)
        if timed and counts_time(c):
            plans["per_ns"] = Plan(per_ns=True)
        # the columns every plan of ``c`` reads, read once (a wide merge's samples are lazy scans of files)
        used = list(dict.fromkeys(x for p in plans.values() for x in (c, *p.reads)))
        ref_c, src_c = frame_of(ref_bursts, used), frame_of(src_bursts, used)
        for kind, plan in plans.items():
            among = whole if plan.per_ns else long_ref
            e = relative_errors(transferred(ref_c, src_c, other_row, c, plan), ref_c.get_column(c), among)
            if e.len():
                errs[kind][c] = (float(e.median()), float(e.quantile(0.95)))
        if c == work and c in errs["verbatim"]:  # the work counter itself is only ever copied
            errs["per_ins"][c] = errs["verbatim"][c]
    use_work = bool(work) and _no_worse(errs["per_ins"], errs["verbatim"])
    forced, forbidden = rescale is True, rescale is False
    if rescale is None:  # a rescaling no common counter could test is never chosen (mergeattack22 N4)
        rescale = bool(errs["rescaled"]) and _no_worse(errs["rescaled"], errs["per_ins" if use_work else "verbatim"])
    return Choice(work if use_work else None, rescale, errs, forced, tol, forbidden, min_duration_ns)


def _worst(errors: dict[str, tuple[float, float]]) -> tuple[float, float] | None:
    """The highest median and the highest p95 over ``errors`` (per counter: (median, p95)); None when empty."""
    return (max(m for m, _ in errors.values()), max(p for _, p in errors.values())) if errors else None


def _no_worse(new: dict[str, tuple[float, float]], old: dict[str, tuple[float, float]]) -> bool:
    """Whether ``new``'s median errors average no higher than ``old``'s on the counters both were tested on
    (True when there is none: nothing speaks against it)."""
    both = [c for c in new if c in old]
    return not both or float(np.mean([new[c][0] for c in both])) <= float(np.mean([old[c][0] for c in both])) + 1e-12
