"""The communicator lines of a ``.prv`` header: ``c:APPL:COMM:N:TASK1:...:TASKN`` names the N tasks (1-based, of
application APPL) of communicator COMM. Extrae numbers communicators per run, in the order the run created them
(1: MPI_COMM_WORLD, then each task's MPI_COMM_SELF, then what the program made), so an id says which communicator
it is only within its run; the members say it across runs (:mod:`synthtrace.tracelib.merge.communicators`).
Intercommunicator lines (``i:``) are not read."""
from __future__ import annotations

import re

import polars as pl

from synthtrace.tracelib.formats.source import COMMUNICATOR_SCHEMA

_LINE = re.compile(rb"c:(\d+):(\d+):(\d+)((?::\d+)*)\s*")
#: ids and tasks beyond this are not a communicator line Extrae writes (int32 task, int64 id)
_MAX_ID = 2**63 - 1


def communicator_members(prefix: bytes, path: str) -> tuple[pl.DataFrame, list[str]]:
    """The members of the communicators the ``c:`` lines of ``prefix`` (the header and the lines after it, as the
    reader gathered them) declare: one row per (appl, comm, task) (COMMUNICATOR_SCHEMA), and a warning per line
    skipped (not of the form above, or whose count of tasks is not N). Paraver reads such lines without using
    them for the records, so a bad one is skipped, not refused."""
    rows: list[tuple[int, int, int]] = []
    skipped: list[int] = []
    for number, line in enumerate(prefix.split(b"\n"), start=1):
        if not line.startswith(b"c:"):
            continue
        m = _LINE.fullmatch(line)
        tasks = [int(t) for t in m.group(4).split(b":")[1:]] if m else []
        if m is None or len(tasks) != int(m.group(3)) or int(m.group(2)) > _MAX_ID or any(
                not 0 < t < 2**31 for t in tasks) or not 0 < int(m.group(1)) < 2**31:
            skipped.append(number)
            continue
        appl, comm = int(m.group(1)), int(m.group(2))
        rows.extend((appl, comm, t) for t in tasks)
    warnings = [f"{path}:{skipped[0]}: communicator line skipped: not 'c:APPL:ID:N' followed by N task numbers"
                + (f" ({len(skipped)} lines skipped)" if len(skipped) > 1 else "")] if skipped else []
    frame = pl.DataFrame(rows, schema=COMMUNICATOR_SCHEMA, orient="row").unique(maintain_order=True)
    return frame, warnings
