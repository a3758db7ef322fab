"""Merge the counters of several runs of one experiment into one synthetic trace (DESIGN §6).

Pure functions on Polars frames. :func:`merge_runs` takes the runs of one experiment (:class:`RunTables`: bursts
and MPI calls as read by a trace reader or from the warehouse) and returns a :class:`MergeResult`:

- ``merged``: one row per burst of the **reference run** (``--reference``, else the first run by name) with its
  times, its closing MPI call, one column per counter of *any* run, ``match_score`` and ``estimated``;
- ``quality``: one row per counter: the run it comes from, how it got there, coverage and estimated error;
- ``matches``: the match tables (reference burst -> burst of each other run, with score).

**Counter transfer.** A counter the reference run recorded is kept as recorded. Any other counter comes from one
*source run*: among the runs that recorded it, the one whose bursts matched most reference bursts (ties: first by
name). A matched reference burst gets the source burst's value; an unmatched one gets NULL, or, with
``estimate_unmatched``, an estimate flagged in ``estimated`` (never a silent guess).

**Rescaling (documented choice).** With ``rescale=True`` a transferred value is multiplied by the ratio of a
reference counter in the two runs, ``value * ref_counter[reference] / ref_counter[source]`` (ratio clipped to
[1/4, 4]). The reference counter used is, per transferred counter, the common counter whose ``log1p`` values
correlate best with it in the source run (e.g. cycles for REF_CYC, instructions for cache misses). It corrects the
run-to-run variation that a counter shares with the reference counter (a burst that ran longer in one run also
had more cycles, more stalls, more misses) and adds that counter's own noise where they do not share it.
``benchmarks/bench_merge.py`` measures both ways; see ``benchmarks/results/merge.md`` for why the default is what
it is (:data:`DEFAULT_RESCALE`).

**Quality.** ``coverage`` is the share of reference bursts that got a matched (not estimated) value,
``coverage_long`` the same among bursts of at least ``min_error_duration_ns`` (polling iterations that one run
repeated more often than the other have no counterpart, so ``coverage`` is lower where polling differs).
``estimated_error`` is a leave-one-out estimate: each counter that the reference and the source run both recorded
is transferred from the source run exactly as an unknown counter would be (rescaled by another common counter when
rescaling) and compared with what the reference run recorded; the median relative error over matched bursts of at
least ``min_error_duration_ns`` is computed per common counter and the largest of these is reported
(``estimated_error_p95``: the same with the 95th percentile). ``cross_run_diff`` is, for a counter both runs
recorded, the median relative difference between the two runs' values of matched bursts (no rescaling): the
natural variation a merge cannot remove.
"""
from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import polars as pl

from synthtrace.tracelib.align import AlignConfig, align_runs, sequence_table, sort_bursts
from synthtrace.tracelib.errors import BadInputError
from synthtrace.tracelib.schema import THREAD_KEYS, counter_columns

#: whether transferred counters are rescaled by the reference-counter ratio unless told otherwise (see the module
#: docstring and benchmarks/results/merge.md: off, because on the simulated campaigns the exact transfer already
#: sits at the oracle while rescaling helps some counters and hurts others; on the real LULESH pair it helps)
DEFAULT_RESCALE = False
#: reference counters preferred as alignment features (stable across runs first); at most MAX_FEATURES are used
FEATURE_PRIORITY = ("PAPI_TOT_INS", "PAPI_TOT_CYC", "PAPI_REF_CYC", "INST_RETIRED:ANY", "CPU_CLK_UNHALTED")
MAX_FEATURES = 2
RATIO_CLIP = (0.25, 4.0)
WORK_COUNTERS = ("PAPI_TOT_INS", "INST_RETIRED:ANY", "INST_RETIRED:ANY_P", "INST_RETIRED")  # instructions first
CHOICE_SAMPLE = 100_000  # bursts looked at to choose a rescaling counter
BASE_COLUMNS = [*THREAD_KEYS, "burst_seq", "cpu", "start_ns", "end_ns", "duration_ns", "mpi_call", "call_site"]
KEYS = [*THREAD_KEYS, "burst_seq"]

