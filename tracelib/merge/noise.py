"""The campaign's own run-to-run noise in the work of matched bursts, and the pairs that stand outside it.

Two runs of one program on one input retire the same instructions in the same burst: what differs is counting
noise (an interrupt's or a page fault's few instructions, skid at the counter's read), a fraction of a percent
(healthy rings and tori: median 0.3 %, 99th percentile under 1 %). Instructions of one burst differ between runs
by more only where the burst's *work* differs:

- work handed out as the timing falls: a master giving the next job to whichever worker asked
  (``MPI_Recv(MPI_ANY_SOURCE)``), OpenMP ``schedule(dynamic)``/``guided`` giving the next chunk to whichever
  thread is free, work stealing. A rank's k-th job burst, a thread's burst of a parallel loop, holds other jobs or
  chunks in each run: its counters from the other run are another piece of work's, and rescaling them by the
  instructions helps only as far as the pieces run at one rate;
- waiting counted inside a burst: an OpenMP barrier's or a lock's spin, a user-level polling loop without an MPI
  call. The extra instructions are the wait's, at the spin loop's rates, not the kernel's;
- a solver whose iteration count differs between runs changes the calls too (the alignment's business, not this).

None of these leaves a burst's per-burst values transferable within the noise. The measure is robust: the
noise scale is the lower quartile of the long matched pairs' absolute log ratios of instructions (floored at
``NOISE_FLOOR``, the counting noise itself). Counting noise is the machine's and
the tracer's, alike for every thread, so the quiet quarter of the pairs measures it even where most bursts' work
moves (an OpenMP loop's three dynamically scheduled worker threads of four: their median would hide them). A pair
is **off the noise** when its log ratio exceeds ``NOISE_K`` times the scale and ``NOISE_CEILING`` (a campaign
quieter than that makes no 1-4 % pair an outlier). A campaign whose median pair differs
by more than
``NOISE_CEILING`` has no reproducible work per burst at all (every burst's work moves: the simulator's
``work_sigma``, a per-run random factor on every burst, models exactly that), and its per-burst values are as far
off as its scale says.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import polars as pl
from scipy.special import stdtrit

from synthtrace.tracelib.domain.counters import canonical
from synthtrace.tracelib.merge.blocks import frame_of
from synthtrace.tracelib.schema import THREAD_KEYS
from synthtrace.tracelib.thread_key import task_int, task_key

#: the quantile of the pairs' absolute log ratios that measures the counting noise (the quiet quarter)
NOISE_QUANTILE = 0.25
#: the run-to-run counting noise of one burst's instructions (log), below which no campaign's noise is taken: two
#: runs differ by ~0.1-0.3 % (median), < 1 % (p99). The merge's one floor (iterations, arrival_order use it too)
NOISE_FLOOR = 0.002
#: a pair is off the noise beyond this many times the scale (and beyond ``NOISE_CEILING``)
NOISE_K = 10.0
#: a campaign whose median pair differs by more than this (log) has no reproducible work per burst; no pair within
#: it is off the noise
NOISE_CEILING = math.log(1.05)
#: the share of long matched pairs off the noise that makes a merge suspect
OFF_NOISE_SUSPECT = 0.02
#: threads (ranks) named in the reason, the most affected first
NAMED_THREADS = 6


@dataclass(frozen=True)
class WorkNoise:
    """The instructions of the long matched pairs against the campaign's own run-to-run noise (logs: natural log
    ratios of the two bursts' instructions): ``median`` of their absolute values, ``scale`` their lower quartile
    (``NOISE_QUANTILE``) floored at ``NOISE_FLOOR``, ``judged`` pairs, ``off`` pairs beyond :attr:`limit` and
    ``size`` their median absolute log ratio; ``where``: the threads holding them in words,
    ``threaded``: some of those are not a task's first thread (OpenMP workers)."""

    median: float
    scale: float
    judged: int
    off: int
    size: float | None
    where: str
    threaded: bool

    @property
    def limit(self) -> float:
        """The absolute log ratio beyond which a pair is off the noise: ``NOISE_K`` x ``scale``, at least
        ``NOISE_CEILING``."""
        return off_limit(self.scale)

    @property
    def share(self) -> float:
        """The share of judged pairs off the noise, in [0, 1]."""
        return self.off / self.judged if self.judged else 0.0

    @property
    def irreproducible(self) -> bool:
        """The median pair already differs beyond ``NOISE_CEILING``: no burst's work repeats between the runs."""
        return self.median > NOISE_CEILING

    @property
    def suspect(self) -> bool:
        """The merged values of some bursts are another piece of work's (see the module docstring)."""
        return self.irreproducible or self.share > OFF_NOISE_SUSPECT

    def reason(self) -> str:
        """The verdict's reason, in words: which bursts, how much, what it likely means."""
        cause = ("likely OpenMP loop chunks handed to whichever thread is free, schedule(dynamic) or guided, or a "
                 "wait spun inside the bursts" if self.threaded else
                 "likely work handed out in arrival order, a master giving the next job to whichever worker asks or "
                 "dynamic load balancing, or a wait spun inside the bursts")
        if self.irreproducible:
            return (f"matched bursts >= 10 us differ from their match by a median {_pct(self.median)} in instructions "
                    f"(two runs of one program on one input: < 1 %): the work of a burst does not repeat between the "
                    f"runs, {cause}; merged values are another burst's work's, off per burst by as much")
        return (f"{self.off} of {self.judged} matched bursts >= 10 us ({self.share:.1%}) execute other instructions "
                f"than their match, beyond {_pct(self.limit)} ({NOISE_K:g} x the runs' own noise "
                f"{_pct(self.scale)}, at least {_pct(NOISE_CEILING)}; these differ by a "
                f"median {_pct(self.size or 0.0)}), on {self.where}: the work in these bursts moves between the runs, "
                f"{cause}; their merged values are another piece of work's")


