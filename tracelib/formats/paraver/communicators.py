"""The communicator lines of a ``.prv`` header: ``c:APPL:COMM:N:TASK1:...:TASKN`` names the N tasks (1-based, of
application APPL) of communicator COMM. Extrae numbers communicators per run, in the order the run created them
(1: MPI_COMM_WORLD, then each task's MPI_COMM_SELF, then what the program made), so an id says which communicator
it is only within its run; the members say it across runs (:mod:`synthtrace.tracelib.merge.communicators`).
Intercommunicator lines (``i:``) are not read."""
from __future__ import annotations

import re

import numpy as np
import polars as pl

from synthtrace.tracelib.formats.source import COMMUNICATOR_SCHEMA

_HEAD = re.compile(rb"c:(\d{1,10}):(\d{1,18}):(\d{1,10})")
#: members kept over all lines (a 100,000-rank Extrae run: world, a self per task and a row and column split are
#: 400,000); a header listing more (the header may be 64 MiB of them) keeps none: the merge then compares ids
MAX_MEMBERS = 1 << 23


def communicator_members(prefix: bytes, path: str) -> tuple[pl.DataFrame, list[str]]:
    """The members of the communicators the ``c:`` lines of ``prefix`` (the header and the lines after it, as the
    reader gathered them) declare: one row per (appl, comm, task) (COMMUNICATOR_SCHEMA), and what to warn of: a
    line skipped (not of the form above, its count of tasks not N, or a task or application outside 1..2**31-1),
    or every line when they list more than :data:`MAX_MEMBERS` members; a communicator defined again with other
    members (attack 22: a comm id written three times had the union of their members) keeps its first line's and
    the others are said (the same members again, in any order, are one definition: members are what is stored).
    Paraver reads such lines without using them for the records, so a bad one is skipped, not refused."""
    appls: list[int] = []
    comms: list[int] = []
    tasks: list[np.ndarray] = []
    skipped: list[int] = []
    defined: dict[tuple[int, int], tuple[int, int]] = {}  # (appl, comm) -> its first line, its index in tasks
    redefined: list[tuple[int, tuple[int, int]]] = []  # (line, (appl, comm)) defined again with other members
    total = 0
    for number, line in enumerate(prefix.split(b"\n"), start=1):
        if not line.startswith(b"c:"):
            continue
        m = _HEAD.match(line)
        members = _tasks(line[m.end():].rstrip()) if m else None
        if m is None or members is None or members.size != int(m.group(3)) or not 0 < int(m.group(1)) < 2**31 or (
                members.size and not (members.min() > 0 and members.max() < 2**31)):
            skipped.append(number)
            continue
        key = (int(m.group(1)), int(m.group(2)))
        if (first := defined.get(key)) is not None:
            if not np.array_equal(np.unique(tasks[first[1]]), np.unique(members)):
                redefined.append((number, key))
            continue
        defined[key] = (number, len(tasks))
        total += members.size
        if total > MAX_MEMBERS:
            return pl.DataFrame(schema=COMMUNICATOR_SCHEMA), [
                f"{path}:{number}: the communicator lines list more than {MAX_MEMBERS:,} members: none kept (a merge "
                "compares this run's communicator ids as numbers)"]
        appls.append(key[0])
        comms.append(key[1])
        tasks.append(members)
    warnings = [f"{path}:{skipped[0]}: communicator line skipped: not 'c:APPL:ID:N' followed by N task numbers"
                + (f" ({len(skipped)} lines skipped)" if len(skipped) > 1 else "")] if skipped else []
    if redefined:
        number, (appl, comm) = redefined[0]
        warnings.append(f"{path}:{number}: communicator {comm} of application {appl} defined again with other "
                        f"members (first at line {defined[(appl, comm)][0]}): the first definition kept"
                        + (f" ({len(redefined)} lines defining a communicator again skipped)"
                           if len(redefined) > 1 else ""))
    sizes = np.array([t.size for t in tasks], dtype=np.int64)
    frame = pl.DataFrame({"appl": np.repeat(np.array(appls, dtype=np.int64), sizes),
                          "comm": np.repeat(np.array(comms, dtype=np.int64), sizes),
                          "task": np.concatenate(tasks) if tasks else np.empty(0, np.int64)})
    return frame.cast(COMMUNICATOR_SCHEMA).unique(maintain_order=True), warnings  # type: ignore[arg-type]


def _tasks(tail: bytes) -> np.ndarray | None:
    """The task numbers of ``:T1:T2...`` (None: not that form); parsed in C, a header's millions of them too."""
    if not tail:
        return np.empty(0, np.int64)
    if tail[:1] != b":" or tail.endswith(b":") or b"::" in tail or tail.translate(None, b"0123456789:"):
        return None
    return np.fromstring(tail[1:], dtype=np.int64, sep=":")
