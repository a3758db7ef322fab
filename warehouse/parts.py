"""Reading the warehouse's stored Parquet files, where a damaged one is one line naming it (issue 23).

A stored file can be damaged behind synthtrace's back: a disk or file-system fault, a copy cut short, a hand edit
(``head -c 3000 /dev/urandom > runs/<id>/bursts/part-00000.parquet``), a zero-byte file left by a full disk in
another tool. Polars, pyarrow and DuckDB then fail with their own exceptions, most of which do not name the file
(Polars' ``ComputeError: parquet: File out of specification``, DuckDB's ``don't know what type``). Every read of a
stored file goes through this module (:func:`read_part`, :func:`scan_parts`; DuckDB's through
:meth:`Snapshot.checked <synthtrace.warehouse.snapshot.Snapshot.checked>`, which asks :func:`first_damaged`), and
this is the one place that turns such a failure into :class:`~synthtrace.warehouse.errors.DamagedPartError`:
the file, the reason, what to do; the CLI prints it as one line (exit 2). Nothing is written on the way.

What is checked up front is the file's content against the checksum its folder's commit recorded
(:mod:`~synthtrace.warehouse.checksums`: hashed whole by every Polars read here; by DuckDB's reads when the file's
size or mtime changed since, :func:`content_check`), then its frame, read from its end: the magic bytes and the
footer (the schema and the row groups' places, which a lazy scan reads before any row). A damaged page behind an
intact footer decodes to garbage without an error as often as not (DuckDB), so only the checksum finds it for
sure; in a folder stored without checksums it is found when a reader fails on it (:func:`read_part`; for DuckDB,
by reading the files a row group at a time on failure only).
"""
from __future__ import annotations

import errno
import os
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from synthtrace.warehouse.checksums import content_damage, recorded
from synthtrace.warehouse.errors import DamagedPartError

if TYPE_CHECKING:
    import polars as pl

#: the top folder of a stored file -> what to do about a damaged file there
_REMEDY = {
    "runs": "remove the run (`synthtrace runs rm {unit}`) and ingest its trace again",
    "experiments": "compute it again (`synthtrace merge {unit}`, then the later stages)",
    "models": "train the model again (`synthtrace train`)",
    "predictions": "predict again (`synthtrace predict`)",
    "regressions": "remove the file and detect again (`synthtrace detect` reads the stored alerts first; that "
                   "application's alerts then start afresh)",
    "pop": "compute the POP tables again (`synthtrace pop`)",
}
#: a reader's text for an allocation that failed (DuckDB's "Out of Memory Error: ArrowBuffer: failed to allocate
#: 65536 bytes" as Arrow's stream hands it over, an OSError; Arrow's "malloc of size 131072 failed"): the process's
#: memory, never the file's damage (attack 19 F9)
_ALLOCATION_FAILED = re.compile(r"^Out of Memory Error|\bmalloc of size \d+ failed|std::bad_alloc")
#: OSError numbers that are the machine's, not the file's (reported as they are)
_MACHINE_ERRNOS = {errno.ENOENT, errno.EACCES, errno.EPERM, errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EISDIR,
                   errno.ENOTDIR, errno.ELOOP, errno.EINTR}


def damaged(path: str | os.PathLike, reason: str, shown: str | None = None, *,
            what: str = "a damaged stored Parquet file") -> DamagedPartError:
    """The error for the stored file ``path`` that cannot be read for ``reason`` (``shown``: how to name it, when
    ``path`` is a query's link to it; ``what``: what it is)."""
    where = Path(shown or path)
    parts = where.parts
    top = next((i for i, p in enumerate(parts) if p in _REMEDY and i + 1 < len(parts)), None)
    remedy = (_REMEDY[parts[top]].format(unit=parts[top + 1]) if top is not None
              else "restore it from a backup or compute it again")
    if top is not None and parts[top] == "runs" and where.name == "run.parquet":  # the record `runs rm` reads
        remedy = (f"ingest its trace again (a run whose record is damaged is replaced whole), or remove the run "
                  f"(`synthtrace runs rm {parts[top + 1]}`)")
    return DamagedPartError(f"{where}: {what} ({reason}); {remedy}")