def _pct(log_ratio: float) -> str:
    """A log ratio as the percentage it is off by (``0.095`` -> ``10 %``)."""
    p = 100.0 * math.expm1(abs(log_ratio))
    return f"{p:.1f} %" if p < 10 else f"{p:.0f} %"


def off_limit(scale: float) -> float:
    """The absolute log ratio beyond which a pair is off a campaign's noise of ``scale`` (log)."""
    return max(NOISE_K * scale, NOISE_CEILING)


def long_pairs(ref_bursts: pl.DataFrame | pl.LazyFrame, src_bursts: pl.DataFrame | pl.LazyFrame,
               other_row: pl.Series, work: str, long_ref: pl.Series) -> pl.DataFrame:
    """The long matched pairs (``long_ref`` reference rows whose ``other_row`` indexes ``src_bursts``) as
    :func:`work_noise` takes them: the reference burst's appl, task, thread and ``dw``, the log ratio of the two
    bursts' ``work`` (instructions); pairs with a count <= 0 left out. The one estimate of the pairs' run-to-run
    noise: the verdict (:func:`work_noise`) and the transfer's work tolerance (:func:`typical`) read it."""
    names = ref_bursts.collect_schema().names() if isinstance(ref_bursts, pl.LazyFrame) else ref_bursts.columns
    keys = [k for k in THREAD_KEYS if k in names]
    ref = frame_of(ref_bursts, [*keys, work])
    src = frame_of(src_bursts, [work]).to_series().cast(pl.Float64).gather(other_row)
    a = ref.get_column(work).cast(pl.Float64)
    return (ref.select(*keys).with_columns((a / src).log().alias("dw"))
            .filter(long_ref & other_row.is_not_null() & (a > 0) & (src > 0)))


def typical(pairs: pl.DataFrame) -> float:
    """The median absolute log ratio of :func:`long_pairs` (0.0 without a pair)."""
    return float(pairs.get_column("dw").abs().median() or 0.0)  # type: ignore[arg-type]


def work_noise(pairs: pl.DataFrame) -> WorkNoise | None:
    """The :class:`WorkNoise` of long matched pairs (``pairs``: appl, task, thread of the reference burst and ``dw``,
    the log ratio of the two bursts' instructions); None without a pair of finite ratio."""
    p = pairs.filter(pl.col("dw").is_finite()).select(*THREAD_KEYS, pl.col("dw").abs().alias("d"))
    if p.height == 0:
        return None
    d = p.get_column("d")
    median = float(d.median())  # type: ignore[arg-type]
    scale = max(float(d.quantile(NOISE_QUANTILE, "linear")), NOISE_FLOOR)  # type: ignore[arg-type]
    off = p.filter(pl.col("d") > off_limit(scale))
    per_thread = (p.group_by(THREAD_KEYS).agg(pl.len().alias("n"))
                  .join(off.group_by(THREAD_KEYS).agg(pl.len().alias("k")), on=THREAD_KEYS)
                  .sort("k", *THREAD_KEYS, descending=[True, False, False, False]))
    return WorkNoise(median=median, scale=scale, judged=p.height, off=off.height,
                     size=float(off.get_column("d").median()) if off.height else None,  # type: ignore[arg-type]
                     where=_threads_in_words(per_thread, bool(p.get_column("thread").gt(1).any())),
                     threaded=bool(per_thread.get_column("thread").gt(1).any()))


