"""Lines of a ``.pcf``/``.row`` companion file, read within bounds (issue 23 item 4, attack F5/F6).

Paraver's own ``.pcf`` files are at most a few MB and a ``.row`` naming a million cpus and a million threads
about 30 MB: a companion beyond :data:`MAX_COMPANION_BYTES` is not read (the trace reader says so once and reads
the trace with default names, attack 14 F13; :func:`~synthtrace.tracelib.formats.paraver.row.read_row` likewise),
and a line beyond :data:`MAX_LINE_BYTES` is never decoded: it is handed on as ``None`` for the parser to skip with its
line number (Paraver skips lines it cannot read). Lines are split one at a time, never the whole file at once.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from synthtrace.tracelib.errors import TraceFormatError

#: largest .row read (bytes); a larger one is not read (its trace is read without its names). The parsed names of a
#: file this size, of the shortest lines, take under 1 GB (measured: a 64 MiB .row of 2-character names took 1.65 GB)
MAX_COMPANION_BYTES = 32 << 20
#: longest line decoded (bytes); a longer one is skipped
MAX_LINE_BYTES = 64 << 10
#: largest ``.pcf`` read (bytes): a ``.pcf`` is streamed, a line at a time, keeping a bounded number of names
#: (:data:`~synthtrace.tracelib.formats.paraver.pcf.MAX_VALUE_NAME_BYTES`), so the caller tables of a large C++ code
#: (34 MB for 3 levels of 80,000 symbols, attack 12 F10) are read; a larger one is not read at all (its trace is
#: read without the names, said once): reading it would take a minute of CPU for nothing the tables need
MAX_PCF_BYTES = 128 << 20


def read_within_cap(path: Path) -> bytes | None:
    """The bytes of a companion file of at most :data:`MAX_COMPANION_BYTES`, ``None`` for a larger one (never read
    beyond the cap); a file that cannot be read is :class:`TraceFormatError`."""
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_COMPANION_BYTES + 1)
    except OSError as exc:
        raise TraceFormatError(path, None, f"cannot be read ({exc.strerror or exc})") from None
    return data if len(data) <= MAX_COMPANION_BYTES else None


def too_large(path: Path) -> str:
    """Why a companion beyond :data:`MAX_COMPANION_BYTES` is not read."""
    return f"larger than {MAX_COMPANION_BYTES >> 20} MiB, far beyond any Paraver {path.suffix} file: not read"


def companion_lines(data: bytes) -> Iterator[tuple[int, str | None]]:
    """(1-based line number, line without its end) for each line of ``data``; the line is ``None`` when it is
    longer than :data:`MAX_LINE_BYTES`. Undecodable bytes become U+FFFD; a final newline ends the last line."""
    pos, lineno, end_of_data = 0, 0, len(data)
    while pos < end_of_data:
        end = data.find(b"\n", pos)
        if end < 0:
            end = end_of_data
        lineno += 1
        yield lineno, (data[pos:end].decode("utf-8", errors="replace") if end - pos <= MAX_LINE_BYTES else None)
        pos = end + 1


def file_lines(fh: BinaryIO) -> Iterator[tuple[int, str | None]]:
    """:func:`companion_lines` of an open file, read a line at a time (never the whole file, never more than
    :data:`MAX_LINE_BYTES` of one line)."""
    lineno = 0
    while line := fh.readline(MAX_LINE_BYTES + 1):
        lineno += 1
        if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):  # the rest of a long line is skipped
            while (rest := fh.readline(1 << 20)) and not rest.endswith(b"\n"):
                pass
            yield lineno, None
            continue
        line = line[:-1] if line.endswith(b"\n") else line
        yield lineno, (line.decode("utf-8", errors="replace") if len(line) <= MAX_LINE_BYTES else None)


def too_long(lineno: int) -> tuple[int, str]:
    """The ``ignored`` entry of a line longer than :data:`MAX_LINE_BYTES`."""
    return lineno, f"line longer than {MAX_LINE_BYTES >> 10} KiB (no Paraver name is that long)"
