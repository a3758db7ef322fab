"""Which task of one run is which task of another (DESIGN §6): rank correspondence before the merge.

A launcher may number the ranks of two runs of one program differently (another rank file, a reordering for the
topology). The merge aligns a task with the task of the same number, so the numbering is checked first, from
timing-free facts only:

- the **logical messages** of a run (:mod:`synthtrace.tracelib.merge.messages`), counted per (appl, communicator,
  sender, receiver, tag, bytes per message): under the right correspondence the two runs have messages on the same
  keys in about the same proportions, whatever the timing and whatever calls completed the messages. A numbering
  **explains** the share of the two runs' messages that lie on keys both runs have (each run weighs one half):
  windows chopped at other points, a run a few iterations longer, a few messages that differ cost only their
  share. Among numberings that explain alike, the **overlap** of the two runs' normalised counts (per key, the
  smaller share, summed) tells which keeps the proportions;
- the **behaviour** of a task is its work profile: per closing call (call, call site), ``log1p`` of the
  instructions (or duration, in microseconds) of the first ``PROFILE`` bursts it closes, in order: the same
  logical bursts do the same work in every run, and a rank's share of the domain shows in it.

First the **message graph** (:mod:`synthtrace.tracelib.merge.symmetries`): the numberings that carry the other
run's graph onto the reference's (the numbering as it is when it does, else a relabelling, each composed with the
graph's symmetries: a ring's or a torus's rotations). Among them behaviour decides, burst by burst, on the long
bursts' cells (``LONG_NS``; all the profile's when too few are long: the glue between MPI calls follows a rank's
placement, not its role, mergeattack23 P9) where two numberings put reference work apart by more than
``INFORMATIVE`` times the cross-run noise (the median difference under the best numbering; elsewhere the choice
changes nothing that can be seen): the numbering as it is is kept unless another fits clearly better (its mean
difference to the other run under ``BEHAVIOUR_CLEARLY`` of the numbering's, on ``MIN_CELLS`` cells or more); a
numbering moved to must fit clearly better than the next best too. When it does not (or another only leans better,
``Z_LEANS`` standard errors), the correspondence is a **tie**: the numbering taken is kept and the verdict of the
run's counters is ``suspect``, its reason naming the tie and the other numbering. Without a tie-breaking signal
and with the numbering as it is among the candidates (a ring numbered alike in both runs, ranks alike), it is kept
silently: the launchers number runs alike unless the program renumbers, and the merged values of alike ranks
differ only by noise.

When the graphs do not map onto each other (messages one run lacks, communicators numbered otherwise), the
numbering as it is is kept unless another explains the messages clearly better (``CLEARLY`` more), or, when both
explain them alike, unless behaviour tells the tasks apart clearly (the behaviour assignment's profile distance
below ``BEHAVIOUR_CLEARLY`` times the numbering's). The other numbering tried is the assignment of tasks that
minimises the profile distance (:mod:`synthtrace.tracelib.merge.behaviour_cost`: exact up to ``DENSE_TASKS`` tasks,
above the best among each task's nearest in profile, the tasks x tasks matrix never built). When no numbering explains
``MIN_EXPLAINED`` of the messages, the correspondence cannot be decided and :class:`RankCorrespondenceError` says
so in one line.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple

import numpy as np
import polars as pl

from synthtrace.tracelib.errors import BadInputError
from synthtrace.tracelib.merge.behaviour_cost import (DENSE_TASKS, NEIGHBOURS, BehaviourCost, chunks, mean_gap,
                                                     paired_gaps)
from synthtrace.tracelib.merge.messages import CHANNEL
from synthtrace.tracelib.merge.symmetries import numberings
from synthtrace.tracelib.thread_key import MASK, task_int, task_key, task_of

#: share of the messages a numbering must explain to be taken
MIN_EXPLAINED = 0.9
#: another numbering replaces the one as it is only when it explains this much more of the messages
CLEARLY = 0.05
#: ... or, when both explain the messages alike, when its behaviour distance is below this share of the numbering's
BEHAVIOUR_CLEARLY = 0.5
WORK = ("PAPI_TOT_INS", "INST_RETIRED:ANY", "INST_RETIRED:ANY_P", "INST_RETIRED")
PROFILE = 64  # bursts per closing call in a task's work profile
#: bursts a task's work profile is read from at a time, about (whole tasks: the windows' memory stays bounded)
PROFILE_ROWS_AT_ONCE = 1 << 20
#: profile cells tell two numberings apart where they put reference work this many times the cross-run noise apart
INFORMATIVE = 3.0
#: the cross-run noise (median |log1p work difference| under the best numbering) is taken as at least this
NOISE_FLOOR = 1e-3
#: profile cells needed to weigh two numberings
MIN_CELLS = 8
#: other tasks of a colour left shared whose partner is not in it paired by behaviour; the rest in order
PAIR_CLOSER = 64
#: a numbering leans better than another when its paired cell differences are this many standard errors apart
Z_LEANS = 3.0
#: bursts at least this long (ns; the merge's ``min_error_duration_ns``) carry the program's work. The glue between
#: two MPI calls is the library's and the tracer's few instructions, which follow the rank's placement (which peers
#: share its node), not its role: numberings are told apart on the long bursts when there are enough of them
LONG_NS = 10_000
#: reference tasks whose work cells :meth:`_Candidates.closer` compares one other task's with at once, at most
#: (cells x tasks; beyond, the behaviour cost orders them): the search's pins stay cheap at any size
CLOSER_CELLS = 4_000_000


class RankCorrespondenceError(BadInputError):
    """The tasks of two runs cannot be put in correspondence (numbering differs and cannot be mapped)."""


def _key(task: str) -> pl.Expr:
    return task_key("appl", task)


def _mapped(task: str, mapping: dict[int, int]) -> pl.Expr:
    """``task`` renumbered by ``mapping`` ({appl << ID_BITS | task: new task}); unchanged where not in it."""
    return _key(task).replace_strict(mapping, default=pl.col(task).cast(pl.Int64)).cast(pl.Int32).alias(task)


class Fit(NamedTuple):
    """How well a numbering explains the other run's logical messages: ``explained`` (share of messages on keys
    both runs have) and ``overlap`` (of the normalised counts), both in [0, 1]."""

    explained: float
    overlap: float

    @property
    def score(self) -> float:
        return self.explained + self.overlap


def explained(ref: pl.DataFrame, other: pl.DataFrame, mapping: dict[int, int] | None = None) -> Fit | None:
    """The :class:`Fit` of two count tables (:func:`synthtrace.tracelib.merge.messages.message_counts`), the other
    run's tasks renumbered by ``mapping`` ({appl << ID_BITS | task: new task}); None when neither run has
    messages (a run without messages explains nothing of the other's)."""
    n_ref, n_oth = int(ref.get_column("n").sum()), int(other.get_column("n").sum())
    if not n_ref and not n_oth:
        return None
    if not n_ref or not n_oth:
        return Fit(0.0, 0.0)
    if mapping:
        other = (other.with_columns(_mapped("sender", mapping), _mapped("receiver", mapping))
                 .group_by(*CHANNEL, "bytes").agg(pl.col("n").sum()))
    both = ref.join(other, on=[*CHANNEL, "bytes"], how="inner", suffix="_o", nulls_equal=True)
    a, b = pl.col("n").cast(pl.Float64) / n_ref, pl.col("n_o").cast(pl.Float64) / n_oth
    fit = both.select(((a + b) / 2).sum().alias("e"), pl.min_horizontal(a, b).sum().alias("o")).row(0)
    return Fit(float(fit[0] or 0.0), float(fit[1] or 0.0))


def _profile_key() -> pl.Expr:
    """A burst's profile key: its closing call and call site."""
    return pl.concat_str(pl.col("mpi_call").fill_null(""), pl.lit("@"), pl.col("call_site").fill_null(""))


def profile_rows(bursts: pl.DataFrame) -> pl.DataFrame:  # [helper merge-scale] for the partitioned merge
    """The rows of ``bursts`` (sorted by thread and burst_seq) that decide every task's work profile: whatever else
    is dropped, :func:`rank_mapping` on these rows (concatenated over groups of whole tasks) decides as on all of
    them. Kept per thread: its first row, the first burst of every unit among the first ``PROFILE`` of its key, and
    the first of each run of later units (so that no two kept units of one key become neighbours). At most about
    ``2 * PROFILE`` rows per task and closing call: the compact input of the rank correspondence."""
    thread = ["appl", "task", "thread"]
    b = bursts.with_row_index("_r").with_columns(_profile_key().alias("_key"))
    first = b.group_by(thread).agg(pl.col("_r").min()).get_column("_r")
    u = (b.filter(pl.col("_key") != pl.col("_key").shift(1).over(thread))
         .with_columns((pl.int_range(pl.len()).over("appl", "task", "_key") < PROFILE).alias("_keep")))
    # a unit past the first PROFILE right after a kept one (or after the thread's first row) separates them
    u = u.filter(pl.col("_keep") | pl.col("_keep").shift(1, fill_value=True).over(thread))
    rows = pl.concat([first, u.get_column("_r")]).unique().sort()
    return bursts.gather(rows)


def _profiles(bursts: pl.DataFrame, appl: int) -> tuple[pl.DataFrame, np.ndarray]:
    """(profile rows: task, key, k, w, long; the tasks): per task of ``appl`` and closing call (call, call site),
    ``log1p`` of the work of its first ``PROFILE`` bursts in order (NaN past the end): instructions, else
    microseconds; ``long``: the burst lasts ``LONG_NS`` or more. Read a block of whole tasks at a time (about
    ``PROFILE_ROWS_AT_ONCE`` bursts): the windows over tasks and threads never span the whole run (16k ranks:
    issue 23)."""
    work = next((c for c in WORK if c in bursts.columns), None)
    w = pl.col(work).cast(pl.Float64) if work else pl.col("duration_ns").cast(pl.Float64) / 1e3
    call, site = pl.col("mpi_call").fill_null(""), pl.col("call_site").fill_null("")
    mine = bursts.lazy().filter(pl.col("appl") == appl)
    tasks = mine.select(pl.col("task").unique().sort()).collect().get_column("task").to_numpy()
    step = max(1, int(tasks.size * PROFILE_ROWS_AT_ONCE // max(1, bursts.height)))
    parts = []
    for i in range(0, tasks.size, step):
        # a run of bursts closed by one call (a polling loop, completion calls as messages arrive) is one unit: its
        # first burst (the work before the loop) stands for it. Lazy, the key's string built on the rows kept: the
        # run's other columns (its counters) and every burst's key are never copied
        parts.append(
            mine.filter(pl.col("task").is_between(tasks[i], tasks[min(i + step, tasks.size) - 1]))
            .select("task", "thread", call.alias("_call"), site.alias("_site"), w.log1p().alias("w"),
                    (pl.col("duration_ns") >= LONG_NS).alias("long"))
            .filter(((pl.col("_call") != pl.col("_call").shift(1).over("task", "thread"))
                     | (pl.col("_site") != pl.col("_site").shift(1).over("task", "thread"))).fill_null(False))
            .with_columns(pl.int_range(pl.len(), dtype=pl.Int32).over("task", "_call", "_site").alias("k"))
            .filter(pl.col("k") < PROFILE)
            .select("task", pl.concat_str("_call", pl.lit("@"), "_site").cast(pl.Categorical).alias("key"), "w", "long",
                    "k")
            .collect())
    p = pl.concat(parts) if parts else mine.select("task", key=pl.lit("", pl.Categorical), w=pl.lit(0.0),
                                                   long=pl.lit(False), k=pl.lit(0, pl.Int32)).clear().collect()
    return p, p.get_column("task").unique().sort().to_numpy()


def _cube(p: pl.DataFrame, tasks: np.ndarray, keys: list[str], long: bool = False) -> np.ndarray:
    """Profile rows ``p`` (task, key, k, w; only the long ones when ``long``) as a task x (key, k) array of ``log1p``
    work (NaN where absent), float32: ``log1p`` of up to 1e13 instructions is below 32, where float32 resolves 2e-6,
    far under the runs' noise (``NOISE_FLOOR``), at half the bytes (16k tasks x 50 closing calls x ``PROFILE``
    cells: 210 MB a run)."""
    a = np.full((tasks.size, len(keys), PROFILE), np.nan, np.float32)
    # the key's index taken in Polars: a NumPy array of the keys is a Python string per profile cell
    q = (_rows(p, keys, long).select("task", pl.col("key").replace_strict(keys, list(range(len(keys))),
                                                                          return_dtype=pl.Int64), "k", "w")
         .collect())
    a[np.searchsorted(tasks, q.get_column("task").to_numpy()), q.get_column("key").to_numpy(),
      q.get_column("k").to_numpy()] = q.get_column("w").to_numpy()
    return a.reshape(tasks.size, -1)


def _rows(p: pl.DataFrame, keys: list[str] | None = None, long: bool = False) -> pl.LazyFrame:
    """Profile rows ``p`` of ``keys`` (all when None), only the long ones when ``long``: lazy, not copied."""
    q = p.lazy()
    q = q.filter(pl.col("key").is_in(keys)) if keys is not None else q
    return q.filter("long") if long else q


def _common_keys(pr: pl.DataFrame, po: pl.DataFrame, long: bool = False) -> list[str]:
    """The keys both runs' profile rows have (of their long rows when ``long``), sorted."""
    def keys(p: pl.DataFrame) -> set[str]:
        return set(_rows(p, long=long).select(pl.col("key").unique()).collect().get_column("key"))
    return sorted(keys(pr) & keys(po))


def _cells_per_task(p: pl.DataFrame, tasks: np.ndarray, keys: list[str], long: bool) -> np.ndarray:
    """How many profile cells of ``keys`` (the long ones when ``long``) each task of ``tasks`` has a finite work in
    (counts)."""
    got = _rows(p, keys, long).filter(pl.col("w").is_finite()).group_by("task").len().collect()
    counts = np.zeros(tasks.size, np.int64)
    counts[np.searchsorted(tasks, got.get_column("task").to_numpy())] = got.get_column("len").to_numpy()
    return counts


class Behaviour(NamedTuple):
    """The work profiles of one appl's tasks in two runs: the tasks (sorted), the profile cubes (task x cell,
    ``log1p`` work, NaN where absent), the cost of pairing them (:class:`BehaviourCost`: reference task x other
    task, by position, computed for the pairs asked above ``DENSE_TASKS`` tasks) and ``long``: whether the cells are
    the long bursts' alone (``LONG_NS``; the tasks the same in both runs)."""

    ref_tasks: np.ndarray
    oth_tasks: np.ndarray
    ref_cube: np.ndarray
    oth_cube: np.ndarray
    cost: BehaviourCost
    long: bool = False


def _behaviours(ref: pl.DataFrame, other: pl.DataFrame) -> dict[int, Behaviour]:
    """Per appl with a common closing call and as many tasks in both runs: the :class:`Behaviour` of its tasks (the
    mean |difference| of the first bursts' work, call by call: a missing optional call shifts only its own
    profile). One measure for every use (the search's pins and orderings, a colour's pairing, the assignment): the
    long bursts' cells when the same tasks have ``MIN_CELLS`` or more of them in both runs (the median task), else
    every burst's. The long bursts tell numberings apart by the program's work, burst by burst over the iterations
    (ranks alike on average differ iteration by iteration with their subdomains); the glue between MPI calls follows
    a rank's placement, not its role (mergeattack23 P9). One pair of cubes per appl (16k ranks: issue 23)."""
    out: dict[int, Behaviour] = {}
    for appl in ref.get_column("appl").unique().sort().to_list():
        pr, tr = _profiles(ref, appl)
        po, to = _profiles(other, appl)
        if tr.size != to.size:
            continue
        keys, long = _common_keys(pr, po, long=True), False
        if np.array_equal(tr, to) and keys:
            long = min(np.median(_cells_per_task(pr, tr, keys, True)),
                       np.median(_cells_per_task(po, to, keys, True))) >= MIN_CELLS
        if not long and not (keys := _common_keys(pr, po)):
            continue
        a, b = _cube(pr, tr, keys, long), _cube(po, to, keys, long)
        out[int(appl)] = Behaviour(tr, to, a, b, BehaviourCost(a, b), long)
    return out


class Assignment(NamedTuple):
    """The behaviour assignment of tasks: {appl << ID_BITS | other task: reference task}, its profile distance and
    that of the numbering as it is (sums over tasks of the mean |log1p work difference|; 0 without profiles)."""

    mapping: dict[int, int]
    distance: float
    as_numbered: float


def _assignment(behaviours: dict[int, Behaviour]) -> Assignment:
    """The assignment minimising the distance of work profiles, per appl (Hungarian method)."""
    mapping: dict[int, int] = {}
    distance = as_numbered = 0.0
    for appl, bh in behaviours.items():
        tr, to, cost = bh.ref_tasks, bh.oth_tasks, bh.cost
        rows, cols = cost.partner, np.arange(to.size)
        distance += float(cost.pairs(rows, cols).sum())
        as_numbered += float(cost.pairs(cols, cols).sum()) if np.array_equal(tr, to) else float("inf")
        mapping.update({task_int(appl, int(to[c])): int(tr[r]) for r, c in zip(rows, cols)})
    return Assignment(mapping, distance, as_numbered)


class Correspondence(NamedTuple):
    """The rank correspondence of one other run: ``mapping`` ({appl << ID_BITS | other task: reference task}; None:
    as numbered), ``tie``: why the numbering taken is one of several the data cannot tell apart (the message
    graph's symmetries, task behaviour alike), in words for the verdict, None when it is not; ``note``: for the
    merge's notes, how sure the renumbering is when a behaviour assignment that is not a proven optimum took part
    (above ``DENSE_TASKS`` tasks, :func:`approximate_note`)."""

    mapping: dict[int, int] | None
    tie: str | None = None
    note: str | None = None


def approximate_note(behaviours: dict[int, Behaviour]) -> str | None:
    """Words for the merge's notes when the behaviour assignment of some appl is the best among each task's nearest
    candidates, not the proven optimum (above ``DENSE_TASKS`` tasks); None when every one is exact."""
    big = [bh.ref_tasks.size for bh in behaviours.values() if not bh.cost.exact]
    if not big:
        return None
    return (f"tasks paired by work profile over {max(big)} tasks: the behaviour assignment is the best among each "
            f"task's {NEIGHBOURS} nearest in profile, not a proven optimum (exact up to {DENSE_TASKS} tasks)")


class _Candidates:
    """The numberings that carry the other run's message graph onto the reference's
    (:func:`synthtrace.tracelib.merge.symmetries.numberings`) and their behaviour: ``nodes`` the task keys (sorted,
    the same in both runs), a numbering perm[other node] = reference node. Where an appl's behaviour is the long
    bursts' (``work``, :attr:`Behaviour.long`) numberings are weighed on its cells burst by burst, the others' left
    aside: averaged with the glue's, the program's work could make the numbering as it is look closest when the
    program's roles moved (mergeattack23 P9)."""

    def __init__(self, nodes: np.ndarray, behaviours: dict[int, Behaviour]):
        self.nodes = nodes
        # (first node, behaviour, behaviour assignment: partner[other task] = reference task) per appl
        self.blocks: list[tuple[int, Behaviour, np.ndarray]] = []
        #: (first node, behaviour) per appl weighed on its long bursts
        self.work: list[tuple[int, Behaviour]] = []
        for appl, bh in behaviours.items():
            keys = np.array([task_int(appl, int(t)) for t in bh.ref_tasks], np.int64)
            start = int(np.searchsorted(nodes, keys[0]))
            if np.array_equal(nodes[start:start + keys.size], keys) and np.array_equal(bh.ref_tasks, bh.oth_tasks):
                self.blocks.append((start, bh, bh.cost.partner))
                if bh.long:
                    self.work.append((start, bh))
        #: the behaviour assignment as a numbering (the tasks of an appl without profiles as numbered), whether it
        #: is exact per node, and whether :meth:`pair` followed one that is not
        self.assigned = np.arange(nodes.size)
        self.exact = np.ones(nodes.size, bool)
        for start, bh, partner in self.blocks:
            self.assigned[start:start + partner.size] = start + partner
            self.exact[start:start + partner.size] = bh.cost.exact
        self.assignment_used = False

    def _gaps(self, o: int, refs: np.ndarray) -> np.ndarray | None:
        """The long-burst work distance of other node ``o`` to each reference node of ``refs`` (inf outside its appl);
        None when ``o``'s appl has no work cells or they are too many to compare at once (``CLOSER_CELLS``)."""
        for start, bh in self.work:
            if start <= o < start + bh.ref_tasks.size:
                if refs.size * bh.ref_cube.shape[1] > CLOSER_CELLS:
                    return None
                inside = (refs >= start) & (refs < start + bh.ref_tasks.size)
                d = np.full(refs.size, np.inf)
                rows = refs[inside] - start
                d[inside] = paired_gaps(bh.ref_cube, bh.oth_cube, rows, np.full(rows.size, o - start), np.inf)
                return d
        return None

    def closer(self, o: int, refs: np.ndarray) -> np.ndarray:
        """``refs`` (reference nodes) ordered by behaviour: by long-burst work when there is (:meth:`_gaps`), else
        other node ``o``'s partner in the behaviour assignment first (the assignment is consistent over all tasks,
        a task's own nearest may not be), then by distance."""
        if (d := self._gaps(o, refs)) is not None:
            return refs[np.argsort(d, kind="stable")]
        for start, bh, partner in self.blocks:
            if start <= o < start + bh.oth_tasks.size:
                inside = (refs >= start) & (refs < start + bh.ref_tasks.size)
                d = np.full(refs.size, np.inf)
                d[inside] = bh.cost.column(o - start, refs[inside] - start)
                d = np.where(refs == start + partner[o - start], -1.0, d)
                return refs[np.argsort(d, kind="stable")]
        return refs

    def pair(self, others: np.ndarray, refs: np.ndarray) -> tuple[np.ndarray, int]:
        """Reference nodes ``refs`` paired with other nodes ``others`` (a colour the search left shared, as many of
        each): each other node's partner in the behaviour assignment where it is among ``refs``, the few others
        left as :meth:`closer` orders the references left (up to ``PAIR_CLOSER``, then in order): one assignment,
        not one ordering of all ``refs`` per other node (attack23 F3: a star of 16k ranks, 400 s). Also how many
        reference nodes were weighed (``refs`` once, then the free ones of each :meth:`closer` call: the search's
        work)."""
        got = self.assigned[others]
        self.assignment_used = self.assignment_used or not self.exact[others].all()
        left = ~np.isin(got, refs)
        free = np.setdiff1d(refs, got[~left])
        weighed = refs.size
        for i in np.flatnonzero(left)[:PAIR_CLOSER]:
            weighed += free.size
            got[i] = pick = int(self.closer(int(others[i]), free)[0])
            free = free[free != pick]
        got[np.flatnonzero(left)[PAIR_CLOSER:]] = free
        return got, weighed

    def surest(self, others: np.ndarray) -> int:
        """Of other nodes ``others``, the one whose behaviour singles out its partner best (the widest gap between
        its nearest reference task and the next, over the profiles' noise): the search's first pin."""
        gap = np.full(others.size, -np.inf)
        # on the long bursts' work when every other task can be weighed within CLOSER_CELLS (a sample would miss the
        # few tasks whose work stands out, the ones that single out their partner: a ring of 4k ranks 1 % apart)
        if self.work and sum(bh.ref_tasks.size ** 2 * bh.ref_cube.shape[1] for _, bh in self.work) <= CLOSER_CELLS:
            for start, bh in self.work:
                for i in np.flatnonzero((others >= start) & (others < start + bh.ref_tasks.size)):
                    d = np.sort(mean_gap(bh.ref_cube, bh.oth_cube[others[i] - start][None, :], np.inf))
                    if d.size > 1 and np.isfinite(d[1]):
                        gap[i] = (d[1] - d[0]) / max(d[0], NOISE_FLOOR)
            return int(others[int(np.argmax(gap))])
        for start, bh, _ in self.blocks:
            inside = (others >= start) & (others < start + bh.oth_tasks.size)
            if inside.any() and bh.ref_tasks.size > 1:
                nearest, second = bh.cost.nearest_two(others[inside] - start)
                gap[inside] = (second - nearest) / np.maximum(nearest, NOISE_FLOOR)
        return int(others[int(np.argmax(gap))])

    def distance(self, perm: np.ndarray) -> float:
        """The behaviour distance of a numbering (sum over tasks of the mean |log1p work difference|: of the long
        bursts when there are work cells)."""
        if self.work:
            return float(sum(paired_gaps(bh.ref_cube, bh.oth_cube, perm[s:s + bh.ref_tasks.size] - s,
                                         np.arange(bh.oth_tasks.size), 0.0).sum() for s, bh in self.work))
        return float(sum(bh.cost.pairs(perm[s:s + bh.oth_tasks.size] - s, np.arange(bh.oth_tasks.size)).sum()
                         for s, bh, _ in self.blocks))

    def cells(self, *perms: np.ndarray) -> Iterator[tuple[np.ndarray, ...]]:
        """Blocks of (reference profile cells under each of ``perms``, ..., the other run's cells), flat, aligned: the
        long bursts' when there are work cells; a block of tasks at a time (``behaviour_cost.chunks``), never the
        whole cubes copied."""
        for s, bh in self.work or [(s, bh) for s, bh, _ in self.blocks]:
            block = chunks(bh.oth_tasks.size, bh.oth_cube.shape[1])
            for i in block:
                end = min(i + block.step, bh.oth_tasks.size)  # this appl's tasks only: the next appl's follow in p
                yield (*(bh.ref_cube[p[s + i:s + end] - s].ravel() for p in perms), bh.oth_cube[i:end].ravel())

    def mapping(self, perm: np.ndarray) -> dict[int, int] | None:
        """A numbering as {appl << ID_BITS | other task: reference task}; None for the one as it is."""
        if np.array_equal(perm, np.arange(perm.size)):
            return None
        return {int(self.nodes[o]): int(self.nodes[r]) & MASK for o, r in enumerate(perm)}

    def moved(self, perm: np.ndarray, limit: int = 4) -> str:
        """A numbering in words: its first moves, other task -> reference task."""
        moves = [f"{int(self.nodes[o]) & MASK}->{int(self.nodes[r]) & MASK}" for o, r in enumerate(perm) if o != r]
        return ", ".join(moves[:limit]) + (", ..." if len(moves) > limit else "") if moves else "as numbered"


class Evidence(NamedTuple):
    """Behaviour evidence for numbering ``a`` over ``b``, on the profile cells where the two put reference tasks
    of different work (more than ``INFORMATIVE`` x the cross-run noise apart): how many (``cells``), the mean
    |log1p work difference| to the other run under each (``a``, ``b``), and ``z``: the mean of the paired
    differences (b's minus a's) over its standard error."""

    cells: int
    a: float
    b: float
    z: float

    @property
    def clear(self) -> bool:
        """``a`` fits clearly better: on enough cells, under ``BEHAVIOUR_CLEARLY`` of ``b``'s difference."""
        return self.cells >= MIN_CELLS and self.a < BEHAVIOUR_CLEARLY * self.b

    @property
    def leans(self) -> bool:
        """``a`` fits better beyond chance (``z`` >= ``Z_LEANS``) though maybe not clearly."""
        return self.cells >= MIN_CELLS and self.z >= Z_LEANS


def _evidence(c: _Candidates, a: np.ndarray, b: np.ndarray, noise: float) -> Evidence:
    # running sums (float64) over blocks of tasks: the informative cells may be all of them (16k tasks)
    cells, sa, sb, sd, sd2 = 0, 0.0, 0.0, 0.0, 0.0
    for ra, rb, o in c.cells(a, b):
        use = np.isfinite(ra) & np.isfinite(rb) & np.isfinite(o) & (np.abs(ra - rb) > INFORMATIVE * noise)
        da = np.abs(ra[use] - o[use]).astype(np.float64)
        db = np.abs(rb[use] - o[use]).astype(np.float64)
        cells, sa, sb, sd, sd2 = cells + da.size, sa + da.sum(), sb + db.sum(), sd + (db - da).sum(), \
            sd2 + ((db - da) ** 2).sum()
    if not cells:
        return Evidence(0, 0.0, 0.0, 0.0)
    mean = sd / cells
    se = float(np.sqrt(max(sd2 - cells * mean ** 2, 0.0) / (cells - 1) / cells)) if cells > 1 else 0.0
    return Evidence(cells, sa / cells, sb / cells, mean / se if se > 0 else 0.0)


def _by_symmetry(ref_bursts: pl.DataFrame, ref_counts: pl.DataFrame, oth_bursts: pl.DataFrame,
                 oth_counts: pl.DataFrame, behaviours: dict[int, Behaviour], names: tuple[str, str],
                 min_explained: float) -> Correspondence | None:
    """The correspondence among the numberings that carry the message graph onto the reference's (its symmetries
    and relabellings), chosen by behaviour; None when the graphs do not map onto each other (or the numbering
    chosen does not explain ``min_explained`` of the messages). The numbering as it is, when it is one, is kept
    unless another fits behaviour clearly better (:attr:`Evidence.clear`); when another leans better without a
    margin, or the numbering as it is is none and the best fitting one does not fit clearly better than the next,
    the correspondence is a tie (:attr:`Correspondence.tie`)."""
    nodes = ref_bursts.select(task_key().unique().sort()).to_series().to_numpy()
    if not np.array_equal(nodes, oth_bursts.select(task_key().unique().sort()).to_series().to_numpy()):
        return None
    c = _Candidates(nodes, behaviours)
    got = numberings(nodes, ref_counts, oth_counts, c.closer, c.surest, c.pair)
    perms = got.found
    if not perms:
        return None
    ident = np.arange(nodes.size)
    ranked = sorted(perms, key=c.distance)
    best = ranked[0]
    gaps = np.concatenate([np.abs(ra - o)[np.isfinite(ra) & np.isfinite(o)] for ra, o in c.cells(best)] or
                          [np.empty(0)])
    noise = max(float(np.median(gaps)) if gaps.size else 0.0, NOISE_FLOOR)
    has_ident = any(np.array_equal(p, ident) for p in perms)
    what = (f"runs {names[0]!r} and {names[1]!r}: the message graph maps onto itself under other numberings and "
            "task behaviour cannot tell them apart with a margin (which task is which is a guess; ranks.py)")
    tie: str | None = None
    chosen = best
    if has_ident and not np.array_equal(best, ident):
        ev = _evidence(c, best, ident, noise)
        if not ev.clear:
            chosen = ident
            if ev.leans:
                tie = (f"{what}: kept the numbering as it is, behaviour leans to [{c.moved(best)}] ({ev.a:.2%} vs "
                       f"{ev.b:.2%} work difference on {ev.cells} profile cells)")
    if tie is None and not (has_ident and np.array_equal(chosen, ident)) and len(ranked) > 1:
        runner = next(p for p in ranked if not np.array_equal(p, chosen))
        ev = _evidence(c, chosen, runner, noise)
        if not ev.clear:
            tie = (f"{what}: took [{c.moved(chosen)}], [{c.moved(runner)}] fits alike ({ev.a:.2%} vs {ev.b:.2%} "
                   f"work difference on {ev.cells} profile cells)")
    if tie is None and not got.complete:
        # the search was bounded: a numbering it did not reach may fit better; behaviour alone (the assignment
        # ignoring the messages) says so when it fits clearly better than the numbering taken
        ev = _evidence(c, c.assigned, chosen, noise)
        if ev.clear:
            tie = (f"{what}: took [{c.moved(chosen)}]; the search of numberings was bounded and task behaviour "
                   f"alone fits another clearly better ({ev.a:.2%} vs {ev.b:.2%} work difference on {ev.cells} "
                   "profile cells)")
    mapping = c.mapping(chosen)
    # the graphs leave counts aside: a numbering whose runs' message proportions differ is weighed as before
    if (fit := explained(ref_counts, oth_counts, mapping)) is not None and fit.explained < min_explained:
        return None
    return Correspondence(mapping, tie, approximate_note(behaviours) if mapping and c.assignment_used else None)


def correspondence(ref_bursts: pl.DataFrame, ref_counts: pl.DataFrame, oth_bursts: pl.DataFrame,
                   oth_counts: pl.DataFrame, names: tuple[str, str],
                   min_explained: float = MIN_EXPLAINED) -> Correspondence:
    """The :class:`Correspondence` of the other run's tasks to the reference's. ``*_counts``: the runs' logical
    message counts (:func:`synthtrace.tracelib.merge.messages.message_counts`). The numberings that carry the
    message graph onto the reference's are asked first (:func:`_by_symmetry`); when the graphs differ, the numbering
    as it is and the behaviour assignment are weighed by the messages they explain.

    Raises :class:`RankCorrespondenceError` when no numbering tried explains ``min_explained`` of the messages.
    """
    behaviours = _behaviours(ref_bursts, oth_bursts)
    if ref_counts.height and oth_counts.height and (
            found := _by_symmetry(ref_bursts, ref_counts, oth_bursts, oth_counts, behaviours, names,
                                  min_explained)) is not None:
        return found
    as_numbered = explained(ref_counts, oth_counts)
    if as_numbered is None:  # no messages: nothing tells the tasks apart but behaviour, and ties keep the numbering
        as_numbered = Fit(1.0, 1.0)
    best = _assignment(behaviours)
    moves = any(task_of(k) != v for k, v in best.mapping.items())
    mapped = (explained(ref_counts, oth_counts, best.mapping) if moves else None) or as_numbered
    if moves and mapped.explained >= min_explained and (
            mapped.score > as_numbered.score + CLEARLY
            or (as_numbered.explained < min_explained and mapped.score > as_numbered.score)
            or (mapped.score >= as_numbered.score - 1e-9 and best.distance < BEHAVIOUR_CLEARLY * best.as_numbered)):
        return Correspondence(best.mapping, note=approximate_note(behaviours))
    if as_numbered.explained >= min_explained:
        return Correspondence(None)
    raise RankCorrespondenceError(
        f"runs {names[0]!r} and {names[1]!r}: cannot tell which task is which: {as_numbered.explained:.0%} of "
        f"their logical messages agree as numbered and {mapped.explained:.0%} under the best match of task "
        f"behaviour (needs {min_explained:.0%}); not the same program or decomposition?")


def rank_mapping(ref_bursts: pl.DataFrame, ref_counts: pl.DataFrame, oth_bursts: pl.DataFrame,
                 oth_counts: pl.DataFrame, names: tuple[str, str],
                 min_explained: float = MIN_EXPLAINED) -> dict[int, int] | None:
    """None when the tasks correspond as numbered; else {appl << ID_BITS | other task: reference task} to renumber
    the other run with (:func:`renumber`): the mapping of :func:`correspondence`."""
    return correspondence(ref_bursts, ref_counts, oth_bursts, oth_counts, names, min_explained).mapping


def renumber_columns(df: pl.DataFrame, mapping: dict[int, int], columns: Sequence[str]) -> pl.DataFrame:
    """``df`` with its task-valued ``columns`` (tasks of its ``appl``) renumbered by ``mapping``."""
    return df.with_columns(_mapped(c, mapping) for c in columns) if df.height else df


def renumber(bursts: pl.DataFrame, calls: pl.DataFrame, mapping: dict[int, int],
             messages: pl.DataFrame | None = None) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame | None]:
    """The run's bursts, calls and logical messages (:func:`synthtrace.tracelib.merge.messages.logical_messages`)
    with tasks (and message partners) renumbered by ``mapping``."""
    return (renumber_columns(bursts, mapping, ("task",)), renumber_calls(calls, mapping),
            None if messages is None else renumber_columns(messages, mapping, ("sender", "receiver")))


def renumber_calls(calls: pl.DataFrame | pl.LazyFrame, mapping: dict[int, int]) -> pl.DataFrame | pl.LazyFrame:
    """The run's MPI calls with their tasks and partners renumbered by ``mapping``; a lazy scan stays lazy (renumbered
    as it is read: issue 23, calls not held)."""
    if isinstance(calls, pl.LazyFrame):
        return calls.map_batches(lambda c: renumber_columns(c, mapping, ("peer", "task")))
    return renumber_columns(calls, mapping, ("peer", "task"))