def _threads_in_words(per_thread: pl.DataFrame, threads: bool) -> str:
    """The threads (appl, task, thread, ``k`` of ``n`` pairs off the noise) in words, the most affected first: tasks
    alone in a campaign without a second thread (``threads``)."""
    if per_thread.height == 0:
        return "no thread"
    head = per_thread.head(NAMED_THREADS)
    ranks = not threads
    names = [f"task {t}" if ranks else f"task {t} thread {h}" for t, h in head.select("task", "thread").iter_rows()]
    counts = [f"{k} of {n}" for k, n in head.select("k", "n").iter_rows()]
    more = f" and {per_thread.height - head.height} more" if per_thread.height > head.height else ""
    return ", ".join(f"{a} ({b})" for a, b in zip(names, counts)) + more


#: a task runs in another machine state in the other run when its median log ratio of cycles per instruction lies
#: this many robust standard deviations (1.4826 x the median absolute deviation) of the tasks' medians from their
#: median, and at least ``RATE_FLOOR`` from it: node clocks and placement move a task's cycles per instruction by
#: a few percent between runs (the LULESH 4+4 / 7+1 pair: the median task -2.8 %, spread 0.3 %, no task out)
RATE_K = 3.0
#: chance that a campaign of no machine-state difference has a task beyond the threshold, whatever its tasks and
#: measures: among n tasks judged on m measures (cycles, misses of each cache level per instruction) the threshold is
#: Student's t quantile of 1 - RATE_ALPHA / 2nm (:func:`state_threshold`), at least RATE_K. The tail over
#: the tasks (~5 robust sigmas at 16,384 tasks, whose ~6 pairs a task scatter by the bursts' own run-to-run misses:
#: review25 F1) and over the measures (sites26: each measure at 1 % made 4 measures' campaigns suspect several times
#: as often); t, not the normal, because the spread is itself estimated from the n tasks, by their median absolute
#: deviation, which is as uncertain as a standard deviation of 0.4-0.5 times as many values (STATE_T_DF; its
#: efficiency on normal data is 37 %): with the normal quantile a campaign of 64 tasks of pure noise had an outlier 5 %
#: of the time a measure, 16 tasks 11 % (benchmarks/bench_state_noise.py)
RATE_ALPHA = 0.01
RATE_FLOOR = math.log(1.08)
#: every task's cycles per instruction moved by more than this (log) between the runs: another placement (ranks
#: per node sharing memory bandwidth), build, data layout, page size or clock setting (turbo and a like placement
#: move the median task by a few percent)
RATE_SHIFT = math.log(1.10)
#: tasks needed to judge one against the others' spread, and long pairs a task needs to be judged
RATE_MIN_TASKS, RATE_MIN_PAIRS = 4, 5
#: events (cycles, misses) a task's pairs must count in each run to be judged: a count of k events is off by its
#: counting noise, ~1/sqrt(k) (1 % at 10,000); a rank missing a cache a few dozen times shows no machine state
RATE_MIN_EVENTS = 10_000
#: the robust standard deviation of a normal sample: this many median absolute deviations
MAD_SIGMA = 1.4826


