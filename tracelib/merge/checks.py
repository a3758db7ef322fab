"""Signals that a merge is wrong, and the verdict they give (DESIGN §6, merge_quality's ``verdict``).

Noise does not make a merge wrong; misalignment does, and so do runs that are not the same program on the same
input. **Same program or not** is decided before, from timing-free structure only (:func:`same_structure`): per
thread, the consecutive calls (call and call site, never a partner), every loop of polls and completion calls one
unit, whatever its length; runs sharing less than half of the shorter one's are refused. Signals, over matched
pairs of reference bursts of at least 10 us (polling iterations and glue bursts never count), from the reference
counters both runs recorded:

- **misfit**: a pair is misaligned when its two bursts lie in different iterations of their threads' own call
  sequences (iteration consistency, where the sequence is periodic; not on a thread without MPI calls, which has
  no call sequence, nor for bursts a call made once per thread names: :func:`placed_by_unique_call`), or when its
  work (instructions) *and* per-instruction rate of a second common counter (cycles: the IPC) both differ by more
  than ``MISFIT_LOG`` (log): work alone may differ (dynamic load balancing), rate alone too (OS noise,
  contention); both at once means another burst. The rate is compared with the task's typical rate difference
  between the runs (its median over the task's pairs): a run on slower nodes, at another clock or with more
  ranks per node runs every burst of a task at another rate;
- **work against the noise** (:mod:`synthtrace.tracelib.merge.noise`): a pair whose instructions differ by more
  than ``NOISE_K`` times the campaign's own run-to-run noise (the lower quartile of the pairs' absolute log
  ratios, at least 0.5 %) does other work in each run (dynamic scheduling: jobs handed out in arrival order,
  OpenMP ``schedule(dynamic)`` chunks), so its merged values are another piece of work's; so are every burst's
  where the median pair differs by more than ``NOISE_CEILING``;
- **coverage**: the share of long reference bursts matched;
- **work shift**: the median log ratio of the pairs' instructions, over all pairs or, when larger, over the pairs
  of one call site that holds at least ``SITE_MIN_SHARE`` of the instructions; the same program on the same input
  executes the same instructions for the same burst (within 1 %), another input deck or code version does not
  (a code version may change one kernel only). A median counts only where it stands ``SHIFT_Z`` standard errors
  clear of no shift: where work moves between bursts from run to run (dynamic load balancing) the pairs' ratios
  spread by tens of percent and a site's median over a few hundred of them is off by a few percent by chance;
  a code version or input deck moves every burst of the site alike, far outside that error;
- **bracketing messages**: every matched pair is checked against the logical messages just before and after it on
  its thread: both must have their two ends matched to the two ends of one message of the other run. A pair that
  fails lies in a span the alignment placed differently from its partners (``merge_matches.ambiguous``). The
  receive ends of a thread whose posted receives hold other partners' messages in the two runs (``MPI_ANY_SOURCE``
  receives: which message a receive takes follows arrival) are left out (:func:`arrival_tolerant`);
- **opening messages**: a burst opened by a call that returns because its messages arrived (a blocking receive,
  ``MPI_Wait``/``Waitany``/``Waitsome``/``Waitall``) works on those messages; which ones an ``MPI_Waitany`` or
  ``MPI_ANY_SOURCE`` receive returns follows arrival, which differs between runs. The call completing each
  receive is named by the trace's records (Paraver's physical receive time is the exit of the call that
  completed it; a receive recorded in its completing call, as Score-P does, names it by its time), never by
  position: the logical messages' ``c_call_seq``, the identity the aligner uses too. A matched pair whose two
  bursts were opened by the completion of other sets of channels (appl, comm, sender, receiver, tag: none in
  common, or one run completed the reference burst's messages by several calls and the match is the work after
  one of them) pairs the work on some messages with the work on others (``merge_matches.msg_mismatch``);
- **message agreement** (:mod:`synthtrace.tracelib.merge.message_graph`): ``msg_agreement`` is the share of the
  reference run's messages, among those whose two ends are matched and named in both runs, whose ends are matched
  to the two ends of one message of the other run; ``msg_misaligned`` counts the threads that disagree with their
  partners both ways (on a channel they send on and one they receive on): a rank aligned an iteration off,
  however alike its iterations look. One channel disagreeing one way is a channel whose shift a run's timing got
  wrong (ranks that drift apart), not a misalignment. Messages are judged whatever the length of their bursts.

- **machine state** ([verdict24] :func:`synthtrace.tracelib.merge.noise.machine_state`): the long pairs' cycles per
  instruction per task (summed over the task's pairs), against the other tasks' spread: a task beyond ``RATE_K``
  times it (at least ``RATE_FLOOR``), or every task beyond ``RATE_SHIFT``, ran in another machine state in the other
  run (a job sharing its node, another build or data layout); node clocks and placement move tasks by a few percent;
  the same per cache counter both runs recorded ([contention25] misses per instruction, which the clocks do not
  move: a contended node hidden in the clocks' spread); merged_bursts' ``other_machine_state`` marks those tasks'
  bursts that got values from that run;

- **work that ran on** ([order22] :mod:`synthtrace.tracelib.merge.arrival_order`): pairs dropped because the work after
  a message ran on into another call's phase in one run (``ran_on``; suspect above ``SUSPECT_MISFIT`` of the long
  reference bursts, their values NULL; the misfit judges them before the drop, the unpaired count never); spans
  after a set completion whose requests hold other messages in the two runs are re-paired by message where the
  work says so, else flagged as ``msg_mismatch`` and counted apart (``arrival_undecided``: suspect above
  ``SUSPECT_MISFIT``, never bad: undecided is not wrong).

Verdict per (experiment, counter): ``bad`` when the share of checked pairs in ambiguous spans, the share of long
matched pairs opened by other messages or the misfit share exceeds ``BAD_MISFIT``, coverage is below
``BAD_COVERAGE`` or a thread is misaligned by its messages; ``suspect`` when the share of long matched pairs
opened by other messages, the ambiguous-span or the misfit share exceeds ``SUSPECT_MISFIT``, more than
``OFF_NOISE_SUSPECT`` of the long matched pairs lie off the noise (or the median pair does), some tasks or all ran
in another machine state (:attr:`PairSignals.machine`), coverage is below
``SUSPECT_COVERAGE``, the work shifts by more than ``WORK_SHIFT`` or matching used timing only without the
logical messages vouching for it (:attr:`PairSignals.validated_by_messages`); else ``ok``. A recorded counter is
``ok``. The experiment's verdict is the worst of its counters'.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

import numpy as np
import polars as pl

from synthtrace.tracelib.domain.mpi_calls import calls_with
from synthtrace.tracelib.merge.message_graph import agreement, bracketed, ends
from synthtrace.tracelib.merge.messages import CHANNEL, POLL_UNIT_CALLS
from synthtrace.tracelib.merge.noise import MachineState, WorkNoise
from synthtrace.tracelib.schema import THREAD_KEYS

#: the keys of a task (its node: the rates of its bursts shift together between runs)
TASK_KEYS = THREAD_KEYS[:2]

MISFIT_LOG = math.log(1.5)
SUSPECT_MISFIT, BAD_MISFIT = 0.005, 0.05
SUSPECT_COVERAGE, BAD_COVERAGE = 0.9, 0.5
WORK_SHIFT = math.log(1.03)
SITE_MIN_SHARE, SITE_MIN_PAIRS = 0.1, 20
#: a median work shift counts when it lies at least this many standard errors from 0 (the error of a median of n
#: log ratios: 1.2533 x their robust standard deviation (1.4826 x the median absolute deviation) / sqrt(n))
SHIFT_Z = 3.0
ORDER = {"ok": 0, "suspect": 1, "bad": 2}
#: the position, not the message, is the identity of the bursts after a call when the positional matches fit their
#: work better than the message's twins by this much (log; instructions vary by ~1 % between runs, durations more)
POSITION_BY_WORK, POSITION_BY_TIME = math.log(1.1), math.log(1.5)
#: runs without a common counter are validated by their logical messages when this share of the long matched pairs
#: lie between checked messages, and this share of those messages agree
VALIDATED_SHARE, VALIDATED_AGREEMENT = 0.5, 0.99
#: calls that return because the messages they complete have arrived: the burst they open works on those messages
OPENING_CALLS: tuple[str, ...] = calls_with(roles=("wait", "recv", "sendrecv"), blocking=True)
#: a message's channel as the opening-message check compares it: the logical messages' (messages.CHANNEL)
OPEN_CHANNEL = CHANNEL
OPENED_SCHEMA: dict[str, pl.DataType] = {"appl": pl.Int32(), "task": pl.Int32(), "thread": pl.Int32(),
                                         "burst_seq": pl.Int64(), "comm": pl.Int64(), "sender": pl.Int32(),
                                         "receiver": pl.Int32(), "tag": pl.Int64(), "k": pl.Int64(),
                                         "site": pl.String()}


#: below this share of one run's consecutive unit pairs of a kind the other run has (:func:`kinds_share`), the runs
#: look like two code versions: a run cut short or an iteration more repeats the same kinds
SAME_KINDS = 0.9
_POLL_UNIT = 0  # the token of such a run (never the hash of a call)


def call_unit(frame: pl.DataFrame, sites: bool = True) -> pl.Expr:
    """A call of ``frame`` (a calls or bursts table: its ``mpi_call``, the burst's closing call) as the structure
    checks name it (UInt64): its call and, with ``sites``, its call site (never its partner), or one token for every
    poll and completion call (:data:`POLL_UNIT_CALLS`), whatever it is."""
    poll = pl.col("mpi_call").is_in(list(POLL_UNIT_CALLS)).fill_null(False)
    name = pl.struct("mpi_call", "call_site") if sites and "call_site" in frame.columns else pl.col("mpi_call")
    return pl.when(poll).then(pl.lit(_POLL_UNIT, pl.UInt64)).otherwise(name.hash(7).replace(_POLL_UNIT, 1))


def call_structure(calls: pl.DataFrame, sites: bool = True) -> pl.DataFrame:
    """A run's MPI call sequence as timing-free structure: per thread, the counts of consecutive pairs of units
    (appl, task, thread, ``a``, ``b``, ``n``). A unit is a call other than a poll or a completion call, named by
    its call and, with ``sites``, its call site (never its partner: which partner an ``MPI_ANY_SOURCE`` receive
    got follows arrival), or a maximal run of polling and completion calls (:data:`POLL_UNIT_CALLS`), whatever
    they are and however many: how often a loop tests, and whether the messages came before its final wait,
    follow timing (Test x N is Test x M)."""
    if calls.height == 0:
        return pl.DataFrame(schema={**{k: pl.Int32 for k in THREAD_KEYS}, "a": pl.UInt64, "b": pl.UInt64,
                                    "n": pl.UInt32})
    in_run = (pl.col("a") == _POLL_UNIT) & (pl.col("a").shift(1).over(THREAD_KEYS) == _POLL_UNIT)
    u = (calls.select(*[pl.col(k).cast(pl.Int32) for k in THREAD_KEYS], "call_seq", call_unit(calls, sites).alias("a"))
         .sort(*THREAD_KEYS, "call_seq")
         .filter(~in_run.fill_null(False)))
    return (u.with_columns(pl.col("a").shift(-1).over(THREAD_KEYS).alias("b")).drop_nulls("b")
            .group_by(*THREAD_KEYS, "a", "b").agg(pl.len().alias("n")))


def sites_named(*calls: pl.DataFrame) -> bool:
    """Whether call sites can tell calls apart in every one of these runs' calls (each names some)."""
    return all("call_site" in c.columns and c.get_column("call_site").is_not_null().any() for c in calls)


def structure_counts(ref_calls: pl.DataFrame, other_calls: pl.DataFrame, sites: bool) -> tuple[int, int, int]:
    """(reference's, other's, common) consecutive unit pairs of two runs' :func:`call_structure` (the other run's
    tasks numbered as the reference's; common: per thread and pair, the smaller count). Additive over groups of
    tasks (``sites``: :func:`sites_named` of the whole runs)."""
    return structure_sums(call_structure(ref_calls, sites), call_structure(other_calls, sites))


def structure_sums(ref: pl.DataFrame, other: pl.DataFrame) -> tuple[int, int, int]:
    """:func:`structure_counts` of two runs' :func:`call_structure` tables (computed with the same ``sites``)."""
    common = ref.join(other, on=[*THREAD_KEYS, "a", "b"]).select(pl.min_horizontal("n", "n_right").sum()).item()
    return int(ref.get_column("n").sum()), int(other.get_column("n").sum()), int(common or 0)


def structure_kinds(ref: pl.DataFrame, other: pl.DataFrame) -> tuple[int, int]:
    """(reference's, other's) consecutive unit pairs of two runs' :func:`call_structure` tables whose kind (thread,
    unit, next unit) the other run has at all, however often: a run cut short or an iteration more repeats the same
    kinds a different number of times; another code version (a collective more per iteration) makes kinds of its
    own, every iteration. Additive over groups of tasks."""
    keys = [*THREAD_KEYS, "a", "b"]
    known = [a.join(b.select(keys), on=keys, how="semi").get_column("n").sum() for a, b in ((ref, other), (other, ref))]
    return int(known[0] or 0), int(known[1] or 0)


def kinds_share(n_ref: int, n_other: int, ref_known: int, other_known: int) -> float | None:
    """The smaller of the two runs' shares of consecutive unit pairs whose kind the other run has
    (:func:`structure_kinds`), in [0, 1]; None when neither run has two consecutive calls."""
    shares = [k / n for n, k in ((n_ref, ref_known), (n_other, other_known)) if n]
    return min(shares) if shares else None


def structure_share(n_ref: int, n_other: int, n_common: int) -> float | None:
    """The share of the shorter run's call structure the other run has too (:func:`structure_counts`), in [0, 1]:
    None when neither run has two consecutive calls."""
    if not (n_ref or n_other):
        return None
    shorter = min(n_ref, n_other)
    return n_common / shorter if shorter else 0.0


def same_structure(ref_calls: pl.DataFrame, other_calls: pl.DataFrame) -> float | None:
    """The share of the shorter run's call structure (:func:`call_structure`: consecutive units per thread,
    the other run's tasks numbered as the reference's) that the other run has too, in [0, 1]: 1 for two runs of
    one program on one input whatever their timing (a run cut short, or a few calls more, cost only their share);
    near 0 for another program. Call sites count when both runs name them. None when neither run has a call."""
    return structure_share(*structure_counts(ref_calls, other_calls, sites_named(ref_calls, other_calls)))


@dataclass(frozen=True)
class PairSignals:
    """What the matched pairs of one other run say (see the module docstring): ``misfit`` (share of long matched
    pairs), ``work_shift`` (log ratio), ``coverage_long`` (share), ``msg_agreement`` (share; None: no message
    checked), ``msg_misaligned`` (threads). Summable over disjoint groups of reference tasks (``+``, the grouped
    merge's tallies)."""

    # [helper merge-scale] a share's metadata names its denominator (a count field), so that ``+`` can add it
    misfit: float | None = field(metadata={"per": "misfit_judged"})
    work_shift: float | None = field(metadata={"per": None})  # a median: not additive (from a sample)
    coverage_long: float | None = field(metadata={"per": "long_total"})
    msg_agreement: float | None = field(metadata={"per": "agree_checked"})
    msg_misaligned: int
    inconsistent: int = 0  # long matched pairs whose logical messages before or after disagree (ambiguous span)
    checked: int = 0  # long matched pairs with a checked message before or after them
    opened_other: int = 0  # long matched pairs opened by the completion of other sets of channels
    opened_checked: int = 0  # long matched pairs whose two bursts were both opened by completed messages
    long_matched: int = 0  # long matched pairs
    opened_example: str = ""  # one such pair, in words (the reason's example)
    unpaired: int = 0  # long reference bursts left unmatched across from long unmatched bursts of the other run
    # [helper merge-iter] long matched pairs in an iteration span one run has more of, whose place the data cannot
    # tell (align's ambiguous_span): interchangeable partners
    undecided: int = 0
    long_total: int = 0  # [helper merge-scale] long reference bursts (coverage_long's denominator)
    agree_checked: int = 0  # [helper merge-scale] pairs whose message agreement was checked (msg_agreement's)
    # [order22] long reference bursts whose pair was dropped: the work after a message ran on into the next call's
    # phase in one run, so no burst of the other run holds theirs (arrival_order.ran_on; their values are NULL)
    ran_on: int = 0
    rank_tie: str = ""  # [ranks22] why the task numbering is one of several the data cannot tell apart (ranks.py)
    # [verdict23] long pairs the misfit judged: the long matched pairs and those dropped after as ``ran_on`` (a
    # misaligned pair whose work differs is still misaligned evidence: counted once, as a misfit, before the drop)
    misfit_judged: int = 0
    # [verdict23] long matched pairs after a set completion whose requests hold other messages in the two runs, where
    # the work cannot tell position from message (arrival_order.by_request): undecided, not wrong; one example
    arrival_undecided: int = 0
    arrival_example: str = ""
    # [noise22] the pairs' instructions against the campaign's own noise: a median, not additive (from a sample:
    # noise.work_noise of the choice sample's pairs, set by the merge; pair_signals leaves it None)
    work_noise: WorkNoise | None = field(default=None, metadata={"per": None})
    # [flush24] long reference bursts left unmatched because they or their match border a span one run's recording
    # was off in (Extrae_shutdown, Score-P measurement off): part of a phase each (pieces.without_untraced)
    untraced: int = 0
    # [flush24] long reference pieces of a unit the other run cuts elsewhere (a buffer flush): apportioned its unit's
    # values by work (estimates at the unit's average rates: pieces.expand), or left NULL where the reference's own
    # counters show its pieces ran at other rates (``uneven``: pieces._uneven)
    apportioned: int = 0
    uneven: int = 0
    # [verdict24] the pairs' cycles per instruction per task (noise.machine_state of the choice sample's pairs, set
    # by the merge): a median, not additive
    machine: MachineState | None = field(default=None, metadata={"per": None})

    def __add__(self, other: PairSignals) -> PairSignals:
        """[helper merge-scale] The signals of two disjoint groups of reference tasks: counts add, a share is its
        summed count over its summed denominator, a median (``work_shift``) is None (take it from a sample), the
        first example."""
        out: dict[str, object] = {}
        for f in fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if "per" in f.metadata:
                per = f.metadata["per"]  # a share is None exactly when its denominator is 0
                parts = [(round(v * getattr(g, per)), getattr(g, per)) for g, v in ((self, a), (other, b))
                         if per and v is not None]
                n = sum(w for _, w in parts)
                out[f.name] = sum(c for c, _ in parts) / n if n else None
            else:
                out[f.name] = (a or b) if isinstance(a, str) else a + b
        return PairSignals(**out)

    @property
    def validated_by_messages(self) -> bool:
        """The logical messages vouch for the match: at least ``VALIDATED_SHARE`` of the long matched pairs lie
        between checked messages and at least ``VALIDATED_AGREEMENT`` of the checked messages agree (what lets runs
        without a common counter merge with an ``ok`` verdict: the structure is timing-free)."""
        return (self.long_matched > 0 and self.checked >= VALIDATED_SHARE * self.long_matched
                and self.msg_agreement is not None and self.msg_agreement >= VALIDATED_AGREEMENT)


def pair_signals(ref_bursts: pl.DataFrame, src_bursts: pl.DataFrame, matches: pl.DataFrame, work: str | None,
                 rate: str | None, long_ref: pl.Series, dropped: pl.Series | None = None) -> PairSignals:
    """The :class:`PairSignals` of a match table of :func:`synthtrace.tracelib.merge.align.align_runs`. ``dropped``:
    the rows whose pair (still in ``matches``) is dropped after the checks (:func:`synthtrace.tracelib.merge.
    arrival_order.ran_on`): the misfit judges them, every other signal counts them unmatched."""
    other_row = matches.get_column("other_row")
    n_long = int(long_ref.sum())
    judged = other_row.is_not_null() & long_ref
    matched = judged if dropped is None else judged & ~dropped
    cov = float(matched.sum()) / n_long if n_long else None
    agree = matches.get_column("msg_agree").mean()
    off_ranks = matches.filter("msg_misaligned").select(pl.struct("appl", "task", "thread").n_unique()).item()
    off_iter = (~matches.get_column("same_iter")).fill_null(False) & _clock_judges(ref_bursts, src_bursts, other_row)
    consistent = matches.get_column("msg_consistent").filter(matched)
    spans = (int((~consistent).sum()), int(consistent.is_not_null().sum()))
    undecided = (int((matches.get_column("ambiguous_span").fill_null(False) & matched).sum())  # [helper merge-iter]
                 if "ambiguous_span" in matches.columns else 0)
    counts = dict(long_total=n_long, long_matched=int(matched.sum()),  # [helper merge-scale] the shares' counts
                  agree_checked=int(matches.get_column("msg_agree").is_not_null().sum()),
                  misfit_judged=int(judged.sum()))
    if work is None or not judged.any():
        misfit = float((off_iter & judged).sum()) / int(judged.sum()) if judged.any() else None
        return PairSignals(misfit, None, cov, agree, off_ranks, *spans, undecided=undecided, **counts)
    cols = [c for c in dict.fromkeys([work, rate]) if c]
    keys = THREAD_KEYS if "thread" in ref_bursts.columns else TASK_KEYS
    f = pl.concat([ref_bursts.select(*[pl.col(k) for k in keys],
                                     *[pl.col(c).cast(pl.Float64).log().alias(f"r_{c}") for c in cols]),
                   src_bursts.select(pl.col(c).cast(pl.Float64).gather(other_row).log().alias(f"s_{c}")
                                     for c in cols)], how="horizontal").filter(judged)
    dw = pl.col(f"r_{work}") - pl.col(f"s_{work}")
    off = dw.abs() > MISFIT_LOG
    if rate and rate != work:
        # the rate's difference from the task's typical one: a task on a slower node, at another clock or sharing
        # it with more ranks in one run runs every burst at another rate (up to x3), which is no misalignment
        dr = pl.col(f"r_{rate}") - pl.col(f"s_{rate}") - dw
        off = off & ((dr - dr.filter(dr.is_finite()).median().over(TASK_KEYS)).abs() > MISFIT_LOG)
    off = off.fill_null(False) | pl.Series(off_iter).filter(judged)
    misfit = f.select(off.mean()).item()
    f = f.filter(matched.filter(judged))  # the work of the pairs the merge keeps
    # the call closing each burst (its source location where the trace has one) names the code it runs
    named_by = [c for c in ("call_site", "mpi_call") if c in ref_bursts.columns]
    site = (ref_bursts.select(pl.coalesce(named_by).cast(pl.String)).to_series() if named_by
            else pl.repeat(None, ref_bursts.height, dtype=pl.String, eager=True)).filter(matched)
    pairs = f.select(dw.alias("dw"), pl.col(f"r_{work}").exp().alias("work")).with_columns(site.alias("site"))
    shift = _largest_site_shift(pairs, pairs.get_column("dw").median() if pairs.height else None)
    return PairSignals(misfit, shift, cov, agree, off_ranks, *spans, undecided=undecided, **counts)


def _unique_calls(bursts: pl.DataFrame) -> pl.DataFrame:
    """Per burst row: ``_uc``, the hash of its closing call (call and call site) when that call closes no other
    burst of its thread (``MPI_Init``, ``MPI_Finalize``), and ``_uo``, that of its opening call (the closing call of
    the thread's previous burst) when that one is unique; NULL otherwise."""
    name = pl.struct("mpi_call", *[c for c in ("call_site",) if c in bursts.columns]).hash(11)
    once = pl.col("mpi_call").is_not_null() & (pl.len().over(*THREAD_KEYS, name) == 1)
    return bursts.select(*THREAD_KEYS, pl.when(once).then(name).alias("_uc")).select(
        "_uc", pl.col("_uc").shift(1).over(THREAD_KEYS).alias("_uo"))


def _clock_judges(ref_bursts: pl.DataFrame, src_bursts: pl.DataFrame, other_row: pl.Series) -> pl.Series:
    """Per reference row: whether the iteration clock judges its pair. The clock counts a thread's own calls: a
    thread that makes none (an OpenMP worker, matched through its master's parallel regions) has no clock, and a
    pair that a unique call names (:func:`placed_by_unique_call`) needs none. All True for frames without the
    bursts' thread keys and closing calls (counter samples)."""
    if not {*THREAD_KEYS, "mpi_call"} <= set(ref_bursts.columns) & set(src_bursts.columns):
        return pl.Series([True] * other_row.len(), dtype=pl.Boolean)
    callless = ref_bursts.select(pl.col("mpi_call").is_null().all().over(THREAD_KEYS)).to_series()
    return ~callless & ~placed_by_unique_call(ref_bursts, src_bursts, other_row)


def placed_by_unique_call(ref_bursts: pl.DataFrame, src_bursts: pl.DataFrame, other_row: pl.Series) -> pl.Series:
    """Per reference row: its pair's two bursts are closed, or opened, by one call that occurs once in each run's
    thread (the burst before ``MPI_Finalize``, the one after it): that call names them, whatever the iteration
    clocks say (a run with more iterations numbers its epilogue apart)."""
    r, o = _unique_calls(ref_bursts), _unique_calls(src_bursts)
    hit = other_row.is_not_null()
    o = o.select(pl.all().gather(other_row.fill_null(0)))
    same = [(r.get_column(c) == o.get_column(c)).fill_null(False) for c in ("_uc", "_uo")]
    return (same[0] | same[1]) & hit


def opened_by(bursts: pl.DataFrame, calls: pl.DataFrame, messages: pl.DataFrame | None) -> pl.DataFrame:
    """Which messages opened each burst (:data:`OPENED_SCHEMA`, one row per burst and message): the point-to-point
    messages completed by the call that opened the burst (the call ending where the burst starts), when that call is
    one of :data:`OPENING_CALLS` (a test returns whether or not anything arrived: what follows it is not opened
    by a message); ``k``: the message's logical order on its channel, ``site``: the opening call and its call site.

    ``messages``: the run's logical messages (:func:`synthtrace.tracelib.merge.messages.logical_messages`, numbered as
    ``bursts`` and ``calls``): each names the call that completed its receive (``c_call_seq``, from the trace's
    records), so the check and the aligner share one identity of a message and of its completing call."""
    empty = pl.DataFrame(schema=OPENED_SCHEMA)
    if calls.height == 0 or bursts.height == 0 or messages is None or messages.height == 0:
        return empty
    keys = [pl.col(k).cast(pl.Int32) for k in THREAD_KEYS]
    site = pl.concat_str(pl.col("mpi_call"), pl.lit("@"), pl.col("call_site").fill_null("") if "call_site" in
                         calls.columns else pl.lit("")).alias("site")
    opening = calls.filter(pl.col("mpi_call").is_in(list(OPENING_CALLS))).select(
        *keys, "call_seq", pl.col("end_ns").alias("start_ns"), site)
    done = (messages.filter(pl.col("c_call_seq").is_not_null())
            .select(pl.col("appl").cast(pl.Int32), pl.col("receiver").cast(pl.Int32).alias("task"),
                    pl.col("r_thread").cast(pl.Int32).alias("thread"), pl.col("c_call_seq").alias("call_seq"),
                    *OPEN_CHANNEL[1:], "k")
            .join(opening, on=[*THREAD_KEYS, "call_seq"])
            .join(_completed_unrecorded(messages), on=[*THREAD_KEYS, "call_seq"], how="anti"))
    return (bursts.select(*keys, "burst_seq", "start_ns").join(done, on=[*THREAD_KEYS, "start_ns"])
            .select([pl.col(k).cast(v) for k, v in OPENED_SCHEMA.items()]).unique())


def _completed_unrecorded(messages: pl.DataFrame) -> pl.DataFrame:
    """The receiver's completing calls (appl, task, thread, call_seq) that may have completed messages no record
    holds: on a channel that lost its first messages (a partner whose trace began late: its ``k``, numbered from the
    run's start by :func:`synthtrace.tracelib.merge.messages.lost_at_start`, begins above 0), every completing call
    of the receiving thread up to the one that completed the channel's first recorded message (which may have
    completed an earlier one too). The set such a call completed is the recorded part of what it received
    (rank_traced_late_ref: a reference burst after the messages from task 4 matched to the one after those from
    tasks 4 and 6), which is no other arrival order."""
    keys = [pl.col("appl").cast(pl.Int32), pl.col("receiver").cast(pl.Int32).alias("task"),
            pl.col("r_thread").cast(pl.Int32).alias("thread")]
    named = messages.filter(pl.col("c_call_seq").is_not_null() & pl.col("k").is_not_null())
    first = (named.group_by(OPEN_CHANNEL).agg(pl.col("k").min().alias("_k0"), pl.col("c_call_seq", "r_thread")
                                              .sort_by("k").first())
             .filter(pl.col("_k0") > 0).select(*keys, pl.col("c_call_seq").alias("_c0"))
             .group_by(THREAD_KEYS).agg(pl.col("_c0").max()))
    return (named.select(*keys, pl.col("c_call_seq").alias("call_seq")).unique().join(first, on=THREAD_KEYS)
            .filter(pl.col("call_seq") <= pl.col("_c0")).select(*THREAD_KEYS, "call_seq"))


def opened_differently(ref_opened: pl.DataFrame, other_opened: pl.DataFrame, matches: pl.DataFrame,
                       other_bursts: pl.DataFrame, ref_work: pl.Series, other_work: pl.Series,
                       tolerance: float = POSITION_BY_WORK) -> pl.DataFrame:
    """Per reference burst (rows of ``matches``, in order): ``opened_checked`` (both bursts of the pair were opened by
    completed messages: :func:`opened_by`) and ``opened_other`` (those messages are another set of channels, and the
    message identity is not outvoted by work; NULL when not checked); ``opened_what``: the two sets' senders in words
    where they differ.

    The other run's burst opened by the reference burst's own logical message (channel, k) at the same call site is
    its **twin**: the burst a match following the message would have taken. Whether the work after such a call
    belongs to the message (unpacking the face that came) or to the position (the code after the first of two
    ``MPI_ANY_SOURCE`` receives, whatever came) the calls cannot say; the work can: per reference thread and
    opening site, when the positional matches fit the reference bursts' work clearly better than their twins do
    (median log distance smaller by ``tolerance``), the position is the identity and nothing is flagged. A pair
    whose reference message opened no burst at that site in the other run (completed there by a test, or at
    another site: no twin) is flagged unless its thread and site's twins say the position is the identity.
    ``other_bursts``: appl, task, thread, burst_seq of the other run's rows (reference numbering); ``ref_work`` /
    ``other_work``: per row of the reference (``matches``) / the other run, the work of the burst (instructions,
    or duration without a common work counter: then pass ``POSITION_BY_TIME``, durations vary more)."""
    row = matches.get_column("other_row")
    pairs = pl.concat([matches.select(pl.int_range(pl.len(), dtype=pl.Int64).alias("_i"),
                                      *[pl.col(k).cast(pl.Int32) for k in THREAD_KEYS], "burst_seq"),
                       other_bursts.select(*[pl.col(k).cast(pl.Int32).alias(f"o_{k}") for k in THREAD_KEYS],
                                           pl.col("burst_seq").alias("o_burst_seq")).gather(row.fill_null(0))
                       .with_columns(pl.Series("_row", row)),
                       pl.DataFrame({"_w": ref_work.cast(pl.Float64).log()})], how="horizontal")
    pairs = pairs.with_columns(pl.when(pl.col("_row").is_not_null()).then(pl.col("o_burst_seq")).alias("o_burst_seq"))
    ow = other_bursts.select(*[pl.col(k).cast(pl.Int32) for k in THREAD_KEYS], "burst_seq").with_columns(
        other_work.cast(pl.Float64).log().alias("_ow"))
    bk = [*THREAD_KEYS, "burst_seq"]
    chan = OPEN_CHANNEL[1:]
    r = ref_opened.join(pairs, on=bk).select("_i", *THREAD_KEYS, *chan, "k", "site", "_w", "_row")
    o = other_opened.rename({k: f"o_{k}" for k in bk}).join(pairs, on=[f"o_{k}" for k in bk]).select(
        "_i", *[pl.col(k).alias(f"o_{k}") for k in chan])
    both = r.select("_i").unique().join(o.select("_i").unique(), on="_i")
    # the pairs whose two bursts work on the same set of channels (the set a completion call returned)
    r_set, o_set = r.select("_i", *chan).unique(), o.select("_i", *[f"o_{k}" for k in chan]).unique()
    n_common = (r_set.join(o_set, left_on=["_i", *chan], right_on=["_i", *[f"o_{k}" for k in chan]])
                .group_by("_i").agg(pl.len().alias("_nc")))
    same = (r_set.group_by("_i").agg(pl.len().alias("_nr")).join(o_set.group_by("_i").agg(pl.len().alias("_no")),
                                                                  on="_i")
            .join(n_common, on="_i").filter((pl.col("_nc") == pl.col("_nr")) & (pl.col("_nc") == pl.col("_no")))
            .select("_i"))
    # the twins of the pairs opened by other sets of messages (none in common, or a part: the other run completed
    # the reference burst's messages by several calls and the match took the work after one of them), and the work
    # of both candidates; a twin is another burst than the match itself
    differ = both.join(same, on="_i", how="anti")
    twins = (r.join(differ, on="_i")
             .join(other_opened.join(ow.with_row_index("_tr"), on=bk)
                   .select(*chan, "k", "site", pl.col("_ow").alias("_tw"), pl.col("_tr").cast(pl.Int64)),
                   on=[*chan, "k", "site"], how="left")
             .with_columns(pl.when(pl.col("_tr") != pl.col("_row")).then(pl.col("_tw")).alias("_tw"))
             .join(ow.select(pl.int_range(pl.len(), dtype=pl.Int64).alias("_row"), pl.col("_ow").alias("_pw")),
                   on="_row", how="left")
             .group_by("_i", maintain_order=True).agg(pl.col(*THREAD_KEYS, "site", "_w", "_pw").first(),
                                                      pl.col("_tw").drop_nulls().first()))
    # per reference thread and opening site: do the positional matches fit the work better than the twins? (a site
    # without any twin has no such evidence: the message is the identity)
    verdict_of_site = (twins.group_by(*THREAD_KEYS, "site")
                       .agg(((pl.col("_w") - pl.col("_tw")).abs() - (pl.col("_w") - pl.col("_pw")).abs()).median()
                            .alias("_gain")))
    flagged = (twins.join(verdict_of_site, on=[*THREAD_KEYS, "site"])
               .filter(~(pl.col("_gain") > tolerance).fill_null(False)).select("_i"))

    def senders(f: pl.DataFrame, col: str, name: str) -> pl.DataFrame:
        return f.group_by("_i").agg(pl.col(col).unique().sort().cast(pl.String).str.join(", ").alias(name))
    what = (r.group_by("_i").agg(pl.col("receiver").first())
            .join(senders(r, "sender", "_rs"), on="_i").join(senders(o, "o_sender", "_os"), on="_i")
            .select("_i", pl.format("task {}'s burst after the messages from task(s) {} matched to the one after "
                                    "those from task(s) {}", "receiver", "_rs", "_os").alias("opened_what")))
    flags = (both.with_columns(pl.lit(True).alias("opened_checked"),
                               pl.col("_i").is_in(flagged.get_column("_i").implode()).alias("opened_other"))
             .join(what, on="_i", how="left"))
    out = pairs.select("_i").join(flags, on="_i", how="left", maintain_order="left")
    return out.select("opened_checked", "opened_other",
                      pl.when(pl.col("opened_other")).then(pl.col("opened_what")).alias("opened_what"))


def unpaired(matches: pl.DataFrame, other_bursts: pl.DataFrame, long_ref: pl.Series, min_ns: int) -> int:
    """Long reference bursts (``long_ref``) left unmatched where the other run also left a burst of at least
    ``min_ns`` unmatched between the same two matched neighbours of the thread: a pair the alignment could not make
    (an iteration one run has and the other has not leaves bursts unmatched on one side only). ``other_bursts``:
    the other run's rows (appl, task, thread, duration_ns) that ``other_row`` indexes, sorted by thread; rows past
    them (multi-piece units) count as matched."""
    row = matches.get_column("other_row")
    n_o = other_bursts.height
    used = np.zeros(n_o + 1, bool)
    hit = row.drop_nulls().to_numpy()
    used[hit[hit < n_o]] = True
    free_long = (~used[:n_o]) & (other_bursts.get_column("duration_ns").to_numpy() >= min_ns)
    # the other run's free long bursts counted up to each row: a gap (p, n) holds one when the count differs
    before = np.r_[0, np.cumsum(free_long)]
    f = matches.select(*THREAD_KEYS, pl.col("other_row").clip(upper_bound=n_o - 1).alias("_r")).with_columns(
        pl.col("_r").forward_fill().over(THREAD_KEYS).alias("_p"),
        pl.col("_r").backward_fill().over(THREAD_KEYS).alias("_n"))
    p = f.get_column("_p").fill_null(-1).to_numpy()
    n = f.get_column("_n").fill_null(-1).to_numpy()
    ok = (p >= 0) & (n >= 0) & (n > p)
    gap = np.zeros(p.size, bool)
    gap[ok] = before[n[ok]] - before[p[ok] + 1] > 0
    # [helper merge-hub] a burst on an arrived message the other run lacks (a task farm's) has no partner to make
    absent = (matches.get_column("message_absent").fill_null(False).to_numpy() if "message_absent" in matches.columns
              else np.zeros(p.size, bool))
    return int((row.is_null().to_numpy() & long_ref.to_numpy() & gap & ~absent).sum())


def arrival_tolerant(ref_seq: pl.DataFrame, other_seq: pl.DataFrame, matches: pl.DataFrame) -> list[pl.Series]:
    """``msg_agree`` and ``msg_consistent`` of a match table of :func:`synthtrace.tracelib.merge.align.align_runs`
    recomputed without the receive ends of the threads whose receives follow arrival.

    A receive posted for ``MPI_ANY_SOURCE`` takes whichever message arrives first, so which logical message a posted
    receive holds differs between runs of one program while the bursts around it are the same (they are
    delimited by the calls, in program order). Such a thread shows it: some of its matched receive ends hold
    messages of other channels in the two runs, which a receive naming its source never does. Its receive ends
    then say nothing about the alignment (neither do the messages they end on the senders' side); its sends and
    every other thread's messages are still checked."""
    r, o = ends(ref_seq), ends(other_seq)
    out = matches.get_column("other_row").fill_null(-1).to_numpy()
    hit = out >= 0
    o_chan = np.where(hit, o.recv_chan[np.maximum(out, 0)], 0)
    tid = ref_seq.get_column("_tid").to_numpy()
    crossed = hit & (r.recv_chan > 0) & (o_chan > 0) & (r.recv_chan != o_chan)
    wild = np.isin(tid, np.unique(tid[crossed]))
    if not wild.any():
        return [matches.get_column("msg_agree"), matches.get_column("msg_consistent")]
    masked = r._replace(recv=np.where(wild, 0, r.recv).astype(np.uint64),
                        recv_chan=np.where(wild, 0, r.recv_chan).astype(np.uint64))
    agree = agreement(masked, o, out)
    return [pl.Series("msg_agree", agree == 1, pl.Boolean).scatter(np.flatnonzero(agree < 0), None),
            bracketed(tid, agree, hit)]


def _median_error(dw: pl.Expr) -> pl.Expr:
    """The standard error of the median of the log ratios ``dw`` (log): 1.2533 x their robust standard deviation
    (1.4826 x the median absolute deviation) / sqrt(n)."""
    return 1.2533 * 1.4826 * (dw - dw.median()).abs().median() / dw.len().sqrt()


def _largest_site_shift(pairs: pl.DataFrame, overall: float | None) -> float | None:
    """The work shift (log): the median log ratio of the pairs' instructions, or, when larger, that of the bursts of
    one call site (the call closing them) holding at least ``SITE_MIN_SHARE`` of the reference's instructions over
    at least ``SITE_MIN_PAIRS`` pairs: a code version that changes one kernel changes only its bursts, which the
    median over all bursts (mostly short glue between calls) may not see. A median less than ``SHIFT_Z`` standard
    errors from 0 is no shift (0.0): where the work of each burst varies from run to run (dynamic load balancing,
    by tens of percent in the simulator's ``work_sigma``: a suspect merge for :mod:`.noise`, not another code
    version) its median over a few hundred pairs varies by a few percent."""
    finite = pairs.filter(pl.col("dw").is_finite())
    if overall is not None and finite.height and abs(overall) <= SHIFT_Z * finite.select(
            _median_error(pl.col("dw"))).item():
        overall = 0.0
    sites = (finite.group_by("site").agg(pl.len().alias("n"), pl.col("work").sum(), pl.col("dw").median(),
                                         _median_error(pl.col("dw")).alias("_se"))
             .filter((pl.col("n") >= SITE_MIN_PAIRS)
                     & (pl.col("work") >= SITE_MIN_SHARE * pl.col("work").sum())
                     & (pl.col("dw").abs() > SHIFT_Z * pl.col("_se")))
             .sort(pl.col("dw").abs(), descending=True))
    if sites.height and (overall is None or abs(sites["dw"][0]) > abs(overall)):
        return float(sites["dw"][0])
    return overall


#: [flush24] what the verdict says of long reference bursts whose phase the two runs cut otherwise (after "N bursts")
UNTRACED_WHY = ("border a span where one run's recording was switched off (Extrae_shutdown/restart, Score-P "
                "measurement off): each holds part of a phase whose rest the other run recorded in one burst; their "
                "values are NULL")
UNEVEN_WHY = ("are pieces of a phase the tracer cut (a buffer flush) elsewhere in the other run, and their own "
              "counters show they ran at other rates than the phase as a whole: no share of it is theirs, their "
              "values are NULL")
APPORTIONED_WHY = ("are pieces of a phase the tracer cut (a buffer flush) elsewhere in the other run: their values "
                   "are the phase's apportioned by work, estimates right only where the phase runs at one rate "
                   "throughout, which the counters both runs recorded cannot show for the others "
                   "(merge_matches.share < 1)")


def verdict(sig: PairSignals, timing_only: bool) -> tuple[str, str]:
    """(verdict, reason) of a transferred counter from the :class:`PairSignals` of its source run (``timing_only``:
    matched without a common counter)."""
    misfit, coverage_long, work_shift = sig.misfit, sig.coverage_long, sig.work_shift
    spans = sig.inconsistent / sig.checked if sig.checked else 0.0
    opened = sig.opened_other / sig.long_matched if sig.long_matched else 0.0
    opened_why = (f"{sig.opened_other} matched bursts >= 10 us ({opened:.1%}) work on other messages than their "
                  f"match (e.g. {sig.opened_example}): the runs' messages arrived in another order and the match "
                  "followed the call order; their values are another burst's (merge_matches.msg_mismatch)")
    if misfit is not None and misfit > BAD_MISFIT:
        return "bad", f"{misfit:.0%} of matched bursts differ in work and rate: misaligned"
    if coverage_long is not None and coverage_long < BAD_COVERAGE:
        return "bad", f"only {coverage_long:.0%} of bursts >= 10 us matched"
    if sig.msg_misaligned:
        return "bad", f"{sig.msg_misaligned} thread(s) disagree with their partners' messages both ways: misaligned"
    if opened > BAD_MISFIT:
        return "bad", opened_why
    if spans > BAD_MISFIT:
        return "bad", (f"{sig.inconsistent} matched bursts >= 10 us ({spans:.0%}) lie between logical messages the "
                       "runs disagree on: misaligned (an iteration one run has and the other has not?)")
    if sig.rank_tie:  # [ranks22]
        return "suspect", sig.rank_tie
    if sig.undecided:  # [helper merge-iter]
        return "suspect", (f"an undecidable span: {sig.undecided} matched bursts >= 10 us lie in iterations one run "
                           "has more of than the other, alike in work and rates, so where the extra ones lie the data "
                           "cannot tell: their partners are interchangeable (merge_matches.ambiguous)")
    if opened > SUSPECT_MISFIT:
        return "suspect", opened_why
    undecided = sig.arrival_undecided / sig.long_matched if sig.long_matched else 0.0  # [verdict23]
    if undecided > SUSPECT_MISFIT:
        return "suspect", (f"{sig.arrival_undecided} matched bursts >= 10 us ({undecided:.1%}) work on requests that "
                           f"hold other messages in the two runs (e.g. {sig.arrival_example}), and their work cannot "
                           "tell whether the code after the completion follows the request's position or its message: "
                           "their values may be another message's (merge_matches.msg_mismatch)")
    ran_on = sig.ran_on / sig.long_total if sig.long_total else 0.0  # [order22]
    if ran_on > SUSPECT_MISFIT:
        return "suspect", (f"{sig.ran_on} bursts >= 10 us ({ran_on:.1%}) hold work that ran on past a message's "
                           "processing into another call's phase in one run (the messages arrived in another "
                           "order): no burst of the other run holds the same work, their values are NULL "
                           "(arrival_order.ran_on)")
    for n, why in ((sig.untraced, UNTRACED_WHY), (sig.uneven, UNEVEN_WHY), (sig.apportioned, APPORTIONED_WHY)):
        share = n / sig.long_total if sig.long_total else 0.0  # [flush24] phases cut otherwise in the two runs
        if share > SUSPECT_MISFIT:
            return "suspect", f"{n} bursts >= 10 us ({share:.1%}) {why}"
    unpaired_share = sig.unpaired / sig.long_matched if sig.long_matched else 0.0
    if unpaired_share > SUSPECT_MISFIT:
        return "suspect", (f"{sig.unpaired} bursts >= 10 us ({unpaired_share:.1%}) left unmatched across from "
                           "unmatched bursts of the other run between the same matched neighbours: pairs the "
                           "alignment could not make (their values are NULL; merge_matches.other_burst_seq)")
    if spans > SUSPECT_MISFIT:
        return "suspect", (f"an ambiguous span: {sig.inconsistent} matched bursts >= 10 us ({spans:.1%}) lie between "
                           "logical messages the runs disagree on (merge_matches.ambiguous)")
    if misfit is not None and misfit > SUSPECT_MISFIT:
        return "suspect", f"{misfit:.1%} of matched bursts differ in work and rate"
    if sig.work_noise is not None and sig.work_noise.suspect:  # [noise22]
        return "suspect", sig.work_noise.reason()
    if sig.machine is not None and sig.machine.suspect:  # [verdict24]
        return "suspect", sig.machine.reason()
    if coverage_long is not None and coverage_long < SUSPECT_COVERAGE:
        return "suspect", f"{coverage_long:.0%} of bursts >= 10 us matched"
    if work_shift is not None and abs(work_shift) > WORK_SHIFT:
        return "suspect", (f"matched bursts execute x{math.exp(work_shift):.3f} the instructions: another input or "
                           "code version?")
    if timing_only and not sig.validated_by_messages:
        return "suspect", "matched by MPI structure and timing only"
    return "ok", ""


def worst(verdicts: pl.Series) -> str:
    """The worst of several verdicts (``ok`` for none)."""
    return max(verdicts.to_list(), key=ORDER.__getitem__, default="ok")