QUALITY_SCHEMA: dict[str, pl.DataType] = {
    "experiment": pl.String(), "counter": pl.String(), "source_run": pl.String(), "source_run_id": pl.String(),
    "reference_run": pl.String(), "method": pl.String(), "rescaled_by": pl.String(), "coverage": pl.Float64(),
    "coverage_long": pl.Float64(),
    "estimated_share": pl.Float64(), "estimated_error": pl.Float64(), "estimated_error_p95": pl.Float64(),
    "cross_run_diff": pl.Float64(), "match_rate": pl.Float64(), "mean_match_score": pl.Float64(),
    "comm_agreement": pl.Float64(), "n_bursts": pl.Int64(),
}


# --------------------------------------------------------------------------------------------- errors
class MergeInputError(BadInputError):
    """The runs handed to the merge cannot be merged."""


class TooFewRunsError(MergeInputError):
    """An experiment needs at least two runs to merge."""


class UnknownReferenceError(MergeInputError):
    """``--reference`` names no run of the experiment."""


class NotSameProgramError(MergeInputError):
    """The runs are not the same program: task layout or MPI structure differ (the message says what)."""


class NoCommonCounterError(MergeInputError):
    """Two runs share no counter to validate matches with (``allow_timing_only`` merges anyway, with a warning)."""


class TimingOnlyWarning(UserWarning):
    """Runs were matched by MPI structure and timing only; their match scores are lowered."""


# --------------------------------------------------------------------------------------------- inputs
@dataclass(frozen=True)
class RunTables:
    """One run: its identity and its bursts / MPI calls (schemas of :mod:`synthtrace.tracelib.schema`)."""

    run_id: str
    run_name: str
    bursts: pl.DataFrame
    mpi_calls: pl.DataFrame

    @property
    def counters(self) -> list[str]:
        """Counter columns with at least one recorded (non-NULL) value."""
        cols = counter_columns(self.bursts)
        if not cols:
            return []
        nn = self.bursts.select(pl.col(c).is_not_null().any() for c in cols).row(0)
        return [c for c, has in zip(cols, nn) if has]


@dataclass(frozen=True)
class MergeOptions:
    """How to merge. ``reference`` is a run name or id (default: first run by name)."""

    reference: str | None = None
    rescale: bool = DEFAULT_RESCALE
    estimate_unmatched: bool = False
    allow_timing_only: bool = False
    min_match_rate: float = 0.5  # share of the shorter run's bursts that must match to count as the same program
    min_error_duration_ns: int = 10_000  # bursts shorter than this are left out of error statistics (ns)
    align: AlignConfig = field(default_factory=AlignConfig)


@dataclass
class MergeResult:
    """What :func:`merge_runs` returns (see module docstring)."""

    experiment: str
    reference_run_id: str
    reference_run: str
    merged: pl.DataFrame
    quality: pl.DataFrame
    matches: pl.DataFrame
    warnings: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------------------------- helpers
def choose_reference(runs: Sequence[RunTables], reference: str | None) -> int:
    """Index of the reference run: the run named (or with the id) ``reference``, else the first by name."""
    if reference is None:
        return min(range(len(runs)), key=lambda i: (runs[i].run_name, runs[i].run_id))
    for i, r in enumerate(runs):
        if reference in (r.run_name, r.run_id):
            return i
    names = ", ".join(sorted(r.run_name for r in runs))
    raise UnknownReferenceError(f"reference run {reference!r} is not in the experiment (runs: {names})")


def _layout(r: RunTables) -> pl.DataFrame:
    """The distinct (appl, task, thread) of a run's bursts (bursts sorted as by :func:`sort_bursts`)."""
    k = r.bursts.select(*THREAD_KEYS)
    if k.height == 0:
        return k
    cols = [k.get_column(c).to_numpy() for c in THREAD_KEYS]
    new = np.ones(k.height, bool)
    new[1:] = np.any([c[1:] != c[:-1] for c in cols], axis=0)
    return k.filter(pl.Series(new))


def check_same_layout(ref: RunTables, other: RunTables) -> None:
    """Raise :class:`NotSameProgramError` when the two runs do not have the same tasks and threads."""
    a, b = _layout(ref), _layout(other)
    ta = a.select("appl", "task").unique().height
    tb = b.select("appl", "task").unique().height
    if ta != tb:
        raise NotSameProgramError(f"runs {ref.run_name!r} and {other.run_name!r} are not the same program: "
                                  f"{ta} vs {tb} tasks with bursts")
    if a.height != b.height or a.join(b, on=THREAD_KEYS, how="anti").height:
        only = a.join(b, on=THREAD_KEYS, how="anti").head(3).rows()
        raise NotSameProgramError(f"runs {ref.run_name!r} and {other.run_name!r} are not the same program: "
                                  f"{a.height} vs {b.height} threads with bursts"
                                  + (f" (e.g. appl/task/thread {only} only in {ref.run_name!r})" if only else ""))


