"""The drop folder cluster jobs write traces into: what is new, and where broken traces are set aside."""
from __future__ import annotations

import shutil
import warnings
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from synthtrace.tracelib.formats import find_traces
from synthtrace.tracelib.paraver.reader import companion
from synthtrace.warehouse.ingest import run_identity
from synthtrace.warehouse.layout import Warehouse

QUARANTINE = ".quarantine"


@dataclass(frozen=True)
class DroppedTrace:
    """A trace in the drop folder that is not in the warehouse yet."""

    path: Path
    run_id: str | None  # None when the file could not even be opened (it will be quarantined)


def discover(drop: Path, wh: Warehouse) -> list[DroppedTrace]:
    """Traces under ``drop`` (not in its quarantine) whose content is not in the warehouse yet.

    Identity is the content hash, so renamed or re-dropped files are not ingested twice.
    """
    from synthtrace.tracelib.errors import TraceFormatError
    from synthtrace.tracelib.formats import open_trace

    out, seen = [], set()
    for path in find_traces([drop]):
        if QUARANTINE in path.relative_to(drop).parts:
            continue
        try:
            with warnings.catch_warnings():  # the ingest that follows reports them
                warnings.simplefilter("ignore")
                source = open_trace(path, salvage=False)
            run_id = run_identity(source)
        except TraceFormatError:
            out.append(DroppedTrace(path, None))
            continue
        if run_id in seen or wh.has_run(run_id):
            continue
        seen.add(run_id)
        out.append(DroppedTrace(path, run_id))
    return out


def quarantine(drop: Path, path: Path, reason: str) -> Path:
    """Move a broken trace (and its .pcf/.row) into ``drop/.quarantine`` beside a ``.reason.txt`` file."""
    dest_dir = drop / QUARANTINE
    dest_dir.mkdir(parents=True, exist_ok=True)
    moved = dest_dir / path.name
    for f in [path, companion(path, ".pcf"), companion(path, ".row")]:
        if f.exists():
            shutil.move(str(f), dest_dir / f.name)
    (dest_dir / f"{path.name}.reason.txt").write_text(f"{datetime.now(UTC).isoformat()}\n{reason}\n")
    return moved
