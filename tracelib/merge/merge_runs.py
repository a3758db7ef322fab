"""Merge the counters of several runs of one experiment into one synthetic trace (DESIGN §6).

Pure functions on Polars frames. :func:`merge_runs` takes the runs of one experiment (:class:`RunTables`: bursts
and MPI calls as read by a trace reader or from the warehouse) and returns a :class:`MergeResult`:

- ``merged``: one row per burst of the **reference run** (``--reference``, else the first run by name) with its
  times, its closing MPI call, one column per counter of *any* run, ``match_score`` and ``estimated``;
- ``quality``: one row per counter: the run it comes from, how it got there, coverage and estimated error;
- ``matches``: provenance (merge_matches): per reference burst and other run, the other run's task, thread and
  burst (in its own numbering; NULL when unmatched), the match score and ``ambiguous``: the logical messages
  just before or after the pair disagree between the runs (the pair lies in a span the data did not place, e.g.
  around an iteration one run has and the other has not) and ``msg_mismatch``: the two bursts were opened by the
  completion of different messages (an ``MPI_Waitany`` or ``MPI_ANY_SOURCE`` receive that returned another
  partner's message in the other run), so the values come from the work on another message.

**Before aligning**, each other run's task numbering is checked against the reference's
(:mod:`synthtrace.tracelib.merge.ranks`: renumbered when the message graph says so, refused when it cannot tell), and
the runs' call structure (per thread, consecutive calls with polling and completion loops collapsed: timing-free,
:func:`synthtrace.tracelib.merge.checks.same_structure`) must agree on at least ``min_match_rate`` of the shorter
run's (else :class:`NotSameProgramError`); a match rate below ``SAME_LENGTH`` of the *longer* run, or matched
bursts that execute other instruction counts (``merge_checks.WORK_SHIFT``), are warned about: another input deck,
another code version, or a run cut short.

**Counter transfer.** A counter the reference run recorded is kept as recorded. Any other counter comes from one
*source run*: among the runs that recorded it, the one whose bursts matched most reference bursts (ties: first by
name). A matched reference burst gets the source burst's value by the plan :mod:`synthtrace.tracelib.merge.transfer`
chooses by leave-one-out (as recorded, per instruction, or also rescaled by a co-varying counter); an unmatched
one gets NULL, or, with ``estimate_unmatched``, an estimate flagged in ``estimated`` (never a silent guess).

**Quality.** ``coverage`` is the share of reference bursts that got a matched (not estimated) value,
``coverage_long`` the same among bursts of at least ``min_error_duration_ns`` (polling iterations that one run
repeated more often than the other have no counterpart, so ``coverage`` is lower where polling differs).
``estimated_error`` / ``estimated_error_p95``: the leave-one-out (median, p95) relative error of the counter's plan
over the common counters (the largest over them). ``cross_run_diff`` is, for a counter both runs recorded, the
median relative difference between the two runs' values of matched bursts: the natural variation a merge cannot
remove. ``misfit``, ``verdict`` (ok / suspect / bad) and ``verdict_reason`` come from
:mod:`synthtrace.tracelib.merge.checks`.
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import polars as pl

from synthtrace.tracelib.merge.align import AlignConfig, align_runs, sequence_table, sort_bursts
from synthtrace.tracelib.errors import BadInputError
from synthtrace.tracelib.merge.checks import (POSITION_BY_TIME, POSITION_BY_WORK, WORK_SHIFT, PairSignals,
                                              arrival_tolerant, opened_by, opened_differently, pair_signals,
                                              same_structure, unpaired, verdict)
from synthtrace.tracelib.merge.messages import logical_messages, message_counts
from synthtrace.tracelib.merge.pieces import Units, expand, units
from synthtrace.tracelib.merge.ranks import rank_mapping, renumber
from synthtrace.tracelib.merge.transfer import Choice, Plan, choose, relative_errors, transferred, work_counter
from synthtrace.tracelib.schema import THREAD_KEYS, counter_columns
from synthtrace.tracelib.thread_key import appl_base, task_key, task_of

#: rescaling by a co-varying reference counter unless told otherwise: None = chosen by the leave-one-out estimate
#: (:func:`synthtrace.tracelib.merge.transfer.choose`)
DEFAULT_RESCALE: bool | None = None
#: share of the longer run's bursts that must match for the runs to count as the same length (else a warning)
SAME_LENGTH = 0.9
#: reference counters preferred as alignment features (stable across runs first); at most MAX_FEATURES are used
FEATURE_PRIORITY = ("PAPI_TOT_INS", "PAPI_TOT_CYC", "PAPI_REF_CYC", "INST_RETIRED:ANY", "CPU_CLK_UNHALTED")
MAX_FEATURES = 2
BASE_COLUMNS = [*THREAD_KEYS, "burst_seq", "cpu", "start_ns", "end_ns", "duration_ns", "mpi_call", "call_site"]
KEYS = [*THREAD_KEYS, "burst_seq"]

QUALITY_SCHEMA: dict[str, pl.DataType] = {
    "experiment": pl.String(), "counter": pl.String(), "source_run": pl.String(), "source_run_id": pl.String(),
    "reference_run": pl.String(), "method": pl.String(), "rescaled_by": pl.String(), "coverage": pl.Float64(),
    "coverage_long": pl.Float64(),
    "estimated_share": pl.Float64(), "estimated_error": pl.Float64(), "estimated_error_p95": pl.Float64(),
    "cross_run_diff": pl.Float64(), "match_rate": pl.Float64(), "mean_match_score": pl.Float64(),
    "comm_agreement": pl.Float64(), "msg_agreement": pl.Float64(), "misfit": pl.Float64(), "verdict": pl.String(),
    "verdict_reason": pl.String(),
    "n_bursts": pl.Int64(),
}
MATCHES_SCHEMA: dict[str, pl.DataType] = {
    "experiment": pl.String(), "appl": pl.Int32(), "task": pl.Int32(), "thread": pl.Int32(), "burst_seq": pl.Int64(),
    "other_run": pl.String(), "other_run_id": pl.String(), "other_task": pl.Int32(), "other_thread": pl.Int32(),
    "other_burst_seq": pl.Int64(), "score": pl.Float64(), "ambiguous": pl.Boolean(), "msg_mismatch": pl.Boolean(),
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
    """Two runs share no counter and no logical messages to validate matches with (``allow_timing_only`` merges
    anyway, with a warning)."""


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
    #: the trace's communication records (MESSAGE_SCHEMA of :mod:`synthtrace.tracelib.formats.bursts`: both ends'
    #: task, thread and logical time, size, tag), when the reader or the warehouse kept them; else None and the
    #: logical messages come from the calls alone (:mod:`synthtrace.tracelib.merge.messages`)
    messages: pl.DataFrame | None = None

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
    rescale: bool | None = DEFAULT_RESCALE
    map_ranks: bool = True  # renumber the other run's tasks when its numbering differs (see tracelib.merge.ranks)
    estimate_unmatched: bool = False
    allow_timing_only: bool = False
    min_match_rate: float = 0.5  # share of the shorter run's call structure both runs must have (same program)
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


@dataclass(frozen=True)
class AlignedRun:
    """One other run aligned to the reference (what :func:`_align_other` returns).

    ``run``: the run with its tasks renumbered as the reference's (``renumbered``: {appl << ID_BITS | own task:
    reference task}, None when they correspond as numbered); ``original``: the run as given; ``matches``: the match
    table of the reference bursts (:func:`synthtrace.tracelib.merge.align.align_runs`), its ``other_row`` indexing
    ``source`` (the run's bursts followed by its multi-piece units), compared with ``reference`` (the reference
    bursts, an apportioned burst's counters replaced by its unit's) and ``share`` (a reference burst's share of its
    unit; None when no unit is split); ``common``: counters both runs recorded, ``features`` those the alignment
    compared; ``signals``: the checks of :mod:`synthtrace.tracelib.merge.checks`; ``rate``: share of reference
    bursts matched; ``mean_score``: mean match score; ``comm``: share of matched pairs whose closing calls agree
    (None when nothing matched)."""

    run: RunTables
    original: RunTables
    renumbered: dict[int, int] | None
    matches: pl.DataFrame
    common: tuple[str, ...]
    features: tuple[str, ...]
    reference: pl.DataFrame
    source: pl.DataFrame
    share: pl.Series | None
    signals: PairSignals
    rate: float
    mean_score: float
    comm: float | None


@dataclass(frozen=True)
class QualityRow:
    """One row of ``merge_quality`` before the experiment's columns are added (see QUALITY_SCHEMA and the module
    docstring; shares in [0, 1], errors relative)."""

    counter: str
    source_run: str
    source_run_id: str
    method: str
    rescaled_by: str | None
    coverage: float
    coverage_long: float | None
    estimated_share: float
    estimated_error: float | None
    estimated_error_p95: float | None
    cross_run_diff: float | None
    match_rate: float
    mean_match_score: float
    comm_agreement: float | None
    msg_agreement: float | None
    misfit: float | None
    verdict: str
    verdict_reason: str | None


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


# --------------------------------------------------------------------------------------------- merge
def _align_other(ref: RunTables, ref_units: Units, o: RunTables, ref_seq: pl.DataFrame, ref_counters: list[str],
                 counters: list[str], options: MergeOptions, notes: list[str],
                 ref_messages: pl.DataFrame, ref_opened: pl.DataFrame) -> AlignedRun:
    """Align one other run to the reference: its rank correspondence, match table and signals (:class:`AlignedRun`).

    Units (:mod:`synthtrace.tracelib.merge.pieces`) are aligned, then taken back to the reference's bursts."""
    check_same_layout(ref, o)  # the same tasks and threads, whatever their numbering
    bursts, calls, renum = o.bursts, o.mpi_calls, None
    messages = logical_messages(o.mpi_calls, o.messages)
    if options.map_ranks:
        renum = rank_mapping(ref.bursts, message_counts(ref_messages), o.bursts, message_counts(messages),
                             (ref.run_name, o.run_name))
    if renum:
        bursts, calls, messages = renumber(o.bursts, o.mpi_calls, renum, messages)
        bursts = sort_bursts(bursts)
        moved = sorted((task_of(k), v) for k, v in renum.items() if task_of(k) != v)
        notes.append(f"run {o.run_name!r} numbers its tasks differently from {ref.run_name!r}: mapped by its "
                     f"logical messages and task behaviour ({', '.join(f'{a}->{b}' for a, b in moved[:8])}"
                     f"{', ...' if len(moved) > 8 else ''})")
    mapped = replace(o, bursts=bursts, mpi_calls=calls)
    common = [c for c in ref_counters if c in counters]
    feats = pick_features(common)
    if not feats:
        msg = (f"runs {ref.run_name!r} and {o.run_name!r} share no counter: matched by MPI structure and "
               "timing, checked by their logical messages, with lower match scores")
        warnings.warn(msg, TimingOnlyWarning, stacklevel=3)
        notes.append(msg)
    o_units = units(bursts)
    # message ends are named from the communication records when the run has them (exact pairing); from the calls,
    # the channels' counts are shifted by time instead (a window that cuts a message in flight shifts them)
    o_seq = sequence_table(o_units.table, calls, counters, options.align,
                           messages if o.messages is not None else None)
    m = align_runs(ref_seq, o_seq, feats, options.align)
    m = m.with_columns(arrival_tolerant(ref_seq, o_seq, m))  # receives that follow arrival say nothing
    _check_same_program(ref, o, calls, ref_seq, o_seq, m.get_column("other_seq").is_not_null(), options, notes)
    reference, source, share = ref.bursts, bursts, None
    if ref_units.split or o_units.split:
        ex = expand(ref.bursts, ref_units, bursts, o_units, m, common)
        m, source, reference, share = ex.matches, ex.source, ex.reference, ex.share
    matched = m.get_column("other_seq").is_not_null()
    long_ref = ref.bursts.get_column("duration_ns") >= options.min_error_duration_ns
    work = work_counter(common)
    rate = next((c for c in common if c != work), None)
    sig = pair_signals(reference, source, m, work, rate, long_ref)
    # [helper merge-verdict] the opening messages from the logical messages the aligner uses (one identity)
    m, sig = _check_opened(ref_opened, opened_by(bursts, calls, messages), m, reference, source, work, sig, long_ref)
    sig = replace(sig, unpaired=unpaired(m, source.select(*THREAD_KEYS, "duration_ns"), long_ref,
                                         options.min_error_duration_ns))
    if sig.work_shift is not None and abs(sig.work_shift) > WORK_SHIFT:
        notes.append(f"matched bursts of {o.run_name!r} execute x{math.exp(sig.work_shift):.3f} the "
                     f"instructions of {ref.run_name!r}'s: not the same input or code version?")
    return AlignedRun(
        run=mapped, original=o, renumbered=renum, matches=m, common=tuple(common), features=tuple(feats),
        reference=reference, source=source, share=share, signals=sig,
        rate=float(matched.mean()) if ref.bursts.height else 0.0,
        mean_score=float(m.get_column("match_score").mean() or 0.0),
        comm=float(m.get_column("same_sig").mean() or 0.0) if matched.any() else None)