def pick_features(common: Sequence[str]) -> list[str]:
    """Reference counters used to compare bursts: up to MAX_FEATURES common counters, stable ones first."""
    first = [c for c in FEATURE_PRIORITY if c in common]
    rest = sorted(c for c in common if c not in first)
    return (first + rest)[:MAX_FEATURES]


def _call_histogram(calls: pl.DataFrame) -> str:
    if calls.height == 0:
        return "no MPI calls"
    h = calls.group_by("mpi_call").len().sort("len", descending=True).head(4)
    return ", ".join(f"{c} x{n}" for c, n in h.iter_rows())


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
                    min_corr: float = 0.5) -> tuple[str, float] | None:
    """The reference counter to rescale ``target`` by, and the exponent, chosen on the source run's own bursts.

    Bursts closed by the same call on the same thread (the same code position, iteration after iteration) vary
    only by what varies between runs too: clock, contention, OS noise. Within such groups, the per-instruction
    rates ``log(target / work)`` and ``log(candidate / work)`` (work: instructions when recorded by both runs,
    else the candidate whose log values correlate best with the target) are compared; the candidate whose rate co-varies best with the
    target's, if the correlation reaches ``min_corr``, is returned with the regression slope (clipped to [0, 1.5])
    as exponent. None when nothing co-varies: the value is then transferred as recorded.
    """
    if bursts.height > CHOICE_SAMPLE:  # a choice, not an estimate: a regular sample of bursts is plenty
        bursts = bursts.gather_every(bursts.height // CHOICE_SAMPLE + 1)
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
    if logs.height < 20:
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
    if best is None:
        return None
    return best, float(min(max(slope, 0.0), 1.5))


def _rel_err(pred: pl.Expr, true: pl.Expr) -> pl.Expr:
    return (pred - true).abs() / true


# --------------------------------------------------------------------------------------------- merge
def merge_runs(runs: Sequence[RunTables], options: MergeOptions = MergeOptions(),
               experiment: str = "") -> MergeResult:
    """Align every run to the reference run and merge all counters into the reference run's bursts.

    Raises :class:`TooFewRunsError` (fewer than two runs), :class:`UnknownReferenceError`,
    :class:`NotSameProgramError` (different tasks/threads, or a run whose MPI structure matches less than
    ``min_match_rate`` of the reference bursts) and :class:`NoCommonCounterError` (a run shares no counter with
    the reference and ``allow_timing_only`` is off).
    """
    if len(runs) < 2:
        raise TooFewRunsError(f"experiment {experiment!r} has {len(runs)} run(s); merging needs at least two")
    # every frame below shares the row order of its run's sorted bursts: values move by row index, not by joins
    runs = [replace(r, bursts=sort_bursts(r.bursts)) for r in runs]
    ri = choose_reference(runs, options.reference)
    ref = runs[ri]
    others = sorted((r for i, r in enumerate(runs) if i != ri), key=lambda r: (r.run_name, r.run_id))
    notes: list[str] = []
    ref_counters = ref.counters
    counters_of = {r.run_id: r.counters for r in runs}
    for o in others:
        check_same_layout(ref, o)
        if not set(ref_counters) & set(counters_of[o.run_id]) and not options.allow_timing_only:
            raise NoCommonCounterError(
                f"runs {ref.run_name!r} ({', '.join(ref_counters) or 'no counters'}) and {o.run_name!r} "
                f"({', '.join(counters_of[o.run_id]) or 'no counters'}) have no counter in common to validate the "
                "match; use --allow-timing-only to match by MPI structure and timing alone")

    cfg = options.align
    ref_seq = sequence_table(ref.bursts, ref.mpi_calls, ref_counters, cfg)
    base = ref.bursts.select(BASE_COLUMNS)
    n_ref = base.height
    long_ref = ref_seq.get_column("duration_ns") >= options.min_error_duration_ns

    # ---- align every other run to the reference
    per_run: dict[str, dict] = {}
    match_parts = []
    for o in others:
        common = [c for c in ref_counters if c in counters_of[o.run_id]]
        feats = pick_features(common)
        if not feats:
            msg = (f"runs {ref.run_name!r} and {o.run_name!r} share no counter: matched by MPI structure and "
                   "timing only, with lower match scores")
            warnings.warn(msg, TimingOnlyWarning, stacklevel=2)
            notes.append(msg)
        o_seq = sequence_table(o.bursts, o.mpi_calls, counters_of[o.run_id], cfg)
        m = align_runs(ref_seq, o_seq, feats, cfg)
        matched = m.get_column("other_seq").is_not_null()
        rate = float(matched.mean()) if n_ref else 0.0
        # chopped traces cover different windows: judge the structure on the shorter of the two runs
        shorter = min(n_ref, o.bursts.height)
        same = int(matched.sum()) / shorter if shorter else 0.0
        if same < options.min_match_rate:
            raise NotSameProgramError(
                f"runs {ref.run_name!r} and {o.run_name!r} are not the same program: only {same:.0%} of the "
                f"bursts of the shorter run align by MPI structure (calls of {ref.run_name}: {_call_histogram(ref.mpi_calls)}; "
                f"of {o.run_name}: {_call_histogram(o.mpi_calls)})")
        comm = float(m.get_column("same_sig").mean() or 0.0) if matched.any() else None
        per_run[o.run_id] = {"run": o, "matches": m, "seq": o_seq, "common": common, "features": feats, "rate": rate,
                             "mean_score": float(m.get_column("match_score").mean() or 0.0), "comm": comm}
        match_parts.append(m.with_columns(pl.lit(o.run_id).alias("other_run_id"), pl.lit(o.run_name).alias("other_run")))

    # ---- counters: recorded by the reference, or transferred from the best source run
    all_counters: list[str] = list(ref_counters)
    for o in others:
        all_counters += [c for c in counters_of[o.run_id] if c not in all_counters]
    merged = pl.concat([base, ref.bursts.select(ref_counters)], how="horizontal")
    quality_rows = []
    flags: list[pl.Expr] = []  # per transferred counter: estimated?
    score_cols: dict[str, str] = {}
    loo_cache: dict[str, tuple[float | None, float | None]] = {}

    for c in all_counters:
        if c in ref_counters:
            cov = float(merged.get_column(c).is_not_null().mean()) if n_ref else 0.0
            cov_long = _share(merged.get_column(c).is_not_null(), long_ref)
            partner = next((per_run[o.run_id] for o in others if c in per_run[o.run_id]["common"]), None)
            cross = _cross_run_diff(ref, partner, c, long_ref) if partner else None
            quality_rows.append({"counter": c, "source_run": ref.run_name, "source_run_id": ref.run_id,
                                 "method": "recorded", "rescaled_by": None, "coverage": cov,
                                 "coverage_long": cov_long, "estimated_share": 0.0,
                                 "estimated_error": 0.0, "estimated_error_p95": 0.0, "cross_run_diff": cross,
                                 "match_rate": 1.0, "mean_match_score": 1.0, "comm_agreement": 1.0})
            continue
        sources = [o for o in others if c in counters_of[o.run_id]]
        src = max(sources, key=lambda o: per_run[o.run_id]["rate"])  # first by name among the best
        info = per_run[src.run_id]
        choice = rescale_counter(src.bursts, c, info["common"]) if options.rescale else None
        rescale_by, exponent = choice if choice else (None, 0.0)
        values, est = _transfer(ref, src, info["matches"], c, rescale_by, options, ref_seq, info["seq"], exponent)
        merged = merged.with_columns(values.alias(c))
        if options.estimate_unmatched:
            merged = merged.with_columns(est.alias(f"_est_{c}"))
            flags.append(pl.col(f"_est_{c}"))
        score_cols[src.run_id] = f"_score_{src.run_id}"
        if src.run_id not in loo_cache:
            loo_cache[src.run_id] = _leave_one_out(ref, info, options, long_ref)
        err, err95 = loo_cache[src.run_id]
        n_est = int(merged.get_column(f"_est_{c}").sum()) if options.estimate_unmatched else 0
        quality_rows.append({
            "counter": c, "source_run": src.run_name, "source_run_id": src.run_id,
            "method": "transferred_rescaled" if rescale_by else "transferred",
            "rescaled_by": f"{rescale_by}^{exponent:.2f}" if rescale_by else None,
            "coverage": float(info["matches"].get_column("other_seq").is_not_null().mean() if n_ref else 0.0),
            "coverage_long": _share(info["matches"].get_column("other_seq").is_not_null(), long_ref),
            "estimated_share": n_est / n_ref if n_ref else 0.0, "estimated_error": err,
            "estimated_error_p95": err95, "cross_run_diff": None, "match_rate": info["rate"],
            "mean_match_score": info["mean_score"], "comm_agreement": info["comm"]})

    # ---- per-burst match score: lowest score over the source runs that supplied counters (NULL if unmatched)
    for run_id, col in score_cols.items():
        merged = merged.with_columns(per_run[run_id]["matches"].get_column("match_score").alias(col))
    if score_cols:
        cols = list(score_cols.values())
        score = (pl.when(pl.any_horizontal(pl.col(x).is_null() for x in cols)).then(None)
                 .otherwise(pl.min_horizontal(cols)))
    else:
        score = pl.lit(1.0)
    estimated = pl.any_horizontal(flags) if flags else pl.lit(False)
    merged = merged.with_columns(score.cast(pl.Float64).alias("match_score"), estimated.alias("estimated"))
    merged = merged.select(pl.lit(experiment).alias("experiment"), pl.lit(ref.run_id).alias("run_id"),
                           pl.lit(ref.run_name).alias("run_name"), *BASE_COLUMNS, *all_counters,
                           "match_score", "estimated")
    quality = pl.DataFrame([{**q, "experiment": experiment, "reference_run": ref.run_name, "n_bursts": n_ref}
                            for q in quality_rows], schema=QUALITY_SCHEMA)
    matches = (pl.concat(match_parts) if match_parts else pl.DataFrame()).select(
        pl.lit(experiment).alias("experiment"), pl.lit(ref.run_id).alias("run_id"), *KEYS, "other_run_id",
        "other_run", "other_seq", "match_score", "same_sig")
    return MergeResult(experiment, ref.run_id, ref.run_name, merged, quality, matches, notes)


def _share(flags: pl.Series, among: pl.Series) -> float | None:
    """Share of True ``flags`` among the rows where ``among`` is True (None when there are none)."""
    k = int(among.sum())
    return float((flags & among).sum()) / k if k else None


def _source_values(src: RunTables, matches: pl.DataFrame, cols: Sequence[str]) -> pl.DataFrame:
    """For each reference burst (row order of ``matches``), the matched source burst's ``cols`` as ``_src_<col>``
    (NULL where unmatched), plus ``other_seq``."""
    idx = matches.get_column("other_row")
    return src.bursts.select(*[pl.col(c).gather(idx).alias(f"_src_{c}") for c in dict.fromkeys(cols)]).with_columns(
        matches.get_column("other_seq"))


def _ratio(ref_val: pl.Expr, src_val: pl.Expr, exponent: float = 1.0) -> pl.Expr:
    """(ref / src) ** exponent, the ratio clipped to RATIO_CLIP; 1 where it is not defined."""
    lo, hi = RATIO_CLIP
    r = ref_val.cast(pl.Float64) / src_val.cast(pl.Float64)
    return pl.when(src_val > 0).then(r.clip(lo, hi).pow(exponent)).otherwise(1.0).fill_null(1.0)


def _transfer(ref: RunTables, src: RunTables, matches: pl.DataFrame, counter: str, rescale_by: str | None,
              options: MergeOptions, ref_seq: pl.DataFrame, src_seq: pl.DataFrame,
              exponent: float = 1.0) -> tuple[pl.Series, pl.Series]:
    """Values of ``counter`` for the reference bursts (row order of the run) and whether each one is an estimate."""
    cols = [counter] + ([rescale_by] if rescale_by else [])
    sv = _source_values(src, matches, cols)
    val = pl.col(f"_src_{counter}").cast(pl.Float64)
    if rescale_by:
        sv = sv.with_columns(ref.bursts.get_column(rescale_by).alias("_ref_r"))
        val = val * _ratio(pl.col("_ref_r"), pl.col(f"_src_{rescale_by}"), exponent)
    out = sv.select(val.round().cast(pl.Int64).alias(counter), pl.col("other_seq").is_null().alias("_unmatched"))
    if not options.estimate_unmatched:
        return out.get_column(counter), pl.Series(counter, [False] * out.height, pl.Boolean)
    est = _estimates(ref, src, counter, rescale_by, ref_seq, src_seq)
    filled = out.with_columns(est.alias("_est")).select(
        pl.when(pl.col("_unmatched")).then(pl.col("_est")).otherwise(pl.col(counter)).alias(counter),
        (pl.col("_unmatched") & pl.col("_est").is_not_null()).alias("_flag"))
    return filled.get_column(counter), filled.get_column("_flag")


def _estimates(ref: RunTables, src: RunTables, counter: str, rescale_by: str | None, ref_seq: pl.DataFrame,
               src_seq: pl.DataFrame) -> pl.Series:
    """A flagged estimate of ``counter`` for every reference burst, from source bursts closed by the same call.

    With a rescaling counter r: median of counter / r over the source bursts of the same thread and loose
    signature, times the reference burst's r; without: the median of counter over those bursts. Falls back to the
    same loose signature on any thread, then to the thread's median.
    """
    use = [counter, *([rescale_by] if rescale_by else [])]
    s = pl.concat([src_seq.select(*THREAD_KEYS, "lsig"), src.bursts.select(use)], how="horizontal")
    if rescale_by:
        s = s.with_columns((pl.col(counter).cast(pl.Float64) / pl.col(rescale_by).cast(pl.Float64)
                            .replace(0, None)).alias("_v"))
    else:
        s = s.with_columns(pl.col(counter).cast(pl.Float64).alias("_v"))
    by_thread_sig = s.group_by(*THREAD_KEYS, "lsig").agg(pl.col("_v").median().alias("_a"))
    by_sig = s.group_by("appl", "lsig").agg(pl.col("_v").median().alias("_b"))
    by_thread = s.group_by(*THREAD_KEYS).agg(pl.col("_v").median().alias("_c"))
    r = pl.concat([ref_seq.select(*THREAD_KEYS, "lsig"), ref.bursts.select(use[1:])], how="horizontal")
    r = (r.join(by_thread_sig, on=[*THREAD_KEYS, "lsig"], how="left", maintain_order="left")
         .join(by_sig, on=["appl", "lsig"], how="left", maintain_order="left")
         .join(by_thread, on=THREAD_KEYS, how="left", maintain_order="left"))
    v = pl.coalesce("_a", "_b", "_c")
    if rescale_by:
        v = v * pl.col(rescale_by).cast(pl.Float64)
    return r.select(v.round().cast(pl.Int64).alias("_est")).get_column("_est")


def _errors(pred: pl.Expr, true: pl.Series, frame: pl.DataFrame, long_ref: pl.Series) -> pl.Series:
    """Relative errors |pred - true| / true over long reference bursts with a prediction and true > 0."""
    e = frame.with_columns(true.cast(pl.Float64).alias("_true"), long_ref.alias("_long")).filter(
        pl.col("_long") & (pl.col("_true") > 0) & pred.is_not_null()).select(_rel_err(pred, pl.col("_true")).alias("e"))
    return e.get_column("e")


def _cross_run_diff(ref: RunTables, partner: dict, counter: str, long_ref: pl.Series) -> float | None:
    """Median relative difference of ``counter`` between the reference and a run that also recorded it."""
    sv = _source_values(partner["run"], partner["matches"], [counter])
    e = _errors(pl.col(f"_src_{counter}").cast(pl.Float64), ref.bursts.get_column(counter), sv, long_ref)
    return float(e.median()) if e.len() else None


def _leave_one_out(ref: RunTables, info: dict, options: MergeOptions,
                   long_ref: pl.Series) -> tuple[float | None, float | None]:
    """Estimated (median, p95) relative error of counters transferred from one source run (see module doc)."""
    src: RunTables = info["run"]
    common: list[str] = info["common"]
    if not common:
        return None, None
    medians, p95s = [], []
    for c in common:
        others = [x for x in common if x != c]
        choice = rescale_counter(src.bursts, c, others) if options.rescale else None
        r, expo = choice if choice else (None, 0.0)
        sv = _source_values(src, info["matches"], [c] + ([r] if r else []))
        pred = pl.col(f"_src_{c}").cast(pl.Float64)
        if r:
            sv = sv.with_columns(ref.bursts.get_column(r).alias("_ref_r"))
            pred = pred * _ratio(pl.col("_ref_r"), pl.col(f"_src_{r}"), expo)
        e = _errors(pred, ref.bursts.get_column(c), sv, long_ref)
        if e.len():
            medians.append(float(e.median()))
            p95s.append(float(e.quantile(0.95)))
    if not medians:
        return None, None
    return max(medians), max(p95s)