def frame_damage(path: str | os.PathLike) -> str | None:
    """Why the Parquet file ``path`` cannot be opened (empty, cut short, not Parquet, an unreadable footer), or None
    when its frame is sound. Reads its footer only (a few kB). pyarrow, never Polars: a query's forked child may
    call this, and Polars' thread pool is not there."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pq.read_metadata(path)
    except (pa.ArrowException, OSError) as exc:
        if isinstance(exc, OSError) and exc.errno in _MACHINE_ERRNOS or allocation_failed(exc):
            raise
        return _reason(exc)
    return None


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0].strip() if text and text[0].strip() else type(exc).__name__


def content_check(path: str | os.PathLike, place: str | os.PathLike | None = None, *, thorough: bool = True,
                  shown: str | None = None) -> None:
    """Raise :class:`DamagedPartError` when the file ``path`` (a link to the stored file at ``place``, default
    ``path``) is not what its folder's commit stored (:func:`~synthtrace.warehouse.checksums.content_damage`;
    ``thorough``: hashed whatever its mtime). A file stored without checksums passes."""
    try:
        why = content_damage(path, place, thorough=thorough)
    except OSError as exc:
        if exc.errno in _MACHINE_ERRNOS:
            raise
        why = _reason(exc)
    if why is not None:
        raise damaged(path, why, shown or (str(place) if place is not None else None))


def check_parts(paths: Iterable[str | os.PathLike], *, pages: bool = False) -> None:
    """Raise :class:`DamagedPartError` for the first of ``paths`` whose content (:func:`content_check`, hashed) or
    frame (:func:`frame_damage`) is damaged; with ``pages``, a file stored without checksums is also read a row
    group at a time (:func:`page_damage`: for a command that must check before it commits what it reads after)."""
    for p in paths:
        content_check(p)
        if (why := frame_damage(p)) is not None or (pages and recorded(p) is None and (why := page_damage(p))):
            raise damaged(p, why)


def first_damaged(paths: Iterable[str], shown: Callable[[str], str] = str,
                  failure: BaseException | None = None) -> DamagedPartError | None:
    """The error for the first of ``paths`` that is damaged, named by ``shown(path)``; None if all are sound (or
    gone meanwhile). Their frames first (a few kB each); then the file a reader's ``failure`` names; then their
    pages, read one row group at a time (on a reader's failure only: a damaged page behind an intact footer)."""
    paths = list(paths)
    for check in (frame_damage, lambda p: _named_by(failure, p), page_damage):
        for p in paths:
            try:
                why = check(p)
            except OSError:
                continue
            if why is not None:
                return damaged(p, why, shown(p))
    return None


def _named_by(failure: BaseException | None, path: str) -> str | None:
    """The reason ``failure`` gives, when its text names ``path`` (DuckDB's "Failed to read file ..."), else None."""
    text = str(failure) if failure is not None else ""
    return _reason(failure) if path in text else None


def page_damage(path: str | os.PathLike) -> str | None:
    """Why a page of the Parquet file ``path`` cannot be decoded, or None when every row group reads. Reads the
    whole file, a row group at a time, in this thread (pyarrow: a query's forked child may call it)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        with pq.ParquetFile(path) as f:
            for i in range(f.num_row_groups):
                f.read_row_group(i, use_threads=False)
    except (pa.ArrowException, OSError) as exc:
        if isinstance(exc, OSError) and exc.errno in _MACHINE_ERRNOS or allocation_failed(exc):
            raise  # under a query's cap, a row group of 4,115 columns did not fit (attack 19 F9): not the file's
        return _reason(exc)
    return None


def may_be_damage(exc: BaseException) -> bool:
    """Whether ``exc`` (or an error it was raised from or while handling) is a Parquet reader's failure that a
    damaged file can cause: worth looking for the file (on failure only; a sound warehouse costs nothing). Never
    when an allocation failed on the way (:func:`allocation_failed`: the query's memory cap, attack 19 F9)."""
    seen: set[int] = set()
    chain: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        chain.append(e)
        e = e.__cause__ or e.__context__
    return not any(map(allocation_failed, chain)) and any(map(_reader_failure, chain))


def allocation_failed(exc: BaseException) -> bool:
    """Whether ``exc`` is a reader's report of an allocation that failed (memory, never the file's damage)."""
    if isinstance(exc, MemoryError) or _ALLOCATION_FAILED.search(str(exc)) is not None:
        return True
    if "_duckdb" in sys.modules or "duckdb" in sys.modules:
        from synthtrace.warehouse import engine

        return isinstance(exc, engine.OutOfMemoryException)
    return False


def _reader_failure(e: BaseException) -> bool:
    if isinstance(e, OSError):
        return e.errno not in _MACHINE_ERRNOS
    if "polars" in sys.modules and isinstance(e, sys.modules["polars"].exceptions.ComputeError):
        return True
    if "pyarrow" in sys.modules and isinstance(e, sys.modules["pyarrow"].ArrowException):
        return True
    if "_duckdb" in sys.modules or "duckdb" in sys.modules:
        from synthtrace.warehouse import engine

        refused = (engine.ParserException, engine.BinderException, engine.CatalogException,
                   engine.PermissionException, engine.OutOfMemoryException, engine.InterruptException)
        return isinstance(e, engine.Error) and not isinstance(e, refused)
    return False


def read_part(path: str | os.PathLike, **options: Any) -> pl.DataFrame:
    """``pl.read_parquet(path, **options)`` of the file itself (no glob: a ``[`` in a warehouse's path is a name), its
    content checked first (:func:`content_check`); a damaged file is :class:`DamagedPartError`."""
    import polars as pl

    content_check(path)
    try:
        return pl.read_parquet(path, **options, glob=False)
    except (pl.exceptions.ComputeError, OSError) as exc:
        if isinstance(exc, OSError) and exc.errno in _MACHINE_ERRNOS:
            raise
        raise damaged(path, _reason(exc)) from None


def read_parts(paths: Iterable[str | os.PathLike]) -> pl.DataFrame:
    """The files ``paths`` read and unioned by column name (experiments differ in counters)."""
    import polars as pl

    return pl.concat([read_part(p) for p in paths], how="diagonal_relaxed")


def scan_parts(paths: Iterable[str | os.PathLike]) -> pl.LazyFrame:
    """A lazy scan of the files ``paths`` unioned by column name, their content and frames checked first (a damaged
    footer would otherwise fail wherever the scan is collected, as Polars' ``ComputeError`` naming no file; a
    damaged page be read as garbage or fail there)."""
    import polars as pl

    paths = list(paths)
    check_parts(paths)
    if len(paths) > 1:
        # parts whose columns agree in type: one scan of their union, absent columns NULL (attack 18 F2: the union
        # of 149 parts of ~1,000 of 4,096 counter columns each, planned part by part, took 500 MB to plan)
        schemas = [schema_of(p) for p in paths]
        union: dict[str, Any] = {}
        for s in schemas:
            for name, dtype in s.items():
                union.setdefault(name, dtype)
        if all(union[name] == dtype for s in schemas for name, dtype in s.items()):
            return pl.scan_parquet(paths, schema=union, missing_columns="insert", hive_partitioning=False, glob=False)
    return pl.concat([pl.scan_parquet(p, glob=False) for p in paths], how="diagonal_relaxed")


def schema_of(path: str | os.PathLike) -> dict[str, Any]:
    """The column names and Polars types of the stored file ``path`` (its footer only)."""
    import polars as pl

    try:
        return dict(pl.scan_parquet(path, glob=False).collect_schema())  # read_parquet_schema globs the path
    except pl.exceptions.ComputeError as exc:
        raise damaged(path, _reason(exc)) from None