def _check_opened(ref_opened: pl.DataFrame, opened: pl.DataFrame, m: pl.DataFrame, reference: pl.DataFrame,
                  source: pl.DataFrame, work: str | None, sig: PairSignals,
                  long_ref: pl.Series) -> tuple[pl.DataFrame, PairSignals]:
    """The match table with ``msg_mismatch`` (the pair's bursts were opened by the completion of different messages:
    :func:`synthtrace.tracelib.merge.checks.opened_differently`; ``opened``: the other run's, numbered as the
    reference's) and the signals with its counts."""
    w = work or "duration_ns"  # without a common work counter, the time a burst takes
    flags = opened_differently(ref_opened, opened, m, source.select(*THREAD_KEYS, "burst_seq"),
                               reference.get_column(w), source.get_column(w),
                               POSITION_BY_WORK if work else POSITION_BY_TIME)
    long_matched = long_ref & m.get_column("other_row").is_not_null()
    other = flags.get_column("opened_other").fill_null(False)
    example = flags.get_column("opened_what").filter(other & long_matched).head(1).to_list()
    m = m.with_columns(other.alias("msg_mismatch"))
    return m, replace(sig, opened_other=int((other & long_matched).sum()),
                      opened_checked=int((flags.get_column("opened_checked").fill_null(False) & long_matched).sum()),
                      long_matched=int(long_matched.sum()), opened_example=example[0] if example else "")


