"""The drop folder cluster jobs write traces into: what is new, and where broken traces are set aside."""
from __future__ import annotations

import errno
import shutil
import uuid
import warnings
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from synthtrace.tracelib.formats.source import find_traces
from synthtrace.warehouse.ingest import ContentId, RunStoreError, content_id, experiment_names
from synthtrace.warehouse.layout import Warehouse
from synthtrace.warehouse.names import file_name

QUARANTINE = ".quarantine"
REASON_FILE = "reason.txt"
#: errors of the machine, not of the trace: the trace stays in the drop folder for the next night
#: bytes of a trace's name kept in its quarantine folder's name (a file system allows 255 per name)
_NAME_BYTES = 200
_MACHINE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.ENOMEM}


@dataclass(frozen=True)
class DroppedTrace:
    """A trace in the drop folder that is not in the warehouse yet."""

    path: Path
    run_id: str | None  # None when the file could not even be opened (it will be quarantined)
    experiment: str  # where its run goes (:func:`~synthtrace.warehouse.ingest.experiment_names`)
    known: ContentId | None = None  # its id with the files' stat when hashed: the ingest need not hash it again


def is_machine_error(exc: BaseException) -> bool:
    """True for failures that say nothing about the trace (disk full, read-only warehouse, out of memory, a run
    that could not be stored): the trace stays for the next night, never quarantined."""
    # attack 7 A6: a run that could not be stored (its stage removed under it, a full disk) says nothing of the trace
    return isinstance(exc, MemoryError | RunStoreError) or (isinstance(exc, OSError) and exc.errno in _MACHINE_ERRNOS)


def discover(drop: Path, wh: Warehouse) -> list[DroppedTrace]:
    """Traces under ``drop`` (not in its quarantine) whose content is not in the warehouse yet.

    Identity is the content hash, so renamed or re-dropped files are not ingested twice. A trace that cannot
    even be opened, whatever the exception, is returned without a run_id: its ingest fails and quarantines it.
    Each trace's experiment follows the rule of ``synthtrace ingest``, applied to every trace of the drop folder
    (new or not), so that a folder's runs land in the same experiments night after night.
    """
    from synthtrace.tracelib.formats.source import open_trace

    out, seen = [], set()
    traces = [p for p in find_traces([drop]) if QUARANTINE not in p.relative_to(drop).parts]
    experiments, _ = experiment_names(traces)
    for path in traces:
        try:
            with warnings.catch_warnings():  # the ingest that follows reports them
                warnings.simplefilter("ignore")
                source = open_trace(path, salvage=False)
            known = content_id(source)
            run_id = known.run_id
        except Exception as exc:  # one trace's failure, of whatever kind, must not end the night
            if is_machine_error(exc):
                raise
            out.append(DroppedTrace(path, None, experiments[path]))
            continue
        if run_id in seen or wh.has_run(run_id):
            continue
        seen.add(run_id)
        out.append(DroppedTrace(path, run_id, experiments[path], known))
    return out


def trace_files(path: Path) -> list[Path]:
    """Everything that makes up the trace at ``path``: a .prv (or .prv.gz) with its .pcf/.row, as Paraver finds
    them, or an OTF2 anchor with its ``.def`` and its archive folder."""
    from synthtrace.tracelib.formats.paraver.reader import companion

    if path.suffix == ".otf2":
        parts = [path, path.with_suffix(".def"), path.with_suffix("")]
    else:
        parts = [path, companion(path, ".pcf"), companion(path, ".row")]
    return [p for p in parts if p.exists() or p.is_symlink()]


def quarantine(drop: Path, path: Path, reason: str) -> Path:
    """Move a broken trace, whole, into a folder of its own under ``drop/.quarantine`` with a ``reason.txt``.

    The folder is new for every trace (time stamp, trace name, random suffix), so two broken traces of one
    name never overwrite each other; the reason says where the trace came from. Returns that folder.
    """
    stamp = datetime.now(UTC)
    shown = path.name if len(path.name.encode("utf-8", "surrogateescape")) <= _NAME_BYTES else file_name(path.name)
    dest = drop / QUARANTINE / f"{stamp:%Y%m%dT%H%M%S}-{shown}-{uuid.uuid4().hex[:8]}"
    dest.mkdir(parents=True)
    (dest / REASON_FILE).write_text(f"{stamp.isoformat()}\n{path}\n{reason}\n")
    for f in trace_files(path):
        shutil.move(str(f), dest / f.name)
    return dest
