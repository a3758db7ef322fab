"""Which reader opens a path: Paraver ``.prv`` files and OTF2 archives (their ``.otf2`` anchor file)."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Protocol

import polars as pl

from synthtrace.tracelib.bursts import ReadSummary
from synthtrace.tracelib.errors import TraceFormatError


class TraceSource(Protocol):
    """What every format reader offers the warehouse: identity, resource model and streamed tables."""

    path: Path
    format: str
    warnings: list[str]

    @property
    def started_at(self) -> datetime | None: ...
    @property
    def resources(self) -> dict[str, int]: ...  # n_appl, n_tasks, n_threads, n_nodes, duration_ns
    def content_files(self) -> list[Path]: ...  # the files whose bytes identify the run
    def iter_tables(self, run_id: str, progress: Callable[[int], None] | None = None,
                    summary: ReadSummary | None = None) -> Iterator[tuple[pl.DataFrame, pl.DataFrame]]: ...


TRACE_SUFFIXES = (".prv", ".otf2")


def open_trace(path: str | Path, *, salvage: bool = False) -> TraceSource:
    """Open a trace file with the reader for its format."""
    path = Path(path)
    if path.suffix == ".prv":
        from synthtrace.tracelib.paraver.reader import ParaverTrace
        return ParaverTrace(path, salvage=salvage)
    if path.suffix == ".otf2":
        from synthtrace.tracelib.otf2_reader import Otf2Trace  # noqa: PLC0415 - optional heavy import
        return Otf2Trace(path)
    raise TraceFormatError(path, None, f"unknown trace format {path.suffix!r} (expected .prv or an OTF2 .otf2 anchor)")


def find_traces(paths: list[Path]) -> list[Path]:
    """Trace files among ``paths``: files as given, folders searched recursively, sorted by path."""
    found: list[Path] = []
    for p in paths:
        if p.is_dir():
            found.extend(sorted(q for q in p.rglob("*") if q.suffix in TRACE_SUFFIXES and q.is_file()))
        else:
            found.append(p)
    return found


def trace_bytes(path: Path) -> int:
    """Bytes a reader will go through for the trace at ``path`` (an OTF2 anchor counts its whole archive)."""
    if path.suffix == ".otf2":
        folder, defs = path.with_suffix(""), path.with_suffix(".def")
        events = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) if folder.is_dir() else 0
        return path.stat().st_size + (defs.stat().st_size if defs.is_file() else 0) + events
    return path.stat().st_size
