"""One sortable Int64 key per thread (appl, task, thread) or task (appl, task): the single packing of the project.

Each part keeps ``ID_BITS`` bits (the Paraver header's limit,
:data:`synthtrace.tracelib.formats.paraver.header.ID_BITS`), so
a key sorts like its tuple: ``appl << 2*ID_BITS | task << ID_BITS | thread``, and a task key is ``appl << ID_BITS |
task`` (a thread key shifted right by ``ID_BITS``). :func:`packed` is the NumPy version, :func:`thread_key` and
:func:`task_key` the Polars expressions, from the same constants.
"""
from __future__ import annotations

import numpy as np
import polars as pl

from synthtrace.tracelib.formats.paraver.header import ID_BITS

MASK = (1 << ID_BITS) - 1


def packed(appl: np.ndarray, task: np.ndarray, thread: np.ndarray) -> np.ndarray:
    """(appl, task, thread) as one int64 that sorts like the triple (each part in [0, 2**ID_BITS))."""
    a, k, h = (np.asarray(x).astype(np.int64) for x in (appl, task, thread))
    if a.size and (min(a.min(), k.min(), h.min()) < 0 or max(a.max(), k.max(), h.max()) > MASK):
        raise ValueError(f"appl, task and thread numbers must lie in [0, {MASK}]")
    return (a << (2 * ID_BITS)) | (k << ID_BITS) | h


def unpacked(key: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(appl, task, thread) of thread keys (the inverse of :func:`packed`)."""
    k = np.asarray(key, dtype=np.int64)
    return k >> (2 * ID_BITS), (k >> ID_BITS) & MASK, k & MASK


def _col(x: pl.Expr | str) -> pl.Expr:
    return (pl.col(x) if isinstance(x, str) else x).cast(pl.Int64)


def thread_key(appl: pl.Expr | str = "appl", task: pl.Expr | str = "task",
               thread: pl.Expr | str = "thread") -> pl.Expr:
    """The Polars expression of :func:`packed`."""
    return (_col(appl) * (1 << 2 * ID_BITS)) + (_col(task) * (1 << ID_BITS)) + _col(thread)


def task_key(appl: pl.Expr | str = "appl", task: pl.Expr | str = "task") -> pl.Expr:
    """(appl, task) as one Int64 that sorts like the pair: ``appl << ID_BITS | task``."""
    return _col(appl) * (1 << ID_BITS) + _col(task)


def task_int(appl: int, task: int) -> int:
    """The task key of one (appl, task) (the Python value of :func:`task_key`)."""
    return (appl << ID_BITS) | task


def task_of(key: int) -> int:
    """The task of a task key."""
    return key & MASK


def appl_base(key: int) -> int:
    """A task key with its task cleared (the appl part)."""
    return key >> ID_BITS << ID_BITS
