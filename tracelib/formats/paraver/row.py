"""``.row`` files: names of cpus, nodes and threads (``LEVEL X SIZE N`` followed by N names).

Read as Paraver reads them (paraver-kernel ``utils/traceparser/rowfileparser.cpp``), which never refuses a ``.row``:
blank lines and ``#`` comments between levels are skipped, levels come in any order, a line that is not a known
``LEVEL <name> SIZE <n>`` statement is skipped, and a level's names are the N lines after its statement (fewer when
the file ends first). Names are only labels: what Paraver skips is skipped here too, listed in ``ignored``.
The file is read within the bounds of :mod:`~synthtrace.tracelib.formats.paraver.companion_text`, line by line; a
name holding control characters is kept escaped (``\x1b``), never raw, and said once (security, issue 23 F5/F7).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

from synthtrace.tracelib.formats.paraver.companion_text import companion_lines, read_within_cap, too_large, too_long
from synthtrace.tracelib.printable import EscapedNames

#: the levels Paraver's .row parser knows (tracelabels.h)
LEVELS = frozenset({"WORKLOAD", "APPL", "TASK", "THREAD", "SYSTEM", "NODE", "CPU"})
#: distinct names shared as one object each (beyond it, names are kept as read: a table of all would double them)
_SHARED_NAMES = 1 << 16


@dataclass(frozen=True)
class RowNames:
    """Names per level (``CPU``, ``NODE``, ``THREAD``, ...), in the trace's order."""

    levels: dict[str, list[str]] = field(default_factory=dict)
    level_lines: dict[str, int] = field(default_factory=dict)  # 1-based line of each LEVEL statement
    ignored: list[tuple[int, str]] = field(default_factory=list)  # (line, reason): what Paraver skips too
    renamed_lines: list[tuple[int, str]] = field(default_factory=list)  # (line, which names were escaped)

    def names(self, level: str) -> list[str]:
        return self.levels.get(level.upper(), [])


def read_row(path: str | Path) -> RowNames:
    """Read a ``.row`` file (see :func:`parse_row`). One beyond
    :data:`~synthtrace.tracelib.formats.paraver.companion_text.MAX_COMPANION_BYTES` is not read, as the trace reader
    does not read it (attack 14 F13): no names, and a ``UserWarning`` saying why in the reader's words
    (:func:`~synthtrace.tracelib.formats.paraver.companion_text.too_large`). A file that cannot be read is
    :class:`~synthtrace.tracelib.errors.TraceFormatError`."""
    path = Path(path)
    data = read_within_cap(path)
    if data is None:
        warnings.warn(f"{path}: {too_large(path)}", UserWarning, stacklevel=2)
        return RowNames()
    return parse_row(data, path)


def _statement(line: str) -> tuple[str, int] | str:
    """(level, size) of a ``LEVEL <name> SIZE <n>`` line, else why it is none."""
    parts = line.split()
    if len(parts) != 4 or parts[0] != "LEVEL" or parts[2] != "SIZE" or not parts[3].isdigit() or len(parts[3]) > 10:
        return f"{line[:60]!r} is not 'LEVEL <name> SIZE <n>'"
    if parts[1] not in LEVELS:
        return f"unknown level {parts[1][:30]!r} (Paraver knows {', '.join(sorted(LEVELS))})"
    return parts[1], int(parts[3])


def parse_row(data: bytes, path: str | Path) -> RowNames:
    """Parse the bytes of a ``.row`` file as Paraver does (see the module's docstring); never raises."""
    levels: dict[str, list[str]] = {}
    level_lines: dict[str, int] = {}
    ignored: list[tuple[int, str]] = []
    escapes = EscapedNames()  # names with control characters, by line
    names: list[str] = []
    known: dict[str, str] = {}
    wanted, level, lineno = 0, "", 0  # names still to read for ``level``
    for lineno, raw in companion_lines(data):
        if wanted:
            wanted -= 1
            if raw is None:
                ignored.append(too_long(lineno))
                raw = ""
            name = escapes.kept(raw.strip(), lineno)
            if len(known) < _SHARED_NAMES:  # one object per repeated name (a million "node1" or 2-character lines)
                name = known.setdefault(name, name)
            names.append(name)
            continue
        if raw is None:
            ignored.append(too_long(lineno))
            continue
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        stmt = _statement(line)
        if isinstance(stmt, str):
            ignored.append((lineno, stmt))
            continue
        level, wanted = stmt
        names = levels[level] = []
        level_lines[level] = lineno
    if wanted:
        ignored.append((level_lines[level], f"LEVEL {level} declares {len(names) + wanted} names but the file ends "
                        f"after {len(names)}"))
    renamed = [(escapes.first, note)] if (note := escapes.note()) is not None else []
    return RowNames(levels, level_lines, ignored, renamed)


def format_row(levels: dict[str, list[str]]) -> str:
    """Text of a ``.row`` file."""
    blocks = [f"LEVEL {lvl} SIZE {len(names)}\n" + "".join(f"{n}\n" for n in names) for lvl, names in levels.items()]
    return "\n".join(blocks)