@dataclass(frozen=True)
class MachineState:
    """The cycles per instruction of the long matched pairs between the reference and another run, per task (logs:
    natural log ratios, reference over other run): ``shift``, the median task's; ``spread``, the tasks' robust
    standard deviation around it; ``outliers``: the tasks beyond :data:`RATE_K` (more among many tasks:
    :data:`RATE_ALPHA`) x ``spread`` (at least :data:`RATE_FLOOR`) from ``shift``, with their log ratio (task,
    log), and ``judged``, the tasks judged; ``counter``: the core cycles counter. Two runs
    of one program on one machine state execute a burst at the same cycles per instruction, give or take the clock
    and the placement's few percent; a task running at another rate in the other run (a job sharing its node, another
    socket or build) also misses caches and memory otherwise, so counters transferred from that run are another
    machine state's."""

    counter: str
    shift: float
    spread: float
    outliers: tuple[tuple[int, float], ...]
    judged: int
    #: (appl, task) of the outliers (the bursts :meth:`flagged` marks)
    keys: tuple[tuple[int, int], ...] = ()
    #: what the rate counts per instruction, in words: the clock moves cycles, not misses
    measure: str = "cycles per instruction"
    #: the other measures' states (:func:`rate_state`): the suspect ones' tasks are flagged too (review25 F2)
    others: tuple[MachineState, ...] = ()

    @property
    def suspect(self) -> bool:
        """Some tasks, or all, ran at another rate in the other run."""
        return bool(self.outliers) or abs(self.shift) > RATE_SHIFT

    def flagged(self) -> pl.Expr:
        """True on the reference bursts (columns appl, task) of the tasks that ran in another machine state in the
        other run: every task when the whole run did, none when the state is not suspect."""
        if any(abs(s.shift) > RATE_SHIFT for s in (self, *self.others) if s.suspect):
            return pl.lit(True)
        keys = {k for s in (self, *self.others) if s.suspect for k in s.keys}
        if not keys:
            return pl.lit(False)
        return task_key().is_in([task_int(a, t) for a, t in sorted(keys)])

    def reason(self) -> str:
        """The verdict's reason, in words: which tasks, by how much, what it likely means; then, briefly, the
        other suspect measures' tasks."""
        also = [f"tasks {_task_ranges(sorted(t for t, _ in s.outliers))} in {s.measure} ({s.counter})"
                if abs(s.shift) <= RATE_SHIFT else f"every task in {s.measure} ({s.counter})"
                for s in self.others if s.suspect]
        return self._lead_reason() + (f"; also {', '.join(also)}" if also else "")

    def _lead_reason(self) -> str:
        counter, measure = self.counter, self.measure
        if abs(self.shift) > RATE_SHIFT:
            return (f"the other run executes the same instructions at x{math.exp(-self.shift):.3f} the reference's "
                    f"{measure} ({counter}) on every task: another machine state (another placement of "
                    "ranks on nodes, build, data layout, page size or clock setting); its cache and memory counters "
                    "likely differ as much or more, so the values transferred from it are that run's, not the "
                    "reference's")
        tasks = sorted(t for t, _ in self.outliers)
        ratios = [math.exp(-d) for _, d in self.outliers]
        return (f"tasks {_task_ranges(tasks)} ({len(tasks)} of {self.judged}) run at x{min(ratios):.3f}"
                + (f"-{max(ratios):.3f}" if max(ratios) > min(ratios) + 5e-4 else "")
                + f" the reference's {measure} ({counter}) in the other run, the other tasks at "
                f"x{math.exp(-self.shift):.3f} (spread {_pct(self.spread)}): another machine state on those tasks "
                "(another job sharing their node, another socket or placement); the values transferred to their bursts "
                "are that state's, their cache and memory counters likely off as much or more")


def _task_ranges(tasks: list[int]) -> str:
    """Sorted task numbers in words, consecutive ones as ranges (``1-8, 12``)."""
    runs: list[list[int]] = []
    for t in tasks:
        if runs and t == runs[-1][-1] + 1:
            runs[-1].append(t)
        else:
            runs.append([t])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else f"{r[0]}" for r in runs)


#: counts of retired instructions (all, branches, loads, stores): the program's work, which no machine state changes
#: (FP operations are left out: some PMUs count them as issued, re-issued on cache misses)
RETIRED_ROLES = ("ins", "br_ins", "ld_ins", "sr_ins")


def machine_invariant(counter: str, per_ns: bool = False) -> bool:
    """True for a count of retired instructions (:data:`RETIRED_ROLES`), and for reference cycles transferred per ns
    (``per_ns``: they tick at the nominal clock while the core runs, so the reference burst's own duration gives
    them): another machine state cannot change it, so :class:`MachineState` does not make it suspect (review24 F5,
    contention25)."""
    role = canonical(counter)
    return role in RETIRED_ROLES or (per_ns and role == "ref_cyc")


def core_cycles(common: Sequence[str]) -> str | None:
    """The core cycles counter among ``common`` (None when there is none): reference cycles tick at the nominal
    clock, so their count per instruction carries each node's turbo clock, not the machine state alone."""
    return next((c for c in common if canonical(c) == "cyc"), None)


#: cache misses (L1 data, L2, last level): per instruction, a node's clock (DVFS, turbo) does not move them, so
#: where the nodes' clocks spread the tasks' cycles per instruction by several percent between two runs (hiding a
#: contended node's x1.1, mergeattack23 P2), a cache counter both runs recorded still shows the node that ran beside
#: another job's memory traffic or in another share of a cache (another placement)
MISS_ROLES = ("l1_dcm", "l2_dcm", "l3_tcm")


