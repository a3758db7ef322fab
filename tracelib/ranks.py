"""Which task of one run is which task of another (DESIGN §6): rank correspondence before the merge.

A launcher may number the ranks of two runs of one program differently (another rank file, a reordering for the
topology). The merge aligns a task with the task of the same number, so the numbering is checked first:

- the **message graph** of a run is its set of point-to-point edges (task, peer, bytes) from its MPI calls;
  under the right correspondence the two runs' graphs agree (their Jaccard index is high) whatever the timing;
- the **behaviour** of a task is its fingerprint: per closing call (call, call site), ``log1p`` of how many
  bursts it closes and of the instructions (or duration, in microseconds) those bursts executed.

As numbered, the runs correspond when their graphs agree (``min_agreement``) or when neither has messages. Else
the assignment of tasks that minimises the fingerprint distance (Hungarian method, SciPy's
``linear_sum_assignment``) is tried: when the graphs agree under it, the other run's tasks are renumbered (and the
merge says so); when they do not, the correspondence cannot be decided and :class:`RankCorrespondenceError` says
so in one line.
"""
from __future__ import annotations

import numpy as np
import polars as pl
from scipy.optimize import linear_sum_assignment

from synthtrace.tracelib.errors import BadInputError

#: Jaccard index of the two runs' message graphs above which a correspondence holds
MIN_AGREEMENT = 0.8
WORK = ("PAPI_TOT_INS", "INST_RETIRED:ANY", "INST_RETIRED:ANY_P", "INST_RETIRED")


class RankCorrespondenceError(BadInputError):
    """The tasks of two runs cannot be put in correspondence (numbering differs and cannot be mapped)."""


def _key(task: str) -> pl.Expr:
    return pl.col("appl").cast(pl.Int64) * (1 << 21) + pl.col(task).cast(pl.Int64)


def _mapped(task: str, mapping: dict[int, int]) -> pl.Expr:
    """``task`` renumbered by ``mapping`` ({appl << 21 | task: new task}); unchanged where not in it."""
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


def _fingerprints(bursts: pl.DataFrame) -> pl.DataFrame:
    """appl, task, key (closing call and site), n (log1p bursts), w (log1p work): a task's behaviour."""
    work = next((c for c in WORK if c in bursts.columns), None)
    w = pl.col(work).cast(pl.Float64) if work else pl.col("duration_ns").cast(pl.Float64) / 1e3
    return (bursts.group_by("appl", "task", pl.concat_str(pl.col("mpi_call").fill_null(""), pl.lit("@"),
                                                          pl.col("call_site").fill_null("")).alias("key"))
            .agg(pl.len().cast(pl.Float64).log1p().alias("n"), w.sum().log1p().alias("w")))


def _assignment(ref: pl.DataFrame, other: pl.DataFrame) -> dict[int, int]:
    """{appl << 21 | other task: reference task} minimising the L1 distance of fingerprints, per appl."""
    fr, fo = _fingerprints(ref), _fingerprints(other)
    mapping: dict[int, int] = {}
    for (appl,), gr in fr.partition_by("appl", as_dict=True).items():  # one iteration per application
        go = fo.filter(pl.col("appl") == appl)
        keys = sorted(set(gr.get_column("key")) | set(go.get_column("key")))

        def matrix(g: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
            wide = (g.pivot(on="key", index="task", values=["n", "w"]).sort("task").fill_null(0.0))
            cols = [f"{v}_{k}" for v in ("n", "w") for k in keys]
            wide = wide.with_columns(*[pl.lit(0.0).alias(c) for c in cols if c not in wide.columns])
            return wide.get_column("task").to_numpy(), wide.select(cols).to_numpy()

        tr, mr = matrix(gr)
        to, mo = matrix(go)
        cost = np.abs(mr[:, None, :] - mo[None, :, :]).sum(axis=2)
        rows, cols = linear_sum_assignment(cost)
        mapping.update({(int(appl) << 21) + int(to[c]): int(tr[r]) for r, c in zip(rows, cols)})
    return mapping


def rank_mapping(ref_bursts: pl.DataFrame, ref_calls: pl.DataFrame, oth_bursts: pl.DataFrame,
                 oth_calls: pl.DataFrame, names: tuple[str, str],
                 min_agreement: float = MIN_AGREEMENT) -> dict[int, int] | None:
    """None when the tasks correspond as numbered; else {appl << 21 | other task: reference task} to renumber the
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
    if mapped >= min_agreement and any(k % (1 << 21) != v for k, v in mapping.items()):
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
