"""Signals that a merge is wrong, and the verdict they give (DESIGN §6, merge_quality's ``verdict``).

Noise does not make a merge wrong; misalignment does, and so do runs that are not the same program on the same
input. Signals, over matched pairs of reference bursts of at least 10 us (polling iterations and glue bursts never
count), from the reference counters both runs recorded:

- **misfit**: a pair is misaligned when its two bursts lie in different iterations of their threads' own call
  sequences (iteration consistency, where the sequence is periodic), or when its work (instructions) *and*
  per-instruction rate of a second common counter (cycles: the IPC) both differ by more than ``MISFIT_LOG``
  (log): work alone may differ (dynamic load balancing), rate alone too (OS noise, contention); both at once
  means another burst;
- **coverage**: the share of long reference bursts matched;
- **work shift**: the median log ratio of the pairs' instructions, over all pairs or, when larger, over the pairs
  of one call site that holds at least ``SITE_MIN_SHARE`` of the instructions; the same program on the same input
  executes the same instructions for the same burst (within 1 %), another input deck or code version does not
  (a code version may change one kernel only);
- **bracketing messages**: every matched pair is checked against the logical messages just before and after it on
  its thread: both must have their two ends matched to the two ends of one message of the other run. A pair that
  fails lies in a span the alignment placed differently from its partners (``merge_matches.ambiguous``);
- **message agreement** (:mod:`synthtrace.tracelib.merge.message_graph`): ``msg_agreement`` is the share of the
  reference run's messages, among those whose two ends are matched and named in both runs, whose ends are matched
  to the two ends of one message of the other run; ``msg_misaligned`` counts the threads that disagree with their
  partners both ways (on a channel they send on and one they receive on): a rank aligned an iteration off,
  however alike its iterations look. One channel disagreeing one way is a channel whose shift a run's timing got
  wrong (ranks that drift apart), not a misalignment. Messages are judged whatever the length of their bursts.

Verdict per (experiment, counter): ``bad`` when the share of checked pairs in ambiguous spans or the misfit share
exceeds ``BAD_MISFIT``, coverage is below
``BAD_COVERAGE`` or a thread is misaligned by its messages; ``suspect`` when either exceeds
``SUSPECT_MISFIT``, coverage is below ``SUSPECT_COVERAGE``, the work shifts by more than ``WORK_SHIFT`` or
matching used timing only; else ``ok``. A recorded counter is ``ok``. The experiment's verdict is the worst of
its counters'.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import polars as pl

MISFIT_LOG = math.log(1.5)
SUSPECT_MISFIT, BAD_MISFIT = 0.005, 0.05
SUSPECT_COVERAGE, BAD_COVERAGE = 0.9, 0.5
WORK_SHIFT = math.log(1.03)
SITE_MIN_SHARE, SITE_MIN_PAIRS = 0.1, 20
ORDER = {"ok": 0, "suspect": 1, "bad": 2}


@dataclass(frozen=True)
class PairSignals:
    """What the matched pairs of one other run say (see the module docstring): ``misfit`` (share of long matched
    pairs), ``work_shift`` (log ratio), ``coverage_long`` (share), ``msg_agreement`` (share; None: no message
    checked), ``msg_misaligned`` (threads)."""

    misfit: float | None
    work_shift: float | None
    coverage_long: float | None
    msg_agreement: float | None
    msg_misaligned: int
    inconsistent: int = 0  # long matched pairs whose logical messages before or after disagree (ambiguous span)
    checked: int = 0  # long matched pairs with a checked message before or after them


def pair_signals(ref_bursts: pl.DataFrame, src_bursts: pl.DataFrame, matches: pl.DataFrame, work: str | None,
                 rate: str | None, long_ref: pl.Series) -> PairSignals:
    """The :class:`PairSignals` of a match table of :func:`synthtrace.tracelib.merge.align.align_runs`."""
    other_row = matches.get_column("other_row")
    n_long = int(long_ref.sum())
    matched = other_row.is_not_null() & long_ref
    cov = float(matched.sum()) / n_long if n_long else None
    agree = matches.get_column("msg_agree").mean()
    off_ranks = matches.filter("msg_misaligned").select(pl.struct("appl", "task", "thread").n_unique()).item()
    off_iter = (~matches.get_column("same_iter")).fill_null(False)
    consistent = matches.get_column("msg_consistent").filter(matched)
    spans = (int((~consistent).sum()), int(consistent.is_not_null().sum()))
    if work is None or not matched.any():
        misfit = float((off_iter & matched).sum()) / int(matched.sum()) if matched.any() else None
        return PairSignals(misfit, None, cov, agree, off_ranks, *spans)
    cols = [c for c in dict.fromkeys([work, rate]) if c]
    f = pl.concat([ref_bursts.select(pl.col(c).cast(pl.Float64).log().alias(f"r_{c}") for c in cols),
                   src_bursts.select(pl.col(c).cast(pl.Float64).gather(other_row).log().alias(f"s_{c}")
                                     for c in cols)], how="horizontal").filter(matched)
    dw = pl.col(f"r_{work}") - pl.col(f"s_{work}")
    off = dw.abs() > MISFIT_LOG
    if rate and rate != work:
        off = off & ((pl.col(f"r_{rate}") - pl.col(f"s_{rate}") - dw).abs() > MISFIT_LOG)
    off = off.fill_null(False) | pl.Series(off_iter).filter(matched)
    s = f.select(off.mean().alias("m"), dw.median().alias("w")).row(0)
    # the call closing each burst (its source location where the trace has one) names the code it runs
    site = ref_bursts.select(pl.coalesce([c for c in ("call_site", "mpi_call") if c in ref_bursts.columns]
                                         or [pl.lit(None, pl.String)]).cast(pl.String)).to_series().filter(matched)
    pairs = f.select(dw.alias("dw"), pl.col(f"r_{work}").exp().alias("work")).with_columns(site.alias("site"))
    return PairSignals(s[0], _largest_site_shift(pairs, s[1]), cov, agree, off_ranks, *spans)


def _largest_site_shift(pairs: pl.DataFrame, overall: float | None) -> float | None:
    """The work shift: the median log ratio of the pairs' instructions, or, when larger, that of the bursts of one
    call site (the call closing them) holding at least ``SITE_MIN_SHARE`` of the reference's instructions over at
    least ``SITE_MIN_PAIRS`` pairs: a code version that changes one kernel changes only its bursts, which the median
    over all bursts (mostly short glue between calls) may not see."""
    sites = (pairs.filter(pl.col("dw").is_finite())
             .group_by("site").agg(pl.len().alias("n"), pl.col("work").sum(), pl.col("dw").median())
             .filter((pl.col("n") >= SITE_MIN_PAIRS)
                     & (pl.col("work") >= SITE_MIN_SHARE * pl.col("work").sum()))
             .sort(pl.col("dw").abs(), descending=True))
    if sites.height and (overall is None or abs(sites["dw"][0]) > abs(overall)):
        return float(sites["dw"][0])
    return overall


def verdict(misfit: float | None, coverage_long: float | None, work_shift: float | None,
            timing_only: bool, msg_misaligned: int = 0, inconsistent: int = 0, checked: int = 0) -> tuple[str, str]:
    """(verdict, reason) of a transferred counter from the signals of its source run (``inconsistent`` of
    ``checked`` long pairs lie between logical messages that disagree)."""
    spans = inconsistent / checked if checked else 0.0
    if misfit is not None and misfit > BAD_MISFIT:
        return "bad", f"{misfit:.0%} of matched bursts differ in work and rate: misaligned"
    if coverage_long is not None and coverage_long < BAD_COVERAGE:
        return "bad", f"only {coverage_long:.0%} of bursts >= 10 us matched"
    if msg_misaligned:
        return "bad", f"{msg_misaligned} thread(s) disagree with their partners' messages both ways: misaligned"
    if spans > BAD_MISFIT:
        return "bad", (f"{inconsistent} matched bursts >= 10 us ({spans:.0%}) lie between logical messages the runs "
                       "disagree on: misaligned (an iteration one run has and the other has not?)")
    if spans > SUSPECT_MISFIT:
        return "suspect", (f"an ambiguous span: {inconsistent} matched bursts >= 10 us ({spans:.1%}) lie between "
                           "logical messages the runs disagree on (merge_matches.ambiguous)")
    if misfit is not None and misfit > SUSPECT_MISFIT:
        return "suspect", f"{misfit:.1%} of matched bursts differ in work and rate"
    if coverage_long is not None and coverage_long < SUSPECT_COVERAGE:
        return "suspect", f"{coverage_long:.0%} of bursts >= 10 us matched"
    if work_shift is not None and abs(work_shift) > WORK_SHIFT:
        return "suspect", (f"matched bursts execute x{math.exp(work_shift):.3f} the instructions: another input or "
                           "code version?")
    if timing_only:
        return "suspect", "matched by MPI structure and timing only"
    return "ok", ""


def worst(verdicts: pl.Series) -> str:
    """The worst of several verdicts (``ok`` for none)."""
    return max(verdicts.to_list(), key=ORDER.__getitem__, default="ok")