def rate_counters(common: Sequence[str]) -> list[str]:
    """The counters among ``common`` whose count per instruction shows the machine state: core cycles first
    (:func:`core_cycles`), then the cache misses (:data:`MISS_ROLES`)."""
    cycles = core_cycles(common)
    return [*([cycles] if cycles else []), *(c for c in common if canonical(c) in MISS_ROLES)]


def rate_state(ref_bursts: pl.DataFrame | pl.LazyFrame, src_bursts: pl.DataFrame | pl.LazyFrame,
               other_row: pl.Series, work: str, counters: Sequence[str], long_ref: pl.Series) -> MachineState | None:
    """The :class:`MachineState` of the long matched pairs (``long_ref`` reference rows whose ``other_row`` indexes
    ``src_bursts``), from each of ``counters`` (:func:`rate_counters`) per ``work`` (instructions): of those that
    are suspect, the one naming the most tasks (every task when the whole run moved), else the first, with the
    other measures' states in ``others``."""
    ref = frame_of(ref_bursts, ["appl", "task", work, *counters])
    src = frame_of(src_bursts, [work, *counters]).select(
        pl.all().cast(pl.Float64).gather(other_row).name.prefix("o_"))
    both = pl.concat([ref, src], how="horizontal").filter(long_ref & other_row.is_not_null())
    judged = []  # each measure's tasks judged, before any is judged: the threshold counts the measures
    for c in counters:
        positive = pl.all_horizontal(pl.col(work, c, f"o_{work}", f"o_{c}").cast(pl.Float64) > 0)
        pairs = both.filter(positive).select("appl", "task", pl.col(work).alias("w"), pl.col(c).alias("c"),
                                             pl.col(f"o_{work}").alias("o_w"), pl.col(f"o_{c}").alias("o_c"))
        measure = "cycles per instruction" if canonical(c) == "cyc" else "misses per instruction"
        if (per_task := task_rates(pairs)).height:
            judged.append((per_task, c, measure))
    states = [state_of(per_task, c, measure, len(judged)) for per_task, c, measure in judged]
    if not states:
        return None
    suspect = [s for s in states if s.suspect]
    lead = max(suspect, key=lambda s: s.judged if abs(s.shift) > RATE_SHIFT else len(s.outliers)) if suspect \
        else states[0]
    return replace(lead, others=tuple(s for s in states if s is not lead))


def machine_state(pairs: pl.DataFrame, counter: str, measure: str = "cycles per instruction",
                  measures: int = 1) -> MachineState | None:
    """The :class:`MachineState` of long matched pairs (``pairs``: appl, task of the reference burst, ``w``, ``c``
    its instructions and cycles or misses (``counter``: ``measure`` in words), ``o_w``, ``o_c`` its match's, all
    > 0), one of ``measures`` judged on the same pairs (:func:`state_of`); None without a task judged
    (:func:`task_rates`)."""
    per_task = task_rates(pairs)
    return state_of(per_task, counter, measure, measures) if per_task.height else None


def task_rates(pairs: pl.DataFrame) -> pl.DataFrame:
    """Per task (appl, task) of :func:`machine_state`'s ``pairs`` with ``RATE_MIN_PAIRS`` pairs counting
    ``RATE_MIN_EVENTS`` in each run: ``dw``, the log ratio of its rate (events per instruction) in the reference over
    the other run's. A task's rate is its pairs' sums': a contended node slows its memory-bound bursts, which need not
    be most of them but hold most of its cycles."""
    ratio = (pl.col("c").sum() * pl.col("o_w").sum() / (pl.col("w").sum() * pl.col("o_c").sum())).log()
    events = pl.min_horizontal(pl.col("c").sum(), pl.col("o_c").sum())
    return (pairs.group_by("appl", "task").agg(ratio.alias("dw"), pl.len().alias("n"), events.alias("k"))
            .filter((pl.col("n") >= RATE_MIN_PAIRS) & (pl.col("k") >= RATE_MIN_EVENTS) & pl.col("dw").is_finite()))


