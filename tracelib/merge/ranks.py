"""Which task of one run is which task of another (DESIGN §6): rank correspondence before the merge.

A launcher may number the ranks of two runs of one program differently (another rank file, a reordering for the
topology). The merge aligns a task with the task of the same number, so the numbering is checked first:

- the **message graph** of a run is its set of point-to-point edges (task, peer, bytes) from its MPI calls;
  under the right correspondence the two runs' graphs agree (their Jaccard index is high) whatever the timing;
- the **behaviour** of a task is its work profile: per closing call (call, call site), ``log1p`` of the
  instructions (or duration, in microseconds) of the first ``PROFILE`` bursts it closes, in order: the same
  logical bursts do the same work in every run, and a rank's share of the domain shows in it.

As numbered, the runs correspond when their graphs agree (``min_agreement``) or when neither has messages. Else
the assignment of tasks that minimises the profile distance (Hungarian method, SciPy's
``linear_sum_assignment``) is tried: when the graphs agree under it, the other run's tasks are renumbered (and the
merge says so); when they do not, the correspondence cannot be decided and :class:`RankCorrespondenceError` says
so in one line.
"""
from __future__ import annotations

import numpy as np
import polars as pl
from scipy.optimize import linear_sum_assignment

from synthtrace.tracelib.errors import BadInputError
from synthtrace.tracelib.thread_key import task_int, task_key, task_of

#: Jaccard index of the two runs' message graphs above which a correspondence holds
MIN_AGREEMENT = 0.8
WORK = ("PAPI_TOT_INS", "INST_RETIRED:ANY", "INST_RETIRED:ANY_P", "INST_RETIRED")
PROFILE = 64  # bursts per closing call in a task's work profile


class RankCorrespondenceError(BadInputError):
    """The tasks of two runs cannot be put in correspondence (numbering differs and cannot be mapped)."""


def _key(task: str) -> pl.Expr:
    return task_key("appl", task)


def _mapped(task: str, mapping: dict[int, int]) -> pl.Expr:
    """``task`` renumbered by ``mapping`` ({appl << ID_BITS | task: new task}); unchanged where not in it."""
    return _key(task).replace_strict(mapping, default=pl.col(task).cast(pl.Int64)).cast(pl.Int32).alias(task)


def _edges(calls: pl.DataFrame, mapping: dict[int, int] | None = None) -> set[tuple[int, int, int, int]]:
    """(appl, task, peer, bytes) of every point-to-point call with a partner, tasks mapped by ``mapping``."""
    if calls.height == 0 or "peer" not in calls.columns:
        return set()
    e = calls.filter(pl.col("peer").is_not_null()).select(
        "appl", "task", "peer", (pl.col("bytes_sent").fill_null(0) + pl.col("bytes_recv").fill_null(0)).alias("b")
    ).unique()
    if mapping:
        e = e.with_columns(_mapped("task", mapping), _mapped("peer", mapping))
    return set(e.iter_rows())


def agreement(a: set, b: set) -> float | None:
    """Jaccard index of two edge sets (None when both are empty)."""
    if not a and not b:
        return None
    return len(a & b) / len(a | b)


def _profiles(bursts: pl.DataFrame, appl: int) -> tuple[pl.DataFrame, np.ndarray]:
    """(profile rows: task, key, k, w; the tasks): per task of ``appl`` and closing call (call, call site), ``log1p`` of
    the work of its first ``PROFILE`` bursts in order (NaN past the end): instructions, else microseconds."""
    work = next((c for c in WORK if c in bursts.columns), None)
    w = pl.col(work).cast(pl.Float64) if work else pl.col("duration_ns").cast(pl.Float64) / 1e3
    key = pl.concat_str(pl.col("mpi_call").fill_null(""), pl.lit("@"), pl.col("call_site").fill_null(""))
    p = (bursts.filter(pl.col("appl") == appl).select("task", key.alias("key"), w.log1p().alias("w"))
         .with_columns(pl.int_range(pl.len()).over("task", "key").alias("k")).filter(pl.col("k") < PROFILE))
    return p, p.get_column("task").unique().sort().to_numpy()


def _assignment(ref: pl.DataFrame, other: pl.DataFrame) -> dict[int, int]:
    """{appl << ID_BITS | other task: reference task} minimising the distance of work profiles, per appl: the mean
    |difference| of the first bursts' work, call by call (a missing optional call shifts only its own profile)."""
    mapping: dict[int, int] = {}
    for appl in ref.get_column("appl").unique().to_list():
        pr, tr = _profiles(ref, appl)
        po, to = _profiles(other, appl)
        keys = sorted(set(pr.get_column("key")) & set(po.get_column("key")))
        if not keys or tr.size != to.size:
            continue

        def cube(p: pl.DataFrame, tasks: np.ndarray, keys: list) -> np.ndarray:
            a = np.full((tasks.size, len(keys), PROFILE), np.nan)
            q = p.filter(pl.col("key").is_in(keys))
            a[np.searchsorted(tasks, q.get_column("task").to_numpy()),
              np.searchsorted(keys, q.get_column("key").to_numpy()), q.get_column("k").to_numpy()] = \
                q.get_column("w").to_numpy()
            return a

        a, b = cube(pr, tr, keys), cube(po, to, keys)
        with np.errstate(invalid="ignore"):
            d = np.abs(a[:, None] - b[None, :])  # ref task x other task x key x k
            cost = np.nan_to_num(np.nanmean(d.reshape(*d.shape[:2], -1), axis=2), nan=1e6)
        rows, cols = linear_sum_assignment(cost)
        mapping.update({task_int(int(appl), int(to[c])): int(tr[r]) for r, c in zip(rows, cols)})
    return mapping


def rank_mapping(ref_bursts: pl.DataFrame, ref_calls: pl.DataFrame, oth_bursts: pl.DataFrame,
                 oth_calls: pl.DataFrame, names: tuple[str, str],
                 min_agreement: float = MIN_AGREEMENT) -> dict[int, int] | None:
    """None when the tasks correspond as numbered; else {appl << ID_BITS | other task: reference task} to renumber the
    other run with (:func:`renumber`).

    Raises :class:`RankCorrespondenceError` when neither the numbering nor the behaviour-based assignment makes
    the message graphs agree.
    """
    e_ref = _edges(ref_calls)
    as_numbered = agreement(e_ref, _edges(oth_calls))
    if as_numbered is None or as_numbered >= min_agreement:
        return None
    mapping = _assignment(ref_bursts, oth_bursts)
    mapped = agreement(e_ref, _edges(oth_calls, mapping)) or 0.0
    if mapped >= min_agreement and any(task_of(k) != v for k, v in mapping.items()):
        return mapping
    raise RankCorrespondenceError(
        f"runs {names[0]!r} and {names[1]!r}: cannot tell which task is which: their message graphs agree "
        f"{as_numbered:.0%} as numbered and {mapped:.0%} under the best match of task behaviour "
        f"(needs {min_agreement:.0%}); not the same program or decomposition?")


def renumber(bursts: pl.DataFrame, calls: pl.DataFrame, mapping: dict[int, int]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The run's bursts and calls with tasks (and message partners) renumbered by ``mapping``."""
    b = bursts.with_columns(_mapped("task", mapping))
    c = calls.with_columns(_mapped("peer", mapping), _mapped("task", mapping)) if calls.height else calls
    return b, c