def _check_same_program(ref: RunTables, o: RunTables, calls: pl.DataFrame, ref_seq: pl.DataFrame,
                        o_seq: pl.DataFrame, matched: pl.Series, options: MergeOptions, notes: list[str]) -> None:
    """Refuse runs whose call structure agrees on less than ``min_match_rate`` of the shorter run's; warn (in
    ``notes``) when less than ``SAME_LENGTH`` of the longer run's bursts >= 10 us match (``matched``: per row of
    ``ref_seq``, the aligned units of the two runs)."""
    # [helper merge-verdict] the structure is judged timing-free on the shorter run (chopped windows differ in
    # length): consecutive calls per thread, polls and completion calls collapsed (checks.same_structure); the
    # length on the longer run
    same = same_structure(ref.mpi_calls, calls)
    if same is not None and same < options.min_match_rate:
        raise NotSameProgramError(
            f"runs {ref.run_name!r} and {o.run_name!r} are not the same program: only {same:.0%} of the shorter "
            "run's MPI call sequence (polling and completion loops collapsed) align by MPI structure (calls of "
            f"{ref.run_name}: {_call_histogram(ref.mpi_calls)}; of {o.run_name}: {_call_histogram(calls)})")
    long_ref = ref_seq.get_column("duration_ns") >= options.min_error_duration_ns
    # the length on the longer run, over bursts of at least 10 us (polling loops differ in length, not the run)
    n_long = max(int(long_ref.sum()), int((o_seq.get_column("duration_ns") >= options.min_error_duration_ns).sum()))
    on_longer = int((matched & long_ref).sum()) / n_long if n_long else 1.0
    if on_longer < SAME_LENGTH:
        notes.append(f"runs {ref.run_name!r} and {o.run_name!r} cover different lengths: {on_longer:.0%} of the "
                     "longer run's bursts >= 10 us matched (chopped windows, or a run cut short or on another input)")