#: degrees of freedom of Student's t whose quantile of 1 - RATE_ALPHA / 2nm is the 1 - RATE_ALPHA / m quantile of
#: the statistic judged, max |d - median| / (MAD_SIGMA x MAD) over n tasks of normal noise, by n (alpha26: 10^6
#: simulated draws a size, m = 4, benchmarks/bench_state_noise.py --null-table; the fit holds within 2 % over
#: m = 1-4). At few tasks the MAD's own noise sets the tail, and an even count's median (the middle two's mean)
#: steadies it: about n // 2, not (n - 1) / 2, which was 1.2-3.5x too strict at 4-8 tasks (review26 F1)
STATE_T_DF = {4: 2.16, 5: 2.11, 6: 3.10, 7: 3.09, 8: 4.00, 9: 3.97, 10: 4.86, 11: 4.84, 12: 5.72, 13: 5.70,
              14: 6.54, 15: 6.52, 16: 7.40}
#: beyond the table, the degrees of freedom are STATE_T_DF_PER_TASK x n + STATE_T_DF_BASE, n the task count rounded
#: down to even (an odd count's MAD is as uncertain as the even count's below it, as in the table: at 17 and 19 tasks
#: 0.4 n + 1 left 1.2-1.25 % of noise-only campaigns suspect, review27 R10; now 1.00 % and 1.06 %): within 1 % of the
#: simulated null quantile at every even n from 16 to 4,096 and m = 1-4 (alpha27, --null-table --sizes; the
#: simulation's own scatter ~0.3 %); ~0.4 n, under the MAD's efficiency (0.37 n) only by the median's own noise.
#: (n - 1) / 2, the rule before, sat 2-4 % under the null quantile from 20 to 128 tasks (1.45 % of noise-only
#: campaigns of 64 tasks suspect)
STATE_T_DF_PER_TASK, STATE_T_DF_BASE = 0.4, 1.0


def state_threshold(tasks: int, measures: int) -> float:
    """The outlier threshold (robust standard deviations) among ``tasks`` tasks judged on ``measures`` measures:
    Student's t quantile of 1 - RATE_ALPHA / 2nm, at :data:`STATE_T_DF` degrees of freedom up to 16 tasks, beyond
    at ``STATE_T_DF_PER_TASK`` x n + ``STATE_T_DF_BASE`` (n: ``tasks`` rounded down to even)."""
    df = STATE_T_DF.get(tasks, STATE_T_DF_PER_TASK * (tasks - tasks % 2) + STATE_T_DF_BASE)
    return float(stdtrit(df, 1 - RATE_ALPHA / (2 * tasks * measures)))


def task_shift(dw: pl.Expr) -> pl.Expr:
    """The median task's log ratio of ``dw`` (the tasks' log ratios of a rate)."""
    return dw.median()


def task_spread(dw: pl.Expr) -> pl.Expr:
    """The tasks' robust standard deviation of ``dw`` around :func:`task_shift`: ``MAD_SIGMA`` x their median
    absolute deviation."""
    return MAD_SIGMA * (dw - task_shift(dw)).abs().median()


def off_state(dw: pl.Expr, tasks: int, measures: int) -> pl.Expr:
    """True for the tasks whose ``dw`` lies beyond the outlier threshold among ``tasks`` judged on ``measures``
    measures (:func:`state_threshold`, at least ``RATE_K``) x :func:`task_spread` from :func:`task_shift`, and beyond
    ``RATE_FLOOR``; an aggregation over the tasks (``.over`` a campaign's key judges many at once)."""
    k = max(RATE_K, state_threshold(tasks, measures))
    return (dw - task_shift(dw)).abs() > pl.max_horizontal(k * task_spread(dw), pl.lit(RATE_FLOOR))


def state_of(per_task: pl.DataFrame, counter: str, measure: str, measures: int) -> MachineState:
    """The :class:`MachineState` of :func:`task_rates` (at least one task) on one of ``measures`` judged: the
    outlier threshold is the tail of :data:`RATE_ALPHA` over the tasks and the measures (:func:`off_state`)."""
    shift, spread = per_task.select(task_shift(pl.col("dw")).alias("shift"),
                                    task_spread(pl.col("dw")).alias("spread")).row(0)
    outliers: tuple[tuple[int, float], ...] = ()
    keys: tuple[tuple[int, int], ...] = ()
    if per_task.height >= RATE_MIN_TASKS:
        off = per_task.filter(off_state(pl.col("dw"), per_task.height, measures)).sort("appl", "task")
        outliers = tuple(zip(off.get_column("task").to_list(), off.get_column("dw").to_list()))
        keys = tuple(zip(off.get_column("appl").to_list(), off.get_column("task").to_list()))
    return MachineState(counter=counter, shift=shift, spread=spread, outliers=outliers, judged=per_task.height,
                        keys=keys, measure=measure)
