"""``.pcf`` files: names of states, event types and event values.

Counter labels come in several styles, all handled: ``42000050 PAPI_TOT_INS [Instr completed]``,
``42000050 (PAPI_TOT_INS) Instr completed`` and ``42000050 PAPI_TOT_INS ([Instr completed])``.
What is accepted follows Paraver's own ``.pcf`` parser (paraver-kernel, ``utils/traceparser/pcffileparser.cpp``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from synthtrace.tracelib.formats.paraver.event_types import COUNTER_TYPE_MAX, COUNTER_TYPE_MIN
from synthtrace.tracelib.schema import is_reserved_column, unreserved_column

_PAREN_NAME = re.compile(r"^\((?P<name>[^)\s]+)\)")


def is_counter_type(event_type: int) -> bool:
    """Whether an event type carries a hardware-counter value (Extrae numbering)."""
    return COUNTER_TYPE_MIN <= event_type < COUNTER_TYPE_MAX


def is_absolute_counter(event_type: int) -> bool:
    """Extrae adds 1,000,000 to a counter's type when it emits absolute (cumulative) values."""
    return (event_type // 1_000_000) % 2 == 1


def counter_name_from_label(label: str) -> str:
    """The counter's own name in a ``.pcf`` label (first word, or the word in leading parentheses)."""
    label = label.strip()
    m = _PAREN_NAME.match(label)
    if m:
        return m["name"]
    return label.split()[0] if label else label


#: Section names of a ``.pcf`` file, as Paraver's own parser (paraver-kernel ``pcffileparser``) knows them.
SECTIONS = frozenset({"DEFAULT_OPTIONS", "DEFAULT_SEMANTIC", "STATES", "STATES_COLOR", "EVENT_TYPE",
                      "GRADIENT_COLOR", "GRADIENT_NAMES"})
_INT = re.compile(r"^-?\d+$")


@dataclass
class PcfCatalog:
    """Names from a ``.pcf`` file; empty when the trace came without one."""

    states: dict[int, str] = field(default_factory=dict)
    event_labels: dict[int, str] = field(default_factory=dict)
    event_values: dict[int, dict[int, str]] = field(default_factory=dict)
    event_gradient: dict[int, int] = field(default_factory=dict)
    event_precision: dict[int, int] = field(default_factory=dict)  # decimals Paraver shows (PRECISION lines)
    event_lines: dict[int, int] = field(default_factory=dict)  # 1-based line of each event type's label
    ignored: list[tuple[int, str]] = field(default_factory=list)  # (line, reason): lines Paraver skips too
    renamed: dict[int, str] = field(default_factory=dict)  # counter type -> its column, where two share a name
    renamed_lines: list[tuple[int, str]] = field(default_factory=list)  # (line, what was renamed and why)

    def counter_name(self, event_type: int) -> str:
        """Counter column name: the ``.pcf`` name, else the numeric type as text."""
        if (renamed := self.renamed.get(event_type)) is not None:
            return renamed
        label = self.event_labels.get(event_type)
        return counter_name_from_label(label) if label else str(event_type)

    def value_name(self, event_type: int, value: int) -> str | None:
        return self.event_values.get(event_type, {}).get(value)


def read_pcf(path: str | Path) -> PcfCatalog:
    """Parse a ``.pcf`` file (see :func:`parse_pcf`)."""
    return parse_pcf(Path(path).read_bytes(), path)


def parse_pcf(data: bytes, path: str | Path) -> PcfCatalog:
    """Parse the bytes of a ``.pcf`` file as Paraver does; only STATES and EVENT_TYPE blocks are interpreted.

    Lines are trimmed (tabs count as spaces); blank lines and ``#`` comments are skipped anywhere; a section name
    alone on its line starts that section; an EVENT_TYPE block holds ``<gradient> <type> <label>`` lines, optional
    ``PRECISION <n>`` lines and, after ``VALUES``, ``<value> <label>`` lines for every type of the block, until the
    next section. A line that does not parse is skipped, as Paraver skips it, and listed in ``ignored``.
    """
    cat = PcfCatalog()
    section: str | None = None
    block: list[int] = []  # event types of the current EVENT_TYPE block
    in_values = False
    for lineno, raw in enumerate(data.decode("utf-8", errors="replace").split("\n"), start=1):
        line = raw.replace("\t", " ").strip()
        if not line or line.startswith("#"):
            continue
        if line in SECTIONS:
            section, block, in_values = line, [], False
            continue
        if section == "STATES":
            parts = line.split(None, 1)
            if _INT.match(parts[0]):
                cat.states[int(parts[0])] = parts[1] if len(parts) > 1 else ""
            else:
                cat.ignored.append((lineno, f"state line {_shown(line)!r} does not start with a state number"))
        elif section == "EVENT_TYPE":
            _event_line(cat, line, lineno, block, in_values)
            in_values = in_values or line == "VALUES"
        elif section is None:
            cat.ignored.append((lineno, f"{_shown(line)!r} before any section (EVENT_TYPE, STATES, ...)"))
    if data and not (cat.states or cat.event_labels or section):
        cat.ignored[:0] = [(1, "no Paraver section (STATES, EVENT_TYPE, ...): not a .pcf file")]
    _check_counter_names(cat)
    return cat


def _shown(line: str, limit: int = 60) -> str:
    return line if len(line) <= limit else line[:limit] + "..."


def _event_line(cat: PcfCatalog, line: str, lineno: int, block: list[int], in_values: bool) -> None:
    """One line of an EVENT_TYPE block (see :func:`parse_pcf`); ``block`` gets the types it declares."""
    if line == "VALUES":
        return
    parts = line.split(None, 2)
    if parts[0] == "PRECISION":
        if len(parts) == 2 and parts[1].isdigit():
            cat.event_precision.update(dict.fromkeys(block, int(parts[1])))
        else:
            cat.ignored.append((lineno, f"{_shown(line)!r} is not 'PRECISION <decimals>'"))
    elif not in_values:
        if len(parts) < 2 or not _INT.match(parts[1]):
            cat.ignored.append((lineno, f"{_shown(line)!r} is not '<gradient> <type> <label>'"))
            return
        etype = int(parts[1])
        cat.event_labels[etype] = parts[2] if len(parts) > 2 else ""
        if _INT.match(parts[0]):
            cat.event_gradient[etype] = int(parts[0])
        cat.event_lines[etype] = lineno
        block.append(etype)
    elif _INT.match(parts[0]):
        label = (line.split(None, 1) + [""])[1]
        for etype in block:
            cat.event_values.setdefault(etype, {})[int(parts[0])] = label
    else:
        cat.ignored.append((lineno, f"{_shown(line)!r} is not '<value> <label>'"))


def _check_counter_names(cat: PcfCatalog) -> None:
    """Two counter types with one name would fold two counters into one column: as Paraver keeps both (by type),
    the later type's column is ``NAME_TYPE`` (noted in ``renamed_lines``, which the reader warns of)."""
    seen: dict[str, int] = {}
    for etype in sorted(t for t in cat.event_labels if is_counter_type(t)):
        name = cat.counter_name(etype)
        if is_reserved_column(name):  # security (issue 23 item 7): a counter never takes a key column's name
            cat.renamed[etype] = unreserved_column(name, str(etype))
            cat.renamed_lines.append((cat.event_lines[etype], f"counter name {name!r} of event type {etype} is a "
                                      f"column of every burst: read as {cat.renamed[etype]!r}"))
            continue
        if name in seen and not (is_absolute_counter(etype) != is_absolute_counter(seen[name])):
            cat.renamed[etype] = f"{name}_{etype}"
            cat.renamed_lines.append((cat.event_lines[etype], f"counter name {name!r} given to event types "
                                      f"{seen[name]} and {etype}: the second read as {cat.renamed[etype]!r}"))
            continue
        seen.setdefault(name, etype)