def merge_runs(runs: Sequence[RunTables], options: MergeOptions = MergeOptions(),
               experiment: str = "", on_step: Callable[[str, int], None] | None = None) -> MergeResult:
    """Align every run to the reference run and merge all counters into the reference run's bursts.
    ``on_step(what, total)`` is called as each step ends (one per other run aligned, one per counter merged;
    ``total``: the number of steps).

    Raises :class:`TooFewRunsError` (fewer than two runs), :class:`UnknownReferenceError`,
    :class:`NotSameProgramError` (different tasks/threads, or runs whose call structure agrees on less than
    ``min_match_rate`` of the shorter run's), :class:`RankCorrespondenceError` (task numbering differs and
    cannot be mapped) and :class:`NoCommonCounterError` (a run shares no counter with the reference, either run has
    no point-to-point message to check the match by and ``allow_timing_only`` is off).
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
    ref_messages = logical_messages(ref.mpi_calls, ref.messages)
    for o in others:
        if set(ref_counters) & set(counters_of[o.run_id]) or options.allow_timing_only:
            continue
        # no counter to validate the match by: the logical messages (timing-free structure) do, when both runs have
        if ref_messages.height and logical_messages(o.mpi_calls, o.messages).height:
            continue
        raise NoCommonCounterError(
            f"runs {ref.run_name!r} ({', '.join(ref_counters) or 'no counters'}) and {o.run_name!r} "
            f"({', '.join(counters_of[o.run_id]) or 'no counters'}) have no counter in common and no point-to-point "
            "messages to validate the match by; use --allow-timing-only to match by MPI structure and timing alone")
    ref_units = units(ref.bursts)
    ref_seq = sequence_table(ref_units.table, ref.mpi_calls, ref_counters, options.align,
                             ref_messages if ref.messages is not None else None)
    ref_opened = opened_by(ref.bursts, ref.mpi_calls, ref_messages)  # [helper merge-verdict]
    base = ref.bursts.select(BASE_COLUMNS)
    n_ref = base.height
    long_ref = ref.bursts.get_column("duration_ns") >= options.min_error_duration_ns
    all_counters: list[str] = list(ref_counters)
    for o in others:
        all_counters += [c for c in counters_of[o.run_id] if c not in all_counters]
    n_steps = len(others) + len(all_counters)
    per_run: dict[str, AlignedRun] = {}
    for o in others:
        per_run[o.run_id] = _align_other(ref, ref_units, o, ref_seq, ref_counters, counters_of[o.run_id], options,
                                         notes, ref_messages, ref_opened)
        if on_step:
            on_step(f"aligned {o.run_name}", n_steps)

    # ---- counters: recorded by the reference, or transferred from the best source run
    merged = pl.concat([base, ref.bursts.select(ref_counters)], how="horizontal")
    quality_rows: list[QualityRow] = []
    flags: list[pl.Expr] = []  # per transferred counter: estimated?
    score_cols: dict[str, str] = {}
    choices: dict[str, Choice] = {}
    for i, c in enumerate(all_counters):
        if on_step and i:  # the step of the counter before has ended (the loop body has several exits)
            on_step(f"merged {all_counters[i - 1]}", n_steps)
        if c in ref_counters:
            partner = next((per_run[o.run_id] for o in others if c in per_run[o.run_id].common), None)
            cross = None
            if partner:
                e = relative_errors(transferred(partner.reference, partner.source,
                                                partner.matches.get_column("other_row"), c, Plan()),
                                    partner.reference.get_column(c), long_ref)
                cross = float(e.median()) if e.len() else None
            quality_rows.append(QualityRow(
                counter=c, source_run=ref.run_name, source_run_id=ref.run_id, method="recorded", rescaled_by=None,
                coverage=float(merged.get_column(c).is_not_null().mean()) if n_ref else 0.0,
                coverage_long=_share(merged.get_column(c).is_not_null(), long_ref), estimated_share=0.0,
                estimated_error=0.0, estimated_error_p95=0.0, cross_run_diff=cross, match_rate=1.0,
                mean_match_score=1.0, comm_agreement=1.0, msg_agreement=None, misfit=None, verdict="ok",
                verdict_reason=None))
            continue
        sources = [o for o in others if c in counters_of[o.run_id]]
        src = max(sources, key=lambda o: per_run[o.run_id].rate)  # first by name among the best
        info = per_run[src.run_id]
        other_row = info.matches.get_column("other_row")
        if src.run_id not in choices:
            choices[src.run_id] = choose(info.reference, info.source, other_row, list(info.common), long_ref,
                                         options.rescale)
        plan = choices[src.run_id].plan(info.run.bursts, c, list(info.common))
        values = transferred(info.reference, info.source, other_row, c, plan)
        if info.share is not None:  # a piece's share of the other run's whole unit (tracelib.merge.pieces)
            values = values * info.share
        values = values.round().cast(pl.Int64)
        est = pl.Series(c, [False] * n_ref, pl.Boolean)
        if options.estimate_unmatched:
            own_seq = sequence_table(ref.bursts, ref.mpi_calls, [], options.align) if ref_units.split else ref_seq
            guess = _estimates(ref, info.run, c, plan, own_seq, sequence_table(
                info.run.bursts, info.run.mpi_calls, [], options.align))
            est = values.is_null() & guess.is_not_null()
            values = pl.select(pl.when(values.is_null()).then(guess).otherwise(values).alias(c)).get_column(c)
            merged = merged.with_columns(est.alias(f"_est_{c}"))
            flags.append(pl.col(f"_est_{c}"))
        merged = merged.with_columns(values.alias(c))
        score_cols[src.run_id] = f"_score_{src.run_id}"
        err, err95 = choices[src.run_id].error(plan)
        sig = info.signals
        v, why = verdict(sig, not info.features)
        quality_rows.append(QualityRow(
            counter=c, source_run=src.run_name, source_run_id=src.run_id, method=plan.method,
            rescaled_by=plan.label, coverage=float(other_row.is_not_null().mean()) if n_ref else 0.0,
            coverage_long=sig.coverage_long, estimated_share=float(est.mean()) if n_ref else 0.0,
            estimated_error=err, estimated_error_p95=err95, cross_run_diff=None, match_rate=info.rate,
            mean_match_score=info.mean_score, comm_agreement=info.comm, msg_agreement=sig.msg_agreement,
            misfit=sig.misfit, verdict=v, verdict_reason=why or None))
    if on_step and all_counters:
        on_step(f"merged {all_counters[-1]}", n_steps)

    # ---- per-burst match score: lowest score over the source runs that supplied counters (NULL if unmatched)
    for run_id, col in score_cols.items():
        merged = merged.with_columns(per_run[run_id].matches.get_column("match_score").alias(col))
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
    quality = pl.DataFrame([{**asdict(q), "experiment": experiment, "reference_run": ref.run_name, "n_bursts": n_ref}
                            for q in quality_rows], schema=QUALITY_SCHEMA)
    matches = pl.concat([_provenance(experiment, per_run[o.run_id]) for o in others])
    return MergeResult(experiment, ref.run_id, ref.run_name, merged, quality, matches, notes)


def _provenance(experiment: str, info: AlignedRun) -> pl.DataFrame:
    """merge_matches rows of one other run: where each reference burst's values came from, in the other run's own
    task numbering (MATCHES_SCHEMA)."""
    m, orig = info.matches, info.original
    row = m.get_column("other_row")
    sel = info.source.select(pl.col("appl", "task", "thread").gather(row))
    if info.renumbered:  # back to the other run's own numbering
        back = {appl_base(k) + v: task_of(k) for k, v in info.renumbered.items()}
        sel = sel.with_columns(
            task_key()
            .replace_strict(back, default=pl.col("task").cast(pl.Int64))
            .cast(pl.Int32)
            .alias("task")
        )
    sel = sel.select(pl.col("task").alias("other_task"), pl.col("thread").alias("other_thread"))
    return pl.concat([m.select(*KEYS), sel, m.select(pl.col("other_seq").alias("other_burst_seq"),
                                                     pl.col("match_score").alias("score"),
                                                     # [helper merge-iter] or an undecidable iteration span
                                                     ((~pl.col("msg_consistent")).fill_null(False)
                                                      | pl.col("ambiguous_span").fill_null(False)).alias("ambiguous"),
                                                     "msg_mismatch")],
                     how="horizontal").select(
        pl.lit(experiment).alias("experiment"), *KEYS, pl.lit(orig.run_name).alias("other_run"),
        pl.lit(orig.run_id).alias("other_run_id"), "other_task", "other_thread", "other_burst_seq", "score",
        "ambiguous", "msg_mismatch")


def _share(flags: pl.Series, among: pl.Series) -> float | None:
    """Share of True ``flags`` among the rows where ``among`` is True (None when there are none)."""
    k = int(among.sum())
    return float((flags & among).sum()) / k if k else None


def _estimates(ref: RunTables, src: RunTables, counter: str, plan: Plan, ref_seq: pl.DataFrame,
               src_seq: pl.DataFrame) -> pl.Series:
    """A flagged estimate of ``counter`` for every reference burst, from source bursts closed by the same call.

    With a work counter w: median of counter / w over the source bursts of the same thread and loose signature,
    times the reference burst's w; without: the median of counter over those bursts. Falls back to the same loose
    signature on any thread, then to the thread's median.
    """
    use = [counter, *([plan.work] if plan.work else [])]
    s = pl.concat([src_seq.select(*THREAD_KEYS, "lsig"), src.bursts.select(use)], how="horizontal")
    v = pl.col(counter).cast(pl.Float64)
    s = s.with_columns((v / pl.col(plan.work).cast(pl.Float64).replace(0, None) if plan.work else v).alias("_v"))
    by_thread_sig = s.group_by(*THREAD_KEYS, "lsig").agg(pl.col("_v").median().alias("_a"))
    by_sig = s.group_by("appl", "lsig").agg(pl.col("_v").median().alias("_b"))
    by_thread = s.group_by(*THREAD_KEYS).agg(pl.col("_v").median().alias("_c"))
    r = pl.concat([ref_seq.select(*THREAD_KEYS, "lsig"), ref.bursts.select(use[1:])], how="horizontal")
    r = (r.join(by_thread_sig, on=[*THREAD_KEYS, "lsig"], how="left", maintain_order="left")
         .join(by_sig, on=["appl", "lsig"], how="left", maintain_order="left")
         .join(by_thread, on=THREAD_KEYS, how="left", maintain_order="left"))
    est = pl.coalesce("_a", "_b", "_c")
    if plan.work:
        est = est * pl.col(plan.work).cast(pl.Float64)
    return r.select(est.round().cast(pl.Int64).alias("_est")).get_column("_est")
