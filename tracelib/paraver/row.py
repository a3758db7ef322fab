"""``.row`` files: names of cpus, nodes and threads (``LEVEL X SIZE N`` followed by N names)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from synthtrace.tracelib.errors import TraceFormatError


@dataclass(frozen=True)
class RowNames:
    """Names per level (``CPU``, ``NODE``, ``THREAD``, ...), in the trace's order."""

    levels: dict[str, list[str]] = field(default_factory=dict)
    level_lines: dict[str, int] = field(default_factory=dict)  # 1-based line of each LEVEL statement

    def names(self, level: str) -> list[str]:
        return self.levels.get(level.upper(), [])


def read_row(path: str | Path) -> RowNames:
    """Read a ``.row`` file (see :func:`parse_row`)."""
    return parse_row(Path(path).read_bytes(), path)


def parse_row(data: bytes, path: str | Path) -> RowNames:
    """Parse the bytes of a ``.row`` file; a level whose names are fewer than its SIZE is a format error."""
    levels: dict[str, list[str]] = {}
    level_lines: dict[str, int] = {}
    current: tuple[str, int, int] | None = None  # level, expected size, line of the LEVEL statement
    for lineno, raw in enumerate(data.decode("utf-8", errors="replace").split("\n"), start=1):
        line = raw.strip()
        if not line:
            continue
        parts = line.split()
        if parts[0] == "LEVEL":
            if current and len(levels[current[0]]) < current[1]:
                raise TraceFormatError(
                    path,
                    current[2],
                    f"LEVEL {current[0]} declares {current[1]} names but lists {len(levels[current[0]])}",
                )
            if len(parts) != 4 or parts[2] != "SIZE" or not parts[3].isdigit() or len(parts[3]) > 10:
                raise TraceFormatError(path, lineno, "expected 'LEVEL <name> SIZE <n>'")
            current = (parts[1].upper(), int(parts[3]), lineno)
            levels[current[0]] = []
            level_lines[current[0]] = lineno
        elif current is None:
            raise TraceFormatError(path, lineno, "name before any 'LEVEL ... SIZE ...' line")
        else:
            levels[current[0]].append(line)
    if current and len(levels[current[0]]) < current[1]:
        raise TraceFormatError(
            path, current[2], f"LEVEL {current[0]} declares {current[1]} names but lists {len(levels[current[0]])}"
        )
    return RowNames(levels, level_lines)


def format_row(levels: dict[str, list[str]]) -> str:
    """Text of a ``.row`` file."""
    blocks = [f"LEVEL {lvl} SIZE {len(names)}\n" + "".join(f"{n}\n" for n in names) for lvl, names in levels.items()]
    return "\n".join(blocks)
